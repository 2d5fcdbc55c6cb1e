//! Text views of a plan: for people, and as the configs of the tools okd-appliance replaces
//! (zone files for NSD/Knot/BIND, dnsmasq, HAProxy), for migration and side-by-side tests, and
//! keepalived's for a pair of appliances. The end-to-end tests load what they write in the
//! tools themselves: nsd-checkzone, kzonecheck, named-checkzone, `dnsmasq --test` and
//! `haproxy -c` (`tests/e2e/render_peers.rs`).
//!
//! Architecture invariant: renderers read the plan only; they never re-derive anything from the
//! config, so what they print is exactly what the services serve.

pub mod bind;
mod dnsmasq;
pub mod haproxy;
mod human;
pub mod keepalived;

use crate::plan::Plan;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Bind,
    Dnsmasq,
    Haproxy,
}

/// One output file: a suggested file name and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub file_name: String,
    pub text: String,
}

pub fn render(plan: &Plan, format: Format) -> Vec<Rendered> {
    match format {
        Format::Human => vec![Rendered {
            file_name: "plan.txt".into(),
            text: human::render(plan),
        }],
        Format::Bind => bind::render(&plan.zones),
        Format::Dnsmasq => vec![Rendered {
            file_name: "dnsmasq.conf".into(),
            text: dnsmasq::render(plan),
        }],
        Format::Haproxy => vec![Rendered {
            file_name: "haproxy.cfg".into(),
            text: haproxy::render(plan),
        }],
    }
}

/// Durations as the tools write them: whole seconds become `30s`, `1h`, else milliseconds.
fn short_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

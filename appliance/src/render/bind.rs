//! RFC 1035 master files, one per zone, as NSD, Knot and BIND load them unchanged.

use std::fmt::Write as _;

use super::Rendered;
use crate::plan::Zone;
use crate::records::RecordData;

/// One master file per zone (a plan's zones, or a host's: `plan::host::HostPlan::zones`).
pub fn render(zones: &[Zone]) -> Vec<Rendered> {
    zones
        .iter()
        .map(|zone| {
            let mut out = String::new();
            let _ = writeln!(out, "; zone {} rendered by okd-appliance", zone.origin);
            let _ = writeln!(out, "$ORIGIN {}", zone.origin);
            let width = zone.records.iter().map(|r| r.name.len()).max().unwrap_or(0);
            for r in &zone.records {
                let data = match &r.data {
                    RecordData::Soa(soa) => format!(
                        "{} {} (\n{:w$}         {} ; serial\n{:w$}         {} ; refresh\n{:w$}         {} ; retry\n{:w$}         {} ; expire\n{:w$}         {} ) ; negative TTL",
                        soa.mname,
                        soa.rname,
                        "",
                        soa.serial,
                        "",
                        soa.refresh,
                        "",
                        soa.retry,
                        "",
                        soa.expire,
                        "",
                        soa.minimum,
                        w = width
                    ),
                    other => other.to_string(),
                };
                let _ = writeln!(
                    out,
                    "{:width$} {:>6} IN {:<5} {data}",
                    r.name,
                    r.ttl,
                    r.data.type_name()
                );
            }
            Rendered { file_name: format!("{}zone", zone.origin), text: out }
        })
        .collect()
}

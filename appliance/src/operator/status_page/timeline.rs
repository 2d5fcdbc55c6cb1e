//! The install timeline as inline SVG: one row per node, each phase it reached a bar from when
//! it was reached to the next phase (the current one to now), the cluster's phases as dashed
//! lines across every row, and a time axis. Rendered at each update of the page, so it moves
//! with the install.

use std::fmt::Write as _;

use super::{clock, esc, short};
use crate::operator::status::Status;

const WIDTH: u64 = 1000;
/// The node names' column.
const LABELS: u64 = 150;
const RIGHT: u64 = 20;
/// A line of milestone labels above the rows.
const LANE: u64 = 14;
/// About how wide a character of a label is (11px sans-serif).
const CHAR: u64 = 7;
const ROW: u64 = 24;
const BAR: u64 = 14;
/// Below the rows: the axis' labels.
const BOTTOM: u64 = 22;

/// A node's last phase: nothing follows it, so its bar does not run on to now.
fn is_final(phase: &str) -> bool {
    phase == "ready"
}

/// The phases a bar may have, in install order (the legend's and the CSS classes').
const PHASES: [&str; 9] = [
    "created",
    "powered-on",
    "dhcp",
    "script",
    "kernel-initrd",
    "ignition",
    "installed",
    "joined",
    "ready",
];

pub fn legend() -> String {
    let mut h = String::from("<p class=\"legend\">");
    for p in PHASES {
        let _ = write!(h, "<span class=\"p-{p}\"></span>{p}");
    }
    h.push_str(" <svg width=\"24\" height=\"10\"><line class=\"milestone\" x1=\"0\" y1=\"5\" x2=\"24\" y2=\"5\"/></svg> cluster phase</p>");
    h
}

/// The timeline at `now` (seconds since the epoch).
pub fn svg(s: &Status, now: u64) -> String {
    let times = s
        .nodes
        .iter()
        .flat_map(|n| n.steps.iter().map(|p| p.at))
        .chain(s.appliance.cluster_steps.iter().map(|p| p.at));
    let first = times.clone().min().unwrap_or(now).min(now);
    let last = times.max().unwrap_or(now).max(now);
    // At least a minute across, so the first seconds of an install are not one wide bar.
    let span = (last - first).max(60);
    let plot = WIDTH - LABELS - RIGHT;
    let x = |t: u64| LABELS + (t.saturating_sub(first)).min(span) * plot / span;
    // Each milestone's label goes on the first line above the rows where it does not run into
    // the previous label (milestones come seconds apart in a fast install).
    let labels: Vec<(u64, String, u64, bool)> = {
        let mut ends: Vec<u64> = Vec::new();
        s.appliance
            .cluster_steps
            .iter()
            .map(|m| {
                let (at, text) = (x(m.at), format!("{} {}", m.phase, clock(m.at)));
                let width = text.chars().count() as u64 * CHAR;
                // Near the right edge a label ends at its line instead of starting there.
                let end_anchored = at + width > WIDTH;
                let start = if end_anchored {
                    at.saturating_sub(width)
                } else {
                    at
                };
                let lane = match ends.iter().position(|end| *end < start) {
                    Some(l) => l,
                    None => {
                        ends.push(0);
                        ends.len() - 1
                    }
                };
                ends[lane] = start + width;
                (at, text, lane as u64, end_anchored)
            })
            .collect()
    };
    let lanes = labels.iter().map(|l| l.2 + 1).max().unwrap_or(1);
    let top = lanes * LANE + 8;
    let rows = s.nodes.len() as u64;
    let height = top + rows.max(1) * ROW + BOTTOM;
    let bottom = top + rows.max(1) * ROW;
    let mut h = String::with_capacity(4096);
    let _ = write!(
        h,
        "<svg id=\"timeline-svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"install timeline\">"
    );
    // The axis: five ticks from the first step to now.
    for i in 0..=4u64 {
        let t = first + span * i / 4;
        let at = x(t);
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            h,
            "<line class=\"axis\" x1=\"{at}\" y1=\"{top}\" x2=\"{at}\" y2=\"{bottom}\"/>\
             <text x=\"{at}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            bottom + 15,
            clock(t)
        );
    }
    for (i, n) in s.nodes.iter().enumerate() {
        let y = top + i as u64 * ROW;
        let name = esc(&n.name);
        let _ = write!(
            h,
            "<text x=\"4\" y=\"{}\">{name} <tspan fill=\"#777\">{}</tspan></text>",
            y + ROW / 2 + 4,
            esc(&n.role)
        );
        for (j, step) in n.steps.iter().enumerate() {
            let next = n.steps.get(j + 1).map(|p| p.at);
            let end = match next {
                Some(t) => t,
                None if is_final(&step.phase) => step.at,
                None => now,
            };
            let (x1, x2) = (x(step.at), x(end.max(step.at)));
            let took = match next {
                Some(t) => format!("took {}", short(t.saturating_sub(step.at))),
                None if is_final(&step.phase) => "done".to_owned(),
                None => format!("for {} so far", short(now.saturating_sub(step.at))),
            };
            let phase = esc(&step.phase);
            let _ = write!(
                h,
                "<rect class=\"bar p-{phase}\" data-node=\"{name}\" data-phase=\"{phase}\" x=\"{x1}\" y=\"{}\" \
                 width=\"{}\" height=\"{BAR}\"><title>{name}: {phase} at {}, {took}</title></rect>",
                y + (ROW - BAR) / 2,
                (x2 - x1).max(2),
                clock(step.at),
            );
        }
    }
    for (m, (at, text, lane, end_anchored)) in s.appliance.cluster_steps.iter().zip(&labels) {
        let phase = esc(&m.phase);
        let _ = write!(
            h,
            "<line class=\"milestone\" data-phase=\"{phase}\" x1=\"{at}\" y1=\"{}\" x2=\"{at}\" y2=\"{bottom}\"/>\
             <text class=\"milestone\" x=\"{at}\" y=\"{}\" text-anchor=\"{}\">{}</text>",
            lane * LANE + 4,
            lane * LANE + 12,
            if *end_anchored { "end" } else { "start" },
            esc(text),
        );
    }
    let _ = write!(
        h,
        "<line class=\"now\" x1=\"{0}\" y1=\"{top}\" x2=\"{0}\" y2=\"{bottom}\"/>",
        x(now)
    );
    if s.nodes.iter().all(|n| n.steps.is_empty()) {
        let _ = write!(
            h,
            "<text x=\"{}\" y=\"{}\" fill=\"#777\">no node has started its install yet</text>",
            LABELS + 10,
            top + ROW / 2 + 4
        );
    }
    h.push_str("</svg>");
    h
}

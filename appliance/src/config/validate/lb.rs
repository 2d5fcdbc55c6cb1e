//! The `lb` section: balancing, health checks, the probe CA, the drain timeout.

use super::*;

impl Validator<'_> {
    pub(super) fn lb(&mut self, raw: &RawLb, dir: &Path) -> Option<Lb> {
        let balance = match raw.balance.as_ref().map(|b| b.value.as_str()) {
            None | Some("roundrobin") => Some(Balance::RoundRobin),
            Some("leastconn") => Some(Balance::LeastConnections),
            Some(other) => {
                let at = raw
                    .balance
                    .as_ref()
                    .map(|b| b.referenced)
                    .expect("matched Some");
                self.p
                    .error(
                        "config::lb",
                        at,
                        format!("unknown balance algorithm `{other}`"),
                        "unknown",
                    )
                    .hint("use roundrobin or leastconn");
                None
            }
        };
        let h = &raw.health;
        let ms = Duration::from_millis;
        let interval = match &h.interval {
            None => Some(Duration::from_secs(1)),
            Some(t) => self.duration(
                t,
                "health check interval",
                ms(100),
                Duration::from_secs(3600),
            ),
        };
        let timeout = match &h.timeout {
            None => Some(Duration::from_secs(1)),
            Some(t) => self.duration(t, "health check timeout", ms(10), Duration::from_secs(60)),
        };
        let count = |v: &mut Self, raw: &Option<Spanned<u32>>, what: &str| -> Option<u32> {
            match raw {
                None => Some(2),
                Some(n) if (1..=100).contains(&n.value) => Some(n.value),
                Some(n) => {
                    v.p.error(
                        "config::lb",
                        n.referenced,
                        format!("health check {what} must be from 1 to 100"),
                        "out of range",
                    );
                    None
                }
            }
        };
        let rise = count(self, &h.rise, "rise");
        let fall = count(self, &h.fall, "fall");
        let ingress_check = self.one_of(
            "config::lb",
            h.ingress_check.as_ref(),
            "ingress check",
            &[("http", IngressCheck::Http), ("tcp", IngressCheck::Tcp)],
            "use http (GET /healthz/ready on port 1936) or tcp",
        );
        let control_plane_check = self.one_of(
            "config::lb",
            h.control_plane_check.as_ref(),
            "control plane check",
            &[
                ("https", ControlPlaneCheck::Https),
                ("tcp", ControlPlaneCheck::Tcp),
            ],
            "use https (GET /readyz on 6443 and /healthz on 22623) or tcp",
        );
        let check_ca = match &h.ca_file {
            None => Some(None),
            Some(f) if f.value.trim().is_empty() => {
                self.p
                    .error("config::lb", f.referenced, "ca_file is empty", "empty");
                None
            }
            Some(f) => Some(Some(resolve(dir, &f.value))),
        };
        if let (Some(i), Some(t), Some(at)) = (interval, timeout, h.timeout.as_ref())
            && t > i
        {
            self.p
                .warning(
                    "config::lb",
                    at.referenced,
                    "health check timeout is longer than the interval",
                    "timeout",
                )
                .hint("a check then overlaps the next one; make the timeout at most the interval");
        }
        let drain_timeout = match &raw.drain_timeout {
            None => Some(DEFAULT_DRAIN_TIMEOUT),
            Some(t) => self.duration(
                t,
                "drain timeout",
                Duration::from_secs(1),
                Duration::from_secs(24 * 3600),
            ),
        };
        let single_node = self.one_of(
            "config::lb",
            raw.single_node.as_ref(),
            "single-node routing",
            &[
                ("direct", SingleNodeRouting::Direct),
                ("proxied", SingleNodeRouting::Proxied),
            ],
            "use direct (api, api-int and *.apps name the node) or proxied (they name the appliance, which balances to the node)",
        );
        Some(Lb {
            balance: balance?,
            drain_timeout: drain_timeout?,
            single_node: single_node?,
            shared: None,
            health: HealthSettings {
                interval: interval?,
                timeout: timeout?,
                rise: rise?,
                fall: fall?,
                ingress_check: ingress_check?,
                control_plane_check: control_plane_check?,
            },
            check_ca: check_ca?,
        })
    }
}

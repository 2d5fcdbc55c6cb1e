//! The `dns` section: TTL, extra records, who may recurse and transfer, rate limiting.

use super::*;

impl Validator<'_> {
    pub(super) fn dns(
        &mut self,
        raw: &RawDns,
        cluster: &Cluster,
        net: &Network,
        nodes: &[Node],
    ) -> Option<Dns> {
        let domain = cluster.domain();
        let ttl = match &raw.ttl {
            None => DEFAULT_TTL,
            Some(t) => self.ttl(t).unwrap_or(DEFAULT_TTL),
        };
        let mut ok = true;
        let mut nets = |v: &mut Self, raw: &[Text], what: &str| -> Vec<IpNet> {
            raw.iter()
                .filter_map(|t| {
                    let parsed = t
                        .value
                        .parse::<IpNet>()
                        .or_else(|_| t.value.parse::<IpAddr>().map(IpNet::from));
                    match parsed {
                        Ok(n) => Some(n.trunc()),
                        Err(_) => {
                            ok = false;
                            v.p.error(
                                "config::network",
                                t.referenced,
                                format!("{what} entry `{}` is not a network", t.value),
                                "expected an address or CIDR network",
                            );
                            None
                        }
                    }
                })
                .collect()
        };
        let recursion_allowed = match &raw.recursion_allowed {
            Some(list) => nets(self, list, "recursion_allowed"),
            None => {
                let mut v = vec![IpNet::V4(net.v4.subnet)];
                if let Some(v6) = &net.v6 {
                    v.push(IpNet::V6(v6.subnet));
                }
                v.push("127.0.0.0/8".parse().expect("literal"));
                v.push("::1/128".parse().expect("literal"));
                v
            }
        };
        if let Some(list) = &raw.recursion_allowed {
            for t in list {
                // The recorded error fails the load.
                if t.value.parse::<IpNet>().is_ok_and(|n| n.prefix_len() == 0) {
                    self.p
                        .error(
                            "config::open-resolver",
                            t.referenced,
                            "recursion for everybody makes the appliance an open resolver",
                            "the whole address space",
                        )
                        .hint("list the networks of your clients; open resolvers are used for reflection attacks");
                }
            }
        }
        let axfr_allowed = nets(self, &raw.axfr_allowed, "axfr_allowed");
        let legacy_etcd = raw.legacy_etcd.as_ref().is_some_and(|b| b.value);

        let mut taken: HashMap<String, &str> = HashMap::new();
        for name in RESERVED_NAMES.iter().filter(|n| **n != "apps") {
            taken.insert(format!("{name}.{domain}."), "published by okd-appliance");
        }
        // The ingress wildcard: another record there would mix in addresses that are not the
        // load balancer's, and a CNAME could not stand beside its A record at all.
        taken.insert(
            format!("*.apps.{domain}."),
            "the ingress wildcard okd-appliance publishes",
        );
        for node in nodes {
            taken.insert(format!("{}.{domain}.", node.name), "a node's name");
        }
        if legacy_etcd {
            taken.insert(
                format!("_etcd-server-ssl._tcp.{domain}."),
                "published by okd-appliance",
            );
        }
        let mut extra_names: HashMap<String, (bool, Location)> = HashMap::new();
        let mut records = Vec::new();
        for r in &raw.records {
            let Some(name) = self.record_name(&r.name, &domain) else {
                ok = false;
                continue;
            };
            let etcd = legacy_etcd
                && name
                    .strip_suffix(&format!(".{domain}."))
                    .and_then(|l| l.strip_prefix("etcd-"))
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if let Some(what) = taken
                .get(&name)
                .copied()
                .or(etcd.then_some("published by okd-appliance"))
            {
                self.p
                    .error(
                        "config::record-clash",
                        r.name.referenced,
                        format!("`{name}` is {what}"),
                        "name already in the zone",
                    )
                    .hint(
                        "extra records may add new names only; the derived ones follow the nodes",
                    );
                ok = false;
                continue;
            }
            let Some(data) = self.record_data(r, &domain) else {
                ok = false;
                continue;
            };
            let is_cname = matches!(data, RecordData::Cname(_));
            let apex = name == format!("{domain}.");
            if is_cname && apex {
                self.p.error(
                    "config::record-clash",
                    r.name.referenced,
                    "a CNAME can't stand at the zone apex",
                    "apex",
                );
                ok = false;
                continue;
            }
            match extra_names.entry(name.clone()) {
                Entry::Vacant(e) => {
                    e.insert((is_cname, r.name.referenced));
                }
                Entry::Occupied(e) => {
                    let (other_cname, first) = *e.get();
                    if is_cname || other_cname {
                        self.p
                            .error(
                                "config::record-clash",
                                r.name.referenced,
                                format!("`{name}` has a CNAME and other records"),
                                "second record",
                            )
                            .also(first, "first record")
                            .hint("a CNAME must be the only record at its name (RFC 1034 section 3.6.2)");
                        ok = false;
                        continue;
                    }
                }
            }
            records.push(ExtraRecord {
                name,
                ttl: r.ttl.as_ref().and_then(|t| self.ttl(t)),
                data,
            });
        }
        let rrl = raw.rate_limit.as_ref();
        let slip = match rrl.and_then(|r| r.slip.as_ref()) {
            None => DEFAULT_RRL_SLIP,
            Some(v) if v.value <= 10 => v.value,
            Some(v) => {
                self.p
                    .error("config::rate-limit", v.referenced, "slip must be from 0 to 10", "out of range")
                    .hint("2 (every other limited answer truncated) is the usual value; 0 drops them all");
                ok = false;
                0
            }
        };
        let rate_limit = RateLimit {
            responses_per_second: rrl
                .and_then(|r| r.responses_per_second.as_ref())
                .map_or(DEFAULT_RRL_RATE, |v| v.value),
            slip,
        };
        ok.then_some(Dns {
            ttl,
            records,
            recursion_allowed,
            axfr_allowed,
            legacy_etcd,
            rate_limit,
        })
    }

    /// A TTL within the 31 bits RFC 2181 section 8 allows.
    pub(super) fn ttl(&mut self, raw: &Spanned<u32>) -> Option<u32> {
        if raw.value <= 0x7fff_ffff {
            return Some(raw.value);
        }
        self.p
            .error(
                "config::ttl",
                raw.referenced,
                format!("TTL {} is too large", raw.value),
                "over 2^31 - 1",
            )
            .hint("TTLs are seconds from 0 to 2147483647 (RFC 2181); 300 is usual");
        None
    }

    /// An absolute lowercase name inside the cluster zone; relative names are relative to it.
    pub(super) fn record_name(&mut self, raw: &Text, domain: &str) -> Option<String> {
        let s = raw.value.to_ascii_lowercase();
        let name = if s == "@" {
            format!("{domain}.")
        } else if s.ends_with('.') {
            s
        } else {
            format!("{s}.{domain}.")
        };
        let bare = name.trim_end_matches('.');
        let body = bare.strip_prefix("*.").unwrap_or(bare);
        if !is_domain_name(body) {
            self.p.error(
                "config::record",
                raw.referenced,
                format!("record name `{}` is not a domain name", raw.value),
                "not a domain name",
            );
            return None;
        }
        if !(bare == domain || bare.ends_with(&format!(".{domain}"))) {
            self.p
                .error(
                    "config::record",
                    raw.referenced,
                    format!("`{}` is outside the cluster zone {domain}", raw.value),
                    "outside the zone",
                )
                .hint("okd-appliance is authoritative for the cluster zone only; write names relative to it");
            return None;
        }
        Some(name)
    }

    pub(super) fn record_data(&mut self, r: &RawRecord, domain: &str) -> Option<RecordData> {
        let value = r.value.value.trim();
        let target = |s: &str| -> Option<String> {
            let s = s.to_ascii_lowercase();
            let abs = if s.ends_with('.') {
                s
            } else {
                format!("{s}.{domain}.")
            };
            is_domain_name(abs.trim_end_matches('.')).then_some(abs)
        };
        let fields: Vec<&str> = value.split_whitespace().collect();
        let data = match r.kind.value.to_ascii_uppercase().as_str() {
            "A" => value.parse().ok().map(RecordData::A),
            "AAAA" => value.parse().ok().map(RecordData::Aaaa),
            "CNAME" => target(value).map(RecordData::Cname),
            "TXT" => (!value.is_empty() && value.len() <= 255)
                .then(|| RecordData::Txt(vec![value.to_owned()])),
            "MX" => match fields.as_slice() {
                [pref, host] => {
                    pref.parse()
                        .ok()
                        .zip(target(host))
                        .map(|(preference, exchange)| RecordData::Mx {
                            preference,
                            exchange,
                        })
                }
                _ => None,
            },
            "SRV" => match fields.as_slice() {
                [prio, weight, port, host] => {
                    match (prio.parse(), weight.parse(), port.parse(), target(host)) {
                        (Ok(priority), Ok(weight), Ok(port), Some(target)) => {
                            Some(RecordData::Srv {
                                priority,
                                weight,
                                port,
                                target,
                            })
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            other => {
                self.p
                    .error(
                        "config::record",
                        r.kind.referenced,
                        format!("record type `{other}` is not supported"),
                        "unsupported type",
                    )
                    .hint("extra records may be A, AAAA, CNAME, TXT, MX or SRV");
                return None;
            }
        };
        if data.is_none() {
            let shape = match r.kind.value.to_ascii_uppercase().as_str() {
                "A" => "an IPv4 address",
                "AAAA" => "an IPv6 address",
                "CNAME" => "a domain name",
                "TXT" => "text of 1 to 255 characters",
                "MX" => "`preference host`",
                _ => "`priority weight port target`",
            };
            self.p.error(
                "config::record",
                r.value.referenced,
                format!(
                    "`{}` is not a valid {} record value: expected {shape}",
                    r.value.value, r.kind.value
                ),
                "bad value",
            );
        }
        data
    }
}

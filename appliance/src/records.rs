//! DNS record vocabulary shared by the config (extra records) and the plan (zones).
//!
//! Architecture invariant: a leaf module. It knows record shapes and their presentation format,
//! nothing about where records come from or how they are served.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Record data, in the shapes okd-appliance publishes. Domain names are absolute, lowercase and
/// end with a dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Ns(String),
    Cname(String),
    Ptr(String),
    Mx {
        preference: u16,
        exchange: String,
    },
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Txt(Vec<String>),
    Soa(Soa),
}

impl RecordData {
    /// The mnemonic of the record type, as in zone files.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::A(_) => "A",
            Self::Aaaa(_) => "AAAA",
            Self::Ns(_) => "NS",
            Self::Cname(_) => "CNAME",
            Self::Ptr(_) => "PTR",
            Self::Mx { .. } => "MX",
            Self::Srv { .. } => "SRV",
            Self::Txt(_) => "TXT",
            Self::Soa(_) => "SOA",
        }
    }
}

/// Presentation format (RFC 1035 section 5.1), as zone files and `dig` write it.
impl fmt::Display for RecordData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::A(ip) => write!(f, "{ip}"),
            Self::Aaaa(ip) => write!(f, "{ip}"),
            Self::Ns(name) | Self::Cname(name) | Self::Ptr(name) => f.write_str(name),
            Self::Mx {
                preference,
                exchange,
            } => write!(f, "{preference} {exchange}"),
            Self::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                write!(f, "{priority} {weight} {port} {target}")
            }
            Self::Txt(strings) => {
                for (i, s) in strings.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str("\"")?;
                    for c in s.chars() {
                        match c {
                            '"' | '\\' => write!(f, "\\{c}")?,
                            c if c.is_ascii_graphic() || c == ' ' => write!(f, "{c}")?,
                            c => {
                                let mut buf = [0u8; 4];
                                for b in c.encode_utf8(&mut buf).bytes() {
                                    write!(f, "\\{b:03}")?;
                                }
                            }
                        }
                    }
                    f.write_str("\"")?;
                }
                Ok(())
            }
            Self::Soa(soa) => write!(
                f,
                "{} {} {} {} {} {} {}",
                soa.mname, soa.rname, soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum
            ),
        }
    }
}

/// Start of authority (RFC 1035 section 3.3.13; `minimum` is the negative-caching TTL, RFC 2308).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Soa {
    pub mname: String,
    pub rname: String,
    pub serial: u32,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    pub minimum: u32,
}

/// Whether `s` is a host name label as RFC 1123 and Kubernetes node names want it: 1 to 63
/// lowercase letters, digits and hyphens, not starting or ending with a hyphen.
pub fn is_host_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` (without a trailing dot) is a domain name made of valid labels, 253 octets at most.
/// Underscores are allowed so service names (`_etcd-server-ssl._tcp`) pass.
pub fn is_domain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` (without a trailing dot) is a host-style domain name: labels of letters, digits
/// and hyphens, as `openshift-install` wants the base domain.
pub fn is_host_domain(s: &str) -> bool {
    is_domain_name(s) && !s.contains('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_presentation_escapes_quotes_and_non_ascii() {
        let txt = RecordData::Txt(vec!["a \"b\"".into(), "é".into()]);
        assert_eq!(txt.to_string(), r#""a \"b\"" "\195\169""#);
    }

    #[test]
    fn labels() {
        assert!(is_host_label("master-0"));
        assert!(!is_host_label("Master-0"));
        assert!(!is_host_label("-a"));
        assert!(!is_host_label(&"a".repeat(64)));
        assert!(is_domain_name("lab.example.com"));
        assert!(is_domain_name("_etcd-server-ssl._tcp"));
        assert!(!is_domain_name("lab..com"));
        assert!(!is_domain_name("lab.example.com."));
    }
}

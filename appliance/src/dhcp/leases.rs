//! Leases: who has which dynamic address until when, kept in memory and in an append-only
//! journal that survives restarts, `kill -9` and power loss.
//!
//! Each change is one line with a CRC-32 of its text. The server appends the lines of a whole
//! batch of requests, syncs the file once (`fdatasync`) and only then sends the ACKs, so an
//! acknowledged lease is always on disk and durability costs one sync per batch, not per
//! client. On start-up every valid line is replayed; a torn or corrupt line is skipped and
//! counted, never fatal (Kea's CVE-2019-6474 was a start-up failure on a bad lease file). The
//! journal is then compacted to the live leases through a temporary file and a rename.
//!
//! Architecture invariant: knows addresses, MACs and times; not DHCP messages, the plan's
//! reservations (the caller checks them) or the network.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::vocabulary::MacAddr;

const FILE_NAME: &str = "dhcp-leases";

/// A dynamic lease. Times are seconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub mac: MacAddr,
    pub expires: u64,
}

/// What recovery found in the journal.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    pub records: usize,
    pub skipped: usize,
    pub live: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease journal {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The lease table and its journal.
#[derive(Debug)]
pub struct Leases {
    by_ip: HashMap<Ipv4Addr, Lease>,
    by_mac: HashMap<MacAddr, Ipv4Addr>,
    journal: Option<Journal>,
    /// Lines appended since the last sync.
    pending: String,
}

#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: File,
    /// The length up to which the file holds whole, synced lines.
    synced_len: u64,
}

impl Leases {
    /// Leases kept in memory only (tests, `listen.dhcp` without a state directory).
    pub fn in_memory() -> Leases {
        Leases {
            by_ip: HashMap::new(),
            by_mac: HashMap::new(),
            journal: None,
            pending: String::new(),
        }
    }

    /// Opens (or creates) the journal in `dir`, replays it and compacts it.
    pub fn open(dir: &Path, now: u64) -> Result<(Leases, Recovery), LeaseError> {
        let path = dir.join(FILE_NAME);
        let err = |source| LeaseError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut leases = Leases::in_memory();
        let mut recovery = Recovery::default();
        match File::open(&path) {
            Ok(file) => {
                for line in BufReader::new(file).split(b'\n') {
                    let line = line.map_err(err)?;
                    match parse_line(&line) {
                        Some(lease) => {
                            recovery.records += 1;
                            leases.apply(lease);
                        }
                        // An empty last line is the normal end of the file.
                        None if line.is_empty() => {}
                        None => recovery.skipped += 1,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        leases.by_ip.retain(|_, l| l.expires > now);
        leases.by_mac.retain(|_, ip| leases.by_ip.contains_key(ip));
        recovery.live = leases.by_ip.len();
        // Compact: the live leases only, written aside and renamed over the old journal.
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        let mut text = String::new();
        for lease in leases.by_ip.values() {
            push_line(&mut text, lease);
        }
        let write = || -> io::Result<File> {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            File::open(dir)?.sync_all()?;
            OpenOptions::new().append(true).open(&path)
        };
        let file = write().map_err(err)?;
        leases.journal = Some(Journal {
            path: path.clone(),
            file,
            synced_len: text.len() as u64,
        });
        Ok((leases, recovery))
    }

    fn apply(&mut self, lease: Lease) {
        if let Some(old) = self.by_ip.get(&lease.ip)
            && old.mac != lease.mac
        {
            self.by_mac.remove(&old.mac);
        }
        if let Some(old_ip) = self.by_mac.get(&lease.mac).copied()
            && old_ip != lease.ip
        {
            self.by_ip.remove(&old_ip);
        }
        if lease.expires == 0 {
            self.by_ip.remove(&lease.ip);
            self.by_mac.remove(&lease.mac);
        } else {
            self.by_mac.insert(lease.mac, lease.ip);
            self.by_ip.insert(lease.ip, lease);
        }
    }

    /// Records a lease (or its end, with `expires` 0); durable after the next [`Leases::sync`].
    pub fn record(&mut self, lease: Lease) {
        push_line(&mut self.pending, &lease);
        self.apply(lease);
    }

    /// Writes and syncs everything recorded since the last call. ACKs wait for this.
    pub fn sync(&mut self) -> Result<(), LeaseError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some(j) = &mut self.journal {
            let written = j
                .file
                .write_all(self.pending.as_bytes())
                .and_then(|()| j.file.sync_data());
            if let Err(source) = written {
                // Cut off whatever part of the batch reached the file, so the retry (the
                // lines stay pending) does not append to a torn line.
                let _ = j.file.set_len(j.synced_len);
                return Err(LeaseError::Io {
                    path: j.path.clone(),
                    source,
                });
            }
            j.synced_len += self.pending.len() as u64;
        }
        self.pending.clear();
        Ok(())
    }

    /// The live lease of `mac`, if any.
    pub fn of_mac(&self, mac: MacAddr, now: u64) -> Option<&Lease> {
        let ip = self.by_mac.get(&mac)?;
        self.by_ip.get(ip).filter(|l| l.expires > now)
    }

    /// The lease on `ip` (live or expired but not yet reused).
    pub fn on_ip(&self, ip: Ipv4Addr) -> Option<&Lease> {
        self.by_ip.get(&ip)
    }

    /// Whether `ip` is held by a live lease of another client.
    pub fn taken_by_other(&self, ip: Ipv4Addr, mac: MacAddr, now: u64) -> bool {
        self.by_ip
            .get(&ip)
            .is_some_and(|l| l.mac != mac && l.expires > now)
    }

    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }
}

/// `<ip> <mac> <expires> <crc32 of the preceding text, hex>`.
fn push_line(out: &mut String, lease: &Lease) {
    use std::fmt::Write as _;
    let start = out.len();
    let _ = write!(out, "{} {} {}", lease.ip, lease.mac, lease.expires);
    let crc = crc32fast::hash(&out.as_bytes()[start..]);
    let _ = writeln!(out, " {crc:08x}");
}

fn parse_line(line: &[u8]) -> Option<Lease> {
    let text = std::str::from_utf8(line).ok()?;
    let (body, crc) = text.rsplit_once(' ')?;
    if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(body.as_bytes()) {
        return None;
    }
    let mut fields = body.split(' ');
    let lease = Lease {
        ip: fields.next()?.parse().ok()?,
        mac: fields.next()?.parse().ok()?,
        expires: fields.next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> MacAddr {
        MacAddr([0x52, 0x54, 0, 0, 1, n])
    }

    fn lease(ip: u8, n: u8, expires: u64) -> Lease {
        Lease {
            ip: Ipv4Addr::new(10, 0, 0, ip),
            mac: mac(n),
            expires,
        }
    }

    #[test]
    fn synced_leases_survive_a_reopen_and_released_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (mut leases, _) = Leases::open(dir.path(), 100).unwrap();
        leases.record(lease(100, 1, 1000));
        leases.record(lease(101, 2, 1000));
        leases.record(lease(101, 2, 0));
        leases.record(lease(102, 3, 150));
        leases.sync().unwrap();
        drop(leases);
        let (leases, recovery) = Leases::open(dir.path(), 200).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                records: 4,
                skipped: 0,
                live: 1
            }
        );
        assert_eq!(
            leases.of_mac(mac(1), 200).unwrap().ip,
            Ipv4Addr::new(10, 0, 0, 100)
        );
        assert!(leases.of_mac(mac(2), 200).is_none(), "released");
        assert!(leases.of_mac(mac(3), 200).is_none(), "expired");
    }

    #[test]
    fn a_client_moving_address_frees_the_old_one() {
        let mut leases = Leases::in_memory();
        leases.record(lease(100, 1, 1000));
        leases.record(lease(105, 1, 1000));
        assert!(leases.on_ip(Ipv4Addr::new(10, 0, 0, 100)).is_none());
        assert_eq!(leases.len(), 1);
    }

    #[test]
    fn corrupt_and_torn_lines_are_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut text = String::new();
        push_line(&mut text, &lease(100, 1, 1000));
        let good_second = {
            let mut t = String::new();
            push_line(&mut t, &lease(101, 2, 1000));
            t
        };
        // A flipped digit (CRC mismatch), garbage, a good line, and a torn final line.
        text.push_str(&good_second.replace("10.0.0.101", "10.0.0.109"));
        text.push_str("\u{0}\u{0}garbage \u{ff}\n");
        text.push_str(&good_second);
        let mut torn = String::new();
        push_line(&mut torn, &lease(102, 3, 1000));
        text.push_str(&torn[..torn.len() / 2]);
        std::fs::write(&path, text).unwrap();
        let (leases, recovery) = Leases::open(dir.path(), 0).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                records: 2,
                skipped: 3,
                live: 2
            }
        );
        assert!(leases.on_ip(Ipv4Addr::new(10, 0, 0, 109)).is_none());
        // Compaction rewrote the journal with the valid leases only.
        let (_, again) = Leases::open(dir.path(), 0).unwrap();
        assert_eq!(
            again,
            Recovery {
                records: 2,
                skipped: 0,
                live: 2
            }
        );
    }

    #[test]
    fn unsynced_leases_are_not_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let (mut leases, _) = Leases::open(dir.path(), 0).unwrap();
        leases.record(lease(100, 1, 1000));
        let on_disk = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert!(on_disk.is_empty());
        leases.sync().unwrap();
        let on_disk = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert!(on_disk.starts_with("10.0.0.100 52:54:00:00:01:01 1000 "));
    }
}

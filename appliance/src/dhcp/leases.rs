//! Leases: who has which dynamic address until when, kept in memory and in an append-only
//! journal that survives restarts, `kill -9` and power loss.
//!
//! Each change is one line with a CRC-32 of its text. The server appends the lines of a whole
//! batch of requests, syncs the file once (`fdatasync`) and only then sends the ACKs, so an
//! acknowledged lease is always on disk and durability costs one sync per batch, not per
//! client. On start-up every valid line is replayed; a torn or corrupt line is skipped and
//! counted, never fatal (Kea's CVE-2019-6474 was a start-up failure on a bad lease file).
//!
//! The journal is compacted to the lease table, at start-up and whenever it has grown past
//! [`JournalLimits`] (by default 1 MiB and four times the last compacted size), so renewals
//! over days and months keep it bounded. Compaction writes the table to a temporary file,
//! syncs it, renames it over the journal and syncs the directory: a crash at any point leaves
//! either the old journal or the new one, each complete (a leftover temporary file is
//! ignored and overwritten). It runs right after a batch was synced, so the table it writes
//! is exactly what the journal held.
//!
//! Architecture invariant: knows addresses, MACs and times; not DHCP messages, the plan's
//! reservations (the caller checks them) or the network.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::vocabulary::MacAddr;

pub const FILE_NAME: &str = "dhcp-leases";
const TMP_NAME: &str = "dhcp-leases.tmp";

/// When the journal is compacted while running: once it is larger than both `min_bytes` and
/// `factor` times its size right after the last compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalLimits {
    pub min_bytes: u64,
    pub factor: u64,
}

impl Default for JournalLimits {
    /// 1 MiB is about 17 000 lines: read back in milliseconds at start-up.
    fn default() -> Self {
        JournalLimits {
            min_bytes: 1024 * 1024,
            factor: 4,
        }
    }
}

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

/// The live leases of the journal in `dir`, read without changing it (a pair's replication
/// sends them to the standby when it connects). An absent journal has none.
pub fn read_live(dir: &Path, now: u64) -> io::Result<Vec<Lease>> {
    let mut table = Leases::in_memory();
    match File::open(dir.join(FILE_NAME)) {
        Ok(file) => {
            for line in BufReader::new(file).split(b'\n') {
                if let Some(lease) = parse_line(&line?) {
                    table.apply(lease);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(table
        .by_ip
        .into_values()
        .filter(|l| l.expires > now)
        .collect())
}

/// The lease table and its journal.
#[derive(Debug)]
pub struct Leases {
    by_ip: HashMap<Ipv4Addr, Lease>,
    by_mac: HashMap<MacAddr, Ipv4Addr>,
    journal: Option<Journal>,
    /// Lines appended since the last sync.
    pending: String,
    /// Leases recorded since [`Leases::take_changes`], when they are tracked (a pair's active
    /// host replicates them).
    changes: Option<Vec<Lease>>,
    /// A [`SyncJob`] was started and not yet finished: no other write, sync or compaction.
    in_flight: bool,
}

/// The lines recorded since the last sync, on their way to disk: [`SyncJob::run`] writes and
/// syncs them on any thread while the table goes on taking records, and
/// [`Leases::finish_sync`] takes the outcome back. One job at a time.
#[derive(Debug)]
pub struct SyncJob {
    /// `None` for a table kept in memory only.
    file: Option<Arc<File>>,
    text: String,
    /// The journal's length before this job: a failed job cuts the file back to it.
    synced_len: u64,
}

impl SyncJob {
    /// Appends the lines and waits for them to reach the disk (`fdatasync`). Blocks.
    pub fn run(&self) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut writer: &File = file;
        let written = writer
            .write_all(self.text.as_bytes())
            .and_then(|()| file.sync_data());
        if written.is_err() {
            // Cut off whatever part of the batch reached the file, so the retry (the lines go
            // back to pending) does not append to a torn line.
            let _ = file.set_len(self.synced_len);
        }
        written
    }
}

#[derive(Debug)]
struct Journal {
    dir: PathBuf,
    path: PathBuf,
    /// Shared with the [`SyncJob`] in flight, which appends to it on another thread.
    file: Arc<File>,
    /// The length up to which the file holds whole, synced lines.
    synced_len: u64,
    /// The length right after the last compaction: about what the live leases take.
    compacted_len: u64,
    limits: JournalLimits,
    /// A compaction renamed the journal but the directory could not be synced: until it is,
    /// the rename (and so every line appended since) may not survive a power loss, and no
    /// sync may report success.
    dir_unsynced: bool,
}

impl Leases {
    /// Leases kept in memory only (tests, `listen.dhcp` without a state directory).
    pub fn in_memory() -> Leases {
        Leases {
            by_ip: HashMap::new(),
            by_mac: HashMap::new(),
            journal: None,
            pending: String::new(),
            changes: None,
            in_flight: false,
        }
    }

    /// Opens (or creates) the journal in `dir`, replays it and compacts it.
    pub fn open(dir: &Path, now: u64) -> Result<(Leases, Recovery), LeaseError> {
        Leases::open_with(dir, now, JournalLimits::default())
    }

    /// [`Leases::open`] with the journal compacted at `limits`.
    pub fn open_with(
        dir: &Path,
        now: u64,
        limits: JournalLimits,
    ) -> Result<(Leases, Recovery), LeaseError> {
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
        let (file, len) = leases.write_compacted(dir, &path).map_err(err)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
        leases.journal = Some(Journal {
            dir: dir.to_owned(),
            path: path.clone(),
            file: Arc::new(file),
            synced_len: len,
            compacted_len: len,
            limits,
            dir_unsynced: false,
        });
        Ok((leases, recovery))
    }

    /// Writes the lease table to the temporary file, syncs it and renames it over the journal.
    /// Returns the new journal, open for appending, and its length. The caller syncs the
    /// directory.
    fn write_compacted(&self, dir: &Path, path: &Path) -> io::Result<(File, u64)> {
        let tmp = dir.join(TMP_NAME);
        let mut text = String::new();
        for lease in self.by_ip.values() {
            push_line(&mut text, lease);
        }
        // A leftover from a crash (or a failed compaction) is garbage.
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        // Opened for appending before the rename: the handle follows the file to its new name,
        // so no second open can fail after the journal was replaced.
        let mut file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&tmp)?;
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok((file, text.len() as u64))
    }

    /// Compacts the journal if it has outgrown its limits. Only called with nothing pending,
    /// right after a sync, so the table is exactly what the journal holds.
    fn compact_if_due(&mut self) -> Result<(), LeaseError> {
        let Some(j) = &self.journal else {
            return Ok(());
        };
        if !self.compaction_due() {
            return Ok(());
        }
        let (dir, path) = (j.dir.clone(), j.path.clone());
        match self.write_compacted(&dir, &path) {
            Ok((file, len)) => {
                let j = self.journal.as_mut().expect("checked above");
                let before = j.synced_len;
                // The old handle now points at the replaced file: appends must go to the new one.
                j.file = Arc::new(file);
                j.synced_len = len;
                j.compacted_len = len;
                j.dir_unsynced = true;
                tracing::info!("lease journal compacted from {before} to {len} bytes");
                self.sync_dir()
            }
            Err(e) => {
                // The old journal is intact and synced: keep appending to it, try again later.
                tracing::warn!("lease journal {}: compaction failed: {e}", path.display());
                Ok(())
            }
        }
    }

    fn sync_dir(&mut self) -> Result<(), LeaseError> {
        let Some(j) = &mut self.journal else {
            return Ok(());
        };
        if j.dir_unsynced {
            File::open(&j.dir)
                .and_then(|d| d.sync_all())
                .map_err(|source| LeaseError::Io {
                    path: j.dir.clone(),
                    source,
                })?;
            j.dir_unsynced = false;
        }
        Ok(())
    }

    /// The journal's length in bytes (0 without a journal).
    pub fn journal_len(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.synced_len)
    }

    /// Every lease in the table (live, or expired but not yet reused).
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.by_ip.values()
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
        if let Some(changes) = &mut self.changes {
            changes.push(lease.clone());
        }
        self.apply(lease);
    }

    /// From now on, remember what is recorded for [`Leases::take_changes`].
    pub fn track_changes(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// What was recorded since the last call (nothing unless tracked).
    pub fn take_changes(&mut self) -> Vec<Lease> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Records a lease learnt from the other host of a pair: like [`Leases::record`], but not
    /// among the changes this host replicates.
    pub fn record_replicated(&mut self, lease: Lease) {
        push_line(&mut self.pending, &lease);
        self.apply(lease);
    }

    /// Writes and syncs everything recorded since the last call, then compacts the journal if
    /// it has outgrown its limits. Blocks; [`Leases::start_sync`] is the same off the caller's
    /// thread.
    pub fn sync(&mut self) -> Result<(), LeaseError> {
        let Some(job) = self.start_sync()? else {
            return Ok(());
        };
        let result = job.run();
        self.finish_sync(job, result)?;
        self.compact_if_due()
    }

    /// Whether anything was recorded since the last sync started.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Takes everything recorded since the last sync as a [`SyncJob`] (`None`: nothing to
    /// write). ACKs for those records wait for [`Leases::finish_sync`]. Call it only when no
    /// job is in flight.
    pub fn start_sync(&mut self) -> Result<Option<SyncJob>, LeaseError> {
        debug_assert!(!self.in_flight, "one lease sync at a time");
        // A compaction's rename must be durable before anything appended after it counts.
        self.sync_dir()?;
        if self.pending.is_empty() {
            return Ok(None);
        }
        self.in_flight = true;
        Ok(Some(SyncJob {
            file: self.journal.as_ref().map(|j| Arc::clone(&j.file)),
            text: std::mem::take(&mut self.pending),
            synced_len: self.journal.as_ref().map_or(0, |j| j.synced_len),
        }))
    }

    /// Takes back a job and what [`SyncJob::run`] returned. On success its records are durable;
    /// on failure the lines are pending again, ahead of newer ones. It never compacts (that
    /// blocks on the disk): when [`Leases::compaction_due`] says so, a blocking
    /// [`Leases::sync`] does it.
    pub fn finish_sync(&mut self, job: SyncJob, result: io::Result<()>) -> Result<(), LeaseError> {
        self.in_flight = false;
        if let Err(source) = result {
            let mut pending = job.text;
            pending.push_str(&self.pending);
            self.pending = pending;
            return Err(LeaseError::Io {
                path: self.journal_path(),
                source,
            });
        }
        if let Some(j) = &mut self.journal {
            j.synced_len += job.text.len() as u64;
        }
        Ok(())
    }

    /// Gives up on a job that never returned (its thread panicked): its lines are not on disk
    /// and no ACK waits for them any more; a client that retries is recorded again.
    pub fn abandon_sync(&mut self, source: io::Error) -> Result<(), LeaseError> {
        self.in_flight = false;
        Err(LeaseError::Io {
            path: self.journal_path(),
            source,
        })
    }

    fn journal_path(&self) -> PathBuf {
        self.journal
            .as_ref()
            .map(|j| j.path.clone())
            .unwrap_or_default()
    }

    /// Whether the journal has outgrown its limits: the next [`Leases::sync`] compacts it.
    pub fn compaction_due(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| {
            j.synced_len > j.limits.min_bytes
                && j.synced_len > j.limits.factor.saturating_mul(j.compacted_len)
        })
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

    /// What a pair's replication reads and follows: the live leases of a journal another
    /// handle writes, and the changes recorded since the last look.
    #[test]
    fn live_leases_are_read_without_touching_the_journal_and_changes_are_tracked() {
        let dir = tempfile::tempdir().unwrap();
        let (mut leases, _) = Leases::open(dir.path(), 100).unwrap();
        leases.record(lease(5, 1, 1_000));
        assert!(leases.take_changes().is_empty(), "not tracked yet");
        leases.track_changes();
        leases.record(lease(6, 2, 2_000));
        leases.record(lease(7, 3, 150));
        leases.record(lease(6, 2, 0));
        leases.sync().unwrap();
        assert_eq!(
            leases.take_changes(),
            [lease(6, 2, 2_000), lease(7, 3, 150), lease(6, 2, 0)]
        );
        assert!(leases.take_changes().is_empty());
        let before = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
        let mut live = read_live(dir.path(), 200).unwrap();
        live.sort_by_key(|l| l.ip);
        assert_eq!(
            live,
            [lease(5, 1, 1_000)],
            "ended and expired leases are not live"
        );
        assert_eq!(std::fs::read(dir.path().join(FILE_NAME)).unwrap(), before);
        assert!(
            read_live(&dir.path().join("nowhere"), 0)
                .unwrap()
                .is_empty()
        );
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

    /// The server's group commit: a job runs on another thread while new leases are
    /// recorded; they are not in it, and they are durable only after the next sync.
    #[test]
    fn records_made_while_a_sync_runs_wait_for_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut leases, _) = Leases::open(dir.path(), 0).unwrap();
        leases.record(lease(100, 1, 1000));
        let job = leases.start_sync().unwrap().expect("a lease is pending");
        assert!(!leases.has_pending());
        let running = std::thread::spawn(move || {
            let result = job.run();
            (job, result)
        });
        leases.record(lease(101, 2, 1000));
        let (job, result) = running.join().unwrap();
        leases.finish_sync(job, result).unwrap();
        let on_disk = std::fs::read_to_string(&path).unwrap();
        assert_eq!(on_disk.lines().count(), 1, "{on_disk}");
        assert!(on_disk.starts_with("10.0.0.100 "));
        assert!(leases.has_pending());
        leases.sync().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        assert_eq!(
            leases.journal_len(),
            std::fs::metadata(&path).unwrap().len()
        );
    }

    /// A failed sync loses nothing: its lines are pending again, ahead of the ones recorded
    /// while it ran, and the next sync writes both in order.
    #[test]
    fn a_failed_sync_puts_its_lines_back_ahead_of_newer_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut leases, _) = Leases::open(dir.path(), 0).unwrap();
        leases.record(lease(100, 1, 1000));
        let job = leases.start_sync().unwrap().unwrap();
        // The client moves to another address while the sync fails.
        leases.record(lease(105, 1, 2000));
        let failed = leases.finish_sync(job, Err(io::Error::other("disk gone")));
        assert!(
            failed.unwrap_err().to_string().contains("dhcp-leases"),
            "the error names the journal"
        );
        assert!(std::fs::read_to_string(&path).unwrap().is_empty());
        leases.sync().unwrap();
        let on_disk = std::fs::read_to_string(&path).unwrap();
        let ips: Vec<_> = on_disk
            .lines()
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(ips, ["10.0.0.100", "10.0.0.105"]);
        drop(leases);
        let (recovered, _) = Leases::open(dir.path(), 0).unwrap();
        assert_eq!(
            table(&recovered),
            [(Ipv4Addr::new(10, 0, 0, 105), mac(1), 2000)]
        );
    }

    /// Sorted (ip, mac, expires) of every lease in the table.
    fn table(leases: &Leases) -> Vec<(Ipv4Addr, MacAddr, u64)> {
        let mut v: Vec<_> = leases.iter().map(|l| (l.ip, l.mac, l.expires)).collect();
        v.sort();
        v
    }

    /// A directory whose fsyncs cost nothing when the machine has a tmpfs: these tests sync
    /// hundreds of batches.
    fn fast_dir() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        }
    }

    #[test]
    fn renewals_over_three_weeks_keep_the_journal_bounded_and_recover_exactly_the_live_leases() {
        let dir = fast_dir();
        let limits = JournalLimits::default();
        let (mut leases, _) = Leases::open(dir.path(), 0).unwrap();
        // 64 clients with one-hour leases renewing every half hour for three weeks; every
        // seventh round one client lets its lease go and comes back on another address.
        let start = 1_700_000_000;
        let rounds = 21 * 48;
        let mut appended = 0u64;
        let mut largest = 0u64;
        for round in 0..rounds {
            let now = start + round * 1800;
            for n in 0..64u8 {
                let ip = if round % 7 == 0 && u64::from(n) == round % 64 {
                    leases.record(lease(n, n, 0));
                    100 + n
                } else {
                    leases.of_mac(mac(n), now).map_or(n, |l| l.ip.octets()[3])
                };
                leases.record(lease(ip, n, now + 3600));
            }
            let before = leases.journal_len();
            leases.sync().unwrap();
            appended += leases.journal_len().saturating_sub(before);
            largest = largest.max(leases.journal_len());
            let on_disk = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len();
            assert_eq!(on_disk, leases.journal_len(), "round {round}");
        }
        // Without compaction the journal would hold every line: about 3 MB.
        assert!(appended > 2 * limits.min_bytes, "{appended} bytes appended");
        assert!(
            largest <= limits.min_bytes + 8 * 1024,
            "the journal reached {largest} bytes"
        );
        assert!(!dir.path().join(TMP_NAME).exists());
        let now = start + rounds * 1800;
        let live: Vec<_> = table(&leases)
            .into_iter()
            .filter(|l| l.2 > now - 1800)
            .collect();
        assert_eq!(live.len(), 64);
        drop(leases);
        let (recovered, recovery) = Leases::open(dir.path(), now - 1800).unwrap();
        assert_eq!(table(&recovered), live);
        assert_eq!(recovery.skipped, 0);
    }

    #[test]
    fn a_failed_compaction_keeps_the_journal_working_and_is_tried_again() {
        let dir = fast_dir();
        let limits = JournalLimits {
            min_bytes: 1024,
            factor: 2,
        };
        let (mut leases, _) = Leases::open_with(dir.path(), 0, limits).unwrap();
        // The temporary file's name is taken by a directory: compaction can't write it.
        std::fs::create_dir(dir.path().join(TMP_NAME)).unwrap();
        for round in 0..40u64 {
            leases.record(lease(1, 1, 1000 + round));
            leases.record(lease(2, 2, 1000 + round));
            leases.sync().unwrap();
        }
        assert!(leases.journal_len() > 2 * 1024, "not compacted");
        std::fs::remove_dir(dir.path().join(TMP_NAME)).unwrap();
        leases.record(lease(3, 3, 2000));
        leases.sync().unwrap();
        assert!(leases.journal_len() < 1024, "{}", leases.journal_len());
        let expected = table(&leases);
        drop(leases);
        let (recovered, _) = Leases::open(dir.path(), 0).unwrap();
        assert_eq!(table(&recovered), expected);
    }
}

//! The journal's history on disk, so the status page and `/events` still show what happened
//! before a restart: each published event as one JSON line (`at`, `node`, `text`) appended to
//! `<state_dir>/events.jsonl`. When the file holds twice [`KEPT`] lines it is rewritten with
//! the last [`KEPT`] (durably, `durable::write`), so it stays bounded.
//!
//! The lines are history to read, not state to act on: nothing is replayed into the services
//! (the install phases have their own durable record), and appends are not synced (a power cut
//! may lose the last events, never the file). An event the writer fell behind on is counted in
//! the log, not waited for: publishing never blocks.

use std::io::{self, BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

use super::Event;

/// The file's name in the state directory.
pub const FILE: &str = "events.jsonl";
/// Events read back at a start (the journal's own history size).
pub const KEPT: usize = super::HISTORY;

/// An event from before this start, as it was said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Past {
    /// Seconds since the epoch.
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub text: String,
}

impl Past {
    pub fn of(e: &Event) -> Past {
        Past {
            at: e
                .at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            node: e.node.clone(),
            text: e.to_string(),
        }
    }
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The last [`KEPT`] events of the file, oldest first, and how many lines it holds; a line that
/// does not parse (the end of one cut by a crash) is skipped. No file: none.
pub fn read(path: &Path) -> io::Result<(Vec<Past>, usize)> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut past = std::collections::VecDeque::with_capacity(KEPT);
    let mut lines = 0;
    for line in io::BufReader::new(file).lines() {
        lines += 1;
        if let Ok(p) = serde_json::from_str::<Past>(&line?) {
            if past.len() == KEPT {
                past.pop_front();
            }
            past.push_back(p);
        }
    }
    Ok((past.into(), lines))
}

/// Appends each event of `live` (a journal's subscription) to the file at `path` (holding
/// `lines` lines already), until `token` is cancelled.
pub async fn follow(
    mut live: broadcast::Receiver<Event>,
    path: PathBuf,
    mut lines: usize,
    token: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = token.cancelled() => return,
            r = live.recv() => r,
        };
        // What else is waiting goes in the same write.
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(r) = next.take() {
            match r {
                Ok(e) if e.kind.is_signal() => {}
                Ok(e) => batch.push(Past::of(&e)),
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!("journal: {n} events were not kept in {}", path.display());
                }
                Err(RecvError::Closed) => return,
            }
            next = live.try_recv().ok().map(Ok);
        }
        if batch.is_empty() {
            continue;
        }
        lines += batch.len();
        let rewrite = lines >= 2 * KEPT;
        let at = path.clone();
        let written = tokio::task::spawn_blocking(move || append(&at, &batch, rewrite)).await;
        match written {
            Ok(Ok(Some(kept))) => lines = kept,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::warn!("journal: can't keep events in {}: {e}", path.display()),
            Err(e) => tracing::warn!("journal: keeping events failed: {e}"),
        }
    }
}

/// Appends `batch`; with `rewrite`, then cuts the file to its last [`KEPT`] lines and returns
/// how many it holds.
fn append(path: &Path, batch: &[Past], rewrite: bool) -> io::Result<Option<usize>> {
    let mut text = String::new();
    for p in batch {
        text.push_str(&serde_json::to_string(p).map_err(io::Error::other)?);
        text.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())?;
    if !rewrite {
        return Ok(None);
    }
    let (past, _) = read(path)?;
    let mut kept = String::new();
    for p in &past {
        kept.push_str(&serde_json::to_string(p).map_err(io::Error::other)?);
        kept.push('\n');
    }
    crate::durable::write(path, kept.as_bytes())?;
    Ok(Some(past.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{EventKind, Journal};

    #[tokio::test]
    async fn events_outlive_the_journal_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        let journal = Journal::new();
        let token = CancellationToken::new();
        let writer = tokio::spawn(follow(journal.subscribe(), file.clone(), 0, token.clone()));
        for n in 0..3 {
            journal.publish(Some(format!("m{n}")), EventKind::InstallRetried);
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while read(&file).unwrap().0.len() < 3 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        token.cancel();
        writer.await.unwrap();
        let (past, lines) = read(&file).unwrap();
        assert_eq!(lines, 3);
        let nodes: Vec<_> = past.iter().map(|p| p.node.clone().unwrap()).collect();
        assert_eq!(nodes, ["m0", "m1", "m2"]);
        assert_eq!(past[0].text, Past::of(&journal.recent()[0]).text);

        // A cut last line is skipped; past twice KEPT lines, the file keeps the last KEPT.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap()
            .write_all(b"{\"at\":1,\"te")
            .unwrap();
        let many: Vec<Past> = (0..2 * KEPT)
            .map(|n| Past {
                at: n as u64,
                node: None,
                text: format!("event {n}"),
            })
            .collect();
        assert_eq!(append(&file, &many, true).unwrap(), Some(KEPT));
        let (past, lines) = read(&file).unwrap();
        assert_eq!((past.len(), lines), (KEPT, KEPT));
        assert_eq!(past.last().unwrap().text, format!("event {}", 2 * KEPT - 1));
    }
}

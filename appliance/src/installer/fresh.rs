//! Whether the ignition set in place can be used, must be made (again), or must be left alone.
//!
//! bootstrap.ign (and a single node's `bootstrap-in-place-for-live-iso.ign`) carries the
//! kubelet CSR signer, which openshift-install makes valid for one day (openshift/installer
//! `pkg/asset/tls/kubelet.go`, `KubeletCSRSignerCertKey`, `ValidityOneDay`; its asset store
//! warns "Bootstrap Ignition-Config expired" past it): after that the set can't bootstrap a
//! cluster. master.ign and worker.ign only point at the machine config server and never
//! expire.
//!
//! A set a node has fetched its ignition from is that node's: making another one gives the
//! cluster a second CA and other credentials, and the nodes of the first set never join the
//! nodes of the second. So a set is made again only while no node has used it, and `ignition
//! create` refuses (naming the nodes) without `--force`.

use std::time::{Duration, SystemTime};

/// How long the expiring file of a set is valid after openshift-install wrote it.
pub const LIFETIME: Duration = crate::vocabulary::IGNITION_LIFETIME;
/// How old it may be when `cluster up` starts an install with it: the bootstrap must be done
/// before the certificates expire, and openshift-install itself waits up to 50 minutes for it
/// (20 for the API, 30 for bootstrap complete); two hours before the end leaves that and more.
pub const USABLE_FOR: Duration = LIFETIME.saturating_sub(Duration::from_secs(2 * 3600));

/// What the ignition directory holds, for the config's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// The role files the config's nodes need that are not there.
    pub missing: Vec<&'static str>,
    /// The file that expires (bootstrap.ign, or the single node's), its node, and its age,
    /// while the config lists that node.
    pub expiring: Option<Expiring>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiring {
    pub file: &'static str,
    /// The node that boots from it (the bootstrap node, or the single node).
    pub node: String,
    pub age: Duration,
}

/// What `cluster up` does with the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Use it as it is (`note`: why an expired file does not matter).
    Use { note: Option<String> },
    /// Make a new set first: why.
    Make { why: String },
    /// Neither use nor make it: why.
    Refuse { why: String },
}

/// The verdict on `set` when `fetched` nodes fetched their ignition from it.
pub fn judge(set: &Set, fetched: &[String]) -> Verdict {
    let expired = set.expiring.as_ref().filter(|e| e.age > USABLE_FOR);
    let problem = if !set.missing.is_empty() {
        format!("{} not in the ignition directory", and_list(&set.missing))
    } else if let Some(e) = expired {
        format!(
            "{} was written {} h ago: its certificates expire 24 h after that, too soon for a bootstrap",
            e.file,
            e.age.as_secs() / 3600
        )
    } else {
        return Verdict::Use { note: None };
    };
    if fetched.is_empty() {
        return Verdict::Make { why: problem };
    }
    match expired {
        // The node that needed the expired file has it: nobody fetches it again.
        Some(e) if set.missing.is_empty() && fetched.contains(&e.node) => Verdict::Use {
            note: Some(format!(
                "{problem}, but {} has fetched its ignition",
                e.node
            )),
        },
        _ => Verdict::Refuse {
            why: format!(
                "{problem}, and {} fetched {} ignition from this set: a new set would not be \
                 theirs (`okd-appliance ignition create --force`, then `okd-appliance node \
                 reinstall` for each of them, starts over)",
                and_list(fetched),
                if fetched.len() == 1 { "its" } else { "their" }
            ),
        },
    }
}

/// Whether a node whose install markers were last written at `marked` fetched its ignition from
/// the set whose role file was written at `set_written`: a marker older than the set belongs
/// to an earlier one, and without the file there is no set to have fetched from.
pub fn fetched_from_set(marked: Option<SystemTime>, set_written: Option<SystemTime>) -> bool {
    match (marked, set_written) {
        (Some(marked), Some(set)) => marked >= set,
        _ => false,
    }
}

fn and_list<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_owned(),
        [init @ .., last] => format!(
            "{} and {}",
            init.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", "),
            last.as_ref()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(missing: &[&'static str], age_h: Option<u64>) -> Set {
        Set {
            missing: missing.to_vec(),
            expiring: age_h.map(|h| Expiring {
                file: "bootstrap.ign",
                node: "bootstrap".into(),
                age: Duration::from_secs(h * 3600),
            }),
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_fresh_set_is_used_and_a_missing_or_expired_one_made_before_any_fetch() {
        assert_eq!(judge(&set(&[], Some(3)), &[]), Verdict::Use { note: None });
        // Not expired yet, but too close to it for a bootstrap.
        assert!(matches!(
            judge(&set(&[], Some(23)), &[]),
            Verdict::Make { .. }
        ));
        assert_eq!(judge(&set(&[], Some(21)), &[]), Verdict::Use { note: None });
        let Verdict::Make { why } = judge(&set(&["bootstrap.ign", "master.ign"], None), &[]) else {
            panic!()
        };
        assert_eq!(
            why,
            "bootstrap.ign and master.ign not in the ignition directory"
        );
        let Verdict::Make { why } = judge(&set(&[], Some(25)), &[]) else {
            panic!()
        };
        assert!(why.contains("written 25 h ago"), "{why}");
    }

    #[test]
    fn a_set_a_node_fetched_from_is_never_made_again() {
        let Verdict::Refuse { why } = judge(&set(&[], Some(25)), &names(&["master-0", "master-1"]))
        else {
            panic!()
        };
        assert!(
            why.contains("master-0 and master-1 fetched their ignition"),
            "{why}"
        );
        assert!(matches!(
            judge(&set(&["worker.ign"], Some(1)), &names(&["bootstrap"])),
            Verdict::Refuse { .. }
        ));
        // The bootstrap node has what the expired file gave: the install goes on.
        let Verdict::Use { note: Some(note) } =
            judge(&set(&[], Some(30)), &names(&["bootstrap", "master-0"]))
        else {
            panic!()
        };
        assert!(note.contains("bootstrap has fetched"), "{note}");
    }

    #[test]
    fn a_marker_older_than_the_set_belongs_to_an_earlier_one() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let later = t + Duration::from_secs(1);
        assert!(fetched_from_set(Some(later), Some(t)));
        assert!(fetched_from_set(Some(t), Some(t)));
        assert!(!fetched_from_set(Some(t), Some(later)));
        assert!(!fetched_from_set(Some(t), None));
        assert!(!fetched_from_set(None, Some(t)));
    }
}

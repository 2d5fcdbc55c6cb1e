//! A node's install lifecycle, in one room: what the appliance knows of each node's install
//! ([`NodeState`]), what the boot server saw the node do ([`Observation`]), and the one pure rule
//! that joins them ([`observe`]): the state after, the iPXE script a network boot gets, the news
//! the journal announces, and whether a step the appliance can't record is refused
//! ([`Transition`]). The state is kept as marker files ([`markers`]); nothing else writes them.
//!
//! Who calls it: the boot server reports each script, ignition and role-config fetch
//! (`http::install_steps::observe`), `node reinstall` reports the operator's request
//! (`operator::reinstall`); both run [`markers::step_then`] (read the markers, [`observe`],
//! write what changed, one step of a node at a time) and, still in that step, announce the
//! transition's news and the state recorded (`EventKind::InstallRecorded`, at each install
//! event, changed or not). A pair's replication ships that recorded state, not the files read
//! back; the orchestration's phase record reaches its floor from the same state
//! (`orchestration::phases`), and `status` reads that record.
//!
//! The states:
//! - not installed: the next network boot installs;
//! - installing: the live installer fetched the node's ignition (the install started; the disk
//!   may or may not have been written), and since then perhaps a script told the node to try
//!   its disk, which opens the power-on that offer belongs to (below);
//! - installed: the node's installed system fetched its role config (the merge source of its
//!   ignition), which only Ignition on the installed system's first boot does.
//!
//! Only the last one makes a node installed: a failed install (a wrong `install_dev`) fetches
//! its ignition and then never boots an installed system, and marking it installed at that
//! point sent it to a blank disk at every boot. `okd-appliance node reinstall NAME` starts over
//! (through the admin socket or the API; it changes no machine, so it needs no provider).
//!
//! While installing, the node's next script is the first-boot script: boot the disk (it was
//! probably just written), and install again when it does not boot. On BIOS, iPXE's `sanboot`
//! returns on a disk that is not bootable and the same script goes on to the install. On UEFI,
//! iPXE hands the machine back to the firmware with `exit 1`: an EFI error, so the boot manager
//! tries its next boot option (EDK2's `BootBootOptions` stops walking BootOrder and opens its
//! menu on EFI_SUCCESS, which `exit 0` returned; `plan/documents.rs` cites both sides). The
//! appliance does not move the disk first in the boot order of machines it controls: this rule
//! works for every machine, the ones nobody controls included. A node that fetches its
//! ignition again is installing again ("installing again" is journaled after a failed install
//! and after an installed one alike), and its phase goes back to `ignition` with that time,
//! which the CSR approval window counts from (`orchestration::phases`).
//!
//! A single node's live system merges `bootstrap-in-place-for-live-iso.ign` before it installs
//! itself: not an installed system's first boot, so it marks nothing installed, and every later
//! network boot gets the first-boot script (BIOS boots the disk and falls back to the live
//! system; UEFI returns to the firmware's next boot option), never an automatic reinstall,
//! because the installed system builds its own config and never reports here.
//!
//! **One answer per power-on.** Between the installer's ignition fetch and the installed
//! system's report, the node's next network boot is told to try its disk, and a network boot
//! after that try means the disk did not bring up an installed system, so it installs again.
//! But one power-on can reach the network several times: OVMF with the iPXE ROM walks PXEv4
//! (the ROM), PXEv4 (its own), PXEv6, HTTPv4 and HTTPv6 before the disk, and each entry that
//! gets an answer fetches the script. So "after that try" is not "at the next fetch": every
//! script fetch within [`POWER_ON_WINDOW`] of the first offer is the same power-on and gets
//! the same answer. A power-on walks its firmware's entries in about two minutes under qemu's
//! TCG (five network entries, two of them IPv6 timeouts); the window leaves five times that.
//! The cost of the rule: an install whose disk does not boot is installed again only at a
//! network boot at least that long after its first offer.
//!
//! **Only the node moves its own state.** A script read from another address gets the node's
//! script but changes nothing, so no one else can use up the node's one "try your disk" offer
//! and send it into a reinstall; the boot server refuses ignition and role configs to any other
//! address before it reports anything.
//!
//! Architecture invariant: this file is pure (no I/O, no clock: the time comes with the call);
//! [`markers`] is plain blocking `std::fs` (callers on the async runtime run it on the blocking
//! pool). Tests: `install_state::tests` (the rule), `install_state::markers::tests` (the
//! files), and in tests/e2e `boot::uefi_ipxe_rom_installs_then_boots_from_disk`,
//! `boot::a_failed_install_is_not_marked_installed_and_installs_again_instead_of_booting_a_blank_disk`,
//! `hardening::only_the_node_itself_uses_up_its_disk_boot_offer` and
//! `state_disk::a_full_state_disk_takes_no_step_it_cant_record_and_recovers_by_itself`.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

pub mod markers;

pub use markers::{
    DIRECTORIES, Markers, Stepped, drained, keep_drained, load, marked_at, prepare, read_markers,
    step, step_blocking, step_then, write_markers,
};

/// How long one power-on of a machine may take to walk its firmware's network boot entries
/// after the first one got a "try your disk" script (see the module's header).
pub const POWER_ON_WINDOW: Duration = Duration::from_secs(600);

/// What the appliance knows of a node's install, with when each step was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Nothing recorded: the next network boot installs.
    NotInstalled,
    /// The installer fetched the ignition at `ignition_fetched`; no installed system has
    /// fetched its role config yet. `disk_boot_offered`: when a script since then first told
    /// the node to try its disk.
    Installing {
        ignition_fetched: SystemTime,
        disk_boot_offered: Option<SystemTime>,
    },
    /// The installed system fetched its role config at `since`: boot from disk until
    /// `node reinstall`.
    Installed { since: SystemTime },
}

/// What the boot server (or the operator) saw happen to a node; `from`: the fetch's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// A network boot asked for the node's iPXE script. `by_node`: from the node's own address;
    /// `get`: a GET (a HEAD reads the answer and takes no step); `single_node`: the node is a
    /// single-node cluster, whose installed system never reports here.
    Script {
        from: SocketAddr,
        by_node: bool,
        get: bool,
        single_node: bool,
    },
    /// The live installer fetched the node's ignition (from the node's address: the boot
    /// server refuses it to any other).
    Ignition { from: SocketAddr },
    /// The node fetched its role's config `file`. `by_installed_system`: the fetch only the
    /// installed system's first boot makes (a single node's live system merges its config
    /// before it installs itself: not a sign of an installed system).
    RoleConfig {
        from: SocketAddr,
        file: &'static str,
        by_installed_system: bool,
    },
    /// An operator asked for the node to be installed again at its next network boot.
    ReinstallRequested,
}

/// Which of its scripts a node's network boot gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootScript {
    /// Install CoreOS.
    Install,
    /// Try the disk (UEFI: back to the firmware's next boot option; BIOS: the disk, then the
    /// install if it does not boot).
    TryDisk,
    /// Boot the disk: the node is installed.
    LocalBoot,
}

/// What a transition tells the journal (`journal::EventKind` has one event for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    ScriptFetched {
        from: SocketAddr,
    },
    IgnitionFetched {
        from: SocketAddr,
    },
    /// The installer fetched the ignition again although the previous install never brought up
    /// a system that fetched its role config.
    InstallRetried,
    /// The installer fetched the ignition of an installed node: installing again.
    Reinstalling,
    RoleConfigFetched {
        from: SocketAddr,
        file: &'static str,
    },
    /// The first role-config fetch since the install: the node is installed.
    Installed {
        from: SocketAddr,
        file: &'static str,
    },
    ReinstallRequested,
}

/// What a fetch whose step can't be recorded (a full or read-only state disk) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfUnrecorded {
    /// Its answer anyway: the step is made again at the next fetch (a disk offer is the safe
    /// answer, and is offered again at the next power-on until it can be recorded).
    Answer,
    /// A refusal the client retries: an install step the appliance can't remember is not
    /// taken (a node whose ignition fetch went unrecorded would be installed again at every
    /// boot).
    Refuse,
}

/// What one observation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The state after it (the one before, when nothing moved).
    pub after: NodeState,
    /// For a script request: the script it gets.
    pub script: Option<BootScript>,
    /// What the journal announces, in order, once the state is recorded.
    pub news: Vec<News>,
    pub if_unrecorded: IfUnrecorded,
}

/// What `observation` at `now` does to a node in `state`.
pub fn observe(state: NodeState, observation: Observation, now: SystemTime) -> Transition {
    let stay = |script, news, if_unrecorded| Transition {
        after: state,
        script,
        news,
        if_unrecorded,
    };
    match observation {
        Observation::Script {
            from,
            by_node,
            get,
            single_node,
        } => {
            let (script, opens_power_on) = script_for(state, single_node, now);
            let news = if by_node {
                vec![News::ScriptFetched { from }]
            } else {
                Vec::new()
            };
            let after = match state {
                // Only the node itself opens a power-on: no one else can use up its offer.
                NodeState::Installing {
                    ignition_fetched, ..
                } if opens_power_on && by_node && get => NodeState::Installing {
                    ignition_fetched,
                    disk_boot_offered: Some(now),
                },
                _ => state,
            };
            Transition {
                after,
                script: Some(script),
                news,
                if_unrecorded: IfUnrecorded::Answer,
            }
        }
        Observation::Ignition { from } => {
            let again = match state {
                NodeState::NotInstalled => None,
                NodeState::Installing { .. } => Some(News::InstallRetried),
                // Booted its installer again (its ISO, a changed boot order): installing
                // again, not installed until the new system reports.
                NodeState::Installed { .. } => Some(News::Reinstalling),
            };
            Transition {
                after: NodeState::Installing {
                    ignition_fetched: now,
                    disk_boot_offered: None,
                },
                script: None,
                news: std::iter::once(News::IgnitionFetched { from })
                    .chain(again)
                    .collect(),
                if_unrecorded: IfUnrecorded::Refuse,
            }
        }
        Observation::RoleConfig {
            by_installed_system: false,
            ..
        } => stay(None, Vec::new(), IfUnrecorded::Answer),
        Observation::RoleConfig { from, file, .. } => match state {
            NodeState::Installed { .. } => stay(
                None,
                vec![News::RoleConfigFetched { from, file }],
                IfUnrecorded::Refuse,
            ),
            _ => Transition {
                after: NodeState::Installed { since: now },
                script: None,
                news: vec![
                    News::RoleConfigFetched { from, file },
                    News::Installed { from, file },
                ],
                if_unrecorded: IfUnrecorded::Refuse,
            },
        },
        Observation::ReinstallRequested => Transition {
            after: NodeState::NotInstalled,
            script: None,
            news: vec![News::ReinstallRequested],
            if_unrecorded: IfUnrecorded::Refuse,
        },
    }
}

/// The script a network boot at `now` gets, and whether it opens a power-on (the first offer
/// of the disk since the ignition fetch).
///
/// A single node's installed system never reports here (it builds its own config), so once its
/// live system has its ignition every network boot tries the disk: BIOS falls through to the
/// live system when the disk does not boot; on UEFI, `okd-appliance node reinstall` starts
/// over.
fn script_for(state: NodeState, single_node: bool, now: SystemTime) -> (BootScript, bool) {
    match state {
        NodeState::Installed { .. } => (BootScript::LocalBoot, false),
        NodeState::NotInstalled => (BootScript::Install, false),
        NodeState::Installing { .. } if single_node => (BootScript::TryDisk, false),
        NodeState::Installing {
            disk_boot_offered: None,
            ..
        } => (BootScript::TryDisk, true),
        NodeState::Installing {
            disk_boot_offered: Some(offered),
            ..
        } => {
            // A clock set back puts the offer in the future: the same power-on, unless by more
            // than a window (then no power-on could still be walking).
            let same_power_on = match now.duration_since(offered) {
                Ok(since) => since < POWER_ON_WINDOW,
                Err(ahead) => ahead.duration() < POWER_ON_WINDOW,
            };
            if same_power_on {
                (BootScript::TryDisk, false)
            } else {
                // The disk was tried in an earlier power-on and brought up no installed system.
                (BootScript::Install, false)
            }
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let date = |t: &SystemTime| httpdate::fmt_http_date(*t);
        match self {
            NodeState::NotInstalled => f.write_str("not installed"),
            NodeState::Installing {
                ignition_fetched,
                disk_boot_offered,
            } => {
                write!(f, "installing (ignition fetched {}", date(ignition_fetched))?;
                if let Some(offered) = disk_boot_offered {
                    write!(f, ", disk boot offered {}", date(offered))?;
                }
                f.write_str(")")
            }
            NodeState::Installed { since } => write!(f, "installed (since {})", date(since)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn installing(offered: Option<SystemTime>) -> NodeState {
        NodeState::Installing {
            ignition_fetched: at(1_000),
            disk_boot_offered: offered,
        }
    }

    fn from() -> SocketAddr {
        "192.0.2.10:40000".parse().unwrap()
    }

    fn ignition() -> Observation {
        Observation::Ignition { from: from() }
    }

    fn script(by_node: bool, get: bool) -> Observation {
        Observation::Script {
            from: from(),
            by_node,
            get,
            single_node: false,
        }
    }

    fn role() -> Observation {
        Observation::RoleConfig {
            from: from(),
            file: "master.ign",
            by_installed_system: true,
        }
    }

    #[test]
    fn a_node_is_installed_only_once_its_system_fetched_the_role_config() {
        let t = observe(NodeState::NotInstalled, ignition(), at(1_000));
        assert_eq!(t.after, installing(None));
        assert_eq!(t.news, [News::IgnitionFetched { from: from() }]);
        assert_eq!(t.if_unrecorded, IfUnrecorded::Refuse);
        // The install is retried: a fresh attempt, no disk boot offered yet.
        let t = observe(installing(Some(at(2_000))), ignition(), at(3_000));
        assert_eq!(
            t.after,
            NodeState::Installing {
                ignition_fetched: at(3_000),
                disk_boot_offered: None
            }
        );
        assert_eq!(
            t.news,
            [News::IgnitionFetched { from: from() }, News::InstallRetried]
        );
        let t = observe(installing(None), role(), at(4_000));
        assert_eq!(t.after, NodeState::Installed { since: at(4_000) });
        let (from, file) = (from(), "master.ign");
        assert_eq!(
            t.news,
            [
                News::RoleConfigFetched { from, file },
                News::Installed { from, file }
            ]
        );
        // A later fetch of the role config is news, not a new install, and keeps the time.
        let t = observe(t.after, role(), at(5_000));
        assert_eq!(t.after, NodeState::Installed { since: at(4_000) });
        assert_eq!(t.news, [News::RoleConfigFetched { from, file }]);
        // An installer fetching the ignition again (a reinstall from an ISO, say): not
        // installed until the new system reports.
        let t = observe(t.after, ignition(), at(6_000));
        assert_eq!(t.news, [News::IgnitionFetched { from }, News::Reinstalling]);
        assert!(matches!(t.after, NodeState::Installing { .. }));
    }

    #[test]
    fn a_single_node_s_live_system_merging_its_config_is_no_step() {
        let live = Observation::RoleConfig {
            from: from(),
            file: "bootstrap-in-place-for-live-iso.ign",
            by_installed_system: false,
        };
        let t = observe(installing(None), live, at(2_000));
        assert_eq!(t.after, installing(None));
        assert!(t.news.is_empty());
    }

    #[test]
    fn every_network_boot_of_one_power_on_gets_the_same_answer() {
        let now = at(100_000);
        // The first network boot after the install opens the power-on...
        let t = observe(installing(None), script(true, true), now);
        assert_eq!(t.script, Some(BootScript::TryDisk));
        assert_eq!(t.after, installing(Some(now)));
        assert_eq!(t.news, [News::ScriptFetched { from: from() }]);
        assert_eq!(t.if_unrecorded, IfUnrecorded::Answer);
        // ...and every network entry the firmware tries in it is told the same, without
        // opening another.
        for since in [0, 1, 30, 120, POWER_ON_WINDOW.as_secs() - 1] {
            let t = observe(
                installing(Some(now)),
                script(true, true),
                at(100_000 + since),
            );
            assert_eq!(
                t.script,
                Some(BootScript::TryDisk),
                "{since} s after the offer"
            );
            assert_eq!(t.after, installing(Some(now)));
        }
        // A network boot after the window is a later power-on: the disk did not bring up an
        // installed system.
        let later = at(100_000 + POWER_ON_WINDOW.as_secs());
        let t = observe(installing(Some(now)), script(true, true), later);
        assert_eq!(t.script, Some(BootScript::Install));
        assert_eq!(t.after, installing(Some(now)));
        // A clock set back by a little is still the same power-on; by more than a window, not.
        let back = |secs| observe(installing(Some(now)), script(true, true), at(secs)).script;
        assert_eq!(back(100_000 - 60), Some(BootScript::TryDisk));
        assert_eq!(
            back(100_000 - 2 * POWER_ON_WINDOW.as_secs()),
            Some(BootScript::Install)
        );
    }

    #[test]
    fn only_the_node_s_own_get_opens_a_power_on() {
        let now = at(100_000);
        for (by_node, get) in [(false, true), (true, false), (false, false)] {
            let t = observe(installing(None), script(by_node, get), now);
            assert_eq!(t.script, Some(BootScript::TryDisk));
            assert_eq!(t.after, installing(None), "by_node {by_node}, get {get}");
            assert_eq!(t.news.is_empty(), !by_node);
        }
    }

    #[test]
    fn installed_nodes_boot_their_disk_and_others_install() {
        let now = at(100_000);
        let installed = NodeState::Installed { since: at(1) };
        assert_eq!(
            observe(installed, script(true, true), now).script,
            Some(BootScript::LocalBoot)
        );
        assert_eq!(
            observe(NodeState::NotInstalled, script(true, true), now).script,
            Some(BootScript::Install)
        );
        // A single node never reports its installed system: it always tries its disk, and
        // opens no power-on.
        let single = Observation::Script {
            from: from(),
            by_node: true,
            get: true,
            single_node: true,
        };
        for state in [installing(Some(SystemTime::UNIX_EPOCH)), installing(None)] {
            let t = observe(state, single, now);
            assert_eq!(t.script, Some(BootScript::TryDisk));
            assert_eq!(t.after, state);
        }
    }

    #[test]
    fn a_reinstall_request_forgets_the_install_from_any_state() {
        for state in [
            NodeState::NotInstalled,
            installing(Some(at(2))),
            NodeState::Installed { since: at(3) },
        ] {
            let t = observe(state, Observation::ReinstallRequested, at(10));
            assert_eq!(t.after, NodeState::NotInstalled);
            assert_eq!(t.news, [News::ReinstallRequested]);
            assert_eq!(t.if_unrecorded, IfUnrecorded::Refuse);
        }
    }
}

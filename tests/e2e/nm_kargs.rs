//! The nodes' `ip=` kernel arguments as CoreOS's initramfs reads them: NetworkManager's own
//! nm-initrd-generator (`$OKD_NM_INITRD_GENERATOR`, which tests/run.sh unpacks from Debian's
//! network-manager package; or `nm-initrd-generator` in `PATH`) turns what `okd-appliance node
//! kargs` prints for each node into the profiles NetworkManager brings up, printed with `-s`.
//! Every node of config/dual-stack.yml must get one profile bound to its MAC with its IPv6
//! address static (and the IPv6 gateway) and IPv4 by DHCP, on the PXE and on the ISO path; a
//! single-stack node's arguments must leave NetworkManager's default (DHCP and IPv6
//! autoconfiguration on every NIC) exactly as it was before dual-stack nodes got arguments.
//! No root needed: the generator only reads its arguments and writes to stdout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use harness::skip_or_fail;

use crate::support::{appliance, stage_config};

/// The generator, or `None` after a loud skip (a failure with `CI=true`).
fn generator() -> Option<String> {
    let tool = std::env::var("OKD_NM_INITRD_GENERATOR")
        .unwrap_or_else(|_| "nm-initrd-generator".to_owned());
    if harness::which(&tool).is_some() {
        Some(tool)
    } else {
        skip_or_fail(
            "NetworkManager's nm-initrd-generator",
            &format!("{tool} not found (tests/run.sh unpacks it and sets OKD_NM_INITRD_GENERATOR)"),
        )
        .then_some(tool)
    }
}

/// A test's generator and `config/NAME.yml`, staged in a temporary directory.
struct Setup {
    tool: String,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

/// [`Setup`] for `config/NAME.yml`, or `None` without the generator.
fn setup(name: &str) -> Option<Setup> {
    let tool = generator()?;
    let dir = tempfile::tempdir().unwrap();
    let config = stage_config(name, dir.path());
    Some(Setup {
        tool,
        config,
        _dir: dir,
    })
}

/// The command line a node's initramfs reads: `line` with `rd.neednet=1` ahead, as
/// coreos-installer's service writes it for the installed system's first boot (the live PXE
/// initramfs needs the network for its rootfs anyway).
fn cmdline(line: &str) -> Vec<&str> {
    std::iter::once("rd.neednet=1")
        .chain(line.split(' '))
        .collect()
}

/// One profile as the generator prints it: `section.key` -> value.
type Profile = BTreeMap<String, String>;

/// What the generator makes of `args` (the live kernel's command line): the host name it sets
/// and each profile by name. Its sysfs is an empty directory and everything it could write goes
/// to a temporary one, so nothing of this machine's own network enters or changes.
fn generate(tool: &str, args: &[&str]) -> (Option<String>, BTreeMap<String, Profile>) {
    let dir = tempfile::tempdir().unwrap();
    let sub = |name: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let out = Command::new(tool)
        .arg("-s")
        .arg("-d")
        .arg(sub("sys"))
        .arg("-c")
        .arg(sub("connections"))
        .arg("-i")
        .arg(sub("initrd"))
        .arg("-r")
        .arg(sub("conf.d"))
        // As in CoreOS's initramfs, which has no /etc/NetworkManager/system-connections: with
        // that directory present, `rd.neednet=1` alone would make no default profile.
        .arg("-p")
        .arg(dir.path().join("no-such-dir"))
        .arg("--")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&text)
}

/// Reads `-s` output: `*** Hostname 'NAME' ***`, `*** Connection 'NAME' ***` followed by a
/// keyfile, `*** Configuration ... ***` (skipped).
fn parse(text: &str) -> (Option<String>, BTreeMap<String, Profile>) {
    let mut hostname = None;
    let mut profiles = BTreeMap::new();
    let mut current: Option<(String, Profile)> = None;
    let mut section = String::new();
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("*** ") {
            if let Some((name, p)) = current.take() {
                profiles.insert(name, p);
            }
            let quoted = head.split('\'').nth(1).unwrap_or_default().to_owned();
            if head.starts_with("Hostname") {
                hostname = Some(quoted);
            } else if head.starts_with("Connection") {
                current = Some((quoted, Profile::new()));
            }
        } else if let Some((_, p)) = &mut current {
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                s.clone_into(&mut section);
            } else if let Some((k, v)) = line.split_once('=') {
                p.insert(format!("{section}.{k}"), v.to_owned());
            }
        }
    }
    if let Some((name, p)) = current {
        profiles.insert(name, p);
    }
    (hostname, profiles)
}

/// A node of a shipped config as its flow mapping line gives it: name, MAC, IPv6 address.
struct Node {
    name: String,
    mac: String,
    ipv6: Option<String>,
}

/// The nodes of `config` written on one line each (`- { name: ..., mac: "...", ... }` in its
/// top-level `nodes:` list, as the shipped examples write most of them).
fn nodes(config: &Path) -> Vec<Node> {
    let text = std::fs::read_to_string(config).unwrap();
    text.lines()
        .skip_while(|l| *l != "nodes:")
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| l.trim_start().strip_prefix("- { name:"))
        .map(|rest| {
            let field = |key: &str| {
                rest.split(", ")
                    .find_map(|kv| kv.trim().strip_prefix(&format!("{key}: ")))
                    .map(|v| {
                        v.trim_matches(|c| c == '"' || c == ' ' || c == '}')
                            .to_owned()
                    })
            };
            Node {
                name: rest.split(',').next().unwrap().trim().to_owned(),
                mac: field("mac").expect("mac"),
                ipv6: field("ipv6"),
            }
        })
        .collect()
}

/// `okd-appliance node kargs NODE CONFIG [--pxe]`, one line.
fn kargs(config: &Path, node: &str, pxe: bool) -> String {
    let mut args = vec!["node", "kargs", node, config.to_str().unwrap()];
    if pxe {
        args.push("--pxe");
    }
    let out = appliance(args);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

#[test]
fn dual_stack_nodes_come_up_with_their_ipv6_address_and_ipv4_by_dhcp() {
    let Some(setup) = setup("dual-stack") else {
        return;
    };
    let (tool, config) = (&setup.tool, &setup.config);
    let nodes = nodes(config);
    assert_eq!(nodes.len(), 5, "the nodes of config/dual-stack.yml");
    for node in &nodes {
        let ipv6 = node.ipv6.as_deref().expect("every node has ipv6");
        for pxe in [false, true] {
            let line = kargs(config, &node.name, pxe);
            let (hostname, profiles) = generate(tool, &cmdline(&line));
            let what = format!(
                "{} ({}): {line}",
                node.name,
                if pxe { "PXE" } else { "ISO" }
            );
            assert_eq!(profiles.len(), 1, "one profile for {what}\n{profiles:#?}");
            let (_, p) = profiles.iter().next().unwrap();
            let get = |k: &str| p.get(k).map(String::as_str);
            assert_eq!(
                get("ethernet.mac-address"),
                Some(node.mac.to_uppercase().as_str()),
                "bound to the node's NIC by MAC: {what}\n{p:#?}"
            );
            assert_eq!(get("connection.interface-name"), None, "{what}\n{p:#?}");
            assert_eq!(
                get("ipv4.method"),
                Some("auto"),
                "IPv4 by DHCP: {what}\n{p:#?}"
            );
            assert_eq!(get("ipv4.may-fail"), Some("false"), "{what}\n{p:#?}");
            assert_eq!(get("ipv6.method"), Some("manual"), "{what}\n{p:#?}");
            assert_eq!(
                get("ipv6.address1"),
                Some(format!("{ipv6}/64,fd00:10::1").as_str()),
                "the node's IPv6 address and the network's gateway: {what}\n{p:#?}"
            );
            assert_eq!(hostname.as_deref(), Some(node.name.as_str()), "{what}");
        }
    }
}

/// Why the plan puts the static argument first: the generator applies `ip=` arguments in
/// order, and `none` disables every family without a static address yet.
#[test]
fn in_the_other_order_the_node_would_have_no_ipv4() {
    let Some(setup) = setup("dual-stack") else {
        return;
    };
    let (tool, config) = (&setup.tool, &setup.config);
    let line = kargs(config, "master-0", false);
    let ip: Vec<&str> = line.split(' ').filter(|a| a.starts_with("ip=")).collect();
    assert_eq!(ip.len(), 2, "{line}");
    let (_, served) = generate(tool, &ip);
    let (_, reversed) = generate(tool, &[ip[1], ip[0]]);
    let method = |profiles: &BTreeMap<String, Profile>| {
        let p = profiles.values().next().unwrap();
        p.get("ipv4.method").cloned().unwrap_or_default()
    };
    assert_eq!(method(&served), "auto");
    assert_eq!(method(&reversed), "disabled");
}

/// A single-stack node gets no `ip=`: NetworkManager's initramfs does what it did before,
/// DHCP and IPv6 autoconfiguration on whatever NIC comes up.
#[test]
fn single_stack_nodes_keep_networkmanagers_default() {
    let Some(setup) = setup("lab") else {
        return;
    };
    let (tool, config) = (&setup.tool, &setup.config);
    let nodes = nodes(config);
    assert!(!nodes.is_empty());
    let (_, default) = generate(tool, &["rd.neednet=1"]);
    let without_uuid = |profiles: BTreeMap<String, Profile>| {
        profiles
            .into_iter()
            .map(|(n, mut p)| {
                p.remove("connection.uuid");
                (n, p)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let default = without_uuid(default);
    let p = default.values().next().expect("a default profile");
    assert_eq!(p.get("ipv4.method").map(String::as_str), Some("auto"));
    assert_eq!(p.get("ipv6.method").map(String::as_str), Some("auto"));
    for node in &nodes {
        assert!(node.ipv6.is_none());
        let line = kargs(config, &node.name, true);
        assert!(!line.contains("ip="), "{line}");
        let (_, profiles) = generate(tool, &cmdline(&line));
        assert_eq!(without_uuid(profiles), default, "{}: {line}", node.name);
    }
}

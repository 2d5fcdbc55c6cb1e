//! The host rules on in-memory cluster files: what must clash, and what must not.

use std::path::Path;
use std::sync::Arc;

use miette::NamedSource;

use super::super::super::{InstallCheck, parse_cluster};
use super::Listed;
use super::conflicts;

/// A cluster file: `name`.lab.example.com on ens19, 10.0.0.0/24 with the appliance at
/// `.appliance`, three masters from `.first`, and `extra` YAML: `network:` keys (indented two
/// spaces, first) and top-level sections after `---sections---`.
fn cluster(name: &str, appliance: u8, first: u8, extra: &str) -> String {
    let (net, sections) = extra.split_once("---sections---\n").unwrap_or((extra, ""));
    let mut text = format!(
        "version: 1\ncluster: {{ name: {name}, base_domain: lab.example.com }}\nnetwork:\n  \
         interface: ens19\n  subnet: 10.0.0.0/24\n  appliance_ip: 10.0.0.{appliance}\n{net}\
         install: {{ ignition_dir: ./{name}-install, artifacts_dir: ./artifacts }}\nnodes:\n"
    );
    for i in 0..3u8 {
        text.push_str(&format!(
            "  - {{ name: master-{i}, role: master, mac: \"52:54:00:{appliance:02x}:00:{i:02x}\", ip: 10.0.0.{} }}\n",
            first + i
        ));
    }
    text.push_str(sections);
    text
}

/// The host file's (empty) source and these cluster files, listed in this order.
fn listed(files: &[String]) -> (super::super::super::diagnostic::Source, Vec<Listed>) {
    let host = Arc::new(NamedSource::new("host.yml", String::new()));
    let members = files
        .iter()
        .enumerate()
        .map(|(slot, text)| {
            let name = format!("c{slot}.yml");
            let (loaded, raw) = parse_cluster(text, &name, Path::new("/tmp"), InstallCheck::Skip)
                .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
            Listed {
                id: loaded.config.cluster.name.clone(),
                name,
                at: raw.version.referenced,
                slot,
                src: Arc::clone(loaded.warnings.source()),
                path: Path::new("/tmp").join(format!("c{slot}.yml")),
                raw,
                config: loaded.config,
            }
        })
        .collect();
    (host, members)
}

/// The codes `check` reports for these cluster files, listed in this order.
fn codes(files: &[String]) -> Vec<&'static str> {
    let (host, members) = listed(files);
    conflicts(&host, &members)
        .into_iter()
        .map(|(_, p)| p.code())
        .collect()
}

#[test]
fn the_services_host_may_be_every_clusters_gateway() {
    let a = cluster("a", 1, 10, "  gateway: 10.0.0.1\n");
    let b = cluster("b", 2, 20, "  gateway: 10.0.0.1\n");
    assert_eq!(codes(&[a, b]), Vec::<&str>::new());
}

#[test]
fn one_segment_has_one_pool_clear_of_every_clusters_addresses() {
    let pool = "  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.150 }\n";
    // The same pool stated by both: the segment's one pool.
    assert_eq!(
        codes(&[cluster("a", 1, 10, pool), cluster("b", 2, 20, pool)]),
        Vec::<&str>::new()
    );
    // b's appliance address, and then b's node, in a's pool.
    assert_eq!(
        codes(&[cluster("a", 1, 10, pool), cluster("b", 120, 20, "")]),
        ["host::pool-overlap"]
    );
    // b's three nodes: one each.
    assert_eq!(
        codes(&[cluster("a", 1, 10, pool), cluster("b", 2, 100, "")]),
        ["host::pool-overlap"; 3]
    );
    // Another pool overlapping it.
    let other = "  dhcp_pool: { start: 10.0.0.140, end: 10.0.0.160 }\n";
    assert_eq!(
        codes(&[cluster("a", 1, 10, pool), cluster("b", 2, 20, other)]),
        ["host::pool-overlap"]
    );
}

#[test]
fn a_segments_gateway_and_mtu_are_one() {
    let a = cluster("a", 1, 10, "  gateway: 10.0.0.254\n  mtu: 1500\n");
    let same = cluster("b", 2, 20, "  gateway: 10.0.0.254\n");
    assert_eq!(codes(&[a.clone(), same]), Vec::<&str>::new());
    let other = cluster("b", 2, 20, "  gateway: 10.0.0.253\n  mtu: 9000\n");
    assert_eq!(
        codes(&[a, other]),
        ["host::segment-mismatch", "host::segment-mismatch"]
    );
}

#[test]
fn ipv6_addresses_clash_like_ipv4_ones() {
    let v6 = "  ipv6: { subnet: \"fd00::/64\", appliance_ip: \"fd00::1\" }\n";
    // Apart in IPv4, one appliance address in IPv6.
    let a = cluster("a", 1, 10, v6);
    let b = cluster("b", 2, 20, v6);
    assert_eq!(codes(&[a, b]), ["host::frontend-collision"]);
}

#[test]
fn a_wildcard_listener_meets_every_address_on_its_port_but_dhcp_is_the_segments() {
    // Both on ens19: their DHCP sockets are the segment's one socket, not a clash.
    let wildcard = "---sections---\nlisten: { api: [\"0.0.0.0:6443\"] }\n";
    assert_eq!(
        codes(&[cluster("a", 1, 10, wildcard), cluster("b", 2, 20, "")]),
        ["host::listener-collision"]
    );
    // Another port: no clash; port 0 is a free port.
    let elsewhere = "---sections---\nlisten: { api: [\"0.0.0.0:7443\"], http: [\"0.0.0.0:0\"] }\n";
    let zero = "---sections---\nlisten: { http: [\"0.0.0.0:0\"] }\n";
    assert_eq!(
        codes(&[cluster("a", 1, 10, elsewhere), cluster("b", 2, 20, zero)]),
        Vec::<&str>::new()
    );
}

#[test]
fn one_bmc_is_one_machine_however_its_url_is_written() {
    let redfish = "---sections---\ncontrol:\n  provider: redfish\n  redfish: { username: u, \
                   password_file: /etc/p, ca_file: /etc/ca.pem }\n";
    // The first master's BMC at `url`, the others' each its own.
    let with_bmc = |name: &str, appliance: u8, first: u8, url: &str| {
        let mut text = cluster(name, appliance, first, redfish);
        for i in 0..3u8 {
            let ip = first + i;
            let own = if i == 0 {
                url.to_owned()
            } else {
                format!("https://bmc-{name}-{i}.example.com")
            };
            text = text.replace(
                &format!("ip: 10.0.0.{ip} }}"),
                &format!("ip: 10.0.0.{ip}, machine: {{ bmc: {{ url: \"{own}\" }} }} }}"),
            );
        }
        text
    };
    // A BMC's root and one of its systems, with the port written out: one machine.
    let a = with_bmc("a", 1, 10, "https://bmc.example.com/");
    let b = with_bmc(
        "b",
        2,
        20,
        "https://BMC.example.com:443/redfish/v1/Systems/1",
    );
    assert_eq!(codes(&[a, b]), ["host::machine-collision"]);
    // Two systems of one BMC: two machines (paths as written: Redfish's are case-sensitive).
    let a = with_bmc("a", 1, 10, "https://bmc.example.com/redfish/v1/Systems/1");
    let b = with_bmc("b", 2, 20, "https://bmc.example.com/redfish/v1/Systems/2");
    assert_eq!(codes(&[a, b]), Vec::<&str>::new());
}

#[test]
fn one_ignition_dir_however_its_path_is_written() {
    let a = cluster("a", 1, 10, "");
    let b = cluster("b", 2, 20, "").replace("./b-install", "./x/../a-install");
    assert_eq!(codes(&[a, b]), ["host::shared-ignition-dir"]);
}

#[test]
fn one_interface_serves_one_pool_and_dhcp_needs_an_interface_to_share() {
    // Two pools on ens19 that don't overlap: the second would never be served.
    let a = cluster(
        "a",
        1,
        10,
        "  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.120 }\n",
    );
    let b = cluster(
        "b",
        2,
        20,
        "  dhcp_pool: { start: 10.0.0.130, end: 10.0.0.150 }\n",
    );
    assert_eq!(codes(&[a.clone(), b]), ["host::second-pool"]);
    // The same pool stated twice is the segment's one pool.
    let same = cluster(
        "b",
        2,
        20,
        "  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.120 }\n",
    );
    assert_eq!(codes(&[a.clone(), same]), Vec::<&str>::new());
    // A cluster whose DHCP is another server's may keep its own pool written down.
    let off = cluster(
        "b",
        2,
        20,
        "  dhcp_pool: { start: 10.0.0.130, end: 10.0.0.150 }\n---sections---\nlisten: { dhcp: [] }\n",
    );
    assert_eq!(codes(&[a, off]), Vec::<&str>::new());
    // Without network.interface, two clusters' DHCP can't be told apart.
    let bare = |name: &str, appliance: u8, first: u8| {
        let listen = format!("---sections---\nlisten: {{ dhcp: [\"10.0.0.{appliance}:67\"] }}\n");
        cluster(name, appliance, first, &listen).replace("  interface: ens19\n", "")
    };
    assert_eq!(
        codes(&[bare("a", 1, 10), bare("b", 2, 20)]),
        ["host::dhcp-without-interface"]
    );
}

/// The messages the pair of `hosts` gets against these cluster files (and `shared`).
fn pair_messages(files: &[String], hosts: [&str; 2], shared: Option<&str>) -> Vec<String> {
    let (host, members) = listed(files);
    let at = members[0].at;
    let hosts = hosts.map(|h| h.parse().unwrap());
    let shared = shared.map(|a| crate::config::SharedFrontend {
        v4: a.parse().unwrap(),
        v6: None,
        default_cluster: None,
    });
    super::pair(&host, (&hosts, at, &[at, at]), &members, shared.as_ref())
        .into_iter()
        .map(|(_, p)| {
            assert_eq!(p.code(), "host::ha");
            p.to_string()
        })
        .collect()
}

#[test]
fn a_hosts_pair_takes_two_own_addresses_of_one_segment() {
    let a = cluster(
        "a",
        1,
        10,
        "  gateway: 10.0.0.254\n  dhcp_pool: { start: 10.0.0.100, end: 10.0.0.150 }\n",
    );
    let b = cluster("b", 2, 20, "");
    let clean = pair_messages(&[a.clone(), b.clone()], ["10.0.0.3", "10.0.0.4"], None);
    assert_eq!(clean, Vec::<String>::new());
    let each = |hosts: [&str; 2], shared: Option<&str>| {
        pair_messages(&[a.clone(), b.clone()], hosts, shared)
    };
    assert_eq!(
        each(["10.0.0.2", "10.0.0.254"], Some("10.0.0.4")),
        [
            "ha host 10.0.0.2 is the appliance_ip of cluster b, a virtual address",
            "ha host 10.0.0.254 is the gateway of cluster a",
        ]
    );
    assert_eq!(
        each(["10.0.0.4", "10.0.0.11"], Some("10.0.0.4")),
        [
            "ha host 10.0.0.4 is the shared frontend, a virtual address",
            "ha host 10.0.0.11 is node master-1 of cluster a",
        ]
    );
    assert_eq!(
        each(["10.0.0.255", "10.0.0.120"], None),
        [
            "ha host 10.0.0.255 is not a host address of 10.0.0.0/24",
            "ha host 10.0.0.120 is in the DHCP pool of cluster a",
        ]
    );
    assert_eq!(
        each(["192.168.1.3", "10.0.0.4"], None),
        ["ha host 192.168.1.3 is on no cluster's subnet"]
    );
    // A listener on the replication port of a host's address (or every address).
    let c = cluster(
        "c",
        5,
        30,
        "---sections---\nlisten: { http: [\"0.0.0.0:7443\"] }\n",
    );
    assert_eq!(
        pair_messages(&[a.clone(), c], ["10.0.0.3", "10.0.0.4"], None),
        [
            "cluster c listens on 0.0.0.0:7443, the pair's replication port on ha host 10.0.0.3",
            "cluster c listens on 0.0.0.0:7443, the pair's replication port on ha host 10.0.0.4",
        ]
    );
    // Every cluster needs an interface to hold its address.
    let bare = cluster("d", 6, 40, "").replace("  interface: ens19\n", "");
    assert_eq!(
        pair_messages(&[a, bare], ["10.0.0.3", "10.0.0.4"], None),
        ["cluster d has no network.interface, and the pair adds its appliance_ip to one"]
    );
    assert_eq!(super::ha::REPLICATION_PORT, crate::replication::PORT);
}

/// The host file's secrets and state, and another cluster's ignition files, are refused in a
/// cluster's `artifacts_dir` (issue 39: `/artifacts/` served the host's API token, and with it a
/// stranger reinstalled a node); apart from it, nothing is.
#[test]
fn an_artifacts_dir_may_hold_none_of_the_hosts_secrets_nor_another_clusters_ignition() {
    use super::{HostSecrets, exposure};
    let messages = |secrets: &HostSecrets, files: &[String]| -> Vec<String> {
        let (_, members) = listed(files);
        let mut out = Vec::new();
        exposure(secrets, &members, &mut out);
        out.into_iter().map(|(_, p)| p.to_string()).collect()
    };
    let apart = [cluster("okd", 1, 2, ""), cluster("test", 21, 22, "")];
    let host = HostSecrets {
        state_dir: "/var/lib/okd-appliance".into(),
        files: vec![
            ("the host file's API token", "/etc/okd/api-token".into()),
            ("the host file's pair secret", "/etc/okd/ha-secret".into()),
        ],
    };
    assert!(messages(&host, &apart).is_empty());
    // Every cluster serves /tmp/artifacts here (the loader's directory).
    let exposed = HostSecrets {
        state_dir: "/tmp/artifacts/state".into(),
        files: vec![
            (
                "the host file's API token",
                "/tmp/artifacts/api-token".into(),
            ),
            (
                "the host file's pair secret",
                "/tmp/artifacts/../artifacts/ha".into(),
            ),
        ],
    };
    let found = messages(&exposed, &apart[..1]);
    for what in [
        "holds the host file's state directory",
        "holds the host file's API token",
        "holds the host file's pair secret",
    ] {
        assert!(found.iter().any(|m| m.contains(what)), "{what}: {found:?}");
    }
    let nested = [
        cluster("okd", 1, 2, ""),
        cluster("test", 21, 22, "")
            .replace("./test-install", "./artifacts/test-install")
            .replace(
                "artifacts_dir: ./artifacts",
                "artifacts_dir: ./artifacts-test",
            ),
    ];
    let found = messages(&host, &nested);
    assert!(
        found
            .iter()
            .any(|m| m.contains("holds cluster test's ignition directory")),
        "{found:?}"
    );
}

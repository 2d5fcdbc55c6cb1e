//! The DNS service end to end: the real `okd-appliance serve` in a services namespace listening
//! on 10.99.0.1:53 and [fd99::1]:53, asked by `dig` and `kdig` from node namespaces.
//!
//! Clients: `n1` at 10.99.0.11 (inside `recursion_allowed: [10.99.0.0/28]`) and, where access
//! control matters, `n2` at 10.99.0.200 (outside it). The forwarding test puts dnsmasq in a third
//! namespace at 10.99.0.53:5353 as the upstream.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use harness::{Process, Topology, require_root, require_tools, wait_until};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::dns_support::{
    DigRun, Printed, Rr, client_socket, dig_command, dig_in, listen_section, parse_rr,
    query_message, start_appliance, udp_exchange, wait_reply, write_config,
};
use crate::support::appliance;

const DOMAIN: &str = "okd.lab.example.com";
const SERVER4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
const SERVER6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1));
/// The negative TTL: min(SOA TTL 300, SOA MINIMUM 60) (RFC 2308 section 5).
const NEGATIVE_TTL: u32 = 60;
/// Six TXT strings of 150 octets at `big`: about 1 KB, more than 512 octets, less than 1232.
const BIG_TXT: usize = 6;

fn big_text(i: usize) -> String {
    format!("{i}{}", "x".repeat(149))
}

/// The test cluster. `dns_extra` goes into the `dns:` section, `nodes_extra` after the nodes.
fn config(dns_extra: &str, nodes_extra: &str) -> String {
    let mut big = String::new();
    for i in 0..BIG_TXT {
        big.push_str(&format!(
            "    - {{ name: big, type: TXT, value: \"{}\" }}\n",
            big_text(i)
        ));
    }
    format!(
        r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network:
  subnet: 10.99.0.0/24
  appliance_ip: 10.99.0.1
  ipv6: {{ subnet: "fd99::/64", appliance_ip: "fd99::1" }}
  upstream_dns: ["10.99.0.53:5353"]
nodes:
  - {{ name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.99.0.7 }}
  - {{ name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.99.0.2, ipv6: "fd99::2" }}
  - {{ name: master-1, role: master, mac: "52:54:00:00:00:03", ip: 10.99.0.3, ipv6: "fd99::3" }}
  - {{ name: master-2, role: master, mac: "52:54:00:00:00:04", ip: 10.99.0.4, ipv6: "fd99::4" }}
  - {{ name: worker-0, role: worker, mac: "52:54:00:00:00:05", ip: 10.99.0.5 }}
{nodes_extra}install: {{ ignition_dir: ./install_dir, artifacts_dir: ./artifacts }}
dns:
  legacy_etcd: true
  recursion_allowed: [10.99.0.0/28]
{dns_extra}  records:
    - {{ name: registry, type: A, value: 10.99.0.1 }}
    - {{ name: nfs, type: CNAME, value: registry }}
    - {{ name: mail, type: MX, value: 10 registry }}
    - {{ name: info, type: TXT, value: "okd-appliance e2e" }}
{big}{listen}"#,
        listen = listen_section(&["10.99.0.1:53", "[fd99::1]:53"]),
    )
}

fn fqdn(label: &str) -> String {
    if label.is_empty() {
        format!("{DOMAIN}.")
    } else {
        format!("{label}.{DOMAIN}.")
    }
}

/// Asserts a positive authoritative answer and returns it.
#[track_caller]
fn positive(run: &DigRun, what: &str) -> Printed {
    let r = run.last().clone();
    assert_eq!(r.status, "NOERROR", "{what}:\n{}", run.stdout);
    assert!(r.has_flag("aa"), "{what}: AA not set:\n{}", run.stdout);
    assert!(
        !r.answer.is_empty(),
        "{what}: empty answer:\n{}",
        run.stdout
    );
    // Minimal responses: no NS records in the authority section of a positive answer.
    assert!(r.authority.is_empty(), "{what}: authority:\n{}", run.stdout);
    r
}

/// Asserts a negative authoritative answer (`status` NXDOMAIN or NOERROR/NODATA): empty answer,
/// the zone's SOA alone in the authority section with the negative TTL.
#[track_caller]
fn negative(run: &DigRun, status: &str, zone: &str, what: &str) {
    let r = run.last();
    assert_eq!(r.status, status, "{what}:\n{}", run.stdout);
    assert!(r.has_flag("aa"), "{what}: AA not set:\n{}", run.stdout);
    assert!(r.answer.is_empty(), "{what}: answer:\n{}", run.stdout);
    assert_eq!(r.authority.len(), 1, "{what}:\n{}", run.stdout);
    let soa = &r.authority[0];
    assert_eq!(soa.rtype, "SOA", "{what}:\n{}", run.stdout);
    assert_eq!(soa.owner.to_ascii_lowercase(), zone, "{what}");
    assert_eq!(
        soa.ttl, NEGATIVE_TTL,
        "{what}: negative TTL:\n{}",
        run.stdout
    );
}

fn owners(rrs: &[Rr], rtype: &str) -> Vec<String> {
    let mut v: Vec<String> = rrs
        .iter()
        .filter(|r| r.rtype == rtype)
        .map(|r| r.owner.to_ascii_lowercase())
        .collect();
    v.sort();
    v
}

#[test]
fn answers_every_record_kind_to_dig_and_kdig() {
    if !require_root() || !require_tools(&["dig", "kdig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &config("", ""));
    let topo = Topology::new("dnsa").expect("topology");
    let n1 = topo
        .add_node("n1", "10.99.0.11/24", Some("fd99::11/64"))
        .expect("node");
    let mut app = start_appliance(topo.services(), &cfg);

    for tool in ["dig", "kdig"] {
        let ask = |args: &[&str]| dig_in(&n1, tool, SERVER4, args);
        let what = |q: &str| format!("{tool} {q}");

        // A, AAAA, for the appliance's names and the nodes'.
        let r = positive(&ask(&[&fqdn("api"), "A"]), &what("api A"));
        assert_eq!(r.rdata("A"), ["10.99.0.1"]);
        assert_eq!(r.answer[0].ttl, 300);
        let r = positive(&ask(&[&fqdn("api-int"), "AAAA"]), &what("api-int AAAA"));
        assert_eq!(r.rdata("AAAA"), ["fd99::1"]);
        let r = positive(&ask(&[&fqdn("master-1"), "AAAA"]), &what("master-1 AAAA"));
        assert_eq!(r.rdata("AAAA"), ["fd99::3"]);
        let r = positive(&ask(&[&fqdn("bootstrap"), "A"]), &what("bootstrap A"));
        assert_eq!(r.rdata("A"), ["10.99.0.7"]);

        // PTR, IPv4 and IPv6; the appliance's address names both api and api-int.
        let r = positive(&ask(&["-x", "10.99.0.2"]), &what("-x 10.99.0.2"));
        assert_eq!(r.rdata("PTR"), [fqdn("master-0")]);
        let r = positive(&ask(&["-x", "10.99.0.1"]), &what("-x 10.99.0.1"));
        assert_eq!(r.rdata("PTR"), [fqdn("api-int"), fqdn("api")], "sorted");
        let r = positive(&ask(&["-x", "fd99::4"]), &what("-x fd99::4"));
        assert_eq!(r.rdata("PTR"), [fqdn("master-2")]);
        assert!(r.answer[0].owner.ends_with(".9.9.d.f.ip6.arpa."), "{r:?}");

        // SRV (legacy etcd) with the targets' addresses in the additional section.
        let srv = fqdn("_etcd-server-ssl._tcp");
        let r = positive(&ask(&[&srv, "SRV"]), &what("etcd SRV"));
        assert_eq!(
            r.rdata("SRV"),
            (0..3)
                .map(|i| format!("0 10 2380 {}", fqdn(&format!("etcd-{i}"))))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            owners(&r.additional, "A"),
            [fqdn("etcd-0"), fqdn("etcd-1"), fqdn("etcd-2")]
        );

        // NS at the apex with ns1's A and AAAA as additional data; SOA.
        let r = positive(&ask(&[&fqdn(""), "NS"]), &what("NS"));
        assert_eq!(r.rdata("NS"), [fqdn("ns1")]);
        assert_eq!(owners(&r.additional, "A"), [fqdn("ns1")]);
        assert_eq!(owners(&r.additional, "AAAA"), [fqdn("ns1")]);
        let r = positive(&ask(&[&fqdn(""), "SOA"]), &what("SOA"));
        let soa = r.rdata("SOA");
        let fields: Vec<&str> = soa[0].split_whitespace().collect();
        assert_eq!(fields[..2], [fqdn("ns1"), fqdn("hostmaster")]);
        assert_eq!(fields[3..], ["3600", "600", "1209600", "60"]);

        // CNAME from the extra records, followed to the target's A in the same answer.
        let r = positive(&ask(&[&fqdn("nfs"), "A"]), &what("nfs A"));
        assert_eq!(r.rdata("CNAME"), [fqdn("registry")]);
        assert_eq!(r.rdata("A"), ["10.99.0.1"]);
        assert_eq!(owners(&r.answer, "A"), [fqdn("registry")]);

        // MX with the exchange's address; TXT.
        let r = positive(&ask(&[&fqdn("mail"), "MX"]), &what("MX"));
        assert_eq!(r.rdata("MX"), [format!("10 {}", fqdn("registry"))]);
        assert_eq!(owners(&r.additional, "A"), [fqdn("registry")]);
        let r = positive(&ask(&[&fqdn("info"), "TXT"]), &what("TXT"));
        assert_eq!(r.rdata("TXT"), ["\"okd-appliance e2e\""]);

        // The *.apps wildcard answers one and two labels deep, owned by the query name.
        for name in ["console-openshift-console.apps", "a.b.apps"] {
            let r = positive(&ask(&[&fqdn(name), "A"]), &what(name));
            assert_eq!(r.rdata("A"), ["10.99.0.1"]);
            assert_eq!(owners(&r.answer, "A"), [fqdn(name)]);
        }

        // NXDOMAIN vs NODATA, each with the SOA and the negative TTL.
        let zone = fqdn("");
        negative(
            &ask(&[&fqdn("nope"), "A"]),
            "NXDOMAIN",
            &zone,
            &what("nope"),
        );
        negative(
            &ask(&[&fqdn("x.api"), "A"]),
            "NXDOMAIN",
            &zone,
            &what("x.api"),
        );
        negative(
            &ask(&[&fqdn("api"), "TXT"]),
            "NOERROR",
            &zone,
            &what("api TXT"),
        );
        // An empty non-terminal exists: NODATA, never NXDOMAIN (RFC 8020).
        negative(&ask(&[&fqdn("apps"), "A"]), "NOERROR", &zone, &what("apps"));
        negative(
            &ask(&[&fqdn("_tcp"), "SRV"]),
            "NOERROR",
            &zone,
            &what("_tcp"),
        );
        negative(
            &ask(&["-x", "10.99.0.99"]),
            "NXDOMAIN",
            "0.99.10.in-addr.arpa.",
            &what("-x 10.99.0.99"),
        );

        // Over IPv6 too.
        let run = dig_in(&n1, tool, SERVER6, &[&fqdn("api"), "AAAA"]);
        let r = positive(&run, &what("api AAAA over IPv6"));
        assert_eq!(r.rdata("AAAA"), ["fd99::1"]);

        // A name with records beyond 512 octets: TCP gets all of them.
        let r = positive(&ask(&["+tcp", &fqdn("big"), "TXT"]), &what("big over TCP"));
        assert_eq!(r.rdata("TXT").len(), BIG_TXT);

        // Zone transfers are refused by default (axfr_allowed is empty).
        let run = ask(&[&fqdn(""), "AXFR"]);
        assert!(
            run.stdout.contains("Transfer failed") || run.stderr.contains("'REFUSED'"),
            "{tool} AXFR not refused:\n{}{}",
            run.stdout,
            run.stderr
        );
    }

    // dig prints owner names with their case; the query's case comes back (kdig prints
    // names lowercased, so this is dig's check alone).
    let run = dig_in(&n1, "dig", SERVER4, &["ApI.OkD.LaB.ExAmPlE.CoM.", "A"]);
    let r = positive(&run, "mixed case");
    assert_eq!(
        r.answer[0].owner, "ApI.OkD.LaB.ExAmPlE.CoM.",
        "{}",
        run.stdout
    );
    let run = dig_in(&n1, "dig", SERVER4, &["Foo.ApPs.okd.lab.example.com.", "A"]);
    assert_eq!(
        positive(&run, "wildcard case").answer[0].owner,
        "Foo.ApPs.okd.lab.example.com."
    );

    // EDNS: the OPT record is there, advertising 1232; without EDNS none comes back.
    let run = dig_in(&n1, "dig", SERVER4, &[&fqdn("api")]);
    assert_eq!(run.last().edns, Some((0, 1232)), "{}", run.stdout);
    let run = dig_in(&n1, "kdig", SERVER4, &["+edns", &fqdn("api")]);
    assert_eq!(run.last().edns, Some((0, 1232)), "{}", run.stdout);
    let run = dig_in(&n1, "dig", SERVER4, &["+noedns", &fqdn("api")]);
    assert_eq!(run.last().edns, None, "{}", run.stdout);
    // An unknown EDNS version gets BADVERS with our version 0 in the OPT (RFC 6891 6.1.3).
    let run = dig_in(
        &n1,
        "dig",
        SERVER4,
        &["+edns=1", "+noednsnegotiation", &fqdn("api")],
    );
    let r = run.last();
    assert_eq!(r.status, "BADVERS", "{}", run.stdout);
    assert_eq!(r.edns, Some((0, 1232)), "{}", run.stdout);
    assert!(r.answer.is_empty());
    let run = dig_in(&n1, "kdig", SERVER4, &["+edns=1", &fqdn("api")]);
    assert_eq!(run.replies[0].status, "BADVERS", "{}", run.stdout);
    // Error replies keep the OPT record too (RFC 6891 section 6.1.1): a NOTIFY gets NOTAUTH
    // (the appliance is nobody's secondary; Knot answers the same), and says so in EDNS.
    let run = dig_in(&n1, "dig", SERVER4, &["+opcode=notify", &fqdn(""), "SOA"]);
    assert_eq!(run.last().status, "NOTAUTH", "{}", run.stdout);
    assert_eq!(run.last().edns, Some((0, 1232)), "{}", run.stdout);

    // Truncation: without EDNS the ~1 KB answer does not fit in 512 octets. With +ignore dig
    // shows the truncated reply; without it dig retries over TCP and gets every record.
    let run = dig_in(
        &n1,
        "dig",
        SERVER4,
        &["+noedns", "+ignore", &fqdn("big"), "TXT"],
    );
    let r = run.last();
    assert!(r.has_flag("tc"), "no TC:\n{}", run.stdout);
    assert!(r.answer.is_empty(), "{}", run.stdout);
    let run = dig_in(&n1, "dig", SERVER4, &["+noedns", &fqdn("big"), "TXT"]);
    assert!(
        run.stdout.contains("Truncated, retrying in TCP mode"),
        "{}",
        run.stdout
    );
    let r = positive(&run, "big after TCP retry");
    let mut want: Vec<String> = (0..BIG_TXT)
        .map(|i| format!("\"{}\"", big_text(i)))
        .collect();
    want.sort();
    assert_eq!(r.rdata("TXT"), want);
    // With EDNS (1232 octets) the same answer fits in one UDP reply.
    let run = dig_in(&n1, "dig", SERVER4, &["+ignore", &fqdn("big"), "TXT"]);
    assert!(!run.last().has_flag("tc"), "{}", run.stdout);
    assert_eq!(run.last().rdata("TXT").len(), BIG_TXT);

    app.assert_running().unwrap();
}

/// Records of a zone file written by `render --format bind`, SOA left out (it spans lines).
fn zone_file_records(path: &std::path::Path) -> Vec<Rr> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: Vec<Rr> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with([';', '$', ' ', '\t']))
        .filter_map(parse_rr)
        .filter(|r| r.rtype != "SOA")
        .collect();
    out.sort();
    out
}

/// `dig AXFR` from `node`: every record printed, in order.
fn axfr(node: &harness::Node, zone: &str) -> (Vec<Rr>, String) {
    let run = dig_in(node, "dig", SERVER4, &["+noall", "+answer", zone, "AXFR"]);
    let records = run.stdout.lines().filter_map(parse_rr).collect();
    (records, run.stdout)
}

#[test]
fn refuses_outsiders_transfers_to_allowed_and_rate_limits() {
    if !require_root() || !require_tools(&["dig", "kdig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let extra =
        "  axfr_allowed: [10.99.0.11]\n  rate_limit: { responses_per_second: 5, slip: 2 }\n";
    let cfg = write_config(dir.path(), &config(extra, ""));
    let topo = Topology::new("dnsx").expect("topology");
    let n1 = topo.add_node("n1", "10.99.0.11/24", None).expect("node");
    let n2 = topo.add_node("n2", "10.99.0.200/24", None).expect("node");
    let mut app = start_appliance(topo.services(), &cfg);

    for tool in ["dig", "kdig"] {
        // A foreign name from outside recursion_allowed: REFUSED, not authoritative, no RA.
        let run = dig_in(&n2, tool, SERVER4, &["www.example.test.", "A"]);
        let r = run.last();
        assert_eq!(r.status, "REFUSED", "{tool}:\n{}", run.stdout);
        assert!(
            !r.has_flag("aa") && !r.has_flag("ra"),
            "{tool}:\n{}",
            run.stdout
        );
        assert!(r.answer.is_empty());
        // The cluster zone is still answered for it, without RA.
        let run = dig_in(&n2, tool, SERVER4, &[&fqdn("api"), "A"]);
        let r = positive(&run, &format!("{tool} api from outside"));
        assert!(!r.has_flag("ra"), "{}", run.stdout);
        // Inside recursion_allowed RA is set.
        let run = dig_in(&n1, tool, SERVER4, &[&fqdn("api"), "A"]);
        assert!(
            positive(&run, "api from n1").has_flag("ra"),
            "{}",
            run.stdout
        );
    }

    // AXFR: refused to n2, allowed to n1, and exactly the rendered zone (SOA at both ends).
    let (records, stdout) = axfr(&n2, &fqdn(""));
    assert!(records.is_empty(), "{stdout}");
    assert!(stdout.contains("Transfer failed"), "{stdout}");
    let zones = dir.path().join("zones");
    let out = appliance([
        "render".as_ref(),
        cfg.as_os_str(),
        "--format".as_ref(),
        "bind".as_ref(),
        "--serial".as_ref(),
        "1".as_ref(),
        "-o".as_ref(),
        zones.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for zone in [
        fqdn(""),
        "0.99.10.in-addr.arpa.".to_owned(),
        "0.0.0.0.0.0.0.0.0.0.0.0.9.9.d.f.ip6.arpa.".to_owned(),
    ] {
        let (records, stdout) = axfr(&n1, &zone);
        assert!(records.len() >= 3, "{zone}:\n{stdout}");
        assert_eq!(records[0].rtype, "SOA", "{zone}:\n{stdout}");
        assert_eq!(records.last(), records.first(), "{zone}: SOA at both ends");
        let mut body: Vec<Rr> = records[1..records.len() - 1].to_vec();
        assert!(body.iter().all(|r| r.rtype != "SOA"), "{zone}:\n{stdout}");
        body.sort();
        let file = zone_file_records(&zones.join(format!("{zone}zone")));
        assert_eq!(
            body, file,
            "{zone}: AXFR differs from the rendered zone file"
        );
    }

    // RRL: 30 identical queries at once. n2 (outside recursion_allowed) gets at most a
    // second's worth of answers (5, or 10 if the burst straddles a second), every other limited
    // reply as an empty TC reply, the rest dropped; n1 is exempt and gets all 30.
    let burst = |node: &harness::Node| -> (usize, usize) {
        let server = SocketAddr::new(SERVER4, 53);
        node.run(move || {
            let socket = client_socket(server);
            for id in 0..30u16 {
                // A name asked nowhere else in this test, so the budget is untouched.
                let q = query_message(id, &fqdn("master-1"), RecordType::A, Some(1232));
                socket.send_to(&q.to_vec().unwrap(), server).unwrap();
            }
            // Generous: a reply late by a busy machine's stall must still count; the wait
            // after the last reply is paid once.
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let (mut full, mut slipped) = (0, 0);
            let mut buf = [0u8; 4096];
            // Bounded: 30 replies at most, each within 2 s of the previous one.
            for _ in 0..30 {
                let Ok((n, _)) = socket.recv_from(&mut buf) else {
                    break;
                };
                let m = Message::from_vec(&buf[..n]).unwrap();
                if m.metadata.truncation && m.answers.is_empty() {
                    slipped += 1;
                } else if m.answers.len() == 1 {
                    full += 1;
                }
            }
            (full, slipped)
        })
        .unwrap()
    };
    let (full, slipped) = burst(&n2);
    assert!((5..=10).contains(&full), "n2: {full} full answers");
    assert!(slipped >= 5, "n2: only {slipped} truncated slips");
    assert!(full + slipped < 30, "n2: nothing dropped");
    let (full, slipped) = burst(&n1);
    assert_eq!((full, slipped), (30, 0), "n1 is exempt from RRL");

    app.assert_running().unwrap();
}

#[test]
fn reload_on_sighup_publishes_a_new_node() {
    if !require_root() || !require_tools(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &config("", ""));
    let topo = Topology::new("dnsr").expect("topology");
    let n1 = topo.add_node("n1", "10.99.0.11/24", None).expect("node");
    let mut app = start_appliance(topo.services(), &cfg);

    let serial = |run: &DigRun| -> u32 {
        let soa = run.last().rdata("SOA");
        soa[0].split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let before = serial(&dig_in(&n1, "dig", SERVER4, &[&fqdn(""), "SOA"]));
    let zone = fqdn("");
    negative(
        &dig_in(&n1, "dig", SERVER4, &[&fqdn("worker-1"), "A"]),
        "NXDOMAIN",
        &zone,
        "worker-1 before the reload",
    );

    let node = "  - { name: worker-1, role: worker, mac: \"52:54:00:00:00:06\", ip: 10.99.0.6 }\n";
    // Same state_dir as before (write_config adds it): changing it would take a restart.
    write_config(dir.path(), &config("", node));
    let reloads = |p: &Process| p.stderr().matches("reloaded: now serving plan").count();
    assert_eq!(reloads(&app), 0);
    kill(Pid::from_raw(app.pid() as i32), Signal::SIGHUP).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || reloads(&app) == 1),
        "no reload logged\n{}",
        app.log_tails()
    );

    let run = dig_in(&n1, "dig", SERVER4, &[&fqdn("worker-1"), "A"]);
    assert_eq!(
        positive(&run, "worker-1 after the reload").rdata("A"),
        ["10.99.0.6"]
    );
    let run = dig_in(&n1, "dig", SERVER4, &["-x", "10.99.0.6"]);
    assert_eq!(
        positive(&run, "PTR after the reload").rdata("PTR"),
        [fqdn("worker-1")]
    );
    let after = serial(&dig_in(&n1, "dig", SERVER4, &[&fqdn(""), "SOA"]));
    assert!(after > before, "serial {before} -> {after}");
    app.assert_running().unwrap();
}

/// Lines in dnsmasq's query log for `name` type A.
fn upstream_saw(upstream: &Process, name: &str) -> usize {
    upstream
        .stderr()
        .lines()
        .filter(|l| {
            l.to_ascii_lowercase()
                .contains(&format!("query[a] {name} "))
        })
        .count()
}

#[test]
fn forwards_for_allowed_clients_with_a_cache_and_bounded_failure() {
    if !require_root() || !require_tools(&["dig", "kdig", "dnsmasq"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &config("", ""));
    let topo = Topology::new("dnsf").expect("topology");
    let n1 = topo.add_node("n1", "10.99.0.11/24", None).expect("node");
    let n2 = topo.add_node("n2", "10.99.0.200/24", None).expect("node");
    let up = topo.add_node("up", "10.99.0.53/24", None).expect("node");
    let pid_file = dir.path().join("dnsmasq.pid");
    let mut upstream = up
        .spawn(
            "dnsmasq",
            [
                "dnsmasq",
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--address=/example.test/192.0.2.10",
                "--local-ttl=300",
                "--listen-address=10.99.0.53",
                "--bind-interfaces",
                "--port=5353",
                "--user=root",
                "--group=root",
                "--log-queries",
                "--log-facility=-",
                &format!("--pid-file={}", pid_file.display()),
            ],
        )
        .expect("spawn dnsmasq");
    let upstream_addr = SocketAddr::from(([10, 99, 0, 53], 5353));
    assert!(
        wait_reply(
            &n1,
            upstream_addr,
            "ready.example.test.",
            RecordType::A,
            |_| true
        ),
        "dnsmasq not answering\n{}",
        upstream.log_tails()
    );
    let mut app = start_appliance(topo.services(), &cfg);
    let www = "www.example.test.";

    // First query: forwarded (recursion available, not authoritative), logged by the upstream.
    let run = dig_in(&n1, "dig", SERVER4, &[www, "A"]);
    let r = run.last();
    assert_eq!(r.status, "NOERROR", "{}", run.stdout);
    assert_eq!(r.rdata("A"), ["192.0.2.10"], "{}", run.stdout);
    assert!(r.has_flag("ra") && !r.has_flag("aa"), "{}", run.stdout);
    let first_ttl = r.answer[0].ttl;
    assert!(first_ttl <= 300, "{}", run.stdout);
    assert_eq!(upstream_saw(&upstream, "www.example.test"), 1);

    // Again, with both clients, in another case: served from the cache, the upstream never
    // hears of it. The client outside recursion_allowed is refused whatever the cache holds.
    let run = dig_in(&n1, "kdig", SERVER4, &["WwW.ExAmPlE.TeSt.", "A"]);
    assert_eq!(run.last().rdata("A"), ["192.0.2.10"], "{}", run.stdout);
    assert!(run.last().answer[0].ttl <= first_ttl);
    let run = dig_in(&n2, "dig", SERVER4, &[www, "A"]);
    assert_eq!(run.last().status, "REFUSED", "{}", run.stdout);
    assert_eq!(
        upstream_saw(&upstream, "www.example.test"),
        1,
        "cache missed"
    );

    // Stop the upstream: the cached answer is still served.
    upstream.stop().unwrap();
    // Its link goes down too, so the upstream is silent rather than refusing (no ICMP): the
    // forwarder's own time limit must end the wait. (The namespace stays: removing a bridge
    // port can change the bridge's MAC address under the other nodes' ARP caches.)
    up.ip(["link", "set", "eth0", "down"]).unwrap();
    let run = dig_in(&n1, "dig", SERVER4, &[www, "A"]);
    assert_eq!(run.last().rdata("A"), ["192.0.2.10"], "{}", run.stdout);

    // A name never asked before: SERVFAIL within 3.5 s, while the cluster zone answers at once.
    let mut pending = Process::spawn(
        "dig-new-name",
        dig_command(
            &n1,
            "dig",
            SERVER4,
            &["new.example.test.", "A"],
            &["+time=6", "+tries=1"],
        ),
    )
    .unwrap();
    let server = SocketAddr::new(SERVER4, 53);
    // The forward lasts 3 s; dig has sent its query well within the first half second even on
    // a busy machine (and if not, the quick query below is only less of a test).
    std::thread::sleep(Duration::from_millis(500));
    let quick = n1
        .run(move || {
            let socket = client_socket(server);
            let q = query_message(7, &fqdn("api"), RecordType::A, None)
                .to_vec()
                .unwrap();
            let t = Instant::now();
            let reply = udp_exchange(&socket, server, &q).expect("api answered");
            (t.elapsed(), Message::from_vec(&reply).unwrap())
        })
        .unwrap();
    assert_eq!(quick.1.metadata.response_code, ResponseCode::NoError);
    assert!(
        quick.0 < Duration::from_millis(250),
        "the cluster zone took {:?} while a forward was pending",
        quick.0
    );
    let status = pending
        .wait_timeout(Duration::from_secs(8))
        .unwrap()
        .expect("dig finished");
    assert!(status.success(), "{}", pending.log_tails());
    let printed = crate::dns_support::parse_dig(&pending.stdout());
    assert_eq!(
        printed.last().map(|p| p.status.as_str()),
        Some("SERVFAIL"),
        "{}",
        pending.stdout()
    );
    // dig's own measure, from its query to the reply: process start and this test's polling
    // of dig's exit are not the forwarder's time.
    let stdout = pending.stdout();
    let msec: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix(";; Query time: ")?.strip_suffix(" msec"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no query time printed:\n{stdout}"));
    assert!(msec < 3500, "SERVFAIL took {msec} ms");
    app.assert_running().unwrap();
}

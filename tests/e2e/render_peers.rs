//! `okd-appliance render` writes configs the replaced tools accept unchanged: zone files for
//! NSD, Knot and BIND, a dnsmasq.conf and a haproxy.cfg, for every shipped example.

use harness::require_tools;

use crate::support::{appliance, run_ok, stage_config};

const EXAMPLES: [&str; 4] = ["lab", "compact", "large", "dual-stack"];

#[test]
fn zone_files_load_in_nsd_knot_and_bind() {
    if !require_tools(&["nsd-checkzone", "kzonecheck", "named-checkzone"]) {
        return;
    }
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let config = stage_config(name, dir.path());
        let zones = zone_files_load(&config, dir.path());
        // The forward zone plus at least one reverse zone per address family.
        assert!(zones >= 2, "{name}: only {zones} zone files");
        if name == "large" {
            assert_eq!(zones, 17, "a /20 splits into sixteen /24 reverse zones");
        }
    }
    // Host files (several clusters): every cluster's forward zone, and one reverse zone for
    // the clusters sharing a subnet, holding both clusters' PTRs.
    let hosts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/hosts");
    for (name, expected) in [("two-labs", 4), ("one-subnet", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let zones = zone_files_load(&hosts.join(format!("{name}.yml")), dir.path());
        assert_eq!(zones, expected, "{name}");
        if name == "one-subnet" {
            let shared =
                std::fs::read_to_string(dir.path().join("zones/0.0.10.in-addr.arpa.zone")).unwrap();
            for ptr in [
                "master-0.okd.lab.example.com.",
                "master-0.ci.lab.example.com.",
            ] {
                assert!(shared.contains(&format!("PTR   {ptr}")), "{shared}");
            }
        }
    }
}

/// Renders `config`'s zones into `dir`/zones and loads each in NSD's, Knot's and BIND's
/// checkers; how many zone files there were.
fn zone_files_load(config: &std::path::Path, dir: &std::path::Path) -> usize {
    let out_dir = dir.join("zones");
    let out = appliance([
        "render".as_ref(),
        config.as_os_str(),
        "--format".as_ref(),
        "bind".as_ref(),
        "--serial".as_ref(),
        "2026010101".as_ref(),
        "--output".as_ref(),
        out_dir.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}: {}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut zones = 0;
    for entry in std::fs::read_dir(&out_dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.to_str().unwrap();
        let origin = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches("zone");
        run_ok("nsd-checkzone", &[origin, file]);
        run_ok("kzonecheck", &["-o", origin, file]);
        run_ok(
            "named-checkzone",
            &["-k", "fail", "-n", "fail", origin, file],
        );
        zones += 1;
    }
    zones
}

/// Renders every example in `format` into `file` and runs `tool` with `args` (the file last).
fn peer_accepts(format: &str, file: &str, tool: &str, args: &[&str]) {
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let config = stage_config(name, dir.path());
        let out = appliance([
            "render".as_ref(),
            config.as_os_str(),
            "--format".as_ref(),
            format.as_ref(),
        ]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg = dir.path().join(file);
        std::fs::write(&cfg, &out.stdout).unwrap();
        let mut argv = args.to_vec();
        argv.push(cfg.to_str().unwrap());
        run_ok(tool, &argv);
    }
}

#[test]
fn haproxy_accepts_the_rendered_config() {
    if !require_tools(&["haproxy"]) {
        return;
    }
    peer_accepts("haproxy", "haproxy.cfg", "haproxy", &["-c", "-f"]);
    // A host file's: every cluster's frontends in one HAProxy, names apart.
    let hosts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/hosts");
    for name in ["two-labs", "one-subnet", "shared-frontend"] {
        let dir = tempfile::tempdir().unwrap();
        let out = appliance([
            "render".as_ref(),
            hosts.join(format!("{name}.yml")).as_os_str(),
            "--format".as_ref(),
            "haproxy".as_ref(),
        ]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, &out.stdout).unwrap();
        run_ok("haproxy", &["-c", "-f", cfg.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        if name == "shared-frontend" {
            // One frontend per port at the shared address, routing by name to each cluster.
            assert!(text.contains("frontend shared-api\n"), "{text}");
            assert!(!text.contains("frontend okd-api\n"), "{text}");
            assert!(
                text.contains("use_backend test-ingress-https if { req_ssl_sni -m end -i .apps.test.lab.example.com }"),
                "{text}"
            );
        } else {
            assert!(text.contains("frontend okd-api\n"), "{text}");
        }
    }
}

#[test]
fn dnsmasq_accepts_the_rendered_config() {
    if require_tools(&["dnsmasq"]) {
        peer_accepts("dnsmasq", "dnsmasq.conf", "dnsmasq", &["--test", "-C"]);
    }
}

#[test]
fn check_passes_every_shipped_example() {
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let config = stage_config(name, dir.path());
        let out = appliance(["check".as_ref(), config.as_os_str()]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(": ok: cluster"));
    }
}

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
        let out_dir = dir.path().join("zones");
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
            "{name}: {}",
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
        // The forward zone plus at least one reverse zone per address family.
        assert!(zones >= 2, "{name}: only {zones} zone files");
        if name == "large" {
            assert_eq!(zones, 17, "a /20 splits into sixteen /24 reverse zones");
        }
    }
}

#[test]
fn haproxy_accepts_the_rendered_config() {
    if !require_tools(&["haproxy"]) {
        return;
    }
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let config = stage_config(name, dir.path());
        let out = appliance([
            "render".as_ref(),
            config.as_os_str(),
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
    }
}

#[test]
fn dnsmasq_accepts_the_rendered_config() {
    if !require_tools(&["dnsmasq"]) {
        return;
    }
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let config = stage_config(name, dir.path());
        let out = appliance([
            "render".as_ref(),
            config.as_os_str(),
            "--format".as_ref(),
            "dnsmasq".as_ref(),
        ]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg = dir.path().join("dnsmasq.conf");
        std::fs::write(&cfg, &out.stdout).unwrap();
        run_ok("dnsmasq", &["--test", "-C", cfg.to_str().unwrap()]);
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

//! The machine specs each shipped config derives (`plan::machines`), pinned by golden files:
//! `appliance/tests/golden/<config>.machines`. `UPDATE_GOLDEN=1` rewrites them
//! (refused when `CI` is set).

mod golden_check;

use std::path::{Path, PathBuf};

use golden_check::check_golden;
use okd_appliance::config;
use okd_appliance::plan::Plan;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn shipped_configs_derive_the_golden_machines() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let loaded = config::parse(
            &text,
            "x.yml",
            path.parent().unwrap(),
            config::InstallCheck::Skip,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let plan = Plan::derive(&loaded.config, 1);
        assert_eq!(plan.control.machines.len(), loaded.config.nodes.len());
        let mut text = format!("{}\n", plan.control);
        for m in &plan.control.machines {
            text.push_str(&format!("{m}\n"));
        }
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let golden = repo().join(format!("appliance/tests/golden/{stem}.machines"));
        check_golden(&golden, &text);
        seen += 1;
    }
    assert!(seen >= 6, "expected the shipped configs, saw {seen}");
}

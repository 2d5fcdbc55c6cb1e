//! Config fixtures: every shipped config validates and derives the golden plan and renders the
//! golden install-config.yaml (with the fixed file contents of `install_inputs`); every file in
//! `config/bad/` fails with exactly the golden diagnostics beside it; `config/warn/` files pass
//! with exactly their golden warnings.
//!
//! `UPDATE_GOLDEN=1 cargo test --test fixtures` rewrites the golden files (refused when `CI` is
//! set); review the diff.

mod golden_check;
mod install_inputs;

use std::path::{Path, PathBuf};

use golden_check::check_golden;
use okd_appliance::config::{self, LoadError, RenderStyle};
use okd_appliance::plan::Plan;
use okd_appliance::render::{self, Format};

const SERIAL: u32 = 2_026_010_101;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files
}

/// Loads a cluster file fixture under the name it has relative to the repository, so goldens
/// are portable.
fn load(path: &Path) -> Result<config::Loaded, LoadError> {
    match load_any(path)? {
        config::Target::Cluster(loaded) => Ok(loaded),
        config::Target::Host(_) => panic!("{} is a host file", path.display()),
    }
}

#[test]
fn shipped_configs_validate_and_derive_the_golden_plan() {
    let files = yaml_files(&repo().join("config"));
    assert!(
        files.len() >= 5,
        "expected the shipped examples, found {files:?}"
    );
    for path in files {
        let loaded = load(&path).unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
        assert!(
            loaded.warnings.is_empty(),
            "{}",
            loaded.warnings.render(RenderStyle::Plain)
        );
        let plan = Plan::derive(&loaded.config, SERIAL);
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let text = &render::render(&plan, Format::Human)[0].text;
        check_golden(
            &repo().join(format!("appliance/tests/golden/{stem}.plan")),
            text,
        );
        // The human view leaves fields out; this form has every field a service reads.
        check_golden(
            &repo().join(format!("appliance/tests/golden/{stem}.plan.full")),
            &complete_form(&plan),
        );
        let install_config = okd_appliance::install_config::render(
            &loaded.config,
            &install_inputs::inputs(&loaded.config),
        )
        .unwrap();
        check_golden(
            &repo().join(format!("appliance/tests/golden/{stem}.install-config.yaml")),
            &install_config,
        );
    }
}

/// Every field of the plan, with the checkout's own path replaced so goldens are portable.
fn complete_form(plan: &Plan) -> String {
    let root = repo().canonicalize().unwrap();
    let text = format!("{plan:#?}\n");
    text.replace(&repo().display().to_string(), "<repo>")
        .replace(&root.display().to_string(), "<repo>")
}

#[test]
fn lab_renders_the_golden_peer_configs() {
    let loaded = load(&repo().join("config/lab.yml")).unwrap();
    let plan = Plan::derive(&loaded.config, SERIAL);
    for (format, ext) in [
        (Format::Dnsmasq, "dnsmasq.conf"),
        (Format::Haproxy, "haproxy.cfg"),
    ] {
        let text = &render::render(&plan, format)[0].text;
        check_golden(
            &repo().join(format!("appliance/tests/golden/lab.{ext}")),
            text,
        );
    }
    let zones = render::render(&plan, Format::Bind);
    assert_eq!(zones.len(), 2);
    check_golden(
        &repo().join("appliance/tests/golden/lab.zone"),
        &zones[0].text,
    );
}

#[test]
fn bad_configs_fail_with_the_golden_diagnostics() {
    let files = yaml_files(&repo().join("config/bad"));
    assert!(
        files.len() >= 15,
        "expected at least 15 bad fixtures, found {}",
        files.len()
    );
    for path in files {
        fails_with_the_golden_diagnostics(&path, load(&path));
    }
}

/// `loaded` (from `path`) failed, with exactly the diagnostics of the `.stderr` beside it.
fn fails_with_the_golden_diagnostics<T>(path: &Path, loaded: Result<T, LoadError>) {
    let Err(err) = loaded else {
        panic!("{} loaded but is a bad fixture", path.display())
    };
    check_golden(
        &path.with_extension("stderr"),
        &err.render(RenderStyle::Plain),
    );
}

#[test]
fn warning_configs_pass_with_the_golden_warnings() {
    for path in yaml_files(&repo().join("config/warn")) {
        let loaded = load(&path).unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
        assert!(
            !loaded.warnings.is_empty(),
            "{} raised no warning",
            path.display()
        );
        check_golden(
            &path.with_extension("stderr"),
            &loaded.warnings.render(RenderStyle::Plain),
        );
    }
}

/// Loads a cluster or host file fixture under its name relative to the repository.
fn load_any(path: &Path) -> Result<config::Target, LoadError> {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.strip_prefix(repo()).unwrap().display().to_string();
    config::parse_any(
        &text,
        &name,
        path.parent().unwrap(),
        config::InstallCheck::Skip,
    )
}

fn host_files(dir: &Path) -> Vec<PathBuf> {
    yaml_files(dir)
        .into_iter()
        .filter(|p| config::host::is_host_file(&std::fs::read_to_string(p).unwrap()))
        .collect()
}

/// Host files (issue 26): the shipped ones load with every cluster they list, and their cluster
/// files are servable alone; those in `config/hosts/bad/` fail with exactly the golden
/// diagnostics, each conflict drawn in both files.
#[test]
fn host_files_load_or_fail_with_the_golden_diagnostics() {
    let shipped = host_files(&repo().join("config/hosts"));
    assert!(!shipped.is_empty(), "no host file in config/hosts");
    for path in shipped {
        let target = load_any(&path).unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
        let config::Target::Host(host) = target else {
            panic!("{} is not a host file", path.display())
        };
        assert!(host.clusters.len() >= 2, "{}", path.display());
        for member in &host.clusters {
            let alone = load_any(&member.path)
                .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)));
            let config::Target::Cluster(alone) = alone else {
                panic!("{} is a host file", member.path.display())
            };
            // Behind a shared frontend, a cluster's names point there and its own frontends
            // are the router's; nothing else differs.
            let mut alone = alone.config;
            if let Some(shared) = &host.shared_frontend {
                alone = config::host::routed(alone, shared);
            }
            alone.api.clone_from(&host.api);
            alone.ha.clone_from(&host.ha);
            assert!(
                alone == member.config,
                "{} reads differently alone",
                member.path.display()
            );
        }
    }
    let bad = host_files(&repo().join("config/hosts/bad"));
    assert!(!bad.is_empty(), "no host file in config/hosts/bad");
    for path in bad {
        fails_with_the_golden_diagnostics(&path, load_any(&path));
    }
}

/// A command that takes one cluster's file says so when it is given a host file.
#[test]
fn a_host_file_is_not_a_cluster_file() {
    let path = repo().join("config/hosts/two-labs.yml");
    let err = config::load(&path, config::InstallCheck::Skip).unwrap_err();
    assert!(
        matches!(err, LoadError::HostFile { .. }),
        "{}",
        err.render(RenderStyle::Plain)
    );
    assert!(err.to_string().contains("is a host file"), "{err}");
}

//! The ignition checks against a real directory: for an install (`check --install`) files must
//! exist for every role present and bootstrap.ign be younger than 24 hours (a warning after 12),
//! because their certificates expire; for `serve` and a plain `check` the same findings are
//! warnings, so a services host restarted on day 2 still serves the cluster.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime};

use okd_appliance::config::{self, InstallCheck, LoadError, RealFiles, RenderStyle, Severity};

const CONFIG: &str = r#"version: 1
cluster: { name: okd, base_domain: lab.example.com }
network: { subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }
nodes:
  - { name: bootstrap, role: bootstrap, mac: "52:54:00:00:00:07", ip: 10.0.0.7 }
  - { name: master-0, role: master, mac: "52:54:00:00:00:02", ip: 10.0.0.2 }
install: { ignition_dir: ./install_dir, artifacts_dir: ./artifacts }
"#;

const HOUR: Duration = Duration::from_secs(3600);

fn write(dir: &Path, file: &str, age: Duration) {
    let path = dir.join("install_dir").join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "{}").unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
}

/// As `check --install` loads.
fn load(dir: &Path) -> Result<config::Loaded, LoadError> {
    let files = RealFiles {
        now: SystemTime::now(),
    };
    config::parse(CONFIG, "okd.yml", dir, InstallCheck::Require(&files))
}

/// As `serve` and a plain `check` load.
fn load_for_serving(dir: &Path) -> config::Loaded {
    let files = RealFiles {
        now: SystemTime::now(),
    };
    config::parse(CONFIG, "okd.yml", dir, InstallCheck::Warn(&files))
        .unwrap_or_else(|e| panic!("{}", e.render(RenderStyle::Plain)))
}

fn errors(dir: &Path) -> String {
    match load(dir) {
        Ok(_) => panic!("expected the config to be refused"),
        Err(e) => e.render(RenderStyle::Plain),
    }
}

#[test]
fn fresh_files_for_the_roles_present_pass() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", HOUR);
    write(dir.path(), "master.ign", HOUR);
    // No worker.ign: the config has no workers.
    let loaded = load(dir.path()).unwrap();
    assert!(loaded.warnings.is_empty());
}

#[test]
fn a_missing_directory_is_one_error_with_the_command_that_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = errors(dir.path());
    assert!(out.contains("ignition directory"), "{out}");
    assert!(out.contains("it does not exist"), "{out}");
    // Both commands, each as it runs: the install-config into the directory, then the installer.
    let dir = dir.path().join("install_dir");
    let dir = dir.display();
    assert!(
        out.contains(&format!(
            "`okd-appliance render --format install-config -o {dir} okd.yml`, then `openshift-install create ignition-configs --dir {dir}`"
        )),
        "{out}"
    );
    assert!(out.contains("okd.yml: 1 error, 0 warnings"), "{out}");
}

#[test]
fn a_missing_role_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", HOUR);
    let out = errors(dir.path());
    assert!(
        out.contains("master.ign for the master nodes can't be read"),
        "{out}"
    );
    assert!(!out.contains("bootstrap.ign"), "{out}");
}

#[test]
fn files_older_than_24_hours_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", 30 * HOUR);
    write(dir.path(), "master.ign", HOUR);
    let out = errors(dir.path());
    assert!(out.contains("bootstrap.ign was written 30 h ago"), "{out}");
    assert!(out.contains("expire 24 hours after creation"), "{out}");
}

#[test]
fn files_older_than_12_hours_warn_but_pass() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", 13 * HOUR);
    write(dir.path(), "master.ign", HOUR);
    let loaded = load(dir.path()).unwrap();
    let warnings: Vec<_> = loaded.warnings.iter().collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].severity(), Severity::Warning);
    assert!(
        warnings[0]
            .message()
            .contains("bootstrap.ign was written 13 h ago")
    );
}

#[test]
fn only_bootstrap_ign_ages_out() {
    // master.ign and worker.ign only point at the machine config server: a services host
    // restarted weeks after the install must still start.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", HOUR);
    write(dir.path(), "master.ign", 30 * 24 * HOUR);
    let loaded = load(dir.path()).unwrap();
    assert!(loaded.warnings.is_empty());
}

#[test]
fn for_serving_an_expired_or_missing_install_only_warns() {
    // Day 2: bootstrap.ign ten days old, the bootstrap node still listed.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bootstrap.ign", 240 * HOUR);
    write(dir.path(), "master.ign", 240 * HOUR);
    let loaded = load_for_serving(dir.path());
    let codes: Vec<_> = loaded.warnings.iter().map(|w| w.code()).collect();
    assert_eq!(codes, ["config::ignition-expired"]);
    assert!(
        loaded
            .warnings
            .iter()
            .all(|w| w.severity() == Severity::Warning),
        "{}",
        loaded.warnings.render(RenderStyle::Plain)
    );

    // The install directory deleted (it holds the kubeadmin secrets).
    let empty = tempfile::tempdir().unwrap();
    let loaded = load_for_serving(empty.path());
    let text = loaded.warnings.render(RenderStyle::Plain);
    assert!(text.contains("ignition directory"), "{text}");
    assert!(text.contains("okd.yml: 0 errors, 1 warning"), "{text}");
}

#[test]
fn render_and_fixtures_do_not_look_at_ignition_files() {
    let empty = tempfile::tempdir().unwrap();
    let loaded = config::parse(CONFIG, "okd.yml", empty.path(), InstallCheck::Skip).unwrap();
    assert!(loaded.warnings.is_empty());
}

/// `install.openshift_install`: a path relative to the config, or a release tag (a string: a
/// number such as `4.10` is refused, YAML would make it 4.1) with OKD's releases as the default
/// mirror; a tag that is not one
/// path segment, a mirror that is not http(s) and an unknown key are each one error.
#[test]
fn the_installer_is_a_path_or_a_release() {
    use okd_appliance::config::Installer;
    let with = |installer: &str| {
        let text = CONFIG.replace(
            "artifacts_dir: ./artifacts }",
            &format!("artifacts_dir: ./artifacts, openshift_install: {installer} }}"),
        );
        config::parse(&text, "okd.yml", Path::new("/srv/okd"), InstallCheck::Skip)
    };
    let installer = |installer: &str| with(installer).unwrap().config.install.installer;
    assert_eq!(
        installer("./bin/openshift-install"),
        Some(Installer::Path("/srv/okd/./bin/openshift-install".into()))
    );
    assert_eq!(
        installer("{ release: 4.19.0-okd-scos.1 }"),
        Some(Installer::Release {
            version: "4.19.0-okd-scos.1".into(),
            mirror: Installer::OKD_RELEASES.into()
        })
    );
    assert_eq!(
        installer("{ release: \"4.10\", mirror: \"http://mirror.example.com/okd/\" }"),
        Some(Installer::Release {
            version: "4.10".into(),
            mirror: "http://mirror.example.com/okd".into()
        })
    );
    for (bad, says) in [
        ("{ release: ../4.19 }", "is not a release tag"),
        (
            "{ release: \"4.19\", mirror: ftp://x }",
            "is not an http:// or https:// URL",
        ),
        (
            "{ releas: 4.19 }",
            "unknown key `releas` in openshift_install",
        ),
        ("\"\"", "openshift_install is empty"),
    ] {
        let Err(e) = with(bad) else {
            panic!("{bad} accepted")
        };
        let text = e.render(RenderStyle::Plain);
        assert!(text.contains(says), "{bad}: {text}");
    }
}

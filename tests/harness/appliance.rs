//! Finding and preparing the `okd-appliance` binary under test.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// The repository root (the workspace that holds `config/`).
#[must_use]
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// The `okd-appliance` binary: `$OKD_APPLIANCE_BIN`, or the one cargo built beside this test
/// (same profile, same target directory). `cargo test --workspace` builds it first.
pub fn appliance_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("OKD_APPLIANCE_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().context("can't find the test executable")?;
    // target/<profile>/deps/e2e-<hash> -> target/<profile>/okd-appliance
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("unexpected test executable location")?;
    let bin = profile_dir.join("okd-appliance");
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build -p okd-appliance` (or run `cargo test --workspace`)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Writes the three role ignition files `openshift-install create ignition-configs` would,
/// freshly dated, so validation accepts them. Their content is a minimal valid Ignition config.
pub fn write_install_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for role in ["bootstrap", "master", "worker"] {
        let path = dir.join(format!("{role}.ign"));
        std::fs::write(&path, br#"{"ignition":{"version":"3.2.0"}}"#)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

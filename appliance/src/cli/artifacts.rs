//! `okd-appliance artifacts fetch|import FILE --stream URL|FILE`: the CoreOS PXE files (and the
//! metal image and live ISO when asked) put into `install.artifacts_dir`, each verified against
//! the stream's SHA-256 (and a detached signature with `--key`).
//!
//! Exit codes: 0 every file in place, 1 invalid config or a file that could not be fetched,
//! copied or verified, 2 usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use okd_appliance::artifacts::{self, StreamSource};
use okd_appliance::config;

use super::runtime;

#[derive(Debug, Subcommand)]
pub enum ArtifactsAction {
    /// Download the files, verify them, put them in place.
    ///
    /// A `.part` left by an interrupted run is continued; a file already in place with the
    /// right SHA-256 is skipped; a file with the wrong one is deleted and the exit code is 1.
    Fetch {
        #[command(flatten)]
        args: ArtifactsArgs,
    },
    /// Copy files downloaded by other means, verifying each.
    ///
    /// The files are looked up in DIR under their names on the mirror (the last part of their
    /// URL in the stream).
    Import {
        #[command(flatten)]
        args: ArtifactsArgs,
        /// The directory holding the downloaded files.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct ArtifactsArgs {
    /// The cluster config (YAML), or a host file: where the files go (`install.artifacts_dir`)
    /// and their names.
    file: PathBuf,
    /// With a host file of several clusters: the cluster whose artifacts these are, by its id.
    #[arg(long, value_name = "ID")]
    cluster: Option<String>,
    /// The CoreOS stream metadata, a URL or a file, e.g.
    /// https://builds.coreos.fedoraproject.org/streams/stable.json; without it, what
    /// `<installer> coreos print-stream-json` prints, with `install.openshift_install` set
    /// (the artifacts that release installs).
    #[arg(long, value_name = "URL|FILE", value_parser = parse_stream)]
    stream: Option<StreamSource>,
    /// The architecture, as the stream names it.
    #[arg(long, default_value = "x86_64")]
    arch: String,
    /// Also the metal disk image (raw.xz), kept under its name on the mirror.
    #[arg(long)]
    metal: bool,
    /// Also the live ISO, under `install.artifacts.iso` (default live.iso): the base of the
    /// per-node ISOs served at /iso/<node>.iso.
    #[arg(long)]
    iso: bool,
    /// Also check each file's detached OpenPGP signature against this key file (armored or
    /// binary; Fedora CoreOS: https://fedoraproject.org/fedora.gpg), with gpgv. Signatures come
    /// from the stream's URLs (fetch) or `<name>.sig` beside each file (import), and are kept
    /// beside the artifacts as `<name>.sig`.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// What the configured installer's `coreos print-stream-json` prints, in a temporary file
/// (openshift/installer `pkg/coreoscli/cmd.go`, `printStreamJSON`: the stream metadata of the
/// CoreOS the release installs, on stdout).
fn stream_of_installer(
    one: &super::OneCluster,
    file: &std::path::Path,
) -> Result<tempfile::NamedTempFile, String> {
    use std::io::Write as _;
    let Some(which) = &one.config.install.installer else {
        return Err(
            "--stream is required: name the CoreOS stream metadata, or set install.openshift_install so its `coreos print-stream-json` names it"
                .to_owned(),
        );
    };
    let binary = okd_appliance::installer::binary(which, &super::installer::config_dir(file));
    okd_appliance::installer::trusted(&binary).map_err(|e| match which {
        okd_appliance::config::Installer::Release { .. } if !binary.exists() => format!(
            "{e}: `okd-appliance installer fetch {}` gets it",
            file.display()
        ),
        _ => e,
    })?;
    let shown = format!("{} coreos print-stream-json", binary.display());
    let out = std::process::Command::new(&binary)
        .args(["coreos", "print-stream-json"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("can't run `{shown}`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{shown}` failed ({})", out.status));
    }
    println!("CoreOS stream from `{shown}`");
    let mut file = tempfile::NamedTempFile::new().map_err(|e| format!("a temporary file: {e}"))?;
    file.write_all(&out.stdout)
        .map_err(|e| format!("a temporary file: {e}"))?;
    Ok(file)
}

fn parse_stream(arg: &str) -> Result<StreamSource, String> {
    StreamSource::parse(arg).map_err(|e| format!("{e:#}"))
}

/// `artifacts fetch` and `artifacts import`.
pub fn run(action: ArtifactsAction) -> ExitCode {
    let (args, from) = match action {
        ArtifactsAction::Fetch { args } => (args, None),
        ArtifactsAction::Import { args, from } => (args, Some(from)),
    };
    // The artifacts are usually fetched before `openshift-install create ignition-configs`
    // (whose output expires in 24 hours), so the ignition files are not required here.
    let one = match super::load_one_cluster(
        &args.file,
        args.cluster.as_deref(),
        config::InstallCheck::Skip,
    ) {
        Ok(one) => one,
        Err(code) => return code,
    };
    let install = &one.config.install;
    // Kept until the run ends: the installer's stream, as the file it is read from.
    let from_installer;
    let stream = match args.stream {
        Some(stream) => stream,
        None => match stream_of_installer(&one, &args.file) {
            Ok(file) => {
                from_installer = file;
                StreamSource::File(from_installer.path().to_owned())
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(if install.installer.is_none() { 2 } else { 1 });
            }
        },
    };
    let options = artifacts::Options {
        stream,
        arch: args.arch,
        metal: args.metal,
        iso: args.iso,
        key: args.key,
    };
    // One download at a time: a current-thread runtime is all it needs.
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        match &from {
            None => artifacts::fetch(install, &options).await,
            Some(dir) => artifacts::import(install, &options, dir).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

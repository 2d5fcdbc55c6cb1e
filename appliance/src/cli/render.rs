//! `okd-appliance render FILE [--format F] [--output DIR] [--serial N]`: what the appliance
//! derives from a config (zones, reservations, pools, boot parameters) for reading or as the
//! configs of other tools; the services host's networkd file, keepalived's files for a pair,
//! openshift-install's install-config.yaml.
//!
//! Exit codes: 0 rendered, 1 invalid config or a file that can't be read or written, 2 usage.

use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::ValueEnum;
use okd_appliance::config::{self, InstallCheck};
use okd_appliance::plan::Plan;
use okd_appliance::render::{self, Format};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    Human,
    Bind,
    Dnsmasq,
    Haproxy,
    Networkd,
    Keepalived,
    InstallConfig,
    /// A single node's MachineConfig that keeps its addresses on the installed disk.
    SingleNodeNetwork,
}

impl FormatArg {
    /// The plan renderer, or `None` for `networkd` (the host's set-up, not the plan).
    fn plan_format(self) -> Option<Format> {
        match self {
            FormatArg::Human => Some(Format::Human),
            FormatArg::Bind => Some(Format::Bind),
            FormatArg::Dnsmasq => Some(Format::Dnsmasq),
            FormatArg::Haproxy => Some(Format::Haproxy),
            FormatArg::Networkd
            | FormatArg::Keepalived
            | FormatArg::InstallConfig
            | FormatArg::SingleNodeNetwork => None,
        }
    }
}

/// `render`: the files of `format`, printed or written into `output`; of one cluster of a host
/// file with `cluster`.
pub fn run(
    file: &Path,
    cluster: Option<&str>,
    format: FormatArg,
    output: Option<&Path>,
    serial: Option<u32>,
) -> ExitCode {
    // Zones, pools and reservations have nothing to do with the ignition files.
    let target = match config::load_any(file, InstallCheck::Skip) {
        Ok(target) => target,
        Err(e) => {
            eprint!("{}", e.render(super::style()));
            return ExitCode::from(1);
        }
    };
    let config = match &target {
        config::Target::Cluster(loaded) => {
            eprint!("{}", loaded.warnings.warnings_line());
            match cluster {
                Some(id) if id != loaded.config.cluster.name => {
                    eprintln!(
                        "error: {} is the file of cluster {}, not {id}",
                        file.display(),
                        loaded.config.cluster.name
                    );
                    return ExitCode::from(2);
                }
                _ => &loaded.config,
            }
        }
        config::Target::Host(host) => {
            eprint!("{}", host.warnings.warnings_line());
            if let (FormatArg::Keepalived, Some(_)) = (format, &cluster) {
                eprintln!(
                    "error: a host file's pair moves every cluster's addresses: render keepalived without --cluster"
                );
                return ExitCode::from(2);
            }
            if let (FormatArg::Networkd, Some(_)) = (format, &cluster) {
                eprintln!(
                    "error: a host file's NICs carry every cluster's addresses (clusters on one \
                     interface share its file): render networkd without --cluster"
                );
                return ExitCode::from(2);
            }
            let Some(id) = cluster else {
                return match host_files(host, format, serial_or_now(serial)) {
                    Ok(files) => write_out(&files, format, output),
                    Err(code) => code,
                };
            };
            match host.clusters.iter().find(|m| m.id == id) {
                Some(member) => &member.config,
                None => {
                    eprintln!(
                        "error: {} lists no cluster {id}; its clusters: {}",
                        file.display(),
                        cluster_ids(host)
                    );
                    return ExitCode::from(2);
                }
            }
        }
    };
    let files = if let FormatArg::InstallConfig = format {
        let rendered = okd_appliance::install_config::Inputs::read(config)
            .and_then(|inputs| okd_appliance::install_config::render(config, &inputs));
        match rendered {
            Ok(text) => vec![render::Rendered {
                file_name: okd_appliance::install_config::FILE_NAME.into(),
                text,
            }],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if let FormatArg::SingleNodeNetwork = format {
        match okd_appliance::install_config::single_node::render(config) {
            Ok(text) => vec![render::Rendered {
                file_name: okd_appliance::install_config::single_node::FILE_NAME.into(),
                text,
            }],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if let FormatArg::Keepalived = format {
        match keepalived(&Plan::derive(config, 0), &config.state_dir) {
            Ok(files) => files,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if let Some(format) = format.plan_format() {
        render::render(&Plan::derive(config, serial_or_now(serial)), format)
    } else {
        match okd_appliance::host_network::networkd(config) {
            Ok(file) => vec![render::Rendered {
                file_name: file.file_name,
                text: file.text,
            }],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    };
    write_out(&files, format, output)
}

/// The zones' serial: `--serial`, else the time in seconds (as the appliance numbers them).
fn serial_or_now(serial: Option<u32>) -> u32 {
    serial.unwrap_or_else(|| {
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        u32::try_from(secs).unwrap_or(u32::MAX)
    })
}

/// A host file's views: every cluster's plan (`human`), the zone files of the host, the
/// reverse zones of clusters on one subnet merged (`bind`), one HAProxy for every cluster's
/// frontends (`haproxy`), the pair's keepalived, or one networkd file per cluster NIC with
/// every address its clusters put there (`networkd`). The other formats are one cluster's configs: each cluster's file
/// gives them.
fn host_files(
    host: &config::Host,
    format: FormatArg,
    serial: u32,
) -> Result<Vec<render::Rendered>, ExitCode> {
    use okd_appliance::plan::host::{HostPlan, Member};
    if !matches!(
        format,
        FormatArg::Human
            | FormatArg::Bind
            | FormatArg::Haproxy
            | FormatArg::Keepalived
            | FormatArg::Networkd
    ) {
        eprintln!(
            "error: a host file renders as human, bind (the host's zones), haproxy (every \
             cluster's frontends), keepalived (the host's pair) or networkd (the host's cluster \
             NICs); the other formats are one cluster's: add `--cluster ID` (its clusters: {})",
            cluster_ids(host)
        );
        return Err(ExitCode::from(2));
    }
    if let FormatArg::Networkd = format {
        return match okd_appliance::host_network::networkd_host(host) {
            Ok(files) => Ok(files
                .into_iter()
                .map(|f| render::Rendered {
                    file_name: f.file_name,
                    text: f.text,
                })
                .collect()),
            Err(e) => {
                eprintln!("error: {e}");
                Err(ExitCode::from(1))
            }
        };
    }
    if let FormatArg::Keepalived = format {
        let views =
            okd_appliance::plan::views::HostViews::derive(host, serial, None).map_err(|e| {
                eprintln!(
                    "error: {e}, which the host file's rules should have refused: please report it"
                );
                ExitCode::from(1)
            })?;
        return keepalived(&views.dns, &host.state_dir).map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(1)
        });
    }
    let members = host
        .clusters
        .iter()
        .map(|m| Member {
            id: m.id.clone(),
            plan: std::sync::Arc::new(Plan::derive(&m.config, serial)),
        })
        .collect();
    let plan = HostPlan::assemble(members, serial, None).map_err(|e| {
        eprintln!("error: {e}, which the host file's rules should have refused: please report it");
        ExitCode::from(1)
    })?;
    if let FormatArg::Bind = format {
        return Ok(render::bind::render(plan.zones()));
    }
    if let FormatArg::Haproxy = format {
        let clusters: Vec<(&str, &Plan)> = plan
            .members()
            .iter()
            .map(|m| (m.id.as_str(), &*m.plan))
            .collect();
        let addresses = host
            .shared_frontend
            .as_ref()
            .map(config::SharedFrontend::addresses);
        let shared = host
            .shared_frontend
            .as_ref()
            .map(|s| render::haproxy::Shared {
                addresses: addresses.as_deref().unwrap_or_default(),
                default_cluster: s.default_cluster.as_deref(),
            });
        return Ok(vec![render::Rendered {
            file_name: "haproxy.cfg".into(),
            text: render::haproxy::render_host(&clusters, shared.as_ref()),
        }]);
    }
    let mut text = String::new();
    for (m, c) in plan.members().iter().zip(&host.clusters) {
        text.push_str(&format!("# cluster {} ({})\n", m.id, c.name));
        for f in render::render(&m.plan, Format::Human) {
            text.push_str(&f.text);
        }
        text.push('\n');
    }
    text.push_str("# the host's zones (reverse zones of clusters on one subnet merged)\n");
    for z in plan.zones() {
        text.push_str(&format!(
            "{} serial {}, {} records\n",
            z.origin,
            z.soa().serial,
            z.records.len()
        ));
    }
    Ok(vec![render::Rendered {
        file_name: "plan.txt".into(),
        text,
    }])
}

/// Prints `files`, or writes them into `output` (owner-only for the formats with secrets).
fn write_out(files: &[render::Rendered], format: FormatArg, output: Option<&Path>) -> ExitCode {
    match output {
        None => {
            for f in files {
                print!("{}", f.text);
            }
        }
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("error: can't create {}: {e}", dir.display());
                return ExitCode::from(1);
            }
            // keepalived's files hold the VRRP password, the install-config the pull secret:
            // owner-only.
            let mode = if let FormatArg::Keepalived | FormatArg::InstallConfig = format {
                0o600
            } else {
                0o644
            };
            for f in files {
                let path = dir.join(&f.file_name);
                if let Err(e) = write_mode(&path, &f.text, mode) {
                    eprintln!("error: can't write {}: {e}", path.display());
                    return ExitCode::from(1);
                }
                println!("{}", path.display());
            }
        }
    }
    ExitCode::SUCCESS
}

/// Writes `text` to `path` with `mode`, also when the file is already there with another.
fn write_mode(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(text.as_bytes())
}

/// keepalived's config for both hosts of the pair, naming this binary and the state directory
/// by their absolute paths, with the VRRP password derived from the pair's secret.
fn keepalived(plan: &Plan, state_dir: &Path) -> Result<Vec<render::Rendered>, String> {
    let ha = plan
        .ha
        .as_ref()
        .ok_or("the config has no ha section: keepalived is for a pair of appliances")?;
    let keys =
        okd_appliance::secrets::PairKeys::read(&ha.secret_file).map_err(|e| e.to_string())?;
    let binary = std::env::current_exe().map_err(|e| format!("can't find this binary: {e}"))?;
    let state_dir =
        std::path::absolute(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    render::keepalived::render(plan, &binary, &state_dir, &keys.vrrp_password)
}

/// A host file's cluster ids, for a message.
fn cluster_ids(host: &config::Host) -> String {
    host.clusters
        .iter()
        .map(|m| m.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

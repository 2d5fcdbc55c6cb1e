//! `okd-appliance check FILE [--install | --secret-files]` and `okd-appliance node kargs NODE
//! FILE`: validate a config and list every problem (and what the nodes' boots will fetch from
//! here), print the secret files a config names, print a node's kernel-argument line.
//!
//! `check --install` reports everything an install would hit in one run. When the config's only
//! errors are the install-time ones (ignition files, the kubeconfig `cluster up` reads, the
//! provider's credentials), it loads the config again with them as warnings and goes on: the
//! boot files, the recorded artifacts hashed, every machine asked of its provider (through
//! `control::run`, as `nodes list` does, so a provider that can't be reached or refuses the
//! token stops the preflight rather than the install) and this host's listener addresses; then
//! it exits 1. Every command a message suggests runs as written, with the real file and
//! directory, and miette's lines are not wrapped, so no command is broken across two
//! (`tests/e2e/preflight.rs` runs each).
//!
//! Exit codes: 0 valid (or printed), 1 invalid config (with `--install`, also an ignition file,
//! ISO or artifact that is missing or unusable; for `node kargs`, an unknown node), 2 usage.

use std::path::Path;
use std::process::ExitCode;

use okd_appliance::config::{self, InstallCheck};
use okd_appliance::http::iso::IsoCheck;
use okd_appliance::plan::Plan;

use super::{real_files, style};

/// `check --secret-files`: the config's secret files, absolute, each once; of a host file, every
/// cluster's (the host's API token and pair secret are in each). Their modes are not looked at
/// (this is how a too-open file gets fixed).
pub fn secret_files(file: &Path) -> ExitCode {
    let configs: Vec<config::Config> = match config::load_any(file, InstallCheck::Skip) {
        Ok(config::Target::Cluster(loaded)) => {
            eprint!("{}", loaded.warnings.warnings_line());
            vec![loaded.config]
        }
        Ok(config::Target::Host(host)) => {
            eprint!("{}", host.warnings.warnings_line());
            host.clusters.into_iter().map(|m| m.config).collect()
        }
        Err(e) => {
            eprint!("{}", e.render(style()));
            return ExitCode::from(1);
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for path in configs
        .iter()
        .flat_map(config::secret_files)
        .map(|(_, p)| p)
    {
        match std::path::absolute(&path) {
            Ok(p) if seen.insert(p.clone()) => println!("{}", p.display()),
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

pub fn check(file: &Path, install: bool) -> ExitCode {
    let files = real_files();
    let mode = if install {
        InstallCheck::Require(&files)
    } else {
        InstallCheck::Warn(&files)
    };
    let mut tally = Tally::default();
    let (target, failed) = match config::load_any(file, mode) {
        Ok(target) => (target, false),
        Err(e) => {
            // What only an install needs (ignition files, the kubeconfig, the provider's
            // credentials) is an error with --install and a warning without. When those are
            // all the errors, the rest of the preflight runs too: one run reports everything
            // the install would hit, not one stage at a time, and the summary comes last.
            match install.then(|| config::load_any(file, InstallCheck::Warn(&files))) {
                Some(Ok(target)) => {
                    eprint!("{}", e.render_each(style()));
                    tally.errors += e.error_count();
                    tally.warnings += e.warning_count();
                    (target, true)
                }
                _ => {
                    eprint!("{}", e.render(style()));
                    return ExitCode::from(1);
                }
            }
        }
    };
    let preflight = Preflight {
        install,
        // The warnings are the errors printed above, as warnings: not twice.
        shown: failed,
    };
    let code = match &target {
        config::Target::Cluster(loaded) => {
            if !preflight.shown && !loaded.warnings.is_empty() {
                eprint!("{}", loaded.warnings.render_each(style()));
                tally.warnings += loaded.warnings.count(config::Severity::Warning);
            }
            check_cluster(
                file,
                &loaded.config,
                &Plan::derive(&loaded.config, 0),
                preflight,
                &mut tally,
            )
        }
        config::Target::Host(host) => check_host(file, host, preflight, &mut tally),
    };
    if !failed && code == ExitCode::SUCCESS {
        show_descriptors(&target, &mut tally);
    }
    tally.summary(file);
    if failed {
        return ExitCode::from(1);
    }
    code
}

/// Every problem `check` reports, in the config's diagnostics and in its own lines, for the
/// summary line that ends the run.
#[derive(Debug, Default)]
struct Tally {
    errors: usize,
    warnings: usize,
}

impl Tally {
    fn error(&mut self, problem: impl std::fmt::Display) {
        eprintln!("error: {problem}");
        self.errors += 1;
    }

    fn warning(&mut self, problem: impl std::fmt::Display) {
        eprintln!("warning: {problem}");
        self.warnings += 1;
    }

    /// An error before an install (`--install`), a warning otherwise.
    fn finding(&mut self, install: bool, problem: impl std::fmt::Display) {
        if install {
            self.error(problem);
        } else {
            self.warning(problem);
        }
    }

    /// `okd.yml: 1 error, 4 warnings`, when there was any.
    fn summary(&self, file: &Path) {
        if self.errors + self.warnings == 0 {
            return;
        }
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        eprintln!(
            "{}: {}, {}",
            file.display(),
            plural(self.errors, "error"),
            plural(self.warnings, "warning")
        );
    }
}

/// How `serve` under the unit would divide its descriptors among the listeners, and a warning
/// when their caps don't fit.
fn show_descriptors(target: &config::Target, tally: &mut Tally) {
    let division = match okd_appliance::supervisor::descriptors::of_unit(target) {
        Ok(d) => d,
        Err(e) => {
            tally.error(format_args!(
                "{e}, which the host file's rules should have refused: please report it"
            ));
            return;
        }
    };
    println!(
        "open descriptors under the unit's LimitNOFILE={} ({} kept for files and listening sockets):",
        division.limit, division.reserve
    );
    for line in division.lines() {
        println!("  {line}");
    }
    let cut = division.cut().count();
    if cut > 0 {
        tally.warning(format_args!(
            "under LimitNOFILE={}, {cut} listener(s) get fewer connections than they ask for (the lines marked \"cut\" above)",
            division.limit
        ));
        eprintln!(
            "hint: a drop-in with a larger LimitNOFILE for okd-appliance.service (`systemctl edit okd-appliance`, and fs.nr_open past 1048576) gives every listener its cap; each balanced connection holds up to 2.5 descriptors"
        );
    }
}

/// `check HOST_FILE`: every cluster file passed alone and against the others; then what each
/// cluster's boots and install need, cluster by cluster.
/// How `check` runs: before an install or not, and whether the config's problems were shown.
#[derive(Debug, Clone, Copy)]
struct Preflight {
    install: bool,
    /// The config's install-time problems were printed (as errors): a cluster is not "ok".
    shown: bool,
}

fn check_host(
    file: &Path,
    host: &config::Host,
    preflight: Preflight,
    tally: &mut Tally,
) -> ExitCode {
    let warnings = host.warnings.count(config::Severity::Warning);
    if !preflight.shown && warnings > 0 {
        eprint!("{}", host.warnings.render_files(style()));
        tally.warnings += warnings;
    }
    let mut failed = false;
    let mut members = Vec::new();
    for member in &host.clusters {
        println!("cluster {} ({}):", member.id, member.name);
        let plan = Plan::derive(&member.config, 0);
        failed |= check_cluster(&member.path, &member.config, &plan, preflight, tally)
            != ExitCode::SUCCESS;
        members.push(okd_appliance::plan::host::Member {
            id: member.id.clone(),
            plan: std::sync::Arc::new(plan),
        });
    }
    if failed {
        return ExitCode::from(1);
    }
    // The indexes the services will look clusters up in: one key, one cluster.
    if let Err(e) = okd_appliance::plan::host::HostPlan::assemble(members, 0, None) {
        tally.error(format_args!(
            "{e}, which the host file's rules should have refused: please report it"
        ));
        return ExitCode::from(1);
    }
    let n = host.clusters.len();
    println!(
        "{}: ok: {n} cluster{} on one host, no conflict between them",
        file.display(),
        if n == 1 { "" } else { "s" }
    );
    ExitCode::SUCCESS
}

/// What one cluster's boots and install need, beyond its file's own rules.
fn check_cluster(
    file: &Path,
    c: &config::Config,
    plan: &Plan,
    preflight: Preflight,
    tally: &mut Tally,
) -> ExitCode {
    let install = preflight.install;
    // The per-node ISOs are checked when the base ISO is in place (the ISO install path is
    // optional). Like the ignition files, an unusable ISO never stops a running cluster's
    // services: a warning, an error only with --install.
    let iso = match okd_appliance::http::iso::check(plan) {
        IsoCheck::Absent(_) => None,
        IsoCheck::Ready(summary) => Some(summary),
        IsoCheck::Problems(problems) => {
            for p in problems {
                tally.finding(install, p);
            }
            if install {
                return ExitCode::from(1);
            }
            None
        }
    };
    // What the nodes' boots will fetch from here: present? (An error only with --install, as
    // for the ignition files: a running cluster's services never depend on them.)
    let found = okd_appliance::http::preflight::missing(plan);
    let mut missing: Vec<String> = found.iter().map(ToString::to_string).collect();
    let changed = if install {
        digests_changed(plan)
    } else {
        Vec::new()
    };
    missing.extend(changed.iter().cloned());
    for m in &missing {
        tally.finding(install, m);
    }
    // The next step, with or without --install: a warning alone leaves a new user guessing.
    let config = file.display().to_string();
    for hint in okd_appliance::http::preflight::hints(&config, plan, &found, !changed.is_empty()) {
        eprintln!("hint: {hint}");
    }
    // And the machines' provider, which an install needs as much, and this host's addresses.
    let unreachable = if install {
        let mut problems = missing_addresses(file, plan);
        problems.extend(provider_unreachable(file, plan));
        problems
    } else {
        Vec::new()
    };
    for p in &unreachable {
        tally.error(p);
    }
    if install && !(missing.is_empty() && unreachable.is_empty()) || preflight.shown {
        return ExitCode::from(1);
    }
    println!(
        "{}: ok: cluster {} with {} nodes",
        file.display(),
        c.cluster.domain(),
        c.nodes.len()
    );
    if let Some(node) = c.single_node() {
        println!(
            "single-node cluster: {} boots the live system with {} and installs itself (bootstrap in place); {}",
            node.name,
            okd_appliance::vocabulary::RoleConfig::SingleNode.file(),
            match c.lb.single_node {
                config::SingleNodeRouting::Direct =>
                    "api, api-int and *.apps resolve to it (lb.single_node: direct)",
                config::SingleNodeRouting::Proxied =>
                    "api, api-int and *.apps resolve to the appliance, which balances to it (lb.single_node: proxied)",
            }
        );
    }
    if let Some(summary) = iso {
        println!("{summary}");
    }
    ExitCode::SUCCESS
}

/// The cluster's listener addresses this host doesn't have (one line per address, with what
/// listens there): `serve` starts without them and binds them when they come, but the nodes
/// can't boot from, resolve with or balance through an address nobody holds. A pair's virtual
/// address is on the active host only, so it is not asked for.
fn missing_addresses(file: &Path, plan: &Plan) -> Vec<String> {
    if plan.ha.is_some() {
        return Vec::new();
    }
    let local = match okd_appliance::ha::local_addresses() {
        Ok(local) => local,
        Err(e) => return vec![format!("can't list this host's addresses: {e}")],
    };
    let mut missing: Vec<(std::net::IpAddr, Vec<String>)> = Vec::new();
    for spec in okd_appliance::supervisor::listener_specs(plan) {
        let ip = spec.addr.ip();
        if ip.is_unspecified() || local.contains(&ip) {
            continue;
        }
        let what = format!("{}/{}", spec.service.name(), spec.proto);
        match missing.iter_mut().find(|(at, _)| *at == ip) {
            Some((_, services)) => services.push(what),
            None => missing.push((ip, vec![what])),
        }
    }
    missing
        .into_iter()
        .map(|(ip, services)| {
            format!(
                "{ip} is not on this host: {} can't listen there until it is (`okd-appliance render --format networkd {}` writes it for network.interface)",
                services.join(", "),
                file.display()
            )
        })
        .collect()
}

/// Before an install, each file the nodes will fetch that `artifacts fetch` recorded is hashed
/// and compared with the SHA-256 it verified (`okd_appliance::fetched`); what differs, one
/// line each. A file of the right size with other content (copied over by hand, another build)
/// is only found this way.
fn digests_changed(plan: &Plan) -> Vec<String> {
    use okd_appliance::artifacts::store::hash_file;
    let dir = &plan.files.artifacts_dir;
    let Ok(Some(record)) = okd_appliance::fetched::Record::read(dir) else {
        return Vec::new(); // No record (or one `missing` reported): nothing to compare.
    };
    let recorded: Vec<_> = okd_appliance::http::preflight::wanted(plan)
        .into_iter()
        .filter_map(|(path, _)| record.entry(dir, &path).map(|e| (path, e)))
        .filter(|(path, e)| std::fs::metadata(path).is_ok_and(|m| m.len() == e.size))
        .collect();
    if recorded.is_empty() {
        return Vec::new();
    }
    let bytes: u64 = recorded.iter().map(|(_, e)| e.size).sum();
    eprintln!(
        "checking the SHA-256 of {} artifact{} ({}) against what `artifacts fetch` verified",
        recorded.len(),
        if recorded.len() == 1 { "" } else { "s" },
        bytesize::ByteSize::b(bytes).display().iec()
    );
    let mut changed = Vec::new();
    for (path, entry) in recorded {
        match hash_file(&path) {
            Ok(Some(digest)) if digest.to_string() == entry.sha256 => {}
            Ok(Some(digest)) => changed.push(format!(
                "{}: its SHA-256 is {digest}, the file of {} `artifacts fetch` verified there \
                 was {}: the nodes would boot another file than the one verified",
                path.display(),
                entry.release_text(),
                entry.sha256
            )),
            Ok(None) => {} // Gone since: `missing` said so.
            Err(e) => changed.push(format!("{}: {e:#}", path.display())),
        }
    }
    changed
}

/// Before an install, the machines' provider is asked for each machine's state, as `nodes list`
/// does: a provider that can't be reached, refuses the TLS or the credentials, lacks a
/// privilege, or holds a machine that contradicts the config is an install that stops at its
/// first machine. Each problem once, with the nodes it concerns; machines not created yet are
/// fine (`nodes create` or `cluster up` makes them), and said so.
fn provider_unreachable(file: &Path, plan: &Plan) -> Vec<String> {
    use okd_appliance::config::Provider as ProviderConfig;
    use okd_appliance::control::{
        self, Action, AnyProvider, ControlError, MachineStatus, Outcome, Provider as _,
    };
    let control = &plan.control;
    if control.provider == ProviderConfig::None || control.machines.is_empty() {
        return Vec::new();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![format!("can't start the async runtime: {e}")],
    };
    runtime.block_on(async {
        let provider = match AnyProvider::from_plan(control) {
            Ok(Some(p)) => std::sync::Arc::new(p),
            Ok(None) => return Vec::new(),
            Err(e) => return vec![format!("the machines' provider: {e}")],
        };
        let journal = okd_appliance::journal::Journal::new();
        let reports = control::run(
            &provider,
            &control.machines,
            Action::Status,
            &control.timeouts,
            &journal,
        )
        .await;
        // Problems by message, with the nodes each concerns, in config order.
        let mut problems: Vec<(String, Vec<&str>)> = Vec::new();
        let (mut present, mut absent) = (0, 0);
        for (m, report) in control.machines.iter().zip(&reports) {
            let problem = match &report.result {
                Ok(Outcome::Status(MachineStatus::Absent)) | Err(ControlError::Absent(_)) => {
                    absent += 1;
                    continue;
                }
                Ok(_) => {
                    present += 1;
                    continue;
                }
                Err(e) => e.to_string(),
            };
            match problems.iter_mut().find(|(p, _)| *p == problem) {
                Some((_, nodes)) => nodes.push(&m.node),
                None => problems.push((problem, vec![&m.node])),
            }
        }
        if problems.is_empty() {
            println!(
                "{}: reached; {present} machine{} there, {absent} not created yet{}",
                provider.describe(),
                if present == 1 { "" } else { "s" },
                if absent > 0 {
                    format!(
                        " (`okd-appliance nodes create {}` or `okd-appliance cluster up {0}` makes them)",
                        file.display()
                    )
                } else {
                    String::new()
                }
            );
        }
        problems
            .into_iter()
            .map(|(problem, nodes)| {
                format!(
                    "{}: {problem} (asking for {})",
                    provider.describe(),
                    nodes.join(", ")
                )
            })
            .collect()
    })
}

/// `node kargs NODE FILE`: the node's kernel arguments, one line, exactly as served.
pub fn node_kargs(node: &str, file: &Path, pxe: bool, cluster: Option<&str>) -> ExitCode {
    // Like the artifacts, this is useful before the ignition configs exist.
    let one = match super::load_one_cluster(file, cluster, InstallCheck::Skip) {
        Ok(one) => one,
        Err(code) => return code,
    };
    let plan = Plan::derive(&one.config, 0);
    let Some(boot) = plan.boot.iter().find(|b| b.node == node) else {
        let names: Vec<&str> = plan.boot.iter().map(|b| b.node.as_str()).collect();
        eprintln!(
            "error: no node `{node}` in {} (nodes: {})",
            file.display(),
            names.join(", ")
        );
        return ExitCode::from(1);
    };
    let args = if pxe {
        &boot.kernel_args
    } else {
        &boot.iso_kernel_args
    };
    println!("{}", args.join(" "));
    ExitCode::SUCCESS
}

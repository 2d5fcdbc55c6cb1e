//! `okd-appliance serve FILE`: DNS, DHCP, the load balancer and the boot files for the cluster,
//! under the supervisor, logging to stderr.
//!
//! Exit codes: 0 stopped cleanly, 1 invalid config, a listener that did not bind, or a failure
//! while serving, 2 usage.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use okd_appliance::supervisor::{self, ServeError};

use super::{runtime, style};

/// `serve`: runs until stopped.
pub fn run(file: &Path) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube's client logs every failed connection as an error; an API that is not
                // up yet is normal for the first minutes of an install, and `cluster status`
                // says what the orchestration waits for.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .init();
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(supervisor::serve(file)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(ServeError::Config(e)) => {
            eprint!("{}", e.render(style()));
            ExitCode::from(1)
        }
        Err(ServeError::Bind(errors)) => {
            for e in &errors {
                tracing::error!("{e}");
            }
            tracing::error!("nothing is served: no listener could be bound");
            ExitCode::from(1)
        }
        Err(e) => {
            // Each error's message leaves its cause to `source()`: `{:#}` prints the chain once.
            tracing::error!("{:#}", anyhow::Error::new(e));
            ExitCode::from(1)
        }
    }
}

//! The one YAML file: reading it, validating it, and the typed [`Config`] it becomes.
//!
//! Architecture invariant: the rest of the program never sees YAML. It receives a [`Config`]
//! whose invariants validation has checked, or nothing at all.

mod control;
pub mod diagnostic;
pub mod host;
mod model;
pub mod raw;
mod unknown_keys;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::{GraphicalReportHandler, GraphicalTheme, NamedSource};

pub use control::*;
pub use diagnostic::{Problem, Problems, RenderStyle, Severity};
pub use host::{Host, HostProblems, Member, SharedFrontend};
pub use model::*;
pub use validate::{
    IGNITION_MAX_AGE, IGNITION_WARN_AGE, InstallCheck, InstallFiles, RealFiles, secret_files,
};

/// A config that passed validation, with the warnings it raised.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Problems,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("can't read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML of the expected shape; serde stops at the first such error (the
    /// unknown keys before it are listed with it).
    #[error("{0}")]
    Syntax(SyntaxError),
    #[error("{}", .0.summary())]
    Invalid(Problems),
    /// A host file, or a cluster file it lists, is invalid, or two of its clusters conflict.
    #[error("{}", .0.summary())]
    Host(HostProblems),
    /// A command that takes one cluster's file was given a host file.
    #[error(
        "{} is a host file (it lists clusters): `okd-appliance check` and `render` read it; this command takes \
         one cluster's file (serving several clusters is being built, issue 26)",
        path.display()
    )]
    HostFile { path: PathBuf },
}

impl LoadError {
    /// One line: what is wrong, without the details `render` shows.
    pub fn summary(&self) -> String {
        match self {
            LoadError::Read { source, .. } => format!("{self}: {source}"),
            LoadError::Syntax(e) => e.to_string(),
            LoadError::Invalid(problems) => problems.summary(),
            LoadError::Host(problems) => problems.summary(),
            LoadError::HostFile { .. } => self.to_string(),
        }
    }

    /// How many errors the operator is shown.
    pub fn error_count(&self) -> usize {
        match self {
            LoadError::Read { .. } | LoadError::HostFile { .. } => 1,
            LoadError::Syntax(e) => e.before.count(Severity::Error) + 1,
            LoadError::Invalid(problems) => problems.count(Severity::Error),
            LoadError::Host(problems) => problems.count(Severity::Error),
        }
    }

    /// How many warnings the operator is shown with the errors.
    pub fn warning_count(&self) -> usize {
        match self {
            LoadError::Read { .. } | LoadError::HostFile { .. } => 0,
            LoadError::Syntax(e) => e.before.count(Severity::Warning),
            LoadError::Invalid(problems) => problems.count(Severity::Warning),
            LoadError::Host(problems) => problems.count(Severity::Warning),
        }
    }

    /// Like [`LoadError::render`], without the summary line of the problems (a caller that
    /// reports more after them ends with its own).
    pub fn render_each(&self, style: RenderStyle) -> String {
        match self {
            LoadError::Invalid(problems) => problems.render_each(style),
            LoadError::Host(problems) => problems.render_files(style),
            _ => self.render(style),
        }
    }

    /// The error as the operator should see it, every problem with its line and column.
    pub fn render(&self, style: RenderStyle) -> String {
        match self {
            LoadError::Read { source, .. } => format!("error: {self}: {source}\n"),
            LoadError::Syntax(e) => e.render(style),
            LoadError::Invalid(problems) => problems.render(style),
            LoadError::Host(problems) => problems.render(style),
            LoadError::HostFile { .. } => format!("error: {self}\n"),
        }
    }
}

#[derive(Debug)]
pub struct SyntaxError {
    report: miette::Report,
    file: String,
    /// The unknown keys found before serde stopped.
    before: Problems,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.report)?;
        match self.before.count(Severity::Error) {
            0 => Ok(()),
            1 => write!(f, " (and an unknown key)"),
            n => write!(f, " (and {n} unknown keys)"),
        }
    }
}

impl SyntaxError {
    /// serde's error `e` in `text` (from `name`), after the problems found `before` it.
    fn new(e: &serde_saphyr::Error, text: &str, name: &str, before: Problems) -> Self {
        SyntaxError {
            report: serde_saphyr::miette::to_miette_report_with_options(
                e,
                text,
                name,
                serde_saphyr::render_options! { source_name: Some(name) },
            ),
            file: name.to_owned(),
            before,
        }
    }

    fn render(&self, style: RenderStyle) -> String {
        let theme = match style {
            RenderStyle::Color => GraphicalTheme::unicode(),
            RenderStyle::Plain => GraphicalTheme::unicode_nocolor(),
        };
        let mut out = self.before.render_each(style);
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(100)
            .with_links(false);
        let _ = handler.render_report(&mut out, self.report.as_ref());
        let errors = self.before.count(Severity::Error) + 1;
        out.push_str(&format!(
            "\n{}: {errors} error{}, 0 warnings\n",
            self.file,
            if errors == 1 { "" } else { "s" }
        ));
        out
    }
}

/// Reads and validates the cluster config at `path`; relative paths inside it are relative to
/// its folder. A host file is refused ([`LoadError::HostFile`]): see [`load_any`].
pub fn load(path: &Path, files: InstallCheck<'_>) -> Result<Loaded, LoadError> {
    let (text, dir) = read(path)?;
    // Said before anything in it is checked: a host file's own problems are `check`'s.
    if host::is_host_file(&text) {
        return Err(LoadError::HostFile {
            path: path.to_owned(),
        });
    }
    parse(&text, &path.display().to_string(), dir, files)
}

/// The text of the file at `path` and the folder its relative paths are relative to.
fn read(path: &Path) -> Result<(String, &Path), LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Ok((text, dir))
}

/// What a config file turned out to be.
#[derive(Debug)]
pub enum Target {
    Cluster(Loaded),
    Host(Host),
}

/// Reads and validates a cluster file or a host file (one with `clusters:`) and the cluster
/// files it lists.
pub fn load_any(path: &Path, files: InstallCheck<'_>) -> Result<Target, LoadError> {
    let (text, dir) = read(path)?;
    parse_any(&text, &path.display().to_string(), dir, files)
}

/// [`load_any`] for text that came from `name`, resolving relative paths against `dir` (a host
/// file's cluster files are named after `name`'s folder, read from `dir`).
pub fn parse_any(
    text: &str,
    name: &str,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Result<Target, LoadError> {
    if host::is_host_file(text) {
        return host::parse(text, name, dir, files).map(Target::Host);
    }
    parse(text, name, dir, files).map(Target::Cluster)
}

/// Validates config text that came from `name`, resolving relative paths against `dir`.
pub fn parse(
    text: &str,
    name: &str,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Result<Loaded, LoadError> {
    parse_cluster(text, name, dir, files).map(|(loaded, _)| loaded)
}

/// [`parse`], also returning the YAML as written, whose locations a host file's comparison of
/// its clusters points at.
fn parse_cluster(
    text: &str,
    name: &str,
    dir: &Path,
    files: InstallCheck<'_>,
) -> Result<(Loaded, raw::RawConfig), LoadError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    // Every unknown key is stepped over and listed, rather than the first ending the parse.
    let mut unknown = Vec::new();
    let raw = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        unknown_keys::deserialize::<raw::RawConfig, _>(de, &mut unknown)
    });
    let mut problems = Problems::new(Arc::new(NamedSource::new(name, text.to_owned())));
    for key in &unknown {
        unknown_keys::report(&mut problems, key);
    }
    let raw =
        raw.map_err(|e| LoadError::Syntax(SyntaxError::new(&e, text, name, problems.clone())))?;
    match validate::validate(&raw, dir, files, &mut problems) {
        Some(config) => Ok((
            Loaded {
                config,
                warnings: problems,
            },
            raw,
        )),
        None => Err(LoadError::Invalid(problems)),
    }
}

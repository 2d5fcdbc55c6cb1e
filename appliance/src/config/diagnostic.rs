//! Problems found in a config file, each pointing at its line and column, rendered by miette.
//!
//! Architecture invariant: this module knows how to describe and print a problem, not which
//! problems exist; `validate` decides that.

use std::fmt;
use std::sync::Arc;

use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode,
    SourceSpan,
};
use serde_saphyr::Location;

/// The text of a config file, shared by all of its problems.
pub type Source = Arc<NamedSource<String>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One thing wrong (or suspicious) in a config file.
#[derive(Debug, Clone)]
pub struct Problem {
    severity: Severity,
    message: String,
    code: &'static str,
    labels: Vec<LabeledSpan>,
    hint: Option<String>,
    src: Source,
    /// The same problem's other places in other files (the first use of a MAC another cluster's
    /// file repeats, say), each drawn against its own file.
    related: Vec<Problem>,
}

impl Problem {
    /// A problem at `at` in `src`, for a file other than the one a [`Problems`] covers (see
    /// [`Problem::related_at`]).
    pub fn new(
        src: &Source,
        severity: Severity,
        code: &'static str,
        at: Location,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> Self {
        Problem {
            severity,
            message: message.into(),
            code,
            labels: vec![LabeledSpan::new_primary_with_span(
                Some(label.into()),
                span_of(at),
            )],
            hint: None,
            src: Arc::clone(src),
            related: Vec::new(),
        }
    }

    /// Points at a place in another file that explains this problem; miette draws it under
    /// this one, at its own file, line and column.
    pub fn related_at(
        &mut self,
        src: &Source,
        at: Location,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> &mut Self {
        let mut other = Problem::new(src, Severity::Error, self.code, at, message, label);
        other.severity = self.severity;
        self.related.push(other);
        self
    }

    pub fn severity(&self) -> Severity {
        self.severity
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// A short stable identifier, e.g. `config::duplicate-mac`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// Points at another place that explains this problem (the first use of a duplicate, say).
    pub fn also(&mut self, at: Location, label: impl Into<String>) -> &mut Self {
        self.labels
            .push(LabeledSpan::new_with_span(Some(label.into()), span_of(at)));
        self
    }

    pub fn hint(&mut self, hint: impl Into<String>) -> &mut Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

impl Diagnostic for Problem {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.hint
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&*self.src)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.labels.iter().cloned()))
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(self.related.iter().map(|p| p as &dyn Diagnostic)))
    }
}

/// Converts a parser location to a miette span: the byte range of the YAML node.
pub fn span_of(at: Location) -> SourceSpan {
    let span = at.span();
    let offset = span.byte_offset().unwrap_or(0);
    let len = span.byte_len().unwrap_or(0);
    SourceSpan::new(
        usize::try_from(offset).unwrap_or(0).into(),
        usize::try_from(len).unwrap_or(0),
    )
}

/// Every problem found in one file, in the order they were found.
#[derive(Debug, Clone)]
pub struct Problems {
    src: Source,
    items: Vec<Problem>,
}

impl Problems {
    pub fn new(src: Source) -> Self {
        Self {
            src,
            items: Vec::new(),
        }
    }

    pub fn error(
        &mut self,
        code: &'static str,
        at: Location,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> &mut Problem {
        self.report(Severity::Error, code, at, message, label)
    }

    pub fn warning(
        &mut self,
        code: &'static str,
        at: Location,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> &mut Problem {
        self.report(Severity::Warning, code, at, message, label)
    }

    /// A problem of the given severity (for checks whose severity the caller chooses).
    pub fn report(
        &mut self,
        severity: Severity,
        code: &'static str,
        at: Location,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> &mut Problem {
        self.items
            .push(Problem::new(&self.src, severity, code, at, message, label));
        self.items.last_mut().expect("just pushed")
    }

    /// Adds a problem made with [`Problem::new`] (against this file's source or another's).
    pub fn push(&mut self, problem: Problem) {
        self.items.push(problem);
    }

    /// The source these problems are drawn against.
    pub fn source(&self) -> &Source {
        &self.src
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|p| p.severity == Severity::Error)
    }

    pub fn count(&self, severity: Severity) -> usize {
        self.items.iter().filter(|p| p.severity == severity).count()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.items.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn file_name(&self) -> &str {
        self.src.name()
    }

    /// Every problem as miette draws it, followed by a one-line summary.
    pub fn render(&self, style: RenderStyle) -> String {
        let mut out = self.render_each(style);
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    /// Every problem as miette draws it, without the summary.
    pub fn render_each(&self, style: RenderStyle) -> String {
        let handler = match style {
            RenderStyle::Color => GraphicalReportHandler::new_themed(GraphicalTheme::unicode()),
            RenderStyle::Plain => {
                GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
            }
        }
        .with_width(100)
        // A message's commands must paste into a shell as they are: a line broken inside one
        // (miette breaks at spaces, hyphens and inside long paths) would run half of it. The
        // terminal folds a long line instead.
        .with_wrap_lines(false)
        .with_links(false);
        let mut out = String::new();
        for problem in &self.items {
            // Writing into a String cannot fail.
            let _ = handler.render_report(&mut out, problem);
            out.push('\n');
        }
        out
    }

    /// One line for commands other than `check`, which lists them: `okd.yml: 3 warnings (okd-appliance
    /// check okd.yml lists them)`; empty when there is none.
    pub fn warnings_line(&self) -> String {
        warnings_line(self.file_name(), self.count(Severity::Warning))
    }

    /// `okd.yml: 2 errors, 1 warning`.
    pub fn summary(&self) -> String {
        let plural = |n: usize, word: &str| {
            if n == 1 {
                format!("{n} {word}")
            } else {
                format!("{n} {word}s")
            }
        };
        format!(
            "{}: {}, {}",
            self.src.name(),
            plural(self.count(Severity::Error), "error"),
            plural(self.count(Severity::Warning), "warning")
        )
    }
}

/// `file: n warnings (okd-appliance check file lists them)` and a newline; empty for none.
pub fn warnings_line(file: &str, n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!(
            "{file}: {n} warning{} (`okd-appliance check {file}` lists them)\n",
            if n == 1 { "" } else { "s" }
        ),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderStyle {
    Color,
    Plain,
}

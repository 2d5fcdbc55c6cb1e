//! The architecture's invariants, checked rather than only stated (in the spirit of
//! rust-analyzer's `xtask/src/tidy.rs`):
//!
//! - the one-way house: a service module (`dns`, `dhcp`, `tftp`, `http`, `lb`, `control`) imports neither
//!   the supervisor, nor another service, nor the config (services read the plan); nothing in
//!   the library imports the supervisor; the top-level modules form no cycle;
//! - nothing below the operator wing imports it (only the supervisor, the CLI and the fuzz targets do);
//! - the command line is the binary's own: no library module names `cli::` and lib.rs
//!   declares no `cli` module (only main.rs and `appliance/src/cli/` do); main.rs stays a
//!   screen of dispatch (at most 150 lines);
//! - only `sockets.rs` binds a listener (client UDP sockets of the files in `CLIENT_SOCKETS`
//!   aside);
//! - the leaves (`LEAVES`) import nothing of the crate; the narrow modules (`ONLY_IMPORTS`:
//!   `budget`, `ha`, `render`, `host_network`, `install_config`, `liveiso`) only what they read; the
//!   orchestration reaches the load balancer only through `lb::drain`;
//! - docs/architecture.md's map states the number of modules and import edges there are
//!   (printed by `the_map_counts_what_is_there`);
//! - every Rust file starts with a `//!` comment saying what it is;
//! - every file docs/architecture.md names exists;
//! - no source file of the crate is longer than [`MAX_LINES`], but for the listed exceptions.
//!
//! Test code (the items under `#[cfg(test)]` or `#[test]`, and the modules a `#[cfg(test)] mod
//! NAME;` declares, read with syn as the compiler reads them) may build plans from configs and is
//! not held to the import rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The services (and the control module, which drives machines from the plan's specs): each
/// reads the plan and the journal, and nothing of its siblings.
const SERVICES: [&str; 6] = ["dns", "dhcp", "tftp", "http", "lb", "control"];
/// What a service must never import, besides its siblings.
const FORBIDDEN_FOR_SERVICES: [&str; 5] =
    ["supervisor", "config", "operator", "render", "artifacts"];
/// What may import the operator wing: itself, the supervisor (which builds it), the CLI, and
/// the fuzz targets' test support (which builds it as the supervisor does, to serve the API).
const ABOVE_THE_OPERATOR_WING: [&str; 4] = ["operator", "supervisor", "cli", "fuzzing"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "corpus")
            {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `appliance/src` belongs to (`dns` for `dns/server.rs`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// What a file's production code names, read with syn as the compiler reads it: every item
/// under `#[cfg(test)]` (and `#[test]`) is left out wherever it stands, every `use` tree is
/// expanded (`use crate::{lb::pool::X}` is `crate::lb::pool::X`), and macro arguments are
/// searched for `crate::` paths too.
#[derive(Default)]
struct Scan {
    /// The segments after `crate::` of every path that starts there.
    crate_paths: BTreeSet<Vec<String>>,
    /// Every path, `::`-joined (`TcpListener::bind`, `std::net::TcpListener::bind`).
    paths: BTreeSet<String>,
}

/// Whether `attrs` make an item test-only: `#[test]`, or a `#[cfg(...)]` that needs `test`
/// (`cfg(test)`, `cfg(all(test, ...))`; not `cfg(not(test))` or `cfg(any(test, feature))`,
/// which the product can compile).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("test") {
            return true;
        }
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let Ok(meta) = attr.parse_args::<syn::Meta>() else {
            return false;
        };
        fn needs_test(meta: &syn::Meta) -> bool {
            match meta {
                syn::Meta::Path(p) => p.is_ident("test"),
                syn::Meta::List(list) if list.path.is_ident("all") => list
                    .parse_args_with(
                        syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                    )
                    .is_ok_and(|metas| metas.iter().any(needs_test)),
                _ => false,
            }
        }
        needs_test(&meta)
    })
}

impl Scan {
    fn path(&mut self, segments: &[String]) {
        if segments.first().is_some_and(|s| s == "crate") && segments.len() > 1 {
            self.crate_paths.insert(segments[1..].to_vec());
        }
        self.paths.insert(segments.join("::"));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.path(&full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                self.path(&full);
            }
            syn::UseTree::Glob(_) => self.path(prefix),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// `crate :: a :: b` sequences in a macro's tokens.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" => {
                    let mut segments = vec!["crate".to_owned()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!(
                            (trees.get(j), trees.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':'
                        );
                        match (colons, trees.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.path(&segments);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for Scan {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::ExternCrate(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::ForeignMod(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::TraitAlias(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.path(&segments);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Reads `text` (the file `file`) as the compiler does.
fn scan(file: &Path, text: &str) -> Scan {
    let parsed =
        syn::parse_file(text).unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
    let mut scan = Scan::default();
    syn::visit::Visit::visit_file(&mut scan, &parsed);
    scan
}

/// The files of `appliance/src` that are test-only modules: those a `#[cfg(test)] mod NAME;`
/// declares (`NAME.rs` or `NAME/mod.rs` beside its parent's directory), and every file below
/// them.
fn test_modules(src: &Path) -> &'static BTreeSet<PathBuf> {
    static TESTS: std::sync::OnceLock<BTreeSet<PathBuf>> = std::sync::OnceLock::new();
    TESTS.get_or_init(|| read_test_modules(src))
}

fn read_test_modules(src: &Path) -> BTreeSet<PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut roots = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy();
        // A module's children live in its directory: `x/mod.rs`'s and `lib.rs`'s in `x/`
        // and the crate root, `x.rs`'s in `x/`.
        let dir = if ["mod.rs", "lib.rs", "main.rs"].contains(&name.as_ref()) {
            file.parent().unwrap().to_owned()
        } else {
            file.with_extension("")
        };
        for item in &parsed.items {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
                && test_only(&m.attrs)
            {
                roots.push(dir.join(m.ident.to_string()));
            }
        }
    }
    files
        .into_iter()
        .filter(|f| {
            roots
                .iter()
                .any(|root| f.starts_with(root) || *f == root.with_extension("rs"))
        })
        .collect()
}

/// What `file`'s production code names: nothing for a test-only module.
fn production(file: &Path, tests: &BTreeSet<PathBuf>) -> Scan {
    if tests.contains(file) {
        return Scan::default();
    }
    scan(file, &std::fs::read_to_string(file).unwrap())
}

/// The top-level modules a scan names through `crate::`.
fn crate_modules(scan: &Scan) -> BTreeSet<String> {
    scan.crate_paths.iter().map(|p| p[0].clone()).collect()
}

/// The top-level modules and what each names, read once per test run.
fn import_graph() -> &'static BTreeMap<String, BTreeSet<String>> {
    static GRAPH: std::sync::OnceLock<BTreeMap<String, BTreeSet<String>>> =
        std::sync::OnceLock::new();
    GRAPH.get_or_init(read_import_graph)
}

fn read_import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo().join("appliance/src");
    let tests = test_modules(&src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        if file
            .file_name()
            .is_some_and(|n| n == "main.rs" || n == "lib.rs")
        {
            continue;
        }
        let module = module_of(&src, &file);
        let refs = crate_modules(&production(&file, tests));
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != module));
    }
    graph
}

#[test]
fn services_import_neither_the_supervisor_nor_each_other_nor_the_config() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for service in SERVICES {
        let Some(imports) = graph.get(service) else {
            panic!("no module {service}: update SERVICES in tidy.rs");
        };
        for target in imports {
            let sibling = SERVICES.contains(&target.as_str());
            if sibling || FORBIDDEN_FOR_SERVICES.contains(&target.as_str()) {
                wrong.push(format!("{service} -> {target}"));
            }
        }
    }
    for (module, imports) in graph {
        if imports.contains("supervisor") {
            wrong.push(format!(
                "{module} -> supervisor (only main may start the supervisor)"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the one-way house (docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn nothing_below_the_operator_wing_imports_it() {
    let graph = import_graph();
    let wrong: Vec<String> = graph
        .iter()
        .filter(|(module, _)| !ABOVE_THE_OPERATOR_WING.contains(&module.as_str()))
        .filter(|(_, imports)| imports.contains("operator"))
        .map(|(module, _)| format!("{module} -> operator"))
        .collect();
    assert!(
        wrong.is_empty(),
        "only the supervisor, the CLI and the fuzz targets may reach the operator wing (docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_top_level_modules_form_no_cycle() {
    let graph = import_graph();
    // Depth-first search with colours; a grey node reached again closes a cycle.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, bool>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let start = path.iter().position(|n| *n == node).unwrap();
                let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        state.insert(node, false);
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, path) {
                return Some(cycle);
            }
        }
        path.pop();
        state.insert(node, true);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
            panic!("import cycle between modules: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_import_rules_see_what_they_check() {
    // The checks above are only as good as the reference scanner.
    let file = Path::new("x.rs");
    let refs = crate_modules(&scan(
        file,
        "use crate::{plan::{self, Plan}, journal::Journal};\n\
         fn f() { let x = crate::dns::start(s); } // crate::config is in a comment\n\
         fn g() { tracing::info!(\"{}\", crate::metrics::NAME); }\n",
    ));
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["dns", "journal", "metrics", "plan"]
    );
    // Test code is what `#[cfg(test)]` covers, item by item: not all that follows the first.
    let refs = crate_modules(&scan(
        file,
        "#[cfg(test)]\nuse crate::config::X;\n\
         use crate::supervisor::Y;\n\
         #[cfg(test)]\nmod tests { use crate::render::Z; }\n\
         #[cfg(all(test, unix))]\nfn t() { crate::artifacts::go() }\n\
         #[cfg(not(test))]\nfn p() { crate::faults::go() }\n",
    ));
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["faults", "supervisor"]
    );
    // A use group is expanded to its paths.
    assert!(
        scan(file, "use crate::{lb::pool::Pools, lb::drain};")
            .crate_paths
            .contains(&vec![
                "lb".to_owned(),
                "pool".to_owned(),
                "Pools".to_owned()
            ])
    );
    let graph = import_graph();
    assert!(graph["dns"].contains("plan"), "{:?}", graph["dns"]);
    assert!(
        graph["supervisor"].contains("dns"),
        "{:?}",
        graph["supervisor"]
    );
    // The test modules are found where `#[cfg(test)] mod NAME;` puts them.
    let src = repo().join("appliance/src");
    let tests = test_modules(&src);
    for test_file in [
        "dhcp/tests.rs",
        "dhcp/tests/hostile.rs",
        "replication/mod.rs",
    ] {
        assert_eq!(
            tests.contains(&src.join(test_file)),
            test_file != "replication/mod.rs",
            "{test_file}"
        );
    }
}

/// Whether `code` names a `cli` module by path (`cli::`, `crate::cli::`, `use cli::{..}`) outside
/// comments; `client::` or `okd_cli::` are other names.
fn mentions_cli(code: &str) -> bool {
    code.lines().any(|line| {
        let line = line.split("//").next().unwrap_or("");
        line.match_indices("cli::").any(|(at, _)| {
            !line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn no_library_module_imports_the_cli() {
    assert!(mentions_cli("use crate::cli::Target;"));
    assert!(mentions_cli("    cli::check::check(&file, install),"));
    assert!(!mentions_cli("use hyper::client::conn;"));
    assert!(!mentions_cli("use okd_cli::x; // cli::y in a comment"));
    let src = repo().join("appliance/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let cli = src.join("cli");
    assert!(cli.is_dir(), "no appliance/src/cli/: update this test");
    let wrong: Vec<String> = files
        .iter()
        .filter(|f| **f != src.join("main.rs") && !f.starts_with(&cli))
        .filter(|f| mentions_cli(&std::fs::read_to_string(f).unwrap()))
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect();
    assert!(
        wrong.is_empty(),
        "library files naming the binary's cli module (the CLI uses the library, never the \
         other way round):\n  {}",
        wrong.join("\n  ")
    );
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    assert!(
        !lib.lines()
            .any(|l| l.split("//").next().unwrap_or("").contains("mod cli")),
        "lib.rs declares the cli module: only main.rs may"
    );
}

#[test]
fn main_stays_a_screen_of_dispatch() {
    const MOST: usize = 150;
    let main = std::fs::read_to_string(repo().join("appliance/src/main.rs")).unwrap();
    let lines = main.lines().count();
    assert!(
        lines <= MOST,
        "appliance/src/main.rs has {lines} lines (at most {MOST}): it parses and dispatches; \
         a command's body belongs in its family's file of appliance/src/cli/"
    );
}

/// The longest a file of `appliance/src` may be: past it, a file mixes things that want files of
/// their own (issue #24).
const MAX_LINES: usize = 800;

/// Files still longer than [`MAX_LINES`], each with why. The list only shrinks: a file that is
/// split must leave it (the test fails while it is still named here), and no file joins it.
const TOO_LONG: [(&str, &str); 0] = [];

/// Every Rust file of `appliance/src`, with its path relative to it (`dns/server.rs`).
fn source_files() -> Vec<(String, PathBuf)> {
    let src = repo().join("appliance/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| (f.strip_prefix(&src).unwrap().display().to_string(), f))
        .collect()
}

#[test]
fn no_source_file_is_too_long() {
    let src = repo().join("appliance/src");
    let mut wrong = Vec::new();
    for (rel, file) in &source_files() {
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        let excepted = TOO_LONG.iter().any(|(name, _)| *name == rel.as_str());
        if lines > MAX_LINES && !excepted {
            wrong.push(format!("{rel}: {lines} lines (split it along its seams)"));
        } else if lines <= MAX_LINES && excepted {
            wrong.push(format!(
                "{rel}: {lines} lines, no longer too long: remove it from TOO_LONG"
            ));
        }
    }
    for (name, _) in TOO_LONG {
        if !src.join(name).exists() {
            wrong.push(format!("{name}: named in TOO_LONG but gone: remove it"));
        }
    }
    assert!(
        wrong.is_empty(),
        "files of appliance/src over {MAX_LINES} lines (tests/tidy.rs `TOO_LONG` lists the exceptions):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn every_rust_file_says_what_it_is() {
    let mut files = Vec::new();
    for dir in [
        "appliance/src",
        "appliance/tests",
        "tests/harness",
        "tests/e2e",
        "tests/fuzz",
    ] {
        rust_files(&repo().join(dir), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header saying what they are:\n  {}",
        missing.join("\n  ")
    );
}

/// Backticked words in docs/architecture.md that name a file or directory of the repository.
fn named_paths(doc: &str) -> Vec<(usize, String, Option<String>)> {
    let mut out = Vec::new();
    let mut section_dir: Option<String> = None;
    for (n, line) in doc.lines().enumerate() {
        let mut words = line.split('`').skip(1).step_by(2);
        if line.starts_with('#') {
            // `### \`appliance/src/dns/\`` (or a file in a directory) sets the directory bare
            // names are relative to.
            section_dir = words
                .next()
                .and_then(|w| w.rfind('/').map(|end| w[..=end].to_owned()));
            continue;
        }
        for word in words {
            let looks_like_path = !word.starts_with('/')
                && word
                    .chars()
                    .all(|c| c.is_alphanumeric() || "._/-".contains(c))
                && (word.ends_with('/')
                    || [".rs", ".md", ".sh", ".yml", ".toml", ".py", ".service"]
                        .iter()
                        .any(|ext| word.ends_with(ext)));
            if looks_like_path {
                out.push((n + 1, word.to_owned(), section_dir.clone()));
            }
        }
    }
    out
}

#[test]
fn every_file_the_architecture_names_exists() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let named = named_paths(&doc);
    assert!(
        named.len() > 40,
        "only {} paths found: is the scanner broken?",
        named.len()
    );
    let missing: Vec<String> = named
        .into_iter()
        .filter(|(_, word, dir)| {
            // Relative to the repository, to the section's directory, or to the crate's source
            // (`http/iso.rs`).
            !repo().join(word).exists()
                && !repo().join("appliance/src").join(word).exists()
                && !dir
                    .as_ref()
                    .is_some_and(|d| repo().join(d).join(word).exists())
        })
        .map(|(line, word, dir)| {
            format!(
                "line {line}: `{word}` (looked in the repository root, appliance/src and {dir:?})"
            )
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names files that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

/// What binds a listening socket: `std`'s and tokio's TCP and Unix listeners, and socket2's
/// `Socket` (how `sockets.rs` makes a service's listener with its options: bound, then
/// listening or read from).
const LISTENER_BINDS: [&str; 4] = [
    "TcpListener::bind",
    "UnixListener::bind",
    "UnixDatagram::bind",
    "Socket::new",
];

/// The client sockets that are not listeners: UDP sockets bound to an ephemeral port of their
/// own to ask something and read its answer. Each file named here may bind one; any other
/// `UdpSocket::bind` outside `sockets.rs` is a listener in disguise.
const CLIENT_SOCKETS: [(&str, &str); 3] = [
    (
        "dns/forward.rs",
        "a fresh socket per forwarded query (random source port, RFC 5452)",
    ),
    (
        "tftp/server.rs",
        "each transfer's own socket (RFC 1350: a transfer ID per side)",
    ),
    (
        "operator/health.rs",
        "keepalived's probe asks the DNS service",
    ),
];

/// Test support outside `#[cfg(test)]` that binds what it likes, on loopback: compiled only for
/// tests and with the `fuzzing` feature, never into the product.
const TEST_SUPPORT_SOCKETS: [(&str, &str); 1] = [(
    "fuzzing/served.rs",
    "the served fuzz targets: loopback servers of their own, and clients from a node's address",
)];

/// The paths of `scan` that bind a listener; `UdpSocket::bind` too unless `udp_allowed`.
fn binds(scan: &Scan, udp_allowed: bool) -> Vec<String> {
    let ends = |path: &str, call: &str| path == call || path.ends_with(&format!("::{call}"));
    scan.paths
        .iter()
        .filter(|path| {
            LISTENER_BINDS.iter().any(|b| ends(path, b))
                || (!udp_allowed && ends(path, "UdpSocket::bind"))
        })
        .cloned()
        .collect()
}

#[test]
fn only_sockets_rs_binds_a_listener() {
    let code = |text: &str| scan(Path::new("x.rs"), &format!("fn f() {{ {text}\n}}"));
    assert_eq!(
        binds(
            &code("let l = std::net::TcpListener::bind(addr)?; // x"),
            false
        )
        .len(),
        1
    );
    assert_eq!(
        binds(&code("let s = UdpSocket::bind(a).await?;"), false).len(),
        1
    );
    assert!(binds(&code("let s = UdpSocket::bind(a).await?;"), true).is_empty());
    assert!(binds(&code("// UnixListener::bind(path) in a comment"), false).is_empty());
    let src = repo().join("appliance/src");
    let tests = test_modules(&src);
    let mut wrong = Vec::new();
    for (rel, file) in &source_files() {
        if rel == "sockets.rs" || TEST_SUPPORT_SOCKETS.iter().any(|(name, _)| name == rel) {
            continue;
        }
        let udp_allowed = CLIENT_SOCKETS.iter().any(|(name, _)| *name == rel.as_str());
        for line in binds(&production(file, tests), udp_allowed) {
            wrong.push(format!("{rel}: {line}"));
        }
    }
    for (name, _) in CLIENT_SOCKETS {
        let text = std::fs::read_to_string(src.join(name))
            .unwrap_or_else(|e| panic!("{name} (CLIENT_SOCKETS): {e}"));
        assert!(
            text.contains("UdpSocket::bind"),
            "{name} binds no UDP socket any more: remove it from CLIENT_SOCKETS"
        );
    }
    for (name, _) in TEST_SUPPORT_SOCKETS {
        let text = std::fs::read_to_string(src.join(name))
            .unwrap_or_else(|e| panic!("{name} (TEST_SUPPORT_SOCKETS): {e}"));
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        assert!(
            name.starts_with("fuzzing/")
                && lib.contains(
                    "#[cfg(any(test, feature = \"fuzzing\"))]\n#[doc(hidden)]\npub mod fuzzing;"
                )
                && !text.is_empty(),
            "{name} is not test support"
        );
    }
    assert!(
        !binds(&production(&src.join("sockets.rs"), tests), false).is_empty(),
        "sockets.rs binds nothing: is the scanner broken?"
    );
    assert!(
        wrong.is_empty(),
        "listeners bound outside appliance/src/sockets.rs (docs/architecture.md: only sockets.rs \
         binds; a client socket that asks something goes in CLIENT_SOCKETS with why):\n  {}",
        wrong.join("\n  ")
    );
}

/// The leaves: modules that import nothing of the crate, so that anything may use them without
/// pulling in more (docs/architecture.md names each one's reason).
const LEAVES: [&str; 13] = [
    "terminal",
    "faults",
    "isolate",
    "per_address",
    "records",
    "vocabulary",
    "tls_trust",
    "secrets",
    "durable",
    "digest",
    "sockets",
    "openshift_install",
    "idle",
];

#[test]
fn the_leaves_import_nothing_of_the_crate() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for leaf in LEAVES {
        let Some(imports) = graph.get(leaf) else {
            panic!("no module {leaf}: update LEAVES in tidy.rs");
        };
        wrong.extend(imports.iter().map(|target| format!("{leaf} -> {target}")));
    }
    assert!(
        wrong.is_empty(),
        "leaves importing the crate (docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
}

/// Modules that may import only the listed ones (docs/architecture.md says why for each).
const ONLY_IMPORTS: [(&str, &[&str]); 6] = [
    // The descriptor budget counts addresses' shares, and knows nothing of what it admits.
    ("budget", &["per_address"]),
    // The pair's flag sits below the services: it reads the pair's plan only.
    ("ha", &["plan"]),
    // Renderers read the plan only, so what they print is what is served.
    ("render", &["plan", "records", "vocabulary"]),
    // How the services host is set up: the config's `network` section, not the plan.
    ("host_network", &["config"]),
    // openshift-install's input: the config, not the plan (nothing of it is served).
    (
        "install_config",
        &["config", "openshift_install", "secrets"],
    ),
    // The boot path's ISO patcher: digests from the leaf, never from the `artifacts` command.
    ("liveiso", &["digest"]),
];

#[test]
fn narrow_modules_import_only_what_they_read() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for (module, allowed) in ONLY_IMPORTS {
        let Some(imports) = graph.get(module) else {
            panic!("no module {module}: update ONLY_IMPORTS in tidy.rs");
        };
        for target in imports {
            if !allowed.contains(&target.as_str()) {
                wrong.push(format!("{module} -> {target} (it may import {allowed:?})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports the architecture does not allow (docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
}

/// The `crate::lb::...` paths a scan names (`lb::drain::drain`).
fn lb_paths(scan: &Scan) -> BTreeSet<String> {
    scan.crate_paths
        .iter()
        .filter(|p| p[0] == "lb")
        .map(|p| p.join("::"))
        .collect()
}

#[test]
fn the_orchestration_reaches_the_load_balancer_only_through_drain() {
    let code = |text: &str| scan(Path::new("x.rs"), text);
    assert_eq!(
        lb_paths(&code(
            "use crate::lb::SharedPools; fn f() { crate::lb::drain::drain(p); } // crate::lb::pool"
        )),
        BTreeSet::from(["lb::SharedPools".to_owned(), "lb::drain::drain".to_owned()])
    );
    // Braces don't hide a path.
    assert_eq!(
        lb_paths(&code("use crate::{lb::pool::Pools};")),
        BTreeSet::from(["lb::pool::Pools".to_owned()])
    );
    let src = repo().join("appliance/src");
    let tests = test_modules(&src);
    let mut files = Vec::new();
    rust_files(&src.join("orchestration"), &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        for path in lb_paths(&production(file, tests)) {
            // The shared pools handle, and drains; the pools' own walk (`Pools::served_backends_of`)
            // through its methods, the fields being private to `lb::pool`.
            if path != "lb::SharedPools" && !path.starts_with("lb::drain::") {
                let rel = file.strip_prefix(&src).unwrap().display().to_string();
                wrong.push(format!("{rel}: crate::{path}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the orchestration reaches the load balancer only through lb::drain \
         (docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
}

/// The map in docs/architecture.md is the import graph, line for line: each entry names a
/// top-level module and every module it imports (parenthesised notes aside), the leaves line
/// the modules that import none, and every module is drawn once. A drawn arrow that is not an
/// import, or an import not drawn, fails with the line to draw.
#[test]
fn the_map_draws_every_arrow_there_is_and_no_other() {
    let graph = import_graph();
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let start = doc.find("Who may import whom").expect("the map's heading");
    let block = doc[start..]
        .split("```")
        .nth(1)
        .expect("the map's code block");
    // Entries, a continuation line (indented) joined to the one before it.
    let mut entries: Vec<String> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        match entries.last_mut() {
            Some(last) if line.starts_with(' ') => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => entries.push(line.trim().to_owned()),
        }
    }
    // `a (note, with commas), b` -> [a, b]: each item one module name outside its notes; an
    // item of two words, a second arrow or unbalanced parentheses is refused, so no module
    // name hides in a line the check does not read.
    let items = |list: &str, wrong: &mut Vec<String>| -> Vec<String> {
        let (mut depth, mut item, mut out) = (0i32, String::new(), Vec::new());
        for c in list.chars().chain([',']) {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    let words: Vec<&str> = item.split_whitespace().collect();
                    match words.as_slice() {
                        [] => {}
                        [word] => out.push(word.trim_end_matches('/').to_owned()),
                        _ => wrong.push(format!(
                            "`{}` in the map is not one module name (notes go in parentheses)",
                            item.trim()
                        )),
                    }
                    item.clear();
                    continue;
                }
                _ => {}
            }
            if depth == 0 && c != ')' {
                item.push(c);
            }
        }
        if depth != 0 || list.contains("──>") {
            wrong.push(format!(
                "unbalanced parentheses or a second arrow in the map: {list}"
            ));
        }
        out
    };
    let mut drawn: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for entry in &entries {
        let (module, imports) = if let Some((head, list)) = entry.split_once("──>") {
            let module = head
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            let imports: BTreeSet<String> = items(list, &mut wrong)
                .into_iter()
                .filter(|i| i != "nothing")
                .collect();
            (vec![module], Some(imports))
        } else if let Some((_, list)) = entry.split_once(':') {
            (items(list, &mut wrong), None)
        } else {
            wrong.push(format!(
                "a line of the map that is neither an entry nor the leaves: {entry}"
            ));
            continue;
        };
        for module in module {
            let imports = imports.clone().unwrap_or_default();
            if drawn.insert(module.clone(), imports).is_some() {
                wrong.push(format!("{module} is drawn twice"));
            }
        }
    }
    let line = |m: &str, refs: &BTreeSet<String>| {
        let list: Vec<&str> = refs.iter().map(String::as_str).collect();
        format!(
            "{m} ──> {}",
            if list.is_empty() {
                "nothing".to_owned()
            } else {
                list.join(", ")
            }
        )
    };
    for (module, imports) in graph {
        match drawn.get(module) {
            None => wrong.push(format!("{module} is not drawn: {}", line(module, imports))),
            Some(d) if d != imports => wrong.push(format!(
                "{module}: drawn {}, imports {} (draw: {})",
                d.iter().cloned().collect::<Vec<_>>().join(", "),
                imports.iter().cloned().collect::<Vec<_>>().join(", "),
                line(module, imports)
            )),
            Some(_) => {}
        }
    }
    for module in drawn.keys().filter(|m| !graph.contains_key(*m)) {
        wrong.push(format!("{module} is drawn but is not a top-level module"));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's map:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_map_counts_what_is_there() {
    let graph = import_graph();
    let modules = graph.len();
    let arrows: usize = graph.values().map(BTreeSet::len).sum();
    println!("import graph: {modules} top-level modules, {arrows} import edges");

    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let stated = format!("{modules} modules and {arrows} arrows");
    assert!(
        doc.contains(&stated),
        "docs/architecture.md's map should say \"{stated}\": the map changed, so redraw it"
    );
}

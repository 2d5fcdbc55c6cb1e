//! The architecture's invariants, checked rather than only stated (in the spirit of
//! rust-analyzer's `xtask/src/tidy.rs`):
//!
//! - the one-way house: a service module (`dns`, `dhcp`, `tftp`, `http`, `lb`, `control`) imports neither
//!   the supervisor, nor another service, nor the config (services read the plan); nothing in
//!   the library imports the supervisor; the top-level modules form no cycle;
//! - nothing below the operator wing imports it (only the supervisor and the CLI do);
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
//! Test code (`tests.rs` files and what follows `#[cfg(test)]`) may build plans from configs and
//! is not held to the import rules.

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

/// The production part of a file: all of it for code, nothing for test-only files.
fn production_code(file: &Path, text: &str) -> String {
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}

/// Every top-level module `code` names through `crate::` (imports and paths alike), ignoring
/// comments.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            // `use crate::{a, b::{c, d}}` names several: the first word of each top-level item.
            if let Some(group) = rest.strip_prefix('{') {
                found.extend(group_heads(group));
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// The first word of each top-level item of a `{...}` use group (`group` starts after `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    let mut finish = |item: &mut String| {
        let head: String = item
            .trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !head.is_empty() {
            heads.push(head);
        }
        item.clear();
    };
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => finish(&mut item),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    finish(&mut item);
    heads
}

fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo().join("appliance/src");
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
        let text = std::fs::read_to_string(&file).unwrap();
        let refs = crate_references(&production_code(&file, &text));
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
    for (module, imports) in &graph {
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
        if let Some(cycle) = visit(node, &graph, &mut state, &mut Vec::new()) {
            panic!("import cycle between modules: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_import_rules_see_what_they_check() {
    // The checks above are only as good as the reference scanner.
    let refs = crate_references(
        "use crate::{plan::{self, Plan}, journal::Journal};\n\
         let x = crate::dns::start(s); // crate::config is in a comment\n",
    );
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["dns", "journal", "plan"]
    );
    let graph = import_graph();
    assert!(graph["dns"].contains("plan"), "{:?}", graph["dns"]);
    assert!(
        graph["supervisor"].contains("dns"),
        "{:?}",
        graph["supervisor"]
    );
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

/// The lines of `code` (outside comments) that bind a listener; `UdpSocket::bind` too unless
/// `udp_allowed`.
fn binds(code: &str, udp_allowed: bool) -> Vec<String> {
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|line| {
            LISTENER_BINDS.iter().any(|b| line.contains(b))
                || (!udp_allowed && line.contains("UdpSocket::bind"))
        })
        .map(|line| line.trim().to_owned())
        .collect()
}

#[test]
fn only_sockets_rs_binds_a_listener() {
    assert_eq!(
        binds("let l = std::net::TcpListener::bind(addr)?; // x", false).len(),
        1
    );
    assert_eq!(binds("let s = UdpSocket::bind(a).await?;", false).len(), 1);
    assert!(binds("let s = UdpSocket::bind(a).await?;", true).is_empty());
    assert!(binds("// UnixListener::bind(path) in a comment", false).is_empty());
    let src = repo().join("appliance/src");
    let mut wrong = Vec::new();
    for (rel, file) in &source_files() {
        if rel == "sockets.rs" || TEST_SUPPORT_SOCKETS.iter().any(|(name, _)| name == rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let udp_allowed = CLIENT_SOCKETS.iter().any(|(name, _)| *name == rel.as_str());
        for line in binds(&production_code(file, &text), udp_allowed) {
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
    let sockets = std::fs::read_to_string(src.join("sockets.rs")).unwrap();
    assert!(
        !binds(&sockets, false).is_empty(),
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
const LEAVES: [&str; 12] = [
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

/// The `crate::lb::...` paths `code` names, outside comments (`lb::drain::drain`).
fn lb_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        for (at, _) in line.match_indices("crate::lb::") {
            let path: String = line[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.insert(path.trim_end_matches(':').to_owned());
        }
    }
    found
}

#[test]
fn the_orchestration_reaches_the_load_balancer_only_through_drain() {
    assert_eq!(
        lb_paths("use crate::lb::SharedPools; crate::lb::drain::drain(p); // crate::lb::pool"),
        BTreeSet::from(["lb::SharedPools".to_owned(), "lb::drain::drain".to_owned()])
    );
    let src = repo().join("appliance/src");
    let mut files = Vec::new();
    rust_files(&src.join("orchestration"), &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for path in lb_paths(&production_code(file, &text)) {
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

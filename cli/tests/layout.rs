//! The workspace's layout is its architecture, and this test keeps it so (no build, no
//! network: it reads the sources and the manifests).
//!
//! - The top-level folders are the crates the README's layout table names, each with a crate
//!   doc that says what it owns and what it must never do.
//! - No executor (`outpost-exec-*`) is a dependency of anything but the `outpost` binary,
//!   whose registry is the one place that picks executors.
//! - An async runtime (tokio, smol) is a dependency only of `outpost-adapters` (the daemon's
//!   hosts), `outpost-server` (axum and hyper run on tokio), `outpost-exec-docker` (bollard,
//!   the Docker client, is async) and `outpost-exec-wasm` (wasmtime-wasi's output streams are
//!   tokio's `AsyncWrite`; it starts no runtime).
//! - `outpost-core` depends on no other crate of the workspace.
//! - No import circle between the modules of a crate: a module may use its ancestors (the
//!   interface it lives under) and its descendants, and siblings only one way.
//! - The HTTP API's bodies are the core's types (`outpost_core::api`): the CLI's client reads
//!   no answer by indexing JSON, and the daemon's signed client defines no body of its own.
//! - The CLI uses the daemon crate through its root (`outpost_daemon::run_daemon`, …), never
//!   one of its modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates, by folder, and their package names.
const CRATES: &[(&str, &str)] = &[
    ("core", "outpost-core"),
    ("host", "outpost-host"),
    ("exec-shell", "outpost-exec-shell"),
    ("exec-wasm", "outpost-exec-wasm"),
    ("exec-docker", "outpost-exec-docker"),
    ("exec-pty", "outpost-exec-pty"),
    ("adapters", "outpost-adapters"),
    ("daemon", "outpost-daemon"),
    ("server", "outpost-server"),
    ("cli", "outpost"),
    ("condition", "outpost-condition"),
    ("vectors", "outpost-vectors"),
    ("fuzz", "outpost-fuzz"),
];

/// Packages that may depend on an async runtime, and why.
const RUNTIME_USERS: &[(&str, &str)] = &[
    ("outpost-adapters", "the daemon's tokio and smol hosts"),
    ("outpost-server", "axum and hyper run on tokio"),
    (
        "outpost-exec-docker",
        "bollard, the Docker client, is async",
    ),
    (
        "outpost-exec-wasm",
        "wasmtime-wasi's output streams are tokio's AsyncWrite (no runtime is started)",
    ),
];

const RUNTIMES: &[&str] = &["tokio", "smol", "async-std", "async-executor"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The names a manifest's built code may use: `[dependencies]`, `[dependencies.NAME]` and
/// every `[target.'cfg(..)'.dependencies]`. Dev-dependencies are left out: a crate's tests may
/// drive a real executor (the daemon's tests run real shell capabilities), its code may not.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            let table = header
                .strip_prefix("target.")
                .and_then(|rest| rest.rsplit_once('.').map(|(_, table)| table))
                .unwrap_or(header);
            inside = table == "dependencies";
            if let Some(name) = header.strip_prefix("dependencies.") {
                names.insert(name.to_owned());
            }
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, _)) = line.split_once('=') {
            let name = name.trim().trim_end_matches(".workspace").trim();
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn dependencies_are_read_from_every_table_the_built_code_uses() {
    let manifest = r#"
[package]
name = "x"

[dependencies]
serde.workspace = true
tokio = { version = "1" }

[dependencies.smol]
version = "2"

[target.'cfg(target_os = "linux")'.dependencies]
outpost-exec-shell.workspace = true

[target.'cfg(unix)'.dev-dependencies]
criterion = "0.5"

[dev-dependencies]
proptest.workspace = true
"#;
    let names: Vec<String> = dependencies(manifest).into_iter().collect();
    assert_eq!(names, ["outpost-exec-shell", "serde", "smol", "tokio"]);
}

#[test]
fn the_top_level_folders_are_the_crates_each_saying_what_it_owns_and_never_does() {
    let root = root();
    let mut folders: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir()
            && !name.starts_with('.')
            && !["target", "docs", "examples"].contains(&name.as_str())
        {
            folders.insert(name);
        }
    }
    let expected: BTreeSet<String> = CRATES.iter().map(|(d, _)| (*d).to_owned()).collect();
    assert_eq!(folders, expected, "the top-level folders are the crates");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for (folder, package) in CRATES {
        let manifest = std::fs::read_to_string(root.join(folder).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "{folder}/Cargo.toml names {package}"
        );
        assert!(
            readme.contains(&format!("| `{folder}/`")),
            "the README's layout table has a row for {folder}/"
        );
        let readme = root.join(folder).join("README.md");
        let src = root.join(folder).join("src");
        let top = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists());
        let (doc, file) = match (&top, readme.exists()) {
            (Some(top), _) => {
                let text = std::fs::read_to_string(top).unwrap();
                let doc = text
                    .lines()
                    .take_while(|l| l.starts_with("//!") || l.starts_with("#!"))
                    .collect::<Vec<_>>()
                    .join("\n");
                (doc, top.clone())
            }
            (None, true) => (std::fs::read_to_string(&readme).unwrap(), readme.clone()),
            (None, false) => panic!("{folder} has neither src/lib.rs, src/main.rs nor README.md"),
        };
        assert!(
            doc.contains("never") && doc.lines().count() >= 4,
            "{} opens with a doc that says what the crate owns and what it must never do",
            file.display()
        );
    }
}

#[test]
fn executors_are_picked_by_the_registry_alone_and_runtimes_stay_where_they_are_needed() {
    let root = root();
    let mut failures = Vec::new();
    for (folder, package) in CRATES {
        let manifest = std::fs::read_to_string(root.join(folder).join("Cargo.toml")).unwrap();
        let deps = dependencies(&manifest);
        for dep in &deps {
            if dep.starts_with("outpost-exec-") && *package != "outpost" {
                failures.push(format!(
                    "{package} depends on the executor {dep}: only the `outpost` binary's registry may"
                ));
            }
            if RUNTIMES.contains(&dep.as_str()) && !RUNTIME_USERS.iter().any(|(p, _)| p == package)
            {
                failures.push(format!(
                    "{package} depends on the async runtime {dep}: runtimes belong in outpost-adapters"
                ));
            }
            if *package == "outpost-core" && dep.starts_with("outpost-") {
                failures.push(format!(
                    "outpost-core depends on {dep}: the core stands alone"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One source file as a module: its path in the crate and its text, comments and strings
/// blanked.
struct Module {
    file: PathBuf,
    path: Vec<String>,
    code: String,
    /// Child modules declared as test code.
    test_children: BTreeSet<String>,
}

/// `code` with comments, string and char literals replaced by spaces (lengths kept).
fn blank(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            while i < b.len() && !b[i..].starts_with(b"*/") {
                out.push(b' ');
                i += 1;
            }
        } else if b[i] == b'"' || (b[i] == b'r' && b.get(i + 1).is_some_and(|c| *c == b'#')) {
            // A string, raw or not: skipped to its end.
            let hashes = if b[i] == b'r' {
                let mut n = 0;
                i += 1;
                out.push(b' ');
                while i < b.len() && b[i] == b'#' {
                    n += 1;
                    i += 1;
                    out.push(b' ');
                }
                Some(n)
            } else {
                None
            };
            if i < b.len() && b[i] == b'"' {
                out.push(b' ');
                i += 1;
                while i < b.len() {
                    if hashes.is_none() && b[i] == b'\\' {
                        out.extend([b' ', b' ']);
                        i += 2;
                        continue;
                    }
                    if b[i] == b'"' {
                        let n = hashes.unwrap_or(0);
                        if b[i + 1..].iter().take(n).filter(|c| **c == b'#').count() == n {
                            out.extend(std::iter::repeat_n(b' ', n + 1));
                            i += n + 1;
                            break;
                        }
                    }
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The attributes that make an item test code: unit tests and the `test-support` feature's
/// harness may reach anywhere.
const TEST_ONLY: &[&str] = &[
    "#[cfg(test)]",
    "#[cfg(any(test, feature = \"test-support\"))]",
    "#[cfg(feature = \"test-support\")]",
];

/// `code` ([`blank`]ed `text`) with every item under a [`TEST_ONLY`] attribute blanked (up
/// to its `;` or its closing brace), and the child modules so declared. The attributes are
/// found in `text` (their strings are blank in `code`) where `code` shows one too (not in a
/// comment).
fn without_tests(text: &str, code: &str) -> (String, BTreeSet<String>) {
    let mut b = code.as_bytes().to_vec();
    let mut test_children = BTreeSet::new();
    let mut from = 0;
    while let Some((at, attr)) = TEST_ONLY
        .iter()
        .filter_map(|a| text[from..].find(a).map(|i| (from + i, *a)))
        .min()
    {
        if !code[at..].starts_with("#[cfg(") {
            from = at + attr.len();
            continue;
        }
        let mut i = at + attr.len();
        let item_start = i;
        let mut depth = 0usize;
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let end = i.min(b.len());
        let item = String::from_utf8_lossy(&b[item_start..end]).into_owned();
        if let Some(name) = declared_module(&item) {
            test_children.insert(name);
        }
        for c in &mut b[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    (String::from_utf8_lossy(&b).into_owned(), test_children)
}

/// The module an item declares from a file of its own (`mod x;`, any visibility).
fn declared_module(item: &str) -> Option<String> {
    let l = item.trim();
    let l = l
        .strip_prefix("pub(crate) ")
        .or(l.strip_prefix("pub "))
        .unwrap_or(l);
    l.strip_prefix("mod ")?
        .strip_suffix(';')
        .map(|n| n.trim().to_owned())
}

fn modules(src: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut path: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(path.last().map(String::as_str), Some("mod")) {
            path.pop();
        }
        if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
            path.clear();
        }
        if path.first().is_some_and(|p| p == "bin") {
            continue; // extra binaries are not the crate's structure
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let (code, test_children) = without_tests(&text, &blank(&text));
        out.push(Module {
            file,
            path,
            code,
            test_children,
        });
    }
    // A module declared as test code is test code with all it holds.
    let test_only: Vec<Vec<String>> = out
        .iter()
        .flat_map(|m| {
            m.test_children.iter().map(|c| {
                let mut p = m.path.clone();
                p.push(c.clone());
                p
            })
        })
        .collect();
    out.retain(|m| !test_only.iter().any(|t| m.path.starts_with(t)));
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn skip_space(b: &[u8], i: &mut usize) {
    while *i < b.len() && b[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

fn ident(b: &[u8], i: &mut usize) -> Option<String> {
    let start = *i;
    while *i < b.len() && is_ident(b[*i]) {
        *i += 1;
    }
    (start < *i).then(|| String::from_utf8_lossy(&b[start..*i]).into_owned())
}

/// Every path that starts at `i` (after a leading `x::`), a `{ … }` group spelled out.
fn paths(b: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut segments = prefix;
    loop {
        skip_space(b, i);
        if *i < b.len() && b[*i] == b'{' {
            *i += 1;
            loop {
                skip_space(b, i);
                if *i >= b.len() || b[*i] == b'}' {
                    *i += 1;
                    return;
                }
                let before = *i;
                paths(b, i, segments.clone(), out);
                skip_space(b, i);
                if *i < b.len() && b[*i] == b',' {
                    *i += 1;
                }
                if *i == before {
                    *i += 1; // something this reader does not know: step over it
                }
            }
        }
        match ident(b, i) {
            Some(name) if name != "self" && name != "as" => segments.push(name),
            Some(_) => {}
            None => {
                out.push(segments);
                return;
            }
        }
        skip_space(b, i);
        if b[*i..].starts_with(b"::") {
            *i += 2;
        } else {
            out.push(segments);
            return;
        }
    }
}

/// The child modules a file declares (`mod x;`, with any visibility).
fn children(code: &str) -> BTreeSet<String> {
    code.lines().filter_map(declared_module).collect()
}

/// Which module of `known` each path reaches (the deepest one it names), with the line that
/// names it.
fn references(module: &Module, known: &BTreeSet<Vec<String>>) -> Vec<(Vec<String>, usize)> {
    let own_children = children(&module.code);
    let b = module.code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut j = i;
        let word = ident(b, &mut j).unwrap_or_default();
        let mut k = j;
        skip_space(b, &mut k);
        if !b[k..].starts_with(b"::") {
            i = j;
            continue;
        }
        let mut base: Vec<String> = match word.as_str() {
            "crate" => Vec::new(),
            "self" => module.path.clone(),
            "super" => module.path[..module.path.len().saturating_sub(1)].to_vec(),
            child if own_children.contains(child) => {
                let mut p = module.path.clone();
                p.push(child.to_owned());
                p
            }
            _ => {
                i = j;
                continue;
            }
        };
        k += 2;
        // `super::super::…`
        loop {
            let mut m = k;
            skip_space(b, &mut m);
            if b[m..].starts_with(b"super") && b[m + 5..].starts_with(b"::") {
                base.pop();
                k = m + 7;
            } else {
                break;
            }
        }
        let mut paths_here = Vec::new();
        paths(b, &mut k, base, &mut paths_here);
        let line = 1 + b[..i].iter().filter(|c| **c == b'\n').count();
        found.extend(paths_here.into_iter().map(|p| (p, line)));
        i = k.max(j);
    }
    found
        .into_iter()
        .map(|(path, line)| {
            let mut deepest = Vec::new();
            for n in 1..=path.len() {
                if known.contains(&path[..n]) {
                    deepest = path[..n].to_vec();
                }
            }
            (deepest, line)
        })
        .collect()
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn circles(graph: &Graph) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit(w: &mut Walk<'_>, v: &Vec<String>) {
        let n = w.index.len();
        w.index.insert(v.clone(), n);
        w.low.insert(v.clone(), n);
        w.stack.push(v.clone());
        w.on_stack.insert(v.clone());
        for next in w.graph.get(v).into_iter().flatten() {
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[v].min(w.low[next]);
                w.low.insert(v.clone(), low);
            } else if w.on_stack.contains(next) {
                let low = w.low[v].min(w.index[next]);
                w.low.insert(v.clone(), low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(&top);
                let done = &top == v;
                component.push(top);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

/// The import graph of one crate's sources, between siblings: a module that names another
/// outside its own subtree and its ancestors makes an edge between the two siblings that hold
/// them (children of the pair's nearest common ancestor). A module's ancestors are the
/// interface it lives under and its descendants its own parts: neither is an edge.
fn import_graph(src: &Path) -> (Graph, Witnesses) {
    let modules = modules(src);
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let mut graph = Graph::new();
    let mut witnesses = Witnesses::new();
    for m in &modules {
        for (target, line) in references(m, &known) {
            let common = m
                .path
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == target.len() || common == m.path.len() {
                continue;
            }
            let edge = (m.path[..=common].to_vec(), target[..=common].to_vec());
            graph
                .entry(edge.0.clone())
                .or_default()
                .insert(edge.1.clone());
            witnesses
                .entry(edge)
                .or_insert_with(|| format!("{}:{line}", m.file.display()));
        }
    }
    (graph, witnesses)
}

/// Modules and the modules each uses.
type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// For each edge, the first `file:line` that makes it.
type Witnesses = BTreeMap<(Vec<String>, Vec<String>), String>;

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let root = root();
    let mut report = Vec::new();
    for (folder, _) in CRATES {
        let src = root.join(folder).join("src");
        if !src.exists() {
            continue; // fuzz/: targets, no modules
        }
        let (graph, witnesses) = import_graph(&src);
        for circle in circles(&graph) {
            let members: BTreeSet<&Vec<String>> = circle.iter().collect();
            let mut edges = Vec::new();
            for from in &circle {
                for to in graph.get(from).into_iter().flatten() {
                    if members.contains(to) {
                        let at = &witnesses[&(from.clone(), to.clone())];
                        let at = at
                            .strip_prefix(&format!("{}/", root.display()))
                            .unwrap_or(at);
                        edges.push(format!("  {} → {} ({at})", from.join("::"), to.join("::")));
                    }
                }
            }
            report.push(format!("{folder}:\n{}", edges.join("\n")));
        }
    }
    assert!(
        report.is_empty(),
        "import circles (a module may use its ancestors and descendants, siblings one way):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_siblings_that_use_each_other_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("outpost-layout-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\npub use a::X;\n// crate::b::y in a comment\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "mod inner;\nuse crate::{b::{self, Y}, Z};\npub struct X;\nfn g() { inner::h() }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/inner.rs"),
        "use super::X;\nuse super::super::Z;\n",
    )
    .unwrap();
    // `b` names `a` only in a string and in test code: one way, from `a` to `b`.
    std::fs::write(
        src.join("b.rs"),
        "pub fn f() { let s = \"crate::a::X\"; }\n#[cfg(test)]\nmod tests {\n    fn t() { crate::a::inner::h() }\n}\n#[cfg(feature = \"test-support\")]\npub fn g() -> crate::a::X { crate::a::X }\n",
    )
    .unwrap();
    let (graph, _) = import_graph(&src);
    let one_way = circles(&graph);
    // Now `b` reaches into `a`'s part: `a` and `b` use each other.
    std::fs::write(src.join("b.rs"), "pub fn f() { crate::a::inner::h() }\n").unwrap();
    let (graph, _) = import_graph(&src);
    let found = circles(&graph);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(one_way.is_empty(), "one way between siblings: {graph:?}");
    assert_eq!(found.len(), 1, "{graph:?}");
    let mut members = found[0].clone();
    members.sort();
    assert_eq!(members, vec![vec!["a".to_owned()], vec!["b".to_owned()]]);
}

/// Whether `line` indexes a JSON value by name (`value["name"]`, `v["a"]["b"]`): a `["`
/// right after an expression, not an array literal.
fn indexes_json(line: &str) -> bool {
    line.match_indices("[\"").any(|(at, _)| {
        line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ')' | ']'))
    })
}

/// The lines of the files under `dir` (recursively) that contain any of `needles` (or, with
/// `indexing`, index a JSON value by name), outside their tests.
fn lines_with(dir: &Path, needles: &[&str], indexing: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                if needles.iter().any(|needle| line.contains(needle))
                    || (indexing && indexes_json(line))
                {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn request_and_answer_bodies_are_the_core_s_types() {
    assert!(indexes_json(r#"let x = v["a"];"#) && indexes_json(r#"f()["b"]"#));
    assert!(!indexes_json(r#"for f in ["a", "b"] {"#));
    let root = root();
    // A request body is a core type (`&json!({})`, an empty one, is the only literal left).
    let indexing = lines_with(
        &root.join("cli/src/client"),
        &["&json!({\"", "&json!({ \""],
        true,
    );
    assert!(
        indexing.is_empty(),
        "the CLI's client builds or reads a body by hand instead of with outpost_core::api:\n{}",
        indexing.join("\n")
    );
    let own_bodies = lines_with(
        &root.join("adapters/src"),
        &[
            "struct RegisterRequest",
            "struct Registered",
            "struct CommandAuthorize",
        ],
        false,
    );
    assert!(
        own_bodies.is_empty(),
        "the signed client defines a body the core already has:\n{}",
        own_bodies.join("\n")
    );
}

/// Whether `line` names an item inside one of the daemon crate's modules
/// (`outpost_daemon::module::item`) instead of its root.
fn reaches_into_the_daemon(line: &str) -> bool {
    line.match_indices("outpost_daemon::").any(|(at, needle)| {
        let rest = &line[at + needle.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        name.starts_with(|c: char| c.is_ascii_lowercase()) && rest[name.len()..].starts_with("::")
    })
}

#[test]
fn the_cli_uses_the_daemon_through_its_root_alone() {
    assert!(reaches_into_the_daemon(
        "outpost_daemon::update::running_version()"
    ));
    assert!(!reaches_into_the_daemon(
        "outpost_daemon::running_version()"
    ));
    assert!(!reaches_into_the_daemon(
        "use outpost_daemon::{DRAIN_LIMIT, run_daemon};"
    ));
    let root = root();
    let reaching: Vec<String> = lines_with(&root.join("cli/src"), &["outpost_daemon::"], false)
        .into_iter()
        .filter(|line| reaches_into_the_daemon(line))
        .collect();
    assert!(
        reaching.is_empty(),
        "the CLI reaches into the daemon's modules instead of its root surface:\n{}",
        reaching.join("\n")
    );
}

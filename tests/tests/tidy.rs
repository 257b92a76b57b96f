//! Tidy: the checks that keep the tree readable and the map true, so they
//! cannot rot silently. Every path `ARCHITECTURE.md` names exists; every
//! crate and module opens with a `//!` header that says why it exists; no
//! source file outside tests is over 800 lines; and no module of the server
//! library imports a module that imports it back (the layering
//! `ARCHITECTURE.md` describes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Source files may not grow past this; split by idea instead.
const MAX_LINES: usize = 800;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

/// Every file under `dir` (recursively) whose name ends with `ext`, skipping
/// build output, virtual environments, fetched tools and hidden folders.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name.starts_with('.')
                || matches!(name.as_str(), "target" | "models" | "node_modules")
            {
                continue;
            }
            files(&p, ext, out);
        } else if name.ends_with(ext) {
            out.push(p);
        }
    }
}

fn rust_files() -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    for top in ["api", "controlplane", "executor", "schemas", "tests"] {
        files(&root.join(top), ".rs", &mut out);
    }
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// Test code: integration tests, benches, fixtures, test-support crates.
fn is_test_code(rel: &str) -> bool {
    rel.starts_with("tests/")
        || rel.contains("/tests/")
        || rel.contains("/benches/")
        || rel.ends_with("/tests.rs")
}

#[test]
fn every_module_opens_with_a_header_that_says_why() {
    let missing: Vec<String> = rust_files()
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|p| rel(p))
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` header saying why they exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = rust_files()
        .iter()
        .map(|p| (rel(p), std::fs::read_to_string(p).unwrap_or_default()))
        .filter(|(r, text)| !is_test_code(r) && text.lines().count() > MAX_LINES)
        .map(|(r, text)| format!("{r}: {} lines", text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "split these by idea (at most {MAX_LINES} lines a file outside tests):\n{}",
        long.join("\n")
    );
}

/// The backticked tokens of `text` that read as repository paths.
fn named_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 0 || part.contains(' ') || part.contains("::") || part.contains('*') {
            continue;
        }
        let looks_like_file = [".rs", ".md", ".sh", ".py", ".sql", ".json", ".toml"]
            .iter()
            .any(|e| part.ends_with(e));
        let looks_like_dir = part.ends_with('/') && part.len() > 1;
        if (looks_like_file || looks_like_dir) && !part.starts_with("http") {
            out.insert(part.trim_start_matches("./").to_string());
        }
    }
    out
}

/// Every path under the repository (files and folders), relative, with `/`.
fn all_paths() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || matches!(name.as_str(), "target" | "models") {
                continue;
            }
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.iter()
        .map(|p| {
            let r = rel(p);
            if p.is_dir() { format!("{r}/") } else { r }
        })
        .collect()
}

#[test]
fn every_path_architecture_md_names_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md is at the workspace root");
    let paths = all_paths();
    let tops = [
        "api/",
        "controlplane/",
        "executor/",
        "schemas/",
        "tests/",
        "scripts/",
        "migrations/",
    ];
    let mut missing = Vec::new();
    for named in named_paths(&text) {
        let found = if tops.iter().any(|t| named.starts_with(t)) {
            // A path from the root must exist exactly.
            paths.contains(&named)
        } else {
            // A path inside the section's crate or folder: some path ends with it.
            paths
                .iter()
                .any(|p| *p == named || p.ends_with(&format!("/{named}")))
        };
        if !found {
            missing.push(named);
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist (update the map):\n{}",
        missing.join("\n")
    );
}

/// The module a file of a crate's `src/` defines, as `a::b` (`lib.rs` is the
/// root, `x/mod.rs` is `x`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The `crate::` paths a file names, `use crate::{a, b::c}` groups included
/// (one level deep), each as its module segments.
fn crate_refs(text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.push(segments(item.trim()));
            }
        } else {
            out.push(segments(rest));
        }
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut s = s;
    loop {
        let end = s
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            break;
        }
        segs.push(s[..end].to_string());
        match s[end..].strip_prefix("::") {
            Some(r) => s = r,
            None => break,
        }
    }
    segs
}

/// The strongly connected components of more than one module.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules are in one cycle when each reaches the other.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for k in graph.keys() {
        if placed.contains(k) {
            continue;
        }
        let comp: Vec<String> = graph
            .keys()
            .filter(|o| *o == k || (reaches[k].contains(*o) && reaches[o].contains(k)))
            .cloned()
            .collect();
        if comp.len() > 1 {
            placed.extend(comp.iter().cloned());
            out.push(comp);
        }
    }
    out
}

/// The import graph of a crate's modules at `depth` path segments.
fn module_graph(src: &Path, depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let mut list = Vec::new();
    files(src, ".rs", &mut list);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in list {
        let me = module_of(src, &f);
        if me.is_empty() {
            continue;
        }
        let me_key = me[..me.len().min(depth)].join("::");
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let entry = graph.entry(me_key.clone()).or_default();
        for r in crate_refs(&text) {
            let key = r[..r.len().min(depth)].join("::");
            if !key.is_empty() && key != me_key && !me_key.starts_with(&format!("{key}::")) {
                entry.insert(key);
            }
        }
    }
    // Keep edges to modules only (not to items re-exported at a folder's root).
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

#[test]
fn the_server_library_has_no_import_cycles() {
    let src = root().join("api/src");
    for depth in [1, 2, 3] {
        let found = cycles(&module_graph(&src, depth));
        assert!(
            found.is_empty(),
            "modules of api/src that import each other (depth {depth}); move what both use \
             to a module below them:\n{found:?}"
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        crate_refs("use crate::{a::b, c};\nlet x = crate::d::e(); // crate::f"),
        vec![vec!["a", "b"], vec!["c"], vec!["d", "e"]]
    );
}

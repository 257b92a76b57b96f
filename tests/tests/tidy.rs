//! Tidy: the checks that keep the tree readable and the map true, so they
//! cannot rot silently. Every path `ARCHITECTURE.md` names exists; every
//! crate and module opens with a `//!` header that says why it exists; no
//! source file outside tests is over 800 lines; and in no crate of the
//! workspace does a module import a module that imports it back (the layering
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
    for top in [
        "api",
        "controlplane",
        "executor",
        "schemas",
        "tests",
        "distributed",
        "stats",
    ] {
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

/// The `crate::` paths a file names, `use crate::{a, b::{c, d}}` groups
/// included (nested to any depth), each as its module segments: the leading
/// lowercase segments, so `crate::a::Type::f` is `a`.
fn crate_refs(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code = without_comments(text);
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let mut tree = rest;
        use_tree(&mut tree, &[], true, &mut out);
    }
    out
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `super::` paths of a file whose module is `me`, as `crate::` paths
/// (`super::super::a` in `x::y::z` is `x::a`). Inside a top-level inline
/// module (`mod tests {` to the `}` that closes it in column 0), `super` is
/// the file's module itself.
fn super_refs(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let code = without_comments(text);
    // Whether each line (by its first byte) is inside an inline module.
    let mut lines = Vec::new();
    let mut inline = false;
    let mut at = 0;
    for line in code.split('\n') {
        if !line.starts_with(char::is_whitespace) {
            let decl = line
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            if decl.starts_with("mod ") && line.trim_end().ends_with('{') {
                inline = true;
            } else if line.trim_end() == "}" {
                inline = false;
            }
        }
        lines.push((at, inline));
        at += line.len() + 1;
    }
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("super::") {
        let pos = code.len() - rest.len() + i;
        rest = &rest[i + "super::".len()..];
        let before = code[..pos].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut up = 1;
        while let Some(r) = rest.trim_start().strip_prefix("super::") {
            rest = r;
            up += 1;
        }
        let inline = lines
            .iter()
            .rev()
            .find(|(start, _)| *start <= pos)
            .is_some_and(|(_, inline)| *inline);
        let base = me.len() + usize::from(inline);
        let Some(keep) = base.checked_sub(up) else {
            continue;
        };
        let mut tree = rest;
        use_tree(&mut tree, &me[..keep.min(me.len())], true, &mut out);
    }
    out
}

/// Reads the path or use tree at the start of `s` (what follows `crate::` or
/// a group's `{` or `,`), moving `s` past it, and pushes each path it names,
/// after `prefix`, onto `out`. `open` is false once a segment named an item
/// rather than a module: later segments are not modules.
fn use_tree(s: &mut &str, prefix: &[String], open: bool, out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut open = open;
    loop {
        *s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            *s = group;
            loop {
                *s = s.trim_start();
                if let Some(r) = s.strip_prefix('}') {
                    *s = r;
                    return;
                }
                let before = s.len();
                use_tree(s, &path, open, out);
                *s = s.trim_start();
                if let Some(r) = s.strip_prefix(',') {
                    *s = r;
                } else if !s.starts_with('}') || s.len() == before {
                    return; // not a use tree: stop reading
                }
            }
        }
        if let Some(r) = s.strip_prefix('*') {
            *s = r;
            break;
        }
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            break;
        }
        let seg = &s[..end];
        *s = &s[end..];
        if seg == "self" {
            // `a::{self, b}`: `self` is `a`.
        } else if open
            && seg
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            path.push(seg.to_string());
        } else {
            open = false;
        }
        match s.strip_prefix("::") {
            Some(r) => *s = r,
            None => break,
        }
    }
    // `a::b as c`: skip the new name.
    let t = s.trim_start();
    if let Some(r) = t
        .strip_prefix("as")
        .filter(|r| r.starts_with(char::is_whitespace))
    {
        let r = r.trim_start();
        let end = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        *s = &r[end..];
    }
    out.push(path);
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
        if f.starts_with(src.join("bin")) {
            continue; // each file of `src/bin/` is a crate of its own
        }
        let me = module_of(src, &f);
        if me.is_empty() {
            continue;
        }
        let me_key = me[..me.len().min(depth)].join("::");
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let entry = graph.entry(me_key.clone()).or_default();
        for r in crate_refs(&text).into_iter().chain(super_refs(&text, &me)) {
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

/// The `src/` folder of every crate at or under `dir`: each folder that holds
/// a `Cargo.toml` and a `src/`, skipping build output, fetched models and
/// tools and hidden folders.
fn crate_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
        out.push(dir.join("src"));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            e.path().is_dir()
                && !name.starts_with('.')
                && !matches!(name.as_str(), "target" | "models" | "node_modules" | "src")
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for d in dirs {
        crate_sources(&d, out);
    }
}

#[test]
fn no_crate_has_an_import_cycle() {
    let mut sources = Vec::new();
    crate_sources(&root(), &mut sources);
    let mut found = Vec::new();
    for src in &sources {
        for depth in [1, 2, 3] {
            let graph = module_graph(src, depth);
            for c in cycles(&graph) {
                // Each module's imports within the circle, to see where to cut.
                let edges: Vec<String> = c
                    .iter()
                    .map(|m| {
                        let to: Vec<&str> = graph[m]
                            .iter()
                            .filter(|d| c.contains(d))
                            .map(String::as_str)
                            .collect();
                        format!("{m} -> {}", to.join(", "))
                    })
                    .collect();
                found.push(format!(
                    "{} (depth {depth}): {}",
                    rel(src),
                    edges.join("; ")
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other, directly or round a circle; move what both \
         use to a module below them:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_crate_of_the_workspace_is_found() {
    let mut sources = Vec::new();
    crate_sources(&root(), &mut sources);
    let found: Vec<String> = sources.iter().map(|p| rel(p)).collect();
    for want in [
        "api/src",
        "api/cli/src",
        "api/bench/src",
        "controlplane/src",
        "executor/src",
        "schemas/src",
        "tests/support/src",
        "distributed/src",
        "distributed/routing/src",
        "distributed/sim/src",
        "stats/src",
    ] {
        assert!(found.iter().any(|f| f == want), "{want} not in {found:?}");
    }

    // A tree of its own: crates nested in crates are found; build output,
    // hidden and fetched folders and folders without `src/` are not.
    let tmp = std::env::temp_dir().join(format!("tidy-crates-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for d in [
        "a/src",
        "a/b/src",
        "d/e/src",
        "target/t/src",
        ".git/h/src",
        "models/m/src",
        "node_modules/n/src",
        "c",
    ] {
        std::fs::create_dir_all(tmp.join(d)).unwrap();
    }
    for c in [
        "a",
        "a/b",
        "d/e",
        "target/t",
        ".git/h",
        "models/m",
        "node_modules/n",
        "c",
    ] {
        std::fs::write(tmp.join(c).join("Cargo.toml"), "").unwrap();
    }
    let mut sources = Vec::new();
    crate_sources(&tmp, &mut sources);
    let got: Vec<String> = sources
        .iter()
        .map(|p| {
            p.strip_prefix(&tmp)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    std::fs::remove_dir_all(&tmp).unwrap();
    assert_eq!(got, ["a/src", "a/b/src", "d/e/src"]);

    // A folder that is not there holds no crates.
    let mut none = Vec::new();
    crate_sources(&tmp.join("distributed"), &mut none);
    assert!(none.is_empty());
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

#[test]
fn nested_use_groups_name_only_their_own_paths() {
    assert_eq!(
        crate_refs("use crate::{a::{b, c}, d};"),
        vec![vec!["a", "b"], vec!["a", "c"], vec!["d"]]
    );
    assert_eq!(
        crate_refs(
            "use crate::{\n    a::{self, b::{c, Type as T}, *},\n    e::F,\n    g as h,\n};\nfn f() {}"
        ),
        vec![
            vec!["a"],
            vec!["a", "b", "c"],
            vec!["a", "b"],
            vec!["a"],
            vec!["e"],
            vec!["g"],
        ]
    );
    // An item's members are not modules.
    assert_eq!(
        crate_refs("use crate::a::Type::{x, y};"),
        vec![vec!["a"], vec!["a"]]
    );
    assert_eq!(
        crate_refs("pub(crate) fn f() {}"),
        Vec::<Vec<String>>::new()
    );
}

#[test]
fn super_paths_resolve_from_the_files_module() {
    let me: Vec<String> = ["x", "y", "z"].map(String::from).to_vec();
    assert_eq!(
        super_refs(
            "use super::{\n    a,\n    b::{c, d},\n};\nfn f() { super::super::e::g(); }\n",
            &me
        ),
        vec![
            vec!["x", "y", "a"],
            vec!["x", "y", "b", "c"],
            vec!["x", "y", "b", "d"],
            vec!["x", "e", "g"],
        ]
    );
    // In an inline module `super` is the file's own module.
    assert_eq!(
        super_refs(
            "use super::a;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::b;\n}\nuse super::c;\n",
            &me
        ),
        vec![
            vec!["x", "y", "a"],
            vec!["x", "y", "z"],
            vec!["x", "y", "b"],
            vec!["x", "y", "c"],
        ]
    );
}

/// The `*_id: String` fields that are strings by design: `(file, field,
/// why)`. Every other `name_id: String` field outside tests fails
/// [`ids_are_typed_but_for_the_named_exceptions`]; ARCHITECTURE.md names these
/// too. An entry that no longer matches a field fails as well, so the list
/// cannot outlive its reasons.
const STRING_IDS: &[(&str, &str, &str)] = &[
    (
        "api/src/backend/served.rs",
        "model_id",
        "a model's display name (`served_model_name` or the file's stem), chosen by the operator",
    ),
    ("api/src/state.rs", "model_id", "the same display name"),
    (
        "api/src/http/routes/admin/mod.rs",
        "stream_id",
        "the audit API's stream ids are composite keys over every aggregate's ids",
    ),
    (
        "api/src/http/routes/admin/deployments.rs",
        "revision_id",
        "a traffic row reads the request log's rows, stored as written",
    ),
    (
        "controlplane/src/requestlog/mod.rs",
        "request_id",
        "a request-log row is the store's boundary: long ids are kept as prefix and digest \
         (bounds.rs), and rows are read back as any build wrote them",
    ),
    (
        "controlplane/src/requestlog/mod.rs",
        "deployment_id",
        "the same row; empty when a request was refused before it was routed",
    ),
    (
        "controlplane/src/batch/input.rs",
        "custom_id",
        "a batch line's label: any string the client chose (OpenAI's contract)",
    ),
    (
        "controlplane/src/batch/runner.rs",
        "custom_id",
        "the same label",
    ),
    ("schemas/src/batch.rs", "custom_id", "the same label"),
    (
        "schemas/src/batch.rs",
        "input_file_id",
        "OpenAI's batch body: a malformed file id is the same 404 as an unknown one, \
         so the handler parses it",
    ),
    (
        "api/cli/src/tenants.rs",
        "key_id",
        "the CLI is a plain HTTP client of the admin API, which parses what the operator typed",
    ),
    (
        "api/bench/src/scenario/figures.rs",
        "job_id",
        "a batch id from whichever OpenAI-compatible server the bench drives (vLLM, llama-server)",
    ),
    (
        "api/bench/src/scenario/run.rs",
        "job_id",
        "the same foreign batch id",
    ),
];

/// The names of a file's `name_id: String` fields in non-test code (a `fn`
/// or `let` line is a parameter or a binding, not a field).
fn untyped_id_fields(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| !l.contains("fn ") && !l.contains("let "))
        .flat_map(|l| {
            l.match_indices(": String")
                .filter_map(|(i, _)| {
                    let name: String = l[..i]
                        .chars()
                        .rev()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    name.ends_with("_id").then_some(name)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn ids_are_typed_but_for_the_named_exceptions() {
    let mut untyped = Vec::new();
    let mut used = BTreeSet::new();
    for p in rust_files() {
        let r = rel(&p);
        if is_test_code(&r) {
            continue;
        }
        for field in untyped_id_fields(&std::fs::read_to_string(&p).unwrap_or_default()) {
            match STRING_IDS
                .iter()
                .position(|(f, name, _)| *f == r && *name == field)
            {
                Some(i) => {
                    used.insert(i);
                }
                None => untyped.push(format!("{r}: `{field}: String`")),
            }
        }
    }
    assert!(
        untyped.is_empty(),
        "ids are typed (stoker_schemas::ids: DeploymentId, ExecutorId, RequestId, ...); \
         use the id type instead of String, or, for a string by design, add the field to \
         STRING_IDS and ARCHITECTURE.md with why:\n{}",
        untyped.join("\n")
    );
    let stale: Vec<String> = STRING_IDS
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, (f, name, _))| format!("{f}: {name}"))
        .collect();
    assert!(
        stale.is_empty(),
        "STRING_IDS names fields that are gone or typed now; drop them (and their line in \
         ARCHITECTURE.md):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_untyped_id_count_sees_fields_and_skips_the_rest() {
    let text = "pub struct A {\n    pub deployment_id: String,\n    revision_id: RevisionId,\n}\n\
                enum E { X { executor_id: String, kind: String } }\n\
                fn f(batch_id: String) {}\nlet tenant_id: String = x; // rollout_id: String\n\
                #[cfg(test)]\nmod tests {\n    struct T { request_id: String }\n}\n";
    assert_eq!(untyped_id_fields(text), ["deployment_id", "executor_id"]);
}

/// Handlers take ids typed (`PathId<BatchId>` and the like): a raw
/// `ApiPath<String>` would parse the id by hand, differently per route.
#[test]
fn no_handler_takes_a_path_id_as_a_string() {
    let mut found = Vec::new();
    for p in rust_files() {
        let r = rel(&p);
        if !r.starts_with("api/src/http/routes/") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if text.contains("ApiPath<String>") {
            found.push(r);
        }
    }
    assert!(
        found.is_empty(),
        "these handlers take a path id as ApiPath<String>; use PathId<TheIdType>:\n{}",
        found.join("\n")
    );
}

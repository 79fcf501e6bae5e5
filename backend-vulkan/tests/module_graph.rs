//! No two files of the crate depend on each other, directly or through
//! others: every `crate::` and `super::` path in a file's code (its test
//! module aside) names the module it comes from, and those dependencies
//! must form no cycle. The crate root declares the modules, so no module
//! may name anything of the root itself.

use std::collections::BTreeMap;
use std::path::Path;

/// The root's name among the modules.
const ROOT: &str = "lib";

/// A file's source up to its unit tests, which may `use super::*` freely.
fn code(source: &str) -> &str {
    source
        .find("#[cfg(test)]\nmod tests")
        .map_or(source, |end| &source[..end])
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of every item of the use group `text` starts inside
/// (just after its `{`).
fn group_heads(text: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut start = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && (c.is_alphanumeric() || c == '_') => {
                heads.push(ident(&text[i..]));
                start = false;
            }
            _ => {}
        }
    }
    heads
}

/// The modules `source` names through `prefix` paths.
fn named(source: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            out.extend(group_heads(group).into_iter().map(str::to_owned));
        } else {
            out.push(ident(rest).to_owned());
        }
    }
    out
}

/// Each file's module and the modules it depends on.
fn graph() -> BTreeMap<String, Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("read src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("file name")
                .to_owned();
            let source = std::fs::read_to_string(&path).expect("read a source file");
            files.insert(name, source);
        }
    }
    let modules: Vec<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(name, source)| {
            let code = code(source);
            let mut deps: Vec<String> = named(code, "crate::")
                .into_iter()
                .chain(named(code, "super::").into_iter().map(|_| ROOT.to_owned()))
                .map(|head| {
                    if head != ROOT && modules.contains(&head) {
                        head
                    } else {
                        // Anything else (`crate::Vulkan`) is the root's.
                        ROOT.to_owned()
                    }
                })
                .filter(|dep| dep != name)
                .collect();
            deps.sort();
            deps.dedup();
            (name.clone(), deps)
        })
        .collect()
}

/// A cycle through `at`, if the walk from it finds one.
fn cycle_from(
    graph: &BTreeMap<String, Vec<String>>,
    at: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|m| m == at) {
        let mut cycle = path[start..].to_vec();
        cycle.push(at.to_owned());
        return Some(cycle);
    }
    path.push(at.to_owned());
    for dep in graph.get(at).into_iter().flatten() {
        if let Some(cycle) = cycle_from(graph, dep, path) {
            return Some(cycle);
        }
    }
    path.pop();
    None
}

#[test]
fn the_parser_reads_single_paths_and_groups() {
    let source = "use crate::a::B;\nuse crate::{c::{D, E}, f, g::h};\nlet x = crate::i::j();\n\
                  use capture_core::crate_like;\nuse super::K;";
    assert_eq!(named(source, "crate::"), ["a", "c", "f", "g", "i"]);
    assert_eq!(named(source, "super::"), ["K"]);
}

#[test]
fn no_module_depends_on_the_root_and_no_files_form_a_cycle() {
    let graph = graph();
    eprintln!("module dependencies: {graph:#?}");
    assert!(graph.contains_key(ROOT) && graph.len() > 5, "{graph:?}");
    for (module, deps) in &graph {
        assert!(
            !deps.iter().any(|d| d == ROOT),
            "{module}.rs names the crate root: {deps:?}"
        );
    }
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module, &mut Vec::new()) {
            panic!("the files import each other: {}", cycle.join(" -> "));
        }
    }
}

//! The crate's layout rules, checked over its sources: no two files depend
//! on each other, directly or around a cycle (state lives where it is used),
//! and only `sys.rs` declares driver functions (NVRTC's own in `nvrtc.rs`),
//! so every driver call goes through the table the loader resolves and the
//! ABI test checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each source file's module name (`lib` for the root) and text.
fn sources() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src is readable") {
        let path = entry.expect("entry is readable").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a file name")
            .to_owned();
        let text = std::fs::read_to_string(&path).expect("source is readable");
        files.insert(name, text);
    }
    files
}

/// The text without `//` comments, so that prose naming a path does not
/// count as a use of it.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files each file depends on: `mod` declarations of the root, and
/// every `crate::name` (in a `use` or inline) naming another file; a
/// `crate::Item` that names no file is the root's.
fn dependencies(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, text) in files {
        let text = code(text);
        let mut uses = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let mut targets = Vec::new();
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: each name in the group.
                let group = &group[..group.find('}').unwrap_or(group.len())];
                targets.extend(group.split(',').map(|part| part.trim().to_owned()));
            } else {
                targets.push(rest.to_owned());
            }
            for target in targets {
                let first: String = target
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if first.is_empty() {
                    continue;
                }
                let file = if files.contains_key(&first) {
                    first
                } else {
                    "lib".to_owned()
                };
                if &file != name {
                    uses.insert(file);
                }
            }
        }
        // `super::` only appears in test modules, which stay in their file.
        assert!(
            name == "lib" || !text.contains("super::") || text.contains("mod tests"),
            "{name}.rs reaches its parent with super::"
        );
        if name == "lib" {
            for line in text.lines() {
                if let Some(module) = line
                    .trim()
                    .strip_prefix("mod ")
                    .and_then(|m| m.strip_suffix(';'))
                {
                    uses.insert(module.to_owned());
                }
            }
        }
        graph.insert(name.clone(), uses);
    }
    graph
}

#[test]
fn no_two_files_depend_on_each_other() {
    let files = sources();
    let graph = dependencies(&files);
    for (name, uses) in &graph {
        println!("{name}.rs -> {uses:?}");
    }
    assert!(graph["lib"].len() >= 10, "the root declares every module");
    // Depth-first search for a cycle, reporting the path around it.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(node) {
            return;
        }
        if let Some(at) = path.iter().position(|n| n == node) {
            panic!("the files depend on each other: {}", {
                let mut cycle = path[at..].to_vec();
                cycle.push(node.to_owned());
                cycle.join(" -> ")
            });
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(node.to_owned());
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn only_the_declarations_declare_driver_functions() {
    for (name, text) in sources() {
        let text = code(&text);
        let declares = text.contains("extern \"C\" fn");
        let loads = text.contains("libloading::");
        match name.as_str() {
            "sys" | "loader" | "nvrtc" => {}
            _ => assert!(
                !declares && !loads,
                "{name}.rs declares or loads foreign functions itself"
            ),
        }
    }
}

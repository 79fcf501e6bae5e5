//! The crate's files form no import cycle: each names another only through
//! `crate::<module>` paths (`use` lines or inline), and following those from
//! any file never leads back to it. A path to an item of the crate root
//! (`crate::Hip`) is an import of `lib.rs`, which declares every module.
//! Comments are skipped (doc links are not imports), and so are the
//! indented `use super::*` of a file's own test module.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Each file's module name and the modules its code names.
fn imports() -> BTreeMap<String, Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    let entries =
        fs::read_dir(&src).unwrap_or_else(|e| panic!("cannot list {}: {e}", src.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or_default()
                .to_owned();
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            modules.insert(name, text);
        }
    }
    let names: Vec<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(name, text)| {
            let mut named = Vec::new();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                if code.starts_with("use super::") {
                    named.push("lib".to_owned());
                }
                for (at, _) in code.match_indices("crate::") {
                    let rest = &code[at + "crate::".len()..];
                    let ident: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let target = if names.contains(&ident) {
                        ident
                    } else {
                        "lib".to_owned()
                    };
                    if target != *name && !named.contains(&target) {
                        named.push(target);
                    }
                }
            }
            (name.clone(), named)
        })
        .collect()
}

/// A path of imports from `from` back to `start`, if there is one.
fn cycle(
    graph: &BTreeMap<String, Vec<String>>,
    start: &str,
    from: &str,
    path: &mut Vec<String>,
) -> bool {
    for next in graph.get(from).into_iter().flatten() {
        if next == start {
            path.push(next.clone());
            return true;
        }
        if path.contains(next) {
            continue;
        }
        path.push(next.clone());
        if cycle(graph, start, next, path) {
            return true;
        }
        path.pop();
    }
    false
}

#[test]
fn no_file_imports_back() {
    let graph = imports();
    assert!(graph.contains_key("lib") && graph.contains_key("stream"));
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        assert!(
            !cycle(&graph, start, start, &mut path),
            "import cycle: {}",
            path.join(" -> ")
        );
    }
}

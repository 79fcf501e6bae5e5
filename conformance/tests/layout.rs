//! No two files of any crate of the workspace depend on each other,
//! directly or around a cycle: state lives where it is used.
//!
//! A file depends on the modules its code names: every `crate::` path, every
//! `super::` path, and a parent's paths into its own child modules. A `mod`
//! declaration is not a use, so a parent that declares children which reach
//! it through `super` (the layout wgpu-hal's backends follow) is no cycle. A
//! `crate::Item` that names no module is the crate root's. Test modules (from
//! a `#[cfg(test)]` module named `tests` on) and `//` comments are left out: a test may
//! `use super::*`, and prose may name any path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate (a library or a binary): its root file and its modules, each
/// named by its path from the root (`""` for the root) with its code.
struct Crate {
    name: String,
    modules: BTreeMap<String, String>,
}

/// A file's code: up to its test module, without `//` comments.
fn code(source: &str) -> String {
    let tests = source.match_indices("#[cfg(test)]").find(|(at, attr)| {
        let next = source[at + attr.len()..].trim_start();
        ["mod tests", "pub(crate) mod tests", "pub mod tests"]
            .iter()
            .any(|m| next.starts_with(m))
    });
    let source = tests.map_or(source, |(end, _)| &source[..end]);
    source
        .lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module files under `dir`, named by their path below `prefix`.
fn collect(dir: &Path, prefix: &str, modules: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let name = if prefix.is_empty() {
            stem.clone()
        } else {
            format!("{prefix}::{stem}")
        };
        if path.is_dir() {
            if prefix.is_empty() && stem == "bin" {
                continue;
            }
            collect(&path, &name, modules);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = match stem.as_str() {
                "lib" | "main" if prefix.is_empty() => String::new(),
                "mod" => prefix.to_owned(),
                _ => name,
            };
            let text = std::fs::read_to_string(&path).expect("a readable source");
            modules.insert(module, code(&text));
        }
    }
}

/// Every crate of the workspace: each member's library and binaries.
fn crates() -> Vec<Crate> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned();
    let mut out = Vec::new();
    let mut members: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("the workspace root is readable")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    members.sort();
    for member in members {
        let name = member.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let mut modules = BTreeMap::new();
        collect(&member.join("src"), "", &mut modules);
        out.push(Crate {
            name: name.to_owned(),
            modules,
        });
        let bins = member.join("src").join("bin");
        for bin in std::fs::read_dir(&bins).into_iter().flatten().flatten() {
            let path = bin.path();
            if path.is_dir() {
                let mut modules = BTreeMap::new();
                collect(&path, "", &mut modules);
                let bin_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
                out.push(Crate {
                    name: format!("{name} (bin {bin_name})"),
                    modules,
                });
            }
        }
    }
    out
}

/// The path segments at the start of `text` (`a::b::C` gives `a`, `b`,
/// `C`), and for a group (`{a::b, c}`) each item's.
fn paths(text: &str) -> Vec<Vec<String>> {
    let segments = |text: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text.trim_start();
        loop {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            out.push(rest[..end].to_owned());
            match rest[end..].strip_prefix("::") {
                Some(next) if !next.starts_with('{') => rest = next,
                _ => break,
            }
        }
        out
    };
    match text.strip_prefix('{') {
        Some(group) => {
            let mut items = Vec::new();
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        items.push(&group[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.into_iter().map(segments).collect()
        }
        None => vec![segments(text)],
    }
}

/// The longest module of `modules` that `base` then `segments` name.
fn resolve(modules: &BTreeMap<String, String>, base: &[&str], segments: &[String]) -> String {
    let mut full: Vec<&str> = base.to_vec();
    full.extend(segments.iter().map(String::as_str));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| modules.contains_key(m))
        .unwrap_or_default()
}

/// The modules each module of `krate` depends on.
fn dependencies(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (module, text) in &krate.modules {
        let own: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let parent = &own[..own.len().saturating_sub(1)];
        let mut uses = BTreeSet::new();
        let mut add = |base: &[&str], rest: &str| {
            for segments in paths(rest) {
                let target = resolve(&krate.modules, base, &segments);
                if &target != module && !target.starts_with(&format!("{module}::")) {
                    uses.insert(target);
                }
            }
        };
        for (prefix, base) in [("crate::", &[][..]), ("super::", parent)] {
            for (at, _) in text.match_indices(prefix) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                add(base, &text[at + prefix.len()..]);
            }
        }
        // A parent's own paths into its children: `use child::Item`.
        let children: Vec<&String> = krate
            .modules
            .keys()
            .filter(|m| {
                m.strip_prefix(module.as_str())
                    .map(|rest| rest.strip_prefix("::").unwrap_or(rest))
                    .is_some_and(|rest| {
                        !rest.is_empty()
                            && !rest.contains("::")
                            && (module.is_empty() || m.contains("::"))
                    })
            })
            .collect();
        for child in children {
            let last = child.rsplit("::").next().unwrap_or(child);
            let pattern = format!("{last}::");
            let named = text.match_indices(&pattern).any(|(at, _)| {
                let before = text[..at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                uses.insert(child.clone());
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A cycle of `graph`, as the path around it, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if done.contains(node) {
            return None;
        }
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut around = path[at..].to_vec();
            around.push(node.to_owned());
            return Some(around);
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

fn name(module: &str) -> &str {
    if module.is_empty() {
        "the root"
    } else {
        module
    }
}

#[test]
fn paths_are_read_from_single_uses_groups_and_inline_calls() {
    let text = "{c::{D, E}, f, g::h}";
    assert_eq!(
        paths(text),
        vec![
            vec!["c".to_owned()],
            vec!["f".to_owned()],
            vec!["g".to_owned(), "h".to_owned()]
        ]
    );
    assert_eq!(paths("a::b::C;"), vec![vec!["a", "b", "C"]]);
    let krate = Crate {
        name: "k".into(),
        modules: [
            ("", "mod a; mod b; pub use a::X;"),
            ("a", "use crate::b::Y; fn f() { crate::Z; }"),
            ("b", "pub struct Y;"),
            ("b::c", "use super::Y;"),
        ]
        .into_iter()
        .map(|(m, t)| (m.to_owned(), t.to_owned()))
        .collect(),
    };
    let graph = dependencies(&krate);
    assert_eq!(
        graph["a"],
        ["", "b"].into_iter().map(str::to_owned).collect()
    );
    assert_eq!(graph["b::c"], ["b".to_owned()].into_iter().collect());
    assert!(graph["b"].is_empty(), "a declaration is not a use");
    assert_eq!(
        graph[""],
        ["a".to_owned()].into_iter().collect(),
        "`pub use a::X`"
    );
    assert_eq!(
        cycle(&graph).map(|c| c.join(" -> ")),
        Some(" -> a -> ".to_owned()),
        "a names an item of the root, which names a"
    );
    let mut looped = graph.clone();
    looped.get_mut("a").expect("a").remove("");
    assert_eq!(cycle(&looped), None);
    looped.get_mut("b").expect("b").insert("a".into());
    assert_eq!(
        cycle(&looped).map(|c| c.len()),
        Some(3),
        "a -> b -> a is found"
    );
}

#[test]
fn no_two_files_of_any_crate_depend_on_each_other() {
    let crates = crates();
    assert!(crates.len() >= 7, "every member is read: {}", crates.len());
    let mut cycles = Vec::new();
    for krate in &crates {
        let graph = dependencies(krate);
        println!("{}: {} files", krate.name, graph.len());
        if let Some(around) = cycle(&graph) {
            let around: Vec<&str> = around.iter().map(|m| name(m)).collect();
            cycles.push(format!("{}: {}", krate.name, around.join(" -> ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "files that depend on each other:\n{}",
        cycles.join("\n")
    );
}

/// capture-core's parts, lowest first: a file may use its own part and the
/// parts before it, never one after. A part is a folder, or files at the
/// crate's root: the basics, the driver contract, and the root itself.
const CORE_PARTS: &[(&str, &[&str])] = &[
    ("basics", &["ids", "hashing", "phase", "interleave"]),
    ("kernels", &["kernels"]),
    ("recorded", &["recorded"]),
    ("contract", &["driver", "builtin", "error"]),
    ("memory", &["memory"]),
    ("failures", &["failures"]),
    ("streams", &["streams"]),
    ("capture", &["capture"]),
    ("server", &["server"]),
    ("client", &["client"]),
    ("root", &["", "test_driver"]),
];

/// The place in [`CORE_PARTS`] of the part `module` (a path from the crate's
/// root) lies in, by its first segment.
fn core_part(module: &str) -> Option<usize> {
    let first = module.split("::").next().unwrap_or_default();
    CORE_PARTS
        .iter()
        .position(|(_, modules)| modules.contains(&first))
}

#[test]
fn capture_cores_parts_use_only_the_parts_below_them() {
    let crates = crates();
    let core = crates
        .iter()
        .find(|krate| krate.name == "capture-core")
        .expect("capture-core is a member");
    let mut wrong = Vec::new();
    for (module, uses) in dependencies(core) {
        let Some(part) = core_part(&module) else {
            wrong.push(format!("{} belongs to no part", name(&module)));
            continue;
        };
        for used in uses {
            match core_part(&used) {
                Some(theirs) if theirs <= part => {}
                Some(theirs) => wrong.push(format!(
                    "{} ({}) uses {} ({}), a part above it",
                    name(&module),
                    CORE_PARTS[part].0,
                    name(&used),
                    CORE_PARTS[theirs].0
                )),
                None => wrong.push(format!("{} belongs to no part", name(&used))),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "capture-core's parts out of order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_part_is_found_by_its_first_segment() {
    assert_eq!(core_part("memory::pool"), core_part("memory"));
    assert_eq!(core_part(""), Some(CORE_PARTS.len() - 1));
    assert!(core_part("kernels") < core_part("driver"));
    assert_eq!(core_part("nowhere"), None);
}

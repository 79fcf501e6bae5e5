//! The crate's layout rule, checked over its sources: only `sys.rs`
//! declares driver functions (NVRTC's own in `nvrtc.rs`), so every driver
//! call goes through the table the loader resolves and the ABI test checks.
//! (That no two files depend on each other is checked for every crate by
//! conformance's `layout` test.)

use std::collections::BTreeMap;
use std::path::Path;

/// Each source file's path under `src` without its extension (`lib` for
/// the root, `graph/edges` in a folder) and text.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("entry is readable").path();
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("a file name")
                .to_owned();
            if path.is_dir() {
                walk(&path, &format!("{prefix}{name}/"), files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source is readable");
                files.insert(format!("{prefix}{name}"), text);
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
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

#[test]
fn the_rule_reaches_files_in_folders() {
    let files = sources();
    assert!(files.contains_key("lib") && files.contains_key("graph/edges"));
}

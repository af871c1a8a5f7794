//! No two files of a crate import each other (docs/layout.md): what both need lives in the
//! lower one. Every `crate::` and `super::` path of every source file of the workspace is
//! read, resolved to the file of the deepest module it names, and a pair of files that
//! name each other fails the test. A module's root (lib.rs, main.rs, a folder's mod.rs)
//! declaring and re-exporting its own children is not an import of them: it is how a
//! folder's shared records (in its mod.rs) and its files fit together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Pairs still to be parted, each as (crate, file, file): none left. A pair found and not
/// here fails; one here no longer found fails too, so the list only shrinks.
const PENDING: &[(&str, &str, &str)] = &[];

/// The source files of a crate's `src/`, by module path (`detect::gap`; the root is "").
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("read a source folder")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            found.insert(parts.join("::"), path);
        }
    }
    found
}

/// The text without comments and string literals (a path in a doc comment or a message
/// is not an import).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            (b'"', _) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (b'\'', _) if bytes.get(i + 2) == Some(&b'\'') => {
                // A character literal ('"' would otherwise open a string).
                i += 3;
            }
            (c, _) => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// Every path `use` and the code name, expanded from `use a::{b, c::{d}}` groups, as
/// lists of segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    // `use` statements, with their braces expanded.
    for (start, _) in code.match_indices("use ") {
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = code[start..].find(';') else {
            continue;
        };
        let tree: String = code[start + 4..start + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        expand("", &tree, &mut found);
    }
    // Paths in code: `crate::a::b` and `super::a`.
    for anchor in ["crate::", "super::"] {
        for (start, _) in code.match_indices(anchor) {
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.push(path.split("::").map(str::to_string).collect());
        }
    }
    found
}

/// `prefix` joined with each path of a use tree (`a::{b,c::{d,e}}`).
fn expand(prefix: &str, tree: &str, out: &mut Vec<Vec<String>>) {
    let join = |tail: &str| {
        if prefix.is_empty() {
            tail.to_string()
        } else {
            format!("{prefix}::{tail}")
        }
    };
    match tree.find('{') {
        None => {
            let full = join(tree);
            out.push(full.split("::").map(str::to_string).collect());
        }
        Some(open) => {
            let head = tree[..open].trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut depth = 0;
            let mut piece = String::new();
            for c in inner.chars().chain(std::iter::once(',')) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if c == ',' && depth == 0 {
                    if !piece.is_empty() {
                        expand(&join(head), &piece, out);
                    }
                    piece.clear();
                } else {
                    piece.push(c);
                }
            }
        }
    }
}

/// The module a path names from the file of module `from`: the deepest module of the
/// crate that the path's segments reach. `None` for a path outside the crate.
fn target(
    path: &[String],
    from: &str,
    is_root: bool,
    modules: &BTreeSet<String>,
) -> Option<String> {
    let (mut at, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "super" => {
            let mut at: Vec<String> = from
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            // In a module's root `super` is its parent; in any other file, its folder's root.
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
            let _ = is_root;
            (at, rest)
        }
        "self" if is_root => (
            from.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            &path[1..],
        ),
        _ => return None,
    };
    for segment in rest {
        let mut deeper = at.clone();
        deeper.push(segment.clone());
        if modules.contains(&deeper.join("::")) {
            at = deeper;
        } else {
            break;
        }
    }
    Some(at.join("::"))
}

/// Pairs of module files of one crate that import each other.
fn pairs_in(src: &Path) -> BTreeSet<(String, String)> {
    let files = modules(src);
    let names: BTreeSet<String> = files.keys().cloned().collect();
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).expect("read a source file");
        let is_root = matches!(
            path.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib" | "main")
        );
        // `use super::*` in a file's own test module names the file itself.
        let code = code_only(&text).replace("use super::*;", "");
        for p in paths(&code) {
            let Some(to) = target(&p, module, is_root, &names) else {
                continue;
            };
            let own_child = is_root
                && to
                    .strip_prefix(module.as_str())
                    .is_some_and(|rest| !rest.is_empty());
            if to != *module && !own_child {
                imports.entry(module.clone()).or_default().insert(to);
            }
        }
    }
    let mut pairs = BTreeSet::new();
    for (a, targets) in &imports {
        for b in targets {
            if a < b && imports.get(b).is_some_and(|t| t.contains(a)) {
                pairs.insert((a.clone(), b.clone()));
            }
        }
    }
    pairs
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).expect("read crates/").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        for (a, b) in pairs_in(&src) {
            found.insert((name.clone(), a, b));
        }
    }
    let pending: BTreeSet<(String, String, String)> = PENDING
        .iter()
        .map(|(c, a, b)| (c.to_string(), a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&pending).collect();
    assert!(
        new.is_empty(),
        "files that import each other (move what both need to the lower one): {new:?}"
    );
    let parted: Vec<_> = pending.difference(&found).collect();
    assert!(
        parted.is_empty(),
        "pairs no longer importing each other: take them off PENDING: {parted:?}"
    );
}

#[test]
fn a_pair_is_found_through_groups_and_paths() {
    let dir = std::env::temp_dir().join(format!("tcpstall-import-cycles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("flow")).expect("create a crate");
    let files = [
        ("lib.rs", "mod a; mod b; mod flow; pub use a::A;"),
        ("a.rs", "use crate::{b::{B, C}, Result};\npub struct A;"),
        (
            "b.rs",
            "// crate::a::A in a comment\npub fn f() -> crate::a::A { todo!() }",
        ),
        (
            "flow/mod.rs",
            "mod x; mod y; pub use x::X; pub struct Shared;",
        ),
        ("flow/x.rs", "use super::Shared; pub struct X;"),
        (
            "flow/y.rs",
            "use super::x::X;\n#[cfg(test)]\nmod tests { use super::*; }",
        ),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).expect("write a file");
    }
    let pairs = pairs_in(&src);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        pairs,
        BTreeSet::from([("a".to_string(), "b".to_string())]),
        "a and b name each other; flow's files and its mod.rs do not form a pair"
    );
}

//! The toolchain the workspace states is the one its dependencies need: `rust-version` in
//! the workspace manifest equals the highest `rust-version` a dependency declares (cargo
//! metadata), and the README names the same number.

use std::path::Path;
use std::process::Command;

/// A `rust-version` as numbers: "1.87" and "1.87.0" are the same.
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    while parts.len() < 3 {
        parts.push(0);
    }
    parts
}

#[test]
fn rust_version_is_the_highest_any_dependency_declares() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let packages = metadata["packages"].as_array().expect("packages");
    let declared = |p: &serde_json::Value| p["rust_version"].as_str().map(str::to_string);
    let (highest, needs) = packages
        .iter()
        .filter(|p| !members.contains(&p["id"].as_str().unwrap_or("")))
        .filter_map(|p| Some((declared(p)?, p["name"].as_str()?.to_string())))
        .max_by_key(|(v, _)| version(v))
        .expect("a dependency that declares a rust-version");
    let ours = packages
        .iter()
        .filter(|p| members.contains(&p["id"].as_str().unwrap_or("")))
        .map(|p| declared(p).unwrap_or_default())
        .collect::<Vec<_>>();
    for stated in &ours {
        assert_eq!(
            version(stated),
            version(&highest),
            "rust-version in Cargo.toml is {stated:?}; {needs} needs {highest}"
        );
    }
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let short: Vec<&str> = highest.split('.').take(2).collect();
    let short = short.join(".");
    assert!(
        readme.contains(&format!("{short} or later")),
        "README.md does not say Rust {short} or later ({needs} needs {highest})"
    );
}

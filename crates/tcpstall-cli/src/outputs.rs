//! Output paths, checked before the work starts: a run of minutes must not end on a path
//! it cannot write.

use std::fs::OpenOptions;
use std::path::Path;

/// A file to write: not a directory, in a directory that exists, and writable. An
/// existing file is opened for appending (its bytes untouched); a new one is created and
/// removed again.
pub fn check_file(flag: &str, path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str() == "-" {
        return Err(format!(
            "{flag} needs a file to write (standard output carries the report)"
        ));
    }
    if path.is_dir() {
        return Err(format!("{flag} {shown}: is a directory"));
    }
    check_parent(flag, path)?;
    let existed = path.exists();
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("{flag} {shown}: {e}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// A directory to write into: an existing directory, or one whose parent exists (it is
/// created when the files are written).
pub fn check_dir(flag: &str, dir: &Path) -> Result<(), String> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(format!("{flag} {}: is not a directory", dir.display()));
        }
        return Ok(());
    }
    check_parent(flag, dir)
}

fn check_parent(flag: &str, path: &Path) -> Result<(), String> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(()),
    };
    if !parent.is_dir() {
        return Err(format!(
            "{flag} {}: the directory {} does not exist",
            path.display(),
            parent.display()
        ));
    }
    Ok(())
}

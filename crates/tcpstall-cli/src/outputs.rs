//! Output paths, checked before the work starts: a run of minutes must not end on a path
//! it cannot write, and an output never replaces an input or a capture.
//!
//! `tcpstall analyze --html ring/*.pcap` makes the shell hand the first capture to
//! `--html`: that path is refused, as is one path given to two outputs, and an existing
//! capture named as an output. An older output that is not a capture (yesterday's
//! report.html) may be replaced.
//!
//! Every output is written by `tcpstall_core::output`: a new file renamed over the name
//! when whole, so what stands at the name is judged here, never what it may point to. A
//! symbolic link is replaced (never followed); anything else that is not a regular file
//! (a named pipe, a device, a socket; a directory where a file is expected) is refused,
//! as is a name in /dev, /proc or /sys, and a directory of outputs that is a link.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tcpstall_core::output::{OutputDir, without_trailing_slash};

/// What an output option writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One file.
    File,
    /// Files in a directory (created if missing).
    Directory,
}

/// One output option as given.
#[derive(Clone, Copy, Debug)]
pub struct Output<'a> {
    pub flag: &'a str,
    pub path: &'a Path,
    pub kind: Kind,
}

impl<'a> Output<'a> {
    pub fn file(flag: &'a str, path: &'a Path) -> Output<'a> {
        Output {
            flag,
            path,
            kind: Kind::File,
        }
    }

    pub fn directory(flag: &'a str, path: &'a Path) -> Output<'a> {
        Output {
            flag,
            path,
            kind: Kind::Directory,
        }
    }
}

/// One input of the run, with the words that name it in a refusal ("the capture being
/// analysed"). `-` is standard input; a directory stands for itself and the files in it.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub what: &'a str,
    pub path: &'a Path,
}

/// Every output of one run, checked before any work: each is refused when it is one of
/// `inputs` (the same file, by device and inode), when two options name the same path,
/// when it is an existing capture (pcap, pcapng, gzip or zstd), when something other
/// than a regular file or a link stands at its name, or when it cannot be written.
/// Nothing is opened that could block (a named pipe). Returns the one line that says why.
pub fn check(outputs: &[Output], inputs: &[Input]) -> Result<(), String> {
    let inputs = input_identities(inputs);
    let mut seen: Vec<(Identity, &str)> = Vec::new();
    for output in outputs {
        let shown = output.path.display();
        let flag = output.flag;
        if output.path.as_os_str() == "-" {
            return Err(format!(
                "{flag} needs a file to write (standard output carries the report)"
            ));
        }
        // What stands at the name (`g/` looked at as `g`, not resolved): the name is
        // what is replaced.
        let existing = std::fs::symlink_metadata(without_trailing_slash(output.path)).ok();
        if let Some(meta) = &existing
            && let Some((_, what)) = inputs
                .iter()
                .find(|(id, _)| *id == (meta.dev(), meta.ino()))
        {
            let another = match output.kind {
                Kind::File => "file",
                Kind::Directory => "directory",
            };
            return Err(format!(
                "{flag} {shown}: is {what}; an output never replaces an input: name another {another}"
            ));
        }
        let identity = identity(output.path, existing.as_ref());
        if let Some((_, other)) = seen.iter().find(|(id, _)| *id == identity) {
            return Err(format!(
                "{flag} {shown}: is also given to {other}; name one file per output"
            ));
        }
        seen.push((identity, flag));
        if let Some(meta) = &existing
            && meta.is_file()
            && let Some(format) = capture_format(output.path)
        {
            return Err(format!(
                "{flag} {shown}: is an existing {format} capture; it is not replaced: name another file (or remove it first)"
            ));
        }
        match output.kind {
            Kind::File => check_file(flag, output.path, existing.as_ref())?,
            Kind::Directory => check_dir(flag, output.path, existing.as_ref())?,
        }
    }
    Ok(())
}

/// The device and inode of every input, with its words; a directory's files too (a
/// directory is read as the files in it).
fn input_identities<'a>(inputs: &[Input<'a>]) -> Vec<((u64, u64), &'a str)> {
    let mut ids = Vec::new();
    for input in inputs {
        // Standard input redirected from a file is that file.
        let path: &Path = if input.path.as_os_str() == "-" {
            Path::new("/dev/stdin")
        } else {
            input.path
        };
        // A link given as an input is the input too: replacing it would lose its name.
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && meta.file_type().is_symlink()
        {
            ids.push(((meta.dev(), meta.ino()), input.what));
        }
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        ids.push(((meta.dev(), meta.ino()), input.what));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(path)
        {
            for entry in entries.filter_map(|e| e.ok()) {
                if let Ok(meta) = std::fs::metadata(entry.path())
                    && meta.is_file()
                {
                    ids.push(((meta.dev(), meta.ino()), input.what));
                }
            }
        }
    }
    ids
}

/// What names one file: its device and inode when it exists, else the absolute path it
/// would be created at.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    Inode(u64, u64),
    Path(PathBuf),
}

/// The directory `path` names a file in (`.` for a bare name), its links resolved where
/// it exists.
fn canonical_parent(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    parent
        .canonicalize()
        .unwrap_or_else(|_| parent.to_path_buf())
}

fn identity(path: &Path, existing: Option<&std::fs::Metadata>) -> Identity {
    if let Some(meta) = existing {
        return Identity::Inode(meta.dev(), meta.ino());
    }
    let parent = canonical_parent(path);
    Identity::Path(match path.file_name() {
        Some(name) => parent.join(name),
        None => parent,
    })
}

/// The format of a capture by its first bytes, as `analyze` recognises them.
fn capture_format(path: &Path) -> Option<&'static str> {
    let mut magic = [0u8; 4];
    // Never through a link, never waiting on a pipe swapped in since it was looked at.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let mut len = 0;
    while len < magic.len() {
        match file.read(&mut magic[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    let magic = &magic[..len];
    match magic {
        [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0xc3, 0xd4]
        | [0x4d, 0x3c, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d] => Some("pcap"),
        [0x0a, 0x0d, 0x0d, 0x0a] => Some("pcapng"),
        [0x1f, 0x8b, ..] => Some("gzip-compressed"),
        [0x28, 0xb5, 0x2f, 0xfd] => Some("zstd-compressed"),
        _ => None,
    }
}

/// A file to write: a regular file, a link (replaced) or nothing at its name, in a
/// directory that exists and where a new file can be created (one is created and
/// removed: the output is written that way).
fn check_file(flag: &str, path: &Path, existing: Option<&std::fs::Metadata>) -> Result<(), String> {
    let shown = path.display();
    if let Some(meta) = existing {
        let file_type = meta.file_type();
        if file_type.is_dir() {
            return Err(format!("{flag} {shown}: is a directory"));
        }
        if !file_type.is_file() && !file_type.is_symlink() {
            return Err(format!(
                "{flag} {shown}: is {}, not a regular file: an output is written as a new file (name a file)",
                special_kind(meta)
            ));
        }
    }
    check_parent(flag, path)?;
    check_system_directory(flag, path)?;
    let (dir, _) = OutputDir::containing(path).map_err(|e| format!("{flag} {shown}: {e}"))?;
    dir.probe().map_err(|e| format!("{flag} {shown}: {e}"))
}

/// A directory to write into: an existing directory (not a link to one), or one whose
/// parent exists and can take it (it is created when the files are written).
fn check_dir(flag: &str, dir: &Path, existing: Option<&std::fs::Metadata>) -> Result<(), String> {
    let shown = dir.display();
    match existing {
        Some(meta) if meta.is_dir() => {
            check_system_directory(flag, dir)?;
            OutputDir::open(dir)
                .and_then(|d| d.probe())
                .map_err(|e| format!("{flag} {shown}: {e}"))
        }
        Some(meta) if meta.file_type().is_symlink() => {
            // Refused, as writing would refuse it: see `OutputDir::create`.
            let e = OutputDir::open(dir)
                .err()
                .map_or_else(|| "is a symbolic link".to_string(), |e| e.to_string());
            Err(format!("{flag} {shown}: {e}"))
        }
        Some(_) => Err(format!("{flag} {shown}: is not a directory")),
        None => {
            check_parent(flag, dir)?;
            check_system_directory(flag, dir)?;
            let (parent, _) =
                OutputDir::containing(dir).map_err(|e| format!("{flag} {shown}: {e}"))?;
            parent.probe().map_err(|e| format!("{flag} {shown}: {e}"))
        }
    }
}

/// What a name that is neither a regular file, a link nor a directory is.
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    let file_type = meta.file_type();
    if file_type.is_fifo() {
        "a named pipe"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// /dev, /proc and /sys hold the system's own names (`/dev/stdout` is a link there):
/// an output is never put in place of one.
fn check_system_directory(flag: &str, path: &Path) -> Result<(), String> {
    let parent = canonical_parent(path);
    match ["/dev", "/proc", "/sys"]
        .into_iter()
        .find(|system| parent.starts_with(system))
    {
        Some(system) => Err(format!(
            "{flag} {}: is in {system}, which holds the system's own files: name a file elsewhere",
            path.display()
        )),
        None => Ok(()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tcpstall-outputs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn captures_are_known_by_their_first_bytes() {
        let dir = temp("magic");
        for (bytes, format) in [
            (&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0][..], Some("pcap")),
            (&[0xa1, 0xb2, 0x3c, 0x4d][..], Some("pcap")),
            (&[0x0a, 0x0d, 0x0d, 0x0a, 0x1c][..], Some("pcapng")),
            (&[0x1f, 0x8b, 8][..], Some("gzip-compressed")),
            (&[0x28, 0xb5, 0x2f, 0xfd][..], Some("zstd-compressed")),
            (&b"<!doctype html>"[..], None),
            (&[][..], None),
            (&[0x1f][..], None),
        ] {
            let path = dir.join("f");
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(capture_format(&path), format, "{bytes:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_name_in_dev_is_refused_before_anything_is_created_there() {
        // /dev/stdout is a link: replacing it would take it from every program.
        for path in ["/dev/stdout", "/dev/tcpstall-not-there.html"] {
            let e = check(&[Output::file("--html", Path::new(path))], &[]).unwrap_err();
            assert!(e.contains("is in /dev"), "{e}");
        }
        assert!(!Path::new("/dev/tcpstall-not-there.html").exists());
    }

    #[test]
    fn a_path_for_two_outputs_is_refused_even_before_it_exists() {
        let dir = temp("twice");
        let a = dir.join("out.html");
        let b = dir.join(".").join("out.html");
        let e = check(
            &[Output::file("--html", &a), Output::file("--truth", &b)],
            &[],
        )
        .unwrap_err();
        assert!(e.contains("also given to --html"), "{e}");
        assert!(!a.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

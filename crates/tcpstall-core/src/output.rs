//! Every file tcpstall writes, written one way: into a new file beside the target, then
//! renamed over it once whole.
//!
//! tcpstall often runs as root in directories others can write to, so a name there may
//! be a symbolic link planted to make it overwrite another file. Here nothing at the end
//! of a path is ever followed:
//!
//! - the new file is created exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`) under a name
//!   no one can guess, `.NAME.RANDOM.tmp`, in the target's directory, with mode 0644 less
//!   the umask;
//! - it is renamed over the target only when every byte was written, flushed and the
//!   file closed without an error (`rename(2)` replaces a link in place; it never
//!   writes through it);
//! - on any error, and when the writer is dropped unfinished, the new file is removed:
//!   an earlier output stays as it was, and a full disk leaves no partial file.
//!
//! Each directory is opened once and every step inside it (create, rename, remove) is
//! relative to that open directory, so a directory swapped for a link midway changes
//! nothing. The directories on a file's path are followed as named; a directory of
//! outputs ([`OutputDir::create`], `--graphs DIR`) is created if missing and is never a
//! link itself: one is refused. The data is not forced to disk (no `fsync`).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The mode of every file written, less the umask (a report is for others to read).
const FILE_MODE: libc::mode_t = 0o644;
/// The mode of a directory of outputs created, less the umask.
const DIR_MODE: u32 = 0o755;
/// How many names are tried before creating a new file is given up (another process
/// would have to have taken each random name first).
const NAME_TRIES: usize = 16;
/// The longest part of the target's name kept in the new file's, so that the new
/// file's name stays under NAME_MAX (255 bytes on Linux).
const NAME_KEPT: usize = 200;

/// A directory that outputs are written into, opened once.
#[derive(Debug)]
pub struct OutputDir {
    dir: File,
    path: PathBuf,
}

impl OutputDir {
    /// The directory that `path`'s file is in (`.` for a bare name), followed as named,
    /// with the file's name in it.
    pub fn containing(path: &Path) -> io::Result<(OutputDir, OsString)> {
        let Some(name) = path.file_name() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "names no file"));
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(parent)?;
        Ok((
            OutputDir {
                dir,
                path: parent.to_path_buf(),
            },
            name.to_os_string(),
        ))
    }

    /// A directory of outputs: created (mode 0755 less the umask) when missing, its
    /// parent being there; refused when it is a symbolic link, which is never followed.
    pub fn create(path: &Path) -> io::Result<OutputDir> {
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        Self::open_no_follow(path)
    }

    /// An existing directory of outputs, opened as [`OutputDir::create`] would.
    pub fn open(path: &Path) -> io::Result<OutputDir> {
        Self::open_no_follow(path)
    }

    fn open_no_follow(given: &Path) -> io::Result<OutputDir> {
        // `g/` resolves a link at `g`: the name is looked at without its trailing slash.
        let path = &without_trailing_slash(given);
        let link = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a symbolic link: a directory of outputs is never followed (name the directory it points to)",
            )
        };
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(link());
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                // Swapped for a link since it was looked at.
                if e.raw_os_error() == Some(libc::ELOOP) {
                    link()
                } else {
                    e
                }
            })?;
        Ok(OutputDir {
            dir,
            path: given.to_path_buf(),
        })
    }

    /// The directory as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the file `name` in this directory; nothing is at `name` until
    /// [`OutputFile::commit`].
    pub fn create_file(&self, name: &OsStr) -> io::Result<OutputFile> {
        let target = c_name(name)?;
        let dir = self.dir.try_clone()?;
        let (file, temp) = create_exclusive(&dir, name)?;
        let pending = Pending::register(dir.as_raw_fd(), &temp);
        Ok(OutputFile {
            _pending: pending,
            dir,
            temp,
            target,
            out: Some(BufWriter::with_capacity(1 << 16, file)),
        })
    }

    /// Writes `bytes` as the file `name` in this directory.
    pub fn write(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.create_file(name)?;
        file.write_all(bytes)?;
        file.commit()
    }

    /// Whether a file can be created here: one is created and removed again.
    pub fn probe(&self) -> io::Result<()> {
        let (file, temp) = create_exclusive(&self.dir, OsStr::new("probe"))?;
        drop(file);
        unlink_at(self.dir.as_raw_fd(), &temp)
    }
}

/// One file being written: a [`Write`] whose bytes reach the target's name only through
/// [`OutputFile::commit`]. Dropped without it, the new file is removed.
#[derive(Debug)]
pub struct OutputFile {
    /// Dropped first: out of [`PENDING`] before the directory is closed.
    _pending: Pending,
    dir: File,
    temp: CString,
    target: CString,
    /// `None` once committed.
    out: Option<BufWriter<File>>,
}

impl OutputFile {
    /// Starts the file at `path` (see [`OutputDir::containing`]).
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        let (dir, name) = OutputDir::containing(path)?;
        dir.create_file(&name)
    }

    /// Flushes and closes the new file, checking both, and renames it over the target.
    /// On an error the new file is removed and the target is as it was.
    pub fn commit(mut self) -> io::Result<()> {
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let fd = self.dir.as_raw_fd();
        let finished = finish(out).and_then(|()| {
            if unsafe { libc::renameat(fd, self.temp.as_ptr(), fd, self.target.as_ptr()) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
        if finished.is_err() {
            let _ = unlink_at(fd, &self.temp);
        }
        finished
    }
}

/// Flushes and closes a new file, with the error of either.
fn finish(out: BufWriter<File>) -> io::Result<()> {
    let file = match out.into_inner() {
        Ok(file) => file,
        Err(e) => {
            // What the buffer holds is dropped, not flushed a second time.
            let (e, out) = e.into_parts();
            drop(out.into_parts());
            return Err(e);
        }
    };
    // A close can report a write that failed late (NFS, a quota); it is not retried on
    // EINTR (close(2): the descriptor is gone either way).
    if unsafe { libc::close(file.into_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.out {
            Some(out) => out.write(buf),
            None => Err(io::Error::other("written after it was committed")),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.out {
            Some(out) => out.write_all(buf),
            None => Err(io::Error::other("written after it was committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(out) = self.out.take() {
            // What the buffer still holds is dropped with the file: nothing to flush.
            let (file, _) = out.into_parts();
            drop(file);
            let _ = unlink_at(self.dir.as_raw_fd(), &self.temp);
        }
    }
}

/// `path` without the slashes at its end (`g/` as `g`), so that a link at its last name is
/// seen rather than resolved; `/` stays itself.
pub fn without_trailing_slash(path: &Path) -> PathBuf {
    path.components().collect()
}

/// Writes `bytes` as the file at `path`, whole or not at all.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OutputFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// Removes every new file not yet renamed over its target: for an interrupt handler,
/// just before the process exits.
pub fn remove_unfinished() {
    let Ok(pending) = PENDING.lock() else {
        return;
    };
    for (dir, temp) in pending.iter() {
        let _ = unlink_at(*dir, temp);
    }
}

/// The new files being written, by their directory (a descriptor its [`OutputFile`]
/// holds open for as long as it is listed) and name.
static PENDING: Mutex<Vec<(RawFd, CString)>> = Mutex::new(Vec::new());

/// A new file's place in [`PENDING`], left when it is dropped.
#[derive(Debug)]
struct Pending {
    dir: RawFd,
    temp: CString,
}

impl Pending {
    fn register(dir: RawFd, temp: &CString) -> Pending {
        if let Ok(mut pending) = PENDING.lock() {
            pending.push((dir, temp.clone()));
        }
        Pending {
            dir,
            temp: temp.clone(),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Ok(mut pending) = PENDING.lock()
            && let Some(at) = pending
                .iter()
                .position(|(dir, temp)| *dir == self.dir && *temp == self.temp)
        {
            pending.swap_remove(at);
        }
    }
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}

/// Creates a new file beside `name` in `dir`, under a name not taken and not guessable:
/// exclusively, never through a link.
fn create_exclusive(dir: &File, name: &OsStr) -> io::Result<(File, CString)> {
    let kept = &name.as_bytes()[..name.len().min(NAME_KEPT)];
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let mut temp = b".".to_vec();
        temp.extend_from_slice(kept);
        temp.extend_from_slice(format!(".{:016x}.tmp", random()).as_bytes());
        let temp = c_name(OsStr::from_bytes(&temp))?;
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                FILE_MODE as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor just opened, owned by nothing else.
            let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            return Ok((file, temp));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
        last = Some(e);
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free name for a new file")))
}

fn unlink_at(dir: RawFd, name: &CString) -> io::Result<()> {
    if unsafe { libc::unlinkat(dir, name.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// 64 bits from the kernel's random source; should it fail, from the process's hash
/// keys (themselves random) over the time and a count.
fn random() -> u64 {
    let mut bytes = [0u8; 8];
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got == bytes.len() as isize {
        return u64::from_ne_bytes(bytes);
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The tests run one at a time: one of them removes every unfinished file.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tcpstall-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_link_at_the_target_is_replaced_and_what_it_points_to_kept() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("link");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"kept").unwrap();
        let target = dir.join("report.html");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"kept");
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(names(&dir), ["report.html", "victim"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_dropped_unfinished_leaves_the_earlier_one_and_no_other() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("dropped");
        let target = dir.join("out.json");
        std::fs::write(&target, b"earlier").unwrap();
        let mut file = OutputFile::create(&target).unwrap();
        file.write_all(&[b'x'; 200_000]).unwrap();
        assert_eq!(names(&dir).len(), 2, "the new file is beside the target");
        drop(file);
        assert_eq!(std::fs::read(&target).unwrap(), b"earlier");
        assert_eq!(names(&dir), ["out.json"]);
        assert!(
            PENDING
                .lock()
                .unwrap()
                .iter()
                .all(|(_, t)| { !t.to_string_lossy().starts_with(".out.json.") })
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_commit_that_fails_leaves_no_new_file() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("failed_commit");
        let target = dir.join("sub");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), b"x").unwrap();
        // A non-empty directory cannot be renamed over: the commit's last step fails.
        let mut file = OutputFile::create(&target).unwrap();
        file.write_all(b"page").unwrap();
        assert!(file.commit().is_err());
        assert_eq!(names(&dir), ["sub"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_file_has_mode_0644_less_the_umask() {
        let dir = temp("mode");
        let target = dir.join("page.html");
        write(&target, b"page").unwrap();
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        // Never more than 0644, and exactly 0644 less the umask (not a private 0600).
        assert_eq!(mode & !0o644, 0, "{mode:o}");
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if let Some(umask) = status.lines().find_map(|l| l.strip_prefix("Umask:")) {
            let umask = u32::from_str_radix(umask.trim(), 8).unwrap();
            assert_eq!(mode, 0o644 & !umask, "{mode:o}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_linked_directory_of_outputs_is_refused() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("dirlink");
        let real = dir.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.join("g");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        for name in ["g", "g/", "g//"] {
            let e = OutputDir::create(&dir.join(name)).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{name}: {e}");
        }
        let made = OutputDir::create(&dir.join("new")).unwrap();
        made.write(OsStr::new("a.svg"), b"<svg/>").unwrap();
        assert_eq!(std::fs::read(dir.join("new/a.svg")).unwrap(), b"<svg/>");
        assert!(names(&real).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_probe_leaves_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("probe");
        OutputDir::open(&dir).unwrap().probe().unwrap();
        assert!(names(&dir).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn remove_unfinished_removes_the_new_files_being_written() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp("unfinished");
        let mut file = OutputFile::create(&dir.join("a.pcap")).unwrap();
        file.write_all(b"half").unwrap();
        file.flush().unwrap();
        assert_eq!(names(&dir).len(), 1);
        remove_unfinished();
        assert!(names(&dir).is_empty());
        // The commit then fails rather than leaving anything.
        assert!(file.commit().is_err());
        assert!(names(&dir).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

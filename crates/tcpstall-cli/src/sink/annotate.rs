//! `--annotate OUT.pcapng`: the capture written again, every packet unchanged, with a
//! comment on the packets of each stall and gap.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use tcpstall_core::analyze::Analysis;
use tcpstall_core::capture::annotate;
use tcpstall_core::report::annotations;

use super::Sink;
use crate::outputs::Output;

/// The annotated copy. Its file is opened before the analysis, so that a path that
/// cannot be written is said at once. An existing file is emptied only when the copy is
/// written; one this run created is removed if the run ends without the copy.
pub struct Annotate {
    path: PathBuf,
    /// Opened by [`Sink::open`].
    file: Option<File>,
    /// Whether the file was there before this run.
    existed: bool,
    /// Whether the copy was written whole.
    written: bool,
}

impl Annotate {
    pub fn new(path: &Path) -> Annotate {
        Annotate {
            path: path.to_path_buf(),
            file: None,
            existed: false,
            written: false,
        }
    }
}

impl Drop for Annotate {
    fn drop(&mut self) {
        if self.file.is_some() && !self.written && !self.existed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Sink for Annotate {
    fn paths(&self) -> Vec<Output<'_>> {
        vec![Output::file("--annotate", &self.path)]
    }

    fn reads_capture(&self) -> bool {
        true
    }

    fn open(&mut self, captures: &[PathBuf]) -> Result<(), String> {
        match captures {
            [one] if one.as_os_str() == "-" || !one.is_dir() => {}
            _ => {
                return Err(
                    "--annotate writes a copy of one capture: give it one file or - (merge several first, e.g. with mergecap)"
                        .into(),
                );
            }
        }
        // The path itself (not standard output, not a directory, not the input, not an
        // existing capture) was checked by `outputs::check` before this.
        let shown = self.path.display();
        let existed = self.path.exists();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| format!("--annotate {shown}: {e}"))?;
        self.existed = existed;
        self.file = Some(file);
        Ok(())
    }

    /// Reads `capture` again and writes it with the comments of `analysis`'s gaps.
    fn write(
        mut self: Box<Self>,
        analysis: &Analysis,
        capture: Option<&Path>,
    ) -> Result<(), String> {
        let shown = self.path.display().to_string();
        let Some(file) = &self.file else {
            return Err(format!("--annotate {shown}: the file was not opened"));
        };
        // One capture was given (see `open`): only a copy of standard input that could
        // not be kept leaves none.
        let Some(capture) = capture else {
            return Err(
                "--annotate: the copy of standard input could not be kept (is the disk full?)"
                    .into(),
            );
        };
        let comments = annotations::packet_comments(analysis);
        let input = File::open(capture).map_err(|e| {
            format!(
                "--annotate {shown}: reading the capture again: {}: {e}",
                capture.display()
            )
        })?;
        // Only a regular file is emptied first; a device or a pipe is written as it is.
        if file.metadata().is_ok_and(|m| m.is_file()) {
            file.set_len(0)
                .map_err(|e| format!("--annotate {shown}: {e}"))?;
        }
        let len = input.metadata().map(|m| m.len()).unwrap_or(0);
        let input = tcpstall_report::progress::reader(input, len, "annotating");
        let out = io::BufWriter::with_capacity(1 << 20, file);
        // On failure a file this run created goes again (see Drop); one that was there
        // before is never removed.
        let (summary, _) = annotate(input, out, &comments).map_err(|e| {
            let incomplete = if self.existed {
                "; what it holds is incomplete"
            } else {
                ""
            };
            format!("--annotate {shown}: {e}{incomplete}")
        })?;
        self.written = true;
        if summary.left_out > 0 {
            eprintln!(
                "tcpstall: warning: {shown}: {} packets on interfaces no description declared were left out; frame numbers after them differ from the report's",
                summary.left_out
            );
        }
        if summary.unplaced > 0 {
            eprintln!(
                "tcpstall: warning: {shown}: {} comments name packets the capture no longer has (did it change?)",
                summary.unplaced
            );
        }
        eprintln!(
            "tcpstall: wrote {shown} ({} packets, {} annotated)",
            summary.packets, summary.annotated
        );
        Ok(())
    }
}

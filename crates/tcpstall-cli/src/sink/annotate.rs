//! `--annotate OUT.pcapng`: the capture written again, every packet unchanged, with a
//! comment on the packets of each stall and gap.

use std::fs::File;
use std::path::{Path, PathBuf};

use tcpstall_core::analyze::Analysis;
use tcpstall_core::capture::annotate;
use tcpstall_core::output::OutputFile;
use tcpstall_core::report::annotations;

use super::Sink;
use crate::outputs::Output;

/// The annotated copy. Its new file is created before the analysis, so that a path that
/// cannot be written is said at once; it replaces the target only when the copy is
/// whole (`tcpstall_core::output`), and is removed if the run ends without it.
pub struct Annotate {
    path: PathBuf,
    /// Created by [`Sink::open`].
    file: Option<OutputFile>,
}

impl Annotate {
    pub fn new(path: &Path) -> Annotate {
        Annotate {
            path: path.to_path_buf(),
            file: None,
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
        // existing capture, not a pipe or a device) was checked by `outputs::check`.
        let file = OutputFile::create(&self.path)
            .map_err(|e| format!("--annotate {}: {e}", self.path.display()))?;
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
        let Some(mut file) = self.file.take() else {
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
        let len = input.metadata().map(|m| m.len()).unwrap_or(0);
        let input = tcpstall_report::progress::reader(input, len, "annotating");
        // On failure the new file goes (dropped uncommitted); the target is untouched.
        let (summary, _) = annotate(input, &mut file, &comments)
            .map_err(|e| format!("--annotate {shown}: {e}"))?;
        file.commit()
            .map_err(|e| format!("--annotate {shown}: {e}"))?;
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

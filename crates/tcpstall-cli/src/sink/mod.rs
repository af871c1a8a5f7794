//! The outputs of `tcpstall analyze`, side by side over one finished
//! [`Analysis`]: the report on standard output, as text
//! or JSON; the graphs, as an HTML page and as pictures; the capture again, annotated.
//! Each hands the analysis to a renderer of `tcpstall_core::report` or `tcpstall_report`
//! and writes what it returns; none of them detects anything.
//!
//! An output is a [`Sink`] in a file of its own here; `analyze.rs` gives it its option
//! and lists it among the others.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tcpstall_core::analyze::Analysis;

use crate::outputs::Output;

mod annotate;
mod graphs;
mod json;
mod text;

pub use annotate::Annotate;
pub use graphs::Graphs;
pub use json::Json;
pub use text::Text;

/// One output of `analyze`. Every sink's paths are checked, then every sink is opened,
/// before the analysis starts; after it, each writes in the order they are listed.
pub trait Sink {
    /// The files and directories it writes, checked with every other output's before
    /// the analysis starts (standard output is none of them).
    fn paths(&self) -> Vec<Output<'_>> {
        Vec::new()
    }

    /// Whether it reads the capture a second time: standard input is then copied to a
    /// file as it is read.
    fn reads_capture(&self) -> bool {
        false
    }

    /// Readies it once every output's path was checked, before the analysis, so that
    /// what it cannot do is said before a long run rather than after it.
    fn open(&mut self, _captures: &[PathBuf]) -> Result<(), String> {
        Ok(())
    }

    /// Writes the analysis. `capture` is the capture as one file to read again (the
    /// file given, or the copy of standard input), when there is one.
    fn write(self: Box<Self>, analysis: &Analysis, capture: Option<&Path>) -> Result<(), String>;
}

/// Writes a report to standard output as it is rendered. A reader that went away (`|
/// head`) ends the report without an error.
fn to_stdout(render: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), String> {
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    match render(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(format!("writing the report: {e}")),
        _ => Ok(()),
    }
}

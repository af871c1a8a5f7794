//! `--html FILE` and `--graphs DIR`: the page with every stalled connection's graphs, and
//! the same graphs as SVG and PNG files. One sink for both: one second read of the
//! capture draws the graphs either writes.

use std::path::{Path, PathBuf};
use tcpstall_core::escape::escaped_path;

use tcpstall_core::analyze::Analysis;
use tcpstall_report::analysis::{Written, write_reports};

use super::Sink;
use crate::outputs::Output;

/// The HTML page, the pictures' directory, or both.
pub struct Graphs {
    pub html: Option<PathBuf>,
    pub dir: Option<PathBuf>,
}

impl Sink for Graphs {
    fn paths(&self) -> Vec<Output<'_>> {
        let html = self.html.as_deref().map(|p| Output::file("--html", p));
        let dir = self
            .dir
            .as_deref()
            .map(|d| Output::directory("--graphs", d));
        html.into_iter().chain(dir).collect()
    }

    fn reads_capture(&self) -> bool {
        true
    }

    fn write(self: Box<Self>, analysis: &Analysis, capture: Option<&Path>) -> Result<(), String> {
        // Without the capture as one file (several files: their merge would need reading
        // again) the page says the graphs could not be drawn.
        let written = write_reports(
            analysis,
            capture,
            self.html.as_deref(),
            self.dir.as_deref(),
            &Default::default(),
        )
        .map_err(|e| e.to_string())?;
        self.say_written(&written);
        Ok(())
    }
}

impl Graphs {
    /// One line per output: the page, and the pictures in their directory.
    fn say_written(&self, written: &Written) {
        if let Some(path) = &self.html {
            eprintln!("tcpstall: wrote {}", escaped_path(path));
        }
        if let Some(dir) = &self.dir {
            let pictures = written
                .files
                .iter()
                .filter(|f| f.parent() == Some(dir))
                .count();
            let n = written.connections_drawn;
            eprintln!(
                "tcpstall: wrote {pictures} pictures of {n} connection{} into {}",
                if n == 1 { "" } else { "s" },
                dir.display()
            );
        }
    }
}

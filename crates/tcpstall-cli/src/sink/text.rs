//! The text report on standard output (without `--json`).

use std::path::Path;

use tcpstall_core::analyze::Analysis;
use tcpstall_core::report::text::{self, TextOptions};

use super::{Sink, to_stdout};

/// The text report, showing what `options` says.
pub struct Text(pub TextOptions);

impl Sink for Text {
    fn write(self: Box<Self>, analysis: &Analysis, _: Option<&Path>) -> Result<(), String> {
        to_stdout(|out| {
            let text = text::render(analysis, self.0);
            out.write_all(text.as_bytes())
        })
    }
}

//! `--json`: the JSON report on standard output (docs/json-schema.md), written as it is
//! serialised, so that the report of a huge capture is never held whole in memory.

use std::io;
use std::path::Path;

use tcpstall_core::analyze::Analysis;
use tcpstall_core::report::json;

use super::{Sink, to_stdout};

/// The JSON report.
pub struct Json;

impl Sink for Json {
    fn write(self: Box<Self>, analysis: &Analysis, _: Option<&Path>) -> Result<(), String> {
        to_stdout(|out| {
            serde_json::to_writer_pretty(&mut *out, &json::build(analysis))
                .map_err(io::Error::from)?;
            out.write_all(b"\n")
        })
    }
}

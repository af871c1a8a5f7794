//! The whole `tcpstall analyze` pipeline over arbitrary bytes: capture, segments, flows,
//! gap classification, diagnosis, then both reports (text with every option, and JSON).
//!
//! Errors are fine; a panic, a hang, or a report with a negative or non-finite number
//! (a time, a duration, a count) is a bug.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tcpstall_core::analyze::{AnalyzeOptions, analyze};
use tcpstall_core::report::{json, text};

fuzz_target!(|data: &[u8]| {
    let options = AnalyzeOptions::default();
    let Ok(analysis) = analyze(Cursor::new(data.to_vec()), "fuzz", &options) else {
        return;
    };
    for (stalls, all, top) in [(false, false, Some(1)), (true, true, None)] {
        let rendered = text::render(&analysis, text::TextOptions { stalls, all, top });
        assert!(!rendered.is_empty());
    }
    let report = json::build(&analysis);
    let encoded = serde_json::to_string(&report).expect("the JSON report encodes");
    let value: Value = serde_json::from_str(&encoded).expect("the JSON report parses");
    check_numbers(&value, "$");
});

fn check_numbers(value: &Value, at: &str) {
    match value {
        Value::Number(n) => {
            let v = n.as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v >= 0.0, "{at} is {v}");
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_numbers(item, &format!("{at}[{i}]"));
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                check_numbers(item, &format!("{at}.{key}"));
            }
        }
        _ => {}
    }
}

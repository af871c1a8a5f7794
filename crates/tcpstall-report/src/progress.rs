//! A progress bar on standard error for long reads, shown only when standard error is a
//! terminal: a pipe or a file gets nothing extra.

use std::io::{self, IsTerminal, Read};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Inputs smaller than this finish too fast for a bar to help.
pub const MIN_BYTES_FOR_BAR: u64 = 64 << 20;

/// A reader that advances a progress bar by the bytes read through it.
pub struct ProgressReader<R> {
    inner: R,
    bar: Option<ProgressBar>,
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(bar) = &self.bar {
            if n == 0 {
                bar.finish_and_clear();
            } else {
                bar.inc(n as u64);
            }
        }
        Ok(n)
    }
}

impl<R> Drop for ProgressReader<R> {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Wraps `inner` (of `total` bytes) with a bar labelled `label`, when standard error is
/// a terminal and the input is large enough to take a while.
pub fn reader<R: Read>(inner: R, total: u64, label: &str) -> ProgressReader<R> {
    let show = total >= MIN_BYTES_FOR_BAR && io::stderr().is_terminal();
    ProgressReader {
        inner,
        bar: show.then(|| bar(total, label)),
    }
}

/// A bar over `total` bytes that several readers advance (`inc`), when standard error is
/// a terminal and the input is large enough to take a while.
pub fn shared(total: u64, label: &str) -> Option<ProgressBar> {
    let show = total >= MIN_BYTES_FOR_BAR && io::stderr().is_terminal();
    show.then(|| bar(total, label))
}

fn bar(total: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(8));
    let style = ProgressStyle::with_template(
        "{prefix:>9} [{bar:36}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_bytes_through_unchanged() {
        let mut r = reader(&b"abcdef"[..], 6, "test");
        let mut out = Vec::new();
        r.read_to_end(&mut out).expect("reads");
        assert_eq!(out, b"abcdef");
    }
}

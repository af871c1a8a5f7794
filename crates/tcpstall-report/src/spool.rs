//! Standard input can be read only once, and the graphs read the capture twice: while
//! the analysis reads standard input, a copy goes to a temporary file for the graphs.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A temporary copy of an input, removed when dropped.
pub struct Spool {
    file: tempfile::NamedTempFile,
    failed: Arc<AtomicBool>,
}

impl Spool {
    pub fn new() -> io::Result<Spool> {
        Ok(Spool {
            file: tempfile::Builder::new()
                .prefix("tcpstall-stdin-")
                .suffix(".pcap")
                .tempfile()?,
            failed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A reader that passes `inner` through and copies every byte to the spool file.
    pub fn tee<R: Read>(&self, inner: R) -> io::Result<Tee<R>> {
        Ok(Tee {
            inner,
            copy: Some(BufWriter::with_capacity(1 << 20, self.file.reopen()?)),
            failed: self.failed.clone(),
        })
    }

    /// The copy, unless writing it failed (a full disk): then the graphs cannot be drawn.
    pub fn path(&self) -> Option<&Path> {
        (!self.failed.load(Ordering::SeqCst)).then(|| self.file.path())
    }
}

/// Copies what it reads into a [`Spool`].
pub struct Tee<R> {
    inner: R,
    copy: Option<BufWriter<File>>,
    failed: Arc<AtomicBool>,
}

impl<R> Tee<R> {
    fn finish_copy(&mut self) {
        if let Some(mut copy) = self.copy.take()
            && copy.flush().is_err()
        {
            self.failed.store(true, Ordering::SeqCst);
        }
    }
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            self.finish_copy();
        } else if let Some(copy) = &mut self.copy
            && copy.write_all(&buf[..n]).is_err()
        {
            self.failed.store(true, Ordering::SeqCst);
            self.copy = None;
        }
        Ok(n)
    }
}

impl<R> Drop for Tee<R> {
    fn drop(&mut self) {
        self.finish_copy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_holds_what_was_read() {
        let spool = Spool::new().expect("temp file");
        let mut tee = spool.tee(&b"0123456789"[..]).expect("tee");
        let mut out = Vec::new();
        tee.read_to_end(&mut out).expect("reads");
        drop(tee);
        let copy = std::fs::read(spool.path().expect("no failure")).expect("copy");
        assert_eq!(copy, b"0123456789");
    }
}

//! The compiled eBPF objects (see `bpf/`), embedded with the alignment the ELF parser
//! needs.

#[repr(C, align(32))]
struct Aligned<Bytes: ?Sized> {
    bytes: Bytes,
}

static WATCH_OBJECT: &Aligned<[u8]> = &Aligned {
    bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/watch.bpf.o")),
};
static FIX_OBJECT: &Aligned<[u8]> = &Aligned {
    bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/fix.bpf.o")),
};

/// The tracepoint programs (`bpf/watch.bpf.c`).
pub fn watch_object() -> &'static [u8] {
    &WATCH_OBJECT.bytes
}

/// The sockops fix (`bpf/fix.bpf.c`).
pub fn fix_object() -> &'static [u8] {
    &FIX_OBJECT.bytes
}

/// Whether this build compiled the objects from their sources (clang present) or
/// embedded the committed ones.
pub fn built_from_sources() -> bool {
    env!("TCPSTALL_BPF_SOURCE") == "compiled"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI installs clang-19, so this fails when a C source changed and its committed
    /// object was not rebuilt (bpf/build.sh).
    #[test]
    fn committed_objects_match_their_sources() {
        if !built_from_sources() {
            {
                // Straight to the terminal: the test harness hides what a passing test prints.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: clang-19 not installed, the committed objects are used as they are"
                );
            };
            return;
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf");
        for (name, built) in [("watch.bpf.o", watch_object()), ("fix.bpf.o", fix_object())] {
            let committed = std::fs::read(format!("{dir}/{name}")).expect("committed object");
            assert!(
                committed == built,
                "bpf/{name} does not match its source: run crates/tcpstall-watch/bpf/build.sh and commit"
            );
        }
    }

    #[test]
    fn objects_are_bpf_elf() {
        for object in [watch_object(), fix_object()] {
            assert_eq!(&object[..4], b"\x7fELF");
            // e_machine 247: EM_BPF
            assert_eq!(u16::from_le_bytes([object[18], object[19]]), 247);
        }
    }
}

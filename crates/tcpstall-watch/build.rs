//! Puts the eBPF objects in OUT_DIR: compiled from bpf/*.c when clang-19 (or $CLANG) is
//! installed, otherwise the committed objects. `TCPSTALL_BPF_SOURCE` tells the crate
//! which, so a test can check that the committed objects match their sources.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let bpf = manifest.join("bpf");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for file in ["watch.bpf.c", "fix.bpf.c", "kernel_types.h", "build.sh"] {
        println!("cargo:rerun-if-changed=bpf/{file}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang-19".into());
    let compiled = clang_present(&clang)
        && Command::new("sh")
            .arg(bpf.join("build.sh"))
            .arg(&out)
            .status()
            .is_ok_and(|status| status.success());
    if compiled {
        println!("cargo:rustc-env=TCPSTALL_BPF_SOURCE=compiled");
    } else {
        if clang_present(&clang) {
            println!("cargo:warning=compiling bpf/*.c failed; using the committed objects");
        }
        for object in ["watch.bpf.o", "fix.bpf.o"] {
            copy(&bpf.join(object), &out.join(object));
        }
        println!("cargo:rustc-env=TCPSTALL_BPF_SOURCE=committed");
    }
}

fn clang_present(clang: &str) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

fn copy(from: &Path, to: &Path) {
    if let Err(e) = std::fs::copy(from, to) {
        panic!("copy {}: {e}", from.display());
    }
}

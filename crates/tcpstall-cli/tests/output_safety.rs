//! Every file tcpstall writes is written whole or not at all, and never through a link:
//! a symbolic link planted at an output's name (the classic attack on a program run as
//! root in a shared directory) is replaced by the output, and what it points to keeps
//! its bytes; a full filesystem leaves no partial file and an earlier output as it was;
//! a named pipe or a device at an output's name is refused before any work, at once.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TempDir, check_refused, run, shipped, text};

const CAPTURE: &str = "seed002-two-writes.pcap";

/// Every entry of `dir` by name, with its bytes (a link as `link -> TARGET`).
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta = fs::symlink_metadata(&path).unwrap();
        let bytes = if meta.file_type().is_symlink() {
            format!("link -> {}", fs::read_link(&path).unwrap().display()).into_bytes()
        } else if meta.is_file() {
            fs::read(&path).unwrap()
        } else {
            b"(not a file)".to_vec()
        };
        all.insert(name, bytes);
    }
    all
}

/// No new file left behind: nothing whose name starts with a dot.
fn no_new_files_left(dir: &Path, what: &str) {
    let left: Vec<String> = contents(dir)
        .into_keys()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        left.is_empty(),
        "{what}: left {left:?} in {}",
        dir.display()
    );
}

/// Asserts that `path` is a regular file now (not a link) holding `bytes`.
fn regular_with(path: &Path, bytes: &[u8], what: &str) {
    let meta = fs::symlink_metadata(path).unwrap();
    assert!(
        meta.file_type().is_file(),
        "{what}: {} is not a regular file",
        path.display()
    );
    assert!(
        fs::read(path).unwrap() == bytes,
        "{what}: {} differs from the run without links",
        path.display()
    );
}

fn succeeded(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
}

#[test]
fn analyze_replaces_a_link_at_every_output_and_keeps_what_it_points_to() {
    let dir = TempDir::new("output_safety", "analyze_links");
    let input = dir.write("in.pcap", &fs::read(shipped(CAPTURE)).unwrap());
    let analyze = |root: &Path| {
        run(&[
            Path::new("analyze"),
            Path::new("--graphs"),
            &root.join("g"),
            Path::new("--html"),
            &root.join("report.html"),
            Path::new("--annotate"),
            &root.join("marked.pcapng"),
            &input,
        ])
    };
    // The names every output takes, and their bytes, from a run with no link anywhere.
    let clean = dir.0.join("clean");
    fs::create_dir(&clean).unwrap();
    succeeded(&analyze(&clean), "the run without links");
    let pictures = contents(&clean.join("g"));
    assert!(pictures.len() >= 6, "pictures: {:?}", pictures.keys());

    // The attack: a link at each name, to the capture being analysed (`ln -s ../in.pcap
    // g/conn1-zoom.svg`), to a file of someone else's, and to a file not there yet.
    let attacked = dir.0.join("attacked");
    let graphs = attacked.join("g");
    fs::create_dir_all(&graphs).unwrap();
    let victim = dir.write("victim", b"someone else's file");
    let nowhere = dir.0.join("created-through-a-link");
    let mut targets = vec![
        (attacked.join("report.html"), victim.clone()),
        (attacked.join("marked.pcapng"), nowhere.clone()),
    ];
    for (i, name) in pictures.keys().enumerate() {
        let to = match i % 3 {
            0 => PathBuf::from("../../in.pcap"),
            1 => victim.clone(),
            _ => nowhere.clone(),
        };
        targets.push((graphs.join(name), to));
    }
    for (at, to) in &targets {
        symlink(to, at).unwrap();
    }
    let before = fs::read(&input).unwrap();
    let out = analyze(&attacked);
    succeeded(&out, "the run over links");
    assert!(fs::read(&input).unwrap() == before, "the capture changed");
    assert_eq!(fs::read(&victim).unwrap(), b"someone else's file");
    assert!(
        !nowhere.exists(),
        "a file was created through a dangling link"
    );
    regular_with(
        &attacked.join("report.html"),
        &fs::read(clean.join("report.html")).unwrap(),
        "--html",
    );
    regular_with(
        &attacked.join("marked.pcapng"),
        &fs::read(clean.join("marked.pcapng")).unwrap(),
        "--annotate",
    );
    for (name, bytes) in &pictures {
        regular_with(&graphs.join(name), bytes, "--graphs");
    }
    no_new_files_left(&attacked, "analyze");
    no_new_files_left(&graphs, "analyze --graphs");
}

#[test]
fn simulate_replaces_a_link_at_every_output_and_keeps_what_it_points_to() {
    let dir = TempDir::new("output_safety", "simulate_links");
    let simulate = |root: &Path| {
        run(&[
            Path::new("simulate"),
            Path::new("--pattern"),
            Path::new("two-writes"),
            Path::new("--pcap"),
            &root.join("s.pcap"),
            Path::new("--truth"),
            &root.join("truth.json"),
            Path::new("--html"),
            &root.join("run.html"),
        ])
    };
    let clean = dir.0.join("clean");
    fs::create_dir(&clean).unwrap();
    succeeded(&simulate(&clean), "the run without links");
    let attacked = dir.0.join("attacked");
    fs::create_dir(&attacked).unwrap();
    let victims: Vec<PathBuf> = ["v1", "v2", "v3"]
        .iter()
        .map(|v| dir.write(v, v.as_bytes()))
        .collect();
    for (name, victim) in ["s.pcap", "truth.json", "run.html"].iter().zip(&victims) {
        symlink(victim, attacked.join(name)).unwrap();
    }
    succeeded(&simulate(&attacked), "the run over links");
    for (name, victim) in ["s.pcap", "truth.json", "run.html"].iter().zip(&victims) {
        let v = victim.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            fs::read_to_string(victim).unwrap(),
            v,
            "{name}'s link target"
        );
        regular_with(
            &attacked.join(name),
            &fs::read(clean.join(name)).unwrap(),
            name,
        );
    }
    no_new_files_left(&attacked, "simulate");
}

#[test]
fn a_graphs_directory_that_is_a_link_is_refused() {
    let dir = TempDir::new("output_safety", "graphs_link");
    let elsewhere = dir.0.join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let g = dir.0.join("g");
    symlink(&elsewhere, &g).unwrap();
    // `g/` names the link too (a trailing slash would resolve it).
    for given in [g.clone(), dir.0.join("g/")] {
        let out = run(&[
            Path::new("analyze"),
            Path::new("--graphs"),
            &given,
            &shipped(CAPTURE),
        ]);
        check_refused(&out, "--graphs LINK", &["--graphs", "symbolic link"]);
    }
    assert!(contents(&elsewhere).is_empty(), "written through the link");
}

/// Makes a named pipe at `path`.
fn fifo(path: &Path) {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0, "mkfifo");
}

#[test]
fn a_named_pipe_at_an_output_is_refused_at_once() {
    let dir = TempDir::new("output_safety", "fifo");
    let pipe = dir.0.join("pipe");
    fifo(&pipe);
    let capture = shipped(CAPTURE);
    // Opening a pipe no one reads blocks: the run must not. `run` kills a run that
    // outlives its bound and fails the test.
    let cases: [(&str, Vec<&dyn AsRef<std::ffi::OsStr>>); 7] = [
        ("--html", vec![&"analyze", &"--html", &pipe, &capture]),
        (
            "--annotate",
            vec![&"analyze", &"--annotate", &pipe, &capture],
        ),
        ("--graphs", vec![&"analyze", &"--graphs", &pipe, &capture]),
        ("--pcap", vec![&"simulate", &"--pcap", &pipe]),
        ("--truth", vec![&"simulate", &"--truth", &pipe]),
        ("--html", vec![&"simulate", &"--html", &pipe]),
        ("--capture", vec![&"lab", &"--capture", &pipe]),
    ];
    for (flag, args) in cases {
        let what = format!("{} {flag} PIPE", args[0].as_ref().to_string_lossy());
        let out = run(&args);
        let needle = if flag == "--graphs" {
            "not a directory"
        } else {
            "named pipe"
        };
        check_refused(&out, &what, &[flag, needle]);
    }
    let meta = fs::symlink_metadata(&pipe).unwrap();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()),
        "the pipe was replaced"
    );
}

#[test]
fn a_device_at_an_output_is_refused_before_the_report() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        common::skipped(format_args!("skipped: no /dev/full"));
        return;
    }
    let capture = shipped(CAPTURE);
    for (what, args) in [
        (
            "analyze --html",
            vec![
                &"analyze" as &dyn AsRef<std::ffi::OsStr>,
                &"--html",
                &full,
                &capture,
            ],
        ),
        (
            "analyze --annotate",
            vec![&"analyze", &"--annotate", &full, &capture],
        ),
        ("simulate --pcap", vec![&"simulate", &"--pcap", &full]),
        ("simulate --truth", vec![&"simulate", &"--truth", &full]),
        ("lab --html", vec![&"lab", &"--html", &full]),
    ] {
        // One line, and nothing on standard output: the report is not printed first.
        check_refused(&run(&args), what, &["/dev/full", "character device"]);
    }
    let meta = fs::metadata(full).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &meta.file_type()
    ));
}

/// A tmpfs of 64 KiB mounted on a directory, filled but for one page; unmounted when
/// dropped.
struct FullFilesystem {
    dir: PathBuf,
}

impl FullFilesystem {
    fn mount(dir: &Path) -> FullFilesystem {
        fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "tcpstall-test"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs on {}", dir.display());
        FullFilesystem {
            dir: dir.to_path_buf(),
        }
    }

    /// Fills the filesystem, then frees one page: room for a small file, not a report.
    fn fill(&self) {
        use std::io::Write;
        let filler = self.dir.join("filler");
        let mut file = fs::File::create(&filler).unwrap();
        let block = [0u8; 4096];
        let mut written = 0u64;
        while file.write_all(&block).is_ok() {
            written += block.len() as u64;
        }
        drop(file);
        let len = fs::metadata(&filler).unwrap().len().min(written);
        fs::OpenOptions::new()
            .write(true)
            .open(&filler)
            .unwrap()
            .set_len(len.saturating_sub(4096))
            .unwrap();
    }
}

impl Drop for FullFilesystem {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// The run failed on the full disk: a non-zero status, one error line, which says so.
fn failed_for_space(out: &Output, what: &str) {
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{what}: {stderr}");
    assert!(out.status.code().is_some(), "{what}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tcpstall: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: one error line:\n{stderr}");
    assert!(errors[0].contains("No space left"), "{what}: {}", errors[0]);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
#[ignore = "needs root (mounts a small tmpfs); .ci/run runs it"]
fn a_full_filesystem_leaves_no_partial_output_and_the_earlier_one_intact() {
    let dir = TempDir::new("output_safety", "full");
    let input = dir.write("in.pcap", &fs::read(shipped(CAPTURE)).unwrap());
    let full = FullFilesystem::mount(&dir.0.join("full"));
    let earlier: [(&str, &[u8]); 4] = [
        ("report.html", b"<p>an earlier report"),
        ("marked.pcapng", b"an earlier copy"),
        ("s.pcap", b"an earlier simulation"),
        ("truth.json", b"{\"an_earlier_truth\": true}"),
    ];
    for (name, bytes) in earlier {
        fs::write(full.dir.join(name), bytes).unwrap();
    }
    full.fill();
    let (html, marked, graphs, pcap, truth) = (
        full.dir.join("report.html"),
        full.dir.join("marked.pcapng"),
        full.dir.join("g"),
        full.dir.join("s.pcap"),
        full.dir.join("truth.json"),
    );
    let simulate: [&dyn AsRef<std::ffi::OsStr>; 5] =
        [&"simulate", &"--pattern", &"two-writes", &"-n", &"2000"];
    let runs: [(&str, Vec<&dyn AsRef<std::ffi::OsStr>>); 5] = [
        ("--html", vec![&"analyze", &"--html", &html, &input]),
        (
            "--annotate",
            vec![&"analyze", &"--annotate", &marked, &input],
        ),
        ("--graphs", vec![&"analyze", &"--graphs", &graphs, &input]),
        ("--pcap", [&simulate[..], &[&"--pcap", &pcap]].concat()),
        ("--truth", [&simulate[..], &[&"--truth", &truth]].concat()),
    ];
    for (what, args) in runs {
        failed_for_space(&run(&args), what);
        for (name, bytes) in earlier {
            assert!(
                fs::read(full.dir.join(name)).unwrap() == bytes,
                "{what}: the earlier {name} changed"
            );
        }
        no_new_files_left(&full.dir, what);
    }
    // The pictures written before the disk filled are whole: each as a run on a disk
    // with room writes it, and nothing else.
    if graphs.exists() {
        let roomy = dir.0.join("roomy");
        succeeded(
            &run(&[Path::new("analyze"), Path::new("--graphs"), &roomy, &input]),
            "--graphs with room",
        );
        let whole = contents(&roomy);
        for (name, bytes) in contents(&graphs) {
            assert!(
                whole.get(&name) == Some(&bytes),
                "--graphs: {name} is not whole"
            );
        }
    }
    drop(full);
}

/// Whether this test can run the lab's captures: root with the tools the lab needs.
fn lab_can_capture() -> bool {
    let caps = common::effective_capabilities();
    caps & (1 << 12) != 0 && caps & (1 << 21) != 0 && Command::new("ip").arg("-V").output().is_ok()
}

#[test]
#[ignore = "needs root (network namespaces, AF_PACKET capture); .ci/run runs it"]
fn lab_replaces_a_link_at_its_captures_and_keeps_what_it_points_to() {
    assert!(lab_can_capture(), "the lab's captures need root and ip");
    let dir = TempDir::new("output_safety", "lab_links");
    let victim = dir.write("victim", b"someone else's file");
    // The seed 002 suite numbers its captures s-1.pcap, s-2.pcap, ...: a link at each
    // name it could take, and at the single run's capture and page.
    let links: Vec<PathBuf> = (1..=12)
        .map(|n| dir.0.join(format!("s-{n}.pcap")))
        .chain([dir.0.join("one.pcap"), dir.0.join("page.html")])
        .collect();
    for link in &links {
        symlink(&victim, link).unwrap();
    }
    let out = run(&[
        Path::new("lab"),
        Path::new("--suite"),
        Path::new("seed002"),
        Path::new("-n"),
        Path::new("4"),
        Path::new("--capture"),
        &dir.0.join("s.pcap"),
    ]);
    succeeded(&out, "lab --suite seed002 --capture s.pcap");
    let out = run(&[
        Path::new("lab"),
        Path::new("--pattern"),
        Path::new("two-writes"),
        Path::new("-n"),
        Path::new("4"),
        Path::new("--capture"),
        &dir.0.join("one.pcap"),
        Path::new("--html"),
        &dir.0.join("page.html"),
    ]);
    succeeded(&out, "lab --capture one.pcap --html page.html");
    assert_eq!(fs::read(&victim).unwrap(), b"someone else's file");
    let mut written = 0;
    for link in &links {
        let meta = fs::symlink_metadata(link).unwrap();
        if meta.file_type().is_file() {
            written += 1;
            let bytes = fs::read(link).unwrap();
            let output = if link.extension().is_some_and(|e| e == "pcap") {
                // pcap, in microseconds or nanoseconds.
                bytes.starts_with(&[0xd4, 0xc3, 0xb2, 0xa1])
                    || bytes.starts_with(&[0x4d, 0x3c, 0xb2, 0xa1])
            } else {
                bytes.to_ascii_lowercase().starts_with(b"<!doctype html")
            };
            assert!(output, "{} is not the output", link.display());
        }
    }
    // s-1.pcap to s-N.pcap, one.pcap and page.html.
    assert!(written >= 4, "only {written} outputs replaced their links");
    for name in ["s-1.pcap", "one.pcap", "page.html"] {
        assert!(
            fs::symlink_metadata(dir.0.join(name)).unwrap().is_file(),
            "{name} is still a link"
        );
    }
    no_new_files_left(&dir.0, "lab");
}

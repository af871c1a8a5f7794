//! The Debian package (scripts/build-deb.sh, [package.metadata.deb] in this crate's
//! Cargo.toml) built, installed on this machine, used, then removed and purged: the
//! installed binary analyzes a shipped capture as the one under test does, the installed
//! unit passes `systemd-analyze verify`, nothing is enabled or started, and after
//! `dpkg -P` none of the package's paths is left (directories other packages own
//! aside). Ignored by default: it needs root, dpkg and cargo-deb (.ci/run installs it),
//! and installs a package on the machine; a guard purges it however the test ends.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::{BIN, shipped, text};

const PACKAGE: &str = "tcpstall";
const UNIT: &str = "/usr/lib/systemd/system/tcpstall-watch.service";
const DEFAULTS: &str = "/etc/default/tcpstall-watch";
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Straight to the terminal: what the package holds and what it measured, which CI's
/// log keeps.
fn show(what: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{what}");
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn succeeds(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {}: {}\n{}{}",
        args.join(" "),
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn installed() -> bool {
    run("dpkg-query", &["-W", "-f=${Status}", PACKAGE])
        .stdout
        .starts_with(b"install ok installed")
}

/// Some other package's directory: `dpkg -S` names an owner.
fn owned_by_another_package(path: &str) -> bool {
    Path::new(path).is_dir() && run("dpkg", &["-S", path]).status.success()
}

/// Purges the package when dropped, so that a failed test leaves the machine as it was.
struct Purged;

impl Drop for Purged {
    fn drop(&mut self) {
        let _ = run("dpkg", &["-P", PACKAGE]);
    }
}

/// Builds the package with the script and returns its path (the script's last line).
fn build_package() -> PathBuf {
    let out = Command::new(Path::new(WORKSPACE).join("scripts/build-deb.sh"))
        .env("CARGO", env!("CARGO"))
        .output()
        .expect("run scripts/build-deb.sh");
    assert!(
        out.status.success(),
        "scripts/build-deb.sh: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().expect("the package's path").trim());
    assert!(path.extension().is_some_and(|e| e == "deb"), "{stdout}");
    path
}

/// The paths in the package, from the archive itself (`./usr/bin/tcpstall` ->
/// `/usr/bin/tcpstall`), files and directories.
fn contents(deb: &Path) -> Vec<String> {
    succeeds("dpkg-deb", &["--contents", &deb.to_string_lossy()])
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Whether a process runs the installed binary.
fn installed_binary_runs() -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path().join("exe")).ok())
        .any(|exe| exe == Path::new("/usr/bin/tcpstall"))
}

#[test]
#[ignore = "needs root, dpkg, cargo-deb; installs and purges the package; .ci/run runs it"]
fn the_package_installs_works_and_purges_to_nothing() {
    assert!(common::watch::is_root(), "installing a package needs root");
    assert!(
        !installed(),
        "{PACKAGE} is already installed here; this test installs and purges its own"
    );
    let deb = build_package();
    let paths = contents(&deb);
    // Nothing of the package's files is on the machine already (the purge would take it).
    let files: Vec<&String> = paths.iter().filter(|p| !Path::new(p).is_dir()).collect();
    for file in &files {
        assert!(
            !Path::new(file).exists(),
            "{file} exists before the install"
        );
    }
    let size = std::fs::metadata(&deb).expect("the package").len();
    show(format_args!(
        "{}: {size} bytes, {} paths",
        deb.display(),
        paths.len()
    ));

    let _purge = Purged;
    let started = Instant::now();
    succeeds("dpkg", &["-i", &deb.to_string_lossy()]);
    show(format_args!(
        "dpkg -i: {:.2} s",
        started.elapsed().as_secs_f64()
    ));
    let listed = succeeds("dpkg", &["-L", PACKAGE]);
    show(format_args!("dpkg -L {PACKAGE}:\n{listed}"));
    for needed in [
        "/usr/bin/tcpstall",
        "/usr/share/man/man1/tcpstall.1.gz",
        "/usr/share/man/man1/tcpstall-watch.1.gz",
        "/usr/share/bash-completion/completions/tcpstall",
        "/usr/share/zsh/vendor-completions/_tcpstall",
        "/usr/share/fish/vendor_completions.d/tcpstall.fish",
        UNIT,
        DEFAULTS,
        "/usr/share/doc/tcpstall/README.md",
        "/usr/share/doc/tcpstall/docs/watch.md",
        "/usr/share/doc/tcpstall/copyright",
        "/usr/share/tcpstall/prometheus/tcpstall.rules.yml",
        "/usr/share/tcpstall/grafana/tcpstall.json",
    ] {
        assert!(
            listed.lines().any(|l| l == needed) && Path::new(needed).exists(),
            "{needed} not installed"
        );
    }
    // The unit, the rules and the dashboard are the repository's files as they are.
    for (installed, source) in [
        (UNIT, "deploy/systemd/tcpstall-watch.service"),
        (DEFAULTS, "deploy/debian/tcpstall-watch.default"),
        (
            "/usr/share/tcpstall/prometheus/tcpstall.rules.yml",
            "deploy/prometheus/tcpstall.rules.yml",
        ),
        (
            "/usr/share/tcpstall/grafana/tcpstall.json",
            "deploy/grafana/tcpstall.json",
        ),
    ] {
        let source = Path::new(WORKSPACE).join(source);
        assert_eq!(
            std::fs::read(installed).expect("the installed file"),
            std::fs::read(&source).expect("the repository's file"),
            "{installed} differs from {}",
            source.display()
        );
    }
    let conffiles = succeeds("dpkg-query", &["-W", "-f=${Conffiles}", PACKAGE]);
    assert!(conffiles.contains(DEFAULTS), "conffiles: {conffiles}");

    // The installed binary gives the report the binary under test gives.
    let capture = shipped("seed002-two-writes.pcap");
    let capture = capture.to_string_lossy();
    let report = succeeds("/usr/bin/tcpstall", &["analyze", &capture]);
    assert!(
        report.contains("Nagle's algorithm waited for delayed ACKs"),
        "{report}"
    );
    assert_eq!(report, succeeds(BIN, &["analyze", &capture]));
    succeeds("/usr/bin/tcpstall", &["completions", "bash"]);

    // The unit verifies as installed, and nothing was enabled or started.
    let verify = run("systemd-analyze", &["verify", UNIT]);
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify {UNIT}: {}\n{}",
        verify.status,
        text(&verify.stderr)
    );
    for enabled in [
        "/etc/systemd/system/multi-user.target.wants/tcpstall-watch.service",
        "/usr/lib/systemd/system/multi-user.target.wants/tcpstall-watch.service",
    ] {
        assert!(
            std::fs::symlink_metadata(enabled).is_err(),
            "{enabled}: the install enabled the unit"
        );
    }
    assert!(!installed_binary_runs(), "the install started tcpstall");

    // dpkg -r: everything but the conffile goes.
    succeeds("dpkg", &["-r", PACKAGE]);
    assert!(!Path::new("/usr/bin/tcpstall").exists());
    assert!(!Path::new(UNIT).exists());
    assert!(Path::new(DEFAULTS).exists(), "dpkg -r keeps the conffile");

    // dpkg -P: nothing left but directories other packages own.
    succeeds("dpkg", &["-P", PACKAGE]);
    assert!(!installed());
    let left: Vec<&String> = paths
        .iter()
        .filter(|p| Path::new(p).exists() && !owned_by_another_package(p))
        .collect();
    assert!(left.is_empty(), "left after dpkg -P: {left:?}");
    // Nor any state of systemd's helper (enablement, masks) about the unit.
    for dir in [
        "/etc/systemd/system",
        "/var/lib/systemd/deb-systemd-helper-enabled",
        "/var/lib/systemd/deb-systemd-helper-masked",
    ] {
        let stale: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains("tcpstall"))
            .collect();
        assert!(stale.is_empty(), "left in {dir}: {stale:?}");
    }
    show(format_args!(
        "after dpkg -P: none of the {} paths left (shared directories aside)",
        paths.len()
    ));
}

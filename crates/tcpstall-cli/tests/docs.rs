//! The documentation's examples, run: every ```console block of README.md and docs/*.md
//! is a list of `$ COMMAND` lines, each followed by the output it prints (standard output
//! and standard error together). Each command runs with this build's `tcpstall` first on
//! the PATH, in a scratch directory of its file where `captures/` and `scenarios/` are the
//! repository's, and its output must match the block line by line:
//!
//! - runs of spaces count as one space, and trailing spaces are ignored;
//! - `[..]` in a line matches any text in that line;
//! - a line of `...` matches any number of lines, none included;
//! - `[LOW..HIGH]` matches a number from LOW to HIGH: a figure that varies between runs.
//!
//! An HTML comment on the line before the block, `<!-- doc-test: ITEM; ITEM -->`, says
//! how to run it (a `skip:` or `any-numbers:` reason runs to the end of the comment):
//!
//! - `needs root`: skipped unless the test runs as root (then a leading `sudo` is dropped);
//! - `needs TOOL`: skipped unless TOOL is on the PATH;
//! - `skip: REASON`: never run here (a benchmark that takes minutes, say);
//! - `slow`: run only when the tests are built with optimizations (`cargo test --release`),
//!   for a command that takes a minute or more in a debug build;
//! - `any-numbers: REASON`: every number in the block matches any number, so the block
//!   checks its lines and labels but not its figures;
//! - `status N`: the commands exit with status N (0 otherwise).
//!
//! Every skipped block is printed with its reason, even when the test passes.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one command may run.
const TIMEOUT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documentation files whose examples are checked.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ is readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[derive(Debug, Default)]
struct Directives {
    needs_root: bool,
    tools: Vec<String>,
    skip: Option<String>,
    any_numbers: bool,
    slow: bool,
    status: i32,
}

fn parse_directives(comment: &str) -> Result<Directives, String> {
    let mut d = Directives::default();
    let mut rest = comment.trim();
    while !rest.is_empty() {
        // A reason runs to the end of the comment, semicolons and all.
        let (item, next) = if rest.starts_with("skip:") || rest.starts_with("any-numbers:") {
            (rest, "")
        } else {
            rest.split_once(';').unwrap_or((rest, ""))
        };
        rest = next.trim();
        let item = item.trim();
        if item.is_empty() {
            continue;
        } else if item == "needs root" {
            d.needs_root = true;
        } else if item == "slow" {
            d.slow = true;
        } else if let Some(tool) = item.strip_prefix("needs ") {
            d.tools.push(tool.trim().to_string());
        } else if let Some(reason) = item.strip_prefix("skip:") {
            d.skip = Some(reason.trim().to_string());
        } else if item.starts_with("any-numbers:") {
            d.any_numbers = true;
        } else if let Some(n) = item.strip_prefix("status ") {
            d.status = n
                .trim()
                .parse()
                .map_err(|_| format!("bad status: {item}"))?;
        } else {
            return Err(format!("unknown doc-test directive: {item}"));
        }
    }
    Ok(d)
}

#[derive(Debug)]
struct Example {
    command: String,
    expected: Vec<String>,
}

#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    directives: Directives,
    examples: Vec<Example>,
}

/// The ```console blocks of `text`, with the directive before each.
fn parse_blocks(file: &str, text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```console" {
            i += 1;
            continue;
        }
        let start = i + 1;
        let directive = i
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix("<!-- doc-test:"))
            .and_then(|l| l.strip_suffix("-->"))
            .unwrap_or("");
        let directives = parse_directives(directive).map_err(|e| format!("{file}:{i}: {e}"))?;
        let mut examples: Vec<Example> = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i];
            if let Some(command) = line.strip_prefix("$ ") {
                let mut command = command.to_string();
                while command.ends_with('\\') && i + 1 < lines.len() {
                    command.pop();
                    i += 1;
                    command.push_str(lines[i].trim_start());
                }
                examples.push(Example {
                    command,
                    expected: Vec::new(),
                });
            } else {
                let example = examples.last_mut().ok_or_else(|| {
                    format!("{file}:{start}: a console block must start with `$ COMMAND`")
                })?;
                example.expected.push(line.to_string());
            }
            i += 1;
        }
        if i == lines.len() {
            return Err(format!("{file}:{start}: the console block is not closed"));
        }
        for e in &mut examples {
            while e.expected.last().is_some_and(|l| l.trim().is_empty()) {
                e.expected.pop();
            }
        }
        blocks.push(Block {
            file: file.to_string(),
            line: start,
            directives,
            examples,
        });
        i += 1;
    }
    Ok(blocks)
}

/// One piece of an expected line.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    AnyText,
    Number { low: f64, high: f64 },
}

/// A number as the tool prints it (`1,031`, `-2`, `0.391`), at the start of `s`: its
/// length in bytes and its value.
fn number_at(s: &str) -> Option<(usize, f64)> {
    let bytes = s.as_bytes();
    let mut end = usize::from(bytes.first() == Some(&b'-'));
    let digits_from = end;
    while end < bytes.len()
        && (bytes[end].is_ascii_digit()
            || (bytes[end] == b','
                && end > digits_from
                && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)))
    {
        end += 1;
    }
    if end == digits_from {
        return None;
    }
    if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end += 1;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
    }
    let value = s[..end].replace(',', "").parse().ok()?;
    Some((end, value))
}

/// `[LOW..HIGH]` at the start of `s`: its length and its bounds.
fn range_at(s: &str) -> Option<(usize, f64, f64)> {
    let inner = s.strip_prefix('[')?;
    let close = inner.find(']')?;
    let (low, high) = inner[..close].split_once("..")?;
    Some((
        close + 2,
        low.trim().parse().ok()?,
        high.trim().parse().ok()?,
    ))
}

fn pieces(expected: &str, any_numbers: bool) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = expected;
    let mut after_word = false;
    while let Some(c) = rest.chars().next() {
        let special = if let Some(tail) = rest.strip_prefix("[..]") {
            Some((Piece::AnyText, rest.len() - tail.len()))
        } else if let Some((len, low, high)) = range_at(rest) {
            Some((Piece::Number { low, high }, len))
        } else if any_numbers && !after_word {
            number_at(rest).map(|(len, _)| {
                (
                    Piece::Number {
                        low: f64::NEG_INFINITY,
                        high: f64::INFINITY,
                    },
                    len,
                )
            })
        } else {
            None
        };
        if let Some((piece, len)) = special {
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(piece);
            rest = &rest[len..];
            after_word = false;
        } else {
            text.push(c);
            after_word = c.is_alphanumeric() || c == '_';
            rest = &rest[c.len_utf8()..];
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

fn line_matches(pieces: &[Piece], actual: &str) -> bool {
    match pieces.split_first() {
        None => actual.is_empty(),
        Some((Piece::Text(t), rest)) => actual
            .strip_prefix(t.as_str())
            .is_some_and(|a| line_matches(rest, a)),
        Some((Piece::AnyText, rest)) => actual
            .char_indices()
            .map(|(i, _)| i)
            .chain([actual.len()])
            .any(|i| line_matches(rest, &actual[i..])),
        Some((Piece::Number { low, high }, rest)) => number_at(actual)
            .is_some_and(|(len, v)| *low <= v && v <= *high && line_matches(rest, &actual[len..])),
    }
}

/// Runs of spaces as one, no trailing spaces.
fn squeeze(line: &str) -> String {
    let mut out = String::new();
    for (i, word) in line.split(' ').filter(|w| !w.is_empty()).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
    if line.starts_with(' ') && !out.is_empty() {
        out.insert(0, ' ');
    }
    out
}

fn output_matches(expected: &[String], actual: &[String], any_numbers: bool) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..], any_numbers))
        }
        Some((e, rest)) => actual.split_first().is_some_and(|(a, actual_rest)| {
            line_matches(&pieces(&squeeze(e), any_numbers), &squeeze(a))
                && output_matches(rest, actual_rest, any_numbers)
        }),
    }
}

/// Runs `command` with `sh` in `dir`: its exit status and its output, standard error
/// merged into standard output.
fn run(command: &str, dir: &Path, path: &str) -> Result<(i32, String), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("COLUMNS", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {} s", TIMEOUT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = reader.join().expect("the reader thread does not panic");
    Ok((
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Why `block` cannot run here, if it cannot.
fn skip_reason(block: &Block, root: bool) -> Option<String> {
    let d = &block.directives;
    if let Some(reason) = &d.skip {
        return Some(reason.clone());
    }
    if d.slow && cfg!(debug_assertions) {
        return Some("slow without optimizations: runs under `cargo test --release`".into());
    }
    if d.needs_root && !root {
        return Some("needs root".into());
    }
    d.tools
        .iter()
        .find(|t| !on_path(t))
        .map(|t| format!("needs {t}, which is not installed"))
}

/// Writes straight to standard error, which the test harness does not capture, so the
/// skipped examples show in every run.
fn tell(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

#[test]
fn documented_commands_print_what_the_docs_show() {
    let root = unsafe { libc::geteuid() } == 0;
    let bin = Path::new(env!("CARGO_BIN_EXE_tcpstall"))
        .parent()
        .expect("the binary is in a directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH entries join");
    let path = path.to_string_lossy().into_owned();
    let scratch_root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("doc-examples");
    let _ = std::fs::remove_dir_all(&scratch_root);

    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for file in doc_files() {
        let name = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        // Each file's examples run in order in a directory of their own, as a reader
        // following that file would run them.
        let scratch = scratch_root.join(name.replace('/', "-"));
        std::fs::create_dir_all(&scratch).expect("scratch directory");
        for dir in ["captures", "scenarios"] {
            std::os::unix::fs::symlink(repo().join(dir), scratch.join(dir)).expect("symlink");
        }
        let text = std::fs::read_to_string(&file).expect("documentation is readable");
        let blocks = parse_blocks(&name, &text).unwrap_or_else(|e| panic!("{e}"));
        for block in blocks {
            if let Some(reason) = skip_reason(&block, root) {
                for e in &block.examples {
                    tell(&format!(
                        "doc example skipped, {}:{}: `{}`: {reason}",
                        block.file, block.line, e.command
                    ));
                    skipped += 1;
                }
                continue;
            }
            for e in &block.examples {
                let command = match e.command.strip_prefix("sudo ") {
                    Some(c) if block.directives.needs_root => c,
                    _ => &e.command,
                };
                ran += 1;
                let place = format!("{}:{}: `{}`", block.file, block.line, e.command);
                match run(command, &scratch, &path) {
                    Err(why) => failures.push(format!("{place}: {why}")),
                    Ok((status, out)) => {
                        let actual: Vec<String> = out.lines().map(str::to_string).collect();
                        if status != block.directives.status {
                            failures.push(format!(
                                "{place}: exit status {status}, expected {}\n{out}",
                                block.directives.status
                            ));
                        } else if !output_matches(
                            &e.expected,
                            &actual,
                            block.directives.any_numbers,
                        ) {
                            failures.push(format!(
                                "{place}: the output differs\n--- documented\n{}\n--- printed\n{out}",
                                e.expected.join("\n")
                            ));
                        }
                    }
                }
            }
        }
    }
    tell(&format!("doc examples: {ran} run, {skipped} skipped"));
    assert!(ran > 0, "no documented command ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn matching_rules() {
    let m = |e: &[&str], a: &[&str]| {
        let e: Vec<String> = e.iter().map(|s| s.to_string()).collect();
        let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        output_matches(&e, &a, false)
    };
    assert!(m(&["a  b"], &["a b   "]));
    assert!(!m(&["a b"], &["a c"]));
    assert!(m(&["x [..] z"], &["x anything at all z"]));
    assert!(!m(&["x [..] z"], &["x anything"]));
    assert!(m(&["first", "...", "last"], &["first", "1", "2", "last"]));
    assert!(m(&["first", "...", "last"], &["first", "last"]));
    assert!(!m(&["first", "last"], &["first", "1", "last"]));
    assert!(m(&["took [1.1..1.5] s"], &["took 1.234 s"]));
    assert!(!m(&["took [1.1..1.5] s"], &["took 1.6 s"]));
    assert!(m(&["[1000..2000] packets"], &["1,031 packets"]));
    assert!(!m(&["only"], &["only", "more"]));
    let loose = |e: &str, a: &str| output_matches(&[e.to_string()], &[a.to_string()], true);
    assert!(loose(
        "precision 0.9874, seed002",
        "precision 0.99, seed002"
    ));
    assert!(!loose("seed002", "seed003"));
    assert!(!loose("precision 0.9874", "recall 0.9874"));
}

#[test]
fn directives_are_read() {
    let text = "<!-- doc-test: needs root; needs tshark; status 2 -->\n```console\n$ tcpstall a \\\n  --b\nout\n\n```\n";
    let blocks = parse_blocks("x.md", text).expect("parses");
    assert_eq!(blocks.len(), 1);
    let b = &blocks[0];
    assert!(b.directives.needs_root);
    assert_eq!(b.directives.tools, ["tshark"]);
    assert_eq!(b.directives.status, 2);
    assert_eq!(b.examples[0].command, "tcpstall a --b");
    assert_eq!(b.examples[0].expected, ["out"]);
    let two = parse_blocks("x.md", "```console\n$ a\n1\n\n$ b\n2\n```\n").expect("parses");
    assert_eq!(two[0].examples[0].expected, ["1"]);
    assert_eq!(two[0].examples[1].expected, ["2"]);
    assert!(
        parse_blocks(
            "x.md",
            "<!-- doc-test: sometimes -->\n```console\n$ a\n```\n"
        )
        .is_err()
    );
    assert!(parse_blocks("x.md", "```console\nno command\n```\n").is_err());
}

/// The cgroup `watch -- CMD` makes is named `tcpstall-watch-PID-TOKEN`, new in every run:
/// each such name in `line` as `tcpstall-watch-ID`.
fn without_cgroup_ids(line: &str) -> String {
    const NAME: &str = "tcpstall-watch-";
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(NAME) {
        out.push_str(&rest[..at + NAME.len()]);
        rest = &rest[at + NAME.len()..];
        let id = rest
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
            .unwrap_or(rest.len());
        out.push_str("ID");
        rest = &rest[id..];
    }
    out.push_str(rest);
    out
}

/// docs/watch.md's live block, `sudo tcpstall watch -- ./target/release/examples/echo_pair
/// two-writes 5`, which the run above skips (its pids, ports and times differ every time),
/// run here on a free port and held to its shape: the program's `RTT:` lines and watch's
/// stall lines share standard output, told apart by their start, each line as the block
/// shows it but its figures; watch's summary on standard error as the block shows it. Its
/// stalls are as many as the round trips the program itself timed as held
/// (common::truth), and the summary counts the same.
#[test]
#[ignore = "needs root and a kernel with BTF (watch)"]
fn watch_block_holds_its_shape_in_a_real_run() {
    use common::truth::{Failed, LOOPBACK, record_until_clear};
    const DOCUMENTED: &str = "sudo tcpstall watch -- ./target/release/examples/echo_pair ";
    let Some(()) = common::watch::can_watch("docs/watch.md's live block") else {
        return;
    };
    let text = std::fs::read_to_string(repo().join("docs/watch.md")).expect("docs/watch.md");
    let blocks = parse_blocks("docs/watch.md", &text).unwrap_or_else(|e| panic!("{e}"));
    let example = blocks
        .iter()
        .flat_map(|b| &b.examples)
        .find(|e| e.command.starts_with(DOCUMENTED))
        .expect(
            "docs/watch.md shows `sudo tcpstall watch -- ./target/release/examples/echo_pair ...`",
        );
    let program_args: Vec<&str> = example.command[DOCUMENTED.len()..]
        .split_whitespace()
        .collect();
    let rounds: usize = program_args
        .get(1)
        .and_then(|r| r.parse().ok())
        .expect("the block's echo_pair MODE ROUNDS");
    // What the block shows: program and stall lines up to `...`, then the summary.
    let (shown_stdout, shown_summary) = {
        let at = example
            .expected
            .iter()
            .position(|l| l.trim() == "...")
            .expect("the block elides the rest of its stall lines with `...`");
        (&example.expected[..at], &example.expected[at + 1..])
    };
    let shown_rtt = shown_stdout
        .iter()
        .find(|l| l.starts_with("RTT: "))
        .expect("the block shows the program's RTT lines");
    let shown_stall = shown_stdout
        .iter()
        .find(|l| !l.starts_with("RTT: "))
        .expect("the block shows a stall line");
    let pattern = |line: &str| pieces(&squeeze(&without_cgroup_ids(line)), true);
    let (rtt_pattern, stall_pattern) = (pattern(shown_rtt), pattern(shown_stall));
    let shown_summary: Vec<String> = shown_summary
        .iter()
        .map(|l| without_cgroup_ids(l))
        .collect();
    let echo = common::watch::echo_pair();
    let port = common::watch::free_port().to_string();
    record_until_clear("docs/watch.md's live block", |last| {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--"])
            .arg(&echo)
            .args(&program_args)
            .arg(&port)
            .output()
            .map_err(|e| format!("run tcpstall watch: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let printed = format!("--- stdout\n{stdout}--- stderr\n{stderr}");
        if !out.status.success() {
            return Err(format!("watch exited with {}\n{printed}", out.status).into());
        }
        // Each line is the program's or watch's, whole: both write a line at a time.
        let mut stalls = 0;
        for line in stdout.lines() {
            let (what, pattern) = if line.starts_with("RTT: ") {
                ("an RTT line", &rtt_pattern)
            } else {
                stalls += 1;
                ("a stall line", &stall_pattern)
            };
            if !line_matches(pattern, &squeeze(&without_cgroup_ids(line))) {
                return Err(format!(
                    "{what} not as docs/watch.md shows it: {line}\n--- documented\n{}\n{printed}",
                    shown_stdout.join("\n")
                )
                .into());
            }
        }
        let round_trips = common::watch::round_trips_ms(&out.stdout);
        if round_trips.len() != rounds {
            return Err(format!(
                "{} RTT lines, {rounds} round trips\n{printed}",
                round_trips.len()
            )
            .into());
        }
        let summary: Vec<String> = stderr.lines().map(without_cgroup_ids).collect();
        if !output_matches(&shown_summary, &summary, true) {
            return Err(format!(
                "the summary differs from docs/watch.md's\n--- documented\n{}\n{printed}",
                shown_summary.join("\n")
            )
            .into());
        }
        let counted = stderr
            .lines()
            .find_map(|l| l.strip_prefix("tcpstall watch: "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok());
        if counted != Some(stalls) {
            return Err(
                format!("{stalls} stall lines, the summary counts {counted:?}\n{printed}").into(),
            );
        }
        // The first round trip is not judged: a new connection's receiver ACKs at once.
        let truth = LOOPBACK.judge_except(&round_trips, |i| i == 0);
        truth.clear_unless_last(last)?;
        if !truth.admits(stalls) {
            return Err(Failed::Wrong(format!(
                "{stalls} stall lines, {} round trips the program timed as held\n{printed}",
                truth.expected()
            )));
        }
        Ok(())
    });
}

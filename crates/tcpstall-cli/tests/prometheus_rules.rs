//! deploy/prometheus/: `promtool check rules` accepts the rules and `promtool test rules`
//! passes their unit tests (Debian's `prometheus` package ships promtool; .ci/run
//! installs it), and every alert has unit tests where it fires and where it stays silent,
//! and says what to run next.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/prometheus");

fn read(name: &str) -> String {
    let path = Path::new(DEPLOY).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(DEPLOY)
        .output()
        .expect("run promtool (Debian: apt-get install prometheus)");
    assert!(
        out.status.success(),
        "promtool {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs promtool (apt-get install prometheus); .ci/run runs it"]
fn promtool_checks_the_rules_and_passes_their_tests() {
    promtool(&["check", "rules", "tcpstall.rules.yml"]);
    promtool(&["test", "rules", "tcpstall.rules.test.yml"]);
}

/// The alerts' names, in the order of the rules file.
fn alerts(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|name| name.trim().to_string())
        .collect()
}

/// Per alert name, the unit tests' expectations: (silent, firing) counts. A case is an
/// `alertname:` line followed by `exp_alerts: []` (silent) or `exp_alerts:` and a list.
fn cases(tests: &str) -> BTreeMap<String, (usize, usize)> {
    let mut counts = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in tests.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("alertname: ") {
            current = Some(name.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("exp_alerts:") {
            let name = current.take().expect("exp_alerts after an alertname");
            let entry = counts.entry(name).or_insert((0, 0));
            if rest.trim() == "[]" {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
    }
    counts
}

#[test]
fn every_alert_has_a_firing_and_a_silent_case() {
    let rules = read("tcpstall.rules.yml");
    let names = alerts(&rules);
    assert!(names.len() >= 5, "alerts: {names:?}");
    let cases = cases(&read("tcpstall.rules.test.yml"));
    for name in &names {
        let (silent, firing) = cases.get(name).copied().unwrap_or_default();
        assert!(
            silent >= 1 && firing >= 1,
            "{name}: {silent} silent and {firing} firing cases in tcpstall.rules.test.yml"
        );
    }
    for tested in cases.keys() {
        assert!(names.contains(tested), "a test for no alert: {tested}");
    }
}

#[test]
fn every_alert_waits_and_says_what_to_run() {
    let rules = read("tcpstall.rules.yml");
    // Each alert's block: from its `- alert:` line to the next rule.
    for block in rules.split("- alert: ").skip(1) {
        let block = block.split("\n      - ").next().unwrap_or(block);
        let name = block.lines().next().unwrap_or_default();
        assert!(block.contains("\n        for: "), "{name} has no for:");
        assert!(block.contains("description: "), "{name} has no description");
        assert!(
            block.contains('`'),
            "{name}'s description names no command to run next"
        );
    }
}

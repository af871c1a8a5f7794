#!/usr/bin/env python3
"""Runs the detector on random scenarios of the simulator and counts what it gets wrong.

    python3 scripts/random-scenarios.py [--seed S] [--runs N] [--bin PATH] [--keep DIR]

Each run draws a stack for each end (linux, windows, macos, macos-legacy, freebsd, aix),
a pattern, a round trip of 0.05 to 300 ms, a varying delay, jitter, loss, a link of
2 Mbit/s to 1 Gbit/s, think times and one of five capture points, then runs
`tcpstall simulate FILE --check --json`: the detector against the run's ground truth.
The same seed draws the same scenarios. Prints the totals (stalls found, false, missed)
and one line per scenario with a false or missed stall; with --keep, those scenarios are
kept as TOML files in DIR (`tcpstall simulate FILE --check --timeline` shows why).
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile

STACKS = ["linux", "windows", "macos", "macos-legacy", "freebsd", "aix"]
PATTERNS = ["two-writes", "sftp", "proxy-split", "http-keepalive", "pipeline", "bulk",
            "interactive", "two-way"]


def draw(rng):
    """One scenario: its TOML text and a one-line description."""
    client, server = rng.choice(STACKS), rng.choice(STACKS)
    pattern = rng.choice(PATTERNS)
    rtt = rng.choice([0.05, 1, 5, 20, 50, 80, 150, 300])
    variation = rng.choice([0, 0, 0.05, 0.1, 0.2])
    jitter = rng.choice([0, 0, 0.1, 1.0])
    capture = rng.choice(["client", "server", "tap", "tap:0.3", "tap:0.8"])
    loss = rng.choice([0, 0, 0, 0.01])
    bandwidth = rng.choice([1e9, 1e9, 1e8, 1e7, 2e6])
    server_think = rng.choice([0, 0, 2, 15, 60])
    client_think = rng.choice([0, 0, 5, 50])
    seed = rng.randrange(1, 10**6)
    toml = f"""capture = "{capture}"
[client]
stack = "{client}"
[server]
stack = "{server}"
[link]
rtt_ms = {rtt}
delay_variation = {variation}
jitter_ms = {jitter}
loss = {loss}
bandwidth_bps = {bandwidth}
seed = {seed}
[workload]
pattern = "{pattern}"
transactions = 10
server_think_ms = {server_think}
client_think_ms = {client_think}
"""
    description = (f"{client}->{server} {pattern} rtt {rtt} ms, variation {variation}, "
                   f"jitter {jitter} ms, capture {capture}, loss {loss}, "
                   f"{bandwidth:g} bit/s, think {server_think}/{client_think} ms")
    return toml, description


def main():
    # Output piped into `head` and the like ends the run quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="draws (default 1)")
    parser.add_argument("--runs", type=int, default=300, help="scenarios (default 300)")
    parser.add_argument("--bin", default="target/release/tcpstall",
                        help="the tcpstall to run (default target/release/tcpstall)")
    parser.add_argument("--keep", help="keep the scenarios with a mistake in this directory")
    parser.add_argument("--capture-clock-us", type=float, default=0,
                        help="the capture clock's step in microseconds, for every scenario "
                             "(default 0: exact)")
    args = parser.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"random-scenarios: {args.bin} is not an executable (cargo build --release)")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    rng = random.Random(args.seed)
    totals = {"runs": 0, "found": 0, "false": 0, "missed": 0, "errors": 0}
    mistakes = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.runs):
            toml, description = draw(rng)
            if args.capture_clock_us:
                toml = f"capture_clock_us = {args.capture_clock_us}\n" + toml
                description += f", clock step {args.capture_clock_us:g} us"
            path = os.path.join(scratch, f"s{args.seed}-{i}.toml")
            with open(path, "w") as f:
                f.write(toml)
            run = subprocess.run([args.bin, "simulate", path, "--check", "--json"],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                totals["errors"] += 1
                print(f"error: {description}: {run.stderr.strip()[:200]}", file=sys.stderr)
                continue
            check = json.loads(run.stdout)["check"]
            totals["runs"] += 1
            totals["found"] += check["true_positives"]
            totals["false"] += check["false_positives"]
            totals["missed"] += check["false_negatives"]
            if check["false_positives"] or check["false_negatives"]:
                name = f"s{args.seed}-{i}.toml"
                if args.keep:
                    with open(os.path.join(args.keep, name), "w") as f:
                        f.write(toml)
                mistakes.append(f"{name}: {check['false_positives']} false, "
                                f"{check['false_negatives']} missed: {description}")
    print(f"seed {args.seed}: {totals['runs']} runs, stalls found {totals['found']}, "
          f"false {totals['false']}, missed {totals['missed']}"
          + (f", {totals['errors']} errors" if totals["errors"] else ""))
    for line in mistakes:
        print("  " + line)
    return 1 if totals["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

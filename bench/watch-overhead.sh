#!/usr/bin/env bash
# What `tcpstall watch` costs the programs it watches: a bulk loopback transfer and a
# request/response loop (one write per request, no stall), each run without and with
# watch attached (every TCP socket on the host watched), alternated ROUNDS times in one
# run; prints the median ratio with/without (goal: at most 1.02). Then one more pass with
# kernel.bpf_stats_enabled=1 gives each program's runs and nanoseconds per run.
#
#   bash bench/watch-overhead.sh [ROUNDS] [BULK_BYTES] [REQUESTS]    (root)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

rounds=${1:-7}
bulk_bytes=${2:-4000000000}
requests=${3:-20000}
[ "$(id -u)" = 0 ] || { echo "watch-overhead: needs root (watch loads eBPF programs)" >&2; exit 2; }
require watch-overhead bpftool:bpftool
cargo build --release -q -p tcpstall-cli --bin tcpstall --example echo_pair
bin=$(release_dir)
tcpstall=$bin/tcpstall
echo_pair=$bin/examples/echo_pair
port=18950

# bulk: milliseconds for BULK_BYTES through loopback, as echo_pair reports it.
bulk() { "$echo_pair" bulk "$bulk_bytes" "$port" | awk '{print $(NF-1)}'; }
# rr: milliseconds for REQUESTS round trips (the sum of the program's own times).
rr() { "$echo_pair" one-write "$requests" "$port" | awk '/^RTT/ {s += $2} END {printf "%.1f\n", s}'; }

watch_pid=
start_watch() {
    "$tcpstall" watch --json --duration 600 >/dev/null 2>&1 &
    watch_pid=$!
    # attached once the programs are loaded (they are listed by name)
    for _ in $(seq 100); do
        bpftool prog show 2>/dev/null | grep -q 'name on_destroy' && return 0
        sleep 0.05
    done
    echo "watch-overhead: watch did not attach" >&2
    exit 1
}
stop_watch() {
    kill -INT "$watch_pid"
    wait "$watch_pid" || true
}
trap '[ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true' EXIT

sysctl -q kernel.bpf_stats_enabled=0
declare -a bulk_ratio rr_ratio
for i in $(seq "$rounds"); do
    b0=$(bulk); r0=$(rr)
    start_watch; b1=$(bulk); r1=$(rr); stop_watch
    bulk_ratio+=("$(awk -v a="$b1" -v b="$b0" 'BEGIN {printf "%.4f", a / b}')")
    rr_ratio+=("$(awk -v a="$r1" -v b="$r0" 'BEGIN {printf "%.4f", a / b}')")
    echo "round $i: bulk ${b0} ms -> ${b1} ms, request/response ${r0} ms -> ${r1} ms"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "bulk $((bulk_bytes / 1000000)) MB: median time with/without watch $(median "${bulk_ratio[@]}")"
echo "request/response x $requests: median time with/without watch $(median "${rr_ratio[@]}")"

# Cost per event: the kernel times every program run while bpf_stats_enabled is 1.
sysctl -q kernel.bpf_stats_enabled=1
start_watch
bulk >/dev/null
rr >/dev/null
echo "per program, over one bulk run and one request/response run (kernel.bpf_stats_enabled):"
bpftool prog show | awk '
    / name on_/ {
        for (f = 1; f < NF; f++) {
            if ($f == "name") name = $(f + 1)
            if ($f == "run_time_ns") ns = $(f + 1)
            if ($f == "run_cnt") runs = $(f + 1)
        }
        printf "  %-15s %10d runs %8.0f ns/run\n", name, runs, runs ? ns / runs : 0
        total_ns += ns; total_runs += runs
    }
    END { printf "  all            %10d runs %8.0f ns/run\n", total_runs, total_runs ? total_ns / total_runs : 0 }'
stop_watch
sysctl -q kernel.bpf_stats_enabled=0

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

# Each workload prints "WALL_MS CPU_MS": its own time (bulk: the transfer as echo_pair
# reports it; request/response: the sum of its round trips), and the CPU time (user +
# system) of its process, client and server. On loopback the receiving side's softirq
# work runs in the sender's process, so the programs' cost is in that CPU time, which
# other load on the machine disturbs less than the wall time.
TIMEFORMAT='%3U %3S'
out=$(mktemp)
trap 'rm -f "$out"' EXIT
measure() {
    local cpu
    cpu=$( { time "$echo_pair" "$@" "$port" >"$out"; } 2>&1 )
    echo "$cpu" | awk '{printf "%.1f\n", ($1 + $2) * 1000}'
}
bulk() {
    local cpu
    cpu=$(measure bulk "$bulk_bytes")
    echo "$(awk '/^bulk/ {print $(NF-1)}' "$out") $cpu"
}
rr() {
    local cpu
    cpu=$(measure one-write "$requests")
    echo "$(awk '/^RTT/ {s += $2} END {printf "%.1f", s}' "$out") $cpu"
}

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
trap 'rm -f "$out"; [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true' EXIT

sysctl -q kernel.bpf_stats_enabled=0
# ratio WITH1 WITH2 WITHOUT1 WITHOUT2
ratio() { awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN {printf "%.4f", (a + b) / (c + d)}'; }
declare -a bulk_wall bulk_cpu rr_wall rr_cpu
for i in $(seq "$rounds"); do
    # without, with, with, without: a drift of the machine's load cancels out
    read -r bw0 bc0 <<<"$(bulk)"; read -r rw0 rc0 <<<"$(rr)"
    start_watch
    read -r bw1 bc1 <<<"$(bulk)"; read -r rw1 rc1 <<<"$(rr)"
    read -r bw2 bc2 <<<"$(bulk)"; read -r rw2 rc2 <<<"$(rr)"
    stop_watch
    read -r bw3 bc3 <<<"$(bulk)"; read -r rw3 rc3 <<<"$(rr)"
    bulk_wall+=("$(ratio "$bw1" "$bw2" "$bw0" "$bw3")")
    bulk_cpu+=("$(ratio "$bc1" "$bc2" "$bc0" "$bc3")")
    rr_wall+=("$(ratio "$rw1" "$rw2" "$rw0" "$rw3")")
    rr_cpu+=("$(ratio "$rc1" "$rc2" "$rc0" "$rc3")")
    echo "round $i: bulk ${bw0}/${bw3} ms (cpu ${bc0}/${bc3}) without, ${bw1}/${bw2} ms (cpu ${bc1}/${bc2}) with;" \
        "request/response ${rw0}/${rw3} ms (cpu ${rc0}/${rc3}) without, ${rw1}/${rw2} ms (cpu ${rc1}/${rc2}) with"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "with/without watch, median of $rounds rounds:"
echo "  bulk $((bulk_bytes / 1000000)) MB:            time $(median "${bulk_wall[@]}"), CPU time $(median "${bulk_cpu[@]}")"
echo "  request/response x $requests: time $(median "${rr_wall[@]}"), CPU time $(median "${rr_cpu[@]}")"

# Cost per event: the kernel times every program run while bpf_stats_enabled is 1. The
# programs' time during each workload, over that workload's CPU time, is the overhead
# without the noise of other load (the timing itself adds some tens of ns per run).
programs() {
    bpftool prog show | awk '
        / name on_/ {
            for (f = 1; f < NF; f++) {
                if ($f == "name") name = $(f + 1)
                if ($f == "run_time_ns") ns = $(f + 1)
                if ($f == "run_cnt") runs = $(f + 1)
            }
            print name, runs, ns
        }'
}
total_ns() { programs | awk '{t += $3} END {print t + 0}'; }
sysctl -q kernel.bpf_stats_enabled=1
start_watch
before=$(total_ns)
read -r _ bulk_cpu <<<"$(bulk)"
after_bulk=$(total_ns)
read -r _ rr_cpu <<<"$(rr)"
after_rr=$(total_ns)
echo "programs' time (kernel.bpf_stats_enabled) over the workload's CPU time:"
awk -v p="$((after_bulk - before))" -v c="$bulk_cpu" -v mb="$((bulk_bytes / 1000000))" \
    'BEGIN {printf "  bulk:             %.2f ms of %.1f ms CPU: %.2f%% (%.1f us per MB)\n", p / 1e6, c, 100 * p / 1e6 / c, p / 1e3 / mb}'
awk -v p="$((after_rr - after_bulk))" -v c="$rr_cpu" -v n="$requests" \
    'BEGIN {printf "  request/response: %.2f ms of %.1f ms CPU: %.2f%% (%.0f ns per round trip)\n", p / 1e6, c, 100 * p / 1e6 / c, p / n}'
echo "per program, over both:"
programs | awk '{printf "  %-15s %10d runs %8.0f ns/run\n", $1, $2, $2 ? $3 / $2 : 0; t += $3; n += $2}
    END {printf "  all             %10d runs %8.0f ns/run\n", n, n ? t / n : 0}'
stop_watch
sysctl -q kernel.bpf_stats_enabled=0

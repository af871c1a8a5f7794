#!/usr/bin/env bash
# Speed of the simulator: simulated packets per second on one long run, and the seed 000
# sweep of 2,001 block sizes. The baseline, measured in the same run, is the command's
# own start-up (`tcpstall simulate --profiles`), so the figures are the simulation's.
#
#   bench/simulate-speed.sh
set -euo pipefail
trap 'echo "simulate-speed: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
source bench/lib.sh
cargo build --release --quiet -p tcpstall-cli --bin tcpstall
bin=$(release_dir)/tcpstall

# seconds CMD...: wall-clock seconds of one run, output discarded.
seconds() {
    local start end
    start=$(date +%s.%N)
    "$@" > /dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}

baseline=$(seconds "$bin" simulate --profiles)

long=(simulate --client linux --server linux --pattern bulk -n 2000 --rtt 1)
packets=$("$bin" "${long[@]}" --json | grep -o '"packets": [0-9]*' | head -n 1 | grep -o '[0-9]*$')
long_s=$(seconds "$bin" "${long[@]}")

sweep=(simulate --client macos-legacy --server macos-legacy --pattern bulk --sweep block=99000..101000)
sweep_s=$(seconds "$bin" "${sweep[@]}")
sweep_packets=$("$bin" "${sweep[@]}" --json | grep -o '"packets": [0-9]*' | grep -o '[0-9]*$' | paste -sd+ | bc)

awk -v b="$baseline" -v p="$packets" -v l="$long_s" -v s="$sweep_s" -v sp="$sweep_packets" 'BEGIN {
    printf "%-52s %9s %16s\n", "run", "seconds", "packets/s"
    printf "%-52s %9.3f %16s\n", "baseline: start-up only (simulate --profiles)", b, "-"
    printf "%-52s %9.3f %16.0f\n", "bulk, linux, 2,000 blocks of 100,000 bytes (" p " pkts)", l, p / (l - b)
    printf "%-52s %9.3f %16.0f\n", "seed 000 sweep, 2,001 block sizes x 20 blocks (" sp " pkts)", s, sp / (s - b)
    printf "simulation time above start-up: %.3f s and %.3f s\n", l - b, s - b
}'

#!/usr/bin/env bash
# Records the captures shipped in captures/ from real programs on this machine's
# loopback: the seed 002 exchange and its variants. Needs root and tcpdump.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "record-captures: needs root (tcpdump on lo)" >&2; exit 2; fi
command -v tcpdump >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump; }
cargo build --release --example echo_pair
bin=target/release/examples/echo_pair

record() { # name port snaplen mode count
    local name=$1 port=$2 snap=$3; shift 3
    tcpdump -i lo --immediate-mode -s "$snap" -U -w "captures/$name.pcap" "tcp port $port" 2>/dev/null &
    local dump=$!
    sleep 1
    "$bin" "$@" "$port" > "captures/$name.txt"
    sleep 1.5
    kill -INT "$dump"; wait "$dump" || true
    echo "captures/$name.pcap: $(tail -n 1 "captures/$name.txt")"
}

record seed002-two-writes 8000 256 two-writes 10
record seed002-one-write 8001 256 one-write 10
record seed002-nodelay 8002 256 nodelay 10
record server-sleep-40ms 8003 256 server-sleep 10
record bulk-100MB 8004 96 bulk 100000000

#!/usr/bin/env bash
# Speed and memory of `tcpstall analyze` against a floor (cat) and tshark's TCP
# conversation table, on one synthetic capture read from the page cache.
#
#   bench/analyze-vs-tshark.sh [SIZE]     SIZE: 1G (default), 200M, 50M, ...
#
# Runs as root on a bare Debian machine with the Rust toolchain: installs tshark and GNU
# time when missing, builds release, writes bench/out/synth-SIZE.pcap with the
# synth_capture example (kept for the next run), then times cat, tcpstall (twice: the
# first run warms the page cache and gives the packet count, the second is reported)
# and tshark, each through /usr/bin/time. Writes only under bench/out/ (and cargo's
# target directory).
set -euo pipefail
trap 'echo "analyze-vs-tshark: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

cd "$(dirname "$0")/.."
source bench/lib.sh
size=${1:-1G}
out=bench/out
mkdir -p "$out"

# Bytes in SIZE, as synth_capture reads it (binary suffixes).
target_bytes() {
    local s=${1%iB}
    s=${s%B}
    local n=${s%[kKmMgGtT]} shift=0
    case ${s: -1} in
        k | K) shift=10 ;;
        m | M) shift=20 ;;
        g | G) shift=30 ;;
        t | T) shift=40 ;;
    esac
    [[ $n =~ ^[0-9]+$ ]] || { echo "analyze-vs-tshark: bad SIZE $1" >&2; return 2; }
    echo $((n << shift))
}
target=$(target_bytes "$size")

require analyze-vs-tshark tshark:tshark /usr/bin/time:time

cargo build --release --quiet -p tcpstall-cli -p tcpstall-core --bin tcpstall --example synth_capture
tcpstall=$(release_dir)/tcpstall
synth=$(release_dir)/examples/synth_capture

# The generator stops at the first packet that reaches SIZE: a finished file is at most
# one record (under 200 bytes) longer.
file=$out/synth-$size.pcap
have=$(stat -c %s "$file" 2> /dev/null || echo 0)
if [ "$have" -ge "$target" ] && [ "$have" -lt $((target + 1024)) ]; then
    echo "using $file ($have bytes, already generated)"
else
    echo "generating $file ..."
    "$synth" "$file.part" "$size"
    mv "$file.part" "$file"
fi
bytes=$(stat -c %s "$file")

log=$out/stderr.log
: > "$log"
timing=$out/time.txt

# measure NAME CMD...: runs CMD with stdout to /dev/null (stderr to $log) and sets
# secs and rss_kb.
measure() {
    local name=$1
    shift
    echo "timing $name ..."
    echo "== $name: $*" >> "$log"
    /usr/bin/time -f '%e %M' -o "$timing" "$@" > /dev/null 2>> "$log"
    read -r secs rss_kb < <(tail -n 1 "$timing")
}

# First tcpstall run: warms the page cache, checks the file analyses cleanly, counts
# its packets.
report=$out/synth-$size.json
echo "warm-up: tcpstall analyze --json ..."
"$tcpstall" analyze --json "$file" > "$report"
packets=$(sed -n '/^  "input": {/,/^  }/s/^    "packets": \([0-9]*\),$/\1/p' "$report")
[[ $packets =~ ^[0-9]+$ ]] || { echo "analyze-vs-tshark: no packet count in $report" >&2; exit 1; }

measure cat cat "$file"
cat_s=$secs cat_kb=$rss_kb
measure "tcpstall (1st)" "$tcpstall" analyze "$file"
warm_s=$secs
measure "tcpstall (2nd)" "$tcpstall" analyze "$file"
ts_s=$secs ts_kb=$rss_kb
measure tshark tshark -q -z conv,tcp -r "$file"
sh_s=$secs sh_kb=$rss_kb

echo
echo "capture: $file, $bytes bytes, $packets packets; page cache warm; $(nproc) CPUs; $(tshark --version 2> /dev/null | head -n 1)"
awk -v p="$packets" \
    -v cs="$cat_s" -v ck="$cat_kb" -v ts="$ts_s" -v tk="$ts_kb" -v ss="$sh_s" -v sk="$sh_kb" -v ws="$warm_s" '
    function row(tool, s, kb) {
        printf "%-28s %9.2f %14s %12.1f\n", tool, s, (s > 0 ? sprintf("%.0f", p / s) : "-"), kb / 1024
    }
    BEGIN {
        printf "%-28s %9s %14s %12s\n", "tool", "seconds", "packets/s", "peak RSS MB"
        row("cat (floor)", cs, ck)
        row("tcpstall analyze", ts, tk)
        row("tshark -q -z conv,tcp", ss, sk)
        printf "tshark/tcpstall: %.1fx the time, %.1fx the peak RSS (tcpstall 1st run: %.2f s)\n",
            (ts > 0 ? ss / ts : 0), (tk > 0 ? sk / tk : 0), ws
    }'

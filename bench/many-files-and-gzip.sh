#!/usr/bin/env bash
# What reading many files, or a compressed capture, costs against one plain file.
#
#   bench/many-files-and-gzip.sh [SIZE] [FILES]     defaults: 1G, 20
#   BASELINE=/path/to/an/older/tcpstall bench/many-files-and-gzip.sh
#
# On one synthetic capture of SIZE (the page cache warmed before each run), in one run:
# tcpstall analyze on the capture as one file, and on the same bytes split into FILES
# pcap files (each with its file header, as a tcpdump -C ring cuts them) read as one
# directory; then, pinned to one core (taskset -c 0), the plain file, the file compressed
# with gzip at its default level (-6) and with zstd at its default level (-3). Each is
# the fastest of three runs taken in turns (with the CPU time, user and system, of that
# run). Speeds are MB/s (10^6 bytes) of the uncompressed capture. With BASELINE, that build runs the same rows in the same turns.
# Writes only under bench/out/ (and cargo's target directory).
set -euo pipefail
trap 'echo "many-files-and-gzip: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
source bench/lib.sh
size=${1:-1G}
parts=${2:-20}
out=bench/out
mkdir -p "$out"

require many-files-and-gzip gzip:gzip zstd:zstd taskset:util-linux /usr/bin/time:time

cargo build --release --quiet -p tcpstall-cli -p tcpstall-core --bin tcpstall \
    --example synth_capture --example split_capture
bin=$(release_dir)

file=$out/synth-$size.pcap
generate "$file" "$size"
bytes=$(stat -c %s "$file")
# Derived files are made again when the capture is newer than they are.
ring=$out/synth-$size-in-$parts
if [ ! -f "$ring/.done" ] || [ "$file" -nt "$ring/.done" ]; then
    echo "splitting $file into $parts files ..."
    rm -rf "$ring"
    mkdir -p "$ring"
    "$bin/examples/split_capture" "$file" "$parts" "$ring/synth-" >/dev/null
    touch "$ring/.done"
fi
gz=$file.gz
if [ ! -s "$gz" ] || [ "$file" -nt "$gz" ]; then
    echo "compressing $file with gzip -6 ..."
    gzip -6 -c "$file" >"$gz.part"
    mv "$gz.part" "$gz"
fi
zst=$file.zst
if [ ! -s "$zst" ] || [ "$file" -nt "$zst" ]; then
    echo "compressing $file with zstd -3 ..."
    zstd -q -3 -T0 -c "$file" >"$zst.part"
    mv "$zst.part" "$zst"
fi

# The split files give the same analysis as the capture: its segments, stalls and time lost.
totals() {
    "$bin/tcpstall" analyze --json "$1" >"$out/many-files.json"
    for key in tcp_segments late_segments stalls time_lost; do
        grep -m 1 -o "\"$key\": *[0-9.]*" "$out/many-files.json"
    done | tr -d ' \n'
}
whole=$(totals "$file")
split=$(totals "$ring")
[ "$whole" = "$split" ] || { echo "many-files-and-gzip: $parts files give $split, the capture $whole" >&2; exit 1; }
whole=$(grep -o '"tcp_segments":[0-9]*' <<<"$whole" | cut -d: -f2)

timing=$out/time.txt
# take NAME INPUT CMD...: one run, INPUT read once first so it is in the page cache;
# keeps the fastest wall time seen for NAME, and the CPU time (user and system) of that run.
declare -A best cpu
take() {
    local name=$1 input=$2
    shift 2
    if [ -d "$input" ]; then cat "$input"/*; else cat "$input"; fi >/dev/null
    echo "timing $name ..." >&2
    /usr/bin/time -f '%e %U %S' -o "$timing" "$@" >/dev/null 2>>"$out/stderr.log"
    local secs user sys
    read -r secs user sys < <(tail -n 1 "$timing")
    if [ -z "${best[$name]:-}" ] || awk -v a="$secs" -v b="${best[$name]}" 'BEGIN { exit !(a < b) }'; then
        best[$name]=$secs
        cpu[$name]=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
    fi
}

one="taskset -c 0"
for _ in 1 2 3; do
    for build in tcpstall ${BASELINE:+baseline}; do
        exe=$bin/tcpstall
        [ "$build" = baseline ] && exe=$BASELINE
        take "$build 1" "$file" "$exe" analyze "$file"
        take "$build $parts" "$ring" "$exe" analyze "$ring"
        take "$build plain1" "$file" $one "$exe" analyze "$file"
        take "$build gzip1" "$gz" $one "$exe" analyze "$gz"
        take "$build zstd1" "$zst" $one "$exe" analyze "$zst"
    done
done

echo
echo "capture: $file, $bytes bytes, $whole packets; gzip -6: $(stat -c %s "$gz") bytes, zstd -3: $(stat -c %s "$zst") bytes; $(nproc) CPUs"
for build in tcpstall ${BASELINE:+baseline}; do
    [ "$build" = baseline ] && echo "baseline: $BASELINE"
    awk -v b="$bytes" -v n="$parts" -v s1="${best[$build 1]}" -v sn="${best[$build $parts]}" \
        -v p1="${best[$build plain1]}" -v g1="${best[$build gzip1]}" -v z1="${best[$build zstd1]}" \
        -v c1="${cpu[$build 1]}" -v cn="${cpu[$build $parts]}" -v cp="${cpu[$build plain1]}" \
        -v cg="${cpu[$build gzip1]}" -v cz="${cpu[$build zstd1]}" '
        function row(what, s, c) { printf "%-32s %9.2f %9.2f %12.0f\n", what, s, c, (s > 0 ? b / s / 1e6 : 0) }
        BEGIN {
            printf "%-32s %9s %9s %12s\n", "input (tcpstall analyze)", "seconds", "CPU s", "MB/s"
            row("1 file", s1, c1)
            row(n " files (one directory)", sn, cn)
            row("1 file, one core", p1, cp)
            row("gzip -6, one core", g1, cg)
            row("zstd -3, one core", z1, cz)
            printf "RATIOS: %d files / 1 file %.2f (CPU time %.2f; goal at most 1.10: %s); gzip / plain on one core %.2f; zstd / plain on one core %.2f\n",
                n, sn / s1, cn / c1, (sn / s1 <= 1.10 ? "met" : "missed"), g1 / p1, z1 / p1
            printf "gzip on one core: %.0f MB/s of uncompressed capture (goal at least 300: %s); zstd: %.0f MB/s\n",
                b / g1 / 1e6, (b / g1 / 1e6 >= 300 ? "met" : "missed"), b / z1 / 1e6
        }'
done

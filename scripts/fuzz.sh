#!/usr/bin/env bash
# Fuzzes tcpstall's capture parsing and its whole analyze pipeline for a bounded time,
# then merges what was found into the checked-in corpus, minimized.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS is the time per target (default 60); the targets are capture_parse and
# analyze_pipeline (default both). They run one after the other, or all at once with
# FUZZ_PARALLEL=1. Everything runs under `nice -n 10`.
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The targets are
# built with debug assertions, so an integer overflow is a crash like a panic. A crash
# or hang is saved under fuzz/artifacts/TARGET/ and the script exits with status 1;
# turn it into a regression test (crates/tcpstall-cli/tests/data/regressions/).
#
# The corpus in fuzz/corpus/TARGET/ is merged, never just appended to: libFuzzer's
# -merge=1 keeps the smallest set of inputs that covers everything the old corpus, the
# new inputs and the seeds (fuzz/make_seeds.py) cover.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(capture_parse analyze_pipeline)
fi
case "$SECONDS_PER_TARGET" in
    '' | *[!0-9]*)
        echo "usage: $0 [SECONDS] [TARGET...]" >&2
        exit 2
        ;;
esac

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: needs the nightly toolchain and cargo-fuzz:" >&2
    echo "  rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
fi

# Options for every run: the dictionary of magic numbers and header values, inputs up to
# 16 KiB (a few dozen packets), 10 s before an input counts as a hang.
LIBFUZZER_OPTS=(-dict=fuzz/capture.dict -max_len=16384 -timeout=10 -rss_limit_mb=2048
    -print_final_stats=1)

work=$(mktemp -d "${TMPDIR:-/tmp}/tcpstall-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Optimised, with debug assertions and overflow checks. The binaries are run directly
# afterwards, so edits made to the sources while fuzzing do not rebuild them midway.
echo "== building the fuzz targets"
nice -n 10 cargo +nightly fuzz build -O -a
bin_dir="fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

echo "== seeds"
python3 fuzz/make_seeds.py "$work/seeds"

run_target() {
    local target=$1
    local bin="$bin_dir/$target"
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target" "$work/$target/new"
    echo "== $target: fuzzing for $SECONDS_PER_TARGET s"
    local status=0
    # The first corpus directory receives the new inputs; the others are only read.
    nice -n 10 "$bin" "$work/$target/new" "fuzz/corpus/$target" "$work/seeds" \
        "${LIBFUZZER_OPTS[@]}" -max_total_time="$SECONDS_PER_TARGET" \
        -artifact_prefix="fuzz/artifacts/$target/" \
        >"$work/$target/log" 2>&1 || status=$?
    grep -E '^(stat::|Done )' "$work/$target/log" || true
    if [ $status -ne 0 ]; then
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written' "$work/$target/log" >&2 || true
        cp "$work/$target/log" "fuzz/artifacts/$target/last.log"
        echo "$target: crash or hang (status $status); log: fuzz/artifacts/$target/last.log" >&2
    fi

    # Merged on edge coverage alone: the corpus stays small enough to check in.
    echo "== $target: merging the corpus"
    mkdir -p "$work/$target/merged"
    nice -n 10 "$bin" -merge=1 -use_counters=0 "${LIBFUZZER_OPTS[@]}" "$work/$target/merged" \
        "fuzz/corpus/$target" "$work/$target/new" "$work/seeds" \
        >"$work/$target/merge.log" 2>&1
    rm -rf "fuzz/corpus/$target"
    mv "$work/$target/merged" "fuzz/corpus/$target"
    local artifacts
    artifacts=$(find "fuzz/artifacts/$target" -type f \( -name 'crash-*' -o -name 'timeout-*' \
        -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
    echo "$target: corpus $(find "fuzz/corpus/$target" -type f | wc -l) inputs," \
        "$(cat "fuzz/corpus/$target"/* | wc -c) bytes; crash, hang and oom artifacts: $artifacts"
    return $status
}

failed=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
    pids=()
    for target in "${TARGETS[@]}"; do
        run_target "$target" >"$work/$target.out" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || failed=1
        cat "$work/${TARGETS[$i]}.out"
    done
else
    for target in "${TARGETS[@]}"; do
        run_target "$target" || failed=1
    done
fi
exit $failed

# What the benchmarks share; each sources this after changing to the repository root.

# require SCRIPT COMMAND:PACKAGE...: installs, as root from Debian's packages, the package
# of each command that is missing (a COMMAND starting with / must be an executable file).
require() {
    local script=$1 pair command missing=()
    shift
    for pair in "$@"; do
        command=${pair%%:*}
        if [[ $command == /* ]]; then
            [ -x "$command" ] || missing+=("${pair#*:}")
        else
            command -v "$command" >/dev/null || missing+=("${pair#*:}")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || { echo "$script: needs ${missing[*]}; run as root to install them" >&2; exit 2; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# release_dir: where cargo puts release binaries.
release_dir() {
    echo "$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release"
}

# generate FILE SIZE: the synthetic benchmark capture, written unless FILE exists (the
# synth_capture example must be built).
generate() {
    if [ ! -s "$1" ]; then
        echo "generating $1 ..."
        "$(release_dir)/examples/synth_capture" "$1.part" "$2"
        mv "$1.part" "$1"
    fi
}

#!/usr/bin/env bash
# What fleet profiling costs one machine: `bprof -a -F 49 --every 10 --otlp URL`
# (the systemd unit's command) for SECONDS (default 120) against the test
# receiver (tests/suite/otlp_receiver.py, the official classes) on
# 127.0.0.1, then the same run writing pprof files instead, for comparison.
# Prints each run's CPU time (user + system, as % of one CPU), peak RSS,
# requests and their bytes. As root, after scripts/install-deps.sh and
# `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
bprof=target/release/bprof
py=${BPROF_TEST_PYTHON:-/opt/bprof-test-venv/bin/python3}
work=$(mktemp -d)
trap 'kill "${rx:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

"$py" tests/suite/otlp_receiver.py grpc > "$work/requests" &
rx=$!
for _ in $(seq 100); do
    [ -s "$work/requests" ] && break
    sleep 0.1
done
port=$(head -1 "$work/requests" | cut -d' ' -f2)

measure() { # name, bprof arguments...
    local name=$1
    shift
    /usr/bin/time -f '%U %S %M' -o "$work/time" \
        "$bprof" -a -F 49 --every 10 --no-counts --stats-json "$work/stats.json" "$@" "$secs" \
        2> "$work/stderr" || { cat "$work/stderr" >&2; exit 1; }
    read -r user sys rss < "$work/time"
    local cpu
    cpu=$(awk -v u="$user" -v s="$sys" -v t="$secs" 'BEGIN { print (u + s) * 100 / t }')
    printf '%-6s %5.2f%% of a CPU  peak RSS %6d KiB  %s samples' \
        "$name" "$cpu" "$rss" "$(jq .samples.counted "$work/stats.json")"
    if [ "$name" = otlp ]; then
        jq -r '.otlp | "  \(.sent)/\(.profiles) requests, \(.sent_bytes / (if .sent > 0 then .sent else 1 end) / 1024 | floor) KiB each (gzipped; the largest \(.largest_bytes / 1024 | floor) KiB), retried \(.retried), dropped \(.dropped)"' \
            "$work/stats.json"
    else
        echo
    fi
}

measure otlp --otlp "http://127.0.0.1:$port"
mkdir -p "$work/out"
measure pprof --pprof "$work/out/%n.pb.gz"

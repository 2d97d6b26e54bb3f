#!/usr/bin/env bash
# The BPF cost per sample of two bprof builds, A and B, measured at once on
# the same work: both profile one xz -6 pinned to CPU 1 (-p, -C 1, 999 Hz),
# so every sample runs both programs under the same cache pressure, and the
# kernel times each (bpf_stats: run_time_ns / run_cnt of each do_sample).
# Alternating runs of one build at a time differ by +-15% here with the
# host's load; two programs in one run share it. The program that runs
# second in a sample finds the common lines (the task, the perf event)
# warm, so each pair runs in both orders and the orders are averaged.
#
# Usage: scripts/bench-ab.sh A B [PAIRS] [SECONDS]   (default 4 pairs, 5 s)
#   Extra bprof arguments: BENCH_A_ARGS, BENCH_B_ARGS (e.g. BENCH_B_ARGS=-K);
#   extra environment: BENCH_A_ENV, BENCH_B_ENV (e.g. one build as both A
#   and B, BENCH_B_ENV=BPROF_FALLBACK=all: what the fallbacks cost).
# Prints each run's ns per sample and the mean of B - A over both orders.
# On a machine shared with others, wrap it in their lock (here:
# flock /tmp/bprof-tests.lock scripts/bench-ab.sh ...).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 A B [PAIRS] [SECONDS]" >&2; exit 2; }
A=$(realpath "$1")
B=$(realpath "$2")
PAIRS=${3:-4}
SECS=${4:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; sysctl -q kernel.bpf_stats_enabled=0' EXIT
# Incompressible-ish input: xz -6 works through it for ~12 s.
head -c 15M /dev/urandom | base64 -w 76 >"$tmp/data"

# The sampling programs, either build (do_sample, or do_sample_open where
# bpf_loop is missing or BPROF_FALLBACK=bpf-loop): their bpftool lines.
samplers() {
    bpftool prog show name do_sample || true
    bpftool prog show name do_sample_open || true
}

# One run: $1 starts first (its program is the older, so it runs first in
# a sample), $2 second. Prints "ns_first ns_second".
run() {
    local first=$1 second=$2 fargs=$3 sargs=$4 fenv=$5 senv=$6 w p1 p2 ids
    sysctl -q kernel.bpf_stats_enabled=1
    taskset -c 1 xz -6 -c "$tmp/data" >/dev/null &
    w=$!
    sleep 0.2
    # shellcheck disable=SC2086 # word splitting of the extra arguments is wanted
    env $fenv "$first" $fargs -C 1 -F 999 -p "$w" -o "$tmp/first.folded" "$SECS" 2>/dev/null &
    p1=$!
    sleep 0.5
    ids=" $(samplers | awk -F: '/^[0-9]+:/ { print $1 }' | tr '\n' ' ')"
    # shellcheck disable=SC2086
    env $senv "$second" $sargs -C 1 -F 999 -p "$w" -o "$tmp/second.folded" "$SECS" 2>/dev/null &
    p2=$!
    sleep $((SECS - 1))
    samplers >"$tmp/progs"
    wait "$p1" "$p2" || true
    kill "$w" 2>/dev/null || true
    wait "$w" 2>/dev/null || true
    sysctl -q kernel.bpf_stats_enabled=0
    awk -v ids="$ids" '/^[0-9]+:/ {
        id = $1; sub(":", "", id); t = 0; c = 0
        for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t = $(i + 1); if ($i == "run_cnt") c = $(i + 1) }
        v = c ? t / c : 0
        if (index(ids, " " id " ")) a = v; else b = v
    } END { printf "%.0f %.0f\n", a, b }' "$tmp/progs"
}

diffs=()
for i in $(seq "$PAIRS"); do
    read -r a1 b1 < <(run "$A" "$B" "${BENCH_A_ARGS:-}" "${BENCH_B_ARGS:-}" "${BENCH_A_ENV:-}" "${BENCH_B_ENV:-}")
    read -r b2 a2 < <(run "$B" "$A" "${BENCH_B_ARGS:-}" "${BENCH_A_ARGS:-}" "${BENCH_B_ENV:-}" "${BENCH_A_ENV:-}")
    echo "pair $i: A first: A $a1 B $b1 | B first: B $b2 A $a2 (ns per sample)"
    diffs+=("$((b1 - a1)) $((b2 - a2))")
done
printf '%s\n' "${diffs[@]}" | awk '{ s1 += $1; s2 += $2; n++ }
    END { printf "B - A: %.0f ns per sample (B second: %.0f, B first: %.0f; their half-difference, %.0f, is the order'"'"'s own effect)\n", (s1 + s2) / (2 * n), s1 / n, s2 / n, (s1 - s2) / (2 * n) }'

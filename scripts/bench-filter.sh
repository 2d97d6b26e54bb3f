#!/usr/bin/env bash
# Per-sample cost of the sampling program with a kept sample (no filter:
# stacks are walked and counted) versus a sample dropped by --filter (checked
# before any stack is taken). Uses the kernel's BPF run-time statistics
# (kernel.bpf_stats_enabled), read with bpftool while bprof runs.
# Usage: scripts/bench-filter.sh [SECONDS]   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-4}
cargo build --release --quiet
mkdir -p target/fixtures
gcc -O1 -g -fno-omit-frame-pointer -o target/fixtures/fx_work631 fixtures/work631.c
old=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled=$old' EXIT

measure() { # label, bprof args...
    local label=$1; shift
    target/fixtures/fx_work631 $((secs + 2)) & local w=$!
    ./target/release/bprof -F 4999 -f "$@" "$secs" >/dev/null 2>&1 & local b=$!
    sleep $((secs - 1))
    local json
    json=$(bpftool prog show name do_sample --json)
    wait $b; wait $w || true
    python3 - "$label" "$json" <<'PY'
import json, sys
label, progs = sys.argv[1], json.loads(sys.argv[2])
p = progs[0] if isinstance(progs, list) else progs
ns, n = p.get("run_time_ns", 0), p.get("run_cnt", 0)
print(f"{label:<32} {n:>9} runs {ns / max(n, 1):>9.0f} ns/sample")
PY
}

echo "bprof sampling program, -F 4999, $secs s, median-free single runs:"
measure "kept (no filter)"
measure "kept (filter 'pid > 0')" --filter 'pid > 0'
measure "dropped (filter 'tid == 1')" --filter 'tid == 1'
measure "dropped (filter 'comm == none')" --filter 'comm == none'

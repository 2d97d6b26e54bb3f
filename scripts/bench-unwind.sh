#!/usr/bin/env bash
# --call-graph dwarf vs fp: BPF cost per sample (kernel bpf_stats: run_time_ns
# / run_cnt of do_sample) on fixtures/recurse.c built -O2 without frame
# pointers at 10, 30 and 100 frames, and bprof's CPU time and peak RSS
# against perf record --call-graph dwarf + perf script on the same work.
# As root. Usage: scripts/bench-unwind.sh [BPROF]
set -euo pipefail
cd "$(dirname "$0")/.."
BPROF=${1:-target/release/bprof}
[ -x "$BPROF" ] || cargo build --release --quiet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; sysctl -q kernel.bpf_stats_enabled=0' EXIT
gcc -O2 -fomit-frame-pointer -o "$tmp/fx_recurse" fixtures/recurse.c

prog_cost() { # prints ns/sample of the running do_sample program
    bpftool prog show name do_sample 2>/dev/null |
        awk '/run_time_ns/ { for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t = $(i+1); if ($i == "run_cnt") c = $(i+1) } }
             END { if (c > 0) printf "%.0f", t / c; else printf "-" }'
}

echo "| frames | call graph | ns per sample (BPF) |"
echo "|---|---|---|"
sysctl -q kernel.bpf_stats_enabled=1
for depth in 8 28 98; do
    for cg in fp dwarf; do
        "$BPROF" --call-graph "$cg" -F 999 -o "$tmp/out.folded" -- "$tmp/fx_recurse" 4 "$depth" 2>/dev/null &
        pid=$!
        sleep 3
        cost=$(prog_cost)
        wait "$pid" || true
        echo "| $((depth + 2)) | $cg | $cost |"
    done
done
sysctl -q kernel.bpf_stats_enabled=0

echo
echo "| pipeline (30-frame stack, 5 s at 999 Hz) | CPU s | peak RSS MiB |"
echo "|---|---|---|"
/usr/bin/time -f "%U %S %M" -o "$tmp/t1" "$BPROF" -F 999 -o "$tmp/b.folded" -- "$tmp/fx_recurse" 5 28 2>/dev/null
awk '{ printf "| bprof --call-graph dwarf | %.2f | %.0f |\n", $1 + $2, $3 / 1024 }' "$tmp/t1"
/usr/bin/time -f "%U %S %M" -o "$tmp/t2" perf record -q --no-bpf-event --call-graph dwarf -F 999 -o "$tmp/p.data" -- "$tmp/fx_recurse" 5 28 2>/dev/null
/usr/bin/time -f "%U %S %M" -o "$tmp/t3" perf script -i "$tmp/p.data" >/dev/null 2>&1
paste "$tmp/t2" "$tmp/t3" | awk '{ m = $3 > $6 ? $3 : $6; printf "| perf record --call-graph dwarf + perf script | %.2f | %.0f |\n", $1 + $2 + $4 + $5, m / 1024 }'
echo "perf.data: $(du -h "$tmp/p.data" | cut -f1)"

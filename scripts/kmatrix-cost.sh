#!/bin/sh
# Per-sample cost of the profile program in a kernel-matrix guest:
#   BPROF_KMATRIX_EXTRA=scripts/kmatrix-cost.sh scripts/kernel-matrix.sh 6.1 6.12
# Turns on the kernel's BPF run-time statistics, profiles work631 at 999 Hz,
# and prints each loaded program's run count and total run time from bprof's
# fdinfo while it records (prog_type 7 is the perf_event program).
echo "=== cost"
echo 1 >/proc/sys/kernel/bpf_stats_enabled
/bprof/bprof -F 999 -f -v -- /bprof/fx/fx_work631 4 >/tmp/cost.f 2>/tmp/cost.e &
bp=$!
sleep 4
for fd in /proc/$bp/fdinfo/*; do
    grep -q '^prog_type:' "$fd" 2>/dev/null || continue
    awk '/^prog_type:/ { t = $2 } /^run_time_ns:/ { ns = $2 } /^run_cnt:/ { n = $2 }
        END { if (n) printf "COST|prog_type %d|%d runs|%.1f us per run\n", t, n, ns / n / 1000 }' "$fd"
done
wait $bp
grep -E 'unique stacks|from the cache' /tmp/cost.e
echo 0 >/proc/sys/kernel/bpf_stats_enabled

#!/bin/sh
# Per-run cost of the profile program in a kernel-matrix guest:
#   BPROF_KMATRIX_EXTRA=scripts/kmatrix-cost.sh scripts/kernel-matrix.sh 6.1 6.12
# Turns on the kernel's BPF run-time statistics and, while bprof records,
# prints each loaded program's run count and mean run time from bprof's
# fdinfo (prog_type 7: the perf_event program; 5: tracepoint programs, the
# layout generation's on 6.1 to 6.3). --call-graph fp: the raw-stack cache
# serves frame-pointer walks only (dwarf stacks are hashed as unwound).
#   work631: steady stacks, the cache's best case (hits vs build-ID walks);
#   dlswap: a library mapped and unmapped 10 times a second, what the
#   layout generation's tracepoints cost per mmap/munmap.
cost() { # name command...
    name=$1
    shift
    echo 1 >/proc/sys/kernel/bpf_stats_enabled
    /bprof/bprof -F 999 -f -v --call-graph fp -- "$@" >/tmp/cost.f 2>/tmp/cost.e &
    bp=$!
    sleep 6 # start-up takes ~3 s under TCG; the workloads run 8 s
    for fd in /proc/$bp/fdinfo/*; do
        grep -q '^prog_type:' "$fd" 2>/dev/null || continue
        awk -v w="$name" '/^prog_type:/ { t = $2 } /^run_time_ns:/ { ns = $2 } /^run_cnt:/ { n = $2 }
            END { if (n) printf "COST|%s|prog_type %d|%d runs|%.1f us per run\n", w, t, n, ns / n / 1000 }' "$fd"
    done
    wait $bp
    grep -E 'unique stacks|from the cache' /tmp/cost.e
    echo 0 >/proc/sys/kernel/bpf_stats_enabled
}
echo "=== cost"
cost work631 /bprof/fx/fx_work631 8
cost dlswap /bprof/fx/fx_dlswap 0.1 40 /bprof/fx/libdl_alpha.so /bprof/fx/libdl_beta.so

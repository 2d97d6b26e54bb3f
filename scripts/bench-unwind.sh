#!/usr/bin/env bash
# --call-graph dwarf benchmarks, as root, release build:
#  1. BPF cost per sample of the target (kernel bpf_stats: run_time_ns /
#     run_cnt of do_sample, over the target's share of the runs) on
#     fixtures/recurse.c built -O2 without frame pointers at 10, 30 and 100
#     user frames, fp against dwarf, medians of 5 alternating runs.
#  2. Completeness on Debian's xz -6 (20 MB), gzip -6 (100 MB) and python3
#     (a pure-Python loop, 5 s) at 999 Hz: how bprof's walks ended (-v), the
#     share of samples whose stack reaches __libc_start_call_main (or a
#     thread root) and the mean user depth, against perf record
#     --call-graph dwarf + perf script on the same work.
#  3. Table build per file (libc, python3, a ~20 MB Rust binary) and for
#     the whole running system (bprof system-wide while python3, perl, bash
#     and rustc run, with a 16 MiB table map and the default, none of the
#     tables kept from an earlier profile; then the default again, warm).
#  4. End-to-end CPU beyond the workload's own, and peak RSS: bprof against
#     perf record --call-graph dwarf + perf script, each attached (-p) to a
#     separately started xz -6, then to the Rust fixture built -O -g: ~12 s
#     each, then ~60 s each (BENCH_E2E_LONG=0 skips the long ones).
#  5. The kernel's work per sample on both sides: time inside the sampling
#     timer's callback (perf_swevent_hrtimer, timed by bpftrace at the
#     hrtimer_expire_entry/exit tracepoints) on the CPU a pinned xz -6 runs
#     on: bprof's BPF program there, perf's sample with its 8 KiB stack
#     copy, each beside the same profiler taking bare samples. Section 4's
#     own CPU leaves perf's out (it is charged to the workload).
#  6. Short processes (150 x gzip -1 of 1.5 MB and ls, under -- sh -c):
#     completeness against perf, and the cost of the syscall hook that
#     learns their mappings at mmap, on a one-byte dd (4 M syscalls).
# Usage: scripts/bench-unwind.sh [BPROF]   (sections: BENCH_UNWIND=1,...,6)
# On a machine shared with others, wrap it in their lock (here:
# flock /tmp/bprof-tests.lock scripts/bench-unwind.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BPROF=${1:-target/release/bprof}
SECTIONS=${BENCH_UNWIND:-1,2,3,4,5,6}
[ -x "$BPROF" ] || cargo build --release --quiet
BPROF=$(realpath "$BPROF")
PY=/usr/bin/python3
tmp=$(mktemp -d)
bg=()
cleanup() {
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
    sysctl -q kernel.bpf_stats_enabled=0
}
trap cleanup EXIT
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }

prog_cost() { # prints ns/sample of the running do_sample program
    bpftool prog show name do_sample 2>/dev/null |
        awk '/run_time_ns/ { for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t = $(i+1); if ($i == "run_cnt") c = $(i+1) } }
             END { if (c > 0) printf "%.0f", t / c; else printf "-" }'
}

if want 1; then
    # Per sample OF THE TARGET: the workload is pinned to CPU 1 and only
    # CPU 1 is sampled (-C 1), and the run's -v counts say how many program
    # runs were the target's (the rest, another task's or idle, return
    # early and would dilute the mean). fp and dwarf alternate, 5 runs
    # each: this VM's timings move by +-30% with the other vCPU's load, so
    # medians are compared.
    gcc -O2 -fomit-frame-pointer -Ifixtures -o "$tmp/fx_recurse" fixtures/recurse.c
    sysctl -q kernel.bpf_stats_enabled=1
    one_cost() { # CALL_GRAPH DEPTH -> ns per target sample
        "$BPROF" -v -C 1 --call-graph "$1" -F 999 -o "$tmp/out.folded" -- \
            taskset -c 1 "$tmp/fx_recurse" 4 "$2" 2>"$tmp/cost.err" &
        local pid=$! st
        sleep 3.5
        st=$(bpftool prog show name do_sample 2>/dev/null |
            awk '/run_time_ns/ { for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t = $(i+1); if ($i == "run_cnt") c = $(i+1) } } END { print t, c }')
        wait "$pid" || true
        grep -o "program runs [0-9]*, idle skipped [0-9]*, other processes [0-9]*" "$tmp/cost.err" |
            tr -d , | awk -v st="$st" '{ split(st, a, " "); f = ($3 - $6 - $9) / $3; printf "%.0f\n", a[1] / a[2] / f }'
    }
    median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    echo "| user frames | fp (ns per target sample) | dwarf | dwarf - fp |"
    echo "|---|---:|---:|---:|"
    for depth in 4 24 94; do
        : >"$tmp/fp"
        : >"$tmp/dwarf"
        for _ in 1 2 3 4 5; do
            one_cost fp "$depth" >>"$tmp/fp"
            one_cost dwarf "$depth" >>"$tmp/dwarf"
        done
        f=$(median <"$tmp/fp")
        d=$(median <"$tmp/dwarf")
        echo "| $((depth + 6)) | $f | $d | $((d - f)) |"
    done
    sysctl -q kernel.bpf_stats_enabled=0
    echo
fi

# Incompressible-ish input (base64 of random bytes: xz -6 takes ~12 s on 20 MB).
head -c 15M /dev/urandom | base64 -w 76 >"$tmp/data20"
for _ in 1 2 3 4 5; do cat "$tmp/data20"; done >"$tmp/data100"
cat >"$tmp/loop.py" <<'EOF'
import time
t = time.time()
def f(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
while time.time() - t < 5:
    f(10000)
EOF

# Folded stacks (-d: "-" between user and kernel frames) → samples, share
# reaching the root, mean user frames.
# ROOTS: the frames a complete stack reaches (section 6 adds ld.so's
# _start, the root of a process's first ms).
ROOTS='__libc_start_call_main|start_thread|clone3'
fold_stats() {
    awk -v roots="^($ROOTS)\$" '{
        c = $NF; n += c; sub(/ [0-9]+$/, ""); nf = split($0, f, ";"); d = 0; root = 0; cut = 0
        for (i = 2; i <= nf && f[i] != "-"; i++) {
            if (f[i] ~ roots) root = 1
            if (f[i] == "[truncated]") cut = 1; else d++
        }
        if (cut) root = 0
        R += root * c; D += d * c
    } END { if (n) printf "%d | %.1f%% | %.1f", n, 100 * R / n, D / n }' "$1"
}
# perf script's output → the same (inlined frames not counted: bprof's
# folded output does not expand them either).
perf_stats() {
    awk -v roots=" ($ROOTS)[+]" '/^[^ \t]/ { if (inS) fin(); inS = 1; d = 0; root = 0; next }
        /^[ \t]*$/ { if (inS) fin(); inS = 0; next }
        {
            if ($0 !~ /kernel\.kallsyms/ && $0 !~ /\(inlined\)$/) d++
            if ($0 ~ roots) root = 1
        }
        function fin() { n++; D += d; R += root }
        END { if (inS) fin(); if (n) printf "%d | %.1f%% | %.1f", n, 100 * R / n, D / n }' "$1"
}

if want 2; then
    echo "| work (999 Hz) | profiler | samples | reach libc start / thread root | user frames (mean) | how bprof's walks ended |"
    echo "|---|---|---:|---:|---:|---|"
    for w in xz gzip python3; do
        case $w in
        xz) cmd=(xz -6 -c "$tmp/data20") ;;
        gzip) cmd=(gzip -6 -c "$tmp/data100") ;;
        python3) cmd=("$PY" "$tmp/loop.py") ;;
        esac
        "$BPROF" -v -d -F 999 -o "$tmp/b.folded" -- "${cmd[@]}" >/dev/null 2>"$tmp/b.err"
        ends=$(sed -n 's/.*dwarf unwinding: \([0-9]*\) walks.*ended: \(.*\)/\1 walks: \2/p' "$tmp/b.err")
        echo "| $w | bprof | $(fold_stats "$tmp/b.folded") | $ends |"
        perf record -q --no-bpf-event --call-graph dwarf -F 999 -o "$tmp/p.data" -- "${cmd[@]}" >/dev/null 2>&1
        perf script -i "$tmp/p.data" >"$tmp/p.txt" 2>/dev/null
        echo "| $w | perf --call-graph dwarf | $(perf_stats "$tmp/p.txt") | |"
    done
    echo
fi

if want 3; then
    # A ~20 MB Rust release binary: rustup where installed, else bprof.
    rust=$(readlink -f "$(command -v rustup || echo "$BPROF")")
    cargo bench --quiet --bench unwind_tables -- /usr/lib/x86_64-linux-gnu/libc.so.6 \
        "$(readlink -f $PY)" "$rust" 2>/dev/null
    echo
    # The whole system: bprof profiles every process, so it builds the
    # tables of every running process's files before sampling starts.
    "$PY" -c 'import time; time.sleep(600)' &
    bg+=($!)
    perl -e 'sleep 600' &
    bg+=($!)
    bash -c 'sleep 600' &
    bg+=($!)
    if command -v rustc >/dev/null; then
        # rustc reads the program from stdin: alive, with libLLVM and
        # librustc_driver mapped, until the sleep ends.
        (sleep 600 | rustc - -o "$tmp/none" 2>/dev/null) &
        bg+=($!)
    fi
    sleep 2
    echo "| system-wide, $(ls -d /proc/[0-9]* | wc -l) processes | start to recording | tables (bprof -v) | unwind maps, kernel memlock |"
    echo "|---|---:|---|---:|"
    # Cold: no table kept from an earlier profile this boot (see
    # src/unwind/cache.rs); then the default map again, warm.
    for rows in 2097152 4194304 warm; do
        label="--unwind-rows $rows"
        if [ "$rows" = warm ]; then
            rows=4194304
            label="--unwind-rows $rows, tables kept from the run above"
        else
            rm -rf /run/bprof/unwind-*
        fi
        rm -f "$tmp/ready"
        t0=$(date +%s%N)
        "$BPROF" -v -F 99 --unwind-rows "$rows" --ready-file "$tmp/ready" 3 >/dev/null 2>"$tmp/s.err" &
        pid=$!
        while [ ! -e "$tmp/ready" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
        t1=$(date +%s%N)
        mem=$(bpftool map show | awk '/name unwind_/ { u = 1; next } u && /memlock/ { sub(/B$/, "", $NF); m += $NF } { u = 0 } END { printf "%.1f MiB", m / 1048576 }')
        wait "$pid" || true
        tables=$(sed -n 's/^bprof: unwind tables: \(.*\); [0-9]* address chunks.*/\1/p' "$tmp/s.err")
        ends=$(sed -n 's/.*dwarf unwinding: \([0-9]*\) walks.*ended: \(.*\)/\1 walks: \2/p' "$tmp/s.err")
        echo "| $label | $(((t1 - t0) / 1000000)) ms | $tables; $ends | $mem |"
    done
    for p in "${bg[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    bg=()
    echo
fi

if want 4; then
    # The profilers attach (-p) to a separately started workload, so
    # the profiler's rusage counts the profiler's own CPU only. The
    # sampling itself (timer interrupt, bprof's BPF program, perf's 8 KiB
    # stack copy) is charged to the workload: that is its CPU time beyond
    # its time alone. bprof's BPF time is read from bpf_stats.
    # Two works: Debian's stripped xz (perf script's cheapest case: no
    # DWARF to read) and the Rust fixture built -O -g without frame pointers
    # (perf script resolves inlined frames from its DWARF).
    rustc -O -g -o "$tmp/fx_rust" fixtures/rust_work.rs
    # rusage OUT CMD...: runs CMD; OUT gets its "user sys peak-RSS-KiB", to
    # the microsecond (GNU time prints hundredths: bprof's own CPU on a 12 s
    # profile is a few of them).
    # Not a function: run in the background, CMD is then a child of the
    # process $! names.
    rusage=("$PY" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.4f %.4f %d\n" % (r.ru_utime, r.ru_stime, r.ru_maxrss))')
    e2e() { # NAME CMD...: one table for CMD alone, under bprof and under perf
        local name=$1
        shift
        work_start() { # OUT CMD...: OUT gets the work's "user sys"; sets wpid, tpid
            local out=$1
            shift
            "${rusage[@]}" "$out" "$@" >/dev/null &
            tpid=$!
            wpid=
            while [ -z "$wpid" ] && kill -0 "$tpid" 2>/dev/null; do
                sleep 0.01
                wpid=$(pgrep -P "$tpid" || true)
            done
            [ -n "$wpid" ] || { echo "the work did not start: $*" >&2; exit 1; }
        }
        "${rusage[@]}" "$tmp/alone" "$@" >/dev/null
        alone=$(awk '{ printf "%.2f", $1 + $2 }' "$tmp/alone")

        # bprof reads its programs' run time itself after detaching them
        # (--stats-json): polling bpftool meanwhile cost bprof ~1.7 ms of
        # CPU a second (bpftool walks every process's files).
        sysctl -q kernel.bpf_stats_enabled=1
        work_start "$tmp/w_b" "$@"
        rm -f "$tmp/b.json"
        "${rusage[@]}" "$tmp/tb" "$BPROF" -F 999 -p "$wpid" -o "$tmp/b.folded" --stats-json "$tmp/b.json" 2>/dev/null || true
        wait "$tpid" || true
        sysctl -q kernel.bpf_stats_enabled=0
        # bpf is null unless every run was timed: then the row says nan.
        bpf_total=$("$PY" -c 'import json, sys
try:
    print(json.load(open(sys.argv[1]))["bpf"]["run_time_ns"])
except Exception:
    print("nan")' "$tmp/b.json")

        work_start "$tmp/w_p" "$@"
        "${rusage[@]}" "$tmp/tr" perf record -q --no-bpf-event --call-graph dwarf -F 999 -p "$wpid" -o "$tmp/p.data" 2>/dev/null
        wait "$tpid" || true
        "${rusage[@]}" "$tmp/ts" perf script -i "$tmp/p.data" >/dev/null 2>&1

        echo "$name alone: $alone CPU s"
        echo
        echo "| profiler (999 Hz, attached to $name) | own CPU s | BPF (bpf_stats) s | counted: own + BPF | work's CPU beyond alone (noisy) | peak RSS MiB |"
        echo "|---|---:|---:|---:|---:|---:|"
        # Each file holds one line: "user sys peak-RSS-KiB".
        read -r xu xs _ <"$tmp/w_b"
        read -r bu bs brss <"$tmp/tb"
        awk -v a="$alone" -v bpf="$bpf_total" -v x="$xu $xs" -v own="$bu $bs" -v r="$brss" 'BEGIN {
            split(x, xv, " "); split(own, ov, " "); x = xv[1] + xv[2] - a; own = ov[1] + ov[2]; bpf /= 1e9
            printf "| bprof --call-graph dwarf | %.3f | %.3f | %.3f | %.2f | %.0f |\n", own, bpf, own + bpf, x, r / 1024 }' | tee "$tmp/bline"
        read -r xu xs _ <"$tmp/w_p"
        read -r ru rs r1 <"$tmp/tr"
        read -r su ss r2 <"$tmp/ts"
        awk -v a="$alone" -v x="$xu $xs" -v rec="$ru $rs" -v scr="$su $ss" -v r1="$r1" -v r2="$r2" 'BEGIN {
            split(x, xv, " "); split(rec, rv, " "); split(scr, sv, " ")
            x = xv[1] + xv[2] - a; rec = rv[1] + rv[2]; scr = sv[1] + sv[2]
            printf "| perf record (%.3f) + perf script (%.3f) --call-graph dwarf | %.3f | - | %.3f | %.2f | %.0f |\n", rec, scr, rec + scr, rec + scr, x, (r1 > r2 ? r1 : r2) / 1024 }' | tee "$tmp/pline"
        b=$(awk -F'|' '{ print $5 }' "$tmp/bline")
        p=$(awk -F'|' '{ print $5 }' "$tmp/pline")
        echo
        echo "bprof / perf, counted CPU ($name): $(awk -v b="$b" -v p="$p" 'BEGIN { printf "%.2fx", b / p }')"
        echo "perf.data: $(du -h "$tmp/p.data" | cut -f1)"
        echo
    }
    e2e "xz -6 on 20 MB" xz -6 -c "$tmp/data20"
    e2e "the Rust fixture (-O -g), 12 s" "$tmp/fx_rust" 12
    # Longer profiles, where bprof's fixed start-up and symbolization weigh
    # less and the per-sample costs decide (BENCH_E2E_LONG=0 skips them).
    if [ "${BENCH_E2E_LONG:-1}" != 0 ]; then
        e2e "xz -6 on 100 MB" xz -6 -c "$tmp/data100"
        e2e "the Rust fixture (-O -g), 60 s" "$tmp/fx_rust" 60
    fi
fi

if want 5; then
    command -v bpftrace >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q bpftrace >/dev/null
    [ -e "$tmp/data4" ] || head -c 4000000 /dev/urandom | base64 >"$tmp/data4"
    cat >"$tmp/hrt.bt" <<'BT'
tracepoint:timer:hrtimer_expire_entry /cpu == 1 && args->function == kaddr("perf_swevent_hrtimer")/ { @s[cpu] = nsecs; }
tracepoint:timer:hrtimer_expire_exit /cpu == 1 && @s[cpu]/ { @ns = sum(nsecs - @s[cpu]); @n = count(); delete(@s[cpu]); }
BT
    callback_ns() { # NAME PROFILER...: ns per sampling callback on CPU 1
        local name=$1 bt
        shift
        bpftrace "$tmp/hrt.bt" >"$tmp/hrt.$name" 2>&1 &
        bt=$!
        sleep 2.5 # bpftrace attaches
        "$@" taskset -c 1 xz -6 -c "$tmp/data4" >/dev/null 2>"$tmp/hrt.err" || true
        kill -INT "$bt"
        wait "$bt" || true
        awk '/^@ns/ { s = $2 } /^@n:/ { c = $2 } END { if (c) printf "%.0f", s / c; else printf "-" }' "$tmp/hrt.$name"
    }
    echo "| run | perf, bare samples | perf --call-graph dwarf | bprof, every sample dropped (--filter 'tid == 1') | bprof -K | bprof --call-graph dwarf |"
    echo "|---|---:|---:|---:|---:|---:|"
    for i in 1 2 3; do
        a=$(callback_ns pn perf record -q -F 999 -e cpu-clock -o "$tmp/h1.data" --)
        b=$(callback_ns pd perf record -q -F 999 -e cpu-clock --call-graph dwarf -o "$tmp/h2.data" --)
        c=$(callback_ns bf "$BPROF" -F 999 --filter 'tid == 1' -o "$tmp/h1.folded" --)
        d=$(callback_ns bk "$BPROF" -F 999 -K -o "$tmp/h2.folded" --)
        e=$(callback_ns bd "$BPROF" -F 999 -o "$tmp/h3.folded" --)
        echo "| $i | $a | $b | $c | $d | $e |"
    done
    echo
fi

if want 6; then
    # Short processes (150 gzip -1 of 1.5 MB, ~60 ms each, and 150 ls)
    # under -- sh -c: what the mappings learned at exec and mmap give, and
    # what the syscall hook that learns them costs a syscall-bound command
    # (one-byte dd: 4 M syscalls).
    head -c 1500000 "$tmp/data20" >"$tmp/d1m"
    ROOTS="$ROOTS|_start"
    loop="for i in \$(seq 150); do gzip -1 -c $tmp/d1m >/dev/null; ls / >/dev/null; done"
    echo "| 150 x (gzip -1 1.5 MB; ls) | samples | reach libc start / thread root | user frames (mean) | how bprof's walks ended |"
    echo "|---|---:|---:|---:|---|"
    "$BPROF" -v -d -F 999 -o "$tmp/b.folded" -- sh -c "$loop" 2>"$tmp/b.err"
    ends=$(sed -n 's/.*dwarf unwinding: \([0-9]*\) walks.*ended: \(.*\)/\1 walks: \2/p' "$tmp/b.err")
    grep '^gzip;' "$tmp/b.folded" >"$tmp/bg.folded" || true
    echo "| bprof (gzip's samples) | $(fold_stats "$tmp/bg.folded") | $ends |"
    perf record -q --no-bpf-event --call-graph dwarf -F 999 -o "$tmp/p.data" -- sh -c "$loop" 2>/dev/null
    perf script -i "$tmp/p.data" --comms gzip >"$tmp/p.txt" 2>/dev/null
    echo "| perf --call-graph dwarf (gzip's samples) | $(perf_stats "$tmp/p.txt") | |"
    echo
    dd_s() { /usr/bin/time -f "%e" "$@" dd if=/dev/zero of=/dev/null bs=1 count=2M 2>&1 | tail -1; }
    echo "| run | dd alone, s | bprof -p of a sleeper (no syscall hook) | bprof -- dd (hook) | perf record --call-graph dwarf -- dd |"
    echo "|---|---:|---:|---:|---:|"
    sleep 600 &
    bg+=($!)
    for i in 1 2 3; do
        a=$(dd_s)
        "$BPROF" -F 99 -p "${bg[-1]}" -o "$tmp/s.folded" 30 2>/dev/null &
        pid=$!
        sleep 1.5
        b=$(dd_s)
        kill -INT "$pid"
        wait "$pid" || true
        c=$(dd_s "$BPROF" -F 999 -o "$tmp/d.folded" --)
        d=$(dd_s perf record -q --no-bpf-event --call-graph dwarf -F 999 -o "$tmp/d.data" --)
        echo "| $i | $a | $b | $c | $d |"
    done
    echo
fi

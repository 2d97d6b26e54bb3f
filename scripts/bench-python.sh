#!/usr/bin/env bash
# Python frame benchmarks, as root, release build, on every interpreter the
# machine has (Debian's python3.11 and each pyenv CPython 3.10-3.13), with
# fixtures/py631.py:
#  1. BPF cost per sample of the target (kernel bpf_stats, as bpftool prog
#     show gives them: run_time_ns / run_cnt of do_sample, over the target's
#     share of the runs) of a 33-deep Python stack (30 distinct functions:
#     `deep`) and a 5-deep one (`631`), with and without the Python walk
#     (--no-python), the workload pinned to CPU 1 and only CPU 1 sampled;
#     and the walk's own time (-v: the walker times itself). Medians of 3
#     alternating runs. BENCH_PY_PAIR=OTHER_BPROF adds the walk's time of
#     this build and OTHER's profiling one process at once (3 runs).
#  2. Shares of heavy / medium / light against the design (60/30/10) and
#     against py-spy 0.4 on the same process over the same seconds (py-spy
#     at 199 Hz, bprof at 499, 10 s; BENCH_PY_SPY_RATE, BENCH_PY_SPY_SECS).
#  3. The target's slowdown at 999 Hz: fixed work (py631.py rounds N) alone,
#     under bprof -F 999 and under py-spy record -r 999 (which pauses the
#     process for each sample), in rounds of alone, bprof, py-spy, alone:
#     the median over the rounds of each one's slowdown against its
#     round's lone runs (BENCH_PY_ROUNDS, default 10); the workload on
#     CPU 1, the profilers on CPU 0.
#  4. Peak RSS of bprof and samples lost over a 60 s profile (-F 999 -p) of
#     a Python process, with and without the Python walk (--no-python) and
#     without DWARF's inlined frames (--no-inline), and
#     of the native fixtures/work631.c (BENCH_PY_LONG=0 skips it).
# Usage: scripts/bench-python.sh [BPROF]   (sections: BENCH_PY=1,2,3,4)
# On a machine shared with others, wrap it in their lock (here:
# flock /tmp/bprof-tests.lock scripts/bench-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BPROF=${1:-target/release/bprof}
SECTIONS=${BENCH_PY:-1,2,3,4}
[ -x "$BPROF" ] || cargo build --release --quiet
BPROF=$(realpath "$BPROF")
FIX=$(realpath fixtures/py631.py)
tmp=$(mktemp -d)
bg=()
cleanup() {
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
    sysctl -q kernel.bpf_stats_enabled=0
}
trap cleanup EXIT
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

pythons=()
[ -x /usr/bin/python3.11 ] && pythons+=(/usr/bin/python3.11)
for v in "${PYENV_ROOT:-/root/.pyenv}"/versions/3.1[0-3].*; do
    m=$(basename "$v" | cut -d. -f1,2)
    [ -x "$v/bin/python$m" ] && pythons+=("$v/bin/python$m")
done
pyspy=$(command -v py-spy || ls "${PYENV_ROOT:-/root/.pyenv}"/versions/*/bin/py-spy 2>/dev/null | head -1)
[ -n "$pyspy" ] || { echo "py-spy not found: pip install 'py-spy>=0.4,<0.5'" >&2; exit 1; }

if want 1; then
    sysctl -q kernel.bpf_stats_enabled=1
    walk_ns() { grep -o "[0-9]* ns a walk" "$1" | cut -d' ' -f1 || true; } # FILE: -v's walk time
    one_cost() { # PYTHON MODE [--no-python] -> "ns-per-target-sample walk-ns"
        "$BPROF" -v -C 1 -F 999 -o "$tmp/out.folded" "${@:3}" -- \
            taskset -c 1 "$1" "$FIX" "$2" 5 2>"$tmp/cost.err" &
        local pid=$! st
        sleep 4.5
        st=$(bpftool prog show name do_sample 2>/dev/null |
            awk '/run_time_ns/ { for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t = $(i+1); if ($i == "run_cnt") c = $(i+1) } } END { print t, c }')
        wait "$pid" || true
        local walk
        walk=$(walk_ns "$tmp/cost.err")
        grep -o "program runs [0-9]*, idle skipped [0-9]*, other processes [0-9]*" "$tmp/cost.err" |
            tr -d , | awk -v st="$st" -v walk="${walk:--}" '{ split(st, a, " "); f = ($3 - $6 - $9) / $3; printf "%.0f %s\n", a[1] / a[2] / f, walk }'
    }
    # BENCH_PY_PAIR=OTHER: that build and this one profile one process at
    # once, so both see the same seconds of a machine whose speed drifts.
    PAIR=${BENCH_PY_PAIR:+$(realpath "$BENCH_PY_PAIR")}
    pair_walks() { # PYTHON MODE -> "this-walk-ns other-walk-ns"
        taskset -c 1 "$1" "$FIX" "$2" 8 &
        local w=$! a b
        bg+=("$w")
        sleep 0.5
        "$BPROF" -v -C 1 -F 999 -p "$w" -o "$tmp/pa.folded" 5 2>"$tmp/pa.err" &
        a=$!
        "$PAIR" -v -C 1 -F 999 -p "$w" -o "$tmp/pb.folded" 5 2>"$tmp/pb.err" &
        b=$!
        wait "$a" "$b" || true
        wait "$w" || true
        echo "$(walk_ns "$tmp/pa.err") $(walk_ns "$tmp/pb.err")"
    }
    echo "| interpreter | stack | without Python (ns per target sample) | with | the walk (its own time) |${PAIR:+ paired: this build | $PAIR |}"
    echo "|---|---|---:|---:|---:|${PAIR:+---:|---:|}"
    for py in "${pythons[@]}"; do
        for mode in deep 631; do
            : >"$tmp/off"
            : >"$tmp/on"
            : >"$tmp/walk"
            for _ in 1 2 3; do
                one_cost "$py" "$mode" --no-python | cut -d' ' -f1 >>"$tmp/off"
                one_cost "$py" "$mode" >"$tmp/one"
                cut -d' ' -f1 "$tmp/one" >>"$tmp/on"
                cut -d' ' -f2 "$tmp/one" >>"$tmp/walk"
            done
            depth=$([ "$mode" = deep ] && echo "33 deep" || echo "5 deep")
            paired=
            if [ -n "$PAIR" ]; then
                : >"$tmp/pairs"
                for _ in 1 2 3; do pair_walks "$py" "$mode" >>"$tmp/pairs"; done
                paired=" $(cut -d' ' -f1 "$tmp/pairs" | median) | $(cut -d' ' -f2 "$tmp/pairs" | median) |"
            fi
            echo "| $py | $depth | $(median <"$tmp/off") | $(median <"$tmp/on") | $(median <"$tmp/walk") |$paired"
        done
    done
    sysctl -q kernel.bpf_stats_enabled=0
fi

shares() { # FOLDED-ISH FILE (frames; count) -> "heavy medium light" in percent
    awk '{ n = $NF; h = index($0, "heavy (") > 0; m = index($0, "medium (") > 0; l = index($0, "light (") > 0;
           H += h * n; M += m * n; L += l * n }
         END { t = H + M + L; if (t == 0) t = 1; printf "%.1f %.1f %.1f\n", 100 * H / t, 100 * M / t, 100 * L / t }' "$1"
}

if want 2; then
    # py-spy's rate and the seconds of both (BENCH_PY_SPY_RATE, _SECS).
    SPY_RATE=${BENCH_PY_SPY_RATE:-199}
    SPY_SECS=${BENCH_PY_SPY_SECS:-10}
    echo
    echo "| interpreter | samples (bprof, py-spy) | bprof heavy/medium/light % | py-spy % | largest gap to 60/30/10 | largest gap to py-spy |"
    echo "|---|---:|---|---|---:|---:|"
    for py in "${pythons[@]}"; do
        "$py" "$FIX" 631 $((SPY_SECS + 10)) &
        w=$!
        bg+=("$w")
        sleep 1
        "$pyspy" record -p "$w" -d "$SPY_SECS" -r "$SPY_RATE" -f raw -o "$tmp/spy.txt" >/dev/null 2>&1 &
        s=$!
        "$BPROF" -p "$w" -F 499 --no-counts -o "$tmp/bprof.folded" "$SPY_SECS" 2>"$tmp/bprof.err"
        wait "$s" || true
        kill "$w" 2>/dev/null || true
        read -r bh bm bl < <(shares "$tmp/bprof.folded")
        read -r sh sm sl < <(shares "$tmp/spy.txt")
        n=$(grep -o "^bprof: [0-9]* samples" "$tmp/bprof.err" | grep -o "[0-9]*")
        n="$n, $(awk '{ t += $NF } END { print t + 0 }' "$tmp/spy.txt")"
        gap=$(echo "$bh $bm $bl" | awk '{ a = $1 - 60; b = $2 - 30; c = $3 - 10; m = a < 0 ? -a : a;
            if ((b < 0 ? -b : b) > m) m = b < 0 ? -b : b; if ((c < 0 ? -c : c) > m) m = c < 0 ? -c : c; printf "%.1f", m }')
        spy=$(echo "$bh $bm $bl $sh $sm $sl" | awk '{ m = 0; for (i = 1; i <= 3; i++) { d = $i - $(i+3); if (d < 0) d = -d; if (d > m) m = d } printf "%.1f", m }')
        echo "| $py | $n | $bh / $bm / $bl | $sh / $sm / $sl | $gap | $spy |"
    done
fi

if want 3; then
    # Rounds of: alone, under bprof, under py-spy, alone again; each
    # profiler's slowdown against the mean of its round's two lone runs,
    # the median over the rounds (BENCH_PY_ROUNDS, default 10). The
    # machine's speed drifts by tens of percent over minutes; within a
    # round it mostly holds. The workload runs on CPU 1 and each profiler's
    # own process on CPU 0, so what the workload loses is what sampling it
    # costs, not a share of its CPU taken by the profiler's user side.
    ROUNDS=${BENCH_PY_ROUNDS:-10}
    echo
    echo "| interpreter | alone (s, median) | bprof's slowdown (median) | py-spy's | rounds |"
    echo "|---|---:|---:|---:|---:|"
    for py in "${pythons[@]}"; do
        : >"$tmp/rounds"
        for _ in $(seq "$ROUNDS"); do
            a=$(taskset -c 1 "$py" "$FIX" rounds 800)
            b=$(taskset -c 0 "$BPROF" -F 999 --no-counts -o /dev/null -- \
                taskset -c 1 "$py" "$FIX" rounds 800 2>/dev/null)
            s=$(taskset -c 0 "$pyspy" record -r 999 -f raw -o "$tmp/spy.txt" -- \
                taskset -c 1 "$py" "$FIX" rounds 800 2>/dev/null | grep -E '^[0-9.]+$')
            a2=$(taskset -c 1 "$py" "$FIX" rounds 800)
            echo "$a $b $s $a2" >>"$tmp/rounds"
        done
        al=$(awk '{ print ($1 + $4) / 2 }' "$tmp/rounds" | median)
        b=$(awk '{ m = ($1 + $4) / 2; print 100 * ($2 - m) / m }' "$tmp/rounds" | median)
        s=$(awk '{ m = ($1 + $4) / 2; print 100 * ($3 - m) / m }' "$tmp/rounds" | median)
        printf "| %s | %.3f | %.1f%% | %.1f%% | %s |\n" "$py" "$al" "$b" "$s" "$ROUNDS"
    done
fi

if want 4 && [ "${BENCH_PY_LONG:-1}" != 0 ]; then
    echo
    echo "| 60 s profile (-F 999 -p) of | bprof peak RSS (KiB) | samples | lost |"
    echo "|---|---:|---:|---:|"
    gcc -O1 -g -fno-omit-frame-pointer -Ifixtures -o "$tmp/fx_work631" fixtures/work631.c
    py=${pythons[-1]}
    for what in python no-python no-inline native; do
        opt=()
        if [ "$what" = native ]; then
            "$tmp/fx_work631" 70 &
        else
            "$py" "$FIX" 631 70 &
            [ "$what" = python ] || opt=(--"$what")
        fi
        w=$!
        bg+=("$w")
        sleep 1
        /usr/bin/time -f "%M" -o "$tmp/rss" "$BPROF" -p "$w" -F 999 --no-counts "${opt[@]}" -o /dev/null 60 2>"$tmp/long.err"
        kill "$w" 2>/dev/null || true
        line=$(grep " samples of " "$tmp/long.err")
        n=$(echo "$line" | grep -o "^bprof: [0-9]*" | grep -o "[0-9]*")
        lost=$(echo "$line" | grep -o "[0-9]* lost" | grep -o "[0-9]*")
        case $what in
        python) label="$py" ;;
        no-python) label="$py, --no-python" ;;
        no-inline) label="$py, --no-inline" ;;
        native) label=fixtures/work631.c ;;
        esac
        echo "| $label | $(tail -1 "$tmp/rss") | $n | $lost |"
    done
fi

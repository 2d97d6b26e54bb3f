#!/usr/bin/env bash
# Process churn benchmark (as root): a shell loop starting ~300 short
# processes a second (each a small C program built -O2, without frame
# pointers, that works ~1 ms and exits: what builds and CI runners do) while
# a system-wide profile runs at 99 Hz for SECONDS (default 20). Reports, for bprof (--call-graph dwarf, the
# default, then fp):
#   - its own CPU time (user + system) and peak RSS;
#   - side-band records read, mappings the BPF side kept (learned), mappings
#     whose file could not be opened, from its -v lines;
#   - the share of its walks that reached the outermost frame (-v), and of
#     the churn's own samples (comm churnkid) with a user stack whose
#     outermost frame is _start;
#   - its cost per new process: own CPU over the processes started, and
#     (-v) the side band's drain (records read, their files found or
#     opened) and the unwinder's taking of them (tables and mappings);
#   - its RSS while recording, every 5 s: the first and the last sample
#     and the largest (flat over a long run: BENCH_CHURN_MODES=dwarf
#     scripts/bench-churn.sh 600);
# and, for "short", twenty new programs (each a fresh copy, -O2 without
# frame pointers, working ~30 ms) run by a script under bprof -F 999 --
# COMMAND: the share of their samples walked whole (from _start, no
# [truncated]), named (their hot function) and with a frame that has no
# module ([unknown]): what a new program's first milliseconds, before its
# table is loaded, cost;
# and for perf record -a -g -F 99 plus perf script on the same churn, its
# CPU time (record and script summed) and the same share of the churn's
# samples. Each profiler gets a fresh churn of the same rate; the rate
# achieved is printed.
#
# Usage: scripts/bench-churn.sh [SECONDS] [BPROF]
# (BENCH_CHURN_MODES: which of "dwarf fp short perf" to run, default all)
# On a machine shared with others, wrap it in their lock (here:
# flock /tmp/bprof-tests.lock scripts/bench-churn.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
BPROF=${2:-target/release/bprof}
[ -x "$BPROF" ] || cargo build --release --quiet
BPROF=$(realpath "$BPROF")
tmp=$(mktemp -d)
churn_pid=
cleanup() {
    [ -n "$churn_pid" ] && kill "$churn_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
# One kid for both workloads: WORK names its hot function, WORK_NS how long
# it spins.
cat >"$tmp/kid.c" <<'KID'
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void WORK(void)
{
	struct timespec a, b;
	unsigned long x = 1;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005UL + i;
		sink = x;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec < WORK_NS);
}
int main(void)
{
	WORK();
	return 0;
}
KID
gcc -O2 -DWORK=churn_work -DWORK_NS=1000000L -o "$tmp/churnkid" "$tmp/kid.c"

# ~300 processes a second: batches of 30, each batch given 0.1 s.
start_churn() {
    cat >"$tmp/churn.sh" <<'CHURN'
kid=$1
n=0
while :; do
    t0=$(date +%s%N)
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30; do
        "$kid"
    done
    n=$((n + 30))
    echo "$n" >"$kid.count"
    left=$((100000000 - ($(date +%s%N) - t0)))
    [ "$left" -gt 0 ] && sleep "0.$(printf %09d "$left")"
done
CHURN
    bash "$tmp/churn.sh" "$tmp/churnkid" &
    churn_pid=$!
    sleep 1
}
stop_churn() {
    kill "$churn_pid" 2>/dev/null || true
    wait "$churn_pid" 2>/dev/null || true
    churn_pid=
}
rate() { # processes a second over the measured window
    echo "$1 $2 $3" | awk '{ printf "%.0f", ($2 - $1) / $3 }'
}
count() { # processes started so far (the file may be caught mid-write: again)
    local n i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        n=$(cat "$tmp/churnkid.count" 2>/dev/null || true)
        [ -n "$n" ] && break
        sleep 0.01
    done
    echo "${n:-0}"
}

run_short() {
    mkdir -p "$tmp/short"
    local script="" i
    for i in $(seq -w 0 19); do
        # A fresh file each: no table of it is loaded before it runs.
        gcc -O2 -DWORK=short_work -DWORK_NS=30000000L -o "$tmp/short/kid$i" "$tmp/kid.c"
        script="$script $tmp/short/kid$i;"
    done
    "$BPROF" -F 999 -f -o "$tmp/short.folded" -- sh -c "$script" 2>"$tmp/short.err" || {
        cat "$tmp/short.err" >&2
        exit 1
    }
    echo "twenty new programs of ~30 ms under bprof -F 999 -- sh -c:"
    awk '
        { n = $NF; split($0, f, ";"); if (f[1] !~ /^kid[0-9][0-9]$/) next;
          sub(/ [0-9]+$/, "", f[length(f)]);
          if (f[2] ~ /^(entry_|asm_|ret_from_fork)/) next;
          total += n; t = 0; u = 0; h = 0;
          for (i = 2; i <= length(f); i++) { if (f[i] == "[truncated]") t = 1; if (f[i] == "[unknown]") u = 1; if (f[i] == "short_work") h = 1 }
          if (f[2] == "_start" && !t) whole += n; if (u) nomod += n; if (h) named += n }
        END { if (total) printf "  %d user samples: %.1f%% walked whole, %.1f%% named (short_work), %.1f%% with a frame without a module\n", total, 100 * whole / total, 100 * named / total, 100 * nomod / total; else print "  no samples" }
    ' "$tmp/short.folded"
}

# Share of the churn's samples (folded lines of comm churnkid) with a user
# stack (not kernel frames first: exec, exit) whose outermost frame is
# _start: a walk that reached the root.
churn_roots() {
    awk '
        { n = $NF; split($0, f, ";"); if (f[1] != "churnkid") next;
          first = f[2]; sub(/ [0-9]+$/, "", first);
          if (first ~ /^(entry_|asm_|ret_from_fork)/) { kernel += n; next }
          total += n; if (first == "_start") root += n }
        END { if (total > 0) printf "%d of %d (%.0f%%), %d kernel-only apart", root, total, 100 * root / total, kernel; else printf "no samples" }
    ' "$1"
}

run_bprof() { # $1: --call-graph mode
    start_churn
    local c0 timer pid
    c0=$(count)
    /usr/bin/time -f "%U %S %M" -o "$tmp/time" \
        "$BPROF" -F 99 -v --call-graph "$1" -f -o "$tmp/bprof.folded" "$secs" 2>"$tmp/bprof.err" &
    timer=$!
    # RSS while recording (KiB), every 5 s, until its outputs begin.
    : >"$tmp/rss"
    sleep 1
    pid=$(pgrep -P "$timer" | head -1 || true)
    local waited=1
    while [ "$waited" -lt "$secs" ] && kill -0 "$timer" 2>/dev/null; do
        [ -n "$pid" ] && awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" >>"$tmp/rss" 2>/dev/null || true
        sleep 5
        waited=$((waited + 5))
    done
    wait "$timer" || {
        cat "$tmp/bprof.err" >&2
        exit 1
    }
    local c1
    c1=$(count)
    stop_churn
    read -r u s m <"$tmp/time"
    local started=$((c1 - c0))
    echo "bprof --call-graph $1 (churn: $(rate "$c0" "$c1" "$secs") processes/s):"
    awk -v u="$u" -v s="$s" -v m="$m" 'BEGIN { printf "  own CPU %.2f s (user %.2f, system %.2f), peak RSS %.1f MiB\n", u + s, u, s, m / 1024 }'
    awk -v u="$u" -v s="$s" -v n="$started" 'BEGIN { if (n > 0) printf "  own CPU per new process: %.0f us (%d processes started)\n", 1e6 * (u + s) / n, n }'
    # The side band's and the unwinder's time (-v), per new process.
    awk -v n="$started" '
        /side band: .* records read in [0-9]+ ms/ { for (i = 1; i <= NF; i++) if ($i == "in" && $(i + 2) ~ /^ms/) d = $(i + 1) }
        /learned in [0-9]+ ms/ { for (i = 1; i <= NF; i++) if ($i == "learned" && $(i + 1) == "in") l = $(i + 2) }
        /mappings taken in [0-9]+ ms/ { for (i = 1; i <= NF; i++) if ($i == "taken" && $(i + 1) == "in") t = $(i + 2) }
        END { if (n > 0 && d != "") printf "  per new process: side band %.0f us (of it, its files found or opened %.0f us), unwinder %.0f us (tables and mappings)\n", 1000 * d / n, 1000 * l / n, 1000 * t / n }
    ' "$tmp/bprof.err"
    awk 'NR == 1 { f = $1 } { l = $1; if ($1 > m) m = $1 } END { if (NR) printf "  RSS while recording: %.1f MiB at the first look, %.1f MiB at the last, %.1f MiB at most (%d looks, 5 s apart)\n", f / 1024, l / 1024, m / 1024, NR }' "$tmp/rss"
    # A long run: the RSS each minute, to tell a plateau from a slope.
    if [ "$secs" -ge 120 ]; then
        awk '(NR - 1) % 12 == 0 { s = s sprintf(" %.1f", $1 / 1024) } END { print "  RSS each minute (MiB):" s }' "$tmp/rss"
    fi
    grep -o 'side band: [0-9]* mapping' "$tmp/bprof.err" | awk '{ print "  side-band records: " $3 }' || true
    grep -o '([0-9]* kept)' "$tmp/bprof.err" | tr -d '()' | awk '{ print "  learned mappings (kept by the BPF side): " $1 }' || true
    grep -o '[0-9]* mappings whose file could not be opened' "$tmp/bprof.err" |
        awk '{ print "  mappings whose file could not be opened: " $1 }' || true
    grep -o 'dwarf unwinding: [0-9]* walks' "$tmp/bprof.err" >/dev/null && {
        walks=$(grep -o 'dwarf unwinding: [0-9]* walks' "$tmp/bprof.err" | awk '{ print $3 }')
        outer=$(grep -o '[0-9]* reached the outermost frame' "$tmp/bprof.err" | awk '{ print $1 }')
        awk -v w="$walks" -v o="${outer:-0}" 'BEGIN { printf "  walks reaching the outermost frame: %d of %d (%.0f%%)\n", o, w, w ? 100 * o / w : 0 }'
    }
    grep -E 'samples of all processes' "$tmp/bprof.err" | sed 's/^bprof: /  /'
    echo "  the churn's samples starting at a root: $(churn_roots "$tmp/bprof.folded")"
}

# perf 6.1 aborts ("assertion failed at util/build-id.c") when a process
# it saw maps a file whose GNU build ID is longer than 20 bytes (fixed
# upstream by truncating); tests on a shared machine run such files now and
# then, so a failed perf run is said and run again, up to three times.
run_perf() {
    local try c0 c1
    for try in 1 2 3; do
        start_churn
        c0=$(count)
        # -N: no build-ID cache (shared with every perf of the machine).
        if /usr/bin/time -f "%U %S %M" -o "$tmp/time.rec" \
            perf record -q --no-bpf-event -N -a -g -F 99 -o "$tmp/perf.data" -- sleep "$secs" 2>"$tmp/perf.err"; then
            c1=$(count)
            stop_churn
            /usr/bin/time -f "%U %S %M" -o "$tmp/time.script" \
                perf script -i "$tmp/perf.data" -F comm,ip,sym >"$tmp/perf.script" 2>"$tmp/perf.err" && break
        else
            stop_churn
        fi
        echo "perf failed (try $try): $(grep -m1 -v '^$' "$tmp/perf.err")" >&2
        [ "$try" = 3 ] && return 1
    done
    # perf script's stacks, folded: comm;outermost;...;leaf.
    awk '
        /^[^ \t]/ { if (comm != "") out(); comm = $1; n = 0; next }
        /^[ \t]*$/ { if (comm != "") out(); comm = ""; next }
        { sym = $2; if (sym == "" || sym == "[unknown]") sym = "[unknown]"; f[++n] = sym }
        function out(   s, i) { s = comm; for (i = n; i >= 1; i--) s = s ";" f[i]; print s " 1"; n = 0 }
        END { if (comm != "") out() }
    ' "$tmp/perf.script" >"$tmp/perf.folded"
    read -r ru rs rm <"$tmp/time.rec"
    read -r su ss sm <"$tmp/time.script"
    echo "perf record -a -g -F 99 + perf script (churn: $(rate "$c0" "$c1" "$secs") processes/s):"
    awk -v a="$ru" -v b="$rs" -v c="$su" -v d="$ss" -v m="$rm" -v n="$sm" 'BEGIN {
        printf "  CPU %.2f s (record %.2f, script %.2f), peak RSS record %.1f MiB, script %.1f MiB\n",
            a + b + c + d, a + b, c + d, m / 1024, n / 1024 }'
    echo "  samples: $(wc -l <"$tmp/perf.folded")"
    echo "  the churn's samples starting at a root: $(churn_roots "$tmp/perf.folded")"
}

echo "process churn, $secs s per profiler, system-wide at 99 Hz ($(nproc) CPUs, $(uname -r))"
for mode in ${BENCH_CHURN_MODES:-dwarf fp short perf}; do
    case $mode in
    perf) run_perf ;;
    short) run_short ;;
    *) run_bprof "$mode" ;;
    esac
done

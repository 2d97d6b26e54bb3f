#!/bin/sh
# bprof top's own cost (as root): the CPU time bprof itself uses while
# `bprof top` runs system-wide at 49 Hz, against a plain profile
# (`bprof -f`) of the same duration on the same workload. The sampling
# itself (timer interrupts, the BPF program) is charged to the sampled
# tasks, not to bprof, so bprof's own user+sys time is what top adds on top
# of it: the refreshes (drain, symbolization of new stacks, aggregation,
# drawing) against the profile's tick loop and final output.
#
#   scripts/bench-top.sh [SECONDS] [RUNS]      (default 30 s, 3 runs)
#
# Both run in a tmux pane (top needs a terminal; the profile writes to
# /dev/null), alternating, while two work631 processes keep both CPUs busy.
# Two figures per run: the whole run (start-up and the profile's final
# symbolization included), from /usr/bin/time, and the steady state: CPU
# ticks of the bprof process from 5 s in to 2 s before the end, from
# /proc/PID/stat. Results go to stdout and target/bench-top/.
set -eu
secs=${1:-30}
runs=${2:-3}
cd "$(dirname "$0")/.."
out=$PWD/target/bench-top
mkdir -p "$out"
cargo build --release -q
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$out/fx_work631" fixtures/work631.c
bin=$PWD/target/release/bprof
hz=$(getconf CLK_TCK)
sock=bprof-bench-top-$$
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; kill $w1 $w2 2>/dev/null || true' EXIT

"$out/fx_work631" $((runs * secs * 2 + 60)) & w1=$!
"$out/fx_work631" $((runs * secs * 2 + 60)) & w2=$!

# utime + stime of a process, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# VmRSS of a process, in KiB.
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# measure NAME COMMAND...: prints "TOTAL_CPU_S STEADY_CPU_PERCENT RSS_AT_5S_KIB RSS_AT_END_KIB".
measure() {
	name=$1
	shift
	rm -f "$out/$name.time"
	tmux -L "$sock" kill-server 2>/dev/null || true
	tmux -L "$sock" new-session -d -x 120 -y 40 \
		"/usr/bin/time -f '%U %S' -o $out/$name.time $* 2>$out/$name.err"
	sleep 1
	timer=$(pgrep -f "^/usr/bin/time -f %U %S -o $out/$name.time")
	pid=$(pgrep -P "$timer" -x bprof)
	sleep 4
	c0=$(ticks "$pid")
	r0=$(rss "$pid")
	t0=$(date +%s.%N)
	sleep $((secs - 7))
	c1=$(ticks "$pid")
	r1=$(rss "$pid")
	t1=$(date +%s.%N)
	while [ ! -s "$out/$name.time" ]; do sleep 0.2; done
	awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v r0="$r0" -v r1="$r1" \
		'{printf "%.2f %.3f %d %d\n", $1 + $2, 100 * (c1 - c0) / hz / (t1 - t0), r0, r1}' "$out/$name.time"
}

: >"$out/results.tsv"
i=1
while [ "$i" -le "$runs" ]; do
	top=$(measure top "$bin" top -F 49 "$secs")
	prof=$(measure profile "$bin" -F 49 -f --no-counts "$secs" '>/dev/null')
	printf 'run %s: top %s, profile %s\n' "$i" "$top" "$prof"
	printf '%s\t%s\n' "$top" "$prof" | tr ' ' '\t' >>"$out/results.tsv"
	grep -h 'bprof top:' "$out/top.err" || true
	i=$((i + 1))
done

# Medians of each column: top total s, top steady %, top RSS at 5 s and
# at the end, then the same four for the profile.
med() { cut -f"$1" "$out/results.tsv" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
tt=$(med 1); ts=$(med 2); tr0=$(med 3); tr1=$(med 4); pt=$(med 5); ps=$(med 6)
echo "bprof top, ${secs} s system-wide at 49 Hz on $(nproc) CPUs (medians of $runs runs):"
echo "  whole run CPU:   top ${tt} s, profile ${pt} s: extra $(echo "$tt $pt $secs" | awk '{printf "%.2f", 100 * ($1 - $2) / $3}') % of one CPU"
echo "  steady state:    top ${ts} %, profile ${ps} % of one CPU: extra $(echo "$ts $ps" | awk '{printf "%.2f", $1 - $2}') %"
echo "  top RSS:         ${tr0} KiB at 5 s, ${tr1} KiB 2 s before the end"

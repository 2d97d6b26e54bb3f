#!/bin/sh
# bprof top's own cost (as root): the CPU time bprof itself uses while
# `bprof top` runs system-wide at the default rate, against a plain profile
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

# measure NAME COMMAND...: prints "TOTAL_CPU_S STEADY_CPU_PERCENT".
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
	t0=$(date +%s.%N)
	sleep $((secs - 7))
	c1=$(ticks "$pid")
	t1=$(date +%s.%N)
	while [ ! -s "$out/$name.time" ]; do sleep 0.2; done
	awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
		'{printf "%.2f %.3f\n", $1 + $2, 100 * (c1 - c0) / hz / (t1 - t0)}' "$out/$name.time"
}

: >"$out/results.tsv"
i=1
while [ "$i" -le "$runs" ]; do
	top=$(measure top "$bin" top "$secs")
	prof=$(measure profile "$bin" -f --no-counts "$secs" '>/dev/null')
	printf 'run %s: top %s, profile %s\n' "$i" "$top" "$prof"
	printf '%s\t%s\n' "$top" "$prof" | tr ' ' '\t' >>"$out/results.tsv"
	grep -h 'bprof top:' "$out/top.err" || true
	i=$((i + 1))
done

# Medians of each column: top total s, top steady %, profile total s, profile steady %.
med() { cut -f"$1" "$out/results.tsv" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
tt=$(med 1); ts=$(med 2); pt=$(med 3); ps=$(med 4)
echo "bprof top, ${secs} s system-wide at the default rate on $(nproc) CPUs (medians of $runs runs):"
echo "  whole run CPU:   top ${tt} s, profile ${pt} s: extra $(echo "$tt $pt $secs" | awk '{printf "%.2f", 100 * ($1 - $2) / $3}') % of one CPU"
echo "  steady state:    top ${ts} %, profile ${ps} % of one CPU: extra $(echo "$ts $ps" | awk '{printf "%.2f", $1 - $2}') %"

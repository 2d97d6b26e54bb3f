#!/bin/sh
# Periodic-profile memory benchmark (as root): a shortened stand-in for an
# hour of `bprof --every 10`, sampling bprof's RSS to show it stays flat.
#
#   scripts/every-rss.sh [SECONDS] [EVERY] [DEPTH]   (default 600, 10, 10)
#
# bprof profiles a workload at 999 Hz, writing a pprof and a folded file per
# interval. In the workload, fixtures/manystacks.c walks random paths of a
# 2^DEPTH-path call tree and replaces its thread every second (new count-map
# keys all the time, and thread ids kept: pprof output has a tid label), and
# a new short-lived process (fixtures/shortlived.c) starts every 0.2 s (new
# pids, new mappings). SCOPE=-a profiles the whole machine instead (then
# RSS also depends on what else runs). Every 5 s the script samples bprof's
# VmRSS. It reports the RSS after two minutes and at the end, the
# growth between them per hour, bprof's CPU time, and checks that the
# intervals add up to what bprof counted. Results go to stdout and
# target/every-rss/.
#
# DEPTH bounds the distinct stacks: bprof keeps each distinct stack content
# for the whole run (the kernel may name it again), so with DEPTH 15 memory
# grows until the tree's ~2^15 paths (times their leaf addresses) have all
# been seen; that is the workload's size, not the run's length.
set -eu
secs=${1:-600}
every=${2:-10}
depth=${3:-10}
cd "$(dirname "$0")/.."
out=target/every-rss
rm -rf "$out"
mkdir -p "$out/files"
cargo build --release -q
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$out/fx_manystacks" fixtures/manystacks.c
gcc -O1 -g -fno-omit-frame-pointer -o "$out/fx_shortlived" fixtures/shortlived.c

# The workload runs as bprof's COMMAND (its whole process tree is
# profiled, nothing else), or beside a system-wide bprof with SCOPE=-a.
cat >"$out/workload.sh" <<WORKLOAD
trap 'pkill -P \$\$; exit 0' TERM
"$out/fx_manystacks" "$((secs + 5))" 1 "$depth" 1000 &
end=\$((\$(date +%s) + $secs + 5))
while [ "\$(date +%s)" -lt "\$end" ]; do "$out/fx_shortlived"; sleep 0.2; done
wait
WORKLOAD
if [ "${SCOPE:-}" = "-a" ]; then
	sh "$out/workload.sh" &
	work=$!
	set -- "$secs"
else
	work=
	set -- "$secs" -- sh "$out/workload.sh"
fi
target/release/bprof -v -F 999 --every "$every" --pprof "$out/files/%n.pb.gz" \
	-o "$out/files/%n.folded" --stats-json "$out/stats.json" "$@" 2>"$out/stderr.txt" &
bprof=$!
clk=$(getconf CLK_TCK)
: >"$out/rss.tsv"
start=$(date +%s)
# Until bprof exits (a zombie still answers kill -0: read its state).
while grep -q '^State:[^Z]*$' "/proc/$bprof/status" 2>/dev/null; do
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$bprof/status" 2>/dev/null || true)
	# utime + stime so far (fields 14, 15 after the comm).
	cpu=$(sed 's/.*) //' "/proc/$bprof/stat" 2>/dev/null | awk -v c="$clk" '{printf "%.1f", ($12 + $13) / c}' || true)
	[ -n "$cpu" ] && echo "$cpu" >"$out/cpu.txt"
	[ -n "$rss" ] && printf '%s\t%s\n' "$(($(date +%s) - start))" "$rss" >>"$out/rss.tsv"
	sleep 5
done
status=0
wait "$bprof" || status=$?
if [ -n "$work" ]; then
	pkill -P "$work" 2>/dev/null || true
	kill "$work" 2>/dev/null || true
	wait 2>/dev/null || true
fi
# A command stopped at the end of DURATION exits with its signal's status.
# The numbers come from --stats-json, not from the human summary line.
if [ ! -s "$out/stats.json" ]; then
	echo "bprof failed ($status):"; tail -5 "$out/stderr.txt"; exit 1
fi

samples=$(jq '.samples.counted_weight' "$out/stats.json")
lost=$(jq '.samples.lost' "$out/stats.json")
folded=$(cat "$out"/files/*.folded | awk '{s += $NF} END {print s + 0}')
files=$(ls "$out"/files/*.pb.gz | wc -l)
grep ' unique stacks' "$out/stderr.txt" || true
grep -E ' files written| drains read ' "$out/stderr.txt" || true
echo "intervals: $files pprof files; folded total $folded, samples $samples, lost $lost"
echo "bprof CPU: $(cat "$out/cpu.txt") s over $secs s"
# RSS (KiB) at the first sample past 120 s (two symbolizer lives: the
# first minute parses every file once), at the end, and the maximum.
awk -v secs="$secs" '
	$1 >= 120 && first == "" { first = $2; t0 = $1 }
	{ last = $2; t1 = $1; if ($2 > max) max = $2 }
	END {
		printf "bprof RSS: %.1f MiB at %d s, %.1f MiB at %d s, max %.1f MiB", first / 1024, t0, last / 1024, t1, max / 1024
		if (t1 > t0) printf "; growth %+.1f MiB/hour", (last - first) / 1024 * 3600 / (t1 - t0)
		printf "\n"
	}' "$out/rss.tsv"
[ "$lost" = 0 ] && [ "$folded" = "$samples" ] && echo "PASS: nothing lost, the intervals add up" \
	|| { echo "FAIL"; exit 1; }

#!/bin/sh
# Periodic-profile memory benchmark (as root): a shortened stand-in for an
# hour of `bprof --every 10`, sampling bprof's RSS to show it stays flat.
#
#   scripts/every-rss.sh [SECONDS] [EVERY]     (default 600 and 10)
#
# bprof profiles system-wide at 999 Hz, writing a pprof and a folded file
# per interval, while fixtures/manystacks.c walks random paths of a 2^15-path
# call tree and replaces its thread every second (new count-map keys all the
# time, and thread ids kept: pprof output has a tid label). Every 5 s the
# script samples bprof's VmRSS. It reports the RSS after the first minute and
# at the end, the growth between them per hour, and checks that the
# intervals add up to what bprof counted. Results go to stdout and
# target/every-rss/.
set -eu
secs=${1:-600}
every=${2:-10}
cd "$(dirname "$0")/.."
out=target/every-rss
rm -rf "$out"
mkdir -p "$out/files"
cargo build --release -q
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$out/fx_manystacks" fixtures/manystacks.c

"$out/fx_manystacks" "$((secs + 5))" 1 15 1000 &
work=$!
target/release/bprof -v -F 999 --every "$every" --pprof "$out/files/%n.pb.gz" \
	-o "$out/files/%n.folded" "$secs" 2>"$out/stderr.txt" &
bprof=$!
: >"$out/rss.tsv"
start=$(date +%s)
while kill -0 "$bprof" 2>/dev/null; do
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$bprof/status" 2>/dev/null || true)
	[ -n "$rss" ] && printf '%s\t%s\n' "$(($(date +%s) - start))" "$rss" >>"$out/rss.tsv"
	sleep 5
done
wait "$bprof" || { echo "bprof failed:"; tail -5 "$out/stderr.txt"; kill "$work" 2>/dev/null; exit 1; }
kill "$work" 2>/dev/null || true

summary=$(grep ' unique stacks' "$out/stderr.txt")
samples=$(echo "$summary" | sed 's/^bprof: \([0-9]*\) samples.*/\1/')
lost=$(echo "$summary" | sed 's/.*, \([0-9]*\) lost,.*/\1/')
folded=$(cat "$out"/files/*.folded | awk '{s += $NF} END {print s + 0}')
files=$(ls "$out"/files/*.pb.gz | wc -l)
echo "$summary"
grep -E ' files written| drains read ' "$out/stderr.txt" || true
echo "intervals: $files pprof files; folded total $folded, samples $samples, lost $lost"
# RSS (KiB) at the first sample past 60 s, at the end, and the maximum.
awk -v secs="$secs" '
	$1 >= 60 && first == "" { first = $2; t0 = $1 }
	{ last = $2; t1 = $1; if ($2 > max) max = $2 }
	END {
		printf "bprof RSS: %.1f MiB at %d s, %.1f MiB at %d s, max %.1f MiB", first / 1024, t0, last / 1024, t1, max / 1024
		if (t1 > t0) printf "; growth %+.1f MiB/hour", (last - first) / 1024 * 3600 / (t1 - t0)
		printf "\n"
	}' "$out/rss.tsv"
[ "$lost" = 0 ] && [ "$folded" = "$samples" ] && echo "PASS: nothing lost, the intervals add up" \
	|| { echo "FAIL"; exit 1; }

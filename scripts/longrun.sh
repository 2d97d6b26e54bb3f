#!/bin/sh
# Long-run benchmark (as root): a default-flags 999 Hz profile of a workload
# that makes ~1000 new count-map keys a second must lose nothing, add up, and
# keep kernel and user memory bounded.
#
#   scripts/longrun.sh [SECONDS]     (default 600; e.g. 120 for a quick check)
#
# The workload is fixtures/manystacks.c: one thread at a time walks random
# paths of a 2^15-path call tree and is replaced by a new thread every second,
# so nearly every sample is a new key (new thread id, mostly new path).
# Every 5 s the script samples bprof's RSS and the kernel memory of the maps
# bprof holds (fdinfo's memlock, which for hash maps allocated on demand is
# what their current entries use). Results go to stdout and to
# target/longrun/.
set -eu
secs=${1:-600}
cd "$(dirname "$0")/.."
out=target/longrun
mkdir -p "$out"
cargo build --release -q
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$out/fx_manystacks" fixtures/manystacks.c

rm -f "$out/stats.json"
/usr/bin/time -v -o "$out/time.txt" target/release/bprof -v -F 999 -o "$out/out.folded" --stats-json "$out/stats.json" \
	-- "$out/fx_manystacks" "$secs" 1 15 1000 2>"$out/stderr.txt" &
timer=$!
: >"$out/memory.tsv"
max_kmem=0
max_rss=0
# The bprof process is the child of /usr/bin/time.
sleep 1
bprof=$(pgrep -P "$timer" -x bprof || true)
while kill -0 "$timer" 2>/dev/null; do
	if [ -n "$bprof" ] && [ -r "/proc/$bprof/status" ]; then
		rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$bprof/status" 2>/dev/null || echo 0)
		# Every BPF map bprof holds an fd of, once (fdinfo's memlock).
		kmem=$(for f in /proc/"$bprof"/fdinfo/*; do cat "$f" 2>/dev/null; echo; done |
			awk '/^map_id:/ {id = $2} /^memlock:/ {m = $2} /^$/ {if (id != "" && !(id in seen)) {seen[id] = 1; s += m}; id = ""; m = 0} END {print s + 0}')
		rss=${rss:-0}
		kmem=${kmem:-0}
		printf '%s\t%s\t%s\n' "$(date +%s)" "$rss" "$kmem" >>"$out/memory.tsv"
		[ "$rss" -gt "$max_rss" ] && max_rss=$rss
		[ "$kmem" -gt "$max_kmem" ] && max_kmem=$kmem
	fi
	sleep 5
done
wait "$timer" || { echo "bprof failed:"; cat "$out/stderr.txt"; exit 1; }

# The numbers come from --stats-json, not from the human summary line.
[ -s "$out/stats.json" ] || { echo "bprof wrote no --stats-json:"; cat "$out/stderr.txt"; exit 1; }
samples=$(jq '.samples.counted_weight' "$out/stats.json")
lost=$(jq '.samples.lost' "$out/stats.json")
stacks_lost=$(jq '.samples.kernel_stacks_lost + .samples.user_stacks_lost' "$out/stats.json")
folded=$(awk '{s += $NF} END {print s + 0}' "$out/out.folded")
peak=$(awk '/Maximum resident set size/ {print $NF}' "$out/time.txt")
grep ' unique stacks' "$out/stderr.txt" || true
grep ' drains read ' "$out/stderr.txt" || true
grep -E 'lost|accounting' "$out/stderr.txt" | grep -v ' unique stacks' || true
echo "folded total $folded, samples $samples, lost $lost"
echo "kernel map memory while recording: max $((max_kmem / 1024)) KiB (sampled every 5 s)"
echo "bprof RSS while recording: max $((max_rss / 1024)) MiB; peak RSS including output: $((peak / 1024)) MiB"
[ "$lost" = 0 ] && [ "$folded" = "$samples" ] && [ "$stacks_lost" = 0 ] \
	&& echo "PASS: nothing lost, totals add up" || { echo "FAIL"; exit 1; }

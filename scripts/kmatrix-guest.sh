#!/bin/sh
# The smoke suite scripts/kernel-matrix.sh runs inside each qemu guest, as
# /init's last step (busybox sh, no perf: shares are checked against the
# fixtures' known shapes). Prints one "KMX|check|PASS or FAIL|detail" line per
# check on the console, which the host turns into its table, and keeps each
# check's stderr after a failure so the cause is in the log.
# A hung bprof fails its check instead of the whole boot: SIGTERM asks it to
# finish, and if it cannot within 10 s, SIGKILL ends it.
B="timeout -k 10 120 /bprof/bprof"
FX=/bprof/fx
T=/tmp/kmx
mkdir -p $T
# The kernel's taint before bprof ran: a warning it gives taints it.
taint0=$(cat /proc/sys/kernel/tainted)

result() { # check status detail
    echo "KMX|$1|$2|$3"
    # When the guest hangs, the log's last time says where.
    echo "KMX-UPTIME|$(cut -d' ' -f1 /proc/uptime)"
}

# A bprof that refused to load: NOFEAT and its one line when it named the
# kernel features missing (an old kernel, said clearly), else FAIL.
refused() { # check stderr-file
    if grep -q "this kernel (Linux .*) lacks" "$2"; then
        result "$1" NOFEAT "$(grep -o 'lacks.*' "$2" | head -1)"
    else
        result "$1" FAIL "bprof failed: $(tail -1 "$2")"
        show "$2"
    fi
}

# Dumps a failing check's output into the console log.
show() {
    for f in "$@"; do
        [ -s "$f" ] && sed "s/^/  $(basename "$f"): /" "$f" | head -40
    done
}

# Sum of the folded counts of lines whose first frame is comm $2 (and that
# hold frame $3, when given).
fsum() { # file comm [frame]
    awk -v c="$2" -v f="$3" '{
        n = $NF; $NF = ""; sub(/ $/, "");
        k = split($0, fr, ";");
        if (fr[1] != c) next;
        if (f == "") { s += n; next }
        for (i = 2; i <= k; i++) if (fr[i] == f) { s += n; break }
    } END { print s + 0 }' "$1"
}

# Every folded count added up.
fall() {
    awk '{ s += $NF } END { print s + 0 }' "$1"
}

# A number from bprof's summary line: the word before $2 (" lost", " unique stacks").
summary() { # stderr-file suffix
    awk -v suf="$2" '/ unique stacks/ {
        i = index($0, suf); if (!i) exit;
        s = substr($0, 1, i - 1); n = split(s, w, /[ ,]+/); print w[n]; exit
    }' "$1"
}

# The sample count: the word after "bprof: " on the summary line.
samples() {
    awk '/ unique stacks/ { print $2; exit }' "$1"
}

# The "N user stacks stored" of the -v drains line.
ustored() {
    awk '/ drains read / { for (i = 1; i < NF; i++) if ($(i+1) == "user" && $(i+2) == "stacks" && $(i+3) == "stored,") { print $i; exit } }' "$1"
}

# Output samples = counted - reported lost, for every profile.
totals_ok() { # folded stderr
    local n lost out
    n=$(samples "$2")
    lost=$(summary "$2" " lost")
    out=$(fall "$1")
    [ -n "$n" ] && [ -n "$lost" ] && [ "$out" -eq $((n - lost)) ]
}

pct() { # part total
    awk -v p="$1" -v t="$2" 'BEGIN { if (t > 0) printf "%.1f", 100 * p / t; else print "0" }'
}

within() { # value want tolerance
    awk -v v="$1" -v w="$2" -v t="$3" 'BEGIN { d = v - w; if (d < 0) d = -d; exit !(d <= t) }'
}

echo "KMX-KERNEL|$(uname -r)"

# 1. Load, and the 6:3:1 shares of a command (-- CMD) profiled at 999 Hz.
if $B -F 999 -f -v -- $FX/fx_work631 4 >$T/shares.f 2>$T/shares.e; then
    tot=$(fsum $T/shares.f fx_work631)
    h=$(pct "$(fsum $T/shares.f fx_work631 heavy)" "$tot")
    m=$(pct "$(fsum $T/shares.f fx_work631 medium)" "$tot")
    l=$(pct "$(fsum $T/shares.f fx_work631 light)" "$tot")
    if [ "$tot" -ge 500 ] && within "$h" 60 6 && within "$m" 30 5 && within "$l" 10 4 &&
        totals_ok $T/shares.f $T/shares.e; then
        result shares PASS "$tot samples: heavy $h% medium $m% light $l%"
    else
        result shares FAIL "$tot samples: heavy $h% medium $m% light $l% (want 60/30/10); out $(fall $T/shares.f) vs $(samples $T/shares.e) - $(summary $T/shares.e ' lost') lost"
        show $T/shares.e
    fi
    # 2. A steady workload has a handful of hot stacks: identical stacks
    #    must share one id (in-kernel aggregation) on every kernel. Without
    #    it every sample is its own stack (1512 samples, 1512 stacks).
    #    Start-up and interrupt stacks are rare, so the few worker stacks
    #    hold nearly all samples and unique stacks stay a small fraction.
    n=$(samples $T/shares.e)
    u=$(summary $T/shares.e " unique stacks")
    us=$(ustored $T/shares.e)
    cached=$(awk '/user stacks from the cache/ { print $NF }' $T/shares.e)
    hot=$(awk '{ print $NF }' $T/shares.f | sort -n | tail -3 | awk '{ s += $1 } END { print s + 0 }')
    if [ -n "$u" ] && [ -n "$us" ] && [ $((u * 10)) -le "$n" ] && [ $((us * 10)) -le "$n" ] &&
        [ $((hot * 100)) -ge $((n * 90)) ]; then
        result aggregation PASS "$n samples: $u unique stacks, $us user stacks stored, top 3 hold $(pct "$hot" "$n")%, $cached from the per-CPU stack memo"
    else
        result aggregation FAIL "$n samples: $u unique stacks, $us user stacks stored, top 3 hold $(pct "$hot" "$n")% (want <= 10% and >= 90%)"
        show $T/shares.e
        awk '{ print $NF, $0 }' $T/shares.f | sort -n | tail -20 | cut -c1-300
    fi
else
    refused shares $T/shares.e
    refused aggregation $T/shares.e
fi

# 2b. The raw-stack cache works on every kernel (the kernel's layout
#     generation, or bprof's own on 6.1 to 6.3) and goes stale with the
#     layout: two libraries swapped in and out at one address must each
#     keep their own names, although their raw stacks are the same.
# (--call-graph fp: the cache saves the kernel's build-ID walk of a
# frame-pointer stack; dwarf walks write build-ID records themselves.)
if $B -F 499 -f -v --call-graph fp -- $FX/fx_dlswap 0.3 4 $FX/libdl_alpha.so $FX/libdl_beta.so >$T/swap.f 2>$T/swap.e; then
    tot=$(fsum $T/swap.f fx_dlswap)
    a=$(fsum $T/swap.f fx_dlswap alpha_spin)
    b=$(fsum $T/swap.f fx_dlswap beta_spin)
    bases=$(awk '$1 ~ /libdl_/ { print $2 }' $T/swap.e | sort -u | wc -l)
    cached=$(awk '/user stacks from the cache/ { print $NF }' $T/swap.e)
    if [ "$tot" -ge 200 ] && [ "$bases" -eq 1 ] && [ $((a * 100)) -gt $((tot * 35)) ] &&
        [ $((b * 100)) -gt $((tot * 35)) ] && [ -n "$cached" ] && [ $((cached * 2)) -ge "$tot" ] &&
        totals_ok $T/swap.f $T/swap.e; then
        result cache PASS "$tot samples, $cached user stacks from the cache; alpha_spin $a, beta_spin $b at one address"
    else
        result cache FAIL "$tot samples, '$cached' from the cache (want >= half); alpha_spin $a, beta_spin $b (want > 35% each); $bases load addresses (want 1)"
        show $T/swap.e
    fi
else
    refused cache $T/swap.e
fi

# 2c. A 32-bit task: its syscalls (compat) never reach the syscalls
#     tracepoints, so on kernels without mm_lock_seq (6.1 to 6.3) bprof's
#     generation cannot see its mmaps and its raw stacks must not be cached;
#     the kernel's own generation (6.4 on) covers it like any task.
if [ -x $FX/fx_spin32 ]; then
    if $B -F 999 -f -v --call-graph fp -- $FX/fx_spin32 >$T/s32.f 2>$T/s32.e; then
        tot=$(fsum $T/s32.f fx_spin32)
        s=$(fsum $T/s32.f fx_spin32 spin32)
        cached=$(awk '/user stacks from the cache/ { print $NF }' $T/s32.e)
        # Uncached on 6.1, its frame-pointer stacks still share ids by
        # content: the aggregation the issue found missing on 6.1.
        u=$(summary $T/s32.e " unique stacks")
        kv=$(uname -r | awk -F. '{ print $1 * 1000 + $2 }')
        if [ "$kv" -lt 6004 ]; then
            want="none from the cache"
            cache_ok=$([ "$cached" = 0 ] && echo y)
        else
            want="at least half from the cache"
            cache_ok=$([ -n "$cached" ] && [ $((cached * 2)) -ge "$tot" ] && echo y)
        fi
        if [ "$tot" -ge 300 ] && [ $((s * 10)) -ge $((tot * 9)) ] && [ "$cache_ok" = y ] &&
            [ -n "$u" ] && [ $((u * 10)) -le "$tot" ] &&
            totals_ok $T/s32.f $T/s32.e; then
            result compat PASS "$tot samples, $u unique stacks, $(pct "$s" "$tot")% in spin32, $cached from the cache ($want)"
        else
            result compat FAIL "$tot samples, '$u' unique stacks (want <= 10%), $s in spin32 (want >= 90%), '$cached' from the cache (want $want)"
            show $T/s32.e
        fi
    else
        refused compat $T/s32.e
    fi
fi

# 3. -- CMD: bprof exits with the command's status.
$B -F 99 -f -- sh -c 'exit 3' >$T/cmd.f 2>$T/cmd.e
rc=$?
if [ "$rc" -eq 3 ]; then
    result command PASS "exit status 3 passed through"
else
    refused command $T/cmd.e
fi

# 4. -p: only the given process, whole stacks.
# The targets of -p and --filter outlive bprof and are killed after it:
# under TCG bprof takes seconds to start (the verifier is emulated too), and
# a target that ended early left a profile of nothing (6.1: 0 samples).
# 2 s at 499 Hz is ~1000 samples; TCG's timers lose up to half of them, so
# at least 300: a profile cut short by its target fails.
$FX/fx_work631 60 &
wp=$!
sleep 0.5
if $B -F 499 -f -p $wp 2 >$T/pid.f 2>$T/pid.e; then
    tot=$(fall $T/pid.f)
    mine=$(fsum $T/pid.f fx_work631)
    h=$(fsum $T/pid.f fx_work631 heavy)
    if [ "$tot" -ge 300 ] && [ "$mine" -eq "$tot" ] && [ "$h" -gt $((tot / 3)) ] &&
        totals_ok $T/pid.f $T/pid.e; then
        result pid PASS "$tot samples, all of fx_work631, heavy $h"
    else
        result pid FAIL "$tot samples, $mine of fx_work631, heavy $h"
        show $T/pid.e
    fi
else
    refused pid $T/pid.e
fi
kill $wp 2>/dev/null
wait $wp 2>/dev/null

# 5. --filter: a tid test drops the other thread in the kernel.
$FX/fx_threads 60 >$T/threads.out &
tp=$!
sleep 0.5
alpha=$(awk '$1 == "alpha" { print $2 }' $T/threads.out)
if [ -n "$alpha" ] && $B -F 499 -f -p $tp --filter "tid == $alpha" 2 >$T/filter.f 2>$T/filter.e; then
    # The fixture names its threads: their comm is the first frame.
    tot=$(fall $T/filter.f)
    a=$(fsum $T/filter.f alpha alpha_spin)
    b=$(fsum $T/filter.f beta)
    if [ "$tot" -ge 300 ] && [ "$b" -eq 0 ] && [ "$a" -gt $((tot * 9 / 10)) ] &&
        totals_ok $T/filter.f $T/filter.e; then
        result filter PASS "$tot samples: alpha_spin $a, thread beta $b"
    else
        result filter FAIL "$tot samples: alpha_spin $a, thread beta $b (want only alpha)"
        show $T/filter.e
    fi
else
    [ -n "$alpha" ] || echo "no alpha tid in the fixture's output" >$T/filter.e
    refused filter $T/filter.e
fi
kill $tp 2>/dev/null
wait $tp 2>/dev/null

# 6. --off-cpu: spinsleep blocks half its time, all of it in sleep_phase.
if $B --off-cpu -f -v -- $FX/fx_spinsleep 3 >$T/off.f 2>$T/off.e; then
    tot=$(fsum $T/off.f fx_spinsleep)
    s=$(fsum $T/off.f fx_spinsleep sleep_phase)
    # ~1.5 s blocked, in microseconds.
    # Its totals are microseconds, not the block count: check nothing was lost.
    if [ "$tot" -ge 800000 ] && [ "$tot" -le 3000000 ] && [ "$s" -gt $((tot * 9 / 10)) ] &&
        [ "$(summary $T/off.e ' lost')" = 0 ]; then
        result offcpu PASS "$tot us blocked, $(pct "$s" "$tot")% in sleep_phase"
    else
        result offcpu FAIL "$tot us blocked, $s us in sleep_phase (want ~1.5 s, >90%)"
        show $T/off.e
    fi
else
    refused offcpu $T/off.e
fi

# 7. bprof stat: spinsleep spins part of its 2 s (~0.5 s here), switching ~200 times.
if $B stat -x , -e task-clock,context-switches -- $FX/fx_spinsleep 2 >$T/stat.out 2>$T/stat.e; then
    # perf's CSV: value,unit,event,...; the value may sit on stdout or stderr.
    cat $T/stat.out $T/stat.e >$T/stat.all
    tc=$(awk -F, '$3 == "task-clock" { printf "%d", $1 }' $T/stat.all)
    cs=$(awk -F, '$3 == "context-switches" { printf "%d", $1 }' $T/stat.all)
    if [ -n "$tc" ] && [ "$tc" -ge 200 ] && [ "$tc" -le 1600 ] && [ -n "$cs" ] && [ "$cs" -ge 50 ]; then
        result stat PASS "task-clock $tc ms, $cs context switches"
    else
        result stat FAIL "task-clock '$tc' ms, '$cs' context switches (want 200..1600 ms, >= 50)"
        show $T/stat.all
    fi
else
    refused stat $T/stat.e
fi

# 8. The .eh_frame unwinder, where this build has it: a chain of -O2
#    functions without frame pointers into a library through the PLT must
#    be walked whole, as on the development kernel; the command's program,
#    ld.so and libraries are learned at its exec and mmaps (raw tracepoints).
if [ -x $FX/fx_unwind ]; then
    # A first, short profile builds and keeps the program's and the
    # library's tables (libc's and ld.so's are kept already): the profile
    # judged then loads them at exec and mmap from the per-boot cache, so
    # that what it judges is the walk, not how long a starved guest takes to
    # parse ELF files (until a table is in place, the leaf is all a sample
    # has: `[truncated];lib_spin`).
    $B -F 99 -o /dev/null -- $FX/fx_unwind plt 0.2 >/dev/null 2>&1 || true
    if $B -F 999 -f -v -- $FX/fx_unwind plt 6 >$T/unwind.f 2>$T/unwind.e; then
        tot=$(fsum $T/unwind.f fx_unwind)
        # Whole stacks: main, the chain's end and the library's leaf, among
        # the samples in the leaf (named from the sampled address, walked or
        # not). The rest of the program (its clock reads, which are
        # syscalls where the guest's clock source is not the TSC) varies
        # with the host and is left out. A sample taken before the
        # library's table was in place has its leaf alone
        # (`[truncated];lib_spin`): that is the guest's speed, not the walk,
        # and is judged apart: at most a fifth of them (one host thread for
        # both vCPUs, see kernel-matrix.sh, makes that wait uneven).
        counts=$(awk '$0 ~ /;lib_spin( |;)/ { s += $NF; if ($0 ~ /;main;/ && $0 ~ /;chain8;/) w += $NF }
            $1 == "fx_unwind;[truncated];lib_spin" { l += $NF }
            END { print s + 0, w + 0, l + 0 }' $T/unwind.f)
        spin=$(echo "$counts" | cut -d' ' -f1)
        whole=$(echo "$counts" | cut -d' ' -f2)
        leaf=$(echo "$counts" | cut -d' ' -f3)
        walked=$((spin - leaf))
        early=$(sed -n "s/.* and \([0-9]*\) at a target's mmap or exec.*/\1/p" $T/unwind.e)
        built=$(grep -o "built in [0-9]* ms from [^;]*" $T/unwind.e || true)
        if [ "$tot" -ge 500 ] && [ $((spin * 2)) -ge "$tot" ] && [ $((leaf * 5)) -le "$spin" ] &&
            [ $((whole * 100)) -ge $((walked * 95)) ] &&
            [ "${early:-0}" -ge 3 ] && totals_ok $T/unwind.f $T/unwind.e; then
            result unwind PASS "$tot samples, $spin in lib_spin, $leaf before its table; $(pct "$whole" "$walked")% of the rest walked main..chain8..lib_spin, ${early} mappings learned at exec and mmap, tables $built"
        else
            result unwind FAIL "$tot samples, $spin in lib_spin (want >= half), $leaf before its table (want <= a fifth), $whole of the rest walked main..chain8..lib_spin (want >= 95%), ${early:-no} mappings learned at exec and mmap (want >= 3)"
            show $T/unwind.e
            awk '{ print $NF, $0 }' $T/unwind.f | sort -n | tail -8 | cut -c1-300
            awk '$0 ~ /;lib_spin( |;)/ && !($0 ~ /;main;/ && $0 ~ /;chain8;/) { print $NF, $0 }' $T/unwind.f | sort -n | tail -12 | cut -c1-400
        fi
    else
        refused unwind $T/unwind.e
    fi
fi

# 8b. --every: on-CPU counts wait in per-CPU count caches, which a program
#     run on each CPU (BPF_PROG_TEST_RUN) empties into the count map before
#     each drain, so a sample lands in the interval it was taken in. Two
#     phases, one after the other: manystacks (hundreds of new keys a
#     second, more than one run of the program can insert), then work631.
#     Once an interval holds work631, manystacks has ended and its samples
#     were flushed with that interval: no later interval may hold any. An
#     unflushed cache keeps its keys until the end, the last interval.
#     (TCG is too slow and uneven to judge an interval by its length: a
#     drain there can take seconds. What is asked is an interval after the
#     one work631 began in; it runs 10 s for that: a drain under a busy
#     host has taken 7.)
if $B -F 999 -v --every 1 -o "$T/iv.%n.f" -- sh -c "$FX/fx_manystacks 3 1 10; exec $FX/fx_work631 10" >/dev/null 2>$T/iv.e; then
    n=$(samples $T/iv.e)
    lost=$(summary $T/iv.e " lost")
    runs=$(sed -n 's/.* emptied into them in \([0-9]*\) runs.*/\1/p' $T/iv.e)
    files=ok
    order=""
    seen=""
    last=""
    k=0
    tms=0
    for f in $(ls $T/iv.*.f | sort); do
        k=$((k + 1))
        i=$(basename "$f" .f | sed 's/^iv\.0*//')
        want=$(awk -v i="$i" '$2 == "interval" && $3 == i ":" { print $(NF - 3) }' $T/iv.e)
        [ "$(fall "$f")" = "$want" ] || files="interval $i: file $(fall "$f"), line $want"
        ms=$(fsum "$f" fx_manystacks)
        wk=$(fsum "$f" fx_work631)
        [ -n "$seen" ] && [ "$ms" -gt 0 ] && order="${order}interval $i: $ms manystacks samples after work631 began in $seen; "
        [ -z "$seen" ] && [ "$wk" -gt 0 ] && seen="interval $i"
        tms=$((tms + ms))
        last="interval $i"
    done
    out=$(cat $T/iv.*.f | awk '{ s += $NF } END { print s + 0 }')
    if [ -n "$n" ] && [ -n "$seen" ] && [ "$seen" != "$last" ] && [ "$tms" -gt 0 ] && [ -z "$order" ] && [ "$files" = ok ] && [ "${runs:-0}" -gt 0 ] && [ "$out" -eq $((n - lost)) ]; then
        result intervals PASS "$n samples in $k intervals, none after its phase; work631 from $seen; caches emptied in $runs runs"
    else
        result intervals FAIL "${order}$k intervals, work631 from '${seen}' (want one after it), $tms manystacks; files: $files; caches emptied in ${runs:-no} runs; out $out vs $n - $lost lost"
        show $T/iv.e
    fi
else
    refused intervals $T/iv.e
fi

# 9. No tracefs (last: it unmounts it). bprof's generation (below 6.4)
#    hangs on raw tracepoints, which need none, and from 6.4 the kernel's
#    needs none: either way the cache works, and nothing is said.
umount /sys/kernel/debug/tracing 2>/dev/null
umount /sys/kernel/tracing 2>/dev/null
umount /sys/kernel/debug 2>/dev/null
if $B -F 999 -f -v --call-graph fp -- $FX/fx_work631 3 >$T/nt.f 2>$T/nt.e; then
    tot=$(fsum $T/nt.f fx_work631)
    u=$(summary $T/nt.e " unique stacks")
    cached=$(awk '/user stacks from the cache/ { print $NF }' $T/nt.e)
    said=$(grep -c 'would not attach' $T/nt.e)
    want="silent, at least half from the cache"
    ok=$([ "$said" = 0 ] && [ -n "$cached" ] && [ $((cached * 2)) -ge "$tot" ] && echo y)
    # The default dwarf walk is not cached: no generation wanted, no notice.
    $B -F 99 -f -- true >/dev/null 2>$T/ntd.e
    said_dwarf=$(grep -c 'would not attach' $T/ntd.e)
    [ "$said_dwarf" = 0 ] || { ok=n; want="$want; nothing said for dwarf"; }
    if [ "$tot" -ge 300 ] && [ "$ok" = y ] && [ -n "$u" ] && [ $((u * 10)) -le "$tot" ] &&
        totals_ok $T/nt.f $T/nt.e; then
        result notrace PASS "$tot samples, $u unique stacks, $cached from the cache ($want)"
    else
        result notrace FAIL "$tot samples, '$u' unique stacks (want <= 10%), '$cached' from the cache, notice $said times, $said_dwarf for dwarf (want $want)"
        show $T/nt.e
    fi
else
    refused notrace $T/nt.e
fi
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null

# Last: nothing above made the kernel warn (a WARN taints it; on a machine
# booted with panic_on_warn it is a panic). The console shows errors only:
# the warning itself comes from dmesg.
taint=$(cat /proc/sys/kernel/tainted)
if [ "$taint" = "$taint0" ]; then
    result taint PASS "taint $taint before and after"
else
    result taint FAIL "taint $taint0 before, $taint after: $(dmesg | grep -m1 -e 'WARNING:' -e 'BUG:' | sed 's/^\[[^]]*\] //')"
    dmesg | grep -A12 -m3 -e 'WARNING:' -e 'BUG:' | sed 's/^/  dmesg: /'
fi

echo "KMX-DONE"

#!/usr/bin/env bash
# Boots Debian's own kernels under qemu (TCG: no KVM needed) with an
# initramfs holding busybox, bprof and its fixtures, runs the smoke suite
# (scripts/kmatrix-guest.sh) in each, and prints a kernel x check table.
#
#   scripts/kernel-matrix.sh [SERIES...]     SERIES: 6.1 (default), 6.12, 5.10, all
#
# Each series is the newest linux-image-<series>*-cloud-amd64-unsigned the
# configured apt sources offer (the next older when the mirror does not
# serve it), or else that its Debian release (5.10: bullseye, 6.1 and 6.12:
# bookworm) offers from the same mirrors; a series named that none offers
# fails. "all" is every series apt has. Packages
# and extracted kernels are cached in $BPROF_KMATRIX_CACHE (default
# /var/cache/bprof-kmatrix, root-owned: see SECURITY.md). Full guest logs go
# to target/kmatrix/. A check is PASS, FAIL, or NOFEAT: bprof refused to
# load and named the kernel features missing (what it must do on a kernel
# too old for it). Exits non-zero unless every check of every kernel
# passed: a NOFEAT fails too, as every kernel from 5.10 on has a fallback
# for each feature bprof uses. A guest whose
# user space is silent for 200 s has frozen (every bprof run in it is cut
# at 130 s): where its CPUs were (registers, and the stack of an NMI the
# guest panics on) is printed, and that kernel boots once more; the table
# is the second boot's and the output keeps the freeze.
# BPROF_KMATRIX_BIN=PATH boots that bprof instead of building one (CI has
# built it). Run as root
# (apt); it profiles only inside the guests, but those take CPU: take
# /tmp/bprof-tests.lock on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "kernel-matrix: run as root (it installs qemu and fetches kernel packages)" >&2
    exit 1
fi

series=("$@")
[ "${#series[@]}" -gt 0 ] || series=(6.1)
# A series named (CI names its own) must boot; of "all", those apt has.
named=1
if [ "${series[0]}" = all ]; then
    series=(5.10 6.1 6.12)
    named=0
fi

# qemu and a static busybox (install-deps.sh lists them too; a standalone
# run needs them as well).
need=()
for p in qemu-system-x86 busybox-static; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    echo "kernel-matrix: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The cache holds kernels we boot and run as root: it must be ours alone.
cache=${BPROF_KMATRIX_CACHE:-/var/cache/bprof-kmatrix}
install -d -m 0755 -o root -g root "$cache"
if [ "$(stat -c '%u %a' "$cache")" != "0 755" ] || [ -L "$cache" ]; then
    echo "kernel-matrix: $cache must be a root-owned 0755 directory" >&2
    exit 1
fi

# The machine's apt sources, one entry a line: URI, suite, components and
# keyring (tab-separated), from sources.list and sources.list.d, in the
# one-line format (*.list) and the deb822 one (*.sources).
apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '{ sub(/#.*/, "") }
            $1 == "deb" {
                i = 2; signed = ""
                if ($2 ~ /^\[/) {
                    for (; i <= NF; i++) {
                        if ($i ~ /^\[?signed-by=/) { signed = $i; sub(/^\[?signed-by=/, "", signed); sub(/\]$/, "", signed) }
                        if ($i ~ /\]$/) { i++; break }
                    }
                }
                comps = ""
                for (j = i + 2; j <= NF; j++) comps = comps (comps == "" ? "" : " ") $j
                print $i "\t" $(i + 1) "\t" comps "\t" signed
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # Paragraphs; a line starting with a blank continues the field before.
        awk 'BEGIN { RS = ""; FS = "\n" }
            {
                delete v; key = ""
                for (n = 1; n <= NF; n++) {
                    line = $n
                    if (line ~ /^#/) continue
                    if (line ~ /^[ \t]/ && key != "") { v[key] = v[key] "\n" line; continue }
                    c = index(line, ":"); if (c == 0) continue
                    key = tolower(substr(line, 1, c - 1))
                    val = substr(line, c + 1); sub(/^[ \t]+/, "", val); sub(/[ \t]+$/, "", val)
                    v[key] = val
                }
                if (tolower(v["enabled"]) == "no" || (" " v["types"] " ") !~ / deb /) next
                signed = (v["signed-by"] ~ /^\//) ? v["signed-by"] : ""
                nu = split(v["uris"], uris, /[ \t]+/); ns = split(v["suites"], suites, /[ \t]+/)
                for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++)
                    print uris[a] "\t" suites[b] "\t" v["components"] "\t" signed
            }' "$f"
    done
}

# One-line sources for Debian release SUITE, on the machine's own mirrors:
# each source of the machine's release (its suite, -updates, -security)
# moved to SUITE.
sources_for() {
    local want=$1 have uri suite comps signed
    have=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$have" ] || return 0
    apt_entries | while IFS=$'\t' read -r uri suite comps signed; do
        case "$suite" in
        "$have") suite=$want ;;
        "$have"-*) suite=$want-${suite#"$have"-} ;;
        *) continue ;;
        esac
        echo "deb ${signed:+[signed-by=$signed] }$uri $suite $comps"
    done | sort -u
}

# apt-get or apt-cache (then its arguments) on a private apt state in the
# cache that reads Debian release SUITE, leaving the system's sources alone.
suite_apt() {
    local suite=$1 tool=$2 dir=$cache/apt-$1
    shift 2
    local opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
        -o "Dir::State::Lists=$dir/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
    mkdir -p "$dir/lists/partial"
    sources_for "$suite" >"$dir/sources.list.new"
    if [ ! -s "$dir/sources.list.new" ]; then
        echo "kernel-matrix: no Debian source in the apt configuration to read $suite from" >&2
        return 1
    fi
    if ! cmp -s "$dir/sources.list.new" "$dir/sources.list" ||
        [ -z "$(find "$dir/lists" -maxdepth 1 -name '*Packages*' -mtime -7)" ]; then
        mv "$dir/sources.list.new" "$dir/sources.list"
        apt-get "${opts[@]}" update -qq >/dev/null 2>&1 || return 1
    fi
    rm -f "$dir/sources.list.new"
    "$tool" "${opts[@]}" "$@"
}

# The Debian release that ships each series.
declare -A suite_of=([5.10]=bullseye [6.1]=bookworm [6.12]=bookworm)

# Sets pkgs to the kernel packages of a series, newest first (at most 8),
# or to nothing if apt has none; where each comes from (plain: the system's
# apt; else the Debian release read by suite_apt) goes into apt_of[pkg]. A
# mirror may list a security update it does not serve: the next is tried.
declare -A apt_of
series_pkgs() {
    local re from=plain
    case "$1" in
    6.1) re='^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$' ;;
    5.10) re='^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$' ;;
    *) re="^linux-image-${1//./\\.}\\.[0-9]+\\+deb[0-9]+-cloud-amd64-unsigned\$" ;;
    esac
    mapfile -t pkgs < <(apt-cache pkgnames linux-image- 2>/dev/null | { grep -E "$re" || true; } | sort -rV | head -8)
    local suite=${suite_of[$1]:-}
    if [ "${#pkgs[@]}" -eq 0 ] && [ -n "$suite" ]; then
        mapfile -t pkgs < <(suite_apt "$suite" apt-cache pkgnames linux-image- 2>/dev/null | { grep -E "$re" || true; } | sort -rV | head -8)
        from=$suite
    fi
    local p
    for p in "${pkgs[@]}"; do apt_of[$p]=$from; done
}

# Extracts the package's vmlinuz into the cache; prints its path.
kernel_of() {
    local pkg=$1 dir="$cache/$1"
    if ! ls "$dir"/boot/vmlinuz-* >/dev/null 2>&1; then
        if [ "${apt_of[$pkg]}" = plain ]; then
            (cd "$cache" && apt-get download -q "$pkg" >/dev/null 2>&1) || return 1
        else
            (cd "$cache" && suite_apt "${apt_of[$pkg]}" apt-get download -q "$pkg" >/dev/null 2>&1) || return 1
        fi
        local deb
        deb=$(ls -t "$cache/${pkg}"_*.deb | head -1)
        rm -rf "$dir.tmp"
        mkdir "$dir.tmp"
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir.tmp" ./boot
        rm -rf "$dir"
        mv "$dir.tmp" "$dir"
        rm -f "$deb"
    fi
    ls "$dir"/boot/vmlinuz-* | head -1
}

# A fresh machine may have no package lists yet.
if [ -z "$(apt-cache pkgnames linux-image- 2>/dev/null | head -1)" ]; then
    apt-get update -qq
fi

kernels=()
for s in "${series[@]}"; do
    series_pkgs "$s"
    if [ "${#pkgs[@]}" -eq 0 ]; then
        if [ "$named" = 1 ]; then
            echo "kernel-matrix: no linux-image for $s in the apt sources" >&2
            exit 1
        fi
        echo "kernel-matrix: no linux-image for $s in the apt sources, skipped" >&2
        continue
    fi
    k=
    for pkg in "${pkgs[@]}"; do
        k=$(kernel_of "$pkg") && break
        k=
        echo "kernel-matrix: apt-get download $pkg failed" >&2
    done
    [ -n "$k" ] || exit 1
    kernels+=("$k")
done
if [ "${#kernels[@]}" -eq 0 ]; then
    echo "kernel-matrix: no kernel to boot" >&2
    exit 1
fi

# --- The initramfs: busybox, bprof and its libraries, the fixtures. --------
bin=${BPROF_KMATRIX_BIN:-}
if [ -z "$bin" ]; then
    cargo build -q
    bin=target/debug/bprof
fi
out=target/kmatrix
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,run,etc,bprof/fx}
cp /bin/busybox "$root/bin/busybox"
# Debug info is for bprof's developers, not for the guest: 10x smaller.
strip --strip-debug -o "$root/bprof/bprof" "$bin"
for f in work631 spinsleep threads dlswap manystacks; do
    gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$root/bprof/fx/fx_$f" "fixtures/$f.c" -ldl
done
# Two libraries the dlswap fixture maps in turn at one address.
for n in alpha beta; do
    gcc -O1 -g -fno-omit-frame-pointer -shared -fPIC -DSPIN=${n}_spin \
        -o "$root/bprof/fx/libdl_$n.so" fixtures/dlswap_lib.c
done
# The unwinder's fixture, where this tree has it: -O2 without frame
# pointers, calling into a library through the PLT.
if [ -f fixtures/unwind.c ]; then
    gcc -O2 -g -fomit-frame-pointer -shared -fPIC -o "$root/bprof/fx/libfx_unwind.so" fixtures/unwind_lib.c
    gcc -O2 -g -fomit-frame-pointer -o "$root/bprof/fx/fx_unwind" fixtures/unwind.c \
        -L"$root/bprof/fx" -lfx_unwind -Wl,-rpath,/bprof/fx
fi
# A 32-bit task without libc (no i386 libc needed): gcc and binutils build
# it; the compat check is never dropped.
if ! gcc -m32 -nostdlib -static -no-pie -fno-pic -O1 -g -fno-omit-frame-pointer \
    -o "$root/bprof/fx/fx_spin32" fixtures/spin32.c; then
    echo "kernel-matrix: gcc -m32 cannot build fixtures/spin32.c (the compat check needs it)" >&2
    exit 1
fi
cp scripts/kmatrix-guest.sh "$root/bprof/smoke.sh"
# Debugging: BPROF_KMATRIX_EXTRA=FILE runs that shell script in each guest
# after the suite (its output lands in the log).
if [ -n "${BPROF_KMATRIX_EXTRA:-}" ]; then
    cp "$BPROF_KMATRIX_EXTRA" "$root/bprof/extra.sh"
fi
# Shared libraries at the paths the dynamic loader looks for them.
for bin in "$root"/bprof/bprof "$root"/bprof/fx/fx_*; do
    # (ldd fails on a static fixture: it has no libraries)
    LD_LIBRARY_PATH=$root/bprof/fx ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' || true
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# /lib64 -> usr/lib64 style links, as on the host.
for l in /lib /lib64; do
    if [ -L "$l" ] && [ ! -e "$root$l" ]; then
        ln -s "$(readlink "$l")" "$root$l"
    fi
done
cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mkdir -p /run && mount -t tmpfs run /run
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo 0 >/proc/sys/kernel/kptr_restrict
# The suite takes ~1 min: one still running at 400 s is stuck, so the
# blocked tasks' and the CPUs' stacks go to the log before the host's
# timeout (600 s) ends the boot.
echo 30 >/proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
(sleep 400; echo w >/proc/sysrq-trigger; echo l >/proc/sysrq-trigger) &
sh /bprof/smoke.sh 2>&1
[ -f /bprof/extra.sh ] && sh /bprof/extra.sh 2>&1
poweroff -f
EOF
chmod 0755 "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"$work/initrd.gz"

# --- Boot each kernel. --------------------------------------------------------
checks=(shares aggregation cache command pid filter offcpu stat compat)
[ -f fixtures/unwind.c ] && checks+=(unwind)
checks+=(intervals)
checks+=(notrace taint)
declare -A res detail froze
names=()
fail=0

# Where a frozen guest's CPUs are: qemu's registers of each (Debian ships
# no System.map to name them; the guest boots without KASLR so they compare
# across boots), then an NMI, on which the guest panics (unknown_nmi_panic)
# with the stack of the CPU it lands on in the serial log. Arg: the monitor.
where_frozen() {
    python3 - "$1" <<'PY' 2>&1 || true
import re, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
def ask(cmd, wait):
    s.sendall((cmd + "\n").encode())
    time.sleep(wait)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    return out.decode(errors="replace")
regs = ask("info registers -a", 3)
for cpu, rip in enumerate(re.findall(r"RIP=([0-9a-f]+)", regs)):
    print("CPU %d at %s" % (cpu, rip))
ask("nmi", 10)
PY
}

# Boots kernel $1 with its serial console to $2. A guest whose user space
# is silent for 200 s (each bprof run in it is cut at 130 s) has frozen:
# where its CPUs were goes to $2.frozen and the boot ends; so does one
# still running at 600 s.
boot() {
    local k=$1 log=$2 mon=$work/monitor.$(basename "$2") qpid size last=-1 quiet=0 t0
    t0=$(date +%s)
    rm -f "$mon" "$log.frozen"
    # TCG: KVM is not usable in nested VMs; 2 CPUs exercise the per-CPU paths,
    # run by one host thread (thread=single). With a thread each, a vCPU can
    # keep running its translated copy of an int3 the kernel put while
    # patching its text (tracepoints turned on and off as bprof attaches)
    # after another vCPU removed it: the kernel's handler backs up to the
    # instruction, which runs the stale int3 again, with interrupts off,
    # while the patching CPU waits for it. Seen as a soft lockup in bprof's
    # attach and the other CPU looping in exc_int3 at __schedule.
    # loglevel 4: the kernel's errors (a hung task, a soft lockup) reach the log.
    qemu-system-x86_64 -accel tcg,thread=single -cpu max -smp 2 -m 1024 \
        -nographic -no-reboot -nic none -monitor "unix:$mon,server,nowait" -serial stdio \
        -kernel "$k" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off nokaslr unknown_nmi_panic=1" \
        </dev/null >"$log" 2>&1 &
    qpid=$!
    while kill -0 "$qpid" 2>/dev/null; do
        sleep 5
        # Progress is user space's output: a stuck kernel keeps printing.
        size=$(grep -cv '^\[' "$log" || true)
        if [ "$size" = "$last" ]; then quiet=$((quiet + 5)); else quiet=0 last=$size; fi
        if [ "$quiet" -ge 200 ] || [ $(($(date +%s) - t0)) -ge 600 ]; then
            { [ "$quiet" -ge 200 ] && echo "silent for 200 s" || echo "still running at 600 s"
              where_frozen "$mon"; } >"$log.frozen"
            break
        fi
    done
    kill "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
    tr -d '\r' <"$log" >"$log.tmp" && mv "$log.tmp" "$log"
}

# Boots kernel $1 (named $2), once more if it froze: a frozen guest is
# reported with where its CPUs were, and the table is the second boot's,
# the freeze staying in the output (and in $log.froze, for the table).
run_kernel() {
    local k=$1 name=$2 log=$out/$2.log start after note
    echo "kernel-matrix: booting $name (log: $log)" >&2
    start=$(date +%s)
    rm -f "$log.froze"
    boot "$k" "$log"
    if [ -s "$log.frozen" ]; then
        after=$(grep '^KMX|' "$log" | tail -1 | cut -d'|' -f2)
        note="$(head -1 "$log.frozen") after check ${after:-(none)}: $(grep '^CPU' "$log.frozen" | paste -sd';' -)"
        echo "$note" >"$log.froze"
        echo "kernel-matrix: $name $note; its last lines:" >&2
        tail -60 "$log" | sed 's/^/  | /' >&2
        sed 's/^/  > /' "$log.frozen" >&2
        mv "$log" "$log.first"
        mv "$log.frozen" "$log.first.frozen"
        echo "kernel-matrix: booting $name again (log: $log)" >&2
        boot "$k" "$log"
    fi
    echo "kernel-matrix: $name took $(($(date +%s) - start)) s" >&2
}

# The guests boot side by side, one per host CPU: each is one host thread
# (thread=single), so the matrix takes its slowest kernel's time, not their
# sum.
for k in "${kernels[@]}"; do
    name=$(basename "$k" | sed 's/^vmlinuz-//')
    names+=("$name")
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
    run_kernel "$k" "$name" &
done
wait

for k in "${kernels[@]}"; do
    name=$(basename "$k" | sed 's/^vmlinuz-//')
    log=$out/$name.log
    [ ! -s "$log.froze" ] || froze[$name]=$(cat "$log.froze")
    grep -q '^KMX-DONE' "$log" || {
        echo "kernel-matrix: $name did not finish the suite (see $log); its last lines:" >&2
        tail -80 "$log" | sed 's/^/  | /' >&2
        [ ! -s "$log.frozen" ] || sed 's/^/  > /' "$log.frozen" >&2
        fail=1
    }
    for c in "${checks[@]}"; do
        line=$(grep "^KMX|$c|" "$log" | head -1 || true)
        if [ -z "$line" ]; then
            res[$name,$c]=MISSING
            detail[$name,$c]=""
            fail=1
        else
            IFS='|' read -r _ _ st dt <<<"$line"
            res[$name,$c]=$st
            detail[$name,$c]=$dt
            [ "$st" = PASS ] || fail=1
        fi
    done
done

# --- The table. -------------------------------------------------------------
printf '%-28s' kernel
for c in "${checks[@]}"; do printf ' %-11s' "$c"; done
echo
for n in "${names[@]}"; do
    printf '%-28s' "$n"
    for c in "${checks[@]}"; do printf ' %-11s' "${res[$n,$c]}"; done
    echo
done
for n in "${names[@]}"; do
    echo "$n:${froze[$n]:+ (first boot ${froze[$n]})}"
    for c in "${checks[@]}"; do printf '  %-12s %s\n' "$c" "${detail[$n,$c]}"; done
done
exit "$fail"

#!/usr/bin/env bash
# Installs the system packages bprof needs to build and test (Debian/Ubuntu,
# as root): clang for the BPF objects, libelf/zlib/pkg-config for libbpf-sys,
# bpftool and perf for the tests' cross-checks, binutils and debuginfod
# for the symbolization tests, golang-go for go tool pprof reading --pprof
# output, qemu and a static busybox for the kernel matrix
# (scripts/kernel-matrix.sh), tmux for the `bprof top` terminal tests,
# python3 for the unwinder benchmark (scripts/bench-unwind.sh), jq for
# the benchmarks reading bprof's --stats-json (scripts/longrun.sh, every-rss.sh).
# xz-utils (Debian's xz and liblzma, stripped, without frame pointers) for
# the --call-graph dwarf test of a packaged binary and its library.
# nodejs for the test of a real JIT's perf map (node --perf-basic-prof);
# time (GNU time) for a child's own peak RSS in the JIT tests; py-spy 0.4
# (PyPI) for the Python tests, which compare bprof with it on the same
# runs (scripts/bench-python.sh too).
# python3-venv for the OTLP tests' receiver: a venv (/opt/bprof-test-venv)
# with PyPI's opentelemetry-proto (the official generated classes of the
# profiles signal; 1.45.2 is generated from opentelemetry-proto v1.10.0,
# the release bprof speaks) and grpcio, pinned so the classes stay that
# release's. ca-certificates: the system roots --otlp https trusts.
# Idempotent and quiet; no recommended extras (clang's LLVM development
# files, qemu's GUI), which none of this needs.
#
#   scripts/install-deps.sh [build|test]
#
# build: what compiling bprof needs; test: what the suite, the benchmarks
# and the kernel matrix need besides; both by default. CI installs the
# build part first and the rest while it compiles.
set -euo pipefail
build=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc binutils)
test=(bpftool linux-perf util-linux debuginfod golang-go qemu-system-x86 busybox-static tmux xz-utils
    python3 python3-venv ca-certificates jq nodejs time)
case "${1:-all}" in
build) pkgs=("${build[@]}") ;;
test) pkgs=("${test[@]}") ;;
all) pkgs=("${build[@]}" "${test[@]}") ;;
*)
    echo "usage: scripts/install-deps.sh [build|test]" >&2
    exit 2
    ;;
esac
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# py-spy through pip: a pyenv's or the system's (Debian's refuses to install
# into the system's Python unless told it may).
if [ "${1:-all}" != build ] && ! command -v py-spy >/dev/null && ! ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/py-spy >/dev/null 2>&1; then
    pip=$(command -v pip3 || command -v pip || true)
    if [ -z "$pip" ]; then
        apt-get install -y -qq python3-pip >/dev/null
        pip=$(command -v pip3)
    fi
    "$pip" install -q 'py-spy>=0.4,<0.5' 2>/dev/null ||
        "$pip" install -q --break-system-packages 'py-spy>=0.4,<0.5'
fi
# bpffs, for tools that pin objects; harmless when already mounted.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
venv=/opt/bprof-test-venv
if [ "${1:-all}" != build ] && ! "$venv/bin/python3" -c 'import grpc, opentelemetry.proto.profiles.v1development.profiles_pb2' 2>/dev/null; then
    echo "installing the OTLP test receiver's packages into $venv" >&2
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check opentelemetry-proto==1.45.2 'grpcio>=1.60'
fi

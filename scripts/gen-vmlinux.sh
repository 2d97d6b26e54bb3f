#!/usr/bin/env bash
# Regenerates bpf/vmlinux.h from the running kernel's BTF (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h

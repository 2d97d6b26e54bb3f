#!/usr/bin/env bash
# The whole test suite: real BPF programs profiling real fixtures, so it must
# run as root on a kernel with BTF.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test.sh: run as root (the tests load BPF programs)" >&2
    exit 1
fi
scripts/install-deps.sh
cargo test "$@"

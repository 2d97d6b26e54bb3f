#!/usr/bin/env bash
# All benchmarks in one command (as root): bprof vs perf on fixed fixture
# work, then symbolization speed. Writes target/bench-report.md too.
# Usage: scripts/bench.sh [cost|slowdown|rss|filter]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --quiet
cargo build --quiet # the symbolization benchmark reads the debug build's DWARF
{
    cargo bench --quiet --bench overhead -- "$@"
    echo '## Symbolization (100,000 unique frames)'
    echo
    echo '```'
    cargo bench --quiet --bench symbolize
    echo '```'
} | tee target/bench-report.md

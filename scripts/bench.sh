#!/usr/bin/env bash
# All benchmarks in one command (as root): bprof vs perf on fixed fixture
# work, symbolization speed, then the unwinder (bench-unwind.sh), bprof top's
# own cost (bench-top.sh) and --every's memory (every-rss.sh). Writes
# target/bench-report.md too.
# Usage: scripts/bench.sh [cost|slowdown|rss|filter|unwind|top|every]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
case "${1:-}" in
unwind) exec scripts/bench-unwind.sh ;;
top) exec scripts/bench-top.sh ;;
every) exec scripts/every-rss.sh ;;
esac
cargo build --release --quiet
cargo build --quiet # the symbolization benchmark reads the debug build's DWARF
{
    cargo bench --quiet --bench overhead -- "$@"
    echo '## Symbolization (100,000 unique frames)'
    echo
    echo '```'
    cargo bench --quiet --bench symbolize
    echo '```'
    if [ $# -eq 0 ]; then
        echo '## --call-graph dwarf'
        scripts/bench-unwind.sh
        echo '## bprof top'
        scripts/bench-top.sh
        echo '## --every memory'
        scripts/every-rss.sh
    fi
} | tee target/bench-report.md

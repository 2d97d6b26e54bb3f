#!/usr/bin/env bash
# The main job, from a fresh machine: install what is needed, build bprof,
# and profile the bundled 6:3:1 fixture into flame.svg (and flame.folded).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --quiet
mkdir -p target/fixtures
gcc -O1 -g -fno-omit-frame-pointer -o target/fixtures/fx_work631 fixtures/work631.c
./target/release/bprof -F 999 --svg flame.svg -o flame.folded -- target/fixtures/fx_work631 3
echo "wrote $(pwd)/flame.svg and flame.folded" >&2

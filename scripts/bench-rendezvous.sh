#!/usr/bin/env bash
# What the elastic rendezvous costs and withstands on this machine's loopback: a config
# that cannot train under --max-restarts 3 (plain, and elastic on 1, 2 and 3 nodes: one
# attempt, every launcher out within 10 s), and a 2-worker job's step time with and
# without 10,000 stranger connections a minute (within 10%). The details are at the top of
# scripts/python/bench_rendezvous.py. Not in CI (a minute or two).
#
#   scripts/bench-rendezvous.sh
#
# Variables: BUILD_DIR (build), STEPS (300), PER_MINUTE (10000), OUT (a folder for the runs;
# default BUILD_DIR/bench-rendezvous).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=${BUILD_DIR:-$root/build}
BUILD_TARGETS="ddp-launch embed-train test-data" BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
exec python3 "$root/scripts/python/bench_rendezvous.py" --bin "$build" \
  --vocab "$root/tests/fixtures/golden/vocab.txt" --train "$build/test-data/train.jsonl" \
  --work "${OUT:-$build/bench-rendezvous}" --steps "${STEPS:-300}" --per-minute "${PER_MINUTE:-10000}"

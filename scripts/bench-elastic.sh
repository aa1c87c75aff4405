#!/usr/bin/env bash
# What an elastic job (ddp-launch --nnodes 2:3) costs when machines come and go, and that
# its model does not change: on three test hosts made of network namespaces (root only),
#   - a campaign of KILLS (20) runs, each killing a host other than the rendezvous' at a
#     drawn step: every run must finish with the uninterrupted run's model; the median
#     time from the kill to the survivors' next trained step;
#   - ARRIVALS (10) runs where a lost host comes back: the median time from its launcher's
#     start to the first step of the round that includes it, the model checked too.
# Not in CI (a few minutes). The details are at the top of scripts/python/bench_elastic.py.
#
#   sudo scripts/bench-elastic.sh
#
# Variables: BUILD_DIR (build), KILLS (20), ARRIVALS (10), STEPS (40), GRACE (--grace, 2),
# SEED (1), OUT (a folder for the runs; default BUILD_DIR/bench-elastic).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=${BUILD_DIR:-$root/build}
python=${DDP_EMBED_PYTHON:-$root/.venv/bin/python}
if [[ $(id -u) -ne 0 ]]; then
  echo "bench-elastic: the test hosts are network namespaces: run as root" >&2
  exit 2
fi
BUILD_TARGETS="ddp-launch embed-train test-data" BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
exec "$python" "$root/scripts/python/bench_elastic.py" --bin "$build" \
  --vocab "$root/tests/fixtures/golden/vocab.txt" --train "$build/test-data/train.jsonl" \
  --work "${OUT:-$build/bench-elastic}" --kills "${KILLS:-20}" --arrivals "${ARRIVALS:-10}" \
  --steps "${STEPS:-40}" --grace "${GRACE:-2}" --seed "${SEED:-1}"

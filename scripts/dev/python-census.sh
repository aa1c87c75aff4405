#!/usr/bin/env bash
# Which Python processes a test run starts and what they cost: runs ctest in build/ (or
# BUILD_DIR) with scripts/dev/python-census/sitecustomize.py loaded by every interpreter,
# then tables the processes by script: count, wall and CPU seconds, and how many imported
# sentence-transformers (6-9 s of CPU each). Fresh interpreters only: the scripts that
# build/test-python's server forks are not (their lines are in build/test-runs/
# reference-server.log); what stays here is what still pays for its imports.
#
#   scripts/dev/python-census.sh [CTEST ARGS...]     e.g. -R 'Reference|Pretrained' -j2
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
log=$(mktemp /tmp/python-census.XXXXXX.jsonl)
(cd "$build" && PYTHONPATH="$root/scripts/dev/python-census${PYTHONPATH:+:$PYTHONPATH}" \
  PYTHON_CENSUS_LOG="$log" ctest "$@") || echo "python-census: ctest failed (the census still counts)" >&2
"$root/.venv/bin/python" - "$log" <<'PY'
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
for r in rows:
    b = by[r["script"]]
    b[0] += 1; b[1] += r["wall"]; b[2] += r["cpu"]; b[3] += r["sentence_transformers"]
print(f"{'script':40} {'runs':>5} {'wall s':>8} {'cpu s':>8} {'with ST':>8}")
for name, (n, wall, cpu, st) in sorted(by.items(), key=lambda kv: -kv[1][2]):
    print(f"{name[:40]:40} {n:5d} {wall:8.1f} {cpu:8.1f} {st:8d}")
print(f"{'all':40} {len(rows):5d} {sum(r['wall'] for r in rows):8.1f} {sum(r['cpu'] for r in rows):8.1f} "
      f"{sum(r['sentence_transformers'] for r in rows):8d}")
PY
rm -f "$log"

# Loaded by every Python interpreter of a run under scripts/dev/python-census.sh (it puts
# this folder on PYTHONPATH): at exit, one JSON line per process into $PYTHON_CENSUS_LOG with
# its script, wall and CPU seconds and which of the heavy libraries it had imported.
import atexit
import json
import os
import sys
import time

_started = time.time()


def _record():
    path = os.environ.get("PYTHON_CENSUS_LOG")
    if not path:
        return
    t = os.times()
    line = {"script": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "-",
            "wall": round(time.time() - _started, 2), "cpu": round(t.user + t.system, 2),
            "sentence_transformers": "sentence_transformers" in sys.modules,
            "transformers": "transformers" in sys.modules, "torch": "torch" in sys.modules}
    try:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
    except OSError:
        pass


atexit.register(_record)

#!/usr/bin/env python3
"""A run's TensorBoard event files, read by TensorBoard's own reader, against metrics.jsonl.

    python scripts/python/tensorboard_check.py RUN_DIR

RUN_DIR/tensorboard/ (output.report_to ["tensorboard"]) is loaded with TensorBoard's
EventAccumulator (which checks every record's CRC). Each tag must be a number of
metrics.jsonl (an object's numbers as "key/name"), every number of metrics.jsonl must be
a tag, each step must appear once per tag, and each value must be metrics.jsonl's (the
last line of that step and key: a resumed run repeats the steps after its checkpoint)
as a float32. Prints what it compared; exit 0 when all holds, 1 otherwise.
"""

import json
import math
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def flatten(prefix, value, out):
    if isinstance(value, bool) or isinstance(value, str):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}/{k}", v, out)
    elif value is None:
        out[prefix] = math.nan
    else:
        out[prefix] = float(value)


def main(run):
    expected = {}  # tag -> step -> value (the last line wins)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            numbers = {}
            for k, v in record.items():
                if k != "step":
                    flatten(k, v, numbers)
            for tag, value in numbers.items():
                expected.setdefault(tag, {})[record["step"]] = value

    acc = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    problems = []
    if tags != set(expected):
        problems.append(f"tags: only in TensorBoard {sorted(tags - set(expected))}, "
                        f"only in metrics.jsonl {sorted(set(expected) - tags)}")
    compared = 0
    for tag in sorted(tags & set(expected)):
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        if len(steps) != len(set(steps)):
            problems.append(f"{tag}: a step twice: {steps}")
        if sorted(steps) != sorted(expected[tag]):
            problems.append(f"{tag}: steps {steps}, metrics.jsonl has {sorted(expected[tag])}")
        for e in events:
            want = np.float32(expected[tag].get(e.step, math.nan))
            got = np.float32(e.value)
            same = (math.isnan(want) and math.isnan(got)) or got == want
            if not same:
                problems.append(f"{tag} step {e.step}: TensorBoard {got}, metrics.jsonl {want}")
            compared += 1
    print(f"{len(tags)} tags, {compared} values compared with metrics.jsonl")
    for p in problems:
        print(p)
    return 0 if compared > 0 and not problems else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))

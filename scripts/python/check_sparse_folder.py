"""A sparse encoder's folder as sentence-transformers reads it, against embed-train's encoding.

    python scripts/python/check_sparse_folder.py DIR ENCODED.jsonl OUT.json

Loads DIR with SparseEncoder(DIR) (as a user would: no arguments), encodes the texts of
ENCODED.jsonl (embed-train encode's output: {"text", "sparse": {"token_id": weight}}) and
writes OUT.json:
  max_abs_diff   the largest |theirs - ours| over every entry of every vector
  max_value      the largest entry (the scale the difference is read against)
  same_support   whether the two agree on which entries are non-zero, where both are
                 above 1e-4 (a tie at 0 may round either way)
  active         their mean number of active entries a text
  modules        the modules SparseEncoder built, by class name
"""
import json
import os
import sys

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from sentence_transformers import SparseEncoder  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    folder, encoded, out = argv
    with open(encoded) as f:
        lines = [json.loads(line) for line in f]
    model = SparseEncoder(folder, device="cpu")
    texts = [line["text"] for line in lines]
    theirs = model.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False).to_dense().float()
    ours = torch.zeros_like(theirs)
    for i, line in enumerate(lines):
        for token, weight in line["sparse"].items():
            ours[i, int(token)] = weight
    both = (theirs > 1e-4) | (ours > 1e-4)
    result = {
        "max_abs_diff": float((theirs - ours).abs().max()),
        "max_value": float(theirs.max()),
        "same_support": bool(((theirs > 0) == (ours > 0))[both].all()),
        "active": float((theirs != 0).sum(1).float().mean()),
        "modules": [type(m).__name__ for m in model],
    }
    with open(out, "w") as f:
        json.dump(result, f)
    print("check_sparse_folder:", json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])

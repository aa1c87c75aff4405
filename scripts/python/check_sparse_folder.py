"""A sparse encoder's folder as sentence-transformers reads it, against embed-train's encoding.

    python scripts/python/check_sparse_folder.py DIR ENCODED.jsonl OUT.json [MAX_ACTIVE_DIMS]

Loads DIR with SparseEncoder(DIR) (as a user would: no arguments), encodes the texts of
ENCODED.jsonl (embed-train encode's output: {"text", "sparse": {"token_id": weight}}), with
encode(max_active_dims=MAX_ACTIVE_DIMS) when given (else the folder's own, if it has one),
and writes OUT.json:
  max_abs_diff   the largest |theirs - ours| over every entry of every vector; with a top k
                 (MAX_ACTIVE_DIMS or the folder's), over the entries both sides kept or both
                 dropped
  swap_excess    with a top k: the entries one side kept and the other dropped (a near-tie
                 at the k-th largest, rounded either way), the largest distance of such an
                 entry from its row's k-th largest weight; 0 when there are none
  max_active     the most non-zero entries a vector has, either side's
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
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    folder, encoded, out = argv[:3]
    asked = int(argv[3]) if len(argv) == 4 else None
    with open(encoded) as f:
        lines = [json.loads(line) for line in f]
    model = SparseEncoder(folder, device="cpu")
    texts = [line["text"] for line in lines]
    theirs = model.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False,
                          max_active_dims=asked).to_dense().float()
    ours = torch.zeros_like(theirs)
    for i, line in enumerate(lines):
        for token, weight in line["sparse"].items():
            ours[i, int(token)] = weight
    both = (theirs > 1e-4) | (ours > 1e-4)
    k = asked if asked is not None else model.max_active_dims
    diff = (theirs - ours).abs()
    swap_excess = 0.0
    if k:
        one_sided = (theirs != 0) ^ (ours != 0)
        if one_sided.any():
            kth = theirs.topk(min(k, theirs.shape[1]), dim=1).values[:, -1:]
            swap_excess = float((torch.maximum(theirs, ours) - kth).abs()[one_sided].max())
        diff = diff.masked_fill(one_sided, 0)
        both = both & ~one_sided
    result = {
        "max_abs_diff": float(diff.max()),
        "swap_excess": swap_excess,
        "max_active": int(max((theirs != 0).sum(1).max(), (ours != 0).sum(1).max())),
        "max_active_dims": k,
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

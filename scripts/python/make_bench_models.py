#!/usr/bin/env python3
"""MiniLM-sized random models of the newer encoders, for the side-by-side benchmark at real
lengths (scripts/bench-vs-st.sh with MODEL=OUT/NAME): what a step costs each system does not
depend on the weights, and no such pretrained weights can be downloaded here.

    python scripts/python/make_bench_models.py FIXTURES OUT

FIXTURES is a build's test-fixtures folder (the tests make it): MPNet's tokenizer comes from
there (its real WordPiece). ModernBERT's and Gemma's are trained here, in their families'
forms (the fixture makers' write_tokenizer and train_tokenizer: a byte-level BPE; a
sentencepiece BPE with byte fallback), with all-MiniLM-L6-v2's 30,522 entries, on the
English text the repository ships apart from the benchmark's own STS-B: the demo's WordNet
pairs and TrecQA's questions and answers (OUT/corpus.txt, 3.1 MB). They cut the STS-B texts
as real vocabularies of that size do: 34.8 and 36.8 tokens a pair with the specials, against
WordPiece's 32.5 (bench-vs-st.sh's "real tokens per pair"). The fixtures' own tokenizers, of
1,000 and 1,500 entries, made 75.

Each model has all-MiniLM-L6-v2's size (hidden 384, 6 layers, intermediate 1536, a 30,522
vocabulary but for MPNet's own) in its family's form, as a sentence-transformers folder
saved by SentenceTransformer.save:

  OUT/mpnet       MPNetModel, 12 heads, 32 relative-position buckets; mean pooling, Normalize
  OUT/modernbert  ModernBertModel, 6 heads of 64, every third layer global, the others a
                  128-token window (ModernBERT's); mean pooling, Normalize
  OUT/gemma       Gemma3TextModel with bidirectional attention, 6 query heads on 2 key/value
                  heads of 64, a 128-token sliding window on 5 of every 6 layers; mean pooling,
                  Dense 384 -> 1536 -> 384 without biases, Normalize (EmbeddingGemma's chain)
"""

import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HIDDEN, LAYERS, INTERMEDIATE, VOCAB = 384, 6, 1536, 30522
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS_SOURCES = ["data/demo/train.jsonl", "data/demo/examples.jsonl", "data/trecqa_train/questions.jsonl",
                  "data/trecqa_beir/corpus.jsonl"]


def write_corpus(path):
    """Every text of CORPUS_SOURCES (their query, pos, neg and text fields), a line each."""
    import json
    texts = []
    for name in CORPUS_SOURCES:
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                for key in ("query", "pos", "neg", "text"):
                    value = row.get(key)
                    texts += [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in texts) + "\n")


def train_tokenizer(name, corpus, folder):
    """ModernBERT's or Gemma's tokenizer form with VOCAB entries trained on corpus, into folder."""
    import make_gemma_fixtures
    import make_modernbert_fixtures
    shutil.rmtree(folder, ignore_errors=True)
    if name == "modernbert":
        make_modernbert_fixtures.write_tokenizer(folder, corpus, VOCAB)
    else:
        make_gemma_fixtures.train_tokenizer(corpus, VOCAB, folder)


def encoder_config(name, vocab_size, tokenizer):
    import transformers
    if name == "mpnet":
        return transformers.MPNetConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                        num_attention_heads=12, intermediate_size=INTERMEDIATE,
                                        max_position_embeddings=514)
    if name == "modernbert":
        return transformers.ModernBertConfig(
            vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=6,
            intermediate_size=INTERMEDIATE, max_position_embeddings=8192, local_attention=128,
            global_attn_every_n_layers=3, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id, cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id)
    return transformers.Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=6,
        num_key_value_heads=2, head_dim=64, query_pre_attn_scalar=64, intermediate_size=INTERMEDIATE,
        max_position_embeddings=2048, sliding_window=128, use_bidirectional_attention=True,
        layer_types=["sliding_attention"] * 5 + ["full_attention"], pad_token_id=0, bos_token_id=2,
        eos_token_id=1)


def make(name, tokenizer_dir, out):
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    work = os.path.join(out, name + "-transformer")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for f in os.listdir(tokenizer_dir):
        if os.path.isfile(os.path.join(tokenizer_dir, f)) and (f.startswith("tokenizer") or f in (
                "vocab.txt", "special_tokens_map.json")):
            shutil.copy(os.path.join(tokenizer_dir, f), work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(work)
    torch.manual_seed(3)
    config = encoder_config(name, len(tokenizer), tokenizer)
    transformers.AutoModel.from_config(config).save_pretrained(work)
    chain = [modules.Transformer(work, max_seq_length=256), modules.Pooling(HIDDEN, pooling_mode="mean")]
    if name == "gemma":
        chain += [modules.Dense(HIDDEN, 4 * HIDDEN, bias=False, activation_function=torch.nn.Identity()),
                  modules.Dense(4 * HIDDEN, HIDDEN, bias=False, activation_function=torch.nn.Identity())]
    chain.append(modules.Normalize())
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    SentenceTransformer(modules=chain, device="cpu").save(folder)
    if os.path.exists(os.path.join(tokenizer_dir, "tokenizer.model")):
        shutil.copy(os.path.join(tokenizer_dir, "tokenizer.model"), folder)
    shutil.rmtree(work)
    print(f"{folder}: {type(SentenceTransformer(folder, device='cpu')[0].auto_model).__name__}, "
          f"{sum(p.numel() for p in SentenceTransformer(folder, device='cpu').parameters()) / 1e6:.1f}M parameters")


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    fixtures, out = argv
    os.makedirs(out, exist_ok=True)
    corpus = os.path.join(out, "corpus.txt")
    write_corpus(corpus)
    make("mpnet", os.path.join(fixtures, "mpnet/mpnet"), out)
    for name in ("modernbert", "gemma"):
        tokenizer = os.path.join(out, name + "-tokenizer")
        train_tokenizer(name, corpus, tokenizer)
        make(name, tokenizer, out)
        shutil.rmtree(tokenizer)


if __name__ == "__main__":
    main(sys.argv[1:])

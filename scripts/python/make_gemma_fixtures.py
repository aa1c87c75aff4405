#!/usr/bin/env python3
"""A small random-weight Gemma 3 text encoder in EmbeddingGemma's form (Gemma3TextModel with
use_bidirectional_attention), made by transformers, and transformers' hidden states for a
fixed padded batch: what tests/torch/test_gemma.cpp holds embed-train's Gemma 3 to (no
EmbeddingGemma weights can be downloaded here).

    python scripts/python/make_gemma_fixtures.py OUT
    python scripts/python/make_gemma_fixtures.py --check FOLDER OUT/expected.safetensors

--check loads FOLDER (config.json + model.safetensors, as embed-train writes a Gemma 3) with
transformers' AutoModel, runs it on the expected batch and exits 1 unless its last hidden
state is within 1e-5 of the expected one on every real token; it prints the difference.

OUT/encoder          config.json + model.safetensors (fp32), as save_pretrained writes them; its
    vocab_size is OUT/tokenizer's
OUT/expected.safetensors
    input_ids [B, L] int64 and attention_mask [B, L] int64 (right padding: rows of 12, 7,
    3 and 1 real tokens), hidden_states.K [B, L, H] fp32 for K = 0 .. num_layers:
    transformers' output_hidden_states (K 0: the scaled word embeddings; K < num_layers:
    after layer K; K num_layers: the last hidden state, after the final norm).

OUT/tokenizer        Gemma's tokenizer in small: a sentencepiece BPE with Gemma's settings (byte
    fallback, no dummy prefix, digits split, <pad> 0 <eos> 1 <bos> 2 <unk> 3, <start_of_turn> and
    <end_of_turn> user pieces), trained on tests/fixtures/unigram/corpus.txt, as tokenizer.model,
    and transformers' GemmaTokenizer of it saved beside it (tokenizer.json: Replace(" ", "▁"),
    BPE with byte_fallback, <bos> ... <eos> around a text, as EmbeddingGemma's folder has it)
OUT/tokenizer_ids.json
    {"texts": [...], "ids": [[...], ...]}: AutoTokenizer's ids of that folder for the parity
    sentences and the corpus lines.
OUT/st               the encoder and tokenizer in EmbeddingGemma's sentence-transformers form, saved
    by SentenceTransformer.save: Transformer (max_seq_length 48), mean Pooling, Dense 32 -> 64 and
    Dense 64 -> 16 (no biases, identity activations), Normalize; tokenizer.model beside its
    tokenizer.json as EmbeddingGemma's folder has it.

The model keeps every feature EmbeddingGemma has at a tiny size: hidden 32, 4 layers of
which 0, 1 and 3 slide (layer_types) and layer 2 is global, 4 query heads of 8 on 2
key/value heads (head_dim 8 and hidden/heads 8, but query_pre_attn_scalar 16, so a scale of
1/sqrt(head_dim) shows), two rope thetas, and a sliding_window of 4 in config.json, which
transformers' bidirectional Gemma 3 turns into 4 // 2 + 1 = 3, an exclusive bound: a token
sees the tokens at distance |i - j| < 3, so a 12-token text is cut by the window.
Weights: transformers' initialization at std 0.2 under a fixed seed, then every RMSNorm
weight (zeros: Gemma's norms scale by 1 + weight) moved by N(0, 0.1) so that a norm applied
as plain weight * x, or not at all, shows.
"""

import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

CONFIG = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=16, max_position_embeddings=64,
              sliding_window=4,
              layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
              use_bidirectional_attention=True, initializer_range=0.2, rms_norm_eps=1e-6,
              attention_dropout=0.0, pad_token_id=0, bos_token_id=2, eos_token_id=1)


def train_tokenizer(corpus, vocab_size, folder):
    """Gemma's tokenizer form (see the module's description) with vocab_size entries trained on
    the text file corpus, into folder: tokenizer.model beside transformers' files of it."""
    import json
    import shutil
    import sentencepiece as spm
    import transformers

    source = folder + "-source"
    os.makedirs(source)
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(source, "tokenizer"), vocab_size=vocab_size,
        character_coverage=0.995, model_type="bpe", byte_fallback=True, add_dummy_prefix=False, split_digits=True,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], minloglevel=2)
    with open(os.path.join(source, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": True}, f)
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    shutil.copy(os.path.join(source, "tokenizer.model"), folder)
    shutil.rmtree(source)


def make_tokenizer(out):
    """OUT/tokenizer and OUT/tokenizer_ids.json (the module docstring); returns its vocabulary size."""
    import json
    import transformers

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    folder = os.path.join(out, "tokenizer")
    train_tokenizer(os.path.join(root, "tests/fixtures/unigram/corpus.txt"), 1500, folder)

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    texts = []
    for name in ("tests/fixtures/parity/sentences.txt", "tests/fixtures/unigram/corpus.txt"):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            texts += [line.rstrip("\n") for line in f if line.strip()]
    texts += ["  two  spaces", "digits 12345 and tabs\tthere", "<start_of_turn>user hi<end_of_turn>", "émoji 🙂 ok"]
    ids = [tokenizer(t)["input_ids"] for t in texts]
    if any(i[0] != 2 or i[-1] != 1 for i in ids):
        sys.exit("the tokenizer does not put <bos> (2) first and <eos> (1) last")
    with open(os.path.join(out, "tokenizer_ids.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": texts, "ids": ids}, f, ensure_ascii=False)
    return len(tokenizer)


def check(folder, expected_file):
    """--check (the module docstring)."""
    import torch
    import transformers
    from safetensors.torch import load_file

    expected = load_file(expected_file)
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    if type(model).__name__ != "Gemma3TextModel" or not model.config.use_bidirectional_attention:
        sys.exit(f"{folder} loads as {type(model).__name__}, not a bidirectional Gemma3TextModel")
    mask = expected["attention_mask"]
    with torch.no_grad():
        hidden = model(input_ids=expected["input_ids"], attention_mask=mask).last_hidden_state
    last = f"hidden_states.{model.config.num_hidden_layers}"
    worst = (hidden - expected[last]).abs()[mask.bool()].max().item()
    print(f"max difference {worst:.3g}")
    if not worst <= 1e-5:
        sys.exit(1)


def main(argv):
    if len(argv) == 3 and argv[0] == "--check":
        return check(argv[1], argv[2])
    if len(argv) != 1:
        sys.exit("usage: make_gemma_fixtures.py OUT | --check FOLDER EXPECTED")
    out = argv[0]
    import torch
    import transformers

    # The model's vocabulary is the tokenizer's, so that the folders make a working model.
    vocab_size = make_tokenizer(out)
    torch.manual_seed(11)
    config = transformers.Gemma3TextConfig(vocab_size=vocab_size, **CONFIG)
    # The window transformers attends with: config.json's 4 made exclusive and halved.
    if config.sliding_window != CONFIG["sliding_window"] // 2 + 1:
        sys.exit(f"transformers' bidirectional sliding_window is {config.sliding_window}, "
                 f"not {CONFIG['sliding_window'] // 2 + 1}: the window convention changed")
    config._attn_implementation = "eager"
    model = transformers.Gemma3TextModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(os.path.join(out, "encoder"), safe_serialization=True)

    from fixture_hidden_states import write_hidden_states
    write_hidden_states(model, 3, vocab_size, CONFIG["pad_token_id"], os.path.join(out, "expected.safetensors"))
    make_st_folder(out)


def make_st_folder(out):
    """OUT/st (the module docstring), from OUT/encoder and OUT/tokenizer."""
    import shutil
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    transformer_dir = os.path.join(out, "st-transformer")
    shutil.copytree(os.path.join(out, "encoder"), transformer_dir)
    for name in os.listdir(os.path.join(out, "tokenizer")):
        shutil.copy(os.path.join(out, "tokenizer", name), transformer_dir)
    torch.manual_seed(13)
    hidden = CONFIG["hidden_size"]
    modules = [models.Transformer(transformer_dir, max_seq_length=48),
               models.Pooling(hidden, pooling_mode="mean"),
               models.Dense(hidden, 2 * hidden, bias=False, activation_function=torch.nn.Identity()),
               models.Dense(2 * hidden, hidden // 2, bias=False, activation_function=torch.nn.Identity()),
               models.Normalize()]
    folder = os.path.join(out, "st")
    SentenceTransformer(modules=modules, device="cpu").save(folder)
    shutil.copy(os.path.join(out, "tokenizer", "tokenizer.model"), folder)
    shutil.rmtree(transformer_dir)


if __name__ == "__main__":
    main(sys.argv[1:])

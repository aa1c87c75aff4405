#!/usr/bin/env python3
"""Small random-weight models of the architectures embed-train reads besides BERT, saved by
transformers and wrapped by sentence-transformers exactly as the public models are, for the
parity and training tests (no real XLM-R or Qwen3 weights can be downloaded here).

    python scripts/python/make_model_fixtures.py --out DIR [--tokenizer TOKDIR] [--kinds k1,k2]

The tokenizers are the real kinds, made here into DIR/tokenizers (unless --tokenizer names
one folder of tokenizer files for every model): XLM-R's Unigram, trained on
tests/fixtures/unigram/corpus.txt, as sentencepiece.bpe.model (xlmr-spm) and as
tokenizer.json (xlmr-json) (make_unigram_fixtures.py), and Qwen3's real byte-level BPE
in Qwen3-Embedding's form, <|endoftext|> appended (make_bpe_fixtures.py). Each model's
vocab_size is its tokenizer's size. Kinds (default: all), each a folder DIR/<kind>:

  xlmr-cls      XLMRobertaModel + Pooling cls + Normalize (BGE-M3's modules), xlmr-spm
  xlmr-mean     XLMRobertaModel + Pooling mean + Normalize (multilingual-E5's), xlmr-json
  e5            BertModel + XLM-R's tokenizer (xlmr-json) + mean + Normalize: the shape of
                multilingual-e5-small, whose encoder is a BERT
  qwen3         Qwen3Model saved in bf16 + Pooling lasttoken + Normalize, with
                Qwen3-Embedding's query prompt (what Qwen3-Embedding-0.6B is)
  qwen3-causal  the same as Qwen3ForCausalLM weights ("model." names, an lm_head), plain
                Hugging Face folder (no modules.json)
  xlmr-long     xlmr-cls with BGE-M3's 8194 positions: inputs of 8192 tokens
  qwen3-sharded the qwen3 kind's weights in shards of at most 4 MB with
                model.safetensors.index.json, as transformers saves a large model
  qwen3-sliding the qwen3 kind with 3 layers, use_sliding_window and a window of 4
                tokens in layers 0 and 2 (layer_types; max_window_layers 1 would derive
                layers 1 and 2 instead, so a reader that derives them where they are
                given differs), the last layer sliding as last-token pooling reads it

and, only when named (1.2 GB, a minute to make; for scripts/bench-memory.sh):

  qwen3-0.6b    the qwen3 kind at Qwen3-Embedding-0.6B's shape: 28 layers, hidden 1024,
                16 query heads of 128 on 8 key/value heads, feed-forward 3072 (596M
                parameters, 155M of them the embedding)

Weights: transformers' initialization under a fixed seed (the encoders' with a std of 0.2
instead of 0.02: at 0.02 a 2-layer XLM-R gives every text nearly the same vector, and a
training test on it would only compare rounding), then every norm's weight (and bias)
moved by N(0, 0.1) so that a norm applied wrongly shows. Dropout is 0. Sizes are tiny
(hidden 64, 2 layers) but keep each architecture's features: XLM-R's positions after the
padding index; Qwen3's grouped-query attention (4 query heads on 2 key/value heads) and a
head_dim (32) other than hidden / heads (16).
"""

import argparse
import json
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "sentencepiece.bpe.model", "spiece.model", "vocab.json", "merges.txt", "added_tokens.json")
QWEN3_QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
KINDS = ("xlmr-cls", "xlmr-mean", "xlmr-long", "e5", "qwen3", "qwen3-causal", "qwen3-sharded", "qwen3-sliding")
NAMED_ONLY = ("qwen3-0.6b",)
TOKENIZER_OF = {"xlmr-cls": "xlmr-spm", "xlmr-mean": "xlmr-json", "xlmr-long": "xlmr-json", "e5": "xlmr-json", "qwen3": "qwen3-emb",
                "qwen3-causal": "qwen3-emb", "qwen3-sharded": "qwen3-emb", "qwen3-0.6b": "qwen3-emb",
                "qwen3-sliding": "qwen3-emb"}
QWEN3_TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=4096)
# Windows of 4 tokens: every parity sentence but the shortest is longer.
QWEN3_SLIDING = dict(QWEN3_TINY, num_hidden_layers=3, use_sliding_window=True, sliding_window=4, max_window_layers=1,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, max_position_embeddings=32768)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_tokenizers(out):
    """DIR/tokenizers/{xlmr-spm, xlmr-json, qwen3-emb}: see the module's description."""
    import make_bpe_fixtures
    import make_unigram_fixtures
    corpus = make_unigram_fixtures.read_lines(os.path.join(ROOT, "tests/fixtures/unigram/corpus.txt"))
    sentences = make_unigram_fixtures.read_lines(os.path.join(ROOT, "tests/fixtures/parity/sentences.txt"))
    xlmr = os.path.join(out, "xlmr")
    spm_dir, json_dir = make_unigram_fixtures.write_xlmr_tokenizers(xlmr, corpus, sentences)
    os.rename(spm_dir, os.path.join(out, "xlmr-spm"))
    os.rename(json_dir, os.path.join(out, "xlmr-json"))
    os.rmdir(xlmr)
    make_bpe_fixtures.write_qwen3_embedding_tokenizer(os.path.join(out, "qwen3-emb"))


def copy_tokenizer(src, dst):
    """dst's tokenizer files become src's, exactly (sentence-transformers' save writes a
    tokenizer.json even where the source has only sentencepiece.bpe.model)."""
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(dst, name)):
            os.remove(os.path.join(dst, name))
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def set_model_max_length(folder, length):
    """tokenizer_config.json's model_max_length (sentence-transformers 6 truncates at it)."""
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["model_max_length"] = length
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def perturb_norms(torch, model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.1)


def vocabulary(transformers, tokenizer_dir):
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    return tok, len(tok)


def make_xlmr(torch, transformers, st, tokenizer_dir, out, pooling, bert=False, positions=514):
    from sentence_transformers.sentence_transformer import modules as stm
    tok, n = vocabulary(transformers, tokenizer_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 1
    if bert:  # multilingual-e5-small: a BERT (positions from 0, two token types) on XLM-R's tokenizer
        config = transformers.BertConfig(
            vocab_size=n, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=512, type_vocab_size=2, pad_token_id=pad, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, initializer_range=0.2)
        torch.manual_seed(13)
        model = transformers.BertModel(config, add_pooling_layer=False)
    else:
        config = transformers.XLMRobertaConfig(
            vocab_size=n, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=positions, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=pad,
            bos_token_id=tok.cls_token_id if tok.cls_token_id is not None else 0,
            eos_token_id=tok.sep_token_id if tok.sep_token_id is not None else 2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.2)
        torch.manual_seed(11)
        model = transformers.XLMRobertaModel(config, add_pooling_layer=False)
    perturb_norms(torch, model)
    hf = out + ".hf"
    model.save_pretrained(hf)
    copy_tokenizer(tokenizer_dir, hf)
    length = positions - pad - 1 if not bert else 512
    set_model_max_length(hf, length)
    transformer = stm.Transformer(hf, max_seq_length=length)
    wrapped = st.SentenceTransformer(modules=[transformer, stm.Pooling(64, pooling), stm.Normalize()])
    wrapped.save(out)
    copy_tokenizer(tokenizer_dir, out)  # the source's files as they are (transformers 5 rewrites some)
    set_model_max_length(out, length)
    shutil.rmtree(hf)


def qwen3_model(torch, transformers, tokenizer_dir, shape=QWEN3_TINY):
    tok, n = vocabulary(transformers, tokenizer_dir)
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    config = transformers.Qwen3Config(
        vocab_size=n, **shape, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    torch.manual_seed(12)
    model = transformers.Qwen3Model(config)
    perturb_norms(torch, model)
    return model.to(torch.bfloat16)  # as Qwen3-Embedding's files are


def make_qwen3(torch, transformers, st, tokenizer_dir, out, shape=QWEN3_TINY):
    from sentence_transformers.sentence_transformer import modules as stm
    hf = out + ".hf"
    qwen3_model(torch, transformers, tokenizer_dir, shape).save_pretrained(hf)
    copy_tokenizer(tokenizer_dir, hf)
    transformer = stm.Transformer(hf, max_seq_length=512, model_kwargs={"dtype": torch.float32})
    hidden = shape["hidden_size"]
    wrapped = st.SentenceTransformer(modules=[transformer, stm.Pooling(hidden, "lasttoken"), stm.Normalize()],
                                     prompts={"query": QWEN3_QUERY_PROMPT, "document": ""})
    wrapped.save(out)
    copy_tokenizer(tokenizer_dir, out)
    shutil.rmtree(hf)
    # Qwen3-Embedding's own sentence_bert_config.json: the text as it is, never through the
    # tokenizer's chat template (sentence-transformers 6 writes a "message" modality when the
    # tokenizer has one, and then renders every text as a chat turn).
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 512, "do_lower_case": False}, f, indent=2)
    # The bf16 weights as they were made (SentenceTransformer.save wrote what it loaded).
    qwen3_model(torch, transformers, tokenizer_dir, shape).save_pretrained(out)


def make_qwen3_causal(torch, transformers, tokenizer_dir, out):
    """The qwen3 kind's weights as a Qwen3ForCausalLM folder (its lm_head tied to them)."""
    base = qwen3_model(torch, transformers, tokenizer_dir)
    causal = transformers.Qwen3ForCausalLM(base.config).to(torch.bfloat16)
    causal.model.load_state_dict(base.state_dict())
    causal.save_pretrained(out)
    copy_tokenizer(tokenizer_dir, out)


def make_qwen3_sharded(torch, transformers, tokenizer_dir, out):
    qwen3_model(torch, transformers, tokenizer_dir).save_pretrained(out, max_shard_size="4MB")
    copy_tokenizer(tokenizer_dir, out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokenizer", help="one folder of tokenizer files for every model (default: the real "
                                            "kinds, made into OUT/tokenizers)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS + NAMED_ONLY:
            sys.exit(f"make_model_fixtures: unknown kind {k!r} ({', '.join(KINDS + NAMED_ONLY)})")
    import torch
    import transformers
    import sentence_transformers as st
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    if not args.tokenizer:
        tokenizers = os.path.join(args.out, "tokenizers")
        shutil.rmtree(tokenizers, ignore_errors=True)
        make_tokenizers(tokenizers)
    for kind in kinds:
        out = os.path.join(args.out, kind)
        tokenizer = args.tokenizer or os.path.join(args.out, "tokenizers", TOKENIZER_OF[kind])
        shutil.rmtree(out, ignore_errors=True)
        if kind == "xlmr-long":
            make_xlmr(torch, transformers, st, tokenizer, out, "cls", positions=8194)
        elif kind.startswith("xlmr-"):
            make_xlmr(torch, transformers, st, tokenizer, out, kind.split("-")[1])
        elif kind == "e5":
            make_xlmr(torch, transformers, st, tokenizer, out, "mean", bert=True)
        elif kind == "qwen3":
            make_qwen3(torch, transformers, st, tokenizer, out)
        elif kind == "qwen3-sharded":
            make_qwen3_sharded(torch, transformers, tokenizer, out)
        elif kind == "qwen3-sliding":
            make_qwen3(torch, transformers, st, tokenizer, out, QWEN3_SLIDING)
        elif kind == "qwen3-0.6b":
            make_qwen3(torch, transformers, st, tokenizer, out, QWEN3_06B)
        else:
            make_qwen3_causal(torch, transformers, tokenizer, out)
        print(f"make_model_fixtures: {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A small random-weight ModernBERT, saved by transformers and wrapped by sentence-transformers
as modernbert-embed and gte-modernbert are wrapped, for tests/torch/test_modernbert.cpp (no
ModernBERT weights can be downloaded here).

    python scripts/python/make_modernbert_fixtures.py OUT

Writes OUT/tokenizer (the tokenizer alone), OUT/modernbert and OUT/expected.safetensors (the
ModernBertModel's hidden states of every layer for a padded batch, 12 real tokens the
longest, longer than the local window: scripts/python/fixture_hidden_states.py):

  tokenizer   a byte-level BPE trained here on tests/fixtures/bpe/corpus.txt in ModernBERT's
              form: NFC, ByteLevel(no prefix space, GPT-2's regex), a TemplateProcessing
              post-processor "[CLS] $A [SEP]" (pair "[CLS] $A [SEP] $B [SEP]", B's part of
              type 1), the specials [UNK] [CLS] [SEP] [PAD] [MASK] added after the vocabulary
              ([MASK] with lstrip, as ModernBERT's), class PreTrainedTokenizerFast
  modernbert  ModernBertModel (hidden 32, 4 layers, 4 heads, feed-forward 48; layers 1 and 2
              local: global_attn_every_n_layers 3, local_attention 8, i.e. 4 tokens each
              side, shorter than most parity sentences; rope theta 160000 global, 10000
              local; no biases; vocab_size padded past the tokenizer's, as ModernBERT's
              50368 are) + Pooling mean + Normalize, with modernbert-embed's prompts
              (search_query: / search_document:)

Weights: transformers' initialization under a fixed seed with initializer_range 0.2 (at
0.02 every text gets nearly the same vector), then every norm's weight moved by N(0, 0.1)
so that a norm applied wrongly shows. Dropout is 0.
"""

import json
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
PROMPTS = {"query": "search_query: ", "document": "search_document: "}
SHAPE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
             global_attn_every_n_layers=3, local_attention=8, global_rope_theta=160000.0, local_rope_theta=10000.0,
             max_position_embeddings=512, norm_eps=1e-5, norm_bias=False, attention_bias=False, mlp_bias=False,
             hidden_activation="gelu", initializer_range=0.2, embedding_dropout=0.0, attention_dropout=0.0,
             mlp_dropout=0.0, classifier_pooling="mean")
MAX_SEQ_LENGTH = 512


def write_tokenizer(folder, corpus=os.path.join(ROOT, "tests", "fixtures", "bpe", "corpus.txt"), vocab_size=1000):
    """ModernBERT's tokenizer form (see the module's description) with vocab_size entries trained
    on the text file corpus (the fixture's: 1,000 on tests/fixtures/bpe/corpus.txt)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus],
              trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, lstrip=(t == "[MASK]"), normalized=False, special=True) for t in SPECIALS])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True,
              "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
              "unk_token": "[UNK]", "model_input_names": ["input_ids", "attention_mask"],
              "model_max_length": MAX_SEQ_LENGTH}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return {name: tok.token_to_id(name) for name in SPECIALS}, tok.get_vocab_size()


def copy_tokenizer(src, dst):
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(dst, name)):
            os.remove(os.path.join(dst, name))
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def make_modernbert(tokenizer_dir, out, ids, tokenizer_size):
    import torch
    import transformers
    import sentence_transformers as st
    from sentence_transformers.sentence_transformer import modules as stm
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)
    vocab = (tokenizer_size + 63) // 64 * 64  # padded past the tokenizer, as ModernBERT's 50368
    config = transformers.ModernBertConfig(
        vocab_size=vocab, pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"], **SHAPE)
    torch.manual_seed(17)
    model = transformers.ModernBertModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.1)
    from fixture_hidden_states import write_hidden_states
    write_hidden_states(model, 0, min(ids.values()), ids["[PAD]"],
                        os.path.join(os.path.dirname(out), "expected.safetensors"))
    hf = out + ".hf"
    model.save_pretrained(hf)
    copy_tokenizer(tokenizer_dir, hf)
    transformer = stm.Transformer(hf, max_seq_length=MAX_SEQ_LENGTH)
    wrapped = st.SentenceTransformer(modules=[transformer, stm.Pooling(SHAPE["hidden_size"], "mean"), stm.Normalize()],
                                     prompts=PROMPTS)
    wrapped.save(out)
    copy_tokenizer(tokenizer_dir, out)  # the files as made (transformers 5 rewrites some)
    shutil.rmtree(hf)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tokenizer = os.path.join(out, "tokenizer")
    ids, size = write_tokenizer(tokenizer)
    make_modernbert(tokenizer, os.path.join(out, "modernbert"), ids, size)
    print("make_modernbert_fixtures:", out)


if __name__ == "__main__":
    main()

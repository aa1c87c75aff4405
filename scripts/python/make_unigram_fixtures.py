#!/usr/bin/env python3
"""The reference ids for the C++ XLM-RoBERTa (Unigram) tokenizer: tests/core/test_unigram.cpp.

    make_unigram_fixtures.py OUT

Trains a small sentencepiece Unigram model (XLM-R's layout: <unk> 0, <s> 1, </s> 2, no
pad; the default nmt_nfkc normalization, whose precompiled charsmap the model carries) on
tests/fixtures/unigram/corpus.txt + tests/fixtures/parity/sentences.txt, and writes into
OUT:
  spm/      sentencepiece.bpe.model + tokenizer_config.json (XLMRobertaTokenizer)
  json/     what XLMRobertaTokenizer.save_pretrained writes, without the .model:
            tokenizer.json + tokenizer_config.json
  legacy/   json/ with the pipeline older hub conversions wrote into tokenizer.json
            (Precompiled + Replace(" {2,}" -> " "), plain Metaspace), still under the
            XLMRobertaTokenizer class, which ignores it
  generic/  legacy/ under PreTrainedTokenizerFast: transformers runs the file's pipeline
  generic_bytes/  generic/ with byte_fallback and the 256 <0xXX> pieces (unknown
            characters become their UTF-8 bytes)
  json_mask/  json/ with <mask> lstrip and normalized (matched after normalization:
            "＜mask＞" is <mask>), as hub files of XLM-R models may have it
  spm_mask/   spm/ with <mask> lstrip in tokenizer_config.json's added_tokens_decoder
  big/      json/ with 40,000 more pieces (seeded random substrings of the texts, with and
            without "▁", unnormalized forms among them, random scores): a deep trie and
            many competing segmentations, as a real 250k vocabulary has
  bad/      broken inputs: a BPE-type .model, one with another special-id layout
  refs.jsonl       {"folder", "text", "max_length", "ids"}: AutoTokenizer.from_pretrained(
                   folder)(text, truncation=True, max_length=...) for every sentence
  normalize.jsonl  {"text", "normalized"}: tokenizers' Precompiled normalizer on the
                   model's charsmap (normalize_str)
  graphemes.jsonl  {"text", "lengths"}: the UTF-8 lengths of the regex module's \\X
                   clusters (the table of lib/tokenize/grapheme_table.inc comes from it),
                   for the texts without an Indic_Conjunct_Break Linker (virama): there
                   \\X joins "²" + U+094D + "क" although no consonant precedes the linker,
                   unlike UAX #29's GB9c and tokenizers (which gives "2क"); those texts are
                   checked against tokenizers itself, in normalize.jsonl and refs.jsonl
Sentences: tests/fixtures/parity/sentences.txt (lines as embed-train reads them), edge
cases, and a seeded fuzz set. Deterministic for a given environment.
"""
import base64
import copy
import json
import os
import random
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import regex  # noqa: E402
import sentencepiece as spm  # noqa: E402
from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: E402
from tokenizers import normalizers  # noqa: E402
from transformers import AutoTokenizer, XLMRobertaTokenizer  # noqa: E402

from make_bpe_fixtures import read_lines  # noqa: E402  (as embed-train reads a text file)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LENGTHS = (4, 16, 512)
FOLDERS = ("spm", "json", "legacy", "generic", "generic_bytes", "json_mask", "spm_mask", "big")
FUZZ_COUNT = 3000


EDGE = [
    "", " ", "\n", "\n\n", "  ", "\t", "\u3000", "\u2028\u2029", "\u200b", "\u0085", "\u001c",
    "hello world", "  hello   world  ", "hello\n\nworld", "\thello\tworld\t", "line1\r\nline2",
    "東京は日本の首都です。", "北京是中国的首都", "서울은 한국의 수도입니다", "Crème brûlée à la française",
    "e\u0301te\u0301", "ﬁne ﬂow", "ＡＢＣ１２３", "½ ² ℃ ㎏", "emoji 😀👍🏽 👨‍👩‍👧 🇩🇪", "😀😀x😀",
    "zero\u200bwidth\u200djoin", "nbsp\u00a0here", "ideographic\u3000space", "control\x07\x1bchars",
    "x\u0000y", "\ufeffbom", "...!!!???", "C++ and C# and F#", "https://example.com/a?b=c&d=e",
    # a combining mark after a character the charsmap maps: the whole grapheme becomes the mapping
    "ｗ\u033d", "a ｗ\u033d b", "¹\u0354", "x¹\u0354y", "\u202f\u0301", "ｗ\u033d\u0301", "Ａ\u0308", "ﬁ\u0301",
    "\u3000\u0301x", "\u00a0\u0301", "①\u20dd", "㎏\u0300", "ｶﾞ", "ﾊﾟﾝ",
    "▁", "a▁b", "▁▁hello", "hello▁", "\u0085x\u0085", "a\u200bb", "\u001cfile\u001dsep",
    "it'ſx", "\U00031350 ext-H", "\U0002a6d6",
    # GB9c: a mapped character + virama + consonant ("2क" in tokenizers), real conjuncts
    "²\u094d\u0915", "a²\u094d\u0915\u093e", "½\u094d\u0930", "²\u0301\u094d\u0915", "²\u094d",
    "\u0915\u094d\u0937", "\u0915\u094d\u200d\u0937", "ｗ\u094d\u0915", "¹\u09cd\u09b0",
    # literal special tokens, with and without spaces around them
    "<mask> token <s> and </s>", "<unk>", "<pad>", "a <mask> b", "a<mask>b", "a  <mask>  b",
    " <mask>", "<mask> ", "<s></s>", "x</s>y", "<s> x </s>", "<mask><mask>", "\t<mask>\n",
    "<<mask>>", "</s", "<s", "<mask", "mask>", "a ＜mask＞ b", "＜ｍａｓｋ＞", "x＜mask＞y", "<ｓ>", "＜/s＞",
    "a" * 300, ("word " * 500).strip(), "a" * 100000,
]

# Characters the fuzzer inserts: Latin-1 and Extended, combining marks, kana, CJK, Hangul,
# emoji and modifiers, full-width forms, 14 kinds of spaces and format characters, ▁.
POOL = [chr(c) for c in list(range(0x20, 0x7F)) + list(range(0xA0, 0x250)) + list(range(0x300, 0x370)) +
        list(range(0x3040, 0x30FF)) + list(range(0x4E00, 0x4E80)) + list(range(0xAC00, 0xAC40)) +
        list(range(0x1F600, 0x1F650)) + list(range(0xFF01, 0xFF5E)) + list(range(0x2460, 0x2480)) +
        list(range(0x3380, 0x33E0)) + list(range(0xFB00, 0xFB07)) + list(range(0x1100, 0x1120)) +
        [0x200B, 0x200D, 0xFEFF, 0x3000, 0x2028, 0x2029, 9, 10, 13, 0x85, 0xA0, 0x1680, 0x2000, 0x2009,
         0x202F, 0x205F, 0x1C, 0x1F, 0x2581, 0x1F1E9, 0x1F1EA, 0x1F3FD, 0xFE0F, 0x20DD, 0x0E33, 0x0937,
         0x093F, 0x094D, 0x0BCD, 0x0600, 0x1160, 0x11A8]]
SPECIALS = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", " <mask> ", "<mask> ", " </s>", "＜mask＞", " ＜ｍａｓｋ＞"]


def fuzz(base, count, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        t = rng.choice(base)
        for _ in range(rng.randint(0, 8)):
            p = rng.randint(0, len(t))
            if rng.random() < 0.05:
                ins = rng.choice(SPECIALS)
            else:
                ins = "".join(rng.choice(POOL) for _ in range(rng.randint(1, 4)))
            t = t[:p] + ins + t[p:]
        out.append(t)
    return out


def write_config(folder, cls):
    config = {"tokenizer_class": cls, "model_max_length": 512, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>",
              "mask_token": "<mask>"}
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_xlmr_tokenizers(out, corpus, sentences):
    """A small XLM-R tokenizer in both of its folder forms, OUT/spm (sentencepiece.bpe.model,
    a Unigram model with XLM-R's <unk>/<s>/</s> layout) and OUT/json (the tokenizer.json that
    XLMRobertaTokenizer.save_pretrained makes of it), trained on the lines given.
    Returns (spm_dir, json_dir)."""
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(line for line in corpus + sentences if line.strip()) + "\n")
        spm.SentencePieceTrainer.train(
            input=os.path.join(tmp, "corpus.txt"), model_prefix=os.path.join(tmp, "small"),
            model_type="unigram", vocab_size=1500, hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, character_coverage=0.9995, num_threads=1, minloglevel=2)
        model_bytes = open(os.path.join(tmp, "small.model"), "rb").read()

        spm_dir = os.path.join(out, "spm")
        os.makedirs(spm_dir, exist_ok=True)
        with open(os.path.join(spm_dir, "sentencepiece.bpe.model"), "wb") as f:
            f.write(model_bytes)
        write_config(spm_dir, "XLMRobertaTokenizer")

        saved = os.path.join(tmp, "saved")
        XLMRobertaTokenizer.from_pretrained(spm_dir).save_pretrained(saved)
        json_dir = os.path.join(out, "json")
        os.makedirs(json_dir, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(saved, name), json_dir)
    return spm_dir, json_dir


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpus = read_lines(os.path.join(ROOT, "tests/fixtures/unigram/corpus.txt"))
    sentences = read_lines(os.path.join(ROOT, "tests/fixtures/parity/sentences.txt"))

    spm_dir, json_dir = write_xlmr_tokenizers(out, corpus, sentences)
    with open(os.path.join(spm_dir, "sentencepiece.bpe.model"), "rb") as f:
        model_bytes = f.read()

    tj = json.load(open(os.path.join(json_dir, "tokenizer.json"), encoding="utf-8"))
    charsmap = tj["normalizer"]["precompiled_charsmap"]
    legacy = copy.deepcopy(tj)
    legacy["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": charsmap},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    legacy["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                               "split": True}
    for name, cls in (("legacy", "XLMRobertaTokenizer"), ("generic", "PreTrainedTokenizerFast")):
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(legacy, f, ensure_ascii=False)
        config = json.load(open(os.path.join(json_dir, "tokenizer_config.json")))
        config["tokenizer_class"] = cls
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2)

    byte_json = copy.deepcopy(legacy)
    byte_json["model"]["byte_fallback"] = True
    byte_json["model"]["vocab"] += [["<0x%02X>" % b, -20.0 - b / 100] for b in range(256)]
    folder = os.path.join(out, "generic_bytes")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(byte_json, f, ensure_ascii=False)
    shutil.copy(os.path.join(out, "generic", "tokenizer_config.json"), folder)

    mask = copy.deepcopy(tj)
    entry = next(a for a in mask["added_tokens"] if a["content"] == "<mask>")
    entry["lstrip"] = entry["normalized"] = True
    os.makedirs(os.path.join(out, "json_mask"), exist_ok=True)
    with open(os.path.join(out, "json_mask", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(mask, f, ensure_ascii=False)
    shutil.copy(os.path.join(json_dir, "tokenizer_config.json"), os.path.join(out, "json_mask"))
    spm_mask = os.path.join(out, "spm_mask")
    os.makedirs(spm_mask, exist_ok=True)
    shutil.copy(os.path.join(spm_dir, "sentencepiece.bpe.model"), spm_mask)
    config = json.load(open(os.path.join(spm_dir, "tokenizer_config.json")))
    config["added_tokens_decoder"] = {str(entry["id"]): {
        "content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False, "single_word": False,
        "special": True}}
    with open(os.path.join(spm_mask, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)

    rng = random.Random(7)
    text = " ".join(corpus + sentences)
    seen = {piece for piece, _ in tj["model"]["vocab"]}
    extra = []
    while len(extra) < 40000:
        at = rng.randrange(len(text))
        piece = text[at:at + rng.randint(1, 12)].replace(" ", "\u2581")
        if rng.random() < 0.5:
            piece = "\u2581" + piece
        if piece not in seen and "\u2581\u2581" not in piece:
            seen.add(piece)
            extra.append([piece, -rng.uniform(4.0, 16.0)])
        elif rng.random() < 0.01:  # the same text again under another id: the last one counts
            extra.append([piece, -rng.uniform(4.0, 16.0)])
    big = copy.deepcopy(tj)
    big["model"]["vocab"] = tj["model"]["vocab"][:-1] + extra + [tj["model"]["vocab"][-1]]
    next(a for a in big["added_tokens"] if a["content"] == "<mask>")["id"] = len(big["model"]["vocab"]) - 1
    os.makedirs(os.path.join(out, "big"), exist_ok=True)
    with open(os.path.join(out, "big", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(big, f, ensure_ascii=False)
    shutil.copy(os.path.join(json_dir, "tokenizer_config.json"), os.path.join(out, "big"))

    # Broken .model files: another model type, another special-id layout.
    bad = os.path.join(out, "bad")
    os.makedirs(bad, exist_ok=True)
    for name, edit in (("bpe_type", lambda m: setattr(m.trainer_spec, "model_type", 2)),
                       ("layout", lambda m: (setattr(m.trainer_spec, "unk_id", 1),
                                             setattr(m.trainer_spec, "bos_id", 0)))):
        m = pb.ModelProto()
        m.ParseFromString(model_bytes)
        edit(m)
        os.makedirs(os.path.join(bad, name), exist_ok=True)
        with open(os.path.join(bad, name, "sentencepiece.bpe.model"), "wb") as f:
            f.write(m.SerializeToString())
        write_config(os.path.join(bad, name), "XLMRobertaTokenizer")

    texts = sentences + EDGE + fuzz(corpus + sentences, FUZZ_COUNT, seed=20251125)
    with open(os.path.join(out, "refs.jsonl"), "w", encoding="utf-8") as f:
        for name in FOLDERS:
            tok = AutoTokenizer.from_pretrained(os.path.join(out, name))
            for max_length in MAX_LENGTHS:
                ids = tok(texts, truncation=True, max_length=max_length)["input_ids"]
                for text, row in zip(texts, ids):
                    f.write(json.dumps({"folder": name, "text": text, "max_length": max_length, "ids": row},
                                       ensure_ascii=False) + "\n")

    with open(os.path.join(out, "graphemes.jsonl"), "w", encoding="utf-8") as f:
        for text in texts:
            if regex.search(r"\p{InCB=Linker}", text):
                continue
            lengths = [len(g.encode("utf-8", "surrogatepass")) for g in regex.findall(r"\X", text)]
            f.write(json.dumps({"text": text, "lengths": lengths}, ensure_ascii=False) + "\n")

    norm = normalizers.Precompiled(base64.b64decode(charsmap))
    with open(os.path.join(out, "normalize.jsonl"), "w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text, "normalized": norm.normalize_str(text)}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

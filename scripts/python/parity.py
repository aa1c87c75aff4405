#!/usr/bin/env python3
"""Check that `embed-train` tokenizes and embeds exactly like Python's sentence-transformers.

    python scripts/python/parity.py --model DIR --embed-train BIN --sentences FILE [FILE...]
                                    [--as-cls] [--atol 1e-5] [--report JSON] [--reference-cache DIR]

embed-train re-implements, in C++, what a sentence-transformers folder means: the BERT
WordPiece tokenizer (normalization, pre-tokenization, truncation), the encoder, pooling
and normalization. This script holds it to the reference on many sentences at once:

  1. Sentences: every line of each FILE, empty lines included, read exactly as
     embed-train reads a text file (split on '\\n', one trailing '\\r' dropped); for a
     .jsonl FILE instead, the "query" and every "pos" (a string or a list) of each line
     (the WordNet pair files of data/demo/, say). All of
     them go, one a line, into one temporary text file that both sides read.
  2. Reference embeddings: SentenceTransformer(DIR, device="cpu").encode(...) in float32
     on 2 threads. The folder's own modules decide pooling and normalization. With
     --reference-cache DIR, the reference (these embeddings and the two id lists of 3.) is
     kept in DIR under a hash of its inputs, and a later run on the same input reads it.
  3. Reference token ids: AutoTokenizer.from_pretrained(DIR) (the fast tokenizer that
     transformers builds from tokenizer.json), with [CLS]/[SEP] and truncation to
     SentenceTransformer's max_seq_length; and, separately, the ids the
     SentenceTransformer model itself makes (its own tokenizer, as encode uses it).
  4. Ours: `BIN encode --model DIR --input TMP.txt --output TMP.npy` and
     `BIN tokenize --model DIR --input TMP.txt --output TMP.jsonl` (one {"ids": [...]}
     a line, in input order).
  5. Checks: the same shape and max |reference - ours| <= --atol over all embedding
     entries; identical token ids for every sentence, against both references.

--as-cls runs everything on a copy of DIR whose Pooling module is switched to the [CLS]
token (files symlinked, only the pooling config rewritten): it stands for BGE-style
models (CLS pooling + Normalize), for which no packaged weights exist.

Prints one summary line per check and, for a failing one, up to 10 offending sentences
(where they come from, the text, both id lists around the first difference and the
reference tokens). --report FILE also writes the numbers as JSON.

Exit status: 0 all agree; 1 a mismatch; 2 a usage, installation or loading problem
(including embed-train failing to run).

Needs the project's Python environment (scripts/setup.sh makes .venv/: torch,
transformers, sentence-transformers, numpy). Nothing is downloaded: the Hugging Face
libraries are put offline before they are imported.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

# Before any Hugging Face import: never reach for the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

EXIT_OK, EXIT_MISMATCH, EXIT_PROBLEM = 0, 1, 2
SHOWN = 10  # offending sentences listed per failing check
TEXT_SHOWN = 100  # characters of a sentence's repr shown


class Problem(Exception):
    """A usage, installation or loading problem: exit status 2."""


@dataclass
class Sentence:
    text: str
    path: str  # the file it comes from
    origin: str  # where in it: "FILE:LINE", or "FILE:LINE query" / "FILE:LINE pos[1]"


# ---------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare embed-train's token ids and embeddings with transformers and "
        "sentence-transformers on the same sentences.",
        epilog="Exit status: 0 all agree, 1 a mismatch, 2 usage/installation/loading problem.",
    )
    parser.add_argument("--model", required=True, help="sentence-transformers model folder")
    parser.add_argument("--embed-train", required=True, help="the embed-train binary")
    parser.add_argument("--sentences", required=True, nargs="+", metavar="FILE",
                        help=".txt (every line a sentence, empty ones too) or .jsonl pair files "
                        "(\"query\" and \"pos\")")
    parser.add_argument("--as-cls", action="store_true",
                        help="use a copy of the model with [CLS] pooling (stands for BGE-style models)")
    parser.add_argument("--prompt-name", metavar="NAME",
                        help="encode with the folder's prompt NAME on both sides (SentenceTransformer.encode("
                             "prompt_name=NAME), embed-train encode --prompt-name NAME); the token ids are "
                             "compared on the prompted texts")
    parser.add_argument("--atol", type=float, default=1e-5,
                        help="largest allowed absolute difference of an embedding entry (default 1e-5)")
    parser.add_argument("--report", metavar="JSON", help="also write the results to this JSON file")
    parser.add_argument("--reference-cache", metavar="DIR",
                        help="keep the reference (embeddings, both id lists) in DIR, keyed by a hash of the "
                        "model folder's files, the sentences, --as-cls, --prompt-name and the libraries' "
                        "versions: a second run on the same input reads it instead of loading the libraries")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------
# Sentences


def read_lines(path):
    """The lines of a file as embed-train reads a text file: split on '\\n', one trailing
    '\\r' dropped, and no empty last line after a final '\\n'."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Problem(f"cannot read {path}: {e}")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no new one
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def text_file_sentences(path):
    return [Sentence(line, path, f"{path}:{number}") for number, line in enumerate(read_lines(path), start=1)]


def pair_file_sentences(path):
    """The "query" and every "pos" (a string or a list of strings) of each non-blank line."""
    sentences = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise Problem(f"{path}:{number}: not valid JSON ({e})")
        if not isinstance(record, dict) or "query" not in record or "pos" not in record:
            raise Problem(f"{path}:{number}: expected an object with \"query\" and \"pos\"")
        positives = record["pos"] if isinstance(record["pos"], list) else [record["pos"]]
        texts = [("query", record["query"])] + [(f"pos[{i}]", p) for i, p in enumerate(positives)]
        for field, text in texts:
            if not isinstance(text, str):
                raise Problem(f"{path}:{number}: {field} is not a string")
            sentences.append(Sentence(text, path, f"{path}:{number} {field}"))
    return sentences


def read_sentences(paths):
    sentences = []
    for path in paths:
        if path.endswith(".jsonl"):
            sentences += pair_file_sentences(path)
        else:
            sentences += text_file_sentences(path)
    for s in sentences:
        # One sentence a line in the file embed-train reads: a '\n' would split it, and
        # embed-train drops a '\r' that ends a line.
        if "\n" in s.text or s.text.endswith("\r"):
            raise Problem(f"{s.origin}: a sentence with a line break cannot go into a text file")
    if not sentences:
        raise Problem("the --sentences files hold no sentences")
    return sentences


def write_sentences(sentences, path):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in sentences:
            f.write(s.text + "\n")


def describe_sources(paths, sentences):
    counts = {path: 0 for path in paths}
    for s in sentences:
        counts[s.path] += 1
    return ", ".join(f"{n} from {path}" for path, n in counts.items())


# ---------------------------------------------------------------------------------------
# The model folder


def pooling_config_path(model_dir):
    """The Pooling module's folder (1_Pooling), found through modules.json."""
    try:
        with open(os.path.join(model_dir, "modules.json"), encoding="utf-8") as f:
            modules = json.load(f)
    except (OSError, ValueError) as e:
        raise Problem(f"--as-cls: cannot read {model_dir}/modules.json: {e}")
    for module in modules:
        if module.get("type", "").endswith(".Pooling"):
            return module["path"]
    raise Problem(f"--as-cls: {model_dir}/modules.json has no Pooling module")


def make_cls_copy(model_dir, workdir):
    """A copy of model_dir (symlinks to its files) whose Pooling module takes the [CLS]
    token instead: pooling_mode_cls_token true, every other pooling_mode_* false."""
    copy = os.path.join(workdir, "model-cls")
    pooling = pooling_config_path(model_dir)
    os.mkdir(copy)
    for name in os.listdir(model_dir):
        if name != pooling:
            os.symlink(os.path.abspath(os.path.join(model_dir, name)), os.path.join(copy, name))
    os.mkdir(os.path.join(copy, pooling))
    for name in os.listdir(os.path.join(model_dir, pooling)):
        if name != "config.json":
            os.symlink(os.path.abspath(os.path.join(model_dir, pooling, name)), os.path.join(copy, pooling, name))

    with open(os.path.join(model_dir, pooling, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    for key in list(config):
        if key.startswith("pooling_mode_"):
            config[key] = False
    config["pooling_mode_cls_token"] = True
    if "pooling_mode" in config:  # the newer single-key form, which wins when present
        config["pooling_mode"] = "cls"
    with open(os.path.join(copy, pooling, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return copy


# ---------------------------------------------------------------------------------------
# The reference: transformers and sentence-transformers


def import_reference_libraries():
    """The modules numpy, torch, sentence_transformers and transformers, or a Problem
    that says how to get them."""
    try:
        import numpy
        import torch
        import transformers
        import sentence_transformers
    except ImportError as e:
        raise Problem(f"{sys.executable} cannot import {e.name or e}: run this script with the "
                      f"project's Python, .venv/bin/python, which scripts/setup.sh makes")
    transformers.utils.logging.disable_progress_bar()  # the "Loading weights" bar
    return numpy, torch, sentence_transformers, transformers


def load_reference(model_dir, torch, sentence_transformers, transformers):
    """(SentenceTransformer model in float32 on the CPU, AutoTokenizer) for model_dir."""
    torch.set_num_threads(2)
    try:
        model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu",
                                                          model_kwargs={"dtype": torch.float32})
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:  # any loading failure: the folder is the problem
        raise Problem(f"loading {model_dir} with sentence-transformers/transformers failed: "
                      f"{type(e).__name__}: {e}")
    if not model.max_seq_length:
        raise Problem(f"{model_dir}: SentenceTransformer has no max_seq_length")
    return model, tokenizer


def describe_reference(model, tokenizer):
    modules = [type(m).__name__ for m in model]
    kind = "fast" if tokenizer.is_fast else "slow"
    return (f"modules {modules}, max_seq_length {model.max_seq_length}, "
            f"AutoTokenizer {type(tokenizer).__name__} ({kind})")


def reference_embeddings(model, texts, prompt_name=None):
    return model.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False,
                        prompt_name=prompt_name)


def reference_token_ids(tokenizer, texts, max_length):
    encoded = tokenizer(texts, truncation=True, max_length=max_length, add_special_tokens=True)
    return [list(ids) for ids in encoded["input_ids"]]


def sentence_transformer_token_ids(model, texts):
    """The ids SentenceTransformer.encode itself feeds the encoder: the model's own
    tokenization (preprocess; tokenize before sentence-transformers 6), one sentence at a
    time so that there is no padding to take off."""
    tokenize = model.preprocess if hasattr(model, "preprocess") else model.tokenize
    return [tokenize([text])["input_ids"][0].tolist() for text in texts]


# ---------------------------------------------------------------------------------------
# Ours: embed-train


def run_embed_train(binary, subcommand, model_dir, input_path, output_path, extra=()):
    command = [binary, subcommand, "--model", model_dir, "--input", input_path, "--output", output_path, *extra]
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise Problem(f"cannot run {binary}: {e}")
    if result.returncode != 0:
        raise Problem(f"`{' '.join(command)}` failed (exit status {result.returncode}):\n"
                      f"{result.stderr.strip()}")


def read_our_embeddings(numpy, path):
    try:
        return numpy.load(path)
    except (OSError, ValueError) as e:
        raise Problem(f"cannot read embed-train's embeddings {path}: {e}")


def read_our_token_ids(path):
    """One list of ids per line of embed-train tokenize's JSONL output."""
    ids = []
    for number, line in enumerate(read_lines(path), start=1):
        try:
            ids.append([int(i) for i in json.loads(line)["ids"]])
        except (ValueError, KeyError, TypeError) as e:
            raise Problem(f"embed-train tokenize output {path}:{number}: expected {{\"ids\": [...]}} ({e})")
    return ids


# ---------------------------------------------------------------------------------------
# Comparisons: each returns a JSON-ready dict with "ok" and what a report needs


def json_float(x):
    """x as a JSON number, or None (null) for NaN and infinities, which JSON lacks."""
    return float(x) if math.isfinite(x) else None


def compare_embeddings(numpy, reference, ours, atol):
    """Both [sentences, dimension]. A row with NaN counts as over atol, and as the worst."""
    result = {"sentences": int(reference.shape[0]), "dimension": int(reference.shape[1]),
              "reference_shape": list(reference.shape), "ours_shape": list(ours.shape), "atol": atol}
    if reference.shape != ours.shape:
        result.update(ok=False, shapes_equal=False, max_abs_diff=None, non_finite_rows=None, offending=[])
        return result
    diff = numpy.abs(reference.astype(numpy.float64) - ours.astype(numpy.float64))
    per_row = diff.max(axis=1, initial=0.0)  # NaN where a row has one
    per_row = numpy.where(numpy.isnan(per_row), numpy.inf, per_row)
    worst_first = numpy.argsort(-per_row, kind="stable")
    offending = [int(i) for i in worst_first if per_row[i] > atol]
    result.update(ok=not offending, shapes_equal=True,
                  max_abs_diff=json_float(per_row.max(initial=0.0)),
                  non_finite_rows=int(numpy.isinf(per_row).sum()),
                  offending=offending, row_max_abs_diff=[json_float(per_row[i]) for i in offending])
    return result


def first_difference(a, b):
    """Index of the first position where the id lists differ (the shorter length when one
    is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_token_ids(reference, ours):
    result = {"sentences": len(reference), "ours_sentences": len(ours)}
    if len(reference) != len(ours):
        result.update(ok=False, differ=None, offending=[])
        return result
    offending = [i for i, (r, o) in enumerate(zip(reference, ours)) if r != o]
    result.update(ok=not offending, differ=len(offending), offending=offending)
    return result


# ---------------------------------------------------------------------------------------
# Printing


def status_word(ok):
    return "OK" if ok else "FAIL"


def shown_text(text):
    r = repr(text)
    return r if len(r) <= TEXT_SHOWN else r[:TEXT_SHOWN] + "..."


def window(ids, at, before=3, after=8):
    """ids[at-before : at+after] as text, with '...' where cut."""
    start, end = max(0, at - before), min(len(ids), at + after)
    return ("... " if start > 0 else "") + str(ids[start:end]) + (" ..." if end < len(ids) else "")


def print_embedding_result(result, sentences):
    if not result["shapes_equal"]:
        print(f"embeddings: shapes differ: reference {tuple(result['reference_shape'])}, "
              f"embed-train {tuple(result['ours_shape'])} FAIL")
        return
    largest = "not finite (NaN or inf)" if result["non_finite_rows"] else f"{result['max_abs_diff']:.2g}"
    print(f"embeddings: {result['sentences']} sentences x {result['dimension']}, max abs diff "
          f"{largest} (atol {result['atol']:g}) {status_word(result['ok'])}")
    if result["ok"]:
        return
    print(f"  {len(result['offending'])} sentences over atol; the worst:")
    for i, d in list(zip(result["offending"], result["row_max_abs_diff"]))[:SHOWN]:
        shown = "not finite" if d is None else f"{d:.3g}"
        print(f"  {sentences[i].origin}: max abs diff {shown}  {shown_text(sentences[i].text)}")


class LazyTokenizer:
    """AutoTokenizer(model_dir), loaded when a failing sentence's tokens are first shown."""

    def __init__(self, model_dir):
        self.model_dir, self.tokenizer = model_dir, None

    def convert_ids_to_tokens(self, ids):
        if self.tokenizer is None:
            import transformers
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.model_dir))
        return self.tokenizer.convert_ids_to_tokens(ids)


def print_token_result(label, result, sentences, reference, ours, tokenizer):
    if result["differ"] is None:
        print(f"{label}: {result['sentences']} sentences, but embed-train tokenize wrote "
              f"{result['ours_sentences']} lines FAIL")
        return
    print(f"{label}: {result['sentences']} sentences, {result['differ']} differ {status_word(result['ok'])}")
    for i in result["offending"][:SHOWN]:
        r, o = reference[i], ours[i]
        at = first_difference(r, o)
        print(f"  {sentences[i].origin}: {shown_text(sentences[i].text)}")
        print(f"    {len(r)} reference ids, {len(o)} ours; first difference at position {at}")
        print(f"    reference: {window(r, at)}")
        print(f"    ours:      {window(o, at)}")
        print(f"    reference tokens: {window(tokenizer.convert_ids_to_tokens(r), at)}")
    if len(result["offending"]) > SHOWN:
        print(f"  ... and {len(result['offending']) - SHOWN} more")


# ---------------------------------------------------------------------------------------


@dataclass
class Reference:
    description: str  # the modules, max_seq_length and tokenizer class
    max_seq_length: int
    prompt: object  # the text of --prompt-name, or None
    embeddings: object  # numpy [sentences, dimension]
    ids: list  # AutoTokenizer's ids, one list per sentence
    model_ids: list  # the SentenceTransformer's own ids
    versions: dict  # python, torch, transformers, sentence_transformers


def compute_reference(model_dir, texts, prompt_name=None):
    numpy, torch, sentence_transformers, transformers = import_reference_libraries()
    model, tokenizer = load_reference(model_dir, torch, sentence_transformers, transformers)
    if prompt_name is not None and prompt_name not in model.prompts:
        raise Problem(f"{model_dir} has no prompt {prompt_name!r} (it has {sorted(model.prompts)})")
    prompt = model.prompts[prompt_name] if prompt_name is not None else None
    prompted = [prompt + t for t in texts] if prompt is not None else texts
    return Reference(description=describe_reference(model, tokenizer), max_seq_length=model.max_seq_length,
                     prompt=prompt, embeddings=reference_embeddings(model, texts, prompt_name),
                     ids=reference_token_ids(tokenizer, prompted, model.max_seq_length),
                     model_ids=sentence_transformer_token_ids(model, prompted),
                     versions={"python": sys.version.split()[0], "torch": torch.__version__,
                               "transformers": transformers.__version__,
                               "sentence_transformers": sentence_transformers.__version__})


# The reference of one input is computed once: Reference.MiniLMParity and its run on
# another CPU path (CpuPath.MiniLMParity) hold embed-train to the same truth, and the
# libraries' import and encode are most of a run's time.
def reference_key(model_dir, texts, as_cls, prompt_name):
    """A hash of everything the reference depends on: every file of the model folder (its
    bytes), the sentences, the switches and the installed libraries' versions."""
    import hashlib
    from importlib import metadata
    h = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, model_dir).encode() + b"\0")
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    h.update(json.dumps([texts, as_cls, prompt_name, sys.version]).encode())
    for package in ("torch", "transformers", "sentence-transformers", "tokenizers", "numpy"):
        h.update(f"{package}={metadata.version(package)}".encode())
    return h.hexdigest()[:32]


def cached_reference(cache_dir, key, compute):
    """The Reference stored under `key` in cache_dir, else compute() stored there. A run
    that finds another computing the same key waits for it (a lock), then reads."""
    import fcntl
    import numpy
    os.makedirs(cache_dir, exist_ok=True)
    base = os.path.join(cache_dir, key)
    with open(base + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(base + ".json"):
            with open(base + ".json", encoding="utf-8") as f:
                fields = json.load(f)
            return Reference(embeddings=numpy.load(base + ".npy"), **fields), True
        ref = compute()
        numpy.save(base + ".tmp.npy", ref.embeddings)
        fields = {k: v for k, v in ref.__dict__.items() if k != "embeddings"}
        with open(base + ".tmp.json", "w", encoding="utf-8") as f:
            json.dump(fields, f)
        os.replace(base + ".tmp.npy", base + ".npy")
        os.replace(base + ".tmp.json", base + ".json")  # last: its presence says both are whole
        return ref, False


def compute_ours(binary, model_dir, input_path, workdir, numpy, prompt_name=None, prompted_path=None):
    """(embeddings, token ids) from `embed-train encode` and `embed-train tokenize` (of the
    prompted texts when a prompt is named)."""
    npy, jsonl = os.path.join(workdir, "ours.npy"), os.path.join(workdir, "ours.jsonl")
    run_embed_train(binary, "encode", model_dir, input_path, npy,
                    ["--prompt-name", prompt_name] if prompt_name is not None else [])
    run_embed_train(binary, "tokenize", model_dir, prompted_path or input_path, jsonl)
    return read_our_embeddings(numpy, npy), read_our_token_ids(jsonl)


def check(args):
    """Runs every step, prints the results and returns the report (a dict with "ok")."""
    started = time.monotonic()
    if not os.path.isdir(args.model):
        raise Problem(f"--model {args.model} is not a folder")
    if not (os.path.isfile(args.embed_train) and os.access(args.embed_train, os.X_OK)):
        raise Problem(f"--embed-train {args.embed_train} is not an executable file (build it first)")
    sentences = read_sentences(args.sentences)
    texts = [s.text for s in sentences]
    import numpy
    print(f"sentences: {len(sentences)} ({describe_sources(args.sentences, sentences)})")

    with tempfile.TemporaryDirectory(prefix="parity-") as workdir:
        model_dir = make_cls_copy(args.model, workdir) if args.as_cls else args.model
        input_path = os.path.join(workdir, "sentences.txt")
        write_sentences(sentences, input_path)
        t = time.monotonic()
        compute = lambda: compute_reference(model_dir, texts, args.prompt_name)  # noqa: E731
        cached = False
        if args.reference_cache:
            key = reference_key(args.model, texts, args.as_cls, args.prompt_name)
            ref, cached = cached_reference(args.reference_cache, key, compute)
        else:
            ref = compute()
        reference_s = time.monotonic() - t
        prompted_path = None
        if args.prompt_name is not None:
            prompt = ref.prompt
            # JSONL: a prompt may hold a newline (Qwen3-Embedding's "Instruct: ...\nQuery:").
            prompted_path = os.path.join(workdir, "prompted.jsonl")
            with open(prompted_path, "w", encoding="utf-8") as f:
                for text in texts:
                    f.write(json.dumps({"text": prompt + text}, ensure_ascii=False) + "\n")
            print(f"prompt: {args.prompt_name!r} = {prompt!r}")
        print(f"reference: {args.model}{' (as CLS)' if args.as_cls else ''}: {ref.description}"
              f"{' (read from ' + args.reference_cache + ', computed by an earlier run on the same input)' if cached else ''}")
        t = time.monotonic()
        our_embeddings, our_ids = compute_ours(args.embed_train, model_dir, input_path, workdir, numpy,
                                               args.prompt_name, prompted_path)
        embed_train_s = time.monotonic() - t

    embeddings = compare_embeddings(numpy, ref.embeddings, our_embeddings, args.atol)
    tokens = compare_token_ids(ref.ids, our_ids)
    print_embedding_result(embeddings, sentences)
    tokenizer = LazyTokenizer(args.model)  # the CLS copy, gone by now, has the same tokenizer
    print_token_result("tokens", tokens, sentences, ref.ids, our_ids, tokenizer)
    references_agree = ref.ids == ref.model_ids
    if references_agree:
        tokens_model = tokens
        print("tokens: AutoTokenizer and SentenceTransformer's own tokenization give the same ids")
    else:
        tokens_model = compare_token_ids(ref.model_ids, our_ids)
        print_token_result("tokens (SentenceTransformer's own tokenization)", tokens_model, sentences,
                           ref.model_ids, our_ids, tokenizer)
    timings = {"reference_s": round(reference_s, 2), "embed_train_s": round(embed_train_s, 2),
               "total_s": round(time.monotonic() - started, 2)}
    print(f"time: reference {timings['reference_s']}s, embed-train {timings['embed_train_s']}s, "
          f"total {timings['total_s']}s")

    return {
        "ok": embeddings["ok"] and tokens["ok"] and tokens_model["ok"],
        "model": args.model,
        "as_cls": args.as_cls,
        "sentence_files": args.sentences,
        "sentences": len(sentences),
        "max_seq_length": ref.max_seq_length,
        "embeddings": embeddings,
        "tokens": tokens,
        "tokens_sentence_transformer": tokens_model,
        "reference_tokenizers_agree": references_agree,
        "offending_origins": {
            "embeddings": [sentences[i].origin for i in embeddings["offending"]],
            "tokens": [sentences[i].origin for i in tokens["offending"]],
            "tokens_sentence_transformer": [sentences[i].origin for i in tokens_model["offending"]],
        },
        "versions": ref.versions,
        "timings": timings,
    }


def write_report(report, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, allow_nan=False)
        f.write("\n")


def main(argv=None):
    args = parse_args(argv)
    try:
        report = check(args)
    except Problem as e:
        print(f"parity: {e}", file=sys.stderr)
        if args.report:
            write_report({"ok": False, "error": str(e)}, args.report)
        return EXIT_PROBLEM
    if args.report:
        write_report(report, args.report)
    print(f"parity: {status_word(report['ok'])}")
    return EXIT_OK if report["ok"] else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())

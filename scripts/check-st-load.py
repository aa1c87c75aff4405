#!/usr/bin/env python3
"""Check that a model folder written by embed-train works in Python's sentence-transformers.

    python3 scripts/check-st-load.py MODEL_DIR INPUT.txt
    python3 scripts/check-st-load.py MODEL_DIR INPUT.txt --reference emb.npy   # encoded elsewhere
    python3 scripts/check-st-load.py MODEL_DIR INPUT.txt --prompt-name query   # with the folder's prompt
    python3 scripts/check-st-load.py MODEL_DIR INPUT.txt --quiet               # and no load report

Steps:
  1. model = SentenceTransformer(MODEL_DIR, device="cpu"): the folder must load as it is
     (modules.json, 1_Pooling, 2_Dense, the Hugging Face BERT and its tokenizer). With
     --quiet it must also load without a word of transformers' load report (weights
     MISSING, UNEXPECTED, "newly initialized"): what it writes while loading is captured.
  2. model.encode(...) on every sentence of INPUT (one a line; or JSONL with a "text"
     field, when the name ends in .jsonl), without normalization; with --prompt-name NAME
     or --prompt TEXT, model.encode(..., prompt_name=NAME) or (..., prompt=TEXT); with
     neither, the folder's default prompt applies, if it has one.
  3. The same sentences through `embed-train encode --model MODEL_DIR --input INPUT
     --output TMP.npy` with the same --prompt-name or --prompt (or the --reference .npy
     written by that command).
  4. Row by row: the same dimension, and cosine(python, embed-train) >= --min-cosine
     (default 0.9999) for every sentence.

Exit status: 0 all sentences agree; 1 some differ (they are listed, with the tokens the
Python tokenizer made of them); 2 a usage, installation or loading problem.

Needs: pip install sentence-transformers (brings torch, transformers, numpy); for a
folder with a sentencepiece tokenizer (spiece.model) also: pip install sentencepiece protobuf.
The embed-train binary: --embed-train PATH, else $DDP_EMBED_BIN/embed-train, else
build/embed-train of this repository.

A folder fine-tuned from a model.init that has BertModel's pooler weights (pooler.dense.*)
carries them through unchanged, so it loads without transformers' load report. One
trained from scratch has none (sentence-transformers never uses the pooler output), and
transformers then reports them MISSING, "newly initialized": harmless there.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args():
    parser = argparse.ArgumentParser(
        description="Load an embed-train model folder with sentence-transformers and compare its "
        "embeddings with `embed-train encode`.",
        epilog="Exit status: 0 all agree, 1 some sentences differ, 2 usage/installation/loading problem.",
    )
    parser.add_argument("model_dir", help="model folder written by training (OUTPUT_DIR/final)")
    parser.add_argument("input", help="sentences: one a line, or JSONL with a \"text\" field (.jsonl)")
    parser.add_argument("--reference", help="an .npy from `embed-train encode` of INPUT, instead of running it here")
    parser.add_argument("--embed-train", help="the embed-train binary (default: $DDP_EMBED_BIN/embed-train, "
                        "else build/embed-train of this repository)")
    parser.add_argument("--min-cosine", type=float, default=0.9999,
                        help="least cosine similarity per sentence (default 0.9999)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch on both sides")
    parser.add_argument("--quiet", action="store_true",
                        help="fail (status 1) when loading prints transformers' load report")
    prompts = parser.add_mutually_exclusive_group()
    prompts.add_argument("--prompt-name", help="the folder's prompt of this name before each sentence, on both sides")
    prompts.add_argument("--prompt", help="this text before each sentence, on both sides")
    return parser.parse_args()


def fail(message, status=2):
    print(f"check-st-load: {message}", file=sys.stderr)
    sys.exit(status)


def read_sentences(path):
    """The sentences as embed-train reads them: every line of a text file (Windows line
    ends dropped), or the "text" of every non-blank line of a .jsonl/.json file."""
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no new one
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if not path.endswith((".jsonl", ".json")):
        return lines
    return [json.loads(line)["text"] for line in lines if line.strip()]


def embed_train_binary(given):
    if given:
        return given
    if os.environ.get("DDP_EMBED_BIN"):
        return os.path.join(os.environ["DDP_EMBED_BIN"], "embed-train")
    return str(REPO / "build" / "embed-train")


def encode_with_embed_train(args, workdir):
    """Runs `embed-train encode` into workdir/embed-train.npy and returns the path."""
    binary = embed_train_binary(args.embed_train)
    if not os.access(binary, os.X_OK):
        fail(f"no embed-train at {binary} (build it, or give --embed-train PATH or --reference FILE.npy)")
    output = os.path.join(workdir, "embed-train.npy")
    command = [binary, "encode", "--model", args.model_dir, "--input", args.input, "--output", output,
               "--batch-size", str(args.batch_size)]
    if args.prompt_name is not None:
        command += ["--prompt-name", args.prompt_name]
    if args.prompt is not None:
        command += ["--prompt", args.prompt]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        fail(f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stderr}")
    return output


def load_sentence_transformer(model_dir):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        fail(f"cannot import sentence_transformers ({e}): pip install sentence-transformers")
    try:
        return SentenceTransformer(model_dir, device="cpu")
    except Exception as e:  # any loading failure is the finding this script exists for
        fail(f"SentenceTransformer({model_dir!r}) failed: {type(e).__name__}: {e}")


LOAD_REPORT_WORDS = ("LOAD REPORT", "MISSING", "UNEXPECTED", "newly initialized")


def load_capturing_output(model_dir):
    """(the model, what loading wrote to file descriptors 1 and 2): transformers' load
    report is a logger.warning, written on every load."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as captured:
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            model = load_sentence_transformer(model_dir)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            captured.seek(0)
            said = captured.read()
            if "check-st-load:" in said:  # a loading failure: say it where it can be read
                sys.stderr.write(said)
    return model, said


def describe(model):
    """What sentence-transformers made of the folder, for the report."""
    # sentence-transformers 6 renamed get_sentence_embedding_dimension (which now warns).
    dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    prompts = {name: text for name, text in model.prompts.items() if text}
    return (f"modules {[type(m).__name__ for m in model]}, dimension {dimension()}, "
            f"max_seq_length {model.max_seq_length}, tokenizer {type(model.tokenizer).__name__}, "
            f"prompts {prompts}, default prompt {model.default_prompt_name}")


def main():
    args = parse_args()
    if not os.path.isdir(args.model_dir):
        fail(f"{args.model_dir} is not a folder")
    sentences = read_sentences(args.input)
    if not sentences:
        fail(f"{args.input} holds no sentences")

    try:
        import numpy as np
    except ImportError:
        fail("cannot import numpy: pip install sentence-transformers (it brings numpy)")

    if args.quiet:
        model, said = load_capturing_output(args.model_dir)
        words = [w for w in LOAD_REPORT_WORDS if w in said]
        if words:
            print(f"FAIL: {args.model_dir} loads with a report ({', '.join(words)}):\n{said}")
            return 1
        print(f"{args.model_dir} loads quietly")
    else:
        model = load_sentence_transformer(args.model_dir)
    print(f"loaded {args.model_dir}: {describe(model)}")
    python = model.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True,
                          normalize_embeddings=False, show_progress_bar=False, prompt_name=args.prompt_name,
                          prompt=args.prompt).astype(np.float64)

    with tempfile.TemporaryDirectory() as workdir:
        reference = args.reference or encode_with_embed_train(args, workdir)
        ours = np.load(reference).astype(np.float64)

    if ours.shape != python.shape:
        fail(f"shapes differ: sentence-transformers {python.shape}, embed-train {ours.shape}", status=1)

    norms = np.linalg.norm(python, axis=1) * np.linalg.norm(ours, axis=1)
    cosine = (python * ours).sum(axis=1) / np.maximum(norms, 1e-30)
    bad = [i for i in range(len(sentences)) if not cosine[i] >= args.min_cosine]
    print(f"{len(sentences)} sentences, dimension {python.shape[1]}: cosine min {cosine.min():.7f}, "
          f"mean {cosine.mean():.7f}; largest absolute difference {np.abs(python - ours).max():.3g}")
    if not bad:
        print(f"OK: every sentence has cosine >= {args.min_cosine}")
        return 0

    tokenizer = model.tokenizer
    print(f"FAIL: {len(bad)} of {len(sentences)} sentences below cosine {args.min_cosine}:")
    for i in bad[:20]:
        print(f"  line {i + 1}: cosine {cosine[i]:.7f}  {sentences[i]!r}")
        print(f"    python tokens: {tokenizer.convert_ids_to_tokens(tokenizer(sentences[i])['input_ids'])}")
    if len(bad) > 20:
        print(f"  ... and {len(bad) - 20} more")
    return 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The helpers of scripts/gpu-check.sh (which says what the check does):

  same-steps NAME REF RUN... --abs TOL [--from S] [--to E]
      the loss of every step S..E of RUN (several run folders are joined by step: a run
      resumed in another folder) within TOL of REF's
  final NAME REF RUN --last N --rel TOL
      the mean loss of the last N steps of RUN within TOL (relative) of REF's
  has-key NAME RUN KEY         every training line of RUN's metrics.jsonl has KEY
  value RUN KEY                the last value of KEY in RUN's metrics.jsonl, or "-"
  gtest-summary JSON --console LOG --exit-status RC [--filter F] [--rehearsal]
                               a gtest run's result (--gtest_output=json), its skips sorted;
                               FAIL for each pattern of the --gtest_filter F that matched no test
  goals TABLE --label L [--mfu-goal F]   the GPU goals against a bench table (table.json)
  batch-fit CONFIG --max-length S --gpu-mib M   the bench's batch: the largest that fits on paper
  has-key-json KEY             exit 0 when the JSON on stdin has KEY (dotted: model.attention), 1
                               when not, 2 when stdin is not JSON
  profile TRACE --steps N      what LibTorch's profiler trace says about a step on the GPU
  minilm-pack SRC DST [--fp32] the packaged all-MiniLM-L6-v2, its weights as float16
  minilm-restore SRC DST       ... and back to float32 on the GPU machine
  unpack-deb DEB DEST          a Debian package's files, where dpkg-deb is absent

Each check prints one line, "PASS name: ..." or "FAIL name: ...", and exits 0 (it
passed) or 1. Standard library only, but for minilm-* (torch, safetensors)."""
import argparse
import fnmatch
import gzip
import io
import json
import lzma
import math
import os
import re
import shutil
import sys
import tarfile


# ---- training runs ---------------------------------------------------------------------

class MissingRun(Exception):
    pass


def losses(run_dirs):
    """step -> loss over the training lines of the runs' metrics.jsonl (later runs win)."""
    out = {}
    for d in run_dirs:
        path = os.path.join(d, "metrics.jsonl")
        if not os.path.exists(path):
            raise MissingRun(f"{path} is missing (the run failed?)")
        with open(path) as f:
            for line in f:
                m = json.loads(line)
                if "loss" in m and "step" in m:
                    out[int(m["step"])] = float(m["loss"])
    return out


def verdict(ok, name, text):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {text}")
    return 0 if ok else 1


def cmd_same_steps(a):
    ref, run = losses([a.ref]), losses(a.runs)
    first = a.first if a.first is not None else min(run, default=1)
    last = a.last if a.last is not None else max(run, default=0)
    steps = list(range(first, last + 1))
    missing = [s for s in steps if s not in ref or s not in run]
    if missing or not steps:
        return verdict(False, a.name, f"steps {missing[:5]} missing (ref has {len(ref)}, run has {len(run)})")
    diffs = [abs(run[s] - ref[s]) for s in steps]
    worst = max(range(len(steps)), key=lambda i: diffs[i])
    finite = all(math.isfinite(run[s]) for s in steps)
    return verdict(finite and diffs[worst] <= a.abs, a.name,
                   f"steps {first}-{last}: max |loss difference| {diffs[worst]:.2e} at step {steps[worst]} "
                   f"(tolerance {a.abs:g}; loss there {ref[steps[worst]]:.6f} vs {run[steps[worst]]:.6f})")


def cmd_final(a):
    ref, run = losses([a.ref]), losses([a.run])
    if len(ref) < a.last or len(run) < a.last:
        return verdict(False, a.name, f"too few steps ({len(ref)}, {len(run)})")
    mean = lambda d: sum(d[s] for s in sorted(d)[-a.last:]) / a.last
    r, x = mean(ref), mean(run)
    rel = abs(x - r) / abs(r)
    last_ref, last_run = ref[max(ref)], run[max(run)]
    return verdict(math.isfinite(x) and rel <= a.rel, a.name,
                   f"mean loss of the last {a.last} steps {x:.4f} vs {r:.4f}: {100 * rel:.2f}% apart "
                   f"(tolerance {100 * a.rel:g}%; last step {last_run:.4f} vs {last_ref:.4f})")


def training_lines(run):
    if not os.path.exists(os.path.join(run, "metrics.jsonl")):
        raise MissingRun(f"{run}/metrics.jsonl is missing (the run failed?)")
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [m for m in map(json.loads, f) if "loss" in m]


def cmd_has_key(a):
    lines = training_lines(a.run)
    have = sum(1 for m in lines if a.key in m)
    return verdict(bool(lines) and have == len(lines), a.name, f"{a.key} on {have} of {len(lines)} training lines")


def cmd_value(a):
    value = "-"
    path = os.path.join(a.run, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for m in map(json.loads, f):
                if a.key in m:
                    value = m[a.key]
    print(f"{value:.4g}" if isinstance(value, float) else value)


# ---- the CUDA tests ------------------------------------------------------------------------

# A skip that is right on a GPU machine: the test covers the CPU-only side (a program that
# finds an NVIDIA driver loads CUDA at start, tests/torch/test_cuda_module.cpp).
EXPECTED_ON_GPU = ("an NVIDIA driver",)


def skip_reasons(console):
    """gtest's console: the line after '...: Skipped' in each skipped test's output."""
    reasons, current, after_skip = {}, None, False
    for line in console.splitlines():
        m = re.match(r"^\[ RUN      \] (\S+)", line)
        if m:
            current, after_skip = m.group(1), False
            continue
        if current and current not in reasons:
            if after_skip and line.strip():
                reasons[current] = line.strip()
            after_skip = after_skip or line.rstrip().endswith(": Skipped")
    return reasons


def cmd_gtest_summary(a):
    with open(a.console, errors="replace") as f:
        console = f.read()
    if not os.path.exists(a.json):
        tail = " | ".join(l.strip() for l in console.splitlines()[-4:])
        return verdict(False, "cuda tests", f"no result file (the test program crashed? exit status {a.exit_status}): {tail}")
    with open(a.json) as f:
        report = json.load(f)
    ran, skipped, failed = [], [], []
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            if t.get("failures"):
                first = t["failures"][0].get("failure", "").strip().splitlines()
                failed.append(f"{name} ({' '.join(first[:2])[:160]})")
            elif t.get("result") == "SKIPPED":
                skipped.append(name)
            elif t.get("status") == "RUN":
                ran.append(name)
    status = 0
    # A name in the filter that matches no test (a test renamed, a suite moved) checks nothing,
    # silently: each must match at least one test that ran, skipped or failed.
    names = ran + skipped + [f.split(" (", 1)[0] for f in failed]
    positive = (a.filter or "").split("-", 1)[0]
    stale = [p for p in positive.split(":") if p and not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if stale:
        status |= verdict(False, "cuda tests filter", f"{len(stale)} of its names match no test of this "
                          f"torch_tests (renamed? fix the filter in scripts/gpu-check.sh): {', '.join(stale)}")
    reasons = skip_reasons(console)
    expected = [n for n in skipped if any(k in reasons.get(n, "") for k in EXPECTED_ON_GPU)]
    other = [f"{n} ({reasons.get(n, 'reason not found')})" for n in skipped if n not in expected]
    if not ran and not skipped and not failed:
        return verdict(False, "cuda tests", f"no test matched the filter (exit status {a.exit_status})")
    if failed:
        status |= verdict(False, "cuda tests", f"{len(failed)} of {len(ran) + len(failed)} failed: {'; '.join(failed[:10])}")
    else:
        print(f"PASS cuda tests: {len(ran)} ran, none failed: {', '.join(ran[:30])}")
    if a.rehearsal:
        if other:
            print(f"NOTE cuda tests: rehearsal: {len(other)} skipped without a GPU: {'; '.join(other[:20])}")
    elif other:
        # On the GPU machine a CUDA test that skips has not checked anything.
        status |= verdict(False, "cuda tests skipped", f"{len(other)} skipped on the GPU machine: {'; '.join(other[:20])}")
    if expected:
        print(f"NOTE cuda tests: {len(expected)} skipped as they should be where there is a driver (the CPU-only "
              f"side): {', '.join(expected)}")
    if a.exit_status != 0 and not failed:
        status |= verdict(False, "cuda tests", f"the test program exited with status {a.exit_status}, no test failed")
    return status


# ---- the benchmark's goals ---------------------------------------------------------------

def cmd_goals(a):
    """The issue's goals against one bench table (bench_table.py's table.json), for each row of
    ours (ours, or ours-padded and ours-packed): MFU (where a goal is given), tokens/s against
    sentence-transformers' at equal batch, peak GPU memory against theirs."""
    if not os.path.exists(a.table):
        print(f"NOTE {a.label}: {a.table} was not written (the bench did not finish)")
        return 0
    with open(a.table) as f:
        rows = {r["system"]: r for r in json.load(f)["rows"]}
    st = rows.get("st") or {}
    for system in sorted(r for r in rows if r.startswith("ours")):
        goals_of_row(a, f"{a.label}, {system}", rows[system], st)
    return 0


def goals_of_row(a, label, ours, st):
    pct = lambda r: f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
    if a.mfu_goal is not None:
        if ours.get("mfu") is None:
            result = "n/a (no MFU: no peak known for this card; PEAK_TFLOPS sets one)"
        else:
            result = "met" if ours["mfu"] >= a.mfu_goal else "missed"
        print(f"GOAL {label}: MFU >= {100 * a.mfu_goal:.0f}%: ours {pct(ours)}, sentence-transformers {pct(st)}"
              f" -- {result}")
    else:
        print(f"NOTE {label}: MFU ours {pct(ours)}, sentence-transformers {pct(st)}")
    if ours.get("tokens_per_s") and st.get("tokens_per_s"):
        ratio = ours["tokens_per_s"] / st["tokens_per_s"]
        print(f"GOAL {label}: tokens/s >= 1.5x sentence-transformers' at equal batch: {ratio:.2f}x "
              f"({ours['tokens_per_s']:.0f} vs {st['tokens_per_s']:.0f}) -- {'met' if ratio >= 1.5 else 'missed'}")
    else:
        print(f"NOTE {label}: no tokens/s of sentence-transformers to compare with")
    if ours.get("peak_gpu_mb") and st.get("peak_gpu_mb"):
        ratio = ours["peak_gpu_mb"] / st["peak_gpu_mb"]
        print(f"GOAL {label}: peak GPU memory <= sentence-transformers': {ours['peak_gpu_mb']:.0f} vs "
              f"{st['peak_gpu_mb']:.0f} MB ({ratio:.2f}x) -- {'met' if ratio <= 1.0 else 'missed'}")


# ---- the bench's batch ----------------------------------------------------------------------

def cmd_batch_fit(a):
    """The largest power of two of pairs whose training memory on paper fits a fraction of the
    GPU: activations per sequence s*L*h*(34 + 5*a*s/h) bytes (Korthikanti et al. 2022, 16-bit
    activations with the attention scores kept; an FFN of 4h, as BERT's and MiniLM's), at the
    padded length (sentence-transformers pads a batch to its longest text, which a large batch
    of these pairs brings to max_length), two sequences a pair; the model state 16 bytes a
    parameter (fp32 weights, gradients, Adam's two moments); MNRL's batch x batch scores in
    fp32 with their softmax and gradient, 12 bytes each. The rest of the GPU is for what the
    formula leaves out: autocast's fp32 copies, the caching allocator's slack, cuBLAS."""
    with open(a.config) as f:
        c = json.load(f)
    layers, hidden, heads = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
    inner, vocab = c["intermediate_size"], c.get("vocab_size", 30522)
    s = a.max_length
    per_pair = 2 * s * layers * hidden * (34 + 5 * heads * s / hidden)
    params = layers * (4 * hidden * hidden + 2 * hidden * inner) + (vocab + c.get("max_position_embeddings", 512)) * hidden
    budget = a.fraction * a.gpu_mib * 2**20 - 16 * params
    batch = 1
    while (2 * batch) * per_pair + 12 * (2 * batch) ** 2 <= budget:
        batch *= 2
    print(f"{batch} {batch} pairs a step: the largest power of two whose training memory on paper fits "
          f"{100 * a.fraction:.0f}% of the GPU's {a.gpu_mib} MiB: activations {per_pair / 2**20:.1f} MiB a pair "
          f"(2 x {s} tokens x {layers} layers x {hidden} x (34 + 5 x {heads} x {s} / {hidden}) bytes, "
          f"Korthikanti et al. 2022), model state {16 * params / 2**30:.2f} GiB (16 bytes x {params / 1e6:.0f} M "
          f"parameters), MNRL's scores {12 * batch * batch / 2**20:.0f} MiB; the rest for what that leaves out")
    return 0


def cmd_has_key_json(a):
    """Exit 0: the key is there; 1: it is not; 2: stdin is not JSON (said on stderr)."""
    try:
        node = json.load(sys.stdin)
    except ValueError as e:
        print(f"has-key-json: the input is not JSON: {e}", file=sys.stderr)
        return 2
    for part in a.key.split("."):
        if not isinstance(node, dict) or part not in node:
            return 1
        node = node[part]
    return 0


# ---- the profile ---------------------------------------------------------------------------

def cmd_profile(a):
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        trace = json.load(f)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    cat = lambda e: str(e.get("cat", "")).lower()
    kernels = [e for e in events if cat(e) in ("kernel", "gpu_kernel")]
    ops = [e for e in events if cat(e) in ("cpu_op", "operator")]
    runtime = [e for e in events if cat(e) in ("cuda_runtime", "cuda_driver", "runtime")]
    steps = max(1, a.steps)
    if not kernels:
        print(f"NOTE profile: no GPU kernel in the trace ({len(events)} events): the CUDA activity was not recorded")
        return 0
    # The GPU's busy share of the recorded span (kernels' union against first start..last end).
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in kernels)
    busy, end = 0.0, -1e30
    for s, t in spans:
        if t > end:
            busy += t - max(s, end)
            end = t
    window = spans[-1][1] - spans[0][0]
    by_name = {}
    for e in kernels:
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + float(e.get("dur", 0))
    total = sum(by_name.values())
    print(f"NOTE profile: {len(kernels) / steps:.0f} kernels a step, {total / steps / 1000:.1f} ms of kernels a step; "
          f"the GPU busy {100 * busy / max(window, 1):.0f}% of the recorded {window / 1000:.1f} ms")
    for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:12]:
        print(f"NOTE profile: {us / steps / 1000:8.2f} ms/step {100 * us / total:5.1f}%  {name[:110]}")
    op_names = {e["name"] for e in ops}
    sdpa = sorted(n for n in op_names if "scaled_dot_product" in n or "flash_attention" in n
                  or "efficient_attention" in n or "cudnn_attention" in n)
    attn_kernels = sorted({n for n in by_name if re.search(r"flash|fmha|attention|attn", n, re.I)})
    backend = ("flash" if any("flash" in n for n in sdpa) else "memory-efficient" if any("efficient" in n for n in sdpa)
               else "cuDNN" if any("cudnn" in n for n in sdpa) else "math (no fused kernel)" if sdpa else "not seen")
    print(f"NOTE profile: attention: {backend}; ops {', '.join(sdpa) or '-'}; kernels "
          f"{', '.join(k[:60] for k in attn_kernels[:4]) or '-'}")
    adam = sorted(n for n in op_names if "adam" in n.lower() or "foreach" in n.lower())
    print(f"NOTE profile: optimizer ops: {', '.join(adam[:6]) or '-'}")
    sync_names = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                  "cuStreamSynchronize", "cuCtxSynchronize")
    syncs = {}
    for e in runtime:
        if e["name"] in sync_names:
            syncs[e["name"]] = syncs.get(e["name"], 0) + 1
    scalars = sum(1 for e in ops if e["name"] in ("aten::item", "aten::_local_scalar_dense"))
    print(f"NOTE profile: host waits a step: "
          f"{', '.join(f'{n} {c / steps:g}' for n, c in sorted(syncs.items())) or 'no synchronizing call'}; "
          f"aten::item / _local_scalar_dense {scalars / steps:g}")
    nccl = sum(1 for e in kernels if "nccl" in e["name"].lower())
    print(f"NOTE profile: NCCL kernels a step: {nccl / steps:g}")
    return 0


# ---- the model that travels ------------------------------------------------------------------

def copy_package(src, dst, skip):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    for base, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(base, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in files:
            if not skip(name):
                shutil.copy2(os.path.join(base, name), os.path.join(dst, rel, name))


def convert(src_file, dst_file, dtype_from, dtype_to):
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    tensors, worst = {}, 0.0
    with safe_open(src_file, framework="pt") as f:
        metadata = f.metadata()
        for key in f.keys():
            t = f.get_tensor(key)
            if t.dtype == getattr(torch, dtype_from):
                c = t.to(getattr(torch, dtype_to))
                worst = max(worst, (c.double() - t.double()).abs().max().item() if t.numel() else 0.0)
                t = c
            tensors[key] = t.contiguous()
    save_file(tensors, dst_file, metadata=metadata)
    os.chmod(dst_file, 0o644)
    return worst


def cmd_minilm_pack(a):
    copy_package(a.src, a.dst, lambda n: n.endswith(".safetensors") and not a.fp32)
    report = {"weights": "float32" if a.fp32 else "float16", "files": {}}
    if not a.fp32:
        for base, _, files in os.walk(a.src):
            for name in files:
                if name.endswith(".safetensors"):
                    out = os.path.join(a.dst, os.path.relpath(base, a.src), name[:-len(".safetensors")] + ".fp16.safetensors")
                    report["files"][os.path.relpath(out, a.dst)] = convert(os.path.join(base, name), out, "float32", "float16")
                    # xz: float16 weights lose 10% (45.4 MB to 40.8), which keeps what travels
                    # under 60 MiB; unpacking costs the machine about 2 s.
                    with open(out, "rb") as f, lzma.open(out + ".xz", "wb", preset=6) as g:
                        shutil.copyfileobj(f, g, 1 << 20)
                    os.remove(out)
    with open(os.path.join(a.dst, "gpu-check-weights.json"), "w") as f:
        json.dump(report, f, indent=1)
    worst = max(report["files"].values(), default=0.0)
    print(f"minilm-pack: {a.dst}: weights {report['weights']}"
          + (f", largest rounding error {worst:.2e}" if not a.fp32 else ""))


def cmd_minilm_restore(a):
    with open(os.path.join(a.src, "gpu-check-weights.json")) as f:
        report = json.load(f)
    copy_package(a.src, a.dst, lambda n: n.endswith((".fp16.safetensors", ".fp16.safetensors.xz"))
                 or n == "gpu-check-weights.json")
    for rel in report["files"]:
        src = os.path.join(a.src, rel)
        dst = os.path.join(a.dst, rel[:-len(".fp16.safetensors")] + ".safetensors")
        if not os.path.exists(src) and os.path.exists(src + ".xz"):  # packed by minilm-pack: unpacked beside dst
            with lzma.open(src + ".xz", "rb") as f, open(dst + ".fp16", "wb") as g:
                shutil.copyfileobj(f, g, 1 << 20)
            src = dst + ".fp16"
        convert(src, dst, "float16", "float32")
        if src == dst + ".fp16":
            os.remove(src)
    worst = max(report["files"].values(), default=0.0)
    note = (f"float16-rounded copy of the packaged weights, float32 again (largest rounding error {worst:.1e})"
            if report["weights"] == "float16" else "the packaged float32 weights")
    with open(os.path.join(a.dst, "gpu-check-weights.txt"), "w") as f:
        f.write(note + "\n")
    print(note)


# ---- Debian packages without dpkg ------------------------------------------------------------

def cmd_unpack_deb(a):
    with open(a.deb, "rb") as f:
        data = f.read()
    if not data.startswith(b"!<arch>\n"):
        raise SystemExit(f"{a.deb}: not a Debian package (an ar archive)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".xz"):
                body = lzma.decompress(body)
            elif name.endswith(".gz"):
                body = gzip.decompress(body)
            elif name != "data.tar":
                raise SystemExit(f"{a.deb}: {name}: compression not handled here (install dpkg)")
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                if hasattr(tarfile, "fully_trusted_filter"):
                    tar.extractall(a.dest, filter="fully_trusted")  # the package's hash was checked
                else:
                    tar.extractall(a.dest)
            return 0
    raise SystemExit(f"{a.deb}: no data.tar member")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("same-steps")
    p.add_argument("name"); p.add_argument("ref"); p.add_argument("runs", nargs="+")
    p.add_argument("--abs", type=float, required=True)
    p.add_argument("--from", dest="first", type=int); p.add_argument("--to", dest="last", type=int)
    p = sub.add_parser("final")
    p.add_argument("name"); p.add_argument("ref"); p.add_argument("run")
    p.add_argument("--last", type=int, default=10); p.add_argument("--rel", type=float, required=True)
    p = sub.add_parser("has-key")
    p.add_argument("name"); p.add_argument("run"); p.add_argument("key")
    p = sub.add_parser("value")
    p.add_argument("run"); p.add_argument("key")
    p = sub.add_parser("gtest-summary")
    p.add_argument("json"); p.add_argument("--console", required=True)
    p.add_argument("--exit-status", type=int, required=True); p.add_argument("--rehearsal", action="store_true")
    p.add_argument("--filter", help="the --gtest_filter the run had: each of its names must match a test")
    p = sub.add_parser("batch-fit")
    p.add_argument("config"); p.add_argument("--max-length", type=int, required=True)
    p.add_argument("--gpu-mib", type=int, required=True); p.add_argument("--fraction", type=float, default=0.5)
    p = sub.add_parser("has-key-json")
    p.add_argument("key")
    p = sub.add_parser("goals")
    p.add_argument("table"); p.add_argument("--label", required=True)
    p.add_argument("--mfu-goal", type=float)
    p = sub.add_parser("profile")
    p.add_argument("trace"); p.add_argument("--steps", type=int, required=True)
    p = sub.add_parser("minilm-pack")
    p.add_argument("src"); p.add_argument("dst"); p.add_argument("--fp32", action="store_true")
    p = sub.add_parser("minilm-restore")
    p.add_argument("src"); p.add_argument("dst")
    p = sub.add_parser("unpack-deb")
    p.add_argument("deb"); p.add_argument("dest")
    a = ap.parse_args()
    try:
        return globals()["cmd_" + a.cmd.replace("-", "_")](a) or 0
    except MissingRun as e:
        print(f"FAIL {getattr(a, 'name', a.cmd)}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

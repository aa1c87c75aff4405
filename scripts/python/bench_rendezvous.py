"""What the elastic rendezvous costs and withstands, measured on this machine's loopback.

  1. A config that cannot train (train.batch_size 15 over 2 workers) under
     `ddp-launch --max-restarts 3`: plain (--nproc 2), and elastic on 1, 2 and 3 nodes
     (--nnodes 1:N, one launcher a node): the exit statuses, how many times the workers
     started, and the time until every launcher is out (goal: one attempt, all out
     within 10 s).
  2. A stranger's flood: a training job (--nnodes 1:2, one node, 2 workers, the job
     secret given) with and without 10,000 connections a minute that send garbage, a join
     without the handshake, or nothing: the median step_ms of each (goal: within 10%),
     and whether any stranger became a node.

The rendezvous at 128 launchers is tests/launch/test_launch_scale.cpp:
  DDP_LAUNCH_SCALE_NODES=128 build/tests/unit_tests --gtest_filter='LaunchScale.*'
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import threading
import time


def tiny_config(args, out, batch_size, steps):
    return {
        "model": {"vocab_size": 30522, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 64,
                  "max_position": 64, "dropout": 0.0, "pooling": "mean", "projection_dim": 16},
        "tokenizer": {"type": "wordpiece", "path": args.vocab, "max_length": 32},
        "data": {"train": args.train, "eval": None},
        "loss": {"type": "pairwise_sigmoid", "temperature": 0.05},
        "train": {"batch_size": batch_size, "grad_accum_steps": 1, "lr": 1e-3, "warmup_steps": 0,
                  "schedule": "constant", "max_steps": steps, "seed": 7},
        "dist": {"timeout_s": 60},
        "output": {"dir": out, "log_every": 1, "save_every": 0, "eval_every": 0, "resume": "never"},
    }


def write_config(path, cfg):
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_error(args):
    cfg = write_config(os.path.join(args.work, "bad.json"),
                       tiny_config(args, os.path.join(args.work, "bad-out"), 15, 5))
    launch, train = os.path.join(args.bin, "ddp-launch"), os.path.join(args.bin, "embed-train")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cases = [("plain --nproc 2", [[launch, "--nproc", "2", "--max-restarts", "3", train, "--config", cfg]])]
    for n in (1, 2, 3):
        port = free_port()
        line = [launch, "--nnodes", "1:%d" % max(n, 2), "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--max-restarts", "3", "--join-timeout", "1", train, "--config", cfg]
        cases.append(("elastic, %d node(s), --nnodes 1:%d" % (n, max(n, 2)), [line] * n))
    print("1. a config that cannot train, ddp-launch --max-restarts 3:")
    for name, lines in cases:
        start = time.monotonic()
        procs = [subprocess.Popen(l, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for l in lines]
        outs = [p.communicate()[0] for p in procs]
        took = time.monotonic() - start
        errors = sum(o.count("embed-train: error:") for o in outs)
        again = sum(o.count("restarting all") + o.count("round 1") for o in outs)
        print("   %-34s exit %-9s restarts or later rounds: %d; the error printed %d time(s) (once a failed rank, "
              "and the launcher's report); all out in %.1f s"
              % (name, ",".join(str(p.returncode) for p in procs), again, errors, took))


def flood(port, per_minute, stop, counts):
    """Connections at `per_minute`, a third each: garbage, a join without the handshake, silence."""
    gap = 60.0 / per_minute
    held = []
    i = 0
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            if i % 3 == 0:
                s.sendall(b'{"op":"frobnicate","junk":"' + b"x" * 500 + b'"}\n')
            elif i % 3 == 1:
                s.sendall(b'{"op":"join","run_id":"x","run_id_given":false,"host":"stranger","addr":"",'
                          b'"nproc":2,"min_nodes":1,"max_nodes":2,"join_timeout_s":1,"grace_s":1,'
                          b'"preferred_rank":0,"store_port":1,"max_restarts":0,"max_membership_changes":0}\n')
            held.append(s)
            counts[0] += 1
        except OSError:
            counts[1] += 1
        if len(held) > 200:
            for s in held[:100]:
                s.close()
            held = held[100:]
        i += 1
        next_at += gap
        time.sleep(max(0.0, next_at - time.monotonic()))
    for s in held:
        s.close()


def median_step_ms(metrics):
    ms = []
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if "step_ms" in record and record.get("step", 0) > 2:  # past the first steps' warm-up
                ms.append(record["step_ms"])
    return statistics.median(ms), len(ms)


def step_time(args, with_flood):
    tag = "flood" if with_flood else "quiet"
    out = os.path.join(args.work, tag)
    cfg = write_config(os.path.join(args.work, tag + ".json"), tiny_config(args, out, 16, args.steps))
    key = os.path.join(args.work, "job.key")
    with open(key, "w") as f:
        f.write("a-secret-of-the-bench-0123456789\n")
    os.chmod(key, 0o600)
    port = free_port()
    line = [os.path.join(args.bin, "ddp-launch"), "--nnodes", "1:2", "--rdzv-endpoint", "127.0.0.1:%d" % port,
            "--join-timeout", "1", "--rdzv-secret-file", key, "--nproc", "2",
            os.path.join(args.bin, "embed-train"), "--config", cfg]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop, counts = threading.Event(), [0, 0]
    thread = None
    if with_flood:
        time.sleep(0.5)
        thread = threading.Thread(target=flood, args=(port, args.per_minute, stop, counts))
        thread.start()
    output = proc.communicate()[0]
    stop.set()
    if thread:
        thread.join()
    if proc.returncode != 0:
        raise SystemExit("bench-rendezvous: the %s run failed (exit %d):\n%s" % (tag, proc.returncode, output[-3000:]))
    median, n = median_step_ms(os.path.join(out, "metrics.jsonl"))
    strangers = output.count("stranger")
    return median, n, counts, output.count("round 1"), strangers


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--vocab", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--per-minute", type=int, default=10000)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    config_error(args)
    print("2. step time of a 2-worker job (%d steps) with and without %d stranger connections a minute:"
          % (args.steps, args.per_minute))
    quiet, n_quiet, _, _, _ = step_time(args, False)
    flooded, n_flood, counts, rounds, strangers = step_time(args, True)
    print("   quiet: median step_ms %.1f over %d steps" % (quiet, n_quiet))
    print("   flood: median step_ms %.1f over %d steps (%+.1f%%); %d connections made, %d refused by the kernel; "
          "later rounds: %d; a stranger's name in the log: %d" %
          (flooded, n_flood, 100.0 * (flooded / quiet - 1), counts[0], counts[1], rounds, strangers))


if __name__ == "__main__":
    main()

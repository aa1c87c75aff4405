"""What an elastic job costs when machines come and go, and that its model does not change.

Three test hosts made of network namespaces joined by a bridge (as tests/multihost/test_hosts.h
makes them: 10.77.0.1-3, nothing outside touched), one `ddp-launch --nnodes 2:3
--rdzv-endpoint 10.77.0.1:PORT --nproc 1` on each (host 0 serves the rendezvous), the tiny
BERT of the tests: global batch 12, train.grad_accum_steps 2, checkpoints every 5 steps.

  loss     a campaign of KILLS runs: in each, one host other than the rendezvous' (1 or 2,
           drawn) is killed (SIGKILL to everything on it) when training reaches a drawn
           step; the two others must finish with the uninterrupted run's model (losses
           within 1e-5, weights within 1e-5 of their scale plus 5% of one step's lr, as
           tests/torch/e2e_support.h's expect_same_model). Timed: from the kill to the first
           step the survivors train (the first loss line after the membership_change line).
  arrival  ARRIVALS runs: host 2 killed, the two others training on, then host 2 started
           again; timed: from its launcher's start to the first step of the 3-node round.
           The model is checked as above.

Run as root (scripts/bench-elastic.sh builds, then runs this). Prints a line per run and the
medians.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import load_file

PREFIX = "ddpeb%d" % os.getpid()
PORT = 29670


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("`%s` failed: %s" % (cmd, r.stdout + r.stderr))
    return r.stdout


class Hosts:
    def __init__(self, n):
        self.n = n
        self.switch = PREFIX + "-sw"
        steps = ["ip netns add %s" % self.switch, "ip -n %s link set lo up" % self.switch,
                 "ip -n %s link add br0 type bridge" % self.switch, "ip -n %s link set br0 up" % self.switch]
        for i in range(n):
            h = self.ns(i)
            steps += ["ip netns add %s" % h, "ip -n %s link set lo up" % h,
                      "ip -n %s link add p%d type veth peer name eth0 netns %s" % (self.switch, i, h),
                      "ip -n %s link set p%d master br0" % (self.switch, i), "ip -n %s link set p%d up" % (self.switch, i),
                      "ip -n %s addr add %s/24 dev eth0" % (h, self.address(i)), "ip -n %s link set eth0 up" % h]
        for step in steps:
            sh(step)

    def ns(self, i):
        return "%s-h%d" % (PREFIX, i)

    def address(self, i):
        return "10.77.0.%d" % (i + 1)

    def kill(self, i):
        for pid in sh("ip netns pids %s" % self.ns(i), check=False).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def empty(self, i):
        return not sh("ip netns pids %s" % self.ns(i), check=False).split()

    def remove(self):
        for i in range(self.n):
            self.kill(i)
        for name in [self.switch] + [self.ns(i) for i in range(self.n)]:
            sh("ip netns del %s" % name, check=False)


def metrics(out):
    lines = []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                if line.endswith("\n"):
                    lines.append(json.loads(line))
    except FileNotFoundError:
        pass
    return lines


def losses(out):
    return {l["step"]: l["loss"] for l in metrics(out) if "loss" in l}


def first_step_after_change(out, joined=False):
    """Whether a loss line follows a membership_change line (one that adds a node, if joined)."""
    seen = False
    for l in metrics(out):
        if l.get("event") == "membership_change" and (not joined or l.get("joined")):
            seen = True
        elif seen and "loss" in l:
            return True
    return False


def same_model(ref, out, steps, lr=1e-3):
    a, b = losses(ref), losses(out)
    if len(b) != steps:
        return "%d of %d steps logged" % (len(b), steps)
    for step, loss in a.items():
        if abs(b[step] - loss) > 1e-5 * abs(loss):
            return "loss at step %d: %r vs %r" % (step, b[step], loss)
    for f in ["final/model.safetensors", "final/2_Dense/model.safetensors"]:
        wa, wb = load_file(os.path.join(ref, f)), load_file(os.path.join(out, f))
        for k, va in wa.items():
            worst, scale = float(np.abs(va - wb[k]).max()), float(np.abs(va).max())
            if worst > 1e-5 * scale + 0.05 * lr:
                return "%s %s differs by %g (scale %g)" % (f, k, worst, scale)
    return ""


def wait_for(condition, limit, what):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if condition():
            return time.monotonic()
        time.sleep(0.01)
    raise RuntimeError("timed out waiting for " + what)


class Job:
    def __init__(self, args, hosts, work, name):
        self.args, self.hosts, self.work, self.name = args, hosts, work, name
        self.out = os.path.join(work, "out")
        self.config = os.path.join(work, "config.json")
        cfg = dict(args.base_config)
        cfg["output"] = dict(cfg["output"], dir=self.out)
        with open(self.config, "w") as f:
            json.dump(cfg, f)
        self.procs = {}

    def start(self, i, tag=""):
        cmd = ["ip", "netns", "exec", self.hosts.ns(i), "env", "-u", "GLOO_SOCKET_IFNAME", "-u", "NCCL_SOCKET_IFNAME",
               "OMP_NUM_THREADS=1", os.path.join(self.args.bin, "ddp-launch"), "--nnodes", "2:3", "--rdzv-endpoint",
               "%s:%d" % (self.hosts.address(0), PORT), "--node-rank", str(i), "--nproc", "1", "--grace",
               str(self.args.grace), "--join-timeout", "3", os.path.join(self.args.bin, "embed-train"), "--config",
               self.config]
        log = open(os.path.join(self.work, "host%d%s.out" % (i, tag)), "w")
        self.procs[(i, tag)] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, keys, limit=300):
        end = time.monotonic() + limit
        for k in keys:
            try:
                code = self.procs[k].wait(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError("%s: host %s still running after %d s" % (self.name, k, limit))
            if code != 0:
                raise RuntimeError("%s: host %s exited %d (see %s)" % (self.name, k, code, self.work))


def reference(args):
    out = os.path.join(args.work, "reference")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = dict(args.base_config)
    cfg["train"] = dict(cfg["train"], grad_accum_steps=6)
    cfg["output"] = dict(cfg["output"], dir=os.path.join(out, "out"))
    path = os.path.join(out, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([os.path.join(args.bin, "embed-train"), "--config", path], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("the reference run failed:\n" + r.stdout + r.stderr)
    return os.path.join(out, "out")


def loss_run(args, hosts, ref, k, rng):
    work = os.path.join(args.work, "kill%02d" % k)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    job = Job(args, hosts, work, "kill %d" % k)
    victim, step = rng.choice([1, 2]), rng.randint(2, args.steps - 6)
    for i in range(3):
        job.start(i)
    try:
        wait_for(lambda: len(losses(job.out)) >= step, 300, "step %d" % step)
        t0 = time.monotonic()
        hosts.kill(victim)
        t1 = wait_for(lambda: first_step_after_change(job.out), 120, "the survivors' first step")
        job.procs[(victim, "")].wait()
        job.wait([(i, "") for i in range(3) if i != victim])
    finally:
        for i in range(3):
            hosts.kill(i)
    problem = same_model(ref, job.out, args.steps)
    print("kill %2d: host %d at step %2d; the survivors' next step %.2f s later; model %s" %
          (k, victim, step, t1 - t0, "the uninterrupted one" if not problem else "DIFFERS: " + problem), flush=True)
    return t1 - t0, not problem


def arrival_run(args, hosts, ref, k):
    work = os.path.join(args.work, "arrival%02d" % k)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    job = Job(args, hosts, work, "arrival %d" % k)
    for i in range(3):
        job.start(i)
    try:
        wait_for(lambda: len(losses(job.out)) >= 6, 300, "step 6")
        hosts.kill(2)
        job.procs[(2, "")].wait()
        wait_for(lambda: first_step_after_change(job.out), 120, "the survivors' first step")
        wait_for(lambda: hosts.empty(2), 10, "host 2 empty")
        t0 = time.monotonic()
        job.start(2, "-again")
        t1 = wait_for(lambda: first_step_after_change(job.out, joined=True), 120, "the 3-node round's first step")
        job.wait([(0, ""), (1, ""), (2, "-again")])
    finally:
        for i in range(3):
            hosts.kill(i)
    problem = same_model(ref, job.out, args.steps)
    print("arrival %2d: the 3-node round's first step %.2f s after host 2's launcher started; model %s" %
          (k, t1 - t0, "the uninterrupted one" if not problem else "DIFFERS: " + problem), flush=True)
    return t1 - t0, not problem


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the folder of ddp-launch and embed-train")
    p.add_argument("--vocab", required=True)
    p.add_argument("--train", required=True, help="training pairs (the demo pairs)")
    p.add_argument("--work", required=True, help="a folder for the runs")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--arrivals", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--grace", type=float, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-elastic: network namespaces need root")
    args.base_config = {
        "model": {"vocab_size": 30522, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 64,
                  "max_position": 64, "dropout": 0.0, "pooling": "mean", "projection_dim": 16},
        "tokenizer": {"type": "wordpiece", "path": args.vocab, "max_length": 32},
        "data": {"train": args.train, "eval": None},
        "loss": {"type": "pairwise_sigmoid", "temperature": 0.05},
        "train": {"batch_size": 12, "grad_accum_steps": 2, "lr": 1e-3, "warmup_steps": 0, "schedule": "constant",
                  "max_steps": args.steps, "seed": 7},
        "dist": {"timeout_s": 10},
        "output": {"log_every": 1, "save_every": 5, "eval_every": 0, "resume": "auto"},
    }
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(args.seed)
    ref = reference(args)
    hosts = Hosts(3)
    try:
        kills = [loss_run(args, hosts, ref, k + 1, rng) for k in range(args.kills)]
        arrivals = [arrival_run(args, hosts, ref, k + 1) for k in range(args.arrivals)]
    finally:
        hosts.remove()
    print()
    if kills:
        print("host lost -> the survivors' next step: median %.2f s over %d kills (min %.2f, max %.2f; --grace %g)" %
              (statistics.median(t for t, _ in kills), len(kills), min(t for t, _ in kills),
               max(t for t, _ in kills), args.grace))
        print("campaign: %d/%d random kills finished with the uninterrupted run's model" %
              (sum(ok for _, ok in kills), len(kills)))
    if arrivals:
        print("host arrives -> its first step: median %.2f s over %d runs (min %.2f, max %.2f); %d/%d with the "
              "uninterrupted run's model" % (statistics.median(t for t, _ in arrivals), len(arrivals),
                                              min(t for t, _ in arrivals), max(t for t, _ in arrivals),
                                              sum(ok for _, ok in arrivals), len(arrivals)))
    return 0 if all(ok for _, ok in kills + arrivals) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The tests' Python, started once: a server that has imported torch, transformers and
sentence-transformers forks a process for each reference script the tests run.

    python -S scripts/python/reference_server.py run STATE_DIR PYTHON SCRIPT.py [ARGS...]
    python -S scripts/python/reference_server.py run STATE_DIR PYTHON [ANY OTHER PYTHON ARGS...]
    python -S scripts/python/reference_server.py stop STATE_DIR PYTHON

Why: importing sentence-transformers costs 6-9 s of CPU (torch, transformers, scikit-learn,
scipy), and the tests run a Python reference script about a hundred times (parity.py,
check-st-load.py, the fixture makers): on CI's two cores that was minutes of every run.
A fork of a process that has imported them starts in milliseconds. Each script still runs
in a process of its own, as `PYTHON SCRIPT.py ARGS` would: its argv, working directory,
environment and standard streams (the client's own file descriptors, passed over the
socket) are the caller's, and the caller gets its exit status (128 + N for signal N).

`run` is the client. With SCRIPT.py it asks the server, starting one if none answers (one
client starts it, under STATE_DIR/reference-server.lock; its log,
STATE_DIR/reference-server.log, has a line for each script it ran: exit status and seconds); anything else (`-c`, `-m`, stdin), or a server that
cannot start, execs PYTHON with the same arguments. The server's socket is an abstract
Unix socket named by PYTHON, STATE_DIR and this file's contents, so an edited server or
another build tree gets its own. It exits after IDLE_S seconds without a client and with no
script running; `stop` ends it at once (scripts/test.sh after ctest).

What the fork shares that a fresh interpreter would read again: settings read when a
module is imported. The server imports with HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1
(the tests never download) and otherwise the environment of the client that started it,
less the variables below; each script then gets the caller's environment, its thread count
(OMP_NUM_THREADS, which OpenMP read when torch was loaded, is applied with
torch.set_num_threads) and its TRANSFORMERS_VERBOSITY, HF_HUB_OFFLINE and
HF_HUB_DISABLE_PROGRESS_BARS applied to the modules that read them at import. A
setting a script puts into os.environ before its own imports (tqdm's TQDM_DISABLE, say)
does not reach a module already imported: only output changes. If the client goes away (a
test killed at its timeout), the script's process group is killed.
"""

import array
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time

IDLE_S = 60
# Read by the server's imports and not meant to be inherited by every script: the caller's
# value is applied in each fork instead.
PER_SCRIPT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS",
              "TQDM_DISABLE", "PYTHONWARNINGS", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")


def socket_name(state_dir, python):
    with open(os.path.abspath(__file__), "rb") as f:
        code = f.read()
    key = hashlib.sha1(b"\0".join([os.path.abspath(state_dir).encode(), os.path.abspath(python).encode(), code]))
    return "ddp-embed-reference-" + key.hexdigest()[:20]  # abstract: bound as "\0" + name


def send_request(conn, request):
    data = json.dumps(request).encode()
    fds = array.array("i", [0, 1, 2])
    conn.sendmsg([struct.pack("!I", len(data)), data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])


def receive_request(conn):
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(head) != 4 or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None, None
    size = struct.unpack("!I", head)[0]
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            break
        body += chunk
    return json.loads(body), list(fds)


# ---- the server ---------------------------------------------------------------------------


def run_script(conn, request, fds):
    """In the fork: become the caller's `python SCRIPT.py ARGS` and never return."""
    import runpy
    import threading
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    apply_settings(os.environ)

    def watch_caller():  # EOF: the caller is gone, and so is everything the script started
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        os.killpg(0, signal.SIGKILL)
    threading.Thread(target=watch_caller, daemon=True).start()

    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        # As the interpreter prints it: from the script's frames on, not runpy's.
        import traceback
        tb = e.__traceback__
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != os.path.abspath(script):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        code = 1
    import atexit
    atexit._run_exitfuncs()  # the script's own, as an interpreter's exit runs them
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code & 0xFF)


def apply_settings(env):
    """The caller's settings that the server's imports read once (the module docstring)."""
    import torch
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    import huggingface_hub.constants as hub
    truthy = {"1", "ON", "YES", "TRUE"}
    hub.HF_HUB_OFFLINE = env.get("HF_HUB_OFFLINE", "1").upper() in truthy
    hub.HF_HUB_DISABLE_PROGRESS_BARS = (env["HF_HUB_DISABLE_PROGRESS_BARS"].upper() in truthy
                                        if "HF_HUB_DISABLE_PROGRESS_BARS" in env else None)
    verbosity = env.get("TRANSFORMERS_VERBOSITY")
    if verbosity:
        import transformers.utils.logging as tlog
        levels = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
        if verbosity in levels:
            tlog.set_verbosity(levels[verbosity])


def serve(name):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:
        return 0  # another server took the name first
    # What the scripts import; nothing here may start OpenMP's threads (a fork would lose them).
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import safetensors.torch  # noqa: F401
    import sentence_transformers  # noqa: F401
    listener.listen(64)
    listener.settimeout(0.2)
    print(f"reference server {os.getpid()}: ready", flush=True)
    running = {}  # pid -> (the caller's connection, which gets the exit status; the script; its start)
    idle_since = time.monotonic()
    while True:
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn, script, started = running.pop(pid, (None, "", 0.0))
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                print(f"{os.path.basename(script)}: exit {code}, {time.monotonic() - started:.1f} s", flush=True)
                try:
                    conn.sendall(struct.pack("!i", code if code >= 0 else 128 - code))
                except OSError:
                    pass
                conn.close()
            idle_since = time.monotonic()
        if not running and time.monotonic() - idle_since > IDLE_S:
            return 0
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        idle_since = time.monotonic()
        conn.settimeout(None)
        request, fds = receive_request(conn)
        if request is None:
            conn.close()
            continue
        if request.get("stop"):
            for fd in fds:
                os.close(fd)
            conn.sendall(struct.pack("!i", 0))
            conn.close()
            return 0
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other, _, _ in running.values():
                other.close()
            run_script(conn, request, fds)
        for fd in fds:
            os.close(fd)
        running[pid] = (conn, request["argv"][0], time.monotonic())


# ---- the client ---------------------------------------------------------------------------


def connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name)
        return s
    except OSError:
        s.close()
        return None


def start_server(state_dir, python, name):
    """Connects to the server, starting it first when none answers; None if it cannot start."""
    import fcntl
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, "reference-server.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = connect(name)
        if conn is not None:
            return conn
        env = {k: v for k, v in os.environ.items() if k not in PER_SCRIPT}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        with open(os.path.join(state_dir, "reference-server.log"), "ab") as log, open(os.devnull, "rb") as null:
            import subprocess
            # A process group of its own, so that a test's end (ctest kills its group) does not
            # end it; the session stays the tests', so that the kernel's autogroup scheduling
            # weighs the scripts with the tests that asked for them, not as a group apart.
            server = subprocess.Popen([python, os.path.abspath(__file__), "serve", name], stdin=null, stdout=log,
                                      stderr=log, env=env, process_group=0, close_fds=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            conn = connect(name)
            if conn is not None:
                return conn
            if server.poll() is not None:
                conn = connect(name)  # it lost the race to another server, which answers
                return conn
            time.sleep(0.05)
        return None


def client(state_dir, python, args):
    if not args or not args[0].endswith(".py") or not os.path.isfile(args[0]):
        os.execv(python, [python] + args)
    name = socket_name(state_dir, python)
    conn = connect(name)
    if conn is None:
        try:
            conn = start_server(state_dir, python, name)
        except OSError as e:
            print(f"reference server: {e}", file=sys.stderr)
    if conn is None:
        print("reference server: cannot start (see " + os.path.join(state_dir, "reference-server.log") +
              "); running the script in a fresh interpreter", file=sys.stderr)
        os.execv(python, [python] + args)
    try:
        send_request(conn, {"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)})
    except OSError:  # a standard stream closed (nothing to pass): the plain interpreter, then
        conn.close()
        os.execv(python, [python] + args)
    status = b""
    while len(status) < 4:
        chunk = conn.recv(4 - len(status))
        if not chunk:
            print("reference server: the connection closed before the script's exit status", file=sys.stderr)
            return 70
        status += chunk
    return struct.unpack("!i", status)[0]


def stop(state_dir, python):
    conn = connect(socket_name(state_dir, python))
    if conn is None:
        return 0
    send_request(conn, {"stop": True})
    conn.recv(4)
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "run":
        return client(argv[1], argv[2], argv[3:])
    if len(argv) == 3 and argv[0] == "stop":
        return stop(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "serve":
        return serve(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""What one client's long action costs the other clients of the Python
env server (envs/python/env_server.py), with its reference from the same
run, and what parsing such an action costs in Python and in C.

  /usr/bin/python3 bench/python_env_server.py [--server SCRIPT] [--rounds N]
        [--c-bench build/bench/bench_toolcall] [--regex]

Server figure: an honest client steps a guess session one request at a
time, alone (the reference: --steps steps), then --rounds times right
after another client has sent a STEP with an action of 256 KiB (the
opening of a call, '<call>a(', over and over: what made the regular
expression the server used try every start). Printed: the honest step's
wait alone and beside the long action (median and worst), and how long
the long action took to be answered. --server takes another
env_server.py (an older checkout's) to compare the two in one run.

Parse figures: longhaul_env.parse_action on actions of 64 KiB and
256 KiB of three shapes (best of a few runs), and with --c-bench the
same shapes through envs/toolcall.c (bench_toolcall); --regex adds the
regular expression env_server.py used before parse_action (one run each:
about 2 s at 64 KiB and 30 s at 256 KiB)."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "envs", "python"))
from longhaul_env import ActionError, load_proto, parse_action  # noqa: E402

OLD_CALL = re.compile(r"<call>\s*([a-z_][a-z0-9_]*)\s*\((.*)\)\s*</call>\s*$", re.S)
SIZES = (64 << 10, 256 << 10)


def shape(name, n):
    n &= ~7
    if name == "open_calls":
        return "<call>a(" * (n // 8)
    if name == "answer":
        return "x" * (n - 5) + "<eos>"
    return "<call>calc(" + "1" * (n - 19) + ")</call>"


def parse_figures(c_bench, regex):
    print("parse: best of 20 runs, microseconds")
    c = {}
    if c_bench:
        out = subprocess.run([c_bench] + [str(s) for s in SIZES], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = dict(kv.split("=", 1) for kv in line.split()[1:])
            c[(f["shape"], int(f["bytes"]))] = float(f["us"])
    for size in SIZES:
        for name in ("open_calls", "answer", "long_args"):
            text = shape(name, size)
            best = float("inf")
            for _ in range(20):
                t0 = time.perf_counter()
                try:
                    parse_action(text, ["calc"])
                    result = "ok"
                except ActionError as e:
                    result = str(e)[:40]
                best = min(best, time.perf_counter() - t0)
            line = f"  {name:<10} {size >> 10:>4} KiB  python {best * 1e6:9.1f} us"
            c_us = c.get((name, len(text)))
            if c_us is not None:
                line += f"   C {c_us:9.1f} us   python/C {best * 1e6 / max(c_us, 0.1):6.1f}"
            print(f"{line}   ({result})")
        if regex:
            t0 = time.perf_counter()
            OLD_CALL.search(shape("open_calls", size))
            print(f"  open_calls {size >> 10:>4} KiB  the regular expression used before: "
                  f"{(time.perf_counter() - t0) * 1e6:12.1f} us (one run)")


class Client:
    """A DEALER that frames requests as the C client does."""

    def __init__(self, zmq, ctx, pb, ep):
        self.pb, self.sock, self.rid = pb, ctx.socket(zmq.DEALER), 0
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 600000)
        self.sock.connect(ep)

    def send(self, **fields):
        self.rid += 1
        env = self.pb.Envelope(protocol=1, msg_id=self.rid, sender="bench",
                               env_request=self.pb.EnvRequest(request_id=self.rid, **fields))
        self.sock.send_multipart([b"", env.SerializeToString()])

    def recv(self, check=True):
        frames = self.sock.recv_multipart()
        env = self.pb.Envelope()
        env.ParseFromString(frames[1])
        r = env.env_response
        if r.status and check:
            raise SystemExit(f"bench: the server answered {r.status}: {r.error}")
        return r

    def call(self, **fields):
        self.send(**fields)
        return self.recv()

    def session(self, env_name):
        sid = self.call(op=self.pb.ENV_OP_CREATE, env_name=env_name).session_id
        self.call(op=self.pb.ENV_OP_RESET, session_id=sid, seed=1)
        return sid


def server_figures(script, rounds, steps):
    import zmq
    pb = load_proto()
    with tempfile.TemporaryDirectory(prefix="lh-bench-pyenv-") as tmp:
        ep, log = f"ipc://{tmp}/envs.sock", os.path.join(tmp, "server.log")
        with open(log, "w") as out:
            proc = subprocess.Popen(["/usr/bin/python3", script, "--bind", ep], stdout=out, stderr=out)
        try:
            for _ in range(3000):
                if "listening" in open(log).read():
                    break
                time.sleep(0.01)
            else:
                raise SystemExit(f"bench: the server did not start: {open(log).read()}")
            ctx = zmq.Context()
            honest, other = Client(zmq, ctx, pb, ep), Client(zmq, ctx, pb, ep)
            sid, evil = honest.session("guess"), other.session("guess")
            step = {"op": pb.ENV_OP_STEP, "session_id": sid, "action": "<call>guess(50)</call>"}
            alone = []
            for _ in range(steps):
                t0 = time.perf_counter()
                honest.call(**step)
                alone.append(time.perf_counter() - t0)
            long_action = shape("open_calls", 256 << 10)
            beside, served = [], []
            for _ in range(rounds):
                # A fresh episode each round: the old server took the long
                # action for a wrong answer, which ended the episode.
                other.call(op=pb.ENV_OP_RESET, session_id=evil, seed=1)
                t0 = time.perf_counter()
                other.send(op=pb.ENV_OP_STEP, session_id=evil, action=long_action)
                time.sleep(0.005)  # the long action first in line, as a flood would have it
                t1 = time.perf_counter()
                honest.call(**step)
                beside.append(time.perf_counter() - t1)
                obs = other.recv(check=False).observation.text
                served.append(time.perf_counter() - t0)
            ctx.destroy(linger=0)
        finally:
            proc.terminate()
            proc.wait(30)
    ms = [1000 * x for x in alone]
    ms_b = [1000 * x for x in beside]
    print(f"server {script}:")
    print(f"  honest step alone:                        median {statistics.median(ms):8.2f} ms, worst "
          f"{max(ms):8.2f} ms ({steps} steps)")
    print(f"  honest step beside a 256 KiB action:      median {statistics.median(ms_b):8.2f} ms, worst "
          f"{max(ms_b):8.2f} ms ({rounds} rounds)")
    print(f"  the 256 KiB action answered after:        median {1000 * statistics.median(served):8.2f} ms "
          f"({obs[:60]})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append",
                    help="an env_server.py to measure (repeatable; default this checkout's)")
    ap.add_argument("--rounds", type=int, default=20, help="long actions sent, one at a time (default 20)")
    ap.add_argument("--steps", type=int, default=200, help="honest steps alone, the reference (default 200)")
    ap.add_argument("--c-bench", help="bench_toolcall from a build, for the C parse figures")
    ap.add_argument("--regex", action="store_true", help="also time the regular expression used before")
    args = ap.parse_args()
    parse_figures(args.c_bench, args.regex)
    for script in args.server or [os.path.join(ROOT, "envs", "python", "env_server.py")]:
        server_figures(script, args.rounds, args.steps)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A longhaul env server in Python, built on longhaul_env: two environments.

guess: find a secret integer in 1..max_number with the tool guess(N), which
answers "higher", "lower" or "correct"; then give the number before <eos>.
Sparse reward: 1 for the right final answer (term "correct"). The expert
bisects.

reverse: write a word backwards before <eos> (the ten-line example of
longhaul_env's docstring).

Run:  /usr/bin/python3 env_server.py --bind ipc:///tmp/guess.sock
(--proto-dir DIR takes the build's BUILD/envs/python/longhaul_pb2.py instead
of the copy shipped in longhaul_env.)
"""
import argparse
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from longhaul_env import BadOption, Env, serve  # noqa: E402

CALL = re.compile(r"<call>\s*([a-z_][a-z0-9_]*)\s*\((.*)\)\s*</call>\s*$", re.S)
EOS = "<eos>"


class Guess(Env):
    """Deterministic for (options, seed): all randomness comes from seed."""

    name = "guess"
    options = {"max_number": "100", "expert_noise": "0", "max_steps": "0"}
    description = ("guess (Python env server): find a secret integer with guess(N) -> higher/lower/"
                   "correct, then answer it before <eos>.\ntools: guess\n"
                   "options: max_number (default 100), expert_noise (0..1)\n"
                   "reward: 1 for the right answer, else 0 (term 'correct'); expert: bisection")

    def reset(self, seed, options):
        try:
            self.max_number = int(options["max_number"])
            self.noise = float(options["expert_noise"])
        except ValueError as e:
            raise BadOption(f"guess: bad option value: {e}")
        if not 2 <= self.max_number <= 10**9:
            raise BadOption("guess: max_number must be in 2..1000000000")
        if not 0 <= self.noise <= 1:
            raise BadOption("guess: expert_noise must be in 0..1")
        self.secret = random.Random(seed).randint(1, self.max_number)
        self.expert_rng = random.Random(seed ^ 0x5eed)
        self.lo, self.hi = 1, self.max_number
        return (f"I think of an integer in 1..{self.max_number}. "
                "<call>guess(N)</call> tells you higher, lower or correct. "
                "Answer with the number, then <eos>.")

    def step(self, action):
        m = CALL.search(action)
        if m:
            if m.group(1) != "guess":
                return f"error: unknown tool '{m.group(1)}'; tools: guess", 0.0, False, {}
            try:
                n = int(m.group(2).strip())
            except ValueError:
                return "error: guess: expected an integer", 0.0, False, {}
            if n < self.secret:
                self.lo = max(self.lo, n + 1)
                return "higher", 0.0, False, {}
            if n > self.secret:
                self.hi = min(self.hi, n - 1)
                return "lower", 0.0, False, {}
            self.lo = self.hi = n
            return "correct", 0.0, False, {}
        right = action.split(EOS, 1)[0].strip() == str(self.secret)
        obs = f"correct: {self.secret}" if right else f"wrong: it was {self.secret}"
        return obs, {"correct": 1.0 if right else 0.0}, True, {}

    def expert(self):
        if self.noise > 0 and self.expert_rng.random() < self.noise:
            return f"<call>guess({self.expert_rng.randint(1, self.max_number)})</call>"
        if self.lo == self.hi:
            return f"{self.lo}{EOS}"
        return f"<call>guess({(self.lo + self.hi) // 2})</call>"


class Reverse(Env):
    name = "reverse"
    description = "reverse: write the word backwards, then <eos>. reward: 1 if right (term 'correct')"

    def reset(self, seed, options):
        self.word = random.Random(seed).choice(["apple", "river", "stone", "cloud", "ember"])
        return f"Write {self.word} backwards, then <eos>."

    def step(self, action):
        ok = action.split(EOS)[0].strip() == self.word[::-1]
        return ("right" if ok else "wrong"), {"correct": float(ok)}, True, {}

    def expert(self):
        return self.word[::-1] + EOS


def main():
    ap = argparse.ArgumentParser(description="longhaul env server (Python): the guess and reverse environments")
    ap.add_argument("--bind", required=True, help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:5601")
    ap.add_argument("--proto-dir", help="folder holding a generated longhaul_pb2.py (default: the shipped one)")
    ap.add_argument("--curve-secret-key-file", help="this server's NAME.key: serve with CURVE")
    ap.add_argument("--curve-allowed-keys", help="clients' public keys: a file, one a line, or a folder of .pub")
    ap.add_argument("--max-sessions", type=int, default=1024, help="sessions of all clients (default 1024)")
    ap.add_argument("--max-sessions-per-client", type=int, default=256,
                    help="sessions of one client, a connection (default 256)")
    ap.add_argument("--idle-timeout-ms", type=int, default=600000,
                    help="close a session unused this long (default 600000)")
    args = ap.parse_args()
    for name in ("max_sessions", "max_sessions_per_client", "idle_timeout_ms"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if bool(args.curve_secret_key_file) != bool(args.curve_allowed_keys):
        ap.error("--curve-secret-key-file and --curve-allowed-keys go together")
    curve = (args.curve_secret_key_file, args.curve_allowed_keys) if args.curve_secret_key_file else None
    serve([Guess, Reverse], bind=args.bind, curve=curve, proto_dir=args.proto_dir, max_sessions=args.max_sessions,
          max_sessions_per_client=args.max_sessions_per_client, idle_timeout_ms=args.idle_timeout_ms)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A longhaul env server in Python, built on longhaul_env: three environments.

calc: the built-in calc (envs/calc.c) in Python. Variables a, b, ... each
from the previous one; the tool calc(EXPR) evaluates integers and fractions
exactly (+ - * /, parentheses, at most max_ops operators, no variables), so
each variable takes one call. Sparse reward: 1 for the exact final value
(term "correct"). The expert evaluates each variable in turn, then answers.

guess: find a secret integer in 1..max_number with the tool guess(N), which
answers "higher", "lower" or "correct"; then give the number before <eos>.
Sparse reward: 1 for the right final answer (term "correct"). The expert
bisects.

reverse: write a word backwards before <eos> (the ten-line example of
longhaul_env's docstring).

Run:  /usr/bin/python3 env_server.py --bind ipc:///tmp/envs.sock
(--proto-dir DIR takes the build's BUILD/envs/python/longhaul_pb2.py instead
of the copy shipped in longhaul_env.)
"""
import argparse
from fractions import Fraction
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from longhaul_env import ActionError, BadOption, Env, parse_action, serve  # noqa: E402

EOS = "<eos>"


# calc(EXPR): a recursive-descent parser over Fraction, never eval(). The
# input is hostile: its length, nesting, operator count and every value
# (64-bit numerator and denominator, as envs/calc_parser.c) are bounded, and
# each breach is an error observation. The action around it is parsed
# first by parse_action (the C parser's grammar, linear in the text), which
# bounds the arguments to 4096 bytes before this parser sees them.
MAX_EXPR_CHARS = 1024
MAX_DEPTH = 64
INT64_MAX = 2**63 - 1


class CalcError(Exception):
    pass


class CalcParser:
    """expr := term (('+'|'-') term)*   term := unary (('*'|'/') unary)*
    unary := ('-'|'+') unary | primary   primary := integer | '(' expr ')'"""

    def __init__(self, text, max_ops):
        if len(text) > MAX_EXPR_CHARS:
            raise CalcError(f"expression longer than {MAX_EXPR_CHARS} characters")
        self.s, self.p, self.ops, self.max_ops, self.depth = text, 0, 0, max_ops, 0

    def parse(self):
        v = self.expr()
        if self.peek() is not None:
            self.fail("unexpected character")
        return v

    def fail(self, what):
        raise CalcError(f"{what} at offset {self.p}")

    def peek(self):
        while self.p < len(self.s) and self.s[self.p] in " \t\r\n":
            self.p += 1
        return self.s[self.p] if self.p < len(self.s) else None

    def nest(self, what):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(what)

    def binary(self, ops, operand, combine):
        v = operand()
        while self.peek() in ops:
            at, op = self.p, self.s[self.p]
            self.p += 1
            self.ops += 1
            if 0 < self.max_ops < self.ops:
                raise CalcError(f"more than {self.max_ops} operators in one call; split the computation into steps")
            v = checked(combine(op, v, operand()), at)
        return v

    def expr(self):
        return self.binary(("+", "-"), self.term, lambda op, a, b: a + b if op == "+" else a - b)

    def term(self):
        return self.binary(("*", "/"), self.unary, lambda op, a, b: a * b if op == "*" else a / b)

    def unary(self):
        c = self.peek()
        if c in ("-", "+"):
            self.p += 1
            self.nest("too many signs in a row")
            v = self.unary()
            self.depth -= 1
            return -v if c == "-" else v
        return self.primary()

    def primary(self):
        c = self.peek()
        if c == "(":
            self.nest("parentheses nested deeper than 64")
            self.p += 1
            v = self.expr()
            if self.peek() != ")":
                self.fail("expected ')'")
            self.p += 1
            self.depth -= 1
            return v
        if c is None or not c.isascii() or not c.isdigit():
            self.fail("expected a number or '('")
        start = self.p
        while self.p < len(self.s) and self.s[self.p].isascii() and self.s[self.p].isdigit():
            self.p += 1
        return checked(Fraction(int(self.s[start:self.p])), start, "integer literal too large")


def checked(v, at, what="result does not fit in 64 bits"):
    if abs(v.numerator) > INT64_MAX or v.denominator > INT64_MAX:
        raise CalcError(f"{what} at offset {at}")
    return v


def calc_eval(text, max_ops):
    """The exact value of text, or CalcError (division by zero included)."""
    try:
        return CalcParser(text, max_ops).parse()
    except ZeroDivisionError:
        raise CalcError("division by zero") from None


def literal(text):
    """An answer n or p/q as a Fraction, or None."""
    m = re.fullmatch(r"([-+]?[0-9]{1,19})(?:/([0-9]{1,19}))?", text)
    if not m or int(m.group(2) or 1) == 0:
        return None
    return Fraction(int(m.group(1)), int(m.group(2) or 1))


def fmt(q):
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def operand(q):
    """q as an operand in an expression: negatives and fractions in parentheses."""
    return fmt(q) if q.denominator == 1 and q >= 0 else f"({fmt(q)})"


class Calc(Env):
    name = "calc"
    options = {"stages": "3", "digits": "2", "max_ops": "3", "expert_noise": "0", "max_steps": "16"}
    description = ("calc (Python env server): multi-step exact arithmetic. The task defines variables a, b, ... "
                   "each from the previous one; the tool calc(EXPR) evaluates integers and fractions exactly "
                   "with at most max_ops operators and no variables, so each variable takes one call.\n"
                   "tools: calc\noptions: stages (1..8), digits (1..4), max_ops (0 = any), expert_noise (0..1)\n"
                   "reward: 1 for the exact answer, else 0 (term 'correct'); expert: evaluates each variable "
                   "in turn, then answers")

    def reset(self, seed, options):
        try:
            self.stages, digits, self.max_ops = (int(options[k]) for k in ("stages", "digits", "max_ops"))
            self.noise = float(options["expert_noise"])
        except ValueError as e:
            raise BadOption(f"calc: bad option value: {e}")
        if not (1 <= self.stages <= 8 and 1 <= digits <= 4 and 0 <= self.max_ops <= 1000 and 0 <= self.noise <= 1):
            raise BadOption("calc: stages 1..8, digits 1..4, max_ops 0..1000, expert_noise 0..1")
        rng = random.Random(seed)
        self.expert_rng = random.Random(seed ^ 0xe4e47)
        # Each stage is a template with X for the previous value; redrawn
        # until it divides by no zero and its value stays small (after 200
        # tries with + alone, which always does).
        self.forms, self.values, x = [], [], None
        for _ in range(self.stages):
            for tries in range(1, 10**6):
                n0, n1, n2 = (rng.randint(2, 10**digits - 1) for _ in range(3))
                op0, op1 = ("+", "+") if tries > 200 else (rng.choice("+-*/"), rng.choice("+-*/"))
                form = (f"(X {op0} {n0}) {op1} {n1}" if rng.randint(0, 1) == 0 else f"{n0} {op0} (X {op1} {n1})")
                try:
                    v = calc_eval(form.replace("X", str(n2) if x is None else operand(x)), 0)
                except CalcError:
                    continue
                if v.denominator < 100000 and abs(v.numerator) < 10**8:
                    break
            self.forms.append(form if x is not None else form.replace("X", str(n2)))
            self.values.append(v)
            x = v
        self.progress = 0
        lines = [f"  {chr(97 + k)} = {f.replace('X', chr(96 + k))}" for k, f in enumerate(self.forms)]
        return ("The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, + - * /, parentheses; "
                f"at most {self.max_ops} operators; it knows no variables). "
                "Answer with an integer or a fraction p/q, then <eos>.\nVariables:\n" + "\n".join(lines) +
                f"\nWhat is {chr(96 + self.stages)}?")

    def step(self, action):
        try:
            a = parse_action(action, ["calc"])
        except ActionError as e:
            return f"error: {e}", 0.0, False, {}
        if a.kind == "call":
            try:
                v = calc_eval(a.args, self.max_ops)
            except CalcError as e:
                return f"error: calc: {e}", 0.0, False, {}
            if self.progress < self.stages and v == self.values[self.progress]:
                self.progress += 1
            return f"= {fmt(v)}", 0.0, False, {}
        goal = self.values[-1]
        ok = literal(a.args) == goal
        obs = f"correct: {fmt(goal)}" if ok else f"wrong: the answer is {fmt(goal)}"
        return obs, {"correct": float(ok)}, True, {}

    def expert(self):
        if self.noise > 0 and self.expert_rng.random() < self.noise:
            if self.expert_rng.randint(0, 1):
                return f"<call>calc({self.expert_rng.randint(0, 99)} * {self.expert_rng.randint(0, 99)})</call>"
            return f"{self.values[-1].numerator + 1 + self.expert_rng.randint(0, 49)}{EOS}"
        if self.progress < self.stages:
            x = "" if self.progress == 0 else operand(self.values[self.progress - 1])
            return f"<call>calc({self.forms[self.progress].replace('X', x)})</call>"
        return f"{fmt(self.values[-1])}{EOS}"


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
        try:
            a = parse_action(action, ["guess"])
        except ActionError as e:
            return f"error: {e}", 0.0, False, {}
        if a.kind == "call":
            try:
                n = int(a.args.strip())
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
        right = a.args == str(self.secret)
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


def size(text):
    """BYTES with an optional K, M or G suffix (powers of 1024), as
    `longhaul envs serve` takes them."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isascii() or not digits.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (digits, then K, M or G)")
    return int(digits) * scale


def main():
    ap = argparse.ArgumentParser(description="longhaul env server (Python): the calc, guess and reverse environments")
    ap.add_argument("--bind", required=True, help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:5601")
    ap.add_argument("--proto-dir", help="folder holding a generated longhaul_pb2.py (default: the shipped one)")
    ap.add_argument("--curve-secret-key-file", help="this server's NAME.key: serve with CURVE")
    ap.add_argument("--curve-allowed-keys", help="clients' public keys: a file, one a line, or a folder of .pub")
    ap.add_argument("--max-sessions", type=int, default=1024, help="sessions of all clients (default 1024)")
    ap.add_argument("--max-sessions-per-client", type=int, default=256,
                    help="sessions of one client, a connection (default 256)")
    ap.add_argument("--idle-timeout-ms", type=int, default=600000,
                    help="close a session unused this long (default 600000)")
    ap.add_argument("--workers", type=int, default=4,
                    help="threads that run requests, one message of a client at a time (default 4)")
    ap.add_argument("--max-request-bytes", type=size, default=256 << 20,
                    help="what the messages read and not yet answered hold, all clients (default 256M; past it a "
                         "message is dropped unanswered)")
    ap.add_argument("--max-request-bytes-per-client", type=size, default=64 << 20,
                    help="the same for one client (default 64M)")
    args = ap.parse_args()
    for name in ("max_sessions", "max_sessions_per_client", "idle_timeout_ms", "workers", "max_request_bytes",
                 "max_request_bytes_per_client"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers > 256:
        ap.error("--workers must be at most 256")
    if bool(args.curve_secret_key_file) != bool(args.curve_allowed_keys):
        ap.error("--curve-secret-key-file and --curve-allowed-keys go together")
    curve = (args.curve_secret_key_file, args.curve_allowed_keys) if args.curve_secret_key_file else None
    serve([Calc, Guess, Reverse], bind=args.bind, curve=curve, proto_dir=args.proto_dir, max_sessions=args.max_sessions,
          max_sessions_per_client=args.max_sessions_per_client, idle_timeout_ms=args.idle_timeout_ms,
          workers=args.workers, max_request_bytes=args.max_request_bytes,
          max_request_bytes_per_client=args.max_request_bytes_per_client)


if __name__ == "__main__":
    main()

"""longhaul_env: a longhaul environment in Python.

    from longhaul_env import Env, serve

    class Reverse(Env):
        name = "reverse"
        def reset(self, seed, options):
            self.word = ["apple", "river", "stone"][seed % 3]
            return f"Write {self.word} backwards, then <eos>."
        def step(self, action):
            ok = action.split("<eos>")[0].strip() == self.word[::-1]
            return ("right" if ok else "wrong"), {"correct": float(ok)}, True, {}

    serve(Reverse, bind="tcp://127.0.0.1:5601")

An actor reaches it with `[env] name = reverse` and `server = tcp://...`
(envs/README.md, "Python environments"). serve() speaks the env-server protocol
(EnvRequest/EnvResponse of proto/longhaul.proto over ZeroMQ), with the C
server's limits, optional CURVE, and a clean stop on SIGTERM or SIGINT.
"""
import importlib
import os
import signal
import sys

from .action import Action, ActionError, parse_action  # noqa: F401  (public)
from .errors import BadOption, EnvError  # noqa: F401  (public)

__all__ = ["Env", "EnvError", "BadOption", "serve", "load_proto", "parse_action", "Action", "ActionError"]


class Env:
    """An environment: subclass it. A session makes one instance per CREATE.

    name         the name clients CREATE it by (required)
    description  what DESCRIBE answers
    options      option name -> default; other options are refused

    reset(seed, options) -> obs: a new episode, deterministic for (options,
        seed); options are the session's, every value a str.
    step(action) -> (obs, reward, done, info): the reward is a number with
        its terms in info["terms"] (a dict name -> value), or itself a dict
        of terms (the reward is their sum).
    expert() -> action or None: a demonstration's next action.
    """

    name = None
    description = ""
    options = {}

    def reset(self, seed, options):
        raise NotImplementedError

    def step(self, action):
        raise NotImplementedError

    def expert(self):
        return None

    def describe(self):
        return self.description or self.name


def load_proto(proto_dir=None):
    """The generated protobuf module of proto/longhaul.proto: from proto_dir
    (or $LH_PROTO_DIR) when given, as the build writes it
    (BUILD/envs/python/longhaul_pb2.py), else the copy shipped here (checked
    against the .proto by tests/test_python_env)."""
    proto_dir = proto_dir or os.environ.get("LH_PROTO_DIR")
    if proto_dir:
        sys.path.insert(0, proto_dir)
        try:
            return importlib.import_module("longhaul_pb2")
        finally:
            sys.path.remove(proto_dir)
    return importlib.import_module(".longhaul_pb2", __name__)


def _stop(sig, frame):
    raise SystemExit(0)


def serve(env, bind, curve=None, proto_dir=None, max_sessions=None, max_sessions_per_client=None,
          idle_timeout_ms=None, workers=None, max_request_bytes=None, max_request_bytes_per_client=None):
    """Serves env (an Env subclass, or a list of them) at bind (a ZeroMQ
    endpoint) until SIGTERM or SIGINT, then logs its totals and returns.
    curve: (secret key file, allowed keys file or folder) to serve with
    CURVE, as `longhaul envs serve --curve-secret-key-file ...`; a key file
    or allow-list that cannot be used (missing, not a regular file, not a
    key) is reported by name and the process exits 2 before it listens.
    workers: the threads that run requests (default 4), so that a slow
    step of one client does not hold the others; max_request_bytes and
    max_request_bytes_per_client: what the messages read and not yet
    answered may hold (default 256 MiB and 64 MiB; past either a message
    is dropped unanswered)."""
    from . import pool
    from .keys import KeyFileError
    envs = {}
    for cls in env if isinstance(env, (list, tuple)) else [env]:
        if not (isinstance(cls, type) and issubclass(cls, Env)) or not cls.name:
            raise TypeError(f"serve: {cls!r} is not an Env subclass with a name")
        envs[cls.name] = cls
    secret, allowed = curve if curve else (None, None)
    pb = load_proto(proto_dir)
    # SIGTERM stops it as SIGINT does: the totals are logged on the way out
    # and the process exits 0, which the launcher shows as a clean stop.
    previous = {}
    if threading_main():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _stop)
    try:
        pool.run(envs, bind, pb, secret, allowed,
                 {"max_sessions": max_sessions, "max_sessions_per_client": max_sessions_per_client,
                  "idle_timeout_ms": idle_timeout_ms, "workers": workers, "max_request_bytes": max_request_bytes,
                  "max_request_bytes_per_client": max_request_bytes_per_client})
    except KeyFileError as e:
        # A usage error, as `longhaul envs serve` reports one: starting
        # again cannot fix it, so `longhaul launch` does not retry it.
        print(f"error envs-py: env server: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def threading_main():
    import threading
    return threading.current_thread() is threading.main_thread()

"""The protocol side of longhaul_env.serve: EnvRequest/EnvResponse inside an
Envelope (proto/longhaul.proto), one session per CREATE, serving only the
client (ROUTER peer) that created it. As the C server (envs/envserver.c),
it caps what clients can make it hold: sessions per client and in total (a
CREATE past a cap is refused with LH_EAGAIN), and sessions idle past
idle_timeout_ms are closed. As the C server, it takes a batch of requests
in one frame (EnvRequestBatch) and answers it in one frame, in order, and
says so in every answer (max_batch). A frame is checked before protobuf
parses it and validated after (wire.py).

Everything here may run on several worker threads at once (pool.py), one
message of a client at a time: the session table and the meters take a
lock, and a session, being its client's alone, is only ever used by the
thread running that client's message."""
import sys
import threading
import time

from .errors import (EnvError, LH_EAGAIN, LH_EINVAL, LH_ENOENT, LH_EENVS_SERVER_BATCH, LH_EENVS_SERVER_REPLAY,
                     LH_EENVS_UNKNOWN_ENV)
from .session import Session
from .wire import MAX_BATCH, MAX_BATCH_BYTES, WireError, decode

MAX_SESSIONS = 1024
MAX_SESSIONS_PER_CLIENT = 256
# The most an encoded answer may be: what the C client takes
# (proto/wire.h's LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES).
MAX_ANSWER_BYTES = 64 << 20
LH_EWIRE_TOO_LARGE = -100
IDLE_TIMEOUT_MS = 600000
LOG_INTERVAL_S = 5.0


def escape(raw, cap=64):
    """Peer-given bytes (a routing id, an env name) for a log line: printable
    ASCII as it is, backslash and every other byte as \\xNN, cut with "..."."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    out = "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x5c else f"\\x{c:02x}" for c in raw)
    return out if len(out) <= cap else out[:cap - 3] + "..."


LOG_LOCK = threading.Lock()


def log(level, message):
    """One log line, written whole: workers log too, and print's separate
    writes of the text and its newline could interleave."""
    with LOG_LOCK:
        sys.stderr.write(f"{level} envs-py: {message}\n")
        sys.stderr.flush()


class Meter:
    """Counts events of one kind; one log line per interval with the count."""

    def __init__(self):
        self.total = self.since = 0
        self.last = None
        self.lock = threading.Lock()

    def count(self):
        """Counts one; returns (since last report, total) when this one is
        to be logged, else None."""
        with self.lock:
            self.total += 1
            self.since += 1
            now = time.monotonic()
            if self.last is not None and now - self.last < LOG_INTERVAL_S:
                return None
            since, self.last, self.since = self.since, now, 0
            return since, self.total


class BadMeter(Meter):
    """Bad messages."""

    def bad(self, what):
        due = self.count()
        if due:
            log("warn", f"bad message: {what} (bad since last report={due[0]} total={due[1]})")


class RefusalMeter(Meter):
    """Refusals: a cap met."""

    def refused(self, why, peer, env_name=""):
        due = self.count()
        if due:
            log("warn", f"env server refused: {escape(why, 512)} peer={escape(peer)} env={escape(env_name)} "
                        f"(refused since last report={due[0]} total={due[1]})")


class Sessions:
    """Sessions by id, each with its owner (a routing id), when it was last
    used and whether a request is running on it; per-client counts; the
    caps. Every method takes the lock."""

    def __init__(self, max_sessions, max_per_client, idle_timeout_ms):
        self.max, self.max_per_client, self.idle_ms = max_sessions, max_per_client, idle_timeout_ms
        self.by_id, self.per_client = {}, {}
        self.next_id, self.idle_closed, self.last_sweep = 0, 0, time.monotonic()
        self.meter = RefusalMeter()
        self.lock = threading.RLock()

    def sweep_s(self):
        return min(self.idle_ms / 4000.0, 1.0)

    def sweep(self, force=False):
        """Closes the sessions idle past the timeout (at most every sweep_s
        unless force), but none a request is running on; logs how many."""
        with self.lock:
            now = time.monotonic()
            if not force and now - self.last_sweep < self.sweep_s():
                return
            self.last_sweep = now
            idle = [sid for sid, g in self.by_id.items() if not g.busy and (now - g.last_used) * 1000 > self.idle_ms]
            for sid in idle:
                self.close(self.by_id[sid].owner, sid)
            if idle:
                self.idle_closed += len(idle)
                log("info", f"env server closed idle sessions closed={len(idle)} idle_timeout_ms={self.idle_ms} "
                            f"sessions={len(self.by_id)} idle_closed={self.idle_closed}")

    def count(self):
        with self.lock:
            return len(self.by_id)

    def of(self, peer):
        with self.lock:
            return self.per_client.get(peer, 0)

    def over_cap(self, peer):
        mine = self.per_client.get(peer, 0)
        if mine >= self.max_per_client:
            return (f"env server: this client holds {mine} sessions, its cap (--max-sessions-per-client "
                    f"{self.max_per_client}); close one or try again later")
        if len(self.by_id) >= self.max:
            return f"env server: {len(self.by_id)} sessions open, the cap (--max-sessions {self.max}); try again later"
        return None

    def admit(self, peer, env_name):
        """Raises LH_EAGAIN when peer may not open one more session."""
        with self.lock:
            if self.over_cap(peer):
                self.sweep(force=True)  # idle sessions go first
            why = self.over_cap(peer)
        if why:
            self.meter.refused(why, peer, env_name)
            raise EnvError(LH_EAGAIN, why)

    def add(self, peer, g, env_name):
        """Adds g, made after admit; the caps are checked again, since
        another client's CREATE may have taken the last place meanwhile."""
        with self.lock:
            why = self.over_cap(peer)
            if not why:
                self.next_id += 1
                g.owner, g.last_used, g.busy = peer, time.monotonic(), 0
                self.by_id[self.next_id] = g
                self.per_client[peer] = self.per_client.get(peer, 0) + 1
                return self.next_id
        self.meter.refused(why, peer, env_name)
        raise EnvError(LH_EAGAIN, why)

    def take(self, peer, sid):
        """peer's session sid, marked in use (the sweep leaves it) until
        release; None when it has none of that id."""
        with self.lock:
            g = self.by_id.get(sid)
            if g is None or g.owner != peer:
                return None
            g.last_used = time.monotonic()
            g.busy += 1
            return g

    def release(self, g):
        with self.lock:
            g.busy -= 1
            g.last_used = time.monotonic()

    def close(self, peer, sid):
        with self.lock:
            g = self.by_id.get(sid)
            if g is None or g.owner != peer:
                return
            del self.by_id[sid]
            self.per_client[peer] -= 1
            if not self.per_client[peer]:
                del self.per_client[peer]


def response(pb, **fields):
    return pb.EnvResponse(max_batch=MAX_BATCH, max_batch_bytes=MAX_BATCH_BYTES, **fields)


def run_request(pb, envs, sessions, peer, req, meter, batch_seen=None):
    """Runs one EnvRequest for peer; returns its EnvResponse. batch_seen: the
    sessions named before in the batch it came in (None: a frame of its own)."""
    resp = response(pb, request_id=req.request_id, session_id=req.session_id)
    s = None
    try:
        if req.op == pb.ENV_OP_CREATE:
            cls = envs.get(req.env_name)
            if cls is None:
                raise EnvError(LH_EENVS_UNKNOWN_ENV,
                               f"no environment '{req.env_name}' here ({', '.join(sorted(envs))})")
            sessions.admit(peer, req.env_name)
            opts = {kv.key: kv.value for kv in req.options}
            g = Session(cls, opts)
            g.last_request = req.request_id
            resp.session_id = sessions.add(peer, g, req.env_name)
            return resp
        s = sessions.take(peer, req.session_id)
        if s is None:
            raise EnvError(LH_ENOENT, f"no session {req.session_id} for this client (closed, idle past "
                                      f"{sessions.idle_ms} ms, or never created: send CREATE)")
        # One request per session at a time: a second in one batch is not run.
        if batch_seen is not None:
            if req.session_id in batch_seen:
                meter.bad(f"session {req.session_id} named twice in one batch")
                raise EnvError(LH_EENVS_SERVER_BATCH,
                               f"env server: session {req.session_id} is named twice in one batch (request "
                               f"{req.request_id} not run; one request per session at a time)")
            batch_seen.add(req.session_id)
        # Request ids rise one request at a time per session: an id
        # not above the last one is a replay.
        if req.request_id <= s.last_request:
            meter.bad(f"request {req.request_id} replayed on session {req.session_id}")
            raise EnvError(LH_EENVS_SERVER_REPLAY,
                           f"env server: request {req.request_id} replayed (session "
                           f"{req.session_id} has answered request {s.last_request})")
        s.last_request = req.request_id
        if req.op == pb.ENV_OP_RESET:
            resp.observation.text = s.reset(req.seed)
        elif req.op == pb.ENV_OP_STEP:
            text, reward, done, terms = s.step(req.action)
            resp.observation.text = text
            resp.reward = reward
            resp.done = done
            for name, value in terms.items():
                t = resp.terms.add()
                t.name, t.value = name, value
        elif req.op == pb.ENV_OP_DESCRIBE:
            resp.description = s.describe()
        elif req.op == pb.ENV_OP_EXPERT:
            resp.expert_action = s.expert()
        elif req.op == pb.ENV_OP_CLOSE:
            sessions.close(peer, req.session_id)
        else:
            raise EnvError(LH_EINVAL, f"unknown op {req.op}")
    except EnvError as e:
        resp.status, resp.error = e.code, str(e)
    except Exception as e:  # a bad message must not stop the server
        resp.status, resp.error = LH_EINVAL, f"env server: {type(e).__name__}: {e}"
    finally:
        if s is not None:
            sessions.release(s)
    return resp


def run_batch(pb, envs, sessions, peer, requests, out, meter):
    """Answers the requests of a batch frame (within its bounds: wire.py
    refused it whole otherwise) into out.env_response_batch, one response
    per request in order."""
    seen, above = set(), 0
    answers = out.env_response_batch
    answers.SetInParent()
    for i, req in enumerate(requests):
        if i > 0 and req.request_id <= above:
            resp = response(pb, request_id=req.request_id, session_id=req.session_id, status=LH_EENVS_SERVER_BATCH,
                            error=f"env server: request {req.request_id} of a batch is not above the one before "
                                  f"it ({above}); not run")
            meter.bad(resp.error)
        else:
            resp = run_request(pb, envs, sessions, peer, req, meter, seen)
        above = max(above, req.request_id)
        answers.responses.append(resp)


def answer(pb, envs, sessions, peer, raw, meter, msg_id):
    """Handles one request frame from peer; returns (encoded answer, stop)."""
    out = pb.Envelope(protocol=1, msg_id=msg_id, sender="envs-py")
    try:
        body, requests = decode(pb, raw)
    except WireError as e:
        # Refused whole: one answer, for request 0, as the C server's.
        why = str(e) if str(e).startswith("env server: ") else f"env server: {e}"
        meter.bad(why[len("env server: "):])
        out.env_response.CopyFrom(response(pb, status=e.code, error=why))
        return out.SerializeToString(), False
    if body == "env_request":
        out.env_response.CopyFrom(run_request(pb, envs, sessions, peer, requests[0], meter))
    elif body == "env_request_batch":
        run_batch(pb, envs, sessions, peer, requests, out, meter)
    else:
        out.env_response.CopyFrom(response(pb))
        if body != "shutdown":
            meter.bad(f"expected an env_request, got {body}")
            out.env_response.status = LH_EINVAL
            out.env_response.error = f"expected an env_request, got {body}"
    encoded = out.SerializeToString()
    if len(encoded) > MAX_ANSWER_BYTES:
        # An environment's observation past what any client takes: say so
        # instead, as the C server does, rather than send what is dropped
        # (a batch's answer as a whole, for request 0).
        rid = requests[0].request_id if body == "env_request" else 0
        why = f"env server: the answer to request {rid} is {len(encoded)} bytes, over the {MAX_ANSWER_BYTES} a " \
              "message may hold"
        meter.bad(why[len("env server: "):])
        bad = pb.Envelope(protocol=1, msg_id=msg_id, sender="envs-py")
        bad.env_response.CopyFrom(response(pb, request_id=rid, status=LH_EWIRE_TOO_LARGE, error=why))
        encoded = bad.SerializeToString()
    return encoded, body == "shutdown"


class AllowList:
    """The ZAP check of a CURVE server: the longhaul domain and an allowed
    key; refusals are counted and logged once per interval."""

    def __init__(self, keys):
        self.keys, self.meter = keys, BadMeter()

    def callback(self, domain, key):
        if domain == "longhaul" and key in self.keys:
            return True
        self.meter.bad("zap: peer refused: public key not in the allow-list")
        return False

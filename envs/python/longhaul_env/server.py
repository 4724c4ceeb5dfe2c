"""The protocol side of longhaul_env.serve: EnvRequest/EnvResponse inside an
Envelope (proto/longhaul.proto) over a ZeroMQ ROUTER socket (clients frame
as a REQ would), one session per CREATE, serving only the client (ROUTER
peer) that created it. As the C server (envs/envserver.c), it caps what
clients can make it hold: sessions per client and in total (a CREATE past a
cap is refused with LH_EAGAIN), sessions idle past idle_timeout_ms are
closed, and at most HWM messages are queued per client each way (a client
that does not read its replies has the rest dropped). As the C server, it
takes a batch of requests in one frame (EnvRequestBatch) and answers it in
one frame, in order, and says so in every answer (max_batch). Optional
CURVE with a ZAP allow-list, as `longhaul envs serve`."""
import os
import sys
import time

from .errors import (EnvError, LH_EAGAIN, LH_EINVAL, LH_ENOENT, LH_EENVS_SERVER_BATCH, LH_EENVS_SERVER_PROTOCOL,
                     LH_EENVS_SERVER_REPLAY, LH_EENVS_UNKNOWN_ENV)
from .session import Session

# Bad input is refused, counted and logged at most once per interval; a
# request frame is at most MAX_REQUEST_BYTES (ZMQ_MAXMSGSIZE) and a message
# at most MAX_FRAMES requests, as the C server (envs/envserver.c).
MAX_REQUEST_BYTES = 8 << 20
MAX_FRAMES = 1024
# A batch frame: at most MAX_BATCH requests in MAX_BATCH_BYTES (the whole
# Envelope), as the C server (envs/internal.h's LH_ENVS_BATCH_MAX).
MAX_BATCH = 1024
MAX_BATCH_BYTES = 4 << 20
MAX_SESSIONS = 1024
MAX_SESSIONS_PER_CLIENT = 256
IDLE_TIMEOUT_MS = 600000
HWM = 64
LINGER_MS = 1000
LOG_INTERVAL_S = 5.0


def escape(raw, cap=64):
    """Peer-given bytes (a routing id, an env name) for a log line: printable
    ASCII as it is, backslash and every other byte as \\xNN, cut with "..."."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    out = "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x5c else f"\\x{c:02x}" for c in raw)
    return out if len(out) <= cap else out[:cap - 3] + "..."


class BadMeter:
    """Counts bad messages; one log line per interval with the count."""

    def __init__(self):
        self.total = self.since = 0
        self.last = None

    def bad(self, what):
        self.total += 1
        self.since += 1
        now = time.monotonic()
        if self.last is not None and now - self.last < LOG_INTERVAL_S:
            return
        print(f"warn envs-py: bad message: {what} (bad since last report={self.since} total={self.total})",
              file=sys.stderr, flush=True)
        self.last, self.since = now, 0


class RefusalMeter:
    """Counts refusals (a cap met); one log line per interval with the count."""

    def __init__(self):
        self.total = self.since = 0
        self.last = None

    def refused(self, why, peer, env_name):
        self.total += 1
        self.since += 1
        now = time.monotonic()
        if self.last is not None and now - self.last < LOG_INTERVAL_S:
            return
        print(f"warn envs-py: env server refused: {escape(why, 512)} peer={escape(peer)} env={escape(env_name)} "
              f"(refused since last report={self.since} total={self.total})", file=sys.stderr, flush=True)
        self.last, self.since = now, 0


class Sessions:
    """Sessions by id, each with its owner (a routing id) and when it was
    last used; per-client counts; the caps."""

    def __init__(self, max_sessions, max_per_client, idle_timeout_ms):
        self.max, self.max_per_client, self.idle_ms = max_sessions, max_per_client, idle_timeout_ms
        self.by_id, self.per_client = {}, {}
        self.next_id, self.idle_closed, self.last_sweep = 0, 0, time.monotonic()
        self.meter = RefusalMeter()

    def sweep_s(self):
        return min(self.idle_ms / 4000.0, 1.0)

    def sweep(self, force=False):
        """Closes the sessions idle past the timeout (at most every sweep_s
        unless force); logs how many."""
        now = time.monotonic()
        if not force and now - self.last_sweep < self.sweep_s():
            return
        self.last_sweep = now
        idle = [sid for sid, g in self.by_id.items() if (now - g.last_used) * 1000 > self.idle_ms]
        for sid in idle:
            self.close(self.by_id[sid].owner, sid)
        if idle:
            self.idle_closed += len(idle)
            print(f"info envs-py: env server closed idle sessions closed={len(idle)} idle_timeout_ms={self.idle_ms} "
                  f"sessions={len(self.by_id)} idle_closed={self.idle_closed}", file=sys.stderr, flush=True)

    def over_cap(self, peer):
        mine = self.per_client.get(peer, 0)
        if mine >= self.max_per_client:
            return (f"env server: this client holds {mine} sessions, its cap (--max-sessions-per-client "
                    f"{self.max_per_client}); close one or try again later")
        if len(self.by_id) >= self.max:
            return f"env server: {len(self.by_id)} sessions open, the cap (--max-sessions {self.max}); try again later"
        return None

    def admit(self, peer, env_name):
        if self.over_cap(peer):
            self.sweep(force=True)  # idle sessions go first
        why = self.over_cap(peer)
        if why:
            self.meter.refused(why, peer, env_name)
            raise EnvError(LH_EAGAIN, why)

    def add(self, peer, g):
        self.next_id += 1
        g.owner, g.last_used = peer, time.monotonic()
        self.by_id[self.next_id] = g
        self.per_client[peer] = self.per_client.get(peer, 0) + 1
        return self.next_id

    def get(self, peer, sid):
        g = self.by_id.get(sid)
        if g is None or g.owner != peer:
            return None
        g.last_used = time.monotonic()
        return g

    def close(self, peer, sid):
        g = self.by_id.get(sid)
        if g is None or g.owner != peer:
            return
        del self.by_id[sid]
        self.per_client[peer] -= 1
        if not self.per_client[peer]:
            del self.per_client[peer]


def run_request(pb, envs, sessions, peer, req, meter, batch_seen=None):
    """Runs one EnvRequest for peer; returns its EnvResponse. batch_seen: the
    sessions named before in the batch it came in (None: a frame of its own)."""
    resp = pb.EnvResponse(max_batch=MAX_BATCH, max_batch_bytes=MAX_BATCH_BYTES)
    try:
        resp.request_id = req.request_id
        resp.session_id = req.session_id
        if req.op == pb.ENV_OP_CREATE:
            cls = envs.get(req.env_name)
            if cls is None:
                raise EnvError(LH_EENVS_UNKNOWN_ENV,
                               f"no environment '{req.env_name}' here ({', '.join(sorted(envs))})")
            sessions.admit(peer, req.env_name)
            opts = {kv.key: kv.value for kv in req.options}
            g = Session(cls, opts)
            g.last_request = req.request_id
            resp.session_id = sessions.add(peer, g)
            return resp
        s = sessions.get(peer, req.session_id)
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
    return resp


def run_batch(pb, envs, sessions, peer, batch, frame_bytes, meter, out):
    """Answers an EnvRequestBatch into out.env_response_batch, one response
    per request in order; a batch past the bounds is refused whole with one
    env_response (request 0) and none of it runs."""
    n = len(batch.requests)
    if n > MAX_BATCH or frame_bytes > MAX_BATCH_BYTES:
        why = (f"env server: a batch of {n} requests in {frame_bytes} bytes, over the bound of {MAX_BATCH} "
               f"requests and {MAX_BATCH_BYTES} bytes a frame (max_batch, max_batch_bytes in every answer); none run")
        meter.bad(why)
        out.env_response.status, out.env_response.error = LH_EENVS_SERVER_BATCH, why
        return
    seen, above = set(), 0
    answers = out.env_response_batch
    answers.SetInParent()
    for i, req in enumerate(batch.requests):
        if i > 0 and req.request_id <= above:
            resp = pb.EnvResponse(request_id=req.request_id, session_id=req.session_id, max_batch=MAX_BATCH,
                                  max_batch_bytes=MAX_BATCH_BYTES, status=LH_EENVS_SERVER_BATCH,
                                  error=f"env server: request {req.request_id} of a batch is not above the one "
                                        f"before it ({above}); not run")
            meter.bad(resp.error)
        else:
            resp = run_request(pb, envs, sessions, peer, req, meter, seen)
        above = max(above, req.request_id)
        answers.responses.append(resp)


def answer(pb, envs, sessions, peer, raw, meter, msg_id):
    """Handles one request frame from peer; returns (encoded answer, stop)."""
    env = pb.Envelope()
    out = pb.Envelope(protocol=1, msg_id=msg_id, sender="envs-py")
    try:
        env.ParseFromString(raw)
    except Exception as e:
        meter.bad(f"undecodable request: {type(e).__name__}")
        out.env_response.CopyFrom(pb.EnvResponse(status=LH_EINVAL, error=f"env server: undecodable request: "
                                                 f"{type(e).__name__}", max_batch=MAX_BATCH,
                                                 max_batch_bytes=MAX_BATCH_BYTES))
        return out.SerializeToString(), False
    body = env.WhichOneof("body")
    if body == "env_request":
        out.env_response.CopyFrom(run_request(pb, envs, sessions, peer, env.env_request, meter))
    elif body == "env_request_batch":
        run_batch(pb, envs, sessions, peer, env.env_request_batch, len(raw), meter, out)
    else:
        out.env_response.CopyFrom(pb.EnvResponse(max_batch=MAX_BATCH, max_batch_bytes=MAX_BATCH_BYTES))
        if body != "shutdown":
            meter.bad(f"expected an env_request, got {body}")
            out.env_response.status = LH_EINVAL
            out.env_response.error = f"expected an env_request, got {body}"
    return out.SerializeToString(), body == "shutdown"


def read_key(path, secret):
    """The Z85 key on the first line of path (as `longhaul keys generate`
    writes it); a secret key file must not be readable by group or others."""
    if secret and os.stat(path).st_mode & 0o077:
        raise SystemExit(f"longhaul_env: secret key file {path} is readable by group or others; chmod 600 it")
    with open(path) as f:
        key = f.readline().strip()
    if len(key) != 40:
        raise SystemExit(f"longhaul_env: {path}: the first line is not a 40-character Z85 key")
    return key.encode()


def read_allowed(path):
    """Allowed public keys: a file, one Z85 key a line, or a folder of .pub files."""
    files = [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".pub")] \
        if os.path.isdir(path) else [path]
    keys = set()
    for name in files:
        with open(name) as f:
            for line in f:
                if line.strip():
                    if len(line.strip()) != 40:
                        raise SystemExit(f"longhaul_env: {name}: not a 40-character Z85 public key")
                    keys.add(line.strip().encode())
    if not keys:
        raise SystemExit(f"longhaul_env: {path}: no key in it (every peer would be refused)")
    return keys


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


def run(envs, bind, pb, secret_key_file=None, allowed_keys=None, limits=None):
    import zmq
    limits = limits or {}
    ctx = zmq.Context()
    auth = None
    # A ROUTER, not a REP: a REP reads a message's frames from one peer at
    # a time, so a peer that broke off inside one (transport garbage does
    # that) could leave it waiting; a ROUTER goes on reading the others.
    # Each message is [peer][empty delimiter][requests...].
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
    # Past SNDHWM messages queued to a peer that does not read, the ROUTER
    # drops its replies; past RCVHWM it stops reading the peer.
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    if secret_key_file:
        # CURVE with ZAP, as the C server: the handler admits only the
        # allowed keys, and with the domain enforced no handler admits none.
        from zmq.auth.thread import ThreadAuthenticator
        secret = read_key(secret_key_file, True)
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="longhaul", credentials_provider=AllowList(read_allowed(allowed_keys)))
        sock.curve_secretkey = secret
        sock.curve_publickey = zmq.curve_public(secret)
        sock.curve_server = True
        sock.zap_domain = b"longhaul"
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    sock.bind(bind)
    sessions = Sessions(limits.get("max_sessions") or MAX_SESSIONS,
                        limits.get("max_sessions_per_client") or MAX_SESSIONS_PER_CLIENT,
                        limits.get("idle_timeout_ms") or IDLE_TIMEOUT_MS)
    print(f"info envs-py: env server listening endpoint={bind} envs={','.join(sorted(envs))} max_sessions={sessions.max} "
          f"max_sessions_per_client={sessions.max_per_client} idle_timeout_ms={sessions.idle_ms} hwm={HWM} "
          f"curve={'on' if auth else 'off'}", file=sys.stderr, flush=True)
    msg_id = 0
    meter = BadMeter()
    try:
        loop(zmq, sock, pb, envs, sessions, meter, msg_id)
    except SystemExit:
        pass  # SIGTERM or SIGINT
    finally:
        print(f"info envs-py: env server stopped sessions={len(sessions.by_id)} refused={sessions.meter.total} "
              f"idle_closed={sessions.idle_closed}", file=sys.stderr, flush=True)
        sock.close()
        if auth:
            auth.stop()
        ctx.term()


def loop(zmq, sock, pb, envs, sessions, meter, msg_id):
    while True:
        # Idle sessions close even while no request comes.
        sessions.sweep()
        if not sock.poll(int(sessions.sweep_s() * 1000) or 1):
            continue
        # One message holds one or more requests, one Envelope per frame;
        # the reply holds one answer per frame, in the same order. A message
        # of more than MAX_FRAMES requests is read whole, dropped and
        # answered with one error.
        peer, frames, count = sock.recv(), [], 0
        while sock.getsockopt(zmq.RCVMORE):
            f = sock.recv()
            count += 1
            if count <= MAX_FRAMES + 2:  # the delimiter, then one request past the limit
                frames.append(f)
        if len(frames) < 2 or frames[0] != b"":
            meter.bad("a message without the empty delimiter or without a request (dropped)")
            continue
        frames = frames[1:]
        replies, stop = [], False
        if len(frames) > MAX_FRAMES:
            meter.bad(f"a message of more than {MAX_FRAMES} requests (dropped whole)")
            out = pb.Envelope(protocol=1, msg_id=msg_id + 1, sender="envs-py")
            out.env_response.status = LH_EENVS_SERVER_PROTOCOL
            out.env_response.error = f"env server: a message of more than {MAX_FRAMES} requests (dropped whole)"
            msg_id += 1
            frames, replies = [], [out.SerializeToString()]
        for raw in frames:
            msg_id += 1
            reply, halt = answer(pb, envs, sessions, peer, raw, meter, msg_id)
            stop = stop or halt
            replies.append(reply)
        sock.send_multipart([peer, b""] + replies)
        if stop:
            break

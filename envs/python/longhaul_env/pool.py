"""The serving loop of longhaul_env.serve: a ZeroMQ ROUTER read by one
thread, the requests run by a pool of worker threads.

One slow client must not stall the others: an environment whose step
takes seconds (a simulator, a tool that calls out) held a single-threaded
server for that long, and every other client's request waited behind it.
So the loop only reads, queues and sends; the requests run on workers.
Each client (a ROUTER peer, one connection) has at most one message
running at a time, so its requests run in the order sent, as before, and
its sessions are never used by two threads at once. A client with more
messages waiting goes to the back of the line each time one of its
messages is answered: the workers take clients in turn, so a client that
sends much gets no more than its share, and W workers keep serving while
up to W - 1 clients are slow. (Threads share the interpreter: a step in
Python code yields it every few milliseconds, but a single call into C
that holds it, such as one regular expression over a long text, holds
every thread; longhaul_env's own parsing is linear for that reason.)

What a client can make the server hold is bounded as the C server bounds
it: the messages a client has read and not yet answered hold at most
max_request_bytes_per_client, all clients' at most max_request_bytes
(past either, a message is dropped unanswered, counted and logged once
per interval, as the C server drops a message from a client at its
reply cap); at most max_sessions + SPARE_CLIENTS clients are tracked at
once; frames, messages and queues in libzmq are bounded by
ZMQ_MAXMSGSIZE, MAX_FRAMES and the HWMs."""
import collections
import itertools
import os
import queue
import threading
import time

from .errors import LH_EENVS_SERVER_PROTOCOL
from .keys import read_allowed, read_key
from .server import (AllowList, BadMeter, IDLE_TIMEOUT_MS, MAX_SESSIONS, MAX_SESSIONS_PER_CLIENT, RefusalMeter,
                     Sessions, answer, log)

# A request frame is at most MAX_REQUEST_BYTES (ZMQ_MAXMSGSIZE) and a
# message at most MAX_FRAMES requests, as the C server (envs/envserver.c).
MAX_REQUEST_BYTES = 8 << 20
MAX_FRAMES = 1024
HWM = 64
LINGER_MS = 1000
WORKERS = 4
MAX_QUEUED_BYTES = 256 << 20
MAX_QUEUED_BYTES_PER_CLIENT = 64 << 20
# Clients with nothing waiting are forgotten; at most max_sessions + this
# many have messages waiting at once (the C server's SPARE_PEERS).
SPARE_CLIENTS = 1024
# What a waiting message holds besides its frames' bytes (the objects
# around them), charged so that a flood of empty messages is bounded too.
MESSAGE_OVERHEAD = 512
READS_PER_TURN = 256  # messages read before the loop sends what is done


class Client:
    """A ROUTER peer's messages: those waiting, what they and the one
    running hold, and whether one is running."""

    __slots__ = ("peer", "waiting", "bytes", "running")

    def __init__(self, peer):
        self.peer, self.waiting, self.bytes, self.running = peer, collections.deque(), 0, False


class Pool:
    """Worker threads running handle(work) -> (replies, stop); what they
    finish waits in done, and a byte on a pipe wakes the loop's poll."""

    def __init__(self, workers, handle):
        self.handle = handle
        self.todo, self.done = queue.SimpleQueue(), queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        # Daemons: a stop does not wait for a step that may never end.
        self.threads = [threading.Thread(target=self.work, name=f"envs-py-worker-{i}", daemon=True)
                        for i in range(workers)]
        for t in self.threads:
            t.start()

    def work(self):
        while True:
            item = self.todo.get()
            if item is None:
                return
            client, frames = item
            try:
                replies, stop = self.handle(client.peer, frames)
            except Exception as e:  # answer() catches an environment's errors; this is a bug of ours
                log("error", f"env server: a message failed: {type(e).__name__}: {e}")
                replies, stop = [], False
            self.done.put((client, replies, stop))
            try:
                os.write(self.wake_w, b"!")
            except BlockingIOError:
                pass  # the pipe holds wake-ups already: the loop drains done whole

    def submit(self, client, frames):
        self.todo.put((client, frames))

    def finished(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                yield self.done.get_nowait()
            except queue.Empty:
                return

    def stop(self, wait_s=1.0):
        """Asks the workers to end and waits up to wait_s for them; the wake
        pipe is closed only once none is left that could write to it (a
        worker still in a step would write to whatever reused its fds)."""
        for _ in self.threads:
            self.todo.put(None)
        deadline = time.monotonic() + wait_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if not any(t.is_alive() for t in self.threads):
            os.close(self.wake_r)
            os.close(self.wake_w)


class Loop:
    """The reading thread's state: clients with messages waiting or
    running, what they hold, the counts."""

    def __init__(self, zmq, sock, pb, envs, sessions, limits):
        self.zmq, self.sock, self.pb, self.envs, self.sessions = zmq, sock, pb, envs, sessions
        self.workers = limits["workers"]
        self.max_bytes, self.max_bytes_per_client = limits["max_request_bytes"], limits["max_request_bytes_per_client"]
        self.clients, self.held = {}, 0
        self.bad, self.dropped_meter = BadMeter(), RefusalMeter()
        self.ids = itertools.count(1)
        self.requests = self.dropped = 0
        self.pool = Pool(self.workers, self.handle)

    # ---- on a worker ----

    def handle(self, peer, frames):
        """Answers one message: one reply per request frame, in order."""
        if frames is None:  # more than MAX_FRAMES: dropped whole, one error
            out = self.pb.Envelope(protocol=1, msg_id=next(self.ids), sender="envs-py")
            out.env_response.status = LH_EENVS_SERVER_PROTOCOL
            out.env_response.error = f"env server: a message of more than {MAX_FRAMES} requests (dropped whole)"
            return [out.SerializeToString()], False
        replies, stop = [], False
        for raw in frames:
            reply, halt = answer(self.pb, self.envs, self.sessions, peer, raw, self.bad, next(self.ids))
            stop = stop or halt
            replies.append(reply)
        return replies, stop

    # ---- on the reading thread ----

    def drop(self, peer, why, requests):
        self.dropped += 1
        self.dropped_meter.refused(f"{why} (a message of {requests} requests dropped unanswered)", peer)

    def receive(self):
        """Reads one message if one is waiting; queues it. False when none."""
        zmq = self.zmq
        try:
            peer = self.sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return False
        frames, count = [], 0
        while self.sock.getsockopt(zmq.RCVMORE):
            f = self.sock.recv()
            count += 1
            if count <= MAX_FRAMES + 2:  # the delimiter, then one request past the limit
                frames.append(f)
        if len(frames) < 2 or frames[0] != b"":
            self.bad.bad("a message without the empty delimiter or without a request (dropped)")
            return True
        frames = frames[1:]
        if len(frames) > MAX_FRAMES:
            self.bad.bad(f"a message of more than {MAX_FRAMES} requests (dropped whole)")
            frames = None
        bytes_held = MESSAGE_OVERHEAD + (sum(len(f) for f in frames) if frames else 0)
        requests = len(frames) if frames else count - 1
        client = self.clients.get(peer)
        if client is None:
            if len(self.clients) >= self.sessions.max + SPARE_CLIENTS:
                self.drop(peer, f"env server: {len(self.clients)} clients have requests waiting, the most it tracks "
                                "(--max-sessions + 1024)", requests)
                return True
            client = Client(peer)
        if client.bytes + bytes_held > self.max_bytes_per_client:
            self.drop(peer, f"env server: this client's requests waiting or running hold {client.bytes} bytes, "
                            f"its cap (--max-request-bytes-per-client {self.max_bytes_per_client})", requests)
            return True
        if self.held + bytes_held > self.max_bytes:
            self.drop(peer, f"env server: requests waiting or running hold {self.held} bytes, the cap "
                            f"(--max-request-bytes {self.max_bytes})", requests)
            return True
        self.clients[peer] = client
        client.waiting.append((frames, bytes_held))
        client.bytes += bytes_held
        self.held += bytes_held
        self.dispatch(client)
        return True

    def dispatch(self, client):
        if client.running or not client.waiting:
            return
        frames, _ = client.waiting[0]
        client.running = True
        self.pool.submit(client, frames)

    def answered(self, client, replies):
        """A worker finished client's first message: sends the replies (the
        ROUTER drops them when the client is gone or its queue is full),
        releases what it held and queues the client's next."""
        frames, bytes_held = client.waiting.popleft()
        client.bytes -= bytes_held
        self.held -= bytes_held
        client.running = False
        self.requests += len(frames) if frames else 1
        if replies:
            try:
                self.sock.send_multipart([client.peer, b""] + replies, self.zmq.NOBLOCK)
            except self.zmq.Again:
                pass
        if client.waiting:
            self.dispatch(client)
        else:
            del self.clients[client.peer]

    def run(self):
        zmq = self.zmq
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.pool.wake_r, zmq.POLLIN)
        while True:
            # Idle sessions close even while no request comes.
            self.sessions.sweep()
            ready = dict(poller.poll(int(self.sessions.sweep_s() * 1000) or 1))
            if self.pool.wake_r in ready:
                for client, replies, stop in self.pool.finished():
                    self.answered(client, replies)
                    if stop:
                        return
            if self.sock in ready:
                for _ in range(READS_PER_TURN):
                    if not self.receive():
                        break


def run(envs, bind, pb, secret_key_file=None, allowed_keys=None, limits=None):
    """Serves envs at bind until a Shutdown message or SIGTERM / SIGINT
    (SystemExit in this thread); logs its totals. The key files are read
    before anything binds (keys.KeyFileError)."""
    import zmq
    limits = dict(limits or {})
    for key, default in (("max_sessions", MAX_SESSIONS), ("max_sessions_per_client", MAX_SESSIONS_PER_CLIENT),
                         ("idle_timeout_ms", IDLE_TIMEOUT_MS), ("workers", WORKERS),
                         ("max_request_bytes", MAX_QUEUED_BYTES),
                         ("max_request_bytes_per_client", MAX_QUEUED_BYTES_PER_CLIENT)):
        limits[key] = limits.get(key) or default
    secret = read_key(secret_key_file, True) if secret_key_file else None
    allowed = read_allowed(allowed_keys) if secret_key_file else None
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
    if secret:
        # CURVE with ZAP, as the C server: the handler admits only the
        # allowed keys, and with the domain enforced no handler admits none.
        from zmq.auth.thread import ThreadAuthenticator
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="longhaul", credentials_provider=AllowList(allowed))
        sock.curve_secretkey = secret
        sock.curve_publickey = zmq.curve_public(secret)
        sock.curve_server = True
        sock.zap_domain = b"longhaul"
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    sock.bind(bind)
    sessions = Sessions(limits["max_sessions"], limits["max_sessions_per_client"], limits["idle_timeout_ms"])
    log("info", f"env server listening endpoint={bind} envs={','.join(sorted(envs))} max_sessions={sessions.max} "
                f"max_sessions_per_client={sessions.max_per_client} idle_timeout_ms={sessions.idle_ms} hwm={HWM} "
                f"workers={limits['workers']} max_request_bytes={limits['max_request_bytes']} "
                f"max_request_bytes_per_client={limits['max_request_bytes_per_client']} "
                f"curve={'on' if auth else 'off'}")
    loop = Loop(zmq, sock, pb, envs, sessions, limits)
    try:
        loop.run()
    except SystemExit:
        pass  # SIGTERM or SIGINT
    finally:
        log("info", f"env server stopped requests={loop.requests} sessions={sessions.count()} "
                    f"refused={sessions.meter.total} dropped={loop.dropped} idle_closed={sessions.idle_closed}")
        loop.pool.stop()
        sock.close()
        if auth:
            auth.stop()
        ctx.term()

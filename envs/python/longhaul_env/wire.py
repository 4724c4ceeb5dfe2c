"""A request frame checked before and after protobuf parses it, as the C
server's decoder (proto/wire.c, proto/wire_validate.c) checks it.

Before: protobuf's C++ parser holds the interpreter for as long as it
runs, and its time and memory follow the number of fields, not bytes: an
8 MiB frame of two-byte fields (unknown ones, empty options or empty batch
entries) took 3.3 to 3.6 s and up to 250 MB, during which no other client
was served. So the frame's wire format is walked first, field by field,
down every message level the server parses (the Envelope, a batch, each
request, each option), and a frame of more than MAX_FIELDS fields in all,
or a request of more than MAX_OPTIONS options, is refused unparsed. The
walk stops at the first field past a bound, so it costs at most
MAX_FIELDS steps whatever the frame holds. A batch's requests are then
parsed one at a time, so that no single parse is long.

After: the fields the C validator checks on an EnvRequest (protocol,
sender, run id, op, env name, options) are checked here too, with its
codes and messages, so that a client gets the same answer from either
server."""
from .errors import EnvError, LH_EENVS_SERVER_BATCH

LH_EWIRE_PROTOCOL = -103
LH_EWIRE_STRING_TOO_LONG = -105
LH_EWIRE_EMPTY_NAME = -107
LH_EWIRE_ENV_OP = -134
LH_EWIRE_TOO_MANY_OPTIONS = -135
LH_EWIRE_EXPANSION = -137
LH_EWIRE_RUN_ID = -138
LH_EWIRE_UNPARSEABLE = -101

WIRE_PROTOCOL = 1          # proto/wire.h's LH_WIRE_PROTOCOL
MAX_STRING_BYTES = 256     # lh_wire_limits' max_string_bytes: names, keys, sender
MAX_OPTIONS = 256          # max_options
MAX_RUN_ID = 64            # common/run_id.h's LH_RUN_ID_MAX
# A batch frame: at most MAX_BATCH requests in MAX_BATCH_BYTES (the whole
# Envelope), as the C server (envs/internal.h's LH_ENVS_BATCH_MAX).
MAX_BATCH = 1024
MAX_BATCH_BYTES = 4 << 20
# Far above what an honest frame holds (a batch of 1024 steps is about
# 5 000 fields), and small enough that the walk and any parse it admits
# take milliseconds.
MAX_FIELDS = 65536

# Envelope fields (proto/longhaul.proto): the header, then the bodies.
ENVELOPE_PROTOCOL, ENVELOPE_SENDER, ENVELOPE_RUN_ID = 1, 3, 4
BODY_ENV_REQUEST, BODY_SHUTDOWN, BODY_ENV_REQUEST_BATCH = 18, 20, 100
BODY_NAMES = {10: "hello", 11: "segment", 12: "episode_end", 13: "ack", 14: "heartbeat", 15: "weights_announce",
              16: "weights_request", 17: "weights_chunk", 18: "env_request", 19: "env_response", 20: "shutdown",
              100: "env_request_batch", 101: "env_response_batch"}
REQUEST_OPTIONS = 5        # EnvRequest.options
BATCH_REQUESTS = 1         # EnvRequestBatch.requests
RUN_ID_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class WireError(EnvError):
    """A frame refused, with its lh_err code (LH_EWIRE_*) and the message."""


class Walk:
    """Counts the fields walked over one frame against MAX_FIELDS."""

    def __init__(self, buf):
        self.buf, self.seen = buf, 0

    def varint(self, i, end):
        value = shift = 0
        buf = self.buf
        while True:
            if i >= end or shift > 63:
                raise WireError(LH_EWIRE_UNPARSEABLE, "undecodable request: a varint runs past its message")
            b = buf[i]
            i += 1
            value |= (b & 0x7f) << shift
            if b < 0x80:
                return value, i
            shift += 7

    def fields(self, start, end):
        """Yields (field number, wire type, value start, value end, field
        start) for the message in buf[start:end]; a varint's value is its
        end only. Keys and lengths of one byte, nearly all of them, take
        the short way."""
        buf, i = self.buf, start
        while i < end:
            self.seen += 1
            if self.seen > MAX_FIELDS:
                raise WireError(LH_EWIRE_EXPANSION, f"the frame holds more than {MAX_FIELDS} protobuf fields, the "
                                                    "most this server parses in one frame")
            first, key = i, buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = self.varint(i, end)
            number, kind = key >> 3, key & 7
            at = i
            if kind == 2:
                if i < end and buf[i] < 0x80:
                    at = i + 1
                    i = at + buf[i]
                else:
                    n, at = self.varint(i, end)
                    i = at + n
            elif kind == 0:
                _, i = self.varint(i, end)
            elif kind == 1:
                i += 8
            elif kind == 5:
                i += 4
            else:  # groups, and the kinds protobuf does not define
                raise WireError(LH_EWIRE_UNPARSEABLE, f"undecodable request: wire type {kind} in field {number}")
            if i > end or number == 0:
                raise WireError(LH_EWIRE_UNPARSEABLE, "undecodable request: a field runs past its message")
            yield number, kind, at, i, first

    def request(self, start, end, path):
        """Walks one EnvRequest (and its options); refuses too many options."""
        options = 0
        for number, kind, at, stop, _ in self.fields(start, end):
            if number == REQUEST_OPTIONS and kind == 2:
                options += 1
                for _ in self.fields(at, stop):
                    pass
        if options > MAX_OPTIONS:
            raise WireError(LH_EWIRE_TOO_MANY_OPTIONS,
                            f"{path}.options has {options} entries, over the limit of {MAX_OPTIONS}")


def split(raw):
    """Walks an Envelope frame. Returns (body field number or None, header,
    parts): header is the frame without its body fields (what is parsed as
    the Envelope), parts the (start, end) of each request of a batch, or of
    the one request; other bodies are not walked. Raises WireError."""
    w = Walk(raw)
    body = at = stop = None
    header = []
    for number, kind, a, s, first in w.fields(0, len(raw)):
        if number in BODY_NAMES:
            if kind != 2:
                raise WireError(LH_EWIRE_UNPARSEABLE, f"undecodable request: field {number} is not a message")
            body, at, stop = number, a, s  # the last body wins, as in protobuf's oneof
        else:
            header.append(raw[first:s])
    parts = []
    if body == BODY_ENV_REQUEST:
        w.request(at, stop, "env_request")
        parts.append((at, stop))
    elif body == BODY_ENV_REQUEST_BATCH:
        for number, kind, a, s, _ in w.fields(at, stop):
            if number == BATCH_REQUESTS and kind == 2:
                parts.append((a, s))
        if len(parts) > MAX_BATCH or len(raw) > MAX_BATCH_BYTES:
            raise WireError(LH_EENVS_SERVER_BATCH,
                            f"env server: a batch of {len(parts)} requests in {len(raw)} bytes, over the bound of "
                            f"{MAX_BATCH} requests and {MAX_BATCH_BYTES} bytes a frame (max_batch, max_batch_bytes "
                            "in every answer); none run")
        for k, (a, s) in enumerate(parts):
            w.request(a, s, f"env_request_batch.requests[{k}]")
    return body, b"".join(header), parts


def _string(value, path, field, limit=MAX_STRING_BYTES):
    # A str of more than limit characters is more than limit bytes.
    n = len(value) if len(value) > limit else len(value.encode("utf-8"))
    if n > limit:
        raise WireError(LH_EWIRE_STRING_TOO_LONG, f"{path}.{field} is {n} bytes, over the limit of {limit}")


def check_envelope(env):
    """The Envelope header as wire_validate.c checks it."""
    if env.protocol != WIRE_PROTOCOL:
        raise WireError(LH_EWIRE_PROTOCOL, f"envelope.protocol={env.protocol} but this build speaks protocol "
                                           f"{WIRE_PROTOCOL} (upgrade the older side)")
    _string(env.sender, "envelope", "sender")
    run_id = env.run_id.encode("utf-8")
    if run_id:
        if len(run_id) > MAX_RUN_ID:
            raise WireError(LH_EWIRE_RUN_ID, f"envelope.run_id: run id is {len(run_id)} bytes; a run id is "
                                             f"1..{MAX_RUN_ID} bytes of [A-Za-z0-9._-]")
        for i, c in enumerate(run_id):
            if c not in RUN_ID_BYTES:
                raise WireError(LH_EWIRE_RUN_ID, f"envelope.run_id: run id has byte 0x{c:02x} at offset {i}; a "
                                                 f"run id is 1..{MAX_RUN_ID} bytes of [A-Za-z0-9._-]")


def check_request(pb, req, path):
    """An EnvRequest as wire_validate.c's check_env_request checks it (the
    option count was checked by the walk)."""
    if req.op not in (pb.ENV_OP_CREATE, pb.ENV_OP_RESET, pb.ENV_OP_STEP, pb.ENV_OP_DESCRIBE, pb.ENV_OP_EXPERT,
                      pb.ENV_OP_CLOSE):
        raise WireError(LH_EWIRE_ENV_OP, f"{path}.op={req.op} is not one of create, reset, step, describe, "
                                         "expert, close")
    _string(req.env_name, path, "env_name")
    for i, kv in enumerate(req.options):
        if not kv.key:
            raise WireError(LH_EWIRE_EMPTY_NAME, f"{path}.options[{i}].key is empty")
        _string(kv.key, path, f"options[{i}].key")


def decode(pb, raw):
    """Decodes a request frame. Returns (body name, requests): body name is
    "env_request" with one EnvRequest, "env_request_batch" with the
    batch's, or another body's name (shutdown, ...) with none. Raises
    WireError for a frame refused whole."""
    body, header, parts = split(raw)
    if body is None:
        raise WireError(LH_EWIRE_UNPARSEABLE, "undecodable request: the envelope carries no body")
    env = pb.Envelope()
    try:
        env.ParseFromString(header)
    except Exception as e:
        raise WireError(LH_EWIRE_UNPARSEABLE, f"undecodable request: {type(e).__name__}") from None
    check_envelope(env)
    requests = []
    for k, (a, s) in enumerate(parts):
        req = pb.EnvRequest()
        try:
            req.ParseFromString(raw[a:s])
        except Exception as e:
            raise WireError(LH_EWIRE_UNPARSEABLE, f"undecodable request: {type(e).__name__}") from None
        check_request(pb, req, "env_request" if body == BODY_ENV_REQUEST else f"env_request_batch.requests[{k}]")
        requests.append(req)
    return BODY_NAMES[body], requests

/* learner: the weights PUB and ROUTER of the learner process. A new
 * version is announced on the PUB; actors fetch it in chunks from the
 * ROUTER. The version before the current one is still served, so that a
 * fetch begun before a new version completes. A request for any other
 * version (a new actor that missed the announcement, or one asking for a
 * version already replaced twice) is answered with the current
 * announcement on the ROUTER, so that it can start fetching the version
 * that is there. Each announcement carries the chunks' checksums, so an
 * actor asks only for the chunks that differ from the version it holds; a
 * request that accepts zstd gets the chunks where compression pays
 * compressed (learner/weights.c). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "net/zsock.h"
#include "learner/internal.h"

#define PUBLISH_LINGER_MS 200
#define PUBLISH_MAX_REQUESTS 64
/* A peer that asks and never reads must not make the learner hold the
 * version over and over: a request is served at most this many chunks
 * (an actor asks for 8 at a time, two requests ahead), and the ROUTER
 * queues at most PUBLISH_SNDHWM messages per peer, dropping the rest (the
 * actor asks again for what it misses). So a peer holds at most
 * PUBLISH_SNDHWM chunk copies here. */
#define PUBLISH_MAX_CHUNKS 16
#define PUBLISH_SNDHWM 32

/* The chunk bytes handed to libzmq and not yet written or dropped, in all
 * (LH_LEARNER_WEIGHTS_QUEUED_BYTES). A chunk goes to libzmq without a
 * copy (zmq_msg_init_data); the free function libzmq calls once it has
 * written the message to the kernel or dropped it (a peer gone, or its
 * queue full) subtracts it again, on libzmq's I/O thread, so the count is
 * atomic. The count lives apart from the publisher with a reference per
 * message in flight, since libzmq may free a message after the publisher
 * is gone (the socket's linger). */
/* Each peer's share of the count too (by its routing id, in a table of
 * PUBLISH_PEER_SLOTS; a slot whose peer holds nothing is taken over by a
 * new peer): past the cap, a peer that was sent chunks and holds none of
 * them now (an actor that reads its chunks) still gets its request
 * served, up to twice the cap, while a new peer, or one that holds chunks
 * it has not read, gets none. So peers that ask and never read fill the
 * cap but cannot lock out the actors that read. */
#define PUBLISH_PEER_SLOTS 1024
#define PUBLISH_ID_BYTES 255 /* the longest routing id libzmq gives */
typedef struct {
  uint8_t id[PUBLISH_ID_BYTES];
  uint8_t id_bytes; /* 0: a free slot */
  _Atomic uint64_t bytes;
  uint64_t used;    /* the publisher's request count at its last use */
  uint64_t sent;    /* chunks sent to it */
} queued_peer;

typedef struct {
  _Atomic uint64_t bytes;
  _Atomic uint64_t refs; /* the publisher's, and one per message in flight */
  queued_peer peers[PUBLISH_PEER_SLOTS];
} queued_meter;

typedef struct {
  queued_meter *q;
  queued_peer *peer; /* NULL: no slot was free */
  size_t bytes;
} queued_hint;

static void queued_release(queued_meter *q) {
  if (q && atomic_fetch_sub(&q->refs, 1) == 1) free(q);
}

static void chunk_done(void *data, void *hint) {
  queued_hint *h = hint;
  if (h->peer) atomic_fetch_sub(&h->peer->bytes, h->bytes);
  atomic_fetch_sub(&h->q->bytes, h->bytes);
  queued_release(h->q);
  free(h);
  free(data);
}

struct lh_learner_publisher {
  void *pub, *router;
  char pub_endpoint[LH_LEARNER_TEXT_BYTES], router_endpoint[LH_LEARNER_TEXT_BYTES];
  lh_learner_weights *w;
  /* The version before it, still served: a learner that steps back to
   * back replaces a version before most actors' requests for it come in,
   * and would otherwise redirect every fetch to a version that is
   * replaced again by the time they ask (a fetch that never ends). */
  lh_learner_weights *prev;
  uint32_t chunk_bytes;
  uint32_t stage_index, max_context;
  float long_frac;
  uint64_t next_msg_id;
  lh_wire_limits lim;
  lh_learner_publisher_counts counts;
  lh_zsock_meter bad;  /* bad requests: counted, logged once per interval */
  queued_meter *queued;
  uint64_t queue_cap, requests;
  lh_log_meter held;   /* requests cut short at queue_cap: counted, logged once per interval */
};

/* The ROUTER takes requests and the PUB its subscribers' subscriptions:
 * both small, so 1 MiB bounds a frame. */
static void *bind_socket(void *ctx, int type, const char *ep, const lh_zsock_curve *curve, char *bound,
                         lh_errbuf *err) {
  lh_zsock_opts so = {.linger_ms = PUBLISH_LINGER_MS, .max_message_bytes = 1 << 20,
                      .sndhwm = type == ZMQ_ROUTER ? PUBLISH_SNDHWM : 0, .rcvhwm = PUBLISH_MAX_REQUESTS,
                      .curve = curve};
  const char *what = type == ZMQ_PUB ? "weights PUB" : "weights ROUTER";
  lh_errbuf se;
  void *s = lh_zsock_open(ctx, type, &so, what, &se);
  if (!s || lh_zsock_bind(s, ep, curve, bound, LH_LEARNER_TEXT_BYTES, what, &se)) {
    lh_errbuf_set(err, LH_ELEARNER_PUBLISH, "weights: cannot bind %s on %s: %s (set [learner] %s)",
                  type == ZMQ_PUB ? "PUB" : "ROUTER", ep, se.msg,
                  type == ZMQ_PUB ? "weights_pub_endpoint" : "weights_endpoint");
    if (s) zmq_close(s);
    return NULL;
  }
  return s;
}

lh_learner_publisher *lh_learner_publisher_new(void *zmq_ctx, const char *pub_endpoint,
                                               const char *router_endpoint, uint32_t chunk_bytes,
                                               lh_errbuf *err) {
  return lh_learner_publisher_new_curve(zmq_ctx, pub_endpoint, router_endpoint, chunk_bytes, NULL, err);
}

lh_learner_publisher *lh_learner_publisher_new_curve(void *zmq_ctx, const char *pub_endpoint,
                                                     const char *router_endpoint, uint32_t chunk_bytes,
                                                     const lh_zsock_curve *curve, lh_errbuf *err) {
  if (!zmq_ctx || !pub_endpoint || !router_endpoint || chunk_bytes < 1) {
    lh_errbuf_set(err, LH_EINVAL, "weights: NULL context or endpoint, or chunk_bytes 0");
    return NULL;
  }
  lh_learner_publisher *p = calloc(1, sizeof *p);
  if (!p) {
    lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory");
    return NULL;
  }
  p->chunk_bytes = chunk_bytes;
  lh_wire_limits_default(&p->lim);
  p->bad.component = "weights";
  p->held.component = "weights";
  p->queue_cap = LH_LEARNER_WEIGHTS_QUEUED_BYTES;
  p->queued = calloc(1, sizeof *p->queued);
  if (!p->queued) {
    free(p);
    lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory");
    return NULL;
  }
  atomic_init(&p->queued->bytes, 0);
  atomic_init(&p->queued->refs, 1);
  for (size_t i = 0; i < PUBLISH_PEER_SLOTS; i++) atomic_init(&p->queued->peers[i].bytes, 0);
  p->pub = bind_socket(zmq_ctx, ZMQ_PUB, pub_endpoint, curve, p->pub_endpoint, err);
  if (p->pub) p->router = bind_socket(zmq_ctx, ZMQ_ROUTER, router_endpoint, curve, p->router_endpoint, err);
  if (!p->router) {
    lh_learner_publisher_free(p);
    return NULL;
  }
  LH_INFO("weights", "bound pub=%s router=%s curve=%s", p->pub_endpoint, p->router_endpoint,
          curve && curve->secret[0] ? "on" : "off");
  return p;
}

void lh_learner_publisher_free(lh_learner_publisher *p) {
  if (!p) return;
  if (p->pub) zmq_close(p->pub);
  if (p->router) zmq_close(p->router);
  lh_learner_weights_free(p->w);
  lh_learner_weights_free(p->prev);
  queued_release(p->queued); /* the last chunk libzmq lets go frees it, if that comes later */
  free(p);
}

const char *lh_learner_publisher_pub_endpoint(const lh_learner_publisher *p) { return p ? p->pub_endpoint : NULL; }
const char *lh_learner_publisher_router_endpoint(const lh_learner_publisher *p) {
  return p ? p->router_endpoint : NULL;
}
void *lh_learner_publisher_socket(lh_learner_publisher *p) { return p ? p->router : NULL; }
const lh_learner_publisher_counts *lh_learner_publisher_get_counts(const lh_learner_publisher *p) {
  return p ? &p->counts : NULL;
}
uint64_t lh_learner_publisher_queued_bytes(const lh_learner_publisher *p) {
  return p ? atomic_load(&p->queued->bytes) : 0;
}
void lh_learner_publisher_set_queue_cap(lh_learner_publisher *p, uint64_t bytes) {
  if (p) p->queue_cap = bytes;
}

/* The slot of the peer of routing id id: its own, a free one, or the
 * least recently used one whose peer holds nothing; NULL when every slot's
 * peer holds chunks (then the peer is counted in the total alone). */
static queued_peer *peer_slot(lh_learner_publisher *p, const uint8_t *id, size_t id_bytes) {
  if (!id || id_bytes == 0 || id_bytes > PUBLISH_ID_BYTES) return NULL;
  queued_meter *q = p->queued;
  size_t start = (size_t)(lh_hash64(id, id_bytes, 0) % PUBLISH_PEER_SLOTS);
  queued_peer *spare = NULL;
  for (size_t k = 0; k < PUBLISH_PEER_SLOTS; k++) {
    queued_peer *s = &q->peers[(start + k) % PUBLISH_PEER_SLOTS];
    if (s->id_bytes == id_bytes && !memcmp(s->id, id, id_bytes)) return s->used = p->requests, s;
    if (atomic_load(&s->bytes) == 0 && (!spare || s->id_bytes == 0 || (spare->id_bytes && s->used < spare->used)))
      spare = s;
    if (s->id_bytes == 0) break; /* the probe of a new id ends at a free slot */
  }
  if (!spare) return NULL;
  memcpy(spare->id, id, id_bytes);
  spare->id_bytes = (uint8_t)id_bytes;
  spare->used = p->requests;
  spare->sent = 0;
  return spare;
}

/* Sends buf (taking it over) as the last frame, counted in q (and in the
 * peer's share) until libzmq frees it; 1 when the send failed (errno as
 * zmq_errno). */
static int send_counted(queued_meter *q, queued_peer *peer, void *sock, uint8_t *buf, size_t n) {
  queued_hint *h = malloc(sizeof *h);
  if (!h) {
    free(buf);
    errno = ENOMEM;
    return 1;
  }
  /* counted before libzmq may call chunk_done */
  *h = (queued_hint){q, peer, n};
  atomic_fetch_add(&q->refs, 1);
  atomic_fetch_add(&q->bytes, n);
  if (peer) atomic_fetch_add(&peer->bytes, n);
  zmq_msg_t m;
  if (zmq_msg_init_data(&m, buf, n, chunk_done, h) != 0) {
    chunk_done(buf, h);
    return 1;
  }
  if (zmq_msg_send(&m, sock, 0) < 0) {
    int saved = zmq_errno();
    zmq_msg_close(&m); /* runs chunk_done */
    errno = saved;
    return 1;
  }
  return 0;
}

/* Encodes env (whose body the caller set) and sends it, after the given
 * routing frames; a counted one (a chunk) is held in the queued bytes, and
 * in peer's share (NULL: it has no slot), until libzmq lets it go. */
static int send_env(lh_learner_publisher *p, void *sock, Longhaul__Envelope *env, const void *id, size_t id_bytes,
                    int delimiter, int counted, queued_peer *peer, lh_errbuf *err) {
  env->protocol = LH_WIRE_PROTOCOL;
  env->msg_id = ++p->next_msg_id;
  env->sender = "learner";
  uint8_t *buf = NULL;
  size_t n = 0;
  lh_errbuf e;
  if (lh_wire_encode(env, &buf, &n, &e))
    return lh_errbuf_set(err, LH_ELEARNER_PUBLISH, "weights: cannot encode a %s: %s",
                         lh_wire_body_name(env->body_case), e.msg);
  int bad = 0;
  if (id) bad = zmq_send(sock, id, id_bytes, ZMQ_SNDMORE) < 0;
  if (!bad && delimiter) bad = zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0;
  if (!bad && counted) {
    bad = send_counted(p->queued, peer, sock, buf, n);
  } else {
    if (!bad) bad = zmq_send(sock, buf, n, 0) < 0;
    free(buf);
  }
  /* A peer that went away is not an error of ours. */
  if (bad && zmq_errno() != EHOSTUNREACH && zmq_errno() != EAGAIN)
    return lh_errbuf_set(err, LH_ELEARNER_PUBLISH, "weights: send failed: %s", zmq_strerror(zmq_errno()));
  return 0;
}

static void fill_announce(const lh_learner_publisher *p, Longhaul__WeightsAnnounce *a) {
  longhaul__weights_announce__init(a);
  lh_learner_weights_announce(p->w, a);
  a->stage_index = p->stage_index, a->max_context = p->max_context, a->long_frac = p->long_frac;
}

int lh_learner_publisher_announce(lh_learner_publisher *p, lh_errbuf *err) {
  if (!p) return lh_errbuf_set(err, LH_EINVAL, "weights: NULL publisher");
  if (!p->w) return 0;
  Longhaul__WeightsAnnounce a;
  fill_announce(p, &a);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
  env.weights_announce = &a;
  int rc = send_env(p, p->pub, &env, NULL, 0, 0, 0, NULL, err);
  if (!rc) p->counts.announces++;
  return rc;
}

int lh_learner_publisher_set(lh_learner_publisher *p, uint64_t version, const void *bytes, size_t n,
                             uint32_t stage_index, uint32_t max_context, float long_frac, lh_errbuf *err) {
  if (!p) return lh_errbuf_set(err, LH_EINVAL, "weights: NULL publisher");
  /* The current version becomes the previous one (still served), and the
   * new one overwrites the buffer of the version before that when it has
   * the same size: no fresh allocation, and no page faults, per version. */
  lh_learner_weights *spare = p->prev;
  p->prev = p->w;
  p->w = spare;
  if (!lh_learner_weights_refill(p->w, version, bytes, n)) {
    lh_learner_weights *w = lh_learner_weights_new(version, bytes, n, p->chunk_bytes, err);
    if (!w) {
      p->w = p->prev, p->prev = spare;
      return err ? err->code : LH_ENOMEM;
    }
    lh_learner_weights_free(p->w);
    p->w = w;
  }
  p->stage_index = stage_index, p->max_context = max_context, p->long_frac = long_frac;
  return lh_learner_publisher_announce(p, err);
}

/* The current version's announcement fields (all 0 before the first set). */
static Longhaul__WeightsAnnounce current(const lh_learner_publisher *p) {
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  if (p && p->w) lh_learner_weights_announce(p->w, &a);
  return a;
}

uint64_t lh_learner_publisher_checksum(const lh_learner_publisher *p) { return current(p).checksum; }

uint64_t lh_learner_publisher_version(const lh_learner_publisher *p) { return current(p).version; }

/* Serves one request message: chunks of the current version, or the
 * current announcement when it asks for another. */
static int serve_one(lh_learner_publisher *p, const uint8_t *id, size_t id_bytes, int delimiter,
                     const uint8_t *buf, size_t n, lh_errbuf *err) {
  Longhaul__Envelope *req = NULL;
  lh_errbuf e;
  if (lh_wire_decode(buf, n, &p->lim, &req, &e) ||
      req->body_case != LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST) {
    p->counts.bad_requests++;
    lh_zsock_meter_bad(&p->bad, req ? "not a weights_request on the weights ROUTER" : e.msg);
    lh_wire_free(req);
    return 0;
  }
  int rc = 0;
  uint32_t first = 0, count = 0;
  lh_learner_weights *from = p->w;
  if (p->w && p->prev && lh_learner_weights_serve(p->w, req->weights_request, &first, &count, &e) &&
      !lh_learner_weights_serve(p->prev, req->weights_request, &first, &count, &e))
    from = p->prev;
  if (!p->w) {
    p->counts.bad_requests++;  /* nothing published yet: the announcement will come */
  } else if (lh_learner_weights_serve(from, req->weights_request, &first, &count, &e)) {
    Longhaul__WeightsAnnounce a;
    fill_announce(p, &a);
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
    env.weights_announce = &a;
    rc = send_env(p, p->router, &env, id, id_bytes, delimiter, 0, NULL, err);
    p->counts.redirects++;
  } else {
    if (count > PUBLISH_MAX_CHUNKS) count = PUBLISH_MAX_CHUNKS;
    p->requests++;
    queued_peer *peer = peer_slot(p, id, id_bytes);
    /* a peer that was sent chunks and holds none has read them: served
     * past the cap, up to twice it */
    int reads = peer && peer->sent > 0 && atomic_load(&peer->bytes) == 0;
    uint64_t cap = reads ? 2 * p->queue_cap : p->queue_cap;
    for (uint32_t i = 0; i < count && !rc; i++) {
      uint64_t queued = atomic_load(&p->queued->bytes);
      if (queued >= cap) {
        p->counts.requests_held++;
        lh_log_meter_warn(&p->held,
                          "%llu chunk bytes queued for peers that have not read them, the cap %llu: a request "
                          "served %u of %u chunks, its actor asks again",
                          (unsigned long long)queued, (unsigned long long)p->queue_cap, i, count);
        break;
      }
      Longhaul__WeightsChunk c;
      longhaul__weights_chunk__init(&c);
      rc = lh_learner_weights_chunk_encoded(from, first + i, req->weights_request->accept_zstd, &c, err);
      if (rc) break;
      Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
      env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
      env.weights_chunk = &c;
      rc = send_env(p, p->router, &env, id, id_bytes, delimiter, 1, peer, err);
      if (!rc) {
        if (peer) peer->sent++;
        p->counts.chunks_sent++;
        p->counts.bytes_sent += c.data.len;
        p->counts.chunks_zstd += c.encoding == LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
      }
    }
  }
  lh_wire_free(req);
  return rc;
}

int lh_learner_publisher_poll(lh_learner_publisher *p, int timeout_ms, size_t *served, lh_errbuf *err) {
  if (served) *served = 0;
  if (!p) return lh_errbuf_set(err, LH_EINVAL, "weights: NULL publisher");
  zmq_pollitem_t item = {p->router, 0, ZMQ_POLLIN, 0};
  int pr = zmq_poll(&item, 1, timeout_ms);
  if (pr <= 0) return pr < 0 && zmq_errno() != EINTR
                          ? lh_errbuf_set(err, LH_ELEARNER_PUBLISH, "weights: poll failed: %s",
                                          zmq_strerror(zmq_errno()))
                          : 0;
  for (size_t k = 0; k < PUBLISH_MAX_REQUESTS; k++) {
    zmq_msg_t f[3];
    int n = 0;
    int got = lh_zsock_recv_frames(p->router, f, 3, ZMQ_DONTWAIT, &n);
    if (got <= 0) return 0;  /* nothing more waiting (or interrupted) */
    int rc = 0;
    if (got == 2 || n < 2 || (n == 3 && zmq_msg_size(&f[1]) != 0)) {
      p->counts.bad_requests++;
      lh_zsock_meter_bad(&p->bad, "wrong frame count on the weights ROUTER (expected identity and one request)");
    } else {
      zmq_msg_t *payload = &f[n - 1];
      rc = serve_one(p, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), n == 3, zmq_msg_data(payload),
                     zmq_msg_size(payload), err);
      if (!rc && served) (*served)++;
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    if (rc) return rc;
  }
  return 0;
}

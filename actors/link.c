/* actors: the actor's sockets to its learner (ARCHITECTURE.md §1).
 *
 * A DEALER to the learner's ingest ROUTER carries Hello, Segment,
 * EpisodeEnd and Heartbeat; Segment and EpisodeEnd wait in the outbox
 * until acked and are resent after resend_timeout_ms, or at once when the
 * DEALER reconnects (a socket monitor reports each connection; every one
 * begins with a Hello); a send that would block (the pipe at its
 * high-water mark) leaves its message due, and the next poll sends it.
 * The learner takes messages in our name only from a connection that said
 * Hello under it (learner/peers.c), so a Hello that could not be sent is
 * sent by the next poll, before anything else, and an ACK_RETRY (which a
 * learner that lost our Hello answers) brings another one. A
 * SUB to the weights PUB hears announcements and a DEALER to the weights
 * ROUTER fetches the chunks (actors/weights.c keeps them). Every socket
 * has a bounded ZMQ_LINGER and a monitor: a connection counts from its
 * completed handshake, and an endpoint not reached within
 * resend_timeout_ms is warned about (actors/reach.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/internal.h"
#include "common/run_id.h"
#include "net/zsock.h"
#include "proto/wire.h"

#define WEIGHTS_WINDOW 8
/* The sockets the link watches, in the order of its monitors. */
enum { SOCK_INGEST = 0, SOCK_PUB = 1, SOCK_WEIGHTS = 2, SOCKS = 3 };

struct lh_actors_link {
  lh_actors_link_config cfg;
  char *name;
  void *ctx;
  void *ingest, *sub, *wdealer;
  void *monitor[SOCKS];         /* each socket's monitor (NULL: that socket is not open) */
  lh_actors_reach reach[SOCKS]; /* whether each reaches its endpoint */
  int wake_fd;                  /* also ends a poll's wait; 0 or -1: none */
  lh_actors_outbox *outbox;
  lh_actors_weights *weights;
  lh_wire_limits lim;
  uint64_t msg_base, msg_count;
  uint64_t connects, acked, rejected;
  int64_t reconnect_at_ms;      /* after a refusal: when to connect again (0: none due) */
  lh_log_meter refusal_meter;   /* counts the learner's refusals of the ingest connection */
  lh_log_meter resend_meter;    /* counts resends: the learner went quiet or away */
  int64_t last_weights_ms;
  int weights_new;
  uint64_t announced;  /* the newest version announced */
  lh_zsock_curve curve;  /* a copy of cfg->curve's keys */
  uint32_t window;       /* the last Ack's back-pressure window (UINT32_MAX: none) */
  FILE *ack_log;         /* LH_ACK_LOG's file, or NULL */
  char run_id[LH_RUN_ID_BYTES];  /* this actor's run; "" none */
  lh_errbuf refused;     /* code LH_EACTORS_RUN_MISMATCH once a learner of another run refused us */
  int hello_due;         /* a Hello to send before anything else (its last send would have blocked) */
  int64_t hello_ms;      /* when the last Hello went */
};

static int send_hello(lh_actors_link *l, lh_errbuf *err);

static int64_t now_ms(void) { return lh_now_ns() / 1000000; }

static void close_socket(void **s) {
  if (*s) zmq_close(*s);
  *s = NULL;
}

void lh_actors_link_free(lh_actors_link *l) {
  if (!l) return;
  void *watched[SOCKS] = {l->ingest, l->sub, l->wdealer};
  for (int i = 0; i < SOCKS; i++) {
    if (watched[i] && l->monitor[i]) zmq_socket_monitor(watched[i], NULL, 0);
    close_socket(&l->monitor[i]);
  }
  close_socket(&l->ingest);
  close_socket(&l->sub);
  close_socket(&l->wdealer);
  lh_actors_outbox_free(l->outbox);
  lh_actors_weights_free(l->weights);
  if (l->ack_log) fclose(l->ack_log);
  free(l->name);
  free(l);
}

/* A socket's monitor, attached before it connects so that no connection
 * event is missed (events with no listener are dropped). */
static int attach_monitor(lh_actors_link *l, void *s, int which, lh_errbuf *err) {
  char mon[96];
  snprintf(mon, sizeof mon, "inproc://lh-actor-monitor-%p-%d", (void *)l, which);
  lh_zsock_opts mo = {.linger_ms = l->cfg.linger_ms, .max_message_bytes = 4096};
  lh_errbuf me;
  int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_DISCONNECTED;
  if (zmq_socket_monitor(s, mon, events) != 0 ||
      !(l->monitor[which] = lh_zsock_open(l->ctx, ZMQ_PAIR, &mo, "actor monitor", &me)) ||
      zmq_connect(l->monitor[which], mon) != 0)
    return lh_errbuf_set(err, LH_EZMQ, "actor link: cannot monitor the socket to %s: %s", l->reach[which].endpoint,
                         zmq_strerror(zmq_errno()));
  return 0;
}

/* Opens the socket which (SOCK_*) into *out, its monitor attached, and
 * connects it to endpoint; on failure *out is left for the link's free. */
static int open_socket(lh_actors_link *l, int type, int which, const char *endpoint, void **out, lh_errbuf *err) {
  /* Each socket takes the learner's messages up to the wire's limit:
   * acks, announcements and weights chunks. */
  lh_zsock_opts so = {.linger_ms = l->cfg.linger_ms, .max_message_bytes = (int64_t)l->lim.max_message_bytes,
                      .curve = l->cfg.curve};
  void *s = lh_zsock_open(l->ctx, type, &so, "actor link", err);
  if (!s) return err ? err->code : LH_EZMQ;
  if (type == ZMQ_SUB) zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
  *out = s;
  LH_TRY(attach_monitor(l, s, which, err));
  if (zmq_connect(s, endpoint) != 0)
    return lh_errbuf_set(err, LH_EZMQ, "actor link: cannot connect to %s: %s (check the endpoint in [actor])",
                         endpoint, zmq_strerror(zmq_errno()));
  return 0;
}

int lh_actors_link_new(void *zmq_ctx, const lh_actors_link_config *cfg, lh_actors_link **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!zmq_ctx || !cfg || !out || !cfg->ingest_endpoint || !*cfg->ingest_endpoint)
    return lh_errbuf_set(err, LH_EINVAL, "actor link: NULL context, config, out or ingest endpoint");
  lh_actors_link *l = calloc(1, sizeof *l);
  if (!l) return lh_errbuf_set(err, LH_ENOMEM, "actor link: out of memory");
  l->cfg = *cfg;
  l->ctx = zmq_ctx;
  l->window = UINT32_MAX;
  l->refusal_meter.component = "actor";
  l->resend_meter.component = "actor";
  l->name = malloc(strlen(cfg->name ? cfg->name : "") + 1);
  int rc = 0;
  if (!l->name) {
    rc = lh_errbuf_set(err, LH_ENOMEM, "actor link: out of memory");
    goto fail;
  }
  strcpy(l->name, cfg->name ? cfg->name : "");
  const char *ack_log = getenv(LH_ACTORS_ACK_LOG_ENV);
  if (ack_log && *ack_log && !(l->ack_log = fopen(ack_log, "a")))
    LH_WARN("actor", "%s=%s cannot be opened: ack latencies not logged", LH_ACTORS_ACK_LOG_ENV, ack_log);
  if (l->ack_log) setvbuf(l->ack_log, NULL, _IOLBF, 0);
  l->cfg.name = l->name;
  if (cfg->run_id && *cfg->run_id) {
    if ((rc = lh_run_id_check(cfg->run_id, err)) < 0) goto fail;
    snprintf(l->run_id, sizeof l->run_id, "%s", cfg->run_id);
  }
  l->cfg.run_id = l->run_id;
  if (cfg->curve) {
    l->curve = *cfg->curve;
    l->cfg.curve = &l->curve;
  }
  lh_wire_limits_default(&l->lim);
  if (cfg->vocab) l->lim.vocab = cfg->vocab;
  /* msg ids: a base drawn from the actor's salt, then a counter, so that
   * a restarted actor never reuses an id of its previous life. */
  l->msg_base = lh_hash64(&cfg->id_salt, sizeof cfg->id_salt, 0x6d7367696473ull) & ~0xffffffffull;
  l->outbox = lh_actors_outbox_new(cfg->outbox_messages, cfg->outbox_bytes, cfg->resend_timeout_ms, err);
  if (!l->outbox) {
    rc = err ? err->code : LH_ENOMEM;
    goto fail;
  }
  int64_t t0 = now_ms();
  lh_actors_reach_init(&l->reach[SOCK_INGEST], "learner", "learner_endpoint", cfg->ingest_endpoint, t0);
  lh_actors_reach_init(&l->reach[SOCK_PUB], "learner's weights publisher", "weights_pub_endpoint",
                       cfg->weights_pub_endpoint, t0);
  lh_actors_reach_init(&l->reach[SOCK_WEIGHTS], "learner's weights service", "weights_endpoint",
                       cfg->weights_endpoint, t0);
  if ((rc = open_socket(l, ZMQ_DEALER, SOCK_INGEST, cfg->ingest_endpoint, &l->ingest, err)) < 0) goto fail;
  if (cfg->weights_pub_endpoint && *cfg->weights_pub_endpoint && strcmp(cfg->weights_pub_endpoint, "none") != 0) {
    l->weights = lh_actors_weights_new(cfg->max_weights_bytes ? cfg->max_weights_bytes : (size_t)1 << 32, err);
    if (l->weights) lh_actors_weights_set_zstd(l->weights, cfg->weights_zstd);
    if (!l->weights) {
      rc = err ? err->code : LH_ENOMEM;
      goto fail;
    }
    if ((rc = open_socket(l, ZMQ_SUB, SOCK_PUB, cfg->weights_pub_endpoint, &l->sub, err)) < 0) goto fail;
    if (!cfg->weights_endpoint || !*cfg->weights_endpoint) {
      rc = lh_errbuf_set(err, LH_ECONFIG, "actor link: weights_pub_endpoint is set but weights_endpoint is not");
      goto fail;
    }
    if ((rc = open_socket(l, ZMQ_DEALER, SOCK_WEIGHTS, cfg->weights_endpoint, &l->wdealer, err)) < 0) goto fail;
  }
  /* Queued until the DEALER connects, so that it is the first message
   * the learner sees from us. */
  if ((rc = send_hello(l, err)) < 0) goto fail;
  *out = l;
  return 0;
fail:
  lh_actors_link_free(l);
  return rc;
}

static int send_bytes(void *sock, const uint8_t *b, size_t n, lh_errbuf *err) {
  if (zmq_send(sock, b, n, ZMQ_DONTWAIT) < 0) {
    int en = zmq_errno();
    /* Not connected yet, or the pipe is full: 0, the caller keeps it due. */
    if (en == EAGAIN || en == EHOSTUNREACH) return 0;
    return lh_errbuf_set(err, LH_EZMQ, "actor link: send failed: %s", zmq_strerror(en));
  }
  return 1;
}

/* Fills the envelope's header and encodes it. */
static int encode(lh_actors_link *l, Longhaul__Envelope *env, uint8_t **buf, size_t *n, lh_errbuf *err) {
  env->protocol = LH_WIRE_PROTOCOL;
  env->msg_id = l->msg_base + ++l->msg_count;
  env->sender = l->name;
  env->run_id = l->run_id;
  LH_TRY(lh_wire_validate(env, &l->lim, err));
  return lh_wire_encode(env, buf, n, err);
}

/* A Hello again after an ACK_RETRY at most this often: a learner that
 * answers retry for another reason (a full store) gets one a second. */
#define LINK_HELLO_AGAIN_MS 1000

static int send_hello(lh_actors_link *l, lh_errbuf *err) {
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor";
  h.name = l->name;
  h.vocab = l->cfg.vocab;
  h.layers = l->cfg.layers;
  h.topk = l->cfg.topk;
  h.pid = l->cfg.pid;
  h.policy_version = l->cfg.policy_version;
  h.run_id = l->run_id;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  uint8_t *buf = NULL;
  size_t n = 0;
  int rc = encode(l, &env, &buf, &n, err);
  if (rc == 0) rc = send_bytes(l->ingest, buf, n, err);
  free(buf);
  l->hello_due = rc == 0;  /* it would have blocked: the next poll tries again */
  if (rc == 1) l->hello_ms = now_ms();
  return rc < 0 ? rc : 0;
}

int lh_actors_link_send(lh_actors_link *l, Longhaul__Envelope *env, lh_errbuf *err) {
  if (!l || !env) return lh_errbuf_set(err, LH_EINVAL, "actor link send: NULL argument");
  int tracked = env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT ||
                env->body_case == LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  uint8_t *buf = NULL;
  size_t n = 0;
  uint64_t before = l->msg_count;
  int rc = encode(l, env, &buf, &n, err);
  if (rc == 0 && tracked) {
    if (!lh_actors_outbox_has_room(l->outbox, n) && n <= l->cfg.outbox_bytes) {
      l->msg_count = before;  /* the id goes to the retry */
      free(buf);
      return lh_errbuf_set(err, LH_EACTORS_OUTBOX_FULL, "actor link: outbox full (%zu messages unacked)",
                           lh_actors_outbox_depth(l->outbox));
    }
    rc = lh_actors_outbox_push(l->outbox, env->msg_id, buf, n, now_ms(), err);
    if (rc == 0 && env->body_case == LONGHAUL__ENVELOPE__BODY_EPISODE_END) lh_actors_outbox_mark(l->outbox, env->msg_id);
    /* Behind messages whose sends blocked, or a Hello that did: it waits
     * its turn (the poll sends them in order). */
    if (rc == 0 && (lh_actors_outbox_has_unsent(l->outbox) || l->hello_due)) {
      lh_actors_outbox_unsent(l->outbox, env->msg_id);
      free(buf);
      return 0;
    }
  }
  if (rc == 0) {
    rc = send_bytes(l->ingest, buf, n, err);
    if (rc == 0 && tracked) lh_actors_outbox_unsent(l->outbox, env->msg_id);
  }
  free(buf);
  return rc < 0 ? rc : 0;
}

/* What LH_ACK_LOG says of the message msg_id, while it is still in the
 * outbox: "EPISODE SEQ" for a Segment, "EPISODE end" for an EpisodeEnd. */
static void ack_ids(lh_actors_link *l, uint64_t msg_id, char *out, size_t cap) {
  size_t n = 0;
  const uint8_t *bytes = lh_actors_outbox_peek(l->outbox, msg_id, &n);
  Longhaul__Envelope *env = NULL;
  lh_errbuf e = {0};
  snprintf(out, cap, "? ?");
  if (bytes && lh_wire_decode(bytes, n, &l->lim, &env, &e) == 0) {
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT)
      snprintf(out, cap, "%llu %u", (unsigned long long)env->segment->episode_id, env->segment->seq);
    else if (env->body_case == LONGHAUL__ENVELOPE__BODY_EPISODE_END)
      snprintf(out, cap, "%llu end", (unsigned long long)env->episode_end->episode_id);
  }
  lh_wire_free(env);
}

static void handle_ingest(lh_actors_link *l, const uint8_t *b, size_t n) {
  Longhaul__Envelope *env = NULL;
  lh_errbuf e = {0};
  if (lh_wire_decode(b, n, &l->lim, &env, &e) != 0) {
    LH_WARN("actor", "bad message from the learner's ingest: %s", e.msg);
    return;
  }
  if (env->body_case == LONGHAUL__ENVELOPE__BODY_ACK) {
    Longhaul__Ack *a = env->ack;
    uint32_t w = a->hold ? 0 : a->window ? a->window : UINT32_MAX;
    if (w != l->window) LH_DEBUG("actor", "learner back-pressure window=%u", w);
    l->window = w;
    /* RETRY leaves the messages waiting: the timeout resends them. The
     * learner may have no Hello of ours on this connection (it restarted
     * and what we queued went ahead of the Hello, or it forgot our name):
     * one more Hello makes the resends count. */
    if (a->status == LONGHAUL__ACK_STATUS__ACK_RETRY && now_ms() - l->hello_ms >= LINK_HELLO_AGAIN_MS)
      l->hello_due = 1;
    if (a->status == LONGHAUL__ACK_STATUS__ACK_STORED || a->status == LONGHAUL__ACK_STATUS__ACK_DUPLICATE) {
      int64_t t = now_ms(), wall = l->ack_log ? lh_wall_ms() : 0, pushed = 0;
      for (size_t i = 0; i < a->n_msg_ids; i++) {
        char ids[64] = "";
        if (l->ack_log) ack_ids(l, a->msg_ids[i], ids, sizeof ids);  /* before the ack drops its bytes */
        if (!lh_actors_outbox_ack_at(l->outbox, a->msg_ids[i], &pushed)) continue;
        l->acked++;
        if (l->ack_log) fprintf(l->ack_log, "%lld %lld %s\n", (long long)wall, (long long)(t - pushed), ids);
      }
    } else if (a->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) {
      size_t k = lh_actors_outbox_ack_many(l->outbox, a->msg_ids, a->n_msg_ids);
      l->rejected += k;
      if (l->run_id[0] && env->run_id && *env->run_id && strcmp(env->run_id, l->run_id) != 0) {
        /* A learner of another run: nothing this actor sends is stored. */
        if (!l->refused.code)
          lh_errbuf_set(&l->refused, LH_EACTORS_RUN_MISMATCH,
                        "the learner at %s serves run %s, this actor was started for run %s: refused; start "
                        "the actor with the learner's --run-id, or point it at its own run's learner",
                        l->cfg.ingest_endpoint, env->run_id, l->run_id);
      } else {
        LH_WARN("actor", "learner rejected %zu messages: %s", k, a->reason ? a->reason : "");
      }
    }
  }
  lh_wire_free(env);
}

static void request_weights(lh_actors_link *l, lh_errbuf *err) {
  Longhaul__WeightsRequest req;
  for (int i = 0; i < 2; i++) {
    /* At most two windows in flight: the learner queues a bounded number
     * of chunks per peer and drops the rest (learner/publish.c), which
     * would cost a resend timeout. */
    if (lh_actors_weights_in_flight(l->weights) > WEIGHTS_WINDOW) return;
    longhaul__weights_request__init(&req);
    if (!lh_actors_weights_next_request(l->weights, WEIGHTS_WINDOW, &req)) return;
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST;
    env.weights_request = &req;
    uint8_t *buf = NULL;
    size_t n = 0;
    if (encode(l, &env, &buf, &n, err) == 0) (void)send_bytes(l->wdealer, buf, n, err);
    free(buf);
    l->last_weights_ms = now_ms();
  }
}

/* A version completed: flagged for the next poll's return, and what it took
 * logged (bytes fetched against the version's size). */
static void weights_complete(lh_actors_link *l) {
  l->weights_new = 1;
  lh_actors_weights_fetch_stats st;
  if (lh_actors_weights_last_fetch(l->weights, &st))
    LH_INFO("actor", "weights version=%llu complete bytes=%llu fetched=%llu wire=%llu chunks=%u reused=%llu zstd=%llu",
            (unsigned long long)st.version, (unsigned long long)st.total_bytes,
            (unsigned long long)st.bytes_fetched, (unsigned long long)st.wire_bytes, st.chunk_count,
            (unsigned long long)st.chunks_reused, (unsigned long long)st.chunks_zstd);
}

static void handle_weights(lh_actors_link *l, const uint8_t *b, size_t n, lh_errbuf *err) {
  Longhaul__Envelope *env = NULL;
  lh_errbuf e = {0};
  /* The fetcher checks every chunk's checksum itself (and refetches a bad
   * one): the decoder need not hash the same bytes first. */
  lh_wire_limits lim = l->lim;
  lim.skip_chunk_checksums = 1;
  if (lh_wire_decode(b, n, &lim, &env, &e) != 0) {
    LH_WARN("actor", "bad weights message: %s", e.msg);
    return;
  }
  if (env->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE) {
    if (env->weights_announce->version > l->announced) l->announced = env->weights_announce->version;
    int rc = lh_actors_weights_announce(l->weights, env->weights_announce, &e);
    if (rc >= 1 && env->weights_announce->version < l->announced) {
      LH_INFO("actor", "the learner went back to version %llu (from %llu): restarted from a checkpoint",
              (unsigned long long)env->weights_announce->version, (unsigned long long)l->announced);
      l->announced = env->weights_announce->version;
    }
    if (rc < 0) LH_WARN("actor", "weights announcement refused: %s", e.msg);
    if (rc >= 1)
      LH_INFO("actor", "weights announced version=%llu bytes=%llu",
              (unsigned long long)env->weights_announce->version,
              (unsigned long long)env->weights_announce->total_bytes);
    if (rc == 2) weights_complete(l);
  } else if (env->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK) {
    int rc = lh_actors_weights_add_chunk(l->weights, env->weights_chunk, &e);
    if (rc < 0) LH_WARN("actor", "weights chunk refused: %s", e.msg);
    if (rc == 1) weights_complete(l);
    l->last_weights_ms = now_ms();
  }
  lh_wire_free(env);
  request_weights(l, err);
}

/* A (re)connection of the ingest DEALER, its handshake completed: Hello
 * first, then everything unacked goes again. */
static int on_connect(lh_actors_link *l, lh_errbuf *err) {
  l->connects++;
  LH_INFO("actor", "connected to the learner endpoint=%s connects=%llu unacked=%zu", l->cfg.ingest_endpoint,
          (unsigned long long)l->connects, lh_actors_outbox_depth(l->outbox));
  /* The first connection carries what was queued before it, the Hello
   * first; a reconnection may have lost what was in flight. */
  if (l->connects == 1) return 0;
  lh_actors_outbox_resend_all(l->outbox);
  if (l->weights) lh_actors_weights_restarted(l->weights);
  return send_hello(l, err);
}

/* The learner refused the ingest connection at its handshake (its ZAP
 * handler: the ingest at its peer cap, or a CURVE key it does not allow).
 * libzmq ends such a connection for good (it connects again by itself
 * only when the connection closed before the refusal was read, as on a
 * loaded machine), so the link connects again after
 * LINK_REFUSED_RETRY_MS; the reconnection resends what is unacked. */
#define LINK_REFUSED_RETRY_MS 1000
static void on_refused(lh_actors_link *l, uint32_t status) {
  l->reconnect_at_ms = now_ms() + LINK_REFUSED_RETRY_MS;
  lh_log_meter_warn(&l->refusal_meter,
                    "the learner refused the connection endpoint=%s status=%u (its ingest may be at its peer "
                    "cap, [learner] ingest_queue_bytes, or may not allow this actor's CURVE key); connecting "
                    "again in %d ms",
                    l->cfg.ingest_endpoint, (unsigned)status, LINK_REFUSED_RETRY_MS);
}

/* A monitor event of socket which (SOCK_*): its first frame is the event
 * (16 bits) and its value (32 bits). The ingest's connection begins once
 * its handshake completed (a TCP connection alone may reach something
 * else), and a refused handshake is connected again later. */
static int on_event(lh_actors_link *l, int which, const zmq_msg_t *m, lh_errbuf *err) {
  if (zmq_msg_size(m) < 6) return 0;
  uint16_t event;
  uint32_t value;
  memcpy(&event, zmq_msg_data((zmq_msg_t *)m), sizeof event);
  memcpy(&value, (const uint8_t *)zmq_msg_data((zmq_msg_t *)m) + 2, sizeof value);
  int reached = lh_actors_reach_event(&l->reach[which], event, now_ms());
  if (which != SOCK_INGEST) return 0;
  if (reached) return on_connect(l, err);
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) on_refused(l, value);
  return 0;
}

/* Warns of an endpoint not reached within resend_timeout_ms, again at
 * most once per that or LH_LOG_METER_INTERVAL_NS, whichever is longer.
 * While the ingest is not reached, its line says whether the weights
 * endpoints are not either (a learner that is down is one line, not
 * three); their own lines come once the ingest is reached. */
static void check_reach(lh_actors_link *l) {
  int64_t t = now_ms(), after = l->cfg.resend_timeout_ms, repeat = LH_LOG_METER_INTERVAL_NS / 1000000;
  if (repeat < after) repeat = after;
  if (!l->reach[SOCK_INGEST].reached) {
    char extra[160];
    int n = snprintf(extra, sizeof extra, " unacked=%zu", lh_actors_outbox_depth(l->outbox));
    if (l->sub && !l->reach[SOCK_PUB].reached && !l->reach[SOCK_WEIGHTS].reached)
      snprintf(extra + n, sizeof extra - (size_t)n, ", its weights endpoints not reached either");
    else if (l->sub && (!l->reach[SOCK_PUB].reached || !l->reach[SOCK_WEIGHTS].reached))
      snprintf(extra + n, sizeof extra - (size_t)n, ", its %s not reached either",
               l->reach[SOCK_PUB].reached ? "weights_endpoint" : "weights_pub_endpoint");
    lh_actors_reach_check(&l->reach[SOCK_INGEST], t, after, repeat, extra);
    return;
  }
  for (int i = SOCK_PUB; i < SOCKS; i++)
    if (l->monitor[i]) lh_actors_reach_check(&l->reach[i], t, after, repeat, NULL);
}

/* Drains the messages waiting on s: 0 ingest, 1 weights, 2 + SOCK_* that
 * socket's monitor events (each a message of two frames). */
static int drain(lh_actors_link *l, void *s, int which, lh_errbuf *err) {
  for (int k = 0; k < 1024; k++) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) < 0) {
      int en = zmq_errno();
      zmq_msg_close(&m);
      if (en == EAGAIN) return 0;
      return lh_errbuf_set(err, LH_EZMQ, "actor link: receive failed: %s", zmq_strerror(en));
    }
    int more = zmq_msg_more(&m), rc = 0;
    if (which == 0) handle_ingest(l, zmq_msg_data(&m), zmq_msg_size(&m));
    else if (which == 1) handle_weights(l, zmq_msg_data(&m), zmq_msg_size(&m), err);
    else rc = on_event(l, which - 2, &m, err);
    zmq_msg_close(&m);
    while (more) {
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, s, 0) < 0) more = 0;
      else more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (rc < 0) return rc;
  }
  return 0;
}

void lh_actors_link_set_wake_fd(lh_actors_link *l, int fd) {
  if (l) l->wake_fd = fd;
}

int lh_actors_link_poll(lh_actors_link *l, int timeout_ms, lh_errbuf *err) {
  if (!l) return lh_errbuf_set(err, LH_EINVAL, "actor link poll: NULL link");
  if (l->refused.code) {
    if (err) *err = l->refused;
    return l->refused.code;
  }
  zmq_pollitem_t items[4 + SOCKS] = {{l->ingest, 0, ZMQ_POLLIN, 0}};  /* ingest, sub, wdealer, monitors, wake */
  int n = 1;
  if (l->wake_fd > 0) items[n++] = (zmq_pollitem_t){NULL, l->wake_fd, ZMQ_POLLIN, 0};
  if (l->sub) {
    items[n++] = (zmq_pollitem_t){l->sub, 0, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){l->wdealer, 0, ZMQ_POLLIN, 0};
  }
  for (int i = 0; i < SOCKS; i++)
    if (l->monitor[i]) items[n++] = (zmq_pollitem_t){l->monitor[i], 0, ZMQ_POLLIN, 0};
  if (zmq_poll(items, n, timeout_ms) < 0 && zmq_errno() != EINTR)
    return lh_errbuf_set(err, LH_EZMQ, "actor link: poll failed: %s", zmq_strerror(zmq_errno()));
  for (int i = 0; i < SOCKS; i++)
    if (l->monitor[i]) LH_TRY(drain(l, l->monitor[i], 2 + i, err));
  check_reach(l);
  if (l->reconnect_at_ms && now_ms() >= l->reconnect_at_ms) {
    l->reconnect_at_ms = 0;
    zmq_disconnect(l->ingest, l->cfg.ingest_endpoint);  /* ENOENT when libzmq dropped it already */
    if (zmq_connect(l->ingest, l->cfg.ingest_endpoint) != 0)
      return lh_errbuf_set(err, LH_EZMQ, "actor link: cannot connect to %s again: %s", l->cfg.ingest_endpoint,
                           zmq_strerror(zmq_errno()));
  }
  LH_TRY(drain(l, l->ingest, 0, err));
  if (l->hello_due) LH_TRY(send_hello(l, err));
  if (l->sub) {
    LH_TRY(drain(l, l->sub, 1, err));
    LH_TRY(drain(l, l->wdealer, 1, err));
    /* A fetch that went quiet asks again for what is missing. */
    uint64_t v;
    uint32_t got, total;
    if (lh_actors_weights_progress(l->weights, &v, &got, &total) &&
        now_ms() - l->last_weights_ms >= (int64_t)l->cfg.resend_timeout_ms) {
      lh_actors_weights_rerequest(l->weights);
      request_weights(l, err);
    }
  }
  /* Resends that are due, oldest first, until the socket would block:
   * what did not go stays due, first in line. */
  int64_t t = now_ms();
  uint64_t id, resends = lh_actors_outbox_resends(l->outbox);
  const uint8_t *b;
  size_t bn;
  for (int k = 0; k < 256 && !l->hello_due && lh_actors_outbox_next_due(l->outbox, t, &id, &b, &bn); k++) {
    int sent = send_bytes(l->ingest, b, bn, err);
    if (sent < 0) return sent;
    if (!sent) {
      lh_actors_outbox_unsent(l->outbox, id);
      break;
    }
  }
  /* Without this line an operator sees nothing of a learner that stopped
   * acking until the outbox fills and generation pauses. */
  if (lh_actors_outbox_resends(l->outbox) > resends)
    lh_log_meter_warn(&l->resend_meter,
                      "resent messages the learner did not ack endpoint=%s unacked=%zu (no ack within "
                      "resend_timeout_ms=%lld, doubled per silent round, or a reconnection: the learner is "
                      "down, restarting or overloaded)",
                      l->cfg.ingest_endpoint, lh_actors_outbox_depth(l->outbox),
                      (long long)l->cfg.resend_timeout_ms);
  if (l->refused.code) {
    if (err) *err = l->refused;
    return l->refused.code;
  }
  int fresh = l->weights_new;
  l->weights_new = 0;
  return fresh;
}

const uint8_t *lh_actors_link_weights(const lh_actors_link *l, uint64_t *version, size_t *bytes) {
  return l && l->weights ? lh_actors_weights_latest(l->weights, version, bytes) : NULL;
}

int lh_actors_link_weights_fetch(const lh_actors_link *l, lh_actors_weights_fetch_stats *stats) {
  return l && l->weights ? lh_actors_weights_last_fetch(l->weights, stats) : 0;
}

int lh_actors_link_stage(const lh_actors_link *l, lh_actors_stage *stage) {
  return l && l->weights ? lh_actors_weights_latest_stage(l->weights, stage) : 0;
}

size_t lh_actors_link_unacked(const lh_actors_link *l) { return l ? lh_actors_outbox_depth(l->outbox) : 0; }
uint64_t lh_actors_link_resends(const lh_actors_link *l) { return l ? lh_actors_outbox_resends(l->outbox) : 0; }
uint64_t lh_actors_link_connects(const lh_actors_link *l) { return l ? l->connects : 0; }
uint64_t lh_actors_link_acked(const lh_actors_link *l) { return l ? l->acked : 0; }
uint64_t lh_actors_link_rejected(const lh_actors_link *l) { return l ? l->rejected : 0; }
uint64_t lh_actors_link_announced(const lh_actors_link *l) { return l ? l->announced : 0; }
uint32_t lh_actors_link_window(const lh_actors_link *l) {
  if (!l || l->window == UINT32_MAX) return UINT32_MAX;
  size_t ended = lh_actors_outbox_marked(l->outbox);
  return ended >= l->window ? 0 : l->window - (uint32_t)ended;
}
void lh_actors_link_set_version(lh_actors_link *l, uint64_t version) {
  if (l) l->cfg.policy_version = version;
}

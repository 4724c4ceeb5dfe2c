/* The hub: env-server connections shared by many environments.
 *
 * One DEALER socket per endpoint carries the requests of every session on
 * that server, so B episodes in flight cost the I/O thread one pipe, not B
 * (measured by bench_envs: a socket per episode was 3.6x slower). Requests
 * begun together leave as one message with an Envelope per frame, and the
 * server answers with one frame per request in the same message (a server
 * that handles one frame per message is the case of one). A server whose
 * answers carry max_batch takes batch frames: the requests of a message
 * then leave as EnvRequestBatch frames of up to its bounds, and come back
 * as EnvResponseBatch frames, so that a flush costs one Envelope, one
 * frame and one answer frame however many episodes wait. Each request is
 * packed once, when it is begun, into the connection's buffer, and
 * framed at the flush. Answers that belong to another waiter are parked
 * on the connection until it asks.
 *
 * A timeout or an undecodable answer closes the socket and bumps the
 * connection's generation: every request in flight on the old socket then
 * fails (its server is gone or hung), sessions opened on it are void, and
 * the next request opens a fresh socket. A late answer from a thawed
 * server can thus never be read as the answer to a newer request. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/buf.h"
#include "envs/internal.h"
#include "net/zsock.h"

#define LINGER_MS 50
#define MAX_BATCH 1024 /* requests in one message */

/* A decoded answer frame and how many of its responses are parked or
 * taken by a waiter that has not released them. */
struct lh_envs_answer {
  lh_wire_arena *arena; /* the frame was decoded into it */
  Longhaul__Envelope *env;
  size_t refs;
};

typedef struct {
  uint64_t request_id;
  Longhaul__EnvResponse *resp;  /* NULL once claimed */
  lh_envs_answer *hold;
} parked;

/* A queued request in the connection's buffer: from item its key and
 * length as an EnvRequestBatch entry, from msg its packed bytes, to end. */
typedef struct {
  size_t item, msg, end;
} queued;

#define SENDER "envs-client"

struct lh_envs_conn {
  lh_env_hub *hub;
  char endpoint[256];
  lh_zsock_curve curve;  /* secret empty: plain */
  void *sock;
  uint64_t generation, next_request, next_msg;
  parked *parked;                /* [parked_head, parked_count): a FIFO; claimed slots have resp NULL */
  size_t parked_head, parked_count, parked_cap;
  queued *queued;                /* requests not yet sent, packed in `packed` */
  size_t queued_count, queued_cap;
  lh_envs_bytes packed, frame;   /* the queued requests; the frame being sent */
  uint32_t batch_max, batch_bytes; /* the server's batch bounds on this socket; 0: one request a frame */
  int queued_timeout_ms;
  int refs;
  lh_envs_conn *next;
};

struct lh_env_hub {
  void *zctx;
  volatile sig_atomic_t *stop;  /* the caller's stop flag, or NULL */
  int own_zctx;
  int refs;
  lh_envs_conn *conns;
};

int lh_env_hub_new(void *zmq_ctx, lh_env_hub **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_hub_new: out is NULL");
  lh_env_hub *h = calloc(1, sizeof *h);
  if (!h) return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory");
  h->zctx = zmq_ctx;
  if (!h->zctx) {
    h->zctx = zmq_ctx_new();
    h->own_zctx = 1;
    if (!h->zctx) {
      free(h);
      return lh_errbuf_set(err, LH_EZMQ, "env hub: zmq_ctx_new failed");
    }
  }
  h->refs = 1;
  *out = h;
  return 0;
}

static void hub_release(lh_env_hub *h) {
  if (!h || --h->refs > 0) return;
  if (h->own_zctx) zmq_ctx_term(h->zctx);
  free(h);
}

void lh_env_hub_free(lh_env_hub *h) { hub_release(h); }

void lh_env_hub_set_stop(lh_env_hub *h, volatile sig_atomic_t *stop) {
  if (h) h->stop = stop;
}

static int stopping(const lh_envs_conn *c) { return c->hub->stop && *c->hub->stop; }

/* A wait in slices of at most this, so that a stop flag set by a signal
 * that came just before zmq_poll began is seen soon. */
#define STOP_SLICE_MS 100

void lh_envs_answer_release(lh_envs_answer *a) {
  if (!a || --a->refs > 0) return;
  lh_wire_arena_free(a->arena);
  free(a);
}

static void clear_parked(lh_envs_conn *c) {
  for (size_t i = c->parked_head; i < c->parked_count; i++)
    if (c->parked[i].resp) lh_envs_answer_release(c->parked[i].hold);
  c->parked_head = c->parked_count = 0;
  c->queued_count = 0;
  c->packed.len = 0;
}

void lh_envs_conn_drop(lh_envs_conn *c) {
  if (!c) return;
  if (c->sock) zmq_close(c->sock);
  c->sock = NULL;
  c->generation++;
  c->batch_max = c->batch_bytes = 0;  /* a new socket may reach another server */
  clear_parked(c);
}

int lh_envs_hub_conn(lh_env_hub *h, const char *endpoint, const lh_zsock_curve *curve, lh_envs_conn **out,
                     lh_errbuf *err) {
  if (strlen(endpoint) >= sizeof ((lh_envs_conn *)0)->endpoint)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "env server endpoint longer than 255 bytes");
  lh_zsock_curve keys;
  memset(&keys, 0, sizeof keys);
  if (curve && curve->secret[0]) keys = *curve;
  for (lh_envs_conn *c = h->conns; c; c = c->next)
    if (strcmp(c->endpoint, endpoint) == 0 && memcmp(&c->curve, &keys, sizeof keys) == 0) {
      c->refs++;
      *out = c;
      return 0;
    }
  lh_envs_conn *c = calloc(1, sizeof *c);
  if (!c) return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory");
  snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
  c->curve = keys;
  c->hub = h;
  c->refs = 1;
  c->generation = 1;
  c->next = h->conns;
  h->conns = c;
  h->refs++;
  *out = c;
  return 0;
}

void lh_envs_conn_release(lh_envs_conn *c) {
  if (!c || --c->refs > 0) return;
  lh_env_hub *h = c->hub;
  for (lh_envs_conn **p = &h->conns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  lh_envs_conn_drop(c);
  free(c->parked);
  free(c->queued);
  lh_envs_bytes_free(&c->packed);
  lh_envs_bytes_free(&c->frame);
  free(c);
  hub_release(h);
}

/* Writes into c->frame the frame that carries the queued requests from
 * first: as many as the server's batch bounds allow in an
 * EnvRequestBatch, or the one request in an Envelope of its own (a server
 * that takes no batches, or a request too large for its batch bound).
 * *next gets the first request it does not carry. */
static int next_frame(lh_envs_conn *c, size_t first, size_t *next, lh_errbuf *err) {
  const queued *q = c->queued;
  size_t head = lh_envs_frame_overhead(SENDER), last = first + 1;
  c->frame.len = 0;
  int batch = c->batch_max >= 2 && head + (q[first].end - q[first].item) <= c->batch_bytes;
  while (batch && last < c->queued_count && last - first < c->batch_max &&
         head + (q[last].end - q[first].item) <= c->batch_bytes)
    last++;
  int rc = lh_envs_frame_header(&c->frame, ++c->next_msg, SENDER);
  if (rc == 0 && batch)
    rc = lh_envs_bytes_put_bytes(&c->frame, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH, c->packed.data + q[first].item,
                                 q[last - 1].end - q[first].item);
  else if (rc == 0)
    rc = lh_envs_bytes_put_bytes(&c->frame, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST, c->packed.data + q[first].msg,
                                 q[first].end - q[first].msg);
  if (rc < 0) return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory framing %zu requests", last - first);
  *next = last;
  return 0;
}

/* Sends the queued requests as one message: the empty delimiter a REP
 * server expects, then their frames (next_frame). A multipart message is
 * queued whole or not at all, so only its first frame can wait. */
static int flush(lh_envs_conn *c, lh_errbuf *err) {
  if (c->queued_count == 0) return 0;
  int sent = zmq_send(c->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 0;
  int64_t send_deadline = sent ? 0 : lh_now_ns() + (int64_t)c->queued_timeout_ms * 1000000;
  while (!sent && !stopping(c)) {
    int64_t left_ms = (send_deadline - lh_now_ns()) / 1000000;
    if (left_ms <= 0) break;
    zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLOUT, 0};
    if (zmq_poll(&item, 1, left_ms < STOP_SLICE_MS ? left_ms : STOP_SLICE_MS) > 0 && (item.revents & ZMQ_POLLOUT))
      sent = zmq_send(c->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 0;
  }
  int rc = 0;
  for (size_t i = 0, next = 0; sent && i < c->queued_count; i = next) {
    if ((rc = next_frame(c, i, &next, err)) < 0) {
      /* the message must still end: an empty last frame, which the server answers as undecodable */
      zmq_send(c->sock, "", 0, ZMQ_DONTWAIT);
      break;
    }
    int flags = ZMQ_DONTWAIT | (next < c->queued_count ? ZMQ_SNDMORE : 0);
    sent = zmq_send(c->sock, c->frame.data, c->frame.len, flags) == (int)c->frame.len;
  }
  int timeout_ms = c->queued_timeout_ms;
  c->queued_count = 0;
  c->packed.len = 0;
  if (rc < 0 || !sent) {
    lh_envs_conn_drop(c);
    return rc < 0 ? rc
                  : lh_errbuf_set(err, LH_EENVS_SERVER_TIMEOUT, "env server %s: could not send within %d ms",
                                  c->endpoint, timeout_ms);
  }
  return 0;
}

int lh_env_hub_flush(lh_env_hub *hub, lh_errbuf *err) {
  if (!hub) return 0;
  int first = 0;
  for (lh_envs_conn *c = hub->conns; c; c = c->next) {
    int rc = c->sock ? flush(c, err) : 0;
    if (rc < 0 && !first) first = rc;
  }
  return first;
}

const char *lh_envs_conn_endpoint(const lh_envs_conn *c) { return c->endpoint; }
uint32_t lh_envs_conn_batch_max(const lh_envs_conn *c) { return c->batch_max; }
uint64_t lh_envs_conn_generation(const lh_envs_conn *c) { return c->generation; }

static int connect_socket(lh_envs_conn *c, lh_errbuf *err) {
  if (c->sock) return 0;
  /* Answers carry observations, images included: up to the wire's
   * message limit a frame. */
  lh_zsock_opts so = {.linger_ms = LINGER_MS, .max_message_bytes = LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES,
                      .curve = &c->curve};
  c->sock = lh_zsock_open(c->hub->zctx, ZMQ_DEALER, &so, "env server DEALER", err);
  if (!c->sock) return err ? err->code : LH_EZMQ;
  if (zmq_connect(c->sock, c->endpoint) != 0) {
    int rc = lh_errbuf_set(err, LH_EZMQ, "env server: cannot connect to %s: %s", c->endpoint,
                           zmq_strerror(zmq_errno()));
    zmq_close(c->sock);
    c->sock = NULL;
    return rc;
  }
  return 0;
}

/* Queues req with a fresh request id, packed at once (its strings need
 * not outlive the call); the queue goes out at the next wait (or when it
 * is long), so that B requests begun together cross the sockets once. */
int lh_envs_conn_send(lh_envs_conn *c, Longhaul__EnvRequest *req, int timeout_ms, uint64_t *generation,
                      lh_errbuf *err) {
  LH_TRY(connect_socket(c, err));
  if (lh_reserve(&c->queued, &c->queued_cap, c->queued_count + 1, sizeof *c->queued, 16))
    return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory");
  req->request_id = ++c->next_request;
  *generation = c->generation;
  queued *q = &c->queued[c->queued_count];
  q->item = c->packed.len;
  if (lh_envs_bytes_put_request(&c->packed, 1, req, &q->msg) < 0)
    return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory packing a request");
  q->end = c->packed.len;
  /* What lh_wire_encode refuses: a frame no receiver takes. */
  if (q->end - q->msg + lh_envs_frame_overhead(SENDER) > LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES) {
    c->packed.len = q->item;
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE, "env request of %zu bytes, over the limit of %u", q->end - q->msg,
                         LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES);
  }
  c->queued_count++;
  if (timeout_ms < c->queued_timeout_ms || c->queued_count == 1) c->queued_timeout_ms = timeout_ms;
  if (c->queued_count >= MAX_BATCH) return flush(c, err);
  return 0;
}

static int park(lh_envs_conn *c, uint64_t id, Longhaul__EnvResponse *resp, lh_envs_answer *hold) {
  if (c->parked_count == c->parked_cap && c->parked_head > 0) {
    /* slide the live window to the front */
    memmove(c->parked, c->parked + c->parked_head, (c->parked_count - c->parked_head) * sizeof *c->parked);
    c->parked_count -= c->parked_head;
    c->parked_head = 0;
  }
  if (lh_reserve(&c->parked, &c->parked_cap, c->parked_count + 1, sizeof *c->parked, 16)) return LH_ENOMEM;
  c->parked[c->parked_count++] = (parked){id, resp, hold};
  hold->refs++;
  return 0;
}

/* The responses of one answer frame, decoded into arena: the one to want
 * goes to *hold and *resp, the others are parked; the batch bounds they
 * carry are this socket's from now on. Takes arena. A response to no request (id 0)
 * that carries an error is the server refusing a whole frame: then the
 * connection is broken, since the requests in it will never be answered. */
static int take_frame(lh_envs_conn *c, lh_wire_arena *arena, Longhaul__Envelope *got, uint64_t want,
                      lh_envs_answer **hold, Longhaul__EnvResponse **resp, lh_errbuf *err) {
  Longhaul__EnvResponse **all = &got->env_response;
  size_t n = 1;
  if (got->body_case == LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH)
    all = got->env_response_batch->responses, n = got->env_response_batch->n_responses;
  lh_envs_answer *a = malloc(sizeof *a);
  if (!a) {
    lh_wire_arena_free(arena);
    return lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory");
  }
  *a = (lh_envs_answer){arena, got, 1}; /* held here until the end */
  int rc = 1;
  for (size_t i = 0; i < n; i++) {
    Longhaul__EnvResponse *r = all[i];
    if (r->max_batch >= 2 && r->max_batch_bytes >= 4096) {
      c->batch_max = r->max_batch < LH_ENVS_BATCH_MAX ? r->max_batch : LH_ENVS_BATCH_MAX;
      c->batch_bytes = r->max_batch_bytes < LH_ENVS_BATCH_MAX_BYTES ? r->max_batch_bytes : LH_ENVS_BATCH_MAX_BYTES;
    }
    if (r->request_id == 0 && r->status < 0 && rc > 0) {
      rc = lh_errbuf_set(err, LH_EENVS_SERVER_PROTOCOL, "env server %s refused a frame: %s (%s)", c->endpoint,
                         r->error && *r->error ? r->error : lh_strerror(r->status), lh_err_name(r->status));
    } else if (r->request_id == want && want && !*resp) {
      *resp = r;
      *hold = a;
      a->refs++;
    } else if (r->request_id != 0 && r->request_id <= c->next_request) {
      park(c, r->request_id, r, a); /* out of memory: dropped, and its waiter times out */
    } /* else an id this connection never sent */
  }
  lh_envs_answer_release(a);
  return rc;
}

/* Reads one message (the empty delimiter, then one Envelope per frame)
 * without blocking. The answer to want goes to *hold and *resp, the others
 * are parked. Returns 1 when a message was read, 0 when none is waiting,
 * or a negative code for a message that breaks the protocol. */
static int read_message(lh_envs_conn *c, uint64_t want, lh_envs_answer **hold, Longhaul__EnvResponse **resp,
                        lh_errbuf *err) {
  zmq_msg_t part;
  zmq_msg_init(&part);
  int n = zmq_msg_recv(&part, c->sock, ZMQ_DONTWAIT);
  if (n < 0) {
    zmq_msg_close(&part);
    return 0;
  }
  int more = zmq_msg_more(&part), rc = 1;
  if (n != 0 || !more)
    rc = lh_errbuf_set(err, LH_EENVS_SERVER_PROTOCOL, "env server %s: bad framing (no empty delimiter)",
                       c->endpoint);
  while (more) {
    zmq_msg_close(&part);
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, c->sock, ZMQ_DONTWAIT) < 0) break;
    more = zmq_msg_more(&part);
    if (rc < 0) continue; /* drain the rest of a bad message */
    Longhaul__Envelope *got = NULL;
    lh_errbuf derr;
    lh_wire_arena *arena = lh_wire_arena_new();
    if (!arena) {
      rc = lh_errbuf_set(err, LH_ENOMEM, "env hub: out of memory");
    } else if (lh_wire_decode_in(arena, zmq_msg_data(&part), zmq_msg_size(&part), NULL, &got, &derr) < 0) {
      rc = lh_errbuf_set(err, LH_EENVS_SERVER_PROTOCOL, "env server %s: undecodable answer: %s", c->endpoint,
                         derr.msg);
      lh_wire_arena_free(arena);
    } else if (got->body_case != LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE &&
               got->body_case != LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH) {
      rc = lh_errbuf_set(err, LH_EENVS_SERVER_PROTOCOL, "env server %s: answered with a %s message",
                         c->endpoint, lh_wire_body_name(got->body_case));
      lh_wire_arena_free(arena);
    } else {
      rc = take_frame(c, arena, got, want, hold, resp, err);
    }
  }
  zmq_msg_close(&part);
  return rc;
}

int lh_envs_conn_wait(lh_envs_conn *c, uint64_t id, uint64_t generation, long timeout_ms,
                      lh_envs_answer **hold, Longhaul__EnvResponse **resp, lh_errbuf *err) {
  *hold = NULL;
  *resp = NULL;
  if (generation != c->generation || !c->sock)
    return lh_errbuf_set(err, LH_EENVS_SERVER_TIMEOUT,
                         "env server %s: the connection was reset while this request was in flight "
                         "(another request timed out)", c->endpoint);
  /* Waiters mostly end in the order they began, so the answer is
   * usually at the head: claiming is O(1) then. */
  for (size_t i = c->parked_head; i < c->parked_count; i++)
    if (c->parked[i].resp && c->parked[i].request_id == id) {
      *resp = c->parked[i].resp;
      *hold = c->parked[i].hold; /* the park's reference passes to the caller */
      c->parked[i].resp = NULL;
      while (c->parked_head < c->parked_count && !c->parked[c->parked_head].resp) c->parked_head++;
      if (c->parked_head == c->parked_count) c->parked_head = c->parked_count = 0;
      return 0;
    }
  LH_TRY(flush(c, err));
  int64_t deadline_ns = 0;
  for (;;) {
    int rc = read_message(c, id, hold, resp, err);
    if (rc < 0) {
      lh_envs_answer_release(*hold);
      *hold = NULL;
      *resp = NULL;
      lh_envs_conn_drop(c);
      return rc;
    }
    if (*resp) return 0;
    if (rc == 1) continue;
    if (stopping(c)) {
      lh_envs_conn_drop(c);
      return lh_errbuf_set(err, LH_EINTERRUPTED, "env server %s: stopped waiting (the process is stopping)",
                           c->endpoint);
    }
    /* The clock is read only once the answer has to be waited for: a
     * batch's answers mostly come parked, or in the message just read. */
    if (!deadline_ns) deadline_ns = lh_now_ns() + (int64_t)timeout_ms * 1000000;
    int64_t left_ns = deadline_ns - lh_now_ns();
    if (left_ns <= 0) break;
    long left_ms = (long)((left_ns + 999999) / 1000000);
    zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, left_ms < STOP_SLICE_MS ? left_ms : STOP_SLICE_MS) < 0 && zmq_errno() != EINTR) break;
  }
  lh_envs_conn_drop(c);
  return lh_errbuf_set(err, LH_EENVS_SERVER_TIMEOUT, "env server %s did not answer in time", c->endpoint);
}

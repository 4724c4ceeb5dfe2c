/* A C env server: serves the built-ins over ZeroMQ (a ROUTER) with the
 * EnvRequest / EnvResponse protocol, one session per CREATE. Used by
 * `longhaul envs serve` and by the benchmark that prices the server path.
 * Clients are DEALERs (envs/envhub.c) that frame as a REQ would. A frame
 * holds one request, or a batch of requests of distinct sessions answered
 * in one frame in the same order; every answer says how large a batch
 * this server takes (max_batch), and a client that never saw that sends
 * one request a frame.
 * A remote peer may not name plugin or server options: it must not make
 * this process load a library or open connections. What peers can make it
 * hold (sessions, replies not yet read) is capped per peer and in total by
 * envserver_budget.c; frames by ZMQ_MAXMSGSIZE, queued messages per peer
 * by the HWMs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "envs/internal.h"
#include "net/zsock.h"
#include "proto/wire.h"

/* A request is an action or a config, never weights: 8 MiB bounds a
 * frame (ZMQ_MAXMSGSIZE), and a message holds at most as many requests
 * as a client batches (envs/envhub.c's MAX_BATCH). */
#define SERVER_MAX_REQUEST_BYTES (8 << 20)
#define SERVER_MAX_FRAMES 1024

/* Fills the observation message from obs; images point into env memory,
 * which stays valid until the response is encoded. */
typedef struct {
  Longhaul__Observation obs;
  Longhaul__Image img[8], *imgp[8];
  Longhaul__RewardTerm term[16], *termp[16];
} reply_parts;

static void put_obs(reply_parts *p, const lh_env_obs *obs, Longhaul__EnvResponse *r) {
  longhaul__observation__init(&p->obs);
  p->obs.text = (char *)(obs->text ? obs->text : "");
  size_t n = obs->image_count < 8 ? obs->image_count : 8;
  for (size_t i = 0; i < n; i++) {
    longhaul__image__init(&p->img[i]);
    p->img[i].width = obs->images[i].width;
    p->img[i].height = obs->images[i].height;
    p->img[i].channels = obs->images[i].channels;
    p->img[i].pixels.data = (uint8_t *)obs->images[i].pixels;
    p->img[i].pixels.len = (size_t)obs->images[i].width * obs->images[i].height * obs->images[i].channels;
    p->imgp[i] = &p->img[i];
  }
  p->obs.n_images = n;
  p->obs.images = p->imgp;
  r->observation = &p->obs;
}

/* The serving thread's state: the budget, the peer that sent the
 * message in hand, the batch bounds (0: one request a frame), the number
 * of the batch in hand and the buffer its answers are packed into. */
typedef struct {
  lh_envs_budget *budget;
  lh_envs_peer *peer;
  lh_zsock_meter *bad;
  uint32_t max_batch, max_batch_bytes;
  uint64_t batch;
  lh_envs_bytes answers;
  lh_wire_arena *arena; /* the request in hand is decoded into it */
} server;

/* A CREATE: checked (remote peers may not name plugin or server options,
 * only built-ins are served), then held to the client's and the server's
 * session caps, first by count, then by the footprint the environment
 * states once created; a refusal is LH_EAGAIN, counted and logged. */
static int create(server *sv, const Longhaul__EnvRequest *q, Longhaul__EnvResponse *r, lh_errbuf *err) {
  lh_env_option opts[256];
  if (q->n_options > 256)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "env server: %zu options, at most 256", q->n_options);
  size_t n = q->n_options;
  for (size_t i = 0; i < n; i++) {
    opts[i].key = q->options[i]->key;
    opts[i].value = q->options[i]->value;
    if (!strcmp(opts[i].key, "plugin") || !strcmp(opts[i].key, "server"))
      return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "env server: option '%s' is not accepted remotely",
                           opts[i].key);
  }
  if (!lh_envs_find_builtin(q->env_name))
    return lh_errbuf_set(err, LH_EENVS_UNKNOWN_ENV, "env server: no environment '%s' here (calc, needle, maze)",
                         q->env_name ? q->env_name : "");
  int rc = lh_envs_budget_admit(sv->budget, sv->peer, 0, err);
  lh_env *env = NULL;
  if (rc == 0) rc = lh_env_open(q->env_name, opts, n, &env, err);
  uint64_t bytes = env ? lh_env_footprint(env) : 0;
  if (rc == 0) rc = lh_envs_budget_admit(sv->budget, sv->peer, bytes, err);
  if (rc == 0) rc = lh_envs_budget_add(sv->budget, sv->peer, env, bytes, q->request_id, &r->session_id, err);
  if (rc < 0) {
    lh_env_free(env);
    if (rc == LH_EAGAIN) lh_envs_budget_refused(sv->budget, sv->peer, q->env_name, err->msg);
    return rc;
  }
  return 0;
}

/* Runs request q into r (its views into p and into the environment, valid
 * until the next request). batch: the number of the batch frame q came in,
 * or 0 for a frame of its own. */
static int handle(server *sv, const Longhaul__EnvRequest *q, Longhaul__EnvResponse *r, reply_parts *p,
                  uint64_t batch, lh_errbuf *err) {
  r->request_id = q->request_id;
  r->session_id = q->session_id;
  if (q->op == LONGHAUL__ENV_OP__ENV_OP_CREATE) return create(sv, q, r, err);
  uint64_t *last_request, *last_batch;
  lh_env *env = lh_envs_budget_session(sv->budget, sv->peer, q->session_id, &last_request, &last_batch);
  if (!env)
    return lh_errbuf_set(err, LH_ENOENT,
                         "env server: no session %llu for this client (closed, idle past %llu ms, or never "
                         "created: send CREATE)",
                         (unsigned long long)q->session_id,
                         (unsigned long long)lh_envs_budget_config(sv->budget)->idle_timeout_ms);
  /* One request per session at a time: a second in the same batch could
   * only be a replay or a request sent before its answer was read. */
  if (batch && *last_batch == batch)
    return lh_errbuf_set(err, LH_EENVS_SERVER_BATCH,
                         "env server: session %llu is named twice in one batch (request %llu not run; one request "
                         "per session at a time)",
                         (unsigned long long)q->session_id, (unsigned long long)q->request_id);
  if (batch) *last_batch = batch;
  /* A client numbers its requests upwards (envs/envhub.c), one at a time
   * per session: an id not above the last one is a replay, which would
   * step the episode twice. */
  if (q->request_id <= *last_request)
    return lh_errbuf_set(err, LH_EENVS_SERVER_REPLAY,
                         "env server: request %llu replayed (session %llu has answered request %llu)",
                         (unsigned long long)q->request_id, (unsigned long long)q->session_id,
                         (unsigned long long)*last_request);
  *last_request = q->request_id;
  switch (q->op) {
    case LONGHAUL__ENV_OP__ENV_OP_RESET: {
      lh_env_obs obs;
      LH_TRY(lh_env_reset(env, q->seed, &obs, err));
      put_obs(p, &obs, r);
      return 0;
    }
    case LONGHAUL__ENV_OP__ENV_OP_STEP: {
      lh_env_result res;
      const char *a = q->action ? q->action : "";
      LH_TRY(lh_env_step(env, a, strlen(a), &res, err));
      put_obs(p, &res.obs, r);
      r->reward = res.reward;
      r->done = res.done;
      size_t n = res.term_count < 16 ? res.term_count : 16;
      for (size_t i = 0; i < n; i++) {
        longhaul__reward_term__init(&p->term[i]);
        p->term[i].name = (char *)res.terms[i].name;
        p->term[i].value = res.terms[i].value;
        p->term[i].step = lh_env_steps(env);
        p->termp[i] = &p->term[i];
      }
      r->n_terms = n;
      r->terms = p->termp;
      return 0;
    }
    case LONGHAUL__ENV_OP__ENV_OP_DESCRIBE:
      r->description = (char *)lh_env_describe(env);
      return 0;
    case LONGHAUL__ENV_OP__ENV_OP_EXPERT: {
      const char *a;
      LH_TRY(lh_env_expert(env, &a, err));
      r->expert_action = (char *)a;
      return 0;
    }
    case LONGHAUL__ENV_OP__ENV_OP_CLOSE:
      lh_envs_budget_close(sv->budget, sv->peer, q->session_id);
      return 0;
    default:
      return lh_errbuf_set(err, LH_EINVAL, "env server: unknown op %d", (int)q->op);
  }
}

/* Packs one answer of a batch into sv->answers; an answer too large for
 * the frame is replaced by an error. */
static void pack_answer(server *sv, Longhaul__EnvResponse *r) {
  size_t at = sv->answers.len;
  size_t room = LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES - lh_envs_frame_overhead("envs-server");
  if (lh_envs_bytes_put_response(&sv->answers, 1, r, NULL) == 0 && sv->answers.len <= room) return;
  sv->answers.len = at;
  char why[160];
  snprintf(why, sizeof why, "env server: the answer to request %llu does not fit its batch's frame (%u bytes)",
           (unsigned long long)r->request_id, LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES);
  Longhaul__EnvResponse bad = LONGHAUL__ENV_RESPONSE__INIT;
  bad.request_id = r->request_id;
  bad.session_id = r->session_id;
  bad.status = LH_EWIRE_TOO_LARGE;
  bad.error = why;
  if (lh_envs_bytes_put_response(&sv->answers, 1, &bad, NULL) < 0) sv->answers.len = at;
}

static void refuse_message(uint64_t msg_id, int status, const char *why, uint8_t **out, size_t *bytes);

/* Answers a batch frame of frame_bytes: its requests in order, their
 * answers packed into one EnvResponseBatch frame (*out, malloc'd). A batch
 * past the bounds is refused whole (one EnvResponse for request 0,
 * LH_EENVS_SERVER_BATCH) and none of it runs. A request whose id is not
 * above the one before it, or that names a session named before in the
 * batch, is answered LH_EENVS_SERVER_BATCH and not run; every other runs
 * as it would alone, held to the reply caps with pending plus the answers
 * packed so far. Returns the requests answered. */
static size_t answer_batch(server *sv, const Longhaul__EnvRequestBatch *b, size_t frame_bytes, uint64_t msg_id,
                           uint64_t pending, uint8_t **out, size_t *bytes) {
  char why[LH_ERRMSG_BYTES];
  if (!sv->max_batch || b->n_requests > sv->max_batch || frame_bytes > sv->max_batch_bytes) {
    if (!sv->max_batch)
      snprintf(why, sizeof why, "env server: this server takes one request a frame, not a batch of %zu (none run)",
               b->n_requests);
    else
      snprintf(why, sizeof why, "env server: a batch of %zu requests in %zu bytes, over the bound of %u requests "
               "and %u bytes a frame (max_batch, max_batch_bytes in every answer); none run",
               b->n_requests, frame_bytes, sv->max_batch, sv->max_batch_bytes);
    lh_zsock_meter_bad(sv->bad, why);
    refuse_message(msg_id, LH_EENVS_SERVER_BATCH, why, out, bytes);
    return 0;
  }
  sv->batch++;
  sv->answers.len = 0;
  uint64_t above = 0;
  for (size_t i = 0; i < b->n_requests; i++) {
    const Longhaul__EnvRequest *q = b->requests[i];
    Longhaul__EnvResponse resp = LONGHAUL__ENV_RESPONSE__INIT;
    resp.request_id = q->request_id;
    resp.session_id = q->session_id;
    resp.max_batch = sv->max_batch;
    resp.max_batch_bytes = sv->max_batch_bytes;
    reply_parts parts;
    lh_errbuf herr;
    lh_errbuf_clear(&herr);
    int hrc;
    if (i > 0 && q->request_id <= above) {
      hrc = lh_errbuf_set(&herr, LH_EENVS_SERVER_BATCH,
                          "env server: request %llu of a batch is not above the one before it (%llu); not run",
                          (unsigned long long)q->request_id, (unsigned long long)above);
    } else if ((hrc = lh_envs_budget_reply_room(sv->budget, sv->peer, pending + sv->answers.len, &herr)) < 0) {
      lh_envs_budget_refused(sv->budget, sv->peer, NULL, herr.msg);
    } else {
      hrc = handle(sv, q, &resp, &parts, sv->batch, &herr);
    }
    if (q->request_id > above) above = q->request_id;
    if (hrc == LH_EENVS_SERVER_REPLAY || hrc == LH_EENVS_SERVER_BATCH)
      lh_zsock_meter_bad(sv->bad, lh_envs_escape(herr.msg, strlen(herr.msg), why, sizeof why));
    if (hrc < 0) {
      resp.status = hrc;
      resp.error = herr.msg;
    }
    pack_answer(sv, &resp);
  }
  lh_envs_bytes frame = {0};
  *out = NULL;
  *bytes = 0;
  if (lh_envs_frame_header(&frame, msg_id, "envs-server") == 0 &&
      lh_envs_bytes_put_bytes(&frame, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH, sv->answers.data,
                              sv->answers.len) == 0) {
    *out = frame.data;
    *bytes = frame.len;
  } else {
    lh_envs_bytes_free(&frame);
  }
  return b->n_requests;
}

/* Answers one request frame: decodes it, runs it and encodes the answer
 * into *out (malloc'd). Sets *stop for a Shutdown. pending is what the
 * answers before it in this message hold: a request that would take the
 * client's or all replies past their cap is not run but answered
 * LH_EAGAIN. Returns the requests answered. */
static size_t answer(server *sv, const zmq_msg_t *in, uint64_t msg_id, uint64_t pending, uint8_t **out,
                     size_t *bytes, int *stop) {
  Longhaul__Envelope *req = NULL;
  lh_errbuf herr;
  lh_errbuf_clear(&herr);
  Longhaul__EnvResponse resp = LONGHAUL__ENV_RESPONSE__INIT;
  resp.max_batch = sv->max_batch;
  resp.max_batch_bytes = sv->max_batch_bytes;
  reply_parts parts;
  char why[LH_ERRMSG_BYTES];
  lh_wire_arena_reset(sv->arena);
  int hrc = lh_wire_decode_in(sv->arena, zmq_msg_data((zmq_msg_t *)in), zmq_msg_size((zmq_msg_t *)in), NULL, &req,
                              &herr);
  if (hrc == 0 && req->body_case == LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH)
    return answer_batch(sv, req->env_request_batch, zmq_msg_size((zmq_msg_t *)in), msg_id, pending, out, bytes);
  if (hrc == 0 && req->body_case == LONGHAUL__ENVELOPE__BODY_SHUTDOWN) {
    *stop = 1;
  } else if (hrc == 0 && req->body_case != LONGHAUL__ENVELOPE__BODY_ENV_REQUEST) {
    hrc = lh_errbuf_set(&herr, LH_EINVAL, "env server: expected an EnvRequest, got %s",
                        lh_wire_body_name(req->body_case));
  } else if (hrc == 0 && (hrc = lh_envs_budget_reply_room(sv->budget, sv->peer, pending, &herr)) < 0) {
    resp.request_id = req->env_request->request_id;
    resp.session_id = req->env_request->session_id;
    lh_envs_budget_refused(sv->budget, sv->peer, NULL, herr.msg);
  } else if (hrc == 0) {
    hrc = handle(sv, req->env_request, &resp, &parts, 0, &herr);
    if (hrc == LH_EENVS_SERVER_REPLAY)
      lh_zsock_meter_bad(sv->bad, lh_envs_escape(herr.msg, strlen(herr.msg), why, sizeof why));
  }
  if (hrc < 0 && (!req || req->body_case != LONGHAUL__ENVELOPE__BODY_ENV_REQUEST))
    lh_zsock_meter_bad(sv->bad, lh_envs_escape(herr.msg, strlen(herr.msg), why, sizeof why));
  if (hrc < 0) {
    resp.status = hrc;
    resp.error = herr.msg;
  }
  Longhaul__Envelope reply = LONGHAUL__ENVELOPE__INIT;
  reply.protocol = LH_WIRE_PROTOCOL;
  reply.msg_id = msg_id;
  reply.sender = "envs-server";
  reply.body_case = LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE;
  reply.env_response = &resp;
  *out = NULL;
  *bytes = 0;
  if (lh_wire_encode(&reply, out, bytes, &herr) < 0) {
    /* The answer itself is refused (too large): say so instead. */
    Longhaul__EnvResponse bad = LONGHAUL__ENV_RESPONSE__INIT;
    bad.request_id = resp.request_id;
    bad.status = herr.code;
    bad.error = herr.msg;
    reply.env_response = &bad;
    if (lh_wire_encode(&reply, out, bytes, &herr) < 0) *out = NULL, *bytes = 0;
  }
  return 1;
}

/* One error answer (for request 0) for a message or a batch refused whole. */
static void refuse_message(uint64_t msg_id, int status, const char *why, uint8_t **out, size_t *bytes) {
  Longhaul__EnvResponse r = LONGHAUL__ENV_RESPONSE__INIT;
  r.status = status;
  r.error = (char *)why;
  Longhaul__Envelope reply = LONGHAUL__ENVELOPE__INIT;
  reply.protocol = LH_WIRE_PROTOCOL;
  reply.msg_id = msg_id;
  reply.sender = "envs-server";
  reply.body_case = LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE;
  reply.env_response = &r;
  lh_errbuf ee;
  if (lh_wire_encode(&reply, out, bytes, &ee) < 0) *out = NULL, *bytes = 0;
}

int lh_envserver_serve(const char *endpoint, uint32_t max_sessions, lh_errbuf *err) {
  lh_envserver_config cfg = {.max_sessions = max_sessions};
  return lh_envserver_run(endpoint, &cfg, err);
}

int lh_envserver_serve_curve(const char *endpoint, uint32_t max_sessions, const char *secret_key_file,
                             const char *allowed_keys, lh_errbuf *err) {
  lh_envserver_config cfg = {
      .max_sessions = max_sessions, .curve_secret_key_file = secret_key_file, .curve_allowed_keys = allowed_keys};
  return lh_envserver_run(endpoint, &cfg, err);
}

/* The ROUTER: frames of at most SERVER_MAX_REQUEST_BYTES, and at most
 * LH_ENVSERVER_HWM messages queued per peer each way. Past the send HWM
 * libzmq drops a reply to a peer that does not read (a ROUTER without
 * ZMQ_ROUTER_MANDATORY); past the receive HWM it stops reading the peer's
 * connection, so its sender waits. */
static void *open_router(void *zctx, lh_zsock_curve *curve, lh_errbuf *err) {
  lh_zsock_opts so = {.max_message_bytes = SERVER_MAX_REQUEST_BYTES, .curve = curve};
  void *sock = lh_zsock_open(zctx, ZMQ_ROUTER, &so, "env server ROUTER", err);
  if (!sock) return NULL;
  int hwm = LH_ENVSERVER_HWM;
  if (zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm) || zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm)) {
    lh_errbuf_set(err, LH_EZMQ, "env server ROUTER: cannot set its HWM: %s", zmq_strerror(zmq_errno()));
    zmq_close(sock);
    return NULL;
  }
  return sock;
}

int lh_envserver_run(const char *endpoint, const lh_envserver_config *cfg, lh_errbuf *err) {
  if (!endpoint || !*endpoint) return lh_errbuf_set(err, LH_EINVAL, "env server: no endpoint to bind");
  lh_envserver_config none = {0};
  if (!cfg) cfg = &none;
  const char *secret_key_file = cfg->curve_secret_key_file, *allowed_keys = cfg->curve_allowed_keys;
  int has_secret = secret_key_file && *secret_key_file, has_allowed = allowed_keys && *allowed_keys;
  if (has_secret != has_allowed)
    return lh_errbuf_set(err, LH_EINVAL, "env server: a CURVE secret key and allowed keys go together");
  /* The caps bound what sessions and replies hold; what a freed reply or
   * frame held must go back to the system too (a library that allocates
   * at load, CUDA's, was enough to add 50 MB to the server's peak). */
  lh_malloc_return_large();
  lh_envs_budget *budget;
  LH_TRY(lh_envs_budget_new(cfg, &budget, err));
  lh_zsock_curve curve;
  memset(&curve, 0, sizeof curve);
  if (has_secret && lh_zsock_key_read(secret_key_file, 1, curve.secret, err) < 0) {
    lh_envs_budget_free(budget);
    return err ? err->code : LH_ECONFIG;
  }
  void *zctx = zmq_ctx_new();
  if (!zctx) {
    memset(&curve, 0, sizeof curve);
    lh_envs_budget_free(budget);
    return lh_errbuf_set(err, LH_EZMQ, "env server: zmq_ctx_new failed");
  }
  lh_zsock_zap *zap = NULL;
  if (has_secret && lh_zsock_zap_start(zctx, allowed_keys, &zap, err) < 0) {
    memset(&curve, 0, sizeof curve);
    zmq_ctx_term(zctx);
    lh_envs_budget_free(budget);
    return err ? err->code : LH_ECONFIG;
  }
  /* A ROUTER, not a REP: a REP reads a message's frames from one peer at
   * a time, so a peer that broke off inside one (transport garbage does
   * that) could leave it waiting for the rest; a ROUTER goes on reading
   * the others. Each message is [peer][empty delimiter][requests...]. */
  void *sock = open_router(zctx, &curve, err);
  int brc = sock ? lh_zsock_bind(sock, endpoint, &curve, NULL, 0, "env server ROUTER", err) : LH_EZMQ;
  memset(&curve, 0, sizeof curve);
  if (brc < 0) {
    int rc = err ? err->code : brc;
    if (sock) zmq_close(sock);
    lh_zsock_zap_stop(zap);
    zmq_ctx_term(zctx);
    lh_envs_budget_free(budget);
    return rc;
  }
  const lh_envserver_config *c = lh_envs_budget_config(budget);
  uint32_t max_batch = c->max_batch < 2 ? 0 : c->max_batch < LH_ENVS_BATCH_MAX ? c->max_batch : LH_ENVS_BATCH_MAX;
  LH_INFO("envs", "env server listening endpoint=%s max_sessions=%u max_sessions_per_client=%u "
          "max_session_bytes=%llu max_session_bytes_per_client=%llu max_reply_bytes=%llu "
          "max_reply_bytes_per_client=%llu idle_timeout_ms=%llu hwm=%d max_batch=%u curve=%s",
          endpoint, c->max_sessions, c->max_sessions_per_client, (unsigned long long)c->max_session_bytes,
          (unsigned long long)c->max_session_bytes_per_client, (unsigned long long)c->max_reply_bytes,
          (unsigned long long)c->max_reply_bytes_per_client, (unsigned long long)c->idle_timeout_ms,
          LH_ENVSERVER_HWM, max_batch ? max_batch : 1, has_secret ? "on" : "off");
  lh_zsock_meter bad = {.component = "envs"};
  server sv = {budget, NULL, &bad, max_batch, max_batch ? LH_ENVS_BATCH_MAX_BYTES : 0, 0, {0}, lh_wire_arena_new()};
  int rc = 0, stop = 0;
  uint64_t msg_id = 0, requests = 0;
  /* One message holds one or more requests, one per frame; the reply has
   * one answer frame per request, in order. A message of more requests
   * than SERVER_MAX_FRAMES is dropped whole and answered with one error;
   * one without the empty delimiter is dropped unanswered, and so is one
   * from a client whose unread replies are at its cap. */
  struct {
    uint8_t *buf;
    size_t bytes;
  } *outs = calloc(SERVER_MAX_FRAMES, sizeof *outs);
  zmq_msg_t *frames = calloc(SERVER_MAX_FRAMES + 1, sizeof *frames);
  if (!outs || !frames || !sv.arena) {
    rc = lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    stop = 2;
  }
  while (!stop && !(cfg->stop && *cfg->stop)) {
    /* Idle sessions close even while no request comes. */
    lh_envs_budget_sweep(budget, 0, NULL);
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    int ready = zmq_poll(&item, 1, (long)lh_envs_budget_sweep_ms(budget));
    if (ready < 0) {
      int e = zmq_errno();
      if (e != EINTR) rc = lh_errbuf_set(err, LH_EZMQ, "env server: poll: %s", zmq_strerror(e));
      break; /* a signal or a failure: stop serving */
    }
    if (ready == 0) continue;
    zmq_msg_t peer;
    zmq_msg_init(&peer);
    if (zmq_msg_recv(&peer, sock, ZMQ_DONTWAIT) < 0) {
      int e = zmq_errno();
      zmq_msg_close(&peer);
      if (e == EAGAIN) continue;
      if (e != EINTR) rc = lh_errbuf_set(err, LH_EZMQ, "env server: recv: %s", zmq_strerror(e));
      break;
    }
    int n = 0, got = 0;
    if (zmq_msg_more(&peer)) got = lh_zsock_recv_frames(sock, frames, SERVER_MAX_FRAMES + 1, 0, &n);
    if (got < 0) {
      zmq_msg_close(&peer);
      int e = zmq_errno();
      if (e != EINTR) rc = lh_errbuf_set(err, LH_EZMQ, "env server: recv: %s", zmq_strerror(e));
      break;
    }
    if (got == 1 && (n < 2 || zmq_msg_size(&frames[0]) != 0)) {
      lh_zsock_meter_bad(&bad, "a message without the empty delimiter or without a request (dropped)");
      lh_zsock_frames_close(frames, n);
      zmq_msg_close(&peer);
      continue;
    }
    sv.peer = lh_envs_budget_peer(budget, zmq_msg_data(&peer), zmq_msg_size(&peer));
    lh_errbuf room;
    const char *drop = NULL;
    char why[LH_ERRMSG_BYTES + 64];
    if (!sv.peer) {
      snprintf(why, sizeof why, "env server: %zu clients hold sessions or unread replies, the most it tracks "
               "(--max-sessions + 1024); a message from a new one dropped unanswered", lh_envs_budget_peers(budget));
      drop = why;
    } else if (lh_envs_budget_unread_full(budget, sv.peer, &room) < 0) {
      snprintf(why, sizeof why, "%s (a message of %d requests dropped unanswered)", room.msg, got == 1 ? n - 1 : 0);
      drop = why;
    }
    if (drop) {
      lh_envs_budget_refused(budget, sv.peer, NULL, drop);
      lh_zsock_frames_close(frames, n);
      zmq_msg_close(&peer);
      continue;
    }
    int answers = 0;
    if (got != 1) {
      snprintf(why, sizeof why, "a message of more than %d requests (dropped whole)", SERVER_MAX_FRAMES);
      lh_zsock_meter_bad(&bad, why);
      refuse_message(++msg_id, LH_EENVS_SERVER_PROTOCOL, why, &outs[0].buf, &outs[0].bytes);
      answers = 1;
    } else {
      uint64_t pending = 0;
      for (int i = 1; i < n; i++) {
        requests += answer(&sv, &frames[i], ++msg_id, pending, &outs[i - 1].buf, &outs[i - 1].bytes, &stop);
        pending += outs[i - 1].bytes;
      }
      answers = n - 1;
      lh_zsock_frames_close(frames, n);
    }
    /* A peer that went away, or one whose queue is at the HWM, makes the
     * ROUTER drop the reply (and libzmq free it, which uncounts it). */
    zmq_send(sock, zmq_msg_data(&peer), zmq_msg_size(&peer), ZMQ_SNDMORE);
    zmq_send(sock, "", 0, answers ? ZMQ_SNDMORE : 0);
    for (int i = 0; i < answers; i++) {
      if (outs[i].buf)
        lh_envs_budget_send(budget, sv.peer, sock, outs[i].buf, outs[i].bytes, i + 1 < answers ? ZMQ_SNDMORE : 0);
      else
        zmq_send(sock, "", 0, i + 1 < answers ? ZMQ_SNDMORE : 0);  /* an answer that could not be encoded */
      outs[i].buf = NULL;
    }
    zmq_msg_close(&peer);
  }
  LH_INFO("envs", "env server stopped requests=%llu sessions=%zu session_bytes=%llu refused=%llu",
          (unsigned long long)requests, lh_envs_budget_sessions(budget),
          (unsigned long long)lh_envs_budget_session_bytes(budget),
          (unsigned long long)lh_envs_budget_refusals(budget));
  free(frames);
  free(outs);
  lh_envs_bytes_free(&sv.answers);
  lh_wire_arena_free(sv.arena);
  zmq_close(sock);
  lh_zsock_zap_stop(zap);
  zmq_ctx_term(zctx);  /* after this libzmq holds no reply: the budget can go */
  lh_envs_budget_free(budget);
  return rc;
}

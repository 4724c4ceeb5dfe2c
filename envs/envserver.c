/* A C env server: serves the built-ins over ZeroMQ (a ROUTER) with the
 * EnvRequest / EnvResponse protocol, one session per CREATE. Used by
 * `longhaul envs serve` and by the benchmark that prices the server path.
 * Clients are DEALERs (envs/envhub.c) that frame as a REQ would.
 * A remote peer may not name plugin or server options: it must not make
 * this process load a library or open connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/zsock.h"
#include "envs/internal.h"
#include "proto/wire.h"

/* A request is an action or a config, never weights: 8 MiB bounds a
 * frame (ZMQ_MAXMSGSIZE), and a message holds at most as many requests
 * as a client batches (envs/envhub.c's MAX_BATCH). */
#define SERVER_MAX_REQUEST_BYTES (8 << 20)
#define SERVER_MAX_FRAMES 1024

typedef struct {
  uint64_t id;
  lh_env *env;
  uint64_t last_used;  /* the server's request count when last used */
  uint64_t last_request;  /* the newest request_id answered: older ones are replays */
} session;

typedef struct {
  session *s;
  size_t n, max;
  uint64_t next_id, clock;
} sessions;

/* Sessions stay sorted by id (ids only grow), so lookup is a binary
 * search: a server with a thousand sessions answers as fast as with one. */
static size_t locate(const sessions *ss, uint64_t id) {
  size_t lo = 0, hi = ss->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ss->s[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static session *find(sessions *ss, uint64_t id) {
  size_t i = locate(ss, id);
  if (i >= ss->n || ss->s[i].id != id) return NULL;
  ss->s[i].last_used = ++ss->clock;
  return &ss->s[i];
}

static void close_session(sessions *ss, uint64_t id) {
  size_t i = locate(ss, id);
  if (i >= ss->n || ss->s[i].id != id) return;
  lh_env_free(ss->s[i].env);
  memmove(ss->s + i, ss->s + i + 1, (ss->n - i - 1) * sizeof *ss->s);
  ss->n--;
}

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

static int handle(sessions *ss, const Longhaul__EnvRequest *q, Longhaul__EnvResponse *r, reply_parts *p,
                  lh_errbuf *err) {
  r->request_id = q->request_id;
  r->session_id = q->session_id;
  if (q->op == LONGHAUL__ENV_OP__ENV_OP_CREATE) {
    if (ss->n >= ss->max) {
      /* Full: the least recently used session goes. Clients that lost a
       * connection never close theirs, so without this the table would
       * only fill. Its owner's next request gets ENOENT and re-creates. */
      size_t lru = 0;
      for (size_t i = 1; i < ss->n; i++)
        if (ss->s[i].last_used < ss->s[lru].last_used) lru = i;
      LH_INFO("envs", "env server evicts session=%llu sessions=%zu", (unsigned long long)ss->s[lru].id, ss->n);
      close_session(ss, ss->s[lru].id);
    }
    lh_env_option opts[256];
    size_t n = q->n_options < 256 ? q->n_options : 256;
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
    lh_env *env;
    LH_TRY(lh_env_open(q->env_name, opts, n, &env, err));
    session *grown = realloc(ss->s, (ss->n + 1) * sizeof *grown);
    if (!grown) {
      lh_env_free(env);
      return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    }
    ss->s = grown;
    ss->s[ss->n++] = (session){++ss->next_id, env, ++ss->clock, q->request_id};
    r->session_id = ss->next_id;
    return 0;
  }
  session *sn = find(ss, q->session_id);
  if (!sn)
    return lh_errbuf_set(err, LH_ENOENT, "env server: no session %llu (send CREATE first)",
                         (unsigned long long)q->session_id);
  /* A client numbers its requests upwards (envs/envhub.c), one at a time
   * per session: an id not above the last one is a replay, which would
   * step the episode twice. */
  if (q->request_id <= sn->last_request)
    return lh_errbuf_set(err, LH_EENVS_SERVER_REPLAY,
                         "env server: request %llu replayed (session %llu has answered request %llu)",
                         (unsigned long long)q->request_id, (unsigned long long)q->session_id,
                         (unsigned long long)sn->last_request);
  sn->last_request = q->request_id;
  lh_env *env = sn->env;
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
      close_session(ss, q->session_id);
      return 0;
    default:
      return lh_errbuf_set(err, LH_EINVAL, "env server: unknown op %d", (int)q->op);
  }
}

/* Answers one request frame: decodes it, runs it and encodes the answer
 * into *out (malloc'd). Sets *stop for a Shutdown. */
static void answer(sessions *ss, const zmq_msg_t *in, uint64_t msg_id, uint8_t **out, size_t *bytes, int *stop,
                   lh_zsock_meter *bad) {
  Longhaul__Envelope *req = NULL;
  lh_errbuf herr;
  lh_errbuf_clear(&herr);
  Longhaul__EnvResponse resp = LONGHAUL__ENV_RESPONSE__INIT;
  reply_parts parts;
  int hrc = lh_wire_decode(zmq_msg_data((zmq_msg_t *)in), zmq_msg_size((zmq_msg_t *)in), NULL, &req, &herr);
  if (hrc == 0 && req->body_case == LONGHAUL__ENVELOPE__BODY_SHUTDOWN) {
    *stop = 1;
  } else if (hrc == 0 && req->body_case != LONGHAUL__ENVELOPE__BODY_ENV_REQUEST) {
    hrc = lh_errbuf_set(&herr, LH_EINVAL, "env server: expected an EnvRequest, got %s",
                        lh_wire_body_name(req->body_case));
  } else if (hrc == 0) {
    hrc = handle(ss, req->env_request, &resp, &parts, &herr);
    if (hrc == LH_EENVS_SERVER_REPLAY) lh_zsock_meter_bad(bad, herr.msg);
  }
  if (hrc < 0 && (!req || req->body_case != LONGHAUL__ENVELOPE__BODY_ENV_REQUEST)) lh_zsock_meter_bad(bad, herr.msg);
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
  lh_wire_free(req);
}

int lh_envserver_serve(const char *endpoint, uint32_t max_sessions, lh_errbuf *err) {
  return lh_envserver_serve_curve(endpoint, max_sessions, NULL, NULL, err);
}

int lh_envserver_serve_curve(const char *endpoint, uint32_t max_sessions, const char *secret_key_file,
                             const char *allowed_keys, lh_errbuf *err) {
  if (!endpoint || !*endpoint) return lh_errbuf_set(err, LH_EINVAL, "env server: no endpoint to bind");
  int has_secret = secret_key_file && *secret_key_file, has_allowed = allowed_keys && *allowed_keys;
  if (has_secret != has_allowed)
    return lh_errbuf_set(err, LH_EINVAL, "env server: a CURVE secret key and allowed keys go together");
  lh_zsock_curve curve;
  memset(&curve, 0, sizeof curve);
  if (has_secret) LH_TRY(lh_zsock_key_read(secret_key_file, 1, curve.secret, err));
  void *zctx = zmq_ctx_new();
  if (!zctx) return lh_errbuf_set(err, LH_EZMQ, "env server: zmq_ctx_new failed");
  lh_zsock_zap *zap = NULL;
  if (has_secret && lh_zsock_zap_start(zctx, allowed_keys, &zap, err) < 0) {
    zmq_ctx_term(zctx);
    return err ? err->code : LH_ECONFIG;
  }
  /* A ROUTER, not a REP: a REP reads a message's frames from one peer at
   * a time, so a peer that broke off inside one (transport garbage does
   * that) could leave it waiting for the rest; a ROUTER goes on reading
   * the others. Each message is [peer][empty delimiter][requests...]. */
  lh_zsock_opts so = {.max_message_bytes = SERVER_MAX_REQUEST_BYTES, .curve = &curve};
  void *sock = lh_zsock_open(zctx, ZMQ_ROUTER, &so, "env server ROUTER", err);
  int brc = sock ? lh_zsock_bind(sock, endpoint, &curve, NULL, 0, "env server ROUTER", err) : LH_EZMQ;
  memset(&curve, 0, sizeof curve);
  if (brc < 0) {
    int rc = err ? err->code : brc;
    if (sock) zmq_close(sock);
    lh_zsock_zap_stop(zap);
    zmq_ctx_term(zctx);
    return rc;
  }
  LH_INFO("envs", "env server listening endpoint=%s max_sessions=%u curve=%s", endpoint,
          max_sessions ? max_sessions : LH_ENVSERVER_DEFAULT_SESSIONS, has_secret ? "on" : "off");
  sessions ss = {0};
  ss.max = max_sessions ? max_sessions : LH_ENVSERVER_DEFAULT_SESSIONS;
  lh_zsock_meter bad = {.component = "envs"};
  int rc = 0, stop = 0;
  uint64_t msg_id = 0;
  /* One message holds one or more requests, one per frame; the reply has
   * one answer frame per request, in order. A message of more requests
   * than SERVER_MAX_FRAMES is dropped whole and answered with one error;
   * one without the empty delimiter is dropped unanswered. */
  struct {
    uint8_t *buf;
    size_t bytes;
  } *outs = calloc(SERVER_MAX_FRAMES, sizeof *outs);
  zmq_msg_t *frames = calloc(SERVER_MAX_FRAMES + 1, sizeof *frames);
  if (!outs || !frames) {
    rc = lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    stop = 2;
  }
  while (!stop) {
    zmq_msg_t peer;
    zmq_msg_init(&peer);
    if (zmq_msg_recv(&peer, sock, 0) < 0) {
      int e = zmq_errno();
      zmq_msg_close(&peer);
      if (e != EINTR) rc = lh_errbuf_set(err, LH_EZMQ, "env server: recv: %s", zmq_strerror(e));
      break; /* a signal or a failure: stop serving */
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
    int answers = 0;
    if (got != 1) {
      char why[128];
      snprintf(why, sizeof why, "a message of more than %d requests (dropped whole)", SERVER_MAX_FRAMES);
      lh_zsock_meter_bad(&bad, why);
      Longhaul__EnvResponse r = LONGHAUL__ENV_RESPONSE__INIT;
      r.status = LH_EENVS_SERVER_PROTOCOL;
      r.error = why;
      Longhaul__Envelope reply = LONGHAUL__ENVELOPE__INIT;
      reply.protocol = LH_WIRE_PROTOCOL;
      reply.msg_id = ++msg_id;
      reply.sender = "envs-server";
      reply.body_case = LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE;
      reply.env_response = &r;
      lh_errbuf ee;
      if (lh_wire_encode(&reply, &outs[0].buf, &outs[0].bytes, &ee) < 0) outs[0].buf = NULL, outs[0].bytes = 0;
      answers = 1;
    } else {
      for (int i = 1; i < n; i++) answer(&ss, &frames[i], ++msg_id, &outs[i - 1].buf, &outs[i - 1].bytes, &stop, &bad);
      answers = n - 1;
      lh_zsock_frames_close(frames, n);
    }
    /* A peer that went away makes the ROUTER drop the reply. */
    zmq_send(sock, zmq_msg_data(&peer), zmq_msg_size(&peer), ZMQ_SNDMORE);
    zmq_send(sock, "", 0, ZMQ_SNDMORE);
    for (int i = 0; i < answers; i++) zmq_send(sock, outs[i].buf, outs[i].bytes, i + 1 < answers ? ZMQ_SNDMORE : 0);
    for (int i = 0; i < answers; i++) free(outs[i].buf), outs[i].buf = NULL;
    zmq_msg_close(&peer);
  }
  free(frames);
  free(outs);
  for (size_t i = 0; i < ss.n; i++) lh_env_free(ss.s[i].env);
  free(ss.s);
  zmq_close(sock);
  lh_zsock_zap_stop(zap);
  zmq_ctx_term(zctx);
  return rc;
}

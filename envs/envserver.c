/* A C env server: serves the built-ins over ZeroMQ (REP) with the
 * EnvRequest / EnvResponse protocol, one session per CREATE. Used by
 * `longhaul envs serve` and by the benchmark that prices the server path.
 * A remote peer may not name plugin or server options: it must not make
 * this process load a library or open connections. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "envs/internal.h"
#include "proto/wire.h"

typedef struct {
  uint64_t id;
  lh_env *env;
  uint64_t last_used;  /* the server's request count when last used */
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

static lh_env *find(sessions *ss, uint64_t id) {
  size_t i = locate(ss, id);
  if (i >= ss->n || ss->s[i].id != id) return NULL;
  ss->s[i].last_used = ++ss->clock;
  return ss->s[i].env;
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
    ss->s[ss->n++] = (session){++ss->next_id, env, ++ss->clock};
    r->session_id = ss->next_id;
    return 0;
  }
  lh_env *env = find(ss, q->session_id);
  if (!env)
    return lh_errbuf_set(err, LH_ENOENT, "env server: no session %llu (send CREATE first)",
                         (unsigned long long)q->session_id);
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
static void answer(sessions *ss, const zmq_msg_t *in, uint64_t msg_id, uint8_t **out, size_t *bytes, int *stop) {
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
  }
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
  if (!endpoint || !*endpoint) return lh_errbuf_set(err, LH_EINVAL, "env server: no endpoint to bind");
  void *zctx = zmq_ctx_new();
  if (!zctx) return lh_errbuf_set(err, LH_EZMQ, "env server: zmq_ctx_new failed");
  void *sock = zmq_socket(zctx, ZMQ_REP);
  int linger = 0;
  if (sock) zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
  if (!sock || zmq_bind(sock, endpoint) != 0) {
    int rc = lh_errbuf_set(err, LH_EZMQ, "env server: cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    if (sock) zmq_close(sock);
    zmq_ctx_term(zctx);
    return rc;
  }
  LH_INFO("envs", "env server listening endpoint=%s max_sessions=%u", endpoint,
          max_sessions ? max_sessions : LH_ENVSERVER_DEFAULT_SESSIONS);
  sessions ss = {0};
  ss.max = max_sessions ? max_sessions : LH_ENVSERVER_DEFAULT_SESSIONS;
  int rc = 0, stop = 0;
  uint64_t msg_id = 0;
  /* One message holds one or more requests, one per frame; the reply has
   * one answer frame per request, in order. */
  struct {
    uint8_t *buf;
    size_t bytes;
  } *outs = NULL;
  size_t out_cap = 0;
  while (!stop) {
    size_t n = 0;
    int more = 1;
    while (more) {
      zmq_msg_t in;
      zmq_msg_init(&in);
      if (zmq_msg_recv(&in, sock, 0) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&in);
        if (e != EINTR) rc = lh_errbuf_set(err, LH_EZMQ, "env server: recv: %s", zmq_strerror(e));
        stop = 2; /* a signal or a failure: stop serving */
        break;
      }
      more = zmq_msg_more(&in);
      if (n == out_cap) {
        size_t cap = out_cap ? 2 * out_cap : 64;
        void *grown = realloc(outs, cap * sizeof *outs);
        if (!grown) {
          zmq_msg_close(&in);
          rc = lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
          stop = 2;
          break;
        }
        outs = grown;
        out_cap = cap;
      }
      answer(&ss, &in, ++msg_id, &outs[n].buf, &outs[n].bytes, &stop);
      n++;
      zmq_msg_close(&in);
    }
    for (size_t i = 0; stop != 2 && i < n; i++)
      zmq_send(sock, outs[i].buf, outs[i].bytes, i + 1 < n ? ZMQ_SNDMORE : 0);
    for (size_t i = 0; i < n; i++) free(outs[i].buf);
  }
  free(outs);
  for (size_t i = 0; i < ss.n; i++) lh_env_free(ss.s[i].env);
  free(ss.s);
  zmq_close(sock);
  zmq_ctx_term(zctx);
  return rc;
}

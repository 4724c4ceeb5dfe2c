/* The client side of an env server: a table whose calls are EnvRequest /
 * EnvResponse round trips inside Envelopes, on a hub's shared connection
 * to the server (envhub.c; the server is a ROUTER that answers as a REP).
 *
 * Every wait is bounded by timeout_ms. After a timeout the connection is
 * reset (envhub.c) and this session is gone with it, so the next reset
 * sends CREATE again: that is how the caller keeps working with a
 * restarted (or thawed) server. A CREATE the server refuses at one of its
 * caps (LH_EAGAIN: too many sessions or bytes, unread replies) leaves the
 * environment open without a session: the refusal comes back as an error
 * of the reset, which ends that episode, and the next reset asks again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

typedef struct {
  char name[LH_ENV_MAX_TOOL_NAME * 2];
  long timeout_ms;
  lh_env_option *opts;          /* forwarded to CREATE; strings owned */
  size_t opt_count;
  lh_envs_conn *conn;
  uint64_t session_id, session_generation;  /* valid while the connection's generation */
  uint64_t pending_id, pending_generation;  /* request in flight, 0 when none */
  Longhaul__EnvOp pending_op;
  int32_t last_status;          /* the server's status in the last answer */
  lh_envs_answer *last;         /* the answer frame the current views point into */
  lh_env_image *images;
  lh_env_term *terms;
  size_t terms_cap;
  lh_str action;
  char *describe;
} server_env;

static const char *op_name(Longhaul__EnvOp op) {
  switch (op) {
    case LONGHAUL__ENV_OP__ENV_OP_CREATE: return "CREATE";
    case LONGHAUL__ENV_OP__ENV_OP_RESET: return "RESET";
    case LONGHAUL__ENV_OP__ENV_OP_STEP: return "STEP";
    case LONGHAUL__ENV_OP__ENV_OP_DESCRIBE: return "DESCRIBE";
    case LONGHAUL__ENV_OP__ENV_OP_EXPERT: return "EXPERT";
    case LONGHAUL__ENV_OP__ENV_OP_CLOSE: return "CLOSE";
    default: return "?";
  }
}

static int have_session(const server_env *s) {
  return s->session_id && s->session_generation == lh_envs_conn_generation(s->conn);
}

static int send_request(server_env *s, Longhaul__EnvRequest *req, lh_errbuf *err) {
  int rc = lh_envs_conn_send(s->conn, req, (int)s->timeout_ms, &s->pending_generation, err);
  if (rc < 0) return rc;
  s->pending_id = req->request_id;
  s->pending_op = req->op;
  return 0;
}

/* Waits for the answer to the request in flight; on success s->last holds
 * it and *resp points into it. */
static int wait_response(server_env *s, Longhaul__EnvResponse **resp, lh_errbuf *err) {
  Longhaul__EnvOp op = s->pending_op;
  uint64_t id = s->pending_id;
  s->pending_id = 0;
  s->last_status = 0;
  if (!id) return lh_errbuf_set(err, LH_EINVAL, "env server %s: no request in flight", lh_envs_conn_endpoint(s->conn));
  lh_envs_answer *hold;
  Longhaul__EnvResponse *r;
  lh_errbuf werr;
  int rc = lh_envs_conn_wait(s->conn, id, s->pending_generation, s->timeout_ms, &hold, &r, &werr);
  if (rc == LH_EENVS_SERVER_TIMEOUT)
    return lh_errbuf_set(err, rc,
                         "env server %s did not answer %s within %ld ms (crashed or hung?); the "
                         "episode ends as error and the next reset reconnects",
                         lh_envs_conn_endpoint(s->conn), op_name(op), s->timeout_ms);
  if (rc < 0) return lh_errbuf_set(err, rc, "%s (answer to %s)", werr.msg, op_name(op));
  lh_envs_answer_release(s->last);
  s->last = hold;
  s->last_status = r->status;
  if (r->status == LH_ENOENT && op != LONGHAUL__ENV_OP__ENV_OP_CREATE)
    s->session_id = 0; /* the server dropped our session: the next reset makes a new one */
  if (r->status < 0)
    return lh_errbuf_set(err, LH_EENVS_SERVER_ERROR, "env server %s: %s failed: %s (%s)",
                         lh_envs_conn_endpoint(s->conn), op_name(op),
                         r->error && *r->error ? r->error : lh_strerror(r->status), lh_err_name(r->status));
  *resp = r;
  return 0;
}

static int round_trip(server_env *s, Longhaul__EnvRequest *req, Longhaul__EnvResponse **resp,
                      lh_errbuf *err) {
  LH_TRY(send_request(s, req, err));
  return wait_response(s, resp, err);
}

static int open_session(server_env *s, lh_errbuf *err) {
  if (have_session(s)) return 0;
  s->session_id = 0;
  Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
  req.op = LONGHAUL__ENV_OP__ENV_OP_CREATE;
  req.env_name = s->name;
  Longhaul__KeyValue *kv = calloc(s->opt_count + 1, sizeof *kv);
  Longhaul__KeyValue **kvp = calloc(s->opt_count + 1, sizeof *kvp);
  if (!kv || !kvp) {
    free(kv);
    free(kvp);
    return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
  }
  for (size_t i = 0; i < s->opt_count; i++) {
    longhaul__key_value__init(&kv[i]);
    kv[i].key = (char *)s->opts[i].key;
    kv[i].value = (char *)s->opts[i].value;
    kvp[i] = &kv[i];
  }
  req.n_options = s->opt_count;
  req.options = kvp;
  Longhaul__EnvResponse *r;
  int rc = round_trip(s, &req, &r, err);
  free(kv);
  free(kvp);
  if (rc < 0) return rc;
  s->session_id = r->session_id;
  s->session_generation = s->pending_generation;
  return 0;
}

static void server_destroy(void *ctx) {
  server_env *s = ctx;
  if (!s) return;
  if (s->conn && s->pending_id) {
    Longhaul__EnvResponse *r;
    wait_response(s, &r, NULL);  /* collect it, so that it is not left parked */
  }
  if (s->conn && have_session(s)) {
    /* Best effort, briefly: a server that is gone must not hold up the caller. */
    Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
    req.op = LONGHAUL__ENV_OP__ENV_OP_CLOSE;
    req.session_id = s->session_id;
    Longhaul__EnvResponse *r;
    long saved = s->timeout_ms;
    s->timeout_ms = saved < 200 ? saved : 200;
    round_trip(s, &req, &r, NULL);
    s->timeout_ms = saved;
  }
  lh_envs_conn_release(s->conn);
  for (size_t i = 0; i < s->opt_count; i++) {
    free((char *)s->opts[i].key);
    free((char *)s->opts[i].value);
  }
  free(s->opts);
  lh_envs_answer_release(s->last);
  free(s->images);
  free(s->terms);
  lh_str_free(&s->action);
  free(s->describe);
  free(s);
}

int lh_envs_server_create(lh_env_hub *hub, const lh_env_option *opts, size_t count, void **ctx,
                          lh_errbuf *err) {
  const char *endpoint = lh_env_opt(opts, count, "server"), *name = lh_env_opt(opts, count, "env");
  if (!endpoint || !*endpoint || !name || !*name)
    return lh_errbuf_set(err, LH_EINVAL, "env server: options server=ENDPOINT and env=NAME are required");
  if (strlen(name) >= LH_ENV_MAX_TOOL_NAME * 2)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "env server: environment name too long");
  server_env *s = calloc(1, sizeof *s);
  if (!s) return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
  snprintf(s->name, sizeof s->name, "%s", name);
  int rc = lh_env_opt_int(opts, count, "timeout_ms", 5000, 1, 3600000, &s->timeout_ms, err);
  s->opts = calloc(count + 1, sizeof *s->opts);
  if (!rc && !s->opts) rc = lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
  for (size_t i = 0; !rc && i < count; i++) {
    const char *k = opts[i].key ? opts[i].key : "";
    if (!strcmp(k, "server") || !strcmp(k, "env") || !strcmp(k, "timeout_ms") || !strncmp(k, "curve_", 6)) continue;
    s->opts[s->opt_count].key = strdup(k);
    s->opts[s->opt_count].value = strdup(opts[i].value ? opts[i].value : "");
    if (!s->opts[s->opt_count].key || !s->opts[s->opt_count].value)
      rc = lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    s->opt_count++;
  }
  /* CURVE: this client's secret key and the server's public key, both or
   * neither; they stay here, never sent to the server. */
  lh_zsock_curve curve;
  memset(&curve, 0, sizeof curve);
  const char *secret = lh_env_opt(opts, count, "curve_secret_key_file"),
             *server_key = lh_env_opt(opts, count, "curve_server_key_file");
  if (!rc && (secret || server_key) && (!secret || !server_key || !*secret || !*server_key))
    rc = lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "env server: options curve_secret_key_file and "
                       "curve_server_key_file go together");
  if (!rc && secret) rc = lh_zsock_key_read(secret, 1, curve.secret, err);
  if (!rc && server_key) rc = lh_zsock_key_read(server_key, 0, curve.server_key, err);
  lh_env_hub *own = NULL;
  if (!rc && !hub) rc = lh_env_hub_new(NULL, &own, err);
  if (!rc) rc = lh_envs_hub_conn(hub ? hub : own, endpoint, &curve, &s->conn, err);
  memset(&curve, 0, sizeof curve);
  lh_env_hub_free(own);  /* the connection holds it now */
  if (!rc) {
    rc = open_session(s, err);
    if (rc == LH_EENVS_SERVER_ERROR && s->last_status == LH_EAGAIN) {
      LH_DEBUG("envs", "env server refused a session for now, the next reset asks again: %s", err ? err->msg : "");
      rc = 0;
    }
  }
  if (rc < 0) {
    server_destroy(s);
    return rc;
  }
  *ctx = s;
  return 0;
}

static int server_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  return lh_envs_server_create(NULL, opts, count, ctx, err);
}

/* Points obs at the images and text of the last answer. */
static int take_obs(server_env *s, const Longhaul__Observation *o, lh_env_obs *obs, lh_errbuf *err) {
  memset(obs, 0, sizeof *obs);
  free(s->images);
  s->images = NULL;
  if (!o) {
    obs->text = "";
    return 0;
  }
  obs->text = o->text ? o->text : "";
  obs->text_bytes = strlen(obs->text);
  if (o->n_images) {
    s->images = calloc(o->n_images, sizeof *s->images);
    if (!s->images) return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    for (size_t i = 0; i < o->n_images; i++) {
      const Longhaul__Image *im = o->images[i];
      if ((uint64_t)im->width * im->height * im->channels != im->pixels.len)
        return lh_errbuf_set(err, LH_EENVS_SERVER_PROTOCOL, "env server %s: image %zu has %zu bytes for %ux%ux%u",
                             lh_envs_conn_endpoint(s->conn), i, im->pixels.len, im->width, im->height, im->channels);
      s->images[i] = (lh_env_image){im->width, im->height, im->channels, im->pixels.data};
    }
    obs->images = s->images;
    obs->image_count = (uint32_t)o->n_images;
  }
  return 0;
}

int lh_envs_server_reset_send(void *ctx, uint64_t seed, lh_errbuf *err) {
  server_env *s = ctx;
  LH_TRY(open_session(s, err));
  Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
  req.op = LONGHAUL__ENV_OP__ENV_OP_RESET;
  req.session_id = s->session_id;
  req.seed = seed;
  return send_request(s, &req, err);
}

int lh_envs_server_reset_recv(void *ctx, lh_env_obs *obs, lh_errbuf *err) {
  server_env *s = ctx;
  Longhaul__EnvResponse *r;
  LH_TRY(wait_response(s, &r, err));
  return take_obs(s, r->observation, obs, err);
}

static int server_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  LH_TRY(lh_envs_server_reset_send(ctx, seed, err));
  return lh_envs_server_reset_recv(ctx, obs, err);
}

int lh_envs_server_step_send(void *ctx, const char *action, size_t bytes, lh_errbuf *err) {
  server_env *s = ctx;
  if (!have_session(s))
    return lh_errbuf_set(err, LH_EENVS_NOT_RESET, "env server %s: no session; reset first",
                         lh_envs_conn_endpoint(s->conn));
  lh_str_clear(&s->action);  /* a NUL-terminated copy for protobuf-c, reused */
  if (lh_str_append(&s->action, action, bytes) < 0)
    return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
  Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
  req.op = LONGHAUL__ENV_OP__ENV_OP_STEP;
  req.session_id = s->session_id;
  req.action = s->action.data;
  return send_request(s, &req, err);
}

int lh_envs_server_step_recv(void *ctx, lh_env_result *out, lh_errbuf *err) {
  server_env *s = ctx;
  Longhaul__EnvResponse *r;
  LH_TRY(wait_response(s, &r, err));
  LH_TRY(take_obs(s, r->observation, &out->obs, err));
  out->reward = r->reward;
  out->done = r->done;
  if (r->n_terms > s->terms_cap) {
    lh_env_term *t = realloc(s->terms, r->n_terms * sizeof *t);
    if (!t) return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
    s->terms = t;
    s->terms_cap = r->n_terms;
  }
  if (r->n_terms) {
    for (size_t i = 0; i < r->n_terms; i++)
      s->terms[i] = (lh_env_term){r->terms[i]->name ? r->terms[i]->name : "", r->terms[i]->value};
    out->terms = s->terms;
    out->term_count = (uint32_t)r->n_terms;
  }
  return 0;
}

static int server_step(void *ctx, const char *action, size_t bytes, const lh_action *parsed,
                       lh_env_result *out, lh_errbuf *err) {
  (void)parsed;
  LH_TRY(lh_envs_server_step_send(ctx, action, bytes, err));
  return lh_envs_server_step_recv(ctx, out, err);
}

static const char *server_describe(void *ctx) {
  server_env *s = ctx;
  free(s->describe);
  s->describe = NULL;
  Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
  req.op = LONGHAUL__ENV_OP__ENV_OP_DESCRIBE;
  Longhaul__EnvResponse *r;
  lh_errbuf err;
  int rc = open_session(s, &err);
  req.session_id = s->session_id;
  if (rc < 0 || round_trip(s, &req, &r, &err) < 0) {
    s->describe = strdup(err.msg);
  } else {
    const char *ep = lh_envs_conn_endpoint(s->conn), *d = r->description ? r->description : "";
    size_t n = strlen(ep) + strlen(d) + 32;
    s->describe = malloc(n);
    if (s->describe) snprintf(s->describe, n, "%s\n(served by %s)", d, ep);
  }
  return s->describe ? s->describe : "";
}

static int server_expert(void *ctx, const char **action, lh_errbuf *err) {
  server_env *s = ctx;
  if (!have_session(s))
    return lh_errbuf_set(err, LH_EENVS_NOT_RESET, "env server %s: no session; reset first",
                         lh_envs_conn_endpoint(s->conn));
  Longhaul__EnvRequest req = LONGHAUL__ENV_REQUEST__INIT;
  req.op = LONGHAUL__ENV_OP__ENV_OP_EXPERT;
  req.session_id = s->session_id;
  Longhaul__EnvResponse *r;
  LH_TRY(round_trip(s, &req, &r, err));
  *action = r->expert_action ? r->expert_action : "";
  return 0;
}

const lh_env_vtable lh_envs_server_vtable = {
    .version = LH_ENV_API_VERSION,
    .name = "server",
    .summary = "an environment behind an env server",
    .tools = NULL,
    .default_max_steps = 64,
    .create = server_create,
    .reset = server_reset,
    .step = server_step,
    .describe = server_describe,
    .expert = server_expert,
    .destroy = server_destroy,
};

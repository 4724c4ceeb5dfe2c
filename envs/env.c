/* The lh_env wrapper around any table: option routing, action parsing,
 * the step counter and max_steps, and the built-in registry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "envs/internal.h"

static int is_server(const lh_env_vtable *vt) { return vt == &lh_envs_server_vtable; }

struct lh_env {
  const lh_env_vtable *vt;
  char name[LH_ENV_MAX_TOOL_NAME * 2];
  void *ctx;
  lh_env_plugin *plugin;     /* owned when loaded from a path */
  uint32_t max_steps, steps;
  int has_max_steps, reset_ok, done;
  lh_action_limits lim;
  lh_str errobs;       /* error observations the wrapper writes */
  int pending;               /* PENDING_*: what begin left for end */
  int pending_rc, parse_failed;
  lh_env_result pending_res;
  lh_env_obs pending_obs;
  lh_errbuf pending_err;
};

static const lh_env_vtable *const builtins[] = {&lh_envs_calc_vtable, &lh_envs_needle_vtable,
                                                &lh_envs_maze_vtable};

const lh_env_vtable *const *lh_envs_builtin(size_t *count) {
  if (count) *count = sizeof builtins / sizeof builtins[0];
  return builtins;
}

const lh_env_vtable *lh_envs_find_builtin(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (strcmp(builtins[i]->name, name) == 0) return builtins[i];
  return NULL;
}

int lh_env_vtable_check(const lh_env_vtable *vt, const char *what, lh_errbuf *err) {
  if (!vt) return lh_errbuf_set(err, LH_EENVS_BAD_TABLE, "%s: the table is NULL", what);
  if (vt->version == 0 || vt->version > LH_ENV_API_VERSION)
    return lh_errbuf_set(err, LH_EENVS_PLUGIN_VERSION,
                         "%s: table version %u not supported; this longhaul accepts 1..%d "
                         "(rebuild the plugin against envs/env.h)",
                         what, vt->version, LH_ENV_API_VERSION);
  const char *missing = !vt->name       ? "name"
                        : !vt->create   ? "create"
                        : !vt->reset    ? "reset"
                        : !vt->step     ? "step"
                        : !vt->describe ? "describe"
                        : !vt->destroy  ? "destroy"
                                        : NULL;
  if (missing)
    return lh_errbuf_set(err, LH_EENVS_BAD_TABLE, "%s: required field '%s' is NULL", what, missing);
  return 0;
}

/* Options the wrapper consumes; the rest go to the table's create. */
static int wrapper_key(const char *key) {
  return strcmp(key, "max_steps") == 0 || strcmp(key, "max_arg_bytes") == 0 ||
         strcmp(key, "plugin") == 0;
}

static int open_table(const lh_env_vtable *vt, const char *name, lh_env_plugin *plugin, lh_env_hub *hub,
                      const lh_env_option *opts, size_t count, lh_env **out, lh_errbuf *err) {
  lh_env *env = calloc(1, sizeof *env);
  lh_env_option *rest = calloc(count + 1, sizeof *rest);
  if (!env || !rest) {
    free(env);
    free(rest);
    lh_env_plugin_free(plugin);
    return lh_errbuf_set(err, LH_ENOMEM, "lh_env_open: out of memory");
  }
  env->vt = vt;
  snprintf(env->name, sizeof env->name, "%s", name ? name : vt->name);
  env->plugin = plugin;
  env->lim.max_arg_bytes = LH_ENV_DEFAULT_MAX_ARG_BYTES;
  env->lim.max_answer_bytes = LH_ENV_DEFAULT_MAX_ANSWER_BYTES;
  long v;
  int rc = lh_env_opt_int(opts, count, "max_steps", vt->default_max_steps ? vt->default_max_steps : 64,
                          1, 1000000, &v, err);
  if (rc == 0) {
    env->max_steps = (uint32_t)v;
    rc = lh_env_opt_int(opts, count, "max_arg_bytes", LH_ENV_DEFAULT_MAX_ARG_BYTES, 1, 1 << 24, &v, err);
  }
  if (rc == 0) {
    env->lim.max_arg_bytes = (size_t)v;
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
      /* An env server counts steps too: it gets max_steps as well. */
      if (opts[i].key && (!wrapper_key(opts[i].key) ||
                          (is_server(vt) && strcmp(opts[i].key, "plugin") != 0)))
        rest[n++] = opts[i];
    if (is_server(vt)) rc = lh_envs_server_create(hub, rest, n, &env->ctx, err);
    else rc = vt->create(rest, n, &env->ctx, err);
  }
  free(rest);
  if (rc < 0) {
    env->ctx = NULL;
    lh_env_free(env);
    return rc;
  }
  *out = env;
  return 0;
}

int lh_env_open_vtable(const lh_env_vtable *vt, const lh_env_option *opts, size_t count,
                       lh_env **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_open: out is NULL");
  *out = NULL;
  LH_TRY(lh_env_vtable_check(vt, "environment", err));
  return open_table(vt, NULL, NULL, NULL, opts, count, out, err);
}

int lh_env_open(const char *name, const lh_env_option *opts, size_t count, lh_env **out,
                lh_errbuf *err) {
  return lh_env_open_hub(NULL, name, opts, count, out, err);
}

int lh_env_open_hub(lh_env_hub *hub, const char *name, const lh_env_option *opts, size_t count,
                    lh_env **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_open: out is NULL");
  *out = NULL;
  const char *plugin_path = lh_env_opt(opts, count, "plugin");
  const char *server = lh_env_opt(opts, count, "server");
  if (plugin_path && server)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "options plugin and server exclude each other");
  if (plugin_path) {
    lh_env_plugin *p = NULL;
    LH_TRY(lh_env_plugin_load(plugin_path, &p, err));
    const lh_env_vtable *vt = lh_env_plugin_vtable(p);
    if (name && strcmp(name, vt->name) != 0) {
      int rc = lh_errbuf_set(err, LH_EENVS_UNKNOWN_ENV, "plugin %s provides '%s', not '%s'",
                             plugin_path, vt->name, name);
      lh_env_plugin_free(p);
      return rc;
    }
    return open_table(vt, NULL, p, NULL, opts, count, out, err);
  }
  if (server) {
    if (!name || !*name)
      return lh_errbuf_set(err, LH_EINVAL, "an env server needs the environment's name");
    lh_env_option *all = calloc(count + 1, sizeof *all);
    if (!all) return lh_errbuf_set(err, LH_ENOMEM, "lh_env_open: out of memory");
    memcpy(all, opts, count * sizeof *opts);
    all[count].key = "env";
    all[count].value = name;
    int rc = open_table(&lh_envs_server_vtable, name, NULL, hub, all, count + 1, out, err);
    free(all);
    return rc;
  }
  const lh_env_vtable *vt = lh_envs_find_builtin(name);
  if (!vt)
    return lh_errbuf_set(err, LH_EENVS_UNKNOWN_ENV,
                         "unknown environment '%s'; built-ins: calc, needle, maze "
                         "(or give plugin=PATH or server=ENDPOINT)",
                         name ? name : "(null)");
  return open_table(vt, NULL, NULL, NULL, opts, count, out, err);
}

void lh_env_free(lh_env *env) {
  if (!env) return;
  if (env->ctx) env->vt->destroy(env->ctx);
  lh_str_free(&env->errobs);
  lh_env_plugin_free(env->plugin);
  free(env);
}

enum { PENDING_NONE, PENDING_STEP, PENDING_STEP_REMOTE, PENDING_RESET, PENDING_RESET_REMOTE };

/* Collects an answer begun and never ended, so that an env server's
 * connection is in step again before the next request. */
static void drain(lh_env *env) {
  if (env->pending == PENDING_STEP_REMOTE) {
    lh_env_result dropped;
    lh_env_step_end(env, &dropped, NULL);
  } else if (env->pending == PENDING_RESET_REMOTE) {
    lh_env_obs dropped;
    lh_env_reset_end(env, &dropped, NULL);
  }
  env->pending = PENDING_NONE;
}

int lh_env_reset_begin(lh_env *env, uint64_t seed, lh_errbuf *err) {
  if (!env) return lh_errbuf_set(err, LH_EINVAL, "lh_env_reset: env is NULL");
  drain(env);
  env->steps = 0;
  env->done = 0;
  env->reset_ok = 0;
  lh_errbuf_clear(&env->pending_err);
  memset(&env->pending_obs, 0, sizeof env->pending_obs);
  if (is_server(env->vt)) {
    env->pending_rc = lh_envs_server_reset_send(env->ctx, seed, &env->pending_err);
    env->pending = env->pending_rc == 0 ? PENDING_RESET_REMOTE : PENDING_RESET;
    return 0;
  }
  env->pending_rc = env->vt->reset(env->ctx, seed, &env->pending_obs, &env->pending_err);
  env->pending = PENDING_RESET;
  return 0;
}

int lh_env_reset_end(lh_env *env, lh_env_obs *obs, lh_errbuf *err) {
  if (!env || !obs) return lh_errbuf_set(err, LH_EINVAL, "lh_env_reset: env or obs is NULL");
  memset(obs, 0, sizeof *obs);
  if (env->pending != PENDING_RESET && env->pending != PENDING_RESET_REMOTE)
    return lh_errbuf_set(err, LH_EINVAL, "%s: no reset in flight", env->name);
  if (env->pending == PENDING_RESET_REMOTE)
    env->pending_rc = lh_envs_server_reset_recv(env->ctx, &env->pending_obs, &env->pending_err);
  env->pending = PENDING_NONE;
  if (env->pending_rc < 0) {
    if (err) *err = env->pending_err;
    return env->pending_rc;
  }
  *obs = env->pending_obs;
  env->reset_ok = 1;
  return 0;
}

int lh_env_reset(lh_env *env, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  if (!env || !obs) return lh_errbuf_set(err, LH_EINVAL, "lh_env_reset: env or obs is NULL");
  LH_TRY(lh_env_reset_begin(env, seed, err));
  return lh_env_reset_end(env, obs, err);
}

static void error_result(lh_env *env, lh_env_result *out, lh_env_outcome outcome, const char *msg) {
  lh_str_clear(&env->errobs);
  lh_str_printf(&env->errobs, "error: %s", msg);
  memset(out, 0, sizeof *out);
  out->obs.text = env->errobs.data ? env->errobs.data : "error";
  out->obs.text_bytes = env->errobs.data ? env->errobs.len : 5;
  out->done = outcome != LH_ENV_RUNNING;
  out->outcome = outcome;
}

int lh_env_step_begin(lh_env *env, const char *action, size_t bytes, lh_errbuf *err) {
  if (!env) return lh_errbuf_set(err, LH_EINVAL, "lh_env_step: env is NULL");
  if (env->pending)
    return lh_errbuf_set(err, LH_EINVAL, "%s: a %s is already in flight; end it first", env->name,
                         env->pending >= PENDING_RESET ? "reset" : "step");
  if (!env->reset_ok)
    return lh_errbuf_set(err, LH_EENVS_NOT_RESET, "%s: step before reset", env->name);
  if (env->done)
    return lh_errbuf_set(err, LH_EENVS_EPISODE_DONE, "%s: step after the episode ended; reset first",
                         env->name);
  env->steps++;
  lh_env_result *res = &env->pending_res;
  memset(res, 0, sizeof *res);
  lh_errbuf_clear(&env->pending_err);
  env->pending = PENDING_STEP;
  env->pending_rc = 0;
  lh_action parsed;
  if (lh_action_parse(action, bytes, env->vt->tools, &env->lim, &parsed, &env->pending_err) < 0) {
    int last = env->steps >= env->max_steps;
    error_result(env, res, last ? LH_ENV_TRUNCATED : LH_ENV_RUNNING, env->pending_err.msg);
    env->parse_failed = 1;
    return 0;
  }
  env->parse_failed = 0;
  if (is_server(env->vt)) {
    env->pending_rc = lh_envs_server_step_send(env->ctx, action, bytes, &env->pending_err);
    if (env->pending_rc == 0) env->pending = PENDING_STEP_REMOTE;
    return 0;
  }
  env->pending_rc = env->vt->step(env->ctx, action, bytes, &parsed, res, &env->pending_err);
  return 0;
}

int lh_env_step_end(lh_env *env, lh_env_result *out, lh_errbuf *err) {
  if (!env || !out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_step: env or out is NULL");
  memset(out, 0, sizeof *out);
  if (env->pending != PENDING_STEP && env->pending != PENDING_STEP_REMOTE)
    return lh_errbuf_set(err, LH_EINVAL, "%s: no step in flight", env->name);
  if (env->pending == PENDING_STEP_REMOTE)
    env->pending_rc = lh_envs_server_step_recv(env->ctx, &env->pending_res, &env->pending_err);
  env->pending = PENDING_NONE;
  *out = env->pending_res;
  if (env->parse_failed) {
    env->done = out->done;
    return 0;
  }
  int rc = env->pending_rc;
  if (rc < 0) {
    /* The environment failed (a crashed or hung server): the episode ends
     * as an error and the caller keeps going. */
    if (err) *err = env->pending_err;
    error_result(env, out, LH_ENV_ERROR, env->pending_err.msg);
    env->done = 1;
    env->reset_ok = 0;
    return rc;
  }
  if (out->done && out->outcome == LH_ENV_RUNNING)
    out->outcome = out->reward > 0 ? LH_ENV_SUCCESS : LH_ENV_FAILURE;
  if (!out->done && env->steps >= env->max_steps) {
    out->done = 1;
    out->outcome = LH_ENV_TRUNCATED;
  }
  if (!out->done) out->outcome = LH_ENV_RUNNING;
  env->done = out->done;
  return 0;
}

int lh_env_step(lh_env *env, const char *action, size_t bytes, lh_env_result *out, lh_errbuf *err) {
  if (out) memset(out, 0, sizeof *out);
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_step: out is NULL");
  LH_TRY(lh_env_step_begin(env, action, bytes, err));
  return lh_env_step_end(env, out, err);
}

int lh_env_expert(lh_env *env, const char **action, lh_errbuf *err) {
  if (!env || !action) return lh_errbuf_set(err, LH_EINVAL, "lh_env_expert: env or action is NULL");
  *action = NULL;
  if (!env->vt->expert)
    return lh_errbuf_set(err, LH_EENVS_NO_EXPERT, "%s has no expert", env->vt->name);
  if (env->pending) return lh_errbuf_set(err, LH_EINVAL, "%s: end the step in flight first", env->name);
  if (!env->reset_ok || env->done)
    return lh_errbuf_set(err, LH_EENVS_NOT_RESET, "%s: no running episode for the expert",
                         env->vt->name);
  return env->vt->expert(env->ctx, action, err);
}

const char *lh_env_describe(lh_env *env) {
  if (!env) return "";
  const char *d = env->vt->describe(env->ctx);
  return d ? d : "";
}

size_t lh_env_footprint(const lh_env *env) {
  if (!env) return 0;
  size_t own = sizeof *env + LH_ENVS_TEXT_FOOTPRINT(LH_ERRMSG_BYTES + 8);  /* and its error observations */
  const lh_env_vtable *vt = env->vt;
  if (vt->version < 2 || !vt->footprint || !env->ctx) return own + LH_ENV_UNSTATED_FOOTPRINT_BYTES;
  return own + vt->footprint(env->ctx);
}

const char *lh_env_name(const lh_env *env) { return env ? env->name : ""; }
uint32_t lh_env_steps(const lh_env *env) { return env ? env->steps : 0; }
uint32_t lh_env_max_steps(const lh_env *env) { return env ? env->max_steps : 0; }


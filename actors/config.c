/* actors: the [actor] section of the INI config, and [env] beside it.
 *
 * A table lists every [actor] key with its type, field and range, read by
 * common's section reader (common/ini_section.h), which names the file,
 * line, section and key of every error. The free-form [env] section (a name
 * and the environment's own options) is read in the same pass by the
 * section's `other` callback. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "actors/actors.h"
#include "common/ini_section.h"

#define T lh_actors_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_U64(T, batch, 1, 65536),
    LH_INI_KEY_F64(T, temperature, 0, 1e6, LH_INI_CLOSED),
    LH_INI_KEY_F64(T, top_p, 0, 1, LH_INI_OPEN_MIN),
    LH_INI_KEY_U64(T, seed, 0, INFINITY),
    LH_INI_KEY_U64(T, segment_tokens, 1, 65536),
    LH_INI_KEY_U64(T, outbox_messages, 1, INFINITY),
    LH_INI_KEY_U64(T, outbox_bytes, 1, INFINITY),
    LH_INI_KEY_U64(T, resend_timeout_ms, 1, INFINITY),
    LH_INI_KEY_U64(T, heartbeat_ms, 1, INFINITY),
    LH_INI_KEY_U64(T, blas_threads, 1, 256),
    LH_INI_KEY_U64(T, group_size, 1, INFINITY),
    LH_INI_KEY_STR(T, learner_endpoint, 0),
    LH_INI_KEY_STR(T, weights_pub_endpoint, 0),
    LH_INI_KEY_STR(T, weights_endpoint, 0),
    LH_INI_KEY_STR(T, curve_secret_key_file, 0),
    LH_INI_KEY_STR(T, curve_server_key_file, 0),
    LH_INI_KEY_U64(T, max_context, 0, INFINITY),
    LH_INI_KEY_U64(T, max_steps, 0, 1000000000),
    LH_INI_KEY_U64(T, flush_timeout_ms, 1, INFINITY),
    LH_INI_KEY_U64(T, record_routing, 0, 1),
    LH_INI_KEY_STR(T, stage_option, 0),
};
#undef T

void lh_actors_config_default(lh_actors_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->batch = 8;
  c->temperature = 1.0;
  c->top_p = 1.0;
  c->seed = 0;
  c->segment_tokens = 512;
  c->outbox_messages = 1024;
  c->outbox_bytes = 64u << 20;
  c->resend_timeout_ms = 5000;
  c->heartbeat_ms = 1000;
  c->blas_threads = 1;
  c->group_size = 8;
  snprintf(c->learner_endpoint, sizeof c->learner_endpoint, "tcp://127.0.0.1:5555");
  snprintf(c->weights_pub_endpoint, sizeof c->weights_pub_endpoint, "tcp://127.0.0.1:5556");
  snprintf(c->weights_endpoint, sizeof c->weights_endpoint, "tcp://127.0.0.1:5557");
  c->max_context = 4096;
  c->max_steps = 0;
  c->flush_timeout_ms = 5000;
  snprintf(c->env_name, sizeof c->env_name, "calc");
}

/* The [env] section's state: the lines its keys were given on. */
typedef struct {
  lh_actors_config *cfg;
  int env_name_line;
  int env_line[LH_ACTORS_ENV_OPTIONS];
} env_ctx;

/* [env]: name, and every other key an option for the environment; the
 * keys of sections other than [actor] and [env] are not ours. */
static int on_other_key(void *user, const char *source, int line, const char *section, const char *name,
                        const char *value, lh_errbuf *err) {
  env_ctx *p = user;
  lh_actors_config *c = p->cfg;
  if (strcmp(section, "env") != 0) return 0;
  if (strcmp(name, "name") == 0) {
    if (p->env_name_line)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s:%d: [env] name = %.64s: the key was already given on line %d", source, line, value,
                           p->env_name_line);
    if (!*value || strlen(value) >= sizeof c->env_name)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                           "%s:%d: [env] name = '%.64s' is not an environment name of 1..%zu bytes", source, line,
                           value, sizeof c->env_name - 1);
    p->env_name_line = line;
    snprintf(c->env_name, sizeof c->env_name, "%s", value);
    return 0;
  }
  for (uint32_t i = 0; i < c->n_env_options; i++)
    if (strcmp(c->env_keys[i], name) == 0)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s:%d: [env] %s = %.64s: the key was already given on line %d", source, line, name,
                           value, p->env_line[i]);
  if (c->n_env_options == LH_ACTORS_ENV_OPTIONS || strlen(name) >= sizeof c->env_keys[0] ||
      strlen(value) >= sizeof c->env_values[0])
    return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                         "%s:%d: [env] %.64s: at most %d options, keys under %zu bytes and values under "
                         "%zu bytes",
                         source, line, name, LH_ACTORS_ENV_OPTIONS, sizeof c->env_keys[0], sizeof c->env_values[0]);
  uint32_t i = c->n_env_options++;
  snprintf(c->env_keys[i], sizeof c->env_keys[i], "%s", name);
  snprintf(c->env_values[i], sizeof c->env_values[i], "%s", value);
  p->env_line[i] = line;
  return 0;
}

static const lh_ini_section SECTION = {
    .name = "actor", .keys = KEYS, .n_keys = sizeof KEYS / sizeof KEYS[0],
    .unknown_key_error = LH_EACTORS_CONFIG_UNKNOWN_KEY, .duplicate_error = LH_EACTORS_CONFIG_DUPLICATE,
    .value_error = LH_EACTORS_CONFIG_VALUE, .syntax_error = LH_EACTORS_CONFIG_FILE, .other = on_other_key};

int lh_actors_config_parse(const char *text, const char *source, lh_actors_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL text or config");
  lh_actors_config c;
  lh_actors_config_default(&c);
  env_ctx env = {.cfg = &c};
  int rc = lh_ini_section_parse(&SECTION, text, source, &c, &env, NULL, err);
  if (rc != 0) return rc;
  *cfg = c;
  return 0;
}

static int parse_text(const char *text, const char *source, void *cfg, lh_errbuf *err) {
  return lh_actors_config_parse(text, source, cfg, err);
}

int lh_actors_config_load(const char *path, lh_actors_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL path or config");
  return lh_ini_load_file(path, LH_EACTORS_CONFIG_FILE, parse_text, cfg, err);
}

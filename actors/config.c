/* actors: the [actor] section of the INI config, read with inih.
 *
 * A table lists every key with its type, field and range. inih reads
 * through our own line reader, which counts lines, so that every message
 * names the line it is about. (learner/config.c reads [learner] the same
 * way; the two modules do not depend on each other.) */
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"

typedef enum { K_U64, K_F64, K_STR } key_kind;

/* U64: [min, max] with max 0 meaning no bound. F64: [min, max], open at
 * the ends flagged. */
typedef struct {
  const char *key;
  key_kind kind;
  size_t offset;
  double min, max;
  int min_open, max_open;
} key_spec;

#define F(field) offsetof(lh_actors_config, field)
static const key_spec KEYS[] = {
    {"batch", K_U64, F(batch), 1, 65536, 0, 0},
    {"temperature", K_F64, F(temperature), 0, 1e6, 0, 0},
    {"top_p", K_F64, F(top_p), 0, 1, 1, 0},
    {"seed", K_U64, F(seed), 0, 0, 0, 0},
    {"segment_tokens", K_U64, F(segment_tokens), 1, 65536, 0, 0},
    {"outbox_messages", K_U64, F(outbox_messages), 1, 0, 0, 0},
    {"outbox_bytes", K_U64, F(outbox_bytes), 1, 0, 0, 0},
    {"resend_timeout_ms", K_U64, F(resend_timeout_ms), 1, 0, 0, 0},
    {"heartbeat_ms", K_U64, F(heartbeat_ms), 1, 0, 0, 0},
    {"group_size", K_U64, F(group_size), 1, 0, 0, 0},
    {"learner_endpoint", K_STR, F(learner_endpoint), 0, 0, 0, 0},
    {"weights_pub_endpoint", K_STR, F(weights_pub_endpoint), 0, 0, 0, 0},
    {"weights_endpoint", K_STR, F(weights_endpoint), 0, 0, 0, 0},
    {"curve_secret_key_file", K_STR, F(curve_secret_key_file), 0, 0, 0, 0},
    {"curve_server_key_file", K_STR, F(curve_server_key_file), 0, 0, 0, 0},
    {"max_context", K_U64, F(max_context), 0, 0, 0, 0},
    {"max_steps", K_U64, F(max_steps), 0, 1000000000, 0, 0},
    {"flush_timeout_ms", K_U64, F(flush_timeout_ms), 1, 0, 0, 0},
    {"record_routing", K_U64, F(record_routing), 0, 1, 0, 0},
    {"stage_option", K_STR, F(stage_option), 0, 0, 0, 0},
};
#undef F
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

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
  c->group_size = 8;
  snprintf(c->learner_endpoint, sizeof c->learner_endpoint, "tcp://127.0.0.1:5555");
  snprintf(c->weights_pub_endpoint, sizeof c->weights_pub_endpoint, "tcp://127.0.0.1:5556");
  snprintf(c->weights_endpoint, sizeof c->weights_endpoint, "tcp://127.0.0.1:5557");
  c->max_context = 4096;
  c->max_steps = 0;
  c->flush_timeout_ms = 5000;
  snprintf(c->env_name, sizeof c->env_name, "calc");
}

typedef struct {
  lh_actors_config *cfg;
  lh_errbuf *err;
  const char *source;
  lh_text_lines lines;  /* the text, and the line inih last read */
  int failed;
  int seen_line[N_KEYS];
  int env_name_line;
  int env_line[LH_ACTORS_ENV_OPTIONS];
} parse_ctx;




static void range_text(const key_spec *k, char *buf, size_t bytes) {
  if (k->kind == K_U64 && k->max > 0)
    snprintf(buf, bytes, "an integer in %.0f..%.0f", k->min, k->max);
  else if (k->kind == K_U64)
    snprintf(buf, bytes, "an integer >= %.0f", k->min);
  else if (k->max >= 1e6)
    snprintf(buf, bytes, "a number %s %g", k->min_open ? ">" : ">=", k->min);
  else
    snprintf(buf, bytes, "a number in %c%g, %g%c", k->min_open ? '(' : '[', k->min, k->max,
             k->max_open ? ')' : ']');
}

/* [env]: name, and every other key an option for the environment. */
static int on_env_key(parse_ctx *p, const char *name, const char *value) {
  lh_actors_config *c = p->cfg;
  p->failed = 1;
  if (strcmp(name, "name") == 0) {
    if (p->env_name_line)
      return lh_errbuf_set(p->err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s:%d: [env] name = %.64s: the key was already given on line %d", p->source,
                           p->lines.line, value, p->env_name_line),
             0;
    if (!*value || strlen(value) >= sizeof c->env_name)
      return lh_errbuf_set(p->err, LH_EACTORS_CONFIG_VALUE,
                           "%s:%d: [env] name = '%.64s' is not an environment name of 1..%zu bytes",
                           p->source, p->lines.line, value, sizeof c->env_name - 1),
             0;
    p->env_name_line = p->lines.line;
    snprintf(c->env_name, sizeof c->env_name, "%s", value);
    p->failed = 0;
    return 1;
  }
  for (uint32_t i = 0; i < c->n_env_options; i++)
    if (strcmp(c->env_keys[i], name) == 0)
      return lh_errbuf_set(p->err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s:%d: [env] %s = %.64s: the key was already given on line %d", p->source,
                           p->lines.line, name, value, p->env_line[i]),
             0;
  if (c->n_env_options == LH_ACTORS_ENV_OPTIONS || strlen(name) >= sizeof c->env_keys[0] ||
      strlen(value) >= sizeof c->env_values[0])
    return lh_errbuf_set(p->err, LH_EACTORS_CONFIG_VALUE,
                         "%s:%d: [env] %.64s: at most %d options, keys under %zu bytes and values under "
                         "%zu bytes",
                         p->source, p->lines.line, name, LH_ACTORS_ENV_OPTIONS, sizeof c->env_keys[0],
                         sizeof c->env_values[0]),
           0;
  uint32_t i = c->n_env_options++;
  snprintf(c->env_keys[i], sizeof c->env_keys[i], "%s", name);
  snprintf(c->env_values[i], sizeof c->env_values[i], "%s", value);
  p->env_line[i] = p->lines.line;
  p->failed = 0;
  return 1;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  parse_ctx *p = user;
  if (strcmp(section, "env") == 0) return p->failed ? 0 : on_env_key(p, name, value);
  if (strcmp(section, "actor") != 0) return 1;
  if (p->failed) return 0;
  p->failed = 1;  /* cleared below when the key is good */
  size_t i = 0;
  while (i < N_KEYS && strcmp(KEYS[i].key, name) != 0) i++;
  if (i == N_KEYS) {
    char known[LH_ERRMSG_BYTES] = "";
    for (size_t j = 0; j < N_KEYS; j++) {
      strncat(known, KEYS[j].key, sizeof known - strlen(known) - 1);
      if (j + 1 < N_KEYS) strncat(known, ", ", sizeof known - strlen(known) - 1);
    }
    lh_errbuf_set(p->err, LH_EACTORS_CONFIG_UNKNOWN_KEY, "%s:%d: [actor] unknown key '%.64s' (known: %.300s)",
                  p->source, p->lines.line, name, known);
    return 0;
  }
  const key_spec *k = &KEYS[i];
  if (p->seen_line[i]) {
    lh_errbuf_set(p->err, LH_EACTORS_CONFIG_DUPLICATE,
                  "%s:%d: [actor] %s = %.64s: the key was already given on line %d", p->source, p->lines.line,
                  name, value, p->seen_line[i]);
    return 0;
  }
  p->seen_line[i] = p->lines.line;
  char range[96];
  range_text(k, range, sizeof range);
  char *field = (char *)p->cfg + k->offset;
  int bad;
  if (k->kind == K_STR) {
    bad = !*value || strlen(value) >= LH_ACTORS_ENDPOINT_BYTES;
    if (!bad) snprintf(field, LH_ACTORS_ENDPOINT_BYTES, "%s", value);
    if (bad) snprintf(range, sizeof range, "a text of 1..%d bytes", LH_ACTORS_ENDPOINT_BYTES - 1);
  } else if (k->kind == K_U64) {
    uint64_t x = 0;
    bad = lh_parse_u64(value, &x) || (double)x < k->min || (k->max > 0 && (double)x > k->max);
    if (!bad) memcpy(field, &x, sizeof x);
  } else {
    double x = 0;
    bad = lh_parse_f64(value, &x) != 0 || !isfinite(x);
    if (!bad) bad = k->min_open ? !(x > k->min) : !(x >= k->min);
    if (!bad) bad = k->max_open ? !(x < k->max) : !(x <= k->max);
    if (!bad) memcpy(field, &x, sizeof x);
  }
  if (bad) {
    lh_errbuf_set(p->err, LH_EACTORS_CONFIG_VALUE, "%s:%d: [actor] %s = '%.64s' is not %s", p->source,
                  p->lines.line, name, value, range);
    return 0;
  }
  p->failed = 0;
  return 1;
}

int lh_actors_config_parse(const char *text, const char *source, lh_actors_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL text or config");
  if (!source) source = "config";
  lh_actors_config c;
  lh_actors_config_default(&c);
  parse_ctx p = {.cfg = &c, .err = err, .source = source, .lines = {.text = text}};
  int rc = ini_parse_stream(lh_text_lines_read, &p.lines, on_key, &p);
  if (p.failed) return err ? err->code : LH_EACTORS_CONFIG_VALUE;
  if (rc == -2) return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory while parsing", source);
  if (rc != 0)
    return lh_errbuf_set(err, LH_EACTORS_CONFIG_FILE,
                         "%s:%d: syntax error (expected '[section]' or 'key = value')", source, rc);
  *cfg = c;
  return 0;
}

int lh_actors_config_load(const char *path, lh_actors_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL path or config");
  char *text;
  int rc = lh_read_text_file(path, LH_EACTORS_CONFIG_FILE, &text, NULL, err);
  if (rc != 0) return rc;
  rc = lh_actors_config_parse(text, path, cfg, err);
  free(text);
  return rc;
}

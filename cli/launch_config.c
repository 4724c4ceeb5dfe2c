/* cli: the [fleet] section of the one INI file, read with inih through
 * common's line reader (which counts lines, so every message names one) and
 * common's number parser, as the [actor] and [learner] readers do. */
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/launch.h"

typedef enum { K_U64, K_STR, K_ENVS } key_kind;

/* U64 keys: value in [min, max]. STR keys: at most bytes - 1 bytes;
 * empty allowed only when allow_empty. */
typedef struct {
  const char *key;
  key_kind kind;
  size_t offset;
  uint64_t min, max;
  size_t bytes;
  int allow_empty;
} key_spec;

#define F(field) offsetof(lh_launch_config, field)
#define S(field) sizeof(((lh_launch_config *)0)->field)
static const key_spec KEYS[] = {
    {"learners", K_U64, F(learners), 1, LH_LAUNCH_MAX_LEARNERS, 0, 0},
    {"actors", K_U64, F(actors), 0, LH_LAUNCH_MAX_ACTORS, 0, 0},
    {"log_dir", K_STR, F(log_dir), 0, 0, S(log_dir), 0},
    {"init", K_STR, F(init), 0, 0, S(init), 1},
    {"steps", K_U64, F(steps), 0, UINT64_MAX, 0, 0},
    {"duration_s", K_U64, F(duration_s), 0, 100ull * 365 * 86400, 0, 0},
    {"restart_backoff_ms", K_U64, F(restart_backoff_ms), 1, 3600000, 0, 0},
    {"restart_backoff_max_ms", K_U64, F(restart_backoff_max_ms), 1, 86400000, 0, 0},
    {"max_restarts", K_U64, F(max_restarts), 0, 1000000, 0, 0},
    {"stop_timeout_ms", K_U64, F(stop_timeout_ms), 1, 3600000, 0, 0},
    {"status_interval_ms", K_U64, F(status_interval_ms), 100, 3600000, 0, 0},
    {"mpirun", K_STR, F(mpirun), 0, 0, S(mpirun), 0},
    {"env_server", K_STR, F(env_server), 0, 0, S(env_server), 1},
    {"actor_envs", K_ENVS, 0, 0, 0, 0, 0},
};
#undef F
#undef S
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

void lh_launch_config_default(lh_launch_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->learners = 1;
  c->actors = 2;
  snprintf(c->log_dir, sizeof c->log_dir, "logs");
  c->restart_backoff_ms = 1000;
  c->restart_backoff_max_ms = 30000;
  c->max_restarts = 10;
  c->stop_timeout_ms = 30000;
  c->status_interval_ms = 5000;
  snprintf(c->mpirun, sizeof c->mpirun, "mpirun");
}

typedef struct {
  lh_launch_config *cfg;
  lh_errbuf *err;
  const char *source;
  lh_text_lines lines;
  int failed;
  int seen_line[N_KEYS];
} parse_ctx;

/* "calc, needle" into cfg->actor_envs; why says what is wrong. */
static int parse_envs(const char *v, lh_launch_config *c, char *why, size_t why_bytes) {
  c->n_actor_envs = 0;
  const char *s = v;
  while (*s) {
    while (*s == ' ' || *s == '\t') s++;
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    if (!len) return snprintf(why, why_bytes, "has an empty name (write names separated by commas)"), -1;
    if (len >= LH_LAUNCH_NAME_BYTES)
      return snprintf(why, why_bytes, "has a name over %d bytes", LH_LAUNCH_NAME_BYTES - 1), -1;
    if (c->n_actor_envs == LH_LAUNCH_MAX_ACTORS)
      return snprintf(why, why_bytes, "has more than %d names", LH_LAUNCH_MAX_ACTORS), -1;
    memcpy(c->actor_envs[c->n_actor_envs], s, len);
    c->actor_envs[c->n_actor_envs++][len] = 0;
    if (!end) break;
    s = end + 1;
    if (!*s) return snprintf(why, why_bytes, "ends with a comma"), -1;
  }
  if (!c->n_actor_envs) return snprintf(why, why_bytes, "is empty (leave the key out for [env] name)"), -1;
  return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  parse_ctx *p = user;
  if (strcmp(section, "fleet") != 0) return 1;
  if (p->failed) return 0;
  p->failed = 1; /* cleared below when the key is good */
  size_t i = 0;
  while (i < N_KEYS && strcmp(KEYS[i].key, name) != 0) i++;
  if (i == N_KEYS) {
    char known[LH_ERRMSG_BYTES] = "";
    for (size_t j = 0; j < N_KEYS; j++) {
      strncat(known, KEYS[j].key, sizeof known - strlen(known) - 1);
      if (j + 1 < N_KEYS) strncat(known, ", ", sizeof known - strlen(known) - 1);
    }
    lh_errbuf_set(p->err, LH_ECONFIG, "%s:%d: [fleet] unknown key '%.64s' (known: %.300s)", p->source,
                  p->lines.line, name, known);
    return 0;
  }
  const key_spec *k = &KEYS[i];
  if (p->seen_line[i]) {
    lh_errbuf_set(p->err, LH_ECONFIG, "%s:%d: [fleet] %s = %.64s: the key was already given on line %d",
                  p->source, p->lines.line, name, value, p->seen_line[i]);
    return 0;
  }
  p->seen_line[i] = p->lines.line;
  char why[160] = "";
  char *field = (char *)p->cfg + k->offset;
  if (k->kind == K_U64) {
    uint64_t x = 0;
    if (lh_parse_u64(value, &x) || x < k->min || x > k->max) {
      if (k->max == UINT64_MAX) snprintf(why, sizeof why, "is not an integer >= %llu", (unsigned long long)k->min);
      else
        snprintf(why, sizeof why, "is not an integer in %llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
    } else {
      memcpy(field, &x, sizeof x);
    }
  } else if (k->kind == K_STR) {
    size_t len = strlen(value);
    if ((!len && !k->allow_empty) || len >= k->bytes)
      snprintf(why, sizeof why, "is not a text of %d..%zu bytes", k->allow_empty ? 0 : 1, k->bytes - 1);
    else
      memcpy(field, value, len + 1);
  } else {
    parse_envs(value, p->cfg, why, sizeof why);
  }
  if (why[0]) {
    lh_errbuf_set(p->err, LH_ECONFIG, "%s:%d: [fleet] %s = '%.64s' %s", p->source, p->lines.line, name, value,
                  why);
    return 0;
  }
  p->failed = 0;
  return 1;
}

int lh_launch_config_parse(const char *text, const char *source, lh_launch_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "fleet config: NULL text or config");
  if (!source) source = "config";
  lh_launch_config c;
  lh_launch_config_default(&c);
  parse_ctx p = {.cfg = &c, .err = err, .source = source, .lines = {.text = text}};
  int rc = ini_parse_stream(lh_text_lines_read, &p.lines, on_key, &p);
  if (p.failed) return LH_ECONFIG;
  if (rc == -2) return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory while parsing", source);
  if (rc != 0)
    return lh_errbuf_set(err, LH_ECONFIG, "%s:%d: syntax error (expected '[section]' or 'key = value')", source,
                         rc);
  if (c.restart_backoff_max_ms < c.restart_backoff_ms)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [fleet] restart_backoff_max_ms = %llu is below restart_backoff_ms = %llu", source,
                         (unsigned long long)c.restart_backoff_max_ms, (unsigned long long)c.restart_backoff_ms);
  *cfg = c;
  return 0;
}

int lh_launch_config_load(const char *path, lh_launch_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "fleet config: NULL path or config");
  char *text;
  int rc = lh_read_text_file(path, LH_ECONFIG, &text, NULL, err);
  if (rc != 0) return rc;
  rc = lh_launch_config_parse(text, path, cfg, err);
  free(text);
  return rc;
}

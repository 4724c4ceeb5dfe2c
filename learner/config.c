/* learner: the [learner] section of the INI config, read with inih.
 *
 * A table lists every key with its type, field and range, so that the
 * parser, the "known keys" hint and the checks cannot drift apart. inih
 * reads through our own line reader, which counts lines, so that every
 * message can name the line it is about. */
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/learner.h"

typedef enum { K_U64, K_F64, K_BOOL, K_ADV, K_STAGES, K_STR } key_kind;

/* Ranges: value in [min, max], or (min, ...) when min_open, (..., max) when
 * max_open. U64 keys use only min. */
typedef struct {
  const char *key;
  key_kind kind;
  size_t offset;
  double min, max;
  int min_open, max_open;
} key_spec;

#define F(field) offsetof(lh_learner_config, field)
static const key_spec KEYS[] = {
    {"advantage", K_ADV, F(advantage), 0, 0, 0, 0},
    {"baseline_decay", K_F64, F(baseline_decay), 0, 1, 0, 1},
    {"clip_eps", K_F64, F(clip_eps), 0, 1, 1, 1},
    {"is_cap", K_F64, F(is_cap), 1, INFINITY, 0, 0},
    {"entropy_coef", K_F64, F(entropy_coef), 0, 1e9, 0, 0},
    {"max_policy_lag", K_U64, F(max_policy_lag), 0, 0, 0, 0},
    {"lr", K_F64, F(lr), 0, 1e9, 1, 0},
    {"warmup_steps", K_U64, F(warmup_steps), 0, 0, 0, 0},
    {"total_steps", K_U64, F(total_steps), 1, 0, 0, 0},
    {"weight_decay", K_F64, F(weight_decay), 0, 1e9, 0, 0},
    {"grad_clip", K_F64, F(grad_clip), 0, 1e9, 1, 0},
    {"batch_episodes", K_U64, F(batch_episodes), 1, 0, 0, 0},
    {"group_size", K_U64, F(group_size), 1, 0, 0, 0},
    {"train_window", K_U64, F(train_window), 1, 0, 0, 0},
    {"ckpt_every", K_U64, F(ckpt_every), 1, 0, 0, 0},
    {"routing_replay", K_BOOL, F(routing_replay), 0, 0, 0, 0},
    {"stages", K_STAGES, 0, 0, 0, 0, 0},
    {"ingest_endpoint", K_STR, F(ingest_endpoint), 0, 0, 0, 0},
    {"weights_pub_endpoint", K_STR, F(weights_pub_endpoint), 0, 0, 0, 0},
    {"weights_endpoint", K_STR, F(weights_endpoint), 0, 0, 0, 0},
    {"curve_secret_key_file", K_STR, F(curve_secret_key_file), 0, 0, 0, 0},
    {"curve_allowed_keys", K_STR, F(curve_allowed_keys), 0, 0, 0, 0},
    {"db", K_STR, F(db), 0, 0, 0, 0},
    {"max_db_bytes", K_U64, F(max_db_bytes), 0, 0, 0, 0},
    {"ckpt_dir", K_STR, F(ckpt_dir), 0, 0, 0, 0},
    {"abort_after_ms", K_U64, F(abort_after_ms), 1, 0, 0, 0},
};
#undef F
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

void lh_learner_config_default(lh_learner_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->advantage = LH_LEARNER_ADV_GRPO;
  c->baseline_decay = 0.9;
  c->clip_eps = 0.2;
  c->is_cap = 2.0;
  c->entropy_coef = 0.0;
  c->max_policy_lag = 2;
  c->lr = 3e-4;
  c->warmup_steps = 10;
  c->total_steps = 1000;
  c->weight_decay = 0.01;
  c->grad_clip = 1.0;
  c->batch_episodes = 32;
  c->group_size = 8;
  c->train_window = 2048;
  c->ckpt_every = 50;
  c->routing_replay = 0;
  c->n_stages = 0;
  snprintf(c->ingest_endpoint, sizeof c->ingest_endpoint, "tcp://127.0.0.1:5555");
  snprintf(c->weights_pub_endpoint, sizeof c->weights_pub_endpoint, "tcp://127.0.0.1:5556");
  snprintf(c->weights_endpoint, sizeof c->weights_endpoint, "tcp://127.0.0.1:5557");
  snprintf(c->db, sizeof c->db, "replay.db");
  snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "ckpt");
  c->abort_after_ms = 60000;
}

typedef struct {
  lh_learner_config *cfg;
  lh_errbuf *err;
  const char *source;
  lh_text_lines lines;  /* the text, and the line inih last read */
  int failed;
  int seen_line[N_KEYS];
} parse_ctx;


static int fail(parse_ctx *p, int code, const char *fmt, const char *key, const char *value,
                const char *why) {
  if (!p->failed) {
    char detail[LH_ERRMSG_BYTES];
    snprintf(detail, sizeof detail, fmt, key, value, why);
    lh_errbuf_set(p->err, code, "%s:%d: [learner] %s", p->source, p->lines.line, detail);
  }
  p->failed = 1;
  return 0;
}



static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcmp(v, yes[i])) return *out = 1, 0;
    if (!strcmp(v, no[i])) return *out = 0, 0;
  }
  return -1;
}

/* "max_context:steps:long_frac,..." into cfg->stages; why says what is wrong. */
static int parse_stages(const char *v, lh_learner_config *cfg, char *why, size_t why_bytes) {
  size_t n = 0;
  const char *s = v;
  if (!*s) return snprintf(why, why_bytes, "is empty (leave the key out for no stages)"), -1;
  while (*s) {
    if (n == LH_LEARNER_MAX_STAGES)
      return snprintf(why, why_bytes, "has more than %d stages", LH_LEARNER_MAX_STAGES), -1;
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char item[128];
    if (len >= sizeof item) return snprintf(why, why_bytes, "stage %zu is too long", n + 1), -1;
    /* Blanks around the numbers are allowed ("4096:100:0, 16384:50:0.25"). */
    size_t m = 0;
    for (size_t j = 0; j < len; j++)
      if (s[j] != ' ' && s[j] != '\t') item[m++] = s[j];
    item[m] = 0;
    char *a = item, *b = strchr(a, ':'), *c = b ? strchr(b + 1, ':') : NULL;
    if (!b || !c || strchr(c + 1, ':'))
      return snprintf(why, why_bytes, "stage %zu '%s' is not max_context:steps:long_frac", n + 1, item), -1;
    *b++ = 0, *c++ = 0;
    lh_learner_stage st;
    if (lh_parse_u64(a, &st.max_context) || st.max_context < 1)
      return snprintf(why, why_bytes, "stage %zu max_context '%s' is not an integer >= 1", n + 1, a), -1;
    if (lh_parse_u64(b, &st.steps) || st.steps < 1)
      return snprintf(why, why_bytes, "stage %zu steps '%s' is not an integer >= 1", n + 1, b), -1;
    if (lh_parse_f64(c, &st.long_frac) || !(st.long_frac >= 0.0 && st.long_frac <= 1.0))
      return snprintf(why, why_bytes, "stage %zu long_frac '%s' is not a number in [0, 1]", n + 1, c), -1;
    if (n > 0 && st.max_context <= cfg->stages[n - 1].max_context)
      return snprintf(why, why_bytes, "stage %zu max_context %llu is not above stage %zu's %llu", n + 1,
                      (unsigned long long)st.max_context, n,
                      (unsigned long long)cfg->stages[n - 1].max_context),
             -1;
    cfg->stages[n++] = st;
    s += len;
    if (*s == ',') {
      s++;
      if (!*s) return snprintf(why, why_bytes, "ends with a comma"), -1;
    }
  }
  cfg->n_stages = n;
  return 0;
}

static void range_text(const key_spec *k, char *buf, size_t bytes) {
  if (k->kind == K_U64) {
    snprintf(buf, bytes, "an integer >= %.0f", k->min);
  } else if (k->max >= 1e9) {
    snprintf(buf, bytes, "a number %s %g", k->min_open ? ">" : ">=", k->min);
  } else {
    snprintf(buf, bytes, "a number in %c%g, %g%c", k->min_open ? '(' : '[', k->min, k->max,
             k->max_open ? ')' : ']');
  }
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  parse_ctx *p = user;
  if (strcmp(section, "learner") != 0) return 1;
  if (p->failed) return 0;
  size_t i = 0;
  while (i < N_KEYS && strcmp(KEYS[i].key, name) != 0) i++;
  if (i == N_KEYS) {
    char known[LH_ERRMSG_BYTES] = "";
    for (size_t j = 0; j < N_KEYS; j++) {
      strncat(known, KEYS[j].key, sizeof known - strlen(known) - 1);
      if (j + 1 < N_KEYS) strncat(known, ", ", sizeof known - strlen(known) - 1);
    }
    return fail(p, LH_ELEARNER_CONFIG_UNKNOWN_KEY, "unknown key '%s'%s (known: %s)", name, "", known);
  }
  const key_spec *k = &KEYS[i];
  if (p->seen_line[i]) {
    char why[64];
    snprintf(why, sizeof why, "%d", p->seen_line[i]);
    return fail(p, LH_ELEARNER_CONFIG_DUPLICATE, "%s = %s: the key was already given on line %s", name,
                value, why);
  }
  p->seen_line[i] = p->lines.line;
  char *field = (char *)p->cfg + k->offset;
  char why[256];
  switch (k->kind) {
    case K_U64: {
      uint64_t x;
      range_text(k, why, sizeof why);
      if (lh_parse_u64(value, &x) || (double)x < k->min)
        return fail(p, LH_ELEARNER_CONFIG_VALUE, "%s = '%s' is not %s", name, value, why);
      memcpy(field, &x, sizeof x);
      return 1;
    }
    case K_F64: {
      double x;
      range_text(k, why, sizeof why);
      int bad = lh_parse_f64(value, &x) != 0;
      if (!bad) bad = k->min_open ? !(x > k->min) : !(x >= k->min);
      if (!bad && k->max < INFINITY) bad = k->max_open ? !(x < k->max) : !(x <= k->max);
      if (!bad && isinf(x) && k->max < INFINITY) bad = 1;
      if (bad) return fail(p, LH_ELEARNER_CONFIG_VALUE, "%s = '%s' is not %s", name, value, why);
      memcpy(field, &x, sizeof x);
      return 1;
    }
    case K_BOOL: {
      int x;
      if (parse_bool(value, &x))
        return fail(p, LH_ELEARNER_CONFIG_VALUE, "%s = '%s' is not %s", name, value,
                    "true/false, yes/no, on/off or 1/0");
      memcpy(field, &x, sizeof x);
      return 1;
    }
    case K_ADV: {
      lh_learner_adv_kind x = lh_learner_adv_kind_from_name(value);
      if (!x)
        return fail(p, LH_ELEARNER_CONFIG_VALUE, "%s = '%s' is not %s", name, value,
                    "one of grpo, rloo, reinforce");
      memcpy(field, &x, sizeof x);
      return 1;
    }
    case K_STR:
      if (!*value || strlen(value) >= LH_LEARNER_TEXT_BYTES) {
        snprintf(why, sizeof why, "a non-empty text under %d bytes", LH_LEARNER_TEXT_BYTES);
        return fail(p, LH_ELEARNER_CONFIG_VALUE, "%s = '%s' is not %s", name, value, why);
      }
      memcpy(field, value, strlen(value) + 1);
      return 1;
    case K_STAGES:
      if (parse_stages(value, p->cfg, why, sizeof why))
        return fail(p, LH_ELEARNER_CONFIG_STAGES, "%s = '%s' %s", name, value, why);
      return 1;
  }
  return 0;
}

static int key_line(const parse_ctx *p, const char *key) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (!strcmp(KEYS[i].key, key)) return p->seen_line[i];
  return 0;
}

int lh_learner_config_parse(const char *text, const char *source, lh_learner_config *cfg,
                            lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "learner config: NULL text or config");
  if (!source) source = "config";
  lh_learner_config c;
  lh_learner_config_default(&c);
  parse_ctx p = {.cfg = &c, .err = err, .source = source, .lines = {.text = text}};
  int rc = ini_parse_stream(lh_text_lines_read, &p.lines, on_key, &p);
  if (p.failed) return err ? err->code : LH_ELEARNER_CONFIG_VALUE;
  if (rc == -2) return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory while parsing", source);
  if (rc != 0)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_FILE,
                         "%s:%d: syntax error (expected '[section]' or 'key = value')", source, rc);
  /* Checks across keys, named by the line of the later one. */
  if (c.warmup_steps > c.total_steps) {
    int line = key_line(&p, "warmup_steps") > key_line(&p, "total_steps") ? key_line(&p, "warmup_steps")
                                                                          : key_line(&p, "total_steps");
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "%s:%d: [learner] warmup_steps = %llu is above total_steps = %llu", source, line,
                         (unsigned long long)c.warmup_steps, (unsigned long long)c.total_steps);
  }
  if (c.batch_episodes % c.group_size != 0) {
    int line = key_line(&p, "batch_episodes") > key_line(&p, "group_size") ? key_line(&p, "batch_episodes")
                                                                           : key_line(&p, "group_size");
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "%s:%d: [learner] batch_episodes = %llu is not a multiple of group_size = %llu "
                         "(a batch holds whole groups)",
                         source, line, (unsigned long long)c.batch_episodes,
                         (unsigned long long)c.group_size);
  }
  *cfg = c;
  return 0;
}

int lh_learner_config_load(const char *path, lh_learner_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "learner config: NULL path or config");
  char *text;
  int rc = lh_read_text_file(path, LH_ELEARNER_CONFIG_FILE, &text, NULL, err);
  if (rc != 0) return rc;
  rc = lh_learner_config_parse(text, path, cfg, err);
  free(text);
  return rc;
}

double lh_learner_lr_at(double lr, uint64_t warmup_steps, uint64_t total_steps, uint64_t step) {
  if (step < warmup_steps) return lr * (double)(step + 1) / (double)warmup_steps;
  if (step >= total_steps || total_steps <= warmup_steps) return 0.0;
  double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
  return lr * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}

int lh_learner_stage_at(const lh_learner_config *cfg, uint64_t step) {
  if (!cfg || cfg->n_stages == 0) return -1;
  uint64_t end = 0;
  for (size_t i = 0; i < cfg->n_stages; i++) {
    end += cfg->stages[i].steps;
    if (step < end) return (int)i;
  }
  return (int)cfg->n_stages - 1;
}

/* learner: context-extension stages (learner.h, "context-extension
 * stages"): the [learner] stages list, what a stage has trained, when it is
 * done, and its checkpoint file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "learner/internal.h"

/* A count with an optional K, M or G suffix (powers of 1024). */
static int parse_count(const char *v, uint64_t *out) {
  size_t n = strlen(v);
  uint64_t mul = 1;
  char digits[32];
  if (n == 0 || n >= sizeof digits) return -1;
  memcpy(digits, v, n + 1);
  char last = digits[n - 1];
  if (last == 'K' || last == 'k') mul = 1ull << 10;
  else if (last == 'M' || last == 'm') mul = 1ull << 20;
  else if (last == 'G' || last == 'g') mul = 1ull << 30;
  if (mul > 1) digits[n - 1] = 0;
  uint64_t x;
  if (lh_parse_u64(digits, &x) || x > UINT64_MAX / mul) return -1;
  *out = x * mul;
  return 0;
}

/* One key=value of a stage into st; why says what is wrong. */
static int stage_key(lh_learner_stage *st, size_t n, const char *kv, char *why, size_t why_bytes) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv || !eq[1])
    return snprintf(why, why_bytes, "stage %zu: '%s' is not key=value", n, kv), -1;
  char key[32];
  size_t kl = (size_t)(eq - kv);
  if (kl >= sizeof key) return snprintf(why, why_bytes, "stage %zu: unknown key '%.31s...'", n, kv), -1;
  memcpy(key, kv, kl);
  key[kl] = 0;
  const char *v = eq + 1;
  uint64_t u;
  double d;
  if (!strcmp(key, "long_frac")) {
    if (lh_parse_f64(v, &d) || !(d >= 0 && d <= 1))
      return snprintf(why, why_bytes, "stage %zu: long_frac=%s is not a number in [0, 1]", n, v), -1;
    st->long_frac = d;
  } else if (!strcmp(key, "episodes") || !strcmp(key, "tokens")) {
    if (parse_count(v, &u) || u < 1)
      return snprintf(why, why_bytes, "stage %zu: %s=%s is not a count >= 1 (K, M, G allowed)", n, key, v), -1;
    *(key[0] == 'e' ? &st->episodes : &st->tokens) = u;
  } else if (!strcmp(key, "success")) {
    char x[32];
    const char *slash = strchr(v, '/');
    size_t xl = slash ? (size_t)(slash - v) : 0;
    if (!slash || xl == 0 || xl >= sizeof x)
      return snprintf(why, why_bytes, "stage %zu: success=%s is not RATE/EPISODES (e.g. success=0.6/64)", n, v), -1;
    memcpy(x, v, xl);
    x[xl] = 0;
    if (lh_parse_f64(x, &d) || !(d >= 0 && d <= 1) || lh_parse_u64(slash + 1, &u) || u < 1 ||
        u > LH_LEARNER_STAGE_GATE_MAX)
      return snprintf(why, why_bytes, "stage %zu: success=%s needs a rate in [0, 1] and 1..%d episodes", n, v,
                      LH_LEARNER_STAGE_GATE_MAX),
             -1;
    st->gate_success = d, st->gate_episodes = u;
  } else if (!strcmp(key, "lr")) {
    if (lh_parse_f64(v, &d) || !(d > 0 && d <= 1e9))
      return snprintf(why, why_bytes, "stage %zu: lr=%s is not a number > 0", n, v), -1;
    st->lr = d;
  } else if (!strcmp(key, "train_window") || !strcmp(key, "batch_episodes")) {
    uint64_t most = key[0] == 't' ? LH_MAX_WINDOW_TOKENS : LH_MAX_BATCH_EPISODES;
    if (parse_count(v, &u) || u < 1 || u > most)
      return snprintf(why, why_bytes, "stage %zu: %s=%s is not an integer in 1..%llu", n, key, v,
                      (unsigned long long)most),
             -1;
    *(key[0] == 't' ? &st->train_window : &st->batch_episodes) = u;
  } else {
    return snprintf(why, why_bytes,
                    "stage %zu: unknown key '%s' (known: episodes, tokens, success, long_frac, lr, train_window, "
                    "batch_episodes)",
                    n, key),
           -1;
  }
  return 0;
}

/* "4096:100:0" (the old form: stages that advanced by learner steps) gets
 * a message that writes it in the new form. */
static int old_form(const char *item, size_t n, uint64_t batch, char *why, size_t why_bytes) {
  char a[32] = "", b[32] = "", c[32] = "";
  uint64_t steps = 0;
  if (sscanf(item, "%31[^:]:%31[^:]:%31s", a, b, c) != 3 || lh_parse_u64(b, &steps)) steps = 100;
  return snprintf(why, why_bytes,
                  "stage %zu '%s' is the old max_context:steps:long_frac form; a stage now advances by the "
                  "episodes (or tokens) of its own that it trained, never by learner steps: write it as "
                  "'%s episodes=%llu long_frac=%s' (%llu steps of batch_episodes = %llu), with stages separated "
                  "by commas",
                  n, item, a[0] ? a : "4096", (unsigned long long)(steps * batch), c[0] ? c : "0",
                  (unsigned long long)steps, (unsigned long long)batch),
         -1;
}

int lh_learner_stages_parse(const char *v, lh_learner_config *cfg, char *why, size_t why_bytes) {
  size_t n = 0;
  const char *s = v;
  lh_learner_stage stages[LH_LEARNER_MAX_STAGES];
  if (!*s) return snprintf(why, why_bytes, "is empty (leave the key out for no stages)"), -1;
  while (*s) {
    if (n == LH_LEARNER_MAX_STAGES)
      return snprintf(why, why_bytes, "has more than %d stages", LH_LEARNER_MAX_STAGES), -1;
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char item[256];
    if (len >= sizeof item) return snprintf(why, why_bytes, "stage %zu is too long", n + 1), -1;
    memcpy(item, s, len);
    item[len] = 0;
    lh_learner_stage st;
    memset(&st, 0, sizeof st);
    /* Words separated by blanks: the context, then key=value. */
    char *save = NULL, *word = strtok_r(item, " \t", &save);
    if (!word) return snprintf(why, why_bytes, "stage %zu is empty", n + 1), -1;
    if (strchr(word, ':')) return old_form(word, n + 1, cfg->batch_episodes, why, why_bytes);
    if (parse_count(word, &st.max_context) || st.max_context < 1 || st.max_context > (uint64_t)LH_MAX_COUNT)
      return snprintf(why, why_bytes, "stage %zu: max_context '%s' is not an integer in 1..%.0f (K, M allowed)",
                      n + 1, word, LH_MAX_COUNT),
             -1;
    while ((word = strtok_r(NULL, " \t", &save)))
      if (stage_key(&st, n + 1, word, why, why_bytes)) return -1;
    if (n > 0 && st.max_context <= stages[n - 1].max_context)
      return snprintf(why, why_bytes, "stage %zu max_context %llu is not above stage %zu's %llu", n + 1,
                      (unsigned long long)st.max_context, n, (unsigned long long)stages[n - 1].max_context),
             -1;
    stages[n++] = st;
    s += len;
    if (*s == ',') {
      s++;
      if (!*s) return snprintf(why, why_bytes, "ends with a comma"), -1;
    }
  }
  /* Every stage but the last says when it is done; the last stays. */
  for (size_t i = 0; i + 1 < n; i++)
    if (!stages[i].episodes && !stages[i].tokens)
      return snprintf(why, why_bytes,
                      "stage %zu gives neither episodes= nor tokens=: say how much of its own it trains before "
                      "stage %zu",
                      i + 1, i + 2),
             -1;
  if (stages[n - 1].episodes || stages[n - 1].tokens || stages[n - 1].gate_episodes)
    return snprintf(why, why_bytes,
                    "the last stage (%zu) stays in force: episodes=, tokens= and success= mean nothing there", n),
           -1;
  memcpy(cfg->stages, stages, n * sizeof *stages);
  cfg->n_stages = n;
  return 0;
}

void lh_learner_stage_state_init(lh_learner_stage_state *s, uint32_t index, uint64_t step, uint64_t version) {
  memset(s, 0, sizeof *s);
  s->index = index, s->began_step = step, s->began_version = version;
  s->began_ms = lh_wall_ms();
}

void lh_learner_stage_count(lh_learner_stage_state *s, uint64_t episodes, uint64_t tokens, uint64_t successes,
                            uint64_t carried, uint64_t carry_dropped) {
  s->episodes += episodes, s->tokens += tokens, s->successes += successes;
  s->carried += carried, s->carry_dropped += carry_dropped;
  if (!episodes) return;
  s->ring_episodes[s->ring_at] = (uint32_t)(episodes < UINT32_MAX ? episodes : UINT32_MAX);
  s->ring_successes[s->ring_at] = (uint32_t)(successes < UINT32_MAX ? successes : UINT32_MAX);
  s->ring_at = (s->ring_at + 1) % LH_LEARNER_STAGE_RING;
  if (s->ring_n < LH_LEARNER_STAGE_RING) s->ring_n++;
}

double lh_learner_stage_gate_rate(const lh_learner_stage_state *s, uint64_t n) {
  uint64_t eps = 0, succ = 0;
  for (uint32_t k = 0; k < s->ring_n && eps < n; k++) {
    uint32_t i = (s->ring_at + LH_LEARNER_STAGE_RING - 1 - k) % LH_LEARNER_STAGE_RING;
    eps += s->ring_episodes[i], succ += s->ring_successes[i];
  }
  return eps >= n && eps ? (double)succ / (double)eps : NAN;
}

int lh_learner_stage_done(const lh_learner_config *cfg, const lh_learner_stage_state *s) {
  if (!cfg || !s || s->index + 1 >= cfg->n_stages) return 0;
  const lh_learner_stage *st = &cfg->stages[s->index];
  if (st->episodes && s->episodes < st->episodes) return 0;
  if (st->tokens && s->tokens < st->tokens) return 0;
  if (st->gate_episodes) {
    double rate = lh_learner_stage_gate_rate(s, st->gate_episodes);
    if (!(rate >= st->gate_success)) return 0;
  }
  return st->episodes || st->tokens;
}

void lh_learner_stage_params(const lh_learner_config *cfg, uint32_t index, double *lr, uint64_t *train_window,
                             uint64_t *batch_episodes) {
  const lh_learner_stage *st = index < cfg->n_stages ? &cfg->stages[index] : NULL;
  *lr = st && st->lr > 0 ? st->lr : cfg->lr;
  *train_window = st && st->train_window ? st->train_window : cfg->train_window;
  *batch_episodes = st && st->batch_episodes ? st->batch_episodes : cfg->batch_episodes;
}

/* ---- DIR/stage.bin: magic, format, the fields, the ring, a checksum ---- */
/* LHSTAGE2: the checksum is XXH3-64; an LHSTAGE1 file (lh_hash64) still
 * loads. */
#define STAGE_MAGIC "LHSTAGE2"
#define STAGE_MAGIC_LEGACY_SUM "LHSTAGE1"
#define STAGE_N_U64 9
#define STAGE_BYTES (8 + 8 * STAGE_N_U64 + 8 * LH_LEARNER_STAGE_RING + 8)

int lh_learner_stage_save(const char *dir, const lh_learner_stage_state *s, lh_errbuf *err) {
  if (!dir || !s) return lh_errbuf_set(err, LH_EINVAL, "stage save: NULL folder or state");
  uint8_t *buf = malloc(STAGE_BYTES);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "stage save: out of memory");
  memcpy(buf, STAGE_MAGIC, 8);
  uint64_t u[STAGE_N_U64] = {s->index, s->began_step, s->began_version, (uint64_t)s->began_ms, s->episodes,
                             s->tokens, s->successes, s->carried, s->carry_dropped};
  for (int i = 0; i < STAGE_N_U64; i++) lh_put_le64(buf + 8 + 8 * i, u[i]);
  uint8_t *r = buf + 8 + 8 * STAGE_N_U64;
  /* The ring oldest first, so that a reader needs no position. */
  for (uint32_t k = 0; k < LH_LEARNER_STAGE_RING; k++) {
    uint32_t i = (s->ring_at + LH_LEARNER_STAGE_RING - s->ring_n + k) % LH_LEARNER_STAGE_RING;
    int used = k < s->ring_n;
    lh_put_le64(r + 8 * k, used ? ((uint64_t)s->ring_episodes[i] << 32 | s->ring_successes[i]) : 0);
  }
  lh_put_le64(buf + STAGE_BYTES - 8, lh_file_checksum(buf, STAGE_BYTES - 8, 0));
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_STAGE_FILE);
  FILE *f = fopen(path, "wb");
  int rc = 0;
  if (!f || fwrite(buf, 1, STAGE_BYTES, f) != STAGE_BYTES || fflush(f))
    rc = lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "stage save: cannot write %s", path);
  if (f && fclose(f) && !rc) rc = lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "stage save: cannot close %s", path);
  free(buf);
  return rc;
}

int lh_learner_stage_load(const char *dir, lh_learner_stage_state *s, lh_errbuf *err) {
  if (!dir || !s) return lh_errbuf_set(err, LH_EINVAL, "stage load: NULL folder or state");
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_STAGE_FILE);
  FILE *f = fopen(path, "rb");
  if (!f) return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "stage load: cannot open %s", path);
  uint8_t *buf = malloc(STAGE_BYTES + 1);
  size_t got = buf ? fread(buf, 1, STAGE_BYTES + 1, f) : 0;
  fclose(f);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "stage load: out of memory");
  int rc = 0;
  int legacy = got == STAGE_BYTES && !memcmp(buf, STAGE_MAGIC_LEGACY_SUM, 8);
  if (got != STAGE_BYTES || (memcmp(buf, STAGE_MAGIC, 8) && !legacy) ||
      lh_get_le64(buf + STAGE_BYTES - 8) != lh_file_checksum(buf, STAGE_BYTES - 8, legacy))
    rc = lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT, "stage load: %s is not a stage state (%zu bytes)", path, got);
  if (!rc) {
    lh_learner_stage_state t;
    memset(&t, 0, sizeof t);
    uint64_t u[STAGE_N_U64];
    for (int i = 0; i < STAGE_N_U64; i++) u[i] = lh_get_le64(buf + 8 + 8 * i);
    t.index = (uint32_t)u[0], t.began_step = u[1], t.began_version = u[2], t.began_ms = (int64_t)u[3];
    t.episodes = u[4], t.tokens = u[5], t.successes = u[6], t.carried = u[7], t.carry_dropped = u[8];
    const uint8_t *r = buf + 8 + 8 * STAGE_N_U64;
    for (uint32_t k = 0; k < LH_LEARNER_STAGE_RING; k++) {
      uint64_t x = lh_get_le64(r + 8 * k);
      if (!x) continue;
      t.ring_episodes[t.ring_n] = (uint32_t)(x >> 32), t.ring_successes[t.ring_n] = (uint32_t)x;
      t.ring_n++;
    }
    t.ring_at = t.ring_n % LH_LEARNER_STAGE_RING;
    *s = t;
  }
  free(buf);
  return rc;
}

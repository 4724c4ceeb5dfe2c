/* learner: the [learner] section of the INI config.
 *
 * A table lists every key with its type, field and range, so that the
 * parser, the "known keys" hint and the checks cannot drift apart; common's
 * section reader (common/ini_section.h) reads it from the document
 * (common/ini_doc.h) and names the file, line, section and key of every
 * error; db, ckpt_dir and the CURVE files are paths, resolved against the
 * folder of the file they are written in; state_mode, loss_norm and
 * stage_carry are choices. The advantage and the stages have parsers of
 * their own here; the checks across keys name the later key's line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/ini_section.h"
#include "common/limits.h"
#include "learner/internal.h"

static int parse_advantage(const char *v, void *cfg, char *why, size_t why_bytes);
static int parse_stages(const char *v, void *cfg, char *why, size_t why_bytes);
static int parse_ingest_endpoints(const char *v, void *cfg, char *why, size_t why_bytes);
static int parse_expert_parallel(const char *v, void *cfg, char *why, size_t why_bytes);

#define T lh_learner_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_CUSTOM(advantage, parse_advantage, 0),
    LH_INI_KEY_F64(T, baseline_decay, 0, 1, LH_INI_OPEN_MAX),
    LH_INI_KEY_F64(T, clip_eps, 0, 1, LH_INI_OPEN_MIN | LH_INI_OPEN_MAX),
    LH_INI_KEY_F64(T, is_cap, 1, INFINITY, LH_INI_CLOSED),
    LH_INI_KEY_F64(T, entropy_coef, 0, 1e9, LH_INI_CLOSED),
    LH_INI_KEY_U64(T, max_policy_lag, 0, LH_MAX_COUNT),
    LH_INI_KEY_F64(T, lr, 0, 1e9, LH_INI_OPEN_MIN),
    LH_INI_KEY_U64(T, warmup_steps, 0, LH_MAX_COUNT),
    LH_INI_KEY_U64(T, total_steps, 1, LH_MAX_COUNT),
    LH_INI_KEY_F64(T, weight_decay, 0, 1e9, LH_INI_CLOSED),
    LH_INI_KEY_F64(T, grad_clip, 0, 1e9, LH_INI_OPEN_MIN),
    LH_INI_KEY_U64(T, batch_episodes, 1, LH_MAX_BATCH_EPISODES),
    LH_INI_KEY_U64(T, group_size, 1, LH_MAX_GROUP_SIZE),
    LH_INI_KEY_U64(T, train_window, 1, LH_MAX_WINDOW_TOKENS),
    LH_INI_KEY_U64(T, ckpt_every, 1, LH_MAX_COUNT),
    LH_INI_KEY_U64(T, keep_checkpoints, 0, LH_MAX_COUNT),
    LH_INI_KEY_BOOL(T, routing_replay),
    LH_INI_KEY_BOOL(T, share_prefix),
    LH_INI_KEY_BOOL(T, skip_flat_groups),
    LH_INI_KEY_CHOICE(T, state_mode, "exact", "stored"),
    LH_INI_KEY_CHOICE(T, loss_norm, "token", "episode"),
    LH_INI_KEY_U64(T, burn_in, 0, LH_MAX_WINDOW_TOKENS),
    LH_INI_KEY_CUSTOM(stages, parse_stages, LH_ELEARNER_CONFIG_STAGES),
    LH_INI_KEY_CHOICE(T, stage_carry, "train", "drop"),
    LH_INI_KEY_STR(T, ingest_endpoint, 0),
    LH_INI_KEY_CUSTOM(ingest_endpoints, parse_ingest_endpoints, 0),
    LH_INI_KEY_STR(T, weights_pub_endpoint, 0),
    LH_INI_KEY_STR(T, weights_endpoint, 0),
    LH_INI_KEY_PATH(T, curve_secret_key_file, 0),
    LH_INI_KEY_PATH(T, curve_allowed_keys, 0),
    LH_INI_KEY_PATH(T, db, 0),
    LH_INI_KEY_U64(T, max_db_bytes, 0, LH_MAX_BYTES),
    LH_INI_KEY_PATH(T, ckpt_dir, 0),
    LH_INI_KEY_U64(T, abort_after_ms, 1, LH_MAX_IDLE_MS),
    LH_INI_KEY_U64(T, max_backlog_episodes, 0, LH_MAX_COUNT),
    LH_INI_KEY_F64(T, max_stale_share, 0, 1, LH_INI_CLOSED),
    LH_INI_KEY_U64(T, blas_threads, 1, 256),
    LH_INI_KEY_U64(T, max_episode_tokens, 0, LH_MAX_COUNT),
    LH_INI_KEY_U64(T, max_message_bytes, 4096, 64 << 20),
    LH_INI_KEY_U64(T, ingest_queue_bytes, 1, LH_MAX_BYTES),
    LH_INI_KEY_U64(T, retain_versions, 0, LH_MAX_COUNT),
    LH_INI_KEY_U64(T, weights_chunk_bytes, 4096, 16 << 20),
    LH_INI_KEY_CUSTOM(expert_parallel, parse_expert_parallel, 0),
};
#undef T

static const lh_ini_section SECTION = {
    .name = "learner", .keys = KEYS, .n_keys = sizeof KEYS / sizeof KEYS[0],
    .unknown_key_error = LH_ELEARNER_CONFIG_UNKNOWN_KEY, .duplicate_error = LH_ELEARNER_CONFIG_DUPLICATE,
    .value_error = LH_ELEARNER_CONFIG_VALUE, .syntax_error = LH_ELEARNER_CONFIG_FILE};

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
  c->keep_checkpoints = 3;
  c->routing_replay = 0;
  c->share_prefix = 1;
  c->skip_flat_groups = 1;
  c->state_mode = LH_LEARNER_STATE_EXACT;
  c->loss_norm = LH_LEARNER_LOSS_NORM_TOKEN;
  c->burn_in = 64;
  c->n_stages = 0;
  snprintf(c->ingest_endpoint, sizeof c->ingest_endpoint, "tcp://127.0.0.1:5555");
  snprintf(c->weights_pub_endpoint, sizeof c->weights_pub_endpoint, "tcp://127.0.0.1:5556");
  snprintf(c->weights_endpoint, sizeof c->weights_endpoint, "tcp://127.0.0.1:5557");
  snprintf(c->db, sizeof c->db, "replay.db");
  snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "ckpt");
  c->abort_after_ms = 60000;
  c->max_backlog_episodes = 0;
  c->max_stale_share = 0.05;
  c->blas_threads = 1;
  c->max_episode_tokens = (uint64_t)1 << 22;
  c->max_message_bytes = 16u << 20;
  c->ingest_queue_bytes = (uint64_t)1 << 30;
  c->weights_chunk_bytes = 1u << 20;
  c->expert_parallel = 1;
}

int lh_learner_config_ingest_peers(const lh_learner_config *cfg) {
  uint64_t per_peer = LH_LEARNER_INGEST_QUEUE_MESSAGES * (cfg->max_message_bytes ? cfg->max_message_bytes : 1);
  uint64_t n = cfg->ingest_queue_bytes / per_peer;
  return n < 1 ? 1 : n > LH_LEARNER_INGEST_MAX_PEERS ? LH_LEARNER_INGEST_MAX_PEERS : (int)n;
}

static int parse_advantage(const char *v, void *cfg, char *why, size_t why_bytes) {
  lh_learner_adv_kind x = lh_learner_adv_kind_from_name(v);
  if (!x) return snprintf(why, why_bytes, "is not one of grpo, rloo, reinforce"), -1;
  ((lh_learner_config *)cfg)->advantage = x;
  return 0;
}

const char *lh_learner_state_mode_name(lh_learner_state_mode mode) {
  return mode == LH_LEARNER_STATE_STORED ? "stored" : "exact";
}

/* The stages list (learner/stage.c parses it). */
static int parse_stages(const char *v, void *config, char *why, size_t why_bytes) {
  return lh_learner_stages_parse(v, config, why, why_bytes);
}

/* An integer in 1..LH_LEARNER_MAX_EXPERT_PARALLEL, into a uint32_t field
 * (the U64 kind writes 64 bits), worded as the U64 kind words it. */
static int parse_expert_parallel(const char *v, void *config, char *why, size_t why_bytes) {
  uint64_t x;
  if (lh_parse_u64(v, &x) || x < 1 || x > LH_LEARNER_MAX_EXPERT_PARALLEL)
    return snprintf(why, why_bytes, "is not an integer in 1..%d", LH_LEARNER_MAX_EXPERT_PARALLEL), -1;
  ((lh_learner_config *)config)->expert_parallel = (uint32_t)x;
  return 0;
}

/* "tcp://host:port, ..." (learner/ranks.c checks each entry). */
static int parse_ingest_endpoints(const char *v, void *config, char *why, size_t why_bytes) {
  lh_learner_config *cfg = config;
  size_t n = 0;
  if (lh_learner_endpoints_parse(v, &n, why, why_bytes)) return -1;
  snprintf(cfg->ingest_endpoints, sizeof cfg->ingest_endpoints, "%s", v);
  cfg->n_ingest_endpoints = n;
  return 0;
}

int lh_learner_config_read(const lh_ini_doc *doc, lh_learner_config *cfg, lh_errbuf *err) {
  if (!doc || !cfg) return lh_errbuf_set(err, LH_EINVAL, "learner config: NULL document or config");
  lh_learner_config c;
  lh_learner_config_default(&c);
  lh_ini_lines lines;
  LH_TRY(lh_ini_section_read(&SECTION, doc, &c, NULL, &lines, err));
  /* Checks across keys, named by where the later one was written. */
  char where[300];
  if (c.warmup_steps > c.total_steps) {
    lh_ini_later_where(&SECTION, &lines, "warmup_steps", "total_steps", where, sizeof where);
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "%s: [learner] warmup_steps = %llu is above total_steps = %llu",
                         where, (unsigned long long)c.warmup_steps, (unsigned long long)c.total_steps);
  }
  if (c.batch_episodes % c.group_size != 0) {
    lh_ini_later_where(&SECTION, &lines, "batch_episodes", "group_size", where, sizeof where);
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "%s: [learner] batch_episodes = %llu is not a multiple of group_size = %llu "
                         "(a batch holds whole groups)",
                         where, (unsigned long long)c.batch_episodes, (unsigned long long)c.group_size);
  }
  uint64_t per_peer = LH_LEARNER_INGEST_QUEUE_MESSAGES * c.max_message_bytes;
  if (c.ingest_queue_bytes < per_peer) {
    lh_ini_later_where(&SECTION, &lines, "ingest_queue_bytes", "max_message_bytes", where, sizeof where);
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "%s: [learner] ingest_queue_bytes = %llu admits no peer: one connection may queue %d "
                         "messages of max_message_bytes = %llu, %llu bytes",
                         where, (unsigned long long)c.ingest_queue_bytes, LH_LEARNER_INGEST_QUEUE_MESSAGES,
                         (unsigned long long)c.max_message_bytes, (unsigned long long)per_peer);
  }
  for (size_t i = 0; i < c.n_stages; i++)
    if (c.stages[i].batch_episodes % c.group_size != 0) {
      lh_ini_later_where(&SECTION, &lines, "stages", "group_size", where, sizeof where);
      return lh_errbuf_set(err, LH_ELEARNER_CONFIG_STAGES,
                           "%s: [learner] stages: stage %zu batch_episodes=%llu is not a multiple of group_size = %llu",
                           where, i + 1, (unsigned long long)c.stages[i].batch_episodes,
                           (unsigned long long)c.group_size);
    }
  *cfg = c;
  return 0;
}

static int read_doc(const lh_ini_doc *doc, void *cfg, lh_errbuf *err) {
  return lh_learner_config_read(doc, cfg, err);
}

/* A file or text, with this module's codes. */
static const lh_ini_reader READER = {
    .file_error = LH_ELEARNER_CONFIG_FILE, .error = LH_ELEARNER_CONFIG_FILE, .read = read_doc};

int lh_learner_config_parse(const char *text, const char *source, lh_learner_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "learner config: NULL text or config");
  return lh_ini_reader_read(&READER, source, text, cfg, err);
}

int lh_learner_config_load(const char *path, lh_learner_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "learner config: NULL path or config");
  return lh_ini_reader_read(&READER, path, NULL, cfg, err);
}

double lh_learner_lr_at(double lr, uint64_t warmup_steps, uint64_t total_steps, uint64_t step) {
  if (step < warmup_steps) return lr * (double)(step + 1) / (double)warmup_steps;
  if (step >= total_steps || total_steps <= warmup_steps) return 0.0;
  double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
  return lr * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}

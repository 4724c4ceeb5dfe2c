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
static int format_advantage(const void *cfg, char *out, size_t bytes);
static int format_stages(const void *cfg, char *out, size_t bytes);
static int format_ingest_endpoints(const void *cfg, char *out, size_t bytes);
static int format_expert_parallel(const void *cfg, char *out, size_t bytes);

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Every key of [learner], with what it does: the reader, its "known keys"
 * hint and the reference (docs/configuration.md) walk this one table. */
#define T lh_learner_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_CUSTOM(advantage, parse_advantage, 0, format_advantage,
                      "`grpo`, `rloo` or `reinforce`: the advantage of an episode, broadcast to "
                      "its sampled tokens: `grpo` (R - mean) / (std + 1e-6) over its group (the episodes of one "
                      "task seed), `rloo` R minus the mean of the others of its group, `reinforce` R minus a "
                      "running mean of earlier batches."),
    LH_INI_KEY_F64(T, baseline_decay, 0, 1, LH_INI_OPEN_MAX,
                   "The decay of `reinforce`'s running mean of the reward."),
    LH_INI_KEY_F64(T, clip_eps, 0, 1, LH_INI_OPEN_MIN | LH_INI_OPEN_MAX,
                   "PPO's clip: the ratio exp(logp - behaviour logp) is clipped to [1 - clip_eps, 1 + clip_eps]."),
    LH_INI_KEY_F64(T, is_cap, 1, INFINITY, LH_INI_CLOSED,
                   "The importance weight is truncated at this value (`inf`: no truncation)."),
    LH_INI_KEY_F64(T, entropy_coef, 0, 1e9, LH_INI_CLOSED,
                   "Weight of the entropy bonus in the loss (0: none). With `skip_flat_groups` it applies to "
                   "the groups that are trained only."),
    LH_INI_KEY_U64(T, max_policy_lag, 0, LH_MAX_COUNT,
                   "Versions: an episode whose oldest sampled token is more than this many versions behind the "
                   "learner is dropped as stale and counted (`train_steps.dropped_stale`)."),
    LH_INI_KEY_F64(T, lr, 0, 1e9, LH_INI_OPEN_MIN,
                   "Peak learning rate of AdamW: a linear warmup over `warmup_steps`, then a cosine to 0 at "
                   "`total_steps`. `longhaul sft --lr` overrides it for SFT."),
    LH_INI_KEY_U64(T, warmup_steps, 0, LH_MAX_COUNT, "Steps of linear warmup; at most `total_steps`."),
    LH_INI_KEY_U64(T, total_steps, 1, LH_MAX_COUNT,
                   "The step at which the cosine schedule reaches 0; the learning rate is 0 from there on."),
    LH_INI_KEY_F64(T, weight_decay, 0, 1e9, LH_INI_CLOSED,
                   "AdamW's weight decay (not applied to norms, gains and the cross-layer weights)."),
    LH_INI_KEY_F64(T, grad_clip, 0, 1e9, LH_INI_OPEN_MIN, "The global gradient norm is clipped to this value."),
    LH_INI_KEY_U64(T, batch_episodes, 1, LH_MAX_BATCH_EPISODES,
                   "Episodes per step and rank, whole groups: a multiple of `group_size`."),
    LH_INI_KEY_U64(T, group_size, 1, LH_MAX_GROUP_SIZE,
                   "Episodes of one task seed that form a group (the baseline of `grpo` and `rloo`). `[actor] "
                   "group_size` must be the same: `longhaul launch` checks it."),
    LH_INI_KEY_U64(T, train_window, 1, LH_MAX_WINDOW_TOKENS,
                   "Tokens per training window: a long episode is trained window by window, the attention "
                   "state carried from one to the next with its gradient stopped; a window is never cut "
                   "inside an image."),
    LH_INI_KEY_U64(T, ckpt_every, 1, LH_MAX_COUNT,
                   "Steps between checkpoints (rank 0 writes them; one is also written on SIGINT, SIGTERM "
                   "and SIGUSR1). A checkpoint that cannot be written is logged and counted and the learner "
                   "trains on; the next boundary tries again."),
    LH_INI_KEY_U64(T, keep_checkpoints, 0, LH_MAX_COUNT,
                   "The `step-N` folders kept in `ckpt_dir` after each checkpoint, the newest, never the one "
                   "`latest` names; 0 keeps them all. A symbolic link in `ckpt_dir` is never followed: a "
                   "`step-N` link is left alone with a warning, and is not pruned."),
    LH_INI_KEY_BOOL(T, routing_replay,
                    "Reuse the experts each sampled token was routed to by the actor (needs `[actor] "
                    "record_routing`) instead of recomputing top-k, so that training and rollout route alike."),
    LH_INI_KEY_BOOL(T, share_prefix,
                    "In exact mode, the forward-only windows before an episode's first trained window run "
                    "once a step for all the step's episodes whose tokens, images and recorded routing there "
                    "are the same, as a group's shared first observation is; the gradients are those of the "
                    "unshared step bit for bit. And the step's episodes trained in one window (every sampled "
                    "token within `train_window` of the start, no image, a model without `conv`) are merged "
                    "into a prefix tree: each distinct context runs forward and backward once, the gradient "
                    "carried back across each shared part's end, so the gradients are the unshared step's up "
                    "to float rounding and the routers' load counts each context once "
                    "([a step's prefix tree](learner.md#a-steps-prefix-tree)), with `expert_parallel` > 1 too "
                    "(the shared windows are off there)."),
    LH_INI_KEY_BOOL(T, skip_flat_groups,
                    "A group whose rewards are all the same is not trained, since under `grpo` and `rloo` "
                    "each of its advantages is 0: it is dropped as it completes, counted in "
                    "`train_steps.flat_groups`, and the batch fills from other groups. Under `reinforce` it "
                    "has no effect, its advantages being against a running mean. A fleet whose policy solves "
                    "nothing yet takes no step until some group is not flat: the learner says so once, as soon as a "
                    "batch's worth of episodes has been left out with no step run, and its status line counts "
                    "`flat_groups` and `flat_episodes`."),
    LH_INI_KEY_CHOICE(T, state_mode,
                      "Where a training window's attention state comes from: `exact` recomputes it under the "
                      "current weights from the episode's start; `stored` starts a window after a gap from "
                      "the state the actor sent (`[actor] state_interval`) at least `burn_in` tokens before "
                      "it and trains only the windows that hold sampled tokens ([operations](operations.md#"
                      "long-episodes-stored-state)). `longhaul launch` refuses `stored` without `[actor] "
                      "state_interval`.",
                      "exact", "stored"),
    LH_INI_KEY_CHOICE(T, loss_norm,
                      "How the policy loss weighs its tokens: `token`, a mean over the step's sampled tokens; "
                      "`episode`, a mean over its episodes of each one's token mean, so that a long episode "
                      "weighs no more than a short one (for environments whose failures run longer than their "
                      "successes, like `maze`).",
                      "token", "episode"),
    LH_INI_KEY_U64(T, burn_in, 0, LH_MAX_WINDOW_TOKENS,
                   "Tokens re-run without gradient before a window that starts from a stored state "
                   "(`state_mode = stored`)."),
    LH_INI_KEY_CUSTOM(stages, parse_stages, LH_ELEARNER_CONFIG_STAGES, format_stages,
                      "Context-extension stages, separated by commas, each its `max_context` followed by "
                      "`key=value` words: `episodes=N`, `tokens=N`, `success=X/N`, `long_frac=F`, `lr=`, "
                      "`train_window=`, `batch_episodes=` ([operations](operations.md#context-extension-stages))."),
    LH_INI_KEY_CHOICE(T, stage_carry,
                      "Episodes of an earlier stage trained after a stage began: `train` trains them without "
                      "counting them toward the stage, `drop` leaves them out; either way each stage counts "
                      "them (`carried`, `carry_dropped`).",
                      "train", "drop"),
    LH_INI_KEY_STR(T, ingest_endpoint, 0,
                   "Where the learner's ingest ROUTER binds. With several ranks on one host rank r binds its "
                   "port + 10 r (an `ipc://` endpoint becomes `ipc://PATH.rank<r>`)."),
    LH_INI_KEY_CUSTOM(ingest_endpoints, parse_ingest_endpoints, 0, format_ingest_endpoints,
                      "One `tcp://host:port` per rank, in rank order, for learner ranks on several hosts: rank "
                      "r binds entry r, and an actor started with `--learner-rank r` connects to it; "
                      "`ingest_endpoint`'s port + 10 r rule and `[actor] learner_endpoint` are then not used. "
                      "Hosts the actors can reach (`*`, `0.0.0.0` and `[::]` are refused), ports in 1..65535, no "
                      "entry twice, as many entries as ranks ([operations](operations.md#learner-ranks-on-"
                      "several-hosts))."),
    LH_INI_KEY_STR(T, weights_pub_endpoint, 0, "Where rank 0's weights PUB binds (version announcements)."),
    LH_INI_KEY_STR(T, weights_endpoint, 0, "Where rank 0's weights ROUTER binds (chunk requests)."),
    LH_INI_KEY_PATH(T, curve_secret_key_file, 0,
                    "The learner's CURVE secret key (`longhaul keys generate`); with `curve_allowed_keys` the "
                    "ingest ROUTER and both weights sockets are CURVE servers ([security](security.md)). A key "
                    "file that group or others can read is refused."),
    LH_INI_KEY_PATH(T, curve_allowed_keys, 0,
                    "The actors' public keys the learner admits: a file of Z85 keys, one a line, or a folder "
                    "of `.pub` files."),
    LH_INI_KEY_PATH(T, db, 0,
                    "The replay store ([store](store.md)); rank r > 0 keeps `db.rank<r>`. Also where `sft` and "
                    "`eval` write their rows unless `--db` says otherwise."),
    LH_INI_KEY_U64(T, max_db_bytes, 0, LH_MAX_BYTES,
                   "A cap on the store's pages in use (0: none); re-read on SIGHUP. Past 90% of it retention "
                   "drops old payloads and retires old rows; at the cap writes are answered `ACK_RETRY` "
                   "([store](store.md#retention))."),
    LH_INI_KEY_PATH(T, ckpt_dir, 0,
                    "Checkpoints: `step-N` folders and `latest`, which names the newest whole one."),
    LH_INI_KEY_U64(T, abort_after_ms, 1, LH_MAX_IDLE_MS,
                   "The idle sweep: a running episode with no write for this long ends as `aborted`, and an "
                   "ended one still missing segments ends as `error` ([store](store.md#what-the-store-"
                   "accepts))."),
    LH_INI_KEY_U64(T, max_backlog_episodes, 0, LH_MAX_COUNT,
                   "Back-pressure: the untrained episodes at which the actors are held (0: max(1, "
                   "`max_policy_lag`) times `batch_episodes`). The learner shrinks it while too many "
                   "episodes go stale and grows it back."),
    LH_INI_KEY_F64(T, max_stale_share, 0, 1, LH_INI_CLOSED,
                   "When more than this share of the episodes taken in over the last 8 steps were dropped as "
                   "stale, the back-pressure cap shrinks by a quarter (never below one batch); under half of "
                   "it, the cap grows back a group at a time."),
    LH_INI_KEY_U64(T, blas_threads, 1, 256,
                   "The training thread's compute team: OpenMP threads, each running OpenBLAS "
                   "single-threaded. Set whatever `OMP_NUM_THREADS` or `OPENBLAS_NUM_THREADS` say; give a "
                   "learner on a machine of its own more."),
    LH_INI_KEY_U64(T, max_episode_tokens, 0, LH_MAX_COUNT,
                   "Longer episodes are refused at ingest (0: no limit)."),
    LH_INI_KEY_U64(T, max_message_bytes, 4096, 64 << 20,
                   "The largest message the ingest takes from a peer."),
    LH_INI_KEY_U64(T, ingest_queue_bytes, 1, LH_MAX_BYTES,
                   "What the ingest may queue for all peers together. It admits "
                   "`ingest_queue_bytes` / (4 `max_message_bytes`) open connections at once (16 with the "
                   "defaults) and refuses the handshake of one more, which connects again a second later; a "
                   "connection silent for a minute is closed. At least one connection's worth."),
    LH_INI_KEY_U64(T, retain_versions, 0, LH_MAX_COUNT,
                   "Near the `max_db_bytes` cap, the payloads of older versions are dropped, never those of "
                   "the newest max(`retain_versions`, `max_policy_lag` + 2), so no episode a step may still "
                   "admit loses its tokens."),
    LH_INI_KEY_U64(T, weights_chunk_bytes, 4096, 16 << 20,
                   "Weights are served in chunks of this size: actors fetch only the "
                   "chunks that changed, so smaller chunks send less of a model with frozen parts, at more "
                   "messages per version (`bench_sync_delta`)."),
    LH_INI_KEY_CUSTOM(expert_parallel, parse_expert_parallel, 0, format_expert_parallel,
                      "An integer in 1.." STRINGIFY(LH_LEARNER_MAX_EXPERT_PARALLEL) " (1: data-parallel only). Groups of this many "
                      "consecutive learner ranks share out the routed experts; the rank count and `[model] "
                      "experts` must be multiples of it ([operations](operations.md#expert-parallelism))."),
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

/* The custom keys' values as text, for the reference's defaults. */
static int format_advantage(const void *cfg, char *out, size_t bytes) {
  const lh_learner_config *c = cfg;
  return snprintf(out, bytes, "%s", lh_learner_adv_kind_name(c->advantage)) < (int)bytes ? 0 : -1;
}

/* The stages' text is not kept; the reference's defaults have none. */
static int format_stages(const void *cfg, char *out, size_t bytes) {
  const lh_learner_config *c = cfg;
  if (c->n_stages || !bytes) return -1;
  return out[0] = 0, 0;
}

static int format_ingest_endpoints(const void *cfg, char *out, size_t bytes) {
  const lh_learner_config *c = cfg;
  return snprintf(out, bytes, "%s", c->ingest_endpoints) < (int)bytes ? 0 : -1;
}

static int format_expert_parallel(const void *cfg, char *out, size_t bytes) {
  const lh_learner_config *c = cfg;
  return snprintf(out, bytes, "%u", (unsigned)c->expert_parallel) < (int)bytes ? 0 : -1;
}

int lh_learner_config_reference(lh_str *out, lh_errbuf *err) {
  lh_learner_config defaults;
  lh_learner_config_default(&defaults);
  return lh_ini_section_reference(&SECTION, &defaults, out, err);
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

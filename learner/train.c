/* learner: the RL training step over the replay store (learner.h says what
 * a step does). Episodes are read back from the store at training time, so
 * the batcher only holds ids and rewards, and memory stays bounded by one
 * batch's tokens. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

/* Steps over which the stale share is measured (back-pressure). */
#define STALE_WINDOW 8

/* Incomplete groups kept open before the oldest is closed (its actor may
 * have died). */
#define TRAINER_MAX_PENDING_GROUPS 64

/* A sorted set of episode ids. */
typedef struct {
  uint64_t *ids;
  size_t n, cap;
} id_set;

static int set_find(const id_set *s, uint64_t id, size_t *at) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  *at = lo;
  return lo < s->n && s->ids[lo] == id;
}

static int set_add(id_set *s, uint64_t id) {
  size_t at;
  if (set_find(s, id, &at)) return 0;
  if (s->n == s->cap) {
    size_t c = s->cap ? 2 * s->cap : 256;
    uint64_t *p = realloc(s->ids, c * sizeof *p);
    if (!p) return LH_ENOMEM;
    s->ids = p, s->cap = c;
  }
  memmove(s->ids + at + 1, s->ids + at, (s->n - at) * sizeof *s->ids);
  s->ids[at] = id;
  s->n++;
  return 0;
}

struct lh_learner_trainer {
  /* episodes left out of a step (a peer's poison) and episodes beyond
   * their group: counted, a line per interval, whatever their number */
  lh_log_meter left_out, beyond_group;
  lh_model *m;
  lh_store *store;
  lh_learner_config cfg;
  float temperature;
  lh_learner_batcher *batcher;
  lh_model_balancer *balancer;
  lh_model_cache *cache;
  uint64_t step, version, skipped;
  lh_learner_adv_baseline baseline;
  lh_learner_admission_counts admission;
  /* Episode ids are the actors' (hashes, in no order), so what has been
   * used is kept as sets: seen = handed to the batcher in this process;
   * done = trained, dropped or left out, which a checkpoint keeps (an
   * admitted episode still waiting in the batcher is not done: after a
   * resume it is scanned again). */
  id_set seen, done;
  lh_learner_batch_item *items;
  size_t cap_items;
  float *scratch_bias;
  /* The learner's ranks (NULL: one); rank 0 keeps the other ranks' done
   * sets from the last gather for its checkpoint (others[r - 1]). */
  lh_learner_comm *comm;
  int rank;
  /* [learner] expert_parallel > 1: the groups and the model's transport
   * (learner/experts.c); NULL otherwise. */
  lh_learner_experts *experts;
  char run_id[LH_STORE_NAME_BYTES];  /* train_steps.run_id; "" none */
  id_set *others;
  size_t n_others;
  int64_t last_row_ns;  /* when the previous train_steps row (or the trainer) was made */
  /* Back-pressure (learner.h, lh_learner_trainer_backlog): the cap, its
   * ceiling, and the episodes taken in and dropped as stale over the last
   * STALE_WINDOW steps (a ring), with the totals at the previous step. */
  uint64_t backlog_cap, backlog_max;
  uint64_t win_taken[STALE_WINDOW], win_stale[STALE_WINDOW];
  unsigned win_i, win_n;
  uint64_t prev_taken, prev_stale;
  lh_learner_model_limits limits;  /* what the model takes (learner/validate.c) */
  /* Context-extension stages (learner.h): base is the [learner] config as
   * given; cfg holds the stage in force's lr, train_window and batch. */
  lh_learner_config base;
  int has_stages;
  lh_learner_stage_state stage;
  uint64_t stage_dropped_pending;  /* carry drops not yet summed over the ranks */
  int stage_row_replace;           /* the next stages row drops later stages' rows (a resume) */
  int last_skipped;                /* the last step was skipped (its version was not published) */
  uint64_t flat_groups_counted;    /* the batcher's flat groups at the previous train_steps row */
  /* [learner] share_prefix in exact mode: the state before each
   * episode's first trained window, shared by the episodes of a step
   * whose positions before it are the same (learner/shared_prefix.c);
   * NULL: every episode runs its own. */
  lh_learner_prefix_cache *prefixes;
};

/* Test hooks, read at every step after it took its batch: with
 * LH_LEARNER_TEST_STEP_GATE naming a file, the step waits until that file
 * is gone (a test holds a step open for as long as it needs, with no
 * clock); LH_LEARNER_TEST_STEP_DELAY_MS adds that much to every step's own
 * time (counted in its step_ms: a learner slower than its actors, for
 * back-pressure, or a long step for the launcher's stop timeout). */
static void test_step_delay(void) {
  const char *delay = getenv("LH_LEARNER_TEST_STEP_DELAY_MS");
  if (delay && atoi(delay) > 0) usleep((useconds_t)atoi(delay) * 1000u);
}

static void test_step_gate(void) {
  const char *gate = getenv("LH_LEARNER_TEST_STEP_GATE");
  if (!gate || !*gate || access(gate, F_OK) != 0) return;
  LH_INFO("train", "step gate: holding the step while %s exists", gate);
  while (access(gate, F_OK) == 0) usleep(2000);
}

/* Sizes what a batch needs: room for its items and the back-pressure
 * ceiling. One batch waiting per version of lag: two batches deep at lag
 * 2, so the actors fill the next batch while one waits and one trains (one
 * batch deep, the learner idles whenever a batch takes the actors longer
 * than a step). Where the actors' weights trail and episodes go stale, the
 * controller (backlog_update) lowers it. */
static int size_batch(lh_learner_trainer *t) {
  const lh_learner_config *cfg = &t->cfg;
  uint64_t lag = cfg->max_policy_lag ? cfg->max_policy_lag : 1;
  t->backlog_max = cfg->max_backlog_episodes ? cfg->max_backlog_episodes : lag * cfg->batch_episodes;
  if (t->backlog_max < cfg->batch_episodes) t->backlog_max = cfg->batch_episodes;  /* a batch must fit */
  t->backlog_cap = t->backlog_max;
  size_t need = cfg->batch_episodes + cfg->group_size;
  if (need > t->cap_items) {
    lh_learner_batch_item *p = realloc(t->items, need * sizeof *p);
    if (!p) return LH_ENOMEM;
    t->items = p, t->cap_items = need;
  }
  if (t->batcher) lh_learner_batcher_set_batch(t->batcher, cfg->batch_episodes);
  return 0;
}

/* The stage in force's lr, train_window and batch_episodes into cfg. */
static int apply_stage(lh_learner_trainer *t) {
  if (!t->has_stages) return 0;
  lh_learner_stage_params(&t->base, t->stage.index, &t->cfg.lr, &t->cfg.train_window, &t->cfg.batch_episodes);
  t->limits.train_window = t->cfg.train_window;
  return size_batch(t);
}

/* An admitted episode of a flat group (lh_learner_batcher_skip_flat):
 * done with, as a trained one is, so that no scan offers it again. */
static int on_flat(void *ctx, const lh_learner_batch_item *item) {
  lh_learner_trainer *t = ctx;
  return set_add(&t->done, item->episode_id);
}

int lh_learner_trainer_new(lh_model *m, lh_store *store, const lh_learner_config *cfg, float temperature,
                           const lh_learner_state *st, lh_learner_trainer **out, lh_errbuf *err) {
  if (!m || !store || !cfg || !out) return lh_errbuf_set(err, LH_EINVAL, "train: NULL model, store, config or out");
  *out = NULL;
  if (!(temperature >= 0) || !isfinite(temperature))
    return lh_errbuf_set(err, LH_EINVAL, "train: temperature %g is not a finite number >= 0", temperature);
  lh_learner_trainer *t = calloc(1, sizeof *t);
  if (!t) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  t->m = m, t->store = store, t->cfg = *cfg, t->base = *cfg;
  t->left_out.component = t->beyond_group.component = "train";
  t->last_row_ns = lh_now_ns();
  t->temperature = temperature > 0 ? temperature : 1.0f;
  lh_learner_adv_baseline_init(&t->baseline, cfg->baseline_decay);
  if (st) {
    t->step = st->step, t->version = st->version;
    t->skipped = st->skipped_steps, t->baseline = st->baseline, t->admission = st->admission;
  }
  const lh_model_config *mc = lh_model_get_config(m);
  lh_learner_model_limits_init(&t->limits, mc, cfg);
  t->prev_taken = t->admission.admitted + t->admission.dropped_stale;
  t->prev_stale = t->admission.dropped_stale;
  t->has_stages = cfg->n_stages > 0;
  if (t->has_stages) {
    /* A resume goes on at the state's stage; lh_learner_trainer_load_done
     * replaces this with the checkpoint's stage file when it has one. */
    uint32_t index = st && st->stage_index < cfg->n_stages ? st->stage_index : 0;
    lh_learner_stage_state_init(&t->stage, index, t->step, t->version);
    t->stage_row_replace = 1;
  }
  int src = apply_stage(t);
  if (!t->has_stages) src = size_batch(t);
  t->scratch_bias = calloc((size_t)mc->layers * (size_t)mc->experts, sizeof(float));
  t->batcher = lh_learner_batcher_new(t->cfg.batch_episodes, cfg->group_size, TRAINER_MAX_PENDING_GROUPS, err);
  int rc = 0;
  if (!t->batcher) rc = err ? err->code : LH_ENOMEM;
  else if (src || !t->items || !t->scratch_bias) rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  else if (!lh_model_grads(m) && (rc = lh_model_enable_training(m)))
    lh_errbuf_set(err, rc, "train: cannot enable training: %s", lh_strerror(rc));
  else if ((rc = lh_model_balancer_new(mc, &t->balancer)))
    lh_errbuf_set(err, rc, "train: cannot create the balancer: %s", lh_strerror(rc));
  else if (cfg->share_prefix && cfg->state_mode == LH_LEARNER_STATE_EXACT)
    rc = lh_learner_prefix_cache_new(lh_model_state_floats(mc), &t->prefixes, err);
  if (!rc)
    lh_learner_batcher_skip_flat(t->batcher, cfg->skip_flat_groups && cfg->advantage != LH_LEARNER_ADV_REINFORCE,
                                 on_flat, t);
  if (rc) {
    lh_learner_trainer_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void lh_learner_trainer_free(lh_learner_trainer *t) {
  if (!t) return;
  lh_learner_batcher_free(t->batcher);
  lh_model_balancer_free(t->balancer);
  lh_model_cache_free(t->cache);
  lh_learner_prefix_cache_free(t->prefixes);
  lh_learner_experts_close(t->experts);
  free(t->seen.ids);
  free(t->done.ids);
  free(t->items);
  free(t->scratch_bias);
  for (size_t i = 0; i < t->n_others; i++) free(t->others[i].ids);
  free(t->others);
  free(t);
}

int lh_learner_trainer_set_comm(lh_learner_trainer *t, lh_learner_comm *c, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  const lh_model_config *mc = lh_model_get_config(t->m);
  if (lh_learner_comm_size(c) > 1 && mc->balance == LH_BALANCE_QUANTILE)
    return lh_errbuf_set(err, LH_ELEARNER_COMM,
                         "train: [model] balance = quantile needs every token's router scores and cannot run on %d "
                         "learner ranks; use balance = bias, or one learner",
                         lh_learner_comm_size(c));
  t->comm = c;
  t->rank = lh_learner_comm_rank(c);
  lh_learner_experts_close(t->experts);
  t->experts = NULL;
  if (t->cfg.expert_parallel > 1) {
    LH_TRY(lh_learner_experts_open(c, t->cfg.expert_parallel, mc->experts, &t->experts, err));
    LH_TRY(lh_learner_experts_attach(t->experts, t->m, err));
  }
  return 0;
}

lh_learner_experts *lh_learner_trainer_experts(lh_learner_trainer *t) { return t ? t->experts : NULL; }

void lh_learner_trainer_set_run(lh_learner_trainer *t, const char *run_id) {
  if (t) snprintf(t->run_id, sizeof t->run_id, "%s", run_id ? run_id : "");
}

uint64_t lh_learner_trainer_version(const lh_learner_trainer *t) { return t ? t->version : 0; }

const lh_learner_stage_state *lh_learner_trainer_stage(const lh_learner_trainer *t) {
  return t && t->has_stages ? &t->stage : NULL;
}

size_t lh_learner_trainer_backlog(const lh_learner_trainer *t) {
  return t ? lh_learner_batcher_ready(t->batcher) : 0;
}
uint64_t lh_learner_trainer_backlog_cap(const lh_learner_trainer *t) { return t ? t->backlog_cap : 0; }

uint64_t lh_learner_trainer_left_out(const lh_learner_trainer *t) { return t ? t->left_out.total : 0; }

double lh_learner_trainer_stale_share(const lh_learner_trainer *t) {
  if (!t) return NAN;
  uint64_t taken = 0, stale = 0;
  for (unsigned i = 0; i < t->win_n; i++) taken += t->win_taken[i], stale += t->win_stale[i];
  /* An episode taken in before the window may go stale inside it, so the
   * ratio is capped at 1. */
  return taken ? fmin(1.0, (double)stale / (double)taken) : NAN;
}

/* After each step: the step's intake joins the window, and the cap moves.
 * Too many stale drops mean episodes wait too long behind the backlog, so
 * the cap shrinks by a quarter (never below one batch, or no batch could
 * form while the actors hold); a share well under the bound lets it grow
 * back a group at a time, so a learner that keeps up gets the most data. */
static void backlog_update(lh_learner_trainer *t) {
  uint64_t taken = t->admission.admitted + t->admission.dropped_stale, stale = t->admission.dropped_stale;
  t->win_taken[t->win_i] = taken - t->prev_taken;
  t->win_stale[t->win_i] = stale - t->prev_stale;
  t->win_i = (t->win_i + 1) % STALE_WINDOW;
  if (t->win_n < STALE_WINDOW) t->win_n++;
  t->prev_taken = taken, t->prev_stale = stale;
  double share = lh_learner_trainer_stale_share(t);
  if (isnan(share)) return;
  uint64_t least = t->cfg.batch_episodes;
  if (share > t->cfg.max_stale_share && t->backlog_cap > least) {
    uint64_t cut = t->backlog_cap / 4 > t->cfg.group_size ? t->backlog_cap / 4 : t->cfg.group_size;
    t->backlog_cap = t->backlog_cap - least > cut ? t->backlog_cap - cut : least;
  } else if (share <= t->cfg.max_stale_share / 2 && t->backlog_cap < t->backlog_max) {
    t->backlog_cap += t->cfg.group_size;
    if (t->backlog_cap > t->backlog_max) t->backlog_cap = t->backlog_max;
  }
}
const lh_learner_admission_counts *lh_learner_trainer_admission(const lh_learner_trainer *t) {
  return t ? &t->admission : NULL;
}

void lh_learner_trainer_state(const lh_learner_trainer *t, lh_learner_state *st) {
  if (!t || !st) return;
  st->step = t->step, st->version = t->version, st->ingest_position = t->done.n;
  st->skipped_steps = t->skipped, st->baseline = t->baseline, st->admission = t->admission;
  st->stage_index = t->has_stages ? t->stage.index : 0;
}

typedef struct {
  lh_learner_trainer *t;
  size_t added;
  int rc;
  lh_errbuf *err;
} scan_ctx;

static Longhaul__Outcome row_outcome(const lh_episode_row *row) {
  if (row->outcome != LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED) return row->outcome;
  return row->status == LH_EPISODE_TRUNCATED ? LONGHAUL__OUTCOME__OUTCOME_TRUNCATED
                                             : LONGHAUL__OUTCOME__OUTCOME_ERROR;
}

static int on_ready(void *ctx, const lh_episode_row *row) {
  scan_ctx *c = ctx;
  lh_learner_trainer *t = c->t;
  size_t at;
  if (set_find(&t->seen, row->id, &at) || set_find(&t->done, row->id, &at)) return 0;
  /* Staleness over the sampled tokens; an episode without any sampled
   * token is as fresh as the learner (it has nothing to train on). */
  uint64_t oldest = row->has_versions ? row->min_version : t->version;
  lh_learner_admission a = lh_learner_admission_check(t->version, oldest, row_outcome(row),
                                                      t->cfg.max_policy_lag, &t->admission);
  lh_learner_batch_item it = {.episode_id = row->id, .group_id = row->group_id,
                              .reward = (float)row->reward, .admitted = a == LH_LEARNER_ADMIT,
                              .oldest_version = oldest};
  int rc = lh_learner_batcher_add(t->batcher, &it, c->err);
  if (rc == LH_ELEARNER_BATCH_GROUP_FULL) {
    /* A group_size mismatch with the actors: train what fits, say so. */
    lh_log_meter_warn(&t->beyond_group, "episode=%llu group=%llu beyond group_size=%llu: skipped",
                      (unsigned long long)row->id, (unsigned long long)row->group_id,
                      (unsigned long long)t->cfg.group_size);
    rc = set_add(&t->done, row->id);
  } else if (!rc && a != LH_LEARNER_ADMIT) {
    rc = set_add(&t->done, row->id);
  }
  if (!rc) rc = set_add(&t->seen, row->id);
  if (rc == LH_ENOMEM) rc = lh_errbuf_set(c->err, rc, "train: out of memory");
  if (rc) return c->rc = rc;
  if (a != LH_LEARNER_ADMIT)
    LH_DEBUG("train", "episode=%llu dropped=%s oldest_version=%llu version=%llu",
             (unsigned long long)row->id, lh_learner_admission_name(a), (unsigned long long)oldest,
             (unsigned long long)t->version);
  c->added++;
  return 0;
}

int lh_learner_trainer_scan(lh_learner_trainer *t, size_t *added, lh_errbuf *err) {
  if (added) *added = 0;
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  f.status_mask = (1u << LH_EPISODE_COMPLETE) | (1u << LH_EPISODE_TRUNCATED) | (1u << LH_EPISODE_ABORTED) |
                  (1u << LH_EPISODE_ERROR);
  scan_ctx c = {.t = t, .err = err};
  int rc = lh_store_episodes(t->store, &f, on_ready, &c, NULL, err);
  if (!rc) rc = c.rc;
  if (added) *added = c.added;
  return rc;
}

int lh_learner_trainer_offer(lh_learner_trainer *t, const uint64_t *ids, size_t n, size_t *added, lh_errbuf *err) {
  if (added) *added = 0;
  if (!t || (n && !ids)) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or ids");
  scan_ctx c = {.t = t, .err = err};
  for (size_t i = 0; i < n; i++) {
    size_t at;
    if (set_find(&t->seen, ids[i], &at) || set_find(&t->done, ids[i], &at)) continue;
    lh_episode_row row;
    int rc = lh_store_episode_get(t->store, ids[i], &row, err);
    /* Gone: retention retired it at the cap (store.h,
     * lh_store_retire_episodes), which it does only to episodes that can
     * no longer be trained. */
    if (rc == LH_ESTORE_NO_EPISODE) continue;
    if (rc) return rc;
    /* Ready as lh_episode_filter.ready_only says: ended, every expected
     * segment stored with its payload. */
    if (!row.has_end || row.status == LH_EPISODE_RUNNING || row.segments_received != row.segment_count ||
        row.payloads_dropped)
      continue;
    on_ready(&c, &row);
    if (c.rc) return c.rc;
  }
  if (added) *added = c.added;
  return 0;
}

/* Per-window buffers: the model sees tokens[start..end) and position i
 * predicts episode token start+i+1, so the loss arrays are shifted by one. */
typedef struct {
  int32_t *tokens, *targets;
  float *logp, *blogp, *adv, *dlogp, *entropy, *dentropy;
  uint8_t *mask;
  uint32_t *ver;
  int32_t *replay;  /* (layers, n, topk) with routing replay, else NULL */
  float *state_a, *state_b;
  size_t cap;
} window_bufs;

static void bufs_free(window_bufs *w) {
  free(w->tokens), free(w->targets), free(w->logp), free(w->blogp), free(w->adv), free(w->dlogp);
  free(w->entropy), free(w->dentropy), free(w->mask), free(w->ver), free(w->state_a), free(w->state_b);
  free(w->replay);
}

static int bufs_alloc(window_bufs *w, size_t n, size_t state_floats) {
  memset(w, 0, sizeof *w);
  w->cap = n;
  w->tokens = malloc(n * sizeof(int32_t)), w->targets = malloc(n * sizeof(int32_t));
  w->logp = malloc(n * sizeof(float)), w->blogp = malloc(n * sizeof(float));
  w->adv = malloc(n * sizeof(float)), w->dlogp = malloc(n * sizeof(float));
  w->entropy = malloc(n * sizeof(float)), w->dentropy = malloc(n * sizeof(float));
  w->mask = malloc(n), w->ver = malloc(n * sizeof(uint32_t));
  w->state_a = calloc(state_floats, sizeof(float)), w->state_b = calloc(state_floats, sizeof(float));
  if (!w->tokens || !w->targets || !w->logp || !w->blogp || !w->adv || !w->dlogp || !w->entropy ||
      !w->dentropy || !w->mask || !w->ver || !w->state_a || !w->state_b)
    return LH_ENOMEM;
  return 0;
}

typedef struct {
  double loss, policy_loss, clip_sum, lag_sum, lag_max, logp_diff;
  double kl_sum, entropy_sum, ratio_sum, ratio_max;  /* PPO diagnostics, sums over sampled tokens */
  size_t tokens, current;
  double logp_diff_sum;    /* sum of |logp - behavior logp| over the current-version tokens */
  size_t run_positions;    /* positions the forward ran over (windows and burn-ins) */
  size_t states_used;      /* windows started from an actor's stored state */
  size_t burn_ins;         /* gaps before a trained window bridged (stored state or recomputation) */
  size_t zero_adv_tokens;  /* sampled tokens trained with an advantage of exactly 0 */
  int nonfinite;  /* a window's log-probabilities were not finite: skip the step */
} step_acc;

/* The images of window [start, end) with window positions (the token after
 * each <img>); pixels[i] are the episode's, converted to [0,1] once per
 * episode. Every image sits inside one window, since a window is one
 * forward pass: lh_model_window_end cuts the windows around them. */
static int window_images(const lh_learner_episode *ep, float *const *pixels, size_t start, size_t end,
                         lh_model_image *out) {
  int n = 0;
  for (size_t i = 0; i < ep->n_images; i++) {
    size_t at = (size_t)ep->image_offsets[i] + 1;
    if (at < start || at >= end) continue;
    const Longhaul__Image *im = ep->images[i];
    out[n++] = (lh_model_image){.at = (int)(at - start), .height = (int)im->height, .width = (int)im->width,
                                .pixels = pixels[i]};
  }
  return n;
}

/* The model's inputs for positions [start, end) of the episode into w:
 * tokens, the shifted targets and loss arrays, and the routing replay.
 * Returns how many of the window's targets were sampled. */
static size_t fill_window(const lh_learner_episode *ep, const float *adv, size_t start, size_t end,
                          window_bufs *w) {
  size_t n = end - start, sampled = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = start + i + 1;
    w->tokens[i] = (int32_t)ep->tokens[start + i];
    int has = j < ep->n;
    w->mask[i] = has ? ep->loss_mask[j] : 0;
    w->targets[i] = w->mask[i] ? (int32_t)ep->tokens[j] : -1;
    w->blogp[i] = has ? ep->behavior_logp[j] : 0;
    w->adv[i] = has && adv ? adv[j] : 0;
    w->ver[i] = has ? ep->policy_version[j] : 0;
    sampled += w->mask[i];
  }
  /* Routing replay: the experts the actor used for each input token,
   * [token][layer][slot] in the segment, (layers, T, topk) for the model. */
  if (w->replay) {
    size_t L = ep->routed_layers, K = ep->routed_topk;
    for (size_t l = 0; l < L; l++)
      for (size_t i = 0; i < n; i++)
        for (size_t q = 0; q < K; q++)
          w->replay[(l * n + i) * K + q] = (int32_t)ep->routed_experts[((start + i) * L + l) * K + q];
  }
  return sampled;
}

/* Whether position at lies among an image's patches (a state there would
 * split the image between a burn-in and what follows). */
static int inside_image(const lh_learner_episode *ep, uint64_t at, const lh_model_config *mc) {
  for (size_t i = 0; i < ep->n_images; i++) {
    const Longhaul__Image *im = ep->images[i];
    uint64_t first = ep->image_offsets[i] + 1;
    uint64_t patches = mc->patch ? (uint64_t)(im->width / (uint32_t)mc->patch) * (im->height / (uint32_t)mc->patch) : 0;
    if (at > first && at < first + patches) return 1;
  }
  return 0;
}

/* Stored-state mode (docs/learner.md "Stored state"): brings w->state_a,
 * which holds the state after *at tokens under the current weights, to the
 * state after start tokens. The nearest state the actor sent at least
 * burn_in tokens before start replaces it when that is later than *at;
 * the tokens from there to start are run forward without gradient (the
 * burn-in), in pieces that end on window edges, so that no image is cut. */
static int burn_in(lh_learner_trainer *t, const lh_learner_episode *ep, size_t start, size_t *at,
                   window_bufs *w, float **pixels, lh_model_image *imgs, const lh_model_span *spans,
                   size_t n_spans, step_acc *acc, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t state_floats = lh_model_state_floats(mc), W = t->cfg.train_window;
  size_t latest = start > t->cfg.burn_in ? start - t->cfg.burn_in : 0;
  acc->burn_ins++;
  /* The latest state the store holds at most burn_in tokens before the
   * window and not among an image's patches (a few tries: states are
   * rarely inside images). It replaces the one held only when later. */
  for (int tries = 0; tries < 8 && latest > *at; tries++) {
    uint64_t off = 0;
    int found = lh_store_segment_state(t->store, ep->episode_id, latest, state_floats, &off, w->state_b, err);
    if (found < 0) return found;
    if (!found || off <= *at) break;
    if (inside_image(ep, off, mc)) {
      latest = (size_t)off - 1;
      continue;
    }
    for (size_t i = 0; i < state_floats; i++)
      if (!isfinite(w->state_b[i]))
        return lh_errbuf_set(err, LH_ELEARNER_MODEL_INPUT, "train: episode %llu's stored state at token %llu holds %g",
                             (unsigned long long)ep->episode_id, (unsigned long long)off, (double)w->state_b[i]);
    if (off >= ep->n)
      return lh_errbuf_set(err, LH_ELEARNER_MODEL_INPUT, "train: episode %llu's stored state at token %llu is past "
                           "its %zu tokens", (unsigned long long)ep->episode_id, (unsigned long long)off, ep->n);
    float *s = w->state_a;
    w->state_a = w->state_b, w->state_b = s;
    *at = (size_t)off;
    acc->states_used++;
    break;
  }
  /* The pieces are the training windows (lh_model_window_end, from the
   * episode's start) from the one that holds *at, so a burn-in cuts the
   * episode where training does. */
  size_t ws = 0, we = 0;
  do {
    ws = we;
    we = lh_model_window_end(ws, ep->n, W, spans, n_spans);
  } while (we <= *at && we < ep->n);
  we = ws;
  while (*at < start) {
    ws = we;
    we = lh_model_window_end(ws, ep->n, W, spans, n_spans);
    if (we <= *at) break;  /* no window past *at: cannot happen for start <= n */
    size_t end = we < start ? we : start;
    fill_window(ep, NULL, *at, end, w);
    int32_t offs[2] = {0, (int32_t)(end - *at)};
    int n_imgs = imgs ? window_images(ep, pixels, *at, end, imgs) : 0;
    lh_model_batch b = {.n_tokens = (int)(end - *at), .tokens = w->tokens, .targets = w->targets, .n_seq = 1,
                        .seq_offsets = offs, .n_images = n_imgs, .images = n_imgs ? imgs : NULL,
                        .state_in = *at ? w->state_a : NULL, .replay_experts = w->replay,
                        .temperature = t->temperature};
    LH_TRY(lh_model_forward(t->m, &b, &t->cache, NULL, NULL, w->state_b, err));
    acc->run_positions += end - *at;
    float *s = w->state_a;
    w->state_a = w->state_b, w->state_b = s;
    *at = end;
  }
  return 0;
}

/* The start of ep's first training window whose targets hold a sampled
 * token (the windows before it are forward only); 0 when that is the
 * first window or none holds one. */
static size_t first_trained_window(const lh_learner_episode *ep, size_t train_window, const lh_model_span *spans,
                                   size_t n_spans) {
  size_t first = 0;
  while (first + 1 < ep->n && !ep->loss_mask[first + 1]) first++;
  if (first + 1 >= ep->n) return 0;  /* token first + 1 is the first sampled: a target of the window holding first */
  for (size_t start = 0, end; start < ep->n; start = end) {
    end = lh_model_window_end(start, ep->n, train_window, spans, n_spans);
    if (first < end) return start;
  }
  return 0;
}

/* Forward and backward of one episode, window by window, accumulating
 * gradients (every window's loss is normalised by the batch's N). */
static int train_episode(lh_learner_trainer *t, const lh_learner_episode *ep, const float *adv, double N,
                         step_acc *acc, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t state_floats = lh_model_state_floats(mc);
  /* A window is train_window tokens, or an image longer than that which
   * starts it (lh_model_window_end). */
  size_t W = t->cfg.train_window > (size_t)mc->max_patches ? t->cfg.train_window : (size_t)mc->max_patches;
  if (W > ep->n) W = ep->n;
  window_bufs w;
  int rc = bufs_alloc(&w, W, state_floats);
  if (rc) {
    bufs_free(&w);
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for a window of %zu tokens", W);
  }
  if (t->cfg.routing_replay && ep->routed_experts) {
    if (ep->routed_layers != (uint32_t)mc->layers || ep->routed_topk != (uint32_t)mc->topk) {
      bufs_free(&w);
      return lh_errbuf_set(err, LH_ELEARNER_TRAIN,
                           "train: episode %llu records routing of %u layers x top-%u, the model has %d x top-%d",
                           (unsigned long long)ep->episode_id, ep->routed_layers, ep->routed_topk, mc->layers,
                           mc->topk);
    }
    w.replay = malloc((size_t)mc->layers * W * (size_t)mc->topk * sizeof(int32_t));
    if (!w.replay) {
      bufs_free(&w);
      return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for routing replay");
    }
  }
  float **pixels = NULL;
  lh_model_image *imgs = NULL;
  lh_model_span *spans = NULL;
  if (ep->n_images) {
    pixels = calloc(ep->n_images, sizeof *pixels);
    imgs = malloc(ep->n_images * sizeof *imgs);
    spans = malloc(ep->n_images * sizeof *spans);
    for (size_t i = 0; pixels && imgs && i < ep->n_images; i++) {
      const Longhaul__Image *im = ep->images[i];
      size_t n_px = (size_t)im->width * im->height;
      if (!(pixels[i] = malloc(3 * n_px * sizeof(float)))) break;
      lh_model_pixels_from_u8(im->pixels.data, n_px, im->channels, pixels[i]);
    }
    if (!pixels || !imgs || !spans || !pixels[ep->n_images - 1])
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for the images of episode %llu",
                         (unsigned long long)ep->episode_id);
  }
  size_t n_spans = spans ? lh_learner_episode_spans(ep, (uint32_t)mc->patch, spans) : 0;
  /* Windows after the last sampled token train nothing and carry nothing
   * forward: neither mode runs them. */
  size_t last_sampled = 0;
  for (size_t j = ep->n; j-- > 1;)
    if (ep->loss_mask[j]) {
      last_sampled = j;
      break;
    }
  int stored = t->cfg.state_mode == LH_LEARNER_STATE_STORED;
  size_t at = 0;  /* w.state_a holds the state after the first `at` tokens (zero at 0) */
  lh_learner_ppo_params pp = {t->cfg.clip_eps, t->cfg.is_cap, t->cfg.entropy_coef};
  /* Exact mode with shared prefixes: the windows before the first one
   * that trains are forward only; their state may already be this step's
   * (another member of the group ran them), or is kept for the others. */
  size_t shared_at = 0;
  uint64_t shared_key = 0;
  int with_routing = w.replay != NULL;
  if (!rc && t->prefixes && !t->experts && (shared_at = first_trained_window(ep, t->cfg.train_window, spans, n_spans)) > 0) {
    shared_key = lh_learner_prefix_key(ep, shared_at, with_routing);
    const float *st = lh_learner_prefix_cache_get(t->prefixes, ep, shared_key, shared_at, with_routing);
    if (st) {
      memcpy(w.state_a, st, state_floats * sizeof *w.state_a);
      at = shared_at;
      shared_key = 0;
    }
  }
  size_t end = 0;
  for (size_t start = 0; start < ep->n && !rc; start = end) {
    end = lh_model_window_end(start, ep->n, t->cfg.train_window, spans, n_spans);
    if (start >= last_sampled) break;  /* the window's targets are start+1..end: none sampled from here */
    if (!stored && end <= at) continue;  /* run by another member of the group: its state is in state_a */
    if (shared_key && start == shared_at && at == start) {
      /* the prefix's state, for the group's other members (without
       * memory for it they run their own) */
      (void)lh_learner_prefix_cache_put(t->prefixes, ep, shared_key, shared_at, with_routing, w.state_a);
      shared_key = 0;
    }
    size_t n = end - start;
    size_t sampled = fill_window(ep, adv, start, end, &w);
    /* Stored-state mode trains the windows that hold sampled tokens and
     * starts each after a gap from a stored state and its burn-in. */
    if (stored && !sampled) continue;
    if (at != start) {
      rc = burn_in(t, ep, start, &at, &w, pixels, imgs, spans, n_spans, acc, err);
      if (rc) break;
      fill_window(ep, adv, start, end, &w);
    }
    int32_t offs[2] = {0, (int32_t)n};
    int n_imgs = imgs ? window_images(ep, pixels, start, end, imgs) : 0;
    lh_model_batch b = {.n_tokens = (int)n, .tokens = w.tokens, .targets = w.targets, .n_seq = 1,
                        .seq_offsets = offs, .n_images = n_imgs, .images = n_imgs ? imgs : NULL,
                        .state_in = at ? w.state_a : NULL,
                        .replay_experts = w.replay, .temperature = t->temperature};
    rc = lh_model_forward(t->m, &b, &t->cache, w.logp, NULL, w.state_b, err);
    if (rc) break;
    acc->run_positions += n;
    at = end;
    rc = lh_model_balancer_observe_cache(t->balancer, t->m, t->cache);
    if (rc) {
      lh_errbuf_set(err, rc, "train: balancer: %s", lh_strerror(rc));
      break;
    }
    for (size_t i = 0; i < n && sampled; i++)
      if (w.mask[i] && !isfinite(w.logp[i])) acc->nonfinite = 1, sampled = 0;
    if (sampled) {
      /* The entropy is computed by the forward pass anyway: read it for
       * the step's diagnostics even without an entropy bonus. */
      int has_entropy = lh_model_cache_entropy(t->cache, w.entropy) == 0;
      if (!has_entropy && pp.entropy_coef > 0) {
        rc = lh_errbuf_set(err, LH_ELEARNER_TRAIN, "train: the forward pass gave no entropy");
        break;
      }
      lh_learner_ppo_input in = {.n = n, .logp = w.logp, .behavior_logp = w.blogp, .advantage = w.adv,
                                 .loss_mask = w.mask, .version = w.ver, .current_version = t->version,
                                 .entropy = has_entropy ? w.entropy : NULL, .normaliser = N};
      double loss;
      lh_learner_ppo_stats ps;
      rc = lh_learner_ppo_loss(&pp, &in, &loss, w.dlogp, &ps, err);
      if (rc) break;
      for (size_t i = 0; i < n; i++) w.dentropy[i] = w.mask[i] ? (float)ps.dloss_dentropy : 0.0f;
      rc = lh_model_backward(t->m, t->cache, w.dlogp, pp.entropy_coef > 0 ? w.dentropy : NULL, err);
      if (rc) break;
      acc->loss += loss;
      acc->policy_loss += ps.policy_loss;
      acc->clip_sum += ps.clip_frac * (double)ps.tokens;
      acc->kl_sum += ps.approx_kl * (double)ps.tokens;
      acc->entropy_sum += has_entropy ? ps.entropy_mean * (double)ps.tokens : NAN;
      acc->ratio_sum += ps.ratio_mean * (double)ps.tokens;
      if (ps.ratio_max > acc->ratio_max) acc->ratio_max = ps.ratio_max;
      acc->tokens += ps.tokens;
      for (size_t i = 0; i < n; i++) acc->zero_adv_tokens += w.mask[i] && w.adv[i] == 0.0f;
      if (ps.current_tokens) {
        acc->current += ps.current_tokens;
        acc->logp_diff_sum += ps.logp_diff_mean * (double)ps.current_tokens;
        if (ps.logp_diff_max > acc->logp_diff) acc->logp_diff = ps.logp_diff_max;
      }
      for (size_t i = 0; i < n; i++) {
        if (!w.mask[i]) continue;
        double lag = t->version >= w.ver[i] ? (double)(t->version - w.ver[i]) : 0.0;
        acc->lag_sum += lag;
        if (lag > acc->lag_max) acc->lag_max = lag;
      }
    }
    float *s = w.state_a;
    w.state_a = w.state_b, w.state_b = s;
  }
  for (size_t i = 0; pixels && i < ep->n_images; i++) free(pixels[i]);
  free(pixels);
  free(imgs);
  free(spans);
  bufs_free(&w);
  return rc;
}

/* Sums what every rank's batch gave, in place, before the clip and the
 * optimizer: the gradients (one flat buffer), the routers' expert counts
 * (so the bias update and MaxVio see the global loads), the loss sums and
 * the non-finite flag (so a skipped step is skipped on every rank), and the
 * largest lag and alignment figures. */
static int reduce_step(lh_learner_trainer *t, step_acc *acc, lh_errbuf *err) {
  if (t->experts) LH_TRY(lh_learner_experts_reduce_grads(t->experts, t->m, err));
  else LH_TRY(lh_learner_comm_allreduce_backend_f32(t->comm, lh_model_grads(t->m), lh_model_n_floats(t->m), err));
  const lh_model_config *mc = lh_model_get_config(t->m);
  double *counts, *pairs;
  int rc = lh_model_balancer_counts(t->balancer, &counts, &pairs);
  if (rc) return lh_errbuf_set(err, rc, "train: balancer counts: %s", lh_strerror(rc));
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, counts, (size_t)mc->layers * (size_t)mc->experts,
                                       LH_LEARNER_COMM_SUM, err));
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, pairs, (size_t)mc->layers, LH_LEARNER_COMM_SUM, err));
  double sum[10] = {acc->loss, acc->policy_loss, acc->clip_sum, acc->lag_sum, (double)acc->tokens,
                    (double)acc->current, (double)acc->nonfinite, acc->kl_sum, acc->entropy_sum,
                    acc->ratio_sum};
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, sum, 10, LH_LEARNER_COMM_SUM, err));
  double mx[3] = {acc->lag_max, acc->logp_diff, acc->ratio_max};
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, mx, 3, LH_LEARNER_COMM_MAX, err));
  acc->kl_sum = sum[7], acc->entropy_sum = sum[8], acc->ratio_sum = sum[9], acc->ratio_max = mx[2];
  acc->loss = sum[0], acc->policy_loss = sum[1], acc->clip_sum = sum[2], acc->lag_sum = sum[3];
  acc->tokens = (size_t)sum[4], acc->current = (size_t)sum[5], acc->nonfinite = sum[6] > 0;
  acc->lag_max = mx[0], acc->logp_diff = mx[1];
  return 0;
}

/* A waiting episode gone stale (lh_learner_batcher_drop_stale): done with,
 * and counted as dropped for staleness. */
static int on_stale(void *ctx, const lh_learner_batch_item *item) {
  lh_learner_trainer *t = ctx;
  if (set_add(&t->done, item->episode_id)) return LH_ENOMEM;
  t->admission.dropped_stale++;
  if (t->admission.admitted) t->admission.admitted--;
  return 0;
}

/* Forward and backward of every episode of the batch into the gradients.
 * An episode whose forward or backward fails (data the checks let through,
 * a kernel refusing its input) is quarantined: it ends as error in the
 * store with the reason, is marked in skip, and the batch is run again
 * without it from zeroed gradients and the balancer's counts as they were,
 * so its partial windows leave no trace. Only running out of memory ends
 * the step. With several ranks the normaliser N stays the one agreed
 * before (it counted the quarantined episode's tokens). */
static int train_all(lh_learner_trainer *t, lh_learner_episode **eps, const float *advs, uint8_t *skip, size_t m,
                     double N, step_acc *acc, lh_errbuf *err) {
  double *counts = NULL, *pairs = NULL;
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t nc = (size_t)mc->layers * (size_t)mc->experts, np = (size_t)mc->layers;
  LH_TRY(lh_model_balancer_counts(t->balancer, &counts, &pairs));
  double *saved = malloc((nc + np) * sizeof *saved);
  if (!saved) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  memcpy(saved, counts, nc * sizeof *saved);
  memcpy(saved + nc, pairs, np * sizeof *saved);
  int rc = 0;
  for (int again = 1; again && !rc;) {
    again = 0;
    memset(acc, 0, sizeof *acc);
    memcpy(counts, saved, nc * sizeof *saved);
    memcpy(pairs, saved + nc, np * sizeof *saved);
    rc = lh_model_zero_grads(t->m);
    if (rc) rc = lh_errbuf_set(err, rc, "train: cannot zero the gradients: %s", lh_strerror(rc));
    lh_learner_prefix_cache_clear(t->prefixes);  /* a pass begun again computes its prefixes again */
    /* With experts across ranks a rank's pass is not its own: its shard
     * holds the group's gradients, so a pass begun again is begun again by
     * the whole group (after each rank has served the others to the end). */
    int failed_here = 0;
    for (size_t i = 0; i < m && !rc && !again; i++) {
      if (skip[i]) continue;
      float *adv = malloc(eps[i]->n * sizeof *adv);
      if (!adv) {
        rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
        break;
      }
      lh_learner_episode_broadcast(eps[i], advs[i], adv);
      lh_errbuf e;
      int erc = train_episode(t, eps[i], adv, N, acc, &e);
      free(adv);
      if (erc == LH_ENOMEM) rc = lh_errbuf_set(err, erc, "%s", e.msg);
      else if (erc) {
        LH_WARN("train", "episode=%llu quarantined: %s", (unsigned long long)eps[i]->episode_id, e.msg);
        lh_errbuf ig;
        lh_store_episode_set_status(t->store, eps[i]->episode_id, LH_EPISODE_ERROR, e.msg, &ig);
        skip[i] = 1, again = 1, failed_here = 1;
      }
    }
    if (!rc && t->experts) {
      rc = lh_learner_experts_drain(t->experts, t->m, err);
      if (!rc) rc = lh_learner_experts_any(t->experts, failed_here, &again, err);
    }
  }
  free(saved);
  return rc;
}

/* The stage's stages row (rank 0; a store that cannot take it loses the
 * row, not the step, as for train_steps). */
static int stage_row(lh_learner_trainer *t, lh_errbuf *err) {
  if (t->rank != 0 || !t->run_id[0]) return 0;
  const lh_learner_stage_state *g = &t->stage;
  lh_store_stage row;
  memset(&row, 0, sizeof row);
  memcpy(row.run_id, t->run_id, sizeof row.run_id);
  row.stage = g->index, row.max_context = t->base.stages[g->index].max_context;
  row.began_step = g->began_step, row.began_version = g->began_version, row.began_ms = g->began_ms;
  row.episodes = g->episodes, row.tokens = g->tokens, row.successes = g->successes;
  row.carried = g->carried, row.carry_dropped = g->carry_dropped;
  int rc = lh_store_put_stage(t->store, &row, t->stage_row_replace, err);
  if (rc == LH_ESTORE_FULL || rc == LH_ESTORE_READONLY) {
    LH_WARN("train", "stages row of stage %u not stored: %s", g->index, err->msg);
    return 0;
  }
  if (!rc) t->stage_row_replace = 0;
  return rc;
}

/* After a step: the stage's row, and the next stage when this one has
 * trained what it must. The next begins at the version the step made (the
 * one published next, announced with the new stage). */
static int stage_turn(lh_learner_trainer *t, lh_errbuf *err) {
  LH_TRY(stage_row(t, err));
  if (!lh_learner_stage_done(&t->base, &t->stage)) return 0;
  const lh_learner_stage_state old = t->stage;
  const lh_learner_stage *next = &t->base.stages[old.index + 1];
  lh_learner_stage_state_init(&t->stage, old.index + 1, t->step, t->version + (t->last_skipped ? 1 : 0));
  if (apply_stage(t)) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for stage %u's batch", old.index + 1);
  LH_INFO("train",
          "stage begins index=%u max_context=%llu long_frac=%.3f step=%llu version=%llu lr=%.3g train_window=%llu "
          "batch_episodes=%llu after stage=%u episodes=%llu tokens=%llu successes=%llu carried=%llu carry_dropped=%llu",
          t->stage.index, (unsigned long long)next->max_context, next->long_frac, (unsigned long long)t->step,
          (unsigned long long)t->version, t->cfg.lr, (unsigned long long)t->cfg.train_window,
          (unsigned long long)t->cfg.batch_episodes, old.index, (unsigned long long)old.episodes,
          (unsigned long long)old.tokens, (unsigned long long)old.successes, (unsigned long long)old.carried,
          (unsigned long long)old.carry_dropped);
  return stage_row(t, err);
}

/* One batch, if one is ready (*took = 1); *stepped = 1 when it trained. */
/* ---- one step, phase by phase ---------------------------------------------
 * step_once takes a batch (take_batch), reads its episodes back
 * (read_batch), computes the gradient and moves the model (optimize),
 * counts what was trained (count_trained), writes the train_steps row
 * (write_row) and lets the stage advance (stage_after). */

/* A step's per-episode scratch, one allocation for the batch of n items:
 * the first m entries of eps, segs, n_segs, rewards, advs, item_of,
 * success, skip and earlier are the episodes read back (m <= n); the all_
 * arrays are over every item of the batch. */
typedef struct {
  size_t n, m;
  void *block;
  lh_learner_episode **eps;
  Longhaul__Segment ***segs;
  size_t *n_segs, *item_of;
  uint64_t *all_keys;
  float *rewards, *advs, *all_rewards, *all_advs;
  int *success;
  uint8_t *skip;     /* episodes quarantined by train_all */
  uint8_t *earlier;  /* an earlier stage's episode, carried (learner.h, stage_carry) */
} step_batch;

static void *carve(char **at, size_t bytes) {
  void *p = *at;
  *at += (bytes + 15) & ~(size_t)15;
  return p;
}

static int batch_alloc(step_batch *b, size_t n, lh_errbuf *err) {
  memset(b, 0, sizeof *b);
  size_t sizes[] = {sizeof *b->eps, sizeof *b->segs, sizeof *b->n_segs, sizeof *b->item_of,
                    sizeof *b->all_keys, sizeof *b->rewards, sizeof *b->advs, sizeof *b->all_rewards,
                    sizeof *b->all_advs, sizeof *b->success, 1, 1};
  size_t bytes = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (n > SIZE_MAX / 32 / sizes[i]) return lh_errbuf_set(err, LH_ENOMEM, "train: a batch of %zu is too large", n);
    bytes += (n * sizes[i] + 15) & ~(size_t)15;
  }
  b->block = calloc(1, bytes ? bytes : 1);
  if (!b->block) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for a batch of %zu", n);
  char *at = b->block;
  b->n = n;
  b->eps = carve(&at, n * sizeof *b->eps);
  b->segs = carve(&at, n * sizeof *b->segs);
  b->n_segs = carve(&at, n * sizeof *b->n_segs);
  b->item_of = carve(&at, n * sizeof *b->item_of);
  b->all_keys = carve(&at, n * sizeof *b->all_keys);
  b->rewards = carve(&at, n * sizeof *b->rewards);
  b->advs = carve(&at, n * sizeof *b->advs);
  b->all_rewards = carve(&at, n * sizeof *b->all_rewards);
  b->all_advs = carve(&at, n * sizeof *b->all_advs);
  b->success = carve(&at, n * sizeof *b->success);
  b->skip = carve(&at, n);
  b->earlier = carve(&at, n);
  return 0;
}

static void batch_free(step_batch *b) {
  for (size_t i = 0; b->block && i < b->n; i++) {
    lh_learner_episode_free(b->eps[i]);
    lh_store_segments_free(b->segs[i], b->n_segs[i]);
  }
  free(b->block);
  memset(b, 0, sizeof *b);
}

/* Drops the groups gone stale while waiting, then takes a batch into
 * t->items (*n of them): 1 when taken, 0 when none is ready (on every
 * rank, with several). */
static int take_batch(lh_learner_trainer *t, int multi, size_t *n, lh_errbuf *err) {
  *n = 0;
  /* Groups that went stale while waiting (actors faster than the learner)
   * leave first, so the batch is made of the freshest groups instead. */
  uint64_t min_version = t->version > t->cfg.max_policy_lag ? t->version - t->cfg.max_policy_lag : 0;
  long stale = lh_learner_batcher_drop_stale(t->batcher, min_version, on_stale, t);
  if (stale < 0) return lh_errbuf_set(err, (int)stale, "train: out of memory");
  if (stale)
    LH_DEBUG("train", "dropped %ld waiting episodes gone stale at version %llu", stale,
             (unsigned long long)t->version);
  /* With several ranks, a step is taken only when every rank has a batch
   * (the same test as lh_learner_batcher_take's), so no rank trains alone
   * and every rank makes the same number of steps. */
  if (multi) {
    double all_ready = lh_learner_batcher_ready(t->batcher) >= t->cfg.batch_episodes;
    LH_TRY(lh_learner_comm_allreduce_f64(t->comm, &all_ready, 1, LH_LEARNER_COMM_MIN, err));
    if (all_ready < 1) return 0;
  }
  int ready = lh_learner_batcher_take(t->batcher, t->items, t->cap_items, n, err);
  if (ready < 0) return ready;
  if (multi && (!ready || *n == 0))
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "train: rank %d said a batch was ready but has none", t->rank);
  return ready && *n > 0;
}

/* Reads back and joins every episode of the batch into b (b->m of them);
 * one that does not join is marked error in the store and left out, one
 * gone stale or of an earlier stage dropped as the config says. */
static int read_batch(lh_learner_trainer *t, step_batch *b, lh_errbuf *err) {
  size_t m = 0;
  int rc = 0;
  for (size_t i = 0; i < b->n; i++) {
    lh_episode_row row;
    lh_errbuf e;
    uint64_t id = t->items[i].episode_id;
    b->all_rewards[i] = t->items[i].reward;
    b->all_keys[i] = t->items[i].group_id;
    if (set_add(&t->done, id)) {
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
      break;
    }
    int jr = lh_store_episode_get(t->store, id, &row, &e);
    /* Staleness again at training time: an episode admitted when it
     * arrived may have waited in the batcher while the version moved on
     * (actors faster than the learner). One no longer stored was retired
     * at the store's cap, which takes only episodes whose payloads
     * retention dropped: of versions no step admits, so stale as well. */
    if (jr == LH_ESTORE_NO_EPISODE ||
        (!jr && row.has_versions && t->version - row.min_version > t->cfg.max_policy_lag &&
         row.min_version <= t->version)) {
      t->admission.dropped_stale++;
      if (t->admission.admitted) t->admission.admitted--;
      continue;
    }
    /* An episode of an earlier stage (begun before the stage's first
     * version): carried or dropped, never counted toward the stage. */
    int before = !jr && t->has_stages && row.has_versions && row.min_version < t->stage.began_version;
    if (before && t->base.stage_carry == LH_LEARNER_CARRY_DROP) {
      t->stage_dropped_pending++;
      LH_DEBUG("train", "episode=%llu of an earlier stage dropped (stage_carry = drop)", (unsigned long long)id);
      continue;
    }
    b->earlier[m] = (uint8_t)before;
    if (!jr) jr = lh_store_episode_segments_array(t->store, id, &b->segs[m], &b->n_segs[m], NULL, &e);
    if (!jr) jr = lh_learner_episode_join(b->segs[m], b->n_segs[m], row.tokens, &b->eps[m], &e);
    /* The join takes the episode to be the one its segments say: a member
     * of a shared prefix with no segment of its own would read as its
     * leader's first tokens, under the leader's id. */
    if (!jr && b->eps[m]->episode_id != id)
      jr = lh_errbuf_set(&e, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu reads as episode %llu's tokens alone (no segment of its own)",
                         (unsigned long long)id, (unsigned long long)b->eps[m]->episode_id);
    /* An episode the model cannot be run on as the actor ran it (another
     * routing shape, experts it lacks, an image across windows) is left
     * out, not trained on without what the policy saw: whatever the store
     * holds, it cannot end the learner. */
    if (!jr) jr = lh_learner_check_episode(b->eps[m], &t->limits, &e);
    if (jr) {
      lh_log_meter_warn(&t->left_out, "episode=%llu left out: %s", (unsigned long long)id, e.msg);
      lh_errbuf ig;
      lh_store_episode_set_status(t->store, id, LH_EPISODE_ERROR, e.msg, &ig);
      lh_learner_episode_free(b->eps[m]);
      b->eps[m] = NULL;
      lh_store_segments_free(b->segs[m], b->n_segs[m]);
      b->segs[m] = NULL;
      b->n_segs[m] = 0;
      continue;
    }
    b->rewards[m] = t->items[i].reward;
    b->item_of[m] = i;
    b->success[m] = row.outcome == LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
    m++;
  }
  b->m = m;
  return rc;
}

/* The step's statistics from its sums and gradient norm. */
static void step_figures(const step_acc *acc, double norm, lh_learner_train_stats *st) {
  st->loss = acc->loss, st->policy_loss = acc->policy_loss, st->grad_norm = norm, st->tokens = acc->tokens;
  st->run_positions = acc->run_positions, st->states_used = acc->states_used, st->burn_ins = acc->burn_ins;
  st->zero_adv_tokens = acc->zero_adv_tokens;
  st->logp_diff_mean = acc->current ? acc->logp_diff_sum / (double)acc->current : NAN;
  st->lag_mean = acc->tokens ? acc->lag_sum / (double)acc->tokens : 0, st->lag_max = acc->lag_max;
  st->logp_diff = acc->current ? acc->logp_diff : NAN, st->current_tokens = acc->current;
  st->clip_frac = acc->tokens ? acc->clip_sum / (double)acc->tokens : 0;
  double tok = acc->tokens ? (double)acc->tokens : NAN;
  st->approx_kl = acc->kl_sum / tok, st->entropy = acc->entropy_sum / tok, st->iw_mean = acc->ratio_sum / tok;
  st->iw_max = acc->tokens ? acc->ratio_max : NAN;
}

/* Advantages, forward and backward over the batch, the gradient summed
 * over ranks, then AdamW and the balancer (or, when the loss or the
 * gradient is not finite, the step skipped and counted). gN is the
 * sampled tokens of every rank's batch, > 0, and gE its episodes with
 * any. */
static int optimize(lh_learner_trainer *t, step_batch *b, double gN, double gE, int multi,
                    double lr, lh_learner_train_stats *st, lh_errbuf *err) {
  int rc = 0;
  /* Advantages are over every episode of the batch's groups, trained or
   * not (a stale member's reward still says how hard its task was); each
   * trained episode takes its own item's value. */
  if (b->m > 0)
    rc = lh_learner_advantages(t->cfg.advantage, b->all_rewards, b->all_keys, b->n, &t->baseline, b->all_advs, err);
  for (size_t i = 0; i < b->m && !rc; i++) b->advs[i] = b->all_advs[b->item_of[i]];
  /* loss_norm = episode: the token mean over gN becomes a mean over
   * episodes, each its own tokens' mean, by scaling each advantage (the
   * clipped objective is linear in it). Without it a group's long failed
   * episodes outweigh its short successes on the tokens they share (the
   * tool call's syntax), and the policy unlearns that syntax. */
  if (!rc && t->cfg.loss_norm == LH_LEARNER_LOSS_NORM_EPISODE)
    for (size_t i = 0; i < b->m; i++)
      b->advs[i] = (float)(b->advs[i] * lh_learner_episode_scale(b->eps[i]->sampled, gN, gE));
  step_acc acc = {0};
  if (!rc) rc = train_all(t, b->eps, b->advs, b->skip, b->m, gN, &acc, err);
  if (!rc && multi) rc = reduce_step(t, &acc, err);
  if (rc) return rc;
  const lh_backend *be = lh_model_backend(t->m);
  double sq = 0;
  if (t->experts) rc = lh_learner_experts_grad_squares(t->experts, t->m, &sq, err);
  else rc = be->sum_squares(be->context, &sq, lh_model_grads(t->m), lh_model_n_floats(t->m));
  double norm = sqrt(sq);
  step_figures(&acc, norm, st);
  if (!rc && (acc.nonfinite || !isfinite(acc.loss) || !isfinite(norm))) {
    st->skipped = 1;
    t->skipped++;
    LH_WARN("train", "step=%llu skipped: loss=%g grad_norm=%g not finite", (unsigned long long)t->step, acc.loss,
            norm);
    /* The step's routing statistics go to a scratch bias, not the model. */
    rc = lh_model_balancer_step(t->balancer, t->scratch_bias);
  } else if (!rc) {
    lh_adamw_params p = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = (float)t->cfg.weight_decay,
                         .grad_scale = norm > t->cfg.grad_clip ? (float)(t->cfg.grad_clip / norm) : 1.0f,
                         .step = (int64_t)(t->step - t->skipped + 1)};
    rc = lh_model_adamw_step(t->m, &p);
    if (!rc) rc = lh_model_balancer_step_model(t->balancer, t->m);
    if (!rc) t->version++;
  }
  if (rc) lh_errbuf_set(err, rc, "train: optimizer or balancer step failed: %s", lh_strerror(rc));
  return rc;
}

/* What the step trained, for the row and the stage: the episodes trained,
 * their rewards and successes; the stage's own episodes trained, their
 * tokens and successes, and the earlier stages' carried and dropped
 * (learner.h, stages). */
typedef struct {
  double rsum, succ, trained, dropped_stale;
  double own, own_tokens, own_succ, carried, carry_dropped;
  double flat_groups;  /* left out as flat since the previous step (every rank's) */
  uint64_t flat_now;   /* this rank's batcher's count, for the next step's */
  double zero_adv_tokens;  /* sampled tokens trained with an advantage of 0 (every rank's) */
} step_counts;

/* Counts what this rank trained, summed over every rank's batch when sum. */
static int count_trained(lh_learner_trainer *t, const step_batch *b, int sum, size_t zero_adv_tokens, step_counts *c,
                         lh_errbuf *err) {
  double rsum = 0;
  size_t succ = 0, trained = 0;
  double own = 0, own_tokens = 0, own_succ = 0, carried = 0, carry_dropped = (double)t->stage_dropped_pending;
  for (size_t i = 0; i < b->m; i++) {
    if (b->skip[i]) continue;
    rsum += b->rewards[i], succ += (size_t)b->success[i], trained++;
    /* An episode with no sampled token trained nothing: it does not count. */
    if (b->earlier[i]) carried++;
    else if (b->eps[i]->sampled) own++, own_tokens += (double)b->eps[i]->n, own_succ += b->success[i];
  }
  uint64_t flat = 0;
  lh_learner_batcher_flat(t->batcher, &flat, NULL);
  double v[11] = {rsum, (double)succ, (double)trained, (double)t->admission.dropped_stale, own, own_tokens,
                  own_succ, carried, carry_dropped, (double)(flat - t->flat_groups_counted), (double)zero_adv_tokens};
  /* The train_steps row's figures over every rank's batch. */
  if (sum) LH_TRY(lh_learner_comm_allreduce_f64(t->comm, v, 11, LH_LEARNER_COMM_SUM, err));
  *c = (step_counts){.rsum = v[0], .succ = (double)(size_t)v[1], .trained = (double)(size_t)v[2],
                     .dropped_stale = v[3], .own = v[4], .own_tokens = v[5], .own_succ = v[6],
                     .carried = v[7], .carry_dropped = v[8], .flat_groups = v[9], .flat_now = flat,
                     .zero_adv_tokens = v[10]};
  return 0;
}

/* Each expert's share of the step's routed (token, slot) assignments per
 * layer: the balancer's load of the step (its counts, summed over ranks,
 * over their total), in double and summing to 1. A layer that routed
 * nothing, or no memory for the loads, leaves the row without them; the
 * caller frees row->expert_load. */
static void row_loads(lh_learner_trainer *t, const lh_model_config *mc, lh_store_train_step *row) {
  double *load = t->rank == 0 && row->layers && mc->experts > 0 && mc->experts <= LH_STORE_MAX_EXPERTS
                     ? malloc((size_t)row->layers * (size_t)mc->experts * sizeof *load)
                     : NULL;
  float *share = load ? malloc((size_t)mc->experts * sizeof *share) : NULL;
  int loads_ok = share != NULL;
  for (uint32_t l = 0; loads_ok && l < row->layers; l++) {
    double *dst = load + (size_t)l * (size_t)mc->experts, sum = 0;
    loads_ok = lh_model_balancer_load(t->balancer, (int)l, share) == 0;
    for (int x = 0; loads_ok && x < mc->experts; x++) sum += (dst[x] = share[x]);
    for (int x = 0; loads_ok && sum > 0 && x < mc->experts; x++) dst[x] /= sum;
    loads_ok = loads_ok && sum > 0;
  }
  free(share);
  if (loads_ok) row->experts = (uint32_t)mc->experts, row->expert_load = load;
  else free(load);
}

/* The train_steps row of the step just taken; rank 0 writes it, the
 * others' stores hold episodes only. A full or read-only store loses the
 * row, not the step: the model has moved on and training goes on. */
static int write_row(lh_learner_trainer *t, const lh_learner_train_stats *st, double dropped_stale, lh_errbuf *err) {
  lh_store_train_step row;
  memset(&row, 0, sizeof row);
  row.step = st->step, row.version = st->version, row.loss = st->loss, row.reward_mean = st->reward_mean;
  memcpy(row.run_id, t->run_id, sizeof row.run_id);
  row.success_rate = st->success_rate, row.tokens = st->tokens, row.episodes = (uint32_t)st->episodes;
  row.positions = st->positions;
  row.dropped_stale = (uint32_t)dropped_stale, row.lag_mean = st->lag_mean;
  row.lag_max = st->lag_max, row.logp_diff = st->logp_diff, row.grad_norm = st->grad_norm, row.lr = st->lr;
  row.skipped = st->skipped, row.step_ms = st->step_ms, row.busy_frac = st->busy_frac;
  row.approx_kl = st->approx_kl, row.entropy = st->entropy, row.clip_frac = st->clip_frac;
  row.iw_mean = st->iw_mean, row.iw_max = st->iw_max;
  row.flat_groups = st->flat_groups, row.zero_adv_tokens = st->zero_adv_tokens;
  backlog_update(t);
  row.stale_share = lh_learner_trainer_stale_share(t), row.backlog_cap = t->backlog_cap;
  const lh_model_config *mc = lh_model_get_config(t->m);
  row.layers = (uint32_t)(mc->layers < LH_STORE_MAX_LAYERS ? mc->layers : LH_STORE_MAX_LAYERS);
  for (uint32_t l = 0; l < row.layers; l++) row.maxvio[l] = lh_model_balancer_maxvio(t->balancer, (int)l);
  for (uint32_t l = 0; l < row.layers; l++) row.dead[l] = lh_model_balancer_dead(t->balancer, (int)l);
  snprintf(row.balance, sizeof row.balance, "%s", lh_balance_name(mc->balance));
  row.balance_ms = lh_model_balancer_ms(t->balancer);
  row_loads(t, mc, &row);
  int rc = t->rank == 0 ? lh_store_put_train_step(t->store, &row, NULL, err) : 0;
  free((void *)row.expert_load);
  if (rc == LH_ESTORE_FULL || rc == LH_ESTORE_READONLY) {
    LH_WARN("train", "train_steps row of step %llu not stored: %s", (unsigned long long)st->step, err->msg);
    rc = 0;
  }
  return rc;
}

/* The stage counts what the step trained of its own and of earlier
 * stages, and may turn. */
static int stage_after(lh_learner_trainer *t, const lh_learner_train_stats *st, const step_counts *c,
                       lh_errbuf *err) {
  if (!t->has_stages) return 0;
  t->stage_dropped_pending = 0;
  t->last_skipped = st->skipped;
  if (!st->skipped)
    lh_learner_stage_count(&t->stage, (uint64_t)c->own, (uint64_t)c->own_tokens, (uint64_t)c->own_succ,
                           (uint64_t)c->carried, (uint64_t)c->carry_dropped);
  else
    t->stage.carry_dropped += (uint64_t)c->carry_dropped;
  return stage_turn(t, err);
}

static int step_once(lh_learner_trainer *t, int *took, int *stepped, lh_learner_train_stats *stats,
                     lh_errbuf *err) {
  *took = 0;
  size_t n = 0;
  int multi = lh_learner_comm_size(t->comm) > 1;
  int ready = take_batch(t, multi, &n, err);
  if (ready <= 0) return ready;
  *took = 1;
  test_step_gate();
  int64_t t0 = lh_now_ns();
  test_step_delay();
  step_batch b;
  LH_TRY(batch_alloc(&b, n, err));
  int rc = read_batch(t, &b, err);
  size_t N = 0, positions = 0, E = 0;
  for (size_t i = 0; i < b.m; i++)
    N += b.eps[i]->sampled, positions += b.eps[i]->n, E += b.eps[i]->sampled > 0;
  /* The loss is a mean over the sampled tokens of every rank's batch (or
   * over its episodes: loss_norm). A rank with nothing to train on still
   * takes part (its gradient is 0). */
  double g[2] = {(double)N, (double)E};
  if (!rc && multi) rc = lh_learner_comm_allreduce_f64(t->comm, g, 2, LH_LEARNER_COMM_SUM, err);
  double gN = g[0];
  lh_learner_train_stats st = {.step = t->step, .episodes = b.m, .positions = positions};
  double lr = lh_learner_lr_at(t->cfg.lr, t->cfg.warmup_steps, t->cfg.total_steps, t->step);
  st.lr = lr;
  double reduce_ms0 = lh_learner_comm_backend_ms(t->comm);
  lh_model_expert_traffic x0, x1;
  lh_model_expert_traffic_get(t->m, &x0);
  if (!rc && gN > 0) rc = optimize(t, &b, gN, g[1], multi, lr, &st, err);
  lh_model_expert_traffic_get(t->m, &x1);
  st.exchange_ms = (double)(x1.transport_ns - x0.transport_ns) / 1e6;
  st.serve_ms = (double)(x1.serve_ns - x0.serve_ns) / 1e6;
  st.exchange_bytes = x1.bytes - x0.bytes;
  step_counts c = {0};
  if (!rc) rc = count_trained(t, &b, multi && gN > 0, st.zero_adv_tokens, &c, err);
  batch_free(&b);
  if (rc) return rc;
  size_t m = (size_t)c.trained;
  if (multi && gN > 0) st.episodes = m;
  st.allreduce_ms = lh_learner_comm_backend_ms(t->comm) - reduce_ms0;
  st.reward_mean = m ? c.rsum / (double)m : 0;
  st.success_rate = m ? c.succ / (double)m : 0;
  st.flat_groups = (uint64_t)c.flat_groups;
  st.zero_adv_tokens = (size_t)c.zero_adv_tokens;
  if (gN == 0) return 0;  /* nothing to train on (on any rank): no step */
  t->flat_groups_counted = c.flat_now;
  t->step++;
  st.version = t->version;
  int64_t row_ns = lh_now_ns();
  st.step_ms = (double)(row_ns - t0) / 1e6;
  /* Busy: this step's time over the wall time since the previous row. */
  double since_ms = (double)(row_ns - t->last_row_ns) / 1e6;
  st.busy_frac = since_ms > 0 ? fmin(1.0, st.step_ms / since_ms) : 1.0;
  t->last_row_ns = row_ns;
  LH_TRY(write_row(t, &st, c.dropped_stale, err));
  LH_TRY(stage_after(t, &st, &c, err));
  if (stats) *stats = st;
  *stepped = 1;
  return 0;
}

int lh_learner_trainer_step(lh_learner_trainer *t, int *stepped, lh_learner_train_stats *stats, lh_errbuf *err) {
  int local = 0, took = 1;
  if (!stepped) stepped = &local;
  *stepped = 0;
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  /* Batches whose episodes all went stale (or did not join) are passed
   * over, so a backlog drains without a step each. */
  while (took && !*stepped) LH_TRY(step_once(t, &took, stepped, stats, err));
  return 0;
}

/* LHDONE02: the checksum is XXH3-64; an LHDONE01 file (lh_hash64) still
 * loads. */
#define DONE_MAGIC "LHDONE02"
#define DONE_MAGIC_LEGACY_SUM "LHDONE01"

/* Writes set as a checksummed id list at path. */
static int write_done_file(const id_set *set, const char *path, lh_errbuf *err) {
  size_t bytes = 16 + 8 * set->n + 8;
  uint8_t *buf = malloc(bytes);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory saving %zu episode ids", set->n);
  memcpy(buf, DONE_MAGIC, 8);
  lh_put_le64(buf + 8, set->n);
  for (size_t i = 0; i < set->n; i++) lh_put_le64(buf + 16 + 8 * i, set->ids[i]);
  lh_put_le64(buf + bytes - 8, lh_file_checksum(buf, bytes - 8, 0));
  FILE *f = fopen(path, "wb");
  int rc = 0;
  if (!f || fwrite(buf, 1, bytes, f) != bytes || fflush(f) || fsync(fileno(f)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s", path);
  if (f && fclose(f) && !rc) rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot close %s", path);
  free(buf);
  return rc;
}

/* The done file of rank r inside a checkpoint directory. */
static void done_path(const char *dir, int rank, char *path, size_t size) {
  if (rank == 0) snprintf(path, size, "%s/%s", dir, LH_LEARNER_EPISODES_FILE);
  else snprintf(path, size, "%s/episodes_done.rank%d.bin", dir, rank);
}

/* The balancer's state (model/balance.c) beside the done lists, so that a
 * resumed run balances as an unbroken one; a checkpoint without the file
 * (written before it existed) starts the balancer afresh. */
#define BALANCER_FILE "balancer.bin"

static int save_balancer(const lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/" BALANCER_FILE, dir);
  size_t n = lh_model_balancer_state_bytes(t->balancer);
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "checkpoint: no memory for the balancer's state");
  int rc = lh_model_balancer_state_get(t->balancer, buf, n);
  FILE *f = rc ? NULL : fopen(path, "wb");
  if (!rc && (!f || fwrite(buf, 1, n, f) != n || fflush(f)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(errno));
  else if (rc)
    rc = lh_errbuf_set(err, rc, "checkpoint: the balancer's state: %s", lh_strerror(rc));
  if (f && fclose(f) && !rc)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(errno));
  free(buf);
  return rc;
}

static int load_balancer(lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/" BALANCER_FILE, dir);
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? 0 : lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s", path, strerror(errno));
  size_t n = lh_model_balancer_state_bytes(t->balancer);
  unsigned char *buf = malloc(n + 1);
  int rc = buf ? 0 : lh_errbuf_set(err, LH_ENOMEM, "checkpoint: no memory for the balancer's state");
  size_t got = buf ? fread(buf, 1, n + 1, f) : 0; /* one more: a longer file is refused */
  if (!rc && (rc = lh_model_balancer_state_set(t->balancer, buf, got)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT,
                       "checkpoint: %s is not this model's balancer state (%zu bytes, %zu expected: %s)", path, got, n,
                       lh_strerror(rc));
  fclose(f);
  free(buf);
  return rc;
}

/* The checkpoint's stage (DIR/stage.bin). A checkpoint without one (from
 * before stages counted episodes, or from a run without stages) begins
 * the state's stage afresh at the resumed step; a stage past the config's
 * last is its last. */
static int load_stage(lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  if (!t->has_stages) return 0;
  lh_learner_stage_state g;
  lh_errbuf e;
  int rc = lh_learner_stage_load(dir, &g, &e);
  if (rc == LH_ELEARNER_STATE_IO) {
    LH_INFO("train", "no stage file in %s: stage %u begins at step %llu", dir, t->stage.index,
            (unsigned long long)t->step);
    return 0;
  }
  if (rc) return lh_errbuf_set(err, rc, "checkpoint: %s", e.msg);
  if (g.index >= t->base.n_stages) {
    LH_WARN("train", "checkpoint stage %u is past the config's %zu stages: the last one is in force", g.index,
            t->base.n_stages);
    lh_learner_stage_state_init(&g, (uint32_t)t->base.n_stages - 1, t->step, t->version);
  }
  t->stage = g;
  t->stage_row_replace = 1;
  if (apply_stage(t)) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for stage %u's batch", g.index);
  LH_INFO("train", "resumed stage index=%u began_step=%llu began_version=%llu episodes=%llu tokens=%llu", g.index,
          (unsigned long long)g.began_step, (unsigned long long)g.began_version, (unsigned long long)g.episodes,
          (unsigned long long)g.tokens);
  return 0;
}

int lh_learner_trainer_save_done(const lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  if (!t || !dir) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or directory");
  char path[2 * LH_LEARNER_TEXT_BYTES];
  done_path(dir, 0, path, sizeof path);
  LH_TRY(write_done_file(&t->done, path, err));
  LH_TRY(save_balancer(t, dir, err));
  if (t->has_stages) LH_TRY(lh_learner_stage_save(dir, &t->stage, err));
  /* The other ranks' sets as of the last gather (rank 0 only). */
  for (size_t r = 1; r <= t->n_others; r++) {
    done_path(dir, (int)r, path, sizeof path);
    LH_TRY(write_done_file(&t->others[r - 1], path, err));
  }
  return 0;
}

/* Adds the ids of the done file at path; expected is the count it must
 * hold, or UINT64_MAX for whatever its checksummed header says. */
static int load_done_file(lh_learner_trainer *t, const char *path, uint64_t expected, lh_errbuf *err) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT,
                         "checkpoint: cannot open %s: %s (a rank's list is missing when the checkpoint's run had "
                         "fewer learner ranks; resume with at most that many)",
                         path, strerror(errno));
  uint8_t head[16];
  int rc = 0;
  size_t head_got = fread(head, 1, 16, f);
  int legacy = head_got == 16 && !memcmp(head, DONE_MAGIC_LEGACY_SUM, 8);
  if (head_got != 16 || (memcmp(head, DONE_MAGIC, 8) && !legacy) ||
      (expected != UINT64_MAX && lh_get_le64(head + 8) != expected))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT,
                       "checkpoint: %s is not the episode list of this state (%llu episodes expected)", path,
                       (unsigned long long)expected);
  uint64_t count = rc ? 0 : lh_get_le64(head + 8);
  if (!rc && count > (SIZE_MAX - 24) / 8)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s claims %llu episodes", path, (unsigned long long)count);
  size_t bytes = 16 + 8 * (size_t)count + 8;
  uint8_t *buf = rc ? NULL : malloc(bytes);
  if (!rc && !buf) rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  if (!rc) {
    memcpy(buf, head, 16);
    if (fread(buf + 16, 1, bytes - 16, f) != bytes - 16 || fgetc(f) != EOF ||
        lh_get_le64(buf + bytes - 8) != lh_file_checksum(buf, bytes - 8, legacy))
      rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s is truncated or fails its checksum", path);
  }
  for (size_t i = 0; !rc && i < count; i++)
    if (set_add(&t->done, lh_get_le64(buf + 16 + 8 * i))) rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  free(buf);
  fclose(f);
  return rc;
}

int lh_learner_trainer_load_done(lh_learner_trainer *t, const char *dir, uint64_t expected, lh_errbuf *err) {
  if (!t || !dir) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or directory");
  char path[2 * LH_LEARNER_TEXT_BYTES];
  done_path(dir, t->rank, path, sizeof path);
  LH_TRY(load_balancer(t, dir, err));
  LH_TRY(load_stage(t, dir, err));
  /* expected is the state's ingest_position, rank 0's count; another
   * rank's file carries its own. */
  return load_done_file(t, path, t->rank == 0 ? expected : UINT64_MAX, err);
}

int lh_learner_trainer_gather_done(lh_learner_trainer *t, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  int size = lh_learner_comm_size(t->comm);
  if (size == 1) return 0;
  id_set *others = NULL;
  if (t->rank == 0 && !(others = calloc((size_t)size - 1, sizeof *others)))
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory gathering the ranks' episode lists");
  int rc = 0;
  /* Rank by rank: its count, then its ids, broadcast from it. Every rank
   * takes part in every broadcast; rank 0 keeps what it receives. */
  for (int r = 1; r < size && !rc; r++) {
    uint64_t count = t->rank == r ? (uint64_t)t->done.n : 0;
    rc = lh_learner_comm_bcast(t->comm, &count, sizeof count, r, err);
    if (rc) break;
    uint64_t *ids = t->rank == r ? t->done.ids : malloc((count ? count : 1) * sizeof *ids);
    if (!ids) {
      /* A rank that cannot take part would leave the others waiting. */
      lh_learner_comm_abort(t->comm, 1);
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for rank %d's %llu episode ids", r,
                         (unsigned long long)count);
      break;
    }
    rc = lh_learner_comm_bcast(t->comm, ids, count * sizeof *ids, r, err);
    if (t->rank == 0 && !rc) others[r - 1] = (id_set){.ids = ids, .n = count, .cap = count};
    else if (t->rank != r) free(ids);
  }
  if (t->rank == 0) {
    if (rc) {
      for (int r = 0; r < size - 1; r++) free(others[r].ids);
      free(others);
      return rc;
    }
    for (size_t i = 0; i < t->n_others; i++) free(t->others[i].ids);
    free(t->others);
    t->others = others, t->n_others = (size_t)size - 1;
  }
  return rc;
}

/* lh_hash64 over the parameters, from one read of them: *all of every
 * float, *rest of the tensors that are not expert shards, *shard of those
 * that are (each may be NULL). */
static int hash_params(const lh_learner_trainer *t, uint64_t *all, uint64_t *rest, uint64_t *shard,
                       lh_errbuf *err) {
  size_t bytes = lh_model_n_floats(t->m) * sizeof(float);
  float *host = malloc(bytes);
  if (!host) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory hashing %zu bytes of parameters", bytes);
  const lh_backend *be = lh_model_backend(t->m);
  int rc = be->download(be->context, host, lh_model_params(t->m), bytes);
  if (rc) {
    lh_errbuf_set(err, rc, "train: cannot read the parameters: %s", lh_strerror(rc));
  } else {
    if (all) *all = lh_hash64(host, bytes, 0);
    uint64_t h[2] = {0, 0};  /* the rest, the shard */
    for (int i = 0; (rest || shard) && i < lh_model_n_tensors(t->m); i++) {
      const lh_model_tensor *tt = lh_model_tensor_at(t->m, i);
      int k = tt->expert_shard != 0;
      h[k] = lh_hash64(host + tt->offset, tt->numel * sizeof(float), h[k]);
    }
    if (rest) *rest = h[0];
    if (shard) *shard = h[1];
  }
  free(host);
  return rc;
}

int lh_learner_trainer_params_hash(const lh_learner_trainer *t, uint64_t *hash, lh_errbuf *err) {
  if (!t || !hash) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or hash");
  return hash_params(t, hash, NULL, NULL, err);
}

int lh_learner_trainer_same_weights(lh_learner_trainer *t, int *same, lh_errbuf *err) {
  if (!t || !same) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or same");
  uint64_t h = 0, h_shard = 0;
  if (!t->experts) {
    LH_TRY(hash_params(t, &h, NULL, NULL, err));
    return lh_learner_comm_same_u64(t->comm, h, same, err);
  }
  /* Every rank holds the same replicated tensors; the ranks of one shard
   * (one per group) the same shard. */
  int same_rest = 0, same_shard = 0;
  LH_TRY(hash_params(t, NULL, &h, &h_shard, err));
  LH_TRY(lh_learner_comm_same_u64(t->comm, h, &same_rest, err));
  LH_TRY(lh_learner_comm_same_u64(lh_learner_experts_replicas(t->experts), h_shard, &same_shard, err));
  double both = same_rest && same_shard;
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, &both, 1, LH_LEARNER_COMM_MIN, err));
  *same = both > 0;
  return 0;
}

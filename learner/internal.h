/* learner, internal: the parts of the learner process that only learner/
 * (and its tests and benchmarks) call; learner/learner.h holds what other
 * modules call (ARCHITECTURE.md §2.2).
 *
 * How they fit in a training step:
 *   a complete episode (store) -> its segments decoded ->
 *     lh_learner_episode_join -> lh_learner_admission_check(version,
 *     ep->oldest_version, outcome, max_policy_lag) -> lh_learner_batcher_add;
 *   lh_learner_batcher_take -> lh_learner_advantages over the batch's
 *     rewards with the group ids as keys -> lh_learner_episode_broadcast;
 *   per episode and window (lh_model_window_end): the model's log-probabilities
 *     of the tokens (logits divided by the actor's temperature) ->
 *     lh_learner_ppo_loss with normaliser = the batch's sampled tokens ->
 *     dlogp into the model's backward;
 *   clipping and AdamW are model/'s and kernels/' (lh_model_adamw_step), at
 *     lr = lh_learner_lr_at(...); then lh_learner_weights_new on the new
 *     parameters, announce, and serve requests.
 *
 * Free functions accept NULL. */
#ifndef LH_LEARNER_INTERNAL_H
#define LH_LEARNER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "net/zsock.h"
#include "learner/ingest.h"
#include "learner/learner.h"
#include "learner/ranks.h"
#include "proto/longhaul.pb-c.h"
#include "proto/wire.h"
#include "store/store.h"

/* ---- advantages (the types are in learner/learner.h) ----------------------- */
/* The name used in the config ("grpo", "rloo", "reinforce") and back;
 * lh_learner_adv_kind_from_name returns 0 for an unknown name. */
const char *lh_learner_adv_kind_name(lh_learner_adv_kind kind);
lh_learner_adv_kind lh_learner_adv_kind_from_name(const char *name);

void lh_learner_adv_baseline_init(lh_learner_adv_baseline *b, double decay);
void lh_learner_adv_baseline_save(const lh_learner_adv_baseline *b, uint8_t out[LH_LEARNER_ADV_BASELINE_BYTES]);
/* Refuses a non-finite mean or a decay outside [0, 1). */
int lh_learner_adv_baseline_load(lh_learner_adv_baseline *b, const uint8_t in[LH_LEARNER_ADV_BASELINE_BYTES], lh_errbuf *err);

/* adv[i] for the n episodes with rewards[i] and group_keys[i]. group_keys
 * may be NULL for one group of all n. baseline is used (and updated) only by
 * LH_LEARNER_ADV_REINFORCE, where it is required. */
int lh_learner_advantages(lh_learner_adv_kind kind, const float *rewards, const uint64_t *group_keys, size_t n,
                  lh_learner_adv_baseline *baseline, float *adv, lh_errbuf *err);

/* ---- admission (the types are in learner/learner.h) ------------------------ */
lh_learner_admission lh_learner_admission_check(uint64_t learner_version, uint64_t oldest_version,
                                Longhaul__Outcome outcome, uint64_t max_policy_lag,
                                lh_learner_admission_counts *counts);
const char *lh_learner_admission_name(lh_learner_admission a);

/* ---- PPO-clip loss --------------------------------------------------------
 * Over the sampled tokens t (loss_mask 1), with r_t = exp(logp_t -
 * behavior_logp_t) and advantage A_t:
 *
 *   term_t = min( min(r_t, is_cap) * A_t,  clip(r_t, 1 - clip_eps, 1 + clip_eps) * A_t )
 *   loss   = -(1/N) sum_t term_t  -  entropy_coef * (1/N) sum_t H_t
 *
 * The importance weight is truncated by replacing the unclipped ratio with
 * min(r_t, is_cap). For A > 0 the clip already bounds the term (is_cap >=
 * 1 + clip_eps changes nothing); for A < 0 it bounds how far a token the
 * behavior policy found unlikely can push the loss (dual-clip with c =
 * is_cap). is_cap may be +inf (no truncation). N is `normaliser`, the
 * number of sampled tokens of the whole batch, so that windows of one batch
 * computed in separate calls add up to the batch mean; 0 means this call's
 * sampled tokens. logp must be the learner's log-softmax at the actor's
 * sampling temperature (actors.h says why). log r is clamped to +-80 before
 * exp, which only matters for tokens that are clipped anyway.
 *
 * dlogp_t = dloss/dlogp_t (0 for tokens not sampled), for the model's
 * log-probability backward; dloss/dH_t is the same for every sampled token
 * and is reported as stats.dloss_dentropy. At the kinks (r exactly at
 * 1 +- clip_eps or is_cap) the gradient is that of the branch min() picks,
 * the unclipped one on ties. */
typedef struct {
  double clip_eps;      /* in (0, 1); 0.2 */
  double is_cap;        /* >= 1, may be +inf */
  double entropy_coef;  /* >= 0 */
} lh_learner_ppo_params;

typedef struct {
  size_t n;                    /* positions */
  const float *logp;           /* learner log p of each token */
  const float *behavior_logp;  /* the actor's, from the segment */
  const float *advantage;      /* per token (the episode's, broadcast) */
  const uint8_t *loss_mask;    /* 1 = sampled; NULL: every token */
  const uint32_t *version;     /* per-token policy version; NULL: no alignment figure */
  uint64_t current_version;    /* the learner's version */
  const float *entropy;        /* per token; required when entropy_coef > 0 */
  double normaliser;           /* N above; 0: this call's sampled tokens */
} lh_learner_ppo_input;

/* The same in double, for gradient checks and references. */
typedef struct {
  size_t n;
  const double *logp, *behavior_logp, *advantage;
  const uint8_t *loss_mask;
  const uint32_t *version;
  uint64_t current_version;
  const double *entropy;
  double normaliser;
} lh_learner_ppo_input_f64;

typedef struct {
  double loss;            /* as returned */
  double policy_loss;     /* without the entropy bonus */
  double entropy_mean;    /* over sampled tokens; 0 without entropy */
  double dloss_dentropy;  /* -entropy_coef / N */
  size_t tokens;          /* sampled tokens in this call */
  double clip_frac;       /* share of sampled tokens whose gradient the clip or cap cut (A != 0) */
  double trunc_frac;      /* share with r > is_cap */
  double ratio_mean;      /* mean r over sampled tokens */
  double ratio_max;       /* largest r (the importance weight before truncation) */
  double approx_kl;       /* mean of (r - 1) - log r: KL(behaviour || learner), the k3 estimator */
  size_t current_tokens;  /* sampled tokens whose version is current_version */
  double logp_diff_mean;  /* mean |logp - behavior_logp| over those (docs/learner.md, "What a step computes": alignment) */
  double logp_diff_max;
} lh_learner_ppo_stats;

/* Validates p and the sampled tokens' inputs (finite; LH_ELEARNER_PPO_INPUT
 * naming the index), then writes *loss, dlogp[0..n) and *stats (each may be
 * NULL). Nothing is written on error, so a non-finite step can be skipped. */
int lh_learner_ppo_loss(const lh_learner_ppo_params *p, const lh_learner_ppo_input *in, double *loss, float *dlogp,
                lh_learner_ppo_stats *stats, lh_errbuf *err);
int lh_learner_ppo_loss_f64(const lh_learner_ppo_params *p, const lh_learner_ppo_input_f64 *in, double *loss, double *dlogp,
                    lh_learner_ppo_stats *stats, lh_errbuf *err);
int lh_learner_ppo_params_check(const lh_learner_ppo_params *p, lh_errbuf *err);

/* ---- context-extension stages (learner/stage.c) ----------------------------
 * Where a run stands in its stages: the stage in force, where it began
 * (the first step and the first version published under it), and what it
 * has trained of its own episodes. An episode is the stage's when its
 * oldest sampled token is of the stage's first version or later (the
 * actors learn the stage with that version's announcement and start every
 * group after it at the new stage); one from before is an earlier stage's,
 * carried (trained) or dropped as [learner] stage_carry says. The gate
 * counts the latest steps of the stage (episodes and successes per step),
 * so that several ranks summing their counts reach the same decision.
 * A checkpoint keeps it (DIR/stage.bin); --resume goes on from there. */
#define LH_LEARNER_STAGE_FILE "stage.bin"
#define LH_LEARNER_STAGE_RING 512  /* steps the gate looks back over */
typedef struct {
  uint32_t index;                      /* the stage in force */
  uint64_t began_step, began_version;  /* its first step and version */
  int64_t began_ms;                    /* wall clock when it began */
  uint64_t episodes, tokens;           /* its own episodes trained, and their tokens */
  uint64_t successes;
  uint64_t carried, carry_dropped;     /* earlier stages' episodes trained, and dropped, since it began */
  uint32_t ring_n, ring_at;            /* the gate's ring of the stage's latest steps */
  uint32_t ring_episodes[LH_LEARNER_STAGE_RING], ring_successes[LH_LEARNER_STAGE_RING];
} lh_learner_stage_state;

/* "MAX_CONTEXT key=value ..., ..." into cfg->stages and n_stages (the
 * [learner] stages key); -1 with why saying what is wrong (the old form
 * max_context:steps:long_frac is refused with the new form written out). */
int lh_learner_stages_parse(const char *v, lh_learner_config *cfg, char *why, size_t why_bytes);
/* The first stage, begun at step and version (all counts 0). */
void lh_learner_stage_state_init(lh_learner_stage_state *s, uint32_t index, uint64_t step, uint64_t version);
/* Counts one step's episodes of the stage (episodes, their tokens and
 * successes) and of earlier stages (carried, dropped). */
void lh_learner_stage_count(lh_learner_stage_state *s, uint64_t episodes, uint64_t tokens, uint64_t successes,
                            uint64_t carried, uint64_t carry_dropped);
/* The success rate over the stage's latest steps that hold at least n of
 * its episodes; NAN while it has fewer than n. */
double lh_learner_stage_gate_rate(const lh_learner_stage_state *s, uint64_t n);
/* 1 when the stage in force has trained what it must (its episodes=,
 * tokens= and success= all met) and a later stage exists. */
int lh_learner_stage_done(const lh_learner_config *cfg, const lh_learner_stage_state *s);
/* The stage's learning rate, train_window and batch_episodes: its own, or
 * [learner]'s where it sets none (index past the stages: [learner]'s). */
void lh_learner_stage_params(const lh_learner_config *cfg, uint32_t index, double *lr, uint64_t *train_window,
                             uint64_t *batch_episodes);
/* DIR/stage.bin, written whole and renamed (as learner_state.bin), and
 * back: LH_ELEARNER_STATE_IO when absent or unreadable,
 * LH_ELEARNER_STATE_CORRUPT when it is not a stage state. */
int lh_learner_stage_save(const char *dir, const lh_learner_stage_state *s, lh_errbuf *err);
int lh_learner_stage_load(const char *dir, lh_learner_stage_state *s, lh_errbuf *err);

/* ---- weights publishing ---------------------------------------------------
 * One version's bytes (a checkpoint's parameters, in whatever layout the
 * model chooses) served in chunks of chunk_bytes: the announcement carries
 * the layout and the version's checksum (lh_wire_weights_checksum of the
 * chunk checksums), each chunk its own checksum (lh_wire_checksum). The publisher keeps a copy, so training may go on changing the
 * live parameters while actors fetch. */
typedef struct lh_learner_weights lh_learner_weights;

/* Copies bytes[0..n) (n >= 1) of version; chunk_bytes in 1..16 MiB (the
 * wire's chunk limit). */
lh_learner_weights *lh_learner_weights_new(uint64_t version, const void *bytes, size_t n,
                                           uint32_t chunk_bytes, lh_errbuf *err);
void lh_learner_weights_free(lh_learner_weights *w);
/* Overwrites w with another version of exactly its size (same layout),
 * checksums recomputed: returns 1, or 0 (w untouched) when w is NULL or
 * the size differs. Chunks handed out before point at the new bytes. */
int lh_learner_weights_refill(lh_learner_weights *w, uint64_t version, const void *bytes, size_t n);
/* Fills a (initialised with longhaul__weights_announce__init) with version,
 * total_bytes, chunk_bytes, chunk_count, checksum and the chunk checksums
 * (pointing into w; none past 2^20 chunks); the stage fields are the
 * caller's. */
void lh_learner_weights_announce(const lh_learner_weights *w, Longhaul__WeightsAnnounce *a);
uint32_t lh_learner_weights_chunk_count(const lh_learner_weights *w);
/* Fills c (initialised) with chunk index; c->data points into w and stays
 * valid while w lives. LH_ELEARNER_WEIGHTS_REQUEST past the last chunk. */
int lh_learner_weights_chunk(const lh_learner_weights *w, uint32_t index, Longhaul__WeightsChunk *c,
                             lh_errbuf *err);
/* The same, zstd-compressed when accept_zstd and the frame is at least
 * 1/16 smaller than the chunk (c->encoding says which; c->checksum stays
 * that of the uncompressed bytes). A chunk is compressed once per version,
 * on its first such request, and kept with w. */
int lh_learner_weights_chunk_encoded(lh_learner_weights *w, uint32_t index, int accept_zstd,
                                     Longhaul__WeightsChunk *c, lh_errbuf *err);
typedef struct {
  uint64_t tried, compressed;  /* chunks compressed, and those kept compressed */
} lh_learner_weights_zstd_counts;
lh_learner_weights_zstd_counts lh_learner_weights_get_zstd_counts(const lh_learner_weights *w);
/* Checks a request against w: its version must be w's and its range inside
 * the chunks (chunk_count 0 means "to the last chunk"). Sets the range to
 * serve. */
int lh_learner_weights_serve(const lh_learner_weights *w, const Longhaul__WeightsRequest *req,
                             uint32_t *first, uint32_t *count, lh_errbuf *err);

/* ---- an episode's tokens --------------------------------------------------
 * The segments of one complete episode (as stored, decoded with
 * lh_wire_segment_decode), joined into flat per-token arrays for the loss,
 * after checking they are exactly the episode: one episode id, seq 0..n-1
 * each once (in any order), each starting where the previous ended, the
 * same routing shape throughout, and as many tokens as its EpisodeEnd says.
 * Image offsets become episode offsets. */
typedef struct {
  uint64_t episode_id, group_id, task_seed;
  size_t n;                  /* tokens */
  uint32_t *tokens;
  uint8_t *loss_mask;
  float *behavior_logp;
  uint32_t *policy_version;
  uint32_t routed_layers, routed_topk;
  uint32_t *routed_experts;  /* n * layers * topk, NULL when not recorded */
  size_t n_images;
  const Longhaul__Image **images;  /* point into the segments; offset is per segment */
  uint64_t *image_offsets;         /* episode offset of each image */
  size_t sampled;                  /* tokens with loss_mask 1 */
  uint32_t oldest_version;         /* over sampled tokens (all tokens when none is sampled) */
  uint32_t newest_version;
} lh_learner_episode;

/* Joins segs[0..n_segs) into *out (freed with lh_learner_episode_free).
 * total_tokens is the EpisodeEnd's. The segments must outlive *out when
 * it holds images. */
int lh_learner_episode_join(Longhaul__Segment *const *segs, size_t n_segs, uint64_t total_tokens,
                            lh_learner_episode **out, lh_errbuf *err);
void lh_learner_episode_free(lh_learner_episode *ep);
/* adv_out[t] = advantage where the token was sampled, 0 elsewhere. */
void lh_learner_episode_broadcast(const lh_learner_episode *ep, float advantage, float *adv_out);
/* The index of the episode's last sampled token (0: none sampled). */
size_t lh_learner_episode_last_sampled(const lh_learner_episode *ep);
/* The loss arrays of positions [start, end) (position i predicts token
 * i + 1, so each is token i + 1's; 0 past the last token): loss mask,
 * behaviour log-probability, advantage (from adv, per token; NULL: 0) and
 * policy version, end - start each. Returns how many are sampled. */
size_t lh_learner_episode_targets(const lh_learner_episode *ep, const float *adv, size_t start, size_t end,
                                  uint8_t *mask, float *blogp, float *adv_out, uint32_t *ver);
/* The recorded routing of positions [start, end), [token][layer][slot] in
 * the episode, into rows, the (layers, T, topk) replay array of a forward
 * of T positions, at its positions at.. . */
void lh_learner_episode_replay(const lh_learner_episode *ep, size_t start, size_t end, int32_t *rows, size_t T,
                               size_t at);
/* The positions of the episode's images' patches (model patch side patch),
 * one span per image into out (ep->n_images entries); returns how many.
 * The training windows are cut with lh_model_window_end over them
 * (docs/model.md "Windows"): train_window tokens each, moved off an
 * image so that every image lies whole in one window. */
size_t lh_learner_episode_spans(const lh_learner_episode *ep, uint32_t patch, lh_model_span *out);

/* ---- a group's shared prefix, run once a step (learner/shared_prefix.c) ----
 * In exact mode the windows before an episode's first trained window are
 * forward only, and the state they leave depends only on the episode's
 * tokens, images and (with routing replay) recorded routing before it.
 * The cache keeps that state per prefix for the step in progress, so the
 * members of a group, which share their first observation, run it once;
 * gradients are the unshared step's bit for bit. Cleared at each step. */
typedef struct lh_learner_prefix_cache lh_learner_prefix_cache;
int lh_learner_prefix_cache_new(size_t state_floats, lh_learner_prefix_cache **out, lh_errbuf *err);
void lh_learner_prefix_cache_free(lh_learner_prefix_cache *c);
void lh_learner_prefix_cache_clear(lh_learner_prefix_cache *c);
/* A hash of ep's first upto positions (tokens, images, and recorded
 * routing when with_routing): where to look; never 0 (0: no memory). */
uint64_t lh_learner_prefix_key(const lh_learner_episode *ep, size_t upto, int with_routing);
/* The state after the first upto positions of an episode of this step
 * whose positions there are ep's, compared whole; NULL when none. */
const float *lh_learner_prefix_cache_get(lh_learner_prefix_cache *c, const lh_learner_episode *ep, uint64_t key,
                                         size_t upto, int with_routing);
/* Keeps a copy of the state after ep's first upto positions; ep must live
 * until the cache is cleared. LH_ENOMEM (the step goes on unshared). */
int lh_learner_prefix_cache_put(lh_learner_prefix_cache *c, const lh_learner_episode *ep, uint64_t key, size_t upto,
                                int with_routing, const float *state);
/* Lookups answered from the cache, and the positions they did not run. */
void lh_learner_prefix_cache_counts(const lh_learner_prefix_cache *c, uint64_t *hits, uint64_t *positions_saved);

/* ---- what the model can take (learner/validate.c) --------------------------
 * A message can be valid on the wire and still be nothing the model can
 * train on: token ids past its vocabulary, routing of another shape, to
 * experts it does not have or to one expert twice in a token's top-k,
 * images whose patches it cannot embed or that overlap, an episode longer
 * than the learner takes. The ingest refuses such a segment or episode end before it is
 * stored (ACK_REJECTED, counted), and the trainer checks every episode
 * again before its step, so no stored data can end the learner. */
struct lh_learner_model_limits {
  uint32_t vocab, layers, topk, experts, patch, max_patches;
  uint64_t train_window;        /* tokens per training window (windows are cut around images) */
  uint64_t max_episode_tokens;  /* 0: no bound */
  size_t state_floats;          /* a segment's recurrent state has exactly these (or none) */
};

void lh_learner_model_limits_init(lh_learner_model_limits *l, const lh_model_config *mc,
                                  const lh_learner_config *cfg);
/* 0, or LH_ELEARNER_MODEL_INPUT naming the episode, segment and field. */
int lh_learner_check_segment(const Longhaul__Segment *s, const lh_learner_model_limits *l, lh_errbuf *err);
int lh_learner_check_episode_end(const Longhaul__EpisodeEnd *e, const lh_learner_model_limits *l, lh_errbuf *err);
/* The joined episode: its length, routing and images (in order, not
 * overlapping, each inside the episode and one window). */
int lh_learner_check_episode(const lh_learner_episode *ep, const lh_learner_model_limits *l, lh_errbuf *err);

/* ---- batches of whole groups ----------------------------------------------
 * Complete episodes arrive one by one, each with its group; the batcher
 * holds them until their group has all group_size members (admitted or
 * dropped by lh_learner_admission_check: a dropped one still counts as
 * arrived, so a group is never waited on for ever), then hands out batches
 * made of whole groups, oldest completed first, as soon as they hold at
 * least batch_episodes admitted episodes. A group whose members were all
 * dropped is discarded. When more than max_pending_groups groups are
 * incomplete, the oldest of them is closed with what it has (its actor may
 * have died), so memory stays bounded and training goes on. */
typedef struct {
  uint64_t episode_id;
  uint64_t group_id;
  float reward;
  int admitted;  /* 1: goes into the batch; 0: dropped, counts toward its group */
  uint64_t oldest_version;  /* over its sampled tokens (lh_learner_batcher_drop_stale) */
} lh_learner_batch_item;

typedef struct lh_learner_batcher lh_learner_batcher;

lh_learner_batcher *lh_learner_batcher_new(size_t batch_episodes, size_t group_size,
                                           size_t max_pending_groups, lh_errbuf *err);
void lh_learner_batcher_free(lh_learner_batcher *b);
/* Adds one episode. LH_ELEARNER_BATCH_DUPLICATE for an episode id already
 * pending, LH_ELEARNER_BATCH_GROUP_FULL for a member beyond group_size;
 * a negative code of on_flat (lh_learner_batcher_skip_flat) when the
 * episode completed a flat group. */
int lh_learner_batcher_add(lh_learner_batcher *b, const lh_learner_batch_item *item, lh_errbuf *err);
/* When a batch is ready: copies its admitted episodes, group by group, into
 * out (room for cap; batch_episodes + group_size - 1 always suffices),
 * sets *n and returns 1. Returns 0 when no batch is ready. */
int lh_learner_batcher_take(lh_learner_batcher *b, lh_learner_batch_item *out, size_t cap, size_t *n,
                            lh_errbuf *err);
/* Removes every complete group whose admitted episodes all have
 * oldest_version below min_version: when actors outpace the learner, the
 * groups waiting longest have gone stale, and a batch of them would be
 * thrown away at training time. on_drop (may be NULL) sees each admitted
 * episode removed; returns how many were (a negative code from on_drop
 * stops it). Groups with a fresh member stay whole. */
long lh_learner_batcher_drop_stale(lh_learner_batcher *b, uint64_t min_version,
                                   int (*on_drop)(void *ctx, const lh_learner_batch_item *item), void *ctx);
/* With on, a group whose arrived members all have the same reward (two at
 * least) is dropped when it completes instead of waiting for a batch:
 * under grpo and rloo its advantages are all 0, so a step would spend a
 * forward and a backward on it and learn nothing, and the batch fills from
 * other groups instead. on_flat (may be NULL) sees each admitted episode
 * of such a group. lh_learner_batcher_flat counts them. */
void lh_learner_batcher_skip_flat(lh_learner_batcher *b, int on,
                                  int (*on_flat)(void *ctx, const lh_learner_batch_item *item), void *ctx);
void lh_learner_batcher_flat(const lh_learner_batcher *b, uint64_t *groups, uint64_t *episodes);
/* From now on a batch holds at least batch_episodes (>= 1) admitted
 * episodes (a context-extension stage's own batch size). */
void lh_learner_batcher_set_batch(lh_learner_batcher *b, size_t batch_episodes);
/* Admitted episodes in complete groups waiting for a batch; groups still
 * incomplete; groups closed early; groups discarded with no admitted member. */
size_t lh_learner_batcher_ready(const lh_learner_batcher *b);
/* Whether episode id waits in the batcher (admitted or not). */
int lh_learner_batcher_has(const lh_learner_batcher *b, uint64_t id);
size_t lh_learner_batcher_pending_groups(const lh_learner_batcher *b);
uint64_t lh_learner_batcher_closed_early(const lh_learner_batcher *b);
uint64_t lh_learner_batcher_discarded(const lh_learner_batcher *b);


/* ---- the training step (learner/train*.c, train_internal.h lists them) ----
 * The RL step of the learner process over the replay store: scan finds the
 * store's episodes that are ready (ended, every segment stored) and not yet
 * consumed, applies admission (staleness against the trainer's version,
 * counted) and hands them to the batcher; step takes a ready batch, joins
 * each episode's segments, computes advantages, runs the model over windows
 * of train_window tokens with the attention state carried from window to
 * window, takes the PPO-clip loss (learner log p at the actor's sampling
 * temperature against the behavior log p), clips the global gradient norm,
 * steps AdamW at the warmup+cosine learning rate, moves the balancing
 * biases, bumps the version and writes a train_steps row. A step whose loss
 * or gradient is not finite leaves the parameters untouched, is counted
 * (skipped_steps) and logged, and does not bump the version. Episode ids
 * are the actors' (in no order), so the trainer keeps the set of episodes
 * it is done with (trained, dropped or left out; the state's
 * ingest_position is its size), which a checkpoint saves and a resume
 * loads: none is trained twice. An episode whose segments do not join is
 * marked error in the store. With routing_replay, an episode that
 * recorded its routing ([token][layer][slot], the experts chosen while
 * that token was the model's input) is run with those experts instead of
 * top-k; one whose routing shape is not the model's is left out. Images
 * go in as the model's patch inputs at the positions after their <img>
 * tokens; a window is one forward pass, so windows are cut around images
 * (lh_model_window_end): an image is never split, and never costs its
 * episode. The
 * model and the store stay the caller's and must outlive the trainer. */
typedef struct lh_learner_trainer lh_learner_trainer;

typedef struct {
  uint64_t step;          /* 0-based index of the step just taken */
  uint64_t version;       /* after the step */
  double loss, policy_loss, reward_mean, success_rate;
  size_t tokens;          /* sampled tokens trained on */
  size_t positions;       /* every token of the trained episodes, through forward and backward */
  size_t episodes;
  double lag_mean, lag_max;     /* version minus token version, sampled tokens */
  double logp_diff;       /* max |learner - behavior logp| over current-version tokens */
  size_t current_tokens;  /* tokens that figure is over */
  double grad_norm, lr, clip_frac;
  /* PPO diagnostics over the sampled tokens (lh_learner_ppo_stats, every
   * rank): approximate KL to the behaviour policy, the policy's entropy,
   * the importance weights' mean and largest value. */
  double approx_kl, entropy, iw_mean, iw_max;
  int skipped;
  double step_ms;
  double busy_frac;       /* step_ms over the wall time since the previous step (or the start) */
  double allreduce_ms;    /* of step_ms: summing the gradients over ranks (0 with one rank) */
  /* Experts across ranks: of step_ms, this rank's time inside the expert
   * exchange's transport (waiting for its group included) and in serving
   * the group's tokens; the bytes it sent (0 without expert_parallel). */
  double exchange_ms, serve_ms;
  uint64_t exchange_bytes;
  /* This rank's forward work: the positions the forward ran over (trained
   * windows and burn-ins), and the windows started from a stored state
   * ([learner] state_mode = stored), and the gaps before a trained window
   * bridged from a stored state or by recomputation. */
  size_t run_positions, states_used, burn_ins;
  double logp_diff_mean;  /* mean |learner - behavior logp| over this rank's current-version tokens */
  /* Of tokens, those trained with an advantage of exactly 0 (every rank's);
   * and the groups left out as flat since the previous step
   * (lh_learner_batcher_skip_flat: every reward the same). */
  size_t zero_adv_tokens;
  uint64_t flat_groups;
} lh_learner_train_stats;

/* st (may be NULL) is a resumed state (step, version, position, baseline,
 * admission counts, skipped steps). temperature is the actors' sampling
 * temperature (0 means 1, as for greedy actors). Enables training on m. */
int lh_learner_trainer_new(lh_model *m, lh_store *store, const lh_learner_config *cfg, float temperature,
                           const lh_learner_state *st, lh_learner_trainer **out, lh_errbuf *err);
void lh_learner_trainer_free(lh_learner_trainer *t);
/* Finds newly ready episodes; *added (may be NULL) gets how many entered
 * the batcher (admitted or dropped). */
int lh_learner_trainer_scan(lh_learner_trainer *t, size_t *added, lh_errbuf *err);
/* The same for the given episodes only (those the ingest just wrote):
 * each that is ready and not yet used enters the batcher. */
int lh_learner_trainer_offer(lh_learner_trainer *t, const uint64_t *ids, size_t n, size_t *added, lh_errbuf *err);
/* Runs one step when a batch is ready (*stepped = 1) and fills *stats (may
 * be NULL); *stepped = 0 when none is ready. */
int lh_learner_trainer_step(lh_learner_trainer *t, int *stepped, lh_learner_train_stats *stats,
                            lh_errbuf *err);
/* The trainer's part of a checkpoint state (the rng bytes are left as they are). */
void lh_learner_trainer_state(const lh_learner_trainer *t, lh_learner_state *st);
uint64_t lh_learner_trainer_version(const lh_learner_trainer *t);
/* The context-extension stage in force and its progress (learner.h,
 * stages); NULL without stages. A checkpoint saves it (DIR/stage.bin with
 * the done set) and lh_learner_trainer_load_done loads it. */
const lh_learner_stage_state *lh_learner_trainer_stage(const lh_learner_trainer *t);
/* The done set as DIR/episodes_done.bin (checksummed), and back; load
 * checks it holds `expected` ids (the state's ingest_position). */
#define LH_LEARNER_EPISODES_FILE "episodes_done.bin"
int lh_learner_trainer_save_done(const lh_learner_trainer *t, const char *dir, lh_errbuf *err);
int lh_learner_trainer_load_done(lh_learner_trainer *t, const char *dir, uint64_t expected, lh_errbuf *err);
const lh_learner_admission_counts *lh_learner_trainer_admission(const lh_learner_trainer *t);
/* Back-pressure: admitted episodes waiting untrained in complete groups,
 * and the cap on them the stale-share controller has set; the actors hold
 * while backlog >= cap. stale_share is over the recent steps (NAN before
 * any episode was taken in). */
size_t lh_learner_trainer_backlog(const lh_learner_trainer *t);
uint64_t lh_learner_trainer_backlog_cap(const lh_learner_trainer *t);
double lh_learner_trainer_stale_share(const lh_learner_trainer *t);
/* Episodes left out of a step since the start (quarantined as error: the
 * model cannot be run on them as the actor ran it); their log line comes
 * once per interval, the status line carries the count. */
uint64_t lh_learner_trainer_left_out(const lh_learner_trainer *t);
/* Groups, and their episodes, left out since the start because their
 * rewards were all equal ([learner] skip_flat_groups); the status line
 * carries both. */
void lh_learner_trainer_flat(const lh_learner_trainer *t, uint64_t *groups, uint64_t *episodes);

/* ---- the weights sockets (learner/publish.c) ------------------------------
 * Binds the weights PUB (WeightsAnnounce of each new version, with the
 * stage fields) and the weights ROUTER (WeightsRequest -> WeightsChunk
 * replies, one chunk a message). The version before the current one is
 * served too, so that a fetch begun before a new version still ends while
 * the learner steps back to back. A request for any other version (an
 * actor that joined after the announcement, or one asking for a version
 * replaced twice) is answered on the ROUTER with the current
 * WeightsAnnounce, so a new actor gets the current version on request.
 * The bytes are lh_model_serialize's. */
typedef struct lh_learner_publisher lh_learner_publisher;

typedef struct {
  uint64_t announces, chunks_sent, redirects, bad_requests;
  uint64_t chunks_zstd, bytes_sent;  /* chunks sent compressed; data bytes sent, as sent */
  uint64_t requests_held;            /* requests cut short at the cap on queued chunk bytes */
} lh_learner_publisher_counts;

/* Chunk bytes the weights ROUTER holds for its peers in all (handed to
 * libzmq, not yet written to a socket or dropped): past it a request is
 * served no further chunks, and its actor asks again. Each peer holds at
 * most 32 chunk messages (its queue), so peers that ask and never read
 * pinned 32 chunks each, without a bound in all. */
#define LH_LEARNER_WEIGHTS_QUEUED_BYTES (256u << 20)

lh_learner_publisher *lh_learner_publisher_new(void *zmq_ctx, const char *pub_endpoint,
                                               const char *router_endpoint, uint32_t chunk_bytes,
                                               lh_errbuf *err);
/* The same with the PUB and the ROUTER CURVE servers (as the ingest's). */
lh_learner_publisher *lh_learner_publisher_new_curve(void *zmq_ctx, const char *pub_endpoint,
                                                     const char *router_endpoint, uint32_t chunk_bytes,
                                                     const lh_zsock_curve *curve, lh_errbuf *err);
/* CURVE from cfg (learner/curve.c): with curve_secret_key_file and
 * curve_allowed_keys both set, reads the learner's secret key into curve
 * and starts the ZAP handler of zmq_ctx with the allow-list (*zap, to stop
 * with lh_zsock_zap_stop before the context ends); with neither, curve is
 * left plain and the handler starts without an allow-list, to cap the
 * ingest's connections; one without the other is a config error. */
int lh_learner_curve_start(void *zmq_ctx, const lh_learner_config *cfg, lh_zsock_curve *curve, lh_zsock_zap **zap,
                           lh_errbuf *err);
void lh_learner_publisher_free(lh_learner_publisher *p);
const char *lh_learner_publisher_pub_endpoint(const lh_learner_publisher *p);
const char *lh_learner_publisher_router_endpoint(const lh_learner_publisher *p);
void *lh_learner_publisher_socket(lh_learner_publisher *p);
/* Copies the bytes of version as the current one and announces it. */
int lh_learner_publisher_set(lh_learner_publisher *p, uint64_t version, const void *bytes, size_t n,
                             uint32_t stage_index, uint32_t max_context, float long_frac, lh_errbuf *err);
/* Announces the current version again (for subscribers that joined late);
 * a no-op before the first set. */
int lh_learner_publisher_announce(lh_learner_publisher *p, lh_errbuf *err);
uint64_t lh_learner_publisher_version(const lh_learner_publisher *p);
/* The current version's WeightsAnnounce.checksum (0 before the first set). */
uint64_t lh_learner_publisher_checksum(const lh_learner_publisher *p);
/* Waits up to timeout_ms for requests and serves those waiting; bad ones
 * are counted and ignored. */
int lh_learner_publisher_poll(lh_learner_publisher *p, int timeout_ms, size_t *served, lh_errbuf *err);
const lh_learner_publisher_counts *lh_learner_publisher_get_counts(const lh_learner_publisher *p);
/* The chunk bytes queued for peers now, and the cap on them (default
 * LH_LEARNER_WEIGHTS_QUEUED_BYTES; a test sets a smaller one). */
uint64_t lh_learner_publisher_queued_bytes(const lh_learner_publisher *p);
void lh_learner_publisher_set_queue_cap(lh_learner_publisher *p, uint64_t bytes);

/* ---- the learner's service thread (learner/service.c) --------------------
 * Everything a peer waits on, apart from training: the ingest ROUTER
 * (receive, validate, commit, ack), the weights PUB and ROUTER (announce,
 * serve chunks), the sweep of episodes whose actor is gone, all on their
 * own thread with their own connection to the store. An ack thus waits for
 * its commit only, and a fetch for its chunks only, whatever a training
 * step is doing (docs/learner.md, "The learner process").
 *
 * The training thread talks to it through calls that are each
 * thread-safe: lh_learner_service_take (episode ids newly stored, which may
 * have become ready: the store stays the source of truth, this is only the
 * hint that saves a scan), lh_learner_service_publish (a new version's
 * bytes, handed over; the service announces them and records the
 * policy_versions row), lh_learner_service_set_backlog (what the acks'
 * back-pressure window is made from), lh_learner_service_set_max_bytes and
 * lh_learner_service_counts_get. Its sockets are made and bound by
 * lh_learner_service_new on the caller's thread, so a bind error is the
 * caller's at once; the thread starts with lh_learner_service_start. */
typedef struct lh_learner_service lh_learner_service;

typedef struct {
  void *zmq_ctx;
  const lh_learner_config *cfg;  /* endpoints, db (this rank's), max_db_bytes, abort_after_ms */
  const lh_zsock_curve *curve;   /* NULL or plain: no CURVE */
  lh_zsock_zap *zap;             /* the context's ZAP handler: caps the ingest's peers at
                                    lh_learner_config_ingest_peers(cfg); NULL: no cap */
  int serve_weights;             /* rank 0: bind the weights PUB and ROUTER */
  uint32_t chunk_bytes;
  const lh_learner_model_limits *limits;  /* what the ingest lets in; NULL: the wire's checks only */
  const char *run_id;            /* this learner's run: the ingest's run check, policy_versions.run_id;
                                    NULL: none */
} lh_learner_service_config;

typedef struct {
  lh_learner_ingest_counts ingest;
  lh_learner_publisher_counts weights;
  uint64_t aborted;       /* idle episodes the sweep ended */
  uint64_t hint_overflows;  /* times the id hint overflowed (the trainer rescans) */
  uint64_t versions;      /* versions published */
  uint64_t untaken_ends;  /* episodes ended and stored, not yet taken by the trainer */
  uint64_t retained_segments;  /* segment payloads retention dropped */
  uint64_t retired_episodes;   /* episodes retention retired at the cap (their rows deleted) */
  uint64_t retired_segments;   /* their segments rows */
  int hold;
} lh_learner_service_counts;

int lh_learner_service_new(const lh_learner_service_config *c, lh_learner_service **out, lh_errbuf *err);
int lh_learner_service_start(lh_learner_service *s, lh_errbuf *err);
/* Asks the thread to stop, waits for it (it stores and acks what has
 * already arrived first), closes the sockets and the store. NULL is fine. */
void lh_learner_service_free(lh_learner_service *s);
/* Copies up to cap ids stored since the last call into ids (*n of them);
 * *rescan = 1 when some were lost to the hint's bound, so the caller must
 * scan the store. Waits up to timeout_ms for at least one when none is
 * waiting. */
void lh_learner_service_take(lh_learner_service *s, uint64_t *ids, size_t cap, size_t *n, int *rescan,
                             int timeout_ms);
/* Takes ownership of bytes (malloc'd, n of them): published as version on
 * the service's next turn, replacing any version handed over and not yet
 * published. Stage fields as lh_learner_publisher_set's; step is the
 * policy_versions row's. */
int lh_learner_service_publish(lh_learner_service *s, uint64_t version, uint64_t step, void *bytes, size_t n,
                               uint32_t stage_index, uint32_t max_context, float long_frac, lh_errbuf *err);
/* Back-pressure: the trainer's backlog (admitted episodes waiting in
 * complete groups) and its cap. The service adds the episodes it stored
 * an end of that the trainer has not taken yet (a trainer in a long step
 * takes none), and every Ack carries hold = (that sum >= cap). */
void lh_learner_service_set_backlog(lh_learner_service *s, uint64_t backlog, uint64_t cap);
/* The trainer's newest version, on every rank: retention keeps the
 * payloads of the versions the trainer may still admit below it (never
 * counted from the versions the segments claim, which a peer chose). */
void lh_learner_service_set_version(lh_learner_service *s, uint64_t version);
void lh_learner_service_set_max_bytes(lh_learner_service *s, uint64_t max_bytes);
void lh_learner_service_counts_get(lh_learner_service *s, lh_learner_service_counts *out);
/* 0 while the thread runs well; else its error (copied into err). */
int lh_learner_service_failed(lh_learner_service *s, lh_errbuf *err);

/* ---- checkpoints of the learner process (learner/checkpoint.c) -----------
 * A checkpoint is a directory CKPT_DIR/step-NNNNNNNN holding
 * model.safetensors (the parameters and balancing biases), optimizer.bin
 * (AdamW's two moments, checksummed) and learner_state.bin; CKPT_DIR/latest
 * names the newest. Each is written into a temporary directory, every file
 * flushed to disk, the directory renamed into place and only then `latest`
 * replaced (itself written to a temporary file and renamed), so a crash at
 * any point leaves the previous checkpoint whole. A save that fails (a full
 * disk, an unwritable ckpt_dir) leaves it whole too: the temporary
 * directory is removed, and so is the new step-N folder when `latest`
 * could not be made to name it. A checkpoint of a step that already has a
 * folder (an earlier run's) replaces it only once the new one is complete. */
#define LH_LEARNER_OPTIMIZER_FILE "optimizer.bin"
#define LH_LEARNER_LATEST_FILE "latest"
typedef struct lh_learner_experts lh_learner_experts;  /* learner/experts.c, below */

/* Writes the checkpoint of st->step, with t's done episodes when t is not
 * NULL; *path_out (may be NULL, room for LH_LEARNER_TEXT_BYTES) gets its
 * directory. The model files are streamed one piece at a time
 * (lh_model_each_piece): the rank holds one piece besides its model. A
 * step-N of that step already there (an earlier run's) is replaced once the
 * new one is in place; when it is a symbolic link the link goes, never
 * what it points at (logged). Nothing is written through a link in
 * ckpt_dir. */
int lh_learner_ckpt_save(const char *ckpt_dir, lh_model *m, const lh_learner_state *st,
                         const lh_learner_trainer *t, char *path_out, lh_errbuf *err);
/* The same for a model whose experts are sharded over x's group (x NULL:
 * lh_learner_ckpt_save), collective over group 0 (the other groups return
 * 0 at once): the checkpoint is the whole model, written by rank 0 while
 * each piece of another shard comes from its rank as it is written
 * (lh_learner_experts_piece), so no rank holds more than its shard and
 * one piece. The others serve rank 0 and return 0. LH_ELEARNER_COMM on any
 * rank when the group's exchange failed (the job cannot go on); any other
 * error, on rank 0 only, is a checkpoint not written. */
int lh_learner_ckpt_save_group(const char *ckpt_dir, lh_model *m, lh_learner_experts *x, const lh_learner_state *st,
                               const lh_learner_trainer *t, char *path_out, lh_errbuf *err);
/* Loads the checkpoint `latest` names: a new model on be with training
 * enabled and its moments restored, and the state. LH_ELEARNER_CKPT naming
 * the file when something is missing or does not match. */
int lh_learner_ckpt_load_latest(const char *ckpt_dir, const lh_backend *be, lh_model **out,
                                lh_learner_state *st, char *dir_out, lh_errbuf *err);
/* The same into expert shard `shard` of `shards` (1: the whole model),
 * whatever shards the checkpoint was written from: the rank reads only the
 * floats its shard holds (lh_model_load_shard), and reads optimizer.bin
 * through, piece by piece, to check its checksum while keeping its share. */
int lh_learner_ckpt_load_latest_shard(const char *ckpt_dir, const lh_backend *be, int shard, int shards,
                                      lh_model **out, lh_learner_state *st, char *dir_out, lh_errbuf *err);
/* Whether ckpt_dir has a `latest` to resume from. */
int lh_learner_ckpt_exists(const char *ckpt_dir);
/* What `--resume` finds in ckpt_dir. *found = 1: `latest` names a step-N
 * folder that is there (load it with lh_learner_ckpt_load_latest); 0:
 * nothing to resume from, a run starts fresh (ckpt_dir is not there, or
 * holds neither `latest` nor a step-N folder). With no `latest` and one
 * step-N folder (a learner stopped between renaming its first checkpoint
 * into place and naming it), `latest` is written naming that folder and
 * *found = 1. LH_ECONFIG naming ckpt_dir/latest when it is missing while
 * several step-N folders are there, or
 * cannot be read, names no step-N folder or one that is not there:
 * starting fresh would write over those folders, so the message says
 * which is the newest and how to go on; a restart cannot mend that, a
 * person must (as for a config error). LH_ECONFIG too when ckpt_dir cannot
 * be read. */
int lh_learner_ckpt_resume_find(const char *ckpt_dir, int *found, lh_errbuf *err);
/* Removes the oldest step-N folders of ckpt_dir beyond the newest keep (0:
 * keeps them all), never the one `latest` names, and what an interrupted
 * prune left; *removed (may be NULL) counts the folders removed. Each is
 * renamed to a hidden name before its files go, so a crash never leaves a
 * step-N folder missing files. A symbolic link in ckpt_dir is never
 * followed: a step-N or hidden name that is one stays, counted in *links
 * (may be NULL), and a link inside a step folder is removed itself, never
 * what it points at. LH_ELEARNER_CKPT naming the folder that could not be
 * removed (the others still are), or ckpt_dir when `latest` names no
 * step-N folder or is a link (then nothing is removed). */
int lh_learner_ckpt_prune(const char *ckpt_dir, uint64_t keep, size_t *removed, size_t *links, lh_errbuf *err);


#endif

/* learner: what the trainer's files share (train.c and the train_*.c
 * beside it) and nothing else sees. The trainer's API is in
 * learner/internal.h ("the training step"); this is its state and the
 * phases of a step, one file each:
 *   train.c          the trainer's life, its stage parameters, back-pressure
 *   train_ids.c      sorted sets of episode ids (seen, done)
 *   train_scan.c     ready episodes from the store into the batcher
 *   train_batch.c    a batch taken from the batcher and read back
 *   train_windows.c  one episode's forward and backward, window by window,
 *                    with the burn-in of stored-state mode
 *   train_tree.c     the step's one-window episodes as a prefix tree, each
 *                    distinct context forward and backward once
 *   train_optim.c    the batch's gradient, summed over ranks, and AdamW
 *   train_rows.c     what a step trained, and its train_steps row
 *   train_stage.c    the stage's row and its turn to the next stage
 *   train_step.c     one step, phase by phase
 *   train_state.c    the done sets, balancer and stage in a checkpoint
 *   train_ranks.c    the trainer across ranks: comm, done-set gather,
 *                    weight hashes */
#ifndef LH_LEARNER_TRAIN_INTERNAL_H
#define LH_LEARNER_TRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "learner/internal.h"

/* Steps over which the stale share is measured (back-pressure). */
#define LH_LEARNER_STALE_WINDOW 8

/* A sorted set of episode ids, each with its key (train_ids.c): the
 * oldest version its episode sampled with. keys is NULL in a set of ids
 * alone (another rank's done list, gathered for a checkpoint). */
typedef struct {
  uint64_t *ids, *keys;
  size_t n, cap;
} lh_learner_id_set;

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
   * used is kept as sets: seen = handed to the batcher in this process
   * and waiting there; done = trained, dropped or left out, which a
   * checkpoint keeps (an admitted episode still waiting in the batcher is
   * not done: after a resume it is scanned again). An id leaves seen when
   * it is done, and done once its episode is too old for any step to
   * train (lh_learner_train_forget): both stay as large as the window of
   * trainable versions, whatever the run's length. */
  lh_learner_id_set seen, done;
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
  lh_learner_id_set *others;
  size_t n_others;
  int64_t last_row_ns;  /* when the previous train_steps row (or the trainer) was made */
  /* Back-pressure (learner.h, lh_learner_trainer_backlog): the cap, its
   * ceiling, and the episodes taken in and dropped as stale over the last
   * LH_LEARNER_STALE_WINDOW steps (a ring), with the totals at the previous step. */
  uint64_t backlog_cap, backlog_max;
  uint64_t win_taken[LH_LEARNER_STALE_WINDOW], win_stale[LH_LEARNER_STALE_WINDOW];
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
} lh_learner_step_acc;

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
} lh_learner_step_batch;

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
} lh_learner_step_counts;

/* ---- id sets (train_ids.c) ------------------------------------------------ */
/* 1 when id is in s; *at is where it is, or where it would go. */
int lh_learner_id_set_find(const lh_learner_id_set *s, uint64_t id, size_t *at);
/* Adds id with its key (nothing when present): 0, or LH_ENOMEM. */
int lh_learner_id_set_add(lh_learner_id_set *s, uint64_t id, uint64_t key);
/* Takes id out (nothing when absent). */
void lh_learner_id_set_remove(lh_learner_id_set *s, uint64_t id);
/* Forgets every id whose key is below `below`; how many went. */
size_t lh_learner_id_set_prune(lh_learner_id_set *s, uint64_t below);
void lh_learner_id_set_free(lh_learner_id_set *s);

/* ---- the trainer (train.c) ------------------------------------------------ */
/* The stage in force's lr, train_window and batch_episodes into t->cfg
 * (nothing without stages); LH_ENOMEM when the batch's items do not fit. */
int lh_learner_train_apply_stage(lh_learner_trainer *t);
/* The oldest version a step may train now: an episode that sampled with
 * an older one is stale (max_policy_lag behind the trainer's version). */
uint64_t lh_learner_train_oldest_trainable(const lh_learner_trainer *t);
/* Episode id is done with (trained, dropped or left out); oldest is the
 * oldest version it sampled with (the trainer's version when it sampled
 * none). 0, or LH_ENOMEM. */
int lh_learner_train_done(lh_learner_trainer *t, uint64_t id, uint64_t oldest);
/* After a step: forgets the done ids no scan could admit again, those
 * whose oldest version is further behind the trainer's than
 * max_policy_lag. */
void lh_learner_train_forget(lh_learner_trainer *t);
/* After each step: the step's intake joins the stale window, and the
 * back-pressure cap moves. */
void lh_learner_train_backlog_update(lh_learner_trainer *t);

/* ---- a batch (train_batch.c) ---------------------------------------------- */
int lh_learner_step_batch_alloc(lh_learner_step_batch *b, size_t n, lh_errbuf *err);
void lh_learner_step_batch_free(lh_learner_step_batch *b);
/* 1 with *n items in t->items, 0 when no batch is ready (on every rank). */
int lh_learner_train_take_batch(lh_learner_trainer *t, int multi, size_t *n, lh_errbuf *err);
/* The batch's episodes read back and joined into b (b->m of them). */
int lh_learner_train_read_batch(lh_learner_trainer *t, lh_learner_step_batch *b, lh_errbuf *err);

/* ---- windows (train_windows.c) -------------------------------------------- */
/* Forward and backward of one episode with per-token advantages adv, every
 * window's loss normalised by N; sums into acc. */
int lh_learner_train_episode(lh_learner_trainer *t, const lh_learner_episode *ep, const float *adv, double N,
                             lh_learner_step_acc *acc, lh_errbuf *err);

/* One PPO call's figures into acc: its loss and stats over n positions of
 * mask, adv and ver (the lag counted against version). */
void lh_learner_acc_add(lh_learner_step_acc *acc, const lh_learner_ppo_stats *ps, double loss, int has_entropy,
                        const uint8_t *mask, const float *adv, const uint32_t *ver, size_t n, uint64_t version);

/* ---- the prefix tree (train_tree.c) ---------------------------------------- */
/* Whether the step's tree takes ep: [learner] share_prefix in exact mode,
 * a model without conv, no images, under routing_replay no recorded
 * routing of another shape than the model's, and every sampled token in
 * the first window. */
int lh_learner_train_tree_eligible(const lh_learner_trainer *t, const lh_learner_episode *ep);
/* Forward and backward of the episodes eps[i] with in_tree[i] (advs[i]
 * their per-token advantages) as one prefix tree, each loss normalised by
 * N, summed into acc and the gradients; the balancer observes each
 * forward. acc->nonfinite set ends it early (the step is skipped). */
int lh_learner_train_tree(lh_learner_trainer *t, lh_learner_episode *const *eps, float *const *advs,
                          const uint8_t *in_tree, size_t m, double N, lh_learner_step_acc *acc, lh_errbuf *err);

/* ---- the optimizer step (train_optim.c) ----------------------------------- */
/* Advantages, gradients over the batch (and the ranks), then AdamW and the
 * balancer, or the step skipped; fills st's loss and gradient figures. */
int lh_learner_train_optimize(lh_learner_trainer *t, lh_learner_step_batch *b, double gN, double gE, int multi,
                              double lr, lh_learner_train_stats *st, lh_errbuf *err);

/* ---- rows (train_rows.c) -------------------------------------------------- */
/* What the step trained into c, summed over the ranks when sum. */
int lh_learner_train_count(lh_learner_trainer *t, const lh_learner_step_batch *b, int sum, size_t zero_adv_tokens,
                           lh_learner_step_counts *c, lh_errbuf *err);
/* The step's train_steps row (rank 0 writes it). */
int lh_learner_train_write_row(lh_learner_trainer *t, const lh_learner_train_stats *st, double dropped_stale,
                               lh_errbuf *err);

/* ---- stages (train_stage.c) ----------------------------------------------- */
/* Counts the step's episodes for the stage, writes its row, and may turn
 * to the next stage (nothing without stages). */
int lh_learner_train_stage_after(lh_learner_trainer *t, const lh_learner_train_stats *st,
                                 const lh_learner_step_counts *c, lh_errbuf *err);

#endif

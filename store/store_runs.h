/* store: what a run records beside its episodes (ARCHITECTURE.md §7):
 * the runs, evaluations and SFT steps, context-extension stages, policy
 * versions, train steps and actor heartbeats. Part of the store's public
 * API: store/store.h includes it, and either may be included first. */
#ifndef LH_STORE_RUNS_H
#define LH_STORE_RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "proto/wire.h"
#include "store/store.h"

/* ---- runs (schema 6 for everything past started_ms) ------------------- */

typedef struct {
  const char *run_id;      /* key; required */
  const char *command;     /* how it was started; may be NULL */
  const char *config;      /* the configuration text; may be NULL */
  int64_t started_ms;      /* wall clock; 0 means now */
  const char *kind;        /* "learner", "sft", "eval"; may be NULL */
  const char *version;     /* the longhaul version; NULL: this build's (LH_VERSION) */
  const char *host;        /* NULL: this machine's name */
  int rank;                /* the learner rank that wrote it (0 for one rank, sft, eval) */
  int64_t pid;             /* 0: this process */
} lh_store_run;
/* Records a run starting. A new run_id is a new row (*inserted = 1).
 * The same run_id again (a learner resumed under its run id) keeps the row
 * and its started_ms, adds one to starts, and takes this start's command,
 * config, version, host and pid, with ended_ms and outcome cleared
 * (*inserted = 0). */
int lh_store_put_run(lh_store *s, const lh_store_run *run, int *inserted, lh_errbuf *err);
/* Records how a run ended: ended_ms (0: now) and outcome ("ok",
 * "error"). A run_id with no row changes nothing (and is not an error). */
int lh_store_end_run(lh_store *s, const char *run_id, const char *outcome, int64_t ended_ms, lh_errbuf *err);
/* The run_id of the newest run of kind (by started_ms, then rowid) into
 * out (room for LH_STORE_NAME_BYTES); *found = 0 when the store has none
 * of that kind (an older store's rows have no kind). */
int lh_store_latest_run(lh_store *s, const char *kind, char *out, int *found, lh_errbuf *err);

/* ---- evaluations and SFT steps (schema 6) ------------------------------- */

/* One measurement of a policy on held-out seeds (a row of evals). */
typedef struct {
  const char *run_id;      /* required */
  const char *kind;        /* "sft" (an SFT run's periodic evaluation), "eval" (longhaul eval); required */
  int has_step;            /* step is known (an SFT step, a learner checkpoint's step) */
  uint64_t step;
  const char *env;         /* required */
  uint64_t seeds;          /* the held-out seeds 1..seeds */
  uint64_t episodes;       /* episodes played */
  uint64_t successes;
  double reward_mean;      /* NAN (stored as NULL) when not measured */
  double temperature;      /* 0: greedy */
  const char *checkpoint;  /* the checkpoint measured; may be NULL */
  double eval_ms;          /* how long it took; NAN: unknown */
  int64_t time_ms;         /* 0: now */
} lh_store_eval;
/* success_rate is stored as successes / episodes (NULL when no episode). */
int lh_store_put_eval(lh_store *s, const lh_store_eval *e, lh_errbuf *err);

typedef struct {
  const char *run_id;      /* required */
  uint64_t step;           /* 1-based: the step just taken */
  double loss, lr, grad_norm;  /* non-finite: NULL */
  uint64_t tokens;
  int skipped;
  int64_t time_ms;         /* 0: now */
} lh_store_sft_step;
/* One row of sft_steps; a step already stored for the run is replaced. */
int lh_store_put_sft_step(lh_store *s, const lh_store_sft_step *t, lh_errbuf *err);

/* ---- context-extension stages (schema 10) ------------------------------- */

/* Where one stage of a run began and what it trained (a row of stages,
 * keyed by run and stage; learner.h, "context-extension stages"). */
typedef struct {
  char run_id[LH_STORE_NAME_BYTES];
  uint32_t stage;
  uint64_t max_context;
  uint64_t began_step, began_version;  /* its first train step (0-based) and version */
  int64_t began_ms;
  uint64_t episodes, tokens, successes;  /* its own episodes trained, their tokens and successes */
  uint64_t carried, carry_dropped;       /* earlier stages' episodes trained, and dropped, after it began */
  int64_t time_ms;                       /* when the row was last written; 0: now */
} lh_store_stage;
/* Writes the row of (run_id, stage), replacing it. With drop_later, the
 * run's rows of later stages go (a resumed run redoes them). */
int lh_store_put_stage(lh_store *s, const lh_store_stage *row, int drop_later, lh_errbuf *err);
/* Every stages row (run_id NULL or "": of every run), by run and stage;
 * fn's non-zero return stops the walk and is returned. */
int lh_store_stages(lh_store *s, const char *run_id, int (*fn)(void *ctx, const lh_store_stage *row), void *ctx,
                    lh_errbuf *err);

typedef struct {
  uint64_t version;        /* key */
  const char *run_id;      /* may be NULL */
  uint64_t step;           /* learner step that produced it */
  const char *checkpoint;  /* checkpoint directory; may be NULL */
  uint64_t checksum;       /* WeightsAnnounce.checksum, stored as checksum_algo xxh3_64 */
  uint64_t total_bytes;
  uint32_t stage_index;
  uint32_t max_context;
  int64_t created_ms;      /* 0 means now */
} lh_store_policy_version;
int lh_store_put_policy_version(lh_store *s, const lh_store_policy_version *v, int *inserted,
                                lh_errbuf *err);

typedef struct {
  uint64_t step;           /* key */
  uint64_t version;        /* policy version after the step */
  char run_id[LH_STORE_NAME_BYTES];  /* may be empty */
  double loss;
  double reward_mean;
  double success_rate;     /* 0..1 over the step's episodes */
  uint64_t tokens;         /* sampled tokens trained on */
  uint32_t episodes;
  uint32_t dropped_stale;  /* episodes dropped for max_policy_lag */
  double lag_mean;         /* policy lag of the step's tokens */
  double lag_max;
  double logp_diff;        /* max |learner logp - behavior logp| at the current version */
  double grad_norm;
  double lr;
  int skipped;             /* 1 when a non-finite loss or gradient skipped it */
  uint32_t layers;         /* entries of maxvio used */
  double maxvio[LH_STORE_MAX_LAYERS];  /* MaxVio per layer, stored as a JSON array */
  double step_ms;          /* duration of the step */
  int64_t time_ms;         /* wall clock at its end; 0 means now */
  double busy_frac;        /* time in training steps / wall time since the previous row;
                              NAN (stored as NULL) when unknown */
  /* Expert load (schema 4, table train_step_experts): per layer, the share
   * of the step's routed (token, slot) assignments each expert got (summing
   * to 1 over a layer's experts). layers * experts values. */
  uint32_t experts;        /* 0: no expert rows */
  const double *expert_load; /* layers*experts, row-major by layer; NULL: none */
  /* Back-pressure (schema 5): the share of recent episodes dropped as stale
   * (NAN, stored as NULL, when unknown) and the backlog cap in force. */
  double stale_share;
  uint64_t backlog_cap;
  uint64_t positions;      /* every token of the trained episodes (forward and backward), schema 5 */
  /* Balancing (schema 7, "balancing"): per layer the experts with no load
   * over the last 100 steps (train_step_layers.dead, and the JSON array
   * train_steps.dead), the rule's name and the wall time the step spent in
   * balancing (statistics and bias update), NAN (NULL) when unknown. */
  int32_t dead[LH_STORE_MAX_LAYERS];  /* entries 0..layers-1; < 0: unknown */
  char balance[16];        /* "adaptive", "bias", ...; empty: unknown */
  double balance_ms;
  /* PPO diagnostics (schema 11, "ppo diagnostics"; NAN, stored as NULL,
   * when unknown) over the step's sampled tokens: approximate KL to the
   * behaviour policy (mean of r - 1 - log r), the policy's mean entropy,
   * the share of tokens whose gradient the clip or cap cut, and the
   * importance weights r = p/behaviour: mean and largest. */
  double approx_kl, entropy, clip_frac, iw_mean, iw_max;
  /* Schema 14: groups left out as flat since the previous step (every
   * reward the same, [learner] skip_flat_groups), and the sampled tokens
   * trained with an advantage of exactly 0. */
  uint64_t flat_groups, zero_adv_tokens;
} lh_store_train_step;
/* Non-finite loss and metrics are stored as NULL. With experts > 0 and
 * expert_load set, the layers * experts loads go to train_step_experts in
 * the same transaction (a non-finite or negative load is LH_EINVAL). */
int lh_store_put_train_step(lh_store *s, const lh_store_train_step *t, int *inserted,
                            lh_errbuf *err);

/* ---- train steps ------------------------------------------------------- */

typedef int (*lh_store_train_step_fn)(void *ctx, const lh_store_train_step *t);
/* Visits train steps with step >= from_step in step order, at most limit
 * (0: all). Metrics stored as NULL read back as NAN. A step with
 * train_step_experts rows comes with experts (its highest expert + 1) and
 * expert_load (layers * experts, NAN where a row is missing), which point
 * into the visitor's buffer: valid during the call only. Steps without
 * rows (older runs) have experts 0 and expert_load NULL. */
int lh_store_train_steps(lh_store *s, uint64_t from_step, uint32_t limit,
                         lh_store_train_step_fn fn, void *ctx, lh_errbuf *err);

/* ---- actor heartbeats (schema 3) -------------------------------------- */

typedef struct {
  char actor[LH_STORE_NAME_BYTES];  /* Envelope.sender */
  int64_t time_ms;                  /* wall clock when the learner stored it; 0 means now */
  char role[LH_STORE_NAME_BYTES];
  uint64_t policy_version;
  double episodes_per_s, tokens_per_s;
  uint32_t outbox_depth, open_episodes;
  uint64_t episodes_done;
  double policy_lag;
} lh_store_heartbeat;

/* Stores one Heartbeat of actor as a row of actor_heartbeats (at
 * time_ms, now when 0). A second heartbeat of the same actor in the same
 * millisecond replaces the first. Joins the open batch, as every put.
 * Keeps the actor to at most lh_store_options.heartbeats_per_actor rows:
 * now and then (on its first heartbeat since the store was opened, then
 * every heartbeats_per_actor/16 + 1) it deletes the actor's oldest rows.
 * Keeps the table to about heartbeats_total rows whatever the names: every
 * heartbeats_total/64 + 1 puts it deletes the oldest rows beyond that many
 * (by the time index), so many actors shorten every actor's history. */
int lh_store_put_heartbeat(lh_store *s, const char *actor, const Longhaul__Heartbeat *hb,
                           int64_t time_ms, lh_errbuf *err);

/* Deletes all but the newest `kept` rows of actor_heartbeats (at least
 * 1), uncapped: retention calls it at a store's cap, since heartbeats
 * under many names could otherwise hold a capped store full for good
 * (a put at the cap is refused, so the prune after a put never comes).
 * *deleted (may be NULL) gets how many rows went. */
int lh_store_prune_heartbeats(lh_store *s, uint32_t kept, uint64_t *deleted, lh_errbuf *err);

typedef int (*lh_store_heartbeat_fn)(void *ctx, const lh_store_heartbeat *h);
/* Visits the newest heartbeat of every actor, by actor name. */
int lh_store_latest_heartbeats(lh_store *s, lh_store_heartbeat_fn fn, void *ctx, lh_errbuf *err);

#endif

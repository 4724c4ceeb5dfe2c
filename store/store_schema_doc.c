/* store: the reference of the store's tables (docs/store.md, `longhaul
 * help store`), from the schema itself: the tables, views and indexes
 * the migrations make (store_schema.c), built in a database in memory,
 * with each column's type and key and the schema version that added it,
 * beside what each one means (DOCS below). The schema is the one source of
 * the names, types and keys; DOCS only says what they hold, and an object
 * or column without a doc, or a doc of none, fails the reference. */
#include <stdio.h>
#include <string.h>

#include "store/store_internal.h"

typedef struct {
  const char *object; /* a table, view or index */
  const char *column; /* NULL: the object itself */
  const char *doc;
} lh_store_doc;

/* What every table, view, index and column of the store holds, in the
 * order the reference prints them: {object, NULL, doc} describes a table,
 * view or index, {table, column, doc} a column (Markdown; a column's doc
 * stays on one line). The schema itself (store_schema.c) says the types,
 * keys and the version that added each; this table only what they mean.
 * lh_store_schema_reference refuses an object or column missing here, or
 * an entry that names none. */
static const lh_store_doc DOCS[] = {
    {"meta", NULL,
     "Keys and values about the file: `application` (`longhaul-replay-store`), `schema_version`, "
     "`created_ms`, `writer_open` (`pid P since MS`) while a learner writes the store, and "
     "`wal_checked_ms`, the time of the last one-row commit a writer made to tell an emptied -wal from a "
     "truncated one ([the write-ahead log](#the-write-ahead-log))."},
    {"meta", "key", "the key"},
    {"meta", "value", "its value"},

    {"migrations", NULL, "One row per schema step applied to this file."},
    {"migrations", "version", "the schema version the step brings the file to"},
    {"migrations", "description", "what the step adds"},
    {"migrations", "applied_ms", "when it ran on this file"},

    {"runs", NULL,
     "One row per run that wrote to the store: a learner run (every rank writes the row into its own "
     "store), a `longhaul sft` or a `longhaul eval`. A learner resumed under the same run id keeps its row "
     "(and its `started_ms`) and counts one more start."},
    {"runs", "run_id", "the run's id ([run ids](operations.md#run-ids))"},
    {"runs", "command", "the command line that started it, last start (may be NULL)"},
    {"runs", "config", "the config file's text as read at the last start (may be NULL)"},
    {"runs", "started_ms", "when it first started"},
    {"runs", "kind", "`learner`, `sft` or `eval` (NULL in older rows)"},
    {"runs", "version", "the longhaul version that wrote it (`longhaul --version`)"},
    {"runs", "host", "the machine it ran on"},
    {"runs", "rank", "the learner rank whose store this is (0 for one rank, sft and eval)"},
    {"runs", "pid", "the process id of the last start"},
    {"runs", "starts", "how many times it started on this store: 1, plus one per resume"},
    {"runs", "ended_ms", "when it ended; NULL while it runs, or when it was killed"},
    {"runs", "outcome", "`ok` or `error`, as it ended; NULL with `ended_ms`"},

    {"policy_versions", NULL, "One row per set of weights the learner published."},
    {"policy_versions", "version", "the policy version (what every sampled token records)"},
    {"policy_versions", "run_id", "the learner run that published it (NULL in rows older than run ids)"},
    {"policy_versions", "step", "the learner step after which it was published"},
    {"policy_versions", "checkpoint", "the checkpoint folder holding it"},
    {"policy_versions", "checksum",
     "the version's checksum (WeightsAnnounce.checksum: `lh_wire_weights_checksum` of its chunks' checksums)"},
    {"policy_versions", "total_bytes", "size of the weights"},
    {"policy_versions", "stage_index", "context-extension stage in force"},
    {"policy_versions", "max_context", "that stage's maximum context"},
    {"policy_versions", "created_ms", "when it was published"},
    {"policy_versions", "checksum_algo",
     "what `checksum` is: `xxh3_64` (every row written since schema 12), `lh_mx64` (rows from before, "
     "migrated); see [checksums](wire.md#checksums)"},

    {"episodes", NULL,
     "One row per episode, created by its first segment or by its EpisodeEnd, whichever arrives first (the "
     "reward may come before or after the segments). An episode is *ready* for training when `ended_ms IS "
     "NOT NULL AND segments_received = segment_count AND payloads_dropped = 0`; the learner trains a ready "
     "episode whose outcome is `success`, `failure` or `truncated`."},
    {"episodes", "id", "episode id (unique across actors)"},
    {"episodes", "actor", "the actor that ran it"},
    {"episodes", "env", "environment name (`calc`, `needle`, `maze`, a plugin's or a server's)"},
    {"episodes", "task_seed", "the task's seed (episodes of one seed form a GRPO group)"},
    {"episodes", "group_id", "the group it belongs to"},
    {"episodes", "status",
     "`running` (no EpisodeEnd yet), `complete` (ended with success or failure), `truncated` (hit max_steps "
     "or max_context), `aborted`, `error` ([what the store accepts](#what-the-store-accepts) says who sets "
     "which)"},
    {"episodes", "outcome", "`success`, `failure`, `truncated`, `aborted` or `error`; NULL while running"},
    {"episodes", "error",
     "why, for aborted and error episodes: the EpisodeEnd's text, or the learner's (`2 of 5 segments missing "
     "after the idle limit`); NULL otherwise"},
    {"episodes", "steps", "environment steps taken"},
    {"episodes", "tokens", "total tokens according to the EpisodeEnd (NULL while running)"},
    {"episodes", "tokens_received", "tokens over the segments stored"},
    {"episodes", "reward", "the final reward (NULL until the EpisodeEnd)"},
    {"episodes", "segment_count",
     "segments the EpisodeEnd says were sent (NULL until an EpisodeEnd is stored: it marks one)"},
    {"episodes", "segments_received", "distinct segments stored (duplicates are not counted)"},
    {"episodes", "min_version",
     "oldest policy version of the tokens the policy sampled (loss mask 1); NULL when none is stored"},
    {"episodes", "max_version", "newest policy version of those tokens; NULL when none is stored"},
    {"episodes", "created_ms", "first write to the row"},
    {"episodes", "updated_ms", "last write to the row"},
    {"episodes", "ended_ms",
     "when the EpisodeEnd was stored, or when the learner ended the episode without one (NULL while running)"},
    {"episodes", "payloads_dropped", "segments of the episode whose payload retention removed"},
    {"episodes", "swept_ms",
     "when the learner's idle sweep ended the episode (NULL if it never did); kept when a late EpisodeEnd "
     "comes after"},
    {"episodes", "prefix_episode",
     "a member of a shared prefix: the leader's episode, which stores the group's shared first observation "
     "once (its segments ending there); NULL for a whole episode "
     "([shared prefixes](actors.md#shared-prefixes))"},
    {"episodes", "prefix_tokens",
     "a member's first tokens that are the shared prefix; its `tokens` counts them, its `tokens_received` and "
     "segments only its own; `replay show` and `export` show it whole"},

    {"segments", NULL,
     "One row per segment, key `(episode, seq)`; a resent segment (the same content) is ignored and counted "
     "as a duplicate, one with other content under a stored key is refused. A row stored before schema 13 "
     "holds its payload (kilobytes, mostly on overflow pages) before `created_ms` and `dropped_ms`, so a "
     "scan of the table for its small columns reads every payload too: read the view `segment_metadata` "
     "instead. A payload is dropped exactly when `dropped_ms` is set (0: dropped by a build older than the "
     "column, time unknown)."},
    {"segments", "episode", "the episode's id"},
    {"segments", "seq", "0, 1, 2, ... within the episode"},
    {"segments", "start_offset", "token offset of the segment's first token in the episode"},
    {"segments", "tokens", "tokens in the segment"},
    {"segments", "sampled", "of those, tokens the policy sampled (loss mask 1)"},
    {"segments", "min_version", "oldest policy version of the sampled tokens (NULL when none)"},
    {"segments", "max_version", "newest policy version of the sampled tokens (NULL when none)"},
    {"segments", "images", "images in the segment"},
    {"segments", "payload_bytes", "size of the payload as stored (kept after retention drops it)"},
    {"segments", "payload",
     "the payload of a segment stored before schema 13 (see `segment_payloads`); NULL in every row stored "
     "since, and once retention dropped it"},
    {"segments", "created_ms", "when it was stored"},
    {"segments", "dropped_ms", "when retention dropped the payload (NULL while kept)"},
    {"segments", "state_offset",
     "the episode offset of the recurrent state the segment came with (`Segment.state`); NULL when none, or "
     "once retention dropped it"},
    {"segments", "state",
     "that state of a segment stored before schema 13 (`segment_payloads.state` since); NULL as `payload`"},

    {"segment_metadata", NULL,
     "The columns of `segments` that the index `segments_meta` covers, and no other: a query of the view "
     "reads the index alone, never a payload (`replay stats` and `longhaul report` read it; so can you)."},

    {"segment_payloads", NULL,
     "The payload and recurrent state of every segment stored since schema 13, one row per segment, key "
     "`(episode, seq)` as its `segments` row; retention deletes the row. A row of its own is what lets "
     "retention free room: SQLite gives a page back when its rows are deleted, not when they shrink."},
    {"segment_payloads", "episode", "the segment's episode"},
    {"segment_payloads", "seq", "the segment's seq"},
    {"segment_payloads", "payload",
     "the segment itself: a protobuf `longhaul.Segment` (`proto/longhaul.proto`: tokens, loss mask, "
     "behaviour log-probabilities, per-token versions, routed experts per layer, images with their pixels; "
     "its recurrent state is in `state`, not here)"},
    {"segment_payloads", "state",
     "the recurrent state the segment came with, (layers, heads, dk, dk) float32 (then the convolution's "
     "tails, with `[model] conv`) in native byte order, kept beside the payload so that a learner reads only "
     "the one a window starts from; NULL when none"},

    {"rewards", NULL, "The named reward terms of an episode's EpisodeEnd."},
    {"rewards", "episode", "the episode's id"},
    {"rewards", "term", "the term's name (e.g. `correct`, `format`)"},
    {"rewards", "value", "its value"},
    {"rewards", "step", "the environment step that produced it"},

    {"train_steps", NULL,
     "One row per learner optimizer step, written by rank 0. Metrics that were not finite are NULL. At the "
     "store's cap old steps are thinned ([retention](#retention))."},
    {"train_steps", "step", "learner step"},
    {"train_steps", "version", "policy version after the step"},
    {"train_steps", "run_id", "the learner run (NULL in rows older than run ids)"},
    {"train_steps", "loss", "the step's loss"},
    {"train_steps", "reward_mean", "mean reward of the step's episodes"},
    {"train_steps", "success_rate", "fraction of them with outcome success"},
    {"train_steps", "tokens", "sampled tokens trained on"},
    {"train_steps", "episodes", "episodes in the batch"},
    {"train_steps", "dropped_stale", "episodes dropped for exceeding max_policy_lag"},
    {"train_steps", "lag_mean", "mean policy lag (learner version minus token version) of the tokens"},
    {"train_steps", "lag_max", "largest policy lag of the tokens"},
    {"train_steps", "logp_diff",
     "max \\|learner logp - behaviour logp\\| over tokens sampled at the current version (train/rollout "
     "alignment)"},
    {"train_steps", "grad_norm", "global gradient norm before clipping"},
    {"train_steps", "lr", "learning rate used"},
    {"train_steps", "skipped", "1 when a non-finite loss or gradient skipped the step"},
    {"train_steps", "maxvio", "MaxVio per layer as a JSON array, e.g. `[0.12,0.4,0.09,0.2]`"},
    {"train_steps", "step_ms", "duration of the step"},
    {"train_steps", "time_ms", "wall clock at its end"},
    {"train_steps", "busy_frac",
     "the step's time over the wall time since the previous row (the learner's busy fraction; NULL in older "
     "rows)"},
    {"train_steps", "stale_share",
     "the share of the episodes taken in over the last 8 steps that were dropped as stale, as the "
     "back-pressure controller saw it (what `max_stale_share` bounds)"},
    {"train_steps", "backlog_cap", "the untrained episodes at which the actors are held, as the controller had set it"},
    {"train_steps", "positions",
     "every token of the step's episodes through forward and backward (`tokens` counts the sampled ones)"},
    {"train_steps", "dead", "per layer, the experts with no load over the last 100 steps, as a JSON array like `maxvio`"},
    {"train_steps", "balance", "the `[model] balance` rule of the step (`adaptive`, `bias`, `quantile`, `aux`, `none`)"},
    {"train_steps", "balance_ms", "wall time the step spent in balancing: routing statistics and the bias update"},
    {"train_steps", "approx_kl",
     "approximate KL to the behaviour policy over the step's sampled tokens: the mean of r - 1 - log r, r = "
     "exp(logp - behaviour logp)"},
    {"train_steps", "entropy", "the policy's mean entropy over those tokens"},
    {"train_steps", "clip_frac", "the fraction of those tokens whose ratio was clipped"},
    {"train_steps", "iw_mean", "the importance weights' mean"},
    {"train_steps", "iw_max", "the importance weights' largest value"},
    {"train_steps", "flat_groups",
     "groups left out as flat since the previous step: every reward the same, so under grpo or rloo every "
     "advantage 0 (`[learner] skip_flat_groups`)"},
    {"train_steps", "zero_adv_tokens",
     "of `tokens`, those trained with an advantage of exactly 0 (a member whose reward is its group's mean; "
     "0 with binary rewards once flat groups are left out)"},

    {"train_step_layers", NULL,
     "The same MaxVio per layer as rows. At the store's cap these rows are thinned as `train_steps` is."},
    {"train_step_layers", "step", "the learner step"},
    {"train_step_layers", "layer", "the layer (0-based)"},
    {"train_step_layers", "maxvio", "the layer's MaxVio: the largest expert load over the mean, minus 1"},
    {"train_step_layers", "dead", "the layer's dead experts (no load over the last 100 steps)"},

    {"train_step_experts", NULL,
     "The load of every expert per layer and train step; older runs have no rows. `longhaul report` draws "
     "its expert-load heat maps from this table. At the store's cap, the steps before the newest 256 are "
     "averaged in groups of 8 (`step / 8`): one row per layer and expert, the group's mean load, under its "
     "first step; further back they are thinned as `train_steps` is."},
    {"train_step_experts", "step", "the learner step"},
    {"train_step_experts", "layer", "the layer (0-based)"},
    {"train_step_experts", "expert", "the expert (0-based)"},
    {"train_step_experts", "load",
     "the share of the step's routed (token, slot) assignments in that layer that went to that expert "
     "(summed over ranks; the loads of a layer sum to 1)"},

    {"actor_heartbeats", NULL,
     "Every Heartbeat an actor sends, stored by the learner in the same batch as the round's segments. "
     "`longhaul launch` shows the newest row of each actor. The table keeps at most the newest 3600 rows of "
     "each actor (an hour at one heartbeat a second; `lh_store_options.heartbeats_per_actor`, 0 keeps all): "
     "on an actor's first heartbeat since the learner opened the store, then on every 3600/16 + 1 = 226th, "
     "the learner deletes that actor's older rows through the key, keeping the newest 3375 so that the count "
     "never passes 3600. A store that an older build let grow is cut down as each actor next reports; the "
     "rows of an actor that no longer reports stay. The table as a whole keeps about the newest 1 048 576 "
     "rows (`heartbeats_total`; every 16 385th heartbeat the learner deletes older rows through the time "
     "index), so that a peer sending heartbeats under a new name each time cannot grow it without end; past "
     "a fleet of about 290 actors each one's history is shorter than an hour. Near a store's cap "
     "(`max_db_bytes`) retention first keeps only the newest 4096 rows (`lh_store_prune_heartbeats`): a put "
     "at the cap is refused, so without it heartbeats under many names held a capped store full for good."},
    {"actor_heartbeats", "actor", "the sender (the actor's `--name`)"},
    {"actor_heartbeats", "time_ms", "when the learner stored it"},
    {"actor_heartbeats", "role", "`actor`"},
    {"actor_heartbeats", "policy_version", "the version the actor samples with"},
    {"actor_heartbeats", "episodes_per_s", "its recent rate of episodes"},
    {"actor_heartbeats", "tokens_per_s", "its recent rate of tokens"},
    {"actor_heartbeats", "outbox_depth", "messages sent and not yet acked"},
    {"actor_heartbeats", "open_episodes", "episodes running"},
    {"actor_heartbeats", "episodes_done", "episodes ended since it started"},
    {"actor_heartbeats", "policy_lag", "newest announced version minus the version in use"},

    {"evals", NULL,
     "One row per measurement of a policy on held-out seeds, by `longhaul sft` (each `--eval-every` "
     "evaluation and the last one) and `longhaul eval`. An eval curve is `SELECT step, success_rate FROM "
     "evals WHERE run_id = ? ORDER BY step`."},
    {"evals", "id", "the row"},
    {"evals", "run_id", "the sft or eval run that measured it"},
    {"evals", "kind", "`sft` (an SFT run's evaluation) or `eval` (`longhaul eval`)"},
    {"evals", "step",
     "the SFT step, or the learner checkpoint's step (NULL for an SFT checkpoint given to `eval`)"},
    {"evals", "env", "the environment"},
    {"evals", "seeds", "the held-out seeds 1..`seeds`"},
    {"evals", "episodes", "episodes played"},
    {"evals", "successes", "episodes won"},
    {"evals", "success_rate", "successes / episodes"},
    {"evals", "reward_mean", "mean reward (NULL: not measured by these commands yet)"},
    {"evals", "temperature", "0 for greedy, else the sampling temperature"},
    {"evals", "checkpoint", "the checkpoint folder measured"},
    {"evals", "eval_ms", "how long it took"},
    {"evals", "time_ms", "when it was stored"},

    {"sft_steps", NULL, "SFT's loss per step."},
    {"sft_steps", "run_id", "the sft run"},
    {"sft_steps", "step", "the step, 1-based"},
    {"sft_steps", "loss", "the step's loss (NULL when not finite)"},
    {"sft_steps", "lr", "the learning rate used"},
    {"sft_steps", "grad_norm", "the gradient norm before clipping (NULL when not finite)"},
    {"sft_steps", "tokens", "the policy's tokens in the step's batch"},
    {"sft_steps", "skipped", "1 for a non-finite step"},
    {"sft_steps", "time_ms", "when it was stored"},

    {"stages", NULL,
     "One row per context-extension stage of a run ([stages](operations.md#context-extension-stages)), "
     "which `replay stats` lists and `longhaul report` marks on its step charts."},
    {"stages", "run_id", "the learner run"},
    {"stages", "stage", "the stage's index"},
    {"stages", "max_context", "the stage's maximum context"},
    {"stages", "began_step", "the learner step at which it began"},
    {"stages", "began_version", "its first policy version"},
    {"stages", "began_ms", "when it began"},
    {"stages", "episodes", "episodes of its own it trained"},
    {"stages", "tokens", "their tokens"},
    {"stages", "successes", "of them, successes"},
    {"stages", "carried", "episodes of an earlier stage trained during it (`stage_carry = train`)"},
    {"stages", "carry_dropped", "episodes of an earlier stage left out (`stage_carry = drop`)"},
    {"stages", "time_ms", "when the row was last written"},

    {"retired_episodes", NULL,
     "What `replay stats` and `longhaul report` count of the episodes retention retired at the store's cap "
     "(their `episodes`, `segments` and `rewards` rows deleted), summed per environment, actor, status and "
     "outcome (`outcome` is `''` for none). The readers add it into every total, so that they cover the "
     "whole run."},
    {"retired_episodes", "env", "the retired episodes' environment"},
    {"retired_episodes", "actor", "their actor"},
    {"retired_episodes", "status", "their status"},
    {"retired_episodes", "outcome", "their outcome (`''` for none)"},
    {"retired_episodes", "episodes", "episodes retired"},
    {"retired_episodes", "ends", "of those, with an EpisodeEnd stored"},
    {"retired_episodes", "swept", "of those, ended by the idle sweep (`swept_ms` set)"},
    {"retired_episodes", "incomplete",
     "of those, ended with segments missing or payloads dropped (`replay stats`' incomplete)"},
    {"retired_episodes", "segments", "their segments (`segments_received`), every payload dropped"},
    {"retired_episodes", "segments_missing", "segments their ends counted that never came"},
    {"retired_episodes", "tokens", "tokens over their segments (`tokens_received`)"},
    {"retired_episodes", "steps", "environment steps"},
    {"retired_episodes", "rewarded", "episodes with a reward"},
    {"retired_episodes", "reward_sum", "their rewards' sum (NULL when none)"},
    {"retired_episodes", "reward_min", "their least reward (NULL when none)"},
    {"retired_episodes", "reward_max", "their greatest reward (NULL when none)"},
    {"retired_episodes", "reward_terms", "their `rewards` rows"},
    {"retired_episodes", "min_version", "oldest policy version of their sampled tokens"},
    {"retired_episodes", "max_version", "newest policy version of their sampled tokens"},
    {"retired_episodes", "first_created_ms", "the first one's start"},
    {"retired_episodes", "last_ended_ms", "the last one's end"},
    {"retired_episodes", "retired_ms", "when episodes were last added to the row"},

    {"retired_versions", NULL,
     "The same episodes by environment and newest version: the report's reward and success by policy "
     "version add them in."},
    {"retired_versions", "env", "the environment"},
    {"retired_versions", "version", "the episodes' newest policy version"},
    {"retired_versions", "episodes", "episodes retired"},
    {"retired_versions", "rewarded", "of them, with a reward"},
    {"retired_versions", "reward_sum", "their rewards' sum"},
    {"retired_versions", "successes", "of the rewarded, outcome success"},

    {"retired_rewards", NULL, "The retired episodes' reward terms by environment and name."},
    {"retired_rewards", "env", "the environment"},
    {"retired_rewards", "term", "the term's name"},
    {"retired_rewards", "terms", "`rewards` rows retired"},
    {"retired_rewards", "value_sum", "the sum of their values"},

    {"retired_steps", NULL,
     "One row (`id` 1): the `train_steps` and `policy_versions` rows retention thinned away at the store's "
     "cap, which `replay stats` adds to the rows still stored."},
    {"retired_steps", "id", "1"},
    {"retired_steps", "train_steps", "`train_steps` rows thinned away"},
    {"retired_steps", "policy_versions", "`policy_versions` rows thinned away"},

    {"episodes_env", NULL, "Episodes by environment and status."},
    {"episodes_status", NULL, "Episodes by status."},
    {"episodes_reward", NULL, "Episodes by reward."},
    {"actor_heartbeats_time", NULL, "Heartbeats by time, for the prune of the whole table."},
    {"episodes_short", NULL,
     "The episodes whose EpisodeEnd is stored, `complete` or `truncated`, still short of segments: what the "
     "idle sweep looks for."},
    {"evals_run", NULL, "Evaluations by run and step."},
    {"segments_meta", NULL,
     "The segments' small columns, which the view `segment_metadata` reads without touching a payload."},
    {"segments_state", NULL, "The segments that carry a recurrent state, by episode and offset."},
    {"episodes_retirable", NULL,
     "The ended episodes whose payloads are all dropped, the ones retention may retire at the cap, oldest "
     "end first."},
    {"episodes_prefix", NULL, "The members of shared prefixes, by leader."},
};

#define N_DOCS (sizeof DOCS / sizeof DOCS[0])

/* The database that steps 1..version of the migrations make, in memory:
 * 0, or a SQLite code with why set. */
static int schema_at(uint32_t version, sqlite3 **out, char *why, size_t why_bytes) {
  sqlite3 *mem = NULL;
  int rc = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, NULL);
  for (size_t i = 0; rc == SQLITE_OK && i < lh_store_migration_count; i++)
    if (lh_store_migrations[i].version <= version) rc = sqlite3_exec(mem, lh_store_migrations[i].sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    snprintf(why, why_bytes, "building schema %u in memory: %s", version, mem ? sqlite3_errmsg(mem) : "no memory");
    sqlite3_close(mem);
    return rc;
  }
  *out = mem;
  return SQLITE_OK;
}

/* Whether db has object (of any type), or column of table object. */
static int has(sqlite3 *db, const char *object, const char *column) {
  sqlite3_stmt *st = NULL;
  const char *sql = column ? "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2"
                           : "SELECT 1 FROM sqlite_schema WHERE name = ?1";
  int found = 0;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, object, -1, SQLITE_STATIC);
    if (column) sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  return found;
}

/* The first schema version whose migrations make object (or its column). */
static uint32_t since(sqlite3 *const *at, const char *object, const char *column) {
  for (uint32_t v = 1; v <= LH_STORE_SCHEMA_VERSION; v++)
    if (has(at[v - 1], object, column)) return v;
  return 0;
}

static const lh_store_doc *find_doc(const char *object, const char *column) {
  for (size_t i = 0; i < N_DOCS; i++)
    if (strcmp(DOCS[i].object, object) == 0 &&
        (column ? DOCS[i].column && strcmp(DOCS[i].column, column) == 0 : !DOCS[i].column))
      return &DOCS[i];
  return NULL;
}

/* Every object and column of the schema has its doc, and every doc names
 * one: 0, or LH_EINVAL with err naming the first that does not. */
static int check_docs(sqlite3 *db, lh_errbuf *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT s.name, c.name FROM sqlite_schema s LEFT JOIN pragma_table_info(s.name) c "
                              "ON s.type = 'table' WHERE s.name NOT LIKE 'sqlite_%' ORDER BY s.name, c.cid",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return lh_errbuf_set(err, LH_ESTORE_SQLITE, "store reference: %s", sqlite3_errmsg(db));
  int bad = 0;
  while (!bad && sqlite3_step(st) == SQLITE_ROW) {
    const char *object = (const char *)sqlite3_column_text(st, 0);
    const char *column = (const char *)sqlite3_column_text(st, 1);
    if (!find_doc(object, NULL))
      bad = lh_errbuf_set(err, LH_EINVAL, "store reference: %s has no doc in store/store_schema_doc.c", object);
    else if (column && !find_doc(object, column))
      bad = lh_errbuf_set(err, LH_EINVAL, "store reference: column %s.%s has no doc in store/store_schema_doc.c",
                          object, column);
  }
  sqlite3_finalize(st);
  for (size_t i = 0; !bad && i < N_DOCS; i++) {
    if (!has(db, DOCS[i].object, DOCS[i].column))
      bad = lh_errbuf_set(err, LH_EINVAL, "store reference: the doc of %s%s%s names nothing in the schema",
                          DOCS[i].object, DOCS[i].column ? "." : "", DOCS[i].column ? DOCS[i].column : "");
    else if (!DOCS[i].doc || !DOCS[i].doc[0])
      bad = lh_errbuf_set(err, LH_EINVAL, "store reference: the doc of %s%s%s is empty", DOCS[i].object,
                          DOCS[i].column ? "." : "", DOCS[i].column ? DOCS[i].column : "");
  }
  return bad;
}

/* The table a view reads (the word after its FROM), into base. */
static void view_base(sqlite3 *db, const char *view, char *base, size_t bytes) {
  sqlite3_stmt *st = NULL;
  base[0] = 0;
  if (sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_schema WHERE type = 'view' AND name = ?1", -1, &st, NULL))
    return;
  sqlite3_bind_text(st, 1, view, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *from = strstr((const char *)sqlite3_column_text(st, 0), " FROM ");
    if (from) snprintf(base, bytes, "%.*s", (int)strcspn(from + 6, " ;"), from + 6);
  }
  sqlite3_finalize(st);
}

/* One table's or view's section: heading, doc, key and the columns'
 * table; a view's columns have the docs of the table it reads. */
static int table_section(sqlite3 *const *at, sqlite3 *db, const lh_store_doc *d, const char *type, lh_str *out) {
  char base[64];
  snprintf(base, sizeof base, "%s", d->object);
  if (strcmp(type, "view") == 0) view_base(db, d->object, base, sizeof base);
  int rc = lh_str_printf(out, "### `%s`\n\n%s%s Since schema %u.\n\n", d->object,
                         strcmp(type, "view") ? "" : "A view. ", d->doc, since(at, d->object, NULL));
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid", -1, &st, NULL))
    return LH_ESTORE_SQLITE;
  sqlite3_bind_text(st, 1, d->object, -1, SQLITE_STATIC);
  int keys = 0;
  while (sqlite3_step(st) == SQLITE_ROW)
    if (sqlite3_column_int(st, 2) > keys) keys = sqlite3_column_int(st, 2);
  if (rc == 0 && keys > 1) {
    rc = lh_str_puts(out, "Primary key: `(");
    for (int k = 1; rc == 0 && k <= keys; k++) {
      sqlite3_reset(st);
      while (sqlite3_step(st) == SQLITE_ROW)
        if (sqlite3_column_int(st, 2) == k)
          rc = lh_str_printf(out, "%s%s", k > 1 ? ", " : "", (const char *)sqlite3_column_text(st, 0));
    }
    if (rc == 0) rc = lh_str_puts(out, ")`.\n\n");
  }
  if (rc == 0) rc = lh_str_puts(out, "| column | type | schema | meaning |\n| --- | --- | --- | --- |\n");
  sqlite3_reset(st);
  while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
    const char *column = (const char *)sqlite3_column_text(st, 0);
    const char *ctype = (const char *)sqlite3_column_text(st, 1);
    const lh_store_doc *c = find_doc(base, column);
    rc = lh_str_printf(out, "| `%s` | %s%s | %u | %s |\n", column, ctype, keys == 1 && sqlite3_column_int(st, 2) ? " PK" : "",
                       since(at, d->object, column), c ? c->doc : "?");
  }
  sqlite3_finalize(st);
  if (rc == 0) rc = lh_str_puts(out, "\n");
  return rc;
}

int lh_store_schema_reference(lh_str *out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "store reference: NULL output");
  sqlite3 *at[LH_STORE_SCHEMA_VERSION] = {0};
  char why[256];
  int rc = 0;
  for (uint32_t v = 1; rc == 0 && v <= LH_STORE_SCHEMA_VERSION; v++)
    if (schema_at(v, &at[v - 1], why, sizeof why) != SQLITE_OK) rc = lh_errbuf_set(err, LH_ESTORE_SQLITE, "store reference: %s", why);
  sqlite3 *db = at[LH_STORE_SCHEMA_VERSION - 1];
  if (rc == 0) rc = check_docs(db, err);
  /* the tables and views in the docs' order, then the indexes */
  for (size_t i = 0; rc == 0 && i < N_DOCS; i++) {
    const lh_store_doc *d = &DOCS[i];
    if (d->column) continue;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT type FROM sqlite_schema WHERE name = ?1", -1, &st, NULL) != SQLITE_OK) {
      rc = lh_errbuf_set(err, LH_ESTORE_SQLITE, "store reference: %s", sqlite3_errmsg(db));
      break;
    }
    sqlite3_bind_text(st, 1, d->object, -1, SQLITE_STATIC);
    char type[16] = "";
    if (sqlite3_step(st) == SQLITE_ROW) snprintf(type, sizeof type, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (strcmp(type, "table") == 0 || strcmp(type, "view") == 0) {
      rc = table_section(at, db, d, type, out);
      if (rc) rc = lh_errbuf_set(err, rc, "store reference: cannot write %s", d->object);
    }
  }
  if (rc == 0) rc = lh_str_puts(out, "### Indexes\n\n");
  for (size_t i = 0; rc == 0 && i < N_DOCS; i++) {
    const lh_store_doc *d = &DOCS[i];
    if (d->column) continue;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?1", -1, &st, NULL)) {
      rc = lh_errbuf_set(err, LH_ESTORE_SQLITE, "store reference: %s", sqlite3_errmsg(db));
      break;
    }
    sqlite3_bind_text(st, 1, d->object, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
      /* the statement on one line, its runs of blanks as one */
      const char *sql = (const char *)sqlite3_column_text(st, 0);
      rc = lh_str_printf(out, "- `%s` (schema %u): %s `", d->object, since(at, d->object, NULL), d->doc);
      for (const char *p = sql; rc == 0 && *p; p++) {
        if (*p == ' ' && p[1] == ' ') continue;
        rc = lh_str_append(out, p, 1);
      }
      if (rc == 0) rc = lh_str_puts(out, "`\n");
    }
    sqlite3_finalize(st);
  }
  if (rc == 0) rc = lh_str_puts(out, "\n");
  for (uint32_t v = 0; v < LH_STORE_SCHEMA_VERSION; v++) sqlite3_close(at[v]);
  if (rc == LH_ENOMEM) lh_errbuf_set(err, rc, "store reference: no memory");
  return rc;
}

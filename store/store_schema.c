/* store: the schema, as a table of migration steps applied in order.
 *
 * A new file runs every step; a file at version v runs the steps above v.
 * Steps are only ever appended: a released step never changes, so every
 * file that ran it has the same tables. docs/store.md documents the result (longhaul help store). */
#include "store/store_internal.h"

/* Version 1: the tables of ARCHITECTURE.md §7. */
static const char schema_v1[] =
    "CREATE TABLE meta("
    "  key TEXT PRIMARY KEY,"
    "  value TEXT NOT NULL);"
    "CREATE TABLE migrations("
    "  version INTEGER PRIMARY KEY,"
    "  description TEXT NOT NULL,"
    "  applied_ms INTEGER NOT NULL);"
    "CREATE TABLE runs("
    "  run_id TEXT PRIMARY KEY,"
    "  command TEXT,"
    "  config TEXT,"
    "  started_ms INTEGER NOT NULL);"
    "CREATE TABLE policy_versions("
    "  version INTEGER PRIMARY KEY,"
    "  run_id TEXT,"
    "  step INTEGER NOT NULL,"
    "  checkpoint TEXT,"
    "  checksum INTEGER NOT NULL DEFAULT 0,"
    "  total_bytes INTEGER NOT NULL DEFAULT 0,"
    "  stage_index INTEGER NOT NULL DEFAULT 0,"
    "  max_context INTEGER NOT NULL DEFAULT 0,"
    "  created_ms INTEGER NOT NULL);"
    "CREATE TABLE episodes("
    "  id INTEGER PRIMARY KEY,"
    "  actor TEXT NOT NULL,"
    "  env TEXT NOT NULL,"
    "  task_seed INTEGER NOT NULL DEFAULT 0,"
    "  group_id INTEGER NOT NULL DEFAULT 0,"
    "  status TEXT NOT NULL DEFAULT 'running' CHECK (status IN"
    "    ('running','complete','truncated','aborted','error')),"
    "  outcome TEXT CHECK (outcome IS NULL OR outcome IN"
    "    ('success','failure','truncated','aborted','error')),"
    "  error TEXT,"
    "  steps INTEGER NOT NULL DEFAULT 0,"
    "  tokens INTEGER,"
    "  tokens_received INTEGER NOT NULL DEFAULT 0,"
    "  reward REAL,"
    "  segment_count INTEGER,"
    "  segments_received INTEGER NOT NULL DEFAULT 0,"
    "  min_version INTEGER,"
    "  max_version INTEGER,"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL,"
    "  ended_ms INTEGER);"
    "CREATE TABLE segments("
    "  episode INTEGER NOT NULL,"
    "  seq INTEGER NOT NULL,"
    "  start_offset INTEGER NOT NULL,"
    "  tokens INTEGER NOT NULL,"
    "  sampled INTEGER NOT NULL,"
    "  min_version INTEGER,"
    "  max_version INTEGER,"
    "  images INTEGER NOT NULL DEFAULT 0,"
    "  payload_bytes INTEGER NOT NULL,"
    "  payload BLOB,"
    "  created_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (episode, seq));"
    "CREATE TABLE rewards("
    "  episode INTEGER NOT NULL,"
    "  term TEXT NOT NULL,"
    "  value REAL NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  PRIMARY KEY (episode, step, term));"
    "CREATE TABLE train_steps("
    "  step INTEGER PRIMARY KEY,"
    "  version INTEGER NOT NULL,"
    "  run_id TEXT,"
    "  loss REAL,"
    "  reward_mean REAL,"
    "  success_rate REAL,"
    "  tokens INTEGER NOT NULL DEFAULT 0,"
    "  episodes INTEGER NOT NULL DEFAULT 0,"
    "  dropped_stale INTEGER NOT NULL DEFAULT 0,"
    "  lag_mean REAL,"
    "  lag_max REAL,"
    "  logp_diff REAL,"
    "  grad_norm REAL,"
    "  lr REAL,"
    "  skipped INTEGER NOT NULL DEFAULT 0,"
    "  maxvio TEXT,"
    "  step_ms REAL,"
    "  time_ms INTEGER NOT NULL);";

/* Version 2: retention bookkeeping (which payloads were dropped, when),
 * MaxVio per layer as rows as well as the JSON array, and the indexes the
 * episode queries of `longhaul replay` use. segments has no index besides
 * its key on purpose: every ingested segment would pay for it, while
 * retention, the one query by segment version, is rare and scans. */
static const char schema_v2[] =
    "ALTER TABLE episodes ADD COLUMN payloads_dropped INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE segments ADD COLUMN dropped_ms INTEGER;"
    "CREATE TABLE train_step_layers("
    "  step INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL,"
    "  maxvio REAL,"
    "  PRIMARY KEY (step, layer));"
    "CREATE INDEX episodes_env ON episodes(env, status);"
    "CREATE INDEX episodes_status ON episodes(status);"
    "CREATE INDEX episodes_reward ON episodes(reward);";

/* Version 3: what a running fleet looks like. Each actor Heartbeat the
 * learner receives becomes a row of actor_heartbeats (the learner writes
 * it in the round's batch); busy_frac on train_steps is the learner's time
 * in training steps over the wall time since the previous step row. The
 * key's time comes first in the index so that "the latest per actor" and
 * "everything since t" both read an index range. */
static const char schema_v3[] =
    "CREATE TABLE actor_heartbeats("
    "  actor TEXT NOT NULL,"
    "  time_ms INTEGER NOT NULL,"
    "  role TEXT,"
    "  policy_version INTEGER NOT NULL DEFAULT 0,"
    "  episodes_per_s REAL,"
    "  tokens_per_s REAL,"
    "  outbox_depth INTEGER NOT NULL DEFAULT 0,"
    "  open_episodes INTEGER NOT NULL DEFAULT 0,"
    "  episodes_done INTEGER NOT NULL DEFAULT 0,"
    "  policy_lag REAL,"
    "  PRIMARY KEY (actor, time_ms));"
    "CREATE INDEX actor_heartbeats_time ON actor_heartbeats(time_ms);"
    "ALTER TABLE train_steps ADD COLUMN busy_frac REAL;";

/* Version 4: the load of every expert per layer and train step, the
 * share of the step's routed (token, slot) assignments it got (summing to
 * 1 over a layer's experts), for the report's expert-load heat maps. */
static const char schema_v4[] =
    "CREATE TABLE train_step_experts("
    "  step INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL,"
    "  expert INTEGER NOT NULL,"
    "  load REAL NOT NULL,"
    "  PRIMARY KEY (step, layer, expert));";

/* Version 5: back-pressure and the learner's pace, and the idle sweep's
 * record. positions is every
 * token of the step's episodes through forward and backward (tokens counts
 * the sampled ones only), so a step's rate compares with a model
 * benchmark's. stale_share is the share of the episodes the
 * learner took in over its recent steps that were dropped for
 * max_policy_lag (what [learner] max_stale_share bounds); backlog_cap is the
 * number of untrained episodes at which the learner told the actors to
 * start no new ones, as its controller had set it at that step.
 * episodes.swept_ms is when the learner's idle sweep ended the episode
 * (NULL if it never did; kept when a late EpisodeEnd comes). The partial
 * index holds only the ended episodes still short of segments, the ones
 * the sweep looks for among all the complete ones: the rows leave it as
 * their last segment comes or the sweep ends them as error. */
static const char schema_v5[] =
    "ALTER TABLE train_steps ADD COLUMN stale_share REAL;"
    "ALTER TABLE train_steps ADD COLUMN backlog_cap INTEGER;"
    "ALTER TABLE train_steps ADD COLUMN positions INTEGER;"
    "ALTER TABLE episodes ADD COLUMN swept_ms INTEGER;"
    "CREATE INDEX episodes_short ON episodes(updated_ms)"
    "  WHERE segment_count IS NOT NULL AND segments_received <> segment_count"
    "  AND status IN ('complete', 'truncated');";

/* Version 6: run identity and evaluations. A runs row says which build
 * (version), on which host and rank, as what (kind: learner, sft, eval)
 * a run wrote the store, how often it was started on it (starts: a
 * learner resumed under the same run id adds one), and how it ended
 * (ended_ms, outcome; NULL while it runs or when it was killed). evals
 * holds the greedy (or sampled) success rates `longhaul sft` and
 * `longhaul eval` measure on held-out seeds, one row per measurement, so
 * that an eval curve is a query; sft_steps holds SFT's per-step loss. */
static const char schema_v6[] =
    "ALTER TABLE runs ADD COLUMN kind TEXT;"
    "ALTER TABLE runs ADD COLUMN version TEXT;"
    "ALTER TABLE runs ADD COLUMN host TEXT;"
    "ALTER TABLE runs ADD COLUMN rank INTEGER;"
    "ALTER TABLE runs ADD COLUMN pid INTEGER;"
    "ALTER TABLE runs ADD COLUMN starts INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE runs ADD COLUMN ended_ms INTEGER;"
    "ALTER TABLE runs ADD COLUMN outcome TEXT;"
    "CREATE TABLE evals("
    "  id INTEGER PRIMARY KEY,"
    "  run_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  step INTEGER,"
    "  env TEXT NOT NULL,"
    "  seeds INTEGER NOT NULL,"
    "  episodes INTEGER NOT NULL,"
    "  successes INTEGER NOT NULL,"
    "  success_rate REAL,"
    "  reward_mean REAL,"
    "  temperature REAL NOT NULL DEFAULT 0,"
    "  checkpoint TEXT,"
    "  eval_ms REAL,"
    "  time_ms INTEGER NOT NULL);"
    "CREATE INDEX evals_run ON evals(run_id, step);"
    "CREATE TABLE sft_steps("
    "  run_id TEXT NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  loss REAL,"
    "  lr REAL,"
    "  grad_norm REAL,"
    "  tokens INTEGER NOT NULL DEFAULT 0,"
    "  skipped INTEGER NOT NULL DEFAULT 0,"
    "  time_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (run_id, step));";

/* Version 7: the segments' metadata without their payloads. A segment's
 * row holds its payload (kilobytes, mostly on overflow pages) before
 * created_ms and dropped_ms, so a scan of the table for its small columns
 * (the report's intake over time, `replay stats`) read every payload page
 * too. segments_meta holds every column those scans read, so they read
 * the index alone; created_ms comes first, so an ingest appends to its
 * right edge and the report's time span is two index seeks. The view
 * segment_metadata is those columns and no others, what the scans query:
 * the rank stores' union of it (store_ranks.c) reads each rank's index,
 * where a union of the segments tables would read every row whole. A
 * payload is dropped exactly when dropped_ms is set: the rows an older
 * build dropped before the column existed (schema 1) get 0, "dropped,
 * time unknown". Both statements that read the table read it once, so
 * migrating a large store takes about two reads of its file. */
static const char schema_v7[] =
    "UPDATE segments SET dropped_ms = 0 WHERE dropped_ms IS NULL AND payload IS NULL;"
    "CREATE INDEX segments_meta ON segments(created_ms, sampled, tokens, payload_bytes,"
    "  min_version, max_version, dropped_ms);"
    "CREATE VIEW segment_metadata AS SELECT created_ms, sampled, tokens, payload_bytes,"
    "  min_version, max_version, dropped_ms FROM segments;";

/* Version 8 ("balancing"): what the router's balancing did at each train
 * step: the experts of each layer with no load over the last 100 steps
 * (dead, per layer row, and as a JSON array on the step, as maxvio is),
 * the balancing rule (balance) and the wall time the step spent in it
 * (balance_ms: routing statistics and the bias update). */
static const char schema_v8[] =
    "ALTER TABLE train_step_layers ADD COLUMN dead INTEGER;"
    "ALTER TABLE train_steps ADD COLUMN dead TEXT;"
    "ALTER TABLE train_steps ADD COLUMN balance TEXT;"
    "ALTER TABLE train_steps ADD COLUMN balance_ms REAL;";

/* Version 9 ("stored state"): the recurrent state a segment came with
 * (Segment.state, docs/learner.md "Stored state") and its episode
 * offset, NULL when none. The state is kept beside the payload, not in
 * it, so that a learner reads the one state a window starts from and
 * decodes the payloads without any (a state is tens of kilobytes, the
 * tokens of a segment a few); segments_state finds the latest state
 * before a window without reading the episode's rows. */
static const char schema_v9[] =
    "ALTER TABLE segments ADD COLUMN state_offset INTEGER;"
    "ALTER TABLE segments ADD COLUMN state BLOB;"
    "CREATE INDEX segments_state ON segments(episode, state_offset) WHERE state_offset IS NOT NULL;";

/* Version 10 ("stages"): where each context-extension stage of a run began
 * (its first step and version) and what it trained: its own episodes,
 * their tokens and successes, and the earlier stages' episodes trained
 * (carried) or dropped after it began. */
static const char schema_v10[] =
    "CREATE TABLE stages("
    "  run_id TEXT NOT NULL,"
    "  stage INTEGER NOT NULL,"
    "  max_context INTEGER NOT NULL,"
    "  began_step INTEGER NOT NULL,"
    "  began_version INTEGER NOT NULL,"
    "  began_ms INTEGER NOT NULL,"
    "  episodes INTEGER NOT NULL DEFAULT 0,"
    "  tokens INTEGER NOT NULL DEFAULT 0,"
    "  successes INTEGER NOT NULL DEFAULT 0,"
    "  carried INTEGER NOT NULL DEFAULT 0,"
    "  carry_dropped INTEGER NOT NULL DEFAULT 0,"
    "  time_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (run_id, stage));";

/* Version 11 ("ppo diagnostics"): per train step, the PPO figures the
 * learner computes with its loss (learner/ppo.c): approximate KL to the
 * behaviour policy, entropy, clip fraction, importance-weight mean and
 * largest value. The report draws them. */
static const char schema_v11[] =
    "ALTER TABLE train_steps ADD COLUMN approx_kl REAL;"
    "ALTER TABLE train_steps ADD COLUMN entropy REAL;"
    "ALTER TABLE train_steps ADD COLUMN clip_frac REAL;"
    "ALTER TABLE train_steps ADD COLUMN iw_mean REAL;"
    "ALTER TABLE train_steps ADD COLUMN iw_max REAL;";

/* Version 12: which checksum policy_versions.checksum is. Rows from before
 * are lh_mx64 (the multiply-xorshift hash the wire carried then); every
 * row written since is xxh3_64 (proto/wire.h lh_wire_weights_checksum).
 * No CHECK on the names: a later algorithm then needs no table rebuild. */
static const char schema_v12[] =
    "ALTER TABLE policy_versions ADD COLUMN checksum_algo TEXT NOT NULL DEFAULT 'lh_mx64';";

/* Version 13 ("payload rows"): a segment's payload and recurrent state in
 * a row of their own, keyed as the segment, which retention deletes.
 * SQLite frees a page when its rows are deleted, not when they shrink: a
 * payload set to NULL inside its segments row, as retention did before,
 * freed only the overflow pages of a large one, and a store at its cap
 * whose payloads sat in the leaf pages (calc's, a kilobyte or two) stayed
 * full whatever was dropped. The segments rows stored from now on leave
 * payload and state NULL (state_offset stays, for segments_state); the
 * rows from before keep theirs until retention drops them. */
static const char schema_v13[] =
    "CREATE TABLE segment_payloads("
    "  episode INTEGER NOT NULL,"
    "  seq INTEGER NOT NULL,"
    "  payload BLOB NOT NULL,"
    "  state BLOB,"
    "  PRIMARY KEY (episode, seq));";

/* Version 14 ("shared prefixes"): an episode whose first tokens are its
 * group's shared prefix names the episode that holds them (the group's
 * leader, same actor and group) and how many (NULL: the episode is whole;
 * docs/actors.md "Shared prefixes"); a train step counts the groups
 * left out as flat (every reward the same: nothing to learn under grpo or
 * rloo) and the sampled tokens it trained with an advantage of 0. */
static const char schema_v14[] =
    "ALTER TABLE episodes ADD COLUMN prefix_episode INTEGER;"
    "ALTER TABLE episodes ADD COLUMN prefix_tokens INTEGER;"
    "ALTER TABLE train_steps ADD COLUMN flat_groups INTEGER;"
    "ALTER TABLE train_steps ADD COLUMN zero_adv_tokens INTEGER;";

/* Version 15 ("retired rows"): at a store's cap, after the payloads of
 * old versions are dropped, retention deletes whole old episodes (their
 * episodes, segments and rewards rows) that can no longer be trained: ended,
 * every payload dropped, no member of their shared prefix left
 * (store_retire.c). What the readers summarise of them is added into
 * aggregates that stay: retired_episodes per environment, actor, status
 * and outcome (counts, tokens, rewards, versions and times), so that
 * `replay stats` and the report's totals cover the whole run;
 * retired_versions per environment and newest policy version (the
 * report's reward and success per version); retired_rewards per
 * environment and reward term; retired_steps, one row, the train_steps
 * and policy_versions rows of old steps thinned away (lh_store_thin_step_rows),
 * so that the counts of steps and versions stay the run's. episodes_retirable holds the ended
 * episodes whose payloads are all dropped, in the order they ended, so
 * that retention finds the oldest without reading the table;
 * episodes_prefix the members of shared prefixes by leader, so that a
 * leader is kept while a member is. */
static const char schema_v15[] =
    "CREATE TABLE retired_episodes("
    "  env TEXT NOT NULL,"
    "  actor TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  outcome TEXT NOT NULL,"
    "  episodes INTEGER NOT NULL DEFAULT 0,"
    "  ends INTEGER NOT NULL DEFAULT 0,"
    "  swept INTEGER NOT NULL DEFAULT 0,"
    "  incomplete INTEGER NOT NULL DEFAULT 0,"
    "  segments INTEGER NOT NULL DEFAULT 0,"
    "  segments_missing INTEGER NOT NULL DEFAULT 0,"
    "  tokens INTEGER NOT NULL DEFAULT 0,"
    "  steps INTEGER NOT NULL DEFAULT 0,"
    "  rewarded INTEGER NOT NULL DEFAULT 0,"
    "  reward_sum REAL NOT NULL DEFAULT 0,"
    "  reward_min REAL,"
    "  reward_max REAL,"
    "  reward_terms INTEGER NOT NULL DEFAULT 0,"
    "  min_version INTEGER,"
    "  max_version INTEGER,"
    "  first_created_ms INTEGER,"
    "  last_ended_ms INTEGER,"
    "  retired_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (env, actor, status, outcome));"
    "CREATE TABLE retired_versions("
    "  env TEXT NOT NULL,"
    "  version INTEGER NOT NULL,"
    "  episodes INTEGER NOT NULL DEFAULT 0,"
    "  rewarded INTEGER NOT NULL DEFAULT 0,"
    "  reward_sum REAL NOT NULL DEFAULT 0,"
    "  successes INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (env, version));"
    "CREATE TABLE retired_rewards("
    "  env TEXT NOT NULL,"
    "  term TEXT NOT NULL,"
    "  terms INTEGER NOT NULL DEFAULT 0,"
    "  value_sum REAL NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (env, term));"
    "CREATE TABLE retired_steps("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  train_steps INTEGER NOT NULL DEFAULT 0,"
    "  policy_versions INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX episodes_retirable ON episodes(ended_ms)"
    "  WHERE ended_ms IS NOT NULL AND payloads_dropped = segments_received;"
    "CREATE INDEX episodes_prefix ON episodes(prefix_episode) WHERE prefix_episode IS NOT NULL;";

const lh_store_migration lh_store_migrations[] = {
    {1, "tables of ARCHITECTURE.md §7: runs, policy_versions, episodes, segments, rewards, train_steps",
     schema_v1},
    {2, "payloads_dropped/dropped_ms, train_step_layers, episode query indexes", schema_v2},
    {3, "actor_heartbeats, train_steps.busy_frac", schema_v3},
    {4, "train_step_experts", schema_v4},
    {5, "train_steps.stale_share, backlog_cap, positions; episodes.swept_ms, episodes_short",
     schema_v5},
    {6, "runs.kind, version, host, rank, pid, starts, ended_ms, outcome; evals, sft_steps", schema_v6},
    {7, "segments_meta, segment_metadata: the segments' metadata without their payloads; dropped_ms set for "
        "every dropped payload",
     schema_v7},
    {8, "balancing: train_step_layers.dead, train_steps.dead, balance, balance_ms", schema_v8},
    {9, "stored state: segments.state_offset, state, segments_state", schema_v9},
    {10, "stages: where each context-extension stage began and what it trained", schema_v10},
    {11, "ppo diagnostics: train_steps.approx_kl, entropy, clip_frac, iw_mean, iw_max", schema_v11},
    {12, "policy_versions.checksum_algo: xxh3_64 from now on, lh_mx64 for rows from before", schema_v12},
    {13, "payload rows: segment_payloads holds each new segment's payload and state, deleted by retention",
     schema_v13},
    {14, "shared prefixes: episodes.prefix_episode, prefix_tokens; train_steps.flat_groups, zero_adv_tokens",
     schema_v14},
    {15, "retired rows: retired_episodes, retired_versions, retired_rewards, retired_steps; episodes_retirable, "
         "episodes_prefix",
     schema_v15},
};
const size_t lh_store_migration_count = sizeof lh_store_migrations / sizeof lh_store_migrations[0];

/* What each version's schema hashes to (store_verify.c), so that an open
 * checks a file's schema with one read of sqlite_schema. A new migration
 * adds its entry: test_store's test_schema_fingerprints prints it. */
const uint64_t lh_store_schema_fingerprints[] = {
    0x47cc86d5ffac306aull,  /* 1 */
    0x764777d0718ce1a5ull,  /* 2 */
    0x13f33cbafa2f3900ull,  /* 3 */
    0x880972160cd510f6ull,  /* 4 */
    0xc444d74f4df20bccull,  /* 5 */
    0x9579be1e239c2f09ull,  /* 6 */
    0x83f75a871675694eull,  /* 7 */
    0x207467a96af58d79ull,  /* 8 */
    0x9340a80f754f4e2eull,  /* 9 */
    0x994a613fffbb9208ull,  /* 10 */
    0x00183134517212e4ull,  /* 11 */
    0xee7380254c4bfdceull,  /* 12 */
    0x578c240b0191d5ecull,  /* 13 */
    0xc5862f1b934b36f1ull,  /* 14 */
    0xa618fec358bf0e06ull,  /* 15 */
};

_Static_assert(sizeof lh_store_schema_fingerprints / sizeof lh_store_schema_fingerprints[0] ==
                   LH_STORE_SCHEMA_VERSION,
               "one schema fingerprint per schema version");
_Static_assert(sizeof lh_store_migrations / sizeof lh_store_migrations[0] == LH_STORE_SCHEMA_VERSION,
               "one migration step per schema version");

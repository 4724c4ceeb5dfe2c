/* store: retiring rows at the cap. Dropping payloads (store_retention.c)
 * leaves the rows that describe them: about 110 bytes a segment, 200 an
 * episode with its reward terms, and per train step its rows of layers and
 * experts. A run at a small cap fills it with those alone. So, near the cap,
 * old episodes that can no longer be trained go whole (their episodes,
 * segments and rewards rows), their figures added into aggregates that
 * stay (schema 15), and the rows of old train steps (train_steps,
 * policy_versions, and their per-layer and per-expert rows) are thinned
 * to one step's in every group of steps, the groups growing with age. */
#include "store/store_internal.h"

/* The episodes a retirement may take, oldest end first: ended before ?1,
 * every payload dropped (so none can be trained: retention drops only the
 * payloads of versions no step admits), and either whole or ended by the
 * learner (aborted, error: never trained). An episode still short of
 * segments with an end that says complete or truncated waits for the idle
 * sweep. The first two terms are episodes_retirable's, so that the index
 * is what is read. */
static const char sql_pick[] =
    "INSERT INTO temp.retire_ids(id) SELECT id FROM episodes INDEXED BY episodes_retirable"
    " WHERE ended_ms IS NOT NULL AND payloads_dropped = segments_received AND ended_ms < ?1"
    " AND status <> 'running'"
    " AND (segments_received = segment_count OR status IN ('aborted', 'error'))"
    " ORDER BY ended_ms LIMIT ?2";

/* A leader of a shared prefix whose member stays (not in this batch)
 * stays too: the member's first tokens are in its segments. */
static const char sql_keep_leaders[] =
    "DELETE FROM temp.retire_ids WHERE id IN (SELECT m.prefix_episode FROM episodes m"
    " WHERE m.prefix_episode IN (SELECT id FROM temp.retire_ids)"
    " AND m.id NOT IN (SELECT id FROM temp.retire_ids))";

/* What replay stats and the report count of an episode, added into its
 * row of retired_episodes (NULL-aware minimum and maximum). incomplete is
 * stats' own test (ended, payloads dropped or segments missing). */
static const char sql_sum_episodes[] =
    "INSERT INTO retired_episodes(env, actor, status, outcome, episodes, ends, swept, incomplete, segments,"
    " segments_missing, tokens, steps, rewarded, reward_sum, reward_min, reward_max, reward_terms,"
    " min_version, max_version, first_created_ms, last_ended_ms, retired_ms)"
    " SELECT e.env, e.actor, e.status, coalesce(e.outcome, ''), count(*), sum(e.segment_count IS NOT NULL),"
    "  sum(e.swept_ms IS NOT NULL),"
    "  sum(coalesce(e.ended_ms IS NOT NULL AND (e.payloads_dropped > 0"
    "   OR e.segments_received < e.segment_count), 0)),"
    "  sum(e.segments_received),"
    "  sum(CASE WHEN e.segment_count > e.segments_received THEN e.segment_count - e.segments_received ELSE 0 END),"
    "  sum(e.tokens_received), sum(e.steps), count(e.reward), coalesce(sum(e.reward), 0), min(e.reward),"
    "  max(e.reward), sum((SELECT count(*) FROM rewards r WHERE r.episode = e.id)), min(e.min_version),"
    "  max(e.max_version), min(e.created_ms), max(e.ended_ms), ?1"
    " FROM temp.retire_ids t JOIN episodes e ON e.id = t.id WHERE 1"
    " GROUP BY e.env, e.actor, e.status, coalesce(e.outcome, '')"
    " ON CONFLICT(env, actor, status, outcome) DO UPDATE SET"
    "  episodes = episodes + excluded.episodes, ends = ends + excluded.ends, swept = swept + excluded.swept,"
    "  incomplete = incomplete + excluded.incomplete, segments = segments + excluded.segments,"
    "  segments_missing = segments_missing + excluded.segments_missing, tokens = tokens + excluded.tokens,"
    "  steps = steps + excluded.steps, rewarded = rewarded + excluded.rewarded,"
    "  reward_sum = reward_sum + excluded.reward_sum,"
    "  reward_min = coalesce(min(reward_min, excluded.reward_min), reward_min, excluded.reward_min),"
    "  reward_max = coalesce(max(reward_max, excluded.reward_max), reward_max, excluded.reward_max),"
    "  reward_terms = reward_terms + excluded.reward_terms,"
    "  min_version = coalesce(min(min_version, excluded.min_version), min_version, excluded.min_version),"
    "  max_version = coalesce(max(max_version, excluded.max_version), max_version, excluded.max_version),"
    "  first_created_ms = coalesce(min(first_created_ms, excluded.first_created_ms), first_created_ms,"
    "   excluded.first_created_ms),"
    "  last_ended_ms = coalesce(max(last_ended_ms, excluded.last_ended_ms), last_ended_ms,"
    "   excluded.last_ended_ms),"
    "  retired_ms = excluded.retired_ms";

/* The report's reward and success per newest version (of the episodes
 * with a reward, as its query of episodes). */
static const char sql_sum_versions[] =
    "INSERT INTO retired_versions(env, version, episodes, rewarded, reward_sum, successes)"
    " SELECT e.env, e.max_version, count(*), count(e.reward), coalesce(sum(e.reward), 0),"
    "  sum(e.reward IS NOT NULL AND e.outcome = 'success')"
    " FROM temp.retire_ids t JOIN episodes e ON e.id = t.id WHERE e.max_version IS NOT NULL"
    " GROUP BY e.env, e.max_version"
    " ON CONFLICT(env, version) DO UPDATE SET episodes = episodes + excluded.episodes,"
    "  rewarded = rewarded + excluded.rewarded, reward_sum = reward_sum + excluded.reward_sum,"
    "  successes = successes + excluded.successes";

static const char sql_sum_rewards[] =
    "INSERT INTO retired_rewards(env, term, terms, value_sum)"
    " SELECT e.env, r.term, count(*), sum(r.value)"
    " FROM temp.retire_ids t JOIN episodes e ON e.id = t.id JOIN rewards r ON r.episode = t.id WHERE 1"
    " GROUP BY e.env, r.term"
    " ON CONFLICT(env, term) DO UPDATE SET terms = terms + excluded.terms,"
    "  value_sum = value_sum + excluded.value_sum";

/* Runs sql with ?1 and ?2 bound when it has them; *changes (may be NULL)
 * gets the rows it changed. */
static int run(lh_store *s, const char *sql, int64_t a, int64_t b, const char *what, uint64_t *changes,
               lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int params = sqlite3_bind_parameter_count(st);
  if (params >= 1) sqlite3_bind_int64(st, 1, a);
  if (params >= 2) sqlite3_bind_int64(st, 2, b);
  int rc = lh_store_step(s, st, what, err);
  sqlite3_finalize(st);
  if (rc >= 0 && changes) *changes = (uint64_t)sqlite3_changes(s->db);
  return rc < 0 ? rc : 0;
}

static int retire(lh_store *s, int64_t ended_before_ms, uint32_t max_episodes, lh_store_retired *out,
                  lh_errbuf *err) {
  LH_TRY(lh_store_flush(s, err));
  LH_TRY(lh_store_exec(s, "CREATE TEMP TABLE IF NOT EXISTS retire_ids(id INTEGER PRIMARY KEY)", err));
  LH_TRY(lh_store_exec(s, "DELETE FROM temp.retire_ids", err));
  uint64_t picked = 0, kept = 0;
  LH_TRY(run(s, sql_pick, ended_before_ms, max_episodes, "finding episodes to retire", &picked, err));
  if (!picked) return 0;
  LH_TRY(run(s, sql_keep_leaders, 0, 0, "keeping the leaders of shared prefixes", &kept, err));
  out->leaders_kept = kept;
  if (picked == kept) return 0;
  int64_t now = lh_wall_ms();
  LH_TRY(run(s, sql_sum_episodes, now, 0, "adding retired episodes into retired_episodes", NULL, err));
  LH_TRY(run(s, sql_sum_versions, 0, 0, "adding retired episodes into retired_versions", NULL, err));
  LH_TRY(run(s, sql_sum_rewards, 0, 0, "adding retired reward terms into retired_rewards", NULL, err));
  /* Every payload is dropped already; a row of segment_payloads left (a
   * store changed by hand) goes with its segment all the same. */
  LH_TRY(run(s, "DELETE FROM segment_payloads WHERE episode IN (SELECT id FROM temp.retire_ids)", 0, 0,
             "deleting retired payload rows", NULL, err));
  LH_TRY(run(s, "DELETE FROM rewards WHERE episode IN (SELECT id FROM temp.retire_ids)", 0, 0,
             "deleting retired reward terms", &out->reward_terms, err));
  LH_TRY(run(s, "DELETE FROM segments WHERE episode IN (SELECT id FROM temp.retire_ids)", 0, 0,
             "deleting retired segments", &out->segments, err));
  LH_TRY(run(s, "DELETE FROM episodes WHERE id IN (SELECT id FROM temp.retire_ids)", 0, 0,
             "deleting retired episodes", &out->episodes, err));
  return lh_store_exec(s, "DELETE FROM temp.retire_ids", err);
}

int lh_store_retire_episodes(lh_store *s, int64_t ended_before_ms, uint32_t max_episodes, lh_store_retired *out,
                             lh_errbuf *err) {
  lh_store_retired r = {0};
  if (out) *out = r;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_retire_episodes: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; retention needs lh_store_open", s->path);
  if (max_episodes == 0) return 0;
  /* Uncapped: this is what frees a store at its cap. */
  int own = 0;
  LH_TRY(lh_store_write_begin_uncapped(s, &own, err));
  int rc = lh_store_write_end(s, own, retire(s, ended_before_ms, max_episodes, &r, err), err);
  if (rc < 0) return rc;
  if (out) *out = r;
  return 0;
}

/* Groups of `every` steps below ?2 (from ?1, both multiples of it) with
 * more than one step's rows, each layer's and expert's mean load under
 * the group's first step. */
static const char sql_thin_pick[] =
    "INSERT INTO temp.thin_experts(step, layer, expert, load)"
    " SELECT min(step), layer, expert, avg(load) FROM train_step_experts"
    " WHERE step >= ?1 AND step < ?2 GROUP BY step / ?3, layer, expert"
    " HAVING count(*) > 1";

/* *newest: the greatest value of col in table; *has 0 when it is empty. */
static int newest_of(lh_store *s, const char *sql, uint64_t *newest, int *has, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int rc = lh_store_step(s, st, "finding the newest train step or version", err);
  *has = rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL;
  *newest = *has ? lh_store_column_u64(st, 0) : 0;
  sqlite3_finalize(st);
  if (*has && *newest > INT64_MAX) *has = 0;
  return rc < 0 ? rc : 0;
}

/* The per-step rows of table (keyed by col: a step, or a version) older
 * than the newest keep, in levels: level k (from first_level) keeps,
 * of the rows more than keep * every^(k-1) older than newest, the first
 * one of each group of every^k (col / every^k). The rows kept thus grow
 * with the log of the run's length: about keep per level. *deleted gets
 * the rows removed. */
static int decimate(lh_store *s, const char *table, const char *col, uint64_t newest, uint64_t keep,
                    uint32_t every, int first_level, uint64_t *deleted, lh_errbuf *err) {
  char sql[384];
  snprintf(sql, sizeof sql,
           "DELETE FROM %s WHERE %s < ?1 AND %s NOT IN (SELECT min(%s) FROM %s WHERE %s < ?1 GROUP BY %s / ?2)",
           table, col, col, col, table, col, col);
  *deleted = 0;
  uint64_t span = keep, group = every;
  for (int level = 1; span <= newest; level++) {
    if (level >= first_level) {
      uint64_t below = (newest - span) / group * group;
      sqlite3_stmt *st;
      LH_TRY(lh_store_prepare(s, sql, &st, err));
      lh_store_bind_u64(st, 1, below);
      lh_store_bind_u64(st, 2, group);
      int rc = lh_store_step(s, st, "thinning the rows of old train steps", err);
      sqlite3_finalize(st);
      if (rc < 0) return rc;
      *deleted += (uint64_t)sqlite3_changes(s->db);
    }
    if (group > INT64_MAX / every || span > INT64_MAX / every) break;
    span *= every, group *= every;
  }
  return 0;
}

/* The train steps and versions thinned away, counted into retired_steps
 * (schema 15), which the statistics add in. */
static const char sql_sum_steps[] =
    "INSERT INTO retired_steps(id, train_steps, policy_versions) VALUES (1, ?1, ?2)"
    " ON CONFLICT(id) DO UPDATE SET train_steps = train_steps + excluded.train_steps,"
    "  policy_versions = policy_versions + excluded.policy_versions";

static int thin_first(lh_store *s, uint64_t newest, uint64_t keep_newest_steps, uint32_t every,
                      uint64_t *deleted, lh_errbuf *err);

static int thin(lh_store *s, uint64_t keep_newest_steps, uint32_t every, uint64_t *deleted, lh_errbuf *err) {
  uint64_t newest = 0, newest_version = 0, n = 0, steps = 0, versions = 0;
  int has = 0, has_version = 0;
  LH_TRY(newest_of(s, "SELECT max(step) FROM train_steps", &newest, &has, err));
  LH_TRY(newest_of(s, "SELECT max(version) FROM policy_versions", &newest_version, &has_version, err));
  *deleted = 0;
  if (has && newest >= keep_newest_steps) {
    LH_TRY(thin_first(s, newest, keep_newest_steps, every, deleted, err));
    LH_TRY(decimate(s, "train_step_experts", "step", newest, keep_newest_steps, every, 2, &n, err));
    *deleted += n;
    LH_TRY(decimate(s, "train_step_layers", "step", newest, keep_newest_steps, every, 2, &n, err));
    *deleted += n;
    LH_TRY(decimate(s, "train_steps", "step", newest, keep_newest_steps, every, 1, &steps, err));
    *deleted += steps;
  }
  if (has_version && newest_version >= keep_newest_steps) {
    LH_TRY(decimate(s, "policy_versions", "version", newest_version, keep_newest_steps, every, 1, &versions, err));
    *deleted += versions;
  }
  if (steps || versions) LH_TRY(run(s, sql_sum_steps, (int64_t)steps, (int64_t)versions, "counting the thinned steps",
                                    NULL, err));
  return 0;
}

/* Level 1 of the expert and layer rows: each group of `every` steps
 * before the newest keep_newest_steps keeps one expert row per layer and
 * expert, the group's mean load, and its first step's layer rows. */
static int thin_first(lh_store *s, uint64_t newest, uint64_t keep_newest_steps, uint32_t every,
                      uint64_t *deleted, lh_errbuf *err) {
  sqlite3_stmt *st;
  int rc;
  uint64_t below = (newest - keep_newest_steps) / every * every;
  uint64_t from = s->steps_thinned_below < below ? s->steps_thinned_below : below;
  if (from >= below) return 0;
  LH_TRY(lh_store_exec(s, "CREATE TEMP TABLE IF NOT EXISTS thin_experts(step, layer, expert, load)", err));
  LH_TRY(lh_store_exec(s, "DELETE FROM temp.thin_experts", err));
  LH_TRY(lh_store_prepare(s, sql_thin_pick, &st, err));
  lh_store_bind_u64(st, 1, from);
  lh_store_bind_u64(st, 2, below);
  sqlite3_bind_int64(st, 3, every);
  rc = lh_store_step(s, st, "averaging the expert loads of old train steps", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  uint64_t removed = 0, added = 0;
  LH_TRY(lh_store_prepare(s,
                          "DELETE FROM train_step_experts WHERE step >= ?1 AND step < ?2"
                          " AND step / ?3 IN (SELECT step / ?3 FROM temp.thin_experts)",
                          &st, err));
  lh_store_bind_u64(st, 1, from);
  lh_store_bind_u64(st, 2, below);
  sqlite3_bind_int64(st, 3, every);
  rc = lh_store_step(s, st, "deleting the expert loads of old train steps", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  removed = (uint64_t)sqlite3_changes(s->db);
  LH_TRY(run(s, "INSERT INTO train_step_experts(step, layer, expert, load) SELECT step, layer, expert, load"
                " FROM temp.thin_experts",
             0, 0, "writing the mean expert loads of old train steps", &added, err));
  LH_TRY(lh_store_exec(s, "DELETE FROM temp.thin_experts", err));
  /* The per-layer rows repeat train_steps.maxvio and dead: each group
   * keeps its first step's rows, as train_steps does. */
  LH_TRY(lh_store_prepare(s,
                          "DELETE FROM train_step_layers WHERE step >= ?1 AND step < ?2 AND step NOT IN"
                          " (SELECT min(step) FROM train_step_layers WHERE step >= ?1 AND step < ?2"
                          "  GROUP BY step / ?3)",
                          &st, err));
  lh_store_bind_u64(st, 1, from);
  lh_store_bind_u64(st, 2, below);
  sqlite3_bind_int64(st, 3, every);
  rc = lh_store_step(s, st, "deleting the per-layer rows of old train steps", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  *deleted = removed - added + (uint64_t)sqlite3_changes(s->db);
  s->steps_thinned_below = below;
  return 0;
}

int lh_store_thin_step_rows(lh_store *s, uint64_t keep_newest_steps, uint32_t every, uint64_t *rows_deleted,
                               lh_errbuf *err) {
  uint64_t deleted = 0;
  if (rows_deleted) *rows_deleted = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_thin_step_rows: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; retention needs lh_store_open", s->path);
  if (every < 2) return lh_errbuf_set(err, LH_EINVAL, "old train steps are thinned in groups of 2 steps or more");
  int own = 0;
  uint64_t before = s->steps_thinned_below;
  LH_TRY(lh_store_write_begin_uncapped(s, &own, err));
  int rc = lh_store_write_end(s, own, thin(s, keep_newest_steps, every, &deleted, err), err);
  if (rc < 0) {
    s->steps_thinned_below = before;  /* rolled back */
    return rc;
  }
  if (rows_deleted) *rows_deleted = deleted;
  return 0;
}

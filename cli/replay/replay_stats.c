/* longhaul replay stats: what a store holds, in one screen (every line
 * through cli/term.h: names in it came from actors). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"
#include "common/buf.h"

static void print_bytes(uint64_t bytes) {
  if (bytes < 1024) lh_cli_term_printf(stdout, "%llu B", (unsigned long long)bytes);
  else if (bytes < (1ull << 20)) lh_cli_term_printf(stdout, "%.1f KiB", (double)bytes / 1024.0);
  else if (bytes < (1ull << 30)) lh_cli_term_printf(stdout, "%.1f MiB", (double)bytes / (1 << 20));
  else lh_cli_term_printf(stdout, "%.1f GiB", (double)bytes / (1 << 30));
}

/* Milliseconds since the epoch as UTC (ISO 8601, to the second). */
static const char *utc(int64_t ms, char *out, size_t cap) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || !strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(out, cap, "%lld ms", (long long)ms);
  return out;
}

/* The episodes retention retired at the store's cap: their rows are gone,
 * their figures (retired_episodes, schema 15) are in every count above. */
static void print_retired(const lh_store_stats *st) {
  char from[40], to[40];
  lh_cli_term_printf(stdout, "retired      %llu episodes, %llu segments, at the store's cap (in the counts above: "
                     "their rows deleted, their figures kept in retired_episodes)",
                     (unsigned long long)st->retired_episodes, (unsigned long long)st->retired_segments);
  if (st->has_retired_versions)
    lh_cli_term_printf(stdout, "; versions %llu..%llu", (unsigned long long)st->retired_min_version,
                       (unsigned long long)st->retired_max_version);
  if (st->retired_first_ms > 0)
    lh_cli_term_printf(stdout, "; begun from %s, ended by %s", utc(st->retired_first_ms, from, sizeof from),
                       utc(st->retired_last_ms, to, sizeof to));
  lh_cli_term_printf(stdout, "\n");
}

/* The environments, collected first so that the table's columns fit. */
typedef struct {
  lh_store_env_stats *rows;
  size_t count, cap;
} env_table;

static int collect_env(void *ctx, const lh_store_env_stats *e) {
  env_table *t = ctx;
  if (lh_reserve(&t->rows, &t->cap, t->count + 1, sizeof *t->rows, 16)) return LH_ENOMEM;
  t->rows[t->count++] = *e;
  return 0;
}

/* Column k of row i of the environment table as text (k 0 is the name). */
enum { ENV_COLS = 2 + LH_EPISODE_STATUS_COUNT + 5 };

static void env_cell(const lh_store_env_stats *e, int k, char *out, size_t cap) {
  if (k == 0) lh_cli_term_field(e->env, out, cap); /* a name an actor sent */
  else if (k == 1) snprintf(out, cap, "%llu", (unsigned long long)e->episodes);
  else if (k < 2 + LH_EPISODE_STATUS_COUNT) snprintf(out, cap, "%llu", (unsigned long long)e->by_status[k - 2]);
  else if (k == 2 + LH_EPISODE_STATUS_COUNT) snprintf(out, cap, "%llu", (unsigned long long)e->successes);
  else if (k == 3 + LH_EPISODE_STATUS_COUNT) snprintf(out, cap, "%llu", (unsigned long long)e->tokens);
  else if (k == 4 + LH_EPISODE_STATUS_COUNT) snprintf(out, cap, "%llu", (unsigned long long)e->rewarded);
  else if (k == 5 + LH_EPISODE_STATUS_COUNT) {
    if (e->rewarded) snprintf(out, cap, "%.4f", e->reward_mean);
    else snprintf(out, cap, "-");
  } else snprintf(out, cap, "%llu", (unsigned long long)e->retired);
}

static void print_envs(const env_table *t) {
  char head[ENV_COLS][32];
  snprintf(head[0], sizeof head[0], "ENV");
  snprintf(head[1], sizeof head[1], "EPISODES");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) {
    const char *name = lh_episode_status_name((lh_episode_status)k);
    size_t j = 0;
    for (; name && name[j] && j < sizeof head[0] - 1; j++) head[2 + k][j] = (char)(name[j] - 'a' + 'A');
    head[2 + k][j] = 0;
  }
  snprintf(head[2 + LH_EPISODE_STATUS_COUNT], sizeof head[0], "SUCCESS");
  snprintf(head[3 + LH_EPISODE_STATUS_COUNT], sizeof head[0], "TOKENS");
  snprintf(head[4 + LH_EPISODE_STATUS_COUNT], sizeof head[0], "REWARDED");
  snprintf(head[5 + LH_EPISODE_STATUS_COUNT], sizeof head[0], "REWARD_MEAN");
  snprintf(head[6 + LH_EPISODE_STATUS_COUNT], sizeof head[0], "RETIRED");
  int width[ENV_COLS];
  char cell[4 * LH_STORE_NAME_BYTES];
  for (int k = 0; k < ENV_COLS; k++) {
    width[k] = (int)strlen(head[k]);
    for (size_t i = 0; i < t->count; i++) {
      env_cell(&t->rows[i], k, cell, sizeof cell);
      if ((int)strlen(cell) > width[k]) width[k] = (int)strlen(cell);
    }
  }
  lh_cli_term_printf(stdout, "\nby environment:\n");
  for (int k = 0; k < ENV_COLS; k++) lh_cli_term_printf(stdout, k ? "  %*s" : "%-*s", width[k], head[k]);
  lh_cli_term_printf(stdout, "\n");
  for (size_t i = 0; i < t->count; i++) {
    for (int k = 0; k < ENV_COLS; k++) {
      env_cell(&t->rows[i], k, cell, sizeof cell);
      lh_cli_term_printf(stdout, k ? "  %*s" : "%-*s", width[k], cell);
    }
    lh_cli_term_printf(stdout, "\n");
  }
}

/* One stages row: a stage of a run, where it began and what it trained
 * (its own episodes, and the earlier stages' carried or dropped). */
static int print_stage(void *ctx, const lh_store_stage *r) {
  (void)ctx;
  char run[4 * sizeof r->run_id];
  lh_cli_term_printf(
      stdout,
      "stage        %u of run %s: max_context %llu from step %llu (version %llu); trained %llu episodes of its "
      "own (%llu tokens, %llu successes); earlier stages' episodes carried %llu, dropped %llu\n",
      r->stage, lh_cli_term_field(r->run_id, run, sizeof run), (unsigned long long)r->max_context,
      (unsigned long long)r->began_step, (unsigned long long)r->began_version, (unsigned long long)r->episodes,
      (unsigned long long)r->tokens, (unsigned long long)r->successes, (unsigned long long)r->carried,
      (unsigned long long)r->carry_dropped);
  return 0;
}

static const lh_cli_help HELP = {
    .cmd = "replay stats",
    .usage = "--db FILE",
    .about = "Counts of episodes by status and by environment, segments, tokens, the reward mean, the range of "
        "policy versions and the train steps, over the whole run: the episodes retention retired at the store's cap "
        "(their rows deleted) are counted from the aggregates it kept, and listed on a line of their own.",
    .exits = "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
};

int lh_cli_replay_stats(int argc, char **argv) {
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  const lh_cli_opt opts[] = {LH_CLI_DB_OPTS(&dbs), LH_CLI_TIMEOUT_OPT(&dbs)};
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  lh_store *s;
  if ((rc = lh_cli_replay_open("stats", &dbs, &s))) return rc;
  const char *db = dbs.db.v[0];
  lh_store_stats st;
  env_table envs = {NULL, 0, 0};
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int e = lh_store_stats_get(s, &st, &err);
  if (e >= 0) e = lh_store_stats_by_env(s, collect_env, &envs, &err);
  if (e < 0) {
    free(envs.rows);
    lh_store_close(s);
    return lh_cli_replay_fail("stats", db, e, &err);
  }
  uint64_t duplicates = 0;
  e = lh_store_rank_duplicates(s, &duplicates, &err);
  if (e < 0) {
    free(envs.rows);
    lh_store_close(s);
    return lh_cli_replay_fail("stats", db, e, &err);
  }
  lh_cli_term_printf(stdout, "store        %s (schema %u, ", db, st.schema_version);
  print_bytes(st.file_bytes);
  lh_cli_term_printf(stdout, ")\n");
  /* Every learner rank's file is read (docs/operations.md, "Learner ranks on several
   * hosts"); an episode id in two of them would be counted twice. */
  size_t ranks = lh_store_rank_count(s);
  lh_cli_term_printf(stdout, "rank stores  %zu read as one", ranks);
  if (ranks > 1) lh_cli_term_printf(stdout, " (episode ids in more than one: %llu)", (unsigned long long)duplicates);
  lh_cli_term_printf(stdout, "\n");
  lh_cli_term_printf(stdout, "runs         %llu (evaluations %llu)\n", (unsigned long long)st.runs,
                     (unsigned long long)st.evals);
  lh_cli_term_printf(stdout, "episodes     %llu:", (unsigned long long)st.episodes);
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    lh_cli_term_printf(stdout, "%s %s %llu", k ? "," : "", lh_episode_status_name((lh_episode_status)k),
                       (unsigned long long)st.by_status[k]);
  lh_cli_term_printf(stdout,
                     "\n             successes %llu, incomplete %llu (ended with segments missing or dropped)\n",
                     (unsigned long long)st.successes, (unsigned long long)st.incomplete);
  lh_cli_term_printf(stdout, "segments     %llu (payloads dropped %llu, payloads ", (unsigned long long)st.segments,
                     (unsigned long long)st.payloads_dropped);
  print_bytes(st.payload_bytes);
  lh_cli_term_printf(stdout, ")\n");
  lh_cli_term_printf(stdout, "tokens       %llu\n", (unsigned long long)st.tokens);
  if (st.retired_episodes) print_retired(&st);
  if (st.rewarded)
    lh_cli_term_printf(stdout, "rewards      %llu episodes rewarded, mean %.4f (min %g, max %g); %llu reward terms\n",
                       (unsigned long long)st.rewarded, st.reward_mean, st.reward_min, st.reward_max,
                       (unsigned long long)st.reward_terms);
  else
    lh_cli_term_printf(stdout, "rewards      none yet; %llu reward terms\n", (unsigned long long)st.reward_terms);
  if (st.has_versions)
    lh_cli_term_printf(stdout, "versions     sampled tokens %llu..%llu;", (unsigned long long)st.min_version,
                       (unsigned long long)st.max_version);
  else
    lh_cli_term_printf(stdout, "versions     no sampled tokens;");
  if (st.policy_versions)
    lh_cli_term_printf(stdout, " %llu published (latest %llu)\n", (unsigned long long)st.policy_versions,
                       (unsigned long long)st.latest_policy_version);
  else
    lh_cli_term_printf(stdout, " none published\n");
  if (st.train_steps)
    lh_cli_term_printf(stdout, "train steps  %llu (last step %llu)\n", (unsigned long long)st.train_steps,
                       (unsigned long long)st.last_train_step);
  else
    lh_cli_term_printf(stdout, "train steps  0\n");
  /* Context-extension stages (schema 10): where each began and what it trained. */
  if (st.schema_version >= 9 && lh_store_stages(s, NULL, print_stage, NULL, &err) < 0)
    lh_cli_term_printf(stderr, "longhaul replay stats: the stages of %s: %s\n", db, err.msg);
  if (envs.count) print_envs(&envs);
  free(envs.rows);
  lh_store_close(s);
  return LH_EXIT_OK;
}

/* longhaul replay stats: what a store holds, in one screen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay.h"

static void print_bytes(uint64_t bytes) {
  if (bytes < 1024) printf("%llu B", (unsigned long long)bytes);
  else if (bytes < (1ull << 20)) printf("%.1f KiB", (double)bytes / 1024.0);
  else if (bytes < (1ull << 30)) printf("%.1f MiB", (double)bytes / (1 << 20));
  else printf("%.1f GiB", (double)bytes / (1 << 30));
}

/* The environments, collected first so that the table's columns fit. */
typedef struct {
  lh_store_env_stats *rows;
  size_t count, cap;
} env_table;

static int collect_env(void *ctx, const lh_store_env_stats *e) {
  env_table *t = ctx;
  if (t->count == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    lh_store_env_stats *rows = realloc(t->rows, cap * sizeof *rows);
    if (!rows) return LH_ENOMEM;
    t->rows = rows;
    t->cap = cap;
  }
  t->rows[t->count++] = *e;
  return 0;
}

static void print_envs(const env_table *t) {
  int w = 3;
  for (size_t i = 0; i < t->count; i++) {
    int l = (int)strlen(t->rows[i].env);
    if (l > w) w = l;
  }
  printf("\nby environment:\n%-*s  %8s", w, "ENV", "EPISODES");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) {
    char head[32];
    const char *name = lh_episode_status_name((lh_episode_status)k);
    size_t j = 0;
    for (; name && name[j] && j < sizeof head - 1; j++) head[j] = (char)(name[j] - 'a' + 'A');
    head[j] = 0;
    printf("  %9s", head);
  }
  printf("  %8s  %10s  %8s  %11s\n", "SUCCESS", "TOKENS", "REWARDED", "REWARD_MEAN");
  for (size_t i = 0; i < t->count; i++) {
    const lh_store_env_stats *e = &t->rows[i];
    printf("%-*s  %8llu", w, e->env, (unsigned long long)e->episodes);
    for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) printf("  %9llu", (unsigned long long)e->by_status[k]);
    printf("  %8llu  %10llu  %8llu  ", (unsigned long long)e->successes, (unsigned long long)e->tokens,
           (unsigned long long)e->rewarded);
    if (e->rewarded) printf("%11.4f\n", e->reward_mean);
    else printf("%11s\n", "-");
  }
}

int lh_cli_replay_stats(int argc, char **argv) {
  const char *db = NULL;
  const lh_cli_opt opts[] = {{"--db", LH_CLI_OPT_STRING, &db, NULL}};
  size_t npos;
  int rc = lh_cli_parse("stats", argc, argv, opts, 1, NULL, 0, &npos);
  if (rc) return rc;
  lh_store *s;
  if ((rc = lh_cli_replay_open("stats", db, &s))) return rc;
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
  printf("store        %s (schema %u, ", db, st.schema_version);
  print_bytes(st.file_bytes);
  printf(")\n");
  printf("runs         %llu\n", (unsigned long long)st.runs);
  printf("episodes     %llu:", (unsigned long long)st.episodes);
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    printf("%s %s %llu", k ? "," : "", lh_episode_status_name((lh_episode_status)k),
           (unsigned long long)st.by_status[k]);
  printf("\n             successes %llu, incomplete %llu (ended with segments missing or dropped)\n",
         (unsigned long long)st.successes, (unsigned long long)st.incomplete);
  printf("segments     %llu (payloads dropped %llu, payloads ", (unsigned long long)st.segments,
         (unsigned long long)st.payloads_dropped);
  print_bytes(st.payload_bytes);
  printf(")\n");
  printf("tokens       %llu\n", (unsigned long long)st.tokens);
  if (st.rewarded)
    printf("rewards      %llu episodes rewarded, mean %.4f (min %g, max %g); %llu reward terms\n",
           (unsigned long long)st.rewarded, st.reward_mean, st.reward_min, st.reward_max,
           (unsigned long long)st.reward_terms);
  else
    printf("rewards      none yet; %llu reward terms\n", (unsigned long long)st.reward_terms);
  if (st.has_versions)
    printf("versions     sampled tokens %llu..%llu;", (unsigned long long)st.min_version,
           (unsigned long long)st.max_version);
  else
    printf("versions     no sampled tokens;");
  if (st.policy_versions)
    printf(" %llu published (latest %llu)\n", (unsigned long long)st.policy_versions,
           (unsigned long long)st.latest_policy_version);
  else
    printf(" none published\n");
  if (st.train_steps)
    printf("train steps  %llu (last step %llu)\n", (unsigned long long)st.train_steps,
           (unsigned long long)st.last_train_step);
  else
    printf("train steps  0\n");
  if (envs.count) print_envs(&envs);
  free(envs.rows);
  lh_store_close(s);
  return LH_EXIT_OK;
}

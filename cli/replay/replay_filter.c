/* cli replay: the episode filters shared by `episodes` and `export`. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"

int lh_cli_parse_id(const char *text, uint64_t *out) {
  if (lh_parse_u64(text, out) == 0) return 0;
  int64_t v;
  if (lh_parse_i64(text, &v) || v >= 0) return -1;
  *out = (uint64_t)v;  /* two's complement: SQLite's form of an id >= 2^63 */
  return 0;
}

void lh_cli_filter_opts(lh_cli_filter_args *a, lh_cli_opt *opts) {
  const lh_cli_opt o[LH_CLI_FILTER_OPT_COUNT] = {
      {"--env", LH_CLI_OPT_STRING, &a->env, NULL, "NAME", "only this environment"},
      {"--status", LH_CLI_OPT_STRING, &a->status, NULL, "S[,S...]",
       "only these statuses: running, complete, truncated, aborted or error"},
      {"--min-reward", LH_CLI_OPT_DOUBLE, &a->min_reward, &a->has_min_reward, "X",
       "reward >= X (episodes without a reward yet are left out)"},
      {"--max-reward", LH_CLI_OPT_DOUBLE, &a->max_reward, &a->has_max_reward, "X", "reward <= X"},
      {"--min-version", LH_CLI_OPT_U64, &a->min_version, &a->has_min_version, "V", "oldest token version >= V"},
      {"--max-version", LH_CLI_OPT_U64, &a->max_version, &a->has_max_version, "V", "newest token version <= V"},
      {"--limit", LH_CLI_OPT_U64, &a->limit, &a->has_limit, "N",
       "at most N episodes (0: all; default 100 for episodes, 0 for export)"},
  };
  memcpy(opts, o, sizeof o);
}

/* Turns "complete,truncated" into a status mask; prints the statuses there
 * are and returns -1 for a name that is not one. */
static int status_mask(const char *cmd, const char *list, unsigned *mask) {
  *mask = 0;
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char name[32];
    int st = -1;
    if (len > 0 && len < sizeof name) {
      memcpy(name, p, len);
      name[len] = 0;
      st = lh_episode_status_from_name(name);
    }
    if (st < 0) {
      fprintf(stderr, "longhaul replay %s: --status: unknown status '%.*s' (one of", cmd, (int)len, p);
      for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
        fprintf(stderr, "%s %s", k ? "," : "", lh_episode_status_name((lh_episode_status)k));
      fprintf(stderr, "; several joined by commas)\n");
      return -1;
    }
    *mask |= 1u << st;
    if (!comma) return 0;
    p = comma + 1;
  }
}

int lh_cli_filter_build(const char *cmd, const lh_cli_filter_args *a, uint32_t default_limit,
                        lh_episode_filter *f) {
  lh_episode_filter_init(f);
  f->env = a->env;
  if (a->status && status_mask(cmd, a->status, &f->status_mask)) return LH_EXIT_USAGE;
  if (a->has_min_reward || a->has_max_reward) {
    f->reward_range = 1;
    f->reward_min = a->has_min_reward ? a->min_reward : -INFINITY;
    f->reward_max = a->has_max_reward ? a->max_reward : INFINITY;
    if (f->reward_min > f->reward_max) {
      fprintf(stderr, "longhaul replay %s: --min-reward %g is above --max-reward %g\n", cmd,
              f->reward_min, f->reward_max);
      return LH_EXIT_USAGE;
    }
  }
  if (a->has_min_version || a->has_max_version) {
    f->version_range = 1;
    /* Open-ended is INT64_MAX, not UINT64_MAX, and larger values are cut
     * to it: the store keeps versions as SQLite's signed integers, where
     * UINT64_MAX would compare as -1. */
    uint64_t top = (uint64_t)INT64_MAX;
    f->version_min = a->has_min_version ? (a->min_version < top ? a->min_version : top) : 0;
    f->version_max = a->has_max_version ? (a->max_version < top ? a->max_version : top) : top;
    if (f->version_min > f->version_max) {
      fprintf(stderr, "longhaul replay %s: --min-version %llu is above --max-version %llu\n", cmd,
              (unsigned long long)f->version_min, (unsigned long long)f->version_max);
      return LH_EXIT_USAGE;
    }
  }
  if (a->has_limit && a->limit > UINT32_MAX) {
    fprintf(stderr, "longhaul replay %s: --limit %llu is too large (at most %u; 0 for all)\n", cmd,
            (unsigned long long)a->limit, UINT32_MAX);
    return LH_EXIT_USAGE;
  }
  f->limit = a->has_limit ? (uint32_t)a->limit : default_limit;
  return 0;
}

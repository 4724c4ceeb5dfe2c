/* The evaluation driver of `longhaul eval` and `longhaul sft` (actors.h,
 * lh_actors_eval_seeds): the held-out seeds 1..n in chunks of whole rounds
 * of the environments, through lh_actors_eval. */
#include <limits.h>
#include <stdlib.h>

#include "actors/actors.h"

int lh_actors_eval_seeds(lh_model *m, const char *env, const lh_env_option *opts, size_t n_opts,
                         const lh_actors_eval_seeds_params *p, size_t *wins, lh_errbuf *err) {
  enum { EVAL_ENVS = LH_ACTORS_EVAL_ENVS };
  lh_env *envs[EVAL_ENVS] = {0};
  uint64_t n = p->seeds, max_context = p->max_context;
  *wins = 0;
  if (!n) return 0;
  uint64_t *seeds = malloc((size_t)n * sizeof *seeds);
  int rc = seeds ? 0 : lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory for %llu seeds",
                                     (unsigned long long)n);
  for (size_t i = 0; !rc && i < n; i++) seeds[i] = i + 1;
  int n_envs = n < EVAL_ENVS ? (int)n : EVAL_ENVS;
  for (int i = 0; !rc && i < n_envs; i++) rc = lh_env_open(env, opts, n_opts, &envs[i], err);
  if (max_context < 2 || max_context > INT_MAX) max_context = max_context < 2 ? 2 : INT_MAX;
  /* The seeds in chunks of whole rounds of the environments, about ten
   * of them, with a progress call after each. */
  size_t chunk = ((size_t)n / 10 + EVAL_ENVS - 1) / EVAL_ENVS * EVAL_ENVS;
  if (chunk < EVAL_ENVS) chunk = EVAL_ENVS;
  int64_t t0 = lh_now_ns();
  size_t shown = 0;
  for (size_t from = 0; !rc && from < n; from += chunk) {
    size_t count = n - from < chunk ? (size_t)(n - from) : chunk, won = 0;
    lh_actors_eval_params ep = {.max_context = (int)max_context, .max_action_tokens = 256,
                                .show = p->show > shown ? p->out : NULL,
                                .show_count = p->show > shown ? p->show - shown : 0,
                                .temperature = p->temperature};
    rc = lh_actors_eval(m, envs, n_envs, seeds + from, count, &ep, &won, err);
    if (rc) break;
    *wins += won;
    shown += count < ep.show_count ? count : ep.show_count;
    size_t done = from + count;
    if (n <= chunk || !p->progress) continue;
    double elapsed = (double)(lh_now_ns() - t0) / 1e9;
    p->progress(p->progress_ctx, done, n, *wins, elapsed / (double)done * (double)(n - done));
  }
  for (int i = 0; i < n_envs; i++) lh_env_free(envs[i]);
  free(seeds);
  return rc;
}

/* The router at scale (docs/model.md "MoE" and "Balancing"), from one
 * run, each figure next to its reference:
 *  1. routing time per token at 1024 experts top 16 against 16 experts top
 *     2 (the demo), the router's logits (matmul from the latent, r = 64)
 *     and the routing kernel (sigmoid, top-k, gates), against the ratio of
 *     their router FLOPs (2 r E + E per token; target: the time ratio at
 *     most that ratio + 20%), with the same bytes of logits on both sides
 *     and with the same tokens. Scores come from the router simulation
 *     (tests/router_sim.h) after it has balanced, so top-k sees the loads
 *     it sees in training.
 *  2. MaxVio of each rule on the simulation: after a demo-length run (300
 *     steps) at 16 experts top 2 (target <= 0.3), and at 1024 experts top
 *     16 the step where it first falls below 0.5, its mean over the last
 *     40 steps and the dead experts (target: below 0.5, none dead). The
 *     loss-free balancing paper (Wang et al., 2024) reports a global MaxVio
 *     near 0.04 at 1B and 3B parameters, measured over a whole validation
 *     set rather than one step's batch.
 * Threads: one (the backend's pool is set to 1 and the selection is
 * serial), on both sides. Usage: bench_router [--tokens N] [--steps N]
 * [--quantile-1024]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/router_sim.h"

/* Seconds per token of the router at (E, k): logits from a latent of width
 * r, then the routing kernel, on the balanced simulation's last scores. */
static int time_router(int E, int k, int N, int reps, double *us_matmul, double *us_route) {
  router_sim r;
  int rc = router_sim_new(&r, E, k, N, LH_BALANCE_ADAPTIVE, 1.0, 99);
  if (rc) return rc;
  double mv;
  int dead;
  for (int s = 0; s < 40 && !rc; s++) rc = router_sim_step(&r, &mv, &dead);
  const int R = 64;
  float *z = malloc((size_t)N * R * sizeof(float)), *w = malloc((size_t)E * R * sizeof(float));
  float *logits = malloc((size_t)N * E * sizeof(float));
  if (!z || !w || !logits) rc = LH_ENOMEM;
  uint64_t g = 5;
  for (size_t i = 0; !rc && i < (size_t)N * R; i++) z[i] = (float)(router_sim_uniform(&g) - 0.5);
  for (size_t i = 0; !rc && i < (size_t)E * R; i++) w[i] = (float)(router_sim_uniform(&g) - 0.5);
  const lh_backend *be = lh_backend_cpu();
  double best_mm = 1e30, best_rt = 1e30;
  for (int i = 0; !rc && i < reps; i++) {
    int64_t t0 = lh_now_ns();
    rc = be->matmul_forward(be->context, logits, z, w, NULL, N, R, E);
    int64_t t1 = lh_now_ns();
    /* the simulation's balanced logits, not the random product's */
    if (!rc) rc = be->moe_route_forward(be->context, r.idx, r.gates, r.aff, r.logits, r.bias, N, E, k, 0);
    int64_t t2 = lh_now_ns();
    if ((double)(t1 - t0) < best_mm) best_mm = (double)(t1 - t0);
    if ((double)(t2 - t1) < best_rt) best_rt = (double)(t2 - t1);
  }
  *us_matmul = best_mm / 1e3 / N, *us_route = best_rt / 1e3 / N;
  free(z), free(w), free(logits);
  router_sim_free(&r);
  return rc;
}

static int run_rule(lh_balance_kind rule, int E, int k, int N, int steps, double *last, int *first_below,
                    double target, double *tail40, int *dead, double *balance_ms) {
  router_sim r;
  int rc = router_sim_new(&r, E, k, N, rule, 1.0, 1234);
  if (rc) return rc;
  double mv = 0, sum = 0;
  *first_below = -1;
  for (int s = 0; s < steps && !rc; s++) {
    rc = router_sim_step(&r, &mv, dead);
    if (mv < target && *first_below < 0) *first_below = s + 1;
    if (s >= steps - 40) sum += mv;
  }
  *last = mv, *tail40 = sum / 40, *balance_ms = r.balance_ms / steps;
  router_sim_free(&r);
  return rc;
}

int main(int argc, char **argv) {
  int tokens = 8192, steps_1024 = 120, steps_16 = 300, quantile_1024 = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps_1024 = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quantile-1024")) quantile_1024 = 1;
    else {
      fprintf(stderr, "usage: bench_router [--tokens N] [--steps N] [--quantile-1024]\n");
      return 2;
    }
  }
  if (tokens < 64 || steps_1024 < 40) {
    fprintf(stderr, "bench_router: --tokens at least 64, --steps at least 40\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const lh_backend *be = lh_backend_cpu();
  be->set_threads(be->context, 1);
  printf("bench_router: threads 1 (backend pool and selection), %d tokens per step\n", tokens);
  double flops_small = 2.0 * 64 * 16 + 16, flops_big = 2.0 * 64 * 1024 + 1024, flop_ratio = flops_big / flops_small;
  /* Twice: with the same bytes of logits on both sides (4 MiB: 65 536
   * tokens at 16 experts, 1 024 at 1024), the like-for-like comparison of
   * the per-token work, and with the same tokens (--tokens at both), where
   * the 1024-expert arrays (64x the bytes) leave the caches. */
  for (int same_tokens = 0; same_tokens < 2; same_tokens++) {
    int n_small = same_tokens ? tokens : (1 << 20) / 16, n_big = same_tokens ? tokens : (1 << 20) / 1024;
    double mm_small, rt_small, mm_big, rt_big;
    if (time_router(16, 2, n_small, 20, &mm_small, &rt_small) || time_router(1024, 16, n_big, 10, &mm_big, &rt_big)) {
      fprintf(stderr, "bench_router: routing failed\n");
      return 1;
    }
    double t_small = mm_small + rt_small, t_big = mm_big + rt_big;
    printf("%s (16/top2 %d tokens, 1024/top16 %d tokens):\n", same_tokens ? "same tokens" : "same bytes of logits",
           n_small, n_big);
    printf("  routing per token, 16/top2:    logits %.3f us + route %.3f us = %.3f us\n", mm_small, rt_small, t_small);
    printf("  routing per token, 1024/top16: logits %.3f us + route %.3f us = %.3f us\n", mm_big, rt_big, t_big);
    printf("  time ratio 1024/16: %.1f (route kernel alone %.1f); router FLOPs ratio %.1f, target <= %.1f: %s\n",
           t_big / t_small, rt_big / rt_small, flop_ratio, 1.2 * flop_ratio,
           t_big / t_small <= 1.2 * flop_ratio ? "met" : "NOT met");
  }
  const lh_balance_kind rules[] = {LH_BALANCE_ADAPTIVE, LH_BALANCE_BIAS, LH_BALANCE_QUANTILE, LH_BALANCE_NONE};
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    double last, tail, ms;
    int first, dead;
    if (run_rule(rules[i], 16, 2, tokens / 2, steps_16, &last, &first, 0.3, &tail, &dead, &ms)) return 1;
    printf("16/top2 %-12s after %d steps: MaxVio %.3f (mean of last 40 %.3f; target <= 0.3), first < 0.3 at "
           "step %d, dead %d, balancing %.3f ms/step\n",
           lh_balance_name(rules[i]), steps_16, last, tail, first, dead, ms);
  }
  /* quantile sorts every expert's column each step: minutes at 1024
   * experts on two cores, so it runs at 16 only unless asked */
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    double last, tail, ms;
    int first, dead;
    if (rules[i] == LH_BALANCE_QUANTILE && !quantile_1024) continue;
    if (run_rule(rules[i], 1024, 16, tokens, steps_1024, &last, &first, 0.5, &tail, &dead, &ms)) return 1;
    printf("1024/top16 %-12s after %d steps: MaxVio %.3f (mean of last 40 %.3f; target < 0.5), first < 0.5 at "
           "step %d, dead %d (target 0), balancing %.3f ms/step\n",
           lh_balance_name(rules[i]), steps_1024, last, tail, first, dead, ms);
  }
  printf("reference: loss-free balancing (Wang et al., 2024) global MaxVio about 0.04 at 1B/3B parameters\n");
  return 0;
}

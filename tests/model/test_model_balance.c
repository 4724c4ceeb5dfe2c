/* Balancing on a synthetic router whose scores favour three of 16 experts
 * (top-2): each update routes a fresh batch of 8192 tokens with the current
 * bias (the backend's routing kernel), then applies the rule. `bias` and
 * `quantile` must bring MaxVio below 0.2 within the stated number of
 * updates and keep it there; `none` stays above 1. The curves are printed.
 * Also: statistics and the bias update through a real model's forward. */
#include "tests/model/test_model_util.h"
#include "tests/case_main.h"

#include <stdio.h>

#define N_TOK 8192
#define N_EXP 16
#define TOPK 2

/* Runs `updates` updates of rule; returns the largest MaxVio over the last
 * 20 and fills curve[u]. */
static double run_rule(lh_balance_kind rule, int updates, double *curve, int *dead_out) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.layers = 1, cfg.experts = N_EXP, cfg.topk = TOPK, cfg.balance = rule;
  lh_model_balancer *b = NULL;
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &b), 0);
  const lh_backend *be = lh_backend_cpu();
  float *logits = malloc((size_t)N_TOK * N_EXP * sizeof(float));
  float *aff = malloc((size_t)N_TOK * N_EXP * sizeof(float));
  float *gates = malloc((size_t)N_TOK * TOPK * sizeof(float));
  int32_t *idx = malloc((size_t)N_TOK * TOPK * sizeof(int32_t));
  float bias[N_EXP] = {0};
  uint64_t s = 77;
  double tail = 0;
  for (int u = 0; u < updates; u++) {
    for (int n = 0; n < N_TOK; n++)
      for (int e = 0; e < N_EXP; e++)
        logits[n * N_EXP + e] = (float)(0.8 * tm_uniform(&s) + (e < 3 ? 1.5 : 0.0));
    ck_assert_int_eq(be->moe_route_forward(be->context, idx, gates, aff, logits, bias, N_TOK,
                                           N_EXP, TOPK, 0), 0);
    ck_assert_int_eq(lh_model_balancer_observe(b, 0, aff, bias, idx, N_TOK), 0);
    ck_assert_int_eq(lh_model_balancer_step(b, bias), 0);
    curve[u] = lh_model_balancer_maxvio(b, 0);
    if (u >= updates - 20) tail = fmax(tail, curve[u]);
  }
  *dead_out = lh_model_balancer_dead(b, 0);
  float load[N_EXP];
  ck_assert_int_eq(lh_model_balancer_load(b, 0, load), 0);
  double sum = 0;
  for (int e = 0; e < N_EXP; e++) sum += load[e];
  ck_assert(fabs(sum - 1) < 1e-5);
  free(logits), free(aff), free(gates), free(idx);
  lh_model_balancer_free(b);
  return tail;
}

static void print_curve(const char *name, const double *c, int n, int every) {
  printf("maxvio %-8s", name);
  for (int u = 0; u < n; u += every) printf(" %d:%.2f", u + 1, c[u]);
  printf(" %d:%.2f\n", n, c[n - 1]);
}

START_TEST(test_balance_rules) {
  /* bias moves b by 1e-3 per update; the favoured experts' affinity lead
   * is about 0.3, so it needs a few hundred updates; quantile (rate 0.5)
   * closes the gap geometrically in a handful */
  const int bias_updates = 600, quantile_updates = 40, none_updates = 100;
  double cb[600], cq[40], cn[100];
  int dead_b, dead_q, dead_n;
  double tb = run_rule(LH_BALANCE_BIAS, bias_updates, cb, &dead_b);
  double tq = run_rule(LH_BALANCE_QUANTILE, quantile_updates, cq, &dead_q);
  run_rule(LH_BALANCE_NONE, none_updates, cn, &dead_n);
  print_curve("bias", cb, bias_updates, 50);
  print_curve("quantile", cq, quantile_updates, 4);
  print_curve("none", cn, none_updates, 10);
  int first_b = -1, first_q = -1;
  for (int u = 0; u < bias_updates && first_b < 0; u++) if (cb[u] < 0.2) first_b = u + 1;
  for (int u = 0; u < quantile_updates && first_q < 0; u++) if (cq[u] < 0.2) first_q = u + 1;
  printf("maxvio below 0.2: bias at update %d (last 20 <= %.3f), quantile at update %d "
         "(last 20 <= %.3f); none last 20 >= %.3f; dead experts bias %d quantile %d none %d\n",
         first_b, tb, first_q, tq, cn[none_updates - 1], dead_b, dead_q, dead_n);
  ck_assert(tb < 0.2);
  ck_assert(tq < 0.2);
  for (int u = none_updates - 20; u < none_updates; u++) ck_assert(cn[u] > 1.0);
  ck_assert_int_eq(dead_b, 0);
  ck_assert_int_eq(dead_q, 0);
}
END_TEST

/* Dead experts: an expert never routed to counts as dead until it has
 * load again within the window. */
START_TEST(test_balance_dead_and_errors) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.layers = 1, cfg.experts = 4, cfg.topk = 1, cfg.balance = LH_BALANCE_NONE;
  lh_model_balancer *b = NULL;
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &b), 0);
  int32_t idx[4] = {0, 1, 1, 2};
  for (int s = 0; s < 3; s++) {
    ck_assert_int_eq(lh_model_balancer_observe(b, 0, NULL, NULL, idx, 4), 0);
    ck_assert_int_eq(lh_model_balancer_step(b, NULL), 0);
  }
  ck_assert_int_eq(lh_model_balancer_dead(b, 0), 1);
  /* loads 1/4, 1/2, 1/4, 0: MaxVio = 0.5 / 0.25 - 1 = 1 */
  ck_assert(fabs(lh_model_balancer_maxvio(b, 0) - 1.0) < 1e-12);
  int32_t three[1] = {3};
  ck_assert_int_eq(lh_model_balancer_observe(b, 0, NULL, NULL, three, 1), 0);
  ck_assert_int_eq(lh_model_balancer_step(b, NULL), 0);
  /* 0, 1, 2 were used within the window; everyone has had load now */
  ck_assert_int_eq(lh_model_balancer_dead(b, 0), 0);
  ck_assert_int_ne(lh_model_balancer_observe(b, 1, NULL, NULL, idx, 4), 0);
  int32_t bad[1] = {4};
  ck_assert_int_eq(lh_model_balancer_observe(b, 0, NULL, NULL, bad, 1), LH_EMODEL_BATCH);
  ck_assert(isnan(lh_model_balancer_maxvio(b, 2)));
  lh_model_balancer_free(b);
  lh_model_balancer_free(NULL);
}
END_TEST

START_TEST(test_balance_through_model) {
  lh_model_config cfg = tm_small_config();
  cfg.balance = LH_BALANCE_BIAS;
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, NULL), 0);
  tm_batch tb;
  tm_make_batch(&tb, 2);
  lh_model_cache *c = NULL;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, NULL), 0);
  float load[2 * 4];
  ck_assert_int_eq(lh_model_cache_load(c, load), 0);
  lh_model_balancer *b = NULL;
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &b), 0);
  ck_assert_int_eq(lh_model_balancer_observe_cache(b, m, c), 0);
  ck_assert_int_eq(lh_model_balancer_step_model(b, m), 0);
  float *p = tm_get_params(m);
  const lh_model_tensor *t = lh_model_tensor_at(m, lh_model_find(m, "layers.1.moe.bias"));
  float lb[4];
  ck_assert_int_eq(lh_model_balancer_load(b, 1, lb), 0);
  for (int e = 0; e < 4; e++) {
    ck_assert(fabsf(lb[e] - load[4 + e]) < 1e-6f);
    float want = lb[e] < 0.25f ? 1e-3f : lb[e] > 0.25f ? -1e-3f : 0.0f;
    ck_assert(fabsf(p[t->offset + e] - want) < 1e-9f);
  }
  printf("model layer 1 load %.3f %.3f %.3f %.3f maxvio %.3f\n", lb[0], lb[1], lb[2], lb[3],
         lh_model_balancer_maxvio(b, 1));
  free(p);
  lh_model_balancer_free(b);
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

/* The adaptive rule's state through state_get/state_set: a balancer
 * restored mid-run moves the bias exactly as the one it was copied from;
 * a damaged or foreign state is refused and leaves it as it was. */
START_TEST(test_balance_state_round_trip) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.layers = 2, cfg.experts = 8, cfg.topk = 2, cfg.balance = LH_BALANCE_ADAPTIVE;
  lh_model_balancer *a = NULL, *b = NULL;
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &a), 0);
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &b), 0);
  float bias_a[16] = {0}, bias_b[16];
  int32_t idx[2 * 6] = {0, 1, 0, 2, 0, 1, 3, 0, 0, 1, 2, 0};
  for (int s = 0; s < 5; s++) {
    for (int l = 0; l < 2; l++) ck_assert_int_eq(lh_model_balancer_observe(a, l, NULL, NULL, idx, 6), 0);
    ck_assert_int_eq(lh_model_balancer_step(a, bias_a), 0);
  }
  size_t n = lh_model_balancer_state_bytes(a);
  unsigned char *st = malloc(n);
  ck_assert_int_eq(lh_model_balancer_state_get(a, st, n), 0);
  ck_assert_int_eq(lh_model_balancer_state_set(b, st, n - 1), LH_EMODEL_CKPT_SIZE);
  st[n - 1] = 7; /* a window flag that is not 0 or 1 */
  ck_assert_int_eq(lh_model_balancer_state_set(b, st, n), LH_EMODEL_CKPT_METADATA);
  ck_assert_int_eq(lh_model_balancer_state_get(a, st, n), 0);
  ck_assert_int_eq(lh_model_balancer_state_set(b, st, n), 0);
  memcpy(bias_b, bias_a, sizeof bias_a);
  for (int s = 0; s < 3; s++) {
    for (int l = 0; l < 2; l++) {
      ck_assert_int_eq(lh_model_balancer_observe(a, l, NULL, NULL, idx, 6), 0);
      ck_assert_int_eq(lh_model_balancer_observe(b, l, NULL, NULL, idx, 6), 0);
    }
    ck_assert_int_eq(lh_model_balancer_step(a, bias_a), 0);
    ck_assert_int_eq(lh_model_balancer_step(b, bias_b), 0);
  }
  ck_assert_mem_eq(bias_a, bias_b, sizeof bias_a);
  ck_assert_int_eq(lh_model_balancer_dead(a, 1), lh_model_balancer_dead(b, 1));
  ck_assert(lh_model_balancer_ms(a) >= 0);
  /* another shape's state */
  cfg.experts = 4;
  lh_model_balancer *c = NULL;
  ck_assert_int_eq(lh_model_balancer_new(&cfg, &c), 0);
  ck_assert_int_eq(lh_model_balancer_state_set(c, st, n), LH_EMODEL_CKPT_SIZE);
  free(st);
  lh_model_balancer_free(a), lh_model_balancer_free(b), lh_model_balancer_free(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_balance");
  TCase *tc = tcase_create("balance");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_balance_rules);
  tcase_add_test(tc, test_balance_dead_and_errors);
  tcase_add_test(tc, test_balance_through_model);
  tcase_add_test(tc, test_balance_state_round_trip);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Tests of actors/: the generator and the sampler. Frequencies are checked
 * with a chi-square bound at fixed seeds, so the outcome is deterministic. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <string.h>

#include "actors/internal.h"

START_TEST(test_rng_deterministic_and_resumable) {
  lh_actors_rng a, b, c;
  lh_actors_rng_seed(&a, 42);
  lh_actors_rng_seed(&b, 42);
  lh_actors_rng_seed(&c, 43);
  int differ = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t x = lh_actors_rng_next(&a), y = lh_actors_rng_next(&b), z = lh_actors_rng_next(&c);
    ck_assert_uint_eq(x, y);
    differ += x != z;
  }
  ck_assert_int_gt(differ, 990);
  /* Save mid-stream, draw, restore: the same numbers again. */
  uint8_t st[LH_ACTORS_RNG_STATE_BYTES];
  lh_actors_rng_save(&a, st);
  uint64_t first[16];
  for (int i = 0; i < 16; i++) first[i] = lh_actors_rng_next(&a);
  lh_actors_rng r;
  ck_assert_int_eq(lh_actors_rng_load(&r, st, NULL), 0);
  for (int i = 0; i < 16; i++) ck_assert_uint_eq(lh_actors_rng_next(&r), first[i]);
  /* Seed 0 is a valid seed; uniforms are in [0, 1). */
  lh_actors_rng_seed(&r, 0);
  for (int i = 0; i < 10000; i++) {
    double u = lh_actors_rng_uniform(&r);
    ck_assert(u >= 0.0 && u < 1.0);
  }
}
END_TEST

START_TEST(test_rng_load_rejects_zero) {
  uint8_t zero[LH_ACTORS_RNG_STATE_BYTES] = {0};
  lh_actors_rng r;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_rng_load(&r, zero, &e), LH_EACTORS_RNG_STATE);
  ck_assert(strstr(e.msg, "all zero"));
  ck_assert_int_eq(lh_actors_rng_load(NULL, zero, &e), LH_EINVAL);
}
END_TEST

/* Draws n tokens and checks the counts against probabilities q with a
 * chi-square statistic; bound is far above the 99.99% quantile for the
 * degrees of freedom used here, and far below what a wrong distribution
 * gives at these sample sizes. Returns the statistic. */
static double chi_square(lh_actors_sampler *s, const float *logits, uint32_t vocab, const double *q,
                         uint64_t seed, int n) {
  lh_actors_rng r;
  lh_actors_rng_seed(&r, seed);
  long counts[64] = {0};
  for (int i = 0; i < n; i++) {
    lh_actors_sample out;
    ck_assert_int_eq(lh_actors_sampler_sample(s, logits, &r, &out, NULL), 0);
    ck_assert_uint_lt(out.token, vocab);
    ck_assert_msg(q[out.token] > 0.0, "token %u has probability 0 but was drawn", out.token);
    counts[out.token]++;
  }
  double chi = 0.0;
  for (uint32_t k = 0; k < vocab; k++)
    if (q[k] > 0.0) chi += (counts[k] - n * q[k]) * (counts[k] - n * q[k]) / (n * q[k]);
  return chi;
}

START_TEST(test_frequencies_match_tempered_distribution) {
  const uint32_t V = 8;
  const double p[8] = {0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.05, 0.01};
  float logits[8];
  for (uint32_t i = 0; i < V; i++) logits[i] = (float)log(p[i]);
  const float temps[3] = {1.0f, 0.5f, 2.0f};
  for (int ti = 0; ti < 3; ti++) {
    double q[8], z = 0.0;
    for (uint32_t i = 0; i < V; i++) z += q[i] = pow(p[i], 1.0 / temps[ti]);
    for (uint32_t i = 0; i < V; i++) q[i] /= z;
    lh_actors_sampler *s = lh_actors_sampler_new(V, temps[ti], 1.0f, NULL);
    ck_assert_ptr_nonnull(s);
    double chi = chi_square(s, logits, V, q, 7 + ti, 200000);
    printf("sampler T=%g chi-square %.2f (7 dof, bound 40)\n", (double)temps[ti], chi);
    ck_assert_double_lt(chi, 40.0);
    /* The reported logp is the tempered log-softmax over the whole vocabulary. */
    lh_actors_rng r;
    lh_actors_rng_seed(&r, 1);
    for (int i = 0; i < 100; i++) {
      lh_actors_sample out;
      ck_assert_int_eq(lh_actors_sampler_sample(s, logits, &r, &out, NULL), 0);
      ck_assert_double_lt(fabs(out.logp - log(q[out.token])), 1e-6);
      ck_assert_double_lt(fabs(out.sample_logp - out.logp), 1e-6);
      ck_assert_uint_eq(out.nucleus, V);
    }
    lh_actors_sampler_free(s);
  }
}
END_TEST

START_TEST(test_wrong_distribution_is_detected) {
  /* The bound is meaningful: the same draws judged against a distribution
   * off by a few points fail it. */
  const double p[4] = {0.4, 0.3, 0.2, 0.1}, wrong[4] = {0.37, 0.33, 0.2, 0.1};
  float logits[4];
  for (int i = 0; i < 4; i++) logits[i] = (float)log(p[i]);
  lh_actors_sampler *s = lh_actors_sampler_new(4, 1.0f, 1.0f, NULL);
  ck_assert_double_lt(chi_square(s, logits, 4, p, 3, 100000), 40.0);
  ck_assert_double_gt(chi_square(s, logits, 4, wrong, 3, 100000), 100.0);
  lh_actors_sampler_free(s);
}
END_TEST

START_TEST(test_top_p_excludes_tail) {
  const double p[5] = {0.5, 0.3, 0.15, 0.04, 0.01};
  float logits[5];
  /* Unnormalised logits: the sampler renormalises. */
  for (int i = 0; i < 5; i++) logits[i] = (float)log(p[i]) + 3.0f;
  /* Listed out of order so the sort matters: swap ids 0 and 2. */
  float l2[5] = {logits[2], logits[1], logits[0], logits[3], logits[4]};
  lh_actors_sampler *s = lh_actors_sampler_new(5, 1.0f, 0.75f, NULL);
  ck_assert_ptr_nonnull(s);
  double q[5] = {0.0, 0.3 / 0.8, 0.5 / 0.8, 0.0, 0.0};
  double chi = chi_square(s, l2, 5, q, 11, 100000);
  printf("sampler top_p=0.75 chi-square %.2f (1 dof, bound 40)\n", chi);
  ck_assert_double_lt(chi, 40.0);
  lh_actors_rng r;
  lh_actors_rng_seed(&r, 5);
  for (int i = 0; i < 200; i++) {
    lh_actors_sample out;
    ck_assert_int_eq(lh_actors_sampler_sample(s, l2, &r, &out, NULL), 0);
    ck_assert_uint_eq(out.nucleus, 2);
    double full = out.token == 2 ? 0.5 : 0.3;
    ck_assert_double_lt(fabs(out.logp - log(full)), 1e-6);
    ck_assert_double_lt(fabs(out.sample_logp - log(full / 0.8)), 1e-6);
  }
  lh_actors_sampler_free(s);
  /* A tiny top_p keeps only the most likely token. */
  s = lh_actors_sampler_new(5, 1.0f, 0.01f, NULL);
  for (int i = 0; i < 100; i++) {
    lh_actors_sample out;
    ck_assert_int_eq(lh_actors_sampler_sample(s, l2, &r, &out, NULL), 0);
    ck_assert_uint_eq(out.token, 2);
    ck_assert_uint_eq(out.nucleus, 1);
  }
  lh_actors_sampler_free(s);
}
END_TEST

START_TEST(test_greedy_ties_to_lower_id) {
  float logits[6] = {-3.0f, 1.0f, -1.0f, 1.0f, 0.5f, -INFINITY};
  lh_actors_sampler *s = lh_actors_sampler_new(6, 0.0f, 1.0f, NULL);
  ck_assert_ptr_nonnull(s);
  lh_actors_rng r, before;
  lh_actors_rng_seed(&r, 9);
  before = r;
  lh_actors_sample out;
  ck_assert_int_eq(lh_actors_sampler_sample(s, logits, &r, &out, NULL), 0);
  ck_assert_uint_eq(out.token, 1);
  ck_assert_int_eq(memcmp(&r, &before, sizeof r), 0);  /* generator not advanced */
  double z = exp(-3.0) + 2 * exp(1.0) + exp(-1.0) + exp(0.5);
  ck_assert_double_lt(fabs(out.logp - (1.0 - log(z))), 1e-6);
  /* Greedy needs no generator at all. */
  ck_assert_int_eq(lh_actors_sampler_sample(s, logits, NULL, &out, NULL), 0);
  ck_assert_uint_eq(out.token, 1);
  lh_actors_sampler_free(s);
}
END_TEST

START_TEST(test_masked_tokens_never_drawn) {
  float logits[4] = {-INFINITY, 0.0f, -INFINITY, 0.0f};
  lh_actors_sampler *s = lh_actors_sampler_new(4, 1.0f, 1.0f, NULL);
  lh_actors_rng r;
  lh_actors_rng_seed(&r, 1);
  for (int i = 0; i < 2000; i++) {
    lh_actors_sample out;
    ck_assert_int_eq(lh_actors_sampler_sample(s, logits, &r, &out, NULL), 0);
    ck_assert(out.token == 1 || out.token == 3);
    ck_assert_double_lt(fabs(out.logp - log(0.5)), 1e-6);
  }
  lh_actors_sampler_free(s);
}
END_TEST

START_TEST(test_sampler_errors) {
  lh_errbuf e;
  ck_assert_ptr_null(lh_actors_sampler_new(0, 1.0f, 1.0f, &e));
  ck_assert_int_eq(e.code, LH_EACTORS_SAMPLER_PARAMS);
  ck_assert(strstr(e.msg, "vocab"));
  ck_assert_ptr_null(lh_actors_sampler_new(4, -1.0f, 1.0f, &e));
  ck_assert(strstr(e.msg, "temperature"));
  ck_assert_ptr_null(lh_actors_sampler_new(4, NAN, 1.0f, &e));
  ck_assert(strstr(e.msg, "temperature"));
  ck_assert_ptr_null(lh_actors_sampler_new(4, 1.0f, 0.0f, &e));
  ck_assert(strstr(e.msg, "top_p"));
  ck_assert_ptr_null(lh_actors_sampler_new(4, 1.0f, 1.5f, &e));
  ck_assert_int_eq(e.code, LH_EACTORS_SAMPLER_PARAMS);

  lh_actors_sampler *s = lh_actors_sampler_new(3, 1.0f, 0.9f, NULL);
  lh_actors_rng r;
  lh_actors_rng_seed(&r, 1);
  lh_actors_sample out;
  float nan_in[3] = {0.0f, NAN, 0.0f}, inf_in[3] = {INFINITY, 0.0f, 0.0f};
  float none[3] = {-INFINITY, -INFINITY, -INFINITY};
  ck_assert_int_eq(lh_actors_sampler_sample(s, nan_in, &r, &out, &e), LH_EACTORS_SAMPLER_INPUT);
  ck_assert(strstr(e.msg, "logits[1]"));
  ck_assert_int_eq(lh_actors_sampler_sample(s, inf_in, &r, &out, &e), LH_EACTORS_SAMPLER_INPUT);
  ck_assert(strstr(e.msg, "logits[0]"));
  ck_assert_int_eq(lh_actors_sampler_sample(s, none, &r, &out, &e), LH_EACTORS_SAMPLER_INPUT);
  ck_assert(strstr(e.msg, "all 3"));
  ck_assert_int_eq(lh_actors_sampler_sample(s, none, NULL, &out, &e), LH_EINVAL);
  ck_assert_int_eq(lh_actors_sampler_sample(NULL, none, &r, &out, &e), LH_EINVAL);
  lh_actors_sampler_free(s);
  lh_actors_sampler_free(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_sampler");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_rng_deterministic_and_resumable);
  tcase_add_test(tc, test_rng_load_rejects_zero);
  tcase_add_test(tc, test_frequencies_match_tempered_distribution);
  tcase_add_test(tc, test_wrong_distribution_is_detected);
  tcase_add_test(tc, test_top_p_excludes_tail);
  tcase_add_test(tc, test_greedy_ties_to_lower_id);
  tcase_add_test(tc, test_masked_tokens_never_drawn);
  tcase_add_test(tc, test_sampler_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

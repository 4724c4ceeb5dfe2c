/* Tests of learner/ppo.c: dloss/dlogp against central finite differences in
 * double, the clip regions and the truncation by hand, normalisation across
 * calls, the entropy bonus, the alignment figure and every error. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <string.h>

#include "learner/internal.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%.12g vs %.12g", \
                                      (double)(a), (double)(b))

static const lh_learner_ppo_params P = {.clip_eps = 0.2, .is_cap = 2.0, .entropy_coef = 0.0};

/* A small LCG so the test data does not depend on another module. */
static double unif(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * 0x1.0p-53;
}

static double loss_f64(const lh_learner_ppo_params *p, const lh_learner_ppo_input_f64 *in) {
  double l;
  ck_assert_int_eq(lh_learner_ppo_loss_f64(p, in, &l, NULL, NULL, NULL), 0);
  return l;
}

START_TEST(test_gradient_matches_finite_differences) {
  enum { N = 400 };
  static double logp[N], blogp[N], adv[N], ent[N], grad[N];
  static uint8_t mask[N];
  uint64_t s = 12345;
  for (int t = 0; t < N; t++) {
    blogp[t] = -3.0 * unif(&s) - 0.01;
    logp[t] = blogp[t] + (unif(&s) - 0.5) * 2.0;  /* ratios from e^-1 to e^1: every region */
    adv[t] = (unif(&s) - 0.5) * 4.0;
    ent[t] = unif(&s) * 3.0;
    mask[t] = unif(&s) < 0.8;
  }
  const lh_learner_ppo_params params[3] = {{0.2, 2.0, 0.0}, {0.1, 1.5, 0.01}, {0.3, INFINITY, 0.0}};
  double h = 1e-6, max_err = 0.0;
  int checked = 0;
  for (int pi = 0; pi < 3; pi++) {
    const lh_learner_ppo_params *p = &params[pi];
    lh_learner_ppo_input_f64 in = {.n = N, .logp = logp, .behavior_logp = blogp, .advantage = adv,
                           .loss_mask = mask, .entropy = ent, .normaliser = 0};
    ck_assert_int_eq(lh_learner_ppo_loss_f64(p, &in, NULL, grad, NULL, NULL), 0);
    for (int t = 0; t < N; t++) {
      double r = exp(logp[t] - blogp[t]);
      /* Skip the kinks, where the derivative is one-sided. */
      double kinks[3] = {1.0 - p->clip_eps, 1.0 + p->clip_eps, p->is_cap};
      int near_kink = 0;
      for (int k = 0; k < 3; k++) near_kink |= fabs(log(r) - log(kinks[k])) < 1e-4;
      if (near_kink) continue;
      double keep = logp[t];
      logp[t] = keep + h;
      double up = loss_f64(p, &in);
      logp[t] = keep - h;
      double down = loss_f64(p, &in);
      logp[t] = keep;
      double fd = (up - down) / (2 * h);
      double e = fabs(fd - grad[t]);
      if (e > max_err) max_err = e;
      ck_assert_msg(e < 1e-8, "token %d: dloss/dlogp %.12g, finite difference %.12g", t, grad[t], fd);
      if (!mask[t]) ck_assert(grad[t] == 0.0);
      checked++;
    }
  }
  printf("ppo: %d gradients checked against central differences, largest difference %.3g\n", checked,
         max_err);
  ck_assert_int_gt(checked, 1000);
}
END_TEST

/* The loss and gradient of one token with advantage A and ratio r. */
static void one(const lh_learner_ppo_params *p, double r, double A, double *loss, double *g, lh_learner_ppo_stats *st) {
  double logp = log(r) - 1.0, blogp = -1.0;
  lh_learner_ppo_input_f64 in = {.n = 1, .logp = &logp, .behavior_logp = &blogp, .advantage = &A};
  ck_assert_int_eq(lh_learner_ppo_loss_f64(p, &in, loss, g, st, NULL), 0);
}

START_TEST(test_clip_regions) {
  double l, g;
  lh_learner_ppo_stats st;
  /* A > 0, ratio above 1 + eps: clipped, no gradient. */
  one(&P, 1.5, 1.0, &l, &g, &st);
  NEAR(l, -1.2, 1e-12);
  ck_assert(g == 0.0);
  NEAR(st.clip_frac, 1.0, 0);
  /* A > 0, ratio below 1 - eps: the unclipped term, gradient flows. */
  one(&P, 0.5, 1.0, &l, &g, &st);
  NEAR(l, -0.5, 1e-12);
  NEAR(g, -0.5, 1e-12);
  NEAR(st.clip_frac, 0.0, 0);
  /* A < 0, ratio below 1 - eps: clipped. */
  one(&P, 0.5, -1.0, &l, &g, &st);
  NEAR(l, 0.8, 1e-12);
  ck_assert(g == 0.0);
  NEAR(st.clip_frac, 1.0, 0);
  /* A < 0, ratio above 1 + eps (below the cap): unclipped, gradient r*|A|. */
  one(&P, 1.5, -1.0, &l, &g, &st);
  NEAR(l, 1.5, 1e-12);
  NEAR(g, 1.5, 1e-12);
  /* Inside the trust region: plain ratio, both signs. */
  one(&P, 1.1, 2.0, &l, &g, &st);
  NEAR(l, -2.2, 1e-12);
  NEAR(g, -2.2, 1e-12);
  NEAR(st.ratio_mean, 1.1, 1e-12);
  one(&P, 0.9, -2.0, &l, &g, &st);
  NEAR(l, 1.8, 1e-12);
  NEAR(g, 1.8, 1e-12);
  /* A = 0: nothing, and not counted as clipped. */
  one(&P, 3.0, 0.0, &l, &g, &st);
  ck_assert(l == 0.0 && g == 0.0);
  NEAR(st.clip_frac, 0.0, 0);
}
END_TEST

START_TEST(test_truncation_at_is_cap) {
  double l, g;
  lh_learner_ppo_stats st;
  /* A < 0, r = 5 > is_cap = 2: the weight is min(r, is_cap) = 2. */
  one(&P, 5.0, -1.0, &l, &g, &st);
  NEAR(l, 2.0, 1e-12);
  ck_assert(g == 0.0);
  NEAR(st.trunc_frac, 1.0, 0);
  NEAR(st.clip_frac, 1.0, 0);
  /* Without a cap the same token costs r * |A| and keeps its gradient. */
  lh_learner_ppo_params nocap = P;
  nocap.is_cap = INFINITY;
  one(&nocap, 5.0, -1.0, &l, &g, &st);
  NEAR(l, 5.0, 1e-12);
  NEAR(g, 5.0, 1e-12);
  NEAR(st.trunc_frac, 0.0, 0);
  /* A > 0: the clip at 1 + eps binds before the cap. */
  one(&P, 5.0, 1.0, &l, &g, &st);
  NEAR(l, -1.2, 1e-12);
  /* A cap inside the trust region binds for A > 0 too. */
  lh_learner_ppo_params tight = P;
  tight.is_cap = 1.1;
  one(&tight, 1.15, 1.0, &l, &g, &st);
  NEAR(l, -1.1, 1e-12);
  ck_assert(g == 0.0);
  /* A huge log-ratio stays finite. */
  one(&P, 1e100, -1.0, &l, &g, &st);  /* log r = 230, clamped to 80 */
  ck_assert(isfinite(l) && isfinite(g));
  NEAR(l, 2.0, 1e-12);
}
END_TEST

START_TEST(test_float_entry_normaliser_mask_alignment_entropy) {
  float logp[4] = {-1.0f, -2.0f, -0.5f, -3.0f}, blogp[4] = {-1.0f, -2.1f, -0.5f, -2.0f};
  float adv[4] = {1.0f, 1.0f, -1.0f, 5.0f}, ent[4] = {2.0f, 1.0f, 0.5f, 9.0f};
  uint8_t mask[4] = {1, 1, 1, 0};
  uint32_t ver[4] = {7, 6, 7, 7};
  lh_learner_ppo_params p = {.clip_eps = 0.2, .is_cap = 2.0, .entropy_coef = 0.1};
  lh_learner_ppo_input in = {.n = 4, .logp = logp, .behavior_logp = blogp, .advantage = adv, .loss_mask = mask,
                     .version = ver, .current_version = 7, .entropy = ent};
  double l;
  float g[4] = {9, 9, 9, 9};
  lh_learner_ppo_stats st;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, &st, NULL), 0);
  double r1 = exp(0.1);  /* inside the trust region */
  double want_policy = -(1.0 + r1 * 1.0 + -1.0) / 3.0;
  NEAR(st.policy_loss, want_policy, 1e-6);
  NEAR(st.entropy_mean, 3.5 / 3.0, 1e-6);
  NEAR(l, want_policy - 0.1 * 3.5 / 3.0, 1e-6);
  NEAR(st.dloss_dentropy, -0.1 / 3.0, 1e-12);
  NEAR(g[0], -1.0 / 3.0, 1e-6);
  NEAR(g[1], -r1 / 3.0, 1e-6);
  NEAR(g[2], 1.0 / 3.0, 1e-6);
  ck_assert(g[3] == 0.0f);  /* not sampled */
  ck_assert_uint_eq(st.tokens, 3);
  /* Alignment: tokens 0 and 2 are at the current version, both exact. */
  ck_assert_uint_eq(st.current_tokens, 2);
  ck_assert(st.logp_diff_max == 0.0 && st.logp_diff_mean == 0.0);
  blogp[2] = -0.5f + 1e-3f;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, &st, NULL), 0);
  NEAR(st.logp_diff_max, 1e-3, 1e-7);
  NEAR(st.logp_diff_mean, 5e-4, 1e-7);
  /* Split into two calls normalised by the batch's 3 sampled tokens: the
   * pieces add up to the whole. */
  blogp[2] = -0.5f;
  p.entropy_coef = 0.0;
  in.entropy = NULL;
  double whole, a, b;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &whole, NULL, NULL, NULL), 0);
  lh_learner_ppo_input first = in, second = in;
  first.n = 2, first.normaliser = 3;
  second.n = 2, second.logp += 2, second.behavior_logp += 2, second.advantage += 2;
  second.loss_mask += 2, second.version += 2, second.normaliser = 3;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &first, &a, NULL, NULL, NULL), 0);
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &second, &b, NULL, NULL, NULL), 0);
  NEAR(a + b, whole, 1e-7);
  /* Masked positions may hold anything, NaN included. */
  logp[3] = NAN;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, NULL), 0);
  /* An empty call is a zero loss. */
  lh_learner_ppo_input empty = {.n = 0};
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &empty, &l, NULL, &st, NULL), 0);
  ck_assert(l == 0.0 && st.tokens == 0);
}
END_TEST

START_TEST(test_ppo_errors) {
  float logp[2] = {-1.0f, -1.0f}, blogp[2] = {-1.0f, -1.0f}, adv[2] = {1.0f, 1.0f};
  lh_learner_ppo_input in = {.n = 2, .logp = logp, .behavior_logp = blogp, .advantage = adv};
  lh_errbuf e;
  double l = 42.0;
  float g[2] = {7, 7};
  lh_learner_ppo_params p = P;
  p.clip_eps = 0.0;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_PARAMS);
  ck_assert(strstr(e.msg, "clip_eps"));
  p = P, p.clip_eps = 1.0;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_PARAMS);
  p = P, p.is_cap = 0.5;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_PARAMS);
  ck_assert(strstr(e.msg, "is_cap"));
  p = P, p.is_cap = NAN;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_PARAMS);
  p = P, p.entropy_coef = -0.1;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_PARAMS);
  ck_assert(strstr(e.msg, "entropy_coef"));
  p = P, p.entropy_coef = 0.1;
  ck_assert_int_eq(lh_learner_ppo_loss(&p, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert(strstr(e.msg, "no per-token entropy"));
  logp[1] = NAN;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert(strstr(e.msg, "logp[1]"));
  logp[1] = -1.0f, blogp[0] = -INFINITY;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert(strstr(e.msg, "behavior_logp[0]"));
  blogp[0] = -1.0f, adv[1] = INFINITY;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert(strstr(e.msg, "advantage[1]"));
  adv[1] = 1.0f;
  in.normaliser = 1;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert(strstr(e.msg, "normaliser=1"));
  in.normaliser = -2;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  in.normaliser = 0;
  in.logp = NULL;
  ck_assert_int_eq(lh_learner_ppo_loss(&P, &in, &l, g, NULL, &e), LH_ELEARNER_PPO_INPUT);
  ck_assert_int_eq(lh_learner_ppo_loss(&P, NULL, &l, g, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_ppo_loss(NULL, &in, &l, g, NULL, &e), LH_EINVAL);
  /* Nothing was written by the failed calls. */
  ck_assert(l == 42.0 && g[0] == 7.0f && g[1] == 7.0f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_ppo");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_gradient_matches_finite_differences);
  tcase_add_test(tc, test_clip_regions);
  tcase_add_test(tc, test_truncation_at_is_cap);
  tcase_add_test(tc, test_float_entry_normaliser_mask_alignment_entropy);
  tcase_add_test(tc, test_ppo_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* PPO diagnostics: lh_learner_ppo_loss's approximate KL to the behaviour
 * policy (mean of r - 1 - log r) and importance weights (mean, largest),
 * and the five figures of a train step (schema 11) stored and read back,
 * NAN as NULL. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"
#include "proc_util.h"
#include "store/store.h"

START_TEST(test_loss_figures) {
  const lh_learner_ppo_params P = {.clip_eps = 0.2, .is_cap = 10.0, .entropy_coef = 0.0};
  double logp[3] = {-1.0, -2.0, -0.5}, blogp[3] = {-1.0, -1.5, -1.0}, adv[3] = {1, -1, 1};
  double ent[3] = {2.0, 1.0, 3.0};
  lh_learner_ppo_input_f64 in = {.n = 3, .logp = logp, .behavior_logp = blogp, .advantage = adv, .entropy = ent};
  lh_learner_ppo_stats st;
  lh_errbuf e;
  lh_errbuf_clear(&e);
  double loss;
  ck_assert_int_eq(lh_learner_ppo_loss_f64(&P, &in, &loss, NULL, &st, &e), 0);
  double lr[3] = {0.0, -0.5, 0.5}, kl = 0, mean = 0;
  for (int i = 0; i < 3; i++) kl += exp(lr[i]) - 1 - lr[i], mean += exp(lr[i]);
  ck_assert_double_eq_tol(st.approx_kl, kl / 3, 1e-12);
  ck_assert_double_eq_tol(st.ratio_mean, mean / 3, 1e-12);
  ck_assert_double_eq_tol(st.ratio_max, exp(0.5), 1e-12);
  ck_assert_double_eq_tol(st.entropy_mean, 2.0, 1e-12);
  ck_assert(st.approx_kl > 0);
  /* The same policy: no divergence, every weight 1. */
  in.logp = blogp;
  ck_assert_int_eq(lh_learner_ppo_loss_f64(&P, &in, &loss, NULL, &st, &e), 0);
  ck_assert_double_eq_tol(st.approx_kl, 0.0, 1e-15);
  ck_assert_double_eq_tol(st.ratio_max, 1.0, 1e-15);
}
END_TEST

typedef struct {
  lh_store_train_step t[2];
  int n;
} got_steps;

static int got_step(void *ctx, const lh_store_train_step *t) {
  got_steps *g = ctx;
  if (g->n < 2) g->t[g->n] = *t, g->t[g->n].expert_load = NULL;
  g->n++;
  return 0;
}

START_TEST(test_store_round_trip) {
  char db[128];
  snprintf(db, sizeof db, "/tmp/lh-test-ppo-diag-%d.db", (int)getpid());
  lh_proc_rm_db(db);
  lh_store *s;
  lh_errbuf e;
  lh_errbuf_clear(&e);
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "%s", e.msg);
  for (uint64_t k = 1; k <= 2; k++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = k, t.version = k, t.loss = 1;
    t.approx_kl = k == 1 ? 0.01 : NAN, t.entropy = 2.5, t.clip_frac = 0.125, t.iw_mean = 1.02, t.iw_max = 3.5;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
  }
  lh_store_close(s);
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  got_steps got = {.n = 0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, got_step, &got, &e), 0);
  ck_assert_int_eq(got.n, 2);
  ck_assert_double_eq_tol(got.t[0].approx_kl, 0.01, 1e-15);
  ck_assert(isnan(got.t[1].approx_kl));
  ck_assert_double_eq_tol(got.t[1].entropy, 2.5, 1e-15);
  ck_assert_double_eq_tol(got.t[1].clip_frac, 0.125, 1e-15);
  ck_assert_double_eq_tol(got.t[1].iw_mean, 1.02, 1e-15);
  ck_assert_double_eq_tol(got.t[1].iw_max, 3.5, 1e-15);
  lh_store_close(s);
  lh_proc_rm_db(db);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ppo_diagnostics");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_loss_figures);
  tcase_add_test(tc, test_store_round_trip);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}

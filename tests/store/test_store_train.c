/* test_store: train steps (with and without per-layer figures, with expert
 * loads) and batches. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

START_TEST(test_train_steps) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 12;
  t.version = 13;
  snprintf(t.run_id, sizeof t.run_id, "run-1");
  t.loss = NAN;
  t.reward_mean = 0.5;
  t.success_rate = 0.25;
  t.tokens = 4096;
  t.episodes = 16;
  t.lag_mean = 0.5;
  t.lag_max = 2;
  t.logp_diff = 3e-6;
  t.layers = 3;
  t.maxvio[0] = 0.125;
  t.maxvio[1] = 1.5;
  t.maxvio[2] = INFINITY;
  t.step_ms = 250;
  t.busy_frac = 0.75;
  int ins;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  t.layers = LH_STORE_MAX_LAYERS + 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), LH_EINVAL);
  static lh_store_train_step back;
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, step_row, &back, &e), 0);
  ck_assert_uint_eq(back.step, 12);
  ck_assert_uint_eq(back.version, 13);
  ck_assert_str_eq(back.run_id, "run-1");
  ck_assert(isnan(back.loss));
  ck_assert(back.reward_mean == 0.5 && back.success_rate == 0.25);
  ck_assert_uint_eq(back.tokens, 4096);
  ck_assert(back.logp_diff == 3e-6);
  ck_assert_uint_eq(back.layers, 3);
  ck_assert(back.maxvio[0] == 0.125 && back.maxvio[1] == 1.5 && isnan(back.maxvio[2]));
  ck_assert(back.busy_frac == 0.75);
  lh_store_close(s);
  s = open_ro();
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT maxvio FROM train_step_layers WHERE step = 12", NULL,
                                NULL, &rows, &e), 0);
  ck_assert_uint_eq(rows, 3);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.train_steps, 1);
  ck_assert_uint_eq(st.last_train_step, 12);
  lh_store_close(s);
}
END_TEST

/* A step with no per-layer figures stores an empty MaxVio array. */
START_TEST(test_train_step_no_layers) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 1;
  int ins;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  static lh_store_train_step back;
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, step_row, &back, &e), 0);
  ck_assert_uint_eq(back.step, 1);
  ck_assert_uint_eq(back.layers, 0);
  lh_store_close(s);
}
END_TEST

START_TEST(test_batches) {
  lh_store *s = open_rw();
  static sfx_seg g;
  ck_assert_int_eq(lh_store_commit(s, &e), LH_ESTORE_TXN);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  ck_assert(lh_store_in_batch(s));
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_TXN);
  sfx_seg_plain(&g, 1, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  ck_assert_int_eq(lh_store_rollback(s, &e), 0);
  ck_assert(!lh_store_in_batch(s));
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), LH_ESTORE_NO_EPISODE);
  /* An invalid segment inside a batch leaves the batch usable. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  g.tokens[3] = 999;
  int ins = 7;
  ck_assert_int_eq(lh_store_put_segment(s, &g.seg, &ins, &e), LH_EWIRE_TOKEN_RANGE);
  ck_assert_int_eq(ins, 0);
  ck_assert(strstr(e.msg, "tokens[3]") != NULL);
  g.tokens[3] = 'a';
  put_seg(s, &g.seg, 1);
  sfx_end end;
  sfx_end_init(&end, 1, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED, 0.0f);
  ck_assert_int_eq(lh_store_put_episode_end(s, &end.end, &ins, &e), LH_EWIRE_OUTCOME);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), 0);
  /* Closing with a batch open rolls it back. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  sfx_seg_plain(&g, 2, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
  s = open_ro();
  ck_assert_int_eq(lh_store_episode_get(s, 2, &r, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
  ck_assert_int_eq(lh_store_put_segment(NULL, &g.seg, &ins, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_begin(NULL, &e), LH_EINVAL);
  lh_store_close(NULL);
}
END_TEST

/* Expert loads: rows of train_step_experts in the step's transaction, read
 * back row-major with the step; a step without them reads none; bad loads
 * and too many experts are refused, and a refused step leaves no row. */
START_TEST(test_train_step_experts) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  static const double load[2][4] = {{0.5, 0.25, 0.125, 0.125}, {0.25, 0.25, 0.25, 0.25}};
  static const double even[8] = {0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25};
  memset(&t, 0, sizeof t);
  t.layers = 2, t.maxvio[0] = 1, t.maxvio[1] = 0;
  t.experts = 4, t.expert_load = &load[0][0];
  t.step = 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  t.step = 2, t.experts = 0, t.expert_load = NULL;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  t.step = 3, t.experts = 4, t.expert_load = even;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  double bad[8] = {0.5, 0.5, 0, 0, NAN, 1, 0, 0};
  t.step = 4, t.expert_load = bad;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  ck_assert_msg(strstr(e.msg, "layer 1 expert 0 has load nan") != NULL, "%s", e.msg);
  bad[4] = -0.5;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  t.experts = LH_STORE_MAX_EXPERTS + 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "experts, over the limit") != NULL);
  static expert_rows r;
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 3);
  ck_assert_uint_eq(r.step[0], 1);
  ck_assert_uint_eq(r.experts[0], 4);
  ck_assert(r.has_load[0]);
  for (int i = 0; i < 8; i++) ck_assert(r.load[0][i] == (&load[0][0])[i]);
  ck_assert_uint_eq(r.step[1], 2);
  ck_assert_uint_eq(r.experts[1], 0);
  ck_assert(!r.has_load[1]);
  ck_assert_uint_eq(r.experts[2], 4);
  for (int i = 0; i < 8; i++) ck_assert(r.load[2][i] == 0.25);
  /* From step 3 on, and the first step only. */
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 3, 0, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.step[0], 3);
  ck_assert_uint_eq(r.experts[0], 4);
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 1, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 1);
  ck_assert(r.load[0][0] == 0.5);
  lh_store_close(s);
  s = open_ro();
  char v[64];
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM train_step_experts", first_value, v, &rows, &e), 0);
  ck_assert_str_eq(v, "16");
  ck_assert_int_eq(lh_store_sql(s, "SELECT sum(load) FROM train_step_experts WHERE step = 1 AND layer = 0",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1.0");
  /* A missing row reads back as NAN in its place. */
  lh_store_close(s);
  raw_exec(db, "DELETE FROM train_step_experts WHERE step = 3 AND layer = 1 AND expert = 2");
  s = open_ro();
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 3, 0, expert_row, &r, &e), 0);
  ck_assert(r.load[0][5] == 0.25 && isnan(r.load[0][6]) && r.load[0][7] == 0.25);
  lh_store_close(s);
}
END_TEST

void lh_test_store_train(TCase *tc) {
  tcase_add_test(tc, test_train_steps);
  tcase_add_test(tc, test_train_step_no_layers);
  tcase_add_test(tc, test_batches);
  tcase_add_test(tc, test_train_step_experts);
}

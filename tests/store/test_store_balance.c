/* Schema 7 ("balancing"): a train step's dead experts per layer, its
 * balancing rule and time go to train_steps and train_step_layers and read
 * back as written; unknown values (a negative dead count, NAN time, no
 * rule) as NULL. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

static lh_store_train_step got;
static int rows;

static int on_step(void *ctx, const lh_store_train_step *t) {
  (void)ctx;
  if (rows++ == 0) got = *t;
  return 0;
}

static int first_value(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)ncols, (void)names;
  snprintf(ctx, 64, "%s", values[0] ? values[0] : "NULL");
  return 0;
}

START_TEST(test_balance_columns) {
  char dir[] = "/tmp/lh_store_balance_XXXXXX", path[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/store.db", dir);
  lh_store *s = NULL;
  lh_errbuf e = {0};
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s", e.msg);
  lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 1, t.version = 1, t.loss = 1, t.layers = 3;
  t.maxvio[0] = 0.25, t.maxvio[1] = 2, t.maxvio[2] = 0.5;
  t.dead[0] = 0, t.dead[1] = 7, t.dead[2] = -1;
  snprintf(t.balance, sizeof t.balance, "adaptive");
  t.balance_ms = 1.25;
  ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
  memset(&t, 0, sizeof t);
  t.step = 2, t.version = 2, t.loss = 1, t.balance_ms = NAN;
  ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_store_train_steps(s, 1, 0, on_step, NULL, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(rows, 2);
  ck_assert_uint_eq(got.layers, 3);
  ck_assert_int_eq(got.dead[0], 0);
  ck_assert_int_eq(got.dead[1], 7);
  ck_assert_int_eq(got.dead[2], -1);
  ck_assert_str_eq(got.balance, "adaptive");
  ck_assert(fabs(got.balance_ms - 1.25) < 1e-12);
  lh_store_close(s);
  ck_assert_msg(lh_store_open_readonly(path, &s, &e) == 0, "%s", e.msg);
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "SELECT dead FROM train_step_layers WHERE step = 1 AND layer = 1", first_value,
                                v, NULL, &e), 0);
  ck_assert_str_eq(v, "7");
  ck_assert_int_eq(lh_store_sql(s, "SELECT dead FROM train_step_layers WHERE step = 1 AND layer = 2", first_value,
                                v, NULL, &e), 0);
  ck_assert_str_eq(v, "NULL");
  ck_assert_int_eq(lh_store_sql(s, "SELECT coalesce(balance, 'NULL') || ',' || coalesce(balance_ms, 'NULL') FROM "
                                   "train_steps WHERE step = 2", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "NULL,NULL");
  lh_store_close(s);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  Suite *su = suite_create("store_balance");
  TCase *tc = tcase_create("balance");
  tcase_add_test(tc, test_balance_columns);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK);
}

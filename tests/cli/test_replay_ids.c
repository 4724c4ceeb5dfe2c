/* 64-bit ids through `longhaul replay` (a real process on a store written
 * through store/): episode 2^63 + 5 with task seed 2^53 + 3 and group
 * 2^64 - 1, and episode 7. export writes each exactly (a number up to
 * 2^53, a string above, so that jq reads the same digits); replay sql
 * shows the ids unsigned, not as SQLite's negative form; replay show
 * takes the id in either form. */
#define _POSIX_C_SOURCE 200809L
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/store_fixture.h"

#define BIG_ID 9223372036854775813ull   /* 2^63 + 5 */
#define BIG_ID_SQLITE "-9223372036854775803"
#define BIG_SEED 9007199254740995ull    /* 2^53 + 3: a double would round it */
#define BIG_GROUP 18446744073709551615ull

static char dir[256], db[300], out[1 << 16];

/* Episode id (task seed, group): 4 byte tokens, the last 2 sampled at
 * version 1, and its end, a success of reward 1. */
static void put_episode(lh_store *s, uint64_t id, uint64_t seed, uint64_t group) {
  static sfx_seg seg;
  sfx_seg_init(&seg, id, 0, "a0", "calc");
  seg.seg.task_seed = seed, seg.seg.group_id = group;
  sfx_seg_text(&seg, "ab", 0, 0);
  sfx_seg_text(&seg, "cd", 1, 1);
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_put_segment(s, &seg.seg, NULL, &err) == 0, "%s", err.msg);
  sfx_end e;
  sfx_end_init(&e, id, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  e.end.total_tokens = 4, e.end.task_seed = seed, e.end.group_id = group, e.end.steps = 1, e.end.n_terms = 0;
  ck_assert_msg(lh_store_put_episode_end(s, &e.end, NULL, &err) == 0, "%s", err.msg);
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/lh-test-replay-ids-%d", (int)getpid());
  mkdir(dir, 0700);
  snprintf(db, sizeof db, "%s/store.db", dir);
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "%s", err.msg);
  put_episode(s, BIG_ID, BIG_SEED, BIG_GROUP);
  put_episode(s, 7, 11, 0);
  lh_store_close(s);
}

static void teardown(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Runs the shell command (stdout and stderr into out); its exit code. */
static int run(const char *fmt, const char *arg) {
  char cmd[2048], full[2100];
  snprintf(cmd, sizeof cmd, fmt, getenv("LH_BIN"), db, arg);
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  ck_assert(p != NULL);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define HAS(text) ck_assert_msg(strstr(out, text) != NULL, "'%s' not in:\n%s", text, out)

START_TEST(test_export_exact) {
  ck_assert_int_eq(run("%s replay export --db %s%s", ""), 0);
  HAS("{\"id\":\"9223372036854775813\",");
  HAS("\"task_seed\":\"9007199254740995\",\"group_id\":\"18446744073709551615\"");
  HAS("{\"id\":7,");
  HAS("\"task_seed\":11,\"group_id\":0,");
  /* jq reads the same digits (a number would come back rounded). */
  if (system("command -v jq >/dev/null 2>&1") == 0) {
    ck_assert_int_eq(run("%s replay export --db %s%s | jq -r '[.id, .task_seed, .group_id] | map(tostring) | join(\" \")'",
                         ""),
                     0);
    HAS("9223372036854775813 9007199254740995 18446744073709551615\n");
    HAS("7 11 0\n");
  }
}
END_TEST

START_TEST(test_sql_unsigned) {
  ck_assert_int_eq(run("%s replay sql --db %s%s", " 'SELECT id, group_id, task_seed FROM episodes ORDER BY id DESC'"),
                   0);
  HAS("9223372036854775813\t18446744073709551615\t9007199254740995\n");
  ck_assert_msg(strstr(out, "-9223") == NULL, "%s", out);
  /* Other columns keep their sign. */
  ck_assert_int_eq(run("%s replay sql --db %s%s", " 'SELECT -3 AS delta'"), 0);
  HAS("-3\n");
}
END_TEST

START_TEST(test_show_either_form) {
  ck_assert_int_eq(run("%s replay show --db %s %s", "9223372036854775813"), 0);
  HAS("episode 9223372036854775813  env calc");
  HAS("task seed 9007199254740995  group 18446744073709551615");
  ck_assert_int_eq(run("%s replay show --db %s %s", BIG_ID_SQLITE), 0);
  HAS("episode 9223372036854775813  env calc");
  ck_assert_int_eq(run("%s replay show --db %s -- %s", BIG_ID_SQLITE), 0);
  ck_assert_int_eq(run("%s replay show --db %s %s", "-0"), 2);
  ck_assert_int_eq(run("%s replay show --db %s %s", "18446744073709551616"), 2);
  HAS("ID must be an episode id");
}
END_TEST

int main(void) {
  Suite *s = suite_create("replay_ids");
  TCase *tc = tcase_create("replay_ids");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_export_exact);
  tcase_add_test(tc, test_sql_unsigned);
  tcase_add_test(tc, test_show_either_form);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}

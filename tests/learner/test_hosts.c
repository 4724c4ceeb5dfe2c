/* Learner ranks on several hosts, without the hosts: [learner]
 * ingest_endpoints read and checked (learner/ranks.c), and the stores of
 * several ranks read as one (store/store_ranks.c) through the store API,
 * `replay sql`'s fences, and the real `longhaul replay` and `report` on
 * rank files found next to --db or given with --rank-db. The run across
 * network namespaces is tests/learner/netns_hosts.sh. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/learner.h"
#include "proc_util.h"
#include "store/store.h"
#include "store_fixture.h"

/* ---- [learner] ingest_endpoints ------------------------------------------ */

static int parse_learner(const char *body, lh_learner_config *c, lh_errbuf *e) {
  char text[1024];
  snprintf(text, sizeof text, "[learner]\nlr = 0.001\n%s", body);
  lh_errbuf_clear(e);
  return lh_learner_config_parse(text, "hosts.ini", c, e);
}

START_TEST(test_endpoints_config) {
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_int_eq(parse_learner("ingest_endpoints = tcp://10.0.0.1:5555, tcp://node-b.lan:5555\n", &c, &e), 0);
  ck_assert_uint_eq(c.n_ingest_endpoints, 2);
  char out[LH_LEARNER_TEXT_BYTES];
  ck_assert_int_eq(lh_learner_rank_ingest(&c, 0, out, &e), 0);
  ck_assert_str_eq(out, "tcp://10.0.0.1:5555");
  ck_assert_int_eq(lh_learner_rank_ingest(&c, 1, out, &e), 0);
  ck_assert_str_eq(out, "tcp://node-b.lan:5555");
  ck_assert_int_eq(lh_learner_rank_ingest(&c, 2, out, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_int_eq(lh_learner_ranks_check(&c, 2, &e), 0);
  ck_assert_int_eq(lh_learner_ranks_check(&c, 3, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "2 entries but the job has 3 ranks"));
  ck_assert_int_eq(lh_learner_ranks_check(&c, 1, &e), LH_ELEARNER_CONFIG_VALUE);
  /* IPv6 in brackets, one rank. */
  ck_assert_int_eq(parse_learner("ingest_endpoints = tcp://[fd00::2]:6000\n", &c, &e), 0);
  ck_assert_int_eq(lh_learner_ranks_check(&c, 1, &e), 0);
  /* Without the list the one-host rule stays. */
  ck_assert_int_eq(parse_learner("ingest_endpoint = tcp://127.0.0.1:5555\n", &c, &e), 0);
  ck_assert_uint_eq(c.n_ingest_endpoints, 0);
  ck_assert_int_eq(lh_learner_rank_ingest(&c, 3, out, &e), 0);
  ck_assert_str_eq(out, "tcp://127.0.0.1:5585");
  ck_assert_int_eq(lh_learner_ranks_check(&c, 4, &e), 0);
  ck_assert_int_eq(parse_learner("ingest_endpoint = tcp://127.0.0.1:65530\n", &c, &e), 0);
  ck_assert_int_eq(lh_learner_ranks_check(&c, 2, &e), LH_ELEARNER_CONFIG_VALUE);
}
END_TEST

START_TEST(test_endpoints_refused) {
  static const struct {
    const char *value, *why;
  } bad[] = {
      {"tcp://*:5555", "wildcard host"},
      {"tcp://0.0.0.0:5555", "wildcard host"},
      {"tcp://[::]:5555", "wildcard host"},
      {"ipc:///tmp/ing", "is not tcp://host:port"},
      {"tcp://10.0.0.1", "no port"},
      {"tcp://10.0.0.1:*", "numeric port"},
      {"tcp://10.0.0.1:0", "numeric port"},
      {"tcp://10.0.0.1:65536", "numeric port"},
      {"tcp://10.0.0.1:99999999999999999999", "numeric port"},
      {"tcp://:5555", "no host"},
      {"tcp://a;b:5555", "bad host"},
      {"tcp://10.0.0.1:5555,", "entry 2 is empty"},
      {"tcp://10.0.0.1:5555, tcp://10.0.0.1:5555", "twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lh_learner_config c;
    lh_errbuf e;
    char body[256];
    snprintf(body, sizeof body, "ingest_endpoints = %s\n", bad[i].value);
    ck_assert_int_eq(parse_learner(body, &c, &e), LH_ELEARNER_CONFIG_VALUE);
    /* The message names the file, the line, the section and the key. */
    ck_assert_msg(strstr(e.msg, "hosts.ini:3: [learner] ingest_endpoints") && strstr(e.msg, bad[i].why),
                  "%s: %s", bad[i].value, e.msg);
  }
  /* More entries than a job has ranks. */
  char body[LH_LEARNER_ENDPOINTS_BYTES] = "ingest_endpoints = ";
  for (int r = 0; r <= LH_LEARNER_MAX_RANKS; r++) {
    char one[32];
    snprintf(one, sizeof one, "%stcp://h%d:1", r ? "," : "", r);
    strncat(body, one, sizeof body - strlen(body) - 1);
  }
  lh_learner_config c;
  lh_errbuf e;
  lh_errbuf_clear(&e);
  char text[LH_LEARNER_ENDPOINTS_BYTES + 64];
  snprintf(text, sizeof text, "[learner]\n%s\n", body);
  ck_assert_int_lt(lh_learner_config_parse(text, "hosts.ini", &c, &e), 0);
}
END_TEST

/* ---- rank stores read as one --------------------------------------------- */

static char dir[128], db0[192], db1[192], db2[192];

/* Episode id (one segment of 16 tokens, then its end) into the store at path. */
static void put_episode(const char *path, uint64_t id, const char *actor) {
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s: %s", path, e.msg);
  sfx_seg seg;
  sfx_seg_plain(&seg, id, 0, 16, 1);
  snprintf(seg.actor, sizeof seg.actor, "%s", actor);
  int inserted = 0;
  ck_assert_msg(lh_store_put_segment(s, &seg.seg, &inserted, &e) == 0 && inserted == 1, "%s", e.msg);
  sfx_end end;
  sfx_end_init(&end, id, id % 2 ? "calc" : "needle", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  snprintf(end.actor, sizeof end.actor, "%s", actor);
  ck_assert_msg(lh_store_put_episode_end(s, &end.end, &inserted, &e) == 0 && inserted == 1, "%s", e.msg);
  lh_store_close(s);
}

static void put_step(const char *path, uint64_t step) {
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open(path, &s, &e), 0);
  lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = step;
  t.version = step + 1;
  t.busy_frac = 0.5;
  t.stale_share = 0.0;
  ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
  lh_store_close(s);
}

/* Rank 0: episodes 1, 2 and two train steps; rank 1: episode 3; rank 2:
 * episodes 4 and 5. */
static void three_ranks(const char *tag) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, tag), 0);
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  snprintf(db1, sizeof db1, "%s/replay.db.rank1", dir);
  snprintf(db2, sizeof db2, "%s/replay.db.rank2", dir);
  put_episode(db0, 1, "a0");
  put_episode(db0, 2, "a0");
  put_step(db0, 0);
  put_step(db0, 1);
  put_episode(db1, 3, "a1");
  put_episode(db2, 4, "a2");
  put_episode(db2, 5, "a2");
}

static int count_row(void *ctx, const lh_episode_row *row) {
  (void)row;
  (*(int *)ctx)++;
  return 0;
}

static int first_int(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) *(long *)ctx = atol(values[0]);
  return 0;
}

START_TEST(test_store_ranks_as_one) {
  three_ranks("hosts-view");
  const char *paths[] = {db0, db1, db2};
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_ranks(paths, 3, NULL, &s, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(lh_store_rank_count(s), 3);
  int rows = 0;
  ck_assert_int_eq(lh_store_episodes(s, NULL, count_row, &rows, NULL, &e), 0);
  ck_assert_int_eq(rows, 5);
  lh_episode_row row;
  ck_assert_int_eq(lh_store_episode_get(s, 5, &row, &e), 0);
  ck_assert_str_eq(row.actor, "a2");
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 3, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  lh_reward_term terms[4];
  size_t nterms = 0;
  ck_assert_int_eq(lh_store_episode_rewards(s, 4, terms, 4, &nterms, &e), 0);
  ck_assert_uint_eq(nterms, 2);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 5);
  ck_assert_uint_eq(st.segments, 5);
  ck_assert_uint_eq(st.train_steps, 2);  /* rank 0's */
  /* `replay sql`: the views under the authorizer, and its fences hold. */
  long n = 0;
  ck_assert_msg(lh_store_sql(s, "SELECT count(DISTINCT actor) FROM episodes", first_int, &n, NULL, &e) == 0, "%s",
                e.msg);
  ck_assert_int_eq(n, 3);
  ck_assert_msg(lh_store_sql(s, "SELECT count(*) FROM rank2.segments", first_int, &n, NULL, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(lh_store_sql(s, "DELETE FROM rank1.episodes", first_int, &n, NULL, &e), LH_ESTORE_SQL_WRITE);
  ck_assert_int_eq(lh_store_sql(s, "DROP VIEW temp.episodes", first_int, &n, NULL, &e), LH_ESTORE_SQL_WRITE);
  ck_assert_int_eq(lh_store_sql(s, "ATTACH 'x.db' AS x", first_int, &n, NULL, &e), LH_ESTORE_SQL_WRITE);
  uint64_t dups = 9;
  ck_assert_int_eq(lh_store_rank_duplicates(s, &dups, &e), 0);
  ck_assert_uint_eq(dups, 0);
  lh_store_close(s);
  /* The same id in two ranks' files shows twice, and is counted. */
  put_episode(db1, 5, "a2");
  ck_assert_int_eq(lh_store_open_ranks(paths, 3, NULL, &s, &e), 0);
  ck_assert_int_eq(lh_store_rank_duplicates(s, &dups, &e), 0);
  ck_assert_uint_eq(dups, 1);
  lh_store_close(s);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_store_ranks_refused) {
  three_ranks("hosts-refused");
  lh_store *s = NULL;
  lh_errbuf e;
  /* One file given twice. */
  const char *twice[] = {db0, db1, db1};
  ck_assert_int_eq(lh_store_open_ranks(twice, 3, NULL, &s, &e), LH_ESTORE_RANKS);
  ck_assert_ptr_null(s);
  /* Past SQLite's ATTACH limit: said before any file is opened. */
  size_t most = lh_store_max_ranks();
  ck_assert_uint_ge(most, 2);
  char names[130][200];
  const char *many[130];
  ck_assert_uint_lt(most, 130);
  for (size_t i = 0; i <= most; i++) {
    snprintf(names[i], sizeof names[i], "%s/none.rank%zu", dir, i);
    many[i] = names[i];
  }
  ck_assert_int_eq(lh_store_open_ranks(many, most + 1, NULL, &s, &e), LH_ESTORE_RANKS);
  ck_assert_ptr_nonnull(strstr(e.msg, "SQLITE_MAX_ATTACHED"));
  /* A rank file that is not a store is named. */
  char junk[220];
  snprintf(junk, sizeof junk, "%s/junk.db", dir);
  ck_assert_int_eq(lh_proc_write_file(junk, "not a database at all, not even close......\n"), 0);
  const char *with_junk[] = {db0, junk};
  ck_assert_int_eq(lh_store_open_ranks(with_junk, 2, NULL, &s, &e), LH_ESTORE_NOT_SQLITE);
  ck_assert_ptr_nonnull(strstr(e.msg, "junk.db"));
  lh_proc_rmdir(dir);
}
END_TEST

/* ---- the commands -------------------------------------------------------- */

static int run(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t cap, const char *fmt, ...) {
  char args[1024], cmd[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s", lh_proc_longhaul(), args);
  return lh_proc_run_capture(cmd, out, cap);
}

START_TEST(test_commands_read_every_rank) {
  ck_assert_ptr_nonnull(lh_proc_longhaul());
  three_ranks("hosts-cli");
  char out[1 << 14];
  /* Found next to --db. */
  ck_assert_int_eq(run(out, sizeof out, "replay stats --db %s", db0), 0);
  ck_assert_msg(strstr(out, "rank stores  3 read as one (episode ids in more than one: 0)"), "%s", out);
  ck_assert_msg(strstr(out, "episodes     5:"), "%s", out);
  ck_assert_msg(strstr(out, "train steps  2"), "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "replay episodes --db %s --limit 0", db0), 0);
  ck_assert_msg(strstr(out, "a1") && strstr(out, "a2"), "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "replay show --db %s 4", db0), 0);
  ck_assert_int_eq(run(out, sizeof out, "replay sql --db %s \"SELECT group_concat(id) FROM episodes\"", db0), 0);
  ck_assert_msg(strstr(out, "1,2,3,4,5"), "%s", out);
  /* Given: --rank-db, and --db repeated; then only those are read. */
  ck_assert_int_eq(run(out, sizeof out, "replay stats --db %s --rank-db %s", db0, db2), 0);
  ck_assert_msg(strstr(out, "rank stores  2 read as one") && strstr(out, "episodes     4:"), "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "replay sql --db %s --db %s \"SELECT count(*) FROM episodes\"", db1, db2), 0);
  ck_assert_msg(strstr(out, "\n3\n"), "%s", out);
  /* One file alone reads as before. */
  ck_assert_int_eq(run(out, sizeof out, "replay stats --db %s", db1), 0);
  ck_assert_msg(strstr(out, "rank stores  1 read as one\n"), "%s", out);
  /* The report reads them all. */
  char page[220];
  snprintf(page, sizeof page, "%s/report.html", dir);
  ck_assert_int_eq(run(out, sizeof out, "report --db %s --out %s", db0, page), 0);
  /* A gap in the rank numbers is an error, not a silent hole. */
  char moved[220];
  snprintf(moved, sizeof moved, "%s/elsewhere.db", dir);
  ck_assert_int_eq(rename(db1, moved), 0);
  ck_assert_int_eq(run(out, sizeof out, "replay stats --db %s", db0), 1);
  ck_assert_msg(strstr(out, "replay.db.rank2 exists but") && strstr(out, "replay.db.rank1 does not"), "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "report --db %s --out %s", db0, page), 1);
  lh_proc_rmdir(dir);
}
END_TEST

/* The count is checked where the ranks are known: the learner at start,
 * the launcher before it starts anything, the actor for its rank. */
START_TEST(test_count_checked_by_the_commands) {
  ck_assert_ptr_nonnull(lh_proc_longhaul());
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "hosts-count"), 0);
  char cfg[192], text[1024], out[1 << 14];
  snprintf(cfg, sizeof cfg, "%s/fleet.ini", dir);
  snprintf(text, sizeof text,
           "[fleet]\nlearners = 3\nactors = 1\nlog_dir = %s/logs\n"
           "[learner]\ningest_endpoints = tcp://127.0.0.1:5555, tcp://127.0.0.2:5555\ndb = %s/replay.db\n"
           "ckpt_dir = %s/ckpt\n",
           dir, dir, dir);
  ck_assert_int_eq(lh_proc_write_file(cfg, text), 0);
  ck_assert_int_eq(run(out, sizeof out, "launch %s --status off", cfg), 2);
  ck_assert_msg(strstr(out, "[fleet] learners = 3: [learner] ingest_endpoints has 2 entries but the job has 3 ranks"),
                "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "learner --config %s --steps 1", cfg), 2);
  ck_assert_msg(strstr(out, "has 2 entries but the job has 1 rank"), "%s", out);
  ck_assert_int_eq(run(out, sizeof out, "actor --config %s --name a --learner-rank 2 --episodes 1", cfg), 2);
  ck_assert_msg(strstr(out, "--learner-rank 2: [learner] ingest_endpoints has 2 entries: none for rank 2"), "%s",
                out);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hosts");
  TCase *tc = tcase_create("hosts");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_endpoints_config);
  tcase_add_test(tc, test_endpoints_refused);
  tcase_add_test(tc, test_store_ranks_as_one);
  tcase_add_test(tc, test_store_ranks_refused);
  tcase_add_test(tc, test_commands_read_every_rank);
  tcase_add_test(tc, test_count_checked_by_the_commands);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

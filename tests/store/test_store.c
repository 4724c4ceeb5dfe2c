/* Tests of the replay store (test_store, one suite): the shared fixture
 * (a fresh database file per test, helpers to open it, write and compare
 * segments) and main; the tests sit in one file per concern,
 * test_store_<concern>.c (test_store.h).
 * Usage: test_store PATH_OF_store_writer */
#define _POSIX_C_SOURCE 200809L
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_util.h"
#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

const char *writer_bin;
char db[256];
lh_errbuf e;

void setup(void) {
  snprintf(db, sizeof db, "/tmp/lh-test-store-%d.db", (int)getpid());
  lh_proc_rm_db(db);
  memset(&e, 0, sizeof e);
  lh_log_set_level(LH_LOG_WARN);
}

void teardown(void) { lh_proc_rm_db(db); }

lh_store *open_rw(void) {
  lh_store *s = NULL;
  int rc = lh_store_open(db, &s, &e);
  ck_assert_msg(rc == 0, "open: %s", e.msg);
  return s;
}

lh_store *open_ro(void) {
  lh_store *s = NULL;
  int rc = lh_store_open_readonly(db, &s, &e);
  ck_assert_msg(rc == 0, "open read-only: %s", e.msg);
  return s;
}

/* A segment with text, a tool call, an observation and an image. */
void rich_segment(sfx_seg *f, uint64_t ep, uint32_t seq, uint32_t version) {
  sfx_seg_init(f, ep, seq, "a0", "calc");
  if (seq == 0) sfx_seg_token(f, 256, 0, 0);
  sfx_seg_text(f, "What is 2+3? ", 0, 0);
  sfx_seg_token(f, 258, 1, version);
  sfx_seg_text(f, "calc(2+3)", 1, version);
  sfx_seg_token(f, 259, 1, version);
  sfx_seg_token(f, 260, 0, 0);
  sfx_seg_text(f, "5", 0, 0);
  sfx_seg_image(f);
  sfx_seg_token(f, 261, 0, 0);
  sfx_seg_text(f, "5", 1, version + 1);
  sfx_seg_token(f, 257, 1, version + 1);
}

void put_seg(lh_store *s, const Longhaul__Segment *seg, int want_inserted) {
  int ins = -1;
  int rc = lh_store_put_segment(s, seg, &ins, &e);
  ck_assert_msg(rc == 0, "put_segment: %s", e.msg);
  ck_assert_int_eq(ins, want_inserted);
}

void put_end(lh_store *s, const Longhaul__EpisodeEnd *end, int want_inserted) {
  int ins = -1;
  int rc = lh_store_put_episode_end(s, end, &ins, &e);
  ck_assert_msg(rc == 0, "put_episode_end: %s", e.msg);
  ck_assert_int_eq(ins, want_inserted);
}

void same_segment(const Longhaul__Segment *a, const Longhaul__Segment *b) {
  ck_assert_uint_eq(a->episode_id, b->episode_id);
  ck_assert_uint_eq(a->seq, b->seq);
  ck_assert_str_eq(a->env, b->env);
  ck_assert_uint_eq(a->n_tokens, b->n_tokens);
  ck_assert_int_eq(memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens), 0);
  ck_assert_int_eq(memcmp(a->loss_mask.data, b->loss_mask.data, a->n_tokens), 0);
  ck_assert_int_eq(memcmp(a->behavior_logp, b->behavior_logp, a->n_tokens * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a->policy_version, b->policy_version, a->n_tokens * 4), 0);
  ck_assert_uint_eq(a->n_routed_experts, b->n_routed_experts);
  ck_assert_int_eq(memcmp(a->routed_experts, b->routed_experts, a->n_routed_experts * 4), 0);
  ck_assert_uint_eq(a->n_images, b->n_images);
  for (size_t i = 0; i < a->n_images; i++) {
    ck_assert_uint_eq(a->images[i]->offset, b->images[i]->offset);
    ck_assert_uint_eq(a->images[i]->pixels.len, b->images[i]->pixels.len);
    ck_assert_int_eq(memcmp(a->images[i]->pixels.data, b->images[i]->pixels.data,
                            a->images[i]->pixels.len), 0);
  }
}

/* "LH_STORE_SCHEMA_VERSION" and "1,2,...,LH_STORE_SCHEMA_VERSION" as the
 * migrations table and PRAGMA user_version read back. */
const char *schema_version_text(void) {
  static char text[16];
  snprintf(text, sizeof text, "%d", LH_STORE_SCHEMA_VERSION);
  return text;
}
const char *all_versions(void) {
  static char text[256];
  size_t at = 0;
  for (int i = 1; i <= LH_STORE_SCHEMA_VERSION; i++)
    at += (size_t)snprintf(text + at, sizeof text - at, i > 1 ? ",%d" : "%d", i);
  return text;
}

int first_value(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  ck_assert_int_ge(ncols, 1);
  snprintf(ctx, 64, "%s", values[0] ? values[0] : "NULL");
  return 0;
}

void raw_exec(const char *path, const char *sql) {
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(path, &d), SQLITE_OK);
  char *msg = NULL;
  int rc = sqlite3_exec(d, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_close(d);
}

int step_row(void *ctx, const lh_store_train_step *t) {
  lh_store_train_step *out = ctx;
  *out = *t;
  return 1;  /* the first only */
}

int expert_row(void *ctx, const lh_store_train_step *t) {
  expert_rows *r = ctx;
  if (r->n < 4) {
    r->step[r->n] = t->step, r->layers[r->n] = t->layers, r->experts[r->n] = t->experts;
    r->has_load[r->n] = t->expert_load != NULL;
    for (size_t i = 0; t->expert_load && i < (size_t)t->layers * t->experts && i < 16; i++)
      r->load[r->n][i] = t->expert_load[i];
  }
  r->n++;
  return 0;
}

/* One case per concern, named after its file (test_store_<name>.c):
 * CK_RUN_CASE=<name> runs one, as scripts/valgrind-tests.sh does to run
 * the slow ones side by side. */
static const struct {
  const char *name;
  void (*add)(TCase *);
} concerns[] = {
    {"segments", lh_test_store_segments}, {"queries", lh_test_store_queries},
    {"train", lh_test_store_train},       {"readonly", lh_test_store_readonly},
    {"files", lh_test_store_files},       {"heartbeats", lh_test_store_heartbeats},
    {"writers", lh_test_store_writers},   {"retention", lh_test_store_retention},
    {"retire", lh_test_store_retire},     {"schema", lh_test_store_schema},
    {"wal", lh_test_store_wal},
};

static Suite *store_suite(void) {
  Suite *su = suite_create("store");
  for (size_t i = 0; i < sizeof concerns / sizeof concerns[0]; i++) {
    TCase *tc = tcase_create(concerns[i].name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    concerns[i].add(tc);
    suite_add_tcase(su, tc);
  }
  return su;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_store PATH_OF_store_writer\n");
    return 2;
  }
  writer_bin = argv[1];
  return lh_test_run(store_suite(), CK_FORK);
}

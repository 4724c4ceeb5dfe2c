/* test_store: the write-ahead log of a writing connection (store_wal.c).
 * Truncated under it (to nothing, or cut in the middle), deleted or
 * replaced, the log is found lost at the next commit or check, that
 * commit and every later write are refused naming the -wal, and the store
 * reopens as a whole database holding everything up to its last
 * checkpoint; a reset by another program's TRUNCATE checkpoint is no loss. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc_util.h"
#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

static char wal[300];

/* A writer's store that checkpoints after every commit (pages = 1) or
 * only at its open (pages = 0: neither by pages nor by time). */
static lh_store *open_writer(uint32_t checkpoint_pages) {
  snprintf(wal, sizeof wal, "%s-wal", db);
  lh_store_options o;
  lh_store_options_default(&o);
  o.writer = 1;
  o.checkpoint_ms = 0;
  o.checkpoint_pages = checkpoint_pages;
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  return s;
}

/* Episodes [first, first + n) of one segment each with their ends, in one
 * batch; the commit's code. */
static int put_batch(lh_store *s, uint64_t first, uint64_t n) {
  int rc = lh_store_begin(s, &e);
  if (rc < 0) return rc;
  static sfx_seg g;
  for (uint64_t id = first; id < first + n; id++) {
    sfx_seg_plain(&g, id, 0, 64, 1);
    put_seg(s, &g.seg, 1);
    sfx_end end;
    sfx_end_init(&end, id, id % 2 ? "calc" : "needle", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
    put_end(s, &end.end, 1);
  }
  return lh_store_commit(s, &e);
}

/* The store reopened read-only, whole, and its episode count. */
static uint64_t episodes_after(void) {
  uint64_t problems = 1;
  ck_assert_msg(lh_store_check_file(db, 0, 0, NULL, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);
  lh_store *s = open_ro();
  lh_store_stats st;
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  return st.episodes;
}

static void assert_lost(int rc, const char *what) {
  ck_assert_msg(rc == LH_ESTORE_WAL_LOST, "%s: %s %s", what, lh_err_name(rc), e.msg);
  ck_assert_msg(strstr(e.msg, wal) != NULL, "%s", e.msg);
}

/* Truncated to nothing between two commits: everything up to the last
 * checkpoint stays, and what came after it is lost: the commit after the
 * truncation is refused, and so is every later write, naming the -wal.
 * The store reopens whole (before, a store never checkpointed read as
 * "not a database", and the writer went on past the hole). Batch 1 is in
 * the store's file (the reopen's checkpoint), batch 2 only in the log. */
START_TEST(test_wal_truncated) {
  lh_store *s = open_writer(0);
  ck_assert_msg(put_batch(s, 1, 20) == 0, "%s", e.msg);
  lh_store_close(s);
  s = open_writer(0);
  ck_assert_msg(put_batch(s, 100, 20) == 0, "%s", e.msg);
  ck_assert_int_eq(truncate(wal, 0), 0);
  assert_lost(put_batch(s, 200, 20), "the commit after the truncation");
  ck_assert(strstr(e.msg, "truncated") != NULL);
  ck_assert(lh_store_wal_lost(s));
  assert_lost(lh_store_begin(s, &e), "a batch after it");
  assert_lost(lh_store_wal_check(s, &e), "a check after it");
  int ins;
  static sfx_seg g;
  sfx_seg_plain(&g, 300, 0, 16, 1);
  assert_lost(lh_store_put_segment(s, &g.seg, &ins, &e), "a put after it");
  lh_store_close(s);
  uint64_t kept = episodes_after();
  printf("log truncated to nothing: %llu of 40 acked episodes kept (those of the last checkpoint), the store "
         "whole\n", (unsigned long long)kept);
  ck_assert_uint_eq(kept, 20);
  /* its writer's mark stays: the next writer's open checks the file */
  s = open_writer(1);
  ck_assert(lh_store_open_checked(s));
  ck_assert_msg(put_batch(s, 500, 2) == 0, "%s", e.msg);
  lh_store_close(s);
}
END_TEST

/* Truncated after a checkpoint that copied the whole log: nothing was
 * lost, and SQLite starts the log over at the next commit (a new header),
 * which goes on. */
START_TEST(test_wal_truncated_after_checkpoint) {
  lh_store *s = open_writer(1);
  ck_assert_msg(put_batch(s, 1, 20) == 0, "%s", e.msg);
  ck_assert_int_eq(truncate(wal, 0), 0);
  ck_assert_msg(put_batch(s, 100, 20) == 0, "%s", e.msg);
  ck_assert(!lh_store_wal_lost(s));
  lh_store_close(s);
  ck_assert_uint_eq(episodes_after(), 40);
}
END_TEST

/* Truncated before another connection reads what the log held: SQLite's
 * read of a frame ends short, and the error names the log (before: a disk
 * I/O error, and a learner stopped on it saying nothing of the -wal). */
START_TEST(test_wal_truncated_read) {
  lh_store *trainer = open_writer(0);
  lh_store *service = open_writer(0);
  ck_assert_msg(put_batch(service, 1, 20) == 0, "%s", e.msg);
  ck_assert_int_eq(truncate(wal, 0), 0);
  lh_episode_row r;
  assert_lost(lh_store_episode_get(trainer, 7, &r, &e), "a read of the other connection");
  lh_store_close(service);
  lh_store_close(trainer);
  ck_assert_uint_eq(episodes_after(), 0);
}
END_TEST

/* Truncated while the writer is idle: its check finds the log empty, a
 * one-row commit tells a truncation from a reset, and says lost. */
START_TEST(test_wal_truncated_idle) {
  lh_store *s = open_writer(0);
  ck_assert_msg(put_batch(s, 1, 5) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_wal_check(s, &e), 0);
  ck_assert_int_eq(truncate(wal, 0), 0);
  assert_lost(lh_store_wal_check(s, &e), "the check after the truncation");
  lh_store_close(s);
  ck_assert_uint_eq(episodes_after(), 0);
}
END_TEST

/* Cut in the middle (its header kept), then written on: the commit finds
 * the frames it knew of gone; the store reopens whole with the frames
 * before the cut that SQLite's recovery finds intact, and the checkpoint. */
START_TEST(test_wal_cut_short) {
  lh_store *s = open_writer(0);
  ck_assert_msg(put_batch(s, 1, 10) == 0, "%s", e.msg);
  ck_assert_msg(put_batch(s, 11, 10) == 0, "%s", e.msg);
  struct stat st;
  ck_assert_int_eq(stat(wal, &st), 0);
  ck_assert_int_eq(truncate(wal, st.st_size / 2), 0);
  assert_lost(put_batch(s, 21, 10), "the commit after the cut");
  ck_assert(strstr(e.msg, "cut short") != NULL);
  lh_store_close(s);
  uint64_t kept = episodes_after();
  printf("log cut to half its size: %llu of 20 acked episodes kept (the frames before the cut), the store whole\n",
         (unsigned long long)kept);
  ck_assert_uint_le(kept, 20);
}
END_TEST

/* Deleted, or another file put in its place: lost at once. */
START_TEST(test_wal_replaced) {
  for (int replace = 0; replace <= 1; replace++) {
    lh_store *s = open_writer(0);
    ck_assert_msg(put_batch(s, 1, 5) == 0, "%s", e.msg);
    if (replace) {
      char other[320];
      snprintf(other, sizeof other, "%s.other", wal);
      FILE *f = fopen(other, "wb");
      ck_assert(f != NULL);
      fputs("not a log", f);
      fclose(f);
      ck_assert_int_eq(rename(other, wal), 0);
    } else {
      ck_assert_int_eq(unlink(wal), 0);
    }
    assert_lost(lh_store_wal_check(s, &e), replace ? "replaced" : "deleted");
    ck_assert(strstr(e.msg, replace ? "replaced" : "deleted") != NULL);
    lh_store_close(s);
    teardown();
  }
}
END_TEST

/* Another program's checkpoint in TRUNCATE mode empties the log with
 * nothing lost: the check's commit starts a new log, and writes go on. */
START_TEST(test_wal_reset_by_checkpoint) {
  lh_store *s = open_writer(0);
  ck_assert_msg(put_batch(s, 1, 5) == 0, "%s", e.msg);
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(db, &d), SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(d, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(d);
  struct stat st;
  ck_assert_int_eq(stat(wal, &st), 0);
  ck_assert_int_eq(st.st_size, 0);
  ck_assert_msg(lh_store_wal_check(s, &e) == 0, "%s", e.msg);
  ck_assert_msg(put_batch(s, 6, 5) == 0, "%s", e.msg);
  ck_assert(!lh_store_wal_lost(s));
  lh_store_close(s);
  ck_assert_uint_eq(episodes_after(), 10);
}
END_TEST

/* The file alone (a copy without its -wal) holds every commit up to the
 * checkpoint: after a commit with a checkpoint due (pages = 1), the
 * store's file, copied while the writer is open, reads as a whole store. */
START_TEST(test_file_alone_after_checkpoint) {
  lh_store *s = open_writer(1);
  ck_assert_msg(put_batch(s, 1, 30) == 0, "%s", e.msg);
  char copy[320], cmd[700];
  snprintf(copy, sizeof copy, "%s.copy", db);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", db, copy);
  ck_assert_int_eq(system(cmd), 0);
  lh_store_close(s);
  lh_store *c = NULL;
  ck_assert_msg(lh_store_open_readonly(copy, &c, &e) == 0, "%s", e.msg);
  lh_store_stats st;
  ck_assert_msg(lh_store_stats_get(c, &st, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(st.episodes, 30);
  lh_store_close(c);
  lh_proc_rm_db(copy);
}
END_TEST

void lh_test_store_wal(TCase *tc) {
  tcase_add_test(tc, test_wal_truncated);
  tcase_add_test(tc, test_wal_truncated_after_checkpoint);
  tcase_add_test(tc, test_wal_truncated_read);
  tcase_add_test(tc, test_wal_truncated_idle);
  tcase_add_test(tc, test_wal_cut_short);
  tcase_add_test(tc, test_wal_replaced);
  tcase_add_test(tc, test_wal_reset_by_checkpoint);
  tcase_add_test(tc, test_file_alone_after_checkpoint);
}

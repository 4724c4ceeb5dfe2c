/* test_store: two writer processes and a reader on one file, a writer killed
 * with SIGKILL mid-transaction, the busy limit, and a store at its cap. */
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

/* fork/exec of store_writer with the given arguments. */
static pid_t spawn(char *const args[], int *out_fd) {
  int fds[2];
  if (out_fd) ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (out_fd) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    execv(writer_bin, args);
    perror("execv store_writer");
    _exit(127);
  }
  if (out_fd) {
    close(fds[1]);
    *out_fd = fds[0];
  }
  return pid;
}

static int wait_exit(pid_t pid) {
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_two_writers_one_reader) {
  /* The writers create the file together; the reader waits for it. */
  char *w1[] = {"store_writer", "write", db, "1", "400", "4", "7", NULL};
  char *w2[] = {"store_writer", "write", db, "1001", "400", "4", "3", NULL};
  char *rd[] = {"store_writer", "read", db, "800", NULL};
  pid_t p1 = spawn(w1, NULL), p2 = spawn(w2, NULL), p3 = spawn(rd, NULL);
  ck_assert_int_eq(wait_exit(p1), 0);
  ck_assert_int_eq(wait_exit(p2), 0);
  ck_assert_int_eq(wait_exit(p3), 0);
  lh_store *s = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 800);
  ck_assert_uint_eq(st.segments, 3200);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 800);
  ck_assert_uint_eq(st.reward_terms, 1600);
  ck_assert_uint_eq(st.incomplete, 0);
  lh_segment_report rep;
  for (uint64_t id = 1; id <= 400; id++) {
    ck_assert_int_eq(lh_store_episode_segments(s, id, NULL, NULL, &rep, &e), 0);
    ck_assert(rep.complete);
    ck_assert_int_eq(lh_store_episode_segments(s, 1000 + id, NULL, NULL, &rep, &e), 0);
    ck_assert(rep.complete);
  }
  lh_store_close(s);
}
END_TEST

START_TEST(test_killed_writer) {
  char *args[] = {"store_writer", "hang", db, "1", "30", NULL};
  int fd;
  pid_t pid = spawn(args, &fd);
  char buf[64] = {0};
  size_t got = 0;
  while (got < sizeof buf - 1 && !strchr(buf, '\n')) {
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
  ck_assert_str_eq(buf, "in-transaction\n");
  close(fd);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_int_eq(wait_exit(pid), 128 + SIGKILL);
  lh_store *s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA integrity_check", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "ok");
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 30);  /* every committed one, none of the open batch */
  ck_assert_uint_eq(st.segments, 60);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 30);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 31, &r, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
  /* A writer picks up where it stopped. */
  s = open_rw();
  static sfx_seg g;
  sfx_seg_plain(&g, 31, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
}
END_TEST

/* A writer that holds the write lock past the wait limit: the other gets
 * LH_ESTORE_BUSY (not SQLITE_BUSY), and succeeds once the lock is free. */
START_TEST(test_busy_limit) {
  char *args[] = {"store_writer", "hang", db, "1", "2", NULL};
  int fd;
  pid_t pid = spawn(args, &fd);
  char buf[64] = {0};
  size_t got = 0;
  while (got < sizeof buf - 1 && !strchr(buf, '\n')) {
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
  close(fd);
  lh_store_options o;
  lh_store_options_default(&o);
  o.busy_timeout_ms = 20;
  o.max_wait_ms = 200;
  lh_store *s = NULL;
  ck_assert_int_eq(lh_store_open_with(db, &o, &s, &e), 0);
  static sfx_seg g;
  sfx_seg_plain(&g, 500, 0, 8, 1);
  int ins;
  ck_assert_int_eq(lh_store_put_segment(s, &g.seg, &ins, &e), LH_ESTORE_BUSY);
  ck_assert(strstr(e.msg, "wait limit") != NULL);
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_BUSY);
  ck_assert(!lh_store_in_batch(s));
  /* Readers are not blocked by the writer. */
  lh_store *r = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(r, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 2);
  lh_store_close(r);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  wait_exit(pid);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
}
END_TEST

/* A store at its cap refuses new writes with LH_ESTORE_FULL until
 * retention frees pages. */
START_TEST(test_full) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.max_bytes = 256 * 1024;
  lh_store *s = NULL;
  ck_assert_int_eq(lh_store_open_with(db, &o, &s, &e), 0);
  static sfx_seg g;
  int ins, rc = 0;
  uint32_t stored = 0;
  for (uint32_t id = 1; id <= 1000 && rc == 0; id++) {
    sfx_seg_plain(&g, id, 0, 512, id);
    rc = lh_store_put_segment(s, &g.seg, &ins, &e);
    if (rc == 0) stored++;
  }
  ck_assert_int_eq(rc, LH_ESTORE_FULL);
  ck_assert(strstr(e.msg, "cap") != NULL);
  ck_assert_uint_gt(stored, 10);
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_FULL);
  ck_assert(!lh_store_in_batch(s));
  uint64_t segs;
  ck_assert_int_eq(lh_store_retain_versions(s, stored, 2, &segs, NULL, &e), 0);
  ck_assert_uint_eq(segs, stored - 2);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
  s = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, stored + 1);
  lh_store_close(s);
}
END_TEST

/* A second connection in one process leaves the first one's locks: the
 * process holds its shared lock on the store's file while any connection
 * is open, so another process's close (an eval's, beside a learner) does
 * not take it for the last one, checkpoint the log and delete the -wal
 * under the writer. The open's look at the file's first bytes closed a
 * descriptor of the file, and a close of any descriptor drops every POSIX
 * lock the process holds on it: the learner's second connection's open
 * did, and its log was deleted by the next eval to close. */
START_TEST(test_second_connection_keeps_locks) {
  char wal[300];
  snprintf(wal, sizeof wal, "%s-wal", db);
  lh_store_options o;
  lh_store_options_default(&o);
  o.writer = 1;
  lh_store *writer = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &writer, &e) == 0, "%s", e.msg);
  lh_store *second = open_rw(), *reader = open_ro();
  lh_store_close(reader);
  char *other[] = {"store_writer", "write", db, "1", "10", "2", "5", NULL};
  ck_assert_int_eq(wait_exit(spawn(other, NULL)), 0);
  ck_assert_msg(access(wal, F_OK) == 0, "%s was deleted by another process's close", wal);
  ck_assert_msg(lh_store_begin(writer, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_store_exec(writer, "INSERT OR REPLACE INTO meta(key, value) VALUES ('t', '1')", &e) >= 0, "%s",
                e.msg);
  ck_assert_msg(lh_store_commit(writer, &e) == 0, "%s %s", lh_err_name(e.code), e.msg);
  ck_assert_msg(lh_store_wal_check(second, &e) == 0, "%s", e.msg);
  lh_store_close(second);
  lh_store_close(writer);
  lh_store *s = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 10);
  lh_store_close(s);
}
END_TEST

void lh_test_store_writers(TCase *tc) {
  tcase_add_test(tc, test_two_writers_one_reader);
  tcase_add_test(tc, test_killed_writer);
  tcase_add_test(tc, test_busy_limit);
  tcase_add_test(tc, test_full);
  tcase_add_test(tc, test_second_connection_keeps_locks);
}

/* Helper process of test_store: a real writer or reader on a store file,
 * run by fork/exec so that several processes share one file.
 *   store_writer write DB FIRST COUNT SEGS BATCH   episodes FIRST.. with SEGS
 *       segments and an end each, BATCH puts per transaction
 *   store_writer hang DB FIRST COMMITTED           commits COMMITTED episodes,
 *       then opens a batch, writes into it, says "in-transaction" and waits
 *       (to be killed with SIGKILL)
 *   store_writer read DB EPISODES                  reads until it sees
 *       EPISODES complete episodes (counts never going down)
 * Exit 0 when every call succeeded; 1 with the error on stderr otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/store_fixture.h"

static int fail(const char *what, const lh_errbuf *e) {
  fprintf(stderr, "store_writer: %s: %s (%s)\n", what, e->msg, lh_err_name(e->code));
  return 1;
}

/* Puts one episode (segs segments of 32 tokens, then its end) into the
 * open batch or, with batch_size, committing every batch_size puts. */
static int put_episode(lh_store *s, uint64_t id, int segs, int batch, int *pending, lh_errbuf *e) {
  static sfx_seg f;
  for (int q = 0; q <= segs; q++) {
    if (batch && *pending == 0 && lh_store_begin(s, e) < 0) return -1;
    int rc, ins;
    if (q < segs) {
      sfx_seg_plain(&f, id, (uint32_t)q, 32, (uint32_t)(id % 5));
      rc = lh_store_put_segment(s, &f.seg, &ins, e);
    } else {
      sfx_end end;
      sfx_end_init(&end, id, id % 2 ? "calc" : "needle", (uint32_t)segs,
                   LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
      rc = lh_store_put_episode_end(s, &end.end, &ins, e);
    }
    if (rc < 0) return rc;
    if (batch && ++*pending == batch) {
      *pending = 0;
      if (lh_store_commit(s, e) < 0) return -1;
    }
  }
  return 0;
}

static int do_write(const char *db, uint64_t first, uint64_t count, int segs, int batch) {
  lh_errbuf e = {0};
  lh_store *s;
  if (lh_store_open(db, &s, &e) < 0) return fail("open", &e);
  int pending = 0;
  for (uint64_t id = first; id < first + count; id++)
    if (put_episode(s, id, segs, batch, &pending, &e) < 0) return fail("write", &e);
  if (pending && lh_store_commit(s, &e) < 0) return fail("commit", &e);
  lh_store_close(s);
  return 0;
}

static int do_hang(const char *db, uint64_t first, uint64_t committed) {
  lh_errbuf e = {0};
  lh_store *s;
  if (lh_store_open(db, &s, &e) < 0) return fail("open", &e);
  int pending = 0;
  for (uint64_t id = first; id < first + committed; id++)
    if (put_episode(s, id, 2, 3, &pending, &e) < 0) return fail("write", &e);
  if (lh_store_begin(s, &e) < 0) return fail("begin", &e);
  for (uint64_t id = first + committed; id < first + committed + 20; id++)
    if (put_episode(s, id, 3, 0, &pending, &e) < 0) return fail("write", &e);
  /* More than SQLite's page cache holds (2 MiB), so that uncommitted pages
   * spill into the WAL file before the kill. */
  static sfx_seg big;
  for (uint32_t k = 0; k < 400; k++) {
    sfx_seg_plain(&big, first + committed + 20 + k / 4, k % 4, 1024, 1);
    int ins;
    if (lh_store_put_segment(s, &big.seg, &ins, &e) < 0) return fail("write", &e);
  }
  printf("in-transaction\n");
  fflush(stdout);
  for (;;) pause();
}

typedef struct {
  uint64_t seen;
} read_ctx;

static int count_row(void *ctx, const lh_episode_row *r) {
  (void)r;
  ((read_ctx *)ctx)->seen++;
  return 0;
}

static int do_read(const char *db, uint64_t want) {
  uint64_t last = 0;
  int64_t start = lh_now_ns();
  for (long iter = 0;; iter++) {
    lh_errbuf e = {0};
    lh_store *s;
    int orc = lh_store_open_readonly(db, &s, &e);
    /* Until a writer has created the store, there is no store to read. */
    if ((orc == LH_ESTORE_NO_FILE || orc == LH_ESTORE_NOT_STORE) && last == 0 &&
        lh_now_ns() - start < 10000000000LL) {
      struct timespec wait_ts = {0, 2000000L};
      nanosleep(&wait_ts, NULL);
      continue;
    }
    if (orc < 0) return fail("open read-only", &e);
    lh_store_stats st;
    if (lh_store_stats_get(s, &st, &e) < 0) return fail("stats", &e);
    lh_episode_filter f;
    lh_episode_filter_init(&f);
    f.status_mask = 1u << LH_EPISODE_COMPLETE;
    read_ctx c = {0};
    if (lh_store_episodes(s, &f, count_row, &c, NULL, &e) < 0) return fail("episodes", &e);
    if (st.episodes > 0) {
      lh_segment_report rep;
      if (lh_store_episode_segments(s, 1, NULL, NULL, &rep, &e) < 0 && e.code != LH_ESTORE_NO_EPISODE)
        return fail("segments", &e);
    }
    lh_store_close(s);
    if (c.seen < last) {
      fprintf(stderr, "store_writer: complete episodes went from %llu down to %llu\n",
              (unsigned long long)last, (unsigned long long)c.seen);
      return 1;
    }
    last = c.seen;
    if (c.seen >= want) {
      printf("reader: %ld passes\n", iter + 1);
      return 0;
    }
    if (lh_now_ns() - start > 120000000000LL) {
      fprintf(stderr, "store_writer: reader saw %llu of %llu episodes after 120 s\n",
              (unsigned long long)c.seen, (unsigned long long)want);
      return 1;
    }
    struct timespec pause_ts = {0, 2000000L};
    nanosleep(&pause_ts, NULL);
  }
}

int main(int argc, char **argv) {
  lh_log_set_level(LH_LOG_WARN);
  if (argc == 7 && strcmp(argv[1], "write") == 0)
    return do_write(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
                    atoi(argv[5]), atoi(argv[6]));
  if (argc == 5 && strcmp(argv[1], "hang") == 0)
    return do_hang(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
  if (argc == 4 && strcmp(argv[1], "read") == 0) return do_read(argv[2], strtoull(argv[3], NULL, 10));
  fprintf(stderr, "usage: store_writer write DB FIRST COUNT SEGS BATCH | hang DB FIRST N | read DB N\n");
  return 2;
}

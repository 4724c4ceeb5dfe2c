/* What the files of the test_store suite share (test_store.c): the
 * database path of the running test (a fresh file per test: setup and
 * teardown), its error buffer, the store_writer helper's path, helpers to
 * open the store and to write and compare segments, and each concern's
 * function that adds its tests to the suite's one TCase. */
#ifndef LH_TESTS_TEST_STORE_H
#define LH_TESTS_TEST_STORE_H

#include <check.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"

extern const char *writer_bin;  /* argv[1]: the store_writer program */
extern char db[256];
extern lh_errbuf e;

void setup(void);
void teardown(void);
lh_store *open_rw(void);
lh_store *open_ro(void);
/* A segment with text, a tool call, an observation and an image. */
void rich_segment(sfx_seg *f, uint64_t ep, uint32_t seq, uint32_t version);
void put_seg(lh_store *s, const Longhaul__Segment *seg, int want_inserted);
void put_end(lh_store *s, const Longhaul__EpisodeEnd *end, int want_inserted);
void same_segment(const Longhaul__Segment *a, const Longhaul__Segment *b);
/* "LH_STORE_SCHEMA_VERSION" and "1,2,...,LH_STORE_SCHEMA_VERSION". */
const char *schema_version_text(void);
const char *all_versions(void);
/* lh_store_sql callback: the first column of a row into ctx (64 bytes). */
int first_value(void *ctx, int ncols, const char *const *names, const char *const *values);
/* sql on the file at path through SQLite itself, past the store's API. */
void raw_exec(const char *path, const char *sql);
/* lh_store_train_steps callbacks: the first step into ctx (an
 * lh_store_train_step); up to 4 steps with their expert loads into ctx. */
int step_row(void *ctx, const lh_store_train_step *t);
typedef struct {
  int n;
  uint64_t step[4];
  uint32_t layers[4], experts[4];
  double load[4][16];
  int has_load[4];
} expert_rows;
int expert_row(void *ctx, const lh_store_train_step *t);

void lh_test_store_segments(TCase *tc);
void lh_test_store_queries(TCase *tc);
void lh_test_store_train(TCase *tc);
void lh_test_store_readonly(TCase *tc);
void lh_test_store_files(TCase *tc);
void lh_test_store_heartbeats(TCase *tc);
void lh_test_store_writers(TCase *tc);
void lh_test_store_retention(TCase *tc);
void lh_test_store_retire(TCase *tc);
void lh_test_store_schema(TCase *tc);
void lh_test_store_wal(TCase *tc);

#endif

/* Tests of learner/state.c: exact round trip, atomic replacement, and each
 * way a state file can be missing or corrupt. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "learner/internal.h"

static char dir[64];

static void make_dir(void) {
  strcpy(dir, "/tmp/lh_learner_state_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, LH_LEARNER_STATE_FILE);
  unlink(p);
  rmdir(dir);
}

static lh_learner_state sample_state(void) {
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  st.step = 1234567890123ull;
  st.version = UINT64_MAX - 1;
  st.ingest_position = 42;
  st.skipped_steps = 3;
  st.stage_index = 2;
  lh_learner_adv_baseline_init(&st.baseline, 0.9);
  st.baseline.mean = 0.1 + 0.2;  /* not exactly representable: must survive bit for bit */
  st.baseline.batches = 17;
  st.admission.admitted = 100, st.admission.dropped_stale = 5, st.admission.dropped_status = 2;
  st.admission.admitted_future = 1, st.admission.max_admitted_staleness = 4;
  for (int i = 0; i < 32; i++) st.rng[i] = (uint8_t)(i * 7 + 1);
  return st;
}

START_TEST(test_round_trip_is_exact) {
  make_dir();
  lh_learner_state st = sample_state(), back;
  lh_errbuf e;
  ck_assert_msg(lh_learner_state_save(dir, &st, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_learner_state_load(dir, &back, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(back.step, st.step);
  ck_assert_uint_eq(back.version, st.version);
  ck_assert_uint_eq(back.ingest_position, st.ingest_position);
  ck_assert_uint_eq(back.skipped_steps, st.skipped_steps);
  ck_assert_uint_eq(back.stage_index, st.stage_index);
  ck_assert_int_eq(memcmp(&back.baseline.mean, &st.baseline.mean, sizeof(double)), 0);
  ck_assert(back.baseline.decay == st.baseline.decay);
  ck_assert_uint_eq(back.baseline.batches, 17);
  ck_assert_uint_eq(back.admission.admitted, 100);
  ck_assert_uint_eq(back.admission.dropped_stale, 5);
  ck_assert_uint_eq(back.admission.dropped_status, 2);
  ck_assert_uint_eq(back.admission.admitted_future, 1);
  ck_assert_uint_eq(back.admission.max_admitted_staleness, 4);
  ck_assert_int_eq(memcmp(back.rng, st.rng, 32), 0);
  /* Saving again replaces the file and leaves no temporary behind. */
  st.step++;
  ck_assert_int_eq(lh_learner_state_save(dir, &st, &e), 0);
  ck_assert_int_eq(lh_learner_state_load(dir, &back, &e), 0);
  ck_assert_uint_eq(back.step, 1234567890124ull);
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, LH_LEARNER_STATE_FILE);
  ck_assert_int_ne(access(tmp, F_OK), 0);
  remove_dir();
}
END_TEST

/* Rewrites the state file through f(buf, &n) and checks the load error. */
static void corrupt(void (*f)(uint8_t *, size_t *), int code, const char *needle) {
  make_dir();
  lh_learner_state st = sample_state(), back;
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_state_save(dir, &st, &e), 0);
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_STATE_FILE);
  uint8_t buf[1024];
  FILE *fp = fopen(path, "rb");
  size_t n = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  f(buf, &n);
  fp = fopen(path, "wb");
  fwrite(buf, 1, n, fp);
  fclose(fp);
  memset(&back, 0xab, sizeof back);
  lh_learner_state before = back;
  ck_assert_int_eq(lh_learner_state_load(dir, &back, &e), code);
  ck_assert_msg(strstr(e.msg, needle), "%s", e.msg);
  ck_assert_int_eq(memcmp(&back, &before, sizeof back), 0);
  remove_dir();
}

static void truncate_it(uint8_t *b, size_t *n) { (void)b, *n -= 1; }
static void extend_it(uint8_t *b, size_t *n) { b[(*n)++] = 0; }
static void flip_byte(uint8_t *b, size_t *n) { (void)n, b[20] ^= 1; }
static void bad_magic(uint8_t *b, size_t *n) { (void)n, b[0] = 'X'; }
static void bad_format(uint8_t *b, size_t *n) { (void)n, b[8] = 9; }

START_TEST(test_corrupt_files) {
  corrupt(truncate_it, LH_ELEARNER_STATE_CORRUPT, "bytes, not");
  corrupt(extend_it, LH_ELEARNER_STATE_CORRUPT, "is over");
  corrupt(flip_byte, LH_ELEARNER_STATE_CORRUPT, "checksum");
  corrupt(bad_magic, LH_ELEARNER_STATE_CORRUPT, "not a learner state file");
  corrupt(bad_format, LH_ELEARNER_STATE_CORRUPT, "format 9");
}
END_TEST

START_TEST(test_missing) {
  lh_learner_state st = sample_state();
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_state_load("/nonexistent-dir", &st, &e), LH_ELEARNER_STATE_IO);
  ck_assert(strstr(e.msg, "cannot open /nonexistent-dir/learner_state.bin"));
  ck_assert_int_eq(lh_learner_state_save("/nonexistent-dir", &st, &e), LH_ELEARNER_STATE_IO);
  ck_assert(strstr(e.msg, "cannot create"));
  ck_assert_int_eq(lh_learner_state_save(NULL, &st, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_state_load("/tmp", NULL, &e), LH_EINVAL);
  /* A bad baseline inside a file whose checksum is right. */
  make_dir();
  st.baseline.decay = 2.0;
  ck_assert_int_eq(lh_learner_state_save(dir, &st, &e), 0);
  ck_assert_int_eq(lh_learner_state_load(dir, &st, &e), LH_ELEARNER_STATE_CORRUPT);
  ck_assert(strstr(e.msg, "decay"));
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_state");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_round_trip_is_exact);
  tcase_add_test(tc, test_corrupt_files);
  tcase_add_test(tc, test_missing);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

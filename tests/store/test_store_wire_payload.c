/* A segment stored with the bytes it arrived in (lh_wire_segment_bytes,
 * lh_store_put_segment_wire): the slice is the segment's encoding, and is
 * refused when the envelope is malformed or names the segment twice (the
 * decoder merges repeats); the stored payload reads back as the segment;
 * a resend is a duplicate whichever way it is stored; limits looser than
 * the store's mean validating again, so a token past the store's
 * vocabulary is refused. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_util.h"
#include "tests/store_fixture.h"

static char db[128];

static void setup(void) {
  snprintf(db, sizeof db, "/tmp/lh-test-store-wire-%d.db", (int)getpid());
  lh_proc_rm_db(db);
}

static void teardown(void) { lh_proc_rm_db(db); }

/* env's encoding with seg as its body. */
static uint8_t *envelope_of(Longhaul__Segment *seg, size_t *bytes) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 77;
  env.sender = "a0";
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT;
  env.segment = seg;
  uint8_t *out = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_wire_encode(&env, &out, bytes, &err) == 0, "%s", err.msg);
  return out;
}

START_TEST(test_slice_is_the_segment) {
  static sfx_seg f;
  sfx_seg_init(&f, 5, 0, "a0", "calc");
  sfx_seg_text(&f, "2+2=", 0, 0);
  sfx_seg_fill(&f, 40, 3);
  size_t n = 0, sn = 0, seg_bytes = 0;
  uint8_t *env = envelope_of(&f.seg, &n), *alone = NULL;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_wire_segment_encode(&f.seg, &alone, &sn, &err), 0);
  const uint8_t *seg = NULL;
  ck_assert_int_eq(lh_wire_segment_bytes(env, n, &seg, &seg_bytes), 1);
  ck_assert_uint_eq(seg_bytes, sn);
  ck_assert(memcmp(seg, alone, sn) == 0);
  /* every truncation is refused or still names a whole slice inside it */
  for (size_t cut = 0; cut < n; cut++) {
    const uint8_t *s2 = NULL;
    size_t b2 = 0;
    if (lh_wire_segment_bytes(env, cut, &s2, &b2)) ck_assert(s2 + b2 <= env + cut);
  }
  ck_assert_int_eq(lh_wire_segment_bytes(env, n - 1, &seg, &seg_bytes), 0);
  /* two envelopes back to back parse as one whose segments merge */
  uint8_t *twice = malloc(2 * n);
  memcpy(twice, env, n), memcpy(twice + n, env, n);
  ck_assert_int_eq(lh_wire_segment_bytes(twice, 2 * n, &seg, &seg_bytes), 0);
  /* an over-long varint and a group are refused */
  const uint8_t bad_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  ck_assert_int_eq(lh_wire_segment_bytes(bad_varint, sizeof bad_varint, &seg, &seg_bytes), 0);
  const uint8_t group[] = {0x5b, 0x5c};
  ck_assert_int_eq(lh_wire_segment_bytes(group, sizeof group, &seg, &seg_bytes), 0);
  /* field 11 as a varint is not a segment's bytes */
  const uint8_t as_varint[] = {0x58, 0x01};
  ck_assert_int_eq(lh_wire_segment_bytes(as_varint, sizeof as_varint, &seg, &seg_bytes), 0);
  free(twice), free(env), free(alone);
}
END_TEST

START_TEST(test_store_takes_the_bytes) {
  static sfx_seg f;
  sfx_seg_init(&f, 9, 0, "a0", "calc");
  sfx_seg_text(&f, "12*3", 1, 4);
  sfx_seg_image(&f);
  sfx_seg_fill(&f, 100, 4);
  size_t n = 0, seg_bytes = 0;
  uint8_t *env = envelope_of(&f.seg, &n);
  const uint8_t *seg = NULL;
  ck_assert_int_eq(lh_wire_segment_bytes(env, n, &seg, &seg_bytes), 1);
  lh_errbuf err = {0};
  Longhaul__Envelope *dec = NULL;
  ck_assert_msg(lh_wire_decode(env, n, NULL, &dec, &err) == 0, "%s", err.msg);
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "%s", err.msg);
  int ins = -5;
  ck_assert_msg(lh_store_put_segment_wire(s, dec->segment, seg, seg_bytes, &lim, &ins, &err) == 0,
                "%s", err.msg);
  ck_assert_int_eq(ins, 1);
  /* a resend, by either path, is a duplicate */
  ck_assert_int_eq(lh_store_put_segment_wire(s, dec->segment, seg, seg_bytes, &lim, &ins, &err), 0);
  ck_assert_int_eq(ins, 0);
  ck_assert_int_eq(lh_store_put_segment(s, &f.seg, &ins, &err), 0);
  ck_assert_int_eq(ins, 0);
  Longhaul__Segment **segs = NULL;
  size_t count = 0;
  ck_assert_msg(lh_store_episode_segments_array(s, 9, &segs, &count, NULL, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(count, 1);
  ck_assert_uint_eq(segs[0]->n_tokens, f.seg.n_tokens);
  ck_assert(memcmp(segs[0]->tokens, f.seg.tokens, f.seg.n_tokens * sizeof(uint32_t)) == 0);
  ck_assert_uint_eq(segs[0]->n_images, 1);
  lh_store_segments_free(segs, count);
  /* NULL arguments */
  ck_assert_int_eq(lh_store_put_segment_wire(s, dec->segment, NULL, 0, &lim, &ins, &err), LH_EINVAL);
  lh_wire_free(dec);
  lh_store_close(s);
  free(env);
}
END_TEST

START_TEST(test_looser_limits_validate_again) {
  static sfx_seg f;
  sfx_seg_init(&f, 3, 0, "a0", "calc");
  sfx_seg_fill(&f, 8, 1);
  f.tokens[2] = 300; /* past the store's (default) vocabulary of 264 */
  size_t n = 0, seg_bytes = 0;
  uint8_t *env = envelope_of(&f.seg, &n);
  const uint8_t *seg = NULL;
  ck_assert_int_eq(lh_wire_segment_bytes(env, n, &seg, &seg_bytes), 1);
  lh_wire_limits loose;
  lh_wire_limits_default(&loose);
  loose.vocab = 1000;
  lh_errbuf err = {0};
  Longhaul__Envelope *dec = NULL;
  ck_assert_msg(lh_wire_decode(env, n, &loose, &dec, &err) == 0, "%s", err.msg);
  lh_wire_limits strict;
  lh_wire_limits_default(&strict);
  ck_assert_int_eq(lh_wire_limits_segment_within(&loose, &strict), 0);
  ck_assert_int_eq(lh_wire_limits_segment_within(&strict, &loose), 1);
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "%s", err.msg);
  int ins = -5;
  ck_assert_int_lt(lh_store_put_segment_wire(s, dec->segment, seg, seg_bytes, &loose, &ins, &err), 0);
  ck_assert_int_eq(ins, 0);
  printf("looser limits: %s\n", err.msg);
  ck_assert_int_lt(lh_store_put_segment_wire(s, dec->segment, seg, seg_bytes, NULL, &ins, &err), 0);
  lh_wire_free(dec);
  lh_store_close(s);
  free(env);
}
END_TEST

int main(void) {
  Suite *su = suite_create("store_wire_payload");
  TCase *tc = tcase_create("wire_payload");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_slice_is_the_segment);
  tcase_add_test(tc, test_store_takes_the_bytes);
  tcase_add_test(tc, test_looser_limits_validate_again);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK);
}

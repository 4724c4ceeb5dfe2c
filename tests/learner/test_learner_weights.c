/* Tests of learner/weights.c: the announcement, the chunks (validated as
 * they travel) and the checks on requests. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
#include "proto/wire.h"

static uint8_t *pattern(size_t n) {
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131 + (i >> 8));
  return b;
}

START_TEST(test_announce_and_chunks) {
  size_t n = 10000;
  uint8_t *bytes = pattern(n);
  lh_learner_weights *w = lh_learner_weights_new(7, bytes, n, 1024, NULL);
  ck_assert_ptr_nonnull(w);
  memset(bytes, 0, n);  /* the publisher kept its own copy */
  free(bytes);
  bytes = pattern(n);
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  ck_assert_uint_eq(a.version, 7);
  ck_assert_uint_eq(a.total_bytes, n);
  ck_assert_uint_eq(a.chunk_bytes, 1024);
  ck_assert_uint_eq(a.chunk_count, 10);
  /* The version's checksum is that of its chunks' checksums. */
  uint64_t sums[64];
  ck_assert_uint_le(a.chunk_count, 64);
  for (uint32_t i = 0; i < a.chunk_count; i++) {
    size_t off = (size_t)i * a.chunk_bytes, len = n - off < a.chunk_bytes ? n - off : a.chunk_bytes;
    sums[i] = lh_wire_checksum(bytes + off, len);
  }
  ck_assert_uint_eq(a.checksum, lh_wire_weights_checksum(sums, a.chunk_count));
  ck_assert_uint_eq(lh_learner_weights_chunk_count(w), 10);
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
  env.weights_announce = &a;
  lh_errbuf e;
  ck_assert_msg(lh_wire_validate(&env, NULL, &e) == 0, "%s", e.msg);
  for (uint32_t i = 0; i < 10; i++) {
    Longhaul__WeightsChunk c;
    longhaul__weights_chunk__init(&c);
    ck_assert_int_eq(lh_learner_weights_chunk(w, i, &c, NULL), 0);
    ck_assert_uint_eq(c.version, 7);
    ck_assert_uint_eq(c.chunk_index, i);
    ck_assert_uint_eq(c.offset, i * 1024u);
    ck_assert_uint_eq(c.data.len, i < 9 ? 1024 : 10000 - 9 * 1024);
    ck_assert_int_eq(memcmp(c.data.data, bytes + c.offset, c.data.len), 0);
    env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
    env.weights_chunk = &c;
    ck_assert_msg(lh_wire_validate(&env, NULL, &e) == 0, "%s", e.msg);  /* checksum included */
  }
  Longhaul__WeightsChunk c;
  longhaul__weights_chunk__init(&c);
  ck_assert_int_eq(lh_learner_weights_chunk(w, 10, &c, &e), LH_ELEARNER_WEIGHTS_REQUEST);
  ck_assert(strstr(e.msg, "index 10"));
  ck_assert_int_eq(lh_learner_weights_chunk(NULL, 0, &c, &e), LH_EINVAL);
  free(bytes);
  lh_learner_weights_free(w);
  /* One exact chunk; one byte. */
  uint8_t one = 42;
  w = lh_learner_weights_new(1, &one, 1, 1024, NULL);
  ck_assert_uint_eq(lh_learner_weights_chunk_count(w), 1);
  lh_learner_weights_free(w);
  uint8_t four[4] = {1, 2, 3, 4};
  w = lh_learner_weights_new(1, four, 4, 2, NULL);
  ck_assert_uint_eq(lh_learner_weights_chunk_count(w), 2);
  lh_learner_weights_free(w);
  lh_learner_weights_free(NULL);
}
END_TEST

START_TEST(test_serve_checks_requests) {
  uint8_t *bytes = pattern(5000);
  lh_learner_weights *w = lh_learner_weights_new(3, bytes, 5000, 1000, NULL);
  Longhaul__WeightsRequest r;
  longhaul__weights_request__init(&r);
  uint32_t first, count;
  lh_errbuf e;
  r.version = 3, r.first_chunk = 1, r.chunk_count = 2;
  ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, NULL), 0);
  ck_assert_uint_eq(first, 1);
  ck_assert_uint_eq(count, 2);
  r.chunk_count = 0;  /* to the end */
  ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, NULL), 0);
  ck_assert_uint_eq(count, 4);
  r.version = 2;
  ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, &e), LH_ELEARNER_WEIGHTS_REQUEST);
  ck_assert(strstr(e.msg, "version 2 but version 3"));
  r.version = 3, r.first_chunk = 5;
  ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, &e), LH_ELEARNER_WEIGHTS_REQUEST);
  ck_assert(strstr(e.msg, "first_chunk 5"));
  r.first_chunk = 3, r.chunk_count = 3;
  ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, &e), LH_ELEARNER_WEIGHTS_REQUEST);
  ck_assert(strstr(e.msg, "chunks 3..5"));
  ck_assert_int_eq(lh_learner_weights_serve(w, NULL, &first, &count, &e), LH_EINVAL);
  lh_learner_weights_free(w);
  free(bytes);
}
END_TEST

START_TEST(test_weights_params) {
  uint8_t b[4] = {0};
  lh_errbuf e;
  ck_assert_ptr_null(lh_learner_weights_new(1, b, 0, 16, &e));
  ck_assert_int_eq(e.code, LH_ELEARNER_WEIGHTS_PARAMS);
  ck_assert(strstr(e.msg, "no bytes"));
  ck_assert_ptr_null(lh_learner_weights_new(1, NULL, 4, 16, &e));
  ck_assert_ptr_null(lh_learner_weights_new(1, b, 4, 0, &e));
  ck_assert(strstr(e.msg, "chunk_bytes=0"));
  ck_assert_ptr_null(lh_learner_weights_new(1, b, 4, (16u << 20) + 1, &e));
  ck_assert_int_eq(e.code, LH_ELEARNER_WEIGHTS_PARAMS);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_weights");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_announce_and_chunks);
  tcase_add_test(tc, test_serve_checks_requests);
  tcase_add_test(tc, test_weights_params);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Tests of actors/weights.c against the real publisher (learner/weights.c),
 * every message through the real codec: chunked fetch in any order,
 * decoding goes on with the old version until the new one is complete,
 * newer announcements replace older fetches, bad chunks and a bad whole
 * checksum are refused. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proto/wire.h"

static uint8_t *pattern(size_t n, unsigned salt) {
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131 + salt + (i >> 8));
  return b;
}

/* Encodes and decodes an announcement or a chunk as it would travel. */
static Longhaul__Envelope *travel(Longhaul__WeightsAnnounce *a, Longhaul__WeightsChunk *c) {
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  if (a) env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE, env.weights_announce = a;
  if (c) env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK, env.weights_chunk = c;
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&env, &buf, &n, &e) == 0, "%s", e.msg);
  Longhaul__Envelope *out;
  ck_assert_msg(lh_wire_decode(buf, n, NULL, &out, &e) == 0, "%s", e.msg);
  free(buf);
  return out;
}

static void announce(lh_actors_weights *f, lh_learner_weights *w, int want) {
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  Longhaul__Envelope *env = travel(&a, NULL);
  lh_errbuf e;
  int rc = lh_actors_weights_announce(f, env->weights_announce, &e);
  ck_assert_msg(rc == want, "announce: %d (%s), want %d", rc, e.msg, want);
  lh_wire_free(env);
}

static int deliver(lh_actors_weights *f, lh_learner_weights *w, uint32_t index) {
  Longhaul__WeightsChunk c;
  longhaul__weights_chunk__init(&c);
  ck_assert_int_eq(lh_learner_weights_chunk(w, index, &c, NULL), 0);
  Longhaul__Envelope *env = travel(NULL, &c);
  lh_errbuf e;
  int rc = lh_actors_weights_add_chunk(f, env->weights_chunk, &e);
  ck_assert_msg(rc >= 0, "chunk %u: %s", index, e.msg);
  lh_wire_free(env);
  return rc;
}

/* Runs request/serve rounds with a window, delivering each range backwards,
 * until the fetch completes; returns the rounds it took. */
static int fetch_all(lh_actors_weights *f, lh_learner_weights *w, uint32_t window) {
  int rounds = 0, done = 0;
  Longhaul__WeightsRequest r;
  while (!done) {
    longhaul__weights_request__init(&r);
    ck_assert_int_eq(lh_actors_weights_next_request(f, window, &r), 1);
    uint32_t first, count;
    ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, NULL), 0);
    ck_assert_uint_le(count, window);
    for (uint32_t k = count; k-- > 0;) done |= deliver(f, w, first + k) == 1;
    rounds++;
  }
  return rounds;
}

START_TEST(test_fetch_in_chunks) {
  size_t n = 10000;
  uint8_t *bytes = pattern(n, 1);
  lh_learner_weights *w = lh_learner_weights_new(1, bytes, n, 1024, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  ck_assert_ptr_null(lh_actors_weights_latest(f, NULL, NULL));
  announce(f, w, 1);
  uint64_t v;
  uint32_t got, total;
  ck_assert_int_eq(lh_actors_weights_progress(f, &v, &got, &total), 1);
  ck_assert_uint_eq(v, 1);
  ck_assert_uint_eq(got, 0);
  ck_assert_uint_eq(total, 10);
  ck_assert_int_eq(fetch_all(f, w, 3), 4);  /* 3 + 3 + 3 + 1 chunks */
  size_t len;
  const uint8_t *data = lh_actors_weights_latest(f, &v, &len);
  ck_assert_ptr_nonnull(data);
  ck_assert_uint_eq(v, 1);
  ck_assert_uint_eq(len, n);
  ck_assert_int_eq(memcmp(data, bytes, n), 0);
  ck_assert_int_eq(lh_actors_weights_progress(f, NULL, NULL, NULL), 0);
  /* The same or an older version again is not fetched. */
  announce(f, w, 0);
  Longhaul__WeightsRequest r;
  longhaul__weights_request__init(&r);
  ck_assert_int_eq(lh_actors_weights_next_request(f, 8, &r), 0);
  lh_learner_weights_free(w);
  lh_actors_weights_free(f);
  free(bytes);
}
END_TEST

START_TEST(test_old_version_serves_until_new_is_complete) {
  uint8_t *b1 = pattern(4000, 1), *b2 = pattern(6000, 2), *b3 = pattern(3000, 3);
  lh_learner_weights *w1 = lh_learner_weights_new(1, b1, 4000, 1000, NULL);
  lh_learner_weights *w2 = lh_learner_weights_new(2, b2, 6000, 1000, NULL);
  lh_learner_weights *w3 = lh_learner_weights_new(3, b3, 3000, 1000, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  announce(f, w1, 1);
  fetch_all(f, w1, 16);
  announce(f, w2, 1);
  ck_assert_int_eq(deliver(f, w2, 0), 0);
  ck_assert_int_eq(deliver(f, w2, 0), 0);  /* duplicate: ignored */
  ck_assert_int_eq(deliver(f, w2, 3), 0);
  ck_assert_int_eq(deliver(f, w1, 1), 0);  /* another version: ignored */
  uint64_t v;
  uint32_t got;
  ck_assert_int_eq(lh_actors_weights_progress(f, &v, &got, NULL), 1);
  ck_assert_uint_eq(v, 2);
  ck_assert_uint_eq(got, 2);
  size_t len;
  const uint8_t *data = lh_actors_weights_latest(f, &v, &len);
  ck_assert_uint_eq(v, 1);  /* decoding goes on with version 1 */
  ck_assert_int_eq(memcmp(data, b1, 4000), 0);
  /* Version 3 is announced before 2 is complete: 2 is dropped. */
  announce(f, w3, 1);
  ck_assert_int_eq(deliver(f, w2, 1), 0);
  ck_assert_int_eq(lh_actors_weights_progress(f, &v, &got, NULL), 1);
  ck_assert_uint_eq(v, 3);
  ck_assert_uint_eq(got, 0);
  announce(f, w2, 0);  /* older than the one in progress */
  fetch_all(f, w3, 2);
  data = lh_actors_weights_latest(f, &v, &len);
  ck_assert_uint_eq(v, 3);
  ck_assert_uint_eq(len, 3000);
  ck_assert_int_eq(memcmp(data, b3, 3000), 0);
  lh_learner_weights_free(w1);
  lh_learner_weights_free(w2);
  lh_learner_weights_free(w3);
  lh_actors_weights_free(f);
  free(b1);
  free(b2);
  free(b3);
}
END_TEST

START_TEST(test_rerequest_after_loss) {
  uint8_t *b = pattern(5000, 4);
  lh_learner_weights *w = lh_learner_weights_new(9, b, 5000, 1000, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  announce(f, w, 1);
  Longhaul__WeightsRequest r;
  longhaul__weights_request__init(&r);
  ck_assert_int_eq(lh_actors_weights_next_request(f, 2, &r), 1);
  ck_assert_uint_eq(r.first_chunk, 0);
  ck_assert_uint_eq(r.chunk_count, 2);
  ck_assert_int_eq(lh_actors_weights_next_request(f, 10, &r), 1);
  ck_assert_uint_eq(r.first_chunk, 2);
  ck_assert_uint_eq(r.chunk_count, 3);
  ck_assert_int_eq(lh_actors_weights_next_request(f, 10, &r), 0);  /* all asked for */
  ck_assert_int_eq(lh_actors_weights_next_request(f, 0, &r), 0);
  /* Only chunks 1 and 3 arrive; after a timeout the rest are asked again. */
  deliver(f, w, 1);
  deliver(f, w, 3);
  lh_actors_weights_rerequest(f);
  uint32_t want[3][2] = {{0, 1}, {2, 1}, {4, 1}};
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(lh_actors_weights_next_request(f, 10, &r), 1);
    ck_assert_uint_eq(r.first_chunk, want[i][0]);
    ck_assert_uint_eq(r.chunk_count, want[i][1]);
  }
  deliver(f, w, 0);
  deliver(f, w, 4);
  ck_assert_int_eq(deliver(f, w, 2), 1);
  size_t len;
  ck_assert_int_eq(memcmp(lh_actors_weights_latest(f, NULL, &len), b, 5000), 0);
  lh_learner_weights_free(w);
  lh_actors_weights_free(f);
  free(b);
}
END_TEST

START_TEST(test_bad_chunks_and_checksum) {
  uint8_t *b = pattern(3000, 5);
  lh_learner_weights *w = lh_learner_weights_new(4, b, 3000, 1000, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  announce(f, w, 1);
  Longhaul__WeightsChunk c;
  longhaul__weights_chunk__init(&c);
  lh_learner_weights_chunk(w, 1, &c, NULL);
  lh_errbuf e;
  Longhaul__WeightsChunk bad = c;
  bad.offset = 999;
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &bad, &e), LH_EACTORS_WEIGHTS_CHUNK);
  ck_assert(strstr(e.msg, "offset 999"));
  bad = c;
  bad.data.len = 999;
  bad.checksum = lh_wire_checksum(bad.data.data, 999);
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &bad, &e), LH_EACTORS_WEIGHTS_CHUNK);
  ck_assert(strstr(e.msg, "999 bytes"));
  bad = c;
  bad.chunk_index = 3;
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &bad, &e), LH_EACTORS_WEIGHTS_CHUNK);
  ck_assert(strstr(e.msg, "index 3"));
  bad = c;
  bad.checksum ^= 1;
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &bad, &e), LH_EACTORS_WEIGHTS_CHUNK);
  ck_assert(strstr(e.msg, "its own checksum"));
  ck_assert_int_eq(lh_actors_weights_add_chunk(NULL, &c, &e), LH_EINVAL);
  lh_actors_weights_free(f);

  /* An announcement whose whole checksum disagrees with the chunks. */
  f = lh_actors_weights_new(1 << 20, NULL);
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  a.checksum ^= 0x5555;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, NULL), 1);
  deliver(f, w, 0);
  deliver(f, w, 1);
  longhaul__weights_chunk__init(&c);
  lh_learner_weights_chunk(w, 2, &c, NULL);
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &c, &e), LH_EACTORS_WEIGHTS_CHECKSUM);
  ck_assert(strstr(e.msg, "fetching it again"));
  uint32_t got;
  ck_assert_int_eq(lh_actors_weights_progress(f, NULL, &got, NULL), 1);
  ck_assert_uint_eq(got, 0);
  ck_assert_ptr_null(lh_actors_weights_latest(f, NULL, NULL));
  lh_actors_weights_free(f);
  lh_learner_weights_free(w);
  free(b);
}
END_TEST

START_TEST(test_bad_announcements) {
  lh_actors_weights *f = lh_actors_weights_new(5000, NULL);
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_errbuf e;
  a.version = 1, a.total_bytes = 3000, a.chunk_bytes = 1000, a.chunk_count = 2;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, &e), LH_EACTORS_WEIGHTS_ANNOUNCE);
  ck_assert(strstr(e.msg, "chunk_count=2"));
  a.chunk_count = 3, a.chunk_bytes = 0;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, &e), LH_EACTORS_WEIGHTS_ANNOUNCE);
  a.chunk_bytes = 1000, a.total_bytes = 0, a.chunk_count = 0;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, &e), LH_EACTORS_WEIGHTS_ANNOUNCE);
  a.total_bytes = 6000, a.chunk_count = 6;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, &e), LH_EACTORS_WEIGHTS_ANNOUNCE);
  ck_assert(strstr(e.msg, "limit of 5000"));
  ck_assert_int_eq(lh_actors_weights_announce(f, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_actors_weights_progress(f, NULL, NULL, NULL), 0);
  lh_actors_weights_free(f);
  ck_assert_ptr_null(lh_actors_weights_new(0, &e));
  ck_assert_int_eq(e.code, LH_EACTORS_WEIGHTS_ANNOUNCE);
  lh_actors_weights_free(NULL);
}
END_TEST

/* Versions of one size, one after another, as a learner publishes them:
 * the publisher overwrites its copy in place (lh_learner_weights_refill)
 * and the fetcher recycles its buffers; every version arrives whole with
 * its own bytes and stage, and a version of another size is new again. */
START_TEST(test_versions_of_one_size_reuse_buffers) {
  size_t n = 5000;
  uint8_t *b = pattern(n, 0);
  lh_learner_weights *w = lh_learner_weights_new(1, b, n, 512, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  for (unsigned v = 1; v <= 5; v++) {
    uint8_t *bv = pattern(n, v * 7);
    if (v > 1) ck_assert_int_eq(lh_learner_weights_refill(w, v, bv, n), 1);
    else ck_assert_int_eq(lh_learner_weights_refill(w, v, b, n), 1);
    Longhaul__WeightsAnnounce a;
    longhaul__weights_announce__init(&a);
    lh_learner_weights_announce(w, &a);
    ck_assert_uint_eq(a.version, v);
    uint64_t sums[16];
    for (uint32_t k = 0; k < a.chunk_count; k++) {
      size_t off = (size_t)k * 512, len = n - off < 512 ? n - off : 512;
      sums[k] = lh_wire_checksum((v > 1 ? bv : b) + off, len);
    }
    ck_assert_uint_eq(a.checksum, lh_wire_weights_checksum(sums, a.chunk_count));
    a.stage_index = v, a.max_context = 100 * v, a.long_frac = 0.5f;
    Longhaul__Envelope *env = travel(&a, NULL);
    ck_assert_int_eq(lh_actors_weights_announce(f, env->weights_announce, NULL), 1);
    lh_wire_free(env);
    fetch_all(f, w, 4);
    uint64_t got_v;
    size_t len;
    const uint8_t *data = lh_actors_weights_latest(f, &got_v, &len);
    ck_assert_uint_eq(got_v, v);
    ck_assert_uint_eq(len, n);
    ck_assert_int_eq(memcmp(data, v > 1 ? bv : b, n), 0);
    lh_actors_stage st;
    ck_assert_int_eq(lh_actors_weights_latest_stage(f, &st), 1);
    ck_assert_uint_eq(st.index, v);
    ck_assert_uint_eq(st.max_context, 100 * v);
    free(bv);
  }
  ck_assert_int_eq(lh_learner_weights_refill(w, 9, b, n - 1), 0);
  ck_assert_int_eq(lh_learner_weights_refill(NULL, 9, b, n), 0);
  /* A bigger version after smaller ones: a fresh buffer, whole again. */
  uint8_t *big = pattern(3 * n, 99);
  lh_learner_weights *w2 = lh_learner_weights_new(6, big, 3 * n, 512, NULL);
  announce(f, w2, 1);
  fetch_all(f, w2, 4);
  size_t len;
  const uint8_t *data = lh_actors_weights_latest(f, NULL, &len);
  ck_assert_uint_eq(len, 3 * n);
  ck_assert_int_eq(memcmp(data, big, 3 * n), 0);
  lh_learner_weights_free(w2);
  lh_learner_weights_free(w);
  lh_actors_weights_free(f);
  free(big);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_weights");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_fetch_in_chunks);
  tcase_add_test(tc, test_old_version_serves_until_new_is_complete);
  tcase_add_test(tc, test_rerequest_after_loss);
  tcase_add_test(tc, test_bad_chunks_and_checksum);
  tcase_add_test(tc, test_bad_announcements);
  tcase_add_test(tc, test_versions_of_one_size_reuse_buffers);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Weights sync that sends what changed (actors/weights.c, learner/weights.c,
 * learner/publish.c): an actor holding a version asks only for the chunks
 * whose announced checksum differs from what it holds (the version it
 * holds, not the previous one, when it skipped versions), the assembled
 * bytes equal the learner's, a chunk whose checksum is not the announced
 * one is asked for again, zstd chunks come only when accepted and where
 * they pay, and hostile zstd frames (a bomb, a wrong or missing size,
 * garbage, two frames) are refused with nothing written past the chunk.
 * The last case runs the real publisher and actor link over sockets, with
 * and without zstd. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include <zstd.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proto/wire.h"

#define CHUNK 1000u
#define CHUNKS 40u
#define BYTES (CHUNK * CHUNKS - 300u) /* the last chunk is short */

static uint8_t *pattern(size_t n, unsigned salt) {
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131 + salt + (i >> 8));
  return b;
}

/* A copy of b with chunk i's first byte changed. */
static void touch(uint8_t *b, uint32_t i) { b[(size_t)i * CHUNK] ^= 0x5a; }

/* Encodes and decodes an envelope as it travels to an actor (whose link
 * leaves chunk hashing to actors/weights.c). */
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
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lim.skip_chunk_checksums = 1;
  Longhaul__Envelope *out;
  ck_assert_msg(lh_wire_decode(buf, n, &lim, &out, &e) == 0, "%s", e.msg);
  free(buf);
  return out;
}

static int announce(lh_actors_weights *f, lh_learner_weights *w) {
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  Longhaul__Envelope *env = travel(&a, NULL);
  lh_errbuf e = {0};
  int rc = lh_actors_weights_announce(f, env->weights_announce, &e);
  ck_assert_msg(rc >= 0, "announce: %s", e.msg);
  lh_wire_free(env);
  return rc;
}

typedef struct {
  uint32_t requests, chunks, zstd_chunks;
  uint64_t wire_bytes;
} served;

/* Request/serve rounds (window 8) through the codec until the version
 * completes, counting what was served; zstd as the request says. */
static served fetch_all(lh_actors_weights *f, lh_learner_weights *w) {
  served s = {0};
  int done = 0;
  while (!done) {
    Longhaul__WeightsRequest r;
    longhaul__weights_request__init(&r);
    ck_assert_int_eq(lh_actors_weights_next_request(f, 8, &r), 1);
    uint32_t first, count;
    ck_assert_int_eq(lh_learner_weights_serve(w, &r, &first, &count, NULL), 0);
    s.requests++;
    for (uint32_t k = 0; k < count; k++) {
      Longhaul__WeightsChunk c;
      longhaul__weights_chunk__init(&c);
      ck_assert_int_eq(lh_learner_weights_chunk_encoded(w, first + k, r.accept_zstd, &c, NULL), 0);
      s.chunks++;
      s.zstd_chunks += c.encoding == LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
      s.wire_bytes += c.data.len;
      Longhaul__Envelope *env = travel(NULL, &c);
      lh_errbuf e = {0};
      int rc = lh_actors_weights_add_chunk(f, env->weights_chunk, &e);
      ck_assert_msg(rc >= 0, "chunk %u: %s", first + k, e.msg);
      done |= rc == 1;
      lh_wire_free(env);
    }
  }
  return s;
}

static void assert_latest(lh_actors_weights *f, uint64_t version, const uint8_t *want, size_t n) {
  uint64_t v = 0;
  size_t len = 0;
  const uint8_t *got = lh_actors_weights_latest(f, &v, &len);
  ck_assert_ptr_nonnull(got);
  ck_assert_uint_eq(v, version);
  ck_assert_uint_eq(len, n);
  ck_assert_msg(memcmp(got, want, n) == 0, "version %llu differs from the learner's",
                (unsigned long long)version);
}

/* v1 whole, then v2 with 3 chunks changed: exactly those 3 are asked for
 * and served; then v3 and v4 change one chunk each, and an actor that
 * skipped v3 asks for both against the v2 it holds. */
START_TEST(test_only_changed_chunks) {
  uint8_t *b = pattern(BYTES, 1);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  lh_actors_weights_set_zstd(f, 0);
  lh_learner_weights *w = lh_learner_weights_new(1, b, BYTES, CHUNK, NULL);
  ck_assert_int_eq(announce(f, w), 1);
  served s = fetch_all(f, w);
  ck_assert_uint_eq(s.chunks, CHUNKS);
  assert_latest(f, 1, b, BYTES);

  touch(b, 3), touch(b, 17), touch(b, CHUNKS - 1);
  ck_assert_int_eq(lh_learner_weights_refill(w, 2, b, BYTES), 1);
  ck_assert_int_eq(announce(f, w), 1);
  uint32_t total = 0;
  ck_assert_int_eq(lh_actors_weights_progress(f, NULL, NULL, &total), 1);
  s = fetch_all(f, w);
  ck_assert_uint_eq(s.chunks, 3);
  ck_assert_uint_eq(s.zstd_chunks, 0);
  assert_latest(f, 2, b, BYTES);
  lh_actors_weights_fetch_stats st;
  ck_assert_int_eq(lh_actors_weights_last_fetch(f, &st), 1);
  ck_assert_uint_eq(st.version, 2);
  ck_assert_uint_eq(st.chunks_requested, 3);
  ck_assert_uint_eq(st.chunks_fetched, 3);
  ck_assert_uint_eq(st.chunks_reused, CHUNKS - 3);
  ck_assert_uint_eq(st.bytes_fetched, 2 * CHUNK + (BYTES - (CHUNKS - 1) * CHUNK));
  ck_assert_uint_eq(st.bytes_fetched + st.bytes_reused, BYTES);
  ck_assert_uint_eq(st.wire_bytes, st.bytes_fetched);

  /* v3 changes chunk 5, v4 chunk 9: the actor never sees v3. */
  touch(b, 5);
  lh_learner_weights *w3 = lh_learner_weights_new(3, b, BYTES, CHUNK, NULL);
  touch(b, 9);
  lh_learner_weights *w4 = lh_learner_weights_new(4, b, BYTES, CHUNK, NULL);
  ck_assert_int_eq(announce(f, w4), 1);
  s = fetch_all(f, w4);
  ck_assert_uint_eq(s.chunks, 2);
  assert_latest(f, 4, b, BYTES);

  /* A version with the very same bytes: complete on its announcement. */
  lh_learner_weights *w5 = lh_learner_weights_new(5, b, BYTES, CHUNK, NULL);
  ck_assert_int_eq(announce(f, w5), 2);
  assert_latest(f, 5, b, BYTES);
  ck_assert_int_eq(lh_actors_weights_progress(f, NULL, NULL, NULL), 0);
  Longhaul__WeightsRequest r = LONGHAUL__WEIGHTS_REQUEST__INIT;
  ck_assert_int_eq(lh_actors_weights_next_request(f, 8, &r), 0);
  ck_assert_int_eq(lh_actors_weights_last_fetch(f, &st), 1);
  ck_assert_uint_eq(st.chunks_fetched, 0);
  ck_assert_uint_eq(st.chunks_reused, CHUNKS);
  printf("weights_delta: v2 3 of %u chunks fetched, v4 (v3 skipped) 2, v5 0\n", CHUNKS);
  lh_learner_weights_free(w), lh_learner_weights_free(w3), lh_learner_weights_free(w4), lh_learner_weights_free(w5);
  lh_actors_weights_free(f);
  free(b);
}
END_TEST

/* An announcement without chunk checksums (an older learner), or with
 * checksums that do not make its version's, is fetched whole. */
START_TEST(test_without_checksums_whole) {
  uint8_t *b = pattern(BYTES, 2);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  lh_learner_weights *w = lh_learner_weights_new(1, b, BYTES, CHUNK, NULL);
  announce(f, w);
  fetch_all(f, w);
  touch(b, 0);
  lh_learner_weights *w2 = lh_learner_weights_new(2, b, BYTES, CHUNK, NULL);
  Longhaul__WeightsAnnounce a = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
  lh_learner_weights_announce(w2, &a);
  a.n_chunk_checksums = 0;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, NULL), 1);
  ck_assert_uint_eq(fetch_all(f, w2).chunks, CHUNKS);
  assert_latest(f, 2, b, BYTES);

  touch(b, 1);
  lh_learner_weights *w3 = lh_learner_weights_new(3, b, BYTES, CHUNK, NULL);
  lh_learner_weights_announce(w3, &a);
  uint64_t lie[CHUNKS];
  memcpy(lie, a.chunk_checksums, sizeof lie);
  lie[1] = lie[0];  /* would keep the held chunk 1 */
  a.chunk_checksums = lie;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, NULL), 1);
  ck_assert_uint_eq(fetch_all(f, w3).chunks, CHUNKS);
  assert_latest(f, 3, b, BYTES);

  /* A count that is neither 0 nor chunk_count: refused by the wire and here. */
  a.n_chunk_checksums = 3;
  a.version = 9;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_weights_announce(f, &a, &e), LH_EACTORS_WEIGHTS_ANNOUNCE);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
  env.weights_announce = &a;
  ck_assert_int_eq(lh_wire_validate(&env, NULL, &e), LH_EWIRE_WEIGHTS_LAYOUT);
  ck_assert(strstr(e.msg, "chunk_checksums"));
  lh_learner_weights_free(w), lh_learner_weights_free(w2), lh_learner_weights_free(w3);
  lh_actors_weights_free(f);
  free(b);
}
END_TEST

/* A chunk whose checksum is its own data's but not the announced one is
 * refused and asked for again; the version completes with the right one. */
START_TEST(test_wrong_checksum_refetched) {
  uint8_t *b = pattern(BYTES, 3), *other = pattern(CHUNK, 77);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  lh_learner_weights *w = lh_learner_weights_new(1, b, BYTES, CHUNK, NULL);
  announce(f, w);
  Longhaul__WeightsRequest r = LONGHAUL__WEIGHTS_REQUEST__INIT;
  ck_assert_int_eq(lh_actors_weights_next_request(f, CHUNKS, &r), 1);
  ck_assert_uint_eq(r.chunk_count, CHUNKS);
  ck_assert_uint_eq(lh_actors_weights_in_flight(f), CHUNKS);
  Longhaul__WeightsChunk c = LONGHAUL__WEIGHTS_CHUNK__INIT;
  lh_learner_weights_chunk(w, 4, &c, NULL);
  c.data.data = other;
  c.checksum = lh_wire_checksum(other, CHUNK);
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &c, &e), LH_EACTORS_WEIGHTS_CHECKSUM);
  ck_assert_uint_eq(lh_actors_weights_in_flight(f), CHUNKS - 1);  /* refused: no longer awaited */
  ck_assert_msg(strstr(e.msg, "announcement") != NULL, "%s", e.msg);
  longhaul__weights_request__init(&r);
  ck_assert_int_eq(lh_actors_weights_next_request(f, CHUNKS, &r), 1);
  ck_assert_uint_eq(r.first_chunk, 4);
  ck_assert_uint_eq(r.chunk_count, 1);
  ck_assert_uint_eq(lh_actors_weights_in_flight(f), CHUNKS);
  for (uint32_t i = 0; i < CHUNKS; i++) {
    longhaul__weights_chunk__init(&c);
    lh_learner_weights_chunk(w, i, &c, NULL);
    ck_assert_int_eq(lh_actors_weights_add_chunk(f, &c, &e), i + 1 == CHUNKS);
  }
  assert_latest(f, 1, b, BYTES);
  lh_actors_weights_fetch_stats st;
  lh_actors_weights_last_fetch(f, &st);
  ck_assert_uint_eq(st.chunks_refused, 1);
  lh_learner_weights_free(w);
  lh_actors_weights_free(f);
  free(b), free(other);
}
END_TEST

/* Weights that compress (floats with zeros and repeats, as norms and
 * zero-initialised tensors are) come zstd-compressed to an actor that
 * accepts it, smaller, and equal once decoded; an actor that does not gets
 * them raw; bytes that do not compress go raw either way. */
START_TEST(test_zstd_where_it_pays) {
  size_t n = BYTES;
  uint8_t *b = calloc(1, n);
  for (size_t i = 0; i < n / 2; i += 4) b[i] = (uint8_t)(i / 64);
  lh_learner_weights *w = lh_learner_weights_new(1, b, n, CHUNK, NULL);
  lh_actors_weights *yes = lh_actors_weights_new(1 << 20, NULL), *no = lh_actors_weights_new(1 << 20, NULL);
  lh_actors_weights_set_zstd(yes, 1);
  announce(yes, w);
  served s = fetch_all(yes, w);
  assert_latest(yes, 1, b, n);
  ck_assert_uint_eq(s.zstd_chunks, CHUNKS);
  ck_assert_uint_lt(s.wire_bytes, n / 4);
  announce(no, w);
  served s2 = fetch_all(no, w);
  assert_latest(no, 1, b, n);
  ck_assert_uint_eq(s2.zstd_chunks, 0);
  ck_assert_uint_eq(s2.wire_bytes, n);
  lh_actors_weights_fetch_stats st;
  lh_actors_weights_last_fetch(yes, &st);
  ck_assert_uint_eq(st.chunks_zstd, CHUNKS);
  ck_assert_uint_eq(st.wire_bytes, s.wire_bytes);
  ck_assert_uint_eq(st.bytes_fetched, n);
  lh_learner_weights_zstd_counts zc = lh_learner_weights_get_zstd_counts(w);
  ck_assert_uint_eq(zc.tried, CHUNKS);  /* once per chunk, not per request */
  ck_assert_uint_eq(zc.compressed, CHUNKS);
  printf("weights_delta: compressible %zu bytes -> %llu on the wire with zstd\n", n,
         (unsigned long long)s.wire_bytes);

  /* A new version of the same size: compressed afresh. */
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)lh_hash64(&i, sizeof i, 5);
  ck_assert_int_eq(lh_learner_weights_refill(w, 2, b, n), 1);
  announce(yes, w);
  s = fetch_all(yes, w);
  assert_latest(yes, 2, b, n);
  ck_assert_uint_eq(s.zstd_chunks, 0);  /* random bytes: raw */
  ck_assert_uint_eq(s.wire_bytes, n);
  lh_learner_weights_free(w);
  lh_actors_weights_free(yes), lh_actors_weights_free(no);
  free(b);
}
END_TEST

/* One compressed chunk of src (len bytes) into a new buffer; content size
 * written when with_size. */
static uint8_t *frame(const void *src, size_t len, int with_size, size_t *out) {
  ZSTD_CCtx *cc = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, with_size);
  size_t cap = ZSTD_compressBound(len);
  uint8_t *z = malloc(cap);
  *out = ZSTD_compress2(cc, z, cap, src, len);
  ck_assert(!ZSTD_isError(*out));
  ZSTD_freeCCtx(cc);
  return z;
}

/* Offers chunk 2 of w's version as the given frame (with the true chunk's
 * checksum) and expects it refused with the given code. */
static void refuse(lh_actors_weights *f, lh_learner_weights *w, const uint8_t *z, size_t zlen, int code,
                   const char *says) {
  Longhaul__WeightsChunk c = LONGHAUL__WEIGHTS_CHUNK__INIT;
  lh_learner_weights_chunk(w, 2, &c, NULL);
  c.data.data = (uint8_t *)z;
  c.data.len = zlen;
  c.encoding = LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
  Longhaul__Envelope *env = travel(NULL, &c);
  lh_errbuf e = {0};
  int rc = lh_actors_weights_add_chunk(f, env->weights_chunk, &e);
  ck_assert_msg(rc == code && strstr(e.msg, says), "got %d (%s), want %d saying '%s'", rc, e.msg, code, says);
  lh_wire_free(env);
}

/* Hostile zstd chunks: each refused, nothing written past the chunk, and
 * the version still completes from good chunks afterwards. */
START_TEST(test_hostile_zstd) {
  uint8_t *b = pattern(BYTES, 4);
  lh_learner_weights *w = lh_learner_weights_new(1, b, BYTES, CHUNK, NULL);
  lh_actors_weights *f = lh_actors_weights_new(1 << 20, NULL);
  lh_actors_weights_set_zstd(f, 1);
  announce(f, w);
  size_t zlen;
  /* A bomb: 16 MiB of zeros in a few hundred bytes, for a 1000-byte chunk;
   * then the same bomb with no content size in its header. Refusing them
   * allocates next to nothing (the heap, mmap'd blocks included, grows by
   * less than 1 MiB, the decoder's context included). */
  size_t big = (size_t)16 << 20, nosize_len;
  uint8_t *zeros = calloc(1, big);
  uint8_t *z = frame(zeros, big, 1, &zlen), *nosize = frame(zeros, big, 0, &nosize_len);
  ck_assert_uint_lt(zlen, 4096);
  struct mallinfo2 before = mallinfo2();
  refuse(f, w, z, zlen, LH_EACTORS_WEIGHTS_ENCODING, "states another size");
  refuse(f, w, nosize, nosize_len, LH_EACTORS_WEIGHTS_ENCODING, "states no content size");
  uint8_t *bombs = malloc(2 * zlen);  /* a good-looking first frame, then the bomb */
  size_t small_len;
  uint8_t *small = frame(b + 2 * CHUNK, CHUNK, 1, &small_len);
  memcpy(bombs, small, small_len), memcpy(bombs + small_len, z, zlen);
  refuse(f, w, bombs, small_len + zlen, LH_EACTORS_WEIGHTS_ENCODING, "does not decode");
  struct mallinfo2 after = mallinfo2();
  long long grew = (long long)(after.uordblks + after.hblkhd) - (long long)(before.uordblks + before.hblkhd);
  printf("weights_delta: refusing three zstd bombs grew the heap by %lld bytes\n", grew);
  ck_assert_int_lt(grew, 1 << 20);
  free(z), free(nosize), free(bombs), free(small);
  /* A frame of the right size for the wrong bytes: its checksum fails. */
  z = frame(zeros, CHUNK, 1, &zlen);
  refuse(f, w, z, zlen, LH_EACTORS_WEIGHTS_CHUNK, "once decompressed");
  /* Two frames: the first states the chunk's size, the second is more. */
  uint8_t *two = malloc(2 * zlen);
  memcpy(two, z, zlen), memcpy(two + zlen, z, zlen);
  refuse(f, w, two, 2 * zlen, LH_EACTORS_WEIGHTS_ENCODING, "does not decode");
  free(two);
  /* A right-sized frame cut short, and one with its body overwritten. */
  size_t good_len;
  uint8_t *good = frame(b + 2 * CHUNK, CHUNK, 1, &good_len);
  refuse(f, w, good, good_len - 3, LH_EACTORS_WEIGHTS_ENCODING, "does not decode");
  uint8_t *bad = malloc(good_len);
  memcpy(bad, good, good_len);
  for (size_t i = 8; i < good_len; i++) bad[i] = (uint8_t)(i * 37);
  Longhaul__WeightsChunk c = LONGHAUL__WEIGHTS_CHUNK__INIT;
  lh_learner_weights_chunk(w, 2, &c, NULL);
  c.data.data = bad, c.data.len = good_len, c.encoding = LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
  lh_errbuf e;
  ck_assert_int_lt(lh_actors_weights_add_chunk(f, &c, &e), 0);
  free(bad);
  /* Garbage, an empty frame, an unknown encoding. */
  refuse(f, w, (const uint8_t *)"not zstd at all", 15, LH_EACTORS_WEIGHTS_ENCODING, "not a zstd frame");
  refuse(f, w, (const uint8_t *)"", 0, LH_EACTORS_WEIGHTS_ENCODING, "empty");
  c.data.data = good, c.data.len = good_len, c.encoding = 7;
  ck_assert_int_eq(lh_actors_weights_add_chunk(f, &c, &e), LH_EACTORS_WEIGHTS_ENCODING);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
  env.weights_chunk = &c;
  ck_assert_int_eq(lh_wire_validate(&env, NULL, &e), LH_EWIRE_VALUE_RANGE);
  /* A good frame from a learner this actor did not ask zstd of. */
  lh_actors_weights_set_zstd(f, 0);
  refuse(f, w, good, good_len, LH_EACTORS_WEIGHTS_ENCODING, "not asked for");
  lh_actors_weights_set_zstd(f, 1);
  /* The neighbours of chunk 2 were never touched: the version completes,
   * with chunk 2 from the good frame. */
  for (uint32_t i = 0; i < CHUNKS; i++) {
    longhaul__weights_chunk__init(&c);
    lh_learner_weights_chunk(w, i, &c, NULL);
    if (i == 2)
      c.data.data = good, c.data.len = good_len, c.encoding = LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
    ck_assert_int_eq(lh_actors_weights_add_chunk(f, &c, &e), i + 1 == CHUNKS);
  }
  assert_latest(f, 1, b, BYTES);
  lh_actors_weights_fetch_stats st;
  lh_actors_weights_last_fetch(f, &st);
  ck_assert_uint_ge(st.chunks_refused, 8);
  free(z), free(good), free(zeros);
  lh_learner_weights_free(w);
  lh_actors_weights_free(f);
  free(b);
}
END_TEST

/* The real publisher and actor link over sockets: a first version whole,
 * then one with a few chunks changed fetched as those chunks, with zstd
 * accepted or not; the publisher's counts show what went out. */
static void link_round(int accept_zstd) {
  void *ctx = zmq_ctx_new();
  lh_errbuf e = {0};
  lh_learner_publisher *p = lh_learner_publisher_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", CHUNK, &e);
  ck_assert_msg(p != NULL, "%s", e.msg);
  lh_actors_link_config lc = {.name = "delta",
                              .ingest_endpoint = "tcp://127.0.0.1:9",
                              .weights_pub_endpoint = lh_learner_publisher_pub_endpoint(p),
                              .weights_endpoint = lh_learner_publisher_router_endpoint(p),
                              .outbox_messages = 16,
                              .outbox_bytes = 1 << 20,
                              .resend_timeout_ms = 500,
                              .id_salt = 1,
                              .vocab = 264,
                              .weights_zstd = accept_zstd};
  lh_actors_link *link = NULL;
  ck_assert_msg(lh_actors_link_new(ctx, &lc, &link, &e) == 0, "%s", e.msg);
  /* half zeros (compressible), half hashed bytes (not) */
  uint8_t *b = calloc(1, BYTES);
  for (size_t i = BYTES / 2; i < BYTES; i++) b[i] = (uint8_t)lh_hash64(&i, sizeof i, 9);
  const uint8_t *held = NULL;
  for (uint64_t v = 1; v <= 2; v++) {
    if (v == 2) touch(b, 1), touch(b, 30);
    ck_assert_int_eq(lh_learner_publisher_set(p, v, b, BYTES, 0, 0, 0.0f, &e), 0);
    uint64_t got = 0;
    for (int i = 0; i < 20000 && got != v; i++) {
      ck_assert_int_ge(lh_learner_publisher_poll(p, 0, NULL, &e), 0);
      ck_assert_int_ge(lh_actors_link_poll(link, 1, &e), 0);
      held = lh_actors_link_weights(link, &got, NULL);
      /* an announcement missed before the SUB joined: announce again */
      if (i % 200 == 199 && got != v) lh_learner_publisher_announce(p, &e);
    }
    ck_assert_uint_eq(got, v);
    ck_assert(memcmp(held, b, BYTES) == 0);
  }
  lh_actors_weights_fetch_stats st;
  ck_assert_int_eq(lh_actors_link_weights_fetch(link, &st), 1);
  const lh_learner_publisher_counts *pc = lh_learner_publisher_get_counts(p);
  printf("weights_delta: link zstd=%d v2 fetched %llu of %u bytes (wire %llu), publisher sent %llu chunks "
         "(%llu zstd) %llu bytes\n",
         accept_zstd, (unsigned long long)st.bytes_fetched, BYTES, (unsigned long long)st.wire_bytes,
         (unsigned long long)pc->chunks_sent, (unsigned long long)pc->chunks_zstd,
         (unsigned long long)pc->bytes_sent);
  ck_assert_uint_eq(st.chunks_fetched, 2);
  ck_assert_uint_eq(st.chunks_reused, CHUNKS - 2);
  ck_assert_uint_eq(st.chunks_zstd, accept_zstd ? 1 : 0);  /* chunk 1 is zeros, chunk 30 hashed bytes */
  if (accept_zstd)
    ck_assert_uint_gt(pc->chunks_zstd, CHUNKS / 2 - 2);
  else
    ck_assert_uint_eq(pc->chunks_zstd, 0);
  lh_actors_link_free(link);
  lh_learner_publisher_free(p);
  zmq_ctx_term(ctx);
  free(b);
}

/* [actor] weights_zstd: 0 by default, 1 accepts zstd chunks, nothing else;
 * [learner] weights_chunk_bytes in its range. */
START_TEST(test_actor_key) {
  lh_actors_config c;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_config_parse("[actor]\n", "t.ini", &c, &e), 0);
  ck_assert_uint_eq(c.weights_zstd, 0);
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nweights_zstd = 1\n", "t.ini", &c, &e), 0);
  ck_assert_uint_eq(c.weights_zstd, 1);
  ck_assert_int_lt(lh_actors_config_parse("[actor]\nweights_zstd = 2\n", "t.ini", &c, &e), 0);
  ck_assert_msg(strstr(e.msg, "weights_zstd") != NULL, "%s", e.msg);
  /* [learner] weights_chunk_bytes: 1 MiB by default, 4096..16 MiB. */
  lh_learner_config lc;
  ck_assert_int_eq(lh_learner_config_parse("[learner]\n", "t.ini", &lc, &e), 0);
  ck_assert_uint_eq(lc.weights_chunk_bytes, 1u << 20);
  ck_assert_int_eq(lh_learner_config_parse("[learner]\nweights_chunk_bytes = 65536\n", "t.ini", &lc, &e), 0);
  ck_assert_uint_eq(lc.weights_chunk_bytes, 65536);
  ck_assert_int_lt(lh_learner_config_parse("[learner]\nweights_chunk_bytes = 100\n", "t.ini", &lc, &e), 0);
  ck_assert_int_lt(lh_learner_config_parse("[learner]\nweights_chunk_bytes = 16777217\n", "t.ini", &lc, &e), 0);
}
END_TEST

START_TEST(test_link_with_zstd) { link_round(1); }
END_TEST

START_TEST(test_link_without_zstd) { link_round(0); }
END_TEST

int main(void) {
  Suite *s = suite_create("weights_delta");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_only_changed_chunks);
  tcase_add_test(tc, test_without_checksums_whole);
  tcase_add_test(tc, test_wrong_checksum_refetched);
  tcase_add_test(tc, test_zstd_where_it_pays);
  tcase_add_test(tc, test_hostile_zstd);
  tcase_add_test(tc, test_actor_key);
  tcase_add_test(tc, test_link_with_zstd);
  tcase_add_test(tc, test_link_without_zstd);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

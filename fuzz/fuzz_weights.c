/* libFuzzer harness: any bytes into an actor's weights fetcher
 * (actors/weights.c), which holds a complete version A and fetches a
 * version B of 3 chunks announced with their checksums (chunk 1 differs).
 * The bytes go in three ways: as the zstd frame of B's chunk 1, as its raw
 * data, and as an envelope decoded with the actor link's limits (an
 * announcement or a chunk from a hostile learner). The contract checked on
 * every input: a refusal is an LH_EACTORS_WEIGHTS_* code (or LH_ENOMEM)
 * with a message; after the good chunks are delivered, a completed
 * version is bit for bit the one announced, A's bytes are never changed,
 * and nothing is written past a chunk (ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHUNK 4096u
#define BYTES (2 * CHUNK + 1000u)

static uint8_t version_a[BYTES], version_b[BYTES];
static uint64_t sums_a[3], sums_b[3];

static void fail(const char *what, int rc, const lh_errbuf *err) {
  fprintf(stderr, "fuzz_weights: %s (%s: %s)\n", what, lh_err_name(rc), err->msg);
  abort();
}

static void setup(void) {
  static int done;
  if (done) return;
  done = 1;
  for (size_t i = 0; i < BYTES; i++) version_a[i] = (uint8_t)(i * 131 + (i >> 8));
  memcpy(version_b, version_a, BYTES);
  for (size_t i = CHUNK; i < 2 * CHUNK; i += 7) version_b[i] ^= 0x5a;
  for (uint32_t c = 0; c < 3; c++) {
    size_t len = c < 2 ? CHUNK : BYTES - 2 * CHUNK;
    sums_a[c] = lh_wire_checksum(version_a + (size_t)c * CHUNK, len);
    sums_b[c] = lh_wire_checksum(version_b + (size_t)c * CHUNK, len);
  }
}

static void announcement(Longhaul__WeightsAnnounce *a, uint64_t version, uint64_t *sums) {
  longhaul__weights_announce__init(a);
  a->version = version;
  a->total_bytes = BYTES;
  a->chunk_bytes = CHUNK;
  a->chunk_count = 3;
  a->checksum = lh_wire_weights_checksum(sums, 3);
  a->n_chunk_checksums = 3;
  a->chunk_checksums = sums;
}

static Longhaul__WeightsChunk chunk_of(const uint8_t *bytes, uint64_t version, uint32_t c, uint64_t sum) {
  Longhaul__WeightsChunk ch = LONGHAUL__WEIGHTS_CHUNK__INIT;
  ch.version = version;
  ch.chunk_index = c;
  ch.offset = (uint64_t)c * CHUNK;
  ch.data.data = (uint8_t *)bytes + (size_t)c * CHUNK;
  ch.data.len = c < 2 ? CHUNK : BYTES - 2 * CHUNK;
  ch.checksum = sum;
  return ch;
}

/* A fetcher that holds A (version 1) completely, zstd accepted. */
static lh_actors_weights *holding_a(void) {
  lh_errbuf err;
  lh_actors_weights *w = lh_actors_weights_new(1 << 20, &err);
  if (!w) fail("cannot make a fetcher", LH_ENOMEM, &err);
  lh_actors_weights_set_zstd(w, 1);
  Longhaul__WeightsAnnounce a;
  announcement(&a, 1, sums_a);
  if (lh_actors_weights_announce(w, &a, &err) != 1) fail("A not announced", -1, &err);
  for (uint32_t c = 0; c < 3; c++) {
    Longhaul__WeightsChunk ch = chunk_of(version_a, 1, c, sums_a[c]);
    int rc = lh_actors_weights_add_chunk(w, &ch, &err);
    if (rc != (c == 2)) fail("A not taken", rc, &err);
  }
  return w;
}

static void check_refusal(int rc, const lh_errbuf *err) {
  if (rc >= 0) return;
  if (rc != LH_EACTORS_WEIGHTS_ANNOUNCE && rc != LH_EACTORS_WEIGHTS_CHUNK && rc != LH_EACTORS_WEIGHTS_CHECKSUM &&
      rc != LH_EACTORS_WEIGHTS_ENCODING && rc != LH_ENOMEM)
    fail("refused with another code", rc, err);
  if (!err->msg[0]) fail("refused without a message", rc, err);
}

/* Whatever the fetcher holds as its latest is a version announced here,
 * bit for bit. */
static void check_latest(lh_actors_weights *w) {
  uint64_t v = 0;
  size_t n = 0;
  const uint8_t *b = lh_actors_weights_latest(w, &v, &n);
  if (!b || n != BYTES) {
    lh_errbuf none = {0};
    fail("no latest version of the announced size", 0, &none);
  }
  /* Only A's and B's chunks ever verify: a hostile announcement may give
   * A's bytes another number, never other bytes. */
  int is_a = memcmp(b, version_a, BYTES) == 0, is_b = memcmp(b, version_b, BYTES) == 0;
  if (!(is_a || is_b) || (v == 1 && !is_a) || (v == 1000 && !is_b)) {
    lh_errbuf none = {0};
    fail("the latest version is not the bytes announced", 0, &none);
  }
}

/* Announces B, offers chunk 1 as data (encoded as given), then the good
 * chunk 1 raw, and checks what the fetcher ends with. */
static void as_chunk(const uint8_t *data, size_t size, Longhaul__WeightsEncoding encoding) {
  lh_actors_weights *w = holding_a();
  lh_errbuf err;
  Longhaul__WeightsAnnounce a;
  announcement(&a, 2, sums_b);
  if (lh_actors_weights_announce(w, &a, &err) != 1) fail("B not announced", -1, &err);
  Longhaul__WeightsChunk ch = chunk_of(version_b, 2, 1, sums_b[1]);
  ch.data.data = (uint8_t *)data;
  ch.data.len = size;
  ch.encoding = encoding;
  lh_errbuf_clear(&err);
  int rc = lh_actors_weights_add_chunk(w, &ch, &err);
  check_refusal(rc, &err);
  if (rc == 0) {
    lh_errbuf none = {0};
    fail("chunk 1 taken without completing B (chunks 0 and 2 are held)", rc, &none);
  }
  if (rc < 0) {
    ch = chunk_of(version_b, 2, 1, sums_b[1]);
    rc = lh_actors_weights_add_chunk(w, &ch, &err);
    if (rc != 1) fail("B not completed by the good chunk", rc, &err);
  }
  check_latest(w);
  lh_actors_weights_free(w);
}

/* The bytes as an envelope from the learner: an announcement or a chunk,
 * then B's good chunks. */
static void as_envelope(const uint8_t *data, size_t size) {
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lim.skip_chunk_checksums = 1;
  Longhaul__Envelope *env = NULL;
  lh_errbuf err;
  if (lh_wire_decode(data, size, &lim, &env, &err) < 0) return;
  lh_actors_weights *w = holding_a();
  int rc = 0;
  lh_errbuf_clear(&err);
  if (env->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE)
    rc = lh_actors_weights_announce(w, env->weights_announce, &err);
  else if (env->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK)
    rc = lh_actors_weights_add_chunk(w, env->weights_chunk, &err);
  check_refusal(rc, &err);
  lh_wire_free(env);
  Longhaul__WeightsAnnounce a;
  announcement(&a, 1000, sums_b);
  rc = lh_actors_weights_announce(w, &a, &err);
  check_refusal(rc, &err);
  for (uint32_t c = 0; c < 3; c++) {
    Longhaul__WeightsChunk ch = chunk_of(version_b, 1000, c, sums_b[c]);
    check_refusal(lh_actors_weights_add_chunk(w, &ch, &err), &err);
  }
  check_latest(w);
  lh_actors_weights_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  as_chunk(data, size, LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD);
  as_chunk(data, size, LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_RAW);
  as_envelope(data, size);
  return 0;
}

/* Hostile input into proto/wire's decoders: random buffers and mutated
 * valid encodings of every message kind (bit flips, truncations, insertions,
 * deletions, corrupted length fields). None may crash or leak (the
 * sanitizer build runs this under ASan+UBSan); each either is rejected with
 * an LH_EWIRE_* code and a message, or decodes to a message that validates
 * and re-encodes. The counts of each outcome are printed. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/wire_fixture.h"

#define RANDOM_BUFFERS 40000
#define MUTATED_BUFFERS 60000
#define SEGMENT_PAYLOADS 10000

/* xorshift64*: a fixed sequence, so that a failure can be replayed. */
static uint64_t next_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dULL;
}

typedef struct {
  long accepted;
  long by_code[100]; /* index -100 - code */
  long other;
  size_t largest_input;
} tally;

static void count(tally *t, int rc, size_t bytes) {
  if (bytes > t->largest_input) t->largest_input = bytes;
  if (rc == 0)
    t->accepted++;
  else if (rc <= -100 && rc > -200)
    t->by_code[-100 - rc]++;
  else
    t->other++;
}

static void print_tally(const char *what, const tally *t, long total) {
  printf("wire fuzz %s: inputs=%ld accepted=%ld largest_input_bytes=%zu", what, total, t->accepted,
         t->largest_input);
  for (int i = 0; i < 100; i++)
    if (t->by_code[i]) printf(" %s=%ld", lh_err_name(-100 - i), t->by_code[i]);
  printf("\n");
  fflush(stdout);
}

/* Decodes buf and checks the contract either way. */
static int decode_one(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim) {
  Longhaul__Envelope *env = (Longhaul__Envelope *)&env;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_decode(buf, bytes, lim, &env, &err);
  if (rc < 0) {
    ck_assert_ptr_null(env);
    ck_assert_msg(rc <= -100 && rc > -200, "non-wire code %s (%s)", lh_err_name(rc), err.msg);
    ck_assert_int_eq(err.code, rc);
    ck_assert_msg(err.msg[0] != '\0', "code %s without a message", lh_err_name(rc));
    return rc;
  }
  ck_assert_ptr_nonnull(env);
  ck_assert_int_eq(lh_wire_validate(env, lim, &err), 0);
  uint8_t *again = NULL;
  size_t again_bytes = 0;
  ck_assert_int_eq(lh_wire_encode(env, &again, &again_bytes, &err), 0);
  free(again);
  lh_wire_free(env);
  return 0;
}

/* Positions of the length prefixes of length-delimited fields, at the top
 * level and one level down (the body), found by walking the encoding. */
typedef struct {
  size_t at[64];
  size_t n;
} length_fields;

static int read_varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *i < n; shift += 7) {
    uint8_t b = p[(*i)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

static void find_lengths(const uint8_t *p, size_t n, size_t base, int depth, length_fields *out) {
  size_t i = 0;
  while (i < n && out->n < 64) {
    uint64_t key, len;
    if (read_varint(p, n, &i, &key) < 0) return;
    switch (key & 7) {
      case 0:
        if (read_varint(p, n, &i, &len) < 0) return;
        break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2: {
        size_t at = i;
        if (read_varint(p, n, &i, &len) < 0 || len > n - i) return;
        out->at[out->n++] = base + at;
        if (depth == 0) find_lengths(p + i, (size_t)len, base + i, 1, out);
        i += (size_t)len;
        break;
      }
      default: return;
    }
  }
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t k = 0;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    p[k++] = b | (v ? 0x80 : 0);
  } while (v);
  return k;
}

/* One mutation of src into dst (room for src_bytes + 64); returns its size. */
static size_t mutate(const uint8_t *src, size_t n, const length_fields *lf, uint8_t *dst,
                     uint64_t *rng) {
  uint64_t r = next_rand(rng);
  memcpy(dst, src, n);
  switch (r % 6) {
    case 0: { /* bit flips */
      int flips = 1 + (int)(next_rand(rng) % 8);
      for (int k = 0; k < flips; k++) {
        size_t at = next_rand(rng) % n;
        dst[at] ^= (uint8_t)(1u << (next_rand(rng) % 8));
      }
      return n;
    }
    case 1: /* truncation */
      return next_rand(rng) % n;
    case 2: { /* insertion of random bytes */
      size_t at = next_rand(rng) % (n + 1), k = 1 + next_rand(rng) % 16;
      memmove(dst + at + k, src + at, n - at);
      for (size_t j = 0; j < k; j++) dst[at + j] = (uint8_t)next_rand(rng);
      return n + k;
    }
    case 3: { /* deletion */
      size_t at = next_rand(rng) % n, k = 1 + next_rand(rng) % 16;
      if (k > n - at) k = n - at;
      memmove(dst + at, src + at + k, n - at - k);
      return n - k;
    }
    case 4: { /* overwrite a byte with an extreme value */
      size_t at = next_rand(rng) % n;
      static const uint8_t extremes[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
      dst[at] = extremes[next_rand(rng) % sizeof extremes];
      return n;
    }
    default: { /* corrupt a length field */
      if (lf->n == 0) return n;
      size_t at = lf->at[next_rand(rng) % lf->n], i = at;
      uint64_t old;
      if (read_varint(src, n, &i, &old) < 0) return n;
      uint64_t choices[] = {0, old + 1, old ? old - 1 : 1, old * 2 + 1, 0x7fffffffULL, 0xffffffffULL,
                            UINT64_MAX, next_rand(rng) % (2 * n + 1)};
      uint64_t v = choices[next_rand(rng) % (sizeof choices / sizeof *choices)];
      uint8_t var[10];
      size_t k = put_varint(var, v);
      memcpy(dst, src, at);
      memcpy(dst + at, var, k);
      memcpy(dst + at + k, src + i, n - i);
      return at + k + (n - i);
    }
  }
}

START_TEST(test_random_buffers) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL;
  tally t = {0};
  uint8_t buf[600];
  for (long k = 0; k < RANDOM_BUFFERS; k++) {
    size_t n = next_rand(&rng) % sizeof buf;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)next_rand(&rng);
    /* Half of them start like an envelope (protocol 1), so that parsing
     * gets past the first byte more often. */
    if (k % 2 && n >= 2) buf[0] = 0x08, buf[1] = 0x01;
    count(&t, decode_one(buf, n, NULL), n);
  }
  print_tally("random", &t, RANDOM_BUFFERS);
  ck_assert_int_eq(t.other, 0);
}
END_TEST

START_TEST(test_mutated_encodings) {
  uint64_t rng = 0x243f6a8885a308d3ULL;
  wire_fixture *f = malloc(sizeof *f);
  uint8_t *enc[FX_BODIES];
  size_t enc_bytes[FX_BODIES], largest = 0, smallest = SIZE_MAX;
  length_fields lf[FX_BODIES];
  for (int b = 0; b < FX_BODIES; b++) {
    fx_init(f, fx_bodies[b]);
    enc[b] = fx_encode(f, &enc_bytes[b]);
    if (enc_bytes[b] > largest) largest = enc_bytes[b];
    if (enc_bytes[b] < smallest) smallest = enc_bytes[b];
    lf[b].n = 0;
    find_lengths(enc[b], enc_bytes[b], 0, 0, &lf[b]);
    ck_assert_int_eq(decode_one(enc[b], enc_bytes[b], NULL), 0);
  }
  uint8_t *dst = malloc(largest + 64);
  tally t = {0};
  lh_wire_limits small;
  lh_wire_limits_default(&small);
  small.max_message_bytes = 1024; /* some inputs also meet a tight limit */
  for (long k = 0; k < MUTATED_BUFFERS; k++) {
    int b = (int)(k % FX_BODIES);
    /* The segment and the env response carry the most structure: give
     * them more of the mutations. */
    if (k % 4 == 3) b = (k / 4) % 2 ? 1 : 9;
    size_t n = mutate(enc[b], enc_bytes[b], &lf[b], dst, &rng);
    count(&t, decode_one(dst, n, k % 16 == 0 ? &small : NULL), n);
  }
  print_tally("mutated", &t, MUTATED_BUFFERS);
  printf("wire fuzz: encodings of the %d kinds are %zu..%zu bytes, segment %zu\n", FX_BODIES, smallest,
         largest, enc_bytes[1]);
  ck_assert_int_eq(t.other, 0);
  /* The mutations reach validation, not only the parser. */
  ck_assert(t.by_code[-100 - LH_EWIRE_UNPARSEABLE] < MUTATED_BUFFERS);
  ck_assert(t.accepted > 0);
  free(dst);
  for (int b = 0; b < FX_BODIES; b++) free(enc[b]);
  free(f);
}
END_TEST

START_TEST(test_mutated_segment_payloads) {
  uint64_t rng = 0x13198a2e03707344ULL;
  wire_fixture *f = malloc(sizeof *f);
  fx_init(f, LONGHAUL__ENVELOPE__BODY_SEGMENT);
  uint8_t *enc = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_segment_encode(&f->seg, &enc, &bytes, &err), 0);
  length_fields lf = {.n = 0};
  find_lengths(enc, bytes, 0, 0, &lf);
  uint8_t *dst = malloc(bytes + 64);
  tally t = {0};
  for (long k = 0; k < SEGMENT_PAYLOADS; k++) {
    size_t n = mutate(enc, bytes, &lf, dst, &rng);
    Longhaul__Segment *seg = NULL;
    int rc = lh_wire_segment_decode(dst, n, NULL, &seg, &err);
    if (rc == 0) {
      ck_assert_int_eq(lh_wire_validate_segment(seg, NULL, &err), 0);
      lh_wire_segment_free(seg);
    } else {
      ck_assert_ptr_null(seg);
    }
    count(&t, rc, n);
  }
  print_tally("segment payload", &t, SEGMENT_PAYLOADS);
  ck_assert_int_eq(t.other, 0);
  free(dst);
  free(enc);
  free(f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wire_fuzz");
  TCase *tc = tcase_create("fuzz");
  tcase_add_test(tc, test_random_buffers);
  tcase_add_test(tc, test_mutated_encodings);
  tcase_add_test(tc, test_mutated_segment_payloads);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

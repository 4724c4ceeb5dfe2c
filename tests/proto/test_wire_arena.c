/* lh_wire_decode_in: messages decoded into an arena read as lh_wire_decode
 * gives them, under the same memory budget, and a reused arena keeps
 * working after a refusal; random mutations of a batch frame get the same
 * verdict from both decoders (the sanitizer pass runs this under ASan). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "tests/wire_fixture.h"

#define N_REQUESTS 100

/* An Envelope with an EnvRequestBatch of N_REQUESTS steps, encoded. */
static uint8_t *batch_frame(size_t *bytes) {
  static Longhaul__EnvRequest q[N_REQUESTS];
  static Longhaul__EnvRequest *qp[N_REQUESTS];
  static char action[N_REQUESTS][48];
  for (int i = 0; i < N_REQUESTS; i++) {
    q[i] = (Longhaul__EnvRequest)LONGHAUL__ENV_REQUEST__INIT;
    q[i].request_id = 1000 + (uint64_t)i;
    q[i].op = LONGHAUL__ENV_OP__ENV_OP_STEP;
    q[i].session_id = 7 + (uint64_t)i;
    snprintf(action[i], sizeof action[i], "<call>calc(%d+1)</call>", i);
    q[i].action = action[i];
    qp[i] = &q[i];
  }
  Longhaul__EnvRequestBatch b = LONGHAUL__ENV_REQUEST_BATCH__INIT;
  b.requests = qp;
  b.n_requests = N_REQUESTS;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 3;
  env.sender = "test";
  env.body_case = LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH;
  env.env_request_batch = &b;
  uint8_t *buf;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&env, &buf, bytes, &e) == 0, "%s", e.msg);
  return buf;
}

static void check_batch(const Longhaul__Envelope *got) {
  ck_assert_int_eq(got->body_case, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH);
  ck_assert_uint_eq(got->env_request_batch->n_requests, N_REQUESTS);
  for (int i = 0; i < N_REQUESTS; i++) {
    const Longhaul__EnvRequest *r = got->env_request_batch->requests[i];
    char want[48];
    snprintf(want, sizeof want, "<call>calc(%d+1)</call>", i);
    ck_assert_uint_eq(r->request_id, 1000 + (uint64_t)i);
    ck_assert_uint_eq(r->session_id, 7 + (uint64_t)i);
    ck_assert_str_eq(r->action, want);
  }
}

/* The same frame decoded into one arena a thousand times, reset between. */
START_TEST(test_arena_reused) {
  size_t bytes;
  uint8_t *buf = batch_frame(&bytes);
  lh_wire_arena *a = lh_wire_arena_new();
  ck_assert_ptr_nonnull(a);
  lh_errbuf e;
  Longhaul__Envelope *got;
  ck_assert_int_eq(lh_wire_decode(buf, bytes, NULL, &got, &e), 0);
  check_batch(got);
  lh_wire_free(got);
  for (int round = 0; round < 1000; round++) {
    lh_wire_arena_reset(a);
    ck_assert_msg(lh_wire_decode_in(a, buf, bytes, NULL, &got, &e) == 0, "%s", e.msg);
    if (round % 100 == 0) check_batch(got);
  }
  /* two messages live in one arena until it is reset */
  Longhaul__Envelope *second;
  ck_assert_int_eq(lh_wire_decode_in(a, buf, bytes, NULL, &second, &e), 0);
  check_batch(got);
  check_batch(second);
  lh_wire_arena_free(a);
  lh_wire_arena_free(NULL);
  lh_wire_arena_reset(NULL);
  ck_assert_int_eq(lh_wire_decode_in(NULL, buf, bytes, NULL, &got, &e), LH_EINVAL);
  free(buf);
}
END_TEST

/* A flood of empty images: refused in an arena as without, and the arena
 * decodes the next message. */
START_TEST(test_arena_budget) {
  size_t n, body;
  uint8_t *buf = fx_image_flood(500000, &n, &body);
  ck_assert_ptr_nonnull(buf);
  lh_wire_arena *a = lh_wire_arena_new();
  Longhaul__Envelope *got = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_wire_decode_in(a, buf, n, NULL, &got, &e), LH_EWIRE_EXPANSION);
  ck_assert_ptr_null(got);
  printf("arena: %s\n", e.msg);
  size_t bytes;
  uint8_t *ok = batch_frame(&bytes);
  lh_wire_arena_reset(a);
  ck_assert_int_eq(lh_wire_decode_in(a, ok, bytes, NULL, &got, &e), 0);
  check_batch(got);
  lh_wire_arena_free(a);
  free(ok);
  free(buf);
}
END_TEST

/* Byte flips, truncations and insertions of a batch frame: both decoders
 * accept or refuse each the same way. */
START_TEST(test_arena_mutations) {
  size_t bytes;
  uint8_t *src = batch_frame(&bytes), *dst = malloc(bytes + 16);
  lh_wire_arena *a = lh_wire_arena_new();
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int accepted = 0;
  for (int k = 0; k < 20000; k++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    size_t n = bytes;
    memcpy(dst, src, bytes);
    size_t at = (size_t)(rng % bytes);
    switch ((rng >> 32) % 3) {
      case 0: dst[at] ^= (uint8_t)(1u << ((rng >> 40) % 8)); break;
      case 1: n = at; break;
      default: memmove(dst + at + 1, dst + at, bytes - at), dst[at] = (uint8_t)(rng >> 48), n = bytes + 1;
    }
    Longhaul__Envelope *x = NULL, *y = NULL;
    lh_errbuf e1, e2;
    lh_wire_arena_reset(a);
    int r1 = lh_wire_decode(dst, n, NULL, &x, &e1), r2 = lh_wire_decode_in(a, dst, n, NULL, &y, &e2);
    ck_assert_int_eq(r1, r2);
    if (r1 == 0) {
      accepted++;
      ck_assert_int_eq(x->body_case, y->body_case);
    } else {
      ck_assert_str_eq(e1.msg, e2.msg);
    }
    lh_wire_free(x);
  }
  printf("arena mutations: 20000 inputs, %d accepted by both\n", accepted);
  lh_wire_arena_free(a);
  free(dst);
  free(src);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wire_arena");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_arena_reused);
  tcase_add_test(tc, test_arena_budget);
  tcase_add_test(tc, test_arena_mutations);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

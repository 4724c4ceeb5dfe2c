/* The packers of env requests and responses (envs/envpack.c) against
 * protobuf-c: for each message, empty, typical, and with every field set
 * (negative status, images, terms, strings of one and of several length
 * bytes, ids of ten varint bytes, empty strings that proto3 leaves out),
 * the bytes after the field's key and length are those of
 * protobuf_c_message_pack, the length is its size, *at points at them,
 * and a second message appended after the first lands after it. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

/* Reads the key and length at b->data + from; returns the offset of the bytes. */
static size_t read_head(const lh_envs_bytes *b, size_t from, uint32_t *field, uint64_t *len) {
  uint64_t v[2] = {0, 0};
  size_t p = from;
  for (int k = 0; k < 2; k++)
    for (int shift = 0;; shift += 7) {
      ck_assert_uint_lt(p, b->len);
      uint8_t c = b->data[p++];
      v[k] |= (uint64_t)(c & 0x7f) << shift;
      if (!(c & 0x80)) break;
    }
  ck_assert_uint_eq(v[0] & 7, 2);
  *field = (uint32_t)(v[0] >> 3);
  *len = v[1];
  return p;
}

/* The field just appended at from (b->len before the call) holds exactly
 * protobuf-c's bytes of msg. */
static void same_as_protobuf_c(const lh_envs_bytes *b, size_t from, size_t at, uint32_t field,
                               const ProtobufCMessage *msg) {
  size_t want = protobuf_c_message_get_packed_size(msg);
  uint8_t *ref = malloc(want + 1);
  ck_assert_ptr_nonnull(ref);
  ck_assert_uint_eq(protobuf_c_message_pack(msg, ref), want);
  uint32_t got_field;
  uint64_t len;
  size_t body = read_head(b, from, &got_field, &len);
  ck_assert_uint_eq(got_field, field);
  ck_assert_uint_eq(body, at);
  ck_assert_uint_eq(len, want);
  ck_assert_uint_eq(b->len, body + want);
  ck_assert_int_eq(memcmp(b->data + body, ref, want), 0);
  free(ref);
}

static void check_response(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvResponse *r) {
  size_t from = b->len, at = 0;
  ck_assert_int_eq(lh_envs_bytes_put_response(b, field, r, &at), 0);
  same_as_protobuf_c(b, from, at, field, &r->base);
}

static void check_request(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvRequest *q) {
  size_t from = b->len, at = 0;
  ck_assert_int_eq(lh_envs_bytes_put_request(b, field, q, &at), 0);
  same_as_protobuf_c(b, from, at, field, &q->base);
}

static char *text_of(size_t n) {
  char *s = malloc(n + 1);
  ck_assert_ptr_nonnull(s);
  for (size_t i = 0; i < n; i++) s[i] = (char)('a' + i % 26);
  s[n] = 0;
  return s;
}

START_TEST(test_responses) {
  lh_envs_bytes b = {0};
  Longhaul__EnvResponse empty = LONGHAUL__ENV_RESPONSE__INIT;
  check_response(&b, 1, &empty);

  /* a step's answer as the server writes it */
  Longhaul__Observation obs = LONGHAUL__OBSERVATION__INIT;
  obs.text = "x = 17\nNext: y = x * 3";
  Longhaul__RewardTerm t1 = LONGHAUL__REWARD_TERM__INIT, t2 = LONGHAUL__REWARD_TERM__INIT;
  t1.name = "correct";
  t1.value = 1.0f;
  t1.step = 3;
  t2.name = "";       /* left out, as proto3 does */
  t2.value = -0.0f;   /* equal to 0: left out too */
  Longhaul__RewardTerm *terms[] = {&t1, &t2};
  Longhaul__EnvResponse step = LONGHAUL__ENV_RESPONSE__INIT;
  step.request_id = 300;
  step.session_id = 7;
  step.observation = &obs;
  step.reward = 1.0f;
  step.done = 1;
  step.n_terms = 2;
  step.terms = terms;
  step.max_batch = 1024;
  step.max_batch_bytes = 4u << 20;
  check_response(&b, 1, &step);

  /* an error answer: a negative status is ten varint bytes */
  Longhaul__EnvResponse bad = LONGHAUL__ENV_RESPONSE__INIT;
  bad.request_id = UINT64_MAX;
  bad.session_id = UINT64_MAX - 1;
  bad.status = -1234;
  bad.error = "env server: no session 9 for this client";
  bad.description = "";
  check_response(&b, 1, &bad);

  /* images, long text, the other strings, an observation without text */
  uint8_t px[2 * 3 * 3 + 5 * 4];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37);
  Longhaul__Image im1 = LONGHAUL__IMAGE__INIT, im2 = LONGHAUL__IMAGE__INIT;
  im1.width = 2, im1.height = 3, im1.channels = 3, im1.pixels.data = px, im1.pixels.len = 18;
  im2.offset = 9, im2.width = 5, im2.height = 4, im2.channels = 1, im2.pixels.data = px + 18, im2.pixels.len = 20;
  Longhaul__Image *ims[] = {&im1, &im2};
  char *long_text = text_of(70000);
  Longhaul__Observation big = LONGHAUL__OBSERVATION__INIT;
  big.text = long_text;
  big.n_images = 2;
  big.images = ims;
  Longhaul__EnvResponse all = LONGHAUL__ENV_RESPONSE__INIT;
  all.request_id = 1;
  all.observation = &big;
  all.reward = 0.25f;
  all.description = long_text + 69800;
  all.expert_action = "<call>calc(1+2)</call>";
  check_response(&b, 1, &all);
  Longhaul__Observation none = LONGHAUL__OBSERVATION__INIT;
  Longhaul__EnvResponse reset = LONGHAUL__ENV_RESPONSE__INIT;
  reset.observation = &none;
  check_response(&b, 5, &reset);
  check_response(&b, 1000, &step);
  free(long_text);
  lh_envs_bytes_free(&b);
}
END_TEST

START_TEST(test_requests) {
  lh_envs_bytes b = {0};
  Longhaul__EnvRequest empty = LONGHAUL__ENV_REQUEST__INIT;
  check_request(&b, 1, &empty);

  Longhaul__KeyValue kv1 = LONGHAUL__KEY_VALUE__INIT, kv2 = LONGHAUL__KEY_VALUE__INIT;
  kv1.key = "stages";
  kv1.value = "3";
  kv2.key = "show_document";
  kv2.value = "";
  Longhaul__KeyValue *kvs[] = {&kv1, &kv2};
  Longhaul__EnvRequest create = LONGHAUL__ENV_REQUEST__INIT;
  create.request_id = 1;
  create.op = LONGHAUL__ENV_OP__ENV_OP_CREATE;
  create.env_name = "calc";
  create.n_options = 2;
  create.options = kvs;
  check_request(&b, 1, &create);

  Longhaul__EnvRequest reset = LONGHAUL__ENV_REQUEST__INIT;
  reset.request_id = 128;
  reset.op = LONGHAUL__ENV_OP__ENV_OP_RESET;
  reset.session_id = 16384;
  reset.seed = UINT64_MAX;
  check_request(&b, 1, &reset);

  char *action = text_of(300);
  memcpy(action, "<call>calc(", 11);
  Longhaul__EnvRequest step = LONGHAUL__ENV_REQUEST__INIT;
  step.request_id = UINT64_MAX;
  step.op = LONGHAUL__ENV_OP__ENV_OP_STEP;
  step.session_id = 2;
  step.action = action;
  check_request(&b, 1, &step);
  step.action = "";
  check_request(&b, 1, &step);

  Longhaul__EnvRequest odd = LONGHAUL__ENV_REQUEST__INIT;
  odd.op = (Longhaul__EnvOp)-3;  /* an enum is an int32: sign-extended */
  check_request(&b, 77, &odd);
  free(action);
  lh_envs_bytes_free(&b);
}
END_TEST

int main(void) {
  Suite *su = suite_create("envs_pack");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_responses);
  tcase_add_test(tc, test_requests);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK);
}

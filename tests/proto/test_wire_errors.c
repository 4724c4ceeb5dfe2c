/* Tests of proto/wire's validation: one test per LH_EWIRE_* code, each
 * asserting the exact code, that nothing is handed out, and that the
 * message names the field (and, where it matters, the value and the
 * limit). Most go through encode and decode; faults only an in-memory
 * message can have (NULL pointers) go through lh_wire_validate. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/wire_fixture.h"

/* Encodes f->env, decodes it under lim (NULL: defaults) and asserts the
 * rejection: the exact code, no message handed out, and the error text
 * naming the field (needle). lh_wire_validate on the in-memory message
 * gives the same answer. */
static void expect_reject(wire_fixture *f, const lh_wire_limits *lim, int code, const char *needle) {
  size_t bytes = 0;
  uint8_t *buf = fx_encode(f, &bytes);
  Longhaul__Envelope *got = (Longhaul__Envelope *)buf;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_decode(buf, bytes, lim, &got, &err);
  ck_assert_msg(rc == code, "decode gave %s (%s), expected %s", lh_err_name(rc), err.msg,
                lh_err_name(code));
  ck_assert_ptr_null(got);
  ck_assert_int_eq(err.code, code);
  ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' does not name '%s'", err.msg, needle);
  lh_errbuf err2;
  ck_assert_int_eq(lh_wire_validate(&f->env, lim, &err2), code);
  ck_assert_str_eq(err2.msg, err.msg);
  free(buf);
}

/* For faults only a message built in memory can have (NULL pointers). */
static void expect_invalid(wire_fixture *f, int code, const char *needle) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_validate(&f->env, NULL, &err);
  ck_assert_msg(rc == code, "validate gave %s (%s), expected %s", lh_err_name(rc), err.msg,
                lh_err_name(code));
  ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' does not name '%s'", err.msg, needle);
}

static wire_fixture *fx_new(Longhaul__Envelope__BodyCase body) {
  wire_fixture *f = malloc(sizeof *f);
  ck_assert_ptr_nonnull(f);
  fx_init(f, body);
  return f;
}

static lh_wire_limits limits(void) {
  lh_wire_limits l;
  lh_wire_limits_default(&l);
  return l;
}

#define SEG LONGHAUL__ENVELOPE__BODY_SEGMENT

START_TEST(test_err_too_large) {
  wire_fixture *f = fx_new(SEG);
  size_t bytes = 0;
  uint8_t *buf = fx_encode(f, &bytes);
  lh_wire_limits lim = limits();
  lim.max_message_bytes = bytes;
  Longhaul__Envelope *got = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_decode(buf, bytes, &lim, &got, &err), 0); /* exactly at the limit */
  lh_wire_free(got);
  lim.max_message_bytes = bytes - 1;
  ck_assert_int_eq(lh_wire_decode(buf, bytes, &lim, &got, &err), LH_EWIRE_TOO_LARGE);
  ck_assert_ptr_null(got);
  ck_assert_ptr_nonnull(strstr(err.msg, "over the limit"));
  free(buf);

  /* A sender refuses what no receiver with default limits would take. */
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
  size_t big = (64u << 20) + 1;
  uint8_t *data = calloc(big, 1);
  ck_assert_ptr_nonnull(data);
  f->wc.data.data = data;
  f->wc.data.len = big;
  buf = NULL;
  ck_assert_int_eq(lh_wire_encode(&f->env, &buf, &bytes, &err), LH_EWIRE_TOO_LARGE);
  ck_assert_ptr_null(buf);
  ck_assert_ptr_nonnull(strstr(err.msg, "weights_chunk"));
  free(data);
  free(f);
}
END_TEST

START_TEST(test_err_unparseable) {
  wire_fixture *f = fx_new(SEG);
  size_t bytes = 0;
  uint8_t *buf = fx_encode(f, &bytes);
  Longhaul__Envelope *got = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_decode(buf, bytes - 3, NULL, &got, &err), LH_EWIRE_UNPARSEABLE);
  ck_assert_ptr_null(got);
  ck_assert_ptr_nonnull(strstr(err.msg, "envelope"));
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ck_assert_int_eq(lh_wire_decode(junk, sizeof junk, NULL, &got, &err), LH_EWIRE_UNPARSEABLE);
  free(buf);
  free(f);
}
END_TEST

START_TEST(test_err_no_body) {
  wire_fixture *f = fx_new(SEG);
  f->env.body_case = LONGHAUL__ENVELOPE__BODY__NOT_SET;
  f->env.segment = NULL;
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_encode(&f->env, &buf, &bytes, &err), LH_EWIRE_NO_BODY);
  /* What a foreign sender could still put on the wire. */
  bytes = longhaul__envelope__get_packed_size(&f->env);
  buf = malloc(bytes);
  longhaul__envelope__pack(&f->env, buf);
  Longhaul__Envelope *got = NULL;
  ck_assert_int_eq(lh_wire_decode(buf, bytes, NULL, &got, &err), LH_EWIRE_NO_BODY);
  ck_assert_ptr_null(got);
  ck_assert_ptr_nonnull(strstr(err.msg, "no body"));
  f->env.body_case = (Longhaul__Envelope__BodyCase)99;
  ck_assert_int_eq(lh_wire_validate(&f->env, NULL, &err), LH_EWIRE_NO_BODY);
  free(buf);
  free(f);
}
END_TEST

START_TEST(test_err_protocol) {
  wire_fixture *f = fx_new(SEG);
  f->env.protocol = 2;
  expect_reject(f, NULL, LH_EWIRE_PROTOCOL, "envelope.protocol=2");
  f->env.protocol = 0;
  expect_reject(f, NULL, LH_EWIRE_PROTOCOL, "envelope.protocol=0");
  free(f);
}
END_TEST

START_TEST(test_err_missing) {
  wire_fixture *f = fx_new(SEG);
  f->seg_imgp[1] = NULL;
  expect_invalid(f, LH_EWIRE_MISSING, "segment.images[1]");
  fx_init(f, SEG);
  f->seg.tokens = NULL;
  expect_invalid(f, LH_EWIRE_MISSING, "segment.tokens");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_EPISODE_END);
  f->end_termp[2] = NULL;
  expect_invalid(f, LH_EWIRE_MISSING, "episode_end.terms[2]");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST);
  f->kvp[0] = NULL;
  expect_invalid(f, LH_EWIRE_MISSING, "env_request.options[0]");
  fx_init(f, SEG);
  f->env.segment = NULL;
  expect_invalid(f, LH_EWIRE_MISSING, "envelope.segment");
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_encode(&f->env, &buf, &bytes, &err), LH_EWIRE_MISSING);
  ck_assert_int_eq(lh_wire_validate(NULL, NULL, &err), LH_EWIRE_MISSING);
  free(f);
}
END_TEST

START_TEST(test_err_string_too_long) {
  lh_errbuf ne;
  ck_assert_int_eq(lh_wire_check_name("a0", NULL, "--name", &ne), 0);
  ck_assert_int_eq(lh_wire_check_name("", NULL, "--name", &ne), LH_EWIRE_EMPTY_NAME);
  ck_assert_int_eq(lh_wire_check_name("a\xff", NULL, "--name", &ne), LH_EWIRE_UTF8);
  wire_fixture *f = fx_new(SEG);
  char name[258];
  memset(name, 'x', 257);
  name[257] = '\0';
  f->seg.actor = name;
  expect_reject(f, NULL, LH_EWIRE_STRING_TOO_LONG, "segment.actor is 257 bytes");
  name[256] = '\0'; /* exactly the limit is fine */
  fx_init(f, SEG);
  f->seg.actor = name;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_validate(&f->env, NULL, &err), 0);
  fx_init(f, SEG);
  f->env.sender = name;
  name[256] = 'x';
  expect_reject(f, NULL, LH_EWIRE_STRING_TOO_LONG, "envelope.sender");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  lh_wire_limits lim = limits();
  lim.max_text_bytes = 10;
  expect_reject(f, &lim, LH_EWIRE_STRING_TOO_LONG, "env_response.error"); /* "bad argument" */
  f->eresp.error = "short";
  expect_reject(f, &lim, LH_EWIRE_STRING_TOO_LONG, "env_response.observation.text");
  free(f);
}
END_TEST

START_TEST(test_err_utf8) {
  wire_fixture *f = fx_new(SEG);
  f->seg.env = "ca\xff" "c";
  expect_reject(f, NULL, LH_EWIRE_UTF8, "segment.env is not valid UTF-8 (bad byte 0xff at offset 2)");
  /* Overlong "/", a surrogate, above U+10FFFF, a cut sequence. */
  const char *bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"};
  for (int i = 0; i < 4; i++) {
    fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST);
    f->ereq.action = (char *)bad[i];
    expect_reject(f, NULL, LH_EWIRE_UTF8, "env_request.action");
  }
  free(f);
}
END_TEST

START_TEST(test_err_empty_name) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_EPISODE_END);
  f->end_term[1].name = "";
  expect_reject(f, NULL, LH_EWIRE_EMPTY_NAME, "episode_end.terms[1].name is empty");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_REQUEST);
  f->kv[1].key = "";
  expect_reject(f, NULL, LH_EWIRE_EMPTY_NAME, "env_request.options[1].key");
  free(f);
}
END_TEST

START_TEST(test_err_no_tokens) {
  wire_fixture *f = fx_new(SEG);
  Longhaul__Segment *s = &f->seg;
  s->n_tokens = s->loss_mask.len = s->n_behavior_logp = s->n_policy_version = 0;
  s->n_routed_experts = 0;
  s->n_images = 0;
  expect_reject(f, NULL, LH_EWIRE_NO_TOKENS, "segment.tokens is empty");
  free(f);
}
END_TEST

START_TEST(test_err_too_many_tokens) {
  wire_fixture *f = fx_new(SEG);
  lh_wire_limits lim = limits();
  lim.max_segment_tokens = FX_TOKENS - 1;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_TOKENS, "segment.tokens has 64 tokens");
  free(f);
}
END_TEST

START_TEST(test_err_token_range) {
  wire_fixture *f = fx_new(SEG);
  f->tokens[17] = 900;
  size_t bytes = 0;
  uint8_t *buf = fx_encode(f, &bytes);
  Longhaul__Envelope *got = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_decode(buf, bytes, NULL, &got, &err), LH_EWIRE_TOKEN_RANGE);
  ck_assert_str_eq(err.msg, "segment.tokens[17]=900 is not below vocab 264");
  free(buf);
  f->tokens[17] = 264;
  expect_reject(f, NULL, LH_EWIRE_TOKEN_RANGE, "segment.tokens[17]=264");
  f->tokens[17] = 263; /* the last id is fine */
  ck_assert_int_eq(lh_wire_validate(&f->env, NULL, &err), 0);
  lh_wire_limits lim = limits();
  lim.vocab = 100;
  f->tokens[3] = 100;
  expect_reject(f, &lim, LH_EWIRE_TOKEN_RANGE, "segment.tokens[3]=100 is not below vocab 100");
  free(f);
}
END_TEST

START_TEST(test_err_loss_mask_length) {
  wire_fixture *f = fx_new(SEG);
  f->seg.loss_mask.len = FX_TOKENS - 1;
  expect_reject(f, NULL, LH_EWIRE_LOSS_MASK_LENGTH, "segment.loss_mask is 63 bytes");
  free(f);
}
END_TEST

START_TEST(test_err_loss_mask_value) {
  wire_fixture *f = fx_new(SEG);
  f->mask[5] = 2;
  expect_reject(f, NULL, LH_EWIRE_LOSS_MASK_VALUE, "segment.loss_mask[5]=2");
  free(f);
}
END_TEST

START_TEST(test_err_logp_length) {
  wire_fixture *f = fx_new(SEG);
  f->seg.n_behavior_logp = FX_TOKENS - 2;
  expect_reject(f, NULL, LH_EWIRE_LOGP_LENGTH, "segment.behavior_logp has 62 entries");
  free(f);
}
END_TEST

START_TEST(test_err_logp_value) {
  wire_fixture *f = fx_new(SEG);
  f->logp[9] = NAN;
  expect_reject(f, NULL, LH_EWIRE_LOGP_VALUE, "segment.behavior_logp[9]=nan");
  f->logp[9] = -INFINITY;
  expect_reject(f, NULL, LH_EWIRE_LOGP_VALUE, "segment.behavior_logp[9]=-inf");
  f->logp[9] = 0.5f;
  expect_reject(f, NULL, LH_EWIRE_LOGP_VALUE, "segment.behavior_logp[9]=0.5");
  f->logp[9] = 0.0f; /* probability 1 is fine */
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_validate(&f->env, NULL, &err), 0);
  free(f);
}
END_TEST

START_TEST(test_err_version_length) {
  wire_fixture *f = fx_new(SEG);
  f->seg.n_policy_version = 10;
  expect_reject(f, NULL, LH_EWIRE_VERSION_LENGTH, "segment.policy_version has 10 entries");
  free(f);
}
END_TEST

START_TEST(test_err_routed_layers) {
  wire_fixture *f = fx_new(SEG);
  lh_wire_limits lim = limits();
  lim.max_layers = 3;
  expect_reject(f, &lim, LH_EWIRE_ROUTED_LAYERS, "segment.routed_layers=4 is over the limit of 3");
  free(f);
}
END_TEST

START_TEST(test_err_routed_topk) {
  wire_fixture *f = fx_new(SEG);
  f->seg.routed_topk = 0;
  f->seg.n_routed_experts = 0;
  expect_reject(f, NULL, LH_EWIRE_ROUTED_TOPK, "segment.routed_topk=0");
  fx_init(f, SEG);
  lh_wire_limits lim = limits();
  lim.max_topk = 1;
  expect_reject(f, &lim, LH_EWIRE_ROUTED_TOPK, "segment.routed_topk=2 is not in 1..1");
  fx_init(f, SEG);
  f->seg.routed_layers = 0; /* routing not recorded, yet a topk */
  f->seg.n_routed_experts = 0;
  expect_reject(f, NULL, LH_EWIRE_ROUTED_TOPK, "segment.routed_topk=2 but routed_layers is 0");
  f->seg.routed_topk = 0; /* no routing at all is fine */
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_validate(&f->env, NULL, &err), 0);
  free(f);
}
END_TEST

START_TEST(test_err_routed_length) {
  wire_fixture *f = fx_new(SEG);
  f->seg.n_routed_experts--;
  expect_reject(f, NULL, LH_EWIRE_ROUTED_LENGTH, "segment.routed_experts has 511 entries");
  fx_init(f, SEG);
  f->seg.routed_layers = 0;
  f->seg.routed_topk = 0;
  expect_reject(f, NULL, LH_EWIRE_ROUTED_LENGTH, "segment.routed_experts has 512 entries but routed_layers is 0");
  free(f);
}
END_TEST

START_TEST(test_err_expert_range) {
  wire_fixture *f = fx_new(SEG);
  /* token 2, layer 1, slot 1 */
  f->experts[2 * FX_LAYERS * FX_TOPK + 1 * FX_TOPK + 1] = 4096;
  expect_reject(f, NULL, LH_EWIRE_EXPERT_RANGE,
                "segment.routed_experts[19]=4096 (token 2, layer 1, slot 1) is not below max_experts 4096");
  free(f);
}
END_TEST

START_TEST(test_err_too_many_images) {
  wire_fixture *f = fx_new(SEG);
  lh_wire_limits lim = limits();
  lim.max_images = 1;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_IMAGES, "segment.images has 2 images");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  lim.max_images = 0;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_IMAGES, "env_response.observation.images has 1 images");
  free(f);
}
END_TEST

START_TEST(test_err_image_channels) {
  wire_fixture *f = fx_new(SEG);
  f->seg_img[1].channels = 2;
  f->seg_img[1].pixels.len = 5 * 4 * 2;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_CHANNELS, "segment.images[1].channels=2");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  f->obs_img.channels = 4;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_CHANNELS, "env_response.observation.images[0].channels=4");
  free(f);
}
END_TEST

START_TEST(test_err_image_size) {
  wire_fixture *f = fx_new(SEG);
  f->seg_img[0].width = 0;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_SIZE, "segment.images[0].width=0 is not in 1..4096");
  fx_init(f, SEG);
  lh_wire_limits lim = limits();
  lim.max_image_side = 5;
  expect_reject(f, &lim, LH_EWIRE_IMAGE_SIZE, "segment.images[0].width=8 is not in 1..5");
  fx_init(f, SEG);
  f->seg_img[1].height = 4097;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_SIZE, "segment.images[1].height=4097");
  free(f);
}
END_TEST

START_TEST(test_err_image_bytes) {
  wire_fixture *f = fx_new(SEG);
  f->seg_img[0].pixels.len--;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_BYTES, "segment.images[0].pixels is 143 bytes, not width*height*channels = 8x6x3 = 144");
  free(f);
}
END_TEST

START_TEST(test_err_image_offset) {
  wire_fixture *f = fx_new(SEG);
  f->seg_img[1].offset = FX_TOKENS;
  expect_reject(f, NULL, LH_EWIRE_IMAGE_OFFSET, "segment.images[1].offset=64 is not below the token count 64");
  free(f);
}
END_TEST

START_TEST(test_err_offset_overflow) {
  wire_fixture *f = fx_new(SEG);
  f->seg.start_offset = UINT64_MAX - 10;
  expect_reject(f, NULL, LH_EWIRE_OFFSET_OVERFLOW, "segment.start_offset");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST);
  f->wr.first_chunk = UINT32_MAX - 2;
  expect_reject(f, NULL, LH_EWIRE_OFFSET_OVERFLOW, "weights_request.first_chunk");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
  f->wc.offset = UINT64_MAX - 999;
  expect_reject(f, NULL, LH_EWIRE_OFFSET_OVERFLOW, "weights_chunk.offset");
  free(f);
}
END_TEST

START_TEST(test_err_outcome) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_EPISODE_END);

  f->end.outcome = LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED;
  expect_reject(f, NULL, LH_EWIRE_OUTCOME, "episode_end.outcome=0");
  f->end.outcome = (Longhaul__Outcome)9;
  expect_reject(f, NULL, LH_EWIRE_OUTCOME, "episode_end.outcome=9");
  free(f);
}
END_TEST

START_TEST(test_err_not_finite) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_EPISODE_END);
  f->end.reward = INFINITY;
  expect_reject(f, NULL, LH_EWIRE_NOT_FINITE, "episode_end.reward=inf");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_EPISODE_END);
  f->end_term[2].value = NAN;
  expect_reject(f, NULL, LH_EWIRE_NOT_FINITE, "episode_end.terms[2].value=nan");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  f->eresp.reward = -INFINITY;
  expect_reject(f, NULL, LH_EWIRE_NOT_FINITE, "env_response.reward=-inf");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  f->resp_term[0].value = NAN;
  expect_reject(f, NULL, LH_EWIRE_NOT_FINITE, "env_response.terms[0].value");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  f->wa.long_frac = NAN;
  expect_reject(f, NULL, LH_EWIRE_NOT_FINITE, "weights_announce.long_frac");
  free(f);
}
END_TEST

START_TEST(test_err_too_many_terms) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_EPISODE_END);
  lh_wire_limits lim = limits();
  lim.max_terms = 2;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_TERMS, "episode_end.terms has 3 terms");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  lim.max_terms = 1;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_TERMS, "env_response.terms has 2 terms");
  free(f);
}
END_TEST

START_TEST(test_err_too_many_ids) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_ACK);
  lh_wire_limits lim = limits();
  lim.max_ids = 4;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_IDS, "ack.msg_ids has 5 ids");
  free(f);
}
END_TEST

START_TEST(test_err_ack_status) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_ACK);
  f->ack.status = (Longhaul__AckStatus)7;
  expect_reject(f, NULL, LH_EWIRE_ACK_STATUS, "ack.status=7");
  free(f);
}
END_TEST

START_TEST(test_err_chunk_too_large) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
  lh_wire_limits lim = limits();
  lim.max_chunk_bytes = FX_CHUNK - 1;
  expect_reject(f, &lim, LH_EWIRE_CHUNK_TOO_LARGE, "weights_chunk.data is 1000 bytes, over the limit of 999");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  expect_reject(f, &lim, LH_EWIRE_CHUNK_TOO_LARGE, "weights_announce.chunk_bytes=1000");
  free(f);
}
END_TEST

START_TEST(test_err_chunk_checksum) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
  f->chunk[100] ^= 1;
  expect_reject(f, NULL, LH_EWIRE_CHUNK_CHECKSUM, "weights_chunk.checksum");
  /* A receiver that checks every chunk itself may skip the hash here. */
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lim.skip_chunk_checksums = 1;
  ck_assert_int_eq(lh_wire_validate(&f->env, &lim, NULL), 0);
  free(f);
}
END_TEST

START_TEST(test_err_weights_layout) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  f->wa.chunk_count = 10; /* 10001 bytes in chunks of 1000 need 11 */
  expect_reject(f, NULL, LH_EWIRE_WEIGHTS_LAYOUT, "weights_announce.chunk_count=10");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  f->wa.chunk_bytes = 0;
  expect_reject(f, NULL, LH_EWIRE_WEIGHTS_LAYOUT, "weights_announce.chunk_bytes is 0");
  free(f);
}
END_TEST

START_TEST(test_err_env_op) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_ENV_REQUEST);
  f->ereq.op = LONGHAUL__ENV_OP__ENV_OP_UNSPECIFIED;
  expect_reject(f, NULL, LH_EWIRE_ENV_OP, "env_request.op=0");
  f->ereq.op = (Longhaul__EnvOp)42;
  expect_reject(f, NULL, LH_EWIRE_ENV_OP, "env_request.op=42");
  free(f);
}
END_TEST

START_TEST(test_err_too_many_options) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_ENV_REQUEST);
  lh_wire_limits lim = limits();
  lim.max_options = 1;
  expect_reject(f, &lim, LH_EWIRE_TOO_MANY_OPTIONS, "env_request.options has 2 entries");
  free(f);
}
END_TEST

START_TEST(test_err_value_range) {
  wire_fixture *f = fx_new(LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  f->wa.long_frac = 1.5f;
  expect_reject(f, NULL, LH_EWIRE_VALUE_RANGE, "weights_announce.long_frac=1.5 is not in 0..1");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_HELLO);
  f->hello.layers = 257;
  expect_reject(f, NULL, LH_EWIRE_VALUE_RANGE, "hello.layers=257");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_HELLO);
  f->hello.topk = 65;
  expect_reject(f, NULL, LH_EWIRE_VALUE_RANGE, "hello.topk=65");
  fx_init(f, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  f->eresp.status = 3;
  expect_reject(f, NULL, LH_EWIRE_VALUE_RANGE, "env_response.status=3");
  free(f);
}
END_TEST

/* A flood of empty images: tiny on the wire, fifty-fold in memory. */
START_TEST(test_err_expansion) {
  size_t n, body;
  uint8_t *buf = fx_image_flood(500000, &n, &body);
  ck_assert_ptr_nonnull(buf);
  Longhaul__Envelope *got = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_decode(buf, n, NULL, &got, &err), LH_EWIRE_EXPANSION);
  ck_assert_ptr_null(got);
  ck_assert_ptr_nonnull(strstr(err.msg, "envelope"));
  Longhaul__Segment *seg = NULL;
  ck_assert_int_eq(lh_wire_segment_decode(buf + body, n - body, NULL, &seg, &err), LH_EWIRE_EXPANSION);
  ck_assert_ptr_null(seg);
  ck_assert_ptr_nonnull(strstr(err.msg, "segment"));
  free(buf);
}
END_TEST

/* The largest segment the default limits take parses within the budget;
 * one token more is refused. */
START_TEST(test_largest_segment) {
  lh_wire_limits lim = limits();
  size_t n = lim.max_segment_tokens;
  Longhaul__Segment s = LONGHAUL__SEGMENT__INIT;
  uint32_t *tokens = malloc((n + 1) * sizeof *tokens), *ver = malloc((n + 1) * sizeof *ver);
  uint32_t *experts = malloc((n + 1) * 8 * sizeof *experts);
  float *logp = malloc((n + 1) * sizeof *logp);
  uint8_t *mask = malloc(n + 1);
  for (size_t i = 0; i <= n; i++) {
    tokens[i] = (uint32_t)(i % 264), ver[i] = 5, logp[i] = -1.0f, mask[i] = 1;
    for (int k = 0; k < 8; k++) experts[i * 8 + k] = (uint32_t)k;
  }
  s.n_tokens = s.loss_mask.len = s.n_behavior_logp = s.n_policy_version = n;
  s.tokens = tokens, s.loss_mask.data = mask, s.behavior_logp = logp, s.policy_version = ver;
  s.routed_layers = 4, s.routed_topk = 2, s.n_routed_experts = n * 8, s.routed_experts = experts;
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_segment_encode(&s, &buf, &bytes, &err), 0);
  Longhaul__Segment *got = NULL;
  ck_assert_msg(lh_wire_segment_decode(buf, bytes, NULL, &got, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(got->n_tokens, n);
  lh_wire_segment_free(got);
  free(buf);
  s.n_tokens = s.loss_mask.len = s.n_behavior_logp = s.n_policy_version = n + 1;
  s.n_routed_experts = (n + 1) * 8;
  ck_assert_int_eq(lh_wire_segment_encode(&s, &buf, &bytes, &err), 0);
  ck_assert_int_eq(lh_wire_segment_decode(buf, bytes, NULL, &got, &err), LH_EWIRE_TOO_MANY_TOKENS);
  ck_assert_str_eq(err.msg, "segment.tokens has 65537 tokens, over the limit of 65536");
  free(buf);
  free(tokens), free(ver), free(experts), free(logp), free(mask);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wire_errors");
  TCase *tc = tcase_create("validation");
  tcase_add_test(tc, test_err_too_large);
  tcase_add_test(tc, test_err_unparseable);
  tcase_add_test(tc, test_err_no_body);
  tcase_add_test(tc, test_err_protocol);
  tcase_add_test(tc, test_err_missing);
  tcase_add_test(tc, test_err_string_too_long);
  tcase_add_test(tc, test_err_utf8);
  tcase_add_test(tc, test_err_empty_name);
  tcase_add_test(tc, test_err_no_tokens);
  tcase_add_test(tc, test_err_too_many_tokens);
  tcase_add_test(tc, test_err_token_range);
  tcase_add_test(tc, test_err_loss_mask_length);
  tcase_add_test(tc, test_err_loss_mask_value);
  tcase_add_test(tc, test_err_logp_length);
  tcase_add_test(tc, test_err_logp_value);
  tcase_add_test(tc, test_err_version_length);
  tcase_add_test(tc, test_err_routed_layers);
  tcase_add_test(tc, test_err_routed_topk);
  tcase_add_test(tc, test_err_routed_length);
  tcase_add_test(tc, test_err_expert_range);
  tcase_add_test(tc, test_err_too_many_images);
  tcase_add_test(tc, test_err_image_channels);
  tcase_add_test(tc, test_err_image_size);
  tcase_add_test(tc, test_err_image_bytes);
  tcase_add_test(tc, test_err_image_offset);
  tcase_add_test(tc, test_err_offset_overflow);
  tcase_add_test(tc, test_err_outcome);
  tcase_add_test(tc, test_err_not_finite);
  tcase_add_test(tc, test_err_too_many_terms);
  tcase_add_test(tc, test_err_too_many_ids);
  tcase_add_test(tc, test_err_ack_status);
  tcase_add_test(tc, test_err_chunk_too_large);
  tcase_add_test(tc, test_err_chunk_checksum);
  tcase_add_test(tc, test_err_weights_layout);
  tcase_add_test(tc, test_err_env_op);
  tcase_add_test(tc, test_err_too_many_options);
  tcase_add_test(tc, test_err_value_range);
  tcase_add_test(tc, test_err_expansion);
  tcase_add_test(tc, test_largest_segment);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

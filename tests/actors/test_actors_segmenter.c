/* Tests of actors/segmenter.c: boundaries, sequence numbers, offsets, exact
 * arrays, images, the EpisodeEnd, and every error path. Each message the
 * segmenter hands out is checked with lh_wire_validate and round-tripped
 * through the real protobuf-c codec. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "proto/wire.h"

enum { L = 2, K = 2 };

static lh_actors_segmenter_config config(uint32_t segment_tokens) {
  lh_actors_segmenter_config c = {.episode_id = 77, .group_id = 5, .task_seed = 1234, .actor = "a0",
                           .env = "calc", .segment_tokens = segment_tokens, .vocab = 264,
                           .routed_layers = L, .routed_topk = K, .experts = 16};
  return c;
}

/* The token, mask, logp, version and experts of episode offset i. */
static uint32_t tok_at(uint64_t i) { return (uint32_t)((i * 37 + 3) % 264); }
static int sampled_at(uint64_t i) { return i % 3 != 0; }
static float logp_at(uint64_t i) { return -0.01f * (float)(i + 1); }
static uint32_t version_at(uint64_t i) { return (uint32_t)(i / 5); }
static void experts_at(uint64_t i, uint32_t *e) {
  for (int j = 0; j < L * K; j++) e[j] = (uint32_t)((i + (uint64_t)j * 3) % 16);
}

static void push_range(lh_actors_segmenter *s, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) {
    uint32_t e[L * K];
    experts_at(i, e);
    lh_errbuf err;
    int rc = lh_actors_segmenter_push(s, tok_at(i), sampled_at(i), logp_at(i), version_at(i), e, &err);
    ck_assert_msg(rc >= 0, "push %llu: %s", (unsigned long long)i, err.msg);
  }
}

/* Validates seg as it would travel and checks it through encode/decode. */
static void check_wire_segment(Longhaul__Segment *seg) {
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 1;
  env.sender = "a0";
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT;
  env.segment = seg;
  lh_errbuf err;
  ck_assert_msg(lh_wire_validate(&env, NULL, &err) == 0, "validate: %s", err.msg);
  uint8_t *buf;
  size_t n;
  ck_assert_int_eq(lh_wire_encode(&env, &buf, &n, &err), 0);
  Longhaul__Envelope *back;
  ck_assert_msg(lh_wire_decode(buf, n, NULL, &back, &err) == 0, "decode: %s", err.msg);
  ck_assert_uint_eq(back->segment->n_tokens, seg->n_tokens);
  ck_assert_int_eq(memcmp(back->segment->tokens, seg->tokens, seg->n_tokens * 4), 0);
  lh_wire_free(back);
  free(buf);
}

static void check_wire_end(Longhaul__EpisodeEnd *end) {
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  env.episode_end = end;
  lh_errbuf err;
  ck_assert_msg(lh_wire_validate(&env, NULL, &err) == 0, "validate: %s", err.msg);
}

/* Checks a popped segment against the generators above. */
static void check_segment(Longhaul__Segment *seg, uint32_t seq, uint64_t start, size_t n) {
  ck_assert_ptr_nonnull(seg);
  ck_assert_uint_eq(seg->seq, seq);
  ck_assert_uint_eq(seg->start_offset, start);
  ck_assert_uint_eq(seg->n_tokens, n);
  ck_assert_uint_eq(seg->episode_id, 77);
  ck_assert_uint_eq(seg->group_id, 5);
  ck_assert_uint_eq(seg->task_seed, 1234);
  ck_assert_str_eq(seg->actor, "a0");
  ck_assert_str_eq(seg->env, "calc");
  ck_assert_uint_eq(seg->routed_layers, L);
  ck_assert_uint_eq(seg->routed_topk, K);
  ck_assert_uint_eq(seg->n_routed_experts, n * L * K);
  for (size_t j = 0; j < n; j++) {
    uint64_t i = start + j;
    ck_assert_uint_eq(seg->tokens[j], tok_at(i));
    ck_assert_uint_eq(seg->loss_mask.data[j], (uint8_t)sampled_at(i));
    ck_assert(seg->behavior_logp[j] == (sampled_at(i) ? logp_at(i) : 0.0f));
    ck_assert_uint_eq(seg->policy_version[j], version_at(i));
    uint32_t e[L * K];
    experts_at(i, e);
    ck_assert_int_eq(memcmp(seg->routed_experts + j * L * K, e, sizeof e), 0);
  }
  check_wire_segment(seg);
}

START_TEST(test_boundaries_and_final_partial) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  ck_assert_ptr_nonnull(s);
  push_range(s, 0, 3);
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 0);
  ck_assert_ptr_null(lh_actors_segmenter_pop(s));
  push_range(s, 3, 4);  /* full: cut at once */
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 1);
  Longhaul__Segment *seg = lh_actors_segmenter_pop(s);
  check_segment(seg, 0, 0, 4);
  lh_actors_segment_free(seg);
  push_range(s, 4, 10);
  ck_assert_uint_eq(lh_actors_segmenter_tokens(s), 10);
  ck_assert_uint_eq(lh_actors_segmenter_segments(s), 2);
  seg = lh_actors_segmenter_pop(s);
  check_segment(seg, 1, 4, 4);
  lh_actors_segment_free(seg);
  ck_assert_ptr_null(lh_actors_segmenter_pop(s));

  lh_actors_reward_term terms[2] = {{"correct", 1.0f, 3}, {"format", -0.25f, 2}};
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, .reward = 0.75f,
                           .terms = terms, .n_terms = 2, .steps = 3};
  Longhaul__EpisodeEnd *end;
  lh_errbuf err;
  ck_assert_msg(lh_actors_segmenter_finish(s, &res, &end, &err) == 0, "%s", err.msg);
  seg = lh_actors_segmenter_pop(s);
  check_segment(seg, 2, 8, 2);
  lh_actors_segment_free(seg);
  ck_assert_ptr_null(lh_actors_segmenter_pop(s));
  ck_assert_uint_eq(end->episode_id, 77);
  ck_assert_uint_eq(end->segment_count, 3);
  ck_assert_uint_eq(end->total_tokens, 10);
  ck_assert_int_eq(end->outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert(end->reward == 0.75f);
  ck_assert_uint_eq(end->group_id, 5);
  ck_assert_uint_eq(end->task_seed, 1234);
  ck_assert_uint_eq(end->steps, 3);
  ck_assert_uint_eq(end->n_terms, 2);
  ck_assert_str_eq(end->terms[1]->name, "format");
  ck_assert(end->terms[1]->value == -0.25f);
  ck_assert_uint_eq(end->terms[0]->step, 3);
  ck_assert_str_eq(end->actor, "a0");
  check_wire_end(end);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}
END_TEST

/* An environment's long error is cut to what the learner takes (at a
 * character's start), not sent whole to be refused. */
START_TEST(test_long_error_cut) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  push_range(s, 0, 3);
  static char why[10000];
  for (size_t i = 0; i + 2 < sizeof why; i += 2) why[i] = (char)0xc3, why[i + 1] = (char)0xa9; /* e-acute */
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_ERROR, .error = why};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, NULL), 0);
  ck_assert_uint_eq(strlen(end->error), 4096);
  check_wire_end(end);
  lh_actors_episode_end_free(end);
  while (lh_actors_segmenter_ready(s)) lh_actors_segment_free(lh_actors_segmenter_pop(s));
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_exact_multiple_has_no_empty_segment) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  push_range(s, 0, 8);
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 2);
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_FAILURE};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, NULL), 0);
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 2);
  ck_assert_uint_eq(end->segment_count, 2);
  ck_assert_uint_eq(end->total_tokens, 8);
  check_wire_end(end);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);  /* frees the two segments never popped */
}
END_TEST

START_TEST(test_long_episode_one_token_segments) {
  lh_actors_segmenter_config c = config(1);
  c.routed_layers = 0, c.routed_topk = 0;
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  for (uint32_t i = 0; i < 1000; i++) {
    ck_assert_int_eq(lh_actors_segmenter_push(s, i % 264, 1, -1.0f, 3, NULL, NULL), 1);
    Longhaul__Segment *seg = lh_actors_segmenter_pop(s);
    ck_assert_uint_eq(seg->seq, i);
    ck_assert_uint_eq(seg->start_offset, i);
    ck_assert_uint_eq(seg->n_tokens, 1);
    ck_assert_uint_eq(seg->routed_layers, 0);
    ck_assert_uint_eq(seg->n_routed_experts, 0);
    if (i % 100 == 0) check_wire_segment(seg);
    lh_actors_segment_free(seg);
  }
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, .reward = 0.0f};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, NULL), 0);
  ck_assert_uint_eq(end->segment_count, 1000);
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 0);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_images_relative_to_segment) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  uint8_t px[2 * 3 * 3];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)i;
  uint8_t gray[5] = {9, 8, 7, 6, 5};
  push_range(s, 0, 3);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 2, 3, 3, px, NULL), 0);  /* offset 3: last of seg 0 */
  push_range(s, 3, 4);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 5, 1, 1, gray, NULL), 0);  /* offset 4: first of seg 1 */
  push_range(s, 4, 5);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 2, 3, 3, px, NULL), 0);  /* offset 5 */
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 5, 1, 1, gray, NULL), 0);  /* offset 5 too */
  push_range(s, 5, 6);
  Longhaul__Segment *seg = lh_actors_segmenter_pop(s);
  ck_assert_uint_eq(seg->n_images, 1);
  ck_assert_uint_eq(seg->images[0]->offset, 3);
  ck_assert_uint_eq(seg->images[0]->width, 2);
  ck_assert_uint_eq(seg->images[0]->height, 3);
  ck_assert_uint_eq(seg->images[0]->channels, 3);
  ck_assert_uint_eq(seg->images[0]->pixels.len, sizeof px);
  ck_assert_int_eq(memcmp(seg->images[0]->pixels.data, px, sizeof px), 0);
  check_segment(seg, 0, 0, 4);
  lh_actors_segment_free(seg);
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, .reward = 1.0f};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, NULL), 0);
  seg = lh_actors_segmenter_pop(s);
  ck_assert_uint_eq(seg->n_images, 3);
  ck_assert_uint_eq(seg->images[0]->offset, 0);
  ck_assert_uint_eq(seg->images[0]->channels, 1);
  ck_assert_uint_eq(seg->images[1]->offset, 1);
  ck_assert_uint_eq(seg->images[2]->offset, 1);
  ck_assert_int_eq(memcmp(seg->images[2]->pixels.data, gray, sizeof gray), 0);
  check_segment(seg, 1, 4, 2);
  lh_actors_segment_free(seg);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_empty_episode) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_ABORTED, .error = "env server died"};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, NULL), 0);
  ck_assert_uint_eq(end->segment_count, 0);
  ck_assert_uint_eq(end->total_tokens, 0);
  ck_assert_str_eq(end->error, "env server died");
  ck_assert_ptr_null(lh_actors_segmenter_pop(s));
  check_wire_end(end);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_unsampled_logp_stored_as_zero) {
  lh_actors_segmenter_config c = config(2);
  c.routed_layers = 0, c.routed_topk = 0;
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  ck_assert_int_eq(lh_actors_segmenter_push(s, 10, 0, NAN, 0, NULL, NULL), 0);
  ck_assert_int_eq(lh_actors_segmenter_push(s, 11, 0, 5.0f, 0, NULL, NULL), 1);
  Longhaul__Segment *seg = lh_actors_segmenter_pop(s);
  ck_assert(seg->behavior_logp[0] == 0.0f && seg->behavior_logp[1] == 0.0f);
  check_wire_segment(seg);
  lh_actors_segment_free(seg);
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_config_errors) {
  lh_errbuf e;
  lh_actors_segmenter_config c = config(0);
  ck_assert_ptr_null(lh_actors_segmenter_new(&c, &e));
  ck_assert_int_eq(e.code, LH_EACTORS_SEGMENT_CONFIG);
  ck_assert(strstr(e.msg, "segment_tokens=0"));
  c = config(70000);
  ck_assert_ptr_null(lh_actors_segmenter_new(&c, &e));
  ck_assert(strstr(e.msg, "segment_tokens=70000"));
  c = config(4);
  c.routed_topk = 0;
  ck_assert_ptr_null(lh_actors_segmenter_new(&c, &e));
  ck_assert(strstr(e.msg, "routed_topk=0"));
  c = config(4);
  c.routed_layers = 0;
  ck_assert_ptr_null(lh_actors_segmenter_new(&c, &e));
  ck_assert(strstr(e.msg, "routed_layers=0"));
  char longname[300];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  c = config(4);
  c.env = longname;
  ck_assert_ptr_null(lh_actors_segmenter_new(&c, &e));
  ck_assert(strstr(e.msg, "env name"));
  ck_assert_ptr_null(lh_actors_segmenter_new(NULL, &e));
  ck_assert_int_eq(e.code, LH_EINVAL);
  lh_actors_segmenter_free(NULL);
  lh_actors_segment_free(NULL);
  lh_actors_episode_end_free(NULL);
}
END_TEST

START_TEST(test_push_errors) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  uint32_t e4[L * K] = {0, 1, 2, 3}, bad[L * K] = {0, 1, 16, 3};
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_segmenter_push(s, 264, 1, -1.0f, 0, e4, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert(strstr(e.msg, "token 264"));
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 2, -1.0f, 0, e4, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert(strstr(e.msg, "sampled=2"));
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 1, 0.5f, 0, e4, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert(strstr(e.msg, "behavior_logp"));
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 1, NAN, 0, e4, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 1, -INFINITY, 0, e4, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 1, -1.0f, 0, NULL, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert(strstr(e.msg, "no experts"));
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 1, -1.0f, 0, bad, &e), LH_EACTORS_SEGMENT_TOKEN);
  ck_assert(strstr(e.msg, "expert 16 (layer 1, slot 0)"));
  ck_assert_int_eq(lh_actors_segmenter_push(NULL, 1, 1, -1.0f, 0, e4, &e), LH_EINVAL);
  /* Nothing was appended by the failed pushes. */
  ck_assert_uint_eq(lh_actors_segmenter_tokens(s), 0);
  uint8_t px[3] = {1, 2, 3};
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 1, 2, px, &e), LH_EACTORS_SEGMENT_IMAGE);
  ck_assert(strstr(e.msg, "channels=2"));
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 0, 1, 3, px, &e), LH_EACTORS_SEGMENT_IMAGE);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 5000, 3, px, &e), LH_EACTORS_SEGMENT_IMAGE);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 1, 3, NULL, &e), LH_EACTORS_SEGMENT_IMAGE);
  ck_assert_int_eq(lh_actors_segmenter_push_image(NULL, 1, 1, 3, px, &e), LH_EINVAL);
  lh_actors_segmenter_free(s);
}
END_TEST

START_TEST(test_finish_errors) {
  lh_actors_segmenter_config c = config(4);
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  push_range(s, 0, 2);
  uint8_t px[3] = {1, 2, 3};
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 1, 3, px, NULL), 0);
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, .reward = 1.0f};
  Longhaul__EpisodeEnd *end = (Longhaul__EpisodeEnd *)&res;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_IMAGE);
  ck_assert(strstr(e.msg, "no token followed"));
  ck_assert_ptr_null(end);
  push_range(s, 2, 3);
  res.outcome = LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_RESULT);
  ck_assert(strstr(e.msg, "outcome"));
  res.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
  res.reward = NAN;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_RESULT);
  ck_assert(strstr(e.msg, "reward"));
  res.reward = 1.0f;
  lh_actors_reward_term t = {"", 1.0f, 0};
  res.terms = &t, res.n_terms = 1;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_RESULT);
  ck_assert(strstr(e.msg, "term 0"));
  res.terms = NULL;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_RESULT);
  t.name = "x", t.value = INFINITY, res.terms = &t;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_RESULT);
  ck_assert(strstr(e.msg, "terms[0].value"));
  /* The failures cut nothing; a good result still works, once. */
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 0);
  res.n_terms = 0;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), 0);
  ck_assert_uint_eq(end->segment_count, 1);
  ck_assert_uint_eq(lh_actors_segmenter_ready(s), 1);
  lh_actors_episode_end_free(end);
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), LH_EACTORS_SEGMENT_FINISHED);
  ck_assert_int_eq(lh_actors_segmenter_push(s, 1, 0, 0.0f, 0, NULL, &e), LH_EACTORS_SEGMENT_FINISHED);
  ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 1, 3, px, &e), LH_EACTORS_SEGMENT_FINISHED);
  ck_assert_int_eq(lh_actors_segmenter_finish(s, NULL, &end, &e), LH_EINVAL);
  lh_actors_segmenter_free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_segmenter");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_boundaries_and_final_partial);
  tcase_add_test(tc, test_exact_multiple_has_no_empty_segment);
  tcase_add_test(tc, test_long_error_cut);
  tcase_add_test(tc, test_long_episode_one_token_segments);
  tcase_add_test(tc, test_images_relative_to_segment);
  tcase_add_test(tc, test_empty_episode);
  tcase_add_test(tc, test_unsampled_logp_stored_as_zero);
  tcase_add_test(tc, test_config_errors);
  tcase_add_test(tc, test_push_errors);
  tcase_add_test(tc, test_finish_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

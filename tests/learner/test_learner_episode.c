/* Tests of learner/episode.c on segments cut by the real segmenter
 * (actors/) and sent through the real codec: the join in any order, image
 * offsets, versions, the advantage broadcast, windows, and each kind of
 * inconsistency. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proto/wire.h"

enum { TOK = 23, SEG = 5, L = 2, K = 2 };

typedef struct {
  Longhaul__Segment *segs[16];
  size_t n;
  uint64_t total;
} episode_fixture;

/* Cuts an episode of TOK tokens (versions 3..7, every third token not
 * sampled, an image before token 12) and decodes each segment as stored. */
static void make(episode_fixture *f, uint64_t episode_id) {
  lh_actors_segmenter_config c = {.episode_id = episode_id, .group_id = 4, .task_seed = 99, .actor = "a",
                                  .env = "calc", .segment_tokens = SEG, .routed_layers = L,
                                  .routed_topk = K, .experts = 16};
  lh_actors_segmenter *s = lh_actors_segmenter_new(&c, NULL);
  uint8_t px[3] = {1, 2, 3};
  for (uint32_t i = 0; i < TOK; i++) {
    uint32_t e[L * K] = {i % 16, (i + 1) % 16, (i + 2) % 16, (i + 3) % 16};
    if (i == 12) ck_assert_int_eq(lh_actors_segmenter_push_image(s, 1, 1, 3, px, NULL), 0);
    int sampled = i % 3 != 0;
    ck_assert_int_ge(lh_actors_segmenter_push(s, 100 + i, sampled, -0.5f - (float)i, 3 + i / 5, e, NULL), 0);
  }
  lh_actors_episode_result r = {.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, .reward = 1};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &r, &end, NULL), 0);
  f->total = end->total_tokens;
  f->n = 0;
  Longhaul__Segment *seg;
  while ((seg = lh_actors_segmenter_pop(s))) {
    uint8_t *buf;
    size_t n;
    ck_assert_int_eq(lh_wire_segment_encode(seg, &buf, &n, NULL), 0);
    ck_assert_int_eq(lh_wire_segment_decode(buf, n, NULL, &f->segs[f->n++], NULL), 0);
    free(buf);
    lh_actors_segment_free(seg);
  }
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}

static void unmake(episode_fixture *f) {
  for (size_t i = 0; i < f->n; i++) lh_wire_segment_free(f->segs[i]);
}

START_TEST(test_join_in_any_order) {
  episode_fixture f;
  make(&f, 5);
  ck_assert_uint_eq(f.n, 5);
  /* Reverse the order: the join sorts by seq. */
  Longhaul__Segment *rev[16];
  for (size_t i = 0; i < f.n; i++) rev[i] = f.segs[f.n - 1 - i];
  lh_learner_episode *ep;
  lh_errbuf e;
  ck_assert_msg(lh_learner_episode_join(rev, f.n, f.total, &ep, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(ep->episode_id, 5);
  ck_assert_uint_eq(ep->group_id, 4);
  ck_assert_uint_eq(ep->task_seed, 99);
  ck_assert_uint_eq(ep->n, TOK);
  size_t sampled = 0;
  for (uint32_t i = 0; i < TOK; i++) {
    ck_assert_uint_eq(ep->tokens[i], 100 + i);
    ck_assert_uint_eq(ep->loss_mask[i], i % 3 != 0);
    ck_assert(ep->behavior_logp[i] == (i % 3 ? -0.5f - (float)i : 0.0f));
    ck_assert_uint_eq(ep->policy_version[i], 3 + i / 5);
    ck_assert_uint_eq(ep->routed_experts[i * L * K + 3], (i + 3) % 16);
    sampled += i % 3 != 0;
  }
  ck_assert_uint_eq(ep->sampled, sampled);
  ck_assert_uint_eq(ep->oldest_version, 3);
  ck_assert_uint_eq(ep->newest_version, 7);
  ck_assert_uint_eq(ep->n_images, 1);
  ck_assert_uint_eq(ep->image_offsets[0], 12);
  ck_assert_uint_eq(ep->images[0]->offset, 2);  /* within segment 2 */
  float adv[TOK];
  lh_learner_episode_broadcast(ep, 0.75f, adv);
  for (uint32_t i = 0; i < TOK; i++) ck_assert(adv[i] == (i % 3 ? 0.75f : 0.0f));
  /* the 1x1 image at patch 1: one patch at 13, after its <img> at 12; the
   * spans give lh_model_window_end the image to keep whole */
  lh_model_span sp[1];
  ck_assert_uint_eq(lh_learner_episode_spans(ep, 1, sp), 1);
  ck_assert_uint_eq(sp[0].count, 1);
  ck_assert_uint_eq(sp[0].first, 13);
  size_t e0 = lh_model_window_end(0, TOK, 10, sp, 1);
  ck_assert(e0 <= sp[0].first || e0 >= sp[0].first + sp[0].count);
  ck_assert_uint_eq(lh_model_window_end(20, TOK, 10, NULL, 0), TOK);
  lh_learner_episode_free(ep);
  lh_learner_episode_free(NULL);
  unmake(&f);
}
END_TEST

START_TEST(test_oldest_version_of_sampled_tokens) {
  /* The first token (not sampled) carries version 3; if all of segment 0
   * but it is marked unsampled, the oldest sampled version moves up. */
  episode_fixture f;
  make(&f, 6);
  for (size_t j = 0; j < f.segs[0]->n_tokens; j++) f.segs[0]->loss_mask.data[j] = 0;
  lh_learner_episode *ep;
  ck_assert_int_eq(lh_learner_episode_join(f.segs, f.n, f.total, &ep, NULL), 0);
  ck_assert_uint_eq(ep->oldest_version, 4);
  lh_learner_episode_free(ep);
  unmake(&f);
}
END_TEST

START_TEST(test_join_errors) {
  episode_fixture f, g;
  make(&f, 5);
  make(&g, 8);
  lh_learner_episode *ep = (lh_learner_episode *)&f;
  lh_errbuf e;
  const int S = LH_ELEARNER_EPISODE_SEGMENTS;
  /* A missing segment: seq 4 of 4 segments, and the token count. */
  ck_assert_int_eq(lh_learner_episode_join(f.segs + 1, 4, f.total, &ep, &e), S);
  ck_assert_ptr_null(ep);
  ck_assert(strstr(e.msg, "seq 4 but only 4"));
  Longhaul__Segment *first4[4] = {f.segs[0], f.segs[1], f.segs[2], f.segs[3]};
  ck_assert_int_eq(lh_learner_episode_join(first4, 4, f.total, &ep, &e), S);
  ck_assert(strstr(e.msg, "hold 20 tokens, its end says 23"));
  /* A duplicate. */
  Longhaul__Segment *dup[5] = {f.segs[0], f.segs[1], f.segs[1], f.segs[3], f.segs[4]};
  ck_assert_int_eq(lh_learner_episode_join(dup, 5, f.total, &ep, &e), S);
  ck_assert(strstr(e.msg, "seq 1 twice"));
  /* Another episode's segment. */
  Longhaul__Segment *mixed[5] = {f.segs[0], f.segs[1], g.segs[2], f.segs[3], f.segs[4]};
  ck_assert_int_eq(lh_learner_episode_join(mixed, 5, f.total, &ep, &e), S);
  ck_assert(strstr(e.msg, "episode 8 among episode 5"));
  /* A gap in the offsets. */
  f.segs[2]->start_offset++;
  ck_assert_int_eq(lh_learner_episode_join(f.segs, 5, f.total, &ep, &e), S);
  ck_assert(strstr(e.msg, "segment 2 starts at 11"));
  f.segs[2]->start_offset--;
  /* A different routing shape. */
  f.segs[3]->routed_topk = 1;
  ck_assert_int_eq(lh_learner_episode_join(f.segs, 5, f.total, &ep, &e), S);
  ck_assert(strstr(e.msg, "routes 2x1"));
  f.segs[3]->routed_topk = K;
  ck_assert_int_eq(lh_learner_episode_join(f.segs, 0, 0, &ep, &e), S);
  ck_assert(strstr(e.msg, "no segments"));
  ck_assert_int_eq(lh_learner_episode_join(NULL, 2, 0, &ep, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_episode_join(f.segs, 5, f.total, NULL, &e), LH_EINVAL);
  /* Repaired, it joins. */
  ck_assert_int_eq(lh_learner_episode_join(f.segs, 5, f.total, &ep, &e), 0);
  lh_learner_episode_free(ep);
  unmake(&f);
  unmake(&g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_episode");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_join_in_any_order);
  tcase_add_test(tc, test_oldest_version_of_sampled_tokens);
  tcase_add_test(tc, test_join_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* The routing a segment or a joined episode records, against the model's
 * shape (learner/validate.c): layers and top-k of the model, experts it
 * has, and a token's top-k experts in one layer distinct, as the router
 * picks them (a repeat would otherwise be stored and refused only by the
 * router kernel during training). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <string.h>

#include "learner/internal.h"

enum { T = 6, L = 2, K = 3, E = 8 };

static const lh_learner_model_limits limits = {.vocab = 256, .layers = L, .topk = K, .experts = E};

/* Every token in every layer routes to three distinct experts. */
static void distinct_routing(uint32_t *ids) {
  for (int t = 0; t < T; t++)
    for (int l = 0; l < L; l++)
      for (int k = 0; k < K; k++) ids[(t * L + l) * K + k] = (uint32_t)((t + l + 2 * k) % E);
}

static Longhaul__Segment *segment(uint32_t *ids) {
  static uint32_t tok[T], ver[T];
  static uint8_t mask[T];
  static float blogp[T];
  static Longhaul__Segment seg;
  longhaul__segment__init(&seg);
  for (int i = 0; i < T; i++) tok[i] = 65;
  seg.episode_id = 4, seg.seq = 0, seg.actor = "a0", seg.env = "calc";
  seg.n_tokens = T, seg.tokens = tok;
  seg.loss_mask.len = T, seg.loss_mask.data = mask;
  seg.n_behavior_logp = T, seg.behavior_logp = blogp;
  seg.n_policy_version = T, seg.policy_version = ver;
  seg.routed_layers = L, seg.routed_topk = K, seg.n_routed_experts = T * L * K, seg.routed_experts = ids;
  return &seg;
}

START_TEST(test_segment_routing) {
  uint32_t ids[T * L * K];
  lh_errbuf e;
  distinct_routing(ids);
  ck_assert_int_eq(lh_learner_check_segment(segment(ids), &limits, &e), 0);
  /* The same expert in two slots of one token and layer. */
  ids[(4 * L + 1) * K + 2] = ids[(4 * L + 1) * K + 0];
  ck_assert_int_eq(lh_learner_check_segment(segment(ids), &limits, &e), LH_ELEARNER_MODEL_INPUT);
  printf("refused: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "episode 4 token 4 layer 1 routes to expert"));
  ck_assert_ptr_nonnull(strstr(e.msg, "twice"));
  /* The same expert for two tokens, or in two layers of one token: fine. */
  distinct_routing(ids);
  ids[(1 * L + 0) * K + 0] = ids[(0 * L + 0) * K + 0];
  ids[(2 * L + 1) * K + 1] = ids[(2 * L + 0) * K + 1];
  ck_assert_int_eq(lh_learner_check_segment(segment(ids), &limits, &e), 0);
  /* An expert the model lacks, another top-k. */
  ids[5] = E;
  ck_assert_int_eq(lh_learner_check_segment(segment(ids), &limits, &e), LH_ELEARNER_MODEL_INPUT);
  ck_assert_ptr_nonnull(strstr(e.msg, "the model has 8 experts"));
  distinct_routing(ids);
  Longhaul__Segment *s = segment(ids);
  s->routed_topk = 2, s->routed_layers = 3;
  ck_assert_int_eq(lh_learner_check_segment(s, &limits, &e), LH_ELEARNER_MODEL_INPUT);
  ck_assert_ptr_nonnull(strstr(e.msg, "routing of 3 layers x top-2"));
}
END_TEST

START_TEST(test_episode_routing) {
  uint32_t ids[T * L * K], tok[T];
  for (int i = 0; i < T; i++) tok[i] = 65;
  lh_learner_episode ep;
  memset(&ep, 0, sizeof ep);
  ep.episode_id = 7, ep.n = T, ep.tokens = tok;
  ep.routed_layers = L, ep.routed_topk = K, ep.routed_experts = ids;
  lh_errbuf e;
  distinct_routing(ids);
  ck_assert_int_eq(lh_learner_check_episode(&ep, &limits, &e), 0);
  ids[(5 * L + 0) * K + 1] = ids[(5 * L + 0) * K + 2];
  ck_assert_int_eq(lh_learner_check_episode(&ep, &limits, &e), LH_ELEARNER_MODEL_INPUT);
  printf("refused: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "episode 7 token 5 layer 0 routes to expert"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_validate");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_segment_routing);
  tcase_add_test(tc, test_episode_routing);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

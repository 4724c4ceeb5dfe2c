/* The actor and learner parts wired together on a toy policy, without the
 * model: a softmax over 8 tokens (its logits are the parameters) answers a
 * one-step task, reward 1 for token 5. Each step samples a batch with the
 * real sampler, cuts it with the real segmenter, sends every segment
 * through the real codec, joins, admits, batches whole groups, computes
 * GRPO advantages, and descends the PPO-clip gradient (dlogp chained
 * through the log-softmax by hand). The test asserts that the success rate
 * rises from chance to near 1, that learner and behavior log-probabilities
 * agree at the current version (docs/learner.md, "What a step computes": alignment), and that a second
 * PPO epoch on the same batch clips. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proto/wire.h"

enum { V = 8, TARGET = 5, GROUP = 4, BATCH = 16, STEPS = 40 };

static void log_softmax(const double *theta, float *out) {
  double max = theta[0], z = 0;
  for (int i = 1; i < V; i++)
    if (theta[i] > max) max = theta[i];
  for (int i = 0; i < V; i++) z += exp(theta[i] - max);
  for (int i = 0; i < V; i++) out[i] = (float)(theta[i] - max - log(z));
}

/* One episode: the prompt token 0 (not sampled), then one sampled token.
 * Returns its joined form, decoded from the wire. */
static lh_learner_episode *run_episode(lh_actors_sampler *s, lh_actors_rng *rng, const float *logits,
                                       uint64_t id, uint64_t group, uint32_t version, float *reward) {
  lh_actors_segmenter_config c = {.episode_id = id, .group_id = group, .task_seed = group, .actor = "a0",
                                  .env = "toy", .segment_tokens = 1, .vocab = V};
  lh_actors_segmenter *seg = lh_actors_segmenter_new(&c, NULL);
  ck_assert_int_ge(lh_actors_segmenter_push(seg, 0, 0, 0.0f, version, NULL, NULL), 0);
  lh_actors_sample out;
  ck_assert_int_eq(lh_actors_sampler_sample(s, logits, rng, &out, NULL), 0);
  ck_assert_int_ge(lh_actors_segmenter_push(seg, out.token, 1, out.logp, version, NULL, NULL), 0);
  *reward = out.token == TARGET ? 1.0f : 0.0f;
  lh_actors_episode_result res = {.outcome = *reward > 0 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS
                                                         : LONGHAUL__OUTCOME__OUTCOME_FAILURE,
                                  .reward = *reward, .steps = 1};
  Longhaul__EpisodeEnd *end;
  ck_assert_int_eq(lh_actors_segmenter_finish(seg, &res, &end, NULL), 0);
  Longhaul__Segment *received[4];
  size_t n = 0;
  Longhaul__Segment *sg;
  while ((sg = lh_actors_segmenter_pop(seg))) {
    uint8_t *buf;
    size_t bytes;
    ck_assert_int_eq(lh_wire_segment_encode(sg, &buf, &bytes, NULL), 0);
    ck_assert_int_eq(lh_wire_segment_decode(buf, bytes, NULL, &received[n++], NULL), 0);
    free(buf);
    lh_actors_segment_free(sg);
  }
  lh_learner_episode *ep;
  lh_errbuf e;
  ck_assert_msg(lh_learner_episode_join(received, n, end->total_tokens, &ep, &e) == 0, "%s", e.msg);
  for (size_t i = 0; i < n; i++) lh_wire_segment_free(received[i]);
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(seg);
  return ep;
}

START_TEST(test_toy_policy_learns) {
  double theta[V] = {0};
  float logits[V];
  lh_actors_sampler *s = lh_actors_sampler_new(V, 1.0f, 1.0f, NULL);
  lh_actors_rng rng;
  lh_actors_rng_seed(&rng, 2026);
  lh_learner_batcher *b = lh_learner_batcher_new(BATCH, GROUP, 64, NULL);
  lh_learner_admission_counts counts;
  memset(&counts, 0, sizeof counts);
  const lh_learner_ppo_params ppo = {.clip_eps = 0.2, .is_cap = 2.0, .entropy_coef = 0.0};
  lh_learner_episode *eps[BATCH + GROUP];
  float rewards[BATCH], first_rate = -1, last_rate = -1;
  uint64_t next_id = 1;
  double clip_seen = 0;
  for (uint32_t step = 0; step < STEPS; step++) {
    log_softmax(theta, logits);
    /* Actors: BATCH / GROUP groups of GROUP episodes. */
    size_t n_eps = 0;
    for (int g = 0; g < BATCH / GROUP; g++)
      for (int k = 0; k < GROUP; k++) {
        float r;
        lh_learner_episode *ep = run_episode(s, &rng, logits, next_id++, step * 100 + g, step, &r);
        ck_assert_int_eq(lh_learner_admission_check(step, ep->oldest_version, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 0, &counts),
                         LH_LEARNER_ADMIT);
        lh_learner_batch_item it = {.episode_id = ep->episode_id, .group_id = ep->group_id, .reward = r,
                                    .admitted = 1};
        ck_assert_int_eq(lh_learner_batcher_add(b, &it, NULL), 0);
        eps[n_eps++] = ep;
      }
    /* Learner: one batch of whole groups. */
    lh_learner_batch_item batch[BATCH + GROUP];
    size_t nb;
    ck_assert_int_eq(lh_learner_batcher_take(b, batch, BATCH + GROUP, &nb, NULL), 1);
    ck_assert_uint_eq(nb, BATCH);
    uint64_t keys[BATCH];
    float adv[BATCH];
    double rate = 0;
    for (size_t i = 0; i < nb; i++) {
      ck_assert_uint_eq(batch[i].episode_id, eps[i]->episode_id);  /* whole groups, in order */
      rewards[i] = batch[i].reward;
      keys[i] = batch[i].group_id;
      rate += rewards[i] / nb;
    }
    if (step == 0) first_rate = (float)rate;
    last_rate = (float)rate;
    ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, rewards, keys, nb, NULL, adv, NULL), 0);
    /* Flat token arrays of the batch: 2 tokens per episode. */
    float logp[2 * BATCH], blogp[2 * BATCH], tadv[2 * BATCH], dlogp[2 * BATCH];
    uint8_t mask[2 * BATCH];
    uint32_t ver[2 * BATCH], tok[2 * BATCH];
    for (size_t i = 0; i < nb; i++) {
      lh_learner_episode_broadcast(eps[i], adv[i], tadv + 2 * i);
      memcpy(blogp + 2 * i, eps[i]->behavior_logp, 2 * sizeof(float));
      memcpy(mask + 2 * i, eps[i]->loss_mask, 2);
      memcpy(ver + 2 * i, eps[i]->policy_version, 2 * sizeof(uint32_t));
      memcpy(tok + 2 * i, eps[i]->tokens, 2 * sizeof(uint32_t));
    }
    for (int epoch = 0; epoch < 2; epoch++) {
      float lsm[V];
      log_softmax(theta, lsm);
      for (size_t t = 0; t < 2 * nb; t++) logp[t] = lsm[tok[t]];
      lh_learner_ppo_input in = {.n = 2 * nb, .logp = logp, .behavior_logp = blogp, .advantage = tadv,
                                 .loss_mask = mask, .version = ver, .current_version = step};
      lh_learner_ppo_stats st;
      double loss;
      ck_assert_int_eq(lh_learner_ppo_loss(&ppo, &in, &loss, dlogp, &st, NULL), 0);
      ck_assert_uint_eq(st.tokens, nb);
      if (epoch == 0) {
        /* Alignment: same parameters, same numbers. */
        ck_assert_uint_eq(st.current_tokens, nb);
        ck_assert_msg(st.logp_diff_max < 1e-6, "step %u: |logp - behavior| = %g", step, st.logp_diff_max);
        ck_assert(st.clip_frac == 0.0);
      } else if (st.clip_frac > clip_seen) {
        clip_seen = st.clip_frac;
      }
      /* dlogp_t -> dtheta: d log softmax(theta)[k] / dtheta_j = [j = k] - p_j. */
      double grad[V] = {0};
      for (size_t t = 0; t < 2 * nb; t++) {
        if (!mask[t]) continue;
        for (int j = 0; j < V; j++) grad[j] += dlogp[t] * ((j == (int)tok[t]) - exp(lsm[j]));
      }
      for (int j = 0; j < V; j++) theta[j] -= 2.0 * grad[j];
    }
    for (size_t i = 0; i < n_eps; i++) lh_learner_episode_free(eps[i]);
  }
  printf("pipeline: success rate %.2f at step 0, %.2f at step %d; largest second-epoch clip fraction %.2f\n",
         (double)first_rate, (double)last_rate, STEPS - 1, clip_seen);
  ck_assert_float_lt(first_rate, 0.5f);
  ck_assert_float_gt(last_rate, 0.9f);
  ck_assert_double_gt(clip_seen, 0.0);
  ck_assert_uint_eq(counts.admitted, (uint64_t)STEPS * BATCH);
  lh_learner_batcher_free(b);
  lh_actors_sampler_free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_pipeline");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_toy_policy_learns);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

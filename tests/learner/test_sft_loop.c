/* SFT's parts on either side of cli/: the expert's demonstrations
 * (actors/sft_demos.c: the training seeds, batch after batch) and the loop
 * of steps (learner/sft.c, lh_learner_sft_train: the steps taken, the
 * callbacks' order and codes, evaluations every N steps and the stop at a
 * target rate). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <string.h>

#include "actors/actors.h"
#include "learner/learner.h"

static lh_model *tiny_model(void) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.d_model = 32, cfg.layers = 2, cfg.heads = 2, cfg.experts = 4, cfg.topk = 2;
  cfg.latent = 16, cfg.expert_hidden = 32, cfg.seed = 5;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&cfg, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  return m;
}

/* The loop's callbacks, counting what they saw. */
typedef struct {
  int32_t tok[4];
  uint8_t mask[4];
  uint64_t demos, steps, last_step, evals, eval_steps[8];
  size_t tokens;
  double rates[8];  /* what the evaluations report, in turn */
  int fail_demos_at; /* the call (1-based) that fails; 0: none */
} loop_seen;

static int demos(void *ctx, lh_learner_sft_episode *eps, size_t n, lh_errbuf *err) {
  loop_seen *s = ctx;
  if (++s->demos == (uint64_t)s->fail_demos_at) return lh_errbuf_set(err, LH_EIO, "demonstrations failed");
  for (size_t i = 0; i < n; i++)
    eps[i] = (lh_learner_sft_episode){.n_tokens = 4, .tokens = s->tok, .mask = s->mask};
  return 0;
}

static void on_step(void *ctx, const lh_learner_sft_stats *st, const lh_learner_sft_progress *p) {
  loop_seen *s = ctx;
  s->steps++;
  ck_assert_uint_eq(p->step, st->step + 1);
  ck_assert_uint_eq(p->step, s->last_step + 1);
  s->last_step = p->step;
  s->tokens += st->tokens;
  ck_assert_uint_eq(p->tokens, s->tokens);
  ck_assert_int_eq(p->evals, (int)s->evals);
  if (s->evals) ck_assert(p->ev_step[1] == (double)s->eval_steps[s->evals - 1]);
}

static int evaluate(void *ctx, uint64_t step, double *rate, lh_errbuf *err) {
  (void)err;
  loop_seen *s = ctx;
  ck_assert_uint_lt(s->evals, 8);
  s->eval_steps[s->evals] = step;
  *rate = s->rates[s->evals++];
  return 0;
}

static lh_learner_sft_loop make_loop(loop_seen *s, uint64_t steps, uint64_t eval_every, double target) {
  *s = (loop_seen){.tok = {LH_TOK_BOS, 'a', 'b', LH_TOK_EOS}, .mask = {0, 0, 1, 1}};
  return (lh_learner_sft_loop){.steps = steps, .batch = 2, .eval_every = eval_every, .target = target,
                               .demos = demos, .on_step = on_step, .evaluate = evaluate, .ctx = s};
}

START_TEST(test_loop_steps_and_evals) {
  lh_model *m = tiny_model();
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  lh_errbuf err = {0};
  loop_seen s;
  lh_learner_sft_result r;

  /* Every step, an evaluation every 3: at 3 and 6 of 7. */
  lh_learner_sft_loop loop = make_loop(&s, 7, 3, 0);
  ck_assert_msg(lh_learner_sft_train(m, &cfg, &loop, &r, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(s.demos, 7);
  ck_assert_uint_eq(s.steps, 7);
  ck_assert_uint_eq(s.evals, 2);
  ck_assert_uint_eq(s.eval_steps[0], 3);
  ck_assert_uint_eq(s.eval_steps[1], 6);
  ck_assert_uint_eq(r.taken, 7);
  ck_assert_uint_eq(r.evaluated_at, 6);
  ck_assert_int_eq(r.reached, 0);
  ck_assert_uint_eq(r.tokens, 7 * 2 * 4);
  ck_assert_uint_eq(r.skipped, 0);

  /* A target stops the loop at the first evaluation that reaches it. */
  loop = make_loop(&s, 20, 2, 0.5);
  s.rates[0] = 0.1, s.rates[1] = 0.5, s.rates[2] = 0.9;
  ck_assert_msg(lh_learner_sft_train(m, &cfg, &loop, &r, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(s.steps, 4);
  ck_assert_uint_eq(s.evals, 2);
  ck_assert_int_eq(r.reached, 1);
  ck_assert(r.rate == 0.5);
  ck_assert_uint_eq(r.taken, 4);
  ck_assert_uint_eq(r.evaluated_at, 4);
  ck_assert_uint_eq(r.tokens, 4 * 2 * 4);

  /* A callback's code ends the loop with it. */
  loop = make_loop(&s, 10, 0, 0);
  s.fail_demos_at = 3;
  ck_assert_int_eq(lh_learner_sft_train(m, &cfg, &loop, &r, &err), LH_EIO);
  ck_assert_ptr_nonnull(strstr(err.msg, "demonstrations failed"));
  ck_assert_uint_eq(s.steps, 2);

  /* What the loop needs. */
  loop = make_loop(&s, 0, 0, 0);
  ck_assert_int_eq(lh_learner_sft_train(m, &cfg, &loop, &r, &err), LH_EINVAL);
  loop = make_loop(&s, 5, 2, 0);
  loop.evaluate = NULL;
  ck_assert_int_eq(lh_learner_sft_train(m, &cfg, &loop, &r, &err), LH_EINVAL);
  lh_model_free(m);
}
END_TEST

/* Batches of the expert's episodes on consecutive training seeds: the
 * second batch plays the seeds after the first's. */
START_TEST(test_demos_seeds) {
  lh_env_option opts[2] = {{"stages", "2"}, {"digits", "1"}};
  lh_env *env = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_env_open("calc", opts, 2, &env, &err) == 0, "%s", err.msg);
  lh_actors_sft_demos *d = NULL;
  ck_assert_int_eq(lh_actors_sft_demos_new(env, 8, 2, LH_ACTORS_SFT_SEEDS, &d, &err), LH_EINVAL);
  ck_assert_int_eq(lh_actors_sft_demos_new(env, 8, 0, 0, &d, &err), LH_EINVAL);
  ck_assert_msg(lh_actors_sft_demos_new(env, 8, 2, 3, &d, &err) == 0, "%s", err.msg);
  lh_actors_transcript *want = lh_actors_transcript_new(8, &err);
  ck_assert_ptr_nonnull(want);
  for (uint64_t batch = 0; batch < 2; batch++) {
    ck_assert_msg(lh_actors_sft_demos_next(d, &err) == 0, "%s", err.msg);
    for (uint64_t i = 0; i < 2; i++) {
      const lh_actors_transcript *t = lh_actors_sft_demos_get(d, i);
      ck_assert_ptr_nonnull(t);
      uint64_t seed = LH_ACTORS_SFT_SEED_BASE + (3ull << 20) + batch * 2 + i;
      ck_assert_int_eq(lh_actors_transcript_expert(env, seed, want, NULL, &err), 0);
      ck_assert_uint_eq(lh_actors_transcript_len(t), lh_actors_transcript_len(want));
      ck_assert_int_eq(memcmp(lh_actors_transcript_tokens(t), lh_actors_transcript_tokens(want),
                              lh_actors_transcript_len(t) * sizeof(int32_t)), 0);
    }
  }
  ck_assert_ptr_null(lh_actors_sft_demos_get(d, 2));
  lh_actors_transcript_free(want);
  lh_actors_sft_demos_free(d);
  lh_env_free(env);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sft_loop");
  TCase *tc = tcase_create("sft_loop");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_loop_steps_and_evals);
  tcase_add_test(tc, test_demos_seeds);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

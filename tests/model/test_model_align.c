/* The model's forms agree: batched decode (recurrent) against the training
 * forward (chunked) -- the train/rollout alignment the learner reports --,
 * prefill then decode, packed sequences against separate runs, and windows
 * with carried state against one long run. Each test prints the largest
 * difference it saw. Demo-model shapes (d 128, 4 layers, 16 experts). */
#include "tests/model/test_model_util.h"
#include "tests/case_main.h"

#include <stdio.h>

#define NSEQ 3
static const int lens[NSEQ] = {50, 37, 23};

static lh_model *demo_model(void) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.seed = 11;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&cfg, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  tm_perturb(m, 4, 0.02); /* xres and norms off their initial values */
  return m;
}

static void make_seqs(int32_t seqs[NSEQ][64]) {
  uint64_t s = 21;
  for (int i = 0; i < NSEQ; i++) {
    seqs[i][0] = LH_TOK_BOS;
    for (int t = 1; t < lens[i]; t++) seqs[i][t] = (int32_t)(tm_next(&s) % LH_TOK_VOCAB);
  }
}

/* logp of each sequence's next tokens through the training forward of the
 * packed batch: out[i][t] = log p(seq[i][t+1] | seq[i][..t]). */
static void train_logp(lh_model *m, int32_t seqs[NSEQ][64], int n_seq, const int *which,
                       float out[NSEQ][64]) {
  int32_t tokens[NSEQ * 64], targets[NSEQ * 64], offsets[NSEQ + 1];
  int T = 0;
  offsets[0] = 0;
  for (int i = 0; i < n_seq; i++) {
    int q = which[i];
    for (int t = 0; t < lens[q]; t++, T++) {
      tokens[T] = seqs[q][t];
      targets[T] = t + 1 < lens[q] ? seqs[q][t + 1] : -1;
    }
    offsets[i + 1] = T;
  }
  lh_model_batch b = {.n_tokens = T, .tokens = tokens, .targets = targets, .n_seq = n_seq,
                      .seq_offsets = offsets};
  float logp[NSEQ * 64];
  lh_model_cache *c = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_forward(m, &b, &c, logp, NULL, NULL, &err) == 0, "%s", err.msg);
  for (int i = 0; i < n_seq; i++)
    for (int t = 0; t + 1 < lens[which[i]]; t++) out[i][t] = logp[offsets[i] + t];
  lh_model_cache_free(c);
}

START_TEST(test_decode_matches_training) {
  lh_model *m = demo_model();
  int32_t seqs[NSEQ][64];
  make_seqs(seqs);
  float train[NSEQ][64];
  int all[NSEQ] = {0, 1, 2};
  train_logp(m, seqs, NSEQ, all, train);
  /* the training forward's routing of sequence 0 alone, for comparison */
  const lh_model_config *cf = lh_model_get_config(m);
  int L = cf->layers, k = cf->topk;
  int32_t *train_experts = malloc((size_t)L * lens[0] * k * sizeof(int32_t));
  {
    int32_t targets[64], offsets[2] = {0, lens[0]};
    for (int t = 0; t < lens[0]; t++) targets[t] = -1;
    lh_model_batch b = {.n_tokens = lens[0], .tokens = seqs[0], .targets = targets, .n_seq = 1,
                        .seq_offsets = offsets};
    lh_model_cache *c = NULL;
    ck_assert_int_eq(lh_model_forward(m, &b, &c, NULL, NULL, NULL, NULL), 0);
    ck_assert_int_eq(lh_model_cache_experts(c, train_experts), 0);
    lh_model_cache_free(c);
  }
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &d, NULL), 0);
  int V = LH_TOK_VOCAB;
  float *logp = malloc((size_t)NSEQ * V * sizeof(float));
  int32_t *experts = malloc((size_t)L * NSEQ * k * sizeof(int32_t));
  double worst = 0;
  int routing_diffs = 0;
  for (int t = 0; t + 1 < lens[0]; t++) {
    int32_t tok[NSEQ];
    /* shorter sequences keep decoding padding after their end, ignored */
    for (int i = 0; i < NSEQ; i++) tok[i] = t < lens[i] ? seqs[i][t] : LH_TOK_PAD;
    ck_assert_int_eq(lh_model_decode_step(d, tok, logp, experts, NULL), 0);
    for (int i = 0; i < NSEQ; i++)
      if (t + 1 < lens[i])
        worst = fmax(worst, fabs(logp[(size_t)i * V + seqs[i][t + 1]] - train[i][t]));
    for (int l = 0; l < L; l++)
      for (int j = 0; j < k; j++)
        routing_diffs += experts[((size_t)l * NSEQ + 0) * k + j] !=
                         train_experts[((size_t)l * lens[0] + t) * k + j];
  }
  printf("decode vs training forward: max |logp difference| %.3e, routing differences %d\n",
         worst, routing_diffs);
  ck_assert(worst < 1e-5);
  ck_assert_int_eq(routing_diffs, 0);
  free(experts);
  free(train_experts);

  /* prefill sequence 0's first 20 tokens, then decode the rest */
  ck_assert_int_eq(lh_model_decoder_reset(d, 0), 0);
  float next[LH_TOK_VOCAB];
  ck_assert_int_eq(lh_model_prefill(d, 0, seqs[0], 20, NULL, 0, next, NULL), 0);
  double worst2 = fabs(next[seqs[0][20]] - train[0][19]);
  for (int t = 20; t + 1 < lens[0]; t++) {
    int32_t tok[NSEQ] = {seqs[0][t], LH_TOK_PAD, LH_TOK_PAD};
    ck_assert_int_eq(lh_model_decode_step(d, tok, logp, NULL, NULL), 0);
    worst2 = fmax(worst2, fabs(logp[seqs[0][t + 1]] - train[0][t]));
  }
  printf("prefill(20) + decode vs training forward: max |logp difference| %.3e\n", worst2);
  ck_assert(worst2 < 1e-5);
  free(logp);
  lh_model_decoder_free(d);
  lh_model_free(m);
}
END_TEST

START_TEST(test_packed_equals_separate) {
  lh_model *m = demo_model();
  int32_t seqs[NSEQ][64];
  make_seqs(seqs);
  float packed[NSEQ][64];
  int all[NSEQ] = {0, 1, 2};
  train_logp(m, seqs, NSEQ, all, packed);
  double worst = 0;
  for (int i = 0; i < NSEQ; i++) {
    float alone[NSEQ][64];
    int one[1] = {i};
    train_logp(m, seqs, 1, one, alone);
    for (int t = 0; t + 1 < lens[i]; t++) worst = fmax(worst, fabs(alone[0][t] - packed[i][t]));
  }
  printf("packed vs separate runs: max |logp difference| %.3e\n", worst);
  ck_assert(worst < 1e-5);
  lh_model_free(m);
}
END_TEST

START_TEST(test_windows_with_carried_state) {
  lh_model *m = demo_model();
  int32_t seqs[NSEQ][64];
  make_seqs(seqs);
  float full[NSEQ][64];
  int one[1] = {0};
  train_logp(m, seqs, 1, one, full);
  const lh_model_config *cf = lh_model_get_config(m);
  size_t st = lh_model_state_floats(cf);
  float *state = calloc(st, sizeof(float));
  /* windows of 23, 18 and 9 tokens: none a multiple of the chunk */
  const int cuts[4] = {0, 23, 41, 50};
  double worst = 0;
  lh_model_cache *c = NULL;
  for (int w = 0; w < 3; w++) {
    int n = cuts[w + 1] - cuts[w];
    int32_t targets[64], offsets[2] = {0, n};
    for (int t = 0; t < n; t++) targets[t] = cuts[w] + t + 1 < 50 ? seqs[0][cuts[w] + t + 1] : -1;
    lh_model_batch b = {.n_tokens = n, .tokens = seqs[0] + cuts[w], .targets = targets,
                        .n_seq = 1, .seq_offsets = offsets, .state_in = w ? state : NULL};
    float logp[64];
    ck_assert_int_eq(lh_model_forward(m, &b, &c, logp, NULL, state, NULL), 0);
    for (int t = 0; t < n && cuts[w] + t + 1 < 50; t++)
      worst = fmax(worst, fabs(logp[t] - full[0][cuts[w] + t]));
  }
  printf("windows (23+18+9) with carried state vs one run: max |logp difference| %.3e\n", worst);
  ck_assert(worst < 1e-5);
  free(state);
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

/* An image observation: prefill of <img> + patches continues the state like
 * the training forward of the same packed positions. */
START_TEST(test_prefill_image_matches_training) {
  lh_model *m = demo_model();
  int n = 24, P = 4; /* 16x16 image, patch 8 -> 4 patches at 5..8 */
  int32_t tok[24];
  uint64_t s = 5;
  for (int t = 0; t < n; t++) tok[t] = (int32_t)(tm_next(&s) % 256);
  tok[0] = LH_TOK_BOS, tok[4] = LH_TOK_IMG;
  for (int t = 5; t < 5 + P; t++) tok[t] = LH_TOK_PAD;
  float pixels[16 * 16 * 3];
  for (int i = 0; i < 16 * 16 * 3; i++) pixels[i] = (float)(0.5 + 0.5 * tm_uniform(&s));
  lh_model_image im = {.at = 5, .height = 16, .width = 16, .pixels = pixels};
  int32_t targets[24], offsets[2] = {0, n};
  for (int t = 0; t < n; t++) targets[t] = t + 1 < n ? tok[t + 1] : -1;
  lh_model_batch b = {.n_tokens = n, .tokens = tok, .targets = targets, .n_seq = 1,
                      .seq_offsets = offsets, .n_images = 1, .images = &im};
  float logp[24];
  lh_model_cache *c = NULL;
  ck_assert_int_eq(lh_model_forward(m, &b, &c, logp, NULL, NULL, NULL), 0);
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, 1, &d, NULL), 0);
  float next[LH_TOK_VOCAB];
  lh_model_image im2 = im;
  im2.at = 1; /* relative to the prefilled tokens, which start at 4 */
  ck_assert_int_eq(lh_model_prefill(d, 0, tok, 4, NULL, 0, NULL, NULL), 0);
  ck_assert_int_eq(lh_model_prefill(d, 0, tok + 4, 5, &im2, 1, next, NULL), 0);
  double worst = fabs(next[tok[9]] - logp[8]);
  for (int t = 9; t + 1 < n; t++) {
    ck_assert_int_eq(lh_model_decode_step(d, &tok[t], next, NULL, NULL), 0);
    worst = fmax(worst, fabs(next[tok[t + 1]] - logp[t]));
  }
  printf("prefill with image + decode vs training forward: max |logp difference| %.3e\n", worst);
  ck_assert(worst < 1e-5);
  lh_model_decoder_free(d);
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

/* Stepping a subset of rows leaves the others' states alone: sequences 0
 * and 2 go ahead while 1 waits, then 1 catches up alone (in reversed row
 * order with 0 to check the order handling), then all step together. */
START_TEST(test_decode_rows) {
  lh_model *m = demo_model();
  int32_t seqs[NSEQ][64];
  make_seqs(seqs);
  float train[NSEQ][64];
  int all[NSEQ] = {0, 1, 2};
  train_logp(m, seqs, NSEQ, all, train);
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &d, NULL), 0);
  int V = LH_TOK_VOCAB, pos[NSEQ] = {0, 0, 0};
  float *logp = malloc((size_t)NSEQ * V * sizeof(float));
  double worst = 0;
  const int32_t phase_rows[3][3] = {{0, 2, -1}, {1, -1, -1}, {2, 1, 0}};
  const int phase_n[3] = {2, 1, 3}, phase_steps[3] = {10, 10, 12};
  for (int ph = 0; ph < 3; ph++)
    for (int s = 0; s < phase_steps[ph]; s++) {
      int32_t tok[NSEQ];
      for (int i = 0; i < phase_n[ph]; i++) tok[i] = seqs[phase_rows[ph][i]][pos[phase_rows[ph][i]]];
      ck_assert_int_eq(lh_model_decode_step_rows(d, phase_rows[ph], phase_n[ph], tok, logp, NULL,
                                                 NULL), 0);
      for (int i = 0; i < phase_n[ph]; i++) {
        int q = phase_rows[ph][i], t = pos[q]++;
        worst = fmax(worst, fabs(logp[(size_t)i * V + seqs[q][t + 1]] - train[q][t]));
      }
    }
  printf("decode of row subsets vs training forward: max |logp difference| %.3e\n", worst);
  ck_assert(worst < 1e-5);
  int32_t bad[2] = {1, 1}, tok[2] = {1, 2};
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_decode_step_rows(d, bad, 2, tok, logp, NULL, &err), LH_EINVAL);
  bad[1] = 3;
  ck_assert_int_eq(lh_model_decode_step_rows(d, bad, 2, tok, logp, NULL, &err), LH_EINVAL);
  ck_assert_int_eq(lh_model_decode_step_rows(d, bad, 0, tok, logp, NULL, &err), 0);
  free(logp);
  lh_model_decoder_free(d);
  lh_model_free(m);
}
END_TEST

/* Routing replay: replaying the forward's own choice changes nothing;
 * replaying another choice changes the log-probabilities. */
START_TEST(test_routing_replay) {
  lh_model *m = demo_model();
  const lh_model_config *cf = lh_model_get_config(m);
  int32_t seqs[NSEQ][64];
  make_seqs(seqs);
  int n = lens[0], L = cf->layers, k = cf->topk;
  int32_t targets[64], offsets[2] = {0, n};
  for (int t = 0; t < n; t++) targets[t] = t + 1 < n ? seqs[0][t + 1] : -1;
  lh_model_batch b = {.n_tokens = n, .tokens = seqs[0], .targets = targets, .n_seq = 1,
                      .seq_offsets = offsets};
  float a[64], r[64], o[64];
  lh_model_cache *c = NULL;
  ck_assert_int_eq(lh_model_forward(m, &b, &c, a, NULL, NULL, NULL), 0);
  int32_t *ex = malloc((size_t)L * n * k * sizeof(int32_t));
  ck_assert_int_eq(lh_model_cache_experts(c, ex), 0);
  b.replay_experts = ex;
  ck_assert_int_eq(lh_model_forward(m, &b, &c, r, NULL, NULL, NULL), 0);
  for (int t = 0; t < n; t++) ck_assert(a[t] == r[t]);
  /* another valid choice: every expert index shifted by one */
  for (size_t i = 0; i < (size_t)L * n * k; i++) ex[i] = (ex[i] + 1) % cf->experts;
  ck_assert_int_eq(lh_model_forward(m, &b, &c, o, NULL, NULL, NULL), 0);
  double moved = 0;
  for (int t = 0; t + 1 < n; t++) moved = fmax(moved, fabs(o[t] - a[t]));
  printf("routing replay: own choice identical, shifted choice moves logp by up to %.3e\n",
         moved);
  ck_assert(moved > 1e-4);
  free(ex);
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_align");
  TCase *tc = tcase_create("align");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_decode_matches_training);
  tcase_add_test(tc, test_packed_equals_separate);
  tcase_add_test(tc, test_windows_with_carried_state);
  tcase_add_test(tc, test_prefill_image_matches_training);
  tcase_add_test(tc, test_routing_replay);
  tcase_add_test(tc, test_decode_rows);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

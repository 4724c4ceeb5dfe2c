/* The windowed prefill (lh_model_prefill in windows of the decoder's
 * prefill window, the attention state carried between them) against one
 * pass over the same tokens: the next-token log-probabilities and the
 * carried state agree, with images placed so that windows must move off
 * them (cut before one, grow past one that starts a window), without and
 * with the short convolution (its tails carried too); and the
 * window rule itself (lh_model_window_end). Prints the largest difference. */
#include "tests/model/test_model_util.h"
#include "tests/case_main.h"

#include <stdio.h>

#define N_TOK 301

static lh_model *small_model(int conv) {
  lh_model_config cfg = tm_small_config();
  cfg.patch = 2, cfg.max_patches = 16, cfg.conv = conv;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&cfg, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  tm_perturb(m, 9, 0.02);
  return m;
}

/* Tokens with three images: 4x4 (4 patches) at 30, 8x8 (16 patches) at 62
 * -- across the 8-token window edges at 64 -- and 6x4 (6 patches) at 200. */
static int make_input(int32_t *tok, lh_model_image *im, float *pixels) {
  uint64_t s = 3;
  for (int t = 0; t < N_TOK; t++) tok[t] = (int32_t)(tm_next(&s) % 256);
  tok[0] = LH_TOK_BOS;
  const int at[3] = {30, 62, 200}, h[3] = {4, 8, 6}, w[3] = {4, 8, 4};
  size_t px = 0;
  for (int i = 0; i < 3; i++) {
    tok[at[i] - 1] = LH_TOK_IMG;
    int P = (h[i] / 2) * (w[i] / 2);
    for (int t = at[i]; t < at[i] + P; t++) tok[t] = LH_TOK_PAD;
    im[i] = (lh_model_image){.at = at[i], .height = h[i], .width = w[i], .pixels = pixels + px};
    for (int j = 0; j < h[i] * w[i] * 3; j++) pixels[px + (size_t)j] = (float)(0.5 + 0.5 * tm_uniform(&s));
    px += (size_t)h[i] * w[i] * 3;
  }
  return 3;
}

static size_t state_floats(const lh_model *m) { return lh_model_state_floats(lh_model_get_config(m)); }

/* Prefill of tok[0..split) then tok[split..N_TOK) (images relative to each
 * part), with the given chunks per window; next and state get the result. */
static void prefill_two(lh_model *m, int chunks, int split, const int32_t *tok, const lh_model_image *im,
                        int n_im, float *next, float *state) {
  lh_model_decoder *d = NULL;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_decoder_new(m, 2, &d, &err), 0);
  ck_assert_int_eq(lh_model_decoder_set_prefill_chunks(d, chunks), 0);
  lh_model_image a[3], b[3];
  int na = 0, nb = 0;
  for (int i = 0; i < n_im; i++) {
    if (im[i].at < split) a[na++] = im[i];
    else b[nb] = im[i], b[nb++].at -= split;
  }
  ck_assert_msg(lh_model_prefill(d, 1, tok, split, na ? a : NULL, na, NULL, &err) == 0, "%s", err.msg);
  ck_assert_msg(lh_model_prefill(d, 1, tok + split, N_TOK - split, nb ? b : NULL, nb, next, &err) == 0, "%s",
                err.msg);
  ck_assert_int_eq(lh_model_decoder_state_get(d, 1, state), 0);
  lh_model_decoder_free(d);
}

static void windowed_equals_one_pass(int conv) {
  lh_model *m = small_model(conv);
  int32_t tok[N_TOK];
  lh_model_image im[3];
  float pixels[3 * 8 * 8 * 3];
  int n_im = make_input(tok, im, pixels);
  size_t sf = state_floats(m);
  float *s_one = malloc(sf * sizeof(float)), *s_win = malloc(sf * sizeof(float));
  float next_one[LH_TOK_VOCAB], next_win[LH_TOK_VOCAB];
  /* one pass: a window of 1024 chunks of 4 holds all 301 tokens */
  prefill_two(m, 1024, 1, tok, im, n_im, next_one, s_one);
  double worst_logp = 0, worst_state = 0, scale = 0;
  const int chunks[3] = {1, 2, 5}, splits[3] = {1, 7, 120};
  for (int c = 0; c < 3; c++)
    for (int sp = 0; sp < 3; sp++) {
      prefill_two(m, chunks[c], splits[sp], tok, im, n_im, next_win, s_win);
      for (int v = 0; v < LH_TOK_VOCAB; v++) worst_logp = fmax(worst_logp, fabs(next_one[v] - next_win[v]));
      for (size_t i = 0; i < sf; i++) {
        worst_state = fmax(worst_state, fabs(s_one[i] - s_win[i]));
        scale = fmax(scale, fabs(s_one[i]));
      }
    }
  printf("conv %d: windowed prefill (windows of 4, 8 and 20 tokens, 3 images) vs one pass over %d tokens: "
         "max |next-token logp difference| %.3e, max |state difference| %.3e (state up to %.3e)\n",
         conv, N_TOK, worst_logp, worst_state, scale);
  ck_assert(worst_logp < 1e-4);
  ck_assert(worst_state < 1e-4 * fmax(1.0, scale));
  free(s_one);
  free(s_win);
  lh_model_free(m);
}

START_TEST(test_windowed_equals_one_pass) { windowed_equals_one_pass(0); }
END_TEST

START_TEST(test_windowed_equals_one_pass_conv) { windowed_equals_one_pass(4); }
END_TEST

/* The one-pass prefill itself against the training forward's final state,
 * so that the reference above is the model's function. */
static void one_pass_is_the_forward(int conv) {
  lh_model *m = small_model(conv);
  int32_t tok[N_TOK], targets[N_TOK], offsets[2] = {0, N_TOK};
  lh_model_image im[3];
  float pixels[3 * 8 * 8 * 3];
  int n_im = make_input(tok, im, pixels);
  for (int t = 0; t < N_TOK; t++) targets[t] = -1;
  size_t sf = state_floats(m);
  float *s_fwd = malloc(sf * sizeof(float)), *s_win = malloc(sf * sizeof(float));
  lh_model_batch b = {.n_tokens = N_TOK, .tokens = tok, .targets = targets, .n_seq = 1, .seq_offsets = offsets,
                      .n_images = n_im, .images = im};
  lh_model_cache *c = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_forward(m, &b, &c, NULL, NULL, s_fwd, &err) == 0, "%s", err.msg);
  float next[LH_TOK_VOCAB];
  prefill_two(m, 2, 1, tok, im, n_im, next, s_win);
  double worst = 0;
  for (size_t i = 0; i < sf; i++) worst = fmax(worst, fabs(s_fwd[i] - s_win[i]));
  printf("conv %d: windowed prefill (8-token windows) vs training forward: max |state difference| %.3e\n", conv,
         worst);
  ck_assert(worst < 1e-4);
  lh_model_cache_free(c);
  free(s_fwd);
  free(s_win);
  lh_model_free(m);
}

START_TEST(test_one_pass_is_the_forward) { one_pass_is_the_forward(0); }
END_TEST

START_TEST(test_one_pass_is_the_forward_conv) { one_pass_is_the_forward(4); }
END_TEST

/* The rule: a window moves before an image that begins inside it, grows
 * past one that starts it, and otherwise is start + window. */
START_TEST(test_window_end_rule) {
  lh_model_span sp[2] = {{10, 4}, {20, 16}};
  ck_assert_uint_eq(lh_model_window_end(0, 100, 8, sp, 2), 8);    /* before the first image */
  ck_assert_uint_eq(lh_model_window_end(0, 100, 12, sp, 2), 10);  /* would cut 10..13: ends at 10 */
  ck_assert_uint_eq(lh_model_window_end(10, 100, 2, sp, 2), 14);  /* starts the window: kept whole */
  ck_assert_uint_eq(lh_model_window_end(14, 100, 8, sp, 2), 20);  /* before the second */
  ck_assert_uint_eq(lh_model_window_end(20, 100, 8, sp, 2), 36);  /* 16 patches in one window */
  ck_assert_uint_eq(lh_model_window_end(36, 100, 8, sp, 2), 44);
  ck_assert_uint_eq(lh_model_window_end(96, 100, 8, sp, 2), 100); /* the end of the sequence */
  ck_assert_uint_eq(lh_model_window_end(0, 30, 100, sp, 2), 20);  /* an image running past n: cut before it */
  ck_assert_uint_eq(lh_model_window_end(0, 100, 0, NULL, 0), 1);  /* window 0 counts as 1 */
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_prefill");
  TCase *tc = tcase_create("prefill");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_window_end_rule);
  tcase_add_test(tc, test_windowed_equals_one_pass);
  tcase_add_test(tc, test_windowed_equals_one_pass_conv);
  tcase_add_test(tc, test_one_pass_is_the_forward);
  tcase_add_test(tc, test_one_pass_is_the_forward_conv);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

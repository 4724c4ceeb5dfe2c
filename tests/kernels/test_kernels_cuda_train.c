/* The whole model on the CUDA backend against the CPU backend, on the
 * default model (examples/model.ini) and the same packed batch:
 * - one fp32 training step: loss and per-token log p within 1e-5
 *   relative, the whole gradient buffer within 1e-4 (every kernel is within
 *   1e-5; four layers of them, in another summation order, compound);
 * - the decode path (recurrent steps): log-probabilities within 1e-5;
 * - both again with the short convolution (conv = 4, taps that mix);
 * - 50 AdamW steps with bf16 matrix products on CUDA against 50 fp32 steps
 *   on the CPU from the same initial weights: every CUDA loss finite and
 *   within 5% of the CPU's loss at the same step, and both runs learning
 *   (last loss below the first).
 * Without a device it exits 77 ("skipped: no CUDA device"). CUDA cannot be
 * used in a forked child after the parent touched the driver, so this
 * suite runs without forking. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "tests/kernels/test_kernels_util.h"

#define POOL_BYTES ((size_t)2 << 30)
#define N_SEQ 4
#define SEQ_LEN 64
#define T_TOK (N_SEQ * SEQ_LEN)
#define STEPS 50

static const lh_backend *G, *C;
static lh_model_config cfg;
static int32_t tokens[T_TOK], targets[T_TOK], offsets[N_SEQ + 1];
static lh_model_batch batch;

static void setup_batch(void) {
  static const char *text =
      "the quick brown fox jumps over the lazy dog; a tool call returns a number. ";
  size_t len = strlen(text);
  for (int s = 0; s < N_SEQ; s++)
    for (int i = 0; i < SEQ_LEN; i++) {
      int t = s * SEQ_LEN + i;
      tokens[t] = (int32_t)(unsigned char)text[(size_t)(s * 7 + i) % len];
    }
  for (int s = 0; s <= N_SEQ; s++) offsets[s] = s * SEQ_LEN;
  for (int t = 0; t < T_TOK; t++) targets[t] = (t + 1) % SEQ_LEN ? tokens[t + 1] : -1;
  memset(&batch, 0, sizeof batch);
  batch.n_tokens = T_TOK;
  batch.tokens = tokens;
  batch.targets = targets;
  batch.n_seq = N_SEQ;
  batch.seq_offsets = offsets;
}

/* The model of cfg with the short convolution of width conv (0: none);
 * its taps, the identity at init, set to the same mixing values on either
 * backend. */
static lh_model *model_on(const lh_backend *be, int conv) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  lh_model *m = NULL;
  lh_model_config c = cfg;
  c.conv = conv;
  ck_assert_msg(lh_model_new(&c, be, &m, &err) == 0, "model on %s: %s", be->name, err.msg);
  ck_assert_int_eq(lh_model_init(m, 1234), 0);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  for (int i = 0; i < lh_model_n_tensors(m); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    if (!strstr(t->name, ".conv")) continue;
    float *h = alloc_f(t->numel);
    for (size_t j = 0; j < t->numel; j++) h[j] = (float)((int)((j * 2654435761u) % 1001) - 500) / 1000.0f;
    ck_assert_int_eq(be->upload(be->context, lh_model_params(m) + t->offset, h, sizeof(float) * t->numel), 0);
    free(h);
  }
  return m;
}

static float *host_copy(const lh_backend *be, const float *src, size_t n) {
  float *h = alloc_f(n);
  ck_assert_int_eq(be->download(be->context, h, src, sizeof(float) * n), 0);
  return h;
}

static void step_fp32(int conv) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  lh_model *mc = model_on(C, conv), *mg = model_on(G, conv);
  printf("train fp32, conv %d:\n", conv);
  size_t nf = lh_model_n_floats(mc);
  ck_assert_uint_eq(nf, lh_model_n_floats(mg));
  float *pc = host_copy(C, lh_model_params(mc), nf), *pg = host_copy(G, lh_model_params(mg), nf);
  ck_assert_mem_eq(pc, pg, sizeof(float) * nf); /* same initial weights */
  lh_model_cache *cc = NULL, *cg = NULL;
  float lc[T_TOK], lg[T_TOK];
  double loss_c = 0, loss_g = 0;
  ck_assert_msg(lh_model_forward(mc, &batch, &cc, lc, &loss_c, NULL, &err) == 0, "%s", err.msg);
  ck_assert_msg(lh_model_forward(mg, &batch, &cg, lg, &loss_g, NULL, &err) == 0, "%s", err.msg);
  double rel = fabs(loss_g - loss_c) / fabs(loss_c);
  printf("train fp32: loss cpu %.6f cuda %.6f rel %.3e (tol 1e-5)\n", loss_c, loss_g, rel);
  ck_assert(rel <= 1e-5);
  rel = rel_max_diff_f(lg, lc, T_TOK);
  printf("train fp32: logp max rel diff %.3e (tol 1e-5)\n", rel);
  ck_assert(rel <= 1e-5);
  ck_assert_int_eq(lh_model_zero_grads(mc), 0);
  ck_assert_int_eq(lh_model_zero_grads(mg), 0);
  ck_assert_msg(lh_model_backward(mc, cc, NULL, NULL, &err) == 0, "%s", err.msg);
  ck_assert_msg(lh_model_backward(mg, cg, NULL, NULL, &err) == 0, "%s", err.msg);
  float *gc = host_copy(C, lh_model_grads(mc), nf), *gg = host_copy(G, lh_model_grads(mg), nf);
  rel = rel_max_diff_f(gg, gc, nf);
  printf("train fp32: gradients (%zu floats) max rel diff %.3e (tol 1e-4)\n", nf, rel);
  ck_assert(rel <= 1e-4);
  /* per tensor, for the log */
  for (int i = 0; i < lh_model_n_tensors(mc); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(mc, i);
    double r = rel_max_diff_f(gg + t->offset, gc + t->offset, t->numel);
    if (r > 1e-5) printf("  %-32s rel %.3e\n", t->name, r);
  }
  lh_model_cache_free(cc), lh_model_cache_free(cg);
  lh_model_free(mc), lh_model_free(mg);
  free(pc), free(pg), free(gc), free(gg);
}

START_TEST(test_step_fp32) { step_fp32(0); }
END_TEST

START_TEST(test_step_fp32_conv) { step_fp32(4); }
END_TEST

static void decode_fp32(int conv) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  lh_model *mc = model_on(C, conv), *mg = model_on(G, conv);
  lh_model_decoder *dc = NULL, *dg = NULL;
  const int B = 2, V = cfg.vocab;
  ck_assert_msg(lh_model_decoder_new(mc, B, &dc, &err) == 0, "%s", err.msg);
  ck_assert_msg(lh_model_decoder_new(mg, B, &dg, &err) == 0, "%s", err.msg);
  float *lc = alloc_f((size_t)B * V), *lg = alloc_f((size_t)B * V);
  double worst = 0;
  for (int step = 0; step < 12; step++) {
    int32_t tok[2] = {tokens[step], tokens[SEQ_LEN + step]};
    ck_assert_msg(lh_model_decode_step(dc, tok, lc, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(lh_model_decode_step(dg, tok, lg, NULL, &err) == 0, "%s", err.msg);
    double rel = rel_max_diff_f(lg, lc, (size_t)B * V);
    if (rel > worst) worst = rel;
  }
  printf("decode fp32, conv %d: 12 steps, logp max rel diff %.3e (tol 1e-5)\n", conv, worst);
  ck_assert(worst <= 1e-5);
  lh_model_decoder_free(dc), lh_model_decoder_free(dg);
  lh_model_free(mc), lh_model_free(mg);
  free(lc), free(lg);
}

START_TEST(test_decode_fp32) { decode_fp32(0); }
END_TEST

START_TEST(test_decode_fp32_conv) { decode_fp32(4); }
END_TEST

/* STEPS AdamW steps on m; losses[i] is the loss of step i's forward. */
static void train(lh_model *m, double *losses) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  lh_model_cache *c = NULL;
  lh_adamw_params ap = {.lr = 5e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f};
  for (int i = 0; i < STEPS; i++) {
    ck_assert_msg(lh_model_forward(m, &batch, &c, NULL, &losses[i], NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(lh_model_zero_grads(m), 0);
    ck_assert_msg(lh_model_backward(m, c, NULL, NULL, &err) == 0, "%s", err.msg);
    ap.step = i + 1;
    ck_assert_int_eq(lh_model_adamw_step(m, &ap), 0);
  }
  lh_model_cache_free(c);
}

START_TEST(test_train_bf16) {
  lh_model *mc = model_on(C, 0), *mg = model_on(G, 0);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_BF16), 0);
  double lc[STEPS], lg[STEPS], worst = 0;
  train(mc, lc);
  train(mg, lg);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  for (int i = 0; i < STEPS; i++) {
    double rel = fabs(lg[i] - lc[i]) / fabs(lc[i]);
    if (i % 10 == 0 || i == STEPS - 1)
      printf("train bf16 step %2d: loss cpu fp32 %.4f cuda bf16 %.4f rel %.3e\n", i, lc[i],
             lg[i], rel);
    ck_assert_msg(isfinite(lg[i]), "step %d: cuda bf16 loss %g", i, lg[i]);
    if (rel > worst) worst = rel;
  }
  printf("train bf16: %d steps, worst loss rel diff %.3e (tol 5e-2)\n", STEPS, worst);
  ck_assert(worst <= 5e-2);
  ck_assert(lc[STEPS - 1] < lc[0]);
  ck_assert(lg[STEPS - 1] < lg[0]);
  lh_model_free(mc), lh_model_free(mg);
}
END_TEST

int main(void) {
  char name[256];
  if (lh_kernels_cuda_devices(name, sizeof name) == 0) {
    lh_errbuf err;
    lh_errbuf_clear(&err);
    const lh_backend *b = NULL;
    int rc = lh_backend_by_name("cuda", &b, &err);
    if (rc != LH_EKERNELS_NOT_AVAILABLE || b) {
      fprintf(stderr, "no device: by name gave %d (%s)\n", rc, err.msg);
      return 1;
    }
    printf("skipped: no CUDA device\n");
    return 77;
  }
  const char *src = getenv("LH_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/model.ini", src ? src : ".");
  lh_errbuf err;
  lh_errbuf_clear(&err);
  if (lh_model_config_parse_file(path, &cfg, &err) != 0) {
    fprintf(stderr, "cannot read %s: %s\n", path, err.msg);
    return 1;
  }
  setup_batch();
  C = lh_backend_cpu();
  if (lh_backend_cuda_open(&G, POOL_BYTES, &err) != 0) {
    fprintf(stderr, "cannot open the CUDA backend on %s: %s\n", name, err.msg);
    return 1;
  }
  printf("device: %s\n", name);
  Suite *s = suite_create("kernels_cuda_train");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_step_fp32);
  tcase_add_test(tc, test_step_fp32_conv);
  tcase_add_test(tc, test_decode_fp32);
  tcase_add_test(tc, test_decode_fp32_conv);
  tcase_add_test(tc, test_train_bf16);
  suite_add_tcase(s, tc);
  int failed = lh_test_run(s, CK_NOFORK);
  lh_backend_close(G);
  return failed == 0 ? 0 : 1;
}

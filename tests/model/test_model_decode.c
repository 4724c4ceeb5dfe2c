/* The decode's CPU path (model/decode_cpu.c, model/decode_pack.c): every
 * log-probability of the vocabulary after each decoded token equals the
 * training forward's on the same tokens, with rows stepped in changing
 * subsets as an actor steps them (each row's state updated where it lies);
 * new weights are packed again when the parameters change and not before;
 * the packed product (AVX2 and portable) equals a plain one on shapes that
 * do not fill a panel. Each test prints the largest difference it saw.
 * Tolerance: 1e-4 on log-probabilities (float32; the forward's chunked
 * attention sums in another order: up to 2.8e-5 seen, the same with the
 * backend path of decode.c). Against that backend path itself (the decode
 * before the CPU path, still what other backends run): 1e-5, and the same
 * experts chosen. */
#include "tests/model/test_model_util.h"

#include <stdio.h>

#include "model/decode_internal.h"
#include "tests/case_main.h"

#define NSEQ 5
#define MAXLEN 40
#define TOL 1e-4

static lh_model *demo_model(uint64_t seed, int conv) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.seed = seed;
  cfg.conv = conv;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&cfg, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  tm_perturb(m, seed + 3, 0.02);
  return m;
}

static int seq_len(int i) { return MAXLEN - 6 * i; }

static void make_seqs(int32_t seqs[NSEQ][MAXLEN], uint64_t seed) {
  for (int i = 0; i < NSEQ; i++) {
    seqs[i][0] = LH_TOK_BOS;
    for (int t = 1; t < MAXLEN; t++) seqs[i][t] = (int32_t)(tm_next(&seed) % 256);
  }
}

/* ref[t][v]: log-softmax of the training forward's logits after token t of
 * the sequence (one forward over all of it: causal). */
static void forward_logp(lh_model *m, const int32_t *seq, int n, float *ref) {
  int V = lh_model_get_config(m)->vocab;
  int32_t offsets[2] = {0, n};
  lh_model_batch b = {.n_tokens = n, .tokens = seq, .n_seq = 1, .seq_offsets = offsets};
  lh_model_cache *c = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_forward(m, &b, &c, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
  ck_assert(c->inv_temperature == 1.0f);
  for (int t = 0; t < n; t++) {
    const float *z = c->logits + (size_t)t * V;
    double mx = z[0], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, z[v]);
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    for (int v = 0; v < V; v++) ref[(size_t)t * V + v] = (float)(z[v] - mx - log(s));
  }
  lh_model_cache_free(c);
}

/* Decodes the sequences with d, rows in changing subsets, and returns the
 * largest |logp difference| against the forward of m. */
static double decode_against_forward(lh_model *m, lh_model_decoder *d, int32_t seqs[NSEQ][MAXLEN]) {
  int V = lh_model_get_config(m)->vocab;
  float *ref = malloc(sizeof(float) * NSEQ * MAXLEN * V);
  float *logp = malloc(sizeof(float) * NSEQ * V);
  ck_assert_ptr_nonnull(ref);
  ck_assert_ptr_nonnull(logp);
  for (int i = 0; i < NSEQ; i++) forward_logp(m, seqs[i], seq_len(i), ref + (size_t)i * MAXLEN * V);
  int fed[NSEQ] = {0};
  double worst = 0;
  lh_errbuf err = {0};
  for (int step = 0;; step++) {
    int32_t rows[NSEQ], tok[NSEQ];
    int n = 0;
    /* a row sits out every third step, shifted per row, as rows do while
     * their environments answer; rows in reverse order on odd steps */
    for (int j = 0; j < NSEQ; j++) {
      int i = step % 2 ? NSEQ - 1 - j : j;
      if (fed[i] < seq_len(i) && (step + i) % 3 != 0) rows[n] = i, tok[n] = seqs[i][fed[i]], n++;
    }
    int left = 0;
    for (int i = 0; i < NSEQ; i++) left += fed[i] < seq_len(i);
    if (!left) break;
    ck_assert_msg(lh_model_decode_step_rows(d, rows, n, tok, logp, NULL, &err) == 0, "%s", err.msg);
    for (int j = 0; j < n; j++) {
      int i = rows[j], t = fed[i]++;
      const float *want = ref + ((size_t)i * MAXLEN + t) * V;
      for (int v = 0; v < V; v++) worst = fmax(worst, fabs(logp[(size_t)j * V + v] - want[v]));
    }
  }
  free(ref), free(logp);
  return worst;
}

/* conv: the short convolution's width (0: none), its tails carried per row. */
static void decode_logits_match_forward(int conv) {
  lh_model *m = demo_model(11, conv);
  int32_t seqs[NSEQ][MAXLEN];
  make_seqs(seqs, 5);
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &d, NULL), 0);
  double worst = decode_against_forward(m, d, seqs);
  printf("conv %d: decode (rows in subsets) vs training forward, every vocabulary entry: max |logp "
         "difference| %.3e (tolerance %.0e)\n", conv, worst, TOL);
  ck_assert(worst < TOL);
  lh_model_decoder_free(d);
  lh_model_free(m);
}

START_TEST(test_decode_logits_match_forward) { decode_logits_match_forward(0); }
END_TEST

START_TEST(test_decode_logits_match_forward_conv) { decode_logits_match_forward(4); }
END_TEST

START_TEST(test_decode_packs_once_per_version) {
  lh_model *m = demo_model(11, 0), *fresh = demo_model(12, 0);
  int32_t seqs[NSEQ][MAXLEN];
  make_seqs(seqs, 9);
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &d, NULL), 0);
  double before = decode_against_forward(m, d, seqs);
  printf("decode vs forward with the first weights %.3e\n", before);
  const struct lh_model_packed *pk = m->packed;
  ck_assert_ptr_nonnull(pk);
  uint64_t packed = pk->version;
  ck_assert(packed == m->params_version); /* packed once, still current after every step */
  /* new weights arrive as an actor takes them: the decoder keeps pointing
   * at m, and the next step packs the new version */
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_copy_params(m, fresh, &err) == 0, "%s", err.msg);
  ck_assert(m->params_version != packed);
  for (int i = 0; i < NSEQ; i++) ck_assert_int_eq(lh_model_decoder_reset(d, i), 0);
  double after = decode_against_forward(fresh, d, seqs);
  ck_assert(m->packed->version == m->params_version);
  printf("decode vs forward after new weights %.3e\n", after);
  ck_assert(before < TOL && after < TOL);
  lh_model_decoder_free(d);
  lh_model_free(fresh);
  lh_model_free(m);
}
END_TEST

static void decode_equals_backend_path(int conv) {
  lh_model *m = demo_model(21, conv);
  const lh_model_config *cf = lh_model_get_config(m);
  int V = cf->vocab, L = cf->layers, k = cf->topk;
  int32_t seqs[NSEQ][MAXLEN];
  make_seqs(seqs, 13);
  lh_model_decoder *fast = NULL, *ref = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &fast, NULL), 0);
  ck_assert_int_eq(lh_model_decoder_new(m, NSEQ, &ref, NULL), 0);
  ck_assert(fast->cpu);
  ref->cpu = 0; /* the backend path (step_core with gathered states) */
  float *la = malloc(sizeof(float) * NSEQ * V), *lb = malloc(sizeof(float) * NSEQ * V);
  int32_t *ea = malloc(sizeof(int32_t) * L * NSEQ * k), *eb = malloc(sizeof(int32_t) * L * NSEQ * k);
  double worst = 0;
  int expert_diffs = 0;
  lh_errbuf err = {0};
  for (int t = 0; t < MAXLEN; t++) {
    int32_t rows[NSEQ], tok[NSEQ];
    int n = 0;
    for (int i = NSEQ - 1; i >= 0; i--)
      if ((t + i) % 4 != 1) rows[n] = i, tok[n] = seqs[i][t], n++;
    ck_assert_msg(lh_model_decode_step_rows(fast, rows, n, tok, la, ea, &err) == 0, "%s", err.msg);
    ck_assert_msg(lh_model_decode_step_rows(ref, rows, n, tok, lb, eb, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n * V; i++) worst = fmax(worst, fabs(la[i] - lb[i]));
    for (int i = 0; i < L * n * k; i++) expert_diffs += ea[i] != eb[i];
  }
  printf("conv %d: decode CPU path vs backend path, rows in subsets: max |logp difference| %.3e, expert "
         "differences %d\n", conv, worst, expert_diffs);
  ck_assert(worst < 1e-5);
  ck_assert_int_eq(expert_diffs, 0);
  free(la), free(lb), free(ea), free(eb);
  lh_model_decoder_free(fast);
  lh_model_decoder_free(ref);
  lh_model_free(m);
}

START_TEST(test_decode_equals_backend_path) { decode_equals_backend_path(0); }
END_TEST

START_TEST(test_decode_equals_backend_path_conv) { decode_equals_backend_path(4); }
END_TEST

/* y = x W^T by plain loops in double. */
static void gemm_ref(double *y, const float *x, const float *w, int B, int in, int out) {
  for (int b = 0; b < B; b++)
    for (int o = 0; o < out; o++) {
      double s = 0;
      for (int i = 0; i < in; i++) s += (double)x[(size_t)b * in + i] * w[(size_t)o * in + i];
      y[(size_t)b * out + o] = s;
    }
}

START_TEST(test_packed_gemm_shapes) {
  static const int Bs[] = {1, 2, 3, 4, 5, 9}, ins[] = {1, 7, 64}, outs[] = {1, 15, 16, 33};
  uint64_t s = 3;
  double worst = 0;
  for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
    for (size_t ii = 0; ii < sizeof ins / sizeof *ins; ii++)
      for (size_t oi = 0; oi < sizeof outs / sizeof *outs; oi++) {
        int B = Bs[bi], in = ins[ii], out = outs[oi], out_a = out / 2, out_b = out - out_a;
        float *x = malloc(sizeof(float) * B * in), *w = malloc(sizeof(float) * out * in);
        float *P = malloc(sizeof(float) * lh_decode_packed_floats(out, in));
        float *y = malloc(sizeof(float) * B * out);
        double *ref = malloc(sizeof(double) * B * out);
        for (int i = 0; i < B * in; i++) x[i] = (float)tm_uniform(&s);
        for (int i = 0; i < out * in; i++) w[i] = (float)tm_uniform(&s);
        /* two stacked sources, as wq..wg are stacked */
        lh_decode_src src[2] = {{w, out_a}, {w + (size_t)out_a * in, out_b}};
        lh_decode_pack(P, src, 2, in);
        gemm_ref(ref, x, w, B, in, out);
        for (int avx2 = 0; avx2 <= lh_decode_have_avx2(); avx2++)
          for (int add = 0; add <= 1; add++) {
            for (int i = 0; i < B * out; i++) y[i] = add ? 1.0f : -7.0f;
            lh_decode_gemm(avx2, y, out, x, in, B, in, P, out, add);
            for (int i = 0; i < B * out; i++)
              worst = fmax(worst, fabs(y[i] - (ref[i] + (add ? 1.0 : 0.0))));
          }
        free(x), free(w), free(P), free(y), free(ref);
      }
  printf("packed product vs plain loops (AVX2 %s): max |difference| %.3e\n",
         lh_decode_have_avx2() ? "and portable" : "absent; portable", worst);
  ck_assert(worst < 1e-4);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_decode");
  TCase *tc = tcase_create("decode");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_decode_logits_match_forward);
  tcase_add_test(tc, test_decode_logits_match_forward_conv);
  tcase_add_test(tc, test_decode_packs_once_per_version);
  tcase_add_test(tc, test_decode_equals_backend_path);
  tcase_add_test(tc, test_decode_equals_backend_path_conv);
  tcase_add_test(tc, test_packed_gemm_shapes);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

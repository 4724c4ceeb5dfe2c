/* The PyTorch peer of bench_model (bench/peer_torch.py) computes the same
 * model as longhaul: from the same weights (longhaul's model.safetensors)
 * and the same tokens, its loss and every trainable tensor's gradient equal
 * longhaul's within the tolerances below (float32 on both sides, sums in
 * different orders). The ratio bench_model prints is only honest if both
 * sides do the same work. Without /usr/bin/python3 and python3-torch the
 * suite exits 77 (skipped). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tests/proc_util.h"

/* |loss_peer - loss| <= LOSS_TOL * |loss|; per tensor, the largest
 * |grad_peer - grad| <= GRAD_TOL * the largest |grad| of that tensor. */
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4

/* Two sequences of 64 tokens; 3 layers so that the cross-layer residuals
 * of layer 2 see two earlier layers; chunk 8 so each sequence has 8
 * chunks; top 2 of 8 experts plus one shared. */
static const char *const config_text =
    "[model]\nd_model = 32\nlayers = 3\nheads = 2\nexperts = 8\ntopk = 2\nshared_experts = 1\n"
    "latent = 16\nexpert_hidden = 32\nchunk = 8\nseed = 5\n";
enum { N_SEQ = 2, SEQ_LEN = 64, T = N_SEQ * SEQ_LEN };

START_TEST(test_peer_matches) {
  lh_model_config cfg;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_config_parse_string(config_text, &cfg, &err), 0);
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, &err), 0);
  char dir[64], path[256], peer_dir[256];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "peer-torch"), 0);
  ck_assert_int_eq(lh_model_save(m, dir, &err), 0);

  int32_t tok[T], tgt[T], off[N_SEQ + 1];
  uint64_t s = 7;
  for (int t = 0; t < T; t++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    tok[t] = (int32_t)((s >> 33) % 256);
  }
  for (int t = 0; t < T; t++) tgt[t] = (t + 1) % SEQ_LEN ? tok[t + 1] : -1;
  for (int i = 0; i <= N_SEQ; i++) off[i] = i * SEQ_LEN;
  snprintf(path, sizeof path, "%s/tokens.i32", dir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(tok, sizeof tok[0], T, f), T);
  ck_assert_int_eq(fclose(f), 0);

  lh_model_batch b = {.n_tokens = T, .tokens = tok, .targets = tgt, .n_seq = N_SEQ,
                      .seq_offsets = off};
  lh_model_cache *c = NULL;
  double loss = 0;
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  ck_assert_int_eq(lh_model_forward(m, &b, &c, NULL, &loss, NULL, &err), 0);
  ck_assert_int_eq(lh_model_zero_grads(m), 0);
  ck_assert_int_eq(lh_model_backward(m, c, NULL, NULL, &err), 0);

  snprintf(peer_dir, sizeof peer_dir, "%s/peer", dir);
  char cmd[2048], out[8192];
  snprintf(cmd, sizeof cmd,
           "env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 /usr/bin/python3 "
           "'%s/bench/peer_torch.py' --seqs %d --seq-len %d --params '%s/model.safetensors' "
           "--tokens '%s' --check '%s'",
           getenv("LH_SOURCE_DIR") ? getenv("LH_SOURCE_DIR") : ".", N_SEQ, SEQ_LEN, dir, path,
           peer_dir);
  int rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 0, "peer_torch.py --check exited %d: %s", rc, out);
  const char *at = strstr(out, "peer_torch loss ");
  ck_assert_msg(at, "no loss in the peer's output: %s", out);
  double peer_loss = strtod(at + 16, NULL);
  printf("peer_torch: loss longhaul %.9g, peer %.9g, relative difference %.3g (tolerance %g)\n",
         loss, peer_loss, fabs(peer_loss - loss) / fabs(loss), LOSS_TOL);
  ck_assert_double_le(fabs(peer_loss - loss), LOSS_TOL * fabs(loss));

  /* the peer's gradients, in the checkpoint layout, read as a model */
  lh_model *g = NULL;
  ck_assert_msg(lh_model_load(peer_dir, lh_backend_cpu(), &g, &err) == 0, "%s", err.msg);
  const float *mine = lh_model_grads(m), *theirs = lh_model_params(g);
  double worst = 0;
  const char *worst_name = "";
  int compared = 0;
  for (int i = 0; i < lh_model_n_tensors(m); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    /* no images in the batch, and the balancing bias takes no gradient */
    if (!t->trainable || !strncmp(t->name, "patch.", 6)) continue;
    double diff = 0, scale = 0;
    for (size_t j = 0; j < t->numel; j++) {
      diff = fmax(diff, fabs((double)theirs[t->offset + j] - mine[t->offset + j]));
      scale = fmax(scale, fabs((double)mine[t->offset + j]));
    }
    ck_assert_msg(scale > 0, "tensor %s has no gradient in longhaul", t->name);
    ck_assert_msg(diff <= GRAD_TOL * scale, "tensor %s: largest difference %.3g over largest "
                  "gradient %.3g is above %g", t->name, diff, scale, GRAD_TOL);
    if (diff / scale > worst) worst = diff / scale, worst_name = t->name;
    compared++;
  }
  printf("peer_torch: %d gradients compared; largest relative difference %.3g in %s "
         "(tolerance %g)\n", compared, worst, worst_name, GRAD_TOL);
  ck_assert_int_gt(compared, 40);
  lh_model_free(g);
  lh_model_cache_free(c);
  lh_model_free(m);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  if (access("/usr/bin/python3", X_OK) != 0 ||
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    fprintf(stderr, "test_peer_torch: no /usr/bin/python3 with torch (apt-get install "
            "python3-torch); skipped\n");
    return 77;
  }
  Suite *s = suite_create("peer_torch");
  TCase *tc = tcase_create("peer");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_peer_matches);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

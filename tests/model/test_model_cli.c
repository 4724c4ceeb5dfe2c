/* longhaul init and score through the real binary (LH_BIN): checkpoints are
 * deterministic in the seed, score prints n-1 log-probabilities equal to
 * the library's forward, images are accepted, and every bad input gives a
 * clear message and the documented exit code. */
#include "tests/model/test_model_util.h"
#include "tests/proc_util.h"
#include "tests/case_main.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static char work[] = "/tmp/lh_model_cli_XXXXXX";

/* Runs the shell command, returns its exit code; out gets stdout+stderr. */
static int run(const char *cmd, char *out, size_t cap) { return lh_proc_run_capture(cmd, out, cap); }

static const char *bin(void) {
  const char *b = getenv("LH_BIN");
  ck_assert_msg(b != NULL, "LH_BIN is not set (run through ctest)");
  return b;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void setup(void) { ck_assert_ptr_nonnull(mkdtemp(work)); }

static const char *ini =
    "[model]\nd_model = 32\nlayers = 2\nheads = 2\nexperts = 4\nlatent = 16\n"
    "expert_hidden = 16\npatch = 4\nmax_patches = 16\n[learner]\nlr = 3e-4\n";

START_TEST(test_init_and_score) {
  setup();
  char cfg[600], cmd[2048], out[1 << 16];
  snprintf(cfg, sizeof cfg, "%s/model.ini", work);
  write_text(cfg, ini);
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 5 --out %s/a", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "model.safetensors"));
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 5 --out %s/b && cmp %s/a/model.safetensors "
           "%s/b/model.safetensors", bin(), cfg, work, work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "same seed, different files: %s", out);
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 6 --out %s/c && ! cmp -s "
           "%s/a/model.safetensors %s/c/model.safetensors", bin(), cfg, work, work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "seed ignored: %s", out);
  /* An existing checkpoint is not overwritten without --force. */
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 6 --out %s/a", bin(), cfg, work);
  ck_assert_int_eq(run(cmd, out, sizeof out), 2);
  ck_assert_msg(strstr(out, "refusing to overwrite a checkpoint (give --force"), "%s", out);
  snprintf(cmd, sizeof cmd, "cmp %s/a/model.safetensors %s/b/model.safetensors", work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "the refused init changed a: %s", out);
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 6 --out %s/a --force && cmp %s/a/model.safetensors "
           "%s/c/model.safetensors", bin(), cfg, work, work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "--force replaces it: %s", out);

  /* score: 12 tokens, with a 4x8 image (2 patches of 4x4) at 5..6 */
  int32_t tok[12] = {LH_TOK_BOS, 'a', 'b', 'c', LH_TOK_IMG, LH_TOK_PAD, LH_TOK_PAD,
                     'x', LH_TOK_CALL, 'y', LH_TOK_CALL_END, LH_TOK_EOS};
  float px[4 * 8 * 3];
  char js[1 << 14];
  int w = snprintf(js, sizeof js, "{\"tokens\":[");
  for (int t = 0; t < 12; t++) w += snprintf(js + w, sizeof js - w, "%s%d", t ? "," : "", tok[t]);
  w += snprintf(js + w, sizeof js - w, "],\"images\":[{\"at\":5,\"height\":4,\"width\":8,\"pixels\":[");
  for (int i = 0; i < 96; i++) {
    px[i] = (float)(i % 7) / 8.0f;
    w += snprintf(js + w, sizeof js - w, "%s%.9g", i ? "," : "", px[i]);
  }
  snprintf(js + w, sizeof js - w, "]}]}");
  char in[600];
  snprintf(in, sizeof in, "%s/in.json", work);
  write_text(in, js);
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s/a --input %s", bin(), work, in);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  cJSON *o = cJSON_Parse(out);
  ck_assert_msg(o != NULL, "not JSON: %s", out);
  cJSON *lp = cJSON_GetObjectItem(o, "logprobs");
  ck_assert_int_eq(cJSON_GetArraySize(lp), 11);

  /* the same through the library */
  char dir[600];
  snprintf(dir, sizeof dir, "%s/a", work);
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_load(dir, lh_backend_cpu(), &m, NULL), 0);
  int32_t targets[12], offsets[2] = {0, 12};
  for (int t = 0; t < 12; t++) targets[t] = t + 1 < 12 ? tok[t + 1] : -1;
  targets[4] = targets[5] = -1; /* targets that are patches */
  lh_model_image im = {.at = 5, .height = 4, .width = 8, .pixels = px};
  lh_model_batch b = {.n_tokens = 12, .tokens = tok, .targets = targets, .n_seq = 1,
                      .seq_offsets = offsets, .n_images = 1, .images = &im};
  float logp[12];
  lh_model_cache *c = NULL;
  ck_assert_int_eq(lh_model_forward(m, &b, &c, logp, NULL, NULL, NULL), 0);
  double worst = 0;
  for (int t = 0; t < 11; t++) {
    double v = cJSON_GetArrayItem(lp, t)->valuedouble;
    ck_assert(v <= 0);
    worst = fmax(worst, fabs(v - logp[t]));
  }
  printf("score vs library forward: max difference %.2e; logp[0] = %.6f\n", worst, logp[0]);
  ck_assert(worst < 1e-6);
  ck_assert(cJSON_GetArrayItem(lp, 4)->valuedouble == 0);
  cJSON_Delete(o);
  /* windows with carried state give the same numbers; windows of 1 and 6
   * would cut the image and move around it */
  const int windows[3] = {1, 3, 6};
  for (int wi = 0; wi < 3; wi++) {
    snprintf(cmd, sizeof cmd, "%s score --ckpt %s/a --input %s --window %d", bin(), work, in,
             windows[wi]);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
    o = cJSON_Parse(out);
    ck_assert_msg(o != NULL, "not JSON: %s", out);
    lp = cJSON_GetObjectItem(o, "logprobs");
    ck_assert_int_eq(cJSON_GetArraySize(lp), 11);
    double wd = 0;
    for (int t = 0; t < 11; t++) wd = fmax(wd, fabs(cJSON_GetArrayItem(lp, t)->valuedouble - logp[t]));
    printf("score --window %d vs one forward: max difference %.2e\n", windows[wi], wd);
    ck_assert(wd < 1e-5);
    cJSON_Delete(o);
  }
  lh_model_cache_free(c);
  lh_model_free(m);
  snprintf(cmd, sizeof cmd, "rm -rf %s", work);
  ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

static void expect(const char *cmd, int code, const char *needle) {
  char out[1 << 14];
  int rc = run(cmd, out, sizeof out);
  ck_assert_msg(rc == code, "'%s' exited %d, want %d: %s", cmd, rc, code, out);
  ck_assert_msg(strstr(out, needle), "'%s' output lacks '%s': %s", cmd, needle, out);
}

START_TEST(test_cli_errors) {
  setup();
  char cfg[600], bad[600], ck[600], cmd[2048], in[600], out[4096];
  snprintf(cfg, sizeof cfg, "%s/model.ini", work);
  write_text(cfg, ini);
  snprintf(bad, sizeof bad, "%s/bad.ini", work);
  write_text(bad, "[model]\nlayers = 2\nwidth = 9\n");
  snprintf(ck, sizeof ck, "%s/ck", work);
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 1 --out %s", bin(), cfg, ck);
  ck_assert_int_eq(run(cmd, out, sizeof out), 0);
  snprintf(in, sizeof in, "%s/in.json", work);

  snprintf(cmd, sizeof cmd, "%s init --help", bin());
  expect(cmd, 0, "usage: longhaul init");
  snprintf(cmd, sizeof cmd, "%s score --help", bin());
  expect(cmd, 0, "usage: longhaul score");
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 1 --out %s/x", bin(), bad, work);
  expect(cmd, 2, "unknown key 'width'");
  expect(cmd, 2, "bad.ini:3: ");
  snprintf(cmd, sizeof cmd, "%s init --config %s/none.ini --seed 1 --out %s/x", bin(), work, work);
  expect(cmd, 2, "none.ini: cannot open the file");
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed minus --out %s/x", bin(), cfg, work);
  expect(cmd, 2, "--seed");
  snprintf(cmd, sizeof cmd, "%s init --config %s --out %s/x", bin(), cfg, work);
  expect(cmd, 2, "required");
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 1 --out %s/x --frobnicate", bin(), cfg,
           work);
  expect(cmd, 2, "unknown option");

  write_text(in, "{\"tokens\":[256,65,66]}");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s/none --input %s", bin(), work, in);
  expect(cmd, 1, "cannot open checkpoint");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s", bin(), ck);
  expect(cmd, 2, "required");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s --input %s --window 0", bin(), ck, in);
  expect(cmd, 2, "--window");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s --input %s/none.json", bin(), ck, work);
  expect(cmd, 2, "cannot read input");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s --input %s", bin(), ck, in);
  write_text(in, "[1,2]");
  expect(cmd, 2, "not a JSON object");
  write_text(in, "{\"tokens\":[]}");
  expect(cmd, 2, "non-empty array");
  write_text(in, "{\"tokens\":[1,2.5]}");
  expect(cmd, 2, "tokens[1]");
  write_text(in, "{\"tokens\":[1,264]}");
  expect(cmd, 2, "outside [0, 264)");
  write_text(in, "{\"tokens\":[1,2,3],\"images\":[{\"at\":1,\"height\":4,\"width\":4,"
                 "\"pixels\":[0.5]}]}");
  expect(cmd, 2, "expected 48");
  {
    /* a 4x8 image (2 patches) at position 2 of 3 tokens runs past the end */
    char js[2048];
    int w = snprintf(js, sizeof js,
                     "{\"tokens\":[1,2,3],\"images\":[{\"at\":2,\"height\":4,\"width\":8,"
                     "\"pixels\":[0");
    for (int i = 1; i < 96; i++) w += snprintf(js + w, sizeof js - w, ",0");
    snprintf(js + w, sizeof js - w, "]}]}");
    write_text(in, js);
  }
  expect(cmd, 2, "runs past");
  /* one token: no entries */
  write_text(in, "{\"tokens\":[256]}");
  expect(cmd, 0, "{\"logprobs\":[]}");
  snprintf(cmd, sizeof cmd, "rm -rf %s", work);
  ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_cli");
  TCase *tc = tcase_create("cli");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_init_and_score);
  tcase_add_test(tc, test_cli_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Limits follow the config: `longhaul eval` plays at
 * the context of the config and of the checkpoint's stage (no fixed 4096),
 * and eval, actor and sft refuse a [model] section that is given and
 * differs from the model of --ckpt / --init (exit 2, naming each key that
 * differs) while a matching one, or none, is accepted. Real processes on a
 * checkpoint written by `longhaul init`. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
#include "proc_util.h"

static const char MODEL[] =
    "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
    "latent = 8\nexpert_hidden = 8\nchunk = 4\n";

static char dir[64];

static const char *bin(void) {
  const char *b = lh_proc_longhaul();
  ck_assert_msg(b != NULL, "LH_BIN is not set");
  return b;
}

/* dir/NAME.ini: text, then "[learner]\ndb = none-NAME.db" keeps stores in dir. */
static void write_ini(const char *name, const char *text) {
  char path[128], full[2048];
  snprintf(path, sizeof path, "%s/%s.ini", dir, name);
  snprintf(full, sizeof full, "%s\n[env]\nname = calc\n", text);
  ck_assert_int_eq(lh_proc_write_file(path, full), 0);
}

/* Runs `longhaul ARGS` from dir and returns its exit code; out gets its output. */
static int run(const char *args, char *out, size_t cap) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", dir, bin(), args);
  return lh_proc_run_capture(cmd, out, cap);
}

static void setup(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "model-match"), 0);
  write_ini("model", MODEL);
  char out[4096];
  ck_assert_msg(run("init --config model.ini --seed 5 --out ck", out, sizeof out) == 0, "%s", out);
}

START_TEST(test_model_given_must_match) {
  setup();
  char text[1024], out[8192];
  /* Differs in two keys: refused, both named. */
  snprintf(text, sizeof text, "%s", MODEL);
  char *p = strstr(text, "d_model = 16");
  memcpy(p, "d_model = 32", 12);
  p = strstr(text, "experts = 4");
  memcpy(p, "experts = 8", 11);
  write_ini("differs", text);
  int rc = run("eval --config differs.ini --ckpt ck --seeds 1 --db none", out, sizeof out);
  printf("model_match: eval differs: %d %s", rc, out);
  ck_assert_int_eq(rc, 2);
  ck_assert_msg(strstr(out, "[model]") && strstr(out, "d_model = 32") && strstr(out, "experts = 8"), "%s", out);
  ck_assert_msg(strstr(out, "checkpoint ck"), "%s", out);
  rc = run("actor --config differs.ini --name a0 --ckpt ck", out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "d_model = 32"), "actor: %d %s", rc, out);
  rc = run("sft --config differs.ini --init ck --steps 1 --out sftout --db none", out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "d_model = 32"), "sft: %d %s", rc, out);
  /* An override differs just the same. */
  write_ini("same", MODEL);
  rc = run("eval --config same.ini --ckpt ck --seeds 1 --db none --set model.topk=1", out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "topk = 1"), "eval --set: %d %s", rc, out);
  /* The same model (the seed aside), or no [model] at all: accepted. */
  snprintf(text, sizeof text, "%sseed = 99\n", MODEL);
  write_ini("seeded", text);
  rc = run("eval --config seeded.ini --ckpt ck --seeds 1 --db none", out, sizeof out);
  ck_assert_msg(rc == 0, "eval matching: %d %s", rc, out);
  write_ini("none", "[actor]\nmax_context = 300\n");
  rc = run("eval --config none.ini --ckpt ck --seeds 1 --db none", out, sizeof out);
  ck_assert_msg(rc == 0, "eval without [model]: %d %s", rc, out);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_eval_context) {
  setup();
  char out[8192];
  /* [actor] max_context, not 4096. */
  write_ini("ctx", "[actor]\nmax_context = 300\n");
  int rc = run("eval --config ctx.ini --ckpt ck --seeds 1 --db none", out, sizeof out);
  ck_assert_msg(rc == 0 && strstr(out, "eval: context 300\n"), "%d %s", rc, out);
  rc = run("eval --config ctx.ini --ckpt ck --seeds 1 --db none --max-context 500", out, sizeof out);
  ck_assert_msg(rc == 0 && strstr(out, "eval: context 500\n"), "%d %s", rc, out);
  rc = run("eval --config ctx.ini --ckpt ck --seeds 1 --db none --max-context 1", out, sizeof out);
  ck_assert_int_eq(rc, 2);
  /* A learner's checkpoint at stage 1 of [learner] stages: that stage's context. */
  char ck[128];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_adv_baseline_init(&st.baseline, 0.9);
  st.step = 7, st.stage_index = 1;
  lh_errbuf e;
  ck_assert_msg(lh_learner_state_save(ck, &st, &e) == 0, "%s", e.msg);
  write_ini("staged", "[actor]\nmax_context = 300\n[learner]\nstages = 400 episodes=8, 700\n");
  rc = run("eval --config staged.ini --ckpt ck --seeds 1 --db none", out, sizeof out);
  ck_assert_msg(rc == 0 && strstr(out, "eval: context 700 of stage 1\n"), "%d %s", rc, out);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_match");
  TCase *tc = tcase_create("cli");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_model_given_must_match);
  tcase_add_test(tc, test_eval_context);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* SFT: the transcript format (tokens and loss masks) of calc's expert
 * episodes, images in transcripts, packing and the step's errors, a tiny
 * model whose loss falls on calc demonstrations, greedy evaluation, the
 * atomic checkpoint, and `longhaul sft` through the real binary (LH_BIN),
 * whose checkpoint `longhaul score` loads, with its usage errors. */
#define _GNU_SOURCE
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/actors.h"
#include "learner/learner.h"
#include "proc_util.h"

static lh_env *open_calc(const char *stages) {
  lh_env_option opts[2] = {{"stages", stages}, {"digits", "1"}};
  lh_env *env = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_env_open("calc", opts, 2, &env, &err) == 0, "%s", err.msg);
  return env;
}

/* The mask-1 runs of a transcript decoded back to text must be exactly the
 * expert's actions; everything else is the environment's, as bytes. */
START_TEST(test_transcript_calc) {
  lh_env *env = open_calc("2");
  lh_errbuf err = {0};
  lh_actors_transcript *t = lh_actors_transcript_new(8, &err);
  ck_assert_ptr_nonnull(t);
  lh_env_outcome outcome = LH_ENV_RUNNING;
  ck_assert_msg(lh_actors_transcript_expert(env, 3, t, &outcome, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(outcome, LH_ENV_SUCCESS);
  size_t n = lh_actors_transcript_len(t);
  const int32_t *tok = lh_actors_transcript_tokens(t);
  const uint8_t *mask = lh_actors_transcript_mask(t);
  ck_assert_uint_gt(n, 50);
  ck_assert_int_eq(tok[0], LH_TOK_BOS);
  ck_assert_int_eq(mask[0], 0);
  ck_assert_int_eq(tok[n - 1], LH_TOK_EOS);
  ck_assert_int_eq(mask[n - 1], 1);

  /* Replay the episode with the expert to get the reference texts. */
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 3, &obs, &err), 0);
  size_t at = 1;
  ck_assert_int_eq(memcmp(obs.text, "The tool <call>", 15), 0);
  for (size_t i = 0; i < obs.text_bytes; i++, at++) {
    /* The prompt spells "<call>calc(EXPR)</call>": bytes, never markers. */
    ck_assert_int_eq(tok[at], (unsigned char)obs.text[i]);
    ck_assert_int_eq(mask[at], 0);
  }
  int actions = 0;
  for (;;) {
    const char *action;
    ck_assert_int_eq(lh_env_expert(env, &action, &err), 0);
    int32_t ids[512];
    size_t k = 0;
    ck_assert_int_eq(lh_tok_encode(action, strlen(action), 1, ids, 512, &k), 0);
    for (size_t i = 0; i < k; i++, at++) {
      ck_assert_int_eq(tok[at], ids[i]);
      ck_assert_int_eq(mask[at], 1);
    }
    actions++;
    lh_env_result res;
    memset(&res, 0, sizeof res);
    ck_assert_int_eq(lh_env_step(env, action, strlen(action), &res, &err), 0);
    if (res.done) break;
    ck_assert_int_eq(tok[at], LH_TOK_OBS);
    ck_assert_int_eq(mask[at++], 0);
    for (size_t i = 0; i < res.obs.text_bytes; i++, at++) {
      ck_assert_int_eq(tok[at], (unsigned char)res.obs.text[i]);
      ck_assert_int_eq(mask[at], 0);
    }
    ck_assert_int_eq(tok[at], LH_TOK_OBS_END);
    ck_assert_int_eq(mask[at++], 0);
  }
  ck_assert_int_eq(actions, 3); /* two calls and the answer */
  ck_assert_uint_eq(at, n);
  ck_assert_int_eq(lh_actors_transcript_n_images(t), 0);
  lh_actors_transcript_free(t);
  lh_env_free(env);
}
END_TEST

START_TEST(test_transcript_images) {
  lh_errbuf err = {0};
  lh_actors_transcript *t = lh_actors_transcript_new(4, &err);
  uint8_t px[8 * 4 * 3];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)i;
  lh_env_image im = {.width = 8, .height = 4, .channels = 3, .pixels = px};
  lh_env_obs obs = {.text = "hi", .text_bytes = 2, .images = &im, .image_count = 1};
  ck_assert_int_eq(lh_actors_transcript_begin(t, &obs, &err), 0);
  ck_assert_int_eq(lh_actors_transcript_action(t, "<call>move(N)</call>", 20, &err), 0);
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), 0);
  /* <bos> h i <img> 2 patches | <call> move(N) </call> | <obs> h i <img> 2 </obs> */
  const int32_t *tok = lh_actors_transcript_tokens(t);
  ck_assert_uint_eq(lh_actors_transcript_len(t), 6 + 9 + 7);
  ck_assert_int_eq(tok[3], LH_TOK_IMG);
  ck_assert_int_eq(tok[4], LH_TOK_PAD);
  ck_assert_int_eq(tok[6], LH_TOK_CALL);
  ck_assert_int_eq(tok[14], LH_TOK_CALL_END);
  ck_assert_int_eq(tok[15], LH_TOK_OBS);
  ck_assert_int_eq(tok[21], LH_TOK_OBS_END);
  ck_assert_int_eq(lh_actors_transcript_n_images(t), 2);
  const lh_model_image *imgs = lh_actors_transcript_images(t);
  ck_assert_int_eq(imgs[0].at, 4);
  ck_assert_int_eq(imgs[1].at, 19);
  ck_assert_int_eq(imgs[0].width, 8);
  ck_assert_float_eq_tol(imgs[0].pixels[5], 5 / 255.0f, 1e-7);
  /* gray images become RGB; sides must be multiples of the patch */
  lh_env_image gray = {.width = 4, .height = 4, .channels = 1, .pixels = px};
  obs.images = &gray;
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), 0);
  imgs = lh_actors_transcript_images(t);
  ck_assert_float_eq(imgs[2].pixels[3 * 7 + 2], 7 / 255.0f);
  /* a side that is not a multiple of the patch is padded with black */
  lh_env_image odd = {.width = 6, .height = 4, .channels = 3, .pixels = px};
  obs.images = &odd;
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), 0);
  imgs = lh_actors_transcript_images(t);
  ck_assert_int_eq(imgs[3].width, 8);
  ck_assert_int_eq(imgs[3].height, 4);
  ck_assert_float_eq(imgs[3].pixels[3 * 8 + 0], 6 * 3 / 255.0f);  /* row 1, column 0: source pixel 6 */
  ck_assert_float_eq(imgs[3].pixels[3 * 7 + 1], 0.0f);            /* row 0, column 7: padding */
  /* 2 channels, and more patches than max_patches: LH_EACTORS_IMAGE */
  lh_env_image two = {.width = 4, .height = 4, .channels = 2, .pixels = px};
  obs.images = &two;
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), LH_EACTORS_IMAGE);
  lh_actors_transcript_set_max_patches(t, 1);
  obs.images = &im;  /* 2 patches */
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), LH_EACTORS_IMAGE);
  ck_assert_ptr_nonnull(strstr(err.msg, "max_patches 1"));
  ck_assert_int_eq(lh_actors_transcript_policy_token(t, 264, &err), LH_EMODEL_TOKEN);
  ck_assert_ptr_null(lh_actors_transcript_new(0, &err));
  lh_actors_transcript_free(t);
  lh_actors_transcript_free(NULL);
}
END_TEST

/* An actor's transcript forgets what it has fed and sent: positions and
 * images before the mark are gone, the accessors start at the first kept
 * position and image, the length still counts from <bos>. */
START_TEST(test_transcript_forget) {
  lh_errbuf err = {0};
  lh_actors_transcript *t = lh_actors_transcript_new(4, &err);
  uint8_t px[8 * 4 * 3] = {0};
  lh_env_image im = {.width = 8, .height = 4, .channels = 3, .pixels = px};
  lh_env_obs obs = {.text = "hi", .text_bytes = 2, .images = &im, .image_count = 1};
  ck_assert_int_eq(lh_actors_transcript_begin(t, &obs, &err), 0);                 /* 0..5, image at 4 */
  ck_assert_int_eq(lh_actors_transcript_action(t, "<call>move(N)</call>", 20, &err), 0);  /* 6..14 */
  ck_assert_int_eq(lh_actors_transcript_observation(t, &obs, &err), 0);           /* 15..21, image at 19 */
  lh_actors_transcript_forget(t, 5);  /* the first image's patches run to 5: it stays */
  ck_assert_uint_eq(lh_actors_transcript_first(t), 5);
  ck_assert_int_eq(lh_actors_transcript_first_image(t), 0);
  ck_assert_int_eq(lh_actors_transcript_n_images(t), 2);
  lh_actors_transcript_forget(t, 6);
  ck_assert_int_eq(lh_actors_transcript_first_image(t), 1);
  ck_assert_int_eq(lh_actors_transcript_n_images(t), 1);
  ck_assert_int_eq(lh_actors_transcript_images(t)[0].at, 19);
  ck_assert_int_eq(lh_actors_transcript_tokens(t)[0], LH_TOK_CALL);
  ck_assert_uint_eq(lh_actors_transcript_len(t), 22);
  ck_assert_int_eq(lh_actors_transcript_policy_token(t, LH_TOK_EOS, &err), 0);
  ck_assert_int_eq(lh_actors_transcript_tokens(t)[22 - 6], LH_TOK_EOS);
  lh_actors_transcript_forget(t, 100);  /* at most the length */
  ck_assert_uint_eq(lh_actors_transcript_first(t), 23);
  ck_assert_int_eq(lh_actors_transcript_n_images(t), 0);
  lh_actors_transcript_clear(t);
  ck_assert_uint_eq(lh_actors_transcript_first(t), 0);
  lh_actors_transcript_free(t);
}
END_TEST

static lh_model *tiny_model(uint64_t seed) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.d_model = 32, cfg.layers = 2, cfg.heads = 2, cfg.experts = 4, cfg.topk = 2;
  cfg.latent = 16, cfg.expert_hidden = 32, cfg.seed = seed;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&cfg, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  return m;
}

START_TEST(test_step_errors) {
  lh_model *m = tiny_model(1);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  lh_learner_sft *s = NULL;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_learner_sft_new(m, &cfg, 0, &s, &err), LH_EINVAL);
  ck_assert_int_eq(lh_learner_sft_new(m, &cfg, 10, &s, &err), 0);
  int32_t tok[4] = {LH_TOK_BOS, 'a', 'b', LH_TOK_EOS};
  uint8_t none[4] = {0, 0, 0, 0}, some[4] = {0, 0, 1, 1};
  lh_learner_sft_episode ep = {.n_tokens = 4, .tokens = tok, .mask = none};
  ck_assert_int_eq(lh_learner_sft_step(s, &ep, 0, NULL, &err), LH_EINVAL);
  ck_assert_int_eq(lh_learner_sft_step(s, &ep, 1, NULL, &err), LH_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "no policy tokens"));
  ep.mask = some;
  lh_learner_sft_stats st;
  ck_assert_int_eq(lh_learner_sft_step(s, &ep, 1, &st, &err), 0);
  ck_assert_uint_eq(st.targets, 2); /* 'b' after 'a', <eos> after 'b' */
  ck_assert_uint_eq(st.tokens, 4);
  ck_assert_int_eq(st.skipped, 0);
  int32_t bad[4] = {LH_TOK_BOS, 300, 'b', LH_TOK_EOS};
  ep.tokens = bad;
  ck_assert_int_ne(lh_learner_sft_step(s, &ep, 1, NULL, &err), 0);
  ep.tokens = NULL;
  ck_assert_int_eq(lh_learner_sft_step(s, &ep, 1, NULL, &err), LH_EINVAL);
  lh_learner_sft_free(s);
  lh_learner_sft_free(NULL);
  lh_model_free(m);
}
END_TEST

/* A few dozen steps on calc demonstrations: the loss on the policy's
 * tokens falls clearly (a fixed batch first and last, so that the figures
 * compare the same tokens). */
START_TEST(test_loss_falls) {
  lh_model *m = tiny_model(7);
  lh_env *env = open_calc("1");
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  cfg.lr = 3e-3, cfg.warmup_steps = 5;
  enum { B = 4, STEPS = 40 };
  lh_errbuf err = {0};
  lh_actors_transcript *ts[B];
  lh_learner_sft_episode eps[B];
  for (int i = 0; i < B; i++) ts[i] = lh_actors_transcript_new(8, &err);
  lh_learner_sft *s = NULL;
  ck_assert_int_eq(lh_learner_sft_new(m, &cfg, STEPS, &s, &err), 0);
  double first = 0, last = 0;
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < B; i++) {
      ck_assert_int_eq(lh_actors_transcript_expert(env, 1000 + (uint64_t)(step * B + i), ts[i], NULL, &err), 0);
      eps[i] = (lh_learner_sft_episode){lh_actors_transcript_len(ts[i]), lh_actors_transcript_tokens(ts[i]),
                                        lh_actors_transcript_mask(ts[i]), 0, NULL};
    }
    lh_learner_sft_stats st;
    ck_assert_msg(lh_learner_sft_step(s, eps, B, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.skipped, 0);
    if (step == 0) first = st.loss;
    last = st.loss;
  }
  printf("sft tiny calc: loss %.4f -> %.4f in %d steps\n", first, last, STEPS);
  ck_assert_msg(last < 0.6 * first, "loss %.4f -> %.4f", first, last);

  /* greedy evaluation runs whole episodes; a one-token action limit ends
   * every episode as truncated */
  lh_env *envs[3] = {open_calc("1"), open_calc("1"), open_calc("1")};
  uint64_t seeds[5] = {1, 2, 3, 4, 5};
  lh_actors_eval_params p = {.max_context = 4096, .max_action_tokens = 64};
  size_t wins = 99;
  ck_assert_msg(lh_actors_eval(m, envs, 3, seeds, 5, &p, &wins, &err) == 0, "%s", err.msg);
  ck_assert_uint_le(wins, 5);
  p.max_action_tokens = 1;
  ck_assert_int_eq(lh_actors_eval(m, envs, 3, seeds, 5, &p, &wins, &err), 0);
  ck_assert_uint_eq(wins, 0);
  p.max_context = 1;
  ck_assert_int_eq(lh_actors_eval(m, envs, 3, seeds, 5, &p, &wins, &err), LH_EINVAL);

  /* the checkpoint is written through a temporary directory, then renamed */
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sft"), 0);
  ck_assert_msg(lh_learner_sft_save(m, dir, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(lh_learner_sft_save(m, dir, &err), 0); /* over the old one */
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.' || strncmp(e->d_name, ".sft-tmp", 8) == 0) entries++;
  closedir(d);
  ck_assert_int_eq(entries, 1);
  lh_model *back = NULL;
  ck_assert_msg(lh_model_load(dir, lh_backend_cpu(), &back, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(memcmp(lh_model_params(back), lh_model_params(m), lh_model_n_floats(m) * sizeof(float)), 0);
  ck_assert_int_eq(lh_learner_sft_save(m, "/proc/none/x", &err), LH_EIO);
  lh_model_free(back);
  for (int i = 0; i < 3; i++) lh_env_free(envs[i]);
  for (int i = 0; i < B; i++) lh_actors_transcript_free(ts[i]);
  lh_learner_sft_free(s);
  lh_env_free(env);
  lh_model_free(m);
  lh_proc_rmdir(dir);
}
END_TEST

/* eval --show prints every episode that ends, whatever ended it: the
 * environment, the action limit, or the context reached on an
 * observation. A tiny model taught maze's moves for a few steps takes
 * actions whose observations (a picture of 49 patches each) run past
 * the contexts below. */
START_TEST(test_eval_shows_every_end) {
  lh_model *m = tiny_model(5);
  lh_env_option opts[2] = {{"size", "3"}, {"cell_px", "8"}};
  lh_env *envs[3];
  lh_errbuf err = {0};
  for (int i = 0; i < 3; i++) ck_assert_msg(lh_env_open("maze", opts, 2, &envs[i], &err) == 0, "%s", err.msg);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  cfg.lr = 3e-3, cfg.warmup_steps = 5;
  enum { B = 4, STEPS = 30 };
  lh_actors_transcript *ts[B];
  lh_learner_sft_episode eps[B];
  for (int i = 0; i < B; i++) ts[i] = lh_actors_transcript_new(8, &err);
  lh_learner_sft *s = NULL;
  ck_assert_int_eq(lh_learner_sft_new(m, &cfg, STEPS, &s, &err), 0);
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < B; i++) {
      ck_assert_int_eq(lh_actors_transcript_expert(envs[0], 1000 + (uint64_t)(step * B + i), ts[i], NULL, &err), 0);
      eps[i] = (lh_learner_sft_episode){lh_actors_transcript_len(ts[i]), lh_actors_transcript_tokens(ts[i]),
                                        lh_actors_transcript_mask(ts[i]), lh_actors_transcript_n_images(ts[i]),
                                        lh_actors_transcript_images(ts[i])};
    }
    lh_learner_sft_stats st;
    ck_assert_msg(lh_learner_sft_step(s, eps, B, &st, &err) == 0, "%s", err.msg);
  }
  uint64_t seeds[5] = {1, 2, 3, 4, 5};
  lh_actors_eval_params p = {.max_action_tokens = 64, .show_count = 5};
  int on_observation = 0;
  for (uint64_t ctx = 120; ctx <= 400; ctx += 20) {
    char *text = NULL;
    size_t bytes = 0, wins = 0;
    p.show = open_memstream(&text, &bytes), p.max_context = ctx;
    ck_assert_msg(lh_actors_eval(m, envs, 3, seeds, 5, &p, &wins, &err) == 0, "%s", err.msg);
    fclose(p.show);
    int n = 0;
    for (const char *q = text; (q = strstr(q, "-- seed ")); q++) {
      n++;
      const char *next = strstr(q + 1, "-- seed ");
      size_t len = next ? (size_t)(next - q) : strlen(q);
      on_observation += len > 7 && !strncmp(q + len - 7, "</obs>\n", 7);
    }
    ck_assert_msg(n == 5, "context %llu: %d of 5 episodes shown:\n%s", (unsigned long long)ctx, n, text);
    free(text);
  }
  printf("eval show: %d episodes ended on an observation\n", on_observation);
  ck_assert_int_gt(on_observation, 0);
  for (int i = 0; i < B; i++) lh_actors_transcript_free(ts[i]);
  for (int i = 0; i < 3; i++) lh_env_free(envs[i]);
  lh_learner_sft_free(s);
  lh_model_free(m);
}
END_TEST

/* ---- the command through the real binary ---- */

static int run(const char *cmd, char *out, size_t cap) {
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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

static const char *ini =
    "[model]\nd_model = 32\nlayers = 2\nheads = 2\nexperts = 4\nlatent = 16\n"
    "expert_hidden = 16\n[learner]\nlr = 3e-3\nwarmup_steps = 2\n[env]\nstages = 1\ndigits = 1\n";

START_TEST(test_cli) {
  char work[64];
  ck_assert_int_eq(lh_proc_tmpdir(work, sizeof work, "sft-cli"), 0);
  char cfg[256], cmd[2048], out[1 << 16];
  snprintf(cfg, sizeof cfg, "%s/sft.ini", work);
  write_text(cfg, ini);
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s/ck --steps 6 --batch 2 --eval 3",
           bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "sft: step 6/6 loss"));
  ck_assert_ptr_nonnull(strstr(out, "tokens/s"));
  ck_assert_ptr_nonnull(strstr(out, "eval: step 6 success rate"));
  ck_assert_ptr_nonnull(strstr(out, "/3 held-out seeds"));
  /* score loads it */
  char in[256];
  snprintf(in, sizeof in, "%s/in.json", work);
  write_text(in, "{\"tokens\": [256, 49, 43, 50, 257]}");
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s/ck --input %s", bin(), work, in);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "\"logprobs\""));
  /* --init continues from it */
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s/ck2 --init %s/ck --steps 2 --batch 1 --eval 0",
           bin(), cfg, work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_null(strstr(out, "eval:"));
  /* --eval-every evaluates (and writes DIR) along the way; the last step's
   * evaluation is not repeated at the end. */
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s/ck3 --steps 4 --batch 1 --eval 2 --eval-every 2 --lr 1e-3 --warmup 1",
           bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "eval: step 2 success rate"));
  ck_assert_ptr_nonnull(strstr(out, "eval: step 4 success rate"));
  ck_assert_ptr_null(strstr(strstr(out, "eval: step 4") + 1, "eval: step 4"));
  snprintf(cmd, sizeof cmd, "%s score --ckpt %s/ck3 --input %s", bin(), work, in);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  /* longhaul eval measures any checkpoint the same way, --show prints episodes */
  snprintf(cmd, sizeof cmd, "%s eval --config %s --env calc --ckpt %s/ck --seeds 3 --show 2", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "/3 held-out seeds 1..3, greedy"));
  ck_assert_ptr_nonnull(strstr(out, "-- seed "));
  ck_assert_ptr_nonnull(strstr(out, "<bos>The tool"));
  /* Progress after each chunk of seeds (whole rounds of 16 environments). */
  snprintf(cmd, sizeof cmd, "%s eval --config %s --env calc --ckpt %s/ck --seeds 40", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "eval: 16/40 seeds, ") && strstr(out, "eval: 32/40 seeds, ") &&
                    strstr(out, "eval: 40/40 seeds, ") && strstr(out, "successes ("),
                "%s", out);
  snprintf(cmd, sizeof cmd, "%s eval --config %s --env calc --ckpt %s/ck --seeds 2 --json", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "\"episodes\":2,\"successes\":"));
  /* Sampled at a temperature, each seed with its own generator: a rerun
   * gives the same figure. */
  snprintf(cmd, sizeof cmd, "%s eval --config %s --env calc --ckpt %s/ck --seeds 4 --temperature 0.7", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "sampled at T=0.7"));
  char first[256];
  snprintf(first, sizeof first, "%s", strstr(out, "success rate"));
  *strstr(first, " in ") = 0;
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, first), "'%s' not repeated in %s", first, out);
  struct {
    const char *args, *says;
    int code;
  } bad_eval[] = {
      {"--env calc", "required", 2},
      {"--env calc --ckpt X --seeds 0", "--seeds must be at least 1", 2},
      {"--env calc --ckpt X --seeds -3", "--seeds '-3'", 2},
      {"--env calc --ckpt X --what", "unknown option '--what'", 2},
      {"--env calc --ckpt /nonexistent", "holds no model.safetensors", 1},
      {"--env nosuch --ckpt CK", "nosuch", 2},
      {"--env calc --ckpt CK --backend tpu", "unknown backend 'tpu'", 2},
      {"--env calc --ckpt CK --temperature -1", "--temperature '-1'", 2},
      {"--env calc --ckpt CK --temperature hot", "--temperature 'hot'", 2},
  };
  for (size_t i = 0; i < sizeof bad_eval / sizeof bad_eval[0]; i++) {
    char args[512];
    const char *ck = strstr(bad_eval[i].args, "CK");
    if (ck) snprintf(args, sizeof args, "%.*s%s/ck%s", (int)(ck - bad_eval[i].args), bad_eval[i].args, work, ck + 2);
    else snprintf(args, sizeof args, "%s", bad_eval[i].args);
    snprintf(cmd, sizeof cmd, "%s eval --config %s %s", bin(), cfg, args);
    int code = run(cmd, out, sizeof out);
    ck_assert_msg(code == bad_eval[i].code, "eval '%s' exit %d, not %d: %s", args, code, bad_eval[i].code, out);
    ck_assert_msg(strstr(out, bad_eval[i].says), "eval '%s' does not say '%s': %s", args, bad_eval[i].says, out);
  }
  snprintf(cmd, sizeof cmd, "%s sft --help", bin());
  ck_assert_int_eq(run(cmd, out, sizeof out), 0);
  ck_assert_ptr_nonnull(strstr(out, "usage: longhaul sft"));

  /* usage errors: exit 2 with the culprit named */
  struct {
    const char *args, *says;
  } bad[] = {
      {"--env calc", "required"},
      {"--env calc --out X --bogus 1", "unknown option '--bogus'"},
      {"--env calc --out X --steps 0", "--steps '0'"},
      {"--env calc --out X --steps ten", "--steps 'ten'"},
      {"--env calc --out X --batch -1", "--batch '-1'"},
      {"--env calc --out X --seed 99999999999999999999", "--seed"},
      {"--env calc --out X --steps", "needs a value"},
      {"--env nosuch --out X", "nosuch"},
      {"--out X --env", "needs a value"},
      {"--env calc --out X --target 0.5", "--target needs --eval-every"},
      {"--env calc --out X --eval-every 5 --target 1.5", "--target '1.5'"},
      {"--env calc --out X --eval-every 5 --target x", "--target 'x'"},
      {"--env calc --out X --lr 0", "--lr '0'"},
      {"--env calc --out X --warmup -2", "--warmup '-2'"},
      {"--env calc --out X --backend tpu", "unknown backend 'tpu'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s sft --config %s %s", bin(), cfg, bad[i].args);
    ck_assert_msg(run(cmd, out, sizeof out) == 2, "'%s' did not exit 2: %s", bad[i].args, out);
    ck_assert_msg(strstr(out, bad[i].says), "'%s' does not say '%s': %s", bad[i].args, bad[i].says, out);
  }
  /* bad config: an unknown [env] key, a bad [learner] value, a bad [model] key */
  const char *configs[][2] = {
      {"[env]\nstagez = 2\n", "stagez"},
      {"[learner]\nlr = -1\n", "lr"},
      {"[model]\nd_modle = 8\n", "d_modle"},
  };
  for (size_t i = 0; i < 3; i++) {
    write_text(cfg, configs[i][0]);
    snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s/x", bin(), cfg, work);
    ck_assert_msg(run(cmd, out, sizeof out) == 2, "config %zu did not exit 2: %s", i, out);
    ck_assert_msg(strstr(out, configs[i][1]), "config %zu does not name '%s': %s", i, configs[i][1], out);
  }
  /* [env] name stands for --env; without either the command says so */
  write_text(cfg, "[model]\nd_model = 32\nlayers = 2\nheads = 2\nexperts = 4\nlatent = 16\n"
                  "expert_hidden = 16\n[env]\nname = calc\nstages = 1\n");
  snprintf(cmd, sizeof cmd, "%s sft --config %s --out %s/n --steps 1 --batch 1 --eval 1", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s", out);
  write_text(cfg, "[env]\nstages = 1\n");
  snprintf(cmd, sizeof cmd, "%s sft --config %s --out %s/n", bin(), cfg, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 2, "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "no environment"));
  /* a missing config file and an unreadable --init are runtime errors */
  snprintf(cmd, sizeof cmd, "%s sft --config %s/none.ini --env calc --out %s/x", bin(), work, work);
  ck_assert_int_ne(run(cmd, out, sizeof out), 0);
  write_text(cfg, ini);
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s/x --init %s/none", bin(), cfg, work, work);
  ck_assert_msg(run(cmd, out, sizeof out) == 1, "%s", out);
  lh_proc_rmdir(work);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sft");
  TCase *tc = tcase_create("sft");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_transcript_calc);
  tcase_add_test(tc, test_transcript_images);
  tcase_add_test(tc, test_transcript_forget);
  tcase_add_test(tc, test_step_errors);
  tcase_add_test(tc, test_loss_falls);
  tcase_add_test(tc, test_eval_shows_every_end);
  tcase_add_test(tc, test_cli);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

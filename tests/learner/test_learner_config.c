/* Tests of learner/config.c: the [learner] section, one test per kind of
 * error (each message must name the key, the section and the line), the
 * learning-rate schedule and the stages. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%.12g vs %.12g", \
                                      (double)(a), (double)(b))

static int parse(const char *text, lh_learner_config *c, lh_errbuf *e) {
  return lh_learner_config_parse(text, "fleet.ini", c, e);
}

/* Parses text that must fail with code and a message holding each of the
 * needles. */
static void expect_error(const char *text, int code, const char *n1, const char *n2) {
  lh_learner_config c;
  lh_errbuf e;
  lh_learner_config_default(&c);
  c.lr = 123.0;  /* must stay untouched */
  int rc = parse(text, &c, &e);
  ck_assert_msg(rc == code, "'%s': got %d (%s), want %d", text, rc, e.msg, code);
  ck_assert_msg(strstr(e.msg, n1), "message '%s' lacks '%s'", e.msg, n1);
  if (n2) ck_assert_msg(strstr(e.msg, n2), "message '%s' lacks '%s'", e.msg, n2);
  ck_assert(c.lr == 123.0);
}

START_TEST(test_defaults_and_other_sections_ignored) {
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_int_eq(parse("[model]\nd_model = 128\nwhatever = 1\n[actor]\nbatch = 4\n", &c, &e), 0);
  ck_assert_int_eq(c.advantage, LH_LEARNER_ADV_GRPO);
  NEAR(c.clip_eps, 0.2, 0);
  NEAR(c.weight_decay, 0.01, 0);
  NEAR(c.grad_clip, 1.0, 0);
  ck_assert_uint_eq(c.n_stages, 0);
  ck_assert_int_eq(c.routing_replay, 0);
  ck_assert_int_eq(c.loss_norm, LH_LEARNER_LOSS_NORM_TOKEN);
  ck_assert_int_eq(parse("", &c, &e), 0);
}
END_TEST

START_TEST(test_every_key) {
  const char *text =
      "; a comment\n"
      "[model]\nlayers = 4\n\n"
      "[learner]\n"
      "advantage = rloo\nbaseline_decay = 0.5\nclip_eps = 0.1\nis_cap = inf\n"
      "entropy_coef = 0.001\nmax_policy_lag = 0\nlr = 1e-3\nwarmup_steps = 5\ntotal_steps = 200\n"
      "weight_decay = 0\ngrad_clip = 0.5\nbatch_episodes = 64\ngroup_size = 16\n"
      "train_window = 512\nckpt_every = 7\nrouting_replay = yes\nloss_norm = episode\n"
      "stages = 4096 episodes=100, 16384 episodes=50 long_frac=0.25 success=0.5/32 lr=1e-4,"
      "  65536 long_frac=1 train_window=1K batch_episodes=32\n"
      "stage_carry = drop\n"
      "[env]\nname = calc\n";
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_msg(parse(text, &c, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(c.advantage, LH_LEARNER_ADV_RLOO);
  NEAR(c.baseline_decay, 0.5, 0);
  NEAR(c.clip_eps, 0.1, 0);
  ck_assert(isinf(c.is_cap));
  NEAR(c.entropy_coef, 0.001, 0);
  ck_assert_uint_eq(c.max_policy_lag, 0);
  NEAR(c.lr, 1e-3, 0);
  ck_assert_uint_eq(c.warmup_steps, 5);
  ck_assert_uint_eq(c.total_steps, 200);
  NEAR(c.weight_decay, 0.0, 0);
  NEAR(c.grad_clip, 0.5, 0);
  ck_assert_uint_eq(c.batch_episodes, 64);
  ck_assert_uint_eq(c.group_size, 16);
  ck_assert_uint_eq(c.train_window, 512);
  ck_assert_uint_eq(c.ckpt_every, 7);
  ck_assert_int_eq(c.routing_replay, 1);
  ck_assert_int_eq(c.loss_norm, LH_LEARNER_LOSS_NORM_EPISODE);
  ck_assert_uint_eq(c.n_stages, 3);
  ck_assert_uint_eq(c.stages[1].max_context, 16384);
  ck_assert_uint_eq(c.stages[0].episodes, 100);
  ck_assert_uint_eq(c.stages[1].episodes, 50);
  NEAR(c.stages[1].long_frac, 0.25, 0);
  NEAR(c.stages[1].gate_success, 0.5, 0);
  ck_assert_uint_eq(c.stages[1].gate_episodes, 32);
  NEAR(c.stages[1].lr, 1e-4, 0);
  NEAR(c.stages[2].long_frac, 1.0, 0);
  ck_assert_uint_eq(c.stages[2].train_window, 1024);
  ck_assert_uint_eq(c.stages[2].batch_episodes, 32);
  ck_assert_int_eq(c.stage_carry, LH_LEARNER_CARRY_DROP);
  /* Each stage's own lr, window and batch, or [learner]'s. */
  double lr;
  uint64_t win, batch;
  lh_learner_stage_params(&c, 0, &lr, &win, &batch);
  NEAR(lr, 1e-3, 0);
  ck_assert_uint_eq(win, 512);
  ck_assert_uint_eq(batch, 64);
  lh_learner_stage_params(&c, 1, &lr, &win, &batch);
  NEAR(lr, 1e-4, 0);
  lh_learner_stage_params(&c, 2, &lr, &win, &batch);
  ck_assert_uint_eq(win, 1024);
  ck_assert_uint_eq(batch, 32);
  /* A stage advances by its own episodes and its gate, never by steps. */
  lh_learner_stage_state g;
  lh_learner_stage_state_init(&g, 0, 1000, 7);
  ck_assert(!lh_learner_stage_done(&c, &g));
  lh_learner_stage_count(&g, 99, 990, 0, 500, 3);
  ck_assert(!lh_learner_stage_done(&c, &g));
  lh_learner_stage_count(&g, 1, 10, 0, 0, 0);
  ck_assert(lh_learner_stage_done(&c, &g));
  lh_learner_stage_state_init(&g, 1, 2000, 9);
  lh_learner_stage_count(&g, 50, 500, 10, 0, 0);   /* enough episodes, success 0.2 < 0.5 */
  ck_assert(!lh_learner_stage_done(&c, &g));
  ck_assert(isnan(lh_learner_stage_gate_rate(&g, 64)));
  for (int i = 0; i < 4; i++) lh_learner_stage_count(&g, 8, 80, 6, 0, 0);  /* last 32: 24 of 32 */
  NEAR(lh_learner_stage_gate_rate(&g, 32), 0.75, 1e-12);
  ck_assert(lh_learner_stage_done(&c, &g));
  lh_learner_stage_state_init(&g, 2, 3000, 11);
  lh_learner_stage_count(&g, 1000000, 1, 1000000, 0, 0);
  ck_assert(!lh_learner_stage_done(&c, &g));  /* the last stays */
  lh_learner_config_default(&c);
  ck_assert_uint_eq(c.n_stages, 0);
  ck_assert_int_eq(c.stage_carry, LH_LEARNER_CARRY_TRAIN);
  const char *bools[8] = {"true", "on", "1", "yes", "false", "off", "0", "no"};
  for (int i = 0; i < 8; i++) {
    char t[64];
    snprintf(t, sizeof t, "[learner]\nrouting_replay=%s\n", bools[i]);
    ck_assert_int_eq(parse(t, &c, &e), 0);
    ck_assert_int_eq(c.routing_replay, i < 4);
  }
}
END_TEST

START_TEST(test_unknown_key) {
  expect_error("[learner]\nlr = 1e-3\nlearning_rate = 1e-3\n", LH_ELEARNER_CONFIG_UNKNOWN_KEY,
               "fleet.ini:3: [learner] unknown key 'learning_rate'", "known: advantage");
}
END_TEST

START_TEST(test_duplicate_key) {
  expect_error("[learner]\nlr = 1e-3\n\nlr = 2e-3\n", LH_ELEARNER_CONFIG_DUPLICATE, "fleet.ini:4: [learner] lr",
               "already given on line 2");
}
END_TEST

START_TEST(test_bad_integers) {
  expect_error("[learner]\nmax_policy_lag = -1\n", LH_ELEARNER_CONFIG_VALUE, "fleet.ini:2: [learner] max_policy_lag",
               "an integer in 0..4294967295");
  expect_error("[learner]\nbatch_episodes = 1.5\n", LH_ELEARNER_CONFIG_VALUE, "batch_episodes = '1.5'", NULL);
  expect_error("[learner]\ntotal_steps = 0\n", LH_ELEARNER_CONFIG_VALUE, "total_steps = '0'",
               "an integer in 1..4294967295");
  expect_error("[learner]\nckpt_every = 99999999999999999999999\n", LH_ELEARNER_CONFIG_VALUE, "ckpt_every", NULL);
  expect_error("[learner]\ngroup_size = eight\n", LH_ELEARNER_CONFIG_VALUE, "group_size = 'eight'", NULL);
  expect_error("[learner]\ntrain_window =\n", LH_ELEARNER_CONFIG_VALUE, "train_window = ''", NULL);
  expect_error("[learner]\nwarmup_steps = +3\n", LH_ELEARNER_CONFIG_VALUE, "warmup_steps", NULL);
}
END_TEST

/* Every integer key has a ceiling, so that no value overflows the
 * arithmetic or the allocation it feeds: abort_after_ms = 2^64 - 1 (a
 * natural "never") made the idle sweep's cutoff wrap into the future and
 * abort every running episode; group_size = 2^62 wrapped a group's
 * allocation to 0 bytes and the first episode wrote past it. */
START_TEST(test_integer_ceilings) {
  static const char *const keys[] = {"max_policy_lag", "warmup_steps", "total_steps", "batch_episodes", "group_size",
                                     "train_window", "ckpt_every", "keep_checkpoints", "burn_in", "max_db_bytes",
                                     "abort_after_ms", "max_backlog_episodes", "max_episode_tokens",
                                     "retain_versions", "blas_threads", "max_message_bytes", "weights_chunk_bytes",
                                     "ingest_queue_bytes"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char text[128], want[96];
    snprintf(text, sizeof text, "[learner]\n%s = 18446744073709551615\n", keys[i]);
    snprintf(want, sizeof want, "fleet.ini:2: [learner] %s = '18446744073709551615' is not an integer in ", keys[i]);
    expect_error(text, LH_ELEARNER_CONFIG_VALUE, want, NULL);
  }
  expect_error("[learner]\nabort_after_ms = 31536000001\n", LH_ELEARNER_CONFIG_VALUE, "abort_after_ms",
               "1..31536000000");
  expect_error("[learner]\ngroup_size = 4611686018427387904\n", LH_ELEARNER_CONFIG_VALUE, "group_size", "1..65536");
  expect_error("[learner]\ntrain_window = 1073741825\n", LH_ELEARNER_CONFIG_VALUE, "train_window",
               "1..1073741824");
  const int S = LH_ELEARNER_CONFIG_STAGES;
  expect_error("[learner]\nstages = 10 episodes=5 train_window=2G, 20\n", S, "train_window=2G",
               "1..1073741824");
  expect_error("[learner]\nstages = 10 episodes=5 batch_episodes=2000000, 20\n", S, "batch_episodes=2000000",
               "1..1048576");
  expect_error("[learner]\nstages = 10 episodes=5, 8G\n", S, "max_context '8G'", "1..4294967295");
  /* the ceilings themselves are taken */
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_msg(parse("[learner]\nabort_after_ms = 31536000000\ngroup_size = 65536\nbatch_episodes = 1048576\n"
                      "train_window = 1073741824\n",
                      &c, &e) == 0,
                "%s", e.msg);
  ck_assert_uint_eq(c.abort_after_ms, 31536000000ull);
}
END_TEST

START_TEST(test_bad_numbers) {
  expect_error("[learner]\nclip_eps = 1.0\n", LH_ELEARNER_CONFIG_VALUE, "fleet.ini:2: [learner] clip_eps = '1.0'",
               "in (0, 1)");
  expect_error("[learner]\nclip_eps = 0\n", LH_ELEARNER_CONFIG_VALUE, "clip_eps", NULL);
  expect_error("[learner]\nlr = 0\n", LH_ELEARNER_CONFIG_VALUE, "lr = '0'", "a number in (0, 1e+09]");
  expect_error("[learner]\nlr = nan\n", LH_ELEARNER_CONFIG_VALUE, "lr = 'nan'", NULL);
  expect_error("[learner]\nlr = inf\n", LH_ELEARNER_CONFIG_VALUE, "lr = 'inf'", NULL);
  expect_error("[learner]\nlr = 1e-3x\n", LH_ELEARNER_CONFIG_VALUE, "lr = '1e-3x'", NULL);
  expect_error("[learner]\nis_cap = 0.5\n", LH_ELEARNER_CONFIG_VALUE, "is_cap", "a number >= 1");
  expect_error("[learner]\nweight_decay = -0.1\n", LH_ELEARNER_CONFIG_VALUE, "weight_decay", NULL);
  expect_error("[learner]\ngrad_clip = 0\n", LH_ELEARNER_CONFIG_VALUE, "grad_clip", NULL);
  expect_error("[learner]\nentropy_coef = -1\n", LH_ELEARNER_CONFIG_VALUE, "entropy_coef", NULL);
  expect_error("[learner]\nbaseline_decay = 1\n", LH_ELEARNER_CONFIG_VALUE, "baseline_decay", "[0, 1)");
  expect_error("[learner]\nlr = 1e999\n", LH_ELEARNER_CONFIG_VALUE, "lr = '1e999'", NULL);
}
END_TEST

START_TEST(test_bad_enum_and_bool) {
  expect_error("[learner]\nadvantage = ppo\n", LH_ELEARNER_CONFIG_VALUE, "fleet.ini:2: [learner] advantage = 'ppo'",
               "one of grpo, rloo, reinforce");
  expect_error("[learner]\nrouting_replay = maybe\n", LH_ELEARNER_CONFIG_VALUE, "routing_replay = 'maybe'",
               "true/false");
}
END_TEST

START_TEST(test_bad_stages) {
  const int S = LH_ELEARNER_CONFIG_STAGES;
  /* The old form (stages by learner steps) is refused with the new one written out. */
  expect_error("[learner]\nbatch_episodes = 16\nstages = 4096:100:0.5, 8192:10:1\n", S, "fleet.ini:3: [learner] stages",
               "'4096 episodes=1600 long_frac=0.5'");
  expect_error("[learner]\nstages = 0 episodes=5, 10\n", S, "stage 1: max_context '0'", NULL);
  expect_error("[learner]\nstages = 10 episodes=x, 20\n", S, "stage 1: episodes=x", NULL);
  expect_error("[learner]\nstages = 10 episodes=5 long_frac=1.5, 20\n", S, "stage 1: long_frac=1.5", NULL);
  expect_error("[learner]\nstages = 10 episodes=5 success=0.5, 20\n", S, "RATE/EPISODES", NULL);
  expect_error("[learner]\nstages = 10 episodes=5 success=0.5/99999, 20\n", S, "1..4096 episodes", NULL);
  expect_error("[learner]\nstages = 10 episodes=5 steps=3, 20\n", S, "unknown key 'steps'", NULL);
  expect_error("[learner]\nstages = 10 episodes, 20\n", S, "'episodes' is not key=value", NULL);
  expect_error("[learner]\nstages = 10 long_frac=0.5, 20\n", S, "stage 1 gives neither episodes= nor tokens=", NULL);
  expect_error("[learner]\nstages = 10 episodes=5, 20 episodes=5\n", S, "the last stage (2) stays in force", NULL);
  expect_error("[learner]\nstages = 10 episodes=5,8\n", S, "stage 2 max_context 8 is not above stage 1's 10", NULL);
  expect_error("[learner]\nstages = 10 episodes=5,\n", S, "ends with a comma", NULL);
  expect_error("[learner]\nstages =\n", S, "is empty", NULL);
  expect_error("[learner]\nstages = 1 tokens=1,2 tokens=1,3 tokens=1,4 tokens=1,5 tokens=1,6 tokens=1,"
               "7 tokens=1,8 tokens=1,9 tokens=1,10 tokens=1,11 tokens=1,12 tokens=1,13 tokens=1,14 tokens=1,"
               "15 tokens=1,16 tokens=1,17\n",
               S, "more than 16 stages", NULL);
  expect_error("[learner]\ngroup_size = 4\nstages = 10 episodes=5 batch_episodes=6, 20\n", S,
               "stage 1 batch_episodes=6 is not a multiple of group_size = 4", NULL);
  expect_error("[learner]\nstage_carry = keep\n", LH_ELEARNER_CONFIG_VALUE, "stage_carry", "is not one of train, drop");
  expect_error("[learner]\nloss_norm = sequence\n", LH_ELEARNER_CONFIG_VALUE, "loss_norm",
               "token, episode");
}
END_TEST

START_TEST(test_cross_key_checks) {
  expect_error("[learner]\ntotal_steps = 5\nwarmup_steps = 10\n", LH_ELEARNER_CONFIG_VALUE,
               "fleet.ini:3: [learner] warmup_steps = 10 is above total_steps = 5", NULL);
  expect_error("[learner]\ngroup_size = 8\nbatch_episodes = 30\n", LH_ELEARNER_CONFIG_VALUE,
               "fleet.ini:3: [learner] batch_episodes = 30 is not a multiple of group_size = 8", NULL);
  /* the ingest's queue in all must hold one connection's: 4 messages of
   * max_message_bytes; the connections it admits follow from the two */
  expect_error("[learner]\nmax_message_bytes = 1048576\ningest_queue_bytes = 4194303\n", LH_ELEARNER_CONFIG_VALUE,
               "fleet.ini:3: [learner] ingest_queue_bytes = 4194303 admits no peer", "4194304 bytes");
  lh_learner_config c;
  lh_errbuf e;
  lh_learner_config_default(&c);
  ck_assert_int_eq(lh_learner_config_ingest_peers(&c), 16);
  ck_assert_msg(parse("[learner]\nmax_message_bytes = 1048576\ningest_queue_bytes = 4194304\n", &c, &e) == 0, "%s",
                e.msg);
  ck_assert_int_eq(lh_learner_config_ingest_peers(&c), 1);
  ck_assert_msg(parse("[learner]\nmax_message_bytes = 4096\ningest_queue_bytes = 1099511627776\n", &c, &e) == 0, "%s",
                e.msg);
  ck_assert_int_eq(lh_learner_config_ingest_peers(&c), LH_LEARNER_INGEST_MAX_PEERS);
}
END_TEST

START_TEST(test_syntax_error_and_files) {
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_int_eq(parse("[learner]\nlr = 1e-3\nthis line has no equals sign\n", &c, &e),
                   LH_ELEARNER_CONFIG_FILE);
  ck_assert_msg(strstr(e.msg, "fleet.ini:3: syntax error"), "%s", e.msg);
  ck_assert_int_eq(lh_learner_config_load("/nonexistent/fleet.ini", &c, &e), LH_ELEARNER_CONFIG_FILE);
  ck_assert(strstr(e.msg, "/nonexistent/fleet.ini: cannot open"));
  char path[] = "/tmp/lh_learner_config_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = "[learner]\nlr = 0.01\ngroup_size = 4\nbatch_episodes = 8\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  ck_assert_msg(lh_learner_config_load(path, &c, &e) == 0, "%s", e.msg);
  NEAR(c.lr, 0.01, 0);
  ck_assert_uint_eq(c.batch_episodes, 8);
  /* Errors from a file name the file. */
  FILE *f = fopen(path, "w");
  fputs("[learner]\n\nclip_eps = 2\n", f);
  fclose(f);
  ck_assert_int_eq(lh_learner_config_load(path, &c, &e), LH_ELEARNER_CONFIG_VALUE);
  char want[128];
  snprintf(want, sizeof want, "%s:3: [learner] clip_eps", path);
  ck_assert_msg(strstr(e.msg, want), "%s", e.msg);
  unlink(path);
  ck_assert_int_eq(lh_learner_config_parse(NULL, "x", &c, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_config_load(NULL, &c, &e), LH_EINVAL);
}
END_TEST

START_TEST(test_lr_schedule) {
  /* lr 1, warmup 10, total 110 */
  NEAR(lh_learner_lr_at(1.0, 10, 110, 0), 0.1, 1e-15);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 4), 0.5, 1e-15);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 9), 1.0, 1e-15);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 10), 1.0, 1e-15);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 60), 0.5, 1e-12);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 35), 0.5 * (1 + cos(M_PI * 0.25)), 1e-12);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 110), 0.0, 0);
  NEAR(lh_learner_lr_at(1.0, 10, 110, 5000), 0.0, 0);
  double prev = 2.0;
  for (uint64_t s = 10; s <= 110; s++) {
    double v = lh_learner_lr_at(3e-4, 10, 110, s);
    ck_assert(v <= prev && v >= 0.0);
    prev = v;
  }
  /* No warmup starts at the full rate. */
  NEAR(lh_learner_lr_at(2.0, 0, 100, 0), 2.0, 1e-15);
  /* All warmup, then nothing. */
  NEAR(lh_learner_lr_at(1.0, 4, 4, 3), 1.0, 1e-15);
  NEAR(lh_learner_lr_at(1.0, 4, 4, 4), 0.0, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_config");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_defaults_and_other_sections_ignored);
  tcase_add_test(tc, test_every_key);
  tcase_add_test(tc, test_integer_ceilings);
  tcase_add_test(tc, test_unknown_key);
  tcase_add_test(tc, test_duplicate_key);
  tcase_add_test(tc, test_bad_integers);
  tcase_add_test(tc, test_bad_numbers);
  tcase_add_test(tc, test_bad_enum_and_bool);
  tcase_add_test(tc, test_bad_stages);
  tcase_add_test(tc, test_cross_key_checks);
  tcase_add_test(tc, test_syntax_error_and_files);
  tcase_add_test(tc, test_lr_schedule);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Tests of the trainer (learner/train*.c) on a tiny model (d 16) and a real SQLite store:
 * episodes written as an actor would (segments, then the end), one PPO step
 * over windows with carried state whose log-probabilities match the
 * behavior ones at version 0 below 1e-5, a train_steps row, no episode
 * trained twice, staleness drops counted, and a non-finite step skipped
 * with the parameters untouched. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"
#include "learner_fixture.h"
#include "proc_util.h"

#define EP_TOKENS 24
#define SEG_TOKENS 8
#define PROMPT 4

static char dir[64], db[128];
/* How write_episode records routing: 0 none, 1 the model's own, 2 forced
 * to experts 0 and 1 everywhere. */
static int record_routing = 0;
/* 1: write_episode puts a 4x4 RGB image (4 patches of 2x2) after an
 * <img> token at IMG_AT, as an observation. */
static int with_image = 0;
#define IMG_AT 5
static uint8_t img_bytes[4 * 4 * 3];
/* 1: write_episode's unrewarded episodes sample only their last
 * EP_TOKENS - SHORT_FROM tokens (10), the rewarded ones 20 as always. */
static int short_failures = 0;
#define SHORT_FROM 14

static void make_dir(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "train"), 0);
  snprintf(db, sizeof db, "%s/replay.db", dir);
}

static void remove_dir(void) { lh_proc_rmdir(dir); }

static lh_model *tiny_model(void) { return lrfx_model(7); }

/* Writes episode id (group, reward) whose tokens after the prompt count as
 * sampled at version, with behavior log-probabilities from the model's own
 * forward over the whole episode (one sequence, no windows). */
static void write_episode(lh_store *s, lh_model *m, uint64_t id, uint64_t group, float reward,
                          uint32_t version) {
  const lrfx_shape shape = {.n_tokens = EP_TOKENS, .seg_tokens = SEG_TOKENS, .a = 31, .b = 7,
                             .first_sampled = short_failures && reward == 0 ? SHORT_FROM : PROMPT,
                             .temperature = 0.7f};
  lrfx_episode ep;
  lrfx_episode_init(&ep, &shape, id, group, reward);
  float img_px[4 * 4 * 3];
  lh_model_image img = {.at = IMG_AT + 1, .height = 4, .width = 4, .pixels = img_px};
  Longhaul__Image im = LONGHAUL__IMAGE__INIT;
  if (with_image) {
    for (size_t i = 0; i < sizeof img_bytes; i++) img_bytes[i] = (uint8_t)(i * 37 + id * 11);
    lh_model_pixels_from_u8(img_bytes, 16, 3, img_px);
    ep.tokens[IMG_AT] = LH_TOK_IMG;
    for (int i = 1; i <= 4; i++) ep.tokens[IMG_AT + i] = LH_TOK_PAD;
    im.offset = IMG_AT, im.width = 4, im.height = 4, im.channels = 3;
    im.pixels.len = sizeof img_bytes, im.pixels.data = img_bytes;
    ep.image = &im;
  }
  lh_errbuf e;
  int rc = lrfx_episode_sample(&ep, m, version, with_image ? &img : NULL, &e);
  ck_assert_msg(rc == 0, "%s", e.msg);
  ep.send_routing = record_routing != 0;
  if (record_routing == 2)
    for (size_t i = 0; i < EP_TOKENS * 2; i++)
      for (uint32_t q = 0; q < 2; q++) ep.routed[i * 2 + q] = q;
  ck_assert_msg(lrfx_episode_put(s, &ep, &e) == 0, "%s", e.msg);
}

static lh_learner_config small_cfg(void) {
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = 4, c.group_size = 2, c.train_window = 5;  /* 24 tokens: 5 windows */
  c.max_policy_lag = 0, c.lr = 1e-2, c.warmup_steps = 0, c.total_steps = 10;
  return c;
}

/* A fresh folder with the test's store open in it (db). */
static lh_store *open_store(void) {
  make_dir();
  lh_store *s;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open(db, &s, &e), 0);
  return s;
}

/* Episodes first .. first + n - 1 at version 0, two to a group (ids 1
 * and 2 in group 10, 3 and 4 in 11, ...), the odd id of each rewarded 1
 * and the even one 0. */
static void write_episodes(lh_store *s, lh_model *m, uint64_t first, uint64_t n) {
  for (uint64_t id = first; id < first + n; id++)
    write_episode(s, m, id, 10 + (id - 1) / 2, id % 2 ? 1.0f : 0.0f, 0);
}

/* A trainer of m over s (temperature 0.7, no state to resume) that has
 * scanned the store. */
static lh_learner_trainer *scanned_trainer(lh_model *m, lh_store *s, const lh_learner_config *cfg) {
  lh_learner_trainer *t;
  lh_errbuf e;
  ck_assert_msg(lh_learner_trainer_new(m, s, cfg, 0.7f, NULL, &t, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  return t;
}

/* One step, which must not fail: whether it trained. */
static int step(lh_learner_trainer *t, lh_learner_train_stats *st) {
  int stepped = -1;
  lh_errbuf e;
  ck_assert_msg(lh_learner_trainer_step(t, &stepped, st, &e) == 0, "%s", e.msg);
  return stepped;
}

/* Frees what a test made and removes its folder. */
static void finish(lh_learner_trainer *t, lh_model *m, lh_store *s) {
  lh_learner_trainer_free(t);
  lh_model_free(m);
  lh_store_close(s);
  remove_dir();
}

typedef struct {
  int n;
  lh_store_train_step last;
  double load[2 * 4];  /* the last row's expert loads (tiny_model: 2 layers, 4 experts) */
} rows_ctx;

static int on_row(void *ctx, const lh_store_train_step *t) {
  rows_ctx *r = ctx;
  r->n++;
  r->last = *t;
  r->last.expert_load = NULL;  /* the store's buffer: copied below */
  for (size_t i = 0; t->expert_load && i < (size_t)t->layers * t->experts && i < 8; i++)
    r->load[i] = t->expert_load[i];
  return 0;
}

/* The store's train_steps rows: how many, and the last. */
static rows_ctx read_rows(lh_store *s) {
  rows_ctx r = {0};
  lh_errbuf e;
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_row, &r, &e), 0);
  return r;
}

/* The row's expert loads: 4 per layer, each layer's summing to 1, and the
 * layer's MaxVio that of those loads (max load / mean load - 1). */
static void check_loads(const rows_ctx *r) {
  ck_assert_uint_eq(r->last.experts, 4);
  for (uint32_t l = 0; l < r->last.layers; l++) {
    double sum = 0, mx = 0;
    for (int x = 0; x < 4; x++) {
      double v = r->load[l * 4 + x];
      ck_assert_msg(v >= 0 && v <= 1, "layer %u expert %d load %g", l, x, v);
      sum += v, mx = fmax(mx, v);
    }
    ck_assert_msg(fabs(sum - 1) < 1e-9, "layer %u loads sum to %.12g", l, sum);
    ck_assert_msg(fabs(mx * 4 - 1 - r->last.maxvio[l]) < 1e-5, "layer %u: max load %g, MaxVio %g", l, mx,
                  r->last.maxvio[l]);
  }
}

START_TEST(test_step_aligned_and_recorded) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *m = tiny_model();
  write_episodes(s, m, 1, 3);
  /* Not ready: one segment short, no end. */
  lh_learner_config cfg = small_cfg();
  lh_learner_trainer *t;
  ck_assert_msg(lh_learner_trainer_new(m, s, &cfg, 0.7f, NULL, &t, &e) == 0, "%s", e.msg);
  size_t added;
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 3);
  ck_assert_int_eq(step(t, NULL), 0);  /* group 11 has one of two */
  write_episodes(s, m, 4, 1);
  /* Offered by id (as the ingest reports what it stored), twice, and an
   * episode already in the batcher: one added. */
  uint64_t ids[3] = {4, 4, 1};
  ck_assert_int_eq(lh_learner_trainer_offer(t, ids, 3, &added, &e), 0);
  ck_assert_uint_eq(added, 1);
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 0);
  float *before = malloc(lh_model_n_floats(m) * sizeof(float));
  memcpy(before, lh_model_params(m), lh_model_n_floats(m) * sizeof(float));
  lh_learner_train_stats st;
  ck_assert_int_eq(step(t, &st), 1);
  printf("step: loss=%g tokens=%zu logp_diff=%g grad_norm=%g\n", st.loss, st.tokens, st.logp_diff,
         st.grad_norm);
  ck_assert_uint_eq(st.episodes, 4);
  ck_assert_uint_eq(st.tokens, 4 * (EP_TOKENS - PROMPT));
  ck_assert_uint_eq(st.current_tokens, st.tokens);
  /* Windows of 5 with the state carried reproduce the whole-sequence
   * log-probabilities at the same temperature. */
  ck_assert_msg(st.logp_diff < 1e-5, "logp diff %g", st.logp_diff);
  ck_assert_uint_eq(st.version, 1);
  ck_assert_int_eq(st.skipped, 0);
  ck_assert(fabs(st.reward_mean - 0.5) < 1e-9 && fabs(st.success_rate - 0.5) < 1e-9);
  ck_assert(st.grad_norm > 0);
  size_t changed = 0;
  for (size_t i = 0; i < lh_model_n_floats(m); i++) changed += before[i] != lh_model_params(m)[i];
  ck_assert_uint_gt(changed, 0);
  rows_ctx r = read_rows(s);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.last.version, 1);
  ck_assert_uint_eq(r.last.tokens, st.tokens);
  ck_assert_uint_eq(r.last.layers, 2);
  ck_assert(isfinite(r.last.maxvio[0]) && isfinite(r.last.maxvio[1]));
  check_loads(&r);
  /* Nothing is trained twice. */
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 0);
  ck_assert_int_eq(step(t, NULL), 0);
  /* Episodes sampled at version 0 are stale for version 1 with lag 0:
   * handed over, they are dropped and counted; a scan passes over them. */
  write_episodes(s, m, 5, 2);
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 0);
  uint64_t stale_ids[2] = {5, 6};
  ck_assert_int_eq(lh_learner_trainer_offer(t, stale_ids, 2, &added, &e), 0);
  ck_assert_uint_eq(added, 2);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->dropped_stale, 2);
  ck_assert_int_eq(step(t, NULL), 0);
  /* The state a checkpoint takes. */
  lh_learner_state ls;
  memset(&ls, 0, sizeof ls);
  lh_learner_trainer_state(t, &ls);
  ck_assert_uint_eq(ls.step, 1);
  ck_assert_uint_eq(ls.version, 1);
  /* done: the 2 dropped; the 4 trained were forgotten once a step made
   * them stale (nothing can train them again) */
  ck_assert_uint_eq(ls.ingest_position, 2);
  ck_assert_uint_eq(ls.admission.dropped_stale, 2);
  free(before);
  finish(t, m, s);
}
END_TEST

START_TEST(test_nonfinite_step_skipped) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *m = tiny_model();
  write_episodes(s, m, 1, 2);
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2;
  lh_learner_trainer *t;
  ck_assert_int_eq(lh_learner_trainer_new(m, s, &cfg, 0.7f, NULL, &t, &e), 0);
  /* A NaN in the output projection makes every log-probability NaN. */
  int out = lh_model_find(m, "out");
  ck_assert_int_ge(out, 0);
  float *p = lh_model_params(m);
  p[lh_model_tensor_at(m, out)->offset] = NAN;
  size_t n = lh_model_n_floats(m);
  float *before = malloc(n * sizeof(float));
  memcpy(before, p, n * sizeof(float));
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  lh_learner_train_stats st;
  ck_assert_int_eq(step(t, &st), 1);
  ck_assert_int_eq(st.skipped, 1);
  ck_assert_uint_eq(st.version, 0);
  ck_assert_int_eq(memcmp(before, p, n * sizeof(float)), 0);
  rows_ctx r = read_rows(s);
  ck_assert_int_eq(r.n, 1);
  ck_assert_int_eq(r.last.skipped, 1);
  lh_learner_state ls;
  lh_learner_trainer_state(t, &ls);
  ck_assert_uint_eq(ls.skipped_steps, 1);
  free(before);
  finish(t, m, s);
}
END_TEST

START_TEST(test_bad_join_marked_error_and_args) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *m = tiny_model();
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2;
  lh_learner_trainer *t = NULL;
  ck_assert_int_eq(lh_learner_trainer_new(NULL, s, &cfg, 1, NULL, &t, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_trainer_new(m, s, &cfg, NAN, NULL, &t, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "temperature"));
  ck_assert_int_eq(lh_learner_trainer_scan(NULL, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_trainer_step(NULL, NULL, NULL, &e), LH_EINVAL);
  lh_learner_trainer_free(NULL);
  write_episodes(s, m, 1, 2);
  t = scanned_trainer(m, s, &cfg);
  /* Retention drops the payloads after the scan: nothing joins. */
  uint64_t dropped = 0;
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 1, &dropped, NULL, &e), 0);
  ck_assert_uint_gt(dropped, 0);
  ck_assert_int_eq(step(t, NULL), 0);  /* neither joins: nothing to train on */
  lh_episode_row row;
  ck_assert_int_eq(lh_store_episode_get(s, 2, &row, &e), 0);
  ck_assert_int_eq(row.status, LH_EPISODE_ERROR);
  finish(t, m, s);
}
END_TEST

/* 2 steps straight against 1 step, checkpoint, load, 1 step: the same
 * parameters bit for bit (moments, step count and ingest position carried). */
START_TEST(test_resume_exact) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *w = tiny_model();
  write_episodes(s, w, 1, 2);
  /* Group 11 rewards its even id: the other way round from write_episodes. */
  write_episode(s, w, 3, 11, 0.0f, 0);
  write_episode(s, w, 4, 11, 1.0f, 0);
  lh_model_free(w);
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2, cfg.max_policy_lag = 5, cfg.warmup_steps = 1;
  /* Straight. */
  lh_model *a = tiny_model();
  lh_learner_trainer *t = scanned_trainer(a, s, &cfg);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(step(t, NULL), 1);
  }
  lh_learner_trainer_free(t);
  /* One step, a checkpoint, a fresh start from it, one step. */
  lh_model *b = tiny_model();
  t = scanned_trainer(b, s, &cfg);
  step(t, NULL);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(t, &st);
  char ck[160], path[LH_LEARNER_TEXT_BYTES];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  ck_assert_int_eq(lh_learner_ckpt_exists(ck), 0);
  ck_assert_msg(lh_learner_ckpt_save(ck, b, &st, t, path, &e) == 0, "%s", e.msg);
  ck_assert(strstr(path, "step-00000001"));
  ck_assert_int_eq(lh_learner_ckpt_exists(ck), 1);
  lh_learner_trainer_free(t);
  lh_model_free(b);
  lh_learner_state st2;
  lh_model *c;
  char from[LH_LEARNER_TEXT_BYTES];
  ck_assert_msg(lh_learner_ckpt_load_latest(ck, lh_backend_cpu(), &c, &st2, from, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(from, path);
  ck_assert_uint_eq(st2.step, 1);
  ck_assert_uint_eq(st2.version, 1);
  ck_assert_uint_eq(st2.ingest_position, 2);
  ck_assert_int_eq(lh_learner_trainer_new(c, s, &cfg, 0.7f, &st2, &t, &e), 0);
  ck_assert_int_eq(lh_learner_trainer_load_done(t, from, st2.ingest_position + 1, &e), LH_ELEARNER_CKPT);
  ck_assert_msg(lh_learner_trainer_load_done(t, from, st2.ingest_position, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  ck_assert_int_eq(step(t, NULL), 1);
  ck_assert_uint_eq(lh_learner_trainer_version(t), 2);
  size_t n = lh_model_n_floats(a);
  ck_assert_int_eq(memcmp(lh_model_params(a), lh_model_params(c), n * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(lh_model_moment2(a), lh_model_moment2(c), n * sizeof(float)), 0);
  lh_learner_trainer_free(t);
  /* A damaged optimizer file is refused with its name. */
  char opt[LH_LEARNER_TEXT_BYTES + 32];
  snprintf(opt, sizeof opt, "%s/%s", path, LH_LEARNER_OPTIMIZER_FILE);
  FILE *f = fopen(opt, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 40, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  lh_model *d = NULL;
  ck_assert_int_eq(lh_learner_ckpt_load_latest(ck, lh_backend_cpu(), &d, &st2, NULL, &e), LH_ELEARNER_CKPT);
  ck_assert_msg(strstr(e.msg, "optimizer.bin") && strstr(e.msg, "checksum"), "%s", e.msg);
  ck_assert_ptr_null(d);
  ck_assert_int_eq(lh_learner_ckpt_load_latest(dir, lh_backend_cpu(), &d, &st2, NULL, &e), LH_ELEARNER_CKPT);
  ck_assert(strstr(e.msg, "nothing to resume from"));
  lh_model_free(c);
  finish(NULL, a, s);
}
END_TEST

/* The done set is as large as the window of trainable versions, not the
 * run: 30 steps of 2 episodes each (lag 1) leave at most the last two
 * versions' ids in it, and a resume from a checkpoint taken then trains
 * none of the episodes it forgot, nor any it kept. */
START_TEST(test_done_ids_bounded) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2, cfg.max_policy_lag = 1, cfg.total_steps = 100;
  lh_model *m = tiny_model();
  lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
  enum { STEPS = 30 };
  for (uint64_t i = 0; i < STEPS; i++) {
    /* two episodes at the trainer's version, handed over as the ingest does */
    uint64_t ids[2] = {100 + 2 * i, 101 + 2 * i};
    uint32_t v = (uint32_t)lh_learner_trainer_version(t);
    write_episode(s, m, ids[0], 1000 + i, 1.0f, v);
    write_episode(s, m, ids[1], 1000 + i, 0.0f, v);
    size_t added;
    ck_assert_int_eq(lh_learner_trainer_offer(t, ids, 2, &added, &e), 0);
    ck_assert_uint_eq(added, 2);
    ck_assert_int_eq(step(t, NULL), 1);
    lh_learner_state ls;
    lh_learner_trainer_state(t, &ls);
    ck_assert_msg(ls.ingest_position <= 2 * (cfg.max_policy_lag + 1), "step %llu: %llu ids kept",
                  (unsigned long long)i, (unsigned long long)ls.ingest_position);
  }
  ck_assert_uint_eq(lh_learner_trainer_version(t), STEPS);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(t, &st);
  char ck[160], path[LH_LEARNER_TEXT_BYTES], from[LH_LEARNER_TEXT_BYTES];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  ck_assert_msg(lh_learner_ckpt_save(ck, m, &st, t, path, &e) == 0, "%s", e.msg);
  lh_learner_trainer_free(t);
  lh_model *c;
  lh_learner_state st2;
  ck_assert_msg(lh_learner_ckpt_load_latest(ck, lh_backend_cpu(), &c, &st2, from, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_new(c, s, &cfg, 0.7f, &st2, &t, &e), 0);
  ck_assert_msg(lh_learner_trainer_load_done(t, from, st2.ingest_position, &e) == 0, "%s", e.msg);
  size_t added;
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 0);
  ck_assert_int_eq(step(t, NULL), 0);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->dropped_stale, st2.admission.dropped_stale);
  lh_learner_trainer_free(t);
  lh_model_free(c);
  finish(NULL, m, s);
}
END_TEST

/* An episode dropped on arrival waits in its incomplete group, done but
 * not seen; once a step forgets it, the same id handed over again is
 * still recognised as waiting, not added twice (which was an error that
 * stopped the learner). */
START_TEST(test_forgotten_member_waits) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *m = tiny_model();
  lh_learner_config cfg = small_cfg();  /* max_policy_lag 0, batch 4, groups of 2 */
  write_episodes(s, m, 1, 4);
  lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
  ck_assert_int_eq(step(t, NULL), 1);
  /* version 1: episode 50 of version 0 is stale, alone in group 500 */
  write_episode(s, m, 50, 500, 1.0f, 0);
  uint64_t id = 50;
  size_t added;
  ck_assert_int_eq(lh_learner_trainer_offer(t, &id, 1, &added, &e), 0);
  ck_assert_uint_eq(added, 1);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->dropped_stale, 1);
  /* a step at version 1 forgets it (version 2) */
  uint64_t fresh[4] = {5, 6, 7, 8};
  for (int i = 0; i < 4; i++) write_episode(s, m, fresh[i], 20 + (uint64_t)i / 2, (float)(i % 2), 1);
  ck_assert_int_eq(lh_learner_trainer_offer(t, fresh, 4, &added, &e), 0);
  ck_assert_uint_eq(added, 4);
  ck_assert_int_eq(step(t, NULL), 1);
  ck_assert_uint_eq(lh_learner_trainer_version(t), 2);
  ck_assert_msg(lh_learner_trainer_offer(t, &id, 1, &added, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(added, 0);
  ck_assert_int_eq(lh_learner_trainer_scan(t, &added, &e), 0);
  ck_assert_uint_eq(added, 0);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->dropped_stale, 1);
  finish(t, m, s);
}
END_TEST

/* Routing replay: the actor's recorded experts are used instead of top-k.
 * Its own routing gives the same log-probabilities; a forced one does not. */
START_TEST(test_routing_replay) {
  lh_store *s = open_store();
  lh_errbuf e;
  lh_model *m = tiny_model();
  record_routing = 1;
  write_episodes(s, m, 1, 2);
  record_routing = 0;
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2, cfg.routing_replay = 1, cfg.max_policy_lag = 5, cfg.lr = 1e-9;
  lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
  lh_learner_train_stats st;
  ck_assert_int_eq(step(t, &st), 1);
  printf("replay own routing: logp_diff=%g\n", st.logp_diff);
  ck_assert_msg(st.logp_diff < 1e-5, "own routing replayed: diff %g", st.logp_diff);
  lh_learner_trainer_free(t);
  /* The forced routing, in a store of its own, on a fresh model. */
  lh_store_close(s);
  lh_model_free(m);
  snprintf(db, sizeof db, "%s/replay2.db", dir);
  ck_assert_int_eq(lh_store_open(db, &s, &e), 0);
  m = tiny_model();
  record_routing = 2;
  write_episodes(s, m, 3, 2);
  record_routing = 0;
  t = scanned_trainer(m, s, &cfg);
  ck_assert_int_eq(step(t, &st), 1);
  printf("replay forced routing: logp_diff=%g\n", st.logp_diff);
  ck_assert_msg(st.logp_diff > 1e-4, "forced routing must change log p: diff %g", st.logp_diff);
  /* Every (token, slot) went to expert 0 or 1: half the load each, in
   * every layer, and none on experts 2 and 3. */
  rows_ctx r = read_rows(s);
  ck_assert_int_eq(r.n, 1);
  check_loads(&r);
  for (int l = 0; l < 2; l++)
    ck_assert_msg(r.load[l * 4] == 0.5 && r.load[l * 4 + 1] == 0.5 && r.load[l * 4 + 2] == 0 &&
                      r.load[l * 4 + 3] == 0,
                  "layer %d loads %g %g %g %g", l, r.load[l * 4], r.load[l * 4 + 1], r.load[l * 4 + 2],
                  r.load[l * 4 + 3]);
  finish(t, m, s);
}
END_TEST

/* Admitted on arrival, stale by the time its batch comes up: dropped then,
 * counted, and the step passes over it. */
START_TEST(test_stale_at_training_time) {
  lh_store *s = open_store();
  lh_model *m = tiny_model();
  write_episodes(s, m, 1, 4);
  lh_learner_config cfg = small_cfg();
  cfg.batch_episodes = 2;  /* max_policy_lag 0 */
  lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->admitted, 4);
  ck_assert_int_eq(step(t, NULL), 1);
  ck_assert_int_eq(step(t, NULL), 0);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->dropped_stale, 2);
  ck_assert_uint_eq(lh_learner_trainer_admission(t)->admitted, 2);
  /* done: the 2 dropped at the second call (no step since); the 2 trained
   * were forgotten by the step that made them stale */
  lh_learner_state ls;
  lh_learner_trainer_state(t, &ls);
  ck_assert_uint_eq(ls.ingest_position, 2);
  finish(t, m, s);
}
END_TEST

/* Episodes with an image (an observation's patches after its <img>): the
 * trainer feeds the image in the window that holds it, and the
 * log-probabilities match the behavior ones (computed with the image) at
 * version 0, whatever the train_window: windows are cut around the image
 * (lh_model_window_end), so one whose edge falls inside the image (8: the
 * patches are at 6..9) or one shorter than the image (3) trains the
 * episode as well as one that holds it (12). */
START_TEST(test_images_trained) {
  const uint64_t windows[3] = {12, 8, 3};
  for (int k = 0; k < 3; k++) {
    lh_store *s = open_store();
    lh_errbuf e;
    lh_model *m = tiny_model();
    with_image = 1;
    write_episodes(s, m, 1, 4);
    with_image = 0;
    lh_learner_config cfg = small_cfg();
    cfg.train_window = windows[k];
    lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
    lh_learner_train_stats st;
    ck_assert_int_eq(step(t, &st), 1);
    ck_assert_uint_eq(st.episodes, 4);
    ck_assert_uint_eq(st.tokens, 4 * (EP_TOKENS - PROMPT - 5));
    printf("images, train_window %llu: logp_diff=%g over %zu tokens\n", (unsigned long long)windows[k],
           st.logp_diff, st.current_tokens);
    ck_assert_msg(st.logp_diff < 1e-5, "logp diff %g", st.logp_diff);
    lh_episode_row row;
    ck_assert_int_eq(lh_store_episode_get(s, 1, &row, &e), 0);
    ck_assert_int_ne(row.status, LH_EPISODE_ERROR);
    finish(t, m, s);
  }
}
END_TEST

/* loss_norm: groups of a rewarded episode of 20 sampled tokens and an
 * unrewarded one of 10, GRPO advantages +A and -A, at the first step
 * (ratio 1 within 1e-5). token: the loss is -(20 A - 10 A) 2 / 60 (a
 * long episode weighs more); episode: each episode weighs the same, so
 * the loss is -(A - A + A - A) / 4 = 0. */
START_TEST(test_loss_norm) {
  double loss[2];
  for (int mode = 0; mode < 2; mode++) {
    lh_store *s = open_store();
    lh_model *m = tiny_model();
    short_failures = 1;
    write_episodes(s, m, 1, 4);
    short_failures = 0;
    lh_learner_config cfg = small_cfg();
    cfg.loss_norm = mode ? LH_LEARNER_LOSS_NORM_EPISODE : LH_LEARNER_LOSS_NORM_TOKEN;
    lh_learner_trainer *t = scanned_trainer(m, s, &cfg);
    lh_learner_train_stats st;
    ck_assert_int_eq(step(t, &st), 1);
    ck_assert_uint_eq(st.tokens, 2 * (20 + 10));
    ck_assert_msg(st.logp_diff < 1e-5, "logp diff %g", st.logp_diff);
    loss[mode] = st.loss;
    finish(t, m, s);
  }
  double A = 0.5 / (0.5 + LH_LEARNER_ADV_GRPO_EPS);
  printf("loss_norm: token %.6f (expected %.6f), episode %.2g (expected 0)\n", loss[0],
         -(20 * A - 10 * A) * 2 / 60, loss[1]);
  ck_assert(fabs(loss[0] - -(20 * A - 10 * A) * 2 / 60) < 1e-4);
  ck_assert(fabs(loss[1]) < 1e-4);
  /* The scale itself: N / (E sampled), 0 for an episode with none. */
  ck_assert(fabs(lh_learner_episode_scale(20, 30, 2) - 0.75) < 1e-12);
  ck_assert(fabs(lh_learner_episode_scale(10, 30, 2) - 1.5) < 1e-12);
  ck_assert(lh_learner_episode_scale(0, 30, 2) == 0);
}
END_TEST

/* The largest difference of a's and b's gradients, tensor by tensor, as a
 * share of b's tensor's largest; fails the test above tol. */
static double grads_agree(lh_model *a, lh_model *b, double tol) {
  const float *g0 = lh_model_grads(a), *g1 = lh_model_grads(b);
  double worst = 0;
  for (int i = 0; i < lh_model_n_tensors(a); i++) {
    const lh_model_tensor *x = lh_model_tensor_at(a, i);
    double big = 0, diff = 0;
    for (size_t j = x->offset; j < x->offset + x->numel; j++) {
      big = fmax(big, fabs(g1[j]));
      diff = fmax(diff, fabs((double)g0[j] - g1[j]));
    }
    double rel = big > 0 ? diff / big : diff;
    worst = fmax(worst, rel);
    ck_assert_msg(rel <= tol, "%s: gradients differ by %g of the tensor's largest %g", x->name, rel, big);
  }
  return worst;
}

/* One step over the same episodes with share_prefix on (k = 0) and off
 * (k = 1), each on a model and store of its own (write fills a store,
 * given arg), with cfg; each step trains `episodes` episodes. */
typedef struct {
  lh_model *m[2];
  lh_store *s[2];
  lh_learner_trainer *t[2];
  lh_learner_train_stats st[2];
} pair_run;

static void pair_step(pair_run *p, void (*write)(lh_store *, lh_model *, int), int arg, lh_learner_config cfg,
                      size_t episodes) {
  make_dir();
  char db2[160];
  snprintf(db2, sizeof db2, "%s/unshared.db", dir);
  lh_errbuf e;
  for (int k = 0; k < 2; k++) {
    p->m[k] = tiny_model();
    ck_assert_int_eq(lh_store_open(k ? db2 : db, &p->s[k], &e), 0);
    write(p->s[k], p->m[k], arg);
    cfg.share_prefix = k == 0;
    p->t[k] = scanned_trainer(p->m[k], p->s[k], &cfg);
    ck_assert_int_eq(step(p->t[k], &p->st[k]), 1);
    ck_assert_uint_eq(p->st[k].episodes, episodes);
    ck_assert_msg(p->st[k].logp_diff < 1e-5, "logp diff %g", p->st[k].logp_diff);
  }
}

static void pair_free(pair_run *p) {
  for (int k = 0; k < 2; k++) {
    lh_learner_trainer_free(p->t[k]);
    lh_model_free(p->m[k]);
    lh_store_close(p->s[k]);
  }
  remove_dir();
}

/* Shared prefixes (learner/shared_prefix.c): 8 episodes in two groups of
 * 4, each group's first SHARED tokens its task's (with, in the second
 * pass, an image among them), the rest each episode's own. With
 * share_prefix the windows before the first trained one (0..15 of 5
 * tokens: 3 windows) run once per group; every gradient equals that of
 * the same step without sharing, tensor by tensor, within 1e-5 of the
 * tensor's largest (the same arithmetic: 0 is expected), and the forward
 * ran 3 x 15 fewer positions per group. */
#define SHARED 16
static void write_shared(lh_store *s, lh_model *m, int image) {
  const lrfx_shape shape = {.n_tokens = EP_TOKENS, .seg_tokens = SEG_TOKENS, .a = 31, .b = 7,
                             .first_sampled = SHARED, .temperature = 0.7f};
  for (uint64_t id = 1; id <= 8; id++) {
    uint64_t group = 20 + (id - 1) / 4;
    lrfx_episode ep;
    lrfx_episode_init(&ep, &shape, id, group, id % 2 ? 1.0f : 0.0f);
    for (int i = 0; i < SHARED; i++) ep.tokens[i] = (uint32_t)((group * 13 + (uint64_t)i * 5) % 200 + 32);
    static uint8_t px[4 * 4 * 3];
    float img_px[4 * 4 * 3];
    lh_model_image img = {.at = IMG_AT + 1, .height = 4, .width = 4, .pixels = img_px};
    Longhaul__Image im = LONGHAUL__IMAGE__INIT;
    if (image) {
      for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37 + group * 11);
      lh_model_pixels_from_u8(px, 16, 3, img_px);
      ep.tokens[IMG_AT] = LH_TOK_IMG;
      for (int i = 1; i <= 4; i++) ep.tokens[IMG_AT + i] = LH_TOK_PAD;
      im.offset = IMG_AT, im.width = 4, im.height = 4, im.channels = 3;
      im.pixels.len = sizeof px, im.pixels.data = px;
      ep.image = &im;
    }
    lh_errbuf e;
    ck_assert_msg(lrfx_episode_sample(&ep, m, 0, image ? &img : NULL, &e) == 0, "%s", e.msg);
    ck_assert_msg(lrfx_episode_put(s, &ep, &e) == 0, "%s", e.msg);
  }
}

START_TEST(test_shared_prefix_step) {
  for (int image = 0; image < 2; image++) {
    lh_learner_config cfg = small_cfg();
    cfg.batch_episodes = 8, cfg.group_size = 4;
    pair_run p;
    pair_step(&p, write_shared, image, cfg, 8);
    printf("shared prefix%s: forward positions %zu shared, %zu unshared; loss %.9g and %.9g\n",
           image ? " (an image in it)" : "", p.st[0].run_positions, p.st[1].run_positions, p.st[0].loss,
           p.st[1].loss);
    ck_assert_uint_eq(p.st[1].run_positions - p.st[0].run_positions, 2 * 3 * 15);
    double worst = grads_agree(p.m[0], p.m[1], 1e-5);
    printf("shared prefix%s: largest gradient difference %g of a tensor's largest\n", image ? " (an image in it)" : "",
           worst);
    pair_free(&p);
  }
}
END_TEST

/* The prefix tree (learner/train_tree.c): 12 one-window episodes of 40
 * tokens in 3 groups of 4, sampled from token 12 on. All share tokens
 * 0..9, a group shares 10..21, and in each group member 2 repeats member
 * 1 whole and member 3 repeats it up to token 30; in group 1, member 2
 * stops sampling at 30, so it is a prefix of member 1's. With
 * share_prefix the step runs the tree (root, groups, members); every
 * gradient equals the step without it within 1e-4 of the tensor's largest
 * (float rounding: the chunks are cut elsewhere), the loss and the tokens
 * trained are the same, and the forward ran fewer positions. The second
 * pass replays recorded routing. In the third the tree fails
 * (LH_LEARNER_TEST_TREE_FAIL, as when a kernel refuses a node): the
 * batch runs again one episode at a time, from zeroed gradients, and
 * equals the step without the tree. */
#define TREE_TOKENS 40
static void write_tree(lh_store *s, lh_model *m, int routing) {
  const lrfx_shape shape = {.n_tokens = TREE_TOKENS, .seg_tokens = SEG_TOKENS, .a = 31, .b = 7,
                             .first_sampled = 12, .temperature = 0.7f};
  lrfx_episode first;
  for (uint64_t id = 1; id <= 12; id++) {
    uint64_t group = 40 + (id - 1) / 4, member = (id - 1) % 4;
    lrfx_episode ep;
    lrfx_episode_init(&ep, &shape, id, group, id % 3 ? 1.0f : 0.0f);
    for (int i = 0; i < TREE_TOKENS; i++) {
      if (i < 10) ep.tokens[i] = (uint32_t)(i * 7 % 200 + 32);
      else if (i < 22) ep.tokens[i] = (uint32_t)((group * 13 + (uint64_t)i * 5) % 200 + 32);
      else if (member == 1 || (member == 2 && i < 30)) ep.tokens[i] = first.tokens[i];
    }
    lh_errbuf e;
    ck_assert_msg(lrfx_episode_sample(&ep, m, 0, NULL, &e) == 0, "%s", e.msg);
    if (group == 41 && member == 1)
      for (int i = 30; i < TREE_TOKENS; i++) ep.mask[i] = 0;
    ep.send_routing = routing;
    if (member == 0) first = ep;
    ck_assert_msg(lrfx_episode_put(s, &ep, &e) == 0, "%s", e.msg);
  }
}

START_TEST(test_prefix_tree_step) {
  for (int pass_i = 0; pass_i < 3; pass_i++) {
    int routing = pass_i == 1;
    if (pass_i == 2) setenv("LH_LEARNER_TEST_TREE_FAIL", "0", 1);  /* rank 0's first step */
    const char *pass = pass_i == 2 ? " (the tree failing)" : routing ? " (routing replayed)" : "";
    lh_learner_config cfg = small_cfg();
    cfg.batch_episodes = 12, cfg.group_size = 4, cfg.train_window = 64;
    cfg.routing_replay = routing;
    pair_run p;
    pair_step(&p, write_tree, routing, cfg, 12);
    const lh_learner_train_stats *st = p.st;
    printf("prefix tree%s: forward positions %zu in the tree, %zu one by one; loss %.9g and %.9g; tokens %zu\n",
           pass, st[0].run_positions, st[1].run_positions, st[0].loss, st[1].loss, st[0].tokens);
    ck_assert_uint_eq(st[0].tokens, st[1].tokens);
    ck_assert_msg(fabs(st[0].loss - st[1].loss) <= 1e-5 * fmax(1.0, fabs(st[1].loss)), "losses %.9g and %.9g",
                  st[0].loss, st[1].loss);
    if (pass_i < 2) ck_assert_uint_lt(st[0].run_positions, st[1].run_positions / 2);
    else ck_assert_uint_eq(st[0].run_positions, st[1].run_positions);
    double worst = grads_agree(p.m[0], p.m[1], 1e-4);
    printf("prefix tree%s: largest gradient difference %.2e of a tensor's largest\n", pass, worst);
    unsetenv("LH_LEARNER_TEST_TREE_FAIL");
    pair_free(&p);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_train");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_step_aligned_and_recorded);
  tcase_add_test(tc, test_images_trained);
  tcase_add_test(tc, test_nonfinite_step_skipped);
  tcase_add_test(tc, test_bad_join_marked_error_and_args);
  tcase_add_test(tc, test_resume_exact);
  tcase_add_test(tc, test_done_ids_bounded);
  tcase_add_test(tc, test_forgotten_member_waits);
  tcase_add_test(tc, test_routing_replay);
  tcase_add_test(tc, test_stale_at_training_time);
  tcase_add_test(tc, test_loss_norm);
  tcase_add_test(tc, test_shared_prefix_step);
  tcase_add_test(tc, test_prefix_tree_step);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

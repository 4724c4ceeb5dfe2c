/* Stored-state training (docs/learner.md "Stored state") on a tiny
 * model (d 16) and real SQLite stores: an episode whose last window holds
 * the sampled tokens, with the recurrent states an actor's decoder took
 * every segment. One step in exact mode and one in stored mode, from the
 * same weights, agree on the trained window's log-probabilities (both
 * below 1e-5 from the behavior ones, which are the exact forward's), the
 * loss (relative 1e-5) and every gradient (max |diff| below 1e-5 of the
 * largest gradient), while the stored step runs a fraction of the
 * positions. A state of the wrong size or with a NaN is refused, naming
 * it; the segmenter sends each state with the segment that holds it; the
 * store reads back the state a window starts from alone, refuses one of
 * another size, and drops it with its payload; the keys and their errors. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "learner_fixture.h"
#include "proto/wire.h"

#define EP_TOKENS 48
#define SEG_TOKENS 8
#define FIRST_SAMPLED 41  /* targets 41..47: the last window of 8 */
#define STATE_FLOATS (2 * 2 * 8 * 8)

static lh_model *tiny_model(void) { return lrfx_model(11); }

/* Writes episode id into the store at path: behavior log-probabilities
 * from one forward over the whole episode, and the decoder's state after
 * each segment's first token offset (segments 1..5) in that segment. */
static void write_episode(const char *path, lh_model *m, uint64_t id, uint64_t group, float reward) {
  static const lrfx_shape shape = {.n_tokens = EP_TOKENS, .seg_tokens = SEG_TOKENS,
                                    .a = 29, .b = 13, .first_sampled = FIRST_SAMPLED,
                                    .temperature = 1.0f};
  lrfx_episode ep;
  lh_errbuf e;
  lrfx_episode_init(&ep, &shape, id, group, reward);
  ck_assert_msg(lrfx_episode_sample(&ep, m, 0, NULL, &e) == 0, "%s", e.msg);
  /* The actor's side: a decoder fed segment by segment, its state taken
   * at each segment start. */
  static float states[EP_TOKENS / SEG_TOKENS][STATE_FLOATS];
  ck_assert_uint_eq(lh_model_state_floats(lh_model_get_config(m)), STATE_FLOATS);
  int32_t tok[EP_TOKENS];
  for (int i = 0; i < EP_TOKENS; i++) tok[i] = (int32_t)ep.tokens[i];
  lh_model_decoder *d;
  ck_assert_int_eq(lh_model_decoder_new(m, 1, &d, &e), 0);
  for (int q = 0; q < EP_TOKENS / SEG_TOKENS; q++) {
    ck_assert_int_eq(lh_model_decoder_state_get(d, 0, states[q]), 0);
    ck_assert_int_eq(lh_model_prefill(d, 0, tok + q * SEG_TOKENS, SEG_TOKENS, NULL, 0, NULL, &e), 0);
  }
  lh_model_decoder_free(d);
  ep.states = states[0], ep.state_floats = STATE_FLOATS;
  lh_store *s;
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s", e.msg);
  ck_assert_msg(lrfx_episode_put(s, &ep, &e) == 0, "%s", e.msg);
  lh_store_close(s);
}

typedef struct {
  lh_learner_train_stats st;
  float *grads;
  size_t n;
} step_result;

/* One step of a trainer in mode over a fresh store holding two groups of
 * two episodes; the model's gradients after it (the step's, unclipped). */
static step_result one_step(lh_learner_state_mode mode, const char *dir, const char *name) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s.db", dir, name);
  lh_model *m = tiny_model();
  write_episode(path, m, 101, 1, 1.0f);
  write_episode(path, m, 103, 1, 0.0f);
  write_episode(path, m, 105, 2, 1.0f);
  write_episode(path, m, 107, 2, 0.5f);
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = 4, c.group_size = 2, c.train_window = 8, c.max_policy_lag = 0;
  c.lr = 1e-2, c.warmup_steps = 0, c.total_steps = 10;
  c.state_mode = mode, c.burn_in = 4;
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s", e.msg);
  lh_learner_trainer *t;
  ck_assert_msg(lh_learner_trainer_new(m, s, &c, 1.0f, NULL, &t, &e) == 0, "%s", e.msg);
  size_t added;
  ck_assert_msg(lh_learner_trainer_scan(t, &added, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(added, 4);
  int stepped = 0;
  step_result r = {0};
  ck_assert_msg(lh_learner_trainer_step(t, &stepped, &r.st, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(stepped, 1);
  r.n = lh_model_n_floats(m);
  r.grads = malloc(r.n * sizeof *r.grads);
  ck_assert_ptr_nonnull(r.grads);
  memcpy(r.grads, lh_model_grads(m), r.n * sizeof *r.grads);
  lh_learner_trainer_free(t);
  lh_store_close(s);
  lh_model_free(m);
  return r;
}

START_TEST(test_stored_matches_exact) {
  char dir[] = "/tmp/lh_stored_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  step_result x = one_step(LH_LEARNER_STATE_EXACT, dir, "exact");
  step_result y = one_step(LH_LEARNER_STATE_STORED, dir, "stored");
  ck_assert_uint_eq(x.st.tokens, 4 * (EP_TOKENS - FIRST_SAMPLED));
  ck_assert_uint_eq(y.st.tokens, x.st.tokens);
  /* exact runs every window up to the last sampled token; stored starts
   * from the state at 32 (burn-in 4 before the window at 40): 8 burn-in
   * and 8 trained positions per episode */
  printf("stored: run_positions exact=%zu stored=%zu states_used=%zu\n", x.st.run_positions, y.st.run_positions,
         y.st.states_used);
  ck_assert_uint_eq(x.st.run_positions, 4 * EP_TOKENS);
  ck_assert_uint_eq(y.st.run_positions, 4 * 16);
  ck_assert_uint_eq(x.st.states_used, 0);
  ck_assert_uint_eq(y.st.states_used, 4);
  /* one gap per episode bridged in stored mode (the learner warns when
   * none of them had a state); exact mode bridges none */
  ck_assert_uint_eq(y.st.burn_ins, 4);
  ck_assert_uint_eq(x.st.burn_ins, 0);
  /* Both against the exact forward's log-probabilities (the behavior ones). */
  printf("stored: logp_diff exact=%g stored=%g loss exact=%.9g stored=%.9g\n", x.st.logp_diff, y.st.logp_diff,
         x.st.loss, y.st.loss);
  ck_assert_uint_eq(y.st.current_tokens, x.st.tokens);
  ck_assert_msg(x.st.logp_diff < 1e-5, "exact logp_diff %g", x.st.logp_diff);
  ck_assert_msg(y.st.logp_diff < 1e-5, "stored logp_diff %g", y.st.logp_diff);
  ck_assert_msg(fabs(x.st.loss - y.st.loss) <= 1e-5 * fmax(1e-3, fabs(x.st.loss)), "loss %.9g vs %.9g", x.st.loss,
                y.st.loss);
  ck_assert_uint_eq(x.n, y.n);
  double big = 0, diff = 0;
  for (size_t i = 0; i < x.n; i++) {
    big = fmax(big, fabs(x.grads[i]));
    diff = fmax(diff, fabs((double)x.grads[i] - y.grads[i]));
  }
  printf("stored: gradients max|g|=%g max|diff|=%g\n", big, diff);
  ck_assert(big > 0);
  ck_assert_msg(diff <= 1e-5 * big, "gradients differ by %g (largest %g)", diff, big);
  free(x.grads), free(y.grads);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The store's side: the state a window starts from is the latest at or
 * before a token, read alone; retention drops it with its payload. */
START_TEST(test_store_reads_and_drops_states) {
  char dir[] = "/tmp/lh_stored_XXXXXX", path[96];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/s.db", dir);
  lh_model *m = tiny_model();
  write_episode(path, m, 201, 1, 1.0f);
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s", e.msg);
  static float state[STATE_FLOATS];
  uint64_t off = 0;
  ck_assert_int_eq(lh_store_segment_state(s, 201, 7, STATE_FLOATS, &off, state, &e), 0);  /* none before 8 */
  ck_assert_int_eq(lh_store_segment_state(s, 201, 8, STATE_FLOATS, &off, state, &e), 1);
  ck_assert_uint_eq(off, 8);
  ck_assert_int_eq(lh_store_segment_state(s, 201, 39, STATE_FLOATS, &off, state, &e), 1);
  ck_assert_uint_eq(off, 32);
  ck_assert_int_eq(lh_store_segment_state(s, 202, 39, STATE_FLOATS, &off, state, &e), 0);  /* another episode */
  ck_assert_int_eq(lh_store_segment_state(s, 201, 39, STATE_FLOATS - 1, &off, state, &e), LH_ESTORE_PAYLOAD);
  printf("stored: %s\n", e.msg);
  uint64_t dropped = 0, bytes = 0;
  ck_assert_msg(lh_store_drop_payloads_before(s, 1, &dropped, &bytes, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(dropped, EP_TOKENS / SEG_TOKENS);
  ck_assert_int_eq(lh_store_segment_state(s, 201, 39, STATE_FLOATS, &off, state, &e), 0);
  lh_store_close(s);
  lh_model_free(m);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A segment of the tiny model with state (n floats), for the checks. */
static Longhaul__Segment *segment_with_state(float *state, size_t n) {
  static uint32_t tok[SEG_TOKENS], ver[SEG_TOKENS];
  static uint8_t mask[SEG_TOKENS];
  static float blogp[SEG_TOKENS];
  static Longhaul__Segment seg;
  longhaul__segment__init(&seg);
  for (int i = 0; i < SEG_TOKENS; i++) tok[i] = 65;
  seg.episode_id = 9, seg.seq = 1, seg.actor = "a0", seg.env = "calc", seg.start_offset = SEG_TOKENS;
  seg.n_tokens = SEG_TOKENS, seg.tokens = tok;
  seg.loss_mask.len = SEG_TOKENS, seg.loss_mask.data = mask;
  seg.n_behavior_logp = SEG_TOKENS, seg.behavior_logp = blogp;
  seg.n_policy_version = SEG_TOKENS, seg.policy_version = ver;
  seg.n_state = n, seg.state = state, seg.state_offset = SEG_TOKENS;
  return &seg;
}

START_TEST(test_hostile_state_refused) {
  lh_model *m = tiny_model();
  lh_learner_config c;
  lh_learner_config_default(&c);
  lh_learner_model_limits l;
  lh_learner_model_limits_init(&l, lh_model_get_config(m), &c);
  ck_assert_uint_eq(l.state_floats, STATE_FLOATS);
  static float state[STATE_FLOATS + 1];
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lh_errbuf e;
  /* the right size passes both checks */
  ck_assert_int_eq(lh_wire_validate_segment(segment_with_state(state, STATE_FLOATS), &lim, &e), 0);
  ck_assert_int_eq(lh_learner_check_segment(segment_with_state(state, STATE_FLOATS), &l, &e), 0);
  /* one float too many or too few */
  ck_assert_int_eq(lh_learner_check_segment(segment_with_state(state, STATE_FLOATS + 1), &l, &e),
                   LH_ELEARNER_MODEL_INPUT);
  printf("stored: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "recurrent state of 257 floats; the model's is 256"));
  ck_assert_int_eq(lh_learner_check_segment(segment_with_state(state, 3), &l, &e), LH_ELEARNER_MODEL_INPUT);
  /* a NaN, an infinity: the wire refuses them, and so does the model check */
  state[17] = NAN;
  ck_assert_int_eq(lh_wire_validate_segment(segment_with_state(state, STATE_FLOATS), &lim, &e), LH_EWIRE_NOT_FINITE);
  printf("stored: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "state[17]"));
  ck_assert_int_eq(lh_learner_check_segment(segment_with_state(state, STATE_FLOATS), &l, &e), LH_ELEARNER_MODEL_INPUT);
  state[17] = INFINITY;
  ck_assert_int_eq(lh_wire_validate_segment(segment_with_state(state, STATE_FLOATS), &lim, &e), LH_EWIRE_NOT_FINITE);
  state[17] = 0;
  /* an offset outside the segment, or one without a state */
  Longhaul__Segment *seg = segment_with_state(state, STATE_FLOATS);
  seg->state_offset = 2 * SEG_TOKENS;
  ck_assert_int_eq(lh_wire_validate_segment(seg, &lim, &e), LH_EWIRE_VALUE_RANGE);
  seg = segment_with_state(NULL, 0);
  ck_assert_int_eq(lh_wire_validate_segment(seg, &lim, &e), LH_EWIRE_VALUE_RANGE);
  lh_model_free(m);
}
END_TEST

/* The actor's side: states handed to the segmenter before or after their
 * tokens go with the segment that holds them, the first for each. */
START_TEST(test_segmenter_carries_states) {
  lh_actors_segmenter_config sc = {.episode_id = 5, .group_id = 1, .actor = "a0", .env = "calc",
                                   .segment_tokens = SEG_TOKENS};
  lh_errbuf e;
  lh_actors_segmenter *s = lh_actors_segmenter_new(&sc, &e);
  ck_assert_ptr_nonnull(s);
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {9, 9, 9, 9};
  /* a prefill ran ahead: states due at 8 and 20, then one more at 21 in
   * the same segment (dropped: the first one goes) */
  ck_assert_int_eq(lh_actors_segmenter_set_state(s, 8, a, 4, &e), 0);
  ck_assert_int_eq(lh_actors_segmenter_set_state(s, 20, b, 4, &e), 0);
  ck_assert_int_eq(lh_actors_segmenter_set_state(s, 21, c, 4, &e), 0);
  float bad[4] = {0, NAN, 0, 0};
  ck_assert_int_eq(lh_actors_segmenter_set_state(s, 30, bad, 4, &e), LH_EACTORS_SEGMENT_TOKEN);
  for (int i = 0; i < 30; i++) ck_assert_int_ge(lh_actors_segmenter_push(s, 65, 0, 0, 0, NULL, &e), 0);
  lh_actors_episode_result res = {.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, .reward = 1};
  Longhaul__EpisodeEnd *end = NULL;
  ck_assert_int_eq(lh_actors_segmenter_finish(s, &res, &end, &e), 0);
  uint64_t want_offset[4] = {0, 8, 20, 0};
  float want_first[4] = {0, 1, 5, 0};
  for (int q = 0; q < 4; q++) {
    Longhaul__Segment *seg = lh_actors_segmenter_pop(s);
    ck_assert_ptr_nonnull(seg);
    ck_assert_uint_eq(seg->n_state, want_first[q] ? 4 : 0);
    ck_assert_uint_eq(seg->state_offset, want_offset[q]);
    if (seg->n_state) ck_assert(seg->state[0] == want_first[q]);
    lh_actors_segment_free(seg);
  }
  ck_assert_ptr_null(lh_actors_segmenter_pop(s));
  lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(s);
}
END_TEST

/* The keys: [learner] state_mode and burn_in, [actor] state_interval,
 * beyond_context and max_episode_tokens; a bad value names the key. */
START_TEST(test_keys) {
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_config_parse("[learner]\n", "t.ini", &c, &e), 0);
  ck_assert_int_eq(c.state_mode, LH_LEARNER_STATE_EXACT);
  ck_assert_uint_eq(c.burn_in, 64);
  ck_assert_msg(lh_learner_config_parse("[learner]\nstate_mode = stored\nburn_in = 0\n", "t.ini", &c, &e) == 0, "%s",
                e.msg);
  ck_assert_int_eq(c.state_mode, LH_LEARNER_STATE_STORED);
  ck_assert_uint_eq(c.burn_in, 0);
  ck_assert_str_eq(lh_learner_state_mode_name(c.state_mode), "stored");
  ck_assert_int_lt(lh_learner_config_parse("[learner]\nstate_mode = cached\n", "t.ini", &c, &e), 0);
  printf("stored: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "state_mode"));
  ck_assert_ptr_nonnull(strstr(e.msg, "exact, stored"));
  ck_assert_int_lt(lh_learner_config_parse("[learner]\nburn_in = -1\n", "t.ini", &c, &e), 0);
  ck_assert_ptr_nonnull(strstr(e.msg, "burn_in"));
  lh_actors_config a;
  ck_assert_msg(lh_actors_config_parse("[actor]\nsegment_tokens = 256\nstate_interval = 256\nbeyond_context = 1\n"
                                       "max_episode_tokens = 100000\n", "t.ini", &a, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(a.state_interval, 256);
  ck_assert_uint_eq(a.beyond_context, 1);
  ck_assert_uint_eq(a.max_episode_tokens, 100000);
  ck_assert_int_lt(lh_actors_config_parse("[actor]\nbeyond_context = 2\n", "t.ini", &a, &e), 0);
  ck_assert_ptr_nonnull(strstr(e.msg, "beyond_context"));
  ck_assert_int_lt(lh_actors_config_parse("[actor]\nmax_episode_tokens = 1\n", "t.ini", &a, &e), 0);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_episode_tokens"));
  /* one state a segment: an interval below segment_tokens is refused,
   * naming both keys and the later one's line */
  ck_assert_int_lt(lh_actors_config_parse("[actor]\nstate_interval = 256\nsegment_tokens = 512\n", "t.ini", &a, &e),
                   0);
  printf("stored: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "t.ini:3"));
  ck_assert_ptr_nonnull(strstr(e.msg, "state_interval = 256 is below segment_tokens = 512"));
  ck_assert_int_lt(lh_actors_config_parse("[actor]\nstate_interval = 100\n", "t.ini", &a, &e), 0);
  ck_assert_ptr_nonnull(strstr(e.msg, "segment_tokens = 512"));
  ck_assert_msg(lh_actors_config_parse("[actor]\nstate_interval = 1536\n", "t.ini", &a, &e) == 0, "%s", e.msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_stored");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_stored_matches_exact);
  tcase_add_test(tc, test_hostile_state_refused);
  tcase_add_test(tc, test_segmenter_carries_states);
  tcase_add_test(tc, test_keys);
  tcase_add_test(tc, test_store_reads_and_drops_states);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

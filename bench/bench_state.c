/* bench_state: what a learner step costs per policy token, and how far its
 * log-probabilities stray, in each [learner] state_mode (docs/learner.md
 * "Stored state"), through the real trainer over a real SQLite store.
 *
 *   bench_state --tokens T --policy P [--episodes E] [--window W]
 *               [--interval I] [--burn-in B] [--lag L] [--lr LR]
 *               [--mode exact|stored] [--model MODEL.ini] [--dir DIR]
 *
 * E episodes (one group) of T tokens each, the last P of them sampled by
 * the policy (like needle: a long document, then the answer). The actor's
 * weights A are the model's init; the learner's B are A moved by L
 * optimizer steps of size LR per parameter (AdamW's step is about LR per
 * parameter, in the sign of its update), so the states the actor sent are
 * L versions stale, as with [learner] max_policy_lag = L. Behavior
 * log-probabilities are B's exact ones, so the trainer's alignment figure
 * is the stray from exact recomputation. The actor's states are A's
 * (windowed forward with the state carried, the same function as its
 * decode), one every I tokens, each in its own segment of I tokens.
 *
 * The step runs --repeat R times (3), by fresh trainers from the same
 * weights; the shortest counts. Prints one line: mode, tokens, policy
 * tokens trained, step ms, policy
 * tokens per second, positions the forward ran, states used, max and mean
 * |logp - exact logp|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

typedef struct {
  size_t tokens, policy, episodes, window, interval, burn_in, lag, repeat;
  double lr;
  const char *mode, *model, *dir;
} opts;

static int usage(void) {
  fprintf(stderr,
          "usage: bench_state --tokens T --policy P [--episodes E] [--window W] [--interval I] [--burn-in B]\n"
          "                   [--lag L] [--lr LR] [--mode exact|stored] [--model MODEL.ini] [--dir DIR]\n");
  return 2;
}

#define DIE(...) do { fprintf(stderr, "bench_state: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

/* Windowed forward of one episode under m, state carried: logp (T, may be
 * NULL) of each next token, and the state after every multiple of every
 * (states: (T / every, state_floats), may be NULL). */
static void windowed(lh_model *m, const int32_t *tok, size_t T, size_t W, float *logp, float *states,
                     size_t every) {
  size_t sf = lh_model_state_floats(lh_model_get_config(m));
  int32_t *tgt = malloc(W * sizeof *tgt);
  float *a = calloc(sf, sizeof *a), *b = calloc(sf, sizeof *b);
  lh_model_cache *cache = NULL;
  lh_errbuf e;
  if (!tgt || !a || !b) DIE("out of memory");
  size_t step = states && every < W ? every : W;
  for (size_t at = 0; at < T; at += step) {
    size_t n = at + step < T ? step : T - at;
    for (size_t i = 0; i < n; i++) tgt[i] = at + i + 1 < T ? tok[at + i + 1] : -1;
    int32_t offs[2] = {0, (int32_t)n};
    lh_model_batch bt = {.n_tokens = (int)n, .tokens = tok + at, .targets = tgt, .n_seq = 1, .seq_offsets = offs,
                         .state_in = at ? a : NULL, .temperature = 1.0f};
    if (lh_model_forward(m, &bt, &cache, logp ? logp + at : NULL, NULL, b, &e)) DIE("forward: %s", e.msg);
    float *s = a;
    a = b, b = s;
    if (states && (at + n) % every == 0 && (at + n) / every - 1 < T / every)
      memcpy(states + ((at + n) / every - 1) * sf, a, sf * sizeof *a);
  }
  lh_model_cache_free(cache);
  free(tgt), free(a), free(b);
}

int main(int argc, char **argv) {
  opts o = {.repeat = 3, .episodes = 2, .window = 2048, .interval = 256, .burn_in = 64, .lag = 1, .lr = 3e-4, .mode = "stored",
            .dir = "/tmp"};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    i++;
    if (!strcmp(k, "--tokens")) o.tokens = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--policy")) o.policy = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--episodes")) o.episodes = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--window")) o.window = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--interval")) o.interval = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--burn-in")) o.burn_in = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--lag")) o.lag = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--repeat")) o.repeat = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--lr")) o.lr = strtod(v, NULL);
    else if (!strcmp(k, "--mode")) o.mode = v;
    else if (!strcmp(k, "--model")) o.model = v;
    else if (!strcmp(k, "--dir")) o.dir = v;
    else return usage();
  }
  int stored = !strcmp(o.mode, "stored");
  if ((!stored && strcmp(o.mode, "exact")) || o.tokens < 2 || o.policy < 1 || o.policy >= o.tokens || !o.episodes ||
      !o.window || !o.interval || o.interval > 65536 || !o.repeat)
    return usage();
  lh_model_config mc;
  lh_model_config_default(&mc);
  lh_errbuf e;
  if (o.model && lh_model_config_parse_file(o.model, &mc, &e)) DIE("%s", e.msg);
  lh_model *A, *B;
  if (lh_model_new(&mc, lh_backend_cpu(), &A, &e) || lh_model_new(&mc, lh_backend_cpu(), &B, &e)) DIE("%s", e.msg);
  /* B: A moved by lag steps of lr per parameter, in random signs. */
  float *pb = lh_model_params(B);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < lh_model_n_floats(B); i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    pb[i] += (float)((x & 1) ? o.lr * (double)o.lag : -o.lr * (double)o.lag);
  }
  size_t T = o.tokens, sf = lh_model_state_floats(&mc), n_states = T / o.interval;
  char db[512];
  snprintf(db, sizeof db, "%s/bench_state_%d.db", o.dir, (int)getpid());
  unlink(db);
  lh_store *s;
  if (lh_store_open(db, &s, &e)) DIE("%s", e.msg);
  int32_t *tok = malloc(T * sizeof *tok);
  uint32_t *utok = malloc(T * sizeof *utok), *ver = calloc(T, sizeof *ver);
  uint8_t *mask = malloc(T);
  float *logp = malloc(T * sizeof *logp), *blogp = malloc(T * sizeof *blogp);
  float *states = malloc((n_states ? n_states : 1) * sf * sizeof *states);
  if (!tok || !utok || !ver || !mask || !logp || !blogp || !states) DIE("out of memory");
  int64_t t_prep = lh_now_ns();
  for (size_t ep = 0; ep < o.episodes; ep++) {
    for (size_t i = 0; i < T; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      tok[i] = (int32_t)(32 + x % 95);
      utok[i] = (uint32_t)tok[i];
      mask[i] = i >= T - o.policy;
    }
    windowed(B, tok, T, o.window, logp, NULL, 0);         /* exact, the learner's weights */
    if (stored) windowed(A, tok, T, o.window, NULL, states, o.interval);  /* the actor's states */
    for (size_t i = 0; i < T; i++) blogp[i] = mask[i] ? logp[i - 1] : 0.0f;
    if (lh_store_begin(s, &e)) DIE("%s", e.msg);
    uint32_t n_seg = (uint32_t)((T + o.interval - 1) / o.interval);
    for (uint32_t q = 0; q < n_seg; q++) {
      Longhaul__Segment seg = LONGHAUL__SEGMENT__INIT;
      size_t at = (size_t)q * o.interval, n = at + o.interval < T ? o.interval : T - at;
      seg.episode_id = 1001 + 2 * ep, seg.seq = q, seg.actor = "bench", seg.env = "bench", seg.start_offset = at;
      seg.group_id = 7, seg.task_seed = 7;
      seg.n_tokens = n, seg.tokens = utok + at;
      seg.loss_mask.len = n, seg.loss_mask.data = mask + at;
      seg.n_behavior_logp = n, seg.behavior_logp = blogp + at;
      seg.n_policy_version = n, seg.policy_version = ver + at;
      if (stored && q > 0) seg.n_state = sf, seg.state = states + (q - 1) * sf, seg.state_offset = at;
      if (lh_store_put_segment(s, &seg, NULL, &e)) DIE("%s", e.msg);
    }
    Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
    end.episode_id = 1001 + 2 * ep, end.actor = "bench", end.env = "bench", end.segment_count = n_seg;
    end.total_tokens = T, end.reward = (float)(ep % 2), end.group_id = 7, end.task_seed = 7;
    end.outcome = ep % 2 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
    if (lh_store_put_episode_end(s, &end, NULL, &e) || lh_store_commit(s, &e)) DIE("%s", e.msg);
  }
  double prep_s = (double)(lh_now_ns() - t_prep) / 1e9;
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = o.episodes, c.group_size = o.episodes, c.train_window = o.window, c.max_policy_lag = 1000;
  c.warmup_steps = 0, c.total_steps = 10, c.state_mode = stored ? LH_LEARNER_STATE_STORED : LH_LEARNER_STATE_EXACT;
  c.burn_in = o.burn_in, c.max_episode_tokens = 0;
  /* The same step `repeat` times, each by a fresh trainer from B's weights
   * (a trainer keeps what it trained in memory only): the shortest time,
   * on a machine others share; the figures of the first. */
  size_t bytes = lh_model_n_floats(B) * sizeof(float);
  float *b0 = malloc(bytes);
  if (!b0) DIE("out of memory");
  memcpy(b0, lh_model_params(B), bytes);
  lh_learner_train_stats st;
  double best_ms = INFINITY;
  for (size_t r = 0; r < o.repeat; r++) {
    memcpy(lh_model_params(B), b0, bytes);
    lh_learner_trainer *t;
    if (lh_learner_trainer_new(B, s, &c, 1.0f, NULL, &t, &e)) DIE("%s", e.msg);
    size_t added;
    if (lh_learner_trainer_scan(t, &added, &e)) DIE("%s", e.msg);
    int stepped = 0;
    lh_learner_train_stats one;
    if (lh_learner_trainer_step(t, &stepped, &one, &e) || !stepped) DIE("no step: %s", e.msg);
    if (r == 0) st = one;
    if (one.step_ms < best_ms) best_ms = one.step_ms;
    lh_learner_trainer_free(t);
  }
  free(b0);
  st.step_ms = best_ms;
  printf("state_mode=%s tokens=%zu episodes=%zu policy_tokens=%zu window=%zu interval=%zu burn_in=%zu lag=%zu "
         "repeat=%zu step_ms=%.1f policy_tokens_per_s=%.1f run_positions=%zu states_used=%zu logp_diff_max=%.3g "
         "logp_diff_mean=%.3g prep_s=%.1f\n",
         o.mode, T, o.episodes, st.tokens, o.window, o.interval, o.burn_in, o.lag, o.repeat, st.step_ms,
         (double)st.tokens / (st.step_ms / 1e3), st.run_positions, st.states_used, st.logp_diff,
         st.logp_diff_mean, prep_s);
  lh_store_close(s);
  unlink(db);
  char side[560];
  snprintf(side, sizeof side, "%s-wal", db), unlink(side);
  snprintf(side, sizeof side, "%s-shm", db), unlink(side);
  lh_model_free(A), lh_model_free(B);
  free(tok), free(utok), free(ver), free(mask), free(logp), free(blogp), free(states);
  return 0;
}

/* bench_shared_prefix: what sharing a group's prefix saves (docs/actors.md
 * "Shared prefixes"), each figure against its reference from the same
 * run, through the real runner, store and trainer.
 *
 *   bench_shared_prefix [--tokens T] [--group G] [--model MODEL.ini]
 *                       [--window W] [--dir DIR]
 *
 * 1. Actor: one group of G needle episodes over a document of T tokens
 *    (the demo model at its init, one thread, segments of 512 tokens),
 *    played to the end with share_prefix on and off, the same seeds:
 *    episodes per second of each (wall clock of the runner), and the
 *    prefix tokens the members did not prefill. The context leaves about
 *    500 tokens past the first observation (an untrained policy answers
 *    at length; a trained one in a few dozen tokens), so that the figure
 *    is the prefix's.
 * 2. Store: each run's messages into a store of its own, as the ingest
 *    stores them: the pages the store uses, unshared against shared.
 * 3. Learner: one exact-mode step (train_window W) over the group in each
 *    store, by a fresh trainer from the same weights, [learner]
 *    share_prefix on for the shared store, off for the unshared one (the
 *    store as it was before prefixes were shared); flat groups kept so
 *    that the step trains: its wall time, and the positions its forward
 *    ran.
 * 4. Flat groups: four calc groups (rewards set: two flat, two of 0 and 1)
 *    trained once with [learner] skip_flat_groups and once without: the
 *    share of trained sampled tokens whose advantage is exactly 0.
 * 5. The prefix tree (docs/learner.md "A step's prefix tree"): a step of
 *    96 calc episodes in groups of 8 (rewards 0 and 1 by place, so that
 *    no group is flat), which share calc's instruction and a group's
 *    question, trained with [learner] share_prefix on and off from the
 *    same weights: the step's wall time and forward positions. At its
 *    init the policy's answers part at once; a trained policy's repeat
 *    one another, and share more.
 *
 * Prints a line per figure and last exactly
 *   shared prefix: actor A.AAx, store S.SSx, learner exact L.LLx */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "store/store_internal.h"

#define DIE(...) do { fprintf(stderr, "bench_shared_prefix: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

typedef struct {
  size_t tokens, group, window;
  const char *model, *dir;
} opts;

/* The messages a run made, in the order the runner handed them out. */
typedef struct {
  Longhaul__Segment **seg;
  Longhaul__EpisodeEnd **end;
  size_t n, cap;
} messages;

static void keep(messages *m, Longhaul__Segment *seg, Longhaul__EpisodeEnd *end) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 256;
    m->seg = realloc(m->seg, m->cap * sizeof *m->seg);
    m->end = realloc(m->end, m->cap * sizeof *m->end);
    if (!m->seg || !m->end) DIE("out of memory");
  }
  m->seg[m->n] = seg, m->end[m->n] = end, m->n++;
}

static void messages_free(messages *m) {
  for (size_t i = 0; i < m->n; i++) lh_actors_segment_free(m->seg[i]), lh_actors_episode_end_free(m->end[i]);
  free(m->seg), free(m->end);
}

/* Plays one runner to the end: its wall seconds, episodes and shared
 * prefix tokens; every message kept in out. */
static double play(lh_model *m, const lh_actors_runner_config *cfg, messages *out, uint64_t *shared_tokens) {
  lh_actors_runner *r = NULL;
  lh_errbuf e = {0};
  if (lh_actors_runner_new(m, cfg, &r, &e)) DIE("runner: %s", e.msg);
  int64_t t0 = lh_now_ns();
  while (!lh_actors_runner_done(r)) {
    if (lh_actors_runner_step(r, &e) < 0) DIE("runner step: %s", e.msg);
    Longhaul__Segment *seg;
    Longhaul__EpisodeEnd *end;
    while (lh_actors_runner_pop(r, &seg, &end)) keep(out, seg, end);
  }
  double s = (double)(lh_now_ns() - t0) / 1e9;
  lh_actors_runner_shared(r, NULL, shared_tokens);
  lh_actors_runner_free(r);
  return s;
}

/* A fresh store at path with out's messages in it (rewards, when set,
 * replace each end's in turn); the bytes of the pages it uses. */
static double store_of(const char *path, const messages *msgs, const float *rewards) {
  unlink(path);
  lh_store *s;
  lh_errbuf e;
  if (lh_store_open(path, &s, &e)) DIE("%s", e.msg);
  if (lh_store_begin(s, &e)) DIE("%s", e.msg);
  size_t k = 0;
  for (size_t i = 0; i < msgs->n; i++) {
    int ins;
    if (msgs->seg[i] && lh_store_put_segment(s, msgs->seg[i], &ins, &e)) DIE("segment: %s", e.msg);
    if (msgs->end[i]) {
      if (rewards) {
        msgs->end[i]->reward = rewards[k++];
        msgs->end[i]->outcome = msgs->end[i]->reward > 0.5f ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS
                                                            : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
        msgs->end[i]->n_terms = 0;
      }
      if (lh_store_put_episode_end(s, msgs->end[i], &ins, &e)) DIE("end: %s", e.msg);
    }
    if (msgs->seg[i] && ins == LH_STORE_REFUSED) DIE("refused: %s", e.msg);
  }
  if (lh_store_commit(s, &e)) DIE("%s", e.msg);
  uint64_t used = 0;
  if (lh_store_used_bytes(s, &used, &e)) DIE("%s", e.msg);
  lh_store_close(s);
  return (double)used;
}

/* One step of a fresh trainer over the store at path, from weights w0:
 * its wall seconds, and its figures in *st. */
static double step_over(const char *path, lh_model *m, const float *w0, const lh_learner_config *c,
                        lh_learner_train_stats *st) {
  memcpy(lh_model_params(m), w0, lh_model_n_floats(m) * sizeof *w0);
  lh_store *s;
  lh_errbuf e;
  if (lh_store_open(path, &s, &e)) DIE("%s", e.msg);
  lh_learner_trainer *t;
  if (lh_learner_trainer_new(m, s, c, 1.0f, NULL, &t, &e)) DIE("%s", e.msg);
  size_t added;
  if (lh_learner_trainer_scan(t, &added, &e)) DIE("%s", e.msg);
  int stepped = 0;
  int64_t t0 = lh_now_ns();
  if (lh_learner_trainer_step(t, &stepped, st, &e)) DIE("step: %s", e.msg);
  double secs = (double)(lh_now_ns() - t0) / 1e9;
  if (!stepped) DIE("no step over %s (%zu episodes offered)", path, added);
  lh_learner_trainer_free(t);
  lh_store_close(s);
  return secs;
}

int main(int argc, char **argv) {
  opts o = {.tokens = 65536, .group = 8, .window = 1024, .model = NULL, .dir = "/tmp"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--tokens")) o.tokens = (size_t)atol(v);
    else if (!strcmp(k, "--group")) o.group = (size_t)atol(v);
    else if (!strcmp(k, "--window")) o.window = (size_t)atol(v);
    else if (!strcmp(k, "--model")) o.model = v;
    else if (!strcmp(k, "--dir")) o.dir = v;
    else DIE("unknown option %s", k);
  }
  if (o.tokens < 64 || o.group < 2) DIE("--tokens at least 64, --group at least 2");
  lh_log_set_level(LH_LOG_WARN);
  lh_errbuf e;
  lh_model_config mc;
  lh_model_config_default(&mc);
  if (o.model && lh_model_config_parse_file(o.model, &mc, &e)) DIE("%s", e.msg);
  lh_model *m;
  if (lh_model_new(&mc, lh_backend_cpu(), &m, &e)) DIE("%s", e.msg);
  size_t bytes = lh_model_n_floats(m) * sizeof(float);
  float *w0 = malloc(bytes);
  if (!w0) DIE("out of memory");
  memcpy(w0, lh_model_params(m), bytes);
  printf("bench_shared_prefix: needle at %zu tokens, a group of %zu, model d_model %d layers %d experts %d; "
         "one thread each side (actor and learner BLAS 1)\n",
         o.tokens, o.group, mc.d_model, mc.layers, mc.experts);
  fflush(stdout);

  /* 1. The actor. */
  char tokens[32];
  snprintf(tokens, sizeof tokens, "%zu", o.tokens);
  lh_env_option env[] = {{"tokens", tokens}, {"remind", "1"}};
  lh_actors_runner_config rc = {.actor = "a0", .env = "needle", .env_options = env, .n_env_options = 2,
                                .batch = (uint32_t)o.group, .group_size = (uint32_t)o.group,
                                .segment_tokens = 512, .max_context = (uint32_t)(o.tokens + o.tokens / 16 + 768),
                                .max_steps = 8, .temperature = 1.0f, .top_p = 1.0f, .seed = 5, .id_salt = 9,
                                .episodes = o.group};
  messages run[2] = {{0}};
  double secs[2];
  uint64_t shared_tokens[2];
  for (int k = 0; k < 2; k++) {
    rc.share_prefix = k == 0;
    secs[k] = play(m, &rc, &run[k], &shared_tokens[k]);
    printf("actor %s: %zu episodes in %.1f s (%.3f episodes/s), %llu prefix tokens not prefilled\n",
           k ? "unshared" : "shared  ", o.group, secs[k], (double)o.group / secs[k],
           (unsigned long long)shared_tokens[k]);
    fflush(stdout);
  }
  double actor_x = secs[1] / secs[0];

  /* 2. The store. */
  char db[2][512];
  double used[2];
  for (int k = 0; k < 2; k++) {
    snprintf(db[k], sizeof db[k], "%s/bench-shared-prefix-%s.db", o.dir, k ? "unshared" : "shared");
    used[k] = store_of(db[k], &run[k], NULL);
    printf("store %s: %.0f bytes in use for the group\n", k ? "unshared" : "shared  ", used[k]);
  }
  double store_x = used[1] / used[0];
  fflush(stdout);

  /* 3. One exact-mode step over each. */
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = o.group, c.group_size = o.group, c.train_window = o.window;
  c.max_policy_lag = 1000, c.warmup_steps = 0, c.skip_flat_groups = 0;
  lh_learner_train_stats st[2];
  double step_s[2];
  for (int k = 0; k < 2; k++) {
    c.share_prefix = k == 0;
    step_s[k] = step_over(db[k], m, w0, &c, &st[k]);
    printf("learner exact %s: one step over %zu episodes in %.1f s, the forward over %zu positions\n",
           k ? "unshared" : "shared  ", st[k].episodes, step_s[k], st[k].run_positions);
    fflush(stdout);
  }
  double learner_x = step_s[1] / step_s[0];

  /* 4. Flat groups. */
  lh_actors_runner_config cc = {.actor = "a0", .env = "calc", .batch = 16, .group_size = 4, .segment_tokens = 256,
                                .max_context = 512, .max_steps = 4, .temperature = 1.0f, .top_p = 1.0f,
                                .seed = 7, .id_salt = 3, .episodes = 16, .share_prefix = 1};
  messages calc = {0};
  uint64_t ignored;
  play(m, &cc, &calc, &ignored);
  /* in the order the ends come: groups finish in any order, so each end
   * takes the reward its episode's group and place give */
  float rewards[16];
  uint64_t groups[4] = {0};
  int placed[4] = {0}, n_groups = 0;
  size_t k_end = 0;
  for (size_t i = 0; i < calc.n; i++) {
    if (!calc.end[i]) continue;
    int g = 0;
    while (g < n_groups && groups[g] != calc.end[i]->group_id) g++;
    if (g == n_groups) groups[n_groups++] = calc.end[i]->group_id;
    int place = placed[g]++;
    rewards[k_end++] = g == 0 ? 0.0f : g == 1 ? 1.0f : (float)(place % 2);
  }
  char calc_db[512];
  snprintf(calc_db, sizeof calc_db, "%s/bench-shared-prefix-calc.db", o.dir);
  store_of(calc_db, &calc, rewards);
  c.group_size = 4, c.train_window = 512, c.share_prefix = 1;
  double zero_share[2];
  for (int k = 0; k < 2; k++) {
    /* left out, the two flat groups never wait; kept, all four train */
    c.skip_flat_groups = k == 0;
    c.batch_episodes = k == 0 ? 8 : 16;
    lh_learner_train_stats fs;
    step_over(calc_db, m, w0, &c, &fs);
    zero_share[k] = fs.tokens ? (double)fs.zero_adv_tokens / (double)fs.tokens : 0;
    printf("flat groups %s: a step of %zu episodes, %zu sampled tokens, %zu of them with advantage 0 (share %.3f), "
           "%llu flat groups left out\n",
           k ? "kept       " : "left out   ", fs.episodes, fs.tokens, fs.zero_adv_tokens, zero_share[k],
           (unsigned long long)fs.flat_groups);
  }
  printf("share of trained tokens with advantage 0: %.3f with filtering, %.3f without\n", zero_share[0],
         zero_share[1]);
  fflush(stdout);

  /* 5. The prefix tree over a step of calc. */
  cc.batch = 32, cc.group_size = 8, cc.episodes = 96, cc.seed = 11;
  messages tree = {0};
  play(m, &cc, &tree, &ignored);
  float tree_rewards[96];
  uint64_t tgroups[12] = {0};
  int tplaced[12] = {0}, n_tgroups = 0;
  size_t n_ends = 0;
  for (size_t i = 0; i < tree.n && n_ends < 96; i++) {
    if (!tree.end[i]) continue;
    int g = 0;
    while (g < n_tgroups && tgroups[g] != tree.end[i]->group_id) g++;
    if (g == n_tgroups && n_tgroups < 12) tgroups[n_tgroups++] = tree.end[i]->group_id;
    tree_rewards[n_ends++] = (float)(tplaced[g < 12 ? g : 11]++ % 2);
  }
  char tree_db[512];
  snprintf(tree_db, sizeof tree_db, "%s/bench-shared-prefix-tree.db", o.dir);
  store_of(tree_db, &tree, tree_rewards);
  c.group_size = 8, c.batch_episodes = 96, c.train_window = 512, c.skip_flat_groups = 0;
  lh_learner_train_stats ts[2];
  double tree_s[2];
  for (int k = 0; k < 2; k++) {
    c.share_prefix = k == 0;
    tree_s[k] = step_over(tree_db, m, w0, &c, &ts[k]);
    printf("learner prefix tree %s: one step over %zu calc episodes (%zu positions) in %.2f s, the forward over "
           "%zu positions, loss %.6g\n",
           k ? "off" : "on ", ts[k].episodes, ts[k].positions, tree_s[k], ts[k].run_positions, ts[k].loss);
    fflush(stdout);
  }
  printf("learner prefix tree: the step %.2fx faster, %.2fx fewer forward positions\n", tree_s[1] / tree_s[0],
         (double)ts[1].run_positions / (double)(ts[0].run_positions ? ts[0].run_positions : 1));
  printf("shared prefix: actor %.2fx, store %.2fx, learner exact %.2fx\n", actor_x, store_x, learner_x);
  for (int k = 0; k < 2; k++) messages_free(&run[k]), unlink(db[k]);
  messages_free(&calc);
  messages_free(&tree);
  unlink(calc_db);
  unlink(tree_db);
  free(w0);
  lh_model_free(m);
  return 0;
}

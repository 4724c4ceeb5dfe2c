/* Tests of actors/runner.c and runner_share.c in process: a tiny random
 * model (d 16) plays calc, B episodes at once. Every message passes
 * lh_wire_validate inside its envelope; an episode's segments reassemble
 * into one contiguous token stream that matches its EpisodeEnd; groups
 * share a task seed; the behavior log-probabilities are the model's own
 * (training forward over the reassembled tokens); a version set mid-run
 * stamps the later tokens; an environment that fails ends its episode as
 * error. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/internal.h"
#include "proto/wire.h"

static lh_model *tiny_model(void) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 16, c.seed = 3;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  return m;
}

static lh_actors_runner_config base_config(void) {
  lh_actors_runner_config c = {.actor = "a0",
                               .env = "calc",
                               .batch = 3,
                               .group_size = 2,
                               .segment_tokens = 16,
                               .max_context = 360,
                               .max_steps = 4,
                               .temperature = 1.0f,
                               .top_p = 1.0f,
                               .seed = 11,
                               .id_salt = 99,
                               .episodes = 6};
  return c;
}

/* One episode as reassembled from its messages. */
typedef struct {
  uint64_t id, group, task_seed;
  uint32_t next_seq;
  uint32_t *tokens;
  uint8_t *mask;
  float *logp;
  uint32_t *version;
  uint32_t *experts;  /* [token][layer][slot] when routing is recorded */
  size_t n;
  float *state;         /* the last recurrent state its segments carried (state_interval) */
  size_t n_state, state_offset, states;
  Longhaul__EpisodeEnd *end;
  /* a shared prefix: the episode's first prefix_tokens tokens are episode
   * prefix_episode's (its arrays hold zeros there until resolve_prefixes) */
  uint64_t prefix_episode, prefix_tokens;
  size_t first_order;   /* the order of its first segment among all taken */
  size_t cuts[256];     /* where its segments end, and the order each came in */
  size_t cut_order[256];
  int n_cuts;
} episode;

/* routed_layers every segment must carry (0: not recorded). */
static uint32_t expect_layers;

typedef struct {
  episode ep[64];
  int n;
  size_t taken;  /* segments taken so far, for the order they came in */
} collection;

static episode *find(collection *c, uint64_t id) {
  for (int i = 0; i < c->n; i++)
    if (c->ep[i].id == id) return &c->ep[i];
  ck_assert_int_lt(c->n, 64);
  episode *e = &c->ep[c->n++];
  memset(e, 0, sizeof *e);
  e->id = id;
  return e;
}

static void check_valid(Longhaul__Segment *seg, Longhaul__EpisodeEnd *end) {
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 1;
  env.sender = "a0";
  if (seg) env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = seg;
  else env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = end;
  lh_errbuf err = {0};
  ck_assert_msg(lh_wire_validate(&env, NULL, &err) == 0, "invalid message: %s", err.msg);
}

static void take(collection *c, Longhaul__Segment *seg, Longhaul__EpisodeEnd *end) {
  check_valid(seg, end);
  if (seg) {
    episode *e = find(c, seg->episode_id);
    ck_assert_ptr_null(e->end);  /* segments come before their EpisodeEnd */
    ck_assert_uint_ne(seg->episode_id, 0);
    ck_assert_uint_eq(seg->seq, e->next_seq);
    if (seg->seq == 0 && seg->prefix_tokens) {
      /* a member of a group that shares its prefix: the leader's tokens
       * go there later (resolve_prefixes) */
      e->prefix_episode = seg->prefix_episode_id, e->prefix_tokens = seg->prefix_tokens;
      e->tokens = calloc(seg->prefix_tokens, sizeof *e->tokens);
      e->mask = calloc(seg->prefix_tokens, 1);
      e->logp = calloc(seg->prefix_tokens, sizeof *e->logp);
      e->version = calloc(seg->prefix_tokens, sizeof *e->version);
      e->n = seg->prefix_tokens;
    }
    ck_assert_uint_eq(seg->prefix_episode_id, e->prefix_episode);
    ck_assert_uint_eq(seg->prefix_tokens, e->prefix_tokens);
    ck_assert_uint_eq(seg->start_offset, e->n);
    if (seg->seq == 0) e->first_order = c->taken;
    if (e->n_cuts < 256) e->cuts[e->n_cuts] = seg->start_offset + seg->n_tokens, e->cut_order[e->n_cuts++] = c->taken;
    c->taken++;
    ck_assert_uint_eq(seg->routed_layers, expect_layers);
    if (expect_layers) {
      size_t per = (size_t)seg->routed_layers * seg->routed_topk;
      e->experts = realloc(e->experts, (e->n + seg->n_tokens) * per * sizeof *e->experts);
      memcpy(e->experts + e->n * per, seg->routed_experts, seg->n_tokens * per * sizeof *e->experts);
    }
    e->group = seg->group_id;
    e->task_seed = seg->task_seed;
    e->next_seq++;
    if (seg->n_state) {
      e->state = realloc(e->state, seg->n_state * sizeof *e->state);
      memcpy(e->state, seg->state, seg->n_state * sizeof *e->state);
      e->n_state = seg->n_state, e->state_offset = seg->state_offset;
      e->states++;
    }
    size_t n = e->n + seg->n_tokens;
    e->tokens = realloc(e->tokens, n * sizeof *e->tokens);
    e->mask = realloc(e->mask, n);
    e->logp = realloc(e->logp, n * sizeof *e->logp);
    e->version = realloc(e->version, n * sizeof *e->version);
    memcpy(e->tokens + e->n, seg->tokens, seg->n_tokens * sizeof *seg->tokens);
    memcpy(e->mask + e->n, seg->loss_mask.data, seg->n_tokens);
    memcpy(e->logp + e->n, seg->behavior_logp, seg->n_tokens * sizeof *e->logp);
    memcpy(e->version + e->n, seg->policy_version, seg->n_tokens * sizeof *e->version);
    e->n = n;
    lh_actors_segment_free(seg);
  } else {
    episode *e = find(c, end->episode_id);
    ck_assert_ptr_null(e->end);
    e->end = end;
  }
}

static void drain(lh_actors_runner *r, collection *c) {
  Longhaul__Segment *seg;
  Longhaul__EpisodeEnd *end;
  while (lh_actors_runner_pop(r, &seg, &end)) take(c, seg, end);
}

/* Each member of a shared prefix takes its leader's first prefix_tokens
 * tokens, after checking that the leader is of the same group, that one
 * of its segments ends exactly there, and that those segments all came
 * before the member's first. Returns how many episodes shared. */
static int resolve_prefixes(collection *c) {
  int shared = 0;
  for (int i = 0; i < c->n; i++) {
    episode *e = &c->ep[i];
    if (!e->prefix_episode) continue;
    episode *l = NULL;
    for (int j = 0; j < c->n; j++)
      if (c->ep[j].id == e->prefix_episode) l = &c->ep[j];
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->prefix_episode, 0);  /* a leader has no prefix of its own */
    ck_assert_uint_eq(l->group, e->group);
    ck_assert_uint_ge(l->n, e->prefix_tokens);
    int cut = 0;
    for (int k = 0; k < l->n_cuts; k++)
      if (l->cuts[k] == e->prefix_tokens) {
        cut = 1;
        ck_assert_uint_lt(l->cut_order[k], e->first_order);
      }
    ck_assert_msg(cut, "leader %llu has no segment ending at %llu", (unsigned long long)l->id,
                  (unsigned long long)e->prefix_tokens);
    size_t p = e->prefix_tokens;
    memcpy(e->tokens, l->tokens, p * sizeof *e->tokens);
    memcpy(e->mask, l->mask, p);
    memcpy(e->logp, l->logp, p * sizeof *e->logp);
    memcpy(e->version, l->version, p * sizeof *e->version);
    for (size_t t = 0; t < p; t++) ck_assert_uint_eq(e->mask[t], 0);  /* the prefix is the environment's */
    shared++;
  }
  return shared;
}

static void free_collection(collection *c) {
  for (int i = 0; i < c->n; i++) {
    free(c->ep[i].tokens);
    free(c->ep[i].mask);
    free(c->ep[i].logp);
    free(c->ep[i].version);
    free(c->ep[i].experts);
    free(c->ep[i].state);
    lh_actors_episode_end_free(c->ep[i].end);
  }
}

/* Runs r to the end (bounded), collecting every message. */
static void run_all(lh_actors_runner *r, collection *c, int switch_version_at) {
  lh_errbuf err = {0};
  for (int i = 0; i < 100000 && !lh_actors_runner_done(r); i++) {
    if (i == switch_version_at) lh_actors_runner_set_version(r, 7);
    int rc = lh_actors_runner_step(r, &err);
    ck_assert_msg(rc >= 0, "step %d: %s", i, err.msg);
    drain(r, c);
  }
  ck_assert(lh_actors_runner_done(r));
  drain(r, c);
}

START_TEST(test_episodes_complete_and_reassemble) {
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
  collection c = {0};
  run_all(r, &c, -1);
  ck_assert_int_eq(c.n, 6);
  ck_assert_uint_eq(lh_actors_runner_finished(r), 6);
  int steps_total = 0, sampled_total = 0;
  for (int i = 0; i < c.n; i++) {
    episode *e = &c.ep[i];
    ck_assert_ptr_nonnull(e->end);
    ck_assert_uint_eq(e->end->total_tokens, e->n);
    ck_assert_uint_eq(e->end->segment_count, e->next_seq);
    ck_assert_uint_eq(e->end->group_id, e->group);
    ck_assert_uint_le(e->n, cfg.max_context);
    ck_assert_uint_eq(e->tokens[0], LH_TOK_BOS);
    ck_assert_uint_eq(e->mask[0], 0);
    steps_total += (int)e->end->steps;
    for (size_t t = 0; t < e->n; t++) {
      if (e->mask[t]) sampled_total++;
      if (e->mask[t]) ck_assert(e->logp[t] <= 0 && isfinite(e->logp[t]));
      else ck_assert(e->logp[t] == 0);
      /* An observation (mask 0) follows every action the env answered. */
      if (t > 0 && e->mask[t - 1] && !e->mask[t]) ck_assert_uint_eq(e->tokens[t], LH_TOK_OBS);
    }
    int o = e->end->outcome;
    ck_assert(o == LONGHAUL__OUTCOME__OUTCOME_SUCCESS || o == LONGHAUL__OUTCOME__OUTCOME_FAILURE ||
              o == LONGHAUL__OUTCOME__OUTCOME_TRUNCATED);
    for (int j = 0; j < i; j++) ck_assert_uint_ne(c.ep[j].id, e->id);
  }
  ck_assert_int_gt(sampled_total, 0);
  printf("runner: %d episodes, %d sampled tokens, %d environment steps\n", c.n, sampled_total, steps_total);
  /* Groups of 2 per task seed; 3 groups. */
  for (int i = 0; i < c.n; i++) {
    int same = 0;
    for (int j = 0; j < c.n; j++)
      if (c.ep[j].group == c.ep[i].group) {
        same++;
        ck_assert_uint_eq(c.ep[j].task_seed, c.ep[i].task_seed);
      }
    ck_assert_int_eq(same, 2);
  }
  free_collection(&c);
  lh_actors_runner_free(r);
  lh_model_free(m);
}
END_TEST

/* The behavior log-probabilities are what the training forward computes
 * for the same tokens: the prefill and decode fed every token, in order,
 * </call> included before its observation. */
START_TEST(test_behavior_logp_matches_forward) {
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  cfg.max_context = 600;
  cfg.max_steps = 8;
  cfg.episodes = 3;
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
  collection c = {0};
  run_all(r, &c, -1);
  double worst = 0;
  int with_obs = 0;
  for (int i = 0; i < c.n; i++) {
    episode *e = &c.ep[i];
    int T = (int)e->n;
    int32_t *tok = malloc(T * sizeof *tok), *tgt = malloc(T * sizeof *tgt);
    float *lp = malloc(T * sizeof *lp);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)e->tokens[t];
    for (int t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : -1;
    for (int t = 1; t < T; t++)
      if (tok[t] == LH_TOK_OBS && e->mask[t - 1]) with_obs++;
    int32_t off[2] = {0, T};
    lh_model_batch b = {.n_tokens = T, .tokens = tok, .targets = tgt, .n_seq = 1, .seq_offsets = off};
    lh_model_cache *cache = NULL;
    ck_assert_msg(lh_model_forward(m, &b, &cache, lp, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int t = 1; t < T; t++)
      if (e->mask[t]) {
        double d = fabs((double)lp[t - 1] - e->logp[t]);
        if (d > worst) worst = d;
      }
    lh_model_cache_free(cache);
    free(tok);
    free(tgt);
    free(lp);
  }
  printf("runner: behavior logp against the training forward: largest difference %.3g (%d observations "
         "after actions)\n",
         worst, with_obs);
  ck_assert_msg(worst < 1e-4, "largest difference %g", worst);
  free_collection(&c);
  lh_actors_runner_free(r);
  lh_model_free(m);
}
END_TEST

/* With record_routing every token carries the experts it chose as an
 * input, the same the training forward chooses (prompts and observations
 * go in by decode steps then); the episode's last token, never an input,
 * carries 0s. */
START_TEST(test_routing_recorded) {
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  cfg.max_context = 500;
  cfg.max_steps = 6;
  cfg.episodes = 3;
  cfg.record_routing = 1;
  expect_layers = 2;
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
  collection c = {0};
  run_all(r, &c, -1);
  ck_assert_int_eq(c.n, 3);
  size_t compared = 0, differ = 0;
  double worst = 0;
  for (int i = 0; i < c.n; i++) {
    episode *e = &c.ep[i];
    int T = (int)e->n, L = 2, K = 2;
    int32_t *tok = malloc(T * sizeof *tok), *tgt = malloc(T * sizeof *tgt);
    int32_t *ex = malloc((size_t)L * T * K * sizeof *ex);
    float *lp = malloc(T * sizeof *lp);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)e->tokens[t];
    for (int t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : -1;
    int32_t off[2] = {0, T};
    lh_model_batch b = {.n_tokens = T, .tokens = tok, .targets = tgt, .n_seq = 1, .seq_offsets = off};
    lh_model_cache *cache = NULL;
    ck_assert_msg(lh_model_forward(m, &b, &cache, lp, NULL, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(lh_model_cache_experts(cache, ex), 0);
    for (int t = 0; t + 1 < T; t++)
      for (int l = 0; l < L; l++) {
        /* a set of K experts; compare as sets */
        const uint32_t *got = e->experts + ((size_t)t * L + l) * K;
        const int32_t *want = ex + ((size_t)l * T + t) * K;
        int same = 1;
        for (int q = 0; q < K; q++) {
          int found = 0;
          for (int q2 = 0; q2 < K; q2++) found |= (int32_t)got[q] == want[q2];
          same &= found;
        }
        compared++;
        differ += !same;
      }
    for (int l = 0; l < L * K; l++) ck_assert_uint_eq(e->experts[(size_t)(T - 1) * L * K + l], 0);
    for (int t = 1; t < T; t++)
      if (e->mask[t] && fabs((double)lp[t - 1] - e->logp[t]) > worst) worst = fabs((double)lp[t - 1] - e->logp[t]);
    lh_model_cache_free(cache);
    free(tok);
    free(tgt);
    free(ex);
    free(lp);
  }
  printf("runner: recorded routing against the training forward: %zu of %zu (token, layer) sets differ; "
         "behavior logp largest difference %.3g\n",
         differ, compared, worst);
  ck_assert_uint_gt(compared, 0);
  ck_assert_msg(differ * 100 <= compared, "%zu of %zu differ", differ, compared);
  ck_assert_msg(worst < 1e-4, "largest difference %g", worst);
  free_collection(&c);
  lh_actors_runner_free(r);
  lh_model_free(m);
}
END_TEST

START_TEST(test_version_switch_and_determinism) {
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  cfg.episodes = 3;
  cfg.max_steps = 20;
  cfg.max_context = 400;
  lh_errbuf err = {0};
  static collection c[2];
  memset(c, 0, sizeof c);
  for (int k = 0; k < 2; k++) {
    lh_actors_runner *r = NULL;
    ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
    run_all(r, &c[k], 20);
    lh_actors_runner_free(r);
  }
  /* Same seed and salt: the same episodes, token for token. */
  ck_assert_int_eq(c[0].n, c[1].n);
  int two_versions = 0;
  for (int i = 0; i < c[0].n; i++) {
    episode *a = &c[0].ep[i], *b = &c[1].ep[i];
    ck_assert_uint_eq(a->id, b->id);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert(memcmp(a->tokens, b->tokens, a->n * sizeof *a->tokens) == 0);
    int v0 = 0, v7 = 0;
    for (size_t t = 0; t < a->n; t++)
      if (a->mask[t]) v0 += a->version[t] == 0, v7 += a->version[t] == 7;
    two_versions += v0 > 0 && v7 > 0;
  }
  ck_assert_int_gt(two_versions, 0);  /* partial rollouts: one episode, two versions */
  free_collection(&c[0]);
  free_collection(&c[1]);
  lh_model_free(m);
}
END_TEST

/* A real env server (longhaul envs serve, from LH_BIN) killed while the
 * episodes run: each episode then ends as error, with the reason, and the
 * runner goes on to the next (whose reset reconnects and fails again). */
START_TEST(test_env_error_ends_episode) {
  const char *bin = getenv("LH_BIN");
  if (!bin) {
    fprintf(stderr, "LH_BIN not set; skipped\n");
    return;
  }
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  char dir[] = "/tmp/lh-actors-runner-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char ep[160];
  snprintf(ep, sizeof ep, "ipc://%s/envs.sock", dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl(bin, bin, "envs", "serve", "--bind", ep, (char *)NULL);
    _exit(127);
  }
  lh_env_option opts[2] = {{"server", ep}, {"timeout_ms", "300"}};
  cfg.env_options = opts;
  cfg.n_env_options = 2;
  cfg.episodes = 4;
  cfg.batch = 2;
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  int rc = -1;
  for (int i = 0; i < 50 && rc != 0; i++) rc = lh_actors_runner_new(m, &cfg, &r, &err);
  ck_assert_msg(rc == 0, "%s", err.msg);
  for (int i = 0; i < 3; i++) ck_assert(lh_actors_runner_step(r, &err) >= 0);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  collection c = {0};
  run_all(r, &c, -1);
  ck_assert_int_eq(c.n, 4);
  int errors = 0;
  for (int i = 0; i < c.n; i++)
    if (c.ep[i].end->outcome == LONGHAUL__OUTCOME__OUTCOME_ERROR) {
      ck_assert(strlen(c.ep[i].end->error) > 0);
      if (!errors) printf("runner: env error: %s\n", c.ep[i].end->error);
      errors++;
    }
  ck_assert_int_ge(errors, 2);  /* at least the episodes started after the kill */
  free_collection(&c);
  lh_actors_runner_free(r);
  lh_model_free(m);
  char path[200];
  snprintf(path, sizeof path, "%s/envs.sock", dir);
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(test_abort_and_errors) {
  lh_model *m = tiny_model();
  lh_actors_runner_config cfg = base_config();
  cfg.episodes = 0;  /* no limit */
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
  collection c = {0};
  for (int i = 0; i < 5; i++) ck_assert(lh_actors_runner_step(r, &err) >= 0);
  ck_assert_uint_eq(lh_actors_runner_open_episodes(r), 3);
  ck_assert(!lh_actors_runner_done(r));
  ck_assert_int_eq(lh_actors_runner_abort(r, "signal", &err), 0);
  ck_assert(lh_actors_runner_done(r));
  drain(r, &c);
  int aborted = 0;
  for (int i = 0; i < c.n; i++)
    if (c.ep[i].end && c.ep[i].end->outcome == LONGHAUL__OUTCOME__OUTCOME_ABORTED) {
      aborted++;
      ck_assert_str_eq(c.ep[i].end->error, "signal");
    }
  ck_assert_int_eq(aborted, 3);
  free_collection(&c);
  lh_actors_runner_free(r);
  /* Bad configs name what is wrong. */
  lh_actors_runner_config bad = base_config();
  bad.batch = 0;
  ck_assert_int_eq(lh_actors_runner_new(m, &bad, &r, &err), LH_ECONFIG);
  ck_assert_ptr_nonnull(strstr(err.msg, "batch"));
  bad = base_config();
  bad.env = "nosuchenv";
  ck_assert_int_lt(lh_actors_runner_new(m, &bad, &r, &err), 0);
  ck_assert_ptr_null(r);
  bad = base_config();
  bad.top_p = 0;
  ck_assert_int_lt(lh_actors_runner_new(m, &bad, &r, &err), 0);
  ck_assert_int_eq(lh_actors_runner_new(NULL, &bad, &r, &err), LH_EINVAL);
  /* Routing cannot be recorded for image patches: said, not guessed. */
  bad = base_config();
  bad.env = "maze";
  static const lh_env_option small_maze[2] = {{"size", "2"}, {"cell_px", "1"}};  /* 5x5: 9 patches */
  bad.env_options = small_maze;
  bad.n_env_options = 2;
  bad.record_routing = 1;
  bad.batch = 1;
  bad.max_context = 0;
  ck_assert_msg(lh_actors_runner_new(m, &bad, &r, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(lh_actors_runner_step(r, &err), LH_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "record_routing"));
  lh_actors_runner_free(r);
  lh_actors_runner_free(NULL);
  lh_model_free(m);
}
END_TEST

/* Context-extension stages: with long_frac 1 every group is long (the
 * needle document sized to the stage through stage_option, the budget the
 * stage's max_context); with long_frac 0 none is, and the budget is the
 * configured one capped at the stage's; the groups' draws are counted and
 * a group's episodes share their size. */
START_TEST(test_stage_sizes_episodes) {
  lh_model *m = tiny_model();
  lh_env_option opts[] = {{"tokens", "200"}, {"show_document", "1"}};
  for (int long_all = 0; long_all < 2; long_all++) {
    lh_actors_runner_config cfg = base_config();
    cfg.env = "needle";
    cfg.env_options = opts;
    cfg.n_env_options = 2;
    cfg.stage_option = "tokens";
    cfg.max_context = 600;
    cfg.max_steps = 2;
    cfg.episodes = 4;
    lh_actors_runner *r = NULL;
    lh_errbuf err = {0};
    ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
    lh_actors_stage stage = {.index = 1, .max_context = 2000, .long_frac = long_all ? 1.0f : 0.0f};
    lh_actors_runner_set_stage(r, &stage);
    collection *c = calloc(1, sizeof *c);
    run_all(r, c, -1);
    ck_assert_int_eq(c->n, 4);
    uint64_t lg = 0, sh = 0;
    lh_actors_runner_stage_counts(r, &lg, &sh);
    ck_assert_uint_eq(lg + sh, 2);
    ck_assert_uint_eq(lg, long_all ? 2 : 0);
    for (int i = 0; i < c->n; i++) {
      episode *e = &c->ep[i];
      ck_assert_ptr_nonnull(e->end);
      /* The first observation: the document, then the question. */
      size_t prompt = 0;
      while (prompt < e->n && !e->mask[prompt]) prompt++;
      if (long_all) {
        /* 0.75 * 2000 document tokens do not fit the configured 600, and
         * the stage's budget holds the episode. */
        ck_assert_uint_gt(prompt, 900);
        ck_assert_uint_le(e->n, 2000);
      } else {
        ck_assert_uint_lt(prompt, 600);
        ck_assert_uint_le(e->n, 600);
      }
    }
    free_collection(c);
    free(c);
    lh_actors_runner_free(r);
  }
  lh_model_free(m);
}
END_TEST

/* [actor] state_interval and beyond_context (docs/learner.md "Stored
 * state"): needle episodes whose document the stage sizes to 225 tokens
 * run past the stage's 300 (to max_episode_tokens at most), their
 * segments carry the recurrent state every 64 tokens (prefill pieces and
 * decode steps), and each state is the model's after the tokens before
 * it: a training forward over them ends in the same state (1e-4). */
START_TEST(test_states_and_beyond_context) {
  lh_model *m = tiny_model();
  lh_env_option opts[] = {{"tokens", "200"}};
  lh_actors_runner_config cfg = base_config();
  cfg.env = "needle", cfg.env_options = opts, cfg.n_env_options = 1, cfg.stage_option = "tokens";
  cfg.max_context = 300, cfg.max_steps = 2, cfg.episodes = 4, cfg.segment_tokens = 64;
  cfg.state_interval = 64, cfg.beyond_context = 1, cfg.max_episode_tokens = 1500;
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &cfg, &r, &err) == 0, "%s", err.msg);
  lh_actors_stage stage = {.index = 1, .max_context = 300, .long_frac = 1.0f};
  lh_actors_runner_set_stage(r, &stage);
  collection *c = calloc(1, sizeof *c);
  run_all(r, c, -1);
  ck_assert_int_eq(c->n, 4);
  size_t past = 0, sf = lh_model_state_floats(lh_model_get_config(m));
  double worst = 0;
  for (int i = 0; i < c->n; i++) {
    episode *e = &c->ep[i];
    ck_assert_ptr_nonnull(e->end);
    ck_assert_uint_le(e->n, 1500);
    past += e->n > 300;
    ck_assert_uint_gt(e->states, 0);
    ck_assert_uint_eq(e->n_state, sf);
    ck_assert_uint_eq(e->state_offset % 64, 0);
    size_t k = e->state_offset;
    int32_t *tok = malloc(k * sizeof *tok);
    float *state = malloc(sf * sizeof *state);
    for (size_t j = 0; j < k; j++) tok[j] = (int32_t)e->tokens[j];
    int32_t offs[2] = {0, (int32_t)k};
    lh_model_batch b = {.n_tokens = (int)k, .tokens = tok, .n_seq = 1, .seq_offsets = offs};
    lh_model_cache *cache = NULL;
    ck_assert_msg(lh_model_forward(m, &b, &cache, NULL, NULL, state, &err) == 0, "%s", err.msg);
    for (size_t j = 0; j < sf; j++) worst = fmax(worst, fabs((double)state[j] - e->state[j]));
    lh_model_cache_free(cache);
    free(tok), free(state);
  }
  printf("runner: %zu of 4 episodes past the stage's 300 tokens; state vs forward max |diff| %g\n", past, worst);
  ck_assert_uint_gt(past, 0);
  ck_assert_msg(worst < 1e-4, "state differs by %g", worst);
  free_collection(c);
  free(c);
  lh_actors_runner_free(r);
  lh_model_free(m);
}
END_TEST

/* Shared prefixes: the members of a group take the state their leader
 * reached after their common first observation instead of prefilling it,
 * their segments starting after it and naming the leader, whose segments
 * are cut there and sent first. With the same seeds every episode is,
 * token for token and bit for bit (log-probabilities and versions), the
 * one unshared play gives: on calc; on needle's long first observation (6
 * prefill windows) with a weight change in the middle of it (the new
 * weights, and their version on the later windows' tokens, in both); on
 * maze, whose observations are images; with recurrent states, where each
 * member's first segment carries the state at the prefix's end. */
/* change_at: the runner step before which the weights change (-1:
 * never); with *fork_change set, the step after the first member forked
 * instead, written back to change_at. */
static void play_at(lh_model *m, const lh_actors_runner_config *cfg, int *change_at, int fork_change,
                    collection *c, uint64_t *shared, uint64_t *shared_tokens) {
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, cfg, &r, &err) == 0, "%s", err.msg);
  for (int i = 0; i < 100000 && !lh_actors_runner_done(r); i++) {
    uint64_t forked = 0;
    lh_actors_runner_shared(r, &forked, NULL);
    if (fork_change && forked && *change_at < 0) *change_at = i;
    if (i == *change_at) {
      /* new weights mid-prefill, as an actor swaps them between steps */
      float *p = lh_model_params(m);
      for (size_t j = 0; j < lh_model_n_floats(m); j += 7) p[j] *= 1.01f;
      lh_actors_runner_set_version(r, 3);
    }
    int rc = lh_actors_runner_step(r, &err);
    ck_assert_msg(rc >= 0, "step %d: %s", i, err.msg);
    drain(r, c);
  }
  ck_assert(lh_actors_runner_done(r));
  drain(r, c);
  lh_actors_runner_shared(r, shared, shared_tokens);
  lh_actors_runner_free(r);
}

static void play(lh_model *m, const lh_actors_runner_config *cfg, int change_at, collection *c,
                 uint64_t *shared, uint64_t *shared_tokens) {
  play_at(m, cfg, &change_at, 0, c, shared, shared_tokens);
}

/* Shared play against unshared play of the same seeds. fork_change: the
 * weights change at the step after the first member forked (the unshared
 * play changes them at the same step); members: how many episodes must
 * take a shared prefix (-1: every one but each group's leader). */
static void same_play_ex(const char *what, const lh_actors_runner_config *base, int change_at, int fork_change,
                         int expect_members) {
  static collection c[2];
  memset(c, 0, sizeof c);
  uint64_t shared[2], tokens[2];
  for (int k = 0; k < 2; k++) {
    lh_model *m = tiny_model();
    lh_actors_runner_config cfg = *base;
    cfg.share_prefix = k == 0;
    play_at(m, &cfg, &change_at, fork_change && k == 0, &c[k], &shared[k], &tokens[k]);
    lh_model_free(m);
  }
  int members = resolve_prefixes(&c[0]);
  ck_assert_int_eq(resolve_prefixes(&c[1]), 0);
  ck_assert_uint_eq(shared[1], 0);
  ck_assert_int_eq(c[0].n, c[1].n);
  int groups = (int)(base->episodes / base->group_size);
  ck_assert_int_eq(members, expect_members >= 0 ? expect_members : groups * (int)(base->group_size - 1));
  ck_assert_uint_eq(shared[0], (uint64_t)members);
  size_t sampled = 0, versions = 0;
  int bitwise = 0;
  double worst = 0;
  for (int i = 0; i < c[0].n; i++) {
    episode *a = &c[0].ep[i], *b = NULL;
    for (int j = 0; j < c[1].n; j++)
      if (c[1].ep[j].id == a->id) b = &c[1].ep[j];
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(a->end);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert_uint_eq(a->end->total_tokens, a->n);
    ck_assert_uint_eq(a->end->prefix_tokens, a->prefix_tokens);
    ck_assert_msg(memcmp(a->tokens, b->tokens, a->n * sizeof *a->tokens) == 0, "%s: episode %d tokens", what, i);
    ck_assert(memcmp(a->mask, b->mask, a->n) == 0);
    /* Bit for bit, but where the decode steps of other rows beside it
     * differ: members of a group that unshared play starts one by one (as
     * rows free up) prefill and decode at other steps, and a batched
     * decode step of another number of rows sums in another order. */
    int same = 1;
    for (size_t t = 0; t < a->n; t++) {
      /* relative to the value's size: a float near -8 has steps of 9.5e-7 */
      double d = fabs((double)a->logp[t] - b->logp[t]) / fmax(1.0, fabs((double)b->logp[t]));
      worst = fmax(worst, d);
      same &= memcmp(&a->logp[t], &b->logp[t], sizeof *a->logp) == 0;
      ck_assert_msg(d <= 1e-6, "%s: episode %d (%s %llu) logp at %zu of %zu: %.9g shared, %.9g unshared", what, i,
                    a->prefix_episode ? "member" : "leader", (unsigned long long)a->id, t, a->n, (double)a->logp[t],
                    (double)b->logp[t]);
    }
    bitwise += same;
    ck_assert_msg(memcmp(a->version, b->version, a->n * sizeof *a->version) == 0, "%s: episode %d versions", what,
                  i);
    ck_assert_int_eq(a->end->outcome, b->end->outcome);
    for (size_t t = 0; t < a->n; t++) sampled += a->mask[t], versions += a->version[t] == 3;
  }
  printf("shared prefix, %s: %d episodes, %d members took their leader's prefix (%llu tokens not prefilled), "
         "%zu sampled tokens, %zu tokens at the new version; tokens and versions equal to unshared play, "
         "log-probabilities bit for bit in %d of %d episodes, largest relative difference %.3g\n",
         what, c[0].n, members, (unsigned long long)tokens[0], sampled, versions, bitwise, c[0].n, worst);
  if (change_at >= 0) ck_assert_uint_gt(versions, 0);
  free_collection(&c[0]);
  free_collection(&c[1]);
}

static void same_play(const char *what, const lh_actors_runner_config *base, int change_at) {
  same_play_ex(what, base, change_at, 0, -1);
}

START_TEST(test_shared_prefix_equals_unshared) {
  lh_actors_runner_config cfg = base_config();
  cfg.batch = 4, cfg.group_size = 2, cfg.episodes = 8;
  same_play("calc", &cfg, -1);

  lh_env_option needle[] = {{"tokens", "1400"}};
  cfg = base_config();
  cfg.env = "needle", cfg.env_options = needle, cfg.n_env_options = 1;
  cfg.batch = 4, cfg.group_size = 4, cfg.episodes = 8, cfg.max_context = 2400, cfg.max_steps = 2;
  cfg.segment_tokens = 100;
  same_play("needle, weights changed mid-prefill", &cfg, 2);

  lh_env_option maze[] = {{"size", "2"}, {"cell_px", "1"}};
  cfg = base_config();
  cfg.env = "maze", cfg.env_options = maze, cfg.n_env_options = 2;
  cfg.batch = 3, cfg.group_size = 3, cfg.episodes = 6, cfg.max_context = 400, cfg.max_steps = 3;
  same_play("maze (images)", &cfg, -1);

  cfg = base_config();
  cfg.env = "needle", cfg.env_options = needle, cfg.n_env_options = 1;
  cfg.batch = 2, cfg.group_size = 2, cfg.episodes = 4, cfg.max_context = 2400, cfg.max_steps = 2;
  cfg.segment_tokens = 100, cfg.state_interval = 128;
  same_play("needle with states", &cfg, -1);
}
END_TEST

/* A member forks its leader's state: its first segment carries the state
 * at the prefix's end, equal to the leader's after those tokens (the
 * training forward over them agrees within float rounding). */
START_TEST(test_shared_prefix_state) {
  lh_model *m = tiny_model();
  lh_env_option needle[] = {{"tokens", "600"}};
  lh_actors_runner_config cfg = base_config();
  cfg.env = "needle", cfg.env_options = needle, cfg.n_env_options = 1;
  cfg.batch = 2, cfg.group_size = 2, cfg.episodes = 2, cfg.max_context = 2400, cfg.max_steps = 1;
  cfg.segment_tokens = 4096, cfg.state_interval = 4096, cfg.share_prefix = 1;
  collection *c = calloc(1, sizeof *c);
  uint64_t shared, tokens;
  play(m, &cfg, -1, c, &shared, &tokens);
  ck_assert_uint_eq(shared, 1);
  ck_assert_int_eq(resolve_prefixes(c), 1);
  size_t sf = lh_model_state_floats(lh_model_get_config(m));
  lh_errbuf err = {0};
  for (int i = 0; i < c->n; i++) {
    episode *e = &c->ep[i];
    /* both carry the state at the prefix's end: the one-segment leader and the member */
    ck_assert_uint_eq(e->states, 1);
    ck_assert_uint_eq(e->n_state, sf);
    size_t k = e->state_offset;
    ck_assert_uint_eq(k, tokens);
    int32_t *tok = malloc(k * sizeof *tok);
    float *state = malloc(sf * sizeof *state);
    for (size_t j = 0; j < k; j++) tok[j] = (int32_t)e->tokens[j];
    int32_t offs[2] = {0, (int32_t)k};
    lh_model_batch b = {.n_tokens = (int)k, .tokens = tok, .n_seq = 1, .seq_offsets = offs};
    lh_model_cache *cache = NULL;
    ck_assert_msg(lh_model_forward(m, &b, &cache, NULL, NULL, state, &err) == 0, "%s", err.msg);
    double worst = 0;
    for (size_t j = 0; j < sf; j++) worst = fmax(worst, fabs((double)state[j] - e->state[j]));
    printf("shared prefix state of episode %d at %zu: against the forward max |diff| %g\n", i, k, worst);
    ck_assert_msg(worst < 1e-4, "state differs by %g", worst);
    lh_model_cache_free(cache);
    free(tok), free(state);
  }
  free_collection(c);
  free(c);
  lh_model_free(m);
}
END_TEST

/* More members than rows (group_size 4, batch 2): the last two of a group
 * start after the leader's prefill is done. New weights come between: a
 * member started under them prefills the prefix itself, as unshared play
 * does, and leads the share for the members after it (before, it forked
 * the old weights' state and distribution and stamped its first token
 * with the new version: its log-probabilities were not the new weights').
 * Every token, version and log-probability as in unshared play. */
START_TEST(test_shared_prefix_after_weights_change) {
  lh_env_option needle[] = {{"tokens", "1400"}};
  lh_actors_runner_config cfg = base_config();
  cfg.env = "needle", cfg.env_options = needle, cfg.n_env_options = 1;
  cfg.batch = 2, cfg.group_size = 4, cfg.episodes = 8, cfg.max_context = 2400, cfg.max_steps = 2;
  cfg.segment_tokens = 100;
  /* group 0: episode 1 forks the leader's state, episode 2 leads again
   * under the new weights, 3 forks its; group 1: one leader, 3 members */
  same_play_ex("needle, more members than rows, weights changed after the first fork", &cfg, -1, 1, 5);
}
END_TEST

/* Members that end before they join (a reset that fails: every third of
 * the flaky plugin, so the last episode of each group of 3) still count
 * as started: every group's share is freed once its episodes have all
 * started, so each group's second episode shares its leader's prefix.
 * Before, such a group's share was never freed, and after batch + 1 such
 * groups no member shared any more. */
START_TEST(test_shared_prefix_members_that_fail) {
  lh_model *m = tiny_model();
  lh_env_option flaky[] = {{"plugin", LH_TEST_PLUGIN_FLAKY}};
  lh_actors_runner_config cfg = base_config();
  cfg.env = "flaky", cfg.env_options = flaky, cfg.n_env_options = 1;
  cfg.batch = 2, cfg.group_size = 3, cfg.episodes = 36, cfg.max_context = 400, cfg.max_steps = 1;
  cfg.share_prefix = 1;
  collection *c = calloc(1, sizeof *c);
  uint64_t shared = 0, tokens = 0;
  play(m, &cfg, -1, c, &shared, &tokens);
  int errors = 0;
  for (int i = 0; i < c->n; i++) errors += c->ep[i].end->outcome == LONGHAUL__OUTCOME__OUTCOME_ERROR;
  int members = resolve_prefixes(c);
  printf("shared prefix with failing resets: %d episodes, %d ended at their reset, %d members shared "
         "(%llu tokens not prefilled)\n", c->n, errors, members, (unsigned long long)tokens);
  ck_assert_int_eq(c->n, 36);
  ck_assert_int_eq(errors, 12);
  ck_assert_int_eq(members, 12);
  ck_assert_uint_eq(shared, 12);
  free_collection(c);
  free(c);
  lh_model_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_runner");
  TCase *tc = tcase_create("runner");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_episodes_complete_and_reassemble);
  tcase_add_test(tc, test_behavior_logp_matches_forward);
  tcase_add_test(tc, test_version_switch_and_determinism);
  tcase_add_test(tc, test_routing_recorded);
  tcase_add_test(tc, test_env_error_ends_episode);
  tcase_add_test(tc, test_abort_and_errors);
  tcase_add_test(tc, test_stage_sizes_episodes);
  tcase_add_test(tc, test_states_and_beyond_context);
  tcase_add_test(tc, test_shared_prefix_equals_unshared);
  tcase_add_test(tc, test_shared_prefix_state);
  tcase_add_test(tc, test_shared_prefix_after_weights_change);
  tcase_add_test(tc, test_shared_prefix_members_that_fail);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

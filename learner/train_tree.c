/* learner: a step's one-window episodes merged into a prefix tree, each
 * distinct context run forward and backward once.
 *
 * A step's episodes repeat one another: every calc episode opens with the
 * same instruction, a group's members share their question, and members of
 * a trained policy often write the same calls. Run one by one, each
 * episode routes, forwards and backs through those tokens again, so a
 * step's expert load comes in lumps of identical contexts that no balancing
 * rule can spread, and most of its work is repeated.
 *
 * Here the episodes trained in one window from their first token
 * (docs/learner.md "A step's prefix tree") are sorted and merged: a node is a
 * run of positions whose tokens, targets and recorded routing are the same
 * for every episode through it, forwarded once from its parent's final
 * state; its children start from its state. Each episode's loss over a
 * node's positions is its own (its advantage, behaviour log-probabilities,
 * mask and versions) and the node's dlogp is their sum. The backward runs
 * children first; the gradient each child gives the state it started from
 * is summed into its parent's final state, so every parameter's gradient
 * is the unshared step's, up to float rounding (the chunks are cut
 * elsewhere: 1.5e-5 of a tensor's largest in the tests, which hold it to
 * 1e-4; the state's gradient left out is off by the whole tensor).
 *
 * The last position a node holds predicts the first token its children
 * differ on, so a node stops one position short of where they part and
 * each child runs that position itself. A node shorter than MIN_NODE
 * positions is not split off (its children repeat it: a forward per node
 * is not free); identical episodes are one node whatever its length. At
 * most MAX_DEPTH nodes are open at once (each keeps its forward's cache
 * until its children are done); deeper, each episode runs on its own from
 * the deepest node's state. Leaves that start from the same state run
 * packed, train_window positions per forward at most. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

#define MIN_NODE 8
#define MAX_DEPTH 4

/* One episode of the tree: its positions run are [0, len) (len its last
 * sampled token: later positions train nothing), its tokens 0..len. */
typedef struct {
  const lh_learner_episode *ep;
  const float *adv;  /* per token */
  size_t len;
  int routed;  /* routing replay, with the episode's recorded routing */
} tree_ep;

typedef struct {
  lh_learner_trainer *t;
  tree_ep *e;
  size_t *order;  /* episodes sorted by their keys */
  size_t state_floats, window;
  int L, K;
  double N;
  lh_learner_ppo_params pp;
  lh_learner_step_acc *acc;
  lh_model_cache *caches[MAX_DEPTH];
  /* one forward's arrays, window positions (leaves pack to it) */
  int32_t *tokens, *targets, *replay_rows, *offs;
  float *logp, *entropy, *dlogp, *dentropy, *dlogp_one, *blogp, *adv;
  uint8_t *mask;
  uint32_t *ver;
  float *states_in, *dstates_in;  /* (layers, cap_seq, ...) a pack's */
  size_t cap_seq;
  lh_errbuf *err;
} tree;

/* Position i's key of episode x against y's: the token, whether the
 * episode replays recorded routing (one that does never shares a node with
 * one that routes), then at a position the episode runs its recorded
 * experts. */
static int key_cmp(const tree *tr, const tree_ep *x, const tree_ep *y, size_t i) {
  uint32_t a = x->ep->tokens[i], b = y->ep->tokens[i];
  if (a != b) return a < b ? -1 : 1;
  if (x->routed != y->routed) return x->routed - y->routed;
  if (!x->routed) return 0;
  int rx = i < x->len, ry = i < y->len;
  if (rx != ry) return rx - ry;
  if (!rx) return 0;
  size_t row = (size_t)tr->L * tr->K;
  return memcmp(x->ep->routed_experts + i * row, y->ep->routed_experts + i * row, row * sizeof(uint32_t));
}

/* Keys equal from position from on: how many of the sequences' keys
 * (len + 1 each) are equal from the start, given the first from are. */
static size_t lcp(const tree *tr, const tree_ep *x, const tree_ep *y, size_t from) {
  size_t n = (x->len < y->len ? x->len : y->len) + 1, i = from;
  while (i < n && key_cmp(tr, x, y, i) == 0) i++;
  return i;
}

/* x before y in the tree's order: by keys, a sequence before those it is a
 * prefix of. */
static int before(const tree *tr, size_t xi, size_t yi) {
  const tree_ep *x = &tr->e[xi], *y = &tr->e[yi];
  size_t c = lcp(tr, x, y, 0);
  if (c == x->len + 1 || c == y->len + 1) return x->len < y->len;
  return key_cmp(tr, x, y, c) < 0;
}

/* order[0..n) sorted (a merge sort through tmp: qsort has no context). */
static void sort_order(const tree *tr, size_t *order, size_t *tmp, size_t n) {
  if (n < 2) return;
  size_t h = n / 2;
  sort_order(tr, order, tmp, h);
  sort_order(tr, order + h, tmp, n - h);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = before(tr, order[j], order[i]) ? order[j++] : order[i++];
  while (i < h) tmp[k++] = order[i++];
  while (j < n) tmp[k++] = order[j++];
  memcpy(order, tmp, n * sizeof *order);
}

/* The model's inputs for positions [a, b) of episode x at row at of the
 * forward's arrays; targets wherever any of eps [lo, hi) sampled. */
static void fill(tree *tr, const tree_ep *x, size_t a, size_t b, size_t at, size_t lo, size_t hi) {
  for (size_t i = a; i < b; i++) {
    int any = 0;
    for (size_t q = lo; q < hi && !any; q++) any = tr->e[tr->order[q]].ep->loss_mask[i + 1];
    tr->tokens[at + i - a] = (int32_t)x->ep->tokens[i];
    tr->targets[at + i - a] = any ? (int32_t)x->ep->tokens[i + 1] : -1;
  }
}

/* Each of episodes [lo, hi)'s loss over positions [a, b), which sit at
 * rows at.. of the forward's logp: their dlogp and dentropy summed there. */
static int losses(tree *tr, size_t lo, size_t hi, size_t a, size_t b, size_t at, int has_entropy) {
  size_t n = b - a;
  uint8_t *mask = tr->mask;
  float *blogp = tr->blogp, *adv = tr->adv;
  uint32_t *ver = tr->ver;
  for (size_t i = 0; i < n; i++) tr->dlogp[at + i] = 0, tr->dentropy[at + i] = 0;
  for (size_t q = lo; q < hi; q++) {
    const tree_ep *x = &tr->e[tr->order[q]];
    if (!lh_learner_episode_targets(x->ep, x->adv, a, b, mask, blogp, adv, ver)) continue;
    for (size_t i = 0; i < n; i++)
      if (mask[i] && !isfinite(tr->logp[at + i])) {
        tr->acc->nonfinite = 1;
        return 0;
      }
    lh_learner_ppo_input in = {.n = n, .logp = tr->logp + at, .behavior_logp = blogp, .advantage = adv,
                               .loss_mask = mask, .version = ver, .current_version = tr->t->version,
                               .entropy = has_entropy ? tr->entropy + at : NULL, .normaliser = tr->N};
    double loss;
    lh_learner_ppo_stats ps;
    LH_TRY(lh_learner_ppo_loss(&tr->pp, &in, &loss, tr->dlogp_one, &ps, tr->err));
    for (size_t i = 0; i < n; i++) {
      tr->dlogp[at + i] += tr->dlogp_one[i];
      if (mask[i]) tr->dentropy[at + i] += (float)ps.dloss_dentropy;
    }
    lh_learner_acc_add(tr->acc, &ps, loss, has_entropy, mask, adv, ver, n, tr->t->version);
  }
  return 0;
}

/* Forward of the cache's batch, observed by the balancer; the entropy
 * read. */
static int forward(tree *tr, lh_model_cache **cache, const lh_model_batch *b, float *state_out, int *has_entropy) {
  LH_TRY(lh_model_forward(tr->t->m, b, cache, tr->logp, NULL, state_out, tr->err));
  tr->acc->run_positions += (size_t)b->n_tokens;
  int rc = lh_model_balancer_observe_cache(tr->t->balancer, tr->t->m, *cache);
  if (rc) return lh_errbuf_set(tr->err, rc, "train: balancer: %s", lh_strerror(rc));
  *has_entropy = lh_model_cache_entropy(*cache, tr->entropy) == 0;
  if (!*has_entropy && tr->pp.entropy_coef > 0)
    return lh_errbuf_set(tr->err, LH_ELEARNER_TRAIN, "train: the forward pass gave no entropy");
  return 0;
}

/* Adds the k sequences' state gradients (layers, k, S) into dst
 * (layers, 1, S). */
static void add_states(tree *tr, float *dst, const float *src, size_t k) {
  size_t L = (size_t)tr->L, S = tr->state_floats / L;
  for (size_t l = 0; l < L; l++)
    for (size_t s = 0; s < k; s++)
      for (size_t i = 0; i < S; i++) dst[l * S + i] += src[(l * k + s) * S + i];
}

/* A set of identical episodes [lo, hi) of order, from position a. */
typedef struct {
  size_t lo, hi;
} leafset;

typedef struct {
  leafset *v;
  size_t n, cap;
} leaves;

static int leaves_push(leaves *ls, size_t lo, size_t hi) {
  if (ls->n == ls->cap) {
    size_t cap = ls->cap ? 2 * ls->cap : 16;
    leafset *v = realloc(ls->v, cap * sizeof *v);
    if (!v) return LH_ENOMEM;
    ls->v = v, ls->cap = cap;
  }
  ls->v[ls->n++] = (leafset){lo, hi};
  return 0;
}

/* The leaves from position a, each from state (NULL: zero), packed up to
 * the window; their state gradients summed into dstate (when state). */
static int run_leaves(tree *tr, const leaves *ls, size_t a, const float *state, float *dstate) {
  size_t L = (size_t)tr->L, S = tr->state_floats / L;
  for (size_t first = 0, last; first < ls->n; first = last) {
    size_t T = 0;
    int routed = tr->e[tr->order[ls->v[first].lo]].routed;
    for (last = first; last < ls->n; last++) {
      const tree_ep *x = &tr->e[tr->order[ls->v[last].lo]];
      size_t len = x->len - a;
      if (last > first && (T + len > tr->window || x->routed != routed)) break;  /* one replay or none a forward */
      T += len;
    }
    size_t k = last - first, at = 0;
    for (size_t s = 0; s < k; s++) {
      const leafset *x = &ls->v[first + s];
      const tree_ep *ep = &tr->e[tr->order[x->lo]];
      tr->offs[s] = (int32_t)at;
      fill(tr, ep, a, ep->len, at, x->lo, x->hi);
      at += ep->len - a;
    }
    tr->offs[k] = (int32_t)T;
    if (routed)
      for (size_t s = 0; s < k; s++) {
        const tree_ep *ep = &tr->e[tr->order[ls->v[first + s].lo]];
        lh_learner_episode_replay(ep->ep, a, ep->len, tr->replay_rows, T, (size_t)tr->offs[s]);
      }
    if (state && k > tr->cap_seq) {
      float *si = realloc(tr->states_in, k * tr->state_floats * sizeof(float));
      if (si) tr->states_in = si;
      float *di = si ? realloc(tr->dstates_in, k * tr->state_floats * sizeof(float)) : NULL;
      if (di) tr->dstates_in = di;
      if (!si || !di) return lh_errbuf_set(tr->err, LH_ENOMEM, "train: out of memory for %zu states", k);
      tr->cap_seq = k;
    }
    if (state)
      for (size_t l = 0; l < L; l++)
        for (size_t s = 0; s < k; s++) memcpy(tr->states_in + (l * k + s) * S, state + l * S, S * sizeof(float));
    lh_model_batch b = {.n_tokens = (int)T, .tokens = tr->tokens, .targets = tr->targets, .n_seq = (int)k,
                        .seq_offsets = tr->offs, .state_in = state ? tr->states_in : NULL,
                        .replay_experts = routed ? tr->replay_rows : NULL, .temperature = tr->t->temperature};
    int has_entropy;
    LH_TRY(forward(tr, &tr->t->cache, &b, NULL, &has_entropy));
    for (size_t s = 0; s < k; s++) {
      const leafset *x = &ls->v[first + s];
      LH_TRY(losses(tr, x->lo, x->hi, a, tr->e[tr->order[x->lo]].len, (size_t)tr->offs[s], has_entropy));
      if (tr->acc->nonfinite) return 0;
    }
    LH_TRY(lh_model_backward_states(tr->t->m, tr->t->cache, tr->dlogp,
                                    tr->pp.entropy_coef > 0 ? tr->dentropy : NULL, NULL,
                                    state ? tr->dstates_in : NULL, tr->err));
    if (state) add_states(tr, dstate, tr->dstates_in, k);
  }
  return 0;
}

static int grow(tree *tr, size_t lo, size_t hi, size_t a, int depth, const float *state, float *dstate,
                leaves *ls);

/* A node: positions [a, end) of episodes [lo, hi), forward from state,
 * its children (the episodes that go on past end + 1, from end), then its
 * backward with their state gradients. */
static int node(tree *tr, size_t lo, size_t hi, size_t a, size_t end, int depth, const float *state,
                float *dstate) {
  const tree_ep *x = &tr->e[tr->order[lo]];
  size_t n = end - a;
  fill(tr, x, a, end, 0, lo, hi);
  if (x->routed) lh_learner_episode_replay(x->ep, a, end, tr->replay_rows, n, 0);
  int32_t offs[2] = {0, (int32_t)n};
  lh_model_batch b = {.n_tokens = (int)n, .tokens = tr->tokens, .targets = tr->targets, .n_seq = 1,
                      .seq_offsets = offs, .state_in = state, .replay_experts = x->routed ? tr->replay_rows : NULL,
                      .temperature = tr->t->temperature};
  float *mine = calloc(3 * tr->state_floats + n * 2, sizeof(float));
  if (!mine) return lh_errbuf_set(tr->err, LH_ENOMEM, "train: out of memory for a prefix tree's node");
  float *out = mine, *dout = mine + tr->state_floats, *din = dout + tr->state_floats;
  float *dlogp = din + tr->state_floats, *dent = dlogp + n;
  int has_entropy, rc = forward(tr, &tr->caches[depth], &b, out, &has_entropy);
  if (!rc) rc = losses(tr, lo, hi, a, end, 0, has_entropy);
  if (!rc && !tr->acc->nonfinite) {
    /* the forward's arrays are the children's next: keep this node's */
    memcpy(dlogp, tr->dlogp, n * sizeof(float));
    memcpy(dent, tr->dentropy, n * sizeof(float));
    leaves ls = {0};
    size_t q = lo;
    while (q < hi && tr->e[tr->order[q]].len + 1 == end + 1) q++;  /* wholly inside this node */
    if (q < hi) rc = grow(tr, q, hi, end, depth + 1, out, dout, &ls);
    if (!rc && !tr->acc->nonfinite) rc = run_leaves(tr, &ls, end, out, dout);
    free(ls.v);
  }
  if (!rc && !tr->acc->nonfinite)
    rc = lh_model_backward_states(tr->t->m, tr->caches[depth], dlogp, tr->pp.entropy_coef > 0 ? dent : NULL,
                                  dout, state ? din : NULL, tr->err);
  if (!rc && state) add_states(tr, dstate, din, 1);
  free(mine);
  return rc;
}

/* Episodes [lo, hi) of order, whose keys are equal before position a + 1,
 * from position a and state: a node where they share enough positions,
 * else each set of them that shares more grown on its own; identical
 * sets and what lies past MAX_DEPTH go to the leaves ls. */
static int grow(tree *tr, size_t lo, size_t hi, size_t a, int depth, const float *state, float *dstate,
                leaves *ls) {
  const tree_ep *first = &tr->e[tr->order[lo]], *last = &tr->e[tr->order[hi - 1]];
  size_t c = lcp(tr, first, last, a);
  if (c == first->len + 1 && c == last->len + 1) return leaves_push(ls, lo, hi);
  if (depth >= MAX_DEPTH) {
    for (size_t q = lo; q < hi; q++) LH_TRY(leaves_push(ls, q, q + 1));
    return 0;
  }
  if (c >= a + 1 + MIN_NODE) return node(tr, lo, hi, a, c - 1, depth, state, dstate);
  /* too little in common here: the sets that agree on position c */
  for (size_t q = lo, r; q < hi; q = r) {
    const tree_ep *x = &tr->e[tr->order[q]];
    for (r = q + 1; r < hi; r++) {
      const tree_ep *y = &tr->e[tr->order[r]];
      if (x->len + 1 == c || y->len + 1 == c ? x->len != y->len : key_cmp(tr, x, y, c) != 0) break;
    }
    LH_TRY(grow(tr, q, r, a, depth, state, dstate, ls));
    if (tr->acc->nonfinite) return 0;
  }
  return 0;
}

int lh_learner_train_tree_eligible(const lh_learner_trainer *t, const lh_learner_episode *ep) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  if (!t->cfg.share_prefix || t->cfg.state_mode != LH_LEARNER_STATE_EXACT || mc->conv > 0 || ep->n_images)
    return 0;
  /* under routing replay, recorded routing of another shape runs alone,
   * which says what is wrong */
  if (t->cfg.routing_replay && ep->routed_experts &&
      (ep->routed_layers != (uint32_t)mc->layers || ep->routed_topk != (uint32_t)mc->topk))
    return 0;
  size_t last = lh_learner_episode_last_sampled(ep);
  return last > 0 && last <= t->cfg.train_window;
}

static void tree_free(tree *tr) {
  for (int d = 0; d < MAX_DEPTH; d++) lh_model_cache_free(tr->caches[d]);
  free(tr->e), free(tr->order), free(tr->tokens), free(tr->targets), free(tr->replay_rows), free(tr->offs);
  free(tr->logp), free(tr->entropy), free(tr->dlogp), free(tr->dentropy), free(tr->dlogp_one);
  free(tr->blogp), free(tr->adv), free(tr->mask), free(tr->ver), free(tr->states_in), free(tr->dstates_in);
}

int lh_learner_train_tree(lh_learner_trainer *t, lh_learner_episode *const *eps, float *const *advs,
                          const uint8_t *in_tree, size_t m, double N, lh_learner_step_acc *acc, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  tree tr = {.t = t, .N = N, .acc = acc, .err = err, .window = t->cfg.train_window,
             .state_floats = lh_model_state_floats(mc), .L = mc->layers, .K = mc->topk,
             .pp = {t->cfg.clip_eps, t->cfg.is_cap, t->cfg.entropy_coef}};
  size_t W = tr.window, k = 0;
  for (size_t i = 0; i < m; i++) k += in_tree[i];
  if (!k) return 0;
  tr.e = calloc(k, sizeof *tr.e), tr.order = malloc(k * sizeof *tr.order);
  tr.tokens = malloc(W * sizeof(int32_t)), tr.targets = malloc(W * sizeof(int32_t));
  tr.offs = malloc((W + 1) * sizeof(int32_t));
  float **f[] = {&tr.logp, &tr.entropy, &tr.dlogp, &tr.dentropy, &tr.dlogp_one};
  int ok = tr.e && tr.order && tr.tokens && tr.targets && tr.offs;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) ok &= (*f[i] = malloc(W * sizeof(float))) != NULL;
  ok = ok && (tr.blogp = malloc(W * sizeof(float))) && (tr.adv = malloc(W * sizeof(float)));
  ok = ok && (tr.mask = malloc(W)) && (tr.ver = malloc(W * sizeof(uint32_t)));
  int replay = t->cfg.routing_replay;
  ok = ok && (!replay || (tr.replay_rows = malloc((size_t)tr.L * W * (size_t)tr.K * sizeof(int32_t))));
  size_t *tmp = ok ? malloc(k * sizeof *tmp) : NULL;
  ok = ok && tmp;
  for (size_t i = 0, q = 0; ok && i < m; i++) {
    if (!in_tree[i]) continue;
    tree_ep *x = &tr.e[q];
    x->ep = eps[i], x->adv = advs[i], x->len = lh_learner_episode_last_sampled(eps[i]);
    x->routed = replay && eps[i]->routed_experts;
    tr.order[q] = q;
    q++;
  }
  int rc = 0;
  if (!ok) rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for a prefix tree of %zu episodes", k);
  /* Test hook: LH_LEARNER_TEST_TREE_FAIL=R fails the tree of rank R's
   * first step, as one whose node a kernel refuses. */
  const char *fail = getenv("LH_LEARNER_TEST_TREE_FAIL");
  if (!rc && fail && *fail && atoi(fail) == t->rank && t->step == 0)
    rc = lh_errbuf_set(err, LH_ELEARNER_TRAIN, "train: the prefix tree fails (LH_LEARNER_TEST_TREE_FAIL)");
  if (!rc) {
    sort_order(&tr, tr.order, tmp, k);
    leaves ls = {0};
    rc = grow(&tr, 0, k, 0, 0, NULL, NULL, &ls);
    if (!rc && !acc->nonfinite) rc = run_leaves(&tr, &ls, 0, NULL, NULL);
    free(ls.v);
  }
  free(tmp);
  tree_free(&tr);
  return rc;
}

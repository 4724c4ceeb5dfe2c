/* model: the expert exchange of a sharded model (docs/learner.md,
 * "Experts across ranks"). A rank's routed (token, slot) pairs go to the
 * rank that holds their expert and the experts' output comes back; in the
 * backward the pairs go again with the output's gradient, and the input's
 * gradient and the gates' come back, while the owner adds the weights'
 * gradients to its shard. The owner keeps nothing between the two: it runs
 * the expert's forward again inside the backward, so a rank's forwards and
 * backwards need not pair up with anyone else's.
 *
 * What travels is per token where the data are a token's and per pair
 * where they are a pair's. A request to a rank holds the token vectors
 * its pairs need, each once however many of the token's k experts the
 * rank holds (z; in a backward z and the output's gradient), then per
 * pair the expert's index within the shard, the index of its token's
 * vector among those, and the gate. The owner gathers each pair's vectors
 * from them. The reply holds per token vector the sum of its pairs'
 * gated outputs (forward) or of their z gradients (backward: z's gradient
 * is the sum over the token's pairs), and in a backward per pair the
 * gate's gradient. The owner sums a token's pairs in slot order, the
 * asker the owners' sums in the order of their first slots.
 *
 * The exchange runs in rounds, collective over the group: a header to
 * every rank (what kind of request, which layer, how many pairs and token
 * vectors, whether the sender is done with its step), the requests, the
 * serving of every request received, the replies. A rank with a forward
 * or backward of its own puts it in the round; a rank that has none (it
 * is done, or between two of its own) takes part with nothing, serving
 * the others (lh_model_experts_drain). So the ranks' steps may differ in
 * their windows, burn-ins and skipped episodes: every round is whole by
 * itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

enum { EP_NONE = 0, EP_FORWARD = 1, EP_BACKWARD = 2 };

/* The most pairs one rank may ask of another in a round: a window of
 * 2^20 tokens at top 16. A header asking for more is refused, as is one
 * with more token vectors than pairs. */
#define EP_MAX_PAIRS ((uint32_t)1 << 24)

typedef struct {
  uint32_t kind, layer, pairs, tokens, done;
} ep_header;

/* A pair's record in a request: the expert within the shard, its token's
 * vector among the request's, the gate. */
#define EP_PAIR_BYTES 12

/* Where the asker finds a (token, slot) pair's reply in ep->answer, in
 * floats: its token vector's (the owner's sum; added once, at the token's
 * first slot to that owner) and, in a backward, its gate's gradient. */
typedef struct {
  size_t vec, gate;
  int first;
} ep_slot;

typedef struct {
  void *p;
  size_t cap;
} host_buf;

typedef struct {
  void *p;
  size_t cap;
} dev_buf;

struct lh_model_ep {
  lh_model_expert_transport t;
  lh_model_expert_traffic traffic;
  int P;
  ep_header *hsend, *hrecv;                /* (P) */
  size_t *scount, *sdispl, *rcount, *rdispl; /* (P) bytes */
  size_t *pcount, *pdispl;                 /* (P) reply bytes: to send, to get */
  uint32_t *pairs_to, *tokens_to;          /* (P) */
  host_buf send, recv, reply, answer;      /* bytes of the round */
  host_buf hz, hg, hd, hsum, pos;          /* the asker's host copies, its ep_slot per pair */
  host_buf sz, sg, sd, si, sout, sv, sacc; /* the server's gathered requests, vector per pair, sums */
  dev_buf dz, dg, dd, di, dout, dcache, ddz, ddg;  /* the server's backend copies */
};

static void *grow_host(host_buf *b, size_t bytes) {
  if (bytes <= b->cap) return b->p;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < bytes) cap *= 2;
  void *p = realloc(b->p, cap);
  if (!p) return NULL;
  b->p = p, b->cap = cap;
  return p;
}

static void *grow_dev(const lh_backend *be, dev_buf *b, size_t bytes) {
  if (bytes <= b->cap && b->p) return b->p;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < bytes) cap *= 2;
  be->free(be->context, b->p);
  b->p = be->alloc(be->context, cap);
  b->cap = b->p ? cap : 0;
  return b->p;
}

void lh_model_ep_free(const lh_backend *be, struct lh_model_ep *ep) {
  if (!ep) return;
  dev_buf *db[] = {&ep->dz, &ep->dg, &ep->dd, &ep->di, &ep->dout, &ep->dcache, &ep->ddz, &ep->ddg};
  for (size_t i = 0; i < sizeof db / sizeof *db; i++) be->free(be->context, db[i]->p);
  free(ep->hsend), free(ep->hrecv), free(ep->scount), free(ep->sdispl), free(ep->rcount), free(ep->rdispl);
  free(ep->pcount), free(ep->pdispl), free(ep->pairs_to), free(ep->tokens_to);
  host_buf *hb[] = {&ep->send, &ep->recv, &ep->reply, &ep->answer, &ep->hz, &ep->hg, &ep->hd, &ep->hsum,
                    &ep->pos, &ep->sz, &ep->sg, &ep->sd, &ep->si, &ep->sout, &ep->sv, &ep->sacc};
  for (size_t i = 0; i < sizeof hb / sizeof *hb; i++) free(hb[i]->p);
  free(ep);
}

int lh_model_set_expert_transport(lh_model *m, const lh_model_expert_transport *t, lh_errbuf *err) {
  if (!m || !t || !t->alltoall || !t->alltoallv)
    return lh_errbuf_set(err, LH_EINVAL, "expert exchange: NULL model or an incomplete transport");
  lh_model_ep_free(m->be, m->ep);
  m->ep = NULL;
  struct lh_model_ep *ep = calloc(1, sizeof *ep);
  int P = m->shards;
  if (ep) {
    ep->P = P, ep->t = *t;
    ep->hsend = calloc((size_t)P, sizeof *ep->hsend), ep->hrecv = calloc((size_t)P, sizeof *ep->hrecv);
    ep->scount = calloc((size_t)P, sizeof(size_t)), ep->sdispl = calloc((size_t)P, sizeof(size_t));
    ep->rcount = calloc((size_t)P, sizeof(size_t)), ep->rdispl = calloc((size_t)P, sizeof(size_t));
    ep->pcount = calloc((size_t)P, sizeof(size_t)), ep->pdispl = calloc((size_t)P, sizeof(size_t));
    ep->pairs_to = calloc((size_t)P, sizeof(uint32_t)), ep->tokens_to = calloc((size_t)P, sizeof(uint32_t));
  }
  if (!ep || !ep->hsend || !ep->hrecv || !ep->scount || !ep->sdispl || !ep->rcount || !ep->rdispl || !ep->pcount ||
      !ep->pdispl || !ep->pairs_to || !ep->tokens_to) {
    lh_model_ep_free(m->be, ep);
    return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory");
  }
  m->ep = ep;
  return 0;
}

void lh_model_expert_traffic_get(const lh_model *m, lh_model_expert_traffic *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (m && m->ep) *out = m->ep->traffic;
}

void lh_model_moe_times_get(const lh_model *m, lh_model_moe_times *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (m) *out = m->moe_times;
}

/* Bytes of one token vector in a request: z, and in a backward the
 * output's gradient after it. */
static size_t vector_bytes(uint32_t kind, int r) {
  return kind == EP_FORWARD ? (size_t)r * 4 : kind == EP_BACKWARD ? (size_t)(2 * r) * 4 : 0;
}
/* Bytes of a request of `pairs` pairs over `tokens` token vectors: the
 * vectors, then the pairs' records. */
static size_t request_bytes(uint32_t kind, int r, uint32_t pairs, uint32_t tokens) {
  return kind == EP_NONE ? 0 : (size_t)tokens * vector_bytes(kind, r) + (size_t)pairs * EP_PAIR_BYTES;
}
/* Bytes of its reply: per token vector the sum of its pairs' gated
 * outputs (forward) or z gradients (backward), then in a backward the
 * pairs' gate gradients. */
static size_t reply_bytes(uint32_t kind, int r, uint32_t pairs, uint32_t tokens) {
  return kind == EP_FORWARD    ? (size_t)tokens * (size_t)r * 4
         : kind == EP_BACKWARD ? ((size_t)tokens * (size_t)r + pairs) * 4
                               : 0;
}

static int transport_failed(lh_errbuf *err, int rc, const char *what) {
  return lh_errbuf_set(err, LH_EMODEL_EXCHANGE, "expert exchange: the %s failed: %s", what, lh_strerror(rc));
}

/* Serves the requests of the sources from `first` on whose kind and layer
 * are first's, as one batch, writing each source's reply at its place in
 * ep->reply; marks them served in *served. Every pair's expert and token
 * vector index is checked against what the shard holds and what the
 * source sent before anything is read by them. */
static int serve_batch(lh_model *m, int first, uint8_t *served, lh_errbuf *err) {
  struct lh_model_ep *ep = m->ep;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int P = ep->P, r = m->cfg.latent, f = m->cfg.expert_hidden, El = m->e_local;
  uint32_t kind = ep->hrecv[first].kind, layer = ep->hrecv[first].layer;
  size_t N = 0, V = 0;
  for (int j = first; j < P; j++)
    if (!served[j] && ep->hrecv[j].kind == kind && ep->hrecv[j].layer == layer)
      N += ep->hrecv[j].pairs, V += ep->hrecv[j].tokens;
  int bwd = kind == EP_BACKWARD;
  size_t vb = vector_bytes(kind, r);
  float *z = grow_host(&ep->sz, N * (size_t)r * 4 + 4), *g = grow_host(&ep->sg, N * 4 + 4);
  int32_t *idx = grow_host(&ep->si, N * 4 + 4);
  size_t *vec = grow_host(&ep->sv, N * sizeof(size_t) + 1);
  float *dout = bwd ? grow_host(&ep->sd, N * (size_t)r * 4 + 4) : NULL;
  float *res = grow_host(&ep->sout, N * (size_t)(r + 1) * 4 + 4), *acc = grow_host(&ep->sacc, V * (size_t)r * 4 + 4);
  if (!z || !g || !idx || !vec || (bwd && !dout) || !res || !acc)
    return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory");
  /* Per pair its expert, gate and the vectors of its token, gathered;
   * vec[n]: the token vector's place among the batch's V. */
  size_t n = 0, v0 = 0;
  for (int j = first; j < P; j++) {
    const ep_header *h = &ep->hrecv[j];
    if (served[j] || h->kind != kind || h->layer != layer) continue;
    const unsigned char *vectors = (const unsigned char *)ep->recv.p + ep->rdispl[j];
    const unsigned char *at = vectors + (size_t)h->tokens * vb;
    for (uint32_t q = 0; q < h->pairs; q++, n++, at += EP_PAIR_BYTES) {
      int32_t e;
      uint32_t t;
      memcpy(&e, at, 4);
      memcpy(&t, at + 4, 4);
      if (e < 0 || e >= El)
        return lh_errbuf_set(err, LH_EMODEL_EXCHANGE, "expert exchange: rank %d asked shard %d for expert %d of its "
                             "%d", j, m->shard, (int)e, El);
      if (t >= h->tokens)
        return lh_errbuf_set(err, LH_EMODEL_EXCHANGE, "expert exchange: rank %d's pair %u names token vector %u of "
                             "the %u it sent", j, q, t, h->tokens);
      idx[n] = e;
      memcpy(&g[n], at + 8, 4);
      vec[n] = v0 + t;
      const unsigned char *tv = vectors + (size_t)t * vb;
      memcpy(z + n * (size_t)r, tv, (size_t)r * 4);
      if (bwd) memcpy(dout + n * (size_t)r, tv + (size_t)r * 4, (size_t)r * 4);
    }
    v0 += h->tokens;
  }
  const lh_model_layer_ids *id = &m->layer[layer];
  float *W1 = lh_model_view(m, m->params, id->w1), *W2 = lh_model_view(m, m->params, id->w2);
  float *W3 = lh_model_view(m, m->params, id->w3);
  float *dz = grow_dev(be, &ep->dz, N * (size_t)r * 4 + 4), *dg = grow_dev(be, &ep->dg, N * 4 + 4);
  int32_t *di = grow_dev(be, &ep->di, N * 4 + 4);
  float *dres = grow_dev(be, &ep->dout, N * (size_t)r * 4 + 4);
  if (!dz || !dg || !di || !dres) return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: no backend memory");
  int rc = be->upload(ctx, dz, z, N * (size_t)r * 4);
  if (!rc) rc = be->upload(ctx, dg, g, N * 4);
  if (!rc) rc = be->upload(ctx, di, idx, N * 4);
  if (!bwd) {
    if (!rc) rc = be->moe_experts_forward(ctx, dres, NULL, dz, di, dg, W1, W2, W3, (int)N, El, 1, r, f);
    if (!rc) rc = be->download(ctx, res, dres, N * (size_t)r * 4);
  } else {
    if (!m->grads) return lh_errbuf_set(err, LH_EMODEL_STATE, "expert exchange: a backward needs gradients");
    float *dd = grow_dev(be, &ep->dd, N * (size_t)r * 4 + 4);
    float *cache = grow_dev(be, &ep->dcache, lh_moe_cache_floats((int)N, f, r) * 4 + 4);
    float *ddz = grow_dev(be, &ep->ddz, N * (size_t)r * 4 + 4), *ddg = grow_dev(be, &ep->ddg, N * 4 + 4);
    if (!dd || !cache || !ddz || !ddg) return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: no backend memory");
    if (!rc) rc = be->upload(ctx, dd, dout, N * (size_t)r * 4);
    if (!rc) rc = be->moe_experts_forward(ctx, dres, cache, dz, di, dg, W1, W2, W3, (int)N, El, 1, r, f);
    if (!rc) rc = be->zero(ctx, ddz, N * (size_t)r * 4);
    if (!rc) rc = be->zero(ctx, ddg, N * 4);
    if (!rc)
      rc = be->moe_experts_backward(ctx, ddz, lh_model_view(m, m->grads, id->w1), lh_model_view(m, m->grads, id->w2),
                                    lh_model_view(m, m->grads, id->w3), ddg, dd, cache, dz, di, dg, W1, W2, W3,
                                    (int)N, El, 1, r, f);
    /* res holds z's gradients, then the gates'. */
    if (!rc) rc = be->download(ctx, res, ddz, N * (size_t)r * 4);
    if (!rc) rc = be->download(ctx, res + N * (size_t)r, ddg, N * 4);
  }
  if (rc) return lh_errbuf_set(err, rc, "expert exchange: layer %u's experts on shard %d: %s", layer, m->shard,
                               lh_strerror(rc));
  /* Per token vector the sum of its pairs' rows (gated outputs, or z's
   * gradients), in the order the source sent the pairs: its slot order. */
  memset(acc, 0, V * (size_t)r * 4);
  for (size_t q = 0; q < N; q++) {
    float *o = acc + vec[q] * (size_t)r;
    const float *y = res + q * (size_t)r;
    for (int i = 0; i < r; i++) o[i] += y[i];
  }
  n = 0, v0 = 0;
  for (int j = first; j < P; j++) {
    const ep_header *h = &ep->hrecv[j];
    if (served[j] || h->kind != kind || h->layer != layer) continue;
    unsigned char *at = (unsigned char *)ep->reply.p + ep->pdispl[j];
    memcpy(at, acc + v0 * (size_t)r, (size_t)h->tokens * (size_t)r * 4);
    if (bwd) memcpy(at + (size_t)h->tokens * (size_t)r * 4, res + N * (size_t)r + n, (size_t)h->pairs * 4);
    n += h->pairs, v0 += h->tokens;
    served[j] = 1;
  }
  return 0;
}

/* One round (see the file's comment). This rank asks kind of layer with
 * ep->pairs_to[j] pairs over ep->tokens_to[j] token vectors for rank j,
 * packed in ep->send by pack; the replies land in ep->answer in rank
 * order, each reply_bytes long. *all_done: every rank said done. */
static int round_trip(lh_model *m, uint32_t kind, uint32_t layer, int done, int *all_done, lh_errbuf *err) {
  struct lh_model_ep *ep = m->ep;
  int P = ep->P, r = m->cfg.latent;
  for (int j = 0; j < P; j++)
    ep->hsend[j] = (ep_header){kind, layer, kind == EP_NONE ? 0 : ep->pairs_to[j],
                               kind == EP_NONE ? 0 : ep->tokens_to[j], (uint32_t)(done != 0)};
  int64_t t0 = lh_now_ns();
  int rc = ep->t.alltoall(ep->t.ctx, ep->hsend, ep->hrecv, sizeof(ep_header));
  ep->traffic.transport_ns += lh_now_ns() - t0;
  if (rc) return transport_failed(err, rc, "header exchange");
  /* What every rank asks: checked before anything is sized by it. */
  size_t rtotal = 0, stotal = 0, ptotal = 0;
  *all_done = 1;
  for (int j = 0; j < P; j++) {
    const ep_header *h = &ep->hrecv[j];
    if (h->kind > EP_BACKWARD || (h->kind != EP_NONE && h->layer >= (uint32_t)m->cfg.layers) ||
        h->pairs > EP_MAX_PAIRS || h->tokens > h->pairs || (h->pairs && !h->tokens) || h->done > 1 ||
        (h->kind == EP_NONE && h->pairs))
      return lh_errbuf_set(err, LH_EMODEL_EXCHANGE, "expert exchange: rank %d sent a header that is not one (kind %u, "
                           "layer %u of %d, %u pairs over %u token vectors, at most %u pairs)", j, h->kind, h->layer,
                           m->cfg.layers, h->pairs, h->tokens, EP_MAX_PAIRS);
    if (!h->done) *all_done = 0;
    ep->rcount[j] = request_bytes(h->kind, r, h->pairs, h->tokens);
    ep->rdispl[j] = rtotal, rtotal += ep->rcount[j];
    ep->scount[j] = request_bytes(kind, r, ep->hsend[j].pairs, ep->hsend[j].tokens);
    ep->sdispl[j] = stotal, stotal += ep->scount[j];
    ep->pcount[j] = reply_bytes(h->kind, r, h->pairs, h->tokens);
    ep->pdispl[j] = ptotal, ptotal += ep->pcount[j];
  }
  if (!grow_host(&ep->recv, rtotal + 1) || !grow_host(&ep->reply, ptotal + 1) || !grow_host(&ep->send, stotal + 1))
    return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory for %zu bytes", rtotal + ptotal);
  t0 = lh_now_ns();
  rc = ep->t.alltoallv(ep->t.ctx, ep->send.p, ep->scount, ep->sdispl, ep->recv.p, ep->rcount, ep->rdispl);
  ep->traffic.transport_ns += lh_now_ns() - t0;
  if (rc) return transport_failed(err, rc, "request exchange");
  int64_t s0 = lh_now_ns();
  uint8_t served[P];
  for (int j = 0; j < P; j++) served[j] = ep->hrecv[j].kind == EP_NONE || ep->hrecv[j].pairs == 0;
  for (int j = 0; j < P; j++)
    if (!served[j]) LH_TRY(serve_batch(m, j, served, err));
  ep->traffic.serve_ns += lh_now_ns() - s0;
  /* The replies: what this rank serves goes back as pcount; what it gets
   * is its own asks' replies, laid out in the order it asked. */
  size_t atotal = 0;
  size_t acount[P], adispl[P];
  for (int j = 0; j < P; j++) {
    acount[j] = reply_bytes(kind, r, ep->hsend[j].pairs, ep->hsend[j].tokens);
    adispl[j] = atotal, atotal += acount[j];
  }
  if (!grow_host(&ep->answer, atotal + 1)) return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory");
  t0 = lh_now_ns();
  rc = ep->t.alltoallv(ep->t.ctx, ep->reply.p, ep->pcount, ep->pdispl, ep->answer.p, acount, adispl);
  ep->traffic.transport_ns += lh_now_ns() - t0;
  if (rc) return transport_failed(err, rc, "reply exchange");
  ep->traffic.bytes += stotal + ptotal;
  ep->traffic.rounds++;
  return 0;
}

/* Packs this rank's pairs (idx (T,k) on the host, its host copies of z,
 * the gates and, for a backward, dout) by owning shard: per owner its
 * token vectors, each token once, then its pairs' records, pairs and
 * vectors in token order. ep->pos gets each pair's ep_slot: where its
 * reply will lie in ep->answer. */
static int pack(lh_model *m, uint32_t kind, const int32_t *idx, int T, lh_errbuf *err) {
  struct lh_model_ep *ep = m->ep;
  int P = ep->P, r = m->cfg.latent, k = m->cfg.topk, El = m->e_local, E = m->cfg.experts;
  size_t n = (size_t)T * (size_t)k, vb = vector_bytes(kind, r);
  ep_slot *slot = grow_host(&ep->pos, n * sizeof(ep_slot) + 1);
  if (!slot) return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory");
  memset(ep->pairs_to, 0, (size_t)P * sizeof *ep->pairs_to);
  memset(ep->tokens_to, 0, (size_t)P * sizeof *ep->tokens_to);
  /* last[j]: the last token with a pair for rank j (pairs come in token
   * order, so a token's pairs for j follow one another). */
  size_t last[P];
  for (int j = 0; j < P; j++) last[j] = SIZE_MAX;
  for (size_t p = 0; p < n; p++) {
    if (idx[p] < 0 || idx[p] >= E)
      return lh_errbuf_set(err, LH_EMODEL_EXCHANGE, "expert exchange: pair %zu routes to expert %d of %d", p,
                           (int)idx[p], E);
    int owner = idx[p] / El;
    size_t t = p / (size_t)k;
    ep->pairs_to[owner]++;
    if (last[owner] != t) ep->tokens_to[owner]++, last[owner] = t;
  }
  /* Per owner: where its request starts in ep->send (bytes) and its
   * reply in ep->answer (floats); the next vector and pair to fill. */
  size_t vecs_at[P], pairs_at[P], reply_at[P], next_vec[P], next_pair[P];
  size_t bytes = 0, floats = 0;
  for (int j = 0; j < P; j++) {
    vecs_at[j] = bytes, pairs_at[j] = bytes + (size_t)ep->tokens_to[j] * vb;
    bytes += request_bytes(kind, r, ep->pairs_to[j], ep->tokens_to[j]);
    reply_at[j] = floats, floats += reply_bytes(kind, r, ep->pairs_to[j], ep->tokens_to[j]) / 4;
    next_vec[j] = next_pair[j] = 0, last[j] = SIZE_MAX;
  }
  if (!grow_host(&ep->send, bytes + 1)) return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory");
  const float *z = ep->hz.p, *g = ep->hg.p, *dout = ep->hd.p;
  unsigned char *send = ep->send.p;
  for (size_t p = 0; p < n; p++) {
    int owner = idx[p] / El;
    size_t t = p / (size_t)k;
    slot[p].first = last[owner] != t;
    if (slot[p].first) {
      unsigned char *tv = send + vecs_at[owner] + next_vec[owner]++ * vb;
      memcpy(tv, z + t * (size_t)r, (size_t)r * 4);
      if (kind == EP_BACKWARD) memcpy(tv + (size_t)r * 4, dout + t * (size_t)r, (size_t)r * 4);
      last[owner] = t;
    }
    uint32_t v = (uint32_t)(next_vec[owner] - 1);
    size_t q = next_pair[owner]++;
    unsigned char *rec = send + pairs_at[owner] + q * EP_PAIR_BYTES;
    int32_t e = idx[p] - owner * El;
    memcpy(rec, &e, 4);
    memcpy(rec + 4, &v, 4);
    memcpy(rec + 8, &g[p], 4);
    slot[p].vec = reply_at[owner] + (size_t)v * (size_t)r;
    slot[p].gate = reply_at[owner] + (size_t)ep->tokens_to[owner] * (size_t)r + q;
  }
  return 0;
}

static int ready(const lh_model *m, lh_errbuf *err) {
  if (m->shards > 1 && !m->ep)
    return lh_errbuf_set(err, LH_EMODEL_STATE, "expert shard %d of %d has no transport to the other shards",
                         m->shard, m->shards);
  return 0;
}

/* The asker's host copies of z (T,r), the gates (T,k) and dout (T,r). */
static int stage_inputs(lh_model *m, const float *z, const float *gates, const float *dout, int T,
                        lh_errbuf *err) {
  struct lh_model_ep *ep = m->ep;
  const lh_backend *be = m->be;
  size_t Tr = (size_t)T * (size_t)m->cfg.latent, Tk = (size_t)T * (size_t)m->cfg.topk;
  if (!grow_host(&ep->hz, Tr * 4 + 4) || !grow_host(&ep->hg, Tk * 4 + 4) ||
      !grow_host(&ep->hsum, (Tr + Tk) * 4 + 4) || (dout && !grow_host(&ep->hd, Tr * 4 + 4)))
    return lh_errbuf_set(err, LH_ENOMEM, "expert exchange: out of memory for %d tokens", T);
  int rc = be->download(be->context, ep->hz.p, z, Tr * 4);
  if (!rc) rc = be->download(be->context, ep->hg.p, gates, Tk * 4);
  if (!rc && dout) rc = be->download(be->context, ep->hd.p, dout, Tr * 4);
  return rc ? lh_errbuf_set(err, rc, "expert exchange: %s", lh_strerror(rc)) : 0;
}

int lh_model_ep_forward(lh_model *m, int l, float *out, const float *z, const int32_t *idx, const float *gates,
                        int T, lh_errbuf *err) {
  LH_TRY(ready(m, err));
  struct lh_model_ep *ep = m->ep;
  int r = m->cfg.latent, k = m->cfg.topk, all_done = 0;
  LH_TRY(stage_inputs(m, z, gates, NULL, T, err));
  LH_TRY(pack(m, EP_FORWARD, idx, T, err));
  LH_TRY(round_trip(m, EP_FORWARD, (uint32_t)l, 0, &all_done, err));
  /* out[t] = the owners' sums of t's gated outputs, each added at t's
   * first slot on its owner. */
  const float *ans = ep->answer.p;
  const ep_slot *slot = ep->pos.p;
  float *sum = ep->hsum.p;
  for (int t = 0; t < T; t++) {
    float *o = sum + (size_t)t * r;
    memset(o, 0, (size_t)r * 4);
    for (int j = 0; j < k; j++) {
      const ep_slot *s = &slot[(size_t)t * k + j];
      if (!s->first) continue;
      const float *y = ans + s->vec;
      for (int i = 0; i < r; i++) o[i] += y[i];
    }
  }
  int rc = m->be->upload(m->be->context, out, sum, (size_t)T * r * 4);
  return rc ? lh_errbuf_set(err, rc, "expert exchange: %s", lh_strerror(rc)) : 0;
}

int lh_model_ep_backward(lh_model *m, int l, float *dz, float *dgates, const float *dout, const float *z,
                         const int32_t *idx, const float *gates, int T, lh_errbuf *err) {
  LH_TRY(ready(m, err));
  struct lh_model_ep *ep = m->ep;
  const lh_backend *be = m->be;
  int r = m->cfg.latent, k = m->cfg.topk, all_done = 0;
  LH_TRY(stage_inputs(m, z, gates, dout, T, err));
  LH_TRY(pack(m, EP_BACKWARD, idx, T, err));
  LH_TRY(round_trip(m, EP_BACKWARD, (uint32_t)l, 0, &all_done, err));
  /* dz and dgates are added to in backend memory: through host copies. */
  size_t Tr = (size_t)T * r, Tk = (size_t)T * k;
  float *hdz = ep->hsum.p, *hdg = hdz + Tr;
  int rc = be->download(be->context, hdz, dz, Tr * 4);
  if (!rc) rc = be->download(be->context, hdg, dgates, Tk * 4);
  if (rc) return lh_errbuf_set(err, rc, "expert exchange: %s", lh_strerror(rc));
  /* z's gradient: the owners' sums over t's pairs, each added once; the
   * gates' per pair. */
  const float *ans = ep->answer.p;
  const ep_slot *slot = ep->pos.p;
  for (int t = 0; t < T; t++) {
    float *o = hdz + (size_t)t * r;
    for (int j = 0; j < k; j++) {
      const ep_slot *s = &slot[(size_t)t * k + j];
      if (s->first) {
        const float *y = ans + s->vec;
        for (int i = 0; i < r; i++) o[i] += y[i];
      }
      hdg[(size_t)t * k + j] += ans[s->gate];
    }
  }
  rc = be->upload(be->context, dz, hdz, Tr * 4);
  if (!rc) rc = be->upload(be->context, dgates, hdg, Tk * 4);
  return rc ? lh_errbuf_set(err, rc, "expert exchange: %s", lh_strerror(rc)) : 0;
}

int lh_model_experts_drain(lh_model *m, lh_errbuf *err) {
  if (!m) return lh_errbuf_set(err, LH_EINVAL, "expert exchange: NULL model");
  if (m->shards == 1) return 0;
  LH_TRY(ready(m, err));
  for (int all_done = 0; !all_done;) LH_TRY(round_trip(m, EP_NONE, 0, 1, &all_done, err));
  return 0;
}

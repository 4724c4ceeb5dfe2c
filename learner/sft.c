/* SFT: cross-entropy steps on the policy's tokens of demonstrations
 * (learner.h says what a step does), the loop of `longhaul sft` over them,
 * and the atomic checkpoint write. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "learner/internal.h"

struct lh_learner_sft {
  lh_model *m;
  lh_learner_config cfg;
  uint64_t total_steps, warmup, step, skipped;
  lh_model_cache *cache;
  lh_model_balancer *balancer;
  int32_t *tokens, *targets, *offsets;
  lh_model_image *images;
  size_t cap_tokens, cap_seq, cap_images;
};

int lh_learner_sft_new(lh_model *m, const lh_learner_config *cfg, uint64_t total_steps,
                       lh_learner_sft **out, lh_errbuf *err) {
  if (!m || !cfg || !out || total_steps < 1)
    return lh_errbuf_set(err, LH_EINVAL, "sft: needs a model, a config and total_steps >= 1");
  *out = NULL;
  lh_learner_sft *s = calloc(1, sizeof *s);
  if (!s) return lh_errbuf_set(err, LH_ENOMEM, "sft: out of memory");
  s->m = m;
  s->cfg = *cfg;
  s->total_steps = total_steps;
  s->warmup = cfg->warmup_steps < total_steps ? cfg->warmup_steps : total_steps;
  int rc = lh_model_grads(m) ? 0 : lh_model_enable_training(m);
  if (!rc) rc = lh_model_balancer_new(lh_model_get_config(m), &s->balancer);
  if (rc) {
    lh_learner_sft_free(s);
    return lh_errbuf_set(err, rc, "sft: cannot set up training: %s", lh_strerror(rc));
  }
  *out = s;
  return 0;
}

void lh_learner_sft_free(lh_learner_sft *s) {
  if (!s) return;
  lh_model_cache_free(s->cache);
  lh_model_balancer_free(s->balancer);
  free(s->tokens);
  free(s->targets);
  free(s->offsets);
  free(s->images);
  free(s);
}

uint64_t lh_learner_sft_skipped(const lh_learner_sft *s) { return s ? s->skipped : 0; }

/* Packs the episodes one after the other; a target is the next token of
 * the same episode when that token is the policy's. */
static int pack(lh_learner_sft *s, const lh_learner_sft_episode *eps, size_t n, size_t *T_out,
                size_t *targets_out, int *images_out, lh_errbuf *err) {
  size_t T = 0, n_img = 0, n_targets = 0;
  for (size_t e = 0; e < n; e++) {
    if (!eps[e].tokens || !eps[e].mask || eps[e].n_tokens < 1 || eps[e].n_images < 0 ||
        (eps[e].n_images && !eps[e].images))
      return lh_errbuf_set(err, LH_EINVAL, "sft: episode %zu has no tokens, no mask or bad images", e);
    T += eps[e].n_tokens;
    n_img += (size_t)eps[e].n_images;
  }
  if (T > INT32_MAX) return lh_errbuf_set(err, LH_ERANGE, "sft: %zu tokens do not fit one batch", T);
  if (T > s->cap_tokens) {
    int32_t *tok = realloc(s->tokens, 2 * T * sizeof *tok);
    if (tok) s->tokens = tok;
    int32_t *tgt = tok ? realloc(s->targets, 2 * T * sizeof *tgt) : NULL;
    if (!tgt) return lh_errbuf_set(err, LH_ENOMEM, "sft: out of memory packing %zu tokens", T);
    s->targets = tgt;
    s->cap_tokens = 2 * T;
  }
  if (lh_reserve(&s->offsets, &s->cap_seq, n + 1, sizeof *s->offsets, 64) ||
      lh_reserve(&s->images, &s->cap_images, n_img ? n_img : 1, sizeof *s->images, 64))
    return lh_errbuf_set(err, LH_ENOMEM, "sft: out of memory packing %zu episodes", n);
  size_t at = 0, k = 0;
  for (size_t e = 0; e < n; e++) {
    const lh_learner_sft_episode *ep = &eps[e];
    s->offsets[e] = (int32_t)at;
    memcpy(s->tokens + at, ep->tokens, ep->n_tokens * sizeof(int32_t));
    for (size_t t = 0; t < ep->n_tokens; t++) {
      int trained = t + 1 < ep->n_tokens && ep->mask[t + 1];
      s->targets[at + t] = trained ? ep->tokens[t + 1] : -1;
      n_targets += (size_t)trained;
    }
    for (int i = 0; i < ep->n_images; i++) {
      s->images[k] = ep->images[i];
      s->images[k++].at += (int)at;
    }
    at += ep->n_tokens;
  }
  s->offsets[n] = (int32_t)at;
  *T_out = T;
  *targets_out = n_targets;
  *images_out = (int)k;
  return 0;
}

int lh_learner_sft_step(lh_learner_sft *s, const lh_learner_sft_episode *eps, size_t n,
                        lh_learner_sft_stats *stats, lh_errbuf *err) {
  if (!s || !eps || n < 1) return lh_errbuf_set(err, LH_EINVAL, "sft: a step needs episodes");
  if (n > INT32_MAX - 1) return lh_errbuf_set(err, LH_ERANGE, "sft: too many episodes");
  size_t T = 0, n_targets = 0;
  int n_images = 0;
  LH_TRY(pack(s, eps, n, &T, &n_targets, &n_images, err));
  if (!n_targets)
    return lh_errbuf_set(err, LH_EINVAL, "sft: the batch has no policy tokens to train on");
  lh_model_batch b = {.n_tokens = (int)T,
                      .tokens = s->tokens,
                      .targets = s->targets,
                      .n_seq = (int)n,
                      .seq_offsets = s->offsets,
                      .n_images = n_images,
                      .images = s->images};
  double loss = 0;
  LH_TRY(lh_model_zero_grads(s->m));
  LH_TRY(lh_model_forward(s->m, &b, &s->cache, NULL, &loss, NULL, err));
  LH_TRY(lh_model_backward(s->m, s->cache, NULL, NULL, err));
  const lh_backend *be = lh_model_backend(s->m);
  double sq = 0;
  LH_TRY(be->sum_squares(be->context, &sq, lh_model_grads(s->m), lh_model_n_floats(s->m)));
  double norm = sqrt(sq), lr = lh_learner_lr_at(s->cfg.lr, s->warmup, s->total_steps, s->step);
  lh_learner_sft_stats st = {.step = s->step, .loss = loss, .lr = lr, .grad_norm = norm,
                             .tokens = T, .targets = n_targets};
  if (!isfinite(loss) || !isfinite(norm)) {
    s->skipped++;
    st.skipped = 1;
  } else {
    lh_adamw_params p = {.lr = (float)lr,
                         .beta1 = 0.9f,
                         .beta2 = 0.95f,
                         .eps = 1e-8f,
                         .weight_decay = (float)s->cfg.weight_decay,
                         .grad_scale = norm > s->cfg.grad_clip ? (float)(s->cfg.grad_clip / norm) : 1.0f,
                         .step = (int64_t)(s->step - s->skipped + 1)};
    LH_TRY(lh_model_adamw_step(s->m, &p));
    LH_TRY(lh_model_balancer_observe_cache(s->balancer, s->m, s->cache));
    LH_TRY(lh_model_balancer_step_model(s->balancer, s->m));
  }
  s->step++;
  if (stats) *stats = st;
  return 0;
}

int lh_learner_sft_train(lh_model *m, const lh_learner_config *cfg, const lh_learner_sft_loop *loop,
                         lh_learner_sft_result *res, lh_errbuf *err) {
  if (!m || !cfg || !loop || !res || !loop->demos || loop->steps < 1 || loop->batch < 1 ||
      (loop->eval_every && !loop->evaluate))
    return lh_errbuf_set(err, LH_EINVAL, "sft: the loop needs a model, a config, demonstrations, steps and a batch");
  *res = (lh_learner_sft_result){.taken = loop->steps};
  size_t B = loop->batch;
  lh_learner_sft_episode *eps = calloc(B, sizeof *eps);
  lh_learner_sft *sft = NULL;
  int rc = eps ? lh_learner_sft_new(m, cfg, loop->steps, &sft, err) : lh_errbuf_set(err, LH_ENOMEM, "out of memory");
  lh_learner_sft_progress p = {0};
  int64_t t0 = lh_now_ns();
  for (uint64_t step = 0; !rc && step < loop->steps; step++) {
    lh_learner_sft_stats st;
    rc = loop->demos(loop->ctx, eps, B, err);
    if (!rc) rc = lh_learner_sft_step(sft, eps, B, &st, err);
    if (rc) break;
    p.step = step + 1;
    p.tokens += st.tokens;
    p.elapsed_s = (double)(lh_now_ns() - t0) / 1e9;
    if (loop->on_step) loop->on_step(loop->ctx, &st, &p);
    if (!loop->eval_every || p.step % loop->eval_every) continue;
    double rate = 0;
    rc = loop->evaluate(loop->ctx, p.step, &rate, err);
    res->evaluated_at = p.step;
    p.ev_step[0] = p.ev_step[1], p.ev_rate[0] = p.ev_rate[1];
    p.ev_step[1] = (double)p.step, p.ev_rate[1] = rate;
    p.evals++;
    if (!rc && loop->target > 0 && rate >= loop->target) {
      *res = (lh_learner_sft_result){.taken = p.step, .evaluated_at = p.step, .reached = 1, .rate = rate};
      break;
    }
  }
  res->tokens = p.tokens;
  res->elapsed_s = (double)(lh_now_ns() - t0) / 1e9;
  res->skipped = lh_learner_sft_skipped(sft);
  free(eps);
  lh_learner_sft_free(sft);
  return rc;
}

int lh_learner_sft_save(const lh_model *m, const char *dir, lh_errbuf *err) {
  if (!m || !dir || !*dir) return lh_errbuf_set(err, LH_EINVAL, "sft: save needs a model and a directory");
  if (mkdir(dir, 0777) && errno != EEXIST)
    return lh_errbuf_set(err, LH_EIO, "sft: cannot create %s: %s", dir, strerror(errno));
  size_t n = strlen(dir) + 64;
  char *tmp = malloc(n), *from = malloc(n + 32), *to = malloc(n + 32);
  int rc = 0;
  if (!tmp || !from || !to) rc = lh_errbuf_set(err, LH_ENOMEM, "sft: out of memory");
  if (!rc) {
    snprintf(tmp, n, "%s/.sft-tmp-%ld", dir, (long)getpid());
    snprintf(from, n + 32, "%s/model.safetensors", tmp);
    snprintf(to, n + 32, "%s/model.safetensors", dir);
    rc = lh_model_save(m, tmp, err);
    if (!rc && rename(from, to))
      rc = lh_errbuf_set(err, LH_EIO, "sft: cannot rename %s to %s: %s", from, to, strerror(errno));
    unlink(from);
    rmdir(tmp);
  }
  free(tmp);
  free(from);
  free(to);
  return rc;
}

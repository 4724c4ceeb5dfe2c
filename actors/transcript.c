/* Transcripts: an episode as the policy's token stream (actors.h says the
 * format), built from the expert's demonstrations for SFT and from the
 * policy's own greedy decode for evaluation, through the same functions, so
 * that what SFT trains on is exactly what the actor plays. */
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "actors/internal.h"

struct lh_actors_transcript {
  int patch, max_patches;  /* max_patches 0: no bound */
  /* Positions base .. len-1 are kept, at tokens[0 ..); lh_actors_transcript_forget
   * moves base on. */
  int32_t *tokens;
  uint8_t *mask;
  size_t base, len, cap;
  lh_model_image *images;  /* the kept images; .at is absolute */
  float **pixels;  /* owned copies, one per image */
  int n_images, images_cap, images_base;
};

lh_actors_transcript *lh_actors_transcript_new(int patch, lh_errbuf *err) {
  if (patch < 1) {
    lh_errbuf_set(err, LH_EINVAL, "transcript: patch %d must be >= 1", patch);
    return NULL;
  }
  lh_actors_transcript *t = calloc(1, sizeof *t);
  if (!t) {
    lh_errbuf_set(err, LH_ENOMEM, "transcript: out of memory");
    return NULL;
  }
  t->patch = patch;
  return t;
}

void lh_actors_transcript_clear(lh_actors_transcript *t) {
  if (!t) return;
  for (int i = 0; i < t->n_images; i++) free(t->pixels[i]);
  t->n_images = 0;
  t->images_base = 0;
  t->len = 0;
  t->base = 0;
}

void lh_actors_transcript_free(lh_actors_transcript *t) {
  if (!t) return;
  lh_actors_transcript_clear(t);
  free(t->tokens);
  free(t->mask);
  free(t->images);
  free(t->pixels);
  free(t);
}

static int reserve(lh_actors_transcript *t, size_t more, lh_errbuf *err) {
  size_t kept = t->len - t->base;
  if (kept + more <= t->cap) return 0;
  size_t cap = lh_grow_cap(t->cap, kept + more, 1024);
  int32_t *tok = cap ? realloc(t->tokens, cap * sizeof *tok) : NULL;
  if (tok) t->tokens = tok;
  uint8_t *mask = tok ? realloc(t->mask, cap) : NULL;
  if (!mask) return lh_errbuf_set(err, LH_ENOMEM, "transcript: out of memory at %zu tokens", cap);
  t->mask = mask;
  t->cap = cap;
  return 0;
}

static int push(lh_actors_transcript *t, int32_t token, uint8_t mask, lh_errbuf *err) {
  LH_TRY(reserve(t, 1, err));
  t->tokens[t->len - t->base] = token;
  t->mask[t->len++ - t->base] = mask;
  return 0;
}

/* Text as tokens with the given mask; markup says whether marker spellings
 * become special tokens (actions) or stay bytes (observations). */
static int push_text(lh_actors_transcript *t, const char *text, size_t bytes, int markup,
                     uint8_t mask, lh_errbuf *err) {
  if (!bytes) return 0;
  if (!text) return lh_errbuf_set(err, LH_EINVAL, "transcript: NULL text of %zu bytes", bytes);
  LH_TRY(reserve(t, bytes, err));
  size_t n = 0, kept = t->len - t->base;
  LH_TRY(lh_tok_encode(text, bytes, markup, t->tokens + kept, t->cap - kept, &n));
  memset(t->mask + kept, mask, n);
  t->len += n;
  return 0;
}

/* An image of any size goes in padded with black on the right and at the
 * bottom to the next multiple of the patch (docs/model.md "Inputs"):
 * the pixels kept, and the segment's copy, are the padded image, so the
 * learner sees what the actor's model saw. LH_EACTORS_IMAGE when it has no
 * pixels, 1 or 3 channels, or more patches than max_patches. */
static int push_image(lh_actors_transcript *t, const lh_env_image *im, lh_errbuf *err) {
  int p = t->patch;
  if (!im->pixels || (im->channels != 1 && im->channels != 3) || !im->width || !im->height ||
      im->width > 65536 || im->height > 65536)
    return lh_errbuf_set(err, LH_EACTORS_IMAGE,
                         "transcript: image %ux%u with %u channels: need pixels, 1 or 3 channels and "
                         "sides in 1..65536",
                         im->width, im->height, im->channels);
  uint32_t pw = (im->width + (uint32_t)p - 1) / (uint32_t)p, ph = (im->height + (uint32_t)p - 1) / (uint32_t)p;
  size_t patches = (size_t)pw * ph;
  if (t->max_patches > 0 && patches > (size_t)t->max_patches)
    return lh_errbuf_set(err, LH_EACTORS_IMAGE,
                         "transcript: image %ux%u is %zu patches of %dx%d, over the model's max_patches %d",
                         im->width, im->height, patches, p, p, t->max_patches);
  if (t->n_images == t->images_cap) {
    int cap = t->images_cap ? 2 * t->images_cap : 4;
    lh_model_image *imgs = realloc(t->images, (size_t)cap * sizeof *imgs);
    if (imgs) t->images = imgs;
    float **px = imgs ? realloc(t->pixels, (size_t)cap * sizeof *px) : NULL;
    if (!px) return lh_errbuf_set(err, LH_ENOMEM, "transcript: out of memory for images");
    t->pixels = px;
    t->images_cap = cap;
  }
  size_t W = (size_t)pw * (size_t)p, H = (size_t)ph * (size_t)p;
  float *f = calloc(W * H * 3, sizeof *f);
  if (!f) return lh_errbuf_set(err, LH_ENOMEM, "transcript: out of memory for an image");
  for (size_t y = 0; y < im->height; y++)
    lh_model_pixels_from_u8(im->pixels + y * im->width * im->channels, im->width, im->channels, f + y * W * 3);
  int rc = push(t, LH_TOK_IMG, 0, err);
  if (!rc) rc = reserve(t, patches, err);
  if (rc) {
    free(f);
    return rc;
  }
  t->pixels[t->n_images] = f;
  t->images[t->n_images++] = (lh_model_image){.at = (int)t->len, .height = (int)H, .width = (int)W, .pixels = f};
  for (size_t i = 0; i < patches; i++) {
    t->tokens[t->len - t->base] = LH_TOK_PAD;
    t->mask[t->len++ - t->base] = 0;
  }
  return 0;
}

static int push_obs_body(lh_actors_transcript *t, const lh_env_obs *obs, lh_errbuf *err) {
  LH_TRY(push_text(t, obs->text, obs->text_bytes, 0, 0, err));
  for (uint32_t i = 0; i < obs->image_count; i++) LH_TRY(push_image(t, &obs->images[i], err));
  return 0;
}

int lh_actors_transcript_begin(lh_actors_transcript *t, const lh_env_obs *obs, lh_errbuf *err) {
  if (!t || !obs) return lh_errbuf_set(err, LH_EINVAL, "transcript: begin needs t and obs");
  lh_actors_transcript_clear(t);
  LH_TRY(push(t, LH_TOK_BOS, 0, err));
  return push_obs_body(t, obs, err);
}

int lh_actors_transcript_action(lh_actors_transcript *t, const char *text, size_t bytes,
                                lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "transcript: NULL transcript");
  return push_text(t, text, bytes, 1, 1, err);
}

int lh_actors_transcript_policy_token(lh_actors_transcript *t, int32_t token, lh_errbuf *err) {
  return lh_actors_transcript_token(t, token, 1, err);
}

int lh_actors_transcript_token(lh_actors_transcript *t, int32_t token, uint8_t mask, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "transcript: NULL transcript");
  if (token < 0 || token >= LH_TOK_VOCAB)
    return lh_errbuf_set(err, LH_EMODEL_TOKEN, "transcript: token %d outside [0, %d)", token, LH_TOK_VOCAB);
  return push(t, token, mask, err);
}

int lh_actors_transcript_text(lh_actors_transcript *t, const char *text, size_t bytes, int markup, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "transcript: NULL transcript");
  return push_text(t, text, bytes, markup, 0, err);
}

int lh_actors_transcript_observation(lh_actors_transcript *t, const lh_env_obs *obs,
                                     lh_errbuf *err) {
  if (!t || !obs) return lh_errbuf_set(err, LH_EINVAL, "transcript: observation needs t and obs");
  LH_TRY(push(t, LH_TOK_OBS, 0, err));
  LH_TRY(push_obs_body(t, obs, err));
  return push(t, LH_TOK_OBS_END, 0, err);
}

void lh_actors_transcript_set_max_patches(lh_actors_transcript *t, int max_patches) {
  if (t) t->max_patches = max_patches > 0 ? max_patches : 0;
}

size_t lh_actors_transcript_first(const lh_actors_transcript *t) { return t ? t->base : 0; }
int lh_actors_transcript_first_image(const lh_actors_transcript *t) { return t ? t->images_base : 0; }

void lh_actors_transcript_forget(lh_actors_transcript *t, size_t upto) {
  if (!t) return;
  if (upto > t->len) upto = t->len;
  if (upto <= t->base) return;
  size_t drop = upto - t->base, kept = t->len - upto;
  memmove(t->tokens, t->tokens + drop, kept * sizeof *t->tokens);
  memmove(t->mask, t->mask + drop, kept);
  t->base = upto;
  int gone = 0;
  while (gone < t->n_images) {
    const lh_model_image *im = &t->images[gone];
    size_t end = (size_t)im->at + (size_t)(im->height / t->patch) * (size_t)(im->width / t->patch);
    if (end > upto) break;
    free(t->pixels[gone++]);
  }
  if (gone) {
    memmove(t->images, t->images + gone, (size_t)(t->n_images - gone) * sizeof *t->images);
    memmove(t->pixels, t->pixels + gone, (size_t)(t->n_images - gone) * sizeof *t->pixels);
    t->n_images -= gone;
    t->images_base += gone;
  }
  /* A long observation grew the buffers; what is kept now is small, so
   * they shrink back (a failed shrink keeps the larger block). */
  if (t->cap > 4096 && kept < t->cap / 8) {
    size_t cap = kept * 2 > 1024 ? kept * 2 : 1024;
    int32_t *tok = realloc(t->tokens, cap * sizeof *tok);
    if (tok) {
      t->tokens = tok;
      uint8_t *mask = realloc(t->mask, cap);
      if (mask) t->mask = mask;  /* else mask keeps its larger block */
      t->cap = cap;
    }
  }
}

size_t lh_actors_transcript_len(const lh_actors_transcript *t) { return t ? t->len : 0; }
const int32_t *lh_actors_transcript_tokens(const lh_actors_transcript *t) {
  return t ? t->tokens : NULL;
}
const uint8_t *lh_actors_transcript_mask(const lh_actors_transcript *t) {
  return t ? t->mask : NULL;
}
int lh_actors_transcript_n_images(const lh_actors_transcript *t) { return t ? t->n_images : 0; }
const lh_model_image *lh_actors_transcript_images(const lh_actors_transcript *t) {
  return t ? t->images : NULL;
}

int lh_actors_transcript_expert(lh_env *env, uint64_t seed, lh_actors_transcript *t,
                                lh_env_outcome *outcome, lh_errbuf *err) {
  if (!env || !t) return lh_errbuf_set(err, LH_EINVAL, "transcript: expert needs env and t");
  lh_env_obs obs;
  LH_TRY(lh_env_reset(env, seed, &obs, err));
  LH_TRY(lh_actors_transcript_begin(t, &obs, err));
  for (;;) {
    const char *action = NULL;
    LH_TRY(lh_env_expert(env, &action, err));
    size_t bytes = strlen(action);
    LH_TRY(lh_actors_transcript_action(t, action, bytes, err));
    lh_env_result res;
    memset(&res, 0, sizeof res);
    LH_TRY(lh_env_step(env, action, bytes, &res, err));
    if (res.done) {
      if (outcome) *outcome = res.outcome;
      return 0;
    }
    LH_TRY(lh_actors_transcript_observation(t, &res.obs, err));
  }
}

/* ---- greedy evaluation ---------------------------------------------------- */

typedef struct {
  int active;
  uint64_t seed;
  lh_actors_rng rng;    /* sampled evaluation: seeded by the episode's seed */
  lh_actors_transcript *t;
  size_t action_start;  /* where the action being decoded began */
} eval_slot;

typedef struct {
  lh_model *model;
  lh_env *const *envs;
  lh_model_decoder *dec;
  const lh_actors_eval_params *p;
  const uint64_t *seeds;
  size_t n, next;
  size_t successes, shown;
  float *logp;  /* (n_envs, vocab) next-token log-probabilities */
  int vocab;
  char *text;
  size_t text_cap;
} eval_run;

/* Feeds the transcript's tokens from position from on (with their images)
 * to row b and keeps the next-token distribution. */
static int feed(eval_run *r, int b, eval_slot *s, size_t from, lh_errbuf *err) {
  const lh_actors_transcript *t = s->t;
  lh_model_image small[16], *imgs = small;
  int first = t->n_images, n_imgs;
  while (first > 0 && (size_t)t->images[first - 1].at >= from) first--;
  n_imgs = t->n_images - first;
  if (n_imgs > (int)(sizeof small / sizeof small[0]) && !(imgs = malloc((size_t)n_imgs * sizeof *imgs)))
    return lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory for %d images", n_imgs);
  for (int i = 0; i < n_imgs; i++) {
    imgs[i] = t->images[first + i];
    imgs[i].at -= (int)from;
  }
  int rc = lh_model_prefill(r->dec, b, t->tokens + from, (int)(t->len - from), imgs, n_imgs,
                            r->logp + (size_t)b * r->vocab, err);
  if (imgs != small) free(imgs);
  return rc;
}

static int refused(eval_run *r, eval_slot *s, int rc, const lh_errbuf *why, lh_errbuf *err);

/* Starts the next seed in slot b, or leaves it idle when none is left (an
 * episode whose first observation is refused ends at once). */
static int start(eval_run *r, int b, eval_slot *s, lh_errbuf *err) {
  for (;;) {
    s->active = 0;
    if (r->next >= r->n) return 0;
    lh_env_obs obs;
    s->seed = r->seeds[r->next++];
    lh_actors_rng_seed(&s->rng, s->seed ^ 0x6576616c73616d70ull);
    LH_TRY(lh_env_reset(r->envs[b], s->seed, &obs, err));
    lh_errbuf why = {0};
    int rc = lh_actors_transcript_begin(s->t, &obs, &why);
    if (rc) {
      LH_TRY(refused(r, s, rc, &why, err));
      continue;
    }
    LH_TRY(lh_model_decoder_reset(r->dec, b));
    LH_TRY(feed(r, b, s, 0, err));
    s->action_start = s->t->len;
    s->active = 1;
    return 0;
  }
}

/* The action's tokens as the text lh_env_step takes (markers spelled out). */
/* Tokens as text (markers spelled out) into r->text, grown as needed. */
static int decode_text(eval_run *r, const int32_t *ids, size_t n, size_t *bytes, lh_errbuf *err) {
  for (;;) {
    int rc = lh_tok_decode(ids, n, r->text, r->text_cap, bytes, err);
    if (rc != LH_ERANGE) return rc;
    size_t cap = *bytes + 1;
    char *text = realloc(r->text, cap);
    if (!text) return lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory for %zu bytes of text", cap);
    r->text = text;
    r->text_cap = cap;
  }
}

static int action_text(eval_run *r, const eval_slot *s, size_t *bytes, lh_errbuf *err) {
  return decode_text(r, s->t->tokens + s->action_start, s->t->len - s->action_start, bytes, err);
}

/* Writes a finished episode to p->show (the first show_count of them): the
 * whole transcript as text, so a user sees what the policy did. The
 * episode's action text is spent by then, so r->text holds it. */
static int show(eval_run *r, const eval_slot *s, const char *outcome, lh_errbuf *err) {
  if (!r->p->show || r->shown >= r->p->show_count) return 0;
  r->shown++;
  size_t bytes = 0;
  LH_TRY(decode_text(r, s->t->tokens, s->t->len, &bytes, err));
  fprintf(r->p->show, "-- seed %llu: %s, %zu tokens\n%.*s\n", (unsigned long long)s->seed, outcome,
          s->t->len, (int)bytes, r->text);
  return 0;
}

/* An observation the transcript refuses (an image it cannot take, e.g.
 * over the model's max_patches) ends that episode, not solved, with the
 * reason in what is shown; the evaluation goes on, as an actor does. */
static int refused(eval_run *r, eval_slot *s, int rc, const lh_errbuf *why, lh_errbuf *err) {
  if (rc != LH_EACTORS_IMAGE) return lh_errbuf_set(err, rc, "%s", why->msg);
  LH_WARN("eval", "seed %llu ends, not solved: %s", (unsigned long long)s->seed, why->msg);
  char outcome[sizeof why->msg + 16];
  snprintf(outcome, sizeof outcome, "ended: %s", why->msg);
  return show(r, s, outcome, err);
}

/* One sampled token for slot b: either it continues the action (returns 1:
 * decode it with the others) or it ended the action, which is stepped, and
 * the slot has been fed its observation or moved to the next episode. */
static int advance(eval_run *r, int b, eval_slot *s, int32_t tok, lh_errbuf *err) {
  LH_TRY(lh_actors_transcript_policy_token(s->t, tok, err));
  size_t action_len = s->t->len - s->action_start;
  if (tok != LH_TOK_CALL_END && tok != LH_TOK_EOS) {
    if (s->t->len >= (size_t)r->p->max_context || action_len >= (size_t)r->p->max_action_tokens) {
      LH_TRY(show(r, s, "truncated", err));
      return start(r, b, s, err);  /* truncated: not a success */
    }
    return 1;
  }
  size_t bytes = 0;
  LH_TRY(action_text(r, s, &bytes, err));
  lh_env_result res;
  memset(&res, 0, sizeof res);
  LH_TRY(lh_env_step(r->envs[b], r->text, bytes, &res, err));
  if (res.done) {
    if (res.outcome == LH_ENV_SUCCESS) r->successes++;
    LH_TRY(show(r, s, res.outcome == LH_ENV_SUCCESS ? "success" : "not solved", err));
    return start(r, b, s, err);
  }
  size_t from = s->t->len - 1;  /* the sampled token has not been fed yet */
  lh_errbuf why = {0};
  int rc = lh_actors_transcript_observation(s->t, &res.obs, &why);
  if (rc) {
    LH_TRY(refused(r, s, rc, &why, err));
    return start(r, b, s, err);
  }
  if (s->t->len >= (size_t)r->p->max_context) {
    LH_TRY(show(r, s, "truncated", err));
    return start(r, b, s, err);
  }
  LH_TRY(feed(r, b, s, from, err));
  s->action_start = s->t->len;
  return 0;
}

int lh_actors_eval(lh_model *model, lh_env *const *envs, int n_envs, const uint64_t *seeds,
                          size_t n, const lh_actors_eval_params *p, size_t *successes,
                          lh_errbuf *err) {
  if (!model || !envs || n_envs < 1 || (n && !seeds) || !p || !successes || p->max_context < 2 ||
      p->max_action_tokens < 1)
    return lh_errbuf_set(err, LH_EINVAL,
                         "eval: needs a model, n_envs >= 1 environments, seeds, max_context >= 2 "
                         "and max_action_tokens >= 1");
  const lh_model_config *cfg = lh_model_get_config(model);
  eval_run r = {.model = model, .envs = envs, .p = p, .seeds = seeds, .n = n, .vocab = cfg->vocab};
  eval_slot *slots = calloc((size_t)n_envs, sizeof *slots);
  int32_t *rows = malloc((size_t)n_envs * sizeof *rows), *toks = malloc((size_t)n_envs * sizeof *toks);
  float *row_logp = malloc((size_t)n_envs * cfg->vocab * sizeof *row_logp);
  r.logp = malloc((size_t)n_envs * cfg->vocab * sizeof *r.logp);
  lh_actors_sampler *sampler = lh_actors_sampler_new((uint32_t)cfg->vocab, p->temperature, 1.0f, err);
  int rc = 0;
  if (!slots || !rows || !toks || !row_logp || !r.logp || !sampler)
    rc = sampler ? lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory") : LH_EINVAL;
  if (!rc) rc = lh_model_decoder_new(model, n_envs, &r.dec, err);
  for (int b = 0; !rc && b < n_envs; b++)
    if (!(slots[b].t = lh_actors_transcript_new(cfg->patch, err))) rc = LH_ENOMEM;
    else lh_actors_transcript_set_max_patches(slots[b].t, cfg->max_patches);
  for (int b = 0; !rc && b < n_envs; b++) rc = start(&r, b, &slots[b], err);
  while (!rc) {
    int n_rows = 0, any = 0;
    for (int b = 0; !rc && b < n_envs; b++) {
      if (!slots[b].active) continue;
      any = 1;
      lh_actors_sample smp;
      rc = lh_actors_sampler_sample(sampler, r.logp + (size_t)b * cfg->vocab,
                                    p->temperature > 0 ? &slots[b].rng : NULL, &smp, err);
      if (rc) break;
      int more = advance(&r, b, &slots[b], (int32_t)smp.token, err);
      if (more < 0) rc = more;
      else if (more == 1) {
        rows[n_rows] = b;
        toks[n_rows++] = (int32_t)smp.token;
      }
    }
    if (rc || !any) break;
    if (n_rows) {
      rc = lh_model_decode_step_rows(r.dec, rows, n_rows, toks, row_logp, NULL, err);
      for (int i = 0; !rc && i < n_rows; i++)
        memcpy(r.logp + (size_t)rows[i] * cfg->vocab, row_logp + (size_t)i * cfg->vocab,
               (size_t)cfg->vocab * sizeof(float));
    }
  }
  if (!rc) *successes = r.successes;
  for (int b = 0; slots && b < n_envs; b++) lh_actors_transcript_free(slots[b].t);
  lh_model_decoder_free(r.dec);
  lh_actors_sampler_free(sampler);
  free(slots);
  free(rows);
  free(toks);
  free(row_logp);
  free(r.logp);
  free(r.text);
  return rc;
}

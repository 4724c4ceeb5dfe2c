/* actors: the episode runner, B episodes on one batched decoder.
 *
 * Each row is one episode in one of three states: free (no episode), on
 * the policy's turn (it holds the next-token distribution, or a token still
 * to feed), or waiting for its environment. The transcript (transcript.c)
 * is the one place that turns observations and actions into tokens; the
 * runner feeds what it appended since the last feed to the model (prefill
 * for observations, one decode step per sampled token) and to the
 * episode's segmenter. A group's shared prefix is runner_share.c's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "actors/runner_internal.h"
#include "proto/wire.h"

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t v[2] = {a, b};
  return lh_hash64(v, sizeof v, 0x6c68616374726964ull);
}

void lh_actors_runner_free(lh_actors_runner *r) {
  if (!r) return;
  for (uint32_t b = 0; r->rows && b < r->cfg.batch; b++) {
    lh_actors_row *w = &r->rows[b];
    lh_env_free(w->env);
    lh_actors_transcript_free(w->tr);
    lh_actors_segmenter_free(w->seg);
    free(w->logp);
    free(w->behavior);
    free(w->version);
    free(w->experts);
  }
  free(r->rows);
  for (uint32_t b = 0; r->shares && b <= r->cfg.batch; b++) {
    free(r->shares[b].state);
    free(r->shares[b].logp);
  }
  free(r->shares);
  for (size_t i = 0; i < r->q_n; i++) {
    lh_actors_queue_item *it = &r->q[(r->q_head + i) % r->q_cap];
    lh_actors_segment_free(it->seg);
    lh_actors_episode_end_free(it->end);
  }
  free(r->q);
  for (size_t i = 0; r->opt_strings && i < 2 * r->n_opts; i++) free(r->opt_strings[i]);
  free(r->opt_strings);
  free(r->opts);
  free(r->sized_opts);
  lh_env_hub_free(r->own_hub);
  lh_model_decoder_free(r->dec);
  lh_actors_sampler_free(r->sampler);
  free(r->state);
  free(r->image_bytes);
  free(r->dec_rows);
  free(r->dec_tokens);
  free(r->dec_logp);
  free(r->dec_experts);
  free(r->one_experts);
  free(r->actor);
  free(r->env_name);
  free(r->stage_option);
  free(r);
}

int lh_actors_runner_new(lh_model *model, const lh_actors_runner_config *cfg, lh_actors_runner **out,
                         lh_errbuf *err) {
  if (out) *out = NULL;
  if (!model || !cfg || !out) return lh_errbuf_set(err, LH_EINVAL, "runner: NULL model, config or out");
  if (cfg->batch < 1 || cfg->batch > 65536 || cfg->group_size < 1)
    return lh_errbuf_set(err, LH_ECONFIG, "runner: batch=%u must be in 1..65536 and group_size=%u at least 1",
                         cfg->batch, cfg->group_size);
  if (cfg->max_context == 1)
    return lh_errbuf_set(err, LH_ECONFIG, "runner: max_context=1 leaves no room for a token after <bos>");
  if (!cfg->env || !*cfg->env) return lh_errbuf_set(err, LH_ECONFIG, "runner: no environment name");
  lh_actors_runner *r = calloc(1, sizeof *r);
  if (!r) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory");
  r->cfg = *cfg;
  r->window = UINT32_MAX;  /* no back-pressure until a learner says so */
  r->model = model;
  const lh_model_config *mc = lh_model_get_config(model);
  r->vocab = mc->vocab;
  r->record = cfg->record_routing != 0;
  r->LK = (size_t)mc->layers * mc->topk;
  int rc = 0;
  r->actor = lh_strdup0(cfg->actor);
  r->env_name = lh_strdup0(cfg->env);
  r->stage_option = lh_strdup0(cfg->stage_option);
  r->cfg.actor = r->actor;
  r->cfg.env = r->env_name;
  r->cfg.stage_option = r->stage_option;
  if (!r->stage_option) goto oom;
  /* Options: the caller's, plus max_steps when set (the env wrapper counts
   * steps against it and ends the episode as truncated). */
  size_t n_opts = cfg->n_env_options + (cfg->max_steps ? 1 : 0);
  r->opts = calloc(n_opts + 1, sizeof *r->opts);
  r->sized_opts = calloc(n_opts + 1, sizeof *r->sized_opts);
  r->opt_strings = calloc(2 * n_opts + 1, sizeof *r->opt_strings);
  if (!r->actor || !r->env_name || !r->opts || !r->sized_opts || !r->opt_strings) goto oom;
  r->n_opts = n_opts;
  for (size_t i = 0; i < cfg->n_env_options; i++) {
    r->opt_strings[2 * i] = lh_strdup0(cfg->env_options[i].key);
    r->opt_strings[2 * i + 1] = lh_strdup0(cfg->env_options[i].value);
    if (!r->opt_strings[2 * i] || !r->opt_strings[2 * i + 1]) goto oom;
    r->opts[i] = (lh_env_option){r->opt_strings[2 * i], r->opt_strings[2 * i + 1]};
  }
  if (cfg->max_steps) {
    char buf[32];
    snprintf(buf, sizeof buf, "%u", cfg->max_steps);
    size_t i = cfg->n_env_options;
    r->opt_strings[2 * i] = lh_strdup0("max_steps");
    r->opt_strings[2 * i + 1] = lh_strdup0(buf);
    if (!r->opt_strings[2 * i] || !r->opt_strings[2 * i + 1]) goto oom;
    r->opts[i] = (lh_env_option){r->opt_strings[2 * i], r->opt_strings[2 * i + 1]};
  }
  r->cfg.env_options = r->opts;
  r->cfg.n_env_options = r->n_opts;
  if (cfg->hub) {
    r->hub = cfg->hub;
  } else {
    if ((rc = lh_env_hub_new(NULL, &r->own_hub, err)) < 0) goto fail;
    r->hub = r->own_hub;
  }
  r->sampler = lh_actors_sampler_new((uint32_t)r->vocab, cfg->temperature, cfg->top_p, err);
  if (!r->sampler) {
    rc = err ? err->code : LH_ECONFIG;
    goto fail;
  }
  if ((rc = lh_model_decoder_new(model, (int)cfg->batch, &r->dec, err)) < 0) goto fail;
  r->rows = calloc(cfg->batch, sizeof *r->rows);
  if (cfg->share_prefix && cfg->group_size > 1) {
    r->shares = calloc((size_t)cfg->batch + 1, sizeof *r->shares);
    r->share_floats = lh_model_state_floats(mc);
    if (!r->shares) goto oom;
  }
  r->dec_rows = malloc(cfg->batch * sizeof *r->dec_rows);
  r->dec_tokens = malloc(cfg->batch * sizeof *r->dec_tokens);
  r->dec_logp = malloc((size_t)cfg->batch * r->vocab * sizeof *r->dec_logp);
  r->dec_experts = malloc((size_t)cfg->batch * r->LK * sizeof *r->dec_experts);
  r->one_experts = malloc(r->LK * sizeof *r->one_experts);
  if (!r->rows || !r->dec_rows || !r->dec_tokens || !r->dec_logp || !r->dec_experts || !r->one_experts) goto oom;
  if (cfg->state_interval) {
    r->state_floats = lh_model_state_floats(mc);
    if (!(r->state = malloc(r->state_floats * sizeof *r->state))) goto oom;
  }
  for (uint32_t b = 0; b < cfg->batch; b++) {
    lh_actors_row *w = &r->rows[b];
    w->logp = malloc((size_t)r->vocab * sizeof *w->logp);
    if (!w->logp) goto oom;
    w->share = -1;
    w->tr = lh_actors_transcript_new(mc->patch, err);
    if (!w->tr) {
      rc = err ? err->code : LH_ENOMEM;
      goto fail;
    }
    lh_actors_transcript_set_max_patches(w->tr, mc->max_patches);
    if (!cfg->agent && (rc = lh_env_open_hub(r->hub, r->env_name, r->opts, r->n_opts, &w->env, err)) < 0) goto fail;
  }
  *out = r;
  return 0;
oom:
  rc = lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for %u episodes", cfg->batch);
fail:
  lh_actors_runner_free(r);
  return rc;
}

void lh_actors_runner_set_version(lh_actors_runner *r, uint64_t version) {
  if (r) r->version = version;
}

void lh_actors_runner_set_stage(lh_actors_runner *r, const lh_actors_stage *stage) {
  if (!r || !stage) return;
  if (stage->max_context != r->stage.max_context || stage->long_frac != r->stage.long_frac)
    LH_INFO("actor", "stage index=%u max_context=%u long_frac=%.3f", stage->index, stage->max_context,
            (double)stage->long_frac);
  r->stage = *stage;
}

void lh_actors_runner_stage_counts(const lh_actors_runner *r, uint64_t *long_groups, uint64_t *short_groups) {
  if (long_groups) *long_groups = r ? r->long_groups : 0;
  if (short_groups) *short_groups = r ? r->short_groups : 0;
}

/* Whether the group of task_seed is long under the current stage, and its
 * token budget (r->group_budget): drawn once per group, when its first
 * episode starts, so that the group's episodes play the same task. */
static int group_is_long(lh_actors_runner *r, uint64_t group, uint64_t task_seed) {
  if (r->group_long_for == group + 1) return r->group_long;
  double u = (double)(mix(task_seed, 0x73746167656c6f6eull) >> 11) * 0x1.0p-53;
  r->group_long = r->stage.max_context && u < (double)r->stage.long_frac;
  r->group_long_for = group + 1;
  /* The budget too is the group's, fixed when it starts. */
  uint32_t budget = r->cfg.max_context, cap = r->stage.max_context;
  if (cap && (r->group_long || !budget || budget > cap)) budget = cap;
  r->group_budget = budget;
  if (r->stage.max_context) {
    if (r->group_long) r->long_groups++;
    else r->short_groups++;
  }
  return r->group_long;
}

uint64_t lh_actors_stage_env_size(uint64_t max_context) {
  return (uint64_t)((double)max_context * LH_ACTORS_STAGE_FILL);
}

size_t lh_actors_env_options_set(const lh_env_option *opts, size_t n, const char *key, const char *value,
                                 lh_env_option *out) {
  size_t m = 0;
  int replaced = 0;
  for (size_t i = 0; i < n; i++) {
    int here = strcmp(opts[i].key, key) == 0;
    out[m++] = (lh_env_option){opts[i].key, here ? value : opts[i].value};
    replaced |= here;
  }
  if (!replaced) out[m++] = (lh_env_option){key, value};
  return m;
}

/* Opens the row's environment again when the episode needs another size
 * (stage_option = size, or as configured for size 0). */
static int size_env(lh_actors_runner *r, lh_actors_row *w, uint64_t size, lh_errbuf *err) {
  if (!r->stage_option[0] || size == w->env_size) return 0;
  const lh_env_option *opts = r->opts;
  size_t n = r->n_opts;
  char value[32];
  if (size) {
    snprintf(value, sizeof value, "%llu", (unsigned long long)size);
    n = lh_actors_env_options_set(r->opts, r->n_opts, r->stage_option, value, r->sized_opts);
    opts = r->sized_opts;
  }
  lh_env *env = NULL;
  LH_TRY(lh_env_open_hub(r->hub, r->env_name, opts, n, &env, err));
  lh_env_free(w->env);
  w->env = env;
  w->env_size = size;
  return 0;
}

static int enqueue(lh_actors_runner *r, Longhaul__Segment *seg, Longhaul__EpisodeEnd *end, lh_errbuf *err) {
  if (r->q_n == r->q_cap) {
    size_t cap = r->q_cap ? 2 * r->q_cap : 16;
    lh_actors_queue_item *q = malloc(cap * sizeof *q);
    if (!q) {
      lh_actors_segment_free(seg);
      lh_actors_episode_end_free(end);
      return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for the message queue");
    }
    for (size_t i = 0; i < r->q_n; i++) q[i] = r->q[(r->q_head + i) % r->q_cap];
    free(r->q);
    r->q = q;
    r->q_cap = cap;
    r->q_head = 0;
  }
  r->q[(r->q_head + r->q_n++) % r->q_cap] = (lh_actors_queue_item){seg, end};
  return 0;
}

int lh_actors_row_drain(lh_actors_runner *r, lh_actors_row *w, lh_errbuf *err) {
  Longhaul__Segment *s;
  while ((s = lh_actors_segmenter_pop(w->seg)) != NULL) LH_TRY(enqueue(r, s, NULL, err));
  return 0;
}

int lh_actors_runner_pop(lh_actors_runner *r, Longhaul__Segment **seg, Longhaul__EpisodeEnd **end) {
  if (seg) *seg = NULL;
  if (end) *end = NULL;
  if (!r || !r->q_n || !seg || !end) return 0;
  lh_actors_queue_item it = r->q[r->q_head];
  r->q_head = (r->q_head + 1) % r->q_cap;
  r->q_n--;
  *seg = it.seg;
  *end = it.end;
  return 1;
}

size_t lh_actors_runner_queued(const lh_actors_runner *r) { return r ? r->q_n : 0; }

uint32_t lh_actors_runner_open_episodes(const lh_actors_runner *r) {
  uint32_t n = 0;
  for (uint32_t b = 0; r && b < r->cfg.batch; b++) n += r->rows[b].state != ROW_FREE;
  return n;
}

uint64_t lh_actors_runner_finished(const lh_actors_runner *r) { return r ? r->finished : 0; }

void lh_actors_runner_shared(const lh_actors_runner *r, uint64_t *episodes, uint64_t *tokens) {
  if (episodes) *episodes = r ? r->prefixes_shared : 0;
  if (tokens) *tokens = r ? r->prefix_tokens_shared : 0;
}

/* Stopped, or every episode asked for started. */
static int start_limit(const lh_actors_runner *r) {
  return r->stopped || (r->cfg.episodes && r->started >= r->cfg.episodes);
}

int lh_actors_runner_waiting(const lh_actors_runner *r) {
  for (uint32_t b = 0; r && b < r->cfg.batch; b++)
    if (r->rows[b].state == ROW_POLICY || r->rows[b].state == ROW_FORK) return 0;
  return 1;
}

int lh_actors_runner_done(const lh_actors_runner *r) {
  if (!r) return 1;
  return start_limit(r) && lh_actors_runner_open_episodes(r) == 0;
}

/* Room for the per-token arrays of the transcript's kept positions up to
 * position n. */
static int reserve(const lh_actors_runner *r, lh_actors_row *w, size_t n, lh_errbuf *err) {
  n -= lh_actors_transcript_first(w->tr);
  if (n <= w->cap) return 0;
  size_t cap = lh_grow_cap(w->cap, n, 256);
  if (!cap) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for %zu tokens", n);
  float *b = realloc(w->behavior, cap * sizeof *b);
  if (b) w->behavior = b;
  uint32_t *v = realloc(w->version, cap * sizeof *v);
  if (v) w->version = v;
  uint32_t *x = w->experts;
  if (r->record && (x = realloc(w->experts, cap * r->LK * sizeof *x)) != NULL) w->experts = x;
  if (!b || !v || (r->record && !x)) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for %zu tokens", n);
  w->cap = cap;
  return 0;
}

/* Moves the transcript tokens not yet in the segmenter, up to position n,
 * into it, with the images at their <img> tokens: the transcript's own
 * (padded) pixels, back in bytes (x/255 read back exactly), so that the
 * learner gets the image the actor's model saw. */
static int push_new(lh_actors_runner *r, lh_actors_row *w, size_t n, lh_errbuf *err) {
  const int32_t *tok = lh_actors_transcript_tokens(w->tr);
  const uint8_t *mask = lh_actors_transcript_mask(w->tr);
  const lh_model_image *im = lh_actors_transcript_images(w->tr);
  int n_im = lh_actors_transcript_n_images(w->tr), im0 = lh_actors_transcript_first_image(w->tr);
  size_t first = lh_actors_transcript_first(w->tr);
  for (size_t t = w->pushed; t < n; t++) {
    size_t i = t - first;
    while (w->images_pushed - im0 < n_im && (size_t)im[w->images_pushed - im0].at - 1 == t) {
      const lh_model_image *m = &im[w->images_pushed - im0];
      size_t bytes = (size_t)m->width * (size_t)m->height * 3;
      if (bytes > r->image_bytes_cap) {
        uint8_t *b = realloc(r->image_bytes, bytes);
        if (!b) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for a %dx%d image", m->width, m->height);
        r->image_bytes = b;
        r->image_bytes_cap = bytes;
      }
      for (size_t j = 0; j < bytes; j++) r->image_bytes[j] = (uint8_t)lrintf(m->pixels[j] * 255.0f);
      LH_TRY(lh_actors_segmenter_push_image(w->seg, (uint32_t)m->width, (uint32_t)m->height, 3, r->image_bytes,
                                            err));
      w->images_pushed++;
    }
    LH_TRY(lh_actors_segmenter_push(w->seg, (uint32_t)tok[i], mask[i], mask[i] ? w->behavior[i] : 0.0f,
                                    mask[i] ? w->version[i] : (uint32_t)r->version,
                                    r->record ? w->experts + i * r->LK : NULL, err));
  }
  if (n > w->pushed) w->pushed = n;
  return lh_actors_row_drain(r, w, err);
}

/* The state hook (docs/learner.md "Stored state"): called after every
 * feed, decode step or prefill piece, with fed the tokens the model has
 * taken; when a state is due ([actor] state_interval), the row's
 * recurrent state after those tokens goes to its segmenter, which sends
 * it with the segment that holds token fed. */
static int state_hook(lh_actors_runner *r, uint32_t b, size_t fed, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  if (!r->cfg.state_interval || fed < w->next_state) return 0;
  size_t every = r->cfg.state_interval;
  w->next_state = (fed / every + 1) * every;
  LH_TRY(lh_model_decoder_state_get(r->dec, (int)b, r->state));
  return lh_actors_segmenter_set_state(w->seg, fed, r->state, r->state_floats, err);
}

/* Where a prefill of tokens [at, n) stops so that a state due at the
 * row's next_state is taken there: next_state itself, or, when that falls
 * among an image's patches, just after them (a forward takes an image
 * whole). n when no state is due inside. */
static size_t piece_end(const lh_actors_runner *r, const lh_actors_row *w, size_t at, size_t n) {
  if (!r->cfg.state_interval || w->next_state <= at || w->next_state >= n) return n;
  size_t end = w->next_state;
  const lh_model_image *im = lh_actors_transcript_images(w->tr);
  int n_im = lh_actors_transcript_n_images(w->tr), patch = lh_model_get_config(r->model)->patch;
  for (int i = 0; i < n_im; i++) {
    size_t first = (size_t)im[i].at, count = (size_t)(im[i].height / patch) * (size_t)(im[i].width / patch);
    if (end > first && end < first + count) end = first + count;
  }
  return end < n ? end : n;
}

/* Forgets what the row no longer needs: the positions both fed to the
 * model and in the segmenter, before the action being decoded. Done once
 * 4096 positions can go, so that the moves cost O(1) a token; the row's
 * memory is thus bounded by the current action, a prefill window and an
 * observation not yet fed, whatever the episode's length. */
void lh_actors_row_forget(const lh_actors_runner *r, lh_actors_row *w) {
  size_t upto = w->pushed < w->fed ? w->pushed : w->fed;
  if (w->state == ROW_POLICY && w->action_start < upto) upto = w->action_start;
  size_t first = lh_actors_transcript_first(w->tr);
  if (upto < first + 4096) return;
  size_t drop = upto - first, kept = lh_actors_transcript_len(w->tr) - upto;
  if (drop < w->cap) {
    size_t k = kept < w->cap - drop ? kept : w->cap - drop;
    memmove(w->behavior, w->behavior + drop, k * sizeof *w->behavior);
    memmove(w->version, w->version + drop, k * sizeof *w->version);
    if (r->record) memmove(w->experts, w->experts + drop * r->LK, k * r->LK * sizeof *w->experts);
  }
  lh_actors_transcript_forget(w->tr, upto);
  if (w->cap > 8192 && kept < w->cap / 8) {  /* a long observation grew them: shrink */
    size_t cap = kept * 2 > 256 ? kept * 2 : 256;
    float *b = realloc(w->behavior, cap * sizeof *b);
    uint32_t *v = realloc(w->version, cap * sizeof *v);
    uint32_t *x = r->record ? realloc(w->experts, cap * r->LK * sizeof *x) : NULL;
    if (b) w->behavior = b;
    if (v) w->version = v;
    if (x) w->experts = x;
    w->cap = cap;  /* one whose shrink failed keeps its larger block */
  }
}

/* Feeds the next prefill window of the transcript tokens not yet fed
 * (lh_model_window_end cuts it: an image stays whole), images included,
 * and pushes what it fed to the segmenter: an observation of any length
 * goes through one window per runner step, its segments leaving between
 * steps. A window goes in as pieces that end where a recurrent state is due
 * (piece_end). When the last window is in, the row holds the next
 * distribution. */
int lh_actors_row_prefill(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  size_t n = lh_actors_transcript_len(w->tr), first = lh_actors_transcript_first(w->tr);
  if (n <= w->fed) return 0;
  const int32_t *tok = lh_actors_transcript_tokens(w->tr);
  const lh_model_image *all = lh_actors_transcript_images(w->tr);
  int n_all = lh_actors_transcript_n_images(w->tr), k = 0;
  while (k < n_all && (size_t)all[k].at < w->fed) k++;
  const lh_model_config *mc = lh_model_get_config(r->model);
  lh_model_span spans[64];
  size_t n_spans = 0;
  for (int i = k; i < n_all && n_spans < 64; i++)
    spans[n_spans++] = (lh_model_span){(size_t)all[i].at,
                                       (size_t)(all[i].height / mc->patch) * (size_t)(all[i].width / mc->patch)};
  size_t end = lh_model_window_end(w->fed, n, lh_model_decoder_prefill_window(r->dec), spans, n_spans);
  /* At most 64 images a window: a 65th starts the next one. */
  if (n_all - k > 64 && (size_t)all[k + 64].at - 1 < end) end = (size_t)all[k + 64].at - 1;
  if (r->record) {
    /* The chunked prefill does not report its routing; one decode step per
     * token does, and computes the same function (images need the
     * prefill, so they cannot be recorded). */
    int32_t row_index = (int32_t)b;
    if (k < n_all && (size_t)all[k].at < end)
      return lh_errbuf_set(err, LH_EUNSUPPORTED,
                           "runner: [actor] record_routing cannot record the routing of image patches; "
                           "turn it off for environment %s",
                           r->env_name);
    for (size_t t = w->fed; t < end; t++) {
      LH_TRY(lh_model_decode_step_rows(r->dec, &row_index, 1, &tok[t - first], w->logp, r->one_experts, err));
      for (size_t j = 0; j < r->LK; j++) w->experts[(t - first) * r->LK + j] = (uint32_t)r->one_experts[j];
      LH_TRY(state_hook(r, b, t + 1, err));
    }
  } else {
    /* In pieces that end where a recurrent state is due (one without). */
    size_t at = w->fed;
    while (at < end) {
      size_t piece = piece_end(r, w, at, end);
      lh_model_image local[64];
      int n_im = 0;
      for (int i = k; i < n_all && n_im < 64 && (size_t)all[i].at < piece; i++) {
        if ((size_t)all[i].at < at) continue;
        local[n_im] = all[i];
        local[n_im].at = all[i].at - (int)at;
        n_im++;
      }
      LH_TRY(lh_model_prefill(r->dec, (int)b, tok + (at - first), (int)(piece - at), n_im ? local : NULL, n_im,
                              piece == n ? w->logp : NULL, err));
      at = piece;
      LH_TRY(state_hook(r, b, at, err));
    }
  }
  w->fed = end;
  w->have_logp = end == n;
  LH_TRY(push_new(r, w, w->fed, err));
  if (w->have_logp && w->share >= 0) LH_TRY(lh_actors_share_ready(r, b, err));
  lh_actors_row_forget(r, w);
  return 0;
}

Longhaul__Outcome lh_actors_outcome_of(lh_env_outcome o) {
  switch (o) {
    case LH_ENV_SUCCESS: return LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
    case LH_ENV_FAILURE: return LONGHAUL__OUTCOME__OUTCOME_FAILURE;
    case LH_ENV_TRUNCATED: return LONGHAUL__OUTCOME__OUTCOME_TRUNCATED;
    case LH_ENV_ERROR: return LONGHAUL__OUTCOME__OUTCOME_ERROR;
    default: return LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  }
}

/* Ends the row's episode: the segmenter's last segment and the EpisodeEnd
 * go to the queue, and the row is free again. */
int lh_actors_row_finish(lh_actors_runner *r, lh_actors_row *w, Longhaul__Outcome outcome, float reward,
                         const lh_env_term *terms, uint32_t n_terms, const char *why, lh_errbuf *err) {
  /* Tokens never fed (the last action's end) have no routing: their
   * experts are recorded as 0; no target follows them, so a replay of
   * them changes nothing the learner trains on. */
  size_t upto = lh_actors_transcript_len(w->tr);
  if (w->end_at < upto) upto = w->end_at;
  size_t first = lh_actors_transcript_first(w->tr);
  int prc = 0;
  if (r->record && upto > w->fed) {
    prc = reserve(r, w, upto, err);
    if (!prc)
      memset(w->experts + (w->fed - first) * r->LK, 0, (upto - w->fed) * r->LK * sizeof *w->experts);
  }
  if (!prc && w->seg && upto > w->pushed) prc = push_new(r, w, upto, err);
  lh_actors_reward_term t[64];
  if (n_terms > 64) n_terms = 64;
  for (uint32_t i = 0; i < n_terms; i++) t[i] = (lh_actors_reward_term){terms[i].name, terms[i].value, w->steps};
  lh_actors_episode_result res = {.outcome = outcome,
                                  .reward = reward,
                                  .terms = t,
                                  .n_terms = n_terms,
                                  .steps = w->steps,
                                  .error = why};
  Longhaul__EpisodeEnd *end = NULL;
  int rc = prc < 0 ? prc : lh_actors_segmenter_finish(w->seg, &res, &end, err);
  if (rc == 0) rc = lh_actors_row_drain(r, w, err);
  if (rc == 0) rc = enqueue(r, NULL, end, err);
  else lh_actors_episode_end_free(end);
  lh_actors_segmenter_free(w->seg);
  w->seg = NULL;
  if (w->agent)
    lh_actors_agent_row_end(r, w, why                                               ? why
                                  : outcome == LONGHAUL__OUTCOME__OUTCOME_TRUNCATED ? "its context is full (max_context)"
                                                                                    : "ended by the actor");
  if (w->share >= 0) lh_actors_share_leave(r, (uint32_t)(w - r->rows));
  w->state = ROW_FREE;
  w->have_logp = 0;
  r->finished++;
  return rc;
}

/* Starts episode number r->started on row b: ids, segmenter, reset, the
 * first observation into the transcript, the segmenter and the model. */
static int start(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  lh_actors_agent_turn opening = {0};
  if (r->cfg.agent && lh_actors_agent_take(r->cfg.agent, &opening) != LH_AGENT_TURN) return 0;  /* none waits */
  uint64_t k = r->started++, group = k / r->cfg.group_size;
  uint64_t episode_id = mix(r->cfg.id_salt, k) | 1;  /* never 0 */
  uint64_t group_id = opening.handle ? opening.group_id : mix(r->cfg.id_salt ^ 0x67726f7570ull, group) | 1;
  uint64_t task_seed = opening.handle ? opening.task_seed : mix(r->cfg.seed, group);
  int is_long = opening.handle ? 0 : group_is_long(r, group, task_seed);
  uint32_t budget = r->group_budget;
  if (opening.handle) {  /* an agent's episode: the actor's context, within the stage's */
    budget = r->cfg.max_context;
    if (r->stage.max_context && (!budget || budget > r->stage.max_context)) budget = (uint32_t)r->stage.max_context;
  }
  /* A role's samples are stored under "agent:ROLE", so that SQL tells
   * them apart (docs/agents.md, "Roles"). */
  char env[LH_AGENT_ROLE_BYTES + 64];
  snprintf(env, sizeof env, "%s%s%s", r->env_name, opening.role[0] ? ":" : "", opening.role);
  lh_actors_segmenter_config sc = {.episode_id = episode_id,
                                   .group_id = group_id,
                                   .task_seed = task_seed,
                                   .actor = r->actor,
                                   .env = env,
                                   .segment_tokens = r->cfg.segment_tokens,
                                   .vocab = (uint32_t)r->vocab};
  if (r->record) {
    const lh_model_config *mc = lh_model_get_config(r->model);
    sc.routed_layers = (uint32_t)mc->layers;
    sc.routed_topk = (uint32_t)mc->topk;
    sc.experts = (uint32_t)mc->experts;
  }
  w->seg = lh_actors_segmenter_new(&sc, err);
  if (!w->seg) return err ? err->code : LH_ENOMEM;
  w->state = ROW_POLICY;
  w->pushed = w->fed = 0;
  w->images_pushed = 0;
  w->steps = 0;
  w->have_logp = 0;
  w->end_at = SIZE_MAX;
  w->max_context = budget;
  if (r->cfg.beyond_context)  /* the context sizes the environment only */
    w->max_context = r->cfg.max_episode_tokens && r->cfg.max_episode_tokens < UINT32_MAX
                         ? (uint32_t)r->cfg.max_episode_tokens : UINT32_MAX;
  w->next_state = r->cfg.state_interval ? r->cfg.state_interval : SIZE_MAX;
  w->share = -1;
  lh_actors_agent_row_begin(w, &opening);
  /* The episode's own sampler stream: what it samples does not depend on
   * when its rows step beside others (a member that forks a shared prefix
   * samples what it would have sampled after prefilling it). */
  lh_actors_rng_seed(&w->rng, mix(r->cfg.seed ^ 0x73616d706c657273ull, k));
  lh_actors_transcript_clear(w->tr);
  LH_TRY(lh_model_decoder_reset(r->dec, (int)b));
  lh_env_obs obs;
  lh_errbuf e = {0};
  int rc = 0;
  if (opening.handle) obs = (lh_env_obs){.text = opening.text, .text_bytes = opening.bytes};
  else rc = size_env(r, w, is_long ? lh_actors_stage_env_size(budget) : 0, &e);
  if (rc == 0 && !opening.handle) rc = lh_env_reset(w->env, task_seed, &obs, &e);
  if (rc < 0) return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, e.msg, err);
  rc = lh_actors_transcript_begin(w->tr, &obs, &e);
  if (rc == LH_EACTORS_IMAGE) {
    /* an image the model cannot take ends this episode, not the actor:
     * it keeps <bos> and ends with the reason */
    w->end_at = 1;
    LH_WARN("actor", "episode %llu ends: %s", (unsigned long long)episode_id, e.msg);
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, e.msg, err);
  }
  if (rc < 0) return lh_errbuf_set(err, rc, "%s", e.msg);
  size_t n = lh_actors_transcript_len(w->tr);
  w->turn_prompt = (uint32_t)n;
  LH_TRY(reserve(r, w, n, err));
  if (w->max_context && n >= w->max_context) {
    if (opening.handle) {  /* an agent's prompt past a stage's context: only <bos> is kept */
      w->end_at = 1;
      return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, NULL, 0, NULL, err);
    }
    if (r->record) memset(w->experts, 0, n * r->LK * sizeof *w->experts);
    LH_TRY(push_new(r, w, n, err));
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, NULL, 0, NULL, err);
  }
  w->action_start = n;
  if (r->shares) {
    int shared = lh_actors_share_join(r, b, opening.handle ? opening.group_id : group + 1, episode_id, n, err);
    if (shared < 0) return shared;
    if (shared) return 0;
  }
  return lh_actors_row_prefill(r, b, err);
}

/* The environment's answer to the row's action: the episode ends, or the
 * observation goes into the transcript, the segmenter and the model. */
static int collect(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  if (w->agent) return lh_actors_agent_row_collect(r, b, err);
  lh_env_result res;
  lh_errbuf e = {0};
  int rc = lh_env_step_end(w->env, &res, &e);
  w->steps++;
  if (rc < 0) return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, e.msg, err);
  if (res.done)
    return lh_actors_row_finish(r, w, lh_actors_outcome_of(res.outcome), res.reward, res.terms, res.term_count, NULL, err);
  size_t before = lh_actors_transcript_len(w->tr);
  rc = lh_actors_transcript_observation(w->tr, &res.obs, &e);
  if (rc == LH_EACTORS_IMAGE) {
    /* the episode ends before the observation, with the reason */
    w->end_at = before;
    LH_WARN("actor", "episode ends at step %u: %s", w->steps, e.msg);
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, e.msg, err);
  }
  if (rc < 0) return lh_errbuf_set(err, rc, "%s", e.msg);
  size_t n = lh_actors_transcript_len(w->tr);
  if (w->max_context && n >= w->max_context) {
    /* The observation would fill the context: the episode is cut here,
     * without it, so that no stored episode passes max_context. */
    w->end_at = before;
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, NULL, 0, NULL, err);
  }
  LH_TRY(reserve(r, w, n, err));
  w->state = ROW_POLICY;
  w->action_start = n;
  return lh_actors_row_prefill(r, b, err);
}

/* The action the row just ended, as text with its markers, begun on the
 * environment. A failure to begin ends the episode as an error. */
static int begin_action(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  if (w->agent) return lh_actors_agent_row_answer(r, b, err);
  const int32_t *tok = lh_actors_transcript_tokens(w->tr) + (w->action_start - lh_actors_transcript_first(w->tr));
  size_t n = lh_actors_transcript_len(w->tr) - w->action_start, need = 0;
  char small[4096], *text = small;
  lh_errbuf e = {0};
  int rc = lh_tok_decode(tok, n, text, sizeof small, &need, &e);
  if (rc == LH_ERANGE) {
    text = malloc(need + 1);
    if (!text) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for a %zu-byte action", need);
    rc = lh_tok_decode(tok, n, text, need + 1, &need, &e);
  }
  if (rc == 0) rc = lh_env_step_begin(w->env, text, need, &e);
  if (text != small) free(text);
  w->state = ROW_ENV;
  if (rc < 0) {
    w->steps++;
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, e.msg, err);
  }
  return 0;
}

void lh_actors_runner_set_window(lh_actors_runner *r, uint32_t window) {
  if (r) r->window = window;
}

/* Whether the episode to start next may: one that begins a group needs
 * room for the whole group in the window; a later member of a group whose
 * leader is still prefilling the shared prefix waits to start until it is
 * done (it then forks at once), so that the members do not each hold a
 * copy of a long first observation (5 bytes a token in the transcript,
 * and the environment's own) for the whole prefill. */
static int may_start(const lh_actors_runner *r) {
  if (start_limit(r)) return 0;
  if (r->cfg.agent)  /* an agent's episodes start one at a time, as they come */
    return r->window == UINT32_MAX || (uint64_t)lh_actors_runner_open_episodes(r) + 1 <= r->window;
  if (r->started % r->cfg.group_size && lh_actors_share_pending(r, r->started / r->cfg.group_size + 1)) return 0;
  if (r->window == UINT32_MAX || r->started % r->cfg.group_size) return 1;
  return (uint64_t)lh_actors_runner_open_episodes(r) + r->cfg.group_size <= r->window;
}

/* Free rows take the next episodes, as back-pressure allows. */
static int start_free_rows(lh_actors_runner *r, lh_errbuf *err) {
  for (uint32_t b = 0; b < r->cfg.batch; b++)
    if (r->rows[b].state == ROW_FREE && may_start(r)) LH_TRY(start(r, b, err));
  return 0;
}

int lh_actors_runner_step(lh_actors_runner *r, lh_errbuf *err) {
  if (!r) return lh_errbuf_set(err, LH_EINVAL, "runner step: NULL runner");
  uint32_t B = r->cfg.batch;
  LH_TRY(start_free_rows(r, err));
  /* Rows still feeding an observation take its next prefill window. */
  for (uint32_t b = 0; b < B; b++) {
    lh_actors_row *w = &r->rows[b];
    if (w->state == ROW_POLICY && !w->have_logp && w->fed < lh_actors_transcript_len(w->tr))
      LH_TRY(lh_actors_row_prefill(r, b, err));
  }
  /* Members whose leader's prefill was done just now start (and fork)
   * under the weights that computed it, before any swap between steps. */
  if (r->shares) LH_TRY(start_free_rows(r, err));
  /* Every row on the policy's turn with a distribution samples a token. */
  int sampled = 0, n_dec = 0, n_env = 0;
  for (uint32_t b = 0; b < B; b++) {
    lh_actors_row *w = &r->rows[b];
    if (w->state != ROW_POLICY || !w->have_logp) continue;
    lh_actors_sample s;
    LH_TRY(lh_actors_sampler_sample(r->sampler, w->logp, &w->rng, &s, err));
    w->have_logp = 0;
    LH_TRY(w->masked ? lh_actors_transcript_token(w->tr, (int32_t)s.token, 0, err)
                     : lh_actors_transcript_policy_token(w->tr, (int32_t)s.token, err));
    size_t n = lh_actors_transcript_len(w->tr);
    LH_TRY(reserve(r, w, n, err));
    size_t i = n - 1 - lh_actors_transcript_first(w->tr);
    w->behavior[i] = s.logp;
    w->version[i] = (uint32_t)r->version;
    sampled++;
    int turn_over = w->agent && lh_actors_agent_turn_over(r, w);  /* an agent's max_tokens or stop */
    if (s.token == LH_TOK_CALL_END || s.token == LH_TOK_EOS || turn_over) {
      LH_TRY(begin_action(r, b, err));
      n_env += w->state == ROW_ENV;
    } else if (w->max_context && n >= w->max_context) {
      LH_TRY(lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, NULL, 0, NULL, err));
    } else {
      r->dec_rows[n_dec] = (int32_t)b;
      r->dec_tokens[n_dec] = (int32_t)s.token;
      n_dec++;
    }
  }
  /* Requests to env servers leave now; the decode overlaps with them. */
  if (n_env) {
    lh_errbuf e = {0};
    if (lh_env_hub_flush(r->hub, &e) < 0) LH_WARN("actor", "env hub flush failed: %s", e.msg);
  }
  if (n_dec) {
    LH_TRY(lh_model_decode_step_rows(r->dec, r->dec_rows, n_dec, r->dec_tokens, r->dec_logp,
                                     r->record ? r->dec_experts : NULL, err));
    size_t K = r->LK ? (size_t)lh_model_get_config(r->model)->topk : 0, L = K ? r->LK / K : 0;
    for (int i = 0; i < n_dec; i++) {
      lh_actors_row *w = &r->rows[r->dec_rows[i]];
      memcpy(w->logp, r->dec_logp + (size_t)i * r->vocab, (size_t)r->vocab * sizeof *w->logp);
      w->have_logp = 1;
      size_t t = lh_actors_transcript_len(w->tr) - 1;  /* the token just fed */
      size_t ti = t - lh_actors_transcript_first(w->tr);
      /* (layers, n_dec, topk) from the decoder; [layer][slot] per token here */
      for (size_t l = 0; r->record && l < L; l++)
        for (size_t q = 0; q < K; q++)
          w->experts[ti * r->LK + l * K + q] = (uint32_t)r->dec_experts[(l * (size_t)n_dec + (size_t)i) * K + q];
      w->fed = t + 1;
      LH_TRY(state_hook(r, (uint32_t)r->dec_rows[i], w->fed, err));
      LH_TRY(push_new(r, w, w->fed, err));
      lh_actors_row_forget(r, w);
    }
  }
  /* The environments' answers. The action's last token (</call>) is fed
   * with the observation by the prefill. */
  for (uint32_t b = 0; b < B; b++)
    if (r->rows[b].state == ROW_ENV) LH_TRY(collect(r, b, err));
  return sampled;
}

int lh_actors_runner_abort(lh_actors_runner *r, const char *reason, lh_errbuf *err) {
  if (!r) return 0;
  r->stopped = 1;
  int first = 0;
  for (uint32_t b = 0; b < r->cfg.batch; b++) {
    lh_actors_row *w = &r->rows[b];
    if (w->state == ROW_FREE) continue;
    if (w->state == ROW_ENV && w->env) {
      lh_env_result res;
      lh_errbuf e = {0};
      (void)lh_env_step_end(w->env, &res, &e);  /* the answer no longer matters */
    }
    int rc = lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ABORTED, 0.0f, NULL, 0, reason ? reason : "aborted", err);
    if (rc < 0 && !first) first = rc;
  }
  return first;
}


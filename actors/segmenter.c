/* actors: cutting one episode's token stream into Segment messages.
 *
 * The open segment lives in fixed buffers of segment_tokens entries; when it
 * fills it is copied into a freshly allocated Longhaul__Segment, validated
 * and queued, and the buffers start over. Images wait in the open segment
 * with their offset relative to it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/limits.h"
#include "actors/internal.h"
#include "proto/wire.h"

typedef struct {
  uint64_t offset;
  float *state;
  size_t n;
} pending_state;

struct lh_actors_segmenter {
  lh_actors_segmenter_config cfg;
  char *actor, *env;
  lh_wire_limits lim;
  size_t per_token;  /* routed_layers * routed_topk */
  /* the open segment */
  uint32_t n;
  uint32_t *tokens;
  uint8_t *mask;
  float *logp;
  uint32_t *version;
  uint32_t *routed;
  Longhaul__Image **images;
  size_t n_images;
  /* the group's shared prefix this episode starts from (both 0: none) */
  uint64_t prefix_episode, prefix_tokens;
  /* episode totals */
  uint64_t total_tokens;
  uint32_t seq;
  int finished;
  /* segments cut and not yet popped, oldest first */
  Longhaul__Segment **ready;
  size_t n_ready, ready_cap, ready_head;
  /* recurrent states handed in (lh_actors_segmenter_set_state) and not yet
   * in a segment, in offset order */
  pending_state *states;
  size_t n_states, states_cap;
};

static void image_free(Longhaul__Image *im) {
  if (!im) return;
  free(im->pixels.data);
  free(im);
}

void lh_actors_segment_free(Longhaul__Segment *seg) {
  if (!seg) return;
  free(seg->actor);
  free(seg->env);
  free(seg->tokens);
  free(seg->loss_mask.data);
  free(seg->behavior_logp);
  free(seg->policy_version);
  free(seg->routed_experts);
  free(seg->state);
  for (size_t i = 0; i < seg->n_images; i++) image_free(seg->images[i]);
  free(seg->images);
  free(seg);
}

void lh_actors_episode_end_free(Longhaul__EpisodeEnd *end) {
  if (!end) return;
  free(end->actor);
  free(end->env);
  free(end->error);
  for (size_t i = 0; i < end->n_terms; i++) {
    if (end->terms[i]) free(end->terms[i]->name);
    free(end->terms[i]);
  }
  free(end->terms);
  free(end);
}

void lh_actors_segmenter_free(lh_actors_segmenter *s) {
  if (!s) return;
  free(s->actor);
  free(s->env);
  free(s->tokens);
  free(s->mask);
  free(s->logp);
  free(s->version);
  free(s->routed);
  for (size_t i = 0; i < s->n_images; i++) image_free(s->images[i]);
  free(s->images);
  for (size_t i = 0; i < s->n_ready; i++) lh_actors_segment_free(s->ready[(s->ready_head + i) % s->ready_cap]);
  free(s->ready);
  for (size_t i = 0; i < s->n_states; i++) free(s->states[i].state);
  free(s->states);
  free(s);
}

lh_actors_segmenter *lh_actors_segmenter_new(const lh_actors_segmenter_config *cfg, lh_errbuf *err) {
  if (!cfg) {
    lh_errbuf_set(err, LH_EINVAL, "segmenter: NULL config");
    return NULL;
  }
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  if (cfg->vocab) lim.vocab = cfg->vocab;
  if (cfg->experts) lim.max_experts = cfg->experts;
  if (cfg->segment_tokens < 1 || cfg->segment_tokens > lim.max_segment_tokens) {
    lh_errbuf_set(err, LH_EACTORS_SEGMENT_CONFIG, "segmenter: segment_tokens=%u is not in 1..%u",
                  cfg->segment_tokens, lim.max_segment_tokens);
    return NULL;
  }
  if (cfg->routed_layers > lim.max_layers ||
      (cfg->routed_layers > 0 && (cfg->routed_topk < 1 || cfg->routed_topk > lim.max_topk)) ||
      (cfg->routed_layers == 0 && cfg->routed_topk != 0)) {
    lh_errbuf_set(err, LH_EACTORS_SEGMENT_CONFIG,
                  "segmenter: routed_layers=%u routed_topk=%u (layers 0..%u; topk 1..%u when layers > 0, "
                  "else 0)",
                  cfg->routed_layers, cfg->routed_topk, lim.max_layers, lim.max_topk);
    return NULL;
  }
  const char *names[2] = {cfg->actor, cfg->env}, *fields[2] = {"actor", "env"};
  for (int i = 0; i < 2; i++)
    if (names[i] && strlen(names[i]) > lim.max_string_bytes) {
      lh_errbuf_set(err, LH_EACTORS_SEGMENT_CONFIG, "segmenter: %s name is %zu bytes, over %u",
                    fields[i], strlen(names[i]), lim.max_string_bytes);
      return NULL;
    }
  lh_actors_segmenter *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->cfg = *cfg;
  s->lim = lim;
  s->per_token = (size_t)cfg->routed_layers * cfg->routed_topk;
  size_t n = cfg->segment_tokens;
  s->actor = lh_strdup0(cfg->actor);
  s->env = lh_strdup0(cfg->env);
  s->cfg.actor = s->actor;
  s->cfg.env = s->env;
  s->tokens = malloc(n * sizeof *s->tokens);
  s->mask = malloc(n);
  s->logp = malloc(n * sizeof *s->logp);
  s->version = malloc(n * sizeof *s->version);
  if (s->per_token) s->routed = malloc(n * s->per_token * sizeof *s->routed);
  s->images = malloc(lim.max_images * sizeof *s->images);
  if (!s->actor || !s->env || !s->tokens || !s->mask || !s->logp || !s->version || !s->images ||
      (s->per_token && !s->routed))
    goto oom;
  return s;
oom:
  lh_actors_segmenter_free(s);
  lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory for segment_tokens=%u", cfg->segment_tokens);
  return NULL;
}

static void *dup_mem(const void *p, size_t bytes) {
  if (bytes == 0) return NULL;
  void *d = malloc(bytes);
  if (d) memcpy(d, p, bytes);
  return d;
}

static int enqueue(lh_actors_segmenter *s, Longhaul__Segment *seg, lh_errbuf *err) {
  if (s->n_ready == s->ready_cap) {
    size_t cap = s->ready_cap ? 2 * s->ready_cap : 4;
    Longhaul__Segment **q = malloc(cap * sizeof *q);
    if (!q) return lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory for the ready queue");
    for (size_t i = 0; i < s->n_ready; i++) q[i] = s->ready[(s->ready_head + i) % s->ready_cap];
    free(s->ready);
    s->ready = q;
    s->ready_cap = cap;
    s->ready_head = 0;
  }
  s->ready[(s->ready_head + s->n_ready++) % s->ready_cap] = seg;
  return 0;
}

/* Turns the open segment into a message, validates it and queues it. */
static int cut(lh_actors_segmenter *s, lh_errbuf *err) {
  uint32_t n = s->n;
  Longhaul__Segment *seg = malloc(sizeof *seg);
  if (!seg) return lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory cutting a segment");
  longhaul__segment__init(seg);
  seg->episode_id = s->cfg.episode_id;
  seg->seq = s->seq;
  seg->group_id = s->cfg.group_id;
  seg->task_seed = s->cfg.task_seed;
  seg->start_offset = s->total_tokens - n;
  seg->prefix_episode_id = s->prefix_episode;
  seg->prefix_tokens = s->prefix_tokens;
  seg->actor = lh_strdup0(s->actor);
  seg->env = lh_strdup0(s->env);
  seg->n_tokens = n;
  seg->tokens = dup_mem(s->tokens, n * sizeof *s->tokens);
  seg->loss_mask.len = n;
  seg->loss_mask.data = dup_mem(s->mask, n);
  seg->n_behavior_logp = n;
  seg->behavior_logp = dup_mem(s->logp, n * sizeof *s->logp);
  seg->n_policy_version = n;
  seg->policy_version = dup_mem(s->version, n * sizeof *s->version);
  seg->routed_layers = s->cfg.routed_layers;
  seg->routed_topk = s->cfg.routed_topk;
  seg->n_routed_experts = n * s->per_token;
  seg->routed_experts = dup_mem(s->routed, seg->n_routed_experts * sizeof *s->routed);
  /* The images move into the message. */
  if (s->n_images) {
    seg->images = dup_mem(s->images, s->n_images * sizeof *s->images);
    if (seg->images) seg->n_images = s->n_images, s->n_images = 0;
  }
  /* The first state taken inside the segment goes with it; earlier ones
   * (a segment already cut) and later ones inside it are dropped. */
  uint64_t start = seg->start_offset;
  size_t used = 0;
  while (used < s->n_states && s->states[used].offset < start + n) {
    pending_state *p = &s->states[used++];
    if (p->offset >= start && !seg->state) {
      seg->state = p->state, seg->n_state = p->n, seg->state_offset = p->offset;
      p->state = NULL;
    }
    free(p->state);
  }
  if (used) {
    memmove(s->states, s->states + used, (s->n_states - used) * sizeof *s->states);
    s->n_states -= used;
  }
  if (!seg->actor || !seg->env || !seg->tokens || !seg->loss_mask.data || !seg->behavior_logp ||
      !seg->policy_version || (seg->n_routed_experts && !seg->routed_experts) ||
      s->n_images) {
    lh_actors_segment_free(seg);
    return lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory cutting segment %u", s->seq);
  }
  int rc = lh_wire_validate_segment(seg, &s->lim, err);
  if (rc == 0) rc = enqueue(s, seg, err);
  if (rc < 0) {
    lh_actors_segment_free(seg);
    return rc;
  }
  s->seq++;
  s->n = 0;
  return 0;
}

int lh_actors_segmenter_push(lh_actors_segmenter *s, uint32_t token, int sampled, float behavior_logp,
                      uint32_t version, const uint32_t *experts, lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "segmenter push: NULL segmenter");
  uint64_t at = s->total_tokens;
  if (s->finished)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_FINISHED,
                         "segmenter push: episode %llu already finished",
                         (unsigned long long)s->cfg.episode_id);
  if (token >= s->lim.vocab)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN,
                         "segmenter push: token %u at offset %llu is not below vocab %u", token,
                         (unsigned long long)at, s->lim.vocab);
  if (sampled != 0 && sampled != 1)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN,
                         "segmenter push: sampled=%d at offset %llu is neither 0 nor 1", sampled,
                         (unsigned long long)at);
  if (sampled && (!isfinite(behavior_logp) || behavior_logp > 0.0f))
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN,
                         "segmenter push: behavior_logp=%g at offset %llu is not a log-probability "
                         "(finite, <= 0)",
                         (double)behavior_logp, (unsigned long long)at);
  if (s->per_token) {
    if (!experts)
      return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN,
                           "segmenter push: routing is recorded (%u layers x %u) but offset %llu has "
                           "no experts",
                           s->cfg.routed_layers, s->cfg.routed_topk, (unsigned long long)at);
    for (size_t i = 0; i < s->per_token; i++)
      if (experts[i] >= s->lim.max_experts)
        return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN,
                             "segmenter push: expert %u (layer %zu, slot %zu) at offset %llu is not "
                             "below %u",
                             experts[i], i / s->cfg.routed_topk, i % s->cfg.routed_topk,
                             (unsigned long long)at, s->lim.max_experts);
    memcpy(s->routed + (size_t)s->n * s->per_token, experts, s->per_token * sizeof *experts);
  }
  s->tokens[s->n] = token;
  s->mask[s->n] = (uint8_t)sampled;
  s->logp[s->n] = sampled ? behavior_logp : 0.0f;
  s->version[s->n] = version;
  s->n++;
  s->total_tokens++;
  if (s->n == s->cfg.segment_tokens) {
    int rc = cut(s, err);
    if (rc < 0) {
      s->n--, s->total_tokens--;
      return rc;
    }
  }
  return (int)s->n_ready;
}

int lh_actors_segmenter_set_state(lh_actors_segmenter *s, uint64_t offset, const float *state, size_t n,
                                  lh_errbuf *err) {
  if (!s || !state || !n) return lh_errbuf_set(err, LH_EINVAL, "segmenter set_state: NULL segmenter or empty state");
  if (s->finished)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_FINISHED, "segmenter set_state: episode %llu already finished",
                         (unsigned long long)s->cfg.episode_id);
  uint64_t open_start = s->total_tokens - s->n;
  if (offset < open_start || (s->n_states && offset <= s->states[s->n_states - 1].offset))
    return 0;  /* in a segment already cut, or not after the last one: nothing to attach to */
  for (size_t i = 0; i < n; i++)
    if (!isfinite(state[i]))
      return lh_errbuf_set(err, LH_EACTORS_SEGMENT_TOKEN, "segmenter set_state: state[%zu] = %g at offset %llu is not finite",
                           i, (double)state[i], (unsigned long long)offset);
  if (lh_reserve(&s->states, &s->states_cap, s->n_states + 1, sizeof *s->states, 4))
    return lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory for a recurrent state");
  float *copy = dup_mem(state, n * sizeof *state);
  if (!copy) return lh_errbuf_set(err, LH_ENOMEM, "segmenter: out of memory for a recurrent state of %zu floats", n);
  s->states[s->n_states++] = (pending_state){.offset = offset, .state = copy, .n = n};
  return 0;
}

int lh_actors_segmenter_push_image(lh_actors_segmenter *s, uint32_t width, uint32_t height, uint32_t channels,
                            const uint8_t *pixels, lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "segmenter image: NULL segmenter");
  if (s->finished)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_FINISHED, "segmenter image: episode %llu already finished",
                         (unsigned long long)s->cfg.episode_id);
  if (channels != 1 && channels != 3)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE, "segmenter image: channels=%u is neither 1 nor 3",
                         channels);
  if (width < 1 || width > s->lim.max_image_side || height < 1 || height > s->lim.max_image_side)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE, "segmenter image: %ux%u is not within 1..%u a side",
                         width, height, s->lim.max_image_side);
  if (!pixels) return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE, "segmenter image: NULL pixels");
  if (s->n_images >= s->lim.max_images)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE,
                         "segmenter image: segment %u already holds %u images, the limit", s->seq,
                         s->lim.max_images);
  size_t bytes = (size_t)width * height * channels;
  Longhaul__Image *im = malloc(sizeof *im);
  if (im) {
    longhaul__image__init(im);
    im->pixels.data = dup_mem(pixels, bytes);
  }
  if (!im || !im->pixels.data) {
    image_free(im);
    return lh_errbuf_set(err, LH_ENOMEM, "segmenter image: out of memory for %zu bytes", bytes);
  }
  im->offset = s->n;
  im->width = width;
  im->height = height;
  im->channels = channels;
  im->pixels.len = bytes;
  s->images[s->n_images++] = im;
  return 0;
}

int lh_actors_segmenter_set_prefix(lh_actors_segmenter *s, uint64_t prefix_episode, uint64_t prefix_tokens,
                                   lh_errbuf *err) {
  if (!s || !prefix_episode || !prefix_tokens || prefix_episode == s->cfg.episode_id)
    return lh_errbuf_set(err, LH_EINVAL, "segmenter set_prefix: needs another episode and at least one token");
  if (s->total_tokens || s->n_images || s->finished)
    return lh_errbuf_set(err, LH_EINVAL, "segmenter set_prefix: episode %llu has begun",
                         (unsigned long long)s->cfg.episode_id);
  s->prefix_episode = prefix_episode;
  s->prefix_tokens = prefix_tokens;
  s->total_tokens = prefix_tokens;
  return 0;
}

int lh_actors_segmenter_cut(lh_actors_segmenter *s, lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "segmenter cut: NULL segmenter");
  if (s->finished)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_FINISHED, "segmenter cut: episode %llu already finished",
                         (unsigned long long)s->cfg.episode_id);
  if (s->n_images && s->images[s->n_images - 1]->offset >= s->n)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE,
                         "segmenter cut: an image was placed at offset %llu but no token followed it",
                         (unsigned long long)s->total_tokens);
  return s->n ? cut(s, err) : 0;
}

Longhaul__Segment *lh_actors_segmenter_pop(lh_actors_segmenter *s) {
  if (!s || s->n_ready == 0) return NULL;
  Longhaul__Segment *seg = s->ready[s->ready_head];
  s->ready_head = (s->ready_head + 1) % s->ready_cap;
  s->n_ready--;
  return seg;
}

size_t lh_actors_segmenter_ready(const lh_actors_segmenter *s) { return s ? s->n_ready : 0; }
uint64_t lh_actors_segmenter_tokens(const lh_actors_segmenter *s) { return s ? s->total_tokens : 0; }
uint32_t lh_actors_segmenter_segments(const lh_actors_segmenter *s) { return s ? s->seq : 0; }

/* A copy of text ("" for NULL) cut to at most max bytes at a UTF-8
 * character's start: an error an environment wrote at length is sent as
 * the learner keeps it (LH_EPISODE_ERROR_BYTES). */
static char *dup_cut(const char *text, size_t max) {
  if (!text) text = "";
  size_t n = lh_text_cut_utf8(text, max);
  char *d = malloc(n + 1);
  if (d) memcpy(d, text, n), d[n] = 0;
  return d;
}

static Longhaul__EpisodeEnd *build_end(const lh_actors_segmenter *s, const lh_actors_episode_result *res) {
  Longhaul__EpisodeEnd *e = malloc(sizeof *e);
  if (!e) return NULL;
  longhaul__episode_end__init(e);
  e->episode_id = s->cfg.episode_id;
  e->group_id = s->cfg.group_id;
  e->task_seed = s->cfg.task_seed;
  e->segment_count = s->seq;
  e->total_tokens = s->total_tokens;
  e->prefix_episode_id = s->prefix_episode;
  e->prefix_tokens = s->prefix_tokens;
  e->outcome = res->outcome;
  e->reward = res->reward;
  e->steps = res->steps;
  e->actor = lh_strdup0(s->actor);
  e->env = lh_strdup0(s->env);
  e->error = dup_cut(res->error, LH_EPISODE_ERROR_BYTES);
  int ok = e->actor && e->env && e->error;
  if (ok && res->n_terms) {
    e->terms = calloc(res->n_terms, sizeof *e->terms);
    ok = e->terms != NULL;
    for (size_t i = 0; ok && i < res->n_terms; i++) {
      Longhaul__RewardTerm *t = malloc(sizeof *t);
      e->terms[i] = t;
      e->n_terms = i + 1;
      if (!t || (longhaul__reward_term__init(t), !(t->name = lh_strdup0(res->terms[i].name)))) {
        ok = 0;
        break;
      }
      t->value = res->terms[i].value;
      t->step = res->terms[i].step;
    }
  }
  if (!ok) {
    lh_actors_episode_end_free(e);
    return NULL;
  }
  return e;
}

int lh_actors_segmenter_finish(lh_actors_segmenter *s, const lh_actors_episode_result *res, Longhaul__EpisodeEnd **end,
                        lh_errbuf *err) {
  if (end) *end = NULL;
  if (!s || !res || !end) return lh_errbuf_set(err, LH_EINVAL, "segmenter finish: NULL argument");
  if (s->finished)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_FINISHED, "segmenter finish: episode %llu already finished",
                         (unsigned long long)s->cfg.episode_id);
  if (s->n_images && s->images[s->n_images - 1]->offset >= s->n)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_IMAGE,
                         "segmenter finish: an image was placed at offset %llu but no token followed it",
                         (unsigned long long)s->total_tokens);
  if (res->n_terms && !res->terms)
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_RESULT, "segmenter finish: %zu reward terms but no array",
                         res->n_terms);
  for (size_t i = 0; i < res->n_terms; i++)
    if (!res->terms[i].name || !*res->terms[i].name)
      return lh_errbuf_set(err, LH_EACTORS_SEGMENT_RESULT, "segmenter finish: reward term %zu has no name", i);
  Longhaul__EpisodeEnd *e = build_end(s, res);
  if (!e) return lh_errbuf_set(err, LH_ENOMEM, "segmenter finish: out of memory");
  if (s->n) e->segment_count++;  /* the final partial segment, cut below */
  /* Validate inside an envelope, as it will travel. */
  Longhaul__Envelope env;
  longhaul__envelope__init(&env);
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  env.episode_end = e;
  int rc = lh_wire_validate(&env, &s->lim, err);
  if (rc < 0) {
    lh_actors_episode_end_free(e);
    char why[LH_ERRMSG_BYTES];
    snprintf(why, sizeof why, "%s", err ? err->msg : lh_strerror(rc));
    return lh_errbuf_set(err, LH_EACTORS_SEGMENT_RESULT, "segmenter finish: bad episode result: %s", why);
  }
  if (s->n && (rc = cut(s, err)) < 0) {
    lh_actors_episode_end_free(e);
    return rc;
  }
  s->finished = 1;
  *end = e;
  return 0;
}

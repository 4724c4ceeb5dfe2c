/* wire: validation of every field of every message kind.
 *
 * A message is validated once, right after it is parsed (or before a caller
 * sends one it built), so that no other module has to re-check lengths,
 * ranges or strings. Each check that fails returns its own LH_EWIRE_* code
 * and an lh_errbuf message that names the field by its path, e.g.
 * "segment.tokens[17]=900 is not below vocab 264". Messages built by a
 * caller may hold NULL pointers where a parsed message never does; those are
 * reported (LH_EWIRE_MISSING) instead of being dereferenced. */
#include <math.h>
#include <string.h>

#include "common/run_id.h"
#include "proto/wire.h"

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. Returns the byte offset of the first bad sequence, or -1. */
static long utf8_bad_offset(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    /* ASCII, the common case, eight bytes at a time */
    uint64_t w;
    while (n - i >= 8 && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ull) == 0)) i += 8;
    if (i == n) break;
    unsigned c = s[i];
    size_t len;
    unsigned min;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, min = 0x10000;
    } else {
      return (long)i;
    }
    if (n - i < len) return (long)i;
    unsigned cp = c & (0x7f >> len);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return (long)i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return (long)i;
    i += len;
  }
  return -1;
}

/* A string field: at most max bytes and valid UTF-8. NULL counts as "". */
static int check_string(const char *s, uint32_t max, const char *path, const char *field,
                        lh_errbuf *err) {
  if (!s) return 0;
  size_t n = strlen(s);
  if (n > max)
    return lh_errbuf_set(err, LH_EWIRE_STRING_TOO_LONG, "%s.%s is %zu bytes, over the limit of %u",
                         path, field, n, max);
  long bad = utf8_bad_offset((const unsigned char *)s, n);
  if (bad >= 0)
    return lh_errbuf_set(err, LH_EWIRE_UTF8, "%s.%s is not valid UTF-8 (bad byte 0x%02x at offset %ld)",
                         path, field, (unsigned char)s[bad], bad);
  return 0;
}

/* A name that must be present (reward term, option key). */
static int check_name(const char *s, uint32_t max, const char *path, const char *field,
                      lh_errbuf *err) {
  if (!s || !*s) return lh_errbuf_set(err, LH_EWIRE_EMPTY_NAME, "%s.%s is empty", path, field);
  return check_string(s, max, path, field, err);
}

static int check_finite(double v, const char *path, const char *field, lh_errbuf *err) {
  if (!isfinite(v))
    return lh_errbuf_set(err, LH_EWIRE_NOT_FINITE, "%s.%s=%g is not finite", path, field, v);
  return 0;
}

/* A repeated field whose count is nonzero must have its array. */
static int check_array(const void *p, size_t n, const char *path, const char *field,
                       lh_errbuf *err) {
  if (n > 0 && !p)
    return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s.%s has %zu entries but no array", path, field, n);
  return 0;
}

/* Images of a segment (tokens > 0: each offset must be below it) or of an
 * observation (tokens == 0: offset unused). */
static int check_images(Longhaul__Image *const *images, size_t n_images, size_t tokens,
                        const lh_wire_limits *lim, const char *path, lh_errbuf *err) {
  LH_TRY(check_array(images, n_images, path, "images", err));
  if (n_images > lim->max_images)
    return lh_errbuf_set(err, LH_EWIRE_TOO_MANY_IMAGES, "%s.images has %zu images, over the limit of %u",
                         path, n_images, lim->max_images);
  for (size_t i = 0; i < n_images; i++) {
    const Longhaul__Image *im = images[i];
    if (!im) return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s.images[%zu] is missing", path, i);
    if (im->channels != 1 && im->channels != 3)
      return lh_errbuf_set(err, LH_EWIRE_IMAGE_CHANNELS, "%s.images[%zu].channels=%u is neither 1 nor 3",
                           path, i, im->channels);
    if (im->width < 1 || im->width > lim->max_image_side)
      return lh_errbuf_set(err, LH_EWIRE_IMAGE_SIZE, "%s.images[%zu].width=%u is not in 1..%u", path, i,
                           im->width, lim->max_image_side);
    if (im->height < 1 || im->height > lim->max_image_side)
      return lh_errbuf_set(err, LH_EWIRE_IMAGE_SIZE, "%s.images[%zu].height=%u is not in 1..%u", path,
                           i, im->height, lim->max_image_side);
    uint64_t want = (uint64_t)im->width * im->height * im->channels;
    if (im->pixels.len != want)
      return lh_errbuf_set(err, LH_EWIRE_IMAGE_BYTES,
                           "%s.images[%zu].pixels is %zu bytes, not width*height*channels = "
                           "%ux%ux%u = %llu",
                           path, i, im->pixels.len, im->width, im->height, im->channels,
                           (unsigned long long)want);
    if (!im->pixels.data)
      return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s.images[%zu].pixels has no data", path, i);
    if (tokens > 0 && im->offset >= tokens)
      return lh_errbuf_set(err, LH_EWIRE_IMAGE_OFFSET,
                           "%s.images[%zu].offset=%u is not below the token count %zu", path, i,
                           im->offset, tokens);
  }
  return 0;
}

static int check_terms(Longhaul__RewardTerm *const *terms, size_t n_terms,
                       const lh_wire_limits *lim, const char *path, lh_errbuf *err) {
  LH_TRY(check_array(terms, n_terms, path, "terms", err));
  if (n_terms > lim->max_terms)
    return lh_errbuf_set(err, LH_EWIRE_TOO_MANY_TERMS, "%s.terms has %zu terms, over the limit of %u",
                         path, n_terms, lim->max_terms);
  char field[48];
  for (size_t i = 0; i < n_terms; i++) {
    const Longhaul__RewardTerm *t = terms[i];
    if (!t) return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s.terms[%zu] is missing", path, i);
    /* The field's name is written only for a term that fails: checked
     * again under it, it fails the same way. */
    if (check_name(t->name, lim->max_string_bytes, path, "", NULL) == 0 && isfinite(t->value)) continue;
    snprintf(field, sizeof field, "terms[%zu].name", i);
    LH_TRY(check_name(t->name, lim->max_string_bytes, path, field, err));
    snprintf(field, sizeof field, "terms[%zu].value", i);
    LH_TRY(check_finite(t->value, path, field, err));
  }
  return 0;
}

/* The routed experts of a segment: [token][layer][slot]. */
static int check_routing(const Longhaul__Segment *s, const lh_wire_limits *lim, const char *path,
                         lh_errbuf *err) {
  size_t n = s->n_tokens;
  if (s->routed_layers > lim->max_layers)
    return lh_errbuf_set(err, LH_EWIRE_ROUTED_LAYERS, "%s.routed_layers=%u is over the limit of %u",
                         path, s->routed_layers, lim->max_layers);
  if (s->routed_layers == 0) {
    if (s->routed_topk != 0)
      return lh_errbuf_set(err, LH_EWIRE_ROUTED_TOPK,
                           "%s.routed_topk=%u but routed_layers is 0 (routing not recorded)", path,
                           s->routed_topk);
    if (s->n_routed_experts != 0)
      return lh_errbuf_set(err, LH_EWIRE_ROUTED_LENGTH,
                           "%s.routed_experts has %zu entries but routed_layers is 0", path,
                           s->n_routed_experts);
    return 0;
  }
  if (s->routed_topk < 1 || s->routed_topk > lim->max_topk)
    return lh_errbuf_set(err, LH_EWIRE_ROUTED_TOPK, "%s.routed_topk=%u is not in 1..%u", path,
                         s->routed_topk, lim->max_topk);
  uint64_t per_token = (uint64_t)s->routed_layers * s->routed_topk;
  uint64_t want = (uint64_t)n * per_token;
  if (s->n_routed_experts != want)
    return lh_errbuf_set(err, LH_EWIRE_ROUTED_LENGTH,
                         "%s.routed_experts has %zu entries, not tokens*layers*topk = %zux%ux%u = %llu",
                         path, s->n_routed_experts, n, s->routed_layers, s->routed_topk,
                         (unsigned long long)want);
  LH_TRY(check_array(s->routed_experts, s->n_routed_experts, path, "routed_experts", err));
  for (size_t i = 0; i < s->n_routed_experts; i++)
    if (s->routed_experts[i] >= lim->max_experts)
      return lh_errbuf_set(err, LH_EWIRE_EXPERT_RANGE,
                           "%s.routed_experts[%zu]=%u (token %llu, layer %llu, slot %llu) is not "
                           "below max_experts %u",
                           path, i, s->routed_experts[i], (unsigned long long)(i / per_token),
                           (unsigned long long)(i % per_token / s->routed_topk),
                           (unsigned long long)(i % s->routed_topk), lim->max_experts);
  return 0;
}

/* The recurrent state a segment may carry: finite values, taken at an
 * offset inside the segment. Its exact size is the model's, which the
 * learner checks (learner/validate.c); the message size bounds it here. */
static int check_state(const Longhaul__Segment *s, const char *path, lh_errbuf *err) {
  if (!s->n_state) {
    if (s->state_offset)
      return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.state_offset=%llu without a state", path,
                           (unsigned long long)s->state_offset);
    return 0;
  }
  LH_TRY(check_array(s->state, s->n_state, path, "state", err));
  if (s->state_offset < s->start_offset || s->state_offset - s->start_offset >= s->n_tokens)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE,
                         "%s.state_offset=%llu is outside the segment's tokens %llu..%llu", path,
                         (unsigned long long)s->state_offset, (unsigned long long)s->start_offset,
                         (unsigned long long)(s->start_offset + s->n_tokens - 1));
  for (size_t i = 0; i < s->n_state; i++)
    if (!isfinite(s->state[i]))
      return lh_errbuf_set(err, LH_EWIRE_NOT_FINITE, "%s.state[%zu]=%g is not finite", path, i,
                           (double)s->state[i]);
  return 0;
}

/* A shared prefix reference (Segment, EpisodeEnd): none (both 0), or
 * another episode's first prefix_tokens tokens, at least one. Whether the
 * episode exists, is of the same actor and group and holds that many
 * tokens is the learner's to check (learner/ingest.c): the wire sees one
 * message. */
static int check_prefix(uint64_t episode_id, uint64_t prefix_episode, uint64_t prefix_tokens, const char *path,
                        lh_errbuf *err) {
  if (!prefix_episode != !prefix_tokens)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE,
                         "%s.prefix_episode_id=%llu and prefix_tokens=%llu: both or neither must be set", path,
                         (unsigned long long)prefix_episode, (unsigned long long)prefix_tokens);
  if (prefix_episode && prefix_episode == episode_id)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.prefix_episode_id=%llu is the episode itself", path,
                         (unsigned long long)prefix_episode);
  return 0;
}

static int check_segment(const Longhaul__Segment *s, const lh_wire_limits *lim, const char *path,
                         lh_errbuf *err) {
  LH_TRY(check_string(s->actor, lim->max_string_bytes, path, "actor", err));
  LH_TRY(check_string(s->env, lim->max_string_bytes, path, "env", err));
  size_t n = s->n_tokens;
  if (n == 0) return lh_errbuf_set(err, LH_EWIRE_NO_TOKENS, "%s.tokens is empty", path);
  if (n > lim->max_segment_tokens)
    return lh_errbuf_set(err, LH_EWIRE_TOO_MANY_TOKENS, "%s.tokens has %zu tokens, over the limit of %u",
                         path, n, lim->max_segment_tokens);
  LH_TRY(check_array(s->tokens, n, path, "tokens", err));
  if (s->start_offset > UINT64_MAX - n)
    return lh_errbuf_set(err, LH_EWIRE_OFFSET_OVERFLOW,
                         "%s.start_offset=%llu plus %zu tokens overflows 64 bits", path,
                         (unsigned long long)s->start_offset, n);
  if (s->loss_mask.len != n)
    return lh_errbuf_set(err, LH_EWIRE_LOSS_MASK_LENGTH, "%s.loss_mask is %zu bytes, not one per token (%zu)",
                         path, s->loss_mask.len, n);
  LH_TRY(check_array(s->loss_mask.data, s->loss_mask.len, path, "loss_mask", err));
  if (s->n_behavior_logp != n)
    return lh_errbuf_set(err, LH_EWIRE_LOGP_LENGTH, "%s.behavior_logp has %zu entries, not one per token (%zu)",
                         path, s->n_behavior_logp, n);
  LH_TRY(check_array(s->behavior_logp, n, path, "behavior_logp", err));
  if (s->n_policy_version != n)
    return lh_errbuf_set(err, LH_EWIRE_VERSION_LENGTH,
                         "%s.policy_version has %zu entries, not one per token (%zu)", path,
                         s->n_policy_version, n);
  LH_TRY(check_array(s->policy_version, n, path, "policy_version", err));
  for (size_t i = 0; i < n; i++) {
    if (s->tokens[i] >= lim->vocab)
      return lh_errbuf_set(err, LH_EWIRE_TOKEN_RANGE, "%s.tokens[%zu]=%u is not below vocab %u", path, i,
                           s->tokens[i], lim->vocab);
    if (s->loss_mask.data[i] > 1)
      return lh_errbuf_set(err, LH_EWIRE_LOSS_MASK_VALUE, "%s.loss_mask[%zu]=%u is neither 0 nor 1", path,
                           i, s->loss_mask.data[i]);
    float lp = s->behavior_logp[i];
    if (!isfinite(lp) || lp > 0.0f)
      return lh_errbuf_set(err, LH_EWIRE_LOGP_VALUE,
                           "%s.behavior_logp[%zu]=%g is not a log-probability (finite, <= 0)", path,
                           i, (double)lp);
  }
  LH_TRY(check_routing(s, lim, path, err));
  LH_TRY(check_state(s, path, err));
  LH_TRY(check_prefix(s->episode_id, s->prefix_episode_id, s->prefix_tokens, path, err));
  if (s->start_offset < s->prefix_tokens)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE,
                         "%s.start_offset=%llu lies inside its shared prefix of %llu tokens (episode %llu)", path,
                         (unsigned long long)s->start_offset, (unsigned long long)s->prefix_tokens,
                         (unsigned long long)s->prefix_episode_id);
  return check_images(s->images, s->n_images, n, lim, path, err);
}

/* A run id field: empty (no run), or a run id (common/run_id.h). */
static int check_run_id(const char *id, const char *path, const char *field, lh_errbuf *err) {
  if (!id || !*id) return 0;
  lh_errbuf why;
  if (lh_run_id_check(id, &why) == 0) return 0;
  return lh_errbuf_set(err, LH_EWIRE_RUN_ID, "%s.%s: %s", path, field, why.msg);
}

static int check_hello(const Longhaul__Hello *h, const lh_wire_limits *lim, const char *path,
                       lh_errbuf *err) {
  LH_TRY(check_run_id(h->run_id, path, "run_id", err));
  LH_TRY(check_string(h->role, lim->max_string_bytes, path, "role", err));
  LH_TRY(check_string(h->name, lim->max_string_bytes, path, "name", err));
  if (h->layers > lim->max_layers)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.layers=%u is over the limit of %u", path,
                         h->layers, lim->max_layers);
  if (h->topk > lim->max_topk)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.topk=%u is over the limit of %u", path, h->topk,
                         lim->max_topk);
  return 0;
}

static int check_episode_end(const Longhaul__EpisodeEnd *e, const lh_wire_limits *lim,
                             const char *path, lh_errbuf *err) {
  LH_TRY(check_string(e->actor, lim->max_string_bytes, path, "actor", err));
  LH_TRY(check_string(e->env, lim->max_string_bytes, path, "env", err));
  switch (e->outcome) {
    case LONGHAUL__OUTCOME__OUTCOME_SUCCESS:
    case LONGHAUL__OUTCOME__OUTCOME_FAILURE:
    case LONGHAUL__OUTCOME__OUTCOME_TRUNCATED:
    case LONGHAUL__OUTCOME__OUTCOME_ABORTED:
    case LONGHAUL__OUTCOME__OUTCOME_ERROR:
      break;
    default:
      return lh_errbuf_set(err, LH_EWIRE_OUTCOME,
                           "%s.outcome=%d is not one of success, failure, truncated, aborted, error",
                           path, (int)e->outcome);
  }
  LH_TRY(check_finite(e->reward, path, "reward", err));
  LH_TRY(check_terms(e->terms, e->n_terms, lim, path, err));
  LH_TRY(check_prefix(e->episode_id, e->prefix_episode_id, e->prefix_tokens, path, err));
  if (e->total_tokens < e->prefix_tokens)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.total_tokens=%llu is fewer than its shared prefix's %llu",
                         path, (unsigned long long)e->total_tokens, (unsigned long long)e->prefix_tokens);
  return check_string(e->error, lim->max_text_bytes, path, "error", err);
}

static int check_ack(const Longhaul__Ack *a, const lh_wire_limits *lim, const char *path,
                     lh_errbuf *err) {
  LH_TRY(check_array(a->msg_ids, a->n_msg_ids, path, "msg_ids", err));
  if (a->n_msg_ids > lim->max_ids)
    return lh_errbuf_set(err, LH_EWIRE_TOO_MANY_IDS, "%s.msg_ids has %zu ids, over the limit of %u", path,
                         a->n_msg_ids, lim->max_ids);
  switch (a->status) {
    case LONGHAUL__ACK_STATUS__ACK_STORED:
    case LONGHAUL__ACK_STATUS__ACK_DUPLICATE:
    case LONGHAUL__ACK_STATUS__ACK_REJECTED:
    case LONGHAUL__ACK_STATUS__ACK_RETRY:
      break;
    default:
      return lh_errbuf_set(err, LH_EWIRE_ACK_STATUS,
                           "%s.status=%d is not one of stored, duplicate, rejected, retry", path,
                           (int)a->status);
  }
  return check_string(a->reason, lim->max_text_bytes, path, "reason", err);
}

/* Heartbeat figures are reports for people and logs, not inputs to any
 * computation; a NaN loss (a skipped step) is worth passing on, so only the
 * string is checked. */
static int check_heartbeat(const Longhaul__Heartbeat *h, const lh_wire_limits *lim,
                           const char *path, lh_errbuf *err) {
  return check_string(h->role, lim->max_string_bytes, path, "role", err);
}

/* Weights checksums are XXH3-64; a learner from before checksum_algo sent
 * 0, its own multiply-xorshift hash, which this build no longer computes. */
static int check_checksum_algo(Longhaul__ChecksumAlgo algo, const char *path, lh_errbuf *err) {
  if (algo == LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64) return 0;
  return lh_errbuf_set(err, LH_EWIRE_CHECKSUM_ALGO,
                       "%s.checksum_algo=%d (%s) but this build verifies XXH3_64 (1) only: run the learner "
                       "and the actors from the same release",
                       path, (int)algo,
                       algo == LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_LH_MX64
                           ? "LH_MX64, the multiply-xorshift checksum of a learner from before XXH3"
                           : "unknown");
}

static int check_weights_announce(const Longhaul__WeightsAnnounce *w, const lh_wire_limits *lim,
                                  const char *path, lh_errbuf *err) {
  if (w->chunk_bytes > lim->max_chunk_bytes)
    return lh_errbuf_set(err, LH_EWIRE_CHUNK_TOO_LARGE, "%s.chunk_bytes=%u is over the limit of %u", path,
                         w->chunk_bytes, lim->max_chunk_bytes);
  uint64_t want = 0;
  if (w->total_bytes > 0) {
    if (w->chunk_bytes == 0)
      return lh_errbuf_set(err, LH_EWIRE_WEIGHTS_LAYOUT,
                           "%s.chunk_bytes is 0 but total_bytes=%llu", path,
                           (unsigned long long)w->total_bytes);
    want = w->total_bytes / w->chunk_bytes + (w->total_bytes % w->chunk_bytes != 0);
  }
  if (w->chunk_count != want)
    return lh_errbuf_set(err, LH_EWIRE_WEIGHTS_LAYOUT,
                         "%s.chunk_count=%u but total_bytes=%llu in chunks of %u needs %llu", path,
                         w->chunk_count, (unsigned long long)w->total_bytes, w->chunk_bytes,
                         (unsigned long long)want);
  if (w->n_chunk_checksums != 0 && w->n_chunk_checksums != w->chunk_count)
    return lh_errbuf_set(err, LH_EWIRE_WEIGHTS_LAYOUT, "%s.chunk_checksums has %zu entries but chunk_count=%u",
                         path, w->n_chunk_checksums, w->chunk_count);
  LH_TRY(check_checksum_algo(w->checksum_algo, path, err));
  LH_TRY(check_finite(w->long_frac, path, "long_frac", err));
  if (w->long_frac < 0.0f || w->long_frac > 1.0f)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.long_frac=%g is not in 0..1", path,
                         (double)w->long_frac);
  return 0;
}

static int check_weights_request(const Longhaul__WeightsRequest *w, const char *path,
                                 lh_errbuf *err) {
  if (w->first_chunk > UINT32_MAX - w->chunk_count)
    return lh_errbuf_set(err, LH_EWIRE_OFFSET_OVERFLOW,
                         "%s.first_chunk=%u plus chunk_count=%u overflows 32 bits", path,
                         w->first_chunk, w->chunk_count);
  return 0;
}

static int check_weights_chunk(const Longhaul__WeightsChunk *w, const lh_wire_limits *lim,
                               const char *path, lh_errbuf *err) {
  if (w->data.len > lim->max_chunk_bytes)
    return lh_errbuf_set(err, LH_EWIRE_CHUNK_TOO_LARGE, "%s.data is %zu bytes, over the limit of %u", path,
                         w->data.len, lim->max_chunk_bytes);
  LH_TRY(check_array(w->data.data, w->data.len, path, "data", err));
  if (w->offset > UINT64_MAX - w->data.len)
    return lh_errbuf_set(err, LH_EWIRE_OFFSET_OVERFLOW, "%s.offset=%llu plus %zu bytes overflows 64 bits",
                         path, (unsigned long long)w->offset, w->data.len);
  if (w->encoding != LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_RAW &&
      w->encoding != LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.encoding=%d is neither raw nor zstd", path,
                         (int)w->encoding);
  LH_TRY(check_checksum_algo(w->checksum_algo, path, err));
  /* An encoded chunk's checksum is over its decoded bytes: the receiver
   * checks it after decoding (actors/weights.c). */
  if (lim->skip_chunk_checksums || w->encoding != LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_RAW) return 0;
  uint64_t sum = lh_wire_checksum(w->data.data, w->data.len);
  if (sum != w->checksum)
    return lh_errbuf_set(err, LH_EWIRE_CHUNK_CHECKSUM,
                         "%s.checksum=%016llx but its %zu bytes of data hash to %016llx (corrupt chunk "
                         "%u of version %llu)",
                         path, (unsigned long long)w->checksum, w->data.len, (unsigned long long)sum,
                         w->chunk_index, (unsigned long long)w->version);
  return 0;
}

static int check_env_request(const Longhaul__EnvRequest *r, const lh_wire_limits *lim,
                             const char *path, lh_errbuf *err) {
  switch (r->op) {
    case LONGHAUL__ENV_OP__ENV_OP_CREATE:
    case LONGHAUL__ENV_OP__ENV_OP_RESET:
    case LONGHAUL__ENV_OP__ENV_OP_STEP:
    case LONGHAUL__ENV_OP__ENV_OP_DESCRIBE:
    case LONGHAUL__ENV_OP__ENV_OP_EXPERT:
    case LONGHAUL__ENV_OP__ENV_OP_CLOSE:
      break;
    default:
      return lh_errbuf_set(err, LH_EWIRE_ENV_OP,
                           "%s.op=%d is not one of create, reset, step, describe, expert, close", path,
                           (int)r->op);
  }
  LH_TRY(check_string(r->env_name, lim->max_string_bytes, path, "env_name", err));
  LH_TRY(check_array(r->options, r->n_options, path, "options", err));
  if (r->n_options > lim->max_options)
    return lh_errbuf_set(err, LH_EWIRE_TOO_MANY_OPTIONS, "%s.options has %zu entries, over the limit of %u",
                         path, r->n_options, lim->max_options);
  char field[48];
  for (size_t i = 0; i < r->n_options; i++) {
    const Longhaul__KeyValue *kv = r->options[i];
    if (!kv) return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s.options[%zu] is missing", path, i);
    snprintf(field, sizeof field, "options[%zu].key", i);
    LH_TRY(check_name(kv->key, lim->max_string_bytes, path, field, err));
    snprintf(field, sizeof field, "options[%zu].value", i);
    LH_TRY(check_string(kv->value, lim->max_text_bytes, path, field, err));
  }
  return check_string(r->action, lim->max_text_bytes, path, "action", err);
}

static int check_env_response(const Longhaul__EnvResponse *r, const lh_wire_limits *lim,
                              const char *path, lh_errbuf *err) {
  if (r->status > 0)
    return lh_errbuf_set(err, LH_EWIRE_VALUE_RANGE, "%s.status=%d is neither 0 nor a negative error code",
                         path, r->status);
  LH_TRY(check_string(r->error, lim->max_text_bytes, path, "error", err));
  if (r->observation) {
    LH_TRY(check_string(r->observation->text, lim->max_text_bytes, path, "observation.text", err));
    if (r->observation->n_images || r->observation->images) {
      char sub[64];
      snprintf(sub, sizeof sub, "%s.observation", path);
      LH_TRY(check_images(r->observation->images, r->observation->n_images, 0, lim, sub, err));
    }
  }
  LH_TRY(check_finite(r->reward, path, "reward", err));
  LH_TRY(check_terms(r->terms, r->n_terms, lim, path, err));
  LH_TRY(check_string(r->description, lim->max_text_bytes, path, "description", err));
  return check_string(r->expert_action, lim->max_text_bytes, path, "expert_action", err);
}

/* A batch's entries, each as one request or response; a failure names
 * the entry. Their count is bounded here only by the parse budget: a
 * server refuses a batch past its own bound (envs/envserver.c) with an
 * error that says so. */
static int check_env_batch(const void *const *items, size_t n, int responses, const lh_wire_limits *lim,
                           const char *path, lh_errbuf *err) {
  const char *field = responses ? "responses" : "requests";
  LH_TRY(check_array(items, n, path, field, err));
  for (size_t i = 0; i < n; i++) {
    /* The entry's path is written only for an entry that fails: checked
     * again under it, it fails the same way. */
    const char *generic = responses ? "env_response" : "env_request";
    int rc = !items[i] ? LH_EWIRE_MISSING
             : responses ? check_env_response(items[i], lim, generic, NULL)
                         : check_env_request(items[i], lim, generic, NULL);
    if (rc == 0) continue;
    char sub[64];
    snprintf(sub, sizeof sub, "%s.%s[%zu]", path, field, i);
    if (!items[i]) return lh_errbuf_set(err, LH_EWIRE_MISSING, "%s is missing", sub);
    return responses ? check_env_response(items[i], lim, sub, err) : check_env_request(items[i], lim, sub, err);
  }
  return 0;
}

/* Every limit check_segment reads: a new one there belongs here too. */
int lh_wire_limits_segment_within(const lh_wire_limits *a, const lh_wire_limits *b) {
  return a && b && a->vocab <= b->vocab && a->max_segment_tokens <= b->max_segment_tokens &&
         a->max_images <= b->max_images && a->max_image_side <= b->max_image_side &&
         a->max_string_bytes <= b->max_string_bytes && a->max_layers <= b->max_layers &&
         a->max_topk <= b->max_topk && a->max_experts <= b->max_experts;
}

int lh_wire_validate_segment(const Longhaul__Segment *seg, const lh_wire_limits *lim,
                             lh_errbuf *err) {
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!seg) return lh_errbuf_set(err, LH_EWIRE_MISSING, "segment is missing");
  return check_segment(seg, lim, "segment", err);
}

int lh_wire_check_name(const char *name, const lh_wire_limits *lim, const char *what, lh_errbuf *err) {
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!what) what = "name";
  if (!name || !*name) return lh_errbuf_set(err, LH_EWIRE_EMPTY_NAME, "%s is empty", what);
  size_t n = strlen(name);
  if (n > lim->max_string_bytes)
    return lh_errbuf_set(err, LH_EWIRE_STRING_TOO_LONG, "%s is %zu bytes, over the limit of %u", what, n,
                         lim->max_string_bytes);
  long bad = utf8_bad_offset((const unsigned char *)name, n);
  if (bad >= 0)
    return lh_errbuf_set(err, LH_EWIRE_UTF8, "%s is not valid UTF-8 (bad byte 0x%02x at offset %ld)", what,
                         (unsigned char)name[bad], bad);
  return 0;
}

int lh_wire_validate(const Longhaul__Envelope *env, const lh_wire_limits *lim, lh_errbuf *err) {
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!env) return lh_errbuf_set(err, LH_EWIRE_MISSING, "envelope is missing");
  if (env->protocol != LH_WIRE_PROTOCOL)
    return lh_errbuf_set(err, LH_EWIRE_PROTOCOL,
                         "envelope.protocol=%u but this build speaks protocol %u (upgrade the older side)",
                         env->protocol, LH_WIRE_PROTOCOL);
  LH_TRY(check_string(env->sender, lim->max_string_bytes, "envelope", "sender", err));
  LH_TRY(check_run_id(env->run_id, "envelope", "run_id", err));
  const char *name = lh_wire_body_name(env->body_case);
  /* Every member of the body union is a pointer, so any of them tells
   * whether the body is there. */
  if (env->body_case == LONGHAUL__ENVELOPE__BODY__NOT_SET)
    return lh_errbuf_set(err, LH_EWIRE_NO_BODY, "envelope from '%s' (msg_id %llu) carries no body",
                         env->sender ? env->sender : "", (unsigned long long)env->msg_id);
  if (!env->hello && strcmp(name, "unknown") != 0)
    return lh_errbuf_set(err, LH_EWIRE_MISSING, "envelope.%s is set as the body but missing", name);
  switch (env->body_case) {
    case LONGHAUL__ENVELOPE__BODY_HELLO: return check_hello(env->hello, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_SEGMENT: return check_segment(env->segment, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END:
      return check_episode_end(env->episode_end, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_ACK: return check_ack(env->ack, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT: return check_heartbeat(env->heartbeat, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE:
      return check_weights_announce(env->weights_announce, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST:
      return check_weights_request(env->weights_request, name, err);
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK:
      return check_weights_chunk(env->weights_chunk, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST:
      return check_env_request(env->env_request, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE:
      return check_env_response(env->env_response, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH:
      return check_env_batch((const void *const *)env->env_request_batch->requests,
                             env->env_request_batch->n_requests, 0, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH:
      return check_env_batch((const void *const *)env->env_response_batch->responses,
                             env->env_response_batch->n_responses, 1, lim, name, err);
    case LONGHAUL__ENVELOPE__BODY_SHUTDOWN:
      return check_string(env->shutdown->reason, lim->max_text_bytes, name, "reason", err);
    default:
      return lh_errbuf_set(err, LH_EWIRE_NO_BODY, "envelope body case %d is not a known message",
                           (int)env->body_case);
  }
}

/* actors: fetching announced weights in chunks, into a second buffer, with
 * the layout and the checksums verified. */
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"
#include "proto/wire.h"

struct lh_actors_weights {
  int any_version;  /* the next announcement is taken even if older (lh_actors_weights_restarted) */
  int superseded;   /* a restarted learner's fetch is on: the complete version's number is void */
  size_t max_bytes;
  /* the latest complete version */
  int have_complete;
  uint64_t complete_version, complete_checksum;
  uint8_t *complete;
  size_t complete_bytes, complete_cap;
  lh_actors_stage complete_stage;
  /* the buffer of the version before the complete one, kept for the next
   * fetch: a fresh allocation of the model's size each version costs a
   * page fault per page */
  uint8_t *spare;
  size_t spare_bytes;
  /* the fetch in progress */
  int fetching;
  Longhaul__WeightsAnnounce ann;
  uint8_t *buf;
  size_t buf_bytes;  /* its capacity */
  uint8_t *state;  /* per chunk: 0 missing, 1 requested, 2 received */
  uint64_t *sums;  /* per chunk: its verified checksum, for the version's */
  uint32_t received;
};

lh_actors_weights *lh_actors_weights_new(size_t max_bytes, lh_errbuf *err) {
  if (max_bytes < 1) {
    lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ANNOUNCE, "weights: max_bytes must be at least 1");
    return NULL;
  }
  lh_actors_weights *w = calloc(1, sizeof *w);
  if (!w) {
    lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory");
    return NULL;
  }
  w->max_bytes = max_bytes;
  return w;
}

void lh_actors_weights_restarted(lh_actors_weights *w) {
  if (w) w->any_version = 1;
}

static void drop_fetch(lh_actors_weights *w) {
  free(w->buf);
  free(w->state);
  free(w->sums);
  w->buf = NULL;
  w->state = NULL;
  w->sums = NULL;
  w->fetching = 0;
  w->received = 0;
}

void lh_actors_weights_free(lh_actors_weights *w) {
  if (!w) return;
  drop_fetch(w);
  free(w->complete);
  free(w->spare);
  free(w);
}

int lh_actors_weights_announce(lh_actors_weights *w, const Longhaul__WeightsAnnounce *a, lh_errbuf *err) {
  if (!w || !a) return lh_errbuf_set(err, LH_EINVAL, "weights announce: NULL argument");
  /* The first announcement after a reconnect may come from a learner
   * restarted from an older checkpoint: its versions are the ones now. */
  int other = w->any_version &&
              (!w->have_complete || a->version != w->complete_version || a->checksum != w->complete_checksum) &&
              (!w->fetching || a->version != w->ann.version || a->checksum != w->ann.checksum);
  w->any_version = 0;
  if (!other && ((w->have_complete && !w->superseded && a->version <= w->complete_version) ||
                 (w->fetching && a->version <= w->ann.version)))
    return 0;
  /* The same layout rule as the wire's validation, checked again because a
   * caller may hand us an announcement it built. */
  uint64_t want = a->chunk_bytes ? a->total_bytes / a->chunk_bytes + (a->total_bytes % a->chunk_bytes != 0) : 0;
  if (a->total_bytes == 0 || a->chunk_bytes == 0 || a->chunk_count != want)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ANNOUNCE,
                         "weights announce: version %llu has total_bytes=%llu chunk_bytes=%u "
                         "chunk_count=%u, which do not fit together",
                         (unsigned long long)a->version, (unsigned long long)a->total_bytes, a->chunk_bytes,
                         a->chunk_count);
  if (a->total_bytes > w->max_bytes)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ANNOUNCE,
                         "weights announce: version %llu is %llu bytes, over this actor's limit of %zu",
                         (unsigned long long)a->version, (unsigned long long)a->total_bytes, w->max_bytes);
  uint8_t *buf = NULL, *state = calloc(a->chunk_count, 1);
  uint64_t *sums = malloc((size_t)a->chunk_count * sizeof *sums);
  size_t cap = a->total_bytes;
  if (!sums) {
    free(state);
    state = NULL;
  }
  if (state && w->spare && w->spare_bytes >= a->total_bytes) {
    buf = w->spare, cap = w->spare_bytes;
    w->spare = NULL, w->spare_bytes = 0;
  } else if (state && w->fetching && w->buf && w->buf_bytes >= a->total_bytes) {
    buf = w->buf, cap = w->buf_bytes;  /* the fetch this one replaces */
    w->buf = NULL;
  } else {
    buf = malloc(a->total_bytes);
  }
  if (!buf || !state) {
    free(buf);
    free(state);
    free(sums);
    return lh_errbuf_set(err, LH_ENOMEM, "weights announce: out of memory for %llu bytes",
                         (unsigned long long)a->total_bytes);
  }
  drop_fetch(w);
  w->buf = buf;
  w->buf_bytes = cap;
  w->state = state;
  w->sums = sums;
  longhaul__weights_announce__init(&w->ann);
  w->ann.version = a->version;
  w->ann.total_bytes = a->total_bytes;
  w->ann.chunk_bytes = a->chunk_bytes;
  w->ann.chunk_count = a->chunk_count;
  w->ann.checksum = a->checksum;
  w->ann.stage_index = a->stage_index;
  w->ann.max_context = a->max_context;
  w->ann.long_frac = a->long_frac;
  w->fetching = 1;
  if (other) w->superseded = 1;
  return 1;
}

int lh_actors_weights_next_request(lh_actors_weights *w, uint32_t window, Longhaul__WeightsRequest *req) {
  if (!w || !req || !w->fetching || window == 0) return 0;
  uint32_t n = w->ann.chunk_count, i = 0;
  while (i < n && w->state[i] != 0) i++;
  if (i == n) return 0;
  uint32_t j = i;
  while (j < n && j - i < window && w->state[j] == 0) w->state[j++] = 1;
  req->version = w->ann.version;
  req->first_chunk = i;
  req->chunk_count = j - i;
  return 1;
}

void lh_actors_weights_rerequest(lh_actors_weights *w) {
  if (!w || !w->fetching) return;
  for (uint32_t i = 0; i < w->ann.chunk_count; i++)
    if (w->state[i] == 1) w->state[i] = 0;
}

int lh_actors_weights_add_chunk(lh_actors_weights *w, const Longhaul__WeightsChunk *c, lh_errbuf *err) {
  if (!w || !c) return lh_errbuf_set(err, LH_EINVAL, "weights chunk: NULL argument");
  if (!w->fetching || c->version != w->ann.version) return 0;
  const Longhaul__WeightsAnnounce *a = &w->ann;
  uint32_t i = c->chunk_index;
  if (i >= a->chunk_count)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK, "weights chunk: index %u of version %llu is past %u chunks",
                         i, (unsigned long long)a->version, a->chunk_count);
  uint64_t off = (uint64_t)i * a->chunk_bytes;
  uint64_t len = a->total_bytes - off < a->chunk_bytes ? a->total_bytes - off : a->chunk_bytes;
  if (c->offset != off || c->data.len != len || (len && !c->data.data))
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK,
                         "weights chunk: chunk %u of version %llu is at offset %llu with %zu bytes; the "
                         "announcement puts it at %llu with %llu",
                         i, (unsigned long long)a->version, (unsigned long long)c->offset, c->data.len,
                         (unsigned long long)off, (unsigned long long)len);
  if (lh_wire_checksum(c->data.data, c->data.len) != c->checksum)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK,
                         "weights chunk: chunk %u of version %llu does not match its own checksum", i,
                         (unsigned long long)a->version);
  if (w->state[i] == 2) return 0;
  memcpy(w->buf + off, c->data.data, len);
  w->state[i] = 2;
  w->sums[i] = c->checksum;
  if (++w->received < a->chunk_count) return 0;
  /* Every chunk's bytes were checked against its checksum: the version's
   * checksum follows from those (lh_wire_weights_checksum). */
  uint64_t sum = lh_wire_weights_checksum(w->sums, a->chunk_count);
  if (sum != a->checksum) {
    /* Every chunk matched its own checksum, yet the whole does not: the
     * announcement and the chunks disagree. Start this version over. */
    memset(w->state, 0, a->chunk_count);
    w->received = 0;
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHECKSUM,
                         "weights: version %llu's %llu bytes hash to %016llx, the announcement says "
                         "%016llx; fetching it again",
                         (unsigned long long)a->version, (unsigned long long)a->total_bytes,
                         (unsigned long long)sum, (unsigned long long)a->checksum);
  }
  free(w->spare);
  w->spare = w->complete;
  w->spare_bytes = w->complete_cap;
  w->complete = w->buf;
  w->complete_cap = w->buf_bytes;
  w->complete_bytes = a->total_bytes;
  w->complete_version = a->version;
  w->complete_checksum = a->checksum;
  w->superseded = 0;
  w->complete_stage = (lh_actors_stage){a->stage_index, a->max_context, a->long_frac};
  w->have_complete = 1;
  w->buf = NULL;
  drop_fetch(w);
  return 1;
}

int lh_actors_weights_latest_stage(const lh_actors_weights *w, lh_actors_stage *stage) {
  if (!w || !w->have_complete) return 0;
  if (stage) *stage = w->complete_stage;
  return 1;
}

const uint8_t *lh_actors_weights_latest(const lh_actors_weights *w, uint64_t *version, size_t *bytes) {
  if (!w || !w->have_complete) return NULL;
  if (version) *version = w->complete_version;
  if (bytes) *bytes = w->complete_bytes;
  return w->complete;
}

int lh_actors_weights_progress(const lh_actors_weights *w, uint64_t *version, uint32_t *received,
                               uint32_t *total) {
  if (!w || !w->fetching) return 0;
  if (version) *version = w->ann.version;
  if (received) *received = w->received;
  if (total) *total = w->ann.chunk_count;
  return 1;
}

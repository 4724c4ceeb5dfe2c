/* actors: fetching announced weights in chunks, into a second buffer, with
 * the layout and the checksums verified. When the announcement carries the
 * chunks' checksums, the chunks that match the complete version's are
 * copied from it and only the others are asked for; chunks may come
 * zstd-compressed when this side accepts it, and are decompressed into
 * exactly their announced size, never more. */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "actors/internal.h"
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
  uint64_t *complete_sums;  /* its chunks' checksums (complete_chunks of chunk_bytes) */
  uint32_t complete_chunks, complete_chunk_bytes;
  int accept_zstd;
  ZSTD_DCtx *dctx;  /* made on the first compressed chunk */
  lh_actors_weights_fetch_stats stats, last_stats;
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
  uint64_t *ann_sums;  /* the announced chunk checksums, or NULL */
  uint32_t received;
  uint32_t in_flight;  /* chunks requested and not yet in (state 1) */
};

/* A zstd frame may not ask for a window over 2^27 bytes (the chunk limit is
 * 16 MiB); a one-shot decompression into the chunk's place allocates no
 * window anyway. */
#define WEIGHTS_ZSTD_WINDOW_LOG_MAX 27

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

void lh_actors_weights_set_zstd(lh_actors_weights *w, int accept) {
  if (w) w->accept_zstd = accept != 0;
}

static void drop_fetch(lh_actors_weights *w) {
  free(w->buf);
  free(w->state);
  free(w->sums);
  free(w->ann_sums);
  w->buf = NULL;
  w->state = NULL;
  w->sums = NULL;
  w->ann_sums = NULL;
  w->fetching = 0;
  w->received = 0;
  w->in_flight = 0;
}

void lh_actors_weights_free(lh_actors_weights *w) {
  if (!w) return;
  drop_fetch(w);
  free(w->complete);
  free(w->complete_sums);
  free(w->spare);
  ZSTD_freeDCtx(w->dctx);
  free(w);
}

/* The chunks of the fetch just started whose announced checksum is that of
 * the same chunk of the complete version (same layout): copied from it and
 * marked received. Returns 1 when that is every chunk. */
static int reuse_held(lh_actors_weights *w) {
  const Longhaul__WeightsAnnounce *a = &w->ann;
  if (!w->ann_sums || !w->have_complete || !w->complete_sums || w->complete_bytes != a->total_bytes ||
      w->complete_chunk_bytes != a->chunk_bytes || w->complete_chunks != a->chunk_count)
    return 0;
  for (uint32_t i = 0; i < a->chunk_count; i++) {
    if (w->ann_sums[i] != w->complete_sums[i]) continue;
    uint64_t off = (uint64_t)i * a->chunk_bytes;
    uint64_t len = a->total_bytes - off < a->chunk_bytes ? a->total_bytes - off : a->chunk_bytes;
    memcpy(w->buf + off, w->complete + off, len);
    w->state[i] = 2;
    w->sums[i] = w->ann_sums[i];
    w->received++;
    w->stats.chunks_reused++;
    w->stats.bytes_reused += len;
  }
  return w->received == a->chunk_count;
}

/* All chunks are in: checks the version's checksum and makes the version
 * the complete one (1), or starts it over (LH_EACTORS_WEIGHTS_CHECKSUM). */
static int finish(lh_actors_weights *w, lh_errbuf *err) {
  const Longhaul__WeightsAnnounce *a = &w->ann;
  /* Every chunk's bytes were checked against its checksum: the version's
   * checksum follows from those (lh_wire_weights_checksum). */
  uint64_t sum = lh_wire_weights_checksum(w->sums, a->chunk_count);
  if (sum != a->checksum) {
    /* Every chunk matched its own checksum, yet the whole does not: the
     * announcement and the chunks disagree. Start this version over, every
     * chunk fetched. */
    memset(w->state, 0, a->chunk_count);
    w->received = 0;
    w->in_flight = 0;
    free(w->ann_sums);
    w->ann_sums = NULL;
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
  free(w->complete_sums);
  w->complete_sums = w->sums;
  w->complete_chunks = a->chunk_count;
  w->complete_chunk_bytes = a->chunk_bytes;
  w->sums = NULL;
  w->superseded = 0;
  w->complete_stage = (lh_actors_stage){a->stage_index, a->max_context, a->long_frac};
  w->have_complete = 1;
  w->last_stats = w->stats;
  w->buf = NULL;
  drop_fetch(w);
  return 1;
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
  if (a->n_chunk_checksums != 0 && a->n_chunk_checksums != a->chunk_count)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ANNOUNCE,
                         "weights announce: version %llu has %zu chunk checksums for %u chunks",
                         (unsigned long long)a->version, a->n_chunk_checksums, a->chunk_count);
  /* Chunk checksums that do not make the version's are not used: the
   * version is then fetched whole, and its checksum decides. */
  int with_sums = a->n_chunk_checksums == a->chunk_count && a->chunk_count > 0 &&
                  lh_wire_weights_checksum(a->chunk_checksums, a->chunk_count) == a->checksum;
  uint8_t *buf = NULL, *state = calloc(a->chunk_count, 1);
  uint64_t *sums = malloc((size_t)a->chunk_count * sizeof *sums);
  uint64_t *ann_sums = with_sums ? malloc((size_t)a->chunk_count * sizeof *ann_sums) : NULL;
  size_t cap = a->total_bytes;
  if (!sums || (with_sums && !ann_sums)) {
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
    free(ann_sums);
    return lh_errbuf_set(err, LH_ENOMEM, "weights announce: out of memory for %llu bytes",
                         (unsigned long long)a->total_bytes);
  }
  drop_fetch(w);
  w->buf = buf;
  w->buf_bytes = cap;
  w->state = state;
  w->sums = sums;
  w->ann_sums = ann_sums;
  if (ann_sums) memcpy(ann_sums, a->chunk_checksums, (size_t)a->chunk_count * sizeof *ann_sums);
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
  memset(&w->stats, 0, sizeof w->stats);
  w->stats.version = a->version;
  w->stats.total_bytes = a->total_bytes;
  w->stats.chunk_count = a->chunk_count;
  if (reuse_held(w)) return finish(w, err) == 1 ? 2 : 1;
  return 1;
}

int lh_actors_weights_next_request(lh_actors_weights *w, uint32_t window, Longhaul__WeightsRequest *req) {
  if (!w || !req || !w->fetching || window == 0) return 0;
  uint32_t n = w->ann.chunk_count, i = 0;
  while (i < n && w->state[i] != 0) i++;
  if (i == n) return 0;
  uint32_t j = i;
  while (j < n && j - i < window && w->state[j] == 0) w->state[j++] = 1;
  w->in_flight += j - i;
  req->version = w->ann.version;
  req->first_chunk = i;
  req->chunk_count = j - i;
  req->accept_zstd = w->accept_zstd;
  w->stats.requests++;
  w->stats.chunks_requested += j - i;
  return 1;
}

void lh_actors_weights_rerequest(lh_actors_weights *w) {
  if (!w || !w->fetching) return;
  for (uint32_t i = 0; i < w->ann.chunk_count; i++)
    if (w->state[i] == 1) w->state[i] = 0;
  w->in_flight = 0;
}

/* Decodes the zstd frame of chunk i into its place (len bytes): 0, or
 * LH_EACTORS_WEIGHTS_ENCODING when this side did not ask for zstd, the
 * frame does not state exactly len bytes, or it does not decode to them. */
static int decode_zstd(lh_actors_weights *w, const Longhaul__WeightsChunk *c, uint8_t *dst, uint64_t len,
                       lh_errbuf *err) {
  uint32_t i = c->chunk_index;
  unsigned long long v = (unsigned long long)w->ann.version;
  if (!w->accept_zstd)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ENCODING,
                         "weights chunk: chunk %u of version %llu is zstd-compressed but zstd was not asked for", i, v);
  if (!c->data.data || c->data.len == 0)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ENCODING, "weights chunk: chunk %u of version %llu: empty zstd frame",
                         i, v);
  unsigned long long stated = ZSTD_getFrameContentSize(c->data.data, c->data.len);
  if (stated == ZSTD_CONTENTSIZE_ERROR || stated == ZSTD_CONTENTSIZE_UNKNOWN || stated != len)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ENCODING,
                         "weights chunk: chunk %u of version %llu: zstd frame %s, the announcement says %llu bytes",
                         i, v,
                         stated == ZSTD_CONTENTSIZE_ERROR     ? "is not a zstd frame"
                         : stated == ZSTD_CONTENTSIZE_UNKNOWN ? "states no content size"
                                                              : "states another size",
                         (unsigned long long)len);
  if (!w->dctx) {
    if (!(w->dctx = ZSTD_createDCtx())) return lh_errbuf_set(err, LH_ENOMEM, "weights chunk: out of memory for zstd");
    ZSTD_DCtx_setParameter(w->dctx, ZSTD_d_windowLogMax, WEIGHTS_ZSTD_WINDOW_LOG_MAX);
  }
  /* dst has room for exactly len bytes: zstd never writes past it, and a
   * frame that decodes to more (or a second frame) is an error. */
  size_t got = ZSTD_decompressDCtx(w->dctx, dst, len, c->data.data, c->data.len);
  if (ZSTD_isError(got) || got != len)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ENCODING,
                         "weights chunk: chunk %u of version %llu: zstd frame does not decode to %llu bytes (%s)", i,
                         v, (unsigned long long)len, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
  return 0;
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
  int zstd = c->encoding == LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
  if (c->encoding != LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_RAW && !zstd)
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_ENCODING, "weights chunk: chunk %u of version %llu has encoding %d",
                         i, (unsigned long long)a->version, (int)c->encoding);
  if (c->offset != off || (!zstd && (c->data.len != len || (len && !c->data.data))))
    return lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK,
                         "weights chunk: chunk %u of version %llu is at offset %llu with %zu bytes; the "
                         "announcement puts it at %llu with %llu",
                         i, (unsigned long long)a->version, (unsigned long long)c->offset, c->data.len,
                         (unsigned long long)off, (unsigned long long)len);
  if (w->state[i] == 2) return 0;  /* a duplicate, or held from the complete version */
  if (w->state[i] == 1) w->in_flight--;  /* refused or taken below: no longer awaited */
  int rc = 0;
  if (!zstd && lh_wire_checksum(c->data.data, c->data.len) != c->checksum)
    rc = lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK,
                       "weights chunk: chunk %u of version %llu does not match its own checksum", i,
                       (unsigned long long)a->version);
  else if (w->ann_sums && c->checksum != w->ann_sums[i])
    rc = lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHECKSUM,
                       "weights chunk: chunk %u of version %llu carries checksum %016llx, the announcement "
                       "%016llx; asking for it again",
                       i, (unsigned long long)a->version, (unsigned long long)c->checksum,
                       (unsigned long long)w->ann_sums[i]);
  else if (zstd && !(rc = decode_zstd(w, c, w->buf + off, len, err)) &&
           lh_wire_checksum(w->buf + off, len) != c->checksum)
    rc = lh_errbuf_set(err, LH_EACTORS_WEIGHTS_CHUNK,
                       "weights chunk: chunk %u of version %llu does not match its own checksum once "
                       "decompressed",
                       i, (unsigned long long)a->version);
  if (rc) {
    /* Not taken: the chunk is asked for again (a raw one left the buffer
     * untouched; a bad frame's bytes are overwritten by the next). */
    if (rc != LH_ENOMEM) w->stats.chunks_refused++;
    w->state[i] = 0;
    return rc;
  }
  if (!zstd) memcpy(w->buf + off, c->data.data, len);
  w->state[i] = 2;
  w->sums[i] = c->checksum;
  w->stats.chunks_fetched++;
  w->stats.chunks_zstd += zstd;
  w->stats.wire_bytes += c->data.len;
  w->stats.bytes_fetched += len;
  if (++w->received < a->chunk_count) return 0;
  return finish(w, err);
}

uint32_t lh_actors_weights_in_flight(const lh_actors_weights *w) { return w && w->fetching ? w->in_flight : 0; }

int lh_actors_weights_last_fetch(const lh_actors_weights *w, lh_actors_weights_fetch_stats *stats) {
  if (!w || !w->have_complete) return 0;
  if (stats) *stats = w->last_stats;
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

/* learner: one version's weights, announced and served in checksummed
 * chunks, each zstd-compressed for a requester that accepts it when that
 * pays (once per chunk and version, on the first such request). */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "learner/internal.h"
#include "proto/wire.h"

struct lh_learner_weights {
  uint64_t version;
  uint8_t *bytes;
  size_t n;
  uint32_t chunk_bytes, chunk_count;
  uint64_t checksum;
  uint64_t *chunk_checksums;
  /* zstd, set up on the first request that accepts it: per chunk, 0 not
   * tried for this version, 1 compressed (zdata, zlen), 2 does not pay */
  ZSTD_CCtx *cctx;
  uint8_t *zstate;
  uint8_t **zdata;
  size_t *zlen, *zcap;
  uint8_t *scratch;  /* ZSTD_compressBound(chunk_bytes) */
  size_t scratch_bytes;
  lh_learner_weights_zstd_counts zcounts;
};

/* zstd level 1: a learner compresses each chunk of each version for its
 * actors, so speed matters more than the last percent (float weights
 * compress little at any level). */
#define WEIGHTS_ZSTD_LEVEL 1
/* Announcements carry the chunk checksums up to this many chunks (8 MiB of
 * them); past it actors fetch whole versions. */
#define WEIGHTS_MAX_ANNOUNCED_CHECKSUMS (1u << 20)

/* Copies the bytes in and computes the checksums of a layout already set. */
static void fill(lh_learner_weights *w, uint64_t version, const void *bytes) {
  memcpy(w->bytes, bytes, w->n);
  w->version = version;
  for (uint32_t i = 0; i < w->chunk_count; i++) {
    size_t off = (size_t)i * w->chunk_bytes, len = w->n - off < w->chunk_bytes ? w->n - off : w->chunk_bytes;
    w->chunk_checksums[i] = lh_wire_checksum(w->bytes + off, len);
  }
  w->checksum = lh_wire_weights_checksum(w->chunk_checksums, w->chunk_count);
  if (w->zstate) memset(w->zstate, 0, w->chunk_count);
}

lh_learner_weights *lh_learner_weights_new(uint64_t version, const void *bytes, size_t n,
                                           uint32_t chunk_bytes, lh_errbuf *err) {
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  if (!bytes || n == 0) {
    lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_PARAMS, "weights: version %llu has no bytes",
                  (unsigned long long)version);
    return NULL;
  }
  if (chunk_bytes < 1 || chunk_bytes > lim.max_chunk_bytes) {
    lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_PARAMS, "weights: chunk_bytes=%u is not in 1..%u", chunk_bytes,
                  lim.max_chunk_bytes);
    return NULL;
  }
  uint64_t count = n / chunk_bytes + (n % chunk_bytes != 0);
  if (count > UINT32_MAX) {
    lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_PARAMS, "weights: %zu bytes in chunks of %u is over 2^32 chunks",
                  n, chunk_bytes);
    return NULL;
  }
  lh_learner_weights *w = calloc(1, sizeof *w);
  if (w) {
    w->bytes = malloc(n);
    w->chunk_checksums = malloc(count * sizeof *w->chunk_checksums);
  }
  if (!w || !w->bytes || !w->chunk_checksums) {
    lh_learner_weights_free(w);
    lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory for %zu bytes", n);
    return NULL;
  }
  w->n = n;
  w->chunk_bytes = chunk_bytes;
  w->chunk_count = (uint32_t)count;
  fill(w, version, bytes);
  return w;
}

int lh_learner_weights_refill(lh_learner_weights *w, uint64_t version, const void *bytes, size_t n) {
  if (!w || !bytes || n != w->n) return 0;
  fill(w, version, bytes);
  return 1;
}

void lh_learner_weights_free(lh_learner_weights *w) {
  if (!w) return;
  free(w->bytes);
  free(w->chunk_checksums);
  if (w->zdata)
    for (uint32_t i = 0; i < w->chunk_count; i++) free(w->zdata[i]);
  free(w->zdata);
  free(w->zlen);
  free(w->zcap);
  free(w->zstate);
  free(w->scratch);
  ZSTD_freeCCtx(w->cctx);
  free(w);
}

void lh_learner_weights_announce(const lh_learner_weights *w, Longhaul__WeightsAnnounce *a) {
  if (!w || !a) return;
  a->version = w->version;
  a->total_bytes = w->n;
  a->chunk_bytes = w->chunk_bytes;
  a->chunk_count = w->chunk_count;
  a->checksum = w->checksum;
  a->checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64;
  if (w->chunk_count <= WEIGHTS_MAX_ANNOUNCED_CHECKSUMS) {
    a->n_chunk_checksums = w->chunk_count;
    a->chunk_checksums = w->chunk_checksums;
  }
}

uint32_t lh_learner_weights_chunk_count(const lh_learner_weights *w) { return w ? w->chunk_count : 0; }

int lh_learner_weights_chunk(const lh_learner_weights *w, uint32_t index, Longhaul__WeightsChunk *c,
                             lh_errbuf *err) {
  if (!w || !c) return lh_errbuf_set(err, LH_EINVAL, "weights chunk: NULL weights or chunk");
  if (index >= w->chunk_count)
    return lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_REQUEST,
                         "weights chunk: index %u of version %llu is past the last chunk %u", index,
                         (unsigned long long)w->version, w->chunk_count - 1);
  size_t off = (size_t)index * w->chunk_bytes;
  size_t len = w->n - off < w->chunk_bytes ? w->n - off : w->chunk_bytes;
  c->version = w->version;
  c->chunk_index = index;
  c->offset = off;
  c->data.data = w->bytes + off;
  c->data.len = len;
  c->checksum = w->chunk_checksums[index];
  c->checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64;
  return 0;
}

int lh_learner_weights_serve(const lh_learner_weights *w, const Longhaul__WeightsRequest *req,
                             uint32_t *first, uint32_t *count, lh_errbuf *err) {
  if (!w || !req || !first || !count) return lh_errbuf_set(err, LH_EINVAL, "weights serve: NULL argument");
  if (req->version != w->version)
    return lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_REQUEST,
                         "weights serve: request for version %llu but version %llu is served; fetch the "
                         "latest announcement",
                         (unsigned long long)req->version, (unsigned long long)w->version);
  if (req->first_chunk >= w->chunk_count)
    return lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_REQUEST,
                         "weights serve: first_chunk %u is past the last chunk %u of version %llu",
                         req->first_chunk, w->chunk_count - 1, (unsigned long long)w->version);
  uint32_t left = w->chunk_count - req->first_chunk;
  if (req->chunk_count > left)
    return lh_errbuf_set(err, LH_ELEARNER_WEIGHTS_REQUEST,
                         "weights serve: chunks %u..%llu asked but version %llu has %u chunks",
                         req->first_chunk, (unsigned long long)req->first_chunk + req->chunk_count - 1,
                         (unsigned long long)w->version, w->chunk_count);
  *first = req->first_chunk;
  *count = req->chunk_count ? req->chunk_count : left;
  return 0;
}

/* Sets up the zstd state on first use: 0, or LH_ENOMEM. */
static int zstd_setup(lh_learner_weights *w, lh_errbuf *err) {
  if (w->zstate) return 0;
  w->cctx = ZSTD_createCCtx();
  w->zdata = calloc(w->chunk_count, sizeof *w->zdata);
  w->zlen = calloc(w->chunk_count, sizeof *w->zlen);
  w->zcap = calloc(w->chunk_count, sizeof *w->zcap);
  w->scratch_bytes = ZSTD_compressBound(w->chunk_bytes);
  w->scratch = malloc(w->scratch_bytes);
  uint8_t *state = calloc(w->chunk_count, 1);
  if (!w->cctx || !w->zdata || !w->zlen || !w->zcap || !w->scratch || !state) {
    free(state);
    return lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory for zstd of %u chunks", w->chunk_count);
  }
  w->zstate = state;  /* set last: the rest is there when zstate is */
  return 0;
}

/* Compresses chunk index of the current version into zdata[index] when the
 * frame is at least 1/16 smaller than the chunk; else marks it raw. */
static int zstd_try(lh_learner_weights *w, uint32_t index, const uint8_t *src, size_t len, lh_errbuf *err) {
  size_t z = ZSTD_compressCCtx(w->cctx, w->scratch, w->scratch_bytes, src, len, WEIGHTS_ZSTD_LEVEL);
  w->zcounts.tried++;
  if (ZSTD_isError(z) || z > len - len / 16) {
    w->zstate[index] = 2;
    return 0;
  }
  if (w->zcap[index] < z) {
    uint8_t *b = realloc(w->zdata[index], z);
    if (!b) return lh_errbuf_set(err, LH_ENOMEM, "weights: out of memory for a compressed chunk of %zu bytes", z);
    w->zdata[index] = b, w->zcap[index] = z;
  }
  memcpy(w->zdata[index], w->scratch, z);
  w->zlen[index] = z;
  w->zstate[index] = 1;
  w->zcounts.compressed++;
  return 0;
}

int lh_learner_weights_chunk_encoded(lh_learner_weights *w, uint32_t index, int accept_zstd,
                                     Longhaul__WeightsChunk *c, lh_errbuf *err) {
  LH_TRY(lh_learner_weights_chunk(w, index, c, err));
  c->encoding = LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_RAW;
  if (!accept_zstd) return 0;
  LH_TRY(zstd_setup(w, err));
  if (w->zstate[index] == 0) LH_TRY(zstd_try(w, index, c->data.data, c->data.len, err));
  if (w->zstate[index] == 1) {
    c->data.data = w->zdata[index];
    c->data.len = w->zlen[index];
    c->encoding = LONGHAUL__WEIGHTS_ENCODING__WEIGHTS_ENCODING_ZSTD;
  }
  return 0;
}

lh_learner_weights_zstd_counts lh_learner_weights_get_zstd_counts(const lh_learner_weights *w) {
  lh_learner_weights_zstd_counts none = {0};
  return w ? w->zcounts : none;
}

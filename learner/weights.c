/* learner: one version's weights, announced and served in checksummed
 * chunks. */
#include <stdlib.h>
#include <string.h>

#include "learner/learner.h"
#include "proto/wire.h"

struct lh_learner_weights {
  uint64_t version;
  uint8_t *bytes;
  size_t n;
  uint32_t chunk_bytes, chunk_count;
  uint64_t checksum;
  uint64_t *chunk_checksums;
};

/* Copies the bytes in and computes the checksums of a layout already set. */
static void fill(lh_learner_weights *w, uint64_t version, const void *bytes) {
  memcpy(w->bytes, bytes, w->n);
  w->version = version;
  for (uint32_t i = 0; i < w->chunk_count; i++) {
    size_t off = (size_t)i * w->chunk_bytes, len = w->n - off < w->chunk_bytes ? w->n - off : w->chunk_bytes;
    w->chunk_checksums[i] = lh_wire_checksum(w->bytes + off, len);
  }
  w->checksum = lh_wire_weights_checksum(w->chunk_checksums, w->chunk_count);
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
  free(w);
}

void lh_learner_weights_announce(const lh_learner_weights *w, Longhaul__WeightsAnnounce *a) {
  if (!w || !a) return;
  a->version = w->version;
  a->total_bytes = w->n;
  a->chunk_bytes = w->chunk_bytes;
  a->chunk_count = w->chunk_count;
  a->checksum = w->checksum;
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

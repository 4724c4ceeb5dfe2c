/* Test fixture for the wire suites: one valid instance of every message
 * kind with every field set to a distinct, non-default value, so that a
 * round trip that drops or mangles any field shows. */
#ifndef LH_TEST_WIRE_FIXTURE_H
#define LH_TEST_WIRE_FIXTURE_H

#include "proto/wire.h"

#define FX_TOKENS 64
#define FX_LAYERS 4
#define FX_TOPK 2
#define FX_CHUNK 1000

typedef struct {
  Longhaul__Envelope env;

  Longhaul__Hello hello;

  Longhaul__Segment seg;
  uint32_t tokens[FX_TOKENS];
  uint8_t mask[FX_TOKENS];
  float logp[FX_TOKENS];
  uint32_t version[FX_TOKENS];
  uint32_t experts[FX_TOKENS * FX_LAYERS * FX_TOPK];
  Longhaul__Image seg_img[2], *seg_imgp[2];
  uint8_t pix_rgb[8 * 6 * 3], pix_gray[5 * 4];

  Longhaul__EpisodeEnd end;
  Longhaul__RewardTerm end_term[3], *end_termp[3];

  Longhaul__Ack ack;
  uint64_t ids[5];

  Longhaul__Heartbeat hb;
  Longhaul__WeightsAnnounce wa;
  Longhaul__WeightsRequest wr;
  Longhaul__WeightsChunk wc;
  uint8_t chunk[FX_CHUNK];

  Longhaul__EnvRequest ereq;
  Longhaul__KeyValue kv[2], *kvp[2];

  Longhaul__EnvResponse eresp;
  Longhaul__Observation obs;
  Longhaul__Image obs_img, *obs_imgp[1];
  uint8_t obs_pix[3 * 2 * 3];
  Longhaul__RewardTerm resp_term[2], *resp_termp[2];

  /* batches: the request (response) above and a second one after it */
  Longhaul__EnvRequestBatch ereq_batch;
  Longhaul__EnvRequest ereq2, *ereq_batchp[2];
  Longhaul__EnvResponseBatch eresp_batch;
  Longhaul__EnvResponse eresp2, *eresp_batchp[2];

  Longhaul__Shutdown sd;
} wire_fixture;

/* The body cases, in protocol order. */
#define FX_BODIES 13
extern const Longhaul__Envelope__BodyCase fx_bodies[FX_BODIES];

/* Fills f with valid messages of every kind and makes body the envelope's
 * body. Everything points into f; nothing to free. */
void fx_init(wire_fixture *f, Longhaul__Envelope__BodyCase body);

/* Encodes f->env with lh_wire_encode; fails the test on error. The caller
 * frees the buffer. */
uint8_t *fx_encode(const wire_fixture *f, size_t *bytes);

/* An Envelope whose segment is reps empty images: about 2 * reps bytes on
 * the wire, fifty-fold in memory (what the parse budget refuses). Returns
 * a malloc'd buffer of *bytes; the segment's bytes start at *segment. */
uint8_t *fx_image_flood(size_t reps, size_t *bytes, size_t *segment);

#endif

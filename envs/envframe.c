/* Frames of the env protocol written around messages packed one by one:
 * an Envelope that holds one EnvRequest or EnvResponse, or a batch of
 * them (EnvRequestBatch, EnvResponseBatch; proto/longhaul.proto).
 *
 * A client packs each request into one buffer as it is begun, and which
 * frame carries it is decided when the queue leaves (envs/envhub.c); the
 * server packs each answer into the batch it is building
 * (envs/envserver.c). So nothing is allocated per request, and no message
 * is packed twice. The bytes are plain protobuf (an embedded message is
 * its field's key, its length and its bytes, in any order of fields), and
 * lh_wire_decode reads such a frame as any other. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "envs/internal.h"

int lh_envs_bytes_reserve(lh_envs_bytes *b, size_t more) {
  if (more > SIZE_MAX - b->len) return LH_ENOMEM;
  return lh_reserve(&b->data, &b->cap, b->len + more, 1, 4096) ? LH_ENOMEM : 0;
}

void lh_envs_bytes_free(lh_envs_bytes *b) {
  if (!b) return;
  free(b->data);
  memset(b, 0, sizeof *b);
}

/* Writes v as a varint at p; returns the bytes written (at most 10). */
static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

static void put_key_len(lh_envs_bytes *b, uint32_t field, size_t len) {
  b->len += put_varint(b->data + b->len, ((uint64_t)field << 3) | 2);
  b->len += put_varint(b->data + b->len, len);
}

int lh_envs_bytes_put_bytes(lh_envs_bytes *b, uint32_t field, const void *data, size_t bytes) {
  if (lh_envs_bytes_reserve(b, bytes + 20) < 0) return LH_ENOMEM;
  put_key_len(b, field, bytes);
  if (bytes) memcpy(b->data + b->len, data, bytes);
  b->len += bytes;
  return 0;
}

int lh_envs_frame_header(lh_envs_bytes *b, uint64_t msg_id, const char *sender) {
  size_t s = strlen(sender);
  if (lh_envs_bytes_reserve(b, s + 40) < 0) return LH_ENOMEM;
  b->data[b->len++] = 1 << 3; /* protocol, a varint */
  b->len += put_varint(b->data + b->len, LH_WIRE_PROTOCOL);
  b->data[b->len++] = 2 << 3; /* msg_id */
  b->len += put_varint(b->data + b->len, msg_id);
  put_key_len(b, 3, s);       /* sender */
  memcpy(b->data + b->len, sender, s);
  b->len += s;
  return 0;
}

size_t lh_envs_frame_overhead(const char *sender) { return strlen(sender) + 40; }

/* wire: encoding and decoding of longhaul messages with protobuf-c.
 *
 * Decoding checks the size limit before protobuf-c sees a byte, so that a
 * peer cannot make us parse (and allocate for) more than we accept, then
 * validates the whole message (wire_validate.c) before handing it out. */
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

void lh_wire_limits_default(lh_wire_limits *l) {
  if (!l) return;
  l->max_message_bytes = LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES;
  l->vocab = 264;
  l->max_segment_tokens = 65536;
  l->max_images = 256;
  l->max_image_side = 4096;
  l->max_string_bytes = 256;
  l->max_text_bytes = 16u << 20;
  l->max_layers = 256;
  l->max_topk = 64;
  l->max_experts = 4096;
  l->max_terms = 64;
  l->max_chunk_bytes = 16u << 20;
  l->max_ids = 65536;
  l->max_options = 256;
}

const char *lh_wire_body_name(Longhaul__Envelope__BodyCase body) {
  switch (body) {
    case LONGHAUL__ENVELOPE__BODY__NOT_SET: return "none";
    case LONGHAUL__ENVELOPE__BODY_HELLO: return "hello";
    case LONGHAUL__ENVELOPE__BODY_SEGMENT: return "segment";
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END: return "episode_end";
    case LONGHAUL__ENVELOPE__BODY_ACK: return "ack";
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT: return "heartbeat";
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE: return "weights_announce";
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST: return "weights_request";
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK: return "weights_chunk";
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST: return "env_request";
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE: return "env_response";
    case LONGHAUL__ENVELOPE__BODY_SHUTDOWN: return "shutdown";
    default: return "unknown";
  }
}

uint64_t lh_wire_checksum(const void *data, size_t bytes) { return lh_hash64(data, bytes, 0); }

/* Packs msg into a new buffer after checking its size against the default
 * limit; what names the message in errors. */
static int pack_new(const ProtobufCMessage *msg, const char *what, uint8_t **out, size_t *bytes,
                    lh_errbuf *err) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES)
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE,
                         "%s encodes to %zu bytes, over the limit of %u; send smaller pieces "
                         "(shorter segments, smaller chunks)",
                         what, n, LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "%s: cannot allocate %zu bytes to encode", what, n);
  size_t done = protobuf_c_message_pack(msg, buf);
  if (done != n) {
    free(buf);
    return lh_errbuf_set(err, LH_EWIRE_UNPARSEABLE, "%s: packed %zu bytes, expected %zu", what, done, n);
  }
  *out = buf;
  *bytes = n;
  return 0;
}

int lh_wire_encode(const Longhaul__Envelope *env, uint8_t **out, size_t *bytes, lh_errbuf *err) {
  if (!env || !out || !bytes)
    return lh_errbuf_set(err, LH_EINVAL, "lh_wire_encode: envelope, out and bytes must not be NULL");
  *out = NULL;
  *bytes = 0;
  const char *name = lh_wire_body_name(env->body_case);
  if (env->body_case == LONGHAUL__ENVELOPE__BODY__NOT_SET || strcmp(name, "unknown") == 0)
    return lh_errbuf_set(err, LH_EWIRE_NO_BODY, "lh_wire_encode: envelope carries no body (body case %d)",
                         (int)env->body_case);
  /* protobuf-c would write a body whose pointer is NULL as absent; a
   * receiver would then see no body at all. */
  if (!env->hello)
    return lh_errbuf_set(err, LH_EWIRE_MISSING, "lh_wire_encode: envelope.%s is set as the body but missing",
                         name);
  char what[64];
  snprintf(what, sizeof what, "envelope (%s)", name);
  return pack_new(&env->base, what, out, bytes, err);
}

int lh_wire_decode(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                   Longhaul__Envelope **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_wire_decode: out must not be NULL");
  *out = NULL;
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!buf && bytes > 0) return lh_errbuf_set(err, LH_EINVAL, "lh_wire_decode: NULL buffer of %zu bytes", bytes);
  if (bytes > lim->max_message_bytes)
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE, "message is %zu bytes, over the limit of %zu", bytes,
                         lim->max_message_bytes);
  static const uint8_t none[1] = {0};
  Longhaul__Envelope *env = longhaul__envelope__unpack(NULL, bytes, buf ? buf : none);
  if (!env)
    return lh_errbuf_set(err, LH_EWIRE_UNPARSEABLE,
                         "envelope: %zu bytes do not parse as a longhaul Envelope (truncated, "
                         "corrupt, or not a longhaul peer)",
                         bytes);
  int rc = lh_wire_validate(env, lim, err);
  if (rc < 0) {
    longhaul__envelope__free_unpacked(env, NULL);
    return rc;
  }
  *out = env;
  return 0;
}

void lh_wire_free(Longhaul__Envelope *env) {
  if (env) longhaul__envelope__free_unpacked(env, NULL);
}

int lh_wire_segment_encode(const Longhaul__Segment *seg, uint8_t **out, size_t *bytes,
                           lh_errbuf *err) {
  if (!seg || !out || !bytes)
    return lh_errbuf_set(err, LH_EINVAL, "lh_wire_segment_encode: segment, out and bytes must not be NULL");
  *out = NULL;
  *bytes = 0;
  return pack_new(&seg->base, "segment", out, bytes, err);
}

int lh_wire_segment_decode(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                           Longhaul__Segment **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_wire_segment_decode: out must not be NULL");
  *out = NULL;
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!buf && bytes > 0)
    return lh_errbuf_set(err, LH_EINVAL, "lh_wire_segment_decode: NULL buffer of %zu bytes", bytes);
  if (bytes > lim->max_message_bytes)
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE, "segment is %zu bytes, over the limit of %zu", bytes,
                         lim->max_message_bytes);
  static const uint8_t none[1] = {0};
  Longhaul__Segment *seg = longhaul__segment__unpack(NULL, bytes, buf ? buf : none);
  if (!seg)
    return lh_errbuf_set(err, LH_EWIRE_UNPARSEABLE,
                         "segment: %zu bytes do not parse as a longhaul Segment (truncated or corrupt "
                         "payload)",
                         bytes);
  int rc = lh_wire_validate_segment(seg, lim, err);
  if (rc < 0) {
    longhaul__segment__free_unpacked(seg, NULL);
    return rc;
  }
  *out = seg;
  return 0;
}

void lh_wire_segment_free(Longhaul__Segment *seg) {
  if (seg) longhaul__segment__free_unpacked(seg, NULL);
}

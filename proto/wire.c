/* wire: encoding and decoding of longhaul messages with protobuf-c.
 *
 * Decoding checks the size limit before protobuf-c sees a byte, so that a
 * peer cannot make us parse (and allocate for) more than we accept, then
 * parses under a memory budget, then validates the whole message
 * (wire_validate.c) before handing it out. */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "proto/wire.h"

#include "common/limits.h"

void lh_wire_limits_default(lh_wire_limits *l) {
  if (!l) return;
  l->max_message_bytes = LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES;
  l->vocab = 264;
  l->max_segment_tokens = 65536;
  l->max_images = 256;
  l->max_image_side = 4096;
  l->max_string_bytes = 256;
  l->max_text_bytes = 16u << 20;
  l->max_layers = LH_MAX_LAYERS;
  l->max_topk = LH_MAX_TOPK;
  l->max_experts = LH_MAX_EXPERTS;
  l->max_terms = 64;
  l->max_chunk_bytes = 16u << 20;
  l->max_ids = 65536;
  l->max_options = 256;
  l->skip_chunk_checksums = 0;
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
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH: return "env_request_batch";
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH: return "env_response_batch";
    default: return "unknown";
  }
}

uint64_t lh_wire_checksum(const void *data, size_t bytes) { return lh_xxh3_64(data, bytes); }

uint64_t lh_wire_weights_checksum(const uint64_t *chunk_checksums, uint32_t count) {
  /* Streamed in blocks of 64 little-endian sums: the same number as one
   * XXH3-64 of all 8 * count bytes. */
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  unsigned char le[8 * 64];
  for (uint32_t i = 0; i < count;) {
    uint32_t n = count - i < 64 ? count - i : 64;
    for (uint32_t k = 0; k < n; k++)
      for (int b = 0; b < 8; b++) le[8 * k + (uint32_t)b] = (unsigned char)(chunk_checksums[i + k] >> (8 * b));
    XXH3_64bits_update(&st, le, 8 * (size_t)n);
    i += n;
  }
  return XXH3_64bits_digest(&st);
}

/* protobuf-c allocates per element, so a small message of many tiny
 * repeated entries (empty images, unknown fields) can expand fifty-fold in
 * memory before validation could count them. Parsing therefore runs under a
 * budget of LH_WIRE_EXPANSION times the input plus a floor, tracked with the
 * allocator's own block sizes. A packed encoding of legitimate content
 * needs at most about eight times its size (one-byte varints of Ack ids
 * becoming uint64), a quarter of the budget. The blocks are plain malloc blocks, so the result is freed
 * with the default allocator. */
#define LH_WIRE_EXPANSION 32
#define LH_WIRE_EXPANSION_FLOOR (1u << 20)

typedef struct {
  size_t used, budget;
  int over;
} parse_budget;

static void *budget_alloc(void *ctx, size_t size) {
  parse_budget *b = ctx;
  if (size > b->budget || b->used > b->budget - size) {
    b->over = 1;
    return NULL;
  }
  void *p = malloc(size);
  if (p) b->used += malloc_usable_size(p);
  return p;
}

static void budget_free(void *ctx, void *p) {
  parse_budget *b = ctx;
  if (!p) return;
  b->used -= malloc_usable_size(p);
  free(p);
}

/* An arena's blocks: the newest (and largest: each doubles) first. The
 * newest stays across resets when it is at most ARENA_KEEP_BYTES, so that
 * a reused arena allocates nothing once it has grown to its work, and
 * does not keep what one large message made it take. */
typedef struct arena_block {
  struct arena_block *next;
  size_t cap, used;
  _Alignas(16) unsigned char data[];
} arena_block;

struct lh_wire_arena {
  arena_block *head;
  size_t used, limit; /* bytes handed out since the last reset; the decode's bound on it */
  size_t first;       /* the size of a first block */
  int over;
};

#define ARENA_FIRST_BLOCK 1024u
#define ARENA_KEEP_BYTES (4u << 20)

lh_wire_arena *lh_wire_arena_new(void) { return calloc(1, sizeof(lh_wire_arena)); }

void lh_wire_arena_reset(lh_wire_arena *a) {
  if (!a) return;
  arena_block *keep = a->head;
  if (keep) {
    while (keep->next) {
      arena_block *b = keep->next;
      keep->next = b->next;
      free(b);
    }
    keep->used = 0;
    if (keep->cap > ARENA_KEEP_BYTES) free(keep), a->head = NULL;
  }
  a->used = 0;
}

void lh_wire_arena_free(lh_wire_arena *a) {
  if (!a) return;
  while (a->head) {
    arena_block *b = a->head;
    a->head = b->next;
    free(b);
  }
  free(a);
}

static void *arena_alloc(void *ctx, size_t size) {
  lh_wire_arena *a = ctx;
  size = size ? (size + 15) & ~(size_t)15 : 16;
  if (size == 0 || size > a->limit || a->used > a->limit - size) {
    a->over = 1;
    return NULL;
  }
  arena_block *b = a->head;
  if (!b || b->cap - b->used < size) {
    size_t cap = b ? b->cap * 2 : a->first;
    if (cap < size) cap = size;
    if (cap > a->limit - a->used) cap = a->limit - a->used; /* never above what the decode may use */
    arena_block *n = malloc(sizeof *n + cap);
    if (!n) return NULL;
    *n = (arena_block){b, cap, 0};
    a->head = b = n;
  }
  void *p = b->data + b->used;
  b->used += size;
  a->used += size;
  return p;
}

static void arena_free(void *ctx, void *p) { (void)ctx, (void)p; /* with the arena */ }

/* Unpacks with desc under the budget for bytes, from arena (NULL: each
 * piece malloc'd); NULL on failure with the code in *rc. */
static ProtobufCMessage *unpack_bounded(const ProtobufCMessageDescriptor *desc, const uint8_t *buf,
                                        size_t bytes, const char *what, lh_wire_arena *arena, int *rc,
                                        lh_errbuf *err) {
  static const uint8_t none[1] = {0};
  parse_budget b = {0, LH_WIRE_EXPANSION_FLOOR, 0};
  if (bytes <= (SIZE_MAX - LH_WIRE_EXPANSION_FLOOR) / LH_WIRE_EXPANSION)
    b.budget += bytes * LH_WIRE_EXPANSION;
  else
    b.budget = SIZE_MAX;
  ProtobufCAllocator alloc = {budget_alloc, budget_free, &b};
  if (arena) {
    arena->over = 0;
    /* a message unpacks to a few times its bytes: mostly one block */
    arena->first = bytes < ARENA_FIRST_BLOCK / 4 ? ARENA_FIRST_BLOCK : bytes < SIZE_MAX / 8 ? 4 * bytes : bytes;
    arena->limit = arena->used > SIZE_MAX - b.budget ? SIZE_MAX : arena->used + b.budget;
    alloc = (ProtobufCAllocator){arena_alloc, arena_free, arena};
  }
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, bytes, buf ? buf : none);
  if (m) return m;
  if (arena) b.over = arena->over;
  if (b.over) {
    *rc = lh_errbuf_set(err, LH_EWIRE_EXPANSION,
                        "%s: %zu bytes would need more than %zu bytes of memory to parse (a flood "
                        "of tiny repeated entries)",
                        what, bytes, b.budget);
  } else {
    *rc = lh_errbuf_set(err, LH_EWIRE_UNPARSEABLE,
                        "%s: %zu bytes do not parse as a longhaul %s (truncated, corrupt, or not a "
                        "longhaul peer)",
                        what, bytes, desc->short_name);
  }
  return NULL;
}

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

typedef int (*validate_fn)(const ProtobufCMessage *m, const lh_wire_limits *lim, lh_errbuf *err);

static int validate_envelope(const ProtobufCMessage *m, const lh_wire_limits *lim, lh_errbuf *err) {
  return lh_wire_validate((const Longhaul__Envelope *)m, lim, err);
}

static int validate_segment(const ProtobufCMessage *m, const lh_wire_limits *lim, lh_errbuf *err) {
  return lh_wire_validate_segment((const Longhaul__Segment *)m, lim, err);
}

/* Decodes a message of desc from buf[0..bytes): the buffer and its size
 * checked against lim (the defaults when NULL), unpacked within its
 * memory budget, then validated. 0 with *out (the caller frees it), or the
 * code with err. fn names the caller in argument errors, what the message
 * in the size error ("message", "segment"), unpacked what unpack_bounded
 * calls it. */
static int decode_checked(const ProtobufCMessageDescriptor *desc, validate_fn validate, const char *fn,
                          const char *what, const char *unpacked, const uint8_t *buf, size_t bytes,
                          const lh_wire_limits *lim, lh_wire_arena *arena, ProtobufCMessage **out,
                          lh_errbuf *err) {
  lh_wire_limits def;
  if (!lim) lh_wire_limits_default(&def), lim = &def;
  if (!buf && bytes > 0) return lh_errbuf_set(err, LH_EINVAL, "%s: NULL buffer of %zu bytes", fn, bytes);
  if (bytes > lim->max_message_bytes)
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE, "%s is %zu bytes, over the limit of %zu", what, bytes,
                         lim->max_message_bytes);
  int rc = 0;
  ProtobufCMessage *m = unpack_bounded(desc, buf, bytes, unpacked, arena, &rc, err);
  if (!m) return rc;
  rc = validate(m, lim, err);
  if (rc < 0) {
    if (!arena) protobuf_c_message_free_unpacked(m, NULL);
    return rc;
  }
  *out = m;
  return 0;
}

int lh_wire_decode(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                   Longhaul__Envelope **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_wire_decode: out must not be NULL");
  *out = NULL;
  ProtobufCMessage *m = NULL;
  int rc = decode_checked(&longhaul__envelope__descriptor, validate_envelope, "lh_wire_decode", "message",
                          "envelope", buf, bytes, lim, NULL, &m, err);
  if (!rc) *out = (Longhaul__Envelope *)m;
  return rc;
}

int lh_wire_decode_in(lh_wire_arena *arena, const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                      Longhaul__Envelope **out, lh_errbuf *err) {
  if (!out || !arena) return lh_errbuf_set(err, LH_EINVAL, "lh_wire_decode_in: arena and out must not be NULL");
  *out = NULL;
  ProtobufCMessage *m = NULL;
  int rc = decode_checked(&longhaul__envelope__descriptor, validate_envelope, "lh_wire_decode_in", "message",
                          "envelope", buf, bytes, lim, arena, &m, err);
  if (!rc) *out = (Longhaul__Envelope *)m;
  return rc;
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
  ProtobufCMessage *m = NULL;
  int rc = decode_checked(&longhaul__segment__descriptor, validate_segment, "lh_wire_segment_decode", "segment",
                          "segment", buf, bytes, lim, NULL, &m, err);
  if (!rc) *out = (Longhaul__Segment *)m;
  return rc;
}

/* A varint at b[*i]; 1 on a truncated or over-long one. */
static int top_varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*i >= n) return 1;
    uint8_t c = b[(*i)++];
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) return 0;
  }
  return 1;
}

int lh_wire_segment_bytes(const uint8_t *buf, size_t bytes, const uint8_t **seg,
                          size_t *seg_bytes) {
  if (!buf || !seg || !seg_bytes) return 0;
  int found = 0;
  size_t i = 0;
  while (i < bytes) {
    uint64_t key, v;
    if (top_varint(buf, bytes, &i, &key)) return 0;
    unsigned type = (unsigned)(key & 7);
    if (type == 0) {
      if (top_varint(buf, bytes, &i, &v)) return 0;
    } else if (type == 1 || type == 5) {
      size_t w = type == 1 ? 8 : 4;
      if (bytes - i < w) return 0;
      i += w;
    } else if (type == 2) {
      if (top_varint(buf, bytes, &i, &v) || v > bytes - i) return 0;
      if (key >> 3 == LONGHAUL__ENVELOPE__BODY_SEGMENT) {
        if (found++) return 0;
        *seg = buf + i, *seg_bytes = (size_t)v;
      }
      i += (size_t)v;
    } else {
      return 0; /* groups: never sent by longhaul */
    }
  }
  return found == 1;
}

void lh_wire_segment_free(Longhaul__Segment *seg) {
  if (seg) longhaul__segment__free_unpacked(seg, NULL);
}

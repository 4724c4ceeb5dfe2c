/* wire: encode, decode and validate longhaul messages.
 *
 * Every byte that arrives from outside goes through lh_wire_decode (or
 * lh_wire_segment_decode for a stored payload), which checks the size limit
 * before parsing and then validates every field before the caller sees the
 * message: array lengths agree, token ids are below the vocabulary, counts
 * are within limits, strings are bounded and valid. Each rejection is a
 * distinct LH_EWIRE_* code, and the message in err names the field. */
#ifndef LH_WIRE_H
#define LH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "proto/longhaul.pb-c.h"

/* Bumped when a change to longhaul.proto is not backward compatible. */
#define LH_WIRE_PROTOCOL 1
#define LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES (64u << 20)

typedef struct {
  size_t max_message_bytes;     /* whole encoded message; default 64 MiB */
  uint32_t vocab;               /* token ids must be below; default 264 */
  uint32_t max_segment_tokens;  /* default 65536 */
  uint32_t max_images;          /* per segment or observation; default 256 */
  uint32_t max_image_side;      /* pixels per side; default 4096 */
  uint32_t max_string_bytes;    /* names, env, actor, term names; default 256 */
  uint32_t max_text_bytes;      /* observation text, actions, errors; default 16 MiB */
  uint32_t max_layers;          /* routed_layers; default 256 */
  uint32_t max_topk;            /* routed_topk; default 64 */
  uint32_t max_experts;         /* routed expert ids must be below; default 4096 */
  uint32_t max_terms;           /* reward terms; default 64 */
  uint32_t max_chunk_bytes;     /* weights chunk data; default 16 MiB */
  uint32_t max_ids;             /* msg ids in one Ack; default 65536 */
  uint32_t max_options;         /* env options; default 256 */
  /* 1: WeightsChunk data is not hashed against its checksum here, for a
   * receiver that verifies every chunk itself (actors/weights.c), so a
   * version is not hashed twice on its way in; default 0. */
  int skip_chunk_checksums;
} lh_wire_limits;

/* Fills l with the defaults above. */
void lh_wire_limits_default(lh_wire_limits *l);

/* Validates a message already in memory (decoded, or built by the caller
 * before sending). Returns 0 or an LH_EWIRE_* code with err naming the field. */
int lh_wire_validate(const Longhaul__Envelope *env, const lh_wire_limits *lim, lh_errbuf *err);
/* A name a peer puts on the wire (an actor's, the sender of its messages)
 * checked as the receiver checks it: valid UTF-8 of at most
 * max_string_bytes (lim NULL: the defaults); what names it in err. So a
 * command refuses a bad --name at start, not at its first send. */
int lh_wire_check_name(const char *name, const lh_wire_limits *lim, const char *what, lh_errbuf *err);
int lh_wire_validate_segment(const Longhaul__Segment *seg, const lh_wire_limits *lim,
                             lh_errbuf *err);

/* Encodes env into a new malloc'd buffer (*out, *bytes); the caller frees it
 * with free(). Refuses (LH_EWIRE_TOO_LARGE) a message over the default size
 * limit, so that a sender never emits what a receiver would drop, and an
 * envelope without a body (LH_EWIRE_NO_BODY, LH_EWIRE_MISSING). It does not
 * validate the fields: call lh_wire_validate first for that. */
int lh_wire_encode(const Longhaul__Envelope *env, uint8_t **out, size_t *bytes, lh_errbuf *err);

/* Decodes and validates buf. On success *out is a new message the caller
 * frees with lh_wire_free; on failure *out is NULL. lim may be NULL for the
 * defaults. The size limit is checked before parsing, and parsing runs
 * under a memory budget (32 times the input plus 1 MiB; LH_EWIRE_EXPANSION
 * past it), so a hostile peer can make us allocate little. */
int lh_wire_decode(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                   Longhaul__Envelope **out, lh_errbuf *err);
void lh_wire_free(Longhaul__Envelope *env);  /* accepts NULL */

/* An arena that decoded messages live in, for a receiver of many small
 * messages (envs/envserver.c, envs/envhub.c): lh_wire_decode_in takes the
 * pieces of a message from it in a few large blocks instead of one malloc
 * each, under the same memory budget per decode, and they are all freed
 * at once by lh_wire_arena_reset (which keeps the first block, so a
 * reused arena allocates nothing in the steady state) or _free. A message
 * decoded into an arena is never given to lh_wire_free. */
typedef struct lh_wire_arena lh_wire_arena;
lh_wire_arena *lh_wire_arena_new(void);         /* NULL when out of memory */
void lh_wire_arena_reset(lh_wire_arena *a);     /* accepts NULL */
void lh_wire_arena_free(lh_wire_arena *a);      /* accepts NULL */
/* lh_wire_decode into arena: *out lives until the arena is reset or freed. */
int lh_wire_decode_in(lh_wire_arena *arena, const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                      Longhaul__Envelope **out, lh_errbuf *err);

/* The same for a bare Segment, the payload the replay store keeps. */
int lh_wire_segment_encode(const Longhaul__Segment *seg, uint8_t **out, size_t *bytes,
                           lh_errbuf *err);
int lh_wire_segment_decode(const uint8_t *buf, size_t bytes, const lh_wire_limits *lim,
                           Longhaul__Segment **out, lh_errbuf *err);
void lh_wire_segment_free(Longhaul__Segment *seg);  /* accepts NULL */

/* The bytes of the Segment inside an encoded Envelope (buf, bytes) as they
 * arrived, so that a receiver that decoded the envelope can keep them
 * without encoding the segment again: *seg points into buf. Returns 1 when
 * the envelope's top level is well formed and holds field `segment`
 * exactly once (twice would be merged by the decoder, so one occurrence's
 * bytes would not be the message), 0 otherwise; the caller then encodes
 * the decoded segment instead. It reads the top level only: the decode
 * (lh_wire_decode, which the caller ran first) checked everything inside. */
int lh_wire_segment_bytes(const uint8_t *buf, size_t bytes, const uint8_t **seg,
                          size_t *seg_bytes);
/* 1 when every limit that lh_wire_validate_segment reads is as strict in a
 * as in b or stricter: a segment valid under a is valid under b. */
int lh_wire_limits_segment_within(const lh_wire_limits *a, const lh_wire_limits *b);

/* The name of the message a body case carries ("segment", "ack", ...). */
const char *lh_wire_body_name(Longhaul__Envelope__BodyCase body);

/* The checksum WeightsChunk.checksum must carry for its data: XXH3-64
 * (lh_xxh3_64), named on the wire by checksum_algo = XXH3_64.
 * lh_wire_decode rejects a chunk whose data does not match it, and a
 * WeightsAnnounce or WeightsChunk of any other algorithm (a learner from
 * before checksum_algo) with LH_EWIRE_CHECKSUM_ALGO. */
uint64_t lh_wire_checksum(const void *data, size_t bytes);

/* WeightsAnnounce.checksum: XXH3-64 of the chunks' checksums in order,
 * each as 8 little-endian bytes. It covers every byte through the chunk
 * checksums, and a receiver that verified each chunk gets the version's
 * checksum without hashing the whole version again. In Python:
 * xxh3_64_intdigest(b"".join(struct.pack("<Q", s) for s in sums)). */
uint64_t lh_wire_weights_checksum(const uint64_t *chunk_checksums, uint32_t count);

#endif

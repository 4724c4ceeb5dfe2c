/* The sizes of a model that every part must accept alike: the [model]
 * config refuses what the wire (proto/wire.c limits), the actor's segmenter
 * and the store would refuse later, so that `longhaul init` never writes a
 * checkpoint an actor cannot serve. One number each, used by all. */
#ifndef LH_COMMON_LIMITS_H
#define LH_COMMON_LIMITS_H

#define LH_MAX_TOPK 64      /* routed experts per token (routed_topk) */
#define LH_MAX_LAYERS 256   /* layers whose routing a segment records */
#define LH_MAX_EXPERTS 4096 /* routed experts per layer */

/* What a config may ask for beyond the model's sizes: each count, size
 * and wait has a ceiling far above any real use, so that no value can
 * overflow the arithmetic or the allocation it feeds (a wait added to the
 * clock, a group's slots, a window's tokens in an int). */
#define LH_MAX_GROUP_SIZE 65536             /* episodes of one task in a group */
#define LH_MAX_BATCH_EPISODES (1 << 20)     /* episodes in a training batch */
#define LH_MAX_WINDOW_TOKENS (1 << 30)      /* tokens of a training window or burn-in (an int) */
#define LH_MAX_COUNT 4294967295.0           /* steps, versions, tokens of an episode: 32 bits */
#define LH_MAX_TIMEOUT_MS 86400000.0        /* a resend, heartbeat or flush wait: a day */
#define LH_MAX_IDLE_MS 31536000000.0        /* an idle episode's wait before it is aborted: a year */
#define LH_MAX_QUEUE_MESSAGES (1 << 20)     /* messages an actor keeps unacked */
#define LH_MAX_BYTES 9223372036854774784.0  /* a byte cap SQLite's int64 holds (the largest double below 2^63) */

/* The most of an episode's error text kept: it is stored with the episode
 * for good (retention drops payloads only), so the store keeps this much
 * of a longer one, cut at a character's start, and an actor sends no
 * more. */
#define LH_EPISODE_ERROR_BYTES 4096

#endif

/* The sizes of a model that every part must accept alike: the [model]
 * config refuses what the wire (proto/wire.c limits), the actor's segmenter
 * and the store would refuse later, so that `longhaul init` never writes a
 * checkpoint an actor cannot serve. One number each, used by all. */
#ifndef LH_COMMON_LIMITS_H
#define LH_COMMON_LIMITS_H

#define LH_MAX_TOPK 64      /* routed experts per token (routed_topk) */
#define LH_MAX_LAYERS 256   /* layers whose routing a segment records */
#define LH_MAX_EXPERTS 4096 /* routed experts per layer */

#endif

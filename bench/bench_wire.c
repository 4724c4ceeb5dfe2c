/* bench_wire: encode+decode throughput (MB/s of encoded bytes) of a
 * 512-token segment with every per-token array and routed experts for 4
 * layers x top-2, against memcpy of the same number of bytes, in the same
 * run; prints both figures and their ratio. Encode and decode alone, and
 * the bare Segment payload the store keeps, are printed the same way, and
 * decode+validate against protobuf-c's unpack alone (the cost of the size
 * limit, the parse budget and validation).
 *
 * Each figure is the best of several timed rounds (the machines are shared
 * and noisy); memcpy is timed in rounds interleaved with the codec's, so
 * that both see the same machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

#define TOKENS 512
#define LAYERS 4
#define TOPK 2
#define ROUNDS 7
#define ROUND_NS 100000000LL /* each timed round runs at least this long */

typedef struct {
  Longhaul__Envelope env;
  Longhaul__Segment seg;
  uint32_t tokens[TOKENS], version[TOKENS], experts[TOKENS * LAYERS * TOPK];
  uint8_t mask[TOKENS];
  float logp[TOKENS];
} sample;

/* A segment as an actor sends one: byte-level text with tool calls, about
 * two thirds of it sampled, versions spanning a weights update, experts
 * spread over 16. */
static void build(sample *s) {
  uint64_t r = 0x853c49e6748fea9bULL;
  s->seg = (Longhaul__Segment)LONGHAUL__SEGMENT__INIT;
  for (int i = 0; i < TOKENS; i++) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    s->tokens[i] = (uint32_t)((r >> 33) % 264);
    s->mask[i] = (uint8_t)((r >> 20) % 3 != 0);
    s->logp[i] = s->mask[i] ? -(float)((r >> 40) % 1000) / 250.0f : 0.0f;
    s->version[i] = 1200 + (i >= 300);
    for (int k = 0; k < LAYERS * TOPK; k++)
      s->experts[i * LAYERS * TOPK + k] = (uint32_t)((r >> (k * 4)) % 16);
  }
  Longhaul__Segment *g = &s->seg;
  g->episode_id = 0x5eed0000beefULL;
  g->seq = 12;
  g->actor = "a3";
  g->env = "needle";
  g->start_offset = 12 * TOKENS;
  g->n_tokens = TOKENS, g->tokens = s->tokens;
  g->loss_mask.len = TOKENS, g->loss_mask.data = s->mask;
  g->n_behavior_logp = TOKENS, g->behavior_logp = s->logp;
  g->n_policy_version = TOKENS, g->policy_version = s->version;
  g->routed_layers = LAYERS, g->routed_topk = TOPK;
  g->n_routed_experts = TOKENS * LAYERS * TOPK, g->routed_experts = s->experts;
  g->group_id = 77, g->task_seed = 4242;
  s->env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  s->env.protocol = LH_WIRE_PROTOCOL;
  s->env.msg_id = 9001;
  s->env.sender = "a3";
  s->env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT;
  s->env.segment = &s->seg;
}

typedef enum {
  OP_ROUND_TRIP,
  OP_ENCODE,
  OP_DECODE,
  OP_SEGMENT_ROUND_TRIP,
  OP_MEMCPY,
  OP_RAW_UNPACK
} op_kind;

typedef struct {
  const sample *s;
  const uint8_t *encoded;
  size_t bytes, seg_bytes;
  uint8_t *dst;
  uint64_t sink;
} bench_ctx;

/* Runs op once; returns 0 or fails loudly (a benchmark of a failing codec
 * means nothing). */
static int run_once(bench_ctx *c, op_kind op) {
  lh_errbuf err;
  uint8_t *buf = NULL;
  size_t bytes = 0;
  Longhaul__Envelope *env = NULL;
  Longhaul__Segment *seg = NULL;
  int rc = 0;
  switch (op) {
    case OP_ROUND_TRIP:
      rc = lh_wire_encode(&c->s->env, &buf, &bytes, &err);
      if (rc == 0) rc = lh_wire_decode(buf, bytes, NULL, &env, &err);
      if (rc == 0) c->sink += env->segment->tokens[TOKENS - 1];
      lh_wire_free(env);
      free(buf);
      break;
    case OP_ENCODE:
      rc = lh_wire_encode(&c->s->env, &buf, &bytes, &err);
      if (rc == 0) c->sink += buf[bytes - 1];
      free(buf);
      break;
    case OP_DECODE:
      rc = lh_wire_decode(c->encoded, c->bytes, NULL, &env, &err);
      if (rc == 0) c->sink += env->segment->tokens[TOKENS - 1];
      lh_wire_free(env);
      break;
    case OP_SEGMENT_ROUND_TRIP:
      rc = lh_wire_segment_encode(&c->s->seg, &buf, &bytes, &err);
      if (rc == 0) rc = lh_wire_segment_decode(buf, bytes, NULL, &seg, &err);
      if (rc == 0) c->sink += seg->tokens[TOKENS - 1];
      lh_wire_segment_free(seg);
      free(buf);
      break;
    case OP_RAW_UNPACK: /* protobuf-c alone: no size check, budget or validation */
      env = longhaul__envelope__unpack(NULL, c->bytes, c->encoded);
      if (!env) rc = lh_errbuf_set(&err, LH_EWIRE_UNPARSEABLE, "raw unpack failed");
      if (env) c->sink += env->segment->tokens[TOKENS - 1];
      longhaul__envelope__free_unpacked(env, NULL);
      break;
    case OP_MEMCPY:
      memcpy(c->dst, c->encoded, c->bytes);
      c->sink += c->dst[c->sink % c->bytes];
      break;
  }
  if (rc < 0) fprintf(stderr, "bench_wire: %s: %s\n", lh_err_name(rc), err.msg);
  return rc;
}

/* Nanoseconds per operation for one round of at least ROUND_NS. */
static double round_ns(bench_ctx *c, op_kind op) {
  long iters = 0;
  int64_t t0 = lh_now_ns(), t;
  do {
    for (int k = 0; k < 64; k++)
      if (run_once(c, op) < 0) return -1;
    iters += 64;
    t = lh_now_ns();
  } while (t - t0 < ROUND_NS);
  return (double)(t - t0) / (double)iters;
}

static double mb_per_s(size_t bytes, double ns) { return (double)bytes / ns * 1e9 / 1e6; }

/* Best-of-ROUNDS for op and for memcpy of the same bytes, interleaved. */
static int measure(bench_ctx *c, op_kind op, double *op_ns, double *copy_ns) {
  *op_ns = *copy_ns = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double a = round_ns(c, op), b = round_ns(c, OP_MEMCPY);
    if (a < 0 || b < 0) return -1;
    if (a < *op_ns) *op_ns = a;
    if (b < *copy_ns) *copy_ns = b;
  }
  return 0;
}

int main(void) {
  sample *s = malloc(sizeof *s);
  build(s);
  bench_ctx c = {.s = s};
  uint8_t *enc = NULL, *seg_enc = NULL;
  lh_errbuf err;
  if (lh_wire_encode(&s->env, &enc, &c.bytes, &err) < 0 ||
      lh_wire_segment_encode(&s->seg, &seg_enc, &c.seg_bytes, &err) < 0) {
    fprintf(stderr, "bench_wire: %s\n", err.msg);
    return 1;
  }
  c.encoded = enc;
  c.dst = malloc(c.bytes);
  size_t raw = TOKENS * (2 * sizeof(uint32_t) + sizeof(float) + 1) + sizeof s->experts;
  printf("bench_wire: segment of %d tokens, routed %d layers x top-%d: %zu encoded bytes (%zu bytes "
         "as raw arrays), payload %zu bytes\n",
         TOKENS, LAYERS, TOPK, c.bytes, raw, c.seg_bytes);

  struct {
    const char *name;
    op_kind op;
  } cases[] = {
      {"encode+decode", OP_ROUND_TRIP},
      {"encode", OP_ENCODE},
      {"decode+validate", OP_DECODE},
      {"segment payload encode+decode", OP_SEGMENT_ROUND_TRIP},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double op_ns, copy_ns;
    if (measure(&c, cases[i].op, &op_ns, &copy_ns) < 0) return 1;
    size_t bytes = cases[i].op == OP_SEGMENT_ROUND_TRIP ? c.seg_bytes : c.bytes;
    double op_mb = mb_per_s(bytes, op_ns), copy_mb = mb_per_s(c.bytes, copy_ns);
    printf("bench_wire: %-30s %9.1f MB/s (%8.0f segments/s, %7.2f us each)  memcpy of %zu bytes "
           "%9.1f MB/s  ratio %.4f\n",
           cases[i].name, op_mb, 1e9 / op_ns, op_ns / 1e3, c.bytes, copy_mb, op_mb / copy_mb);
  }
  /* What our checks cost over protobuf-c's own parsing. */
  double dec_ns = 1e30, raw_ns = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double a = round_ns(&c, OP_DECODE), b = round_ns(&c, OP_RAW_UNPACK);
    if (a < 0 || b < 0) return 1;
    if (a < dec_ns) dec_ns = a;
    if (b < raw_ns) raw_ns = b;
  }
  printf("bench_wire: %-30s %9.1f MB/s  protobuf-c unpack alone %9.1f MB/s  ratio %.3f\n",
         "decode+validate", mb_per_s(c.bytes, dec_ns), mb_per_s(c.bytes, raw_ns), raw_ns / dec_ns);
  printf("bench_wire: (checksum %llu)\n", (unsigned long long)c.sink);
  free(c.dst);
  free(enc);
  free(seg_enc);
  free(s);
  return 0;
}

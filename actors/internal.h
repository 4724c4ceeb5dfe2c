/* actors, internal: the parts of the actor process that only actors/ (and
 * its tests and benchmarks) call; actors/actors.h holds what other modules
 * call (ARCHITECTURE.md §2.2).
 *
 * How they fit in the actor's loop (ARCHITECTURE.md §1, §6):
 *   per decode step and episode: lh_actors_sampler_sample on the model's
 *     logits -> lh_actors_segmenter_push(token, 1, sample.logp, version,
 *     experts); prompt and observation tokens are pushed with sampled 0;
 *   each lh_actors_segmenter_pop (and the EpisodeEnd of finish) goes into an
 *     Envelope with a fresh msg_id, lh_wire_encode, lh_actors_outbox_push,
 *     then send; LH_EACTORS_OUTBOX_FULL pauses generation (back-pressure);
 *   Ack -> lh_actors_outbox_ack_many; every loop lh_actors_outbox_next_due
 *     resends; a reconnect calls lh_actors_outbox_resend_all;
 *   WeightsAnnounce -> lh_actors_weights_announce, then next_request /
 *     add_chunk; when add_chunk returns 1, swap in lh_actors_weights_latest
 *     between decode steps (episodes go on: partial rollouts).
 *
 * All objects are single-threaded; free functions accept NULL. */
#ifndef LH_ACTORS_INTERNAL_H
#define LH_ACTORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "actors/actors.h"
#include "actors/agent.h"
#include "net/zsock.h"
#include "proto/longhaul.pb-c.h"

/* ---- generator ------------------------------------------------------------
 * xoshiro256** (Blackman and Vigna), seeded through splitmix64. The state is
 * four 64-bit words, a plain value a caller copies, saves and restores, so
 * that a resumed actor draws exactly the numbers it would have drawn. */
typedef struct {
  uint64_t s[4];
} lh_actors_rng;

#define LH_ACTORS_RNG_STATE_BYTES 32

/* Seeds r from one 64-bit seed; any seed (0 included) gives a valid state. */
void lh_actors_rng_seed(lh_actors_rng *r, uint64_t seed);
uint64_t lh_actors_rng_next(lh_actors_rng *r);
/* A double uniform in [0, 1) with 53 random bits. */
double lh_actors_rng_uniform(lh_actors_rng *r);
/* The state as 32 little-endian bytes, and back. load refuses the all-zero
 * state, which xoshiro can never leave (LH_EACTORS_RNG_STATE). */
void lh_actors_rng_save(const lh_actors_rng *r, uint8_t out[LH_ACTORS_RNG_STATE_BYTES]);
int lh_actors_rng_load(lh_actors_rng *r, const uint8_t in[LH_ACTORS_RNG_STATE_BYTES], lh_errbuf *err);

/* ---- sampler --------------------------------------------------------------
 * Draws one token from a vector of log-probabilities (or any logits: they
 * are renormalised) with a temperature and a nucleus (top-p) cut.
 *
 * temperature T > 0: p_i proportional to exp(l_i / T); the nucleus is the
 * smallest set of most likely tokens (ties to the lower id) whose tempered
 * mass reaches top_p, and the token is drawn from it, renormalised, with one
 * lh_actors_rng_uniform draw. T = 0: greedy, the argmax with ties to the lower id;
 * the generator is not advanced.
 *
 * What the learner compares with (ARCHITECTURE.md §5): `logp` is the log-softmax of
 * l / T over the whole vocabulary at the chosen token, without the nucleus
 * renormalisation, i.e. the log-probability under the tempered model. The
 * learner must divide its logits by the same temperature before its
 * log-softmax, and then it computes this number up to float rounding (at
 * T = 1 it is the model's own log p; the sampler works in double and rounds
 * once, well inside docs/learner.md's 1e-5). The nucleus is a sampling heuristic, not part of the
 * policy being trained; `sample_logp` is the log-probability the token was
 * actually drawn with (nucleus renormalised), for diagnostics. For T = 0,
 * `logp` is the log-softmax at temperature 1 and `sample_logp` is 0. */
typedef struct lh_actors_sampler lh_actors_sampler;

typedef struct {
  uint32_t token;
  float logp;         /* log-softmax(l / T)[token], full vocabulary; <= 0 */
  float sample_logp;  /* log-probability under the nucleus distribution */
  uint32_t nucleus;   /* tokens in the nucleus (1 for greedy) */
} lh_actors_sample;

/* vocab >= 1, temperature finite and >= 0, top_p in (0, 1]. */
lh_actors_sampler *lh_actors_sampler_new(uint32_t vocab, float temperature, float top_p, lh_errbuf *err);
void lh_actors_sampler_free(lh_actors_sampler *s);
/* logits holds vocab values; -inf excludes a token; NaN, +inf or all -inf
 * is LH_EACTORS_SAMPLER_INPUT. */
int lh_actors_sampler_sample(lh_actors_sampler *s, const float *logits, lh_actors_rng *rng, lh_actors_sample *out,
                      lh_errbuf *err);

/* ---- segmenter ------------------------------------------------------------
 * One episode's token stream, cut into Segment messages of segment_tokens
 * tokens as soon as each is full, then a final partial segment and an
 * EpisodeEnd when the episode ends. Every message it hands out has passed
 * lh_wire_validate (with the vocabulary and expert count of the config), so
 * a bad token is refused at the push that brought it, naming it. */
typedef struct lh_actors_segmenter lh_actors_segmenter;

typedef struct {
  uint64_t episode_id;
  uint64_t group_id;
  uint64_t task_seed;
  const char *actor;        /* copied; NULL means "" */
  const char *env;          /* copied; NULL means "" */
  uint32_t segment_tokens;  /* 1 .. 65536 */
  uint32_t vocab;           /* token ids must be below; 0 means 264 */
  uint32_t routed_layers;   /* 0: routing not recorded */
  uint32_t routed_topk;     /* 1 .. 64 when routed_layers > 0, else 0 */
  uint32_t experts;         /* routed expert ids must be below; 0 means 4096 */
} lh_actors_segmenter_config;

typedef struct {
  const char *name;
  float value;
  uint32_t step;
} lh_actors_reward_term;

/* How an episode ended, for its EpisodeEnd. */
typedef struct {
  Longhaul__Outcome outcome;  /* success, failure, truncated, aborted or error */
  float reward;               /* finite */
  const lh_actors_reward_term *terms;
  size_t n_terms;
  uint32_t steps;             /* environment steps taken */
  const char *error;          /* why, for aborted and error; may be NULL */
} lh_actors_episode_result;

lh_actors_segmenter *lh_actors_segmenter_new(const lh_actors_segmenter_config *cfg, lh_errbuf *err);
void lh_actors_segmenter_free(lh_actors_segmenter *s);  /* frees segments not yet popped */

/* Appends one token. sampled is 1 for a token the policy drew (loss mask 1,
 * behavior_logp is the sampler's logp, finite and <= 0) and 0 for a token
 * that came from elsewhere (prompt, observation; its logp is stored as 0
 * whatever is passed). version is the policy version that produced the
 * step. experts holds routed_layers * routed_topk ids ([layer][slot]) and is
 * required when routing is recorded, ignored otherwise. Returns the number
 * of segments ready to pop (>= 0) or a negative code; on error nothing is
 * appended. */
int lh_actors_segmenter_push(lh_actors_segmenter *s, uint32_t token, int sampled, float behavior_logp,
                      uint32_t version, const uint32_t *experts, lh_errbuf *err);

/* Places an image at the offset of the next token pushed (the <img> token
 * that precedes its patches, docs/model.md); pixels (width*height*channels
 * bytes, HWC) are copied. An image must be followed by a token before
 * lh_actors_segmenter_finish. */
int lh_actors_segmenter_push_image(lh_actors_segmenter *s, uint32_t width, uint32_t height, uint32_t channels,
                            const uint8_t *pixels, lh_errbuf *err);

/* Hands in the model's recurrent state after the first offset tokens of the
 * episode (n floats, copied; docs/learner.md "Stored state"). It goes
 * with the segment that holds token offset (Segment.state and
 * state_offset), the first one given for that segment; a state at an
 * offset already cut, or not after the last one given, is ignored. The
 * tokens up to offset need not have been pushed yet. LH_EACTORS_SEGMENT_TOKEN
 * for a value that is not finite. */
int lh_actors_segmenter_set_state(lh_actors_segmenter *s, uint64_t offset, const float *state, size_t n,
                                  lh_errbuf *err);

/* Starts the episode from a group's shared prefix (docs/actors.md
 * "Shared prefixes"): its first prefix_tokens tokens are those of episode
 * prefix_episode, sent there, so this one's first segment starts at offset
 * prefix_tokens, and every segment and the EpisodeEnd name the prefix
 * (total_tokens counts it). Only before anything is pushed. */
int lh_actors_segmenter_set_prefix(lh_actors_segmenter *s, uint64_t prefix_episode, uint64_t prefix_tokens,
                                   lh_errbuf *err);

/* Cuts the open segment here, however short (nothing when it is empty):
 * the leader of a group cuts its segments where the shared prefix ends,
 * so that the prefix is whole segments, sent before any member's. */
int lh_actors_segmenter_cut(lh_actors_segmenter *s, lh_errbuf *err);

/* The oldest segment ready to send, or NULL. The caller owns it and frees it
 * with lh_actors_segment_free. seq counts 0, 1, 2 ...; start_offset is the episode
 * offset of its first token; image offsets are relative to the segment. */
Longhaul__Segment *lh_actors_segmenter_pop(lh_actors_segmenter *s);
size_t lh_actors_segmenter_ready(const lh_actors_segmenter *s);

/* Ends the episode: the tokens not yet cut become a final (partial) segment,
 * to pop as usual, and *end receives the EpisodeEnd (segment_count, total
 * tokens, outcome, reward and terms, group, task seed, steps), which the
 * caller frees with lh_actors_episode_end_free. Afterwards push and finish fail
 * with LH_EACTORS_SEGMENT_FINISHED. */
int lh_actors_segmenter_finish(lh_actors_segmenter *s, const lh_actors_episode_result *res, Longhaul__EpisodeEnd **end,
                        lh_errbuf *err);

/* Totals so far: tokens pushed and segments cut. */
uint64_t lh_actors_segmenter_tokens(const lh_actors_segmenter *s);
uint32_t lh_actors_segmenter_segments(const lh_actors_segmenter *s);

void lh_actors_segment_free(Longhaul__Segment *seg);         /* accepts NULL */
void lh_actors_episode_end_free(Longhaul__EpisodeEnd *end);  /* accepts NULL */

/* ---- outbox ---------------------------------------------------------------
 * Encoded messages sent and not yet acked, keyed by msg_id, bounded in
 * messages and in bytes. A push that would pass either bound fails with
 * LH_EACTORS_OUTBOX_FULL, which the actor takes as back-pressure: it stops
 * generating until acks make room. Time is passed in by the caller (any
 * monotonic milliseconds, e.g. lh_now_ns() / 1000000), so nothing here
 * sleeps or reads a clock. */
typedef struct lh_actors_outbox lh_actors_outbox;

/* max_messages >= 1, max_bytes >= 1, resend_timeout_ms >= 1. */
lh_actors_outbox *lh_actors_outbox_new(size_t max_messages, size_t max_bytes, int64_t resend_timeout_ms,
                         lh_errbuf *err);
void lh_actors_outbox_free(lh_actors_outbox *ob);

/* Copies bytes[0..n) under msg_id, counted as sent at now_ms (the caller
 * sends it right after). LH_EACTORS_OUTBOX_FULL when it does not fit now,
 * LH_EACTORS_OUTBOX_TOO_LARGE when it never could (n > max_bytes),
 * LH_EACTORS_OUTBOX_DUPLICATE when msg_id is already waiting. */
int lh_actors_outbox_push(lh_actors_outbox *ob, uint64_t msg_id, const uint8_t *bytes, size_t n, int64_t now_ms,
                   lh_errbuf *err);
/* Whether a message of n bytes would fit now. */
int lh_actors_outbox_has_room(const lh_actors_outbox *ob, size_t n);

/* Drops the message acked by id: 1 when it was waiting, 0 when the id is
 * unknown (never pushed, or acked before: duplicate acks are harmless). */
int lh_actors_outbox_ack(lh_actors_outbox *ob, uint64_t msg_id);
/* The same, with the time it was first pushed (for its ack latency). */
int lh_actors_outbox_ack_at(lh_actors_outbox *ob, uint64_t msg_id, int64_t *pushed_ms);
/* Marks the message waiting under msg_id (1; 0 when none is): counted by
 * lh_actors_outbox_marked until it is acked. The link marks EpisodeEnds,
 * so that it knows how many ended episodes the learner still counts open. */
int lh_actors_outbox_mark(lh_actors_outbox *ob, uint64_t msg_id);
size_t lh_actors_outbox_marked(const lh_actors_outbox *ob);
/* The bytes of the message waiting under msg_id (*n of them; valid until
 * it is acked), or NULL when none is waiting. */
const uint8_t *lh_actors_outbox_peek(const lh_actors_outbox *ob, uint64_t msg_id, size_t *n);
/* The same for an Ack's list; returns how many were waiting. */
size_t lh_actors_outbox_ack_many(lh_actors_outbox *ob, const uint64_t *msg_ids, size_t n);

/* The next message due for resending at now_ms (sent at least
 * resend_timeout_ms ago, doubled for each round of resends that brought
 * no ack up to 16 times, or marked by lh_actors_outbox_resend_all), least recently
 * sent first, so that first sends and resends keep push order. Returns 1
 * and records it as sent at now_ms; 0 when none is due. *bytes stays valid
 * until the message is acked or the outbox freed. */
int lh_actors_outbox_next_due(lh_actors_outbox *ob, int64_t now_ms, uint64_t *msg_id, const uint8_t **bytes,
                       size_t *n);
/* Marks every waiting message due at once (after a reconnect). */
void lh_actors_outbox_resend_all(lh_actors_outbox *ob);
/* The message msg_id, just pushed or handed out by next_due, did not go
 * (the socket would have blocked): it is due again at once, after the
 * others due now and ahead of everything that went, and a hand-out is not
 * counted as a resend. Waiting a resend timeout instead would hold a burst
 * (a reconnect's resends, more than the socket's high-water mark) for
 * that long. Returns 1 when msg_id was waiting. */
int lh_actors_outbox_unsent(lh_actors_outbox *ob, uint64_t msg_id);
/* Whether any message is due now without its timeout (unsent, or marked by
 * resend_all and not handed out since): a fresh message goes after them. */
int lh_actors_outbox_has_unsent(const lh_actors_outbox *ob);

size_t lh_actors_outbox_depth(const lh_actors_outbox *ob);    /* messages waiting */
size_t lh_actors_outbox_bytes(const lh_actors_outbox *ob);    /* their bytes */
uint64_t lh_actors_outbox_resends(const lh_actors_outbox *ob);  /* resends handed out so far */

/* ---- weights fetching -----------------------------------------------------
 * Fetches an announced version in chunks while decoding goes on with the
 * last complete one: the version being fetched and the complete one live in
 * separate buffers, and the caller swaps (lh_actors_weights_latest) between
 * decode steps. A chunk must match the announced layout exactly; when the
 * last one arrives the checksum of all the bytes is verified, and on a
 * mismatch the version is fetched again from scratch. */
/* The stage that travels with a weights version: its index, the episode
 * context at the stage maximum (0: no stage) and the share of episodes
 * sized to it. */
typedef struct {
  uint32_t index;
  uint32_t max_context;
  float long_frac;
} lh_actors_stage;

typedef struct lh_actors_weights lh_actors_weights;

/* max_bytes bounds what an announcement may ask us to hold. */
lh_actors_weights *lh_actors_weights_new(size_t max_bytes, lh_errbuf *err);
void lh_actors_weights_free(lh_actors_weights *w);

/* Starts fetching the announced version when it is newer than both the
 * complete one and the one in progress (a partial older fetch is dropped).
 * When the announcement carries chunk checksums (that make its version
 * checksum) and the complete version has the same layout, the chunks whose
 * checksum is the complete version's are copied from it, and only the
 * others are left to fetch; the version before the held one plays no part,
 * so an actor that skipped versions compares with what it holds.
 * Returns 1 when a fetch started, 2 when every chunk was held (the version
 * is complete already, as when add_chunk returns 1), 0 when the
 * announcement is not newer, or LH_EACTORS_WEIGHTS_ANNOUNCE (layout
 * inconsistent, or over max_bytes). */
int lh_actors_weights_announce(lh_actors_weights *w, const Longhaul__WeightsAnnounce *a, lh_errbuf *err);
/* The learner may have restarted (the link reconnected): the next
 * announcement starts a fetch whenever its version or checksum differs
 * from the complete one's and the one in progress's, older versions
 * included, since a learner resumed from a checkpoint publishes its
 * version numbers again, for other weights. */
void lh_actors_weights_restarted(lh_actors_weights *w);

/* The next request to send (req initialised by the caller): the first run
 * of chunks neither received nor requested, at most window chunks long,
 * which it marks requested. Returns 1 with req filled, 0 when nothing is
 * left to ask for. lh_actors_weights_rerequest forgets the marks (after a
 * timeout or a reconnect), so that missing chunks are asked for again. */
int lh_actors_weights_next_request(lh_actors_weights *w, uint32_t window, Longhaul__WeightsRequest *req);
void lh_actors_weights_rerequest(lh_actors_weights *w);
/* Chunks requested and not yet received (nor refused), so that a caller
 * keeps a bounded number in flight. */
uint32_t lh_actors_weights_in_flight(const lh_actors_weights *w);
/* Whether requests say that chunks may come zstd-compressed (off by
 * default). */
void lh_actors_weights_set_zstd(lh_actors_weights *w, int accept);

/* Takes one chunk (its bytes are hashed here; zstd ones once decoded).
 * Returns 0 when stored or ignored (another version, or a duplicate), 1 when
 * it completed the version and the whole checksum matched: the version is
 * then the latest complete one. LH_EACTORS_WEIGHTS_CHUNK when it does not
 * fit the layout or its own checksum, LH_EACTORS_WEIGHTS_ENCODING for a
 * zstd chunk not asked for, not a frame, or not of exactly the chunk's
 * size (decoded in place, never past it), LH_EACTORS_WEIGHTS_CHECKSUM when
 * its checksum is not the announced one or the completed bytes do not
 * match the announcement (the fetch restarts). A refused chunk is asked
 * for again by the next request. */
int lh_actors_weights_add_chunk(lh_actors_weights *w, const Longhaul__WeightsChunk *c, lh_errbuf *err);

/* The latest complete version's bytes (NULL before the first), valid until
 * the next lh_actors_weights_add_chunk that completes a newer version. */
const uint8_t *lh_actors_weights_latest(const lh_actors_weights *w, uint64_t *version, size_t *bytes);
/* The context-extension stage (ARCHITECTURE.md §5) announced with that version:
 * returns 1 and fills *stage, or 0 before any version completed. */
int lh_actors_weights_latest_stage(const lh_actors_weights *w, lh_actors_stage *stage);
/* What the fetch of the latest complete version took: chunks held from the
 * version before (reused), asked for, fetched and refused, bytes on the
 * wire (as sent, compressed or not) against the version's size. */
typedef struct {
  uint64_t version, total_bytes;
  uint32_t chunk_count;
  uint64_t requests, chunks_requested, chunks_reused, chunks_fetched, chunks_zstd, chunks_refused;
  uint64_t bytes_reused, bytes_fetched, wire_bytes;
} lh_actors_weights_fetch_stats;
/* Returns 1 and fills *stats, or 0 before any version completed. */
int lh_actors_weights_last_fetch(const lh_actors_weights *w, lh_actors_weights_fetch_stats *stats);
/* The fetch in progress: returns 1 and its version and chunks received of
 * total, or 0 when none is. */
int lh_actors_weights_progress(const lh_actors_weights *w, uint64_t *version, uint32_t *received,
                               uint32_t *total);

/* ---- heartbeat figures ----------------------------------------------------
 * Counts tokens and finished episodes, and turns them into the rates of a
 * Heartbeat over the time since the previous one (caller's clock, ms). */
typedef struct {
  uint64_t tokens, episodes;            /* totals */
  uint64_t window_tokens, window_episodes;
  int64_t window_start_ms;              /* -1 before the first heartbeat */
} lh_actors_meter;

void lh_actors_meter_init(lh_actors_meter *m, int64_t now_ms);
void lh_actors_meter_tokens(lh_actors_meter *m, uint64_t n);
void lh_actors_meter_episode_done(lh_actors_meter *m);
/* Fills hb (initialised by the caller; role is left to it): tokens_per_s
 * and episodes_per_s over [window start, now_ms) (0 for an empty window),
 * episodes_done, and the caller's policy_version, outbox_depth,
 * open_episodes and policy_lag. Starts a new window at now_ms. */
void lh_actors_meter_heartbeat(lh_actors_meter *m, int64_t now_ms, uint64_t policy_version,
                               uint32_t outbox_depth, uint32_t open_episodes, double policy_lag,
                               Longhaul__Heartbeat *hb);

/* ---- episode runner -------------------------------------------------------
 * B episodes at once on one model (ARCHITECTURE.md §1, §6): each row of a batched
 * decoder holds one episode; prompts and observations go in through the
 * chunked prefill, sampled tokens through one lh_model_decode_step_rows per
 * lh_actors_runner_step over the rows that are generating. A sampled
 * `</call>` or `<eos>` hands the action text to the environment
 * (lh_env_step_begin for every row that finished an action, then the hub is
 * flushed, the other rows decode, and lh_env_step_end collects), and the
 * observation's tokens are appended with loss mask 0. Each episode's tokens
 * go through its own segmenter; full segments and, at the end, the last one
 * and the EpisodeEnd wait in the runner's queue (lh_actors_runner_pop) in
 * the order they were made. Episodes come in groups of group_size per task
 * seed. Routing (the experts each token chose, as an input, per layer) is
 * recorded with record_routing: the chunked prefill does not report it, so
 * prompts and observations then go in by one decode step per token (the
 * same function, slower), images cannot be recorded (LH_EUNSUPPORTED), and
 * the last token of an episode, never an input, records experts 0.
 * Without it segments have routed_layers 0. */
typedef struct lh_actors_runner lh_actors_runner;

typedef struct {
  const char *actor;                /* actor name, in every message */
  const char *env;                  /* environment name for lh_env_open_hub */
  const lh_env_option *env_options; /* passed to every environment (copied) */
  size_t n_env_options;
  lh_env_hub *hub;                  /* borrowed; NULL: the runner makes one */
  uint32_t batch;                   /* B >= 1 */
  uint32_t group_size;              /* episodes per task seed, >= 1 */
  uint32_t segment_tokens;          /* 1..65536 */
  uint32_t max_context;             /* tokens per episode; 0: no limit */
  uint32_t max_steps;               /* environment steps; 0: the env's default */
  float temperature, top_p;
  uint64_t seed;                    /* the sampler's generator and the task seeds */
  uint64_t id_salt;                 /* mixed into episode and group ids (name, start time) */
  uint64_t episodes;                /* episodes to start in all; 0: no limit */
  int record_routing;               /* record every token's experts (see below) */
  /* Every state_interval tokens the row's recurrent state goes with the
   * segment that holds that token (Segment.state, for a stored-state
   * learner); prefills stop there to take it. 0: no states. */
  uint64_t state_interval;
  /* With share_prefix (and group_size > 1), the members of a group share
   * the prefill of their common first observation: the first to start
   * prefills it, the others take its state (docs/actors.md "Shared
   * prefixes"), and their segments name its episode for those tokens. */
  int share_prefix;
  /* With beyond_context, neither max_context nor the stage's ends an
   * episode (they still size the environment): it runs until the
   * environment ends it, its max_steps, or max_episode_tokens tokens; the
   * recurrent state carries on, and a stored-state learner trains the
   * windows that hold the policy's tokens. */
  int beyond_context;
  uint64_t max_episode_tokens;
  /* The environment option that sizes a long episode to the stage
   * (lh_actors_runner_set_stage), e.g. needle's "tokens"; NULL or "": none. */
  const char *stage_option;
  /* An agent endpoint (docs/agents.md): its agents open the episodes and
   * play the environment's part; env and its options are then unused. */
  lh_actors_agent *agent;
} lh_actors_runner_config;

/* model is borrowed and must outlive the runner; new weights go into it
 * with lh_model_copy_params between steps (the decoder's state stays). */
int lh_actors_runner_new(lh_model *model, const lh_actors_runner_config *cfg, lh_actors_runner **out,
                         lh_errbuf *err);
void lh_actors_runner_free(lh_actors_runner *r);
/* The policy version stamped on tokens sampled from now on. */
void lh_actors_runner_set_version(lh_actors_runner *r, uint64_t version);
/* The context-extension stage for episodes started from now on (ARCHITECTURE.md
 * §5). Each group of group_size episodes is drawn long with probability
 * long_frac (from the task seed: the draw does not touch the sampler's
 * generator): a long group's episodes have the stage's max_context as
 * their token budget and, with stage_option set, that option of the
 * environment set to LH_ACTORS_STAGE_FILL of it (the rest is room for the
 * policy's actions and the tools' answers). Other groups keep the
 * configured max_context and options, the budget capped at the stage's.
 * A stage with max_context 0 means no stage. */
void lh_actors_runner_set_stage(lh_actors_runner *r, const lh_actors_stage *stage);
/* Back-pressure (Ack.window): a free row starts an episode that begins a
 * new group only while the open episodes and that group fit in window
 * (UINT32_MAX: no limit; 0: hold); a group already begun is completed, so
 * the learner never waits on a half-started group. */
void lh_actors_runner_set_window(lh_actors_runner *r, uint32_t window);
/* Groups started long and short since the runner began. */
void lh_actors_runner_stage_counts(const lh_actors_runner *r, uint64_t *long_groups, uint64_t *short_groups);
/* One round: starts episodes on free rows, samples one token on every
 * generating row, runs the environment for finished actions and decodes.
 * Returns the number of tokens sampled (>= 0) or a negative code; an
 * environment's failure is not an error here: it ends that episode with
 * outcome error. */
int lh_actors_runner_step(lh_actors_runner *r, lh_errbuf *err);
/* The oldest message made and not yet taken: returns 1 with exactly one of
 * *seg, *end set (the caller owns it: lh_actors_segment_free /
 * lh_actors_episode_end_free), 0 when the queue is empty. */
int lh_actors_runner_pop(lh_actors_runner *r, Longhaul__Segment **seg, Longhaul__EpisodeEnd **end);
size_t lh_actors_runner_queued(const lh_actors_runner *r);
/* Ends every open episode now with outcome aborted (reason in its
 * EpisodeEnd) and starts no more: how an actor stops on a signal. */
int lh_actors_runner_abort(lh_actors_runner *r, const char *reason, lh_errbuf *err);
uint32_t lh_actors_runner_open_episodes(const lh_actors_runner *r);
/* 1 when no row has a token to sample or a prefill to feed: every open
 * episode waits for its agent (docs/agents.md), so the actor may sleep. */
int lh_actors_runner_waiting(const lh_actors_runner *r);
uint64_t lh_actors_runner_finished(const lh_actors_runner *r);
/* Episodes that took a shared prefix instead of prefilling it, and the
 * prefix tokens they did not prefill. */
void lh_actors_runner_shared(const lh_actors_runner *r, uint64_t *episodes, uint64_t *tokens);
/* 1 when the episodes limit is reached and every episode has ended. */
int lh_actors_runner_done(const lh_actors_runner *r);


/* ---- reaching the learner (actors/reach.c) ---------------------------------
 * One socket's view of its learner endpoint, fed the events of its
 * zmq_socket_monitor: reached once a ZMTP/CURVE handshake completed, and
 * unreachable again when that connection ends. While unreachable, how far
 * the last attempts got (nothing accepted, connected without a handshake,
 * handshake refused) is what the warning says. A plain value; the link
 * holds one per socket. */
enum { LH_ACTORS_REACH_NOTHING = 0, LH_ACTORS_REACH_CONNECTED = 1, LH_ACTORS_REACH_FAILED = 2 };
typedef struct {
  const char *what;       /* "learner", "learner's weights publisher", ... */
  const char *key;        /* the [actor] key that names the endpoint */
  const char *endpoint;
  int reached;            /* a handshake completed and its connection is open */
  int ever;               /* reached at least once */
  int stage;              /* LH_ACTORS_REACH_*: the furthest the attempts got since unreachable */
  uint16_t failed_event;  /* the ZMQ_EVENT_HANDSHAKE_FAILED_* of stage FAILED */
  int64_t since_ms;       /* unreachable since (the start, or the disconnection) */
  int64_t warned_ms;      /* the last warning of this outage; 0: none yet */
  uint64_t warnings;
} lh_actors_reach;

/* Starts unreachable at now_ms. The strings must outlive r. */
void lh_actors_reach_init(lh_actors_reach *r, const char *what, const char *key, const char *endpoint,
                          int64_t now_ms);
/* Applies one monitor event (ZMQ_EVENT_*). Returns 1 when it made the
 * endpoint reached (a handshake completed while unreachable), else 0; a
 * reach after a warning logs one info line with how long it took. */
int lh_actors_reach_event(lh_actors_reach *r, uint16_t event, int64_t now_ms);
/* Once unreachable for after_ms, logs a warning naming the endpoint, how
 * long, extra (may be NULL: key=value fields and what else to say), the
 * key and why; then at most one per repeat_ms while it lasts. Returns 1
 * when it logged. */
int lh_actors_reach_check(lh_actors_reach *r, int64_t now_ms, int64_t after_ms, int64_t repeat_ms,
                          const char *extra);


/* ---- the link to the learner (actors/link.c) ------------------------------
 * The actor's three sockets (ARCHITECTURE.md §1): a DEALER to the learner's ingest
 * (Hello on every connection, then Segment / EpisodeEnd, kept in the
 * outbox until acked STORED or DUPLICATE, dropped on REJECTED, resent after
 * resend_timeout_ms or at once on a reconnect, which a socket monitor
 * reports; Heartbeats go untracked), a SUB to the weights PUB and a DEALER
 * to the weights ROUTER (announce -> chunked fetch -> verify, as
 * lh_actors_weights). Every socket has ZMQ_LINGER linger_ms. */
typedef struct lh_actors_link lh_actors_link;

typedef struct {
  const char *name;                 /* the sender of every message */
  const char *ingest_endpoint;      /* required */
  const char *weights_pub_endpoint; /* NULL, "" or "none": no weight updates */
  const char *weights_endpoint;     /* required with weights_pub_endpoint */
  size_t outbox_messages, outbox_bytes;
  int64_t resend_timeout_ms;
  int linger_ms;
  uint64_t id_salt;                 /* msg ids: a base from it, then a counter */
  size_t max_weights_bytes;         /* 0: 4 GiB */
  uint32_t vocab, layers, topk;     /* for the Hello */
  uint64_t pid, policy_version;     /* for the Hello */
  const lh_zsock_curve *curve;      /* NULL or no secret: plain; else CURVE clients */
  const char *run_id;               /* the actor's run (common/run_id.h); NULL or "": none */
  int weights_zstd;                 /* 1: weights requests accept zstd chunks (lh_actors_weights_set_zstd) */
} lh_actors_link_config;

int lh_actors_link_new(void *zmq_ctx, const lh_actors_link_config *cfg, lh_actors_link **out, lh_errbuf *err);
void lh_actors_link_free(lh_actors_link *l);
/* Fills the header (protocol, a fresh msg_id, sender), validates, encodes
 * and sends env; a Segment or EpisodeEnd first goes into the outbox, and
 * when it does not fit nothing is sent: LH_EACTORS_OUTBOX_FULL, the
 * caller's signal to pause generation and send it again later. */
int lh_actors_link_send(lh_actors_link *l, Longhaul__Envelope *env, lh_errbuf *err);
/* Waits up to timeout_ms for traffic, handles acks, reconnections and
 * weights, and resends what is due. Returns 1 when a new weights version
 * completed (lh_actors_link_weights), 0 otherwise, or a negative code.
 * With a run_id, every message the link sends carries it (Envelope.run_id,
 * and Hello.run_id), and a learner of another run refuses them: an
 * ACK_REJECTED whose envelope names a run other than the link's. From
 * then on the call returns LH_EACTORS_RUN_MISMATCH, err naming both runs
 * (the actor stops: it belongs to no run this learner serves). */
int lh_actors_link_poll(lh_actors_link *l, int timeout_ms, lh_errbuf *err);
/* A file descriptor whose readability also ends the poll's wait (the
 * agent endpoint's, lh_actors_agent_wake_fd); -1: none. */
void lh_actors_link_set_wake_fd(lh_actors_link *l, int fd);
/* The latest complete weights (lh_model_serialize bytes), or NULL. */
const uint8_t *lh_actors_link_weights(const lh_actors_link *l, uint64_t *version, size_t *bytes);
/* What fetching those weights took (lh_actors_weights_last_fetch): 1, or 0
 * before any. */
int lh_actors_link_weights_fetch(const lh_actors_link *l, lh_actors_weights_fetch_stats *stats);
/* The stage announced with those weights (0 before any). */
int lh_actors_link_stage(const lh_actors_link *l, lh_actors_stage *stage);
/* The version the next Hello announces. */
void lh_actors_link_set_version(lh_actors_link *l, uint64_t version);
size_t lh_actors_link_unacked(const lh_actors_link *l);
uint64_t lh_actors_link_resends(const lh_actors_link *l);
/* Segments and EpisodeEnds acked STORED or DUPLICATE so far (each once). */
uint64_t lh_actors_link_acked(const lh_actors_link *l);
/* Messages the learner answered ACK_REJECTED: dropped, never stored. */
uint64_t lh_actors_link_rejected(const lh_actors_link *l);
uint64_t lh_actors_link_connects(const lh_actors_link *l);
/* The newest version announced so far (0 before any): the heartbeat's
 * policy_lag is it minus the version in use. */
uint64_t lh_actors_link_announced(const lh_actors_link *l);
/* Back-pressure: the most episodes the learner's last Ack lets this actor
 * keep running (Ack.window; 0 for Ack.hold; UINT32_MAX before any window),
 * less the episodes that ended here and whose EpisodeEnd the learner has
 * not acked yet: it counts an episode open until it stores the end, and
 * refuses a new one past the window (learner/peers.c), so an episode
 * whose messages wait in the outbox still holds its place. */
uint32_t lh_actors_link_window(const lh_actors_link *l);
/* With LH_ACK_LOG naming a file in the environment, the link appends one
 * line per Segment or EpisodeEnd acked STORED or DUPLICATE: the wall
 * clock of the ack in ms and its latency in ms from the first send, so a
 * benchmark measures what the actor really waited, then the message's
 * episode id and its seq (a Segment) or "end" (an EpisodeEnd), so a test
 * can look every acked message up in the store. */
#define LH_ACTORS_ACK_LOG_ENV "LH_ACK_LOG"


#endif

/* envs: what the module's files share; not part of the public header. */
#ifndef LH_ENVS_INTERNAL_H
#define LH_ENVS_INTERNAL_H

#include "common/str.h"
#include "envs/env.h"
#include "net/zsock.h"

extern const lh_env_vtable lh_envs_calc_vtable;
extern const lh_env_vtable lh_envs_needle_vtable;
extern const lh_env_vtable lh_envs_maze_vtable;

/* The vtable of a built-in environment whose functions are named
 * PREFIX_create, PREFIX_reset, PREFIX_step, PREFIX_describe,
 * PREFIX_expert, PREFIX_destroy and PREFIX_footprint:
 *   const lh_env_vtable lh_envs_calc_vtable =
 *       LH_ENVS_BUILTIN(calc, "calc", "multi-step arithmetic ...", "calc", 16); */
#define LH_ENVS_BUILTIN(prefix, name_, summary_, tools_, max_steps)                                   \
  {                                                                                                 \
    .version = LH_ENV_API_VERSION, .name = (name_), .summary = (summary_), .tools = (tools_),        \
    .default_max_steps = (max_steps), .create = prefix##_create, .reset = prefix##_reset,           \
    .step = prefix##_step, .describe = prefix##_describe, .expert = prefix##_expert,                \
    .destroy = prefix##_destroy, .footprint = prefix##_footprint,                                   \
  }
/* The client side of an env server: options server=ENDPOINT, env=NAME,
 * timeout_ms; every other option goes to the server's CREATE. */
extern const lh_env_vtable lh_envs_server_vtable;
/* The server table's create on a hub's connection (envhub.c). */
int lh_envs_server_create(lh_env_hub *hub, const lh_env_option *opts, size_t count, void **ctx,
                          lh_errbuf *err);

/* Connections of a hub, one per endpoint, shared by reference. */
#include "proto/wire.h"

/* ---- frames written around packed messages (envframe.c) ---- */
/* The most requests, and encoded bytes (the whole Envelope), one batch
 * frame may hold: what the C and Python servers take (their answers'
 * max_batch and max_batch_bytes) and the most a client sends. The bytes
 * stay under the servers' frame limit (8 MiB), so a batch past them is
 * refused with an answer, not cut off with the connection. */
#define LH_ENVS_BATCH_MAX 1024
#define LH_ENVS_BATCH_MAX_BYTES (4u << 20)
/* A growable byte buffer. */
typedef struct {
  uint8_t *data;
  size_t len, cap;
} lh_envs_bytes;
/* Room for more bytes past len: 0 or LH_ENOMEM. */
int lh_envs_bytes_reserve(lh_envs_bytes *b, size_t more);
void lh_envs_bytes_free(lh_envs_bytes *b);  /* accepts NULL; b is empty after */
/* Appends a request or a response packed as field number `field` of the
 * message being written (its key, its length, its bytes); *at (when not
 * NULL) gets the offset of its bytes. 0 or LH_ENOMEM. Packed without
 * protobuf-c's second sizing pass (envpack.c); the bytes are protobuf-c's. */
int lh_envs_bytes_put_request(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvRequest *q, size_t *at);
int lh_envs_bytes_put_response(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvResponse *r, size_t *at);
/* Appends bytes already packed as field number `field`. */
int lh_envs_bytes_put_bytes(lh_envs_bytes *b, uint32_t field, const void *data, size_t bytes);
/* Appends an Envelope's protocol (LH_WIRE_PROTOCOL), msg_id and sender;
 * its body is then appended with lh_envs_bytes_put_bytes under the body's
 * field number (LONGHAUL__ENVELOPE__BODY_*). */
int lh_envs_frame_header(lh_envs_bytes *b, uint64_t msg_id, const char *sender);
/* The most bytes a header with this sender and a body's key and length take. */
size_t lh_envs_frame_overhead(const char *sender);

typedef struct lh_envs_conn lh_envs_conn;
/* A decoded answer frame, shared by the responses in it: each waiter that
 * took one of them holds a reference until it is done with its views. */
typedef struct lh_envs_answer lh_envs_answer;
void lh_envs_answer_release(lh_envs_answer *a);  /* accepts NULL */
/* curve: NULL (plain) or this client's keys and the server's public key;
 * a connection is shared only by environments with the same keys. */
int lh_envs_hub_conn(lh_env_hub *hub, const char *endpoint, const lh_zsock_curve *curve, lh_envs_conn **out,
                     lh_errbuf *err);
void lh_envs_conn_release(lh_envs_conn *c);  /* accepts NULL */
const char *lh_envs_conn_endpoint(const lh_envs_conn *c);
uint64_t lh_envs_conn_generation(const lh_envs_conn *c);
/* Closes the socket and voids every request and session on it. */
void lh_envs_conn_drop(lh_envs_conn *c);
/* Sends req with a fresh request_id; *generation names the socket it went on. */
int lh_envs_conn_send(lh_envs_conn *c, Longhaul__EnvRequest *req, int timeout_ms, uint64_t *generation,
                      lh_errbuf *err);
/* Waits for the answer to request id, at most timeout_ms once none is
 * ready: *resp points into *hold, which the caller releases
 * (lh_envs_answer_release). A timeout drops the connection. */
int lh_envs_conn_wait(lh_envs_conn *c, uint64_t id, uint64_t generation, long timeout_ms,
                      lh_envs_answer **hold, Longhaul__EnvResponse **resp, lh_errbuf *err);
/* The server's batch bounds as its answers on this socket gave them; 0
 * while it has given none (an older server: one request a frame). */
uint32_t lh_envs_conn_batch_max(const lh_envs_conn *c);
/* The two halves of the server table's step, so that many episodes can
 * have a request in flight at once (lh_env_step_begin / _end). */
int lh_envs_server_step_send(void *ctx, const char *action, size_t bytes, lh_errbuf *err);
int lh_envs_server_step_recv(void *ctx, lh_env_result *out, lh_errbuf *err);
int lh_envs_server_reset_send(void *ctx, uint64_t seed, lh_errbuf *err);
int lh_envs_server_reset_recv(void *ctx, lh_env_obs *obs, lh_errbuf *err);

/* What clients hold on an env server and its caps (envserver_budget.c):
 * sessions by id, each owned by the client (ROUTER peer) that created it,
 * charged its lh_env_footprint; each client's replies in libzmq's hands.
 * Only lh_envs_budget_send's free function runs off the serving thread. */
typedef struct lh_envs_budget lh_envs_budget;
typedef struct lh_envs_peer lh_envs_peer;
/* cfg may be NULL; zeros become the defaults. */
int lh_envs_budget_new(const lh_envserver_config *cfg, lh_envs_budget **out, lh_errbuf *err);
/* Frees the sessions and peers: only once libzmq holds no reply (after
 * zmq_ctx_term). Accepts NULL. */
void lh_envs_budget_free(lh_envs_budget *b);
const lh_envserver_config *lh_envs_budget_config(const lh_envs_budget *b);
/* The peer with this routing id, added when new; NULL when max_sessions +
 * 1024 peers are known and none can be forgotten (or out of memory). Valid
 * until the next lh_envs_budget_peer or a sweep that does not keep it.
 * Called once per message received: the sessions it names are used at
 * the time of this call. */
lh_envs_peer *lh_envs_budget_peer(lh_envs_budget *b, const void *id, size_t bytes);
size_t lh_envs_budget_peers(const lh_envs_budget *b);
/* The peer's routing id escaped for a log line. */
char *lh_envs_peer_name(const lh_envs_peer *p, char *out, size_t cap);
/* 0 when p may open a session of bytes (0: check the counts only), else
 * LH_EAGAIN with the cap it meets in err (after closing idle sessions). */
int lh_envs_budget_admit(lh_envs_budget *b, const lh_envs_peer *p, uint64_t bytes, lh_errbuf *err);
/* Adds env (owned from now on) as p's session; *id gets its id. */
int lh_envs_budget_add(lh_envs_budget *b, lh_envs_peer *p, lh_env *env, uint64_t bytes, uint64_t request_id,
                       uint64_t *id, lh_errbuf *err);
/* p's session id (NULL when gone or another's), marked used when its
 * message came (the last lh_envs_budget_peer);
 * *last_request points at its newest request id, *last_batch at the
 * number of the last batch frame that named it (the server's count; 0:
 * none), so that a session named twice in one batch is seen. */
lh_env *lh_envs_budget_session(lh_envs_budget *b, const lh_envs_peer *p, uint64_t id, uint64_t **last_request,
                               uint64_t **last_batch);
void lh_envs_budget_close(lh_envs_budget *b, const lh_envs_peer *p, uint64_t id);
/* Closes the sessions idle past idle_timeout_ms (logged) and forgets the
 * peers that hold nothing, but keep; at most every sweep_ms unless force.
 * Returns the sessions closed. */
size_t lh_envs_budget_sweep(lh_envs_budget *b, int force, const lh_envs_peer *keep);
int64_t lh_envs_budget_sweep_ms(const lh_envs_budget *b);
size_t lh_envs_budget_sessions(const lh_envs_budget *b);
uint64_t lh_envs_budget_session_bytes(const lh_envs_budget *b);
/* 0 when p's replies in flight plus pending (encoded, not yet sent) are
 * under its cap and all replies plus pending under the total; else
 * LH_EAGAIN naming the cap. */
int lh_envs_budget_reply_room(lh_envs_budget *b, const lh_envs_peer *p, uint64_t pending, lh_errbuf *err);
/* LH_EAGAIN when p's own replies in flight are at its cap: its requests
 * are then dropped unanswered (it is not reading them). */
int lh_envs_budget_unread_full(const lh_envs_budget *b, const lh_envs_peer *p, lh_errbuf *err);
uint64_t lh_envs_budget_reply_bytes(const lh_envs_budget *b);
/* Sends buf (malloc'd; owned from now on) as one frame to sock without a
 * copy, counted against p and the total until libzmq lets go of it.
 * 0, or -1 with zmq_errno set (buf freed). */
int lh_envs_budget_send(lh_envs_budget *b, lh_envs_peer *p, void *sock, uint8_t *buf, size_t bytes, int flags);
/* Counts a refusal and logs it at most once per LH_ZSOCK_LOG_INTERVAL_NS
 * with the count since the last line; the peer and env names escaped. */
void lh_envs_budget_refused(lh_envs_budget *b, const lh_envs_peer *p, const char *env_name, const char *why);
uint64_t lh_envs_budget_refusals(const lh_envs_budget *b);


/* What the allocator adds to one allocation at most: a large one is
 * mmap'd whole pages with a header. Footprints add it per allocation. */
#define LH_ENVS_ALLOC_SLACK 4096

/* The bytes an environment's text buffers (lh_str, common/str.h) may
 * reach when their largest content is about `content` bytes (capacities
 * double from 256: at most twice). */
#define LH_ENVS_TEXT_FOOTPRINT(content) (2 * ((size_t)(content) + 256))

/* Writes the bytes s[0..n) into out[cap] for a log line: printable ASCII
 * as it is, backslash and every other byte as \xNN, cut with "..." when it
 * does not fit; always NUL-terminated (cap >= 4). Returns out. Peer-given
 * names (env names, ROUTER identities) go through it before a log line. */
char *lh_envs_escape(const void *s, size_t n, char *out, size_t cap);

/* Prefixes the message of an option error (rc < 0) with the environment's
 * name ("needle: option tokens=... is outside 200..4000000"); returns rc. */
int lh_envs_opt_error(lh_errbuf *err, int rc, const char *env);

#endif

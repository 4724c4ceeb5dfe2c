/* envs: tool environments for longhaul episodes.
 *
 * An environment is a versioned table of function pointers (lh_env_vtable)
 * plus a context it creates from options. Three ways in, one table shape:
 *   - built into the binary: calc, needle, maze (lh_envs_builtin);
 *   - a shared library loaded with dlopen that exports the symbol
 *     LH_ENV_PLUGIN_SYMBOL, a `const lh_env_vtable` (envs/examples/);
 *   - an env server in any language speaking EnvRequest/EnvResponse
 *     (proto/longhaul.proto) inside an Envelope over ZeroMQ (envs/python/).
 * Callers use the lh_env wrapper, which parses the policy's action text,
 * counts steps against max_steps, and turns every failure into a returned
 * code with a message: nothing in this module exits or crashes on input.
 *
 * Action text. The actor hands step() the decoded text of the policy's
 * action, with the special tokens written as these literal markers:
 *   258 <call>  -> "<call>"      259 </call> -> "</call>"      257 <eos> -> "<eos>"
 * (byte tokens are the bytes themselves). An action is one of
 *   [thought] <call>NAME(ARGS)</call>    a tool call; NAME is [a-z_][a-z0-9_]*
 *                                        (at most 32 bytes); ARGS is everything
 *                                        between the first '(' and the last ')'
 *                                        before </call>; only whitespace may
 *                                        follow </call>
 *   ANSWER <eos>                         the final answer (trimmed); only
 *                                        whitespace may follow <eos>
 * where [thought] is free text the environment ignores. Byte sequences that
 * spell a marker are read as the marker, so the actor should decode them so.
 * Malformed calls, unknown tools, over-long arguments, unbalanced markers and
 * bytes that are not UTF-8 each give a distinct error observation the model
 * sees ("error: <kind>: <detail>"); the step counts and the episode goes on.
 *
 * Determinism: for the same options and seed, reset and the same actions
 * give the same observations, rewards and expert proposals. */
#ifndef LH_ENVS_ENV_H
#define LH_ENVS_ENV_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* The version of lh_env_vtable. The table only grows at its end; a plugin
 * built against version v fills fields up to v and is accepted by any host
 * with LH_ENV_API_VERSION >= v, which reads no field past v.
 *   1: name .. destroy
 *   2: footprint */
#define LH_ENV_API_VERSION 2
#define LH_ENV_PLUGIN_SYMBOL "lh_env_plugin_table"

#define LH_ENV_MAX_TOOL_NAME 32
#define LH_ENV_DEFAULT_MAX_ARG_BYTES 4096
#define LH_ENV_DEFAULT_MAX_ANSWER_BYTES 4096

typedef struct {
  const char *key;
  const char *value;
} lh_env_option;

/* An RGB (channels 3) or gray (1) image, row-major HWC, values 0..255. */
typedef struct {
  uint32_t width, height, channels;
  const uint8_t *pixels;
} lh_env_image;

/* A view into memory the environment owns, valid until its next call. */
typedef struct {
  const char *text;
  size_t text_bytes;
  const lh_env_image *images;
  uint32_t image_count;
} lh_env_obs;

typedef struct {
  const char *name;
  float value;
} lh_env_term;

/* Values agree with longhaul.Outcome. */
typedef enum {
  LH_ENV_RUNNING = 0,
  LH_ENV_SUCCESS = 1,
  LH_ENV_FAILURE = 2,
  LH_ENV_TRUNCATED = 3,
  LH_ENV_ERROR = 5,
} lh_env_outcome;

typedef struct {
  lh_env_obs obs;
  float reward;                /* this step's reward; sparse: the final one */
  int done;
  lh_env_outcome outcome;      /* set when done */
  const lh_env_term *terms;    /* named parts of reward */
  uint32_t term_count;
} lh_env_result;

/* A parsed action. Strings are views into the action text (not
 * NUL-terminated). */
typedef enum { LH_ACTION_CALL = 1, LH_ACTION_ANSWER = 2 } lh_action_kind;
typedef struct {
  lh_action_kind kind;
  const char *tool;            /* CALL */
  size_t tool_bytes;
  const char *args;            /* CALL: arguments; ANSWER: the answer */
  size_t args_bytes;
} lh_action;

/* The table every environment fills. Required: version, name, create,
 * reset, step, describe, destroy. Optional: expert (NULL when none).
 * Callbacks return 0 or a negative lh_err with err->code and err->msg set
 * (a plugin may fill the struct directly). A tool failure the model should
 * see (division by zero) is an observation, not an error. */
typedef struct lh_env_vtable {
  uint32_t version;            /* LH_ENV_API_VERSION the table was built for */
  const char *name;
  const char *summary;         /* one line */
  const char *tools;           /* comma-separated tool names; NULL: any */
  uint32_t default_max_steps;
  /* Creates a context from options (key/value pairs; an unknown key is an
   * error naming it). The wrapper strips its own keys (max_steps, max_arg_bytes). */
  int (*create)(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err);
  int (*reset)(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err);
  /* action is the raw text; parsed is the wrapper's parse of it, already
   * checked (a known tool, bounded arguments, valid UTF-8). */
  int (*step)(void *ctx, const char *action, size_t action_bytes, const lh_action *parsed,
              lh_env_result *out, lh_errbuf *err);
  /* A human description: the task, tools, options and reward. */
  const char *(*describe)(void *ctx);
  /* Proposes the next action (action text as above) for the current state;
   * with the option expert_noise = p it proposes a wrong or random action
   * with probability p, drawn from an RNG seeded by reset. */
  int (*expert)(void *ctx, const char **action, lh_errbuf *err);
  void (*destroy)(void *ctx);
  /* Version 2. The most bytes ctx will hold (what create allocated and
   * what reset and step may grow, observation buffers included), as fixed
   * by its options; NULL when not stated. An env server charges a session
   * this against its byte caps right after create, before the first reset
   * allocates, so an environment must never grow past what it states. */
  size_t (*footprint)(void *ctx);
} lh_env_vtable;

/* ---- parser ---- */

typedef struct {
  size_t max_arg_bytes;        /* default LH_ENV_DEFAULT_MAX_ARG_BYTES */
  size_t max_answer_bytes;     /* default LH_ENV_DEFAULT_MAX_ANSWER_BYTES */
} lh_action_limits;

/* Parses action text. tools is a comma-separated list of known tools (NULL
 * accepts any well-formed name); lim may be NULL for the defaults. Returns 0,
 * or one of LH_EENVS_CALL_* with err->msg a one-line description the model
 * can read. Never reads past text + bytes; text need not be NUL-terminated. */
int lh_action_parse(const char *text, size_t bytes, const char *tools,
                    const lh_action_limits *lim, lh_action *out, lh_errbuf *err);

/* ---- the wrapper every caller uses ---- */

typedef struct lh_env lh_env;

/* The built-in tables (calc, needle, maze), and one by name (NULL if none). */
const lh_env_vtable *const *lh_envs_builtin(size_t *count);
const lh_env_vtable *lh_envs_find_builtin(const char *name);

/* Opens an environment. name is a built-in; or, with the option
 * plugin=PATH, the plugin at PATH (its table's name must equal name unless
 * name is NULL); or, with server=ENDPOINT, the environment name on the env
 * server at ENDPOINT (option timeout_ms, default 5000). Wrapper options:
 * max_steps (default the table's), max_arg_bytes; the rest go to create. */
int lh_env_open(const char *name, const lh_env_option *opts, size_t count, lh_env **out,
                lh_errbuf *err);
/* A hub shares env-server connections: every environment opened on it
 * with the same server=ENDPOINT uses one ZeroMQ socket, and all use the
 * hub's context (zmq_ctx, which must outlive the hub; NULL: the hub makes
 * its own). An actor running B episodes opens them on one hub, so that B
 * requests in flight cost one connection (see lh_env_step_begin).
 * lh_env_hub_free drops the caller's reference: connections still in use
 * stay until their environments are freed. */
typedef struct lh_env_hub lh_env_hub;
int lh_env_hub_new(void *zmq_ctx, lh_env_hub **out, lh_errbuf *err);
void lh_env_hub_free(lh_env_hub *hub);  /* accepts NULL */
/* Sends the requests begun on the hub's connections now, rather than at
 * the first lh_env_*_end: a caller that begins one half of its episodes,
 * flushes, and works on the other half keeps the server busy meanwhile. */
int lh_env_hub_flush(lh_env_hub *hub, lh_errbuf *err);
/* A stop flag (a signal handler's; NULL for none) the hub's waits watch:
 * once it is set, a wait for an env server gives up at once with
 * LH_EINTERRUPTED instead of running to its timeout, so that a process
 * asked to stop whose env server is gone is not held timeout_ms per
 * request. The flag must outlive the hub. */
void lh_env_hub_set_stop(lh_env_hub *hub, volatile sig_atomic_t *stop);
/* lh_env_open on a hub (NULL: a private one, as lh_env_open does). */
int lh_env_open_hub(lh_env_hub *hub, const char *name, const lh_env_option *opts, size_t count,
                    lh_env **out, lh_errbuf *err);
/* Opens from a table directly (validated as a plugin's would be). */
int lh_env_open_vtable(const lh_env_vtable *vt, const lh_env_option *opts, size_t count,
                       lh_env **out, lh_errbuf *err);
void lh_env_free(lh_env *env);  /* accepts NULL */

/* Starts an episode. obs stays valid until the next call on env. */
int lh_env_reset(lh_env *env, uint64_t seed, lh_env_obs *obs, lh_errbuf *err);
/* One step. A parse failure is an error observation (returns 0). When the
 * environment fails (a crashed or hung server) this returns the code and
 * sets out->done with outcome LH_ENV_ERROR; the next reset starts afresh. */
int lh_env_step(lh_env *env, const char *action, size_t bytes, lh_env_result *out,
                lh_errbuf *err);
/* Reset in two halves, as for step below. */
int lh_env_reset_begin(lh_env *env, uint64_t seed, lh_errbuf *err);
int lh_env_reset_end(lh_env *env, lh_env_obs *obs, lh_errbuf *err);
/* The same step in two halves, for a caller running many episodes at
 * once: begin sends the action (to an env server: without waiting) and end
 * returns exactly what lh_env_step would have. Begin fails only when no
 * step may start (not reset, episode done, a step already in flight); the
 * step's own outcome comes from end. */
int lh_env_step_begin(lh_env *env, const char *action, size_t bytes, lh_errbuf *err);
int lh_env_step_end(lh_env *env, lh_env_result *out, lh_errbuf *err);
/* The expert's next action (LH_EENVS_NO_EXPERT when the table has none). */
int lh_env_expert(lh_env *env, const char **action, lh_errbuf *err);
const char *lh_env_describe(lh_env *env);
/* The most bytes env will hold: the wrapper's own and its table's
 * footprint; a table that states none (version 1, or NULL) is counted as
 * LH_ENV_UNSTATED_FOOTPRINT_BYTES. */
#define LH_ENV_UNSTATED_FOOTPRINT_BYTES (1u << 20)
size_t lh_env_footprint(const lh_env *env);
const char *lh_env_name(const lh_env *env);
uint32_t lh_env_steps(const lh_env *env);
uint32_t lh_env_max_steps(const lh_env *env);

/* ---- plugins ---- */

typedef struct lh_env_plugin lh_env_plugin;
/* Loads the shared library at path and checks its table: the symbol,
 * the version, the required functions. path must be absolute; it is
 * resolved by realpath and, when LH_PLUGIN_PATH is set (folders separated
 * by ':'), must lie inside one of them (LH_EENVS_PLUGIN_PATH otherwise). */
int lh_env_plugin_load(const char *path, lh_env_plugin **out, lh_errbuf *err);
const lh_env_vtable *lh_env_plugin_vtable(const lh_env_plugin *p);
void lh_env_plugin_free(lh_env_plugin *p);  /* accepts NULL */
/* Checks a table's version and required fields; what names the first fault. */
int lh_env_vtable_check(const lh_env_vtable *vt, const char *what, lh_errbuf *err);

/* ---- env servers ---- */

/* What any client can make an env server hold, per client (a ROUTER peer:
 * one connection) and in total; 0 in a field means its default. A CREATE
 * past a session cap is refused with LH_EAGAIN and a message naming the
 * cap (a client sees it as an error of its reset, and may try again once
 * sessions close); a session idle longer than idle_timeout_ms is closed,
 * so that a client that vanished does not pin its memory. Replies are
 * counted from when they are encoded until libzmq has written or dropped
 * them: a client whose unread replies reach its cap has its requests
 * dropped unanswered (ZMQ_SNDHWM drops what a peer leaves unread past
 * LH_ENVSERVER_HWM messages), and once all clients' unread replies reach
 * the total cap, requests are answered with LH_EAGAIN. With the defaults a
 * server holds at most about 1 GiB of sessions and 256 MiB of replies. */
#define LH_ENVSERVER_DEFAULT_SESSIONS 4096
#define LH_ENVSERVER_DEFAULT_SESSIONS_PER_CLIENT 512
#define LH_ENVSERVER_DEFAULT_SESSION_BYTES (1ull << 30)
#define LH_ENVSERVER_DEFAULT_SESSION_BYTES_PER_CLIENT (256ull << 20)
#define LH_ENVSERVER_DEFAULT_REPLY_BYTES (256ull << 20)
#define LH_ENVSERVER_DEFAULT_REPLY_BYTES_PER_CLIENT (64ull << 20)
#define LH_ENVSERVER_DEFAULT_IDLE_TIMEOUT_MS 600000ull
#define LH_ENVSERVER_HWM 64 /* messages queued per peer, each way */
typedef struct {
  uint32_t max_sessions;                  /* sessions of all clients */
  uint32_t max_sessions_per_client;       /* sessions of one client */
  uint64_t max_session_bytes;             /* footprints (lh_env_footprint) of all sessions */
  uint64_t max_session_bytes_per_client;  /* of one client's sessions */
  uint64_t max_reply_bytes;               /* replies not yet written, all clients */
  uint64_t max_reply_bytes_per_client;    /* one client's */
  uint64_t idle_timeout_ms;               /* a session unused this long is closed */
  /* CURVE: the server's NAME.key and the clients' public keys (a file, one
   * a line, or a folder of .pub files; net/zsock.h), admitted by a ZAP
   * handler; both NULL: plain. A client names the keys in its options
   * curve_secret_key_file (its own .key) and curve_server_key_file (the
   * server's .pub). */
  const char *curve_secret_key_file, *curve_allowed_keys;
  /* A signal handler's stop flag (NULL for none): once set, the server
   * stops within a second, as it does for a Shutdown. */
  volatile sig_atomic_t *stop;
  /* Requests a client may send in one frame (EnvRequestBatch), answered in
   * one frame; 0: the default, 1024 (also the most); 1: one request a
   * frame, as a server from before batches (its answers carry no
   * max_batch, so clients send no batch). */
  uint32_t max_batch;
} lh_envserver_config;

/* Serves every built-in over ZeroMQ at endpoint (a ROUTER) until an
 * Envelope with Shutdown arrives, cfg->stop is set or a signal interrupts
 * a wait. Sessions are
 * created with ENV_OP_CREATE by a client and serve only that client until
 * its CLOSE, its idle timeout or the server's end; a request for a session
 * that is gone (or another client's) is answered with LH_ENOENT, after
 * which the client's next reset creates a new one. cfg may be NULL (all
 * defaults). */
int lh_envserver_run(const char *endpoint, const lh_envserver_config *cfg, lh_errbuf *err);
/* lh_envserver_run with the defaults but max_sessions (0: the default). */
int lh_envserver_serve(const char *endpoint, uint32_t max_sessions, lh_errbuf *err);
/* The same with CURVE keys (see lh_envserver_config). */
int lh_envserver_serve_curve(const char *endpoint, uint32_t max_sessions, const char *secret_key_file,
                             const char *allowed_keys, lh_errbuf *err);

/* ---- option helpers for environment code ---- */

/* The value of key, or NULL. */
const char *lh_env_opt(const lh_env_option *opts, size_t count, const char *key);
/* Reads an integer/float option within [lo, hi] (default when absent). */
int lh_env_opt_int(const lh_env_option *opts, size_t count, const char *key, long def, long lo,
                   long hi, long *out, lh_errbuf *err);
int lh_env_opt_double(const lh_env_option *opts, size_t count, const char *key, double def,
                      double lo, double hi, double *out, lh_errbuf *err);
/* Fails naming the first key not in the comma-separated list known. */
int lh_env_opt_check_keys(const lh_env_option *opts, size_t count, const char *env,
                          const char *known, lh_errbuf *err);

/* A small deterministic RNG (splitmix64) for environment code. */
typedef struct {
  uint64_t state;
} lh_env_rng;
void lh_env_rng_seed(lh_env_rng *r, uint64_t seed);
uint64_t lh_env_rng_next(lh_env_rng *r);
uint32_t lh_env_rng_below(lh_env_rng *r, uint32_t n);  /* uniform in [0, n) */
double lh_env_rng_unit(lh_env_rng *r);                /* uniform in [0, 1) */

#endif

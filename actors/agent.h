/* actors: the agent endpoint (docs/agents.md), what its files share.
 *
 * With `[env] name = agent` an actor plays no environment of its own: it
 * serves its policy over HTTP (OpenAI's chat-completions and completions
 * shapes) to agent programs, and each request is one turn of an episode
 * the agent names. Four files:
 *   agent_http.c   the server (libmicrohttpd, its own thread): routes,
 *                  bounded bodies, the bearer token, JSON in and out;
 *   agent_chat.c   the chat template (longhaul-chat-1) and the check that
 *                  a turn extends the tokens the actor recorded;
 *   agent_table.c  the episodes between the two threads: the openings the
 *                  runner takes, the turns it answers (a request of n > 1
 *                  opens a group's members and waits for them all), the
 *                  ends (an episode's roles end together) and the agents
 *                  that vanished;
 *   agent_json.c   the answers and refusals in OpenAI's JSON shapes.
 * The runner (runner_agent.c) plays agent episodes in its rows like its
 * own: batched decode, per-token versions, segments, acks and the credit
 * window are the same. Only the table's functions cross threads, under
 * its one lock. */
#ifndef LH_ACTORS_AGENT_H
#define LH_ACTORS_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/str.h"

/* The template's name, in every answer: a change to how messages become
 * tokens gets a new one. */
#define LH_AGENT_TEMPLATE "longhaul-chat-1"
#define LH_AGENT_ID_BYTES 64      /* an episode's or a task's name, [A-Za-z0-9._:-] */
#define LH_AGENT_MAX_STOP 4       /* stop strings a request may give */
#define LH_AGENT_STOP_BYTES 64    /* bytes of one */
#define LH_AGENT_ROLE_BYTES 32    /* a role's name, [A-Za-z0-9._:-] */
#define LH_AGENT_MAX_TERMS 16     /* named reward terms */
#define LH_AGENT_MAX_ROLES 16     /* roles an episode may hold (and a reward may name) */
#define LH_AGENT_MAX_MESSAGES 4096

typedef struct lh_actors_agent lh_actors_agent;

typedef struct {
  const char *address;       /* host:port to bind; port 0 picks one (lh_actors_agent_port) */
  const char *key_file;      /* a bearer token's file; "" none (loopback only) */
  uint32_t max_episodes;     /* opened and waiting to open; past it a new one gets 429 */
  uint64_t timeout_ms;       /* an episode whose agent is silent this long is aborted */
  uint64_t max_body_bytes;   /* a request body past it gets 413 */
  uint32_t group_size;       /* episodes of one task that form a group */
  uint32_t rows;             /* the actor's batch: a request's n members must play at once (0: no bound) */
  double temperature, top_p; /* the actor's: a request may repeat them, not change them */
  uint32_t max_tokens;       /* the most a request's max_tokens may be (the actor's max_context) */
  uint64_t salt;             /* the actor's id salt, mixed into group ids */
} lh_actors_agent_config;

int lh_actors_agent_new(const lh_actors_agent_config *cfg, lh_actors_agent **out, lh_errbuf *err);
/* Answers every waiting request 503, stops the server, frees. Accepts NULL. */
void lh_actors_agent_free(lh_actors_agent *a);
uint16_t lh_actors_agent_port(const lh_actors_agent *a);
/* A file descriptor that is readable once a request came for the runner;
 * lh_actors_agent_clear_wake empties it before the runner looks. */
int lh_actors_agent_wake_fd(const lh_actors_agent *a);
void lh_actors_agent_clear_wake(lh_actors_agent *a);

/* ---- what the runner asks (runner_agent.c) ------------------------------- */

/* What the policy is to read before its next turn: the first prompt, or
 * what the agent added since the last turn, or (restart) the whole
 * conversation as the agent rewrote it. The text stays valid until the
 * next call on the same episode. */
typedef struct {
  uint64_t handle;           /* the table's name for the episode */
  uint64_t group_id, task_seed;
  char role[LH_AGENT_ROLE_BYTES + 1]; /* "" none: the episode's one sample */
  const char *text;
  size_t bytes;
  int observation;           /* wrap the text as <obs>...</obs> (a chat turn after the first) */
  int restart;               /* the history was rewritten: text is all of it */
  uint32_t max_tokens;       /* the turn's cap on sampled tokens */
  uint32_t n_stop;           /* the turn's stop strings (lh_actors_agent_stop_at) */
} lh_actors_agent_turn;

typedef enum { LH_AGENT_NONE = 0, LH_AGENT_TURN, LH_AGENT_END, LH_AGENT_GONE } lh_actors_agent_event;

typedef struct {
  float reward;
  int rewarded;              /* 0: ended without a reward */
  uint32_t n_terms;
  char names[LH_AGENT_MAX_TERMS][32];
  float values[LH_AGENT_MAX_TERMS];
  /* a reward of its own for some roles (the request's "roles"); the
   * table gives each role's sample its own as reward */
  uint32_t n_roles;
  char roles[LH_AGENT_MAX_ROLES][LH_AGENT_ROLE_BYTES + 1];
  float role_rewards[LH_AGENT_MAX_ROLES];
} lh_actors_agent_end;

/* An episode an agent opened, if any waits: LH_AGENT_TURN with *t. */
lh_actors_agent_event lh_actors_agent_take(lh_actors_agent *a, lh_actors_agent_turn *t);
/* What the agent did since the episode's last turn was answered:
 * LH_AGENT_NONE (nothing yet), LH_AGENT_TURN (its next request, *t),
 * LH_AGENT_END (*end: a reward, or an end without one) or LH_AGENT_GONE
 * (silent past timeout_ms). After END or GONE the handle is gone. */
lh_actors_agent_event lh_actors_agent_poll(lh_actors_agent *a, uint64_t handle, lh_actors_agent_turn *t,
                                           lh_actors_agent_end *end);
/* The stop strings of the turn in flight: how many bytes at the end of
 * text[0..n) are one of them (0: none). */
size_t lh_actors_agent_stop_at(lh_actors_agent *a, uint64_t handle, const char *text, size_t n);
/* Answers the turn in flight: text is what the policy wrote (the stop
 * string cut off), finish "stop" or "length"; tokens are the turn's. */
void lh_actors_agent_reply(lh_actors_agent *a, uint64_t handle, const char *text, size_t bytes, const char *finish,
                           uint32_t prompt_tokens, uint32_t completion_tokens, uint64_t version);
/* The actor ended the episode (its context is full, it stops, an error):
 * a request waiting on it is answered with status (409; 503 when the
 * actor stops, so that an agent tries again) and why; later ones get 409. */
void lh_actors_agent_close(lh_actors_agent *a, uint64_t handle, int status, const char *why);
/* Counters for the actor's log: rewritten histories, refused requests. */
void lh_actors_agent_counts(const lh_actors_agent *a, uint64_t *rewrites, uint64_t *refused, uint64_t *turns);

/* ---- the chat template (agent_chat.c) ------------------------------------- */

/* A request's messages read from JSON (cJSON *), checked: roles system,
 * developer, user, assistant, tool; content a string or text parts. */
typedef struct {
  uint32_t n;
  const char **role;
  const char **text;   /* the content, the parts joined */
  size_t *bytes;
  char *owned;         /* joined parts live here */
} lh_agent_messages;

/* Reads messages (a cJSON array) into m; 0, or LH_EINVAL with a message
 * for a 400. */
int lh_agent_messages_read(const void *json, lh_agent_messages *m, lh_errbuf *err);
void lh_agent_messages_free(lh_agent_messages *m);
/* The chained hash the history check compares: h (LH_AGENT_HISTORY_SEED
 * for none) extended by messages [from, n), so that a request's earlier
 * messages are hashed once and the hash of all goes on from theirs. */
#define LH_AGENT_HISTORY_SEED 0x6c6f6e676861756cull
uint64_t lh_agent_messages_hash(uint64_t h, const lh_agent_messages *m, uint32_t from, uint32_t n);
/* The hash of a history of hash h extended by one assistant message. */
uint64_t lh_agent_history_extend(uint64_t h, const char *text, size_t bytes);
/* Renders messages [from, n) as the policy reads them: their contents
 * joined by newlines. */
int lh_agent_render(const lh_agent_messages *m, uint32_t from, lh_str *out);
/* text as JSON can carry it: each maximal ill-formed UTF-8 subpart (and
 * NUL) becomes U+FFFD, as Python's decoder with errors="replace" does. The answer holds this text, and the
 * history check compares the agent's copy of it; the tokens recorded stay
 * the bytes the policy sampled. */
int lh_agent_utf8_clean(const char *text, size_t bytes, lh_str *out);
/* The whole conversation with its markers (<bos>, each assistant turn as
 * written, <obs>...</obs> after it), for a restart after a rewrite. */
int lh_agent_render_all(const lh_agent_messages *m, lh_str *out);

/* ---- between the server and the table (agent_http.c, agent_table.c) ------ */

/* A request that waits for the runner, owned by the server's connection;
 * the table fills status and body and resumes the connection. */
typedef struct {
  void *conn;
  int answered, status;
  lh_str body;
} lh_agent_wait;

typedef enum { LH_AGENT_CHAT = 1, LH_AGENT_COMPLETION = 2 } lh_agent_kind;

/* One turn as a request gave it, checked for form. */
typedef struct {
  lh_agent_kind kind;
  const char *episode, *task;         /* task "" or NULL: none */
  const char *role;                   /* "" or NULL: none */
  uint32_t n;                         /* members to open (the request's n), 1 a turn of one episode */
  const lh_agent_messages *msgs;      /* chat */
  const char *prompt;                 /* completions */
  size_t prompt_bytes;
  uint32_t max_tokens;                /* 0: the actor's limit */
  const char *stop[LH_AGENT_MAX_STOP];
  uint32_t n_stop;
} lh_agent_request;

/* Takes a turn for the runner: 0 when w now waits for the answer (the
 * server suspends the connection), else the HTTP status of a refusal with
 * its message in err. */
int lh_agent_table_turn(lh_actors_agent *a, const lh_agent_request *q, lh_agent_wait *w, lh_errbuf *err);
/* Ends an episode, every role of it (reward or not): the HTTP status, 200
 * when taken. */
int lh_agent_table_end(lh_actors_agent *a, const char *episode, const lh_actors_agent_end *end, lh_errbuf *err);
/* The table's memory for cfg.max_episodes, and its release. */
int lh_agent_table_init(lh_actors_agent *a, lh_errbuf *err);
void lh_agent_table_free(lh_actors_agent *a);
/* Answers every waiting request with status and message (the actor stops). */
void lh_agent_table_drain(lh_actors_agent *a, int status, const char *msg);
/* ---- the answers' JSON (agent_json.c) ------------------------------------ */

/* OpenAI's error shape ({"error": {"message", "type", "code"}}) for every
 * refusal, the server's and the table's; cJSON_free the result (NULL: out
 * of memory). */
char *lh_agent_error_json(int status, const char *msg);
struct cJSON;
/* One choice: index, the message (chat) or text, finish_reason; NULL out
 * of memory. */
struct cJSON *lh_agent_choice_json(lh_agent_kind kind, const char *text, size_t bytes, const char *finish,
                                   uint32_t index);
/* The answer around its choices (OpenAI's id, object, created, model,
 * usage) with longhaul's fields lh under "longhaul" and the template's
 * name added to them; takes choices and lh (either NULL: out of memory);
 * cJSON_free the result. */
char *lh_agent_response_json(lh_agent_kind kind, const char *id, struct cJSON *choices, uint32_t prompt_tokens,
                             uint32_t completion_tokens, struct cJSON *lh);
/* Counts a request refused (for lh_actors_agent_counts). */
void lh_agent_table_refused(lh_actors_agent *a);

/* The state both sides see: made by lh_actors_agent_new (agent_http.c),
 * the episodes by agent_table.c; everything below mu is under it. */
struct lh_agent_entry;
struct lh_actors_agent {
  lh_actors_agent_config cfg;
  char address[256], token[256];
  void *daemon;                      /* struct MHD_Daemon * */
  void *sweeper;                     /* the request deadline's thread and clocks (agent_http.c) */
  uint16_t port;
  int wake_fd;
  void (*resume)(void *conn);        /* the server's: wakes a suspended connection */
  void *mu;                          /* pthread_mutex_t * */
  struct lh_agent_entry *entries;    /* cfg.max_episodes of them */
  uint64_t next_handle;
  uint64_t *ended;                   /* a ring of ended episodes' name hashes */
  uint32_t ended_at;
  struct lh_agent_task *tasks;       /* tasks whose last group is not full */
  uint64_t rewrites, refused, turns;
  int stopping;
};

#endif

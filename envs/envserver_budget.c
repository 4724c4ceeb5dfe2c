/* What clients hold on an env server, and the caps on it (env.h's
 * lh_envserver_config): each client's sessions and their footprints, each
 * client's replies not yet written, and the totals. A client is a ROUTER
 * peer (one connection, named by its routing id).
 *
 * Replies are handed to libzmq without a copy (zmq_msg_init_data); the
 * free function libzmq calls once it has written a reply to the kernel or
 * dropped it (a peer gone, or its queue past ZMQ_SNDHWM) subtracts it
 * again. That function runs on libzmq's I/O thread, so the reply counters
 * are atomics; everything else is the serving thread's alone. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "envs/internal.h"

/* Peers with no session and no reply in flight are forgotten at a sweep;
 * at most max_sessions + this many are known at once. */
#define SPARE_PEERS 1024
#define ID_BYTES 255 /* the longest routing id libzmq accepts */

struct lh_envs_peer {
  uint8_t id[ID_BYTES];
  uint8_t id_bytes;
  uint32_t sessions;
  uint64_t session_bytes;
  _Atomic uint64_t reply_bytes;
};

typedef struct {
  uint64_t id;
  lh_env *env;
  lh_envs_peer *owner;
  uint64_t bytes;         /* what it is charged: lh_env_footprint at create */
  int64_t last_used_ns;
  uint64_t last_request;  /* the newest request_id answered: older ones are replays */
  uint64_t last_batch;    /* the serving thread's number of the last batch frame that named it */
} session;

/* A reply in libzmq's hands: what its free function subtracts. */
typedef struct {
  _Atomic uint64_t *total, *peer;
  uint64_t bytes;
} reply_hint;

struct lh_envs_budget {
  lh_envserver_config cfg;         /* every field set (defaults filled in) */
  session *s;                      /* sorted by id: ids only grow */
  size_t n, cap;
  uint64_t next_id, session_bytes;
  lh_envs_peer **peers;            /* sorted by routing id */
  size_t peer_n, peer_cap;
  _Atomic uint64_t reply_bytes;
  int64_t last_sweep_ns;
  int64_t message_ns;              /* when the message in hand came (lh_envs_budget_peer) */
  /* refusals: counted, logged at most once per LH_ZSOCK_LOG_INTERVAL_NS */
  uint64_t refused, refused_since_log, idle_closed;
  int64_t refused_log_ns;
};

static uint64_t or_default(uint64_t v, uint64_t def) { return v ? v : def; }

int lh_envs_budget_new(const lh_envserver_config *cfg, lh_envs_budget **out, lh_errbuf *err) {
  lh_envs_budget *b = calloc(1, sizeof *b);
  if (!b) return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory");
  lh_envserver_config none = {0};
  if (!cfg) cfg = &none;
  b->cfg = *cfg;
  b->cfg.max_sessions = (uint32_t)or_default(cfg->max_sessions, LH_ENVSERVER_DEFAULT_SESSIONS);
  b->cfg.max_sessions_per_client =
      (uint32_t)or_default(cfg->max_sessions_per_client, LH_ENVSERVER_DEFAULT_SESSIONS_PER_CLIENT);
  b->cfg.max_session_bytes = or_default(cfg->max_session_bytes, LH_ENVSERVER_DEFAULT_SESSION_BYTES);
  b->cfg.max_session_bytes_per_client =
      or_default(cfg->max_session_bytes_per_client, LH_ENVSERVER_DEFAULT_SESSION_BYTES_PER_CLIENT);
  b->cfg.max_reply_bytes = or_default(cfg->max_reply_bytes, LH_ENVSERVER_DEFAULT_REPLY_BYTES);
  b->cfg.max_reply_bytes_per_client =
      or_default(cfg->max_reply_bytes_per_client, LH_ENVSERVER_DEFAULT_REPLY_BYTES_PER_CLIENT);
  b->cfg.idle_timeout_ms = or_default(cfg->idle_timeout_ms, LH_ENVSERVER_DEFAULT_IDLE_TIMEOUT_MS);
  b->cfg.max_batch = (uint32_t)or_default(cfg->max_batch, LH_ENVS_BATCH_MAX);
  b->last_sweep_ns = b->message_ns = lh_now_ns();
  *out = b;
  return 0;
}

const lh_envserver_config *lh_envs_budget_config(const lh_envs_budget *b) { return &b->cfg; }

/* Call after libzmq has let go of every reply (zmq_ctx_term). */
void lh_envs_budget_free(lh_envs_budget *b) {
  if (!b) return;
  for (size_t i = 0; i < b->n; i++) lh_env_free(b->s[i].env);
  for (size_t i = 0; i < b->peer_n; i++) free(b->peers[i]);
  free(b->s);
  free(b->peers);
  free(b);
}

/* ---- peers ---- */

static int id_cmp(const lh_envs_peer *p, const uint8_t *id, size_t bytes) {
  size_t n = p->id_bytes < bytes ? p->id_bytes : bytes;
  int c = memcmp(p->id, id, n);
  if (c) return c;
  return (p->id_bytes > bytes) - (p->id_bytes < bytes);
}

static size_t peer_locate(const lh_envs_budget *b, const uint8_t *id, size_t bytes) {
  size_t lo = 0, hi = b->peer_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (id_cmp(b->peers[mid], id, bytes) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int peer_idle(lh_envs_peer *p) { return p->sessions == 0 && atomic_load(&p->reply_bytes) == 0; }

/* Forgets the peers that hold nothing: no session, no reply in flight
 * (once that reads 0 only the serving thread can raise it again). */
static void forget_idle_peers(lh_envs_budget *b, const lh_envs_peer *keep) {
  size_t kept = 0;
  for (size_t i = 0; i < b->peer_n; i++) {
    if (b->peers[i] != keep && peer_idle(b->peers[i])) free(b->peers[i]);
    else b->peers[kept++] = b->peers[i];
  }
  b->peer_n = kept;
}

lh_envs_peer *lh_envs_budget_peer(lh_envs_budget *b, const void *id, size_t bytes) {
  if (bytes > ID_BYTES) return NULL;
  b->message_ns = lh_now_ns();  /* one clock read a message, not one a request */
  size_t i = peer_locate(b, id, bytes);
  if (i < b->peer_n && id_cmp(b->peers[i], id, bytes) == 0) return b->peers[i];
  size_t most = (size_t)b->cfg.max_sessions + SPARE_PEERS;
  if (b->peer_n >= most) {
    forget_idle_peers(b, NULL);
    if (b->peer_n >= most) return NULL;
    i = peer_locate(b, id, bytes);
  }
  if (lh_reserve(&b->peers, &b->peer_cap, b->peer_n + 1, sizeof *b->peers, 16)) return NULL;
  lh_envs_peer *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  memcpy(p->id, id, bytes);
  p->id_bytes = (uint8_t)bytes;
  atomic_init(&p->reply_bytes, 0);
  memmove(b->peers + i + 1, b->peers + i, (b->peer_n - i) * sizeof *b->peers);
  b->peers[i] = p;
  b->peer_n++;
  return p;
}

size_t lh_envs_budget_peers(const lh_envs_budget *b) { return b->peer_n; }

char *lh_envs_peer_name(const lh_envs_peer *p, char *out, size_t cap) {
  return lh_envs_escape(p ? p->id : (const uint8_t *)"", p ? p->id_bytes : 0, out, cap);
}

/* ---- refusals ---- */

void lh_envs_budget_refused(lh_envs_budget *b, const lh_envs_peer *p, const char *env_name, const char *why) {
  b->refused++;
  b->refused_since_log++;
  int64_t now = lh_now_ns();
  if (b->refused_log_ns && now - b->refused_log_ns < LH_ZSOCK_LOG_INTERVAL_NS) return;
  char peer[64], env[64], msg[LH_ERRMSG_BYTES];
  lh_envs_peer_name(p, peer, sizeof peer);
  lh_envs_escape(env_name ? env_name : "", env_name ? strlen(env_name) : 0, env, sizeof env);
  lh_envs_escape(why, strlen(why), msg, sizeof msg);
  LH_WARN("envs", "env server refused: %s peer=%s env=%s (refused since last report=%llu total=%llu)", msg, peer,
          env, (unsigned long long)b->refused_since_log, (unsigned long long)b->refused);
  b->refused_log_ns = now;
  b->refused_since_log = 0;
}

uint64_t lh_envs_budget_refusals(const lh_envs_budget *b) { return b->refused; }

/* ---- sessions ---- */

static size_t locate(const lh_envs_budget *b, uint64_t id) {
  size_t lo = 0, hi = b->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (b->s[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void drop_session(lh_envs_budget *b, size_t i) {
  session *s = &b->s[i];
  s->owner->sessions--;
  s->owner->session_bytes -= s->bytes;
  b->session_bytes -= s->bytes;
  lh_env_free(s->env);
}

size_t lh_envs_budget_sweep(lh_envs_budget *b, int force, const lh_envs_peer *keep) {
  int64_t now = lh_now_ns(), idle_ns = (int64_t)b->cfg.idle_timeout_ms * 1000000;
  int64_t every_ns = idle_ns / 4 < 1000000000 ? idle_ns / 4 : 1000000000;
  if (!force && now - b->last_sweep_ns < every_ns) return 0;
  b->last_sweep_ns = now;
  size_t kept = 0, closed = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (now - b->s[i].last_used_ns > idle_ns) {
      drop_session(b, i);
      closed++;
    } else {
      b->s[kept++] = b->s[i];
    }
  }
  b->n = kept;
  forget_idle_peers(b, keep);
  if (closed) {
    b->idle_closed += closed;
    LH_INFO("envs", "env server closed idle sessions closed=%zu idle_timeout_ms=%llu sessions=%zu "
            "session_bytes=%llu clients=%zu idle_closed=%llu", closed, (unsigned long long)b->cfg.idle_timeout_ms,
            b->n, (unsigned long long)b->session_bytes, b->peer_n, (unsigned long long)b->idle_closed);
  }
  return closed;
}

int64_t lh_envs_budget_sweep_ms(const lh_envs_budget *b) {
  uint64_t every = b->cfg.idle_timeout_ms / 4;
  return every < 1 ? 1 : every > 1000 ? 1000 : (int64_t)every;
}

/* The first session cap a new session of p would pass, as an LH_EAGAIN
 * message; 0 when none. bytes 0 checks the counts only. */
static int over_cap(const lh_envs_budget *b, const lh_envs_peer *p, uint64_t bytes, lh_errbuf *err) {
  const lh_envserver_config *c = &b->cfg;
  if (p->sessions >= c->max_sessions_per_client)
    return lh_errbuf_set(err, LH_EAGAIN,
                         "env server: this client holds %u sessions, its cap (--max-sessions-per-client %u); "
                         "close one or try again later", p->sessions, c->max_sessions_per_client);
  if (b->n >= c->max_sessions)
    return lh_errbuf_set(err, LH_EAGAIN, "env server: %zu sessions open, the cap (--max-sessions %u); try again later",
                         b->n, c->max_sessions);
  if (bytes && p->session_bytes + bytes > c->max_session_bytes_per_client)
    return lh_errbuf_set(err, LH_EAGAIN,
                         "env server: a session of %llu bytes would take this client's sessions to %llu bytes, past "
                         "its cap (--max-session-bytes-per-client %llu); close one or ask for a smaller environment",
                         (unsigned long long)bytes, (unsigned long long)(p->session_bytes + bytes),
                         (unsigned long long)c->max_session_bytes_per_client);
  if (bytes && b->session_bytes + bytes > c->max_session_bytes)
    return lh_errbuf_set(err, LH_EAGAIN,
                         "env server: a session of %llu bytes would take all sessions to %llu bytes, past the cap "
                         "(--max-session-bytes %llu); try again later",
                         (unsigned long long)bytes, (unsigned long long)(b->session_bytes + bytes),
                         (unsigned long long)c->max_session_bytes);
  return 0;
}

int lh_envs_budget_admit(lh_envs_budget *b, const lh_envs_peer *p, uint64_t bytes, lh_errbuf *err) {
  lh_errbuf ignored;
  if (over_cap(b, p, bytes, &ignored) == 0) return 0;
  lh_envs_budget_sweep(b, 1, p);  /* sessions past their idle time go first */
  return over_cap(b, p, bytes, err);
}

int lh_envs_budget_add(lh_envs_budget *b, lh_envs_peer *p, lh_env *env, uint64_t bytes, uint64_t request_id,
                       uint64_t *id, lh_errbuf *err) {
  if (lh_reserve(&b->s, &b->cap, b->n + 1, sizeof *b->s, 64))
    return lh_errbuf_set(err, LH_ENOMEM, "env server: out of memory for a session");
  b->s[b->n++] = (session){++b->next_id, env, p, bytes, lh_now_ns(), request_id, 0};
  p->sessions++;
  p->session_bytes += bytes;
  b->session_bytes += bytes;
  *id = b->next_id;
  return 0;
}

lh_env *lh_envs_budget_session(lh_envs_budget *b, const lh_envs_peer *p, uint64_t id, uint64_t **last_request,
                               uint64_t **last_batch) {
  size_t i = locate(b, id);
  if (i >= b->n || b->s[i].id != id || b->s[i].owner != p) return NULL;
  b->s[i].last_used_ns = b->message_ns;
  *last_request = &b->s[i].last_request;
  *last_batch = &b->s[i].last_batch;
  return b->s[i].env;
}

void lh_envs_budget_close(lh_envs_budget *b, const lh_envs_peer *p, uint64_t id) {
  size_t i = locate(b, id);
  if (i >= b->n || b->s[i].id != id || b->s[i].owner != p) return;
  drop_session(b, i);
  memmove(b->s + i, b->s + i + 1, (b->n - i - 1) * sizeof *b->s);
  b->n--;
}

size_t lh_envs_budget_sessions(const lh_envs_budget *b) { return b->n; }
uint64_t lh_envs_budget_session_bytes(const lh_envs_budget *b) { return b->session_bytes; }

/* ---- replies ---- */

int lh_envs_budget_reply_room(lh_envs_budget *b, const lh_envs_peer *p, uint64_t pending, lh_errbuf *err) {
  uint64_t mine = atomic_load(&((lh_envs_peer *)p)->reply_bytes) + pending;
  uint64_t all = atomic_load(&b->reply_bytes) + pending;
  if (mine >= b->cfg.max_reply_bytes_per_client)
    return lh_errbuf_set(err, LH_EAGAIN,
                         "env server: %llu bytes of replies to this client not yet read, its cap "
                         "(--max-reply-bytes-per-client %llu); read the replies or send fewer requests at once",
                         (unsigned long long)mine, (unsigned long long)b->cfg.max_reply_bytes_per_client);
  if (all >= b->cfg.max_reply_bytes)
    return lh_errbuf_set(err, LH_EAGAIN,
                         "env server: %llu bytes of replies not yet read by their clients, the cap "
                         "(--max-reply-bytes %llu); try again later",
                         (unsigned long long)all, (unsigned long long)b->cfg.max_reply_bytes);
  return 0;
}

int lh_envs_budget_unread_full(const lh_envs_budget *b, const lh_envs_peer *p, lh_errbuf *err) {
  uint64_t mine = atomic_load(&((lh_envs_peer *)p)->reply_bytes);
  if (mine < b->cfg.max_reply_bytes_per_client) return 0;
  return lh_errbuf_set(err, LH_EAGAIN,
                       "env server: %llu bytes of replies to this client not yet read, its cap "
                       "(--max-reply-bytes-per-client %llu)",
                       (unsigned long long)mine, (unsigned long long)b->cfg.max_reply_bytes_per_client);
}

uint64_t lh_envs_budget_reply_bytes(const lh_envs_budget *b) {
  return atomic_load(&((lh_envs_budget *)b)->reply_bytes);
}

/* libzmq's free function for a reply: on its I/O thread, or on ours when a
 * send fails. The peer's counter first: once it reads 0 the serving thread
 * may free the peer, so it is not touched after. */
static void reply_done(void *data, void *hint) {
  reply_hint *h = hint;
  atomic_fetch_sub(h->peer, h->bytes);
  atomic_fetch_sub(h->total, h->bytes);
  free(data);
  free(h);
}

int lh_envs_budget_send(lh_envs_budget *b, lh_envs_peer *p, void *sock, uint8_t *buf, size_t bytes, int flags) {
  reply_hint *h = malloc(sizeof *h);
  if (!h) {
    free(buf);
    errno = ENOMEM;
    return -1;
  }
  /* counted before libzmq may call reply_done (at once, for 0 bytes) */
  *h = (reply_hint){&b->reply_bytes, &p->reply_bytes, bytes};
  atomic_fetch_add(&p->reply_bytes, bytes);
  atomic_fetch_add(&b->reply_bytes, bytes);
  zmq_msg_t m;
  if (zmq_msg_init_data(&m, buf, bytes, reply_done, h) != 0) {
    atomic_fetch_sub(&p->reply_bytes, bytes);
    atomic_fetch_sub(&b->reply_bytes, bytes);
    free(h);
    free(buf);
    return -1;
  }
  if (zmq_msg_send(&m, sock, flags) < 0) {
    zmq_msg_close(&m);  /* runs reply_done */
    return -1;
  }
  return 0;
}

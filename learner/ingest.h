/* learner, internal: the ingest, the learner process's ROUTER, and the
 * names and credit of its peers (learner/ingest.c, ingest_acks.c and
 * peers.c; ARCHITECTURE.md §1). learner/internal.h includes it; a file
 * that needs only the ingest may include this alone. */
#ifndef LH_LEARNER_INGEST_H
#define LH_LEARNER_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "net/zsock.h"
#include "proto/wire.h"
#include "store/store.h"

/* What the model can take (learner/internal.h, learner/validate.c). */
typedef struct lh_learner_model_limits lh_learner_model_limits;

/* ---- the ingest's peers (learner/peers.c) ---------------------------------
 * Names bound to connections, and the episodes each name may keep open
 * (ARCHITECTURE.md §1, and docs/learner.md "What gets in" and "Back-pressure").
 *
 * A name is bound to the connection (ROUTER routing id) that said Hello
 * under it, and under CURVE to that connection's public key; a Segment,
 * EpisodeEnd or Heartbeat in a name is taken only from the connection it
 * is bound to. A connection holds one name. A Hello from a new connection
 * takes the name over (an actor restarted, or reconnected), but a name
 * bound under a CURVE key only with the same key. The names are a fixed
 * table of LH_LEARNER_PEERS_MAX; past it a new name replaces the one heard
 * from least lately (an actor so forgotten is answered ACK_RETRY and says
 * Hello again).
 *
 * Back-pressure by credit: with a backlog set, a name may open a new
 * episode (one the learner does not know) only with credit, one a new
 * episode, and one group of slack past it; the Ack's window is what it may
 * keep open: its open episodes plus its credit. Credit is handed out a
 * group at a time from what the cap leaves free after the untrained
 * backlog, the open episodes and the credit already out, in turn to the
 * names heard from in the last LH_LEARNER_PEER_ACTIVE_NS: first to those
 * below their share (the cap over those names, in whole groups), then to
 * any, so that no room a batch needs stays idle. While a name is below its
 * share, credit above the share others hold comes back, and so does credit
 * a name left unused for 2 s (its lease): that name is sated, told one
 * group of slack as its window and granted nothing until it opens an
 * episode again. All credit comes back when the cap shrinks below what is
 * out or a name goes quiet. A name held back past its window more than a
 * group's worth within 2 s ignores its window: it is served last, below
 * its share, from what the others leave, and its shortfall takes no credit
 * back from them. A quiet name's open episodes take no room either (a
 * stopped actor's group must not hold a cap of one batch until the idle
 * limit; it may end them when it wakes). So the open episodes and credit
 * of the names heard from stay within the cap (plus a group a name), and
 * no name takes more of what the trainer frees than another that asks
 * for it. Open episodes are a fixed table too (at most 16384). */
#define LH_LEARNER_PEERS_MAX 1024
#define LH_LEARNER_PEER_NAME_BYTES 257  /* the wire's names, 256 bytes at most */
#define LH_LEARNER_PEER_CONN_BYTES 256  /* a ROUTER routing id */
#define LH_LEARNER_PEER_KEY_BYTES 41    /* a Z85 public key */
#define LH_LEARNER_PEER_ACTIVE_NS 10000000000ll

typedef struct lh_learner_peers lh_learner_peers;

typedef enum {
  LH_PEER_BOUND = 0,   /* the name is the connection's */
  LH_PEER_NO_HELLO,    /* the connection has said no Hello: ACK_RETRY, it may be an actor whose Hello follows */
  LH_PEER_OTHER_NAME,  /* the connection said Hello under another name: refused */
  LH_PEER_OTHER_KEY,   /* (a Hello) the name is bound under another CURVE key: refused */
} lh_learner_peer_verdict;

typedef struct {
  uint64_t bound;      /* names bound (first Hellos) */
  uint64_t rebinds;    /* names taken over by a new connection */
  uint64_t evicted;    /* names forgotten for a new one (the table full) */
  uint64_t granted;    /* credit handed out, in episodes */
  uint64_t reclaimed;  /* credit taken back when the cap shrank */
} lh_learner_peers_counts;

lh_learner_peers *lh_learner_peers_new(void);  /* NULL: out of memory */
void lh_learner_peers_free(lh_learner_peers *p);
const lh_learner_peers_counts *lh_learner_peers_get_counts(const lh_learner_peers *p);
/* A Hello under name from connection conn (routing id of conn_bytes), with
 * its CURVE key (NULL or "": none) and process id: LH_PEER_BOUND with
 * *index the name's, or why not. A new process under a bound name (another
 * pid) drops the name's open episodes. */
lh_learner_peer_verdict lh_learner_peers_hello(lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes,
                                               const char *name, const char *key, uint64_t pid, int64_t now_ns,
                                               int *index);
/* Whether conn may send in name: LH_PEER_BOUND with *index, or why not. */
lh_learner_peer_verdict lh_learner_peers_check(lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes,
                                               const char *name, int64_t now_ns, int *index);
const char *lh_learner_peers_name(const lh_learner_peers *p, int index);
/* The name conn is bound to (its index), or -1. */
int lh_learner_peers_of_conn(const lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes);
/* Names in the table (indexes 0..count-1), and the connection name index
 * is bound to (its routing id, *conn_bytes long; NULL for no name). */
size_t lh_learner_peers_count(const lh_learner_peers *p);
const uint8_t *lh_learner_peers_conn(const lh_learner_peers *p, int index, size_t *conn_bytes);
/* The window an Ack last told name index, and whether its window has
 * grown by a group or more since (it is heard from, and the backlog set):
 * an actor held at its window sends only heartbeats, so the ingest tells
 * it at once (lh_learner_ingest_tick). */
void lh_learner_peers_told(lh_learner_peers *p, int index, uint32_t window);
int lh_learner_peers_window_grew(const lh_learner_peers *p, int index, int64_t now_ns);
/* The cap on untrained plus open episodes, the untrained ones now (ended,
 * stored, not yet trained) and the group size; set every turn. Without it
 * nothing is counted against credit and windows are not sent. */
void lh_learner_peers_set_backlog(lh_learner_peers *p, int64_t cap, int64_t untrained, uint64_t group);
/* 1 when episode is open (of any name; touched when name index's), 0 when
 * the learner does not know it. */
int lh_learner_peers_is_open(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns);
/* Whether name index may open a new episode now (credit or slack left). */
int lh_learner_peers_may_open(const lh_learner_peers *p, int index);
/* A new episode of name index: 1 opened (credit taken), 0 past its credit
 * and slack (answer ACK_RETRY), -1 the open table is full (the same). */
int lh_learner_peers_open(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns);
/* A new episode of name index was held back past its window: more than a
 * group of them within 2 s and the name counts as ignoring its window,
 * served last from what the other names leave. */
void lh_learner_peers_refused(lh_learner_peers *p, int index, int64_t now_ns);
/* Whether name index counts as ignoring its window now (above). */
int lh_learner_peers_ignores_window(const lh_learner_peers *p, int index, int64_t now_ns);
/* An episode the store already holds running (started before this
 * learner): counted open, no credit taken. 0, or -1 when the table is full. */
int lh_learner_peers_adopt(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns);
/* Its end is stored: no longer open. */
void lh_learner_peers_close(lh_learner_peers *p, uint64_t episode);
/* Forgets open episodes untouched since idle_before_ns (the store's sweep
 * has ended them as aborted). */
void lh_learner_peers_expire(lh_learner_peers *p, int64_t idle_before_ns);
/* Hands out what is free (ends_since: EpisodeEnds stored since the backlog
 * was set), and takes back what is over the cap. */
void lh_learner_peers_grant(lh_learner_peers *p, uint64_t ends_since, int64_t now_ns);
/* Name index's window: its open episodes plus its credit (0: hold). */
uint32_t lh_learner_peers_window(const lh_learner_peers *p, int index);
int64_t lh_learner_peers_open_count(const lh_learner_peers *p, int index);

/* ---- ingest (the learner process's ROUTER) --------------------------------
 * Binds a ROUTER where actors' DEALERs send Hello, Segment, EpisodeEnd and
 * Heartbeat envelopes (one frame each; a REQ-style empty delimiter frame is
 * accepted and echoed). Each poll round receives what has arrived (at most
 * max_round messages), decodes each with lh_wire_decode, writes the round's
 * Segments and EpisodeEnds into the store in one batch, commits, and only
 * then sends one Ack per peer and status: ACK_STORED for new messages,
 * ACK_DUPLICATE for ones the store already held, ACK_RETRY when the batch
 * failed (nothing of it is stored; the actor resends), ACK_REJECTED for a
 * message that does not decode or validate (when its msg_id can be read; a
 * message that does not even parse cannot be acked). A Segment, EpisodeEnd
 * or Heartbeat is taken only from the connection that said Hello under its
 * sender's name (learner/peers.c; the round's Hellos are bound first): from
 * a connection that has said no Hello it is answered ACK_RETRY (an actor
 * that reconnected says its Hello and resends), from one that said Hello
 * under another name ACK_REJECTED; neither is stored, both are counted
 * and logged once per interval. Bad input is counted
 * and logged at most once per log interval, never fatal. Frames over
 * max_message_bytes are refused by ZeroMQ itself (ZMQ_MAXMSGSIZE: the peer
 * is disconnected); messages of more than 3 frames are dropped and counted. */
typedef struct lh_learner_ingest lh_learner_ingest;

typedef struct {
  uint64_t received;    /* envelopes read off the socket */
  uint64_t stored;      /* segments and ends newly stored */
  uint64_t duplicates;  /* segments and ends the store already held */
  uint64_t rejected;    /* did not decode or validate, or a body the ingest does not take */
  uint64_t rejected_model;  /* of those: valid, but not what the model takes (learner/validate.c) */
  uint64_t refused;         /* of those: the store refused it (it contradicts its episode) */
  uint64_t rejected_run;    /* of those: a Hello, Segment, EpisodeEnd or Heartbeat of another run */
  uint64_t retried;     /* messages answered ACK_RETRY for a store batch that failed */
  /* Names and back-pressure (learner/peers.c): */
  uint64_t refused_name;  /* of rejected: in a name bound to another connection, a second name from a
                             connection, or a Hello in a name held under another CURVE key */
  uint64_t held_hello;    /* answered ACK_RETRY: in a name its connection has said no Hello under */
  uint64_t held_window;   /* answered ACK_RETRY: a new episode past its name's window */
  uint64_t held_prefix;   /* answered ACK_RETRY: a member of a shared prefix whose leader is not stored yet */
  uint64_t bad_frames;  /* messages with a wrong frame count (not acked) */
  uint64_t hellos, heartbeats;
  uint64_t segments, episode_ends;  /* stored or duplicate, by kind */
  uint64_t ends_stored;             /* EpisodeEnds newly stored (episodes that may be ready) */
  uint64_t acks_sent;   /* Ack messages */
  uint64_t rounds;      /* rounds that committed a batch */
} lh_learner_ingest_counts;

/* ctx is the caller's zmq context; store is borrowed (it must outlive the
 * ingest). lim may be NULL for the defaults. endpoint may use a wildcard
 * port (tcp://127.0.0.1:*); lh_learner_ingest_endpoint tells the one bound. */
lh_learner_ingest *lh_learner_ingest_new(void *zmq_ctx, const char *endpoint, lh_store *store,
                                         const lh_wire_limits *lim, lh_errbuf *err);
/* The same with the ROUTER a CURVE server when curve has a secret key
 * (net/zsock.h: the caller runs the ZAP handler; NULL is plain), and with
 * zap (the context's handler) its connections capped at max_peers, which
 * bounds what libzmq queues for all peers together (NULL: no cap). */
lh_learner_ingest *lh_learner_ingest_new_curve(void *zmq_ctx, const char *endpoint, lh_store *store,
                                               const lh_wire_limits *lim, const lh_zsock_curve *curve,
                                               lh_zsock_zap *zap, int max_peers, lh_errbuf *err);
void lh_learner_ingest_free(lh_learner_ingest *ig);
const char *lh_learner_ingest_endpoint(const lh_learner_ingest *ig);
/* The socket, for a caller's own zmq_poll over several sockets. */
void *lh_learner_ingest_socket(lh_learner_ingest *ig);
/* Waits up to timeout_ms (0: do not wait) for a message, then runs one
 * round as above. *handled (may be NULL) gets the number of envelopes
 * read. Returns 0, or a negative code only for a socket failure (the store
 * failing is answered with ACK_RETRY and counted, not returned). */
int lh_learner_ingest_poll(lh_learner_ingest *ig, int timeout_ms, size_t *handled, lh_errbuf *err);
const lh_learner_ingest_counts *lh_learner_ingest_get_counts(const lh_learner_ingest *ig);
/* Messages per round, 1..256 (default 256). */
void lh_learner_ingest_set_round(lh_learner_ingest *ig, size_t max_round);
/* The episode ids the last poll's round newly stored something of (with
 * repeats), valid until the next poll: what may have become ready, so the
 * trainer need not rescan the whole store (lh_learner_trainer_offer). */
const uint64_t *lh_learner_ingest_touched(const lh_learner_ingest *ig, size_t *n);
/* Back-pressure (learner/peers.c): cap, the most episodes the fleet may
 * hold untrained or open, and untrained, the ended ones not yet trained
 * (set every turn). From then on a new episode past its name's credit and
 * slack is answered ACK_RETRY (held_window) and not stored, and every Ack
 * carries its name's window (Ack.window, and Ack.hold when it is 0). An
 * ingest never given one holds nothing back and sends neither (no limit). */
void lh_learner_ingest_set_backlog(lh_learner_ingest *ig, int64_t cap, int64_t untrained, uint64_t group_size);
/* Between rounds (every turn of the service): hands out the credit the
 * trainer freed, and tells each name whose window grew by a group its new
 * window in an Ack of no message (an actor held at its window would wait
 * for its next heartbeat's Ack). 0, or a socket error. */
int lh_learner_ingest_tick(lh_learner_ingest *ig, lh_errbuf *err);
/* The store's idle sweep ([learner] abort_after_ms): an open episode with
 * no message for this long no longer counts against its name (60 s). */
void lh_learner_ingest_set_abort_after(lh_learner_ingest *ig, uint64_t abort_after_ms);
/* The names and credit (learner/peers.c), for counts and tests. */
const lh_learner_peers *lh_learner_ingest_peers(const lh_learner_ingest *ig);
/* From now on every Segment and EpisodeEnd is checked against the model
 * (learner/validate.c) and its vocabulary before it is stored; one that
 * fails is answered ACK_REJECTED and counted in rejected_model. */
void lh_learner_ingest_set_model_limits(lh_learner_ingest *ig, const lh_learner_model_limits *l);
/* This learner's run (common/run_id.h; NULL or "": no check, as before).
 * From now on every Ack's envelope carries it, and a Hello, Segment,
 * EpisodeEnd or Heartbeat whose run id (the Hello's run_id, else the
 * envelope's) is another run's is answered ACK_REJECTED with a reason
 * naming both runs, counted in rejected_run and never stored; one without
 * a run id (an actor started by hand) is taken as before. Each message is
 * judged by its own run id, so the order in which a foreign actor's
 * messages arrive (segments before its Hello after a reconnection, say)
 * makes no difference. LH_EINVAL for a run_id that is not one. */
int lh_learner_ingest_set_run(lh_learner_ingest *ig, const char *run_id, lh_errbuf *err);

#endif

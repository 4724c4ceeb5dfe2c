/* learner: what the ingest's files share (ingest.c, which reads,
 * judges and stores a round of messages, and ingest_acks.c, which answers
 * them) and nothing else sees. */
#ifndef LH_LEARNER_INGEST_INTERNAL_H
#define LH_LEARNER_INGEST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "common/run_id.h"
#include "learner/internal.h"

#define IDENTITY_BYTES LH_LEARNER_PEER_CONN_BYTES

/* KIND_HEARTBEAT: an actor's Heartbeat, a row of actor_heartbeats written
 * in the round's batch (acked at once: it is a report, not data).
 * KIND_HELLO: a Hello, which binds its name to its connection before the
 * round's other messages are judged. */
enum { KIND_NONE = 0, KIND_STORE = 1, KIND_HEARTBEAT = 2, KIND_HELLO = 3 };

/* Why a message was held back or refused, for its Ack's reason. */
enum { WHY_NONE = 0, WHY_NO_HELLO, WHY_NAME, WHY_KEY, WHY_WINDOW, WHY_FULL, WHY_PREFIX };

/* Members of a shared prefix whose leader is not stored yet (store.h,
 * LH_STORE_NO_PREFIX) are answered ACK_RETRY until the first such answer
 * to their episode is abort_after_ms old: a leader's message held back
 * (its actor's window, a learner restarted under it) and resent can come
 * after its members'. Then ACK_REJECTED, so that a reference to an
 * episode that never comes is not resent for ever. A fixed table; the
 * oldest entry makes room. */
#define INGEST_PREFIX_WAITS 1024
typedef struct {
  uint64_t episode;
  int64_t since_ns;
} lh_learner_ingest_prefix_wait;

/* One message of a round: who sent it, how to answer, what to store. */
typedef struct {
  uint8_t identity[IDENTITY_BYTES];
  size_t identity_bytes;
  int delimiter;          /* the peer put an empty frame before the payload */
  int has_id;
  uint64_t msg_id;
  int status;             /* Longhaul__AckStatus, or -1: no ack */
  int kind;
  Longhaul__Envelope *env;
  /* a segment's payload frame, kept until the round is stored so that the
   * store takes the segment's bytes as they arrived (seg_at, seg_bytes in
   * the frame) */
  zmq_msg_t frame;
  int has_frame;
  size_t seg_at, seg_bytes;
  int acked;
  char foreign_run[LH_RUN_ID_BYTES];  /* refused for its run: the sender's run id; "" otherwise */
  char key[LH_LEARNER_PEER_KEY_BYTES];  /* the connection's CURVE key (ZAP User-Id); "" without CURVE */
  int peer;                           /* the sender's name (learner/peers.c) once bound; -1 */
  int why;                            /* WHY_*: for the Ack's reason */
} lh_learner_ingest_entry;

struct lh_learner_ingest {
  void *sock;
  lh_store *store;
  lh_wire_limits lim;
  char endpoint[LH_LEARNER_TEXT_BYTES];
  size_t max_round;
  lh_learner_ingest_entry *round;
  uint64_t next_msg_id;
  lh_learner_ingest_counts counts;
  lh_zsock_meter bad;         /* bad input: counted, logged once per interval */
  lh_zsock_meter foreign;     /* messages of another run: the same */
  lh_zsock_meter names;       /* messages in a name their connection does not hold */
  lh_log_meter window;        /* new episodes held back past their window */
  char run_id[LH_RUN_ID_BYTES];  /* this learner's run ("": no run check) */
  int64_t hello_window_ns;    /* hellos logged in the current interval, and held back */
  uint64_t hellos_logged, hellos_held;
  int has_limits;             /* check segments and ends against the model (limits) */
  lh_learner_model_limits limits;
  int64_t last_fail_log_ns;  /* store failures: logged once per interval too */
  uint64_t failed_since_log;
  uint64_t *touched;  /* episodes the last committed round wrote */
  size_t n_touched;
  /* Names bound to connections and their back-pressure credit
   * (lh_learner_ingest_set_backlog). */
  lh_learner_peers *peers;
  int budgeted;
  int64_t abort_after_ns, last_expire_ns;
  uint64_t round_ends;  /* EpisodeEnds the current round stored */
  size_t round_bytes;   /* message bytes the current round took in */
  lh_learner_ingest_prefix_wait waits[INGEST_PREFIX_WAITS];
  size_t n_waits, next_wait;
};

/* ---- acks (ingest_acks.c) ------------------------------------------------- */
/* One Ack per (peer, status) of the round's n messages, naming every
 * msg_id it covers, with the reason and (budgeted) the name's window. 0,
 * or LH_ELEARNER_INGEST_SOCKET when an ack cannot be encoded or sent. */
int lh_learner_ingest_send_acks(lh_learner_ingest *ig, size_t n, lh_errbuf *err);

#endif

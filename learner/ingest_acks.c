/* learner: the ingest's answers. After a round is stored, one Ack per
 * peer and status names every message it covers, with the reason a
 * message was held back or refused and the name's back-pressure window;
 * between rounds, an Ack of no message tells a name whose window grew. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "learner/ingest_internal.h"

static int send_frame(void *sock, const void *data, size_t n, int flags) {
  return zmq_send(sock, data, n, flags) < 0 ? -1 : 0;
}

/* One Ack per (peer, status) of the round, naming every msg_id it covers. */
int lh_learner_ingest_send_acks(lh_learner_ingest *ig, size_t n, lh_errbuf *err) {
  uint64_t *ids = malloc(n * sizeof *ids);
  if (!ids) return lh_errbuf_set(err, LH_ENOMEM, "ingest: out of memory for acks");
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    lh_learner_ingest_entry *a = &ig->round[i];
    if (a->acked || !a->has_id || a->status < 0) continue;
    size_t k = 0;
    for (size_t j = i; j < n; j++) {
      lh_learner_ingest_entry *b = &ig->round[j];
      if (b->acked || !b->has_id || b->status != a->status || b->why != a->why ||
          b->identity_bytes != a->identity_bytes || memcmp(b->identity, a->identity, a->identity_bytes) != 0 ||
          strcmp(b->foreign_run, a->foreign_run) != 0)
        continue;
      ids[k++] = b->msg_id;
      b->acked = 1;
    }
    Longhaul__Ack ack = LONGHAUL__ACK__INIT;
    ack.n_msg_ids = k;
    ack.msg_ids = ids;
    ack.status = (Longhaul__AckStatus)a->status;
    if (ig->budgeted) {
      /* The window of the name the connection holds; none: hold. */
      int who = a->peer >= 0 ? a->peer : lh_learner_peers_of_conn(ig->peers, a->identity, a->identity_bytes);
      ack.window = who >= 0 ? lh_learner_peers_window(ig->peers, who) : 0;
      ack.hold = ack.window == 0;
      lh_learner_peers_told(ig->peers, who, ack.window);
    }
    char why[256];
    if (a->why == WHY_NO_HELLO) ack.reason = "no Hello under this name from this connection; say Hello, then resend";
    else if (a->why == WHY_NAME)
      ack.reason = "this name is bound to another connection, or this connection said Hello under another name; "
                   "do not resend";
    else if (a->why == WHY_KEY) ack.reason = "this name is bound to another CURVE key; do not resend";
    else if (a->why == WHY_WINDOW)
      ack.reason = "a new episode past this actor's back-pressure window; resend when the window allows";
    else if (a->why == WHY_FULL) ack.reason = "the learner holds its most open episodes; resend later";
    else if (a->why == WHY_PREFIX)
      ack.reason = "the episode whose tokens this one's shared prefix names is not stored yet; resend later";
    else if (a->status == LONGHAUL__ACK_STATUS__ACK_RETRY) ack.reason = "store write failed; resend later";
    else if (a->foreign_run[0]) {
      snprintf(why, sizeof why, "this learner's run is %s, the message's run is %s; do not resend", ig->run_id,
               a->foreign_run);
      ack.reason = why;
    } else if (a->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) ack.reason = "invalid message; do not resend";
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.protocol = LH_WIRE_PROTOCOL;
    env.msg_id = ++ig->next_msg_id;
    env.sender = "learner";
    env.run_id = ig->run_id;  /* an actor of another run tells its refusal by it */
    env.body_case = LONGHAUL__ENVELOPE__BODY_ACK;
    env.ack = &ack;
    uint8_t *buf = NULL;
    size_t bytes = 0;
    lh_errbuf e;
    if (lh_wire_encode(&env, &buf, &bytes, &e)) {
      rc = lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: cannot encode an ack: %s", e.msg);
      break;
    }
    /* A peer that went away makes the ROUTER drop the reply silently; the
     * actor resends on reconnect and gets ACK_DUPLICATE then. */
    if (send_frame(ig->sock, a->identity, a->identity_bytes, ZMQ_SNDMORE) ||
        (a->delimiter && send_frame(ig->sock, "", 0, ZMQ_SNDMORE)) ||
        send_frame(ig->sock, buf, bytes, 0)) {
      int en = zmq_errno();
      if (en != EHOSTUNREACH && en != EAGAIN)
        rc = lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: cannot send an ack: %s",
                           zmq_strerror(en));
    } else {
      ig->counts.acks_sent++;
    }
    free(buf);
  }
  free(ids);
  return rc;
}

/* An Ack of no message to name index's connection, with its window. */
static int push_window(lh_learner_ingest *ig, int index, lh_errbuf *err) {
  size_t conn_bytes = 0;
  const uint8_t *conn = lh_learner_peers_conn(ig->peers, index, &conn_bytes);
  if (!conn) return 0;
  Longhaul__Ack ack = LONGHAUL__ACK__INIT;
  ack.status = LONGHAUL__ACK_STATUS__ACK_STORED;
  ack.window = lh_learner_peers_window(ig->peers, index);
  ack.hold = ack.window == 0;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = ++ig->next_msg_id;
  env.sender = "learner";
  env.run_id = ig->run_id;
  env.body_case = LONGHAUL__ENVELOPE__BODY_ACK;
  env.ack = &ack;
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf e;
  if (lh_wire_encode(&env, &buf, &bytes, &e))
    return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: cannot encode an ack: %s", e.msg);
  int rc = 0;
  /* A connection gone makes the ROUTER drop it; a full queue too: the
   * actor's next message gets the window anyway. */
  if (send_frame(ig->sock, conn, conn_bytes, ZMQ_SNDMORE | ZMQ_DONTWAIT) ||
      send_frame(ig->sock, buf, bytes, ZMQ_DONTWAIT)) {
    int en = zmq_errno();
    if (en != EHOSTUNREACH && en != EAGAIN)
      rc = lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: cannot send an ack: %s", zmq_strerror(en));
  } else {
    ig->counts.acks_sent++;
    lh_learner_peers_told(ig->peers, index, ack.window);
  }
  free(buf);
  return rc;
}

int lh_learner_ingest_tick(lh_learner_ingest *ig, lh_errbuf *err) {
  if (!ig || !ig->budgeted) return 0;
  int64_t now = lh_now_ns();
  lh_learner_peers_grant(ig->peers, 0, now);
  size_t n = lh_learner_peers_count(ig->peers);
  for (size_t i = 0; i < n; i++)
    if (lh_learner_peers_window_grew(ig->peers, (int)i, now)) LH_TRY(push_window(ig, (int)i, err));
  return 0;
}

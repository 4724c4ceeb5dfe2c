/* learner: the ingest ROUTER. Messages are read in rounds; a round's
 * Segments and EpisodeEnds go into the store in one transaction, and the
 * acks go out only after it committed (ingest_acks.c), so an ack always
 * means the message is durable (ARCHITECTURE.md §1). Before that, each message in an actor's
 * name must come from the connection that said Hello under the name, and
 * a new episode must fit its name's window (learner/peers.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/run_id.h"
#include "net/zsock.h"
#include "learner/ingest_internal.h"

#define INGEST_MAX_ROUND 256
#define INGEST_LINGER_MS 200
#define INGEST_LOG_INTERVAL_NS 5000000000ll
#define INGEST_HELLO_LINES 32
/* Bytes of messages one round takes in at most (the first message always
 * goes in): the decoded round is what the learner holds for a peer's
 * burst, so it is bounded whatever the peers send. */
#define INGEST_ROUND_BYTES (64u << 20)
/* Messages libzmq queues per peer before it stops reading that peer's
 * connection (TCP then holds the rest at the sender): with the message
 * size limit, what one peer can make the learner buffer; the ZAP handler's
 * cap on connections bounds it in all (lh_learner_ingest_new_curve). */
#define INGEST_RCVHWM LH_LEARNER_INGEST_QUEUE_MESSAGES
/* The ZAP domain of the ingest ROUTER when its peers are capped. */
#define INGEST_ZAP_DOMAIN "longhaul.ingest"
/* A capped ingest counts every open connection, so connections that hold
 * a place without being of use are closed: one whose handshake has not
 * finished in 10 s (an honest one takes milliseconds), and one that has
 * answered nothing, not even libzmq's own ping, for a minute (its host
 * gone without a FIN). An actor closed so connects again by itself. */
#define INGEST_HANDSHAKE_MS 10000
#define INGEST_HEARTBEAT_MS 10000
#define INGEST_HEARTBEAT_TIMEOUT_MS 60000
/* Open episodes with no message for [learner] abort_after_ms (the store's
 * idle sweep ends them as aborted; 60 s unless set) no longer count
 * against their name's window; looked for once a second. */
#define INGEST_EXPIRE_EVERY_NS 1000000000ll
#define INGEST_ABORT_AFTER_MS 60000

/* Whether a member (episode) whose leader is not stored may still wait
 * for it (ACK_RETRY) rather than be refused. */
static int prefix_may_wait(lh_learner_ingest *ig, uint64_t episode, int64_t now) {
  int64_t limit = ig->abort_after_ns ? ig->abort_after_ns : (int64_t)60000 * 1000000;
  for (size_t i = 0; i < ig->n_waits; i++)
    if (ig->waits[i].episode == episode) return now - ig->waits[i].since_ns < limit;
  size_t slot = ig->n_waits < INGEST_PREFIX_WAITS ? ig->n_waits++ : ig->next_wait++ % INGEST_PREFIX_WAITS;
  ig->waits[slot] = (lh_learner_ingest_prefix_wait){episode, now};
  return 1;
}

/* Reads field 2 (msg_id, a varint) of a top-level Envelope without parsing
 * the rest, so that a message that fails validation can still be rejected
 * by id. Returns 1 when found. Bounded by the buffer; never allocates. */
static int read_varint(const uint8_t *b, size_t n, size_t *i, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*i >= n) return -1;
    uint8_t c = b[(*i)++];
    v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) return *out = v, 0;
  }
  return -1;
}

static int peek_msg_id(const uint8_t *b, size_t n, uint64_t *id) {
  size_t i = 0;
  while (i < n) {
    uint64_t key, v;
    if (read_varint(b, n, &i, &key)) return 0;
    unsigned type = (unsigned)(key & 7);
    uint64_t field = key >> 3;
    if (type == 0) {
      if (read_varint(b, n, &i, &v)) return 0;
      if (field == 2) return *id = v, 1;
    } else if (type == 1) {
      if (n - i < 8) return 0;
      i += 8;
    } else if (type == 2) {
      if (read_varint(b, n, &i, &v) || v > n - i) return 0;
      i += (size_t)v;
    } else if (type == 5) {
      if (n - i < 4) return 0;
      i += 4;
    } else {
      return 0;
    }
  }
  return 0;
}

lh_learner_ingest *lh_learner_ingest_new(void *zmq_ctx, const char *endpoint, lh_store *store,
                                         const lh_wire_limits *lim, lh_errbuf *err) {
  return lh_learner_ingest_new_curve(zmq_ctx, endpoint, store, lim, NULL, NULL, 0, err);
}

lh_learner_ingest *lh_learner_ingest_new_curve(void *zmq_ctx, const char *endpoint, lh_store *store,
                                               const lh_wire_limits *lim, const lh_zsock_curve *curve,
                                               lh_zsock_zap *zap, int max_peers, lh_errbuf *err) {
  if (!zmq_ctx || !endpoint || !store) {
    lh_errbuf_set(err, LH_EINVAL, "ingest: NULL context, endpoint or store");
    return NULL;
  }
  lh_learner_ingest *ig = calloc(1, sizeof *ig);
  if (ig) ig->round = calloc(INGEST_MAX_ROUND, sizeof *ig->round);
  if (ig) ig->touched = calloc(INGEST_MAX_ROUND, sizeof *ig->touched);
  if (ig) ig->peers = lh_learner_peers_new();
  if (!ig || !ig->round || !ig->touched || !ig->peers) {
    if (ig) free(ig->round), free(ig->touched), lh_learner_peers_free(ig->peers), free(ig);
    lh_errbuf_set(err, LH_ENOMEM, "ingest: out of memory");
    return NULL;
  }
  ig->store = store;
  if (lim) ig->lim = *lim;
  else lh_wire_limits_default(&ig->lim);
  ig->max_round = INGEST_MAX_ROUND;
  ig->bad.component = "ingest";
  ig->foreign.component = "ingest";
  ig->names.component = "ingest";
  ig->window.component = "ingest";
  ig->abort_after_ns = (int64_t)INGEST_ABORT_AFTER_MS * 1000000;
  lh_zsock_opts so = {.linger_ms = INGEST_LINGER_MS, .max_message_bytes = (int64_t)ig->lim.max_message_bytes,
                      .rcvhwm = INGEST_RCVHWM, .curve = curve,
                      .zap_domain = zap && max_peers > 0 ? INGEST_ZAP_DOMAIN : NULL,
                      .handshake_ms = INGEST_HANDSHAKE_MS, .heartbeat_ms = INGEST_HEARTBEAT_MS,
                      .heartbeat_timeout_ms = INGEST_HEARTBEAT_TIMEOUT_MS};
  lh_errbuf se;
  ig->sock = lh_zsock_open(zmq_ctx, ZMQ_ROUTER, &so, "ingest ROUTER", &se);
  if (ig->sock && so.zap_domain &&
      lh_zsock_zap_cap_peers(zap, ig->sock, INGEST_ZAP_DOMAIN, max_peers, "ingest ROUTER", &se)) {
    lh_errbuf_set(err, se.code, "ingest: %s", se.msg);
    lh_learner_ingest_free(ig);
    return NULL;
  }
  if (!ig->sock ||
      lh_zsock_bind(ig->sock, endpoint, curve, ig->endpoint, sizeof ig->endpoint, "ingest ROUTER", &se)) {
    lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET,
                  "ingest: cannot bind ROUTER on %s: %s (is another learner using it? set "
                  "[learner] ingest_endpoint)",
                  endpoint, se.msg);
    lh_learner_ingest_free(ig);
    return NULL;
  }
  LH_INFO("ingest", "bound endpoint=%s curve=%s", ig->endpoint, curve && curve->secret[0] ? "on" : "off");
  return ig;
}

void lh_learner_ingest_free(lh_learner_ingest *ig) {
  if (!ig) return;
  if (ig->sock) zmq_close(ig->sock);
  free(ig->round);
  free(ig->touched);
  lh_learner_peers_free(ig->peers);
  free(ig);
}

const uint64_t *lh_learner_ingest_touched(const lh_learner_ingest *ig, size_t *n) {
  if (n) *n = ig ? ig->n_touched : 0;
  return ig ? ig->touched : NULL;
}

const char *lh_learner_ingest_endpoint(const lh_learner_ingest *ig) { return ig ? ig->endpoint : NULL; }
void *lh_learner_ingest_socket(lh_learner_ingest *ig) { return ig ? ig->sock : NULL; }
const lh_learner_ingest_counts *lh_learner_ingest_get_counts(const lh_learner_ingest *ig) {
  return ig ? &ig->counts : NULL;
}
void lh_learner_ingest_set_backlog(lh_learner_ingest *ig, int64_t cap, int64_t untrained, uint64_t group_size) {
  if (!ig) return;
  lh_learner_peers_set_backlog(ig->peers, cap, untrained, group_size);
  ig->budgeted = 1;
}

void lh_learner_ingest_set_abort_after(lh_learner_ingest *ig, uint64_t abort_after_ms) {
  if (ig && abort_after_ms) ig->abort_after_ns = (int64_t)abort_after_ms * 1000000;
}

const lh_learner_peers *lh_learner_ingest_peers(const lh_learner_ingest *ig) { return ig ? ig->peers : NULL; }

void lh_learner_ingest_set_round(lh_learner_ingest *ig, size_t max_round) {
  if (!ig) return;
  ig->max_round = max_round < 1 ? 1 : max_round > INGEST_MAX_ROUND ? INGEST_MAX_ROUND : max_round;
}

static void log_bad(lh_learner_ingest *ig, const char *what) { lh_zsock_meter_bad(&ig->bad, what); }

/* A Hello is news worth a line, but a peer reconnecting in a loop must not
 * flood the log: at most INGEST_HELLO_LINES lines per interval, then one
 * line saying how many were held back. */
static void log_hello(lh_learner_ingest *ig, const Longhaul__Envelope *env, const char *bound) {
  int64_t now = lh_now_ns();
  if (!ig->hello_window_ns || now - ig->hello_window_ns >= INGEST_LOG_INTERVAL_NS) {
    if (ig->hellos_held)
      LH_INFO("ingest", "hellos not logged in the last interval=%llu", (unsigned long long)ig->hellos_held);
    ig->hello_window_ns = now, ig->hellos_logged = 0, ig->hellos_held = 0;
  }
  if (ig->hellos_logged++ >= INGEST_HELLO_LINES) {
    ig->hellos_held++;
    return;
  }
  LH_INFO("ingest", "hello sender=%s role=%s name=%s pid=%llu bound=%s", env->sender, env->hello->role,
          env->hello->name, (unsigned long long)env->hello->pid, bound);
}

void lh_learner_ingest_set_model_limits(lh_learner_ingest *ig, const lh_learner_model_limits *l) {
  if (!ig || !l) return;
  ig->limits = *l, ig->has_limits = 1;
  ig->lim.vocab = l->vocab;
}

int lh_learner_ingest_set_run(lh_learner_ingest *ig, const char *run_id, lh_errbuf *err) {
  if (!ig) return lh_errbuf_set(err, LH_EINVAL, "ingest: NULL ingest");
  if (!run_id || !*run_id) {
    ig->run_id[0] = 0;
    return 0;
  }
  LH_TRY(lh_run_id_check(run_id, err));
  snprintf(ig->run_id, sizeof ig->run_id, "%s", run_id);
  return 0;
}

/* The run a message of an actor says it is of: a Hello's own run_id, else
 * its envelope's; "" for none. */
static const char *message_run(const Longhaul__Envelope *env) {
  if (env->body_case == LONGHAUL__ENVELOPE__BODY_HELLO && env->hello->run_id && *env->hello->run_id)
    return env->hello->run_id;
  return env->run_id ? env->run_id : "";
}

/* An actor's message of another run than this learner's: refused before
 * anything of it is stored (its actor was started for another fleet, or
 * outlived it). A message without a run id (an actor started by hand) is
 * any run's. Returns 1 when refused, with the entry answered ACK_REJECTED
 * and its reason kept for the Ack. */
static int refuse_foreign(lh_learner_ingest *ig, lh_learner_ingest_entry *e) {
  switch (e->env->body_case) {
    case LONGHAUL__ENVELOPE__BODY_HELLO:
    case LONGHAUL__ENVELOPE__BODY_SEGMENT:
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END:
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT: break;
    default: return 0;
  }
  const char *theirs = message_run(e->env);
  if (!ig->run_id[0] || !*theirs || !strcmp(theirs, ig->run_id)) return 0;
  snprintf(e->foreign_run, sizeof e->foreign_run, "%s", theirs);
  e->status = LONGHAUL__ACK_STATUS__ACK_REJECTED;
  ig->counts.rejected++, ig->counts.rejected_run++;
  char why[512];
  snprintf(why, sizeof why, "a %s from actor '%s' of run %s refused: this learner's run is %s",
           lh_wire_body_name(e->env->body_case), e->env->sender, theirs, ig->run_id);
  lh_zsock_meter_bad(&ig->foreign, why);
  return 1;
}

/* A Segment or EpisodeEnd the model cannot take (learner/validate.c), or
 * one that names an actor other than its sender: refused before it is
 * stored. Returns 0 when it may be stored. */
static int check_store_entry(lh_learner_ingest *ig, const Longhaul__Envelope *env, lh_errbuf *e) {
  const char *actor = env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT ? env->segment->actor : env->episode_end->actor;
  if (strcmp(actor, env->sender))
    return lh_errbuf_set(e, LH_ELEARNER_MODEL_INPUT, "a %s from sender '%s' names actor '%s'",
                         lh_wire_body_name(env->body_case), env->sender, actor);
  if (!ig->has_limits) return 0;
  if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT) return lh_learner_check_segment(env->segment, &ig->limits, e);
  return lh_learner_check_episode_end(env->episode_end, &ig->limits, e);
}

/* Keeps a segment's payload frame in e (moved, not copied) with where the
 * Segment's bytes lie in it; without them (not one segment field) the
 * store encodes the decoded segment instead. */
static void keep_segment_bytes(lh_learner_ingest_entry *e, zmq_msg_t *payload, const uint8_t *b, size_t bytes) {
  const uint8_t *seg;
  size_t seg_bytes;
  if (e->env->body_case != LONGHAUL__ENVELOPE__BODY_SEGMENT ||
      !lh_wire_segment_bytes(b, bytes, &seg, &seg_bytes))
    return;
  if (zmq_msg_init(&e->frame)) return;
  if (zmq_msg_move(&e->frame, payload)) {
    zmq_msg_close(&e->frame);
    return;
  }
  e->has_frame = 1, e->seg_at = (size_t)(seg - b), e->seg_bytes = seg_bytes;
}

/* Reads the frames of one message into e. Returns 1 for a message, 0 when
 * nothing was waiting, -1 for a socket error; a message of the wrong shape
 * is drained, counted and returns 2 (no entry). */
static int recv_one(lh_learner_ingest *ig, lh_learner_ingest_entry *e, lh_errbuf *err) {
  zmq_msg_t frames[3];
  int n = 0, rc = 1;
  int got = lh_zsock_recv_frames(ig->sock, frames, 3, ZMQ_DONTWAIT, &n);
  if (got == 0) return 0;
  if (got < 0) {
    lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: receive failed: %s", zmq_strerror(zmq_errno()));
    return -1;
  }
  const zmq_msg_t *payload = NULL;
  if (got == 2 || n < 2 || zmq_msg_size(&frames[0]) > IDENTITY_BYTES) {
    rc = 2;
  } else if (n == 3) {
    if (zmq_msg_size(&frames[1]) != 0) rc = 2;
    else payload = &frames[2], e->delimiter = 1;
  } else {
    payload = &frames[1];
  }
  if (rc == 2) {
    ig->counts.bad_frames++;
    log_bad(ig, "wrong frame count (expected identity and one payload frame)");
  } else {
    e->identity_bytes = zmq_msg_size(&frames[0]);
    memcpy(e->identity, zmq_msg_data(&frames[0]), e->identity_bytes);
    /* The ZAP handler names a CURVE peer by its public key (net/zsock.c);
     * a name bound under a key stays with it. */
    const char *user = zmq_msg_gets((zmq_msg_t *)payload, "User-Id");
    snprintf(e->key, sizeof e->key, "%s", user ? user : "");
    const uint8_t *b = zmq_msg_data((zmq_msg_t *)payload);
    size_t bytes = zmq_msg_size((zmq_msg_t *)payload);
    ig->round_bytes += bytes;
    ig->counts.received++;
    lh_errbuf de;
    int drc = lh_wire_decode(b, bytes, &ig->lim, &e->env, &de);
    if (drc) {
      ig->counts.rejected++;
      e->has_id = peek_msg_id(b, bytes, &e->msg_id);
      e->status = e->has_id ? LONGHAUL__ACK_STATUS__ACK_REJECTED : -1;
      log_bad(ig, de.msg);
    } else {
      e->has_id = 1;
      e->msg_id = e->env->msg_id;
      switch (refuse_foreign(ig, e) ? LONGHAUL__ENVELOPE__BODY__NOT_SET : e->env->body_case) {
        case LONGHAUL__ENVELOPE__BODY__NOT_SET: break;  /* refused: another run's */
        case LONGHAUL__ENVELOPE__BODY_SEGMENT:
        case LONGHAUL__ENVELOPE__BODY_EPISODE_END: {
          lh_errbuf me;
          if (check_store_entry(ig, e->env, &me)) {
            ig->counts.rejected++, ig->counts.rejected_model++;
            e->status = LONGHAUL__ACK_STATUS__ACK_REJECTED;
            log_bad(ig, me.msg);
          } else {
            e->kind = KIND_STORE;
            keep_segment_bytes(e, (zmq_msg_t *)payload, b, bytes);
          }
          break;
        }
        case LONGHAUL__ENVELOPE__BODY_HELLO:
          /* Acked so that a sender that keeps it in its outbox lets it go;
           * bind_round decides how (its name may be another's). */
          ig->counts.hellos++;
          e->kind = KIND_HELLO;
          break;
        case LONGHAUL__ENVELOPE__BODY_HEARTBEAT:
          ig->counts.heartbeats++;
          LH_DEBUG("ingest", "heartbeat sender=%s version=%llu tokens_per_s=%.1f outbox=%u",
                   e->env->sender, (unsigned long long)e->env->heartbeat->policy_version,
                   e->env->heartbeat->tokens_per_s, e->env->heartbeat->outbox_depth);
          e->kind = KIND_HEARTBEAT;
          e->status = LONGHAUL__ACK_STATUS__ACK_STORED;
          break;
        default: {
          char why[128];
          snprintf(why, sizeof why, "a %s message on the ingest socket (expected segment, "
                   "episode_end, hello or heartbeat)", lh_wire_body_name(e->env->body_case));
          ig->counts.rejected++;
          log_bad(ig, why);
          e->status = LONGHAUL__ACK_STATUS__ACK_REJECTED;
        }
      }
    }
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&frames[i]);
  return rc;
}

/* A message in a name its connection does not hold: held back (ACK_RETRY)
 * when the connection has said no Hello yet (an actor reconnected, its
 * Hello behind what it queued: it resends once its Hello is in), refused
 * (ACK_REJECTED) when the connection said Hello under another name, or
 * (a Hello) the name is bound under another CURVE key. Counted, and one
 * line per interval. */
static void refuse_name(lh_learner_ingest *ig, lh_learner_ingest_entry *e, lh_learner_peer_verdict v) {
  const char *what;
  e->kind = KIND_NONE;
  if (v == LH_PEER_NO_HELLO) {
    e->status = LONGHAUL__ACK_STATUS__ACK_RETRY, e->why = WHY_NO_HELLO;
    ig->counts.held_hello++;
    what = "from a connection that said no Hello under it (answered retry)";
  } else {
    e->status = LONGHAUL__ACK_STATUS__ACK_REJECTED, e->why = v == LH_PEER_OTHER_KEY ? WHY_KEY : WHY_NAME;
    ig->counts.rejected++, ig->counts.refused_name++;
    what = v == LH_PEER_OTHER_KEY ? "bound under another CURVE key (refused)"
           : e->env->body_case == LONGHAUL__ENVELOPE__BODY_HELLO
               ? "from a connection that holds another name, or not its sender's (refused)"
               : "from a connection that said Hello under another name (refused)";
  }
  char why[512];
  snprintf(why, sizeof why, "a %s in the name '%s' %s", lh_wire_body_name(e->env->body_case), e->env->sender, what);
  lh_zsock_meter_bad(&ig->names, why);
}

/* Binds the names of the round's Hellos, before the round's other
 * messages are judged: what a reconnected actor queued ahead of its Hello
 * on the same connection is then its own. */
static void bind_round(lh_learner_ingest *ig, size_t n) {
  int64_t now = lh_now_ns();
  for (size_t i = 0; i < n; i++) {
    lh_learner_ingest_entry *e = &ig->round[i];
    if (e->kind != KIND_HELLO) continue;
    const Longhaul__Hello *h = e->env->hello;
    uint64_t rebinds = lh_learner_peers_get_counts(ig->peers)->rebinds;
    int index = -1;
    /* The name is the sender's: what its messages are judged by. */
    lh_learner_peer_verdict v =
        h->name && *h->name && strcmp(h->name, e->env->sender)
            ? LH_PEER_OTHER_NAME
            : lh_learner_peers_hello(ig->peers, e->identity, e->identity_bytes, e->env->sender, e->key, h->pid, now,
                                     &index);
    log_hello(ig, e->env, v != LH_PEER_BOUND ? "refused"
                          : lh_learner_peers_get_counts(ig->peers)->rebinds > rebinds ? "taken_over" : "yes");
    if (v != LH_PEER_BOUND) {
      refuse_name(ig, e, v);
      continue;
    }
    e->kind = KIND_NONE, e->peer = index;
    e->status = LONGHAUL__ACK_STATUS__ACK_STORED;
  }
}

static uint64_t entry_episode(const lh_learner_ingest_entry *e) {
  return e->env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT ? e->env->segment->episode_id
                                                               : e->env->episode_end->episode_id;
}

/* Judges the round's Segments, EpisodeEnds and Heartbeats: each must come
 * from the connection its sender's name is bound to; with back-pressure,
 * a new episode (one neither open nor in the store) must fit its name's
 * credit, and one the store holds running from before (a learner
 * restarted under its actors) is counted open at no charge while the
 * name may open one. What fails is held back or refused, never stored. */
static void admit_round(lh_learner_ingest *ig, size_t n) {
  int64_t now = lh_now_ns();
  for (size_t i = 0; i < n; i++) {
    lh_learner_ingest_entry *e = &ig->round[i];
    if (e->kind != KIND_STORE && e->kind != KIND_HEARTBEAT) continue;
    int index = -1;
    lh_learner_peer_verdict v =
        lh_learner_peers_check(ig->peers, e->identity, e->identity_bytes, e->env->sender, now, &index);
    if (v != LH_PEER_BOUND) {
      refuse_name(ig, e, v);
      continue;
    }
    e->peer = index;
    if (e->kind != KIND_STORE || !ig->budgeted) continue;
    uint64_t episode = entry_episode(e);
    if (lh_learner_peers_is_open(ig->peers, index, episode, now)) continue;
    /* A message of an episode the store holds ended (a segment resent
     * after its EpisodeEnd got in: it was held back while its episode was
     * new) or of another actor (the store refuses it) opens nothing and
     * needs no credit: held back, it would leave its episode a gap until
     * the trainer frees room. So the store is asked even past the credit,
     * except for a name that ignores its window: its flood of new ids
     * costs the learner a hash lookup each, not a query. An episode the
     * store holds running from before is counted open without taking
     * credit, but only while its name may open one (credit or slack). */
    int may = lh_learner_peers_may_open(ig->peers, index), r = 0;
    if (may || !lh_learner_peers_ignores_window(ig->peers, index, now)) {
      lh_episode_row row;
      lh_errbuf se;
      int known = lh_store_episode_get(ig->store, episode, &row, &se) == 0;
      if (known && (row.has_end || strcmp(row.actor, e->env->sender))) continue;
      if (may)
        r = known ? (lh_learner_peers_adopt(ig->peers, index, episode, now) ? -1 : 1)
                  : lh_learner_peers_open(ig->peers, index, episode, now);
    }
    if (r == 1) continue;
    e->kind = KIND_NONE;
    e->status = LONGHAUL__ACK_STATUS__ACK_RETRY, e->why = r == 0 ? WHY_WINDOW : WHY_FULL;
    ig->counts.held_window++;
    if (r == 0) lh_learner_peers_refused(ig->peers, index, now);
    lh_log_meter_warn(&ig->window,
                      "held back a new episode past its actor's window (answered retry) actor=%s episode=%llu "
                      "window=%u open=%lld%s",
                      e->env->sender, (unsigned long long)episode, lh_learner_peers_window(ig->peers, index),
                      (long long)lh_learner_peers_open_count(ig->peers, index),
                      r < 0 ? " (the learner's table of open episodes is full)" : "");
  }
}

/* Writes the round's store entries in one batch. On any failure the batch
 * is rolled back and every store entry of the round is answered ACK_RETRY:
 * nothing of it is durable, and the actor resends. */
static void store_round(lh_learner_ingest *ig, size_t n) {
  size_t to_store = 0;
  for (size_t i = 0; i < n; i++) to_store += ig->round[i].kind != KIND_NONE;
  if (!to_store) return;
  lh_errbuf e;
  int rc = lh_store_begin(ig->store, &e);
  int begun = rc == 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    lh_learner_ingest_entry *x = &ig->round[i];
    if (x->kind == KIND_HEARTBEAT) {
      rc = lh_store_put_heartbeat(ig->store, x->env->sender, x->env->heartbeat, 0, &e);
      continue;
    }
    if (x->kind != KIND_STORE) continue;
    int inserted = 0;
    if (x->env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT && x->has_frame)
      rc = lh_store_put_segment_wire(ig->store, x->env->segment,
                                     (const uint8_t *)zmq_msg_data(&x->frame) + x->seg_at,
                                     x->seg_bytes, &ig->lim, &inserted, &e);
    else if (x->env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT)
      rc = lh_store_put_segment(ig->store, x->env->segment, &inserted, &e);
    else
      rc = lh_store_put_episode_end(ig->store, x->env->episode_end, &inserted, &e);
    if (rc == 0 && inserted == LH_STORE_NO_PREFIX &&
        prefix_may_wait(ig, entry_episode(x), lh_now_ns())) {
      x->status = LONGHAUL__ACK_STATUS__ACK_RETRY, x->why = WHY_PREFIX;
      continue;
    }
    if (rc == 0 && (inserted == LH_STORE_REFUSED || inserted == LH_STORE_NO_PREFIX)) {
      /* It contradicts its episode (another actor's id, other content
       * under a stored key): refused alone, the round goes on. */
      x->status = LONGHAUL__ACK_STATUS__ACK_REJECTED;
      log_bad(ig, e.msg);
      continue;
    }
    x->status = inserted ? LONGHAUL__ACK_STATUS__ACK_STORED : LONGHAUL__ACK_STATUS__ACK_DUPLICATE;
  }
  if (rc == 0) rc = lh_store_commit(ig->store, &e);
  if (rc) {
    lh_errbuf ignore;
    if (begun) lh_store_rollback(ig->store, &ignore);
    /* A full or read-only store fails every round until it is fixed: say
     * why once per interval, with how many messages were answered retry. */
    int64_t now = lh_now_ns();
    ig->failed_since_log += to_store;
    if (!ig->last_fail_log_ns || now - ig->last_fail_log_ns >= INGEST_LOG_INTERVAL_NS) {
      LH_WARN("ingest", "store batch failed, answering retry: messages=%llu code=%s error=%s",
              (unsigned long long)ig->failed_since_log, lh_err_name(rc), e.msg);
      ig->last_fail_log_ns = now;
      ig->failed_since_log = 0;
    }
  } else {
    if (ig->last_fail_log_ns) {
      LH_INFO("ingest", "store writes resumed (retried since the last report=%llu)",
              (unsigned long long)ig->failed_since_log);
      ig->last_fail_log_ns = 0;
      ig->failed_since_log = 0;
    }
    ig->counts.rounds++;
  }
  for (size_t i = 0; i < n; i++) {
    lh_learner_ingest_entry *x = &ig->round[i];
    /* a heartbeat's row went with a round rolled back: not STORED */
    if (x->kind == KIND_HEARTBEAT && rc) x->status = LONGHAUL__ACK_STATUS__ACK_RETRY;
    if (x->kind != KIND_STORE) continue;
    if (rc) {
      x->status = LONGHAUL__ACK_STATUS__ACK_RETRY;
      ig->counts.retried++;
      continue;
    }
    if (x->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) {
      ig->counts.rejected++, ig->counts.refused++;
      continue;
    }
    if (x->why == WHY_PREFIX) {
      ig->counts.held_prefix++;
      continue;
    }
    if (x->status == LONGHAUL__ACK_STATUS__ACK_STORED) ig->counts.stored++;
    else ig->counts.duplicates++;
    int is_seg = x->env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT;
    if (!is_seg) lh_learner_peers_close(ig->peers, x->env->episode_end->episode_id);
    if (is_seg) ig->counts.segments++;
    else ig->counts.episode_ends++;
    if (x->status == LONGHAUL__ACK_STATUS__ACK_STORED) {
      ig->touched[ig->n_touched++] = is_seg ? x->env->segment->episode_id : x->env->episode_end->episode_id;
      if (!is_seg) ig->counts.ends_stored++, ig->round_ends++;
    }
  }
}

int lh_learner_ingest_poll(lh_learner_ingest *ig, int timeout_ms, size_t *handled, lh_errbuf *err) {
  if (handled) *handled = 0;
  if (!ig) return lh_errbuf_set(err, LH_EINVAL, "ingest: NULL ingest");
  zmq_pollitem_t item = {ig->sock, 0, ZMQ_POLLIN, 0};
  int pr = zmq_poll(&item, 1, timeout_ms);
  if (pr < 0) {
    if (zmq_errno() == EINTR) return 0;  /* a signal: the caller's loop decides */
    return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "ingest: poll failed: %s",
                         zmq_strerror(zmq_errno()));
  }
  ig->n_touched = 0;
  if (pr == 0) return 0;
  size_t n = 0;
  int rc = 0;
  ig->round_ends = 0, ig->round_bytes = 0;
  while (n < ig->max_round && ig->round_bytes < INGEST_ROUND_BYTES) {
    lh_learner_ingest_entry *e = &ig->round[n];
    memset(e, 0, sizeof *e);
    e->status = -1, e->peer = -1;
    int r = recv_one(ig, e, err);
    if (r < 0) {
      rc = zmq_errno() == EINTR ? 0 : LH_ELEARNER_INGEST_SOCKET;
      break;
    }
    if (r == 0) break;
    if (r == 2) continue;
    n++;
  }
  bind_round(ig, n);
  admit_round(ig, n);
  store_round(ig, n);
  int64_t now = lh_now_ns();
  if (ig->budgeted) lh_learner_peers_grant(ig->peers, ig->round_ends, now);
  if (now - ig->last_expire_ns >= INGEST_EXPIRE_EVERY_NS) {
    lh_learner_peers_expire(ig->peers, now - ig->abort_after_ns);
    ig->last_expire_ns = now;
  }
  int arc = lh_learner_ingest_send_acks(ig, n, err);
  for (size_t i = 0; i < n; i++) {
    lh_learner_ingest_entry *x = &ig->round[i];
    lh_wire_free(x->env), x->env = NULL;
    if (x->has_frame) zmq_msg_close(&x->frame), x->has_frame = 0;
  }
  if (handled) *handled = n;
  return rc ? rc : arc;
}


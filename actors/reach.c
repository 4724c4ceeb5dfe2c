/* actors: whether a socket of the actor reaches the learner, from its
 * monitor's events (internal.h, lh_actors_reach), and the warning while
 * it does not.
 *
 * An actor whose learner is not there used to say nothing: libzmq queues
 * what a DEALER sends while nothing listens, so no send fails, and the
 * resend warning counts only messages that went out. The monitor tells
 * the stages apart: nothing accepts the connection (no CONNECTED), a
 * connection is made but no ZMTP/CURVE handshake completes (CONNECTED
 * without HANDSHAKE_SUCCEEDED: a peer that is not a learner, or a CURVE
 * setup that does not match), a handshake refused (HANDSHAKE_FAILED_*),
 * and a learner that was reached and went away (DISCONNECTED after
 * HANDSHAKE_SUCCEEDED). Only a completed handshake counts as reached. */
#include <zmq.h>

#include "actors/internal.h"

void lh_actors_reach_init(lh_actors_reach *r, const char *what, const char *key, const char *endpoint,
                          int64_t now_ms) {
  *r = (lh_actors_reach){.what = what, .key = key, .endpoint = endpoint, .since_ms = now_ms};
}

int lh_actors_reach_event(lh_actors_reach *r, uint16_t event, int64_t now_ms) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      if (r->reached) return 0;
      if (r->warned_ms)
        LH_INFO("actor", "reached the %s endpoint=%s after %lld ms unreachable", r->what, r->endpoint,
                (long long)(now_ms - r->since_ms));
      r->reached = r->ever = 1;
      r->stage = LH_ACTORS_REACH_NOTHING;
      r->warned_ms = 0;
      return 1;
    case ZMQ_EVENT_DISCONNECTED:
      if (r->reached) {
        r->reached = 0;
        r->since_ms = now_ms;
        r->stage = LH_ACTORS_REACH_NOTHING;
      }
      return 0;
    case ZMQ_EVENT_CONNECTED:
      if (!r->reached && r->stage < LH_ACTORS_REACH_CONNECTED) r->stage = LH_ACTORS_REACH_CONNECTED;
      return 0;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      if (!r->reached) r->stage = LH_ACTORS_REACH_FAILED, r->failed_event = event;
      return 0;
    default:
      return 0;
  }
}

/* What the furthest stage of this outage says about it. */
static const char *why(const lh_actors_reach *r) {
  if (r->stage == LH_ACTORS_REACH_FAILED)
    return r->failed_event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
               ? "a connection was made and its handshake refused: the learner does not allow this actor's CURVE "
                 "key, or is at its peer cap"
           : r->failed_event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
               ? "a connection was made and its handshake failed: the peer does not speak ZMTP as a learner does"
               : "a connection was made and its handshake failed: the peer closed it or did not answer in time";
  if (r->stage == LH_ACTORS_REACH_CONNECTED)
    return "a connection was made but no ZMTP/CURVE handshake completed (is it a longhaul learner, with the same "
           "CURVE setting as this actor?)";
  return r->ever ? "it went away: nothing has accepted a connection there since"
                 : "nothing has accepted a connection there (is the learner running, and is this its endpoint?)";
}

int lh_actors_reach_check(lh_actors_reach *r, int64_t now_ms, int64_t after_ms, int64_t repeat_ms,
                          const char *extra) {
  if (r->reached || now_ms - r->since_ms < after_ms) return 0;
  if (r->warned_ms && now_ms - r->warned_ms < repeat_ms) return 0;
  r->warned_ms = now_ms;
  r->warnings++;
  LH_WARN("actor", "cannot reach the %s endpoint=%s for %lld ms%s ([actor] %s): %s", r->what, r->endpoint,
          (long long)(now_ms - r->since_ms), extra ? extra : "", r->key, why(r));
  return 1;
}

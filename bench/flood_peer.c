/* flood_peer ENDPOINT SECONDS [NAME]: the hostile peer of
 * bench/flood.sh. It says Hello under NAME (default "flood") and then,
 * for SECONDS, sends whole episodes of new ids (a segment of 8 tokens and
 * its end, in groups of 4) as fast as the learner's ingest takes them,
 * ignoring the window and hold of every Ack; it reads the Acks only so
 * that the learner's answers are not dropped, and counts them. Its last
 * line says what it sent and how it was answered:
 *   flood: seconds=S episodes_sent=N messages_stored=A held_back=B rejected=C
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/common.h"
#include "proto/wire.h"

#define TOKENS 8

typedef struct {
  uint64_t stored, retried, rejected;
} counts;

static void read_acks(void *d, counts *c) {
  static uint8_t buf[1 << 16];
  int got;
  while ((got = zmq_recv(d, buf, sizeof buf, ZMQ_DONTWAIT)) > 0) {
    Longhaul__Envelope *env;
    lh_errbuf e;
    if (lh_wire_decode(buf, (size_t)got, NULL, &env, &e)) continue;
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_ACK) {
      uint64_t n = env->ack->n_msg_ids;
      if (env->ack->status == LONGHAUL__ACK_STATUS__ACK_STORED) c->stored += n;
      else if (env->ack->status == LONGHAUL__ACK_STATUS__ACK_RETRY) c->retried += n;
      else if (env->ack->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) c->rejected += n;
    }
    lh_wire_free(env);
  }
}

/* Sends env; while the socket would block, reads Acks and waits for room
 * (up to the deadline). 0 sent, -1 the deadline passed. */
static int send_env(void *d, Longhaul__Envelope *env, uint64_t msg_id, const char *name, counts *c,
                    int64_t deadline_ns) {
  env->protocol = LH_WIRE_PROTOCOL, env->msg_id = msg_id, env->sender = (char *)name;
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  if (lh_wire_encode(env, &buf, &n, &e)) {
    fprintf(stderr, "flood: cannot encode: %s\n", e.msg);
    exit(1);
  }
  int rc = 0;
  while (zmq_send(d, buf, n, ZMQ_DONTWAIT) < 0) {
    if (zmq_errno() != EAGAIN || lh_now_ns() >= deadline_ns) {
      rc = -1;
      break;
    }
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN | ZMQ_POLLOUT, 0};
    zmq_poll(&it, 1, 50);
    read_acks(d, c);
  }
  free(buf);
  read_acks(d, c);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: flood_peer ENDPOINT SECONDS [NAME]\n");
    return 2;
  }
  const char *endpoint = argv[1], *name = argc > 3 ? argv[3] : "flood";
  double seconds = atof(argv[2]);
  void *ctx = zmq_ctx_new();
  void *d = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_connect(d, endpoint)) {
    fprintf(stderr, "flood: cannot connect to %s: %s\n", endpoint, zmq_strerror(zmq_errno()));
    return 1;
  }
  counts c = {0};
  int64_t start = lh_now_ns(), deadline = start + (int64_t)(seconds * 1e9);
  uint64_t msg = 1, episodes = 0;
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = (char *)name, h.pid = 1;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  send_env(d, &env, msg++, name, &c, deadline);
  uint32_t tok[TOKENS], ver[TOKENS] = {0};
  uint8_t mask[TOKENS];
  float logp[TOKENS];
  for (int i = 0; i < TOKENS; i++) tok[i] = (uint32_t)(40 + i), mask[i] = 1, logp[i] = -4.0f;
  while (lh_now_ns() < deadline) {
    uint64_t id = 0x466c6f6f64000000ull + episodes, group = id / 4;
    Longhaul__Segment s = LONGHAUL__SEGMENT__INIT;
    s.episode_id = id, s.actor = (char *)name, s.env = "calc", s.group_id = group, s.task_seed = group;
    s.n_tokens = TOKENS, s.tokens = tok, s.loss_mask.len = TOKENS, s.loss_mask.data = mask;
    s.n_behavior_logp = TOKENS, s.behavior_logp = logp, s.n_policy_version = TOKENS, s.policy_version = ver;
    env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &s;
    if (send_env(d, &env, msg++, name, &c, deadline)) break;
    Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
    end.episode_id = id, end.actor = (char *)name, end.env = "calc", end.segment_count = 1;
    end.total_tokens = TOKENS, end.group_id = group, end.task_seed = group;
    end.reward = (float)(episodes % 2);
    end.outcome = episodes % 2 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
    env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
    if (send_env(d, &env, msg++, name, &c, deadline)) break;
    episodes++;
  }
  printf("flood: seconds=%.1f episodes_sent=%llu messages_stored=%llu held_back=%llu rejected=%llu\n",
         (double)(lh_now_ns() - start) / 1e9, (unsigned long long)episodes, (unsigned long long)c.stored,
         (unsigned long long)c.retried, (unsigned long long)c.rejected);
  zmq_close(d);
  zmq_ctx_term(ctx);
  return 0;
}

/* A peer of a real learner process (peer_fixture.h). */
#include "peer_fixture.h"

#include <check.h>
#include <stdlib.h>
#include <zmq.h>

void *lh_peer_dealer(void *zmq_ctx, const char *endpoint, int timeout_ms) {
  void *d = zmq_socket(zmq_ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
  ck_assert_int_eq(zmq_connect(d, endpoint), 0);
  return d;
}

void lh_peer_send(void *d, Longhaul__Envelope *env, uint64_t msg_id, const char *sender) {
  env->protocol = LH_WIRE_PROTOCOL, env->msg_id = msg_id, env->sender = (char *)(sender ? sender : "a0");
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(env, &buf, &n, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
}

void lh_peer_hello(void *d, const char *name) {
  static uint64_t next_id = 1ull << 50;  /* apart from the tests' own msg ids */
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = (char *)(name ? name : "a0");
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  uint64_t id = next_id++;
  lh_peer_send(d, &env, id, h.name);
  ck_assert_int_eq(lh_peer_ack_of(d, id), LONGHAUL__ACK_STATUS__ACK_STORED);
}

Longhaul__Envelope *lh_peer_recv(void *d) {
  static uint8_t buf[4 << 20];
  int got = zmq_recv(d, buf, sizeof buf, 0);
  ck_assert_msg(got > 0, "no reply from the learner");
  Longhaul__Envelope *env;
  lh_errbuf e;
  ck_assert_msg(lh_wire_decode(buf, (size_t)got, NULL, &env, &e) == 0, "%s", e.msg);
  return env;
}

void lh_peer_acks(void *d, uint64_t first, size_t n, int *status) {
  size_t known = 0;
  for (size_t i = 0; i < n; i++) status[i] = -1;
  while (known < n) {
    Longhaul__Envelope *env = lh_peer_recv(d);
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_ACK)
      for (size_t i = 0; i < env->ack->n_msg_ids; i++) {
        uint64_t id = env->ack->msg_ids[i];
        if (id < first || id - first >= n || status[id - first] >= 0) continue;
        status[id - first] = env->ack->status;
        known++;
      }
    lh_wire_free(env);
  }
}

int lh_peer_ack_of(void *d, uint64_t msg_id) {
  int status;
  lh_peer_acks(d, msg_id, 1, &status);
  return status;
}

void lh_peer_send_episode(void *d, uint64_t id, uint64_t group, float reward) {
  enum { N = LH_PEER_EP_TOKENS, SEG = LH_PEER_SEG_TOKENS };
  uint32_t tok[N], ver[N] = {0};
  uint8_t mask[N];
  float logp[N];
  for (int i = 0; i < N; i++) {
    tok[i] = (uint32_t)(40 + (id * 5 + (uint64_t)i * 3) % 60);
    mask[i] = i >= 2;
    logp[i] = mask[i] ? -5.0f : 0.0f;
  }
  for (uint32_t q = 0; q < N / SEG; q++) {
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    Longhaul__Segment s = LONGHAUL__SEGMENT__INIT;
    s.episode_id = id, s.seq = q, s.actor = "a0", s.env = "calc", s.start_offset = q * SEG;
    s.group_id = group, s.task_seed = group;
    s.n_tokens = SEG, s.tokens = tok + q * SEG;
    s.loss_mask.len = SEG, s.loss_mask.data = mask + q * SEG;
    s.n_behavior_logp = SEG, s.behavior_logp = logp + q * SEG;
    s.n_policy_version = SEG, s.policy_version = ver + q * SEG;
    env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &s;
    lh_peer_send(d, &env, id * 10 + q, "a0");
  }
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = id, end.actor = "a0", end.env = "calc", end.segment_count = N / SEG;
  end.total_tokens = N, end.reward = reward, end.group_id = group, end.task_seed = group;
  end.outcome = reward > 0 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
  lh_peer_send(d, &env, id * 10 + 9, "a0");
  size_t acked = 0;
  while (acked < 3) {
    Longhaul__Envelope *a = lh_peer_recv(d);
    ck_assert_int_eq(a->body_case, LONGHAUL__ENVELOPE__BODY_ACK);
    ck_assert_int_eq(a->ack->status, LONGHAUL__ACK_STATUS__ACK_STORED);
    acked += a->ack->n_msg_ids;
    lh_wire_free(a);
  }
}

/* Tests of actors/outbox.c: capacity in messages and bytes, acks of unknown
 * and duplicate ids, resend order and timeouts with an injected clock, the
 * reconnect path, sends that would have blocked (due again at once, in
 * order), and the id table under many collisions; the heartbeat meter; and
 * the warnings of an endpoint not reached (actors/reach.c). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "actors/internal.h"

static const uint8_t PAYLOAD[256] = {1, 2, 3, 4, 5};

START_TEST(test_capacity_in_messages) {
  lh_actors_outbox *ob = lh_actors_outbox_new(3, 1000, 100, NULL);
  ck_assert_ptr_nonnull(ob);
  for (uint64_t id = 1; id <= 3; id++) ck_assert_int_eq(lh_actors_outbox_push(ob, id, PAYLOAD, 10, 0, NULL), 0);
  ck_assert(!lh_actors_outbox_has_room(ob, 1));
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_outbox_push(ob, 4, PAYLOAD, 10, 0, &e), LH_EACTORS_OUTBOX_FULL);
  ck_assert(strstr(e.msg, "3 of 3 messages"));
  ck_assert_uint_eq(lh_actors_outbox_depth(ob), 3);
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), 30);
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 2), 1);
  ck_assert(lh_actors_outbox_has_room(ob, 10));
  ck_assert_int_eq(lh_actors_outbox_push(ob, 4, PAYLOAD, 10, 0, NULL), 0);
  ck_assert_uint_eq(lh_actors_outbox_depth(ob), 3);
  lh_actors_outbox_free(ob);  /* with messages still waiting */
}
END_TEST

START_TEST(test_capacity_in_bytes) {
  lh_actors_outbox *ob = lh_actors_outbox_new(10, 100, 100, NULL);
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_outbox_push(ob, 1, PAYLOAD, 60, 0, NULL), 0);
  ck_assert_int_eq(lh_actors_outbox_push(ob, 2, PAYLOAD, 50, 0, &e), LH_EACTORS_OUTBOX_FULL);
  ck_assert(strstr(e.msg, "60 of 100 bytes"));
  ck_assert(lh_actors_outbox_has_room(ob, 40));
  ck_assert(!lh_actors_outbox_has_room(ob, 41));
  ck_assert_int_eq(lh_actors_outbox_push(ob, 2, PAYLOAD, 40, 0, NULL), 0);
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), 100);
  ck_assert_int_eq(lh_actors_outbox_push(ob, 3, PAYLOAD, 1, 0, &e), LH_EACTORS_OUTBOX_FULL);
  ck_assert_int_eq(lh_actors_outbox_push(ob, 9, PAYLOAD, 101, 0, &e), LH_EACTORS_OUTBOX_TOO_LARGE);
  ck_assert(strstr(e.msg, "outbox_bytes=100"));
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 1), 1);
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), 40);
  lh_actors_outbox_free(ob);
}
END_TEST

START_TEST(test_acks_unknown_and_duplicate) {
  lh_actors_outbox *ob = lh_actors_outbox_new(8, 1000, 100, NULL);
  lh_errbuf e;
  for (uint64_t id = 10; id < 15; id++) ck_assert_int_eq(lh_actors_outbox_push(ob, id, PAYLOAD, 5, 0, NULL), 0);
  ck_assert_int_eq(lh_actors_outbox_push(ob, 12, PAYLOAD, 5, 0, &e), LH_EACTORS_OUTBOX_DUPLICATE);
  ck_assert(strstr(e.msg, "message 12"));
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 99), 0);
  /* A waiting message's bytes can be looked at until it is acked. */
  size_t peeked = 0;
  const uint8_t *bytes = lh_actors_outbox_peek(ob, 12, &peeked);
  ck_assert(bytes && peeked == 5 && memcmp(bytes, PAYLOAD, 5) == 0);
  ck_assert_ptr_null(lh_actors_outbox_peek(ob, 99, &peeked));
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 12), 1);
  ck_assert_ptr_null(lh_actors_outbox_peek(ob, 12, NULL));
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 12), 0);  /* a duplicate ack */
  uint64_t batch[5] = {10, 12, 13, 13, 77};
  ck_assert_uint_eq(lh_actors_outbox_ack_many(ob, batch, 5), 2);
  ck_assert_uint_eq(lh_actors_outbox_depth(ob), 2);
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), 10);
  ck_assert_uint_eq(lh_actors_outbox_ack_many(ob, NULL, 3), 0);
  /* Once acked, an id can be pushed again (a new message under it). */
  ck_assert_int_eq(lh_actors_outbox_push(ob, 12, PAYLOAD, 5, 0, NULL), 0);
  lh_actors_outbox_free(ob);
}
END_TEST

static uint64_t due(lh_actors_outbox *ob, int64_t now) {
  uint64_t id = 0;
  const uint8_t *b;
  size_t n;
  return lh_actors_outbox_next_due(ob, now, &id, &b, &n) ? id : 0;
}

START_TEST(test_resend_after_timeout_in_order) {
  lh_actors_outbox *ob = lh_actors_outbox_new(8, 1000, 100, NULL);
  uint8_t msg[3][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}};
  for (int i = 0; i < 3; i++) ck_assert_int_eq(lh_actors_outbox_push(ob, i + 1, msg[i], 4, 10 * i, NULL), 0);
  ck_assert_uint_eq(due(ob, 99), 0);
  uint64_t id;
  const uint8_t *b;
  size_t n;
  ck_assert_int_eq(lh_actors_outbox_next_due(ob, 100, &id, &b, &n), 1);
  ck_assert_uint_eq(id, 1);
  ck_assert_uint_eq(n, 4);
  ck_assert_int_eq(memcmp(b, msg[0], 4), 0);
  ck_assert_uint_eq(due(ob, 100), 0);  /* 2 was sent at 10: due at 110 */
  ck_assert_uint_eq(due(ob, 110), 2);
  ck_assert_uint_eq(due(ob, 150), 3);
  ck_assert_uint_eq(due(ob, 199), 0);
  ck_assert_uint_eq(due(ob, 200), 1);  /* resent at 100 */
  ck_assert_uint_eq(lh_actors_outbox_resends(ob), 4);
  /* An acked message is never resent. */
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 2), 1);
  ck_assert_uint_eq(due(ob, 1000), 3);
  ck_assert_uint_eq(due(ob, 1000), 1);
  ck_assert_uint_eq(due(ob, 1000), 0);
  lh_actors_outbox_free(ob);
}
END_TEST

START_TEST(test_resend_all_on_reconnect) {
  lh_actors_outbox *ob = lh_actors_outbox_new(8, 1000, 1000, NULL);
  for (uint64_t id = 1; id <= 5; id++) ck_assert_int_eq(lh_actors_outbox_push(ob, id, PAYLOAD, 1, 50, NULL), 0);
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 3), 1);
  ck_assert_uint_eq(due(ob, 60), 0);
  lh_actors_outbox_resend_all(ob);
  /* A message pushed after the reconnect was just sent: not due. */
  ck_assert_int_eq(lh_actors_outbox_push(ob, 6, PAYLOAD, 1, 60, NULL), 0);
  uint64_t want[4] = {1, 2, 4, 5};
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(due(ob, 60), want[i]);
  ck_assert_uint_eq(due(ob, 60), 0);
  /* Then the ordinary timeout again, still in push order. */
  ck_assert_uint_eq(due(ob, 1059), 0);
  ck_assert_uint_eq(due(ob, 1060), 6);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(due(ob, 1060), want[i]);
  lh_actors_outbox_free(ob);
}
END_TEST

/* A send that would have blocked (the socket's pipe full after a
 * reconnect): the message is due again at once, in push order ahead of
 * what went, and the hand-out that did not go is no resend. */
START_TEST(test_unsent_due_at_once_in_order) {
  lh_actors_outbox *ob = lh_actors_outbox_new(16, 1000, 1000, NULL);
  for (uint64_t id = 1; id <= 6; id++) ck_assert_int_eq(lh_actors_outbox_push(ob, id, PAYLOAD, 1, 0, NULL), 0);
  ck_assert(!lh_actors_outbox_has_unsent(ob));
  /* 4's first send blocked; 5 and 6 then wait behind it. */
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 4), 1);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 5), 1);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 6), 1);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 99), 0);
  ck_assert(lh_actors_outbox_has_unsent(ob));
  ck_assert_uint_eq(due(ob, 1), 4);
  ck_assert_uint_eq(lh_actors_outbox_resends(ob), 0);  /* a first send */
  /* 5 blocks again: still first in line, before 6. */
  ck_assert_uint_eq(due(ob, 2), 5);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 5), 1);
  ck_assert_uint_eq(due(ob, 3), 5);
  ck_assert_uint_eq(due(ob, 3), 6);
  ck_assert(!lh_actors_outbox_has_unsent(ob));
  ck_assert_uint_eq(due(ob, 3), 0);
  ck_assert_uint_eq(lh_actors_outbox_resends(ob), 0);
  /* A reconnect: all due; resends that block stay ahead, counted once. */
  lh_actors_outbox_resend_all(ob);
  ck_assert(lh_actors_outbox_has_unsent(ob));
  ck_assert_uint_eq(due(ob, 10), 1);
  ck_assert_uint_eq(due(ob, 10), 2);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 2), 1);
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 3), 1);  /* an ack inside the prefix */
  ck_assert_uint_eq(lh_actors_outbox_resends(ob), 1);
  uint64_t want[4] = {2, 4, 5, 6};
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(due(ob, 10), want[i]);
  ck_assert_uint_eq(due(ob, 10), 0);
  ck_assert_uint_eq(lh_actors_outbox_resends(ob), 5);
  /* Then the ordinary timeout, in the order they went. */
  ck_assert_uint_eq(due(ob, 1009), 0);
  uint64_t again[5] = {1, 2, 4, 5, 6};
  for (int i = 0; i < 5; i++) ck_assert_uint_eq(due(ob, 1010), again[i]);
  /* The last of the due-now prefix acked: the prefix ends before it. */
  ck_assert_int_eq(lh_actors_outbox_push(ob, 7, PAYLOAD, 1, 1010, NULL), 0);
  ck_assert_int_eq(lh_actors_outbox_unsent(ob, 7), 1);
  ck_assert_int_eq(lh_actors_outbox_ack(ob, 7), 1);
  ck_assert(!lh_actors_outbox_has_unsent(ob));
  ck_assert_uint_eq(due(ob, 1011), 0);
  ck_assert_int_eq(lh_actors_outbox_unsent(NULL, 1), 0);
  ck_assert(!lh_actors_outbox_has_unsent(NULL));
  lh_actors_outbox_free(ob);
}
END_TEST

START_TEST(test_many_colliding_ids_against_reference) {
  enum { N = 2000 };
  lh_actors_outbox *ob = lh_actors_outbox_new(N, (size_t)N * 8, 10, NULL);
  static uint64_t ids[N];
  static int live[N];
  /* Multiples of a large power of two stress the probe runs. */
  for (int i = 0; i < N; i++) {
    ids[i] = (uint64_t)i << 20;
    ck_assert_int_eq(lh_actors_outbox_push(ob, ids[i], PAYLOAD, 8, i, NULL), 0);
    live[i] = 1;
  }
  lh_actors_rng r;
  lh_actors_rng_seed(&r, 3);
  size_t depth = N;
  for (int round = 0; round < 3 * N; round++) {
    int i = (int)(lh_actors_rng_next(&r) % N);
    int got = lh_actors_outbox_ack(ob, ids[i]);
    ck_assert_int_eq(got, live[i]);
    if (live[i]) depth--;
    live[i] = 0;
    if (round % 3 == 0) {
      int j = (int)(lh_actors_rng_next(&r) % N);
      int rc = lh_actors_outbox_push(ob, ids[j], PAYLOAD, 8, N + round, NULL);
      ck_assert_int_eq(rc, live[j] ? LH_EACTORS_OUTBOX_DUPLICATE : 0);
      if (!live[j]) depth++;
      live[j] = 1;
    }
    ck_assert_uint_eq(lh_actors_outbox_depth(ob), depth);
  }
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), depth * 8);
  /* Everything left is due, each exactly once, then nothing. */
  size_t seen = 0;
  while (due(ob, 1000000)) seen++;
  ck_assert_uint_eq(seen, depth);
  for (int i = 0; i < N; i++) ck_assert_int_eq(lh_actors_outbox_ack(ob, ids[i]), live[i]);
  ck_assert_uint_eq(lh_actors_outbox_depth(ob), 0);
  ck_assert_uint_eq(lh_actors_outbox_bytes(ob), 0);
  ck_assert_uint_eq(due(ob, 2000000), 0);
  lh_actors_outbox_free(ob);
}
END_TEST

START_TEST(test_outbox_errors) {
  lh_errbuf e;
  ck_assert_ptr_null(lh_actors_outbox_new(0, 10, 10, &e));
  ck_assert_int_eq(e.code, LH_EACTORS_OUTBOX_CONFIG);
  ck_assert(strstr(e.msg, "outbox_messages=0"));
  ck_assert_ptr_null(lh_actors_outbox_new(1, 0, 10, &e));
  ck_assert(strstr(e.msg, "outbox_bytes=0"));
  ck_assert_ptr_null(lh_actors_outbox_new(1, 10, 0, &e));
  ck_assert(strstr(e.msg, "resend_timeout_ms=0"));
  ck_assert_int_eq(lh_actors_outbox_push(NULL, 1, PAYLOAD, 1, 0, &e), LH_EINVAL);
  lh_actors_outbox *ob = lh_actors_outbox_new(1, 10, 10, NULL);
  ck_assert_int_eq(lh_actors_outbox_push(ob, 1, NULL, 1, 0, &e), LH_EINVAL);
  lh_actors_outbox_free(ob);
  ck_assert_int_eq(lh_actors_outbox_ack(NULL, 1), 0);
  ck_assert_int_eq(lh_actors_outbox_next_due(NULL, 0, NULL, NULL, NULL), 0);
  ck_assert_uint_eq(lh_actors_outbox_depth(NULL), 0);
  ck_assert(!lh_actors_outbox_has_room(NULL, 0));
  lh_actors_outbox_resend_all(NULL);
  lh_actors_outbox_free(NULL);
}
END_TEST

START_TEST(test_heartbeat_meter) {
  /* Lives here because it is the outbox's companion in the actor's loop:
   * both run on the caller's clock. */
  lh_actors_meter m;
  lh_actors_meter_init(&m, 1000);
  lh_actors_meter_tokens(&m, 300);
  lh_actors_meter_tokens(&m, 200);
  lh_actors_meter_episode_done(&m);
  Longhaul__Heartbeat hb;
  longhaul__heartbeat__init(&hb);
  lh_actors_meter_heartbeat(&m, 3000, 7, 12, 5, 1.5, &hb);
  ck_assert(hb.tokens_per_s == 250.0);
  ck_assert(hb.episodes_per_s == 0.5);
  ck_assert_uint_eq(hb.episodes_done, 1);
  ck_assert_uint_eq(hb.policy_version, 7);
  ck_assert_uint_eq(hb.outbox_depth, 12);
  ck_assert_uint_eq(hb.open_episodes, 5);
  ck_assert(hb.policy_lag == 1.5);
  /* A new window: an empty one reports 0, totals stay. */
  lh_actors_meter_heartbeat(&m, 3000, 7, 0, 0, 0, &hb);
  ck_assert(hb.tokens_per_s == 0.0 && hb.episodes_per_s == 0.0);
  lh_actors_meter_tokens(&m, 10);
  lh_actors_meter_heartbeat(&m, 3100, 8, 0, 0, 0, &hb);
  ck_assert(hb.tokens_per_s == 100.0);
  ck_assert_uint_eq(m.tokens, 510);
  lh_actors_meter_heartbeat(NULL, 0, 0, 0, 0, 0, &hb);
  lh_actors_meter_tokens(NULL, 1);
}
END_TEST

/* Reaching the learner, with an injected clock: no warning before
 * after_ms, then one per repeat_ms, each saying how far the attempts got;
 * a completed handshake is the reach (once), and a disconnection after it
 * starts a new outage that says the learner went away. */
START_TEST(test_reach_warnings) {
  lh_actors_reach r;
  lh_actors_reach_init(&r, "learner", "learner_endpoint", "ipc:///x", 1000);
  ck_assert_int_eq(lh_actors_reach_check(&r, 1299, 300, 5000, NULL), 0);
  ck_assert_int_eq(lh_actors_reach_check(&r, 1300, 300, 5000, NULL), 1);
  ck_assert_int_eq(lh_actors_reach_check(&r, 6299, 300, 5000, NULL), 0);
  ck_assert_int_eq(lh_actors_reach_check(&r, 6300, 300, 5000, NULL), 1);
  ck_assert_int_eq(r.stage, LH_ACTORS_REACH_NOTHING);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_CONNECTED, 6400), 0);
  ck_assert_int_eq(r.stage, LH_ACTORS_REACH_CONNECTED);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, 6500), 0);
  ck_assert_int_eq(r.stage, LH_ACTORS_REACH_FAILED);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_DISCONNECTED, 6600), 0);  /* not reached: no new outage */
  ck_assert_int_eq(r.since_ms, 1000);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_HANDSHAKE_SUCCEEDED, 7000), 1);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_HANDSHAKE_SUCCEEDED, 7001), 0);
  ck_assert(r.reached && r.ever && r.warned_ms == 0);
  ck_assert_int_eq(lh_actors_reach_check(&r, 90000, 300, 5000, NULL), 0);
  ck_assert_int_eq(lh_actors_reach_event(&r, ZMQ_EVENT_DISCONNECTED, 90000), 0);
  ck_assert(!r.reached && r.since_ms == 90000 && r.stage == LH_ACTORS_REACH_NOTHING);
  ck_assert_int_eq(lh_actors_reach_check(&r, 90299, 300, 5000, NULL), 0);
  ck_assert_int_eq(lh_actors_reach_check(&r, 90300, 300, 5000, " unacked=3"), 1);
  ck_assert_uint_eq(r.warnings, 3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_outbox");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_capacity_in_messages);
  tcase_add_test(tc, test_capacity_in_bytes);
  tcase_add_test(tc, test_acks_unknown_and_duplicate);
  tcase_add_test(tc, test_resend_after_timeout_in_order);
  tcase_add_test(tc, test_resend_all_on_reconnect);
  tcase_add_test(tc, test_unsent_due_at_once_in_order);
  tcase_add_test(tc, test_many_colliding_ids_against_reference);
  tcase_add_test(tc, test_outbox_errors);
  tcase_add_test(tc, test_heartbeat_meter);
  tcase_add_test(tc, test_reach_warnings);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

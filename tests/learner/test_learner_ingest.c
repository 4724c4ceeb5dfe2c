/* Tests of learner/ingest.c and ingest_acks.c over real ZeroMQ sockets (a
 * DEALER in this process, as an actor would connect, and one in a forked
 * child) and a real SQLite store: an ack means the message is stored, a
 * duplicate is acked and stored once, garbage is counted and does not
 * stop the ingest, a failing store answers ACK_RETRY, an actor link's
 * burst sent while no learner listened (more than the socket's high-water
 * mark) is all acked once one does, none of it left for the resend
 * timeout. Also the [learner] keys the process needs. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proc_util.h"

static char dir[64];
static char db[128];

static void make_dir(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ingest"), 0);
  snprintf(db, sizeof db, "%s/replay.db", dir);
}

static void remove_dir(void) { lh_proc_rmdir(dir); }

/* A segment of n sampled tokens of episode ep, seq seq. */
typedef struct {
  Longhaul__Envelope env;
  Longhaul__Segment seg;
  Longhaul__EpisodeEnd end;
  uint32_t tokens[16], version[16];
  uint8_t mask[16];
  float logp[16];
} msg;

static void make_segment(msg *m, uint64_t msg_id, uint64_t ep, uint32_t seq, uint32_t n) {
  memset(m, 0, sizeof *m);
  longhaul__envelope__init(&m->env);
  longhaul__segment__init(&m->seg);
  for (uint32_t i = 0; i < n; i++) {
    m->tokens[i] = 'a' + i;
    m->mask[i] = 1;
    m->logp[i] = -1.0f - (float)i;
    m->version[i] = 0;
  }
  m->seg.episode_id = ep;
  m->seg.seq = seq;
  m->seg.actor = "a0";
  m->seg.env = "calc";
  m->seg.start_offset = (uint64_t)seq * n;
  m->seg.n_tokens = n, m->seg.tokens = m->tokens;
  m->seg.loss_mask.len = n, m->seg.loss_mask.data = m->mask;
  m->seg.n_behavior_logp = n, m->seg.behavior_logp = m->logp;
  m->seg.n_policy_version = n, m->seg.policy_version = m->version;
  m->env.protocol = LH_WIRE_PROTOCOL;
  m->env.msg_id = msg_id;
  m->env.sender = "a0";
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT;
  m->env.segment = &m->seg;
}

static void make_end(msg *m, uint64_t msg_id, uint64_t ep, uint32_t segments, uint64_t tokens) {
  memset(m, 0, sizeof *m);
  longhaul__envelope__init(&m->env);
  longhaul__episode_end__init(&m->end);
  m->end.episode_id = ep;
  m->end.actor = "a0";
  m->end.env = "calc";
  m->end.segment_count = segments;
  m->end.total_tokens = tokens;
  m->end.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
  m->end.reward = 1.0f;
  m->env.protocol = LH_WIRE_PROTOCOL;
  m->env.msg_id = msg_id;
  m->env.sender = "a0";
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  m->env.episode_end = &m->end;
}

static void send_msg(void *dealer, const msg *m) {
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&m->env, &buf, &n, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(zmq_send(dealer, buf, n, 0), (int)n);
  free(buf);
}

/* A Hello as name with msg_id id: the ingest takes a name's messages only
 * from the connection that said Hello under it. */
static void send_hello(void *dealer, const char *name, uint64_t id) {
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = (char *)name;
  msg m;
  memset(&m, 0, sizeof m);
  longhaul__envelope__init(&m.env);
  m.env.protocol = LH_WIRE_PROTOCOL, m.env.msg_id = id, m.env.sender = (char *)name;
  m.env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, m.env.hello = &h;
  send_msg(dealer, &m);
}

/* Receives one Ack (waiting up to 10 s); returns its status and ids. */
static int recv_ack(void *dealer, uint64_t *ids, size_t cap, size_t *n) {
  int timeout = 10000;
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  uint8_t buf[65536];
  int got = zmq_recv(dealer, buf, sizeof buf, 0);
  ck_assert_int_gt(got, 0);
  Longhaul__Envelope *env;
  lh_errbuf e;
  ck_assert_msg(lh_wire_decode(buf, (size_t)got, NULL, &env, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_ACK);
  int status = env->ack->status;
  *n = env->ack->n_msg_ids;
  ck_assert_uint_le(*n, cap);
  for (size_t i = 0; i < *n; i++) ids[i] = env->ack->msg_ids[i];
  lh_wire_free(env);
  return status;
}

/* Envelopes the rig's Hello took, left out of pump's counts. */
static uint64_t pump_base;

/* Polls until the ingest has handled `want` envelopes in all (besides the
 * rig's Hello). */
static void pump(lh_learner_ingest *ig, uint64_t want) {
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(ig);
  lh_errbuf e;
  want += pump_base;
  for (int i = 0; i < 2000 && c->received + c->bad_frames < want; i++)
    ck_assert_msg(lh_learner_ingest_poll(ig, 10, NULL, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(c->received + c->bad_frames, want);
}

typedef struct {
  void *ctx, *dealer;
  lh_store *store;
  lh_learner_ingest *ig;
} rig;

static void rig_open(rig *r) {
  make_dir();
  lh_errbuf e;
  ck_assert_msg(lh_store_open(db, &r->store, &e) == 0, "%s", e.msg);
  r->ctx = zmq_ctx_new();
  char ep[160];
  snprintf(ep, sizeof ep, "ipc://%s/ingest", dir);
  r->ig = lh_learner_ingest_new(r->ctx, ep, r->store, NULL, &e);
  ck_assert_msg(r->ig != NULL, "%s", e.msg);
  ck_assert_str_eq(lh_learner_ingest_endpoint(r->ig), ep);
  r->dealer = zmq_socket(r->ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(r->dealer, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(r->dealer, ep), 0);
  /* The dealer is actor a0: its Hello first, acked. */
  pump_base = 0;
  send_hello(r->dealer, "a0", 999999);
  pump(r->ig, 1);
  uint64_t ids[8];
  size_t n;
  ck_assert_int_eq(recv_ack(r->dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_uint_eq(ids[0], 999999);
  pump_base = 1;
}

static void rig_close(rig *r) {
  zmq_close(r->dealer);
  lh_learner_ingest_free(r->ig);
  lh_store_close(r->store);
  zmq_ctx_term(r->ctx);
  remove_dir();
}

START_TEST(test_acked_means_stored) {
  rig r;
  rig_open(&r);
  msg m;
  make_segment(&m, 1, 7, 0, 8);
  send_msg(r.dealer, &m);
  make_segment(&m, 2, 7, 1, 8);
  send_msg(r.dealer, &m);
  make_end(&m, 3, 7, 2, 16);
  send_msg(r.dealer, &m);
  pump(r.ig, 3);
  uint64_t ids[8], seen = 0;
  size_t n;
  while (seen < 3) {
    ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_STORED);
    seen += n;
  }
  /* Acked: a second connection to the file sees it committed. */
  lh_store *other;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &other, &e) == 0, "%s", e.msg);
  lh_episode_row row;
  ck_assert_int_eq(lh_store_episode_get(other, 7, &row, &e), 0);
  ck_assert_int_eq(row.has_end, 1);
  ck_assert_uint_eq(row.segments_received, 2);
  ck_assert_uint_eq(row.tokens_received, 16);
  lh_store_close(other);
  size_t n_touched = 0;
  const uint64_t *touched = lh_learner_ingest_touched(r.ig, &n_touched);
  ck_assert_uint_ge(n_touched, 1);
  for (size_t i = 0; i < n_touched; i++) ck_assert_uint_eq(touched[i], 7);
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(r.ig);
  ck_assert_uint_eq(c->stored, 3);
  ck_assert_uint_eq(c->segments, 2);
  ck_assert_uint_eq(c->episode_ends, 1);
  rig_close(&r);
}
END_TEST

START_TEST(test_duplicates_acked_stored_once) {
  rig r;
  rig_open(&r);
  msg m;
  make_segment(&m, 10, 9, 0, 4);
  send_msg(r.dealer, &m);
  pump(r.ig, 1);
  uint64_t ids[8];
  size_t n;
  ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(ids[0], 10);
  /* The resend after a lost ack, under a new msg_id and the same one. */
  send_msg(r.dealer, &m);
  m.env.msg_id = 11;
  send_msg(r.dealer, &m);
  pump(r.ig, 3);
  size_t seen = 0;
  while (seen < 2) {
    ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_DUPLICATE);
    seen += n;
  }
  lh_episode_row row;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_episode_get(r.store, 9, &row, &e), 0);
  ck_assert_uint_eq(row.segments_received, 1);
  ck_assert_uint_eq(row.tokens_received, 4);
  ck_assert_uint_eq(lh_learner_ingest_get_counts(r.ig)->duplicates, 2);
  rig_close(&r);
}
END_TEST

/* A member of a shared prefix whose leader's segment comes after it (held
 * back and resent): answered ACK_RETRY, stored once the leader's segment
 * that ends where the prefix does is; one naming an episode that never
 * comes is answered ACK_RETRY until abort_after_ms has passed since its
 * first answer, then ACK_REJECTED; neither is stored meanwhile. */
START_TEST(test_member_waits_for_its_leader) {
  rig r;
  rig_open(&r);
  lh_learner_ingest_set_abort_after(r.ig, 200);
  msg m;
  uint64_t ids[8];
  size_t n;
  /* the member (11) first: its prefix is the leader's (10) first 8 tokens */
  make_segment(&m, 1, 11, 0, 8);
  m.seg.start_offset = 8, m.seg.prefix_episode_id = 10, m.seg.prefix_tokens = 8;
  send_msg(r.dealer, &m);
  pump(r.ig, 1);
  ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_uint_eq(lh_learner_ingest_get_counts(r.ig)->held_prefix, 1);
  lh_episode_row row;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_episode_get(r.store, 11, &row, &e), LH_ESTORE_NO_EPISODE);
  /* the leader's segment, then the member's resend */
  msg l;
  make_segment(&l, 2, 10, 0, 8);
  send_msg(r.dealer, &l);
  pump(r.ig, 2);
  ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_STORED);
  m.env.msg_id = 3;
  send_msg(r.dealer, &m);
  pump(r.ig, 3);
  ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(lh_store_episode_get(r.store, 11, &row, &e), 0);
  ck_assert_uint_eq(row.prefix_episode, 10);
  /* a prefix that never comes: retried, then refused once 200 ms passed
   * since the first answer (the test waits for the refusal, not a time) */
  make_segment(&m, 4, 12, 0, 8);
  m.seg.start_offset = 8, m.seg.prefix_episode_id = 999, m.seg.prefix_tokens = 8;
  int status = -1, retried = 0;
  for (uint64_t id = 4; id < 100000 && status != LONGHAUL__ACK_STATUS__ACK_REJECTED; id++) {
    m.env.msg_id = id;
    send_msg(r.dealer, &m);
    pump(r.ig, id);
    status = recv_ack(r.dealer, ids, 8, &n);
    retried += status == LONGHAUL__ACK_STATUS__ACK_RETRY;
  }
  ck_assert_int_eq(status, LONGHAUL__ACK_STATUS__ACK_REJECTED);
  ck_assert_int_ge(retried, 1);
  ck_assert_int_eq(lh_store_episode_get(r.store, 12, &row, &e), LH_ESTORE_NO_EPISODE);
  printf("member before its leader: retried, then stored; a prefix never stored: %d retries, then refused\n",
         retried);
  rig_close(&r);
}
END_TEST

START_TEST(test_garbage_does_not_stop_it) {
  rig r;
  rig_open(&r);
  /* Not protobuf at all: counted, no ack possible. */
  ck_assert_int_eq(zmq_send(r.dealer, "\xff\xff\xff\xff garbage", 12, 0), 12);
  /* Three payload frames: wrong shape. */
  zmq_send(r.dealer, "a", 1, ZMQ_SNDMORE);
  zmq_send(r.dealer, "b", 1, ZMQ_SNDMORE);
  zmq_send(r.dealer, "c", 1, 0);
  /* Parses, but a token id above the vocabulary: rejected by id. */
  msg m;
  make_segment(&m, 21, 5, 0, 4);
  m.tokens[2] = 9999;
  send_msg(r.dealer, &m);
  /* A body the ingest does not take. */
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__Shutdown sd = LONGHAUL__SHUTDOWN__INIT;
  env.protocol = LH_WIRE_PROTOCOL, env.msg_id = 22, env.sender = "a0";
  env.body_case = LONGHAUL__ENVELOPE__BODY_SHUTDOWN, env.shutdown = &sd;
  uint8_t *buf;
  size_t bytes;
  lh_errbuf e;
  ck_assert_int_eq(lh_wire_encode(&env, &buf, &bytes, &e), 0);
  zmq_send(r.dealer, buf, bytes, 0);
  free(buf);
  /* And a good one after all that. */
  make_segment(&m, 23, 5, 0, 4);
  send_msg(r.dealer, &m);
  pump(r.ig, 5);
  uint64_t ids[8];
  size_t n, rejected = 0, stored = 0;
  while (rejected + stored < 3) {
    int st = recv_ack(r.dealer, ids, 8, &n);
    for (size_t i = 0; i < n; i++) {
      if (st == LONGHAUL__ACK_STATUS__ACK_REJECTED) {
        ck_assert(ids[i] == 21 || ids[i] == 22);
        rejected++;
      } else {
        ck_assert_int_eq(st, LONGHAUL__ACK_STATUS__ACK_STORED);
        ck_assert_uint_eq(ids[i], 23);
        stored++;
      }
    }
  }
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(r.ig);
  ck_assert_uint_eq(c->rejected, 3);
  ck_assert_uint_eq(c->bad_frames, 1);
  ck_assert_uint_eq(c->stored, 1);
  rig_close(&r);
}
END_TEST

START_TEST(test_store_failure_answers_retry) {
  rig r;
  rig_open(&r);
  lh_errbuf e;
  /* A batch already open makes the ingest's own begin fail: nothing of the
   * round may be stored or acked as stored. */
  ck_assert_int_eq(lh_store_begin(r.store, &e), 0);
  msg m;
  make_segment(&m, 31, 3, 0, 4);
  send_msg(r.dealer, &m);
  pump(r.ig, 1);
  uint64_t ids[8];
  size_t n;
  ck_assert_int_eq(recv_ack(r.dealer, ids, 8, &n), LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_uint_eq(ids[0], 31);
  lh_episode_row row;
  ck_assert_int_eq(lh_store_episode_get(r.store, 3, &row, &e), LH_ESTORE_NO_EPISODE);
  ck_assert_uint_eq(lh_learner_ingest_get_counts(r.ig)->retried, 1);
  rig_close(&r);
}
END_TEST

/* A real second process: the child is the actor, the parent the learner. */
START_TEST(test_second_process) {
  make_dir();
  char ep[160];
  snprintf(ep, sizeof ep, "ipc://%s/ingest2", dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(d, ep);
    send_hello(d, "a0", 99);
    msg m;
    for (uint32_t s = 0; s < 20; s++) {
      make_segment(&m, 100 + s, 42, s, 4);
      send_msg(d, &m);
    }
    make_end(&m, 200, 42, 20, 80);
    send_msg(d, &m);
    size_t acked = 0, n;
    uint64_t ids[64];
    while (acked < 22) {  /* the Hello, 20 segments, the end */
      if (recv_ack(d, ids, 64, &n) != LONGHAUL__ACK_STATUS__ACK_STORED) _exit(2);
      acked += n;
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
    _exit(0);
  }
  lh_store *store;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(db, &store, &e) == 0, "%s", e.msg);
  void *ctx = zmq_ctx_new();
  lh_learner_ingest *ig = lh_learner_ingest_new(ctx, ep, store, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  lh_learner_ingest_set_round(ig, 4);  /* several rounds */
  int status = -1;
  for (int i = 0; i < 3000; i++) {
    ck_assert_int_eq(lh_learner_ingest_poll(ig, 10, NULL, &e), 0);
    if (waitpid(pid, &status, WNOHANG) == pid) break;
  }
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(store, 42, NULL, NULL, &rep, &e), 0);
  ck_assert_int_eq(rep.complete, 1);
  ck_assert_uint_eq(rep.received, 20);
  ck_assert_uint_ge(lh_learner_ingest_get_counts(ig)->rounds, 6);
  lh_learner_ingest_free(ig);
  lh_store_close(store);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

/* The actor's link (actors/link.c) sends a burst while no learner listens:
 * the socket's pipe takes its high-water mark (1000 messages), the rest
 * would block. Once the ingest binds, everything is acked without any
 * message waiting for resend_timeout_ms (an hour here): a send that would
 * have blocked stays due, first in line. */
START_TEST(test_link_burst_beyond_hwm) {
  enum { N = 2500 };
  make_dir();
  char ep[160];
  snprintf(ep, sizeof ep, "ipc://%s/ingest", dir);
  void *ctx = zmq_ctx_new();
  lh_errbuf e = {0};
  lh_actors_link_config lc = {.name = "a0",
                              .ingest_endpoint = ep,
                              .outbox_messages = 4096,
                              .outbox_bytes = 64u << 20,
                              .resend_timeout_ms = 3600000,
                              .id_salt = 5};
  lh_actors_link *link = NULL;
  ck_assert_msg(lh_actors_link_new(ctx, &lc, &link, &e) == 0, "%s", e.msg);
  msg m;
  for (uint32_t i = 0; i < N; i++) {
    make_segment(&m, 0, 100 + i / 10, i % 10, 8);
    ck_assert_msg(lh_actors_link_send(link, &m.env, &e) == 0, "%s", e.msg);
    if (i % 100 == 0) ck_assert_int_ge(lh_actors_link_poll(link, 0, &e), 0);
  }
  ck_assert_uint_eq(lh_actors_link_unacked(link), N);
  lh_store *store;
  ck_assert_msg(lh_store_open(db, &store, &e) == 0, "%s", e.msg);
  lh_learner_ingest *ig = lh_learner_ingest_new(ctx, ep, store, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  /* Bounded by turns, not time: each turn is a poll of both sides. */
  int turns = 0;
  for (; turns < 20000 && lh_actors_link_unacked(link); turns++) {
    ck_assert_msg(lh_learner_ingest_poll(ig, 1, NULL, &e) == 0, "%s", e.msg);
    ck_assert_int_ge(lh_actors_link_poll(link, 0, &e), 0);
  }
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(ig);
  printf("ingest: link burst of %d: turns=%d acked=%llu resends=%llu stored=%llu duplicates=%llu\n", N, turns,
         (unsigned long long)lh_actors_link_acked(link), (unsigned long long)lh_actors_link_resends(link),
         (unsigned long long)c->stored, (unsigned long long)c->duplicates);
  ck_assert_uint_eq(lh_actors_link_unacked(link), 0);
  ck_assert_uint_eq(lh_actors_link_acked(link), N);
  ck_assert_uint_eq(c->segments, (uint64_t)N);
  ck_assert_uint_eq(c->stored, (uint64_t)N);
  lh_actors_link_free(link);
  lh_learner_ingest_free(ig);
  lh_store_close(store);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

START_TEST(test_bind_error_and_null) {
  lh_errbuf e;
  void *ctx = zmq_ctx_new();
  make_dir();
  lh_store *store;
  ck_assert_int_eq(lh_store_open(db, &store, &e), 0);
  ck_assert_ptr_null(lh_learner_ingest_new(ctx, "tcp://nonsense:xx", store, NULL, &e));
  ck_assert_int_eq(e.code, LH_ELEARNER_INGEST_SOCKET);
  ck_assert(strstr(e.msg, "tcp://nonsense:xx"));
  ck_assert_ptr_null(lh_learner_ingest_new(ctx, "tcp://127.0.0.1:*", NULL, NULL, &e));
  ck_assert_int_eq(e.code, LH_EINVAL);
  /* A wildcard port: the bound one is reported. */
  lh_learner_ingest *ig = lh_learner_ingest_new(ctx, "tcp://127.0.0.1:*", store, NULL, &e);
  ck_assert_ptr_nonnull(ig);
  ck_assert(strncmp(lh_learner_ingest_endpoint(ig), "tcp://127.0.0.1:", 16) == 0);
  ck_assert(strchr(lh_learner_ingest_endpoint(ig), '*') == NULL);
  lh_learner_ingest_free(ig);
  lh_learner_ingest_free(NULL);
  ck_assert_int_eq(lh_learner_ingest_poll(NULL, 0, NULL, &e), LH_EINVAL);
  lh_store_close(store);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

START_TEST(test_config_keys) {
  lh_learner_config c;
  lh_errbuf e;
  lh_learner_config_default(&c);
  ck_assert_str_eq(c.ingest_endpoint, "tcp://127.0.0.1:5555");
  ck_assert_str_eq(c.weights_pub_endpoint, "tcp://127.0.0.1:5556");
  ck_assert_str_eq(c.weights_endpoint, "tcp://127.0.0.1:5557");
  const char *ini =
      "[model]\nd_model = 16\n[learner]\ningest_endpoint = ipc:///tmp/x\nweights_pub_endpoint = "
      "tcp://127.0.0.1:6000\nweights_endpoint = tcp://127.0.0.1:6001\ndb = /tmp/r.db\nckpt_dir = "
      "/tmp/ck\n";
  ck_assert_msg(lh_learner_config_parse(ini, "t.ini", &c, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(c.ingest_endpoint, "ipc:///tmp/x");
  ck_assert_str_eq(c.weights_endpoint, "tcp://127.0.0.1:6001");
  ck_assert_str_eq(c.db, "/tmp/r.db");
  ck_assert_str_eq(c.ckpt_dir, "/tmp/ck");
  ck_assert_int_eq(lh_learner_config_parse("[learner]\ndb =\n", "t.ini", &c, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_msg(strstr(e.msg, "t.ini:2") && strstr(e.msg, "db"), "%s", e.msg);
}
END_TEST

/* Weights: announced on the PUB, served in checksummed chunks on the
 * ROUTER, and a request for another version answered with the current
 * announcement (how a new actor learns the version). */
static Longhaul__Envelope *recv_env(void *sock) {
  int timeout = 10000;
  zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  static uint8_t buf[1 << 17];
  int got = zmq_recv(sock, buf, sizeof buf, 0);
  ck_assert_int_gt(got, 0);
  ck_assert_int_le(got, (int)sizeof buf);
  Longhaul__Envelope *env;
  lh_errbuf e;
  ck_assert_msg(lh_wire_decode(buf, (size_t)got, NULL, &env, &e) == 0, "%s", e.msg);
  return env;
}

static void send_request(void *d, uint64_t version, uint32_t first, uint32_t count) {
  Longhaul__WeightsRequest r = LONGHAUL__WEIGHTS_REQUEST__INIT;
  r.version = version, r.first_chunk = first, r.chunk_count = count;
  msg m;
  memset(&m, 0, sizeof m);
  longhaul__envelope__init(&m.env);
  m.env.protocol = LH_WIRE_PROTOCOL, m.env.msg_id = 1, m.env.sender = "a0";
  m.env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST, m.env.weights_request = &r;
  send_msg(d, &m);
}

/* A publisher on ipc endpoints NAMEpub and NAMErt of the test's folder;
 * rt_ep gets the ROUTER's (room for 160 bytes). */
static lh_learner_publisher *publisher_in_dir(void *ctx, const char *name, uint32_t chunk, char *pub_ep,
                                              char *rt_ep) {
  make_dir();
  snprintf(pub_ep, 160, "ipc://%s/%spub", dir, name);
  snprintf(rt_ep, 160, "ipc://%s/%srt", dir, name);
  lh_errbuf e;
  lh_learner_publisher *p = lh_learner_publisher_new(ctx, pub_ep, rt_ep, chunk, &e);
  ck_assert_msg(p != NULL, "%s", e.msg);
  return p;
}

/* Chunks held for peers count against a cap in all until libzmq lets
 * them go: peers that ask for a whole version and never read stop getting
 * chunks at the cap (before, each pinned 32 chunks, without a bound in
 * all: 100 such peers held 3.2 GB of the learner), and a reader is served
 * again once their queues are dropped. */
START_TEST(test_weights_queued_bytes_capped) {
  void *ctx = zmq_ctx_new();
  char pub_ep[160], rt_ep[160];
  lh_errbuf e;
  enum { CHUNK = 65536, CHUNKS = 64, CAP = 2 << 20 };
  lh_learner_publisher *p = publisher_in_dir(ctx, "q", CHUNK, pub_ep, rt_ep);
  lh_learner_publisher_set_queue_cap(p, CAP);
  static uint8_t bytes[CHUNK * CHUNKS];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 7 + 1);
  ck_assert_int_eq(lh_learner_publisher_set(p, 5, bytes, sizeof bytes, 0, 4096, 0, &e), 0);
  enum { PEERS = 8 };
  void *never[PEERS];
  int linger = 0, one = 1, small = 4096;
  for (int k = 0; k < PEERS; k++) {
    never[k] = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(never[k], ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(never[k], ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt(never[k], ZMQ_RCVBUF, &small, sizeof small);
    ck_assert_int_eq(zmq_connect(never[k], rt_ep), 0);
  }
  const lh_learner_publisher_counts *c = lh_learner_publisher_get_counts(p);
  /* an actor that reads: one request before the flood */
  void *d = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(d, rt_ep), 0);
  send_request(d, 5, 0, 4);
  size_t first_served = 0;
  for (int i = 0; i < 500 && !first_served; i++)
    ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &first_served, &e), 0);
  for (int k = 0; k < 4; k++) lh_wire_free(recv_env(d));
  for (int i = 0; i < 2000 && lh_learner_publisher_queued_bytes(p) > 0; i++)
    ck_assert_int_eq(lh_learner_publisher_poll(p, 5, NULL, &e), 0);
  uint64_t most = 0;
  for (int round = 0; round < 4; round++)
    for (int k = 0; k < PEERS; k++)
      for (uint32_t first = 0; first < CHUNKS; first += 16) {
        send_request(never[k], 5, first, 16);
        size_t served = 0;
        for (int i = 0; i < 500 && !served; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
        uint64_t q = lh_learner_publisher_queued_bytes(p);
        if (q > most) most = q;
        /* at most one chunk and its envelope past twice the cap: a peer
         * whose first chunks went into its socket's kernel buffer holds
         * none of them here and is served as a reader, up to twice it */
        ck_assert_uint_lt(q, 2 * CAP + CHUNK + 256);
      }
  ck_assert_uint_gt(c->requests_held, 0);
  ck_assert_uint_ge(most, CAP);
  printf("queued chunk bytes: at most %llu (cap %d), requests held %llu, chunks sent %llu\n",
         (unsigned long long)most, CAP, (unsigned long long)c->requests_held, (unsigned long long)c->chunks_sent);
  /* the actor that read its first request is served in full meanwhile:
   * past the cap a peer that was sent chunks and holds none still gets
   * its request (up to twice the cap), so the peers that never read
   * cannot lock the readers out */
  for (uint32_t first = 0; first < CHUNKS; first += 16) {
    send_request(d, 5, first, 16);
    size_t served = 0;
    for (int i = 0; i < 500 && !served; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
    ck_assert_uint_lt(lh_learner_publisher_queued_bytes(p), 2 * CAP + CHUNK + 256);
    for (uint32_t k = 0; k < 16; k++) {
      Longhaul__Envelope *env = recv_env(d);
      ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
      ck_assert_uint_eq(env->weights_chunk->offset, (uint64_t)(first + k) * CHUNK);
      lh_wire_free(env);
    }
  }
  /* the never-readers, still holding theirs, get nothing more */
  uint64_t held = c->requests_held;
  send_request(never[0], 5, 0, 16);
  size_t served = 0;
  for (int i = 0; i < 500 && !served; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
  ck_assert_uint_eq(c->requests_held, held + 1);
  for (int k = 0; k < PEERS; k++) zmq_close(never[k]); /* their queued chunks are dropped */
  /* the ROUTER lets a gone peer's queue go when its thread next polls */
  for (int i = 0; i < 2000 && lh_learner_publisher_queued_bytes(p) > 0; i++)
    ck_assert_int_eq(lh_learner_publisher_poll(p, 5, NULL, &e), 0);
  ck_assert_uint_eq(lh_learner_publisher_queued_bytes(p), 0);
  zmq_close(d);
  lh_learner_publisher_free(p); /* chunks libzmq still holds free the count after it */
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

START_TEST(test_weights_published_and_served) {
  void *ctx = zmq_ctx_new();
  char pub_ep[160], rt_ep[160];
  lh_errbuf e;
  lh_learner_publisher *p = publisher_in_dir(ctx, "w", 1000, pub_ep, rt_ep);
  void *sub = zmq_socket(ctx, ZMQ_SUB), *d = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  ck_assert_int_eq(zmq_connect(sub, pub_ep), 0);
  ck_assert_int_eq(zmq_connect(d, rt_ep), 0);
  /* Before any version: a request is ignored, the announce is a no-op. */
  ck_assert_int_eq(lh_learner_publisher_announce(p, &e), 0);
  uint8_t bytes[2500];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 13 + 5);
  ck_assert_int_eq(lh_learner_publisher_set(p, 3, bytes, sizeof bytes, 1, 4096, 0.25f, &e), 0);
  ck_assert_uint_eq(lh_learner_publisher_version(p), 3);
  /* The subscriber may join after the first announcement: announce until
   * it hears one (the loop re-announces periodically for the same reason). */
  int timeout = 50;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  uint8_t buf[4096];
  int got = -1;
  for (int i = 0; i < 200 && got < 0; i++) {
    ck_assert_int_eq(lh_learner_publisher_announce(p, &e), 0);
    got = zmq_recv(sub, buf, sizeof buf, 0);
  }
  ck_assert_int_gt(got, 0);
  Longhaul__Envelope *env;
  ck_assert_int_eq(lh_wire_decode(buf, (size_t)got, NULL, &env, &e), 0);
  ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  ck_assert_uint_eq(env->weights_announce->version, 3);
  ck_assert_uint_eq(env->weights_announce->chunk_count, 3);
  ck_assert_uint_eq(env->weights_announce->max_context, 4096);
  uint64_t sums[3] = {lh_wire_checksum(bytes, 1000), lh_wire_checksum(bytes + 1000, 1000),
                      lh_wire_checksum(bytes + 2000, 500)};
  ck_assert_uint_eq(env->weights_announce->checksum, lh_wire_weights_checksum(sums, 3));
  ck_assert_uint_eq(lh_learner_publisher_checksum(p), env->weights_announce->checksum);
  lh_wire_free(env);
  /* A new actor asks for version 0: it is told the current one. */
  send_request(d, 0, 0, 0);
  size_t served = 0;
  for (int i = 0; i < 500 && !served; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
  env = recv_env(d);
  ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  ck_assert_uint_eq(env->weights_announce->version, 3);
  lh_wire_free(env);
  /* Then fetches every chunk. */
  send_request(d, 3, 0, 0);
  served = 0;
  for (int i = 0; i < 500 && !served; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
  uint8_t back[sizeof bytes];
  size_t total = 0;
  for (int k = 0; k < 3; k++) {
    env = recv_env(d);
    ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK);
    Longhaul__WeightsChunk *c = env->weights_chunk;
    ck_assert_uint_le(c->offset + c->data.len, sizeof back);
    memcpy(back + c->offset, c->data.data, c->data.len);
    total += c->data.len;
    lh_wire_free(env);
  }
  ck_assert_uint_eq(total, sizeof bytes);
  ck_assert_int_eq(memcmp(back, bytes, sizeof bytes), 0);
  const lh_learner_publisher_counts *c = lh_learner_publisher_get_counts(p);
  ck_assert_uint_eq(c->chunks_sent, 3);
  ck_assert_uint_eq(c->redirects, 1);
  /* Garbage on the ROUTER is counted, not fatal. */
  zmq_send(d, "junk", 4, 0);
  for (int i = 0; i < 500 && c->bad_requests == 0; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, NULL, &e), 0);
  ck_assert_uint_eq(c->bad_requests, 1);
  /* A second publisher on the same endpoints cannot bind, and says which key to set. */
  lh_learner_publisher *p2 = lh_learner_publisher_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", 1000, &e);
  ck_assert_ptr_nonnull(p2);
  char taken[LH_LEARNER_TEXT_BYTES];
  snprintf(taken, sizeof taken, "%s", lh_learner_publisher_pub_endpoint(p2));
  ck_assert_ptr_null(lh_learner_publisher_new(ctx, taken, "tcp://127.0.0.1:*", 1000, &e));
  ck_assert_int_eq(e.code, LH_ELEARNER_PUBLISH);
  lh_learner_publisher_free(p2);
  ck_assert(strstr(e.msg, "weights_pub_endpoint"));
  zmq_close(sub);
  zmq_close(d);
  lh_learner_publisher_free(p);
  lh_learner_publisher_free(NULL);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_ingest");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_acked_means_stored);
  tcase_add_test(tc, test_duplicates_acked_stored_once);
  tcase_add_test(tc, test_member_waits_for_its_leader);
  tcase_add_test(tc, test_garbage_does_not_stop_it);
  tcase_add_test(tc, test_store_failure_answers_retry);
  tcase_add_test(tc, test_second_process);
  tcase_add_test(tc, test_link_burst_beyond_hwm);
  tcase_add_test(tc, test_bind_error_and_null);
  tcase_add_test(tc, test_config_keys);
  tcase_add_test(tc, test_weights_published_and_served);
  tcase_add_test(tc, test_weights_queued_bytes_capped);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* A hostile recurrent state at the learner's ingest (learner/ingest.c with
 * the model's limits, learner/validate.c), over a real ZeroMQ DEALER and a
 * real SQLite store: a segment whose state is one float short, or holds a
 * NaN, is refused (ACK_REJECTED) alone; the segments around it in the same
 * round, one with a state of the model's size and one without, are stored,
 * and segments.state_offset says which holds a state. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "learner/internal.h"

#define N 8
#define STATE_FLOATS (2 * 2 * 8 * 8) /* layers x heads x dk x dk of the model below */

typedef struct {
  Longhaul__Envelope env;
  Longhaul__Segment seg;
  uint32_t tokens[N], version[N];
  uint8_t mask[N];
  float logp[N];
  float state[STATE_FLOATS];
} msg;

/* Segment 1 of episode ep (tokens N..2N-1) with a state of n floats at
 * its first token (n = 0: none). */
static void make_segment(msg *m, uint64_t msg_id, uint64_t ep, size_t n) {
  memset(m, 0, sizeof *m);
  longhaul__envelope__init(&m->env);
  longhaul__segment__init(&m->seg);
  for (uint32_t i = 0; i < N; i++) m->tokens[i] = 'a' + i, m->mask[i] = 1, m->logp[i] = -1.0f;
  for (size_t i = 0; i < STATE_FLOATS; i++) m->state[i] = (float)i * 1e-3f;
  m->seg.episode_id = ep, m->seg.seq = 1, m->seg.actor = "a0", m->seg.env = "calc", m->seg.start_offset = N;
  m->seg.n_tokens = N, m->seg.tokens = m->tokens;
  m->seg.loss_mask.len = N, m->seg.loss_mask.data = m->mask;
  m->seg.n_behavior_logp = N, m->seg.behavior_logp = m->logp;
  m->seg.n_policy_version = N, m->seg.policy_version = m->version;
  if (n) m->seg.n_state = n, m->seg.state = m->state, m->seg.state_offset = N;
  m->env.protocol = LH_WIRE_PROTOCOL, m->env.msg_id = msg_id, m->env.sender = "a0";
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, m->env.segment = &m->seg;
}

/* Encodes without validating (lh_wire_encode does not validate), as a
 * hostile peer would send. */
static void send_msg(void *dealer, const msg *m) {
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&m->env, &buf, &n, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(zmq_send(dealer, buf, n, 0), (int)n);
  free(buf);
}

static int first_int(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  *(long *)ctx = ncols > 0 && values[0] ? atol(values[0]) : -1;
  return 0;
}

START_TEST(test_hostile_state_refused_alone) {
  char dir[] = "/tmp/lh_ingest_state_XXXXXX", db[96], ep[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/replay.db", dir);
  snprintf(ep, sizeof ep, "ipc://%s/ingest", dir);
  lh_errbuf e;
  lh_store *store;
  ck_assert_msg(lh_store_open(db, &store, &e) == 0, "%s", e.msg);
  void *ctx = zmq_ctx_new();
  lh_learner_ingest *ig = lh_learner_ingest_new(ctx, ep, store, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  lh_model_config mc;
  lh_model_config_default(&mc);
  mc.d_model = 16, mc.layers = 2, mc.heads = 2, mc.experts = 4, mc.topk = 2;
  lh_learner_config lc;
  lh_learner_config_default(&lc);
  lh_learner_model_limits lim;
  lh_learner_model_limits_init(&lim, &mc, &lc);
  ck_assert_uint_eq(lim.state_floats, STATE_FLOATS);
  lh_learner_ingest_set_model_limits(ig, &lim);
  void *dealer = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(dealer, ep), 0);
  /* Actor a0's Hello first (msg 30): the ingest takes a0's segments only
   * from the connection that said it. */
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "a0";
  static msg hello;
  make_segment(&hello, 30, 0, 0);
  hello.env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, hello.env.hello = &h;
  send_msg(dealer, &hello);
  static msg m[4];
  make_segment(&m[0], 31, 101, STATE_FLOATS);      /* good, with a state */
  make_segment(&m[1], 32, 102, STATE_FLOATS - 1);  /* one float short */
  make_segment(&m[2], 33, 103, STATE_FLOATS);
  m[2].state[5] = NAN;                              /* a NaN */
  make_segment(&m[3], 34, 104, 0);                  /* good, without */
  for (int i = 0; i < 4; i++) send_msg(dealer, &m[i]);
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(ig);
  for (int i = 0; i < 4000 && c->received + c->bad_frames < 5; i++)
    ck_assert_msg(lh_learner_ingest_poll(ig, 10, NULL, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(c->received, 5);
  int timeout = 10000;
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  size_t stored = 0, rejected = 0;
  while (stored + rejected < 4) {
    uint8_t buf[65536];
    int got = zmq_recv(dealer, buf, sizeof buf, 0);
    ck_assert_int_gt(got, 0);
    Longhaul__Envelope *env;
    ck_assert_msg(lh_wire_decode(buf, (size_t)got, NULL, &env, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_ACK);
    for (size_t i = 0; i < env->ack->n_msg_ids; i++) {
      uint64_t id = env->ack->msg_ids[i];
      if (id == 30) {
        ck_assert_int_eq(env->ack->status, LONGHAUL__ACK_STATUS__ACK_STORED);
        continue;
      }
      if (env->ack->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) {
        ck_assert_msg(id == 32 || id == 33, "message %llu rejected", (unsigned long long)id);
        rejected++;
      } else {
        ck_assert_int_eq(env->ack->status, LONGHAUL__ACK_STATUS__ACK_STORED);
        ck_assert_msg(id == 31 || id == 34, "message %llu stored", (unsigned long long)id);
        stored++;
      }
    }
    lh_wire_free(env);
  }
  ck_assert_uint_eq(c->rejected, 2);
  ck_assert_uint_eq(c->stored, 2);
  lh_store *ro;
  ck_assert_msg(lh_store_open_readonly(db, &ro, &e) == 0, "%s", e.msg);
  long v = -1;
  ck_assert_int_eq(lh_store_sql(ro, "SELECT count(*) FROM segments", first_int, &v, NULL, &e), 0);
  ck_assert_int_eq(v, 2);
  ck_assert_int_eq(lh_store_sql(ro, "SELECT state_offset FROM segments WHERE episode = 101", first_int, &v, NULL,
                                &e), 0);
  ck_assert_int_eq(v, N);
  ck_assert_int_eq(lh_store_sql(ro, "SELECT count(*) FROM segments WHERE episode = 104 AND state_offset IS NULL",
                                first_int, &v, NULL, &e), 0);
  ck_assert_int_eq(v, 1);
  lh_store_close(ro);
  zmq_close(dealer);
  lh_learner_ingest_free(ig);
  lh_store_close(store);
  zmq_ctx_term(ctx);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_ingest_state");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_hostile_state_refused_alone);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

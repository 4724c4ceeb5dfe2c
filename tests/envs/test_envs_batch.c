/* Batch frames of env requests (EnvRequestBatch, proto/longhaul.proto)
 * against the C server and the Python one (env_server_fixture.h; the
 * Python cases are skipped without its zmq and protobuf), by a raw
 * DEALER that frames requests itself:
 *   - a batch of N requests gets one frame of N answers, in order, each as
 *     the same request in process would give;
 *   - a batch over the bound (count or bytes) is refused whole with an
 *     error that says so, and runs nothing: the other frame of the same
 *     message is answered, and the sessions go on as if it never came;
 *   - a hostile batch (sessions not ours, a session twice, ids that do not
 *     rise) gets an error for each bad entry and the right answer for each
 *     good one, and another client's session is untouched;
 * and the hub (lh_env_open_hub) plays episodes on a server that takes
 * batches and on one that takes one request a frame (an older server),
 * and ends its wait at once when a server refuses a frame whole. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "env_server_fixture.h"
#include "envs/env.h"
#include "proto/wire.h"

#define N_SESSIONS 8
#define BATCH_MAX 1024             /* envs/internal.h's LH_ENVS_BATCH_MAX */
#define BATCH_MAX_BYTES (4u << 20) /* and LH_ENVS_BATCH_MAX_BYTES */

static void endpoint(char *buf, size_t cap, const char *tag) {
  snprintf(buf, cap, "ipc:///tmp/lh-envs-batch-%d-%s.sock", (int)getpid(), tag);
}

/* A C server with max_batch (0: the default), or the Python server. */
static pid_t start_server(const char *ep, int python, uint32_t max_batch) {
  pid_t pid = python ? lh_envfx_start_python(ep) : lh_envfx_start_c(ep, 0, max_batch);
  ck_assert(pid > 0);
  return pid;
}

static void stop_server(pid_t pid, const char *ep) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  unlink(ep + 6);
}

static int have_python(void) { return system("/usr/bin/python3 -c 'import zmq, google.protobuf' 2>/dev/null") == 0; }

/* ---- a raw client ---- */

static void *raw_client(void *ctx, const char *ep) {
  void *d = zmq_socket(ctx, ZMQ_DEALER);
  ck_assert(d != NULL);
  int linger = 0, timeout = 20000;
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  ck_assert_int_eq(zmq_connect(d, ep), 0);
  return d;
}

/* An Envelope around one request (batch NULL) or a batch, encoded. */
static uint8_t *frame_of(Longhaul__EnvRequest *one, Longhaul__EnvRequest **batch, size_t n, size_t *bytes) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__EnvRequestBatch b = LONGHAUL__ENV_REQUEST_BATCH__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 1;
  env.sender = "test";
  if (one) {
    env.body_case = LONGHAUL__ENVELOPE__BODY_ENV_REQUEST;
    env.env_request = one;
  } else {
    b.requests = batch;
    b.n_requests = n;
    env.body_case = LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH;
    env.env_request_batch = &b;
  }
  uint8_t *buf;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&env, &buf, bytes, &e) == 0, "%s", e.msg);
  return buf;
}

/* Sends a message of the given frames (each freed). */
static void send_frames(void *d, uint8_t **frames, const size_t *bytes, int n) {
  ck_assert_int_eq(zmq_send(d, "", 0, ZMQ_SNDMORE), 0);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(zmq_send(d, frames[i], bytes[i], i + 1 < n ? ZMQ_SNDMORE : 0), (int)bytes[i]);
    free(frames[i]);
  }
}

/* Reads one message of want frames into out[] (lh_wire_free each). */
static void recv_frames(void *d, Longhaul__Envelope **out, int want) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  ck_assert_int_eq(zmq_msg_recv(&m, d, 0), 0); /* the delimiter */
  int more = zmq_msg_more(&m);
  for (int i = 0; i < want; i++) {
    ck_assert(more);
    zmq_msg_close(&m);
    zmq_msg_init(&m);
    ck_assert(zmq_msg_recv(&m, d, 0) >= 0);
    more = zmq_msg_more(&m);
    lh_errbuf e;
    ck_assert_msg(lh_wire_decode(zmq_msg_data(&m), zmq_msg_size(&m), NULL, &out[i], &e) == 0, "%s", e.msg);
  }
  ck_assert(!more);
  zmq_msg_close(&m);
}

/* One request alone, its answer into *got (lh_wire_free it). */
static Longhaul__EnvResponse *round_trip(void *d, Longhaul__EnvRequest *q, Longhaul__Envelope **got) {
  size_t bytes;
  uint8_t *f = frame_of(q, NULL, 0, &bytes);
  send_frames(d, &f, &bytes, 1);
  recv_frames(d, got, 1);
  ck_assert((*got)->body_case == LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  ck_assert_uint_eq((*got)->env_response->request_id, q->request_id);
  return (*got)->env_response;
}

/* What a session's answers are checked against: the environment in
 * process for the C server; for the Python server (whose environments
 * are its own), a twin session on it driven one request a frame. */
typedef struct {
  lh_env *local;
  void *twin; /* the twin's client, or NULL */
  uint64_t twin_rid, twin_session;
} ref;

static uint64_t create(void *d, uint64_t *request_id) {
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT;
  q.request_id = ++*request_id;
  q.op = LONGHAUL__ENV_OP__ENV_OP_CREATE;
  q.env_name = "calc";
  Longhaul__Envelope *got;
  Longhaul__EnvResponse *r = round_trip(d, &q, &got);
  ck_assert_msg(r->status == 0, "%s", r->error);
  ck_assert_uint_eq(r->max_batch, BATCH_MAX);
  ck_assert_uint_eq(r->max_batch_bytes, BATCH_MAX_BYTES);
  uint64_t id = r->session_id;
  lh_wire_free(got);
  return id;
}

/* RESET of session with seed; *got holds the answer (lh_wire_free it). */
static Longhaul__EnvResponse *reset(void *d, uint64_t *request_id, uint64_t session, uint64_t seed,
                                    Longhaul__Envelope **got) {
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT;
  q.request_id = ++*request_id;
  q.op = LONGHAUL__ENV_OP__ENV_OP_RESET;
  q.session_id = session;
  q.seed = seed;
  Longhaul__EnvResponse *r = round_trip(d, &q, got);
  ck_assert_msg(r->status == 0, "%s", r->error);
  return r;
}

/* n calc sessions on d, each reset with seed 10 + its index, and their
 * references (twin: the Python server's twin client, or NULL); the
 * answers to CREATE say the server takes batches. */
static void open_sessions(void *d, uint64_t *request_id, uint64_t *session, ref *refs, int n, void *twin) {
  for (int j = 0; j < n; j++) {
    session[j] = create(d, request_id);
    Longhaul__Envelope *got, *twin_got;
    Longhaul__EnvResponse *r = reset(d, request_id, session[j], 10 + (uint64_t)j, &got);
    memset(&refs[j], 0, sizeof refs[j]);
    if (twin) {
      refs[j].twin = twin;
      refs[j].twin_session = create(twin, &refs[j].twin_rid);
      ck_assert_str_eq(r->observation->text,
                       reset(twin, &refs[j].twin_rid, refs[j].twin_session, 10 + (uint64_t)j, &twin_got)->observation->text);
      lh_wire_free(twin_got);
    } else {
      lh_errbuf e;
      lh_env_obs obs;
      ck_assert_int_eq(lh_env_open("calc", NULL, 0, &refs[j].local, &e), 0);
      ck_assert_int_eq(lh_env_reset(refs[j].local, 10 + (uint64_t)j, &obs, &e), 0);
      ck_assert_str_eq(r->observation->text, obs.text);
    }
    lh_wire_free(got);
  }
}

/* The expert's next action of a reference, as a STEP request for session. */
static void expert_step(ref *rf, Longhaul__EnvRequest *q, uint64_t request_id, uint64_t session, char *action,
                        size_t cap) {
  if (rf->twin) {
    Longhaul__EnvRequest x = LONGHAUL__ENV_REQUEST__INIT;
    x.request_id = ++rf->twin_rid;
    x.op = LONGHAUL__ENV_OP__ENV_OP_EXPERT;
    x.session_id = rf->twin_session;
    Longhaul__Envelope *got;
    Longhaul__EnvResponse *r = round_trip(rf->twin, &x, &got);
    ck_assert_msg(r->status == 0, "%s", r->error);
    snprintf(action, cap, "%s", r->expert_action);
    lh_wire_free(got);
  } else {
    const char *a;
    lh_errbuf e;
    ck_assert_int_eq(lh_env_expert(rf->local, &a, &e), 0);
    snprintf(action, cap, "%s", a);
  }
  *q = (Longhaul__EnvRequest)LONGHAUL__ENV_REQUEST__INIT;
  q->request_id = request_id;
  q->op = LONGHAUL__ENV_OP__ENV_OP_STEP;
  q->session_id = session;
  q->action = action;
}

/* r is what the reference gives for action. */
static void check_same_step(ref *rf, const char *action, const Longhaul__EnvResponse *r) {
  ck_assert_msg(r->status == 0, "%s", r->error);
  if (rf->twin) {
    Longhaul__EnvRequest x = LONGHAUL__ENV_REQUEST__INIT;
    x.request_id = ++rf->twin_rid;
    x.op = LONGHAUL__ENV_OP__ENV_OP_STEP;
    x.session_id = rf->twin_session;
    x.action = (char *)action;
    Longhaul__Envelope *got;
    Longhaul__EnvResponse *t = round_trip(rf->twin, &x, &got);
    ck_assert_msg(t->status == 0, "%s", t->error);
    ck_assert_str_eq(r->observation->text, t->observation->text);
    ck_assert(r->done == t->done && r->reward == t->reward);
    lh_wire_free(got);
    return;
  }
  lh_env_result res;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_step(rf->local, action, strlen(action), &res, &e), 0);
  ck_assert_str_eq(r->observation->text, res.obs.text);
  ck_assert(r->done == res.done && r->reward == res.reward);
}

static void close_refs(ref *refs, int n) {
  for (int j = 0; j < n; j++) lh_env_free(refs[j].local);
}

/* N requests in one batch frame: one answer frame of N responses, in order. */
static void batch_in_order(int python) {
  if (python && !have_python()) return;
  char ep[256];
  endpoint(ep, sizeof ep, python ? "order-py" : "order");
  pid_t pid = start_server(ep, python, 0);
  void *ctx = zmq_ctx_new(), *d = raw_client(ctx, ep);
  uint64_t rid = 0, session[N_SESSIONS];
  ref local[N_SESSIONS];
  void *twin = python ? raw_client(ctx, ep) : NULL;
  open_sessions(d, &rid, session, local, N_SESSIONS, twin);
  for (int round = 0; round < 3; round++) {
    Longhaul__EnvRequest q[N_SESSIONS], *qp[N_SESSIONS];
    char action[N_SESSIONS][256];
    /* every session once, in an order other than their ids' */
    for (int k = 0; k < N_SESSIONS; k++) {
      int j = (k * 3 + round) % N_SESSIONS;
      expert_step(&local[j], &q[k], ++rid, session[j], action[k], sizeof action[k]);
      qp[k] = &q[k];
    }
    size_t bytes;
    uint8_t *f = frame_of(NULL, qp, N_SESSIONS, &bytes);
    send_frames(d, &f, &bytes, 1);
    Longhaul__Envelope *got;
    recv_frames(d, &got, 1);
    ck_assert_int_eq(got->body_case, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH);
    ck_assert_uint_eq(got->env_response_batch->n_responses, N_SESSIONS);
    for (int k = 0; k < N_SESSIONS; k++) {
      const Longhaul__EnvResponse *r = got->env_response_batch->responses[k];
      ck_assert_uint_eq(r->request_id, q[k].request_id);
      ck_assert_uint_eq(r->session_id, q[k].session_id);
      check_same_step(&local[(k * 3 + round) % N_SESSIONS], action[k], r);
    }
    lh_wire_free(got);
  }
  printf("%s: 3 batches of %d steps answered in order, as in process\n", python ? "python" : "c", N_SESSIONS);
  close_refs(local, N_SESSIONS);
  if (twin) zmq_close(twin);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_server(pid, ep);
}

START_TEST(test_batch_in_order) { batch_in_order(0); }
END_TEST

START_TEST(test_batch_in_order_python) { batch_in_order(1); }
END_TEST

/* A refused batch: one EnvResponse for request 0 with the batch error. */
static void check_refused(const Longhaul__Envelope *got, const char *what) {
  ck_assert_int_eq(got->body_case, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  const Longhaul__EnvResponse *r = got->env_response;
  ck_assert_uint_eq(r->request_id, 0);
  ck_assert_int_eq(r->status, LH_EENVS_SERVER_BATCH);
  ck_assert_msg(strstr(r->error, "over the bound") && strstr(r->error, "none run"), "%s", r->error);
  printf("%s refused: %s\n", what, r->error);
}

/* Batches over the bound, by count and by bytes, each in one message with
 * a good request after it: refused whole, nothing of them run, the good
 * one answered, and the sessions then step as if they had never come. */
static void batch_over_bound(int python) {
  if (python && !have_python()) return;
  char ep[256];
  endpoint(ep, sizeof ep, python ? "bound-py" : "bound");
  pid_t pid = start_server(ep, python, 0);
  void *ctx = zmq_ctx_new(), *d = raw_client(ctx, ep);
  uint64_t rid = 0, session[2];
  ref local[2];
  void *twin = python ? raw_client(ctx, ep) : NULL;
  open_sessions(d, &rid, session, local, 2, twin);
  /* by count: BATCH_MAX + 1 steps of session 0 (ids rising) */
  Longhaul__EnvRequest *many = calloc(BATCH_MAX + 1, sizeof *many), **manyp = calloc(BATCH_MAX + 1, sizeof *manyp);
  ck_assert(many && manyp);
  for (int k = 0; k <= BATCH_MAX; k++) {
    many[k] = (Longhaul__EnvRequest)LONGHAUL__ENV_REQUEST__INIT;
    many[k].request_id = ++rid;
    many[k].op = LONGHAUL__ENV_OP__ENV_OP_STEP;
    many[k].session_id = session[0];
    many[k].action = "<call>calc(1+1)</call>";
    manyp[k] = &many[k];
  }
  /* by bytes: three steps of 1.5 MiB actions (4.5 MiB, under the 8 MiB frame limit) */
  size_t big_bytes = 3u << 19;
  char *big = malloc(big_bytes + 1);
  ck_assert(big != NULL);
  memset(big, 'x', big_bytes);
  big[big_bytes] = 0;
  Longhaul__EnvRequest fat[3], *fatp[3];
  for (int k = 0; k < 3; k++) {
    fat[k] = (Longhaul__EnvRequest)LONGHAUL__ENV_REQUEST__INIT;
    fat[k].request_id = ++rid;
    fat[k].op = LONGHAUL__ENV_OP__ENV_OP_STEP;
    fat[k].session_id = session[0];
    fat[k].action = big;
    fatp[k] = &fat[k];
  }
  Longhaul__EnvRequest ok;
  char action[256];
  expert_step(&local[1], &ok, ++rid, session[1], action, sizeof action);
  uint8_t *frames[3];
  size_t bytes[3];
  frames[0] = frame_of(NULL, manyp, BATCH_MAX + 1, &bytes[0]);
  frames[1] = frame_of(NULL, fatp, 3, &bytes[1]);
  ck_assert(bytes[1] > BATCH_MAX_BYTES);
  frames[2] = frame_of(&ok, NULL, 0, &bytes[2]);
  send_frames(d, frames, bytes, 3);
  Longhaul__Envelope *got[3];
  recv_frames(d, got, 3);
  check_refused(got[0], python ? "python, count" : "c, count");
  check_refused(got[1], python ? "python, bytes" : "c, bytes");
  ck_assert_int_eq(got[2]->body_case, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  ck_assert_uint_eq(got[2]->env_response->request_id, ok.request_id);
  check_same_step(&local[1], action, got[2]->env_response);
  for (int i = 0; i < 3; i++) lh_wire_free(got[i]);
  /* nothing of the refused batches ran: both sessions step as in process */
  Longhaul__EnvRequest q[2], *qp[2];
  char acts[2][256];
  for (int j = 0; j < 2; j++) expert_step(&local[j], &q[j], ++rid, session[j], acts[j], sizeof acts[j]), qp[j] = &q[j];
  size_t n;
  uint8_t *f = frame_of(NULL, qp, 2, &n);
  send_frames(d, &f, &n, 1);
  recv_frames(d, got, 1);
  ck_assert_uint_eq(got[0]->env_response_batch->n_responses, 2);
  for (int j = 0; j < 2; j++) check_same_step(&local[j], acts[j], got[0]->env_response_batch->responses[j]);
  lh_wire_free(got[0]);
  free(many);
  free(manyp);
  free(big);
  close_refs(local, 2);
  if (twin) zmq_close(twin);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_server(pid, ep);
}

START_TEST(test_batch_over_bound) { batch_over_bound(0); }
END_TEST

START_TEST(test_batch_over_bound_python) { batch_over_bound(1); }
END_TEST

/* A hostile batch: each bad entry gets its error and runs nothing, each
 * good entry its answer; another client's session is untouched. */
static void batch_hostile(int python) {
  if (python && !have_python()) return;
  char ep[256];
  endpoint(ep, sizeof ep, python ? "hostile-py" : "hostile");
  pid_t pid = start_server(ep, python, 0);
  void *ctx = zmq_ctx_new(), *d = raw_client(ctx, ep), *other = raw_client(ctx, ep);
  uint64_t rid = 0, other_rid = 0, session[3], other_session[1];
  ref local[3], other_local[1];
  void *twin = python ? raw_client(ctx, ep) : NULL;
  open_sessions(d, &rid, session, local, 3, twin);
  open_sessions(other, &other_rid, other_session, other_local, 1, twin);
  enum { N = 7 };
  Longhaul__EnvRequest q[N], *qp[N];
  char action[N][256];
  expert_step(&local[0], &q[0], rid + 10, session[0], action[0], sizeof action[0]);        /* good */
  expert_step(&local[1], &q[1], rid + 11, 999999, action[1], sizeof action[1]);            /* no such session */
  expert_step(&local[0], &q[2], rid + 12, session[0], action[2], sizeof action[2]);        /* session 0 again */
  expert_step(&local[1], &q[3], rid + 5, session[1], action[3], sizeof action[3]);         /* id not rising */
  expert_step(&local[1], &q[4], rid + 12, session[1], action[4], sizeof action[4]);        /* id repeated */
  expert_step(&local[2], &q[5], rid + 13, session[2], action[5], sizeof action[5]);        /* good */
  expert_step(&other_local[0], &q[6], rid + 14, other_session[0], action[6], sizeof action[6]); /* another's */
  for (int k = 0; k < N; k++) qp[k] = &q[k];
  size_t bytes;
  uint8_t *f = frame_of(NULL, qp, N, &bytes);
  send_frames(d, &f, &bytes, 1);
  Longhaul__Envelope *got;
  recv_frames(d, &got, 1);
  ck_assert_int_eq(got->body_case, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH);
  ck_assert_uint_eq(got->env_response_batch->n_responses, N);
  Longhaul__EnvResponse **r = got->env_response_batch->responses;
  for (int k = 0; k < N; k++) ck_assert_uint_eq(r[k]->request_id, q[k].request_id);
  check_same_step(&local[0], action[0], r[0]);
  ck_assert_int_eq(r[1]->status, LH_ENOENT);
  ck_assert_int_eq(r[2]->status, LH_EENVS_SERVER_BATCH);
  ck_assert_msg(strstr(r[2]->error, "named twice"), "%s", r[2]->error);
  ck_assert_int_eq(r[3]->status, LH_EENVS_SERVER_BATCH);
  ck_assert_msg(strstr(r[3]->error, "not above"), "%s", r[3]->error);
  ck_assert_int_eq(r[4]->status, LH_EENVS_SERVER_BATCH);
  check_same_step(&local[2], action[5], r[5]);
  ck_assert_int_eq(r[6]->status, LH_ENOENT);
  for (int k = 1; k < 5; k++) printf("%s: entry %d refused: %s\n", python ? "python" : "c", k, r[k]->error);
  lh_wire_free(got);
  /* session 1 ran nothing: its next step (above every id so far) is its first */
  rid += 20;
  Longhaul__EnvRequest next;
  char a[256];
  expert_step(&local[1], &next, ++rid, session[1], a, sizeof a);
  Longhaul__Envelope *one;
  check_same_step(&local[1], a, round_trip(d, &next, &one));
  lh_wire_free(one);
  /* and the other client's session steps as in process */
  expert_step(&other_local[0], &next, ++other_rid, other_session[0], a, sizeof a);
  check_same_step(&other_local[0], a, round_trip(other, &next, &one));
  lh_wire_free(one);
  close_refs(local, 3);
  close_refs(other_local, 1);
  if (twin) zmq_close(twin);
  zmq_close(d);
  zmq_close(other);
  zmq_ctx_term(ctx);
  stop_server(pid, ep);
}

START_TEST(test_batch_hostile) { batch_hostile(0); }
END_TEST

START_TEST(test_batch_hostile_python) { batch_hostile(1); }
END_TEST

/* The hub plays B calc episodes with every step begun before any ends, on
 * a server that takes batches and on one that takes one request a frame
 * (its answers carry no max_batch, and a batch sent to it anyway is
 * refused): the same episodes as in process either way. */
static void hub_episodes(const char *ep, int B) {
  lh_env_hub *hub;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_hub_new(NULL, &hub, &e), 0);
  lh_env *remote[16], *local[16];
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "10000"}};
  int done[16] = {0}, left = B;
  for (int j = 0; j < B; j++) {
    ck_assert_msg(lh_env_open_hub(hub, "calc", opts, 2, &remote[j], &e) == 0, "%s", e.msg);
    ck_assert_int_eq(lh_env_open("calc", NULL, 0, &local[j], &e), 0);
    ck_assert_int_eq(lh_env_reset_begin(remote[j], 50 + (uint64_t)j, &e), 0);
  }
  for (int j = 0; j < B; j++) {
    lh_env_obs ro, lo;
    ck_assert_msg(lh_env_reset_end(remote[j], &ro, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(lh_env_reset(local[j], 50 + (uint64_t)j, &lo, &e), 0);
    ck_assert_str_eq(ro.text, lo.text);
  }
  while (left > 0) {
    char action[16][256];
    for (int j = 0; j < B; j++) {
      if (done[j]) continue;
      const char *a;
      ck_assert_int_eq(lh_env_expert(local[j], &a, &e), 0);
      snprintf(action[j], sizeof action[j], "%s", a);
      ck_assert_int_eq(lh_env_step_begin(remote[j], action[j], strlen(action[j]), &e), 0);
    }
    ck_assert_int_eq(lh_env_hub_flush(hub, &e), 0);
    for (int j = 0; j < B; j++) {
      if (done[j]) continue;
      lh_env_result rr, lr;
      ck_assert_msg(lh_env_step_end(remote[j], &rr, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(lh_env_step(local[j], action[j], strlen(action[j]), &lr, &e), 0);
      ck_assert_str_eq(rr.obs.text, lr.obs.text);
      ck_assert(rr.done == lr.done && rr.reward == lr.reward);
      if (rr.done) done[j] = 1, left--;
    }
  }
  for (int j = 0; j < B; j++) {
    lh_env_free(remote[j]);
    lh_env_free(local[j]);
  }
  lh_env_hub_free(hub);
}

START_TEST(test_hub_old_and_new_server) {
  char ep[256];
  endpoint(ep, sizeof ep, "hub-new");
  pid_t pid = start_server(ep, 0, 0);
  hub_episodes(ep, 16);
  stop_server(pid, ep);
  endpoint(ep, sizeof ep, "hub-old");
  pid = start_server(ep, 0, 1);
  hub_episodes(ep, 16);
  /* the older kind of server says nothing of batches, and refuses one */
  void *ctx = zmq_ctx_new(), *d = raw_client(ctx, ep);
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT, *qp = &q;
  q.request_id = 1;
  q.op = LONGHAUL__ENV_OP__ENV_OP_CREATE;
  q.env_name = "calc";
  Longhaul__Envelope *got;
  Longhaul__EnvResponse *r = round_trip(d, &q, &got);
  ck_assert_int_eq(r->status, 0);
  ck_assert_uint_eq(r->max_batch, 0);
  lh_wire_free(got);
  q.request_id = 2;
  size_t bytes;
  uint8_t *f = frame_of(NULL, &qp, 1, &bytes);
  send_frames(d, &f, &bytes, 1);
  recv_frames(d, &got, 1);
  ck_assert_int_eq(got->env_response->status, LH_EENVS_SERVER_BATCH);
  ck_assert_msg(strstr(got->env_response->error, "one request a frame"), "%s", got->env_response->error);
  lh_wire_free(got);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_server(pid, ep);
}
END_TEST

/* A server that refuses every frame whole (an error for request 0): the
 * hub's wait ends at once with the server's message, not at the timeout. */
START_TEST(test_hub_frame_refused) {
  char ep[256];
  endpoint(ep, sizeof ep, "refuser");
  /* Forked without exec: this test process holds no ZeroMQ context (and so
   * no other thread) yet, so the child may do anything. */
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    void *ctx = zmq_ctx_new(), *r = zmq_socket(ctx, ZMQ_ROUTER);
    if (zmq_bind(r, ep) != 0) _exit(3);
    Longhaul__EnvResponse resp = LONGHAUL__ENV_RESPONSE__INIT;
    resp.status = LH_EENVS_SERVER_BATCH;
    resp.error = "refused whole for the test";
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.protocol = LH_WIRE_PROTOCOL;
    env.sender = "refuser";
    env.body_case = LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE;
    env.env_response = &resp;
    uint8_t *buf;
    size_t bytes;
    lh_errbuf e;
    if (lh_wire_encode(&env, &buf, &bytes, &e) < 0) _exit(3);
    for (;;) {
      zmq_msg_t peer, part;
      zmq_msg_init(&peer);
      if (zmq_msg_recv(&peer, r, 0) < 0) _exit(0);
      for (int more = zmq_msg_more(&peer); more;) { /* the rest of the message */
        zmq_msg_init(&part);
        zmq_msg_recv(&part, r, 0);
        more = zmq_msg_more(&part);
        zmq_msg_close(&part);
      }
      zmq_msg_send(&peer, r, ZMQ_SNDMORE);
      zmq_send(r, "", 0, ZMQ_SNDMORE);
      zmq_send(r, buf, bytes, 0);
    }
  }
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "600000"}};
  lh_env *env = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("calc", opts, 2, &env, &e), LH_EENVS_SERVER_PROTOCOL);
  ck_assert_msg(strstr(e.msg, "refused a frame") && strstr(e.msg, "refused whole for the test"), "%s", e.msg);
  printf("hub: %s\n", e.msg);
  stop_server(pid, ep);
}
END_TEST

int main(int argc, char **argv) {
  int served = lh_envfx_serve_main(argc, argv); /* a server this suite started */
  if (served >= 0) return served;
  Suite *su = suite_create("envs_batch");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_batch_in_order);
  tcase_add_test(tc, test_batch_in_order_python);
  tcase_add_test(tc, test_batch_over_bound);
  tcase_add_test(tc, test_batch_over_bound_python);
  tcase_add_test(tc, test_batch_hostile);
  tcase_add_test(tc, test_batch_hostile_python);
  tcase_add_test(tc, test_hub_old_and_new_server);
  tcase_add_test(tc, test_hub_frame_refused);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK);
}

/* Bad input on every open port, each over real sockets
 * to a real process: the learner's ingest ROUTER and weights ROUTER
 * (`longhaul learner`), the C env server (`longhaul envs serve`) and the
 * Python one (envs/python/env_server.py). Each gets transport garbage
 * (bytes that are not ZMTP, on the ipc socket's file), a frame that does
 * not decode, a message of too many frames, a frame over its
 * ZMQ_MAXMSGSIZE and a replayed message; after each the process still
 * answers a good request, and at the end it has counted and logged the
 * bad ones (once per interval) and exits on SIGTERM. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "learner/learner.h"
#include "proto/wire.h"
#include "proc_util.h"

#define SEG 6

static char dir[64];
static void *ctx;

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static void *dealer(const char *name) {
  char ep[128];
  snprintf(ep, sizeof ep, "ipc://%s/%s", dir, name);
  void *s = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(s, ep), 0);
  return s;
}

/* Bytes that are not ZMTP written straight to the ipc socket's file. */
static void raw_garbage(const char *name) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  uint8_t junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 131 + 7);
  ssize_t w = write(fd, junk, sizeof junk);
  (void)w;
  usleep(100000);
  close(fd);
}

static uint8_t *encode(Longhaul__Envelope *env, uint64_t msg_id, size_t *n) {
  env->protocol = LH_WIRE_PROTOCOL;
  env->msg_id = msg_id;
  env->sender = "ports";
  uint8_t *buf;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(env, &buf, n, &e) == 0, "%s", e.msg);
  return buf;
}

/* The next message's last frame decoded, or NULL after timeout_ms. */
static Longhaul__Envelope *recv_env(void *s, int timeout_ms) {
  zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, timeout_ms) <= 0) return NULL;
  Longhaul__Envelope *env = NULL;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    ck_assert_int_ge(zmq_msg_recv(&m, s, 0), 0);
    more = zmq_msg_more(&m);
    if (!more && zmq_msg_size(&m) > 0) {
      lh_errbuf e;
      ck_assert_msg(lh_wire_decode(zmq_msg_data(&m), zmq_msg_size(&m), NULL, &env, &e) == 0, "%s", e.msg);
    }
    zmq_msg_close(&m);
  }
  return env;
}

/* ---- the learner's ingest and weights ROUTERs ------------------------- */

static void write_learner_config(void) {
  char path[128], text[2048];
  path_of(path, sizeof path, "run.ini");
  snprintf(text, sizeof text,
           "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
           "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
           "[learner]\nbatch_episodes = 2\ngroup_size = 2\ntrain_window = 5\nckpt_every = 50\n"
           "warmup_steps = 0\ntotal_steps = 100\n"
           "ingest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\nweights_endpoint = ipc://%s/w\n"
           "db = %s/replay.db\nckpt_dir = %s/ckpt\n[actor]\ntemperature = 1.0\n",
           dir, dir, dir, dir, dir);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
}

/* A fresh folder and ZeroMQ context, and `longhaul learner` on them once
 * it has bound its sockets; log gets its log file's path. */
static pid_t start_learner(char *log, size_t cap) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ports"), 0);
  ctx = zmq_ctx_new();
  write_learner_config();
  char ini[128];
  path_of(ini, sizeof ini, "run.ini");
  path_of(log, cap, "learner.log");
  const char *args[] = {"learner", "--config", ini, "--steps", "100", NULL};
  pid_t lp = lh_proc_spawn_longhaul(log, args);
  ck_assert_int_gt(lp, 0);
  ck_assert_msg(lh_proc_wait_file(log, "bound pub=", 60), "the learner did not bind (see %s)", log);
  return lp;
}

/* A Hello with msg_id id is acked as stored: the ingest still serves. */
static int hello_acked(void *d, uint64_t id) {
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor";
  h.name = "ports";
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  size_t n;
  uint8_t *buf = encode(&env, id, &n);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
  for (int tries = 0; tries < 10; tries++) {
    Longhaul__Envelope *a = recv_env(d, 1000);
    if (!a) continue;
    int ok = a->body_case == LONGHAUL__ENVELOPE__BODY_ACK && a->ack->n_msg_ids == 1 && a->ack->msg_ids[0] == id &&
             a->ack->status == LONGHAUL__ACK_STATUS__ACK_STORED;
    lh_wire_free(a);
    if (ok) return 1;
  }
  return 0;
}

/* One segment of episode 7, msg_id id; the ack's status, -1 for none. */
static int send_segment(void *d, uint64_t id) {
  uint32_t tok[SEG] = {40, 41, 42, 43, 44, 45}, ver[SEG] = {0};
  uint8_t mask[SEG] = {0, 0, 1, 1, 1, 1};
  float logp[SEG] = {0, 0, -5, -5, -5, -5};
  Longhaul__Segment s = LONGHAUL__SEGMENT__INIT;
  s.episode_id = 7, s.seq = 0, s.actor = "ports", s.env = "calc", s.start_offset = 0;
  s.group_id = 1, s.task_seed = 1;
  s.n_tokens = SEG, s.tokens = tok;
  s.loss_mask.len = SEG, s.loss_mask.data = mask;
  s.n_behavior_logp = SEG, s.behavior_logp = logp;
  s.n_policy_version = SEG, s.policy_version = ver;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &s;
  size_t n;
  uint8_t *buf = encode(&env, id, &n);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
  Longhaul__Envelope *a = recv_env(d, 5000);
  int status = a && a->body_case == LONGHAUL__ENVELOPE__BODY_ACK ? (int)a->ack->status : -1;
  lh_wire_free(a);
  return status;
}

static void send_big(void *d, size_t bytes) {
  uint8_t *big = calloc(1, bytes);
  ck_assert_ptr_nonnull(big);
  ck_assert_int_eq(zmq_send(d, big, bytes, 0), (int)bytes);
  free(big);
}

START_TEST(test_learner_ingest_port) {
  char log[128];
  pid_t lp = start_learner(log, sizeof log);
  void *d = dealer("ing");
  ck_assert(hello_acked(d, 1));
  raw_garbage("ing");
  ck_assert_msg(hello_acked(d, 2), "no ack after transport garbage");
  ck_assert_int_eq(zmq_send(d, "\xff\x01garbage that is no envelope", 29, 0), 29);
  ck_assert_msg(hello_acked(d, 3), "no ack after an undecodable frame");
  for (int i = 0; i < 5; i++) zmq_send(d, "x", 1, i < 4 ? ZMQ_SNDMORE : 0);
  ck_assert_msg(hello_acked(d, 4), "no ack after a message of too many frames");
  void *big = dealer("ing");
  send_big(big, LH_WIRE_DEFAULT_MAX_MESSAGE_BYTES + 1);
  usleep(200000);
  zmq_close(big);
  ck_assert_msg(hello_acked(d, 5), "no ack after an oversized frame");
  /* Replayed: the same segment twice is stored once. */
  int first = send_segment(d, 100), again = send_segment(d, 100);
  ck_assert_int_eq(first, LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(again, LONGHAUL__ACK_STATUS__ACK_DUPLICATE);
  ck_assert_msg(hello_acked(d, 6), "no ack after a replay");
  zmq_close(d);
  kill(lp, SIGTERM);
  int rc = lh_proc_wait(lp, 10, NULL);
  long long rejected = lh_proc_log_value(log, "rejected"), duplicates = lh_proc_log_value(log, "duplicates");
  printf("ingest port: learner exit=%d rejected=%lld duplicates=%lld bad lines logged=%d\n", rc, rejected, duplicates,
         lh_proc_file_has(log, "ingest: bad message"));
  ck_assert_int_eq(rc, 0);
  ck_assert_int_ge(rejected, 1);
  ck_assert_int_ge(duplicates, 1);
  ck_assert(lh_proc_file_has(log, "ingest: bad message"));
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

/* A weights request for a version that is not there: the learner answers
 * with its announcement (a redirect). 1 when that answer came. */
static int weights_answer(void *d, uint64_t id) {
  Longhaul__WeightsRequest r = LONGHAUL__WEIGHTS_REQUEST__INIT;
  r.version = 999999, r.first_chunk = 0, r.chunk_count = 1;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST, env.weights_request = &r;
  size_t n;
  uint8_t *buf = encode(&env, id, &n);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
  Longhaul__Envelope *a = recv_env(d, 5000);
  int ok = a && a->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
  lh_wire_free(a);
  return ok;
}

START_TEST(test_learner_weights_port) {
  char log[128];
  pid_t lp = start_learner(log, sizeof log);
  void *d = dealer("w");
  ck_assert(weights_answer(d, 1));
  raw_garbage("w");
  ck_assert_msg(weights_answer(d, 2), "no answer after transport garbage");
  zmq_send(d, "garbage", 7, 0);
  ck_assert_msg(weights_answer(d, 3), "no answer after an undecodable request");
  for (int i = 0; i < 4; i++) zmq_send(d, "x", 1, i < 3 ? ZMQ_SNDMORE : 0);
  ck_assert_msg(weights_answer(d, 4), "no answer after a message of too many frames");
  void *big = dealer("w");
  send_big(big, (2u << 20));
  usleep(200000);
  zmq_close(big);
  ck_assert_msg(weights_answer(d, 5), "no answer after an oversized request");
  /* Replayed: a request read twice is served twice (it changes nothing). */
  ck_assert(weights_answer(d, 6));
  ck_assert(weights_answer(d, 6));
  zmq_close(d);
  kill(lp, SIGTERM);
  int rc = lh_proc_wait(lp, 10, NULL);
  printf("weights port: learner exit=%d bad lines logged=%d\n", rc, lh_proc_file_has(log, "weights: bad message"));
  ck_assert_int_eq(rc, 0);
  ck_assert(lh_proc_file_has(log, "weights: bad message"));
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

/* ---- env servers --------------------------------------------------------- */

/* One request (empty delimiter, then the Envelope), its answer's status;
 * *session gets the session id. -1000 when nothing came back. */
static int env_call(void *d, Longhaul__EnvRequest *q, uint64_t *session) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_ENV_REQUEST, env.env_request = q;
  size_t n;
  uint8_t *buf = encode(&env, q->request_id, &n);
  zmq_send(d, "", 0, ZMQ_SNDMORE);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
  Longhaul__Envelope *a = recv_env(d, 5000);
  if (!a) return -1000;
  ck_assert_int_eq(a->body_case, LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE);
  int status = a->env_response->status;
  if (session) *session = a->env_response->session_id;
  lh_wire_free(a);
  return status;
}

static int env_create(void *d, uint64_t id, const char *name, uint64_t *session) {
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT;
  q.op = LONGHAUL__ENV_OP__ENV_OP_CREATE, q.request_id = id, q.env_name = (char *)name;
  return env_call(d, &q, session);
}

static int env_reset(void *d, uint64_t id, uint64_t session) {
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT;
  q.op = LONGHAUL__ENV_OP__ENV_OP_RESET, q.request_id = id, q.session_id = session, q.seed = 5;
  return env_call(d, &q, NULL);
}

/* The same bad input for either server; env is its environment's name. */
static void env_server_port(pid_t pid, const char *log, const char *env, const char *bad_line) {
  char sock[128];
  path_of(sock, sizeof sock, "env");
  ck_assert_msg(lh_proc_wait_file(log, "listening", 30), "the env server did not start (see %s)", log);
  void *d = dealer("env");
  uint64_t session = 0;
  ck_assert_int_eq(env_create(d, 1, env, &session), 0);
  ck_assert_int_eq(env_reset(d, 2, session), 0);
  raw_garbage("env");
  ck_assert_msg(env_reset(d, 3, session) == 0, "no answer after transport garbage");
  /* An undecodable frame is answered with an error. */
  zmq_send(d, "", 0, ZMQ_SNDMORE);
  zmq_send(d, "\xff\xfe not an envelope", 18, 0);
  Longhaul__Envelope *a = recv_env(d, 5000);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_ne(a->env_response->status, 0);
  lh_wire_free(a);
  ck_assert_int_eq(env_reset(d, 4, session), 0);
  /* 1025 requests in one message: dropped whole, one error back. */
  zmq_send(d, "", 0, ZMQ_SNDMORE);
  for (int i = 0; i < 1025; i++) zmq_send(d, "x", 1, i < 1024 ? ZMQ_SNDMORE : 0);
  a = recv_env(d, 5000);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(a->env_response->status, LH_EENVS_SERVER_PROTOCOL);
  lh_wire_free(a);
  ck_assert_int_eq(env_reset(d, 5, session), 0);
  /* A frame over 8 MiB: its sender is cut off; the others go on. */
  void *big = dealer("env");
  zmq_send(big, "", 0, ZMQ_SNDMORE);
  send_big(big, (8u << 20) + 1);
  usleep(200000);
  zmq_close(big);
  ck_assert_msg(env_reset(d, 6, session) == 0, "no answer after an oversized frame");
  /* A replayed request id is refused; the next one is served. */
  int replay = env_reset(d, 6, session);
  ck_assert_int_eq(replay, LH_EENVS_SERVER_REPLAY);
  ck_assert_int_eq(env_reset(d, 7, session), 0);
  /* A remote peer cannot make the server load a plugin. */
  Longhaul__KeyValue kv = LONGHAUL__KEY_VALUE__INIT, *kvp = &kv;
  kv.key = "plugin", kv.value = "/tmp/libevil.so";
  Longhaul__EnvRequest q = LONGHAUL__ENV_REQUEST__INIT;
  q.op = LONGHAUL__ENV_OP__ENV_OP_CREATE, q.request_id = 8, q.env_name = (char *)env;
  q.n_options = 1, q.options = &kvp;
  ck_assert_int_ne(env_call(d, &q, NULL), 0);
  zmq_close(d);
  kill(pid, SIGTERM);
  int rc = lh_proc_wait(pid, 10, NULL);
  printf("env server %s: exit=%d replay status=%d bad lines logged=%d\n", env, rc, replay,
         lh_proc_file_has(log, bad_line));
  ck_assert_msg(rc >= 0, "the env server did not stop within 10 s of SIGTERM");
  ck_assert(lh_proc_file_has(log, bad_line));
}

START_TEST(test_c_env_server_port) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ports"), 0);
  ctx = zmq_ctx_new();
  char ep[128], log[128];
  snprintf(ep, sizeof ep, "ipc://%s/env", dir);
  path_of(log, sizeof log, "env.log");
  const char *args[] = {"envs", "serve", "--bind", ep, NULL};
  pid_t p = lh_proc_spawn_longhaul(log, args);
  env_server_port(p, log, "calc", "envs: bad message");
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_python_env_server_port) {
  if (!lh_proc_have_python_envs()) {
    printf("python env server: /usr/bin/python3 with zmq and protobuf not found; skipped\n");
    return;
  }
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ports"), 0);
  ctx = zmq_ctx_new();
  char ep[128], log[128], script[512];
  snprintf(ep, sizeof ep, "ipc://%s/env", dir);
  path_of(log, sizeof log, "env.log");
  snprintf(script, sizeof script, "%s/envs/python/env_server.py", LH_TEST_SOURCE_DIR);
  const char *argv[] = {"/usr/bin/python3", script, "--bind", ep, "--proto-dir", LH_TEST_PY_PROTO_DIR, NULL};
  pid_t p = lh_proc_spawn(log, argv);
  ck_assert_int_gt(p, 0);
  env_server_port(p, log, "guess", "envs-py: bad message");
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ports");
  TCase *t = tcase_create("bad_input");
  tcase_set_timeout(t, 180);
  tcase_add_test(t, test_learner_ingest_port);
  tcase_add_test(t, test_learner_weights_port);
  tcase_add_test(t, test_c_env_server_port);
  tcase_add_test(t, test_python_env_server_port);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return lh_test_run(suite(), CK_FORK);
}

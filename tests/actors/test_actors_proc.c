/* Tests of the actor process (`longhaul actor`, from LH_BIN) against a real
 * peer: the test binds the learner's ROUTER itself (and, for weights, a
 * PUB and a ROUTER serving lh_learner_weights chunks), decodes every
 * message with lh_wire_decode and acks it. Checked: segments and
 * EpisodeEnds arrive valid and reassemble, unacked messages come again
 * with their msg_id, new weights are swapped in mid-episode (later tokens
 * carry the new version), SIGTERM ends the process cleanly (exit 0,
 * open episodes aborted), and an actor whose learner is not there, or
 * answers no handshake, or goes away, says so within resend_timeout_ms
 * and says when it reaches it. A tiny checkpoint (d 16) made with
 * lh_model_save; ipc:// endpoints in a temporary folder. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "actors/actors.h"
#include "learner/internal.h"
#include "proc_util.h"
#include "proto/wire.h"

typedef struct {
  char dir[64];
  char ingest[128], pub[128], wrouter[128];
  char config[128], ckpt[128];
  void *ctx, *router, *pubsock, *wsock;
  pid_t pid;
} fixture;

static lh_model *tiny_model(uint64_t seed) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 8, c.seed = seed;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  return m;
}

static void *bind_socket(fixture *f, int type, const char *ep) {
  void *s = zmq_socket(f->ctx, type);
  ck_assert_ptr_nonnull(s);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_msg(zmq_bind(s, ep) == 0, "bind %s: %s", ep, zmq_strerror(zmq_errno()));
  return s;
}

/* Writes the checkpoint and the config; binds the sockets; weights adds
 * the two weights sockets (otherwise weights_pub_endpoint is none). */
static void setup(fixture *f, int weights, const char *limits, const char *extra_actor) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/lh-actors-proc-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(f->dir));
  snprintf(f->ingest, sizeof f->ingest, "ipc://%s/ingest", f->dir);
  snprintf(f->pub, sizeof f->pub, "ipc://%s/pub", f->dir);
  snprintf(f->wrouter, sizeof f->wrouter, "ipc://%s/weights", f->dir);
  snprintf(f->ckpt, sizeof f->ckpt, "%s/ckpt", f->dir);
  snprintf(f->config, sizeof f->config, "%s/fleet.ini", f->dir);
  lh_model *m = tiny_model(5);
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_save(m, f->ckpt, &err) == 0, "%s", err.msg);
  lh_model_free(m);
  FILE *out = fopen(f->config, "w");
  ck_assert_ptr_nonnull(out);
  fprintf(out,
          "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
          "latent = 8\nexpert_hidden = 8\nchunk = 4\npatch = 2\nmax_patches = 8\n"
          "[learner]\n[actor]\nbatch = 2\ngroup_size = 2\nsegment_tokens = 32\n%s"
          "learner_endpoint = %s\nweights_pub_endpoint = %s\nweights_endpoint = %s\n"
          "heartbeat_ms = 100\nflush_timeout_ms = 3000\nseed = 3\n%s"
          "[env]\nname = calc\nstages = 1\n",
          limits ? limits : "max_context = 400\nmax_steps = 3\nresend_timeout_ms = 300\n", f->ingest, weights ? f->pub : "none", f->wrouter,
          extra_actor ? extra_actor : "");
  fclose(out);
  f->ctx = zmq_ctx_new();
  f->router = bind_socket(f, ZMQ_ROUTER, f->ingest);
  if (weights) {
    f->pubsock = bind_socket(f, ZMQ_PUB, f->pub);
    f->wsock = bind_socket(f, ZMQ_ROUTER, f->wrouter);
  }
}

static void spawn_with(fixture *f, const char *episodes, int ckpt) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  f->pid = fork();
  ck_assert_int_ge(f->pid, 0);
  if (f->pid == 0) {
    if (ckpt)
      execl(bin, bin, "actor", "--config", f->config, "--name", "a0", "--ckpt", f->ckpt, "--episodes", episodes,
            (char *)NULL);
    else
      execl(bin, bin, "actor", "--config", f->config, "--name", "a0", "--episodes", episodes, (char *)NULL);
    _exit(127);
  }
}

static void spawn(fixture *f, const char *episodes) { spawn_with(f, episodes, 1); }

/* The actor from the checkpoint with its output in log. */
static void spawn_logged(fixture *f, const char *episodes, const char *log) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  const char *argv[] = {bin, "actor", "--config", f->config, "--name", "a0", "--ckpt", f->ckpt, "--episodes", episodes,
                        NULL};
  f->pid = lh_proc_spawn(log, argv);
  ck_assert_int_gt(f->pid, 0);
}

static int wait_exit(fixture *f) {
  int status = 0;
  for (int i = 0; i < 3000; i++) {  /* safety bound, 30 s */
    pid_t w = waitpid(f->pid, &status, WNOHANG);
    if (w == f->pid) {
      f->pid = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(10000);
  }
  kill(f->pid, SIGKILL);
  waitpid(f->pid, NULL, 0);
  f->pid = 0;
  return -1;
}

static void teardown(fixture *f) {
  if (f->pid > 0) {
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
  }
  if (f->router) zmq_close(f->router);
  if (f->pubsock) zmq_close(f->pubsock);
  if (f->wsock) zmq_close(f->wsock);
  if (f->ctx) zmq_ctx_term(f->ctx);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* What the stand-in learner saw: up to MAX_EPISODES episodes (an actor
 * told to run until stopped makes a few dozen a second). */
#define MAX_EPISODES 256
typedef struct {
  int hellos, heartbeats, segments, ends, aborted, duplicates;
  uint64_t ids[4096];
  int n_ids;
  uint64_t episode_ids[MAX_EPISODES];
  uint64_t seg_start[MAX_EPISODES][512];  /* per episode and seq; UINT64_MAX: not seen */
  uint32_t seg_tokens[MAX_EPISODES][512];
  int64_t end_segments[MAX_EPISODES];     /* -1 until its EpisodeEnd */
  uint64_t end_tokens[MAX_EPISODES];
  uint64_t prefix_tokens[MAX_EPISODES];   /* a member's shared prefix: its leader's tokens */
  int n_episodes;
  uint32_t last_outbox_depth;  /* of the latest Heartbeat */
  int segments_v1;   /* sampled tokens carrying version 1 */
  int two_versions;  /* episodes with sampled tokens of versions 0 and 1 */
  int saw_v0[MAX_EPISODES], saw_v1[MAX_EPISODES];
} seen;

static int episode_slot(seen *s, uint64_t id) {
  for (int i = 0; i < s->n_episodes; i++)
    if (s->episode_ids[i] == id) return i;
  ck_assert_int_lt(s->n_episodes, MAX_EPISODES);
  s->episode_ids[s->n_episodes] = id;
  memset(s->seg_start[s->n_episodes], 0xff, sizeof s->seg_start[0]);
  s->end_segments[s->n_episodes] = -1;
  return s->n_episodes++;
}

static void send_ack(fixture *f, zmq_msg_t *identity, uint64_t id) {
  Longhaul__Ack ack = LONGHAUL__ACK__INIT;
  ack.n_msg_ids = 1;
  ack.msg_ids = &id;
  ack.status = LONGHAUL__ACK_STATUS__ACK_STORED;
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = id;
  env.sender = "learner";
  env.body_case = LONGHAUL__ENVELOPE__BODY_ACK;
  env.ack = &ack;
  uint8_t *buf;
  size_t n;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_wire_encode(&env, &buf, &n, &err), 0);
  zmq_send(f->router, zmq_msg_data(identity), zmq_msg_size(identity), ZMQ_SNDMORE);
  zmq_send(f->router, buf, n, 0);
  free(buf);
}

/* Receives one message on the ingest ROUTER (waiting up to timeout_ms):
 * decodes and checks it, and acks it unless skip_ack says so for this
 * tracked message. Returns 1 when a message came. */
static int receive(fixture *f, seen *s, int timeout_ms, int skip_ack) {
  zmq_pollitem_t it = {f->router, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, timeout_ms) <= 0) return 0;
  zmq_msg_t identity, payload;
  zmq_msg_init(&identity);
  zmq_msg_init(&payload);
  ck_assert_int_ge(zmq_msg_recv(&identity, f->router, 0), 0);
  ck_assert(zmq_msg_more(&identity));
  ck_assert_int_ge(zmq_msg_recv(&payload, f->router, 0), 0);
  ck_assert(!zmq_msg_more(&payload));
  Longhaul__Envelope *env = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_wire_decode(zmq_msg_data(&payload), zmq_msg_size(&payload), NULL, &env, &err) == 0,
                "invalid message from the actor: %s", err.msg);
  ck_assert_str_eq(env->sender, "a0");
  ck_assert_uint_ne(env->msg_id, 0);
  int tracked = 0;
  switch (env->body_case) {
    case LONGHAUL__ENVELOPE__BODY_HELLO:
      s->hellos++;
      ck_assert_str_eq(env->hello->role, "actor");
      ck_assert_uint_eq(env->hello->vocab, 264);
      break;
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT:
      s->heartbeats++;
      s->last_outbox_depth = env->heartbeat->outbox_depth;
      break;
    case LONGHAUL__ENVELOPE__BODY_SEGMENT:
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END: {
      tracked = 1;
      int dup = 0;
      for (int i = 0; i < s->n_ids; i++) dup |= s->ids[i] == env->msg_id;
      if (dup) {
        s->duplicates++;
        break;
      }
      ck_assert_int_lt(s->n_ids, 4096);
      s->ids[s->n_ids++] = env->msg_id;
      if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT) {
        Longhaul__Segment *seg = env->segment;
        int k = episode_slot(s, seg->episode_id);
        ck_assert_uint_lt(seg->seq, 512);
        s->seg_start[k][seg->seq] = seg->start_offset;
        s->prefix_tokens[k] = seg->prefix_tokens;
        s->seg_tokens[k][seg->seq] = (uint32_t)seg->n_tokens;
        s->segments++;
        for (size_t t = 0; t < seg->n_tokens; t++)
          if (seg->loss_mask.data[t]) {
            if (seg->policy_version[t] == 1) s->saw_v1[k] = 1, s->segments_v1++;
            if (seg->policy_version[t] == 0) s->saw_v0[k] = 1;
          }
      } else {
        Longhaul__EpisodeEnd *e = env->episode_end;
        int k = episode_slot(s, e->episode_id);
        s->end_segments[k] = e->segment_count;
        s->end_tokens[k] = e->total_tokens;
        s->ends++;
        if (e->outcome == LONGHAUL__OUTCOME__OUTCOME_ABORTED) s->aborted++;
        if (s->saw_v0[k] && s->saw_v1[k]) s->two_versions++;
      }
      break;
    }
    default:
      ck_abort_msg("unexpected %s from the actor", lh_wire_body_name(env->body_case));
  }
  if (tracked && !skip_ack) send_ack(f, &identity, env->msg_id);
  lh_wire_free(env);
  zmq_msg_close(&identity);
  zmq_msg_close(&payload);
  return 1;
}

/* Every episode that ended arrived whole: seqs 0 .. segment_count-1, each
 * once (duplicates were dropped above), contiguous from its shared prefix's
 * end (0 when it has none), as many tokens as its EpisodeEnd says.
 * Messages may arrive out of order after resends. */
static void verify_episodes(const seen *s) {
  for (int k = 0; k < s->n_episodes; k++) {
    if (s->end_segments[k] < 0) continue;
    uint64_t at = s->prefix_tokens[k];
    for (int64_t q = 0; q < s->end_segments[k]; q++) {
      ck_assert_msg(s->seg_start[k][q] != UINT64_MAX, "episode %d: segment %lld never arrived", k, (long long)q);
      ck_assert_uint_eq(s->seg_start[k][q], at);
      at += s->seg_tokens[k][q];
    }
    ck_assert_uint_eq(at, s->end_tokens[k]);
  }
}

/* Receives until the child exits (or the safety bound); returns its exit
 * status. */
static int serve_until_exit(fixture *f, seen *s) {
  for (int i = 0; i < 3000; i++) {
    while (receive(f, s, 10, 0)) {
    }
    int status;
    pid_t w = waitpid(f->pid, &status, WNOHANG);
    if (w == f->pid) {
      f->pid = 0;
      while (receive(f, s, 10, 0)) {
      }
      verify_episodes(s);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return wait_exit(f);
}

START_TEST(test_episodes_arrive_and_exit) {
  fixture f;
  setup(&f, 0, NULL, NULL);
  spawn(&f, "4");
  static seen s;
  memset(&s, 0, sizeof s);
  int code = serve_until_exit(&f, &s);
  ck_assert_int_eq(code, 0);
  ck_assert_int_ge(s.hellos, 1);
  ck_assert_int_eq(s.ends, 4);
  ck_assert_int_eq(s.n_episodes, 4);
  ck_assert_int_gt(s.segments, 4);
  printf("actor process: %d segments, %d EpisodeEnds, %d heartbeats, %d hellos\n", s.segments, s.ends,
         s.heartbeats, s.hellos);
  teardown(&f);
}
END_TEST

/* The first messages are never acked: they come again with their msg_id
 * after resend_timeout_ms, and once acked the actor finishes. */
START_TEST(test_unacked_are_resent) {
  fixture f;
  setup(&f, 0, NULL, NULL);
  spawn(&f, "2");
  static seen s;
  memset(&s, 0, sizeof s);
  /* Receive without acking until a resend shows up. */
  for (int i = 0; i < 3000 && s.duplicates == 0; i++) receive(&f, &s, 10, 1);
  ck_assert_int_gt(s.duplicates, 0);
  int code = serve_until_exit(&f, &s);
  ck_assert_int_eq(code, 0);
  ck_assert_int_eq(s.ends, 2);
  printf("actor process: %d resends seen before acking\n", s.duplicates);
  teardown(&f);
}
END_TEST

/* Back-pressure: with room for 3 messages and no acks, no fourth message
 * is made (the distinct ids stay at 3 while resends and heartbeats go on,
 * the heartbeat reporting the full outbox); acks let the actor finish. */
START_TEST(test_full_outbox_pauses) {
  fixture f;
  setup(&f, 0, NULL, "outbox_messages = 3\n");
  spawn(&f, "2");
  static seen s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < 3000 && (s.duplicates < 6 || s.heartbeats < 3); i++) {
    receive(&f, &s, 10, 1);
    ck_assert_int_le(s.n_ids, 3);
  }
  ck_assert_int_eq(s.n_ids, 3);
  ck_assert_int_ge(s.heartbeats, 3);
  ck_assert_uint_eq(s.last_outbox_depth, 3);
  int code = serve_until_exit(&f, &s);
  ck_assert_int_eq(code, 0);
  ck_assert_int_eq(s.ends, 2);
  printf("actor process: outbox of 3 full: %d resends and %d heartbeats while paused\n", s.duplicates,
         s.heartbeats);
  teardown(&f);
}
END_TEST

/* The learner goes away with messages unacked and comes back on the same
 * endpoint: the actor reconnects, says Hello again and resends them at
 * once (resend_timeout_ms is a minute, so only the reconnect can do it). */
START_TEST(test_reconnect_resends) {
  fixture f;
  setup(&f, 0, "max_context = 400\nmax_steps = 3\nresend_timeout_ms = 60000\n", NULL);
  spawn(&f, "2");
  static seen s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < 3000 && s.n_ids < 3; i++) receive(&f, &s, 10, 1);
  ck_assert_int_ge(s.n_ids, 3);
  int hellos = s.hellos;
  zmq_close(f.router);
  f.router = bind_socket(&f, ZMQ_ROUTER, f.ingest);
  int code = serve_until_exit(&f, &s);
  ck_assert_int_eq(code, 0);
  ck_assert_int_gt(s.hellos, hellos);
  ck_assert_int_gt(s.duplicates, 0);
  ck_assert_int_eq(s.ends, 2);
  printf("actor process: after the learner came back: %d hellos, %d messages resent\n", s.hellos,
         s.duplicates);
  teardown(&f);
}
END_TEST

/* SIGTERM mid-run: the actor stops sampling, the open episodes end as
 * aborted, the outbox is flushed, exit 0. */
START_TEST(test_sigterm_exits_cleanly) {
  fixture f;
  setup(&f, 0, NULL, NULL);
  spawn(&f, "0");
  static seen s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < 3000 && s.segments < 2; i++) receive(&f, &s, 10, 0);
  ck_assert_int_ge(s.segments, 2);
  kill(f.pid, SIGTERM);
  int code = serve_until_exit(&f, &s);
  ck_assert_int_eq(code, 0);
  ck_assert_int_ge(s.aborted, 1);
  printf("actor process: SIGTERM after %d segments: %d episodes aborted\n", s.segments, s.aborted);
  teardown(&f);
}
END_TEST

/* Weights: version 1 is announced on the PUB and served in chunks from the
 * ROUTER. Loop 0 (from a checkpoint): announced once sampling began, later
 * sampled tokens carry version 1, and some episode holds tokens of both
 * versions (partial rollouts). Loop 1 (no --ckpt: the [model] config): the
 * actor samples nothing before the weights, so every sampled token carries
 * version 1. */
START_TEST(test_weights_swap_mid_episode) {
  int from_ckpt = _i == 0;
  fixture f;
  setup(&f, 1, "max_context = 4000\nmax_steps = 50\nresend_timeout_ms = 300\n", NULL);
  spawn_with(&f, "2", from_ckpt);
  lh_model *m = tiny_model(77);
  unsigned char *bytes = NULL;
  size_t n = 0;
  ck_assert_int_eq(lh_model_serialize(m, &bytes, &n), 0);
  lh_model_free(m);
  lh_errbuf err = {0};
  lh_learner_weights *w = lh_learner_weights_new(1, bytes, n, 4096, &err);
  ck_assert_msg(w != NULL, "%s", err.msg);
  free(bytes);
  static seen s;
  memset(&s, 0, sizeof s);
  /* Wait for sampling to begin, then announce (repeatedly: SUB joins late). */
  for (int i = 0; from_ckpt && i < 3000 && s.segments < 1; i++) receive(&f, &s, 10, 0);
  int served = 0;
  for (int i = 0; i < 3000 && f.pid > 0; i++) {
    if (i % 20 == 0 && s.segments_v1 == 0) {
      Longhaul__WeightsAnnounce a = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
      lh_learner_weights_announce(w, &a);
      Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
      env.protocol = LH_WIRE_PROTOCOL;
      env.msg_id = (uint64_t)i + 1;
      env.sender = "learner";
      env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
      env.weights_announce = &a;
      uint8_t *buf;
      size_t bn;
      ck_assert_int_eq(lh_wire_encode(&env, &buf, &bn, &err), 0);
      zmq_send(f.pubsock, buf, bn, 0);
      free(buf);
    }
    zmq_pollitem_t it = {f.wsock, 0, ZMQ_POLLIN, 0};
    while (zmq_poll(&it, 1, 0) > 0) {
      zmq_msg_t id, pl;
      zmq_msg_init(&id);
      zmq_msg_init(&pl);
      zmq_msg_recv(&id, f.wsock, 0);
      zmq_msg_recv(&pl, f.wsock, 0);
      Longhaul__Envelope *req = NULL;
      ck_assert_int_eq(lh_wire_decode(zmq_msg_data(&pl), zmq_msg_size(&pl), NULL, &req, &err), 0);
      ck_assert_int_eq(req->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST);
      uint32_t first, count;
      ck_assert_msg(lh_learner_weights_serve(w, req->weights_request, &first, &count, &err) == 0, "%s", err.msg);
      for (uint32_t c = first; c < first + count; c++) {
        Longhaul__WeightsChunk ch = LONGHAUL__WEIGHTS_CHUNK__INIT;
        ck_assert_int_eq(lh_learner_weights_chunk(w, c, &ch, &err), 0);
        Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
        env.protocol = LH_WIRE_PROTOCOL;
        env.msg_id = c + 1;
        env.sender = "learner";
        env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
        env.weights_chunk = &ch;
        uint8_t *buf;
        size_t bn;
        ck_assert_int_eq(lh_wire_encode(&env, &buf, &bn, &err), 0);
        zmq_send(f.wsock, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
        zmq_send(f.wsock, buf, bn, 0);
        free(buf);
        served++;
      }
      lh_wire_free(req);
      zmq_msg_close(&id);
      zmq_msg_close(&pl);
    }
    receive(&f, &s, 10, 0);
    int status;
    if (waitpid(f.pid, &status, WNOHANG) == f.pid) {
      f.pid = 0;
      ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  while (receive(&f, &s, 10, 0)) {
  }
  ck_assert_int_eq(f.pid, 0);
  verify_episodes(&s);
  ck_assert_int_ge(served, (int)lh_learner_weights_chunk_count(w));
  ck_assert_int_gt(s.segments_v1, 0);
  if (from_ckpt) {
    ck_assert_int_ge(s.two_versions, 1);
  } else {
    for (int k = 0; k < s.n_episodes; k++) ck_assert(!s.saw_v0[k]);
  }
  printf("actor process: %d chunks served, %d tokens at version 1, %d episodes with two versions\n", served,
         s.segments_v1, s.two_versions);
  lh_learner_weights_free(w);
  teardown(&f);
}
END_TEST

/* Prints the first line of log that holds needle. */
static void print_line(const char *log, const char *needle) {
  char *text = lh_proc_read_file(log), *at = text ? strstr(text, needle) : NULL;
  if (at) {
    while (at > text && at[-1] != '\n') at--;
    printf("  %.*s\n", (int)strcspn(at, "\n"), at);
  }
  free(text);
}

/* Receives and acks on the ingest until the log holds needle and at
 * least min_ids distinct tracked messages came (or the safety bound). */
static int serve_until_logged(fixture *f, seen *s, const char *log, const char *needle, int min_ids) {
  for (int i = 0; i < 2000; i++) {  /* safety bound, 20 s */
    receive(f, s, 10, 0);
    if (s->n_ids >= min_ids && lh_proc_file_has(log, needle)) return 1;
  }
  return 0;
}

/* No learner at any of the actor's endpoints: within resend_timeout_ms
 * the actor says it cannot reach it (one line for the three endpoints),
 * naming the endpoint and how long. Then the learner's ingest appears:
 * "reached", once, and its messages are acked; the weights endpoints, not
 * yet there, get lines of their own until they appear. Then the ingest
 * goes away: "went away"; and
 * comes back: reached again, connects=2, and the actor finishes. A small
 * outbox keeps the episodes made while nothing acks few. */
START_TEST(test_unreachable_learner) {
  fixture f;
  setup(&f, 1, "max_context = 400\nmax_steps = 3\nresend_timeout_ms = 300\noutbox_messages = 32\n", NULL);
  zmq_close(f.router);
  zmq_close(f.pubsock);
  zmq_close(f.wsock);
  f.router = f.pubsock = f.wsock = NULL;
  char log[160], line[400];
  snprintf(log, sizeof log, "%s/actor.log", f.dir);
  spawn_logged(&f, "0", log);
  snprintf(line, sizeof line, "cannot reach the learner endpoint=%s for ", f.ingest);
  ck_assert_msg(lh_proc_wait_file(log, line, 20), "no unreachable warning in %s", log);
  ck_assert(lh_proc_file_has(log, "its weights endpoints not reached either ([actor] learner_endpoint): nothing has "
                                  "accepted a connection there"));
  ck_assert_int_eq(lh_proc_count_lines(log, "cannot reach the learner's weights"), 0);
  /* the learner appears, its weights sockets not yet */
  f.router = bind_socket(&f, ZMQ_ROUTER, f.ingest);
  static seen s;
  memset(&s, 0, sizeof s);
  snprintf(line, sizeof line, "reached the learner endpoint=%s after ", f.ingest);
  ck_assert_msg(serve_until_logged(&f, &s, log, line, 4), "no reached line or no messages (see %s)", log);
  int warned = lh_proc_count_lines(log, "cannot reach the learner endpoint=");
  printf("actor process, no learner: %d warning line(s) before it appeared, then %d messages acked:\n", warned,
         s.n_ids);
  print_line(log, "cannot reach the learner endpoint=");
  print_line(log, line);
  ck_assert_int_ge(warned, 1);
  ck_assert_int_eq(lh_proc_count_lines(log, "reached the learner endpoint="), 1);
  /* now the weights endpoints have lines of their own, until they too are there */
  ck_assert_msg(lh_proc_wait_file(log, "cannot reach the learner's weights publisher endpoint=", 20) &&
                    lh_proc_wait_file(log, "cannot reach the learner's weights service endpoint=", 20),
                "no weights warnings in %s", log);
  f.pubsock = bind_socket(&f, ZMQ_PUB, f.pub);
  f.wsock = bind_socket(&f, ZMQ_ROUTER, f.wrouter);
  ck_assert_msg(lh_proc_wait_file(log, "reached the learner's weights publisher endpoint=", 20) &&
                    lh_proc_wait_file(log, "reached the learner's weights service endpoint=", 20),
                "the weights endpoints not reached (see %s)", log);
  print_line(log, "cannot reach the learner's weights publisher");
  print_line(log, "reached the learner's weights service");
  /* it goes away, and comes back */
  zmq_close(f.router);
  f.router = NULL;
  ck_assert_msg(lh_proc_wait_file(log, "went away", 20), "no went-away warning in %s", log);
  f.router = bind_socket(&f, ZMQ_ROUTER, f.ingest);
  ck_assert_msg(serve_until_logged(&f, &s, log, "connects=2", s.n_ids + 1), "not reached again (see %s)", log);
  ck_assert_int_eq(lh_proc_count_lines(log, "reached the learner endpoint="), 2);
  kill(f.pid, SIGTERM);
  ck_assert_int_eq(serve_until_exit(&f, &s), 0);
  uint64_t acked = 0, unacked = 1;
  ck_assert_int_eq(lh_proc_log_u64(log, "stopped name=a0", "acked", &acked), 0);
  ck_assert_int_eq(lh_proc_log_u64(log, "stopped name=a0", "unacked", &unacked), 0);
  printf("actor process, the learner went away and came back: acked=%llu unacked=%llu, %d went-away line(s)\n",
         (unsigned long long)acked, (unsigned long long)unacked, lh_proc_count_lines(log, "went away"));
  print_line(log, "went away");
  print_line(log, "connects=2");
  ck_assert_uint_gt(acked, 0);
  ck_assert_uint_eq(unacked, 0);
  teardown(&f);
}
END_TEST

/* Something accepts the TCP connection and never answers ZMTP (a plain
 * listening socket that never reads): the warning says that a connection
 * was made but no handshake completed. */
START_TEST(test_handshake_never_completes) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(lfd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(lfd, 16), 0);  /* the kernel completes the connection; nothing reads it */
  ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
  fixture f;
  setup(&f, 0, "max_context = 400\nmax_steps = 3\nresend_timeout_ms = 300\n", NULL);
  /* the config's learner_endpoint line, pointed at the listener */
  char *text = lh_proc_read_file(f.config), *at = text ? strstr(text, "learner_endpoint = ") : NULL;
  ck_assert_ptr_nonnull(at);
  char *rest = strchr(at, '\n');
  ck_assert_ptr_nonnull(rest);
  snprintf(f.ingest, sizeof f.ingest, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
  static char rewritten[8192];
  snprintf(rewritten, sizeof rewritten, "%.*slearner_endpoint = %s%s", (int)(at - text), text, f.ingest, rest);
  free(text);
  ck_assert_int_eq(lh_proc_write_file(f.config, rewritten), 0);
  char log[160];
  snprintf(log, sizeof log, "%s/actor.log", f.dir);
  spawn_logged(&f, "0", log);
  ck_assert_msg(lh_proc_wait_file(log, "no ZMTP/CURVE handshake completed", 20), "no handshake warning in %s", log);
  char line[300];
  snprintf(line, sizeof line, "cannot reach the learner endpoint=%s for ", f.ingest);
  ck_assert(lh_proc_file_has(log, line));
  printf("actor process, a listener that never answers: %d warning line(s)\n",
         lh_proc_count_lines(log, "no ZMTP/CURVE handshake completed"));
  print_line(log, "no ZMTP/CURVE handshake completed");
  close(lfd);
  teardown(&f);
}
END_TEST

/* The new [actor] keys and the [env] section, and their errors. */
START_TEST(test_config_keys) {
  lh_actors_config c;
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_actors_config_parse("[actor]\n", "x", &c, &e), 0);
  ck_assert_str_eq(c.learner_endpoint, "tcp://127.0.0.1:5555");
  ck_assert_str_eq(c.weights_pub_endpoint, "tcp://127.0.0.1:5556");
  ck_assert_str_eq(c.weights_endpoint, "tcp://127.0.0.1:5557");
  ck_assert_str_eq(c.env_name, "calc");
  ck_assert_uint_eq(c.max_context, 4096);
  const char *text =
      "[actor]\nlearner_endpoint = ipc:///tmp/x\nmax_context = 100\nmax_steps = 7\nflush_timeout_ms = 9\n"
      "[env]\nname = needle\ntokens = 300\nexpert_noise = 0.1\n";
  ck_assert_msg(lh_actors_config_parse(text, "x", &c, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(c.learner_endpoint, "ipc:///tmp/x");
  ck_assert_uint_eq(c.max_context, 100);
  ck_assert_uint_eq(c.max_steps, 7);
  ck_assert_uint_eq(c.flush_timeout_ms, 9);
  ck_assert_uint_eq(c.record_routing, 0);
  lh_actors_config c2;
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nrecord_routing = 1\n", "x", &c2, &e), 0);
  ck_assert_uint_eq(c2.record_routing, 1);
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nrecord_routing = 2\n", "f.ini", &c2, &e), LH_EACTORS_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "record_routing"));
  ck_assert_str_eq(c.env_name, "needle");
  ck_assert_uint_eq(c.n_env_options, 2);
  ck_assert_str_eq(c.env_keys[1], "expert_noise");
  ck_assert_str_eq(c.env_values[0], "300");
  ck_assert_int_eq(lh_actors_config_parse("[env]\nname = calc\nname = maze\n", "f.ini", &c, &e),
                   LH_EACTORS_CONFIG_DUPLICATE);
  ck_assert_ptr_nonnull(strstr(e.msg, "[env] name"));
  ck_assert_int_eq(lh_actors_config_parse("[env]\nstages = 1\nstages = 2\n", "f.ini", &c, &e),
                   LH_EACTORS_CONFIG_DUPLICATE);
  ck_assert_ptr_nonnull(strstr(e.msg, "stages"));
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nflush_timeout_ms = 0\n", "f.ini", &c, &e),
                   LH_EACTORS_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "flush_timeout_ms"));
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nlearner_endpoint =\n", "f.ini", &c, &e),
                   LH_EACTORS_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "learner_endpoint"));
  ck_assert_int_eq(lh_actors_config_parse("[actor]\nweights_endpoints = x\n", "f.ini", &c, &e),
                   LH_EACTORS_CONFIG_UNKNOWN_KEY);
  ck_assert_ptr_nonnull(strstr(e.msg, "weights_endpoints"));
}
END_TEST

/* Usage errors of the command name what is wrong. */
START_TEST(test_cli_errors) {
  const char *bin = getenv("LH_BIN");
  ck_assert_ptr_nonnull(bin);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s actor --name a0 >/dev/null 2>&1", bin);
  int st = system(cmd);
  ck_assert_int_eq(WEXITSTATUS(st), 2);
  snprintf(cmd, sizeof cmd, "%s actor --config /nonexistent.ini --name a0 2>&1 | grep -q nonexistent.ini", bin);
  ck_assert_int_eq(system(cmd), 0);
  fixture f;
  setup(&f, 0, NULL, "bogus_key = 1\n");
  snprintf(cmd, sizeof cmd, "%s actor --config %s --name a0 2>&1 | grep -q bogus_key", bin, f.config);
  ck_assert_int_eq(system(cmd), 0);
  teardown(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_proc");
  TCase *tc = tcase_create("proc");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_episodes_arrive_and_exit);
  tcase_add_test(tc, test_unacked_are_resent);
  tcase_add_test(tc, test_full_outbox_pauses);
  tcase_add_test(tc, test_reconnect_resends);
  tcase_add_test(tc, test_sigterm_exits_cleanly);
  tcase_add_test(tc, test_unreachable_learner);
  tcase_add_test(tc, test_handshake_never_completes);
  tcase_add_loop_test(tc, test_weights_swap_mid_episode, 0, 2);
  tcase_add_test(tc, test_config_keys);
  tcase_add_test(tc, test_cli_errors);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

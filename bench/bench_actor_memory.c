/* bench_actor_memory CONFIG CKPT TOKENS ENDPOINT [EPISODES]: runs
 * `longhaul actor` (LH_BIN) for EPISODES (1) `needle` episodes whose
 * document is TOKENS tokens (a group of them, with CONFIG's [actor]
 * batch and group_size, shares one), as configured
 * in CONFIG ([model], [actor], [env]; its learner_endpoint is bound here
 * by a stand-in learner that acks every Segment and EpisodeEnd), and
 * prints one line:
 *   tokens=N hwm_kb=K prefill_tokens=P prefill_s=S prefill_tok_s=R exit=E
 * hwm_kb is the actor's peak resident set (VmHWM); the prefill is timed
 * from the actor's Hello (sent once its model is loaded, as it starts its
 * first episode) to the first segment that holds a sampled token (the
 * policy samples only once the whole first observation is in), P being
 * the tokens before that one; the environment's reset is inside. bench/scale_memory.sh runs it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proto/wire.h"
#include "tests/proc_util.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: bench_actor_memory CONFIG CKPT TOKENS ENDPOINT [EPISODES]\n");
    return 2;
  }
  const char *bin = getenv("LH_BIN");
  if (!bin) {
    fprintf(stderr, "bench_actor_memory: LH_BIN is not set\n");
    return 2;
  }
  void *ctx = zmq_ctx_new(), *router = zmq_socket(ctx, ZMQ_ROUTER);
  int linger = 0;
  zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(router, argv[4]) != 0) {
    fprintf(stderr, "bench_actor_memory: bind %s: %s\n", argv[4], zmq_strerror(zmq_errno()));
    return 1;
  }
  double t0 = now_s(), t_hello = 0, t_sampled = 0;
  pid_t pid = fork();
  if (pid == 0) {
    char set[64];
    snprintf(set, sizeof set, "env.tokens=%s", argv[3]);
    execl(bin, bin, "actor", "--config", argv[1], "--name", "a0", "--ckpt", argv[2], "--episodes",
          argc > 5 ? argv[5] : "1", "--set", set, (char *)NULL);
    _exit(127);
  }
  long peak = 0;
  uint64_t before_sampled = 0;
  int code = -1;
  while (code < 0) {
    zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 20) > 0) {
      zmq_msg_t id, payload;
      zmq_msg_init(&id);
      zmq_msg_init(&payload);
      zmq_msg_recv(&id, router, 0);
      zmq_msg_recv(&payload, router, 0);
      Longhaul__Envelope *env = NULL;
      if (lh_wire_decode(zmq_msg_data(&payload), zmq_msg_size(&payload), NULL, &env, NULL) == 0) {
        if (env->body_case == LONGHAUL__ENVELOPE__BODY_HELLO && !t_hello) t_hello = now_s();
        if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT && !t_sampled) {
          const Longhaul__Segment *s = env->segment;
          for (size_t t = 0; t < s->loss_mask.len && !t_sampled; t++)
            if (s->loss_mask.data[t]) t_sampled = now_s(), before_sampled = s->start_offset + t;
        }
        if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT ||
            env->body_case == LONGHAUL__ENVELOPE__BODY_EPISODE_END) {
          uint64_t msg_id = env->msg_id;
          Longhaul__Ack ack = LONGHAUL__ACK__INIT;
          ack.n_msg_ids = 1;
          ack.msg_ids = &msg_id;
          ack.status = LONGHAUL__ACK_STATUS__ACK_STORED;
          Longhaul__Envelope reply = LONGHAUL__ENVELOPE__INIT;
          reply.protocol = LH_WIRE_PROTOCOL;
          reply.msg_id = msg_id;
          reply.sender = "learner";
          reply.body_case = LONGHAUL__ENVELOPE__BODY_ACK;
          reply.ack = &ack;
          uint8_t *buf = NULL;
          size_t n = 0;
          if (lh_wire_encode(&reply, &buf, &n, NULL) == 0) {
            zmq_send(router, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
            zmq_send(router, buf, n, 0);
          }
          free(buf);
        }
        lh_wire_free(env);
      }
      zmq_msg_close(&id);
      zmq_msg_close(&payload);
    }
    code = lh_proc_poll(pid);
    if (code < 0) {
      long hwm = lh_proc_vmhwm_kb(pid);
      if (hwm > peak) peak = hwm;
    }
  }
  double s = t_sampled ? t_sampled - (t_hello ? t_hello : t0) : 0;
  printf("tokens=%s hwm_kb=%ld prefill_tokens=%llu prefill_s=%.2f prefill_tok_s=%.0f exit=%d\n", argv[3], peak,
         (unsigned long long)before_sampled, s, s > 0 ? (double)before_sampled / s : 0.0, code);
  zmq_close(router);
  zmq_ctx_term(ctx);
  return code == 0 && t_sampled ? 0 : 1;
}

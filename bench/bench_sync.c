/* bench_sync: how long an actor takes to get a new weights version, against
 * what loopback TCP allows, measured in the same run (weight sync within
 * 2x of bytes / loopback bandwidth).
 *
 * The learner side is the real publisher (learner/publish.c) in a thread of
 * its own, serving chunks of 1 MiB as `longhaul learner` does; the actor
 * side is the real link (actors/link.c): announcement on the SUB, chunked
 * fetch over the DEALER, checksums verified. The figure (sync) is the time
 * from the announcement going out to the version complete and verified at
 * the actor; also printed: that plus the swap into the actor's model (load
 * the bytes, copy the parameters), and the time from handing the bytes to
 * lh_learner_publisher_set (its copy and checksums included). The reference streams the same bytes in the same 1 MiB
 * messages over a PUSH/PULL pair on tcp://127.0.0.1 (no requests, no
 * checksums): bytes / that time is the loopback bandwidth. Each figure is
 * the median of REPEATS runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/internal.h"
#include "learner/internal.h"

#define CHUNK (1u << 20)
#define REPEATS 7

static int64_t now_ns(void) { return lh_now_ns(); }

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double median_s(int64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  return (double)v[n / 2] / 1e9;
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_sync: %s: %s\n", what, msg ? msg : "");
  exit(1);
}

/* ---- the reference: PUSH/PULL of the same bytes ---- */
typedef struct {
  void *ctx;
  char endpoint[128];
  size_t bytes;
  atomic_int ready, rounds_done;
  int64_t done_at[REPEATS + 1];
} pull_arg;

static void *pull_thread(void *p) {
  pull_arg *a = p;
  void *s = zmq_socket(a->ctx, ZMQ_PULL);
  int hwm = 0;
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  if (zmq_connect(s, a->endpoint) != 0) die("connect PULL", zmq_strerror(zmq_errno()));
  atomic_store(&a->ready, 1);
  char *buf = malloc(CHUNK);
  for (int r = 0; r < REPEATS + 1; r++) {
    for (size_t got = 0; got < a->bytes;) {
      int n = zmq_recv(s, buf, CHUNK, 0);
      if (n < 0) die("recv", zmq_strerror(zmq_errno()));
      got += (size_t)n;
    }
    a->done_at[r] = now_ns();
    atomic_store(&a->rounds_done, r + 1);
  }
  free(buf);
  zmq_close(s);
  return NULL;
}

/* Seconds to stream `bytes` over loopback: median of REPEATS after a warm-up. */
static double loopback_seconds(void *ctx, size_t bytes) {
  void *push = zmq_socket(ctx, ZMQ_PUSH);
  int hwm = 0, linger = 0;
  zmq_setsockopt(push, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(push, "tcp://127.0.0.1:*") != 0) die("bind PUSH", zmq_strerror(zmq_errno()));
  static pull_arg a;
  memset(&a, 0, sizeof a);
  a.ctx = ctx;
  a.bytes = bytes;
  size_t len = sizeof a.endpoint;
  zmq_getsockopt(push, ZMQ_LAST_ENDPOINT, a.endpoint, &len);
  pthread_t t;
  pthread_create(&t, NULL, pull_thread, &a);
  while (!atomic_load(&a.ready)) zmq_poll(NULL, 0, 1);
  zmq_poll(NULL, 0, 50); /* the connection is up */
  char *buf = calloc(1, CHUNK);
  int64_t took[REPEATS];
  for (int r = 0; r < REPEATS + 1; r++) {
    int64_t t0 = now_ns();
    for (size_t sent = 0; sent < bytes; sent += CHUNK) {
      size_t n = bytes - sent < CHUNK ? bytes - sent : CHUNK;
      if (zmq_send(push, buf, n, 0) < 0) die("send", zmq_strerror(zmq_errno()));
    }
    while (atomic_load(&a.rounds_done) < r + 1) zmq_poll(NULL, 0, 0);
    if (r) took[r - 1] = a.done_at[r] - t0;
  }
  pthread_join(t, NULL);
  free(buf);
  zmq_close(push);
  return median_s(took, REPEATS);
}

/* ---- the real thing: publisher thread, actor link ---- */
typedef struct {
  lh_learner_publisher *pub;
  atomic_int stop;
} serve_arg;

static void *serve_thread(void *p) {
  serve_arg *a = p;
  lh_errbuf e = {0};
  while (!atomic_load(&a->stop))
    if (lh_learner_publisher_poll(a->pub, 5, NULL, &e) < 0) die("publisher poll", e.msg);
  return NULL;
}

typedef struct {
  double publish_s, fetch_s, swap_s;
} sync_times;

static sync_times weights_sync(void *ctx, lh_model *model, const uint8_t *bytes, size_t n) {
  lh_errbuf e = {0};
  lh_learner_publisher *pub =
      lh_learner_publisher_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", CHUNK, &e);
  if (!pub) die("publisher", e.msg);
  const lh_model_config *mc = lh_model_get_config(model);
  /* The link's ingest DEALER connects to a port nobody serves: this bench
   * only exercises the weights sockets. */
  lh_actors_link_config lc = {.name = "bench",
                              .ingest_endpoint = "tcp://127.0.0.1:9",
                              .weights_pub_endpoint = lh_learner_publisher_pub_endpoint(pub),
                              .weights_endpoint = lh_learner_publisher_router_endpoint(pub),
                              .outbox_messages = 16,
                              .outbox_bytes = 1 << 20,
                              .resend_timeout_ms = 1000,
                              .linger_ms = 0,
                              .id_salt = 1,
                              .vocab = (uint32_t)mc->vocab,
                              .layers = (uint32_t)mc->layers,
                              .topk = (uint32_t)mc->topk,
                              .pid = 1};
  lh_actors_link *link = NULL;
  if (lh_actors_link_new(ctx, &lc, &link, &e) < 0) die("link", e.msg);
  /* Let the SUB connect before the first announcement. */
  for (int i = 0; i < 20; i++) lh_actors_link_poll(link, 10, &e);
  serve_arg sa = {.pub = pub};
  pthread_t t;
  int64_t publish[REPEATS], fetch[REPEATS], swap[REPEATS];
  /* Each version differs from the one before in every chunk (the last
   * byte of each flipped, a float's low byte), as after an AdamW step: an
   * actor fetches only the chunks that changed, so equal versions would
   * cost nothing. */
  uint8_t *version_bytes = malloc(n);
  if (!version_bytes) die("weights", "out of memory");
  for (int r = 0; r < REPEATS + 1; r++) {
    memcpy(version_bytes, bytes, n);
    for (size_t end = CHUNK; end - CHUNK < n; end += CHUNK) version_bytes[(end < n ? end : n) - 1] ^= (uint8_t)(r + 1);
    int64_t t0 = now_ns();
    if (lh_learner_publisher_set(pub, (uint64_t)r + 1, version_bytes, n, 0, 0, 0.0f, &e) < 0) die("publish", e.msg);
    int64_t t_ann = now_ns();  /* the announcement is out */
    if (r == 0) pthread_create(&t, NULL, serve_thread, &sa);
    int got = 0;
    while (!got) {
      got = lh_actors_link_poll(link, 1, &e);
      if (got < 0) die("link poll", e.msg);
    }
    int64_t t1 = now_ns();
    uint64_t v = 0;
    size_t nb = 0;
    const uint8_t *w = lh_actors_link_weights(link, &v, &nb);
    if (!w || v != (uint64_t)r + 1 || nb != n) die("weights", "wrong version or size");
    lh_model *fresh = NULL;
    if (lh_model_load_bytes(w, nb, "bench", lh_model_backend(model), &fresh, &e) < 0) die("load", e.msg);
    if (lh_model_copy_params(model, fresh, &e) < 0) die("copy", e.msg);
    lh_model_free(fresh);
    int64_t t2 = now_ns();
    if (r) publish[r - 1] = t1 - t0, fetch[r - 1] = t1 - t_ann, swap[r - 1] = t2 - t_ann;
    lh_actors_weights_fetch_stats st;
    if (!lh_actors_link_weights_fetch(link, &st) || (r && st.bytes_fetched != n)) die("weights", "not fetched whole");
  }
  free(version_bytes);
  atomic_store(&sa.stop, 1);
  pthread_join(t, NULL);
  lh_actors_link_free(link);
  lh_learner_publisher_free(pub);
  return (sync_times){median_s(publish, REPEATS), median_s(fetch, REPEATS), median_s(swap, REPEATS)};
}

static void one_model(void *ctx, const char *what, int d_model, int layers, int experts) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = d_model, c.layers = layers, c.experts = experts;
  c.expert_hidden = d_model, c.latent = d_model / 2;
  lh_model *m = NULL;
  lh_errbuf e = {0};
  if (lh_model_new(&c, lh_backend_cpu(), &m, &e) < 0) die("model", e.msg);
  unsigned char *bytes = NULL;
  size_t n = 0;
  if (lh_model_serialize(m, &bytes, &n) < 0) die("serialize", "failed");
  double wire = loopback_seconds(ctx, n);
  sync_times s = weights_sync(ctx, m, bytes, n);
  printf("%-28s %6.1f MB  loopback %7.1f MB/s (bound %7.2f ms)  sync %7.2f ms (%.2fx)  "
         "+swap %7.2f ms (%.2fx)  publish+sync %7.2f ms (%.2fx)\n",
         what, (double)n / 1e6, (double)n / 1e6 / wire, wire * 1e3, s.fetch_s * 1e3, s.fetch_s / wire,
         s.swap_s * 1e3, s.swap_s / wire, s.publish_s * 1e3, s.publish_s / wire);
  free(bytes);
  lh_model_free(m);
}

int main(void) {
  lh_log_set_level(LH_LOG_WARN); /* a line per version otherwise */
  void *ctx = zmq_ctx_new();
  printf("weights sync: publisher -> actor link over tcp://127.0.0.1, 1 MiB chunks, median of %d\n",
         REPEATS);
  printf("ratio = time / (bytes / loopback bandwidth measured now); target <= 2 for sync\n");
  printf("sync: announcement out -> version complete and verified at the actor; +swap: and loaded into\n"
         "its model; publish+sync: from handing the learner's bytes to the publisher (copy, checksums)\n");
  one_model(ctx, "demo model (d 128, 4 layers)", 128, 4, 16);
  one_model(ctx, "d 512, 8 layers, 16 experts", 512, 8, 16);
  zmq_ctx_term(ctx);
  return 0;
}

/* bench_sync_delta: what an actor fetches for a new weights version when it
 * holds an older one, after 1, 10 and 100 learner steps of a real training
 * loop on the demo model, against the version's full size and against the
 * time of a full fetch measured in the same run.
 *
 * Training: the demo model (model/config.c defaults, seed 1), AdamW with
 * examples/calc.ini's lr 5e-4 and weight decay 0, batches of 4 sequences of
 * 64 random tokens, a new batch each step, 10 warm-up steps first (so the
 * moments are not those of a fresh start). Three runs: every parameter
 * trained; the embedding and output matrices frozen; the MoE experts
 * frozen (attention, norms and routers trained). A frozen tensor is set
 * back to its value after each step.
 *
 * Fetching: the real publisher (learner/publish.c) serving in a thread of
 * its own, the real actor link (actors/link.c) in this one, over
 * tcp://127.0.0.1, at two chunk sizes (1 MiB, what `longhaul learner`
 * serves, and 64 KiB), with zstd refused and accepted. The actor holds the
 * version k steps back; the figures are the bytes it fetched (chunk
 * bytes, and bytes on the wire with zstd) over the version's size, and the
 * time from the announcement to the version verified at the actor over the
 * time of a full fetch (every chunk differs, zstd refused). Times are the
 * median of REPEATS.
 *
 * Usage: bench_sync_delta [--config INI]: the model of INI's [model]
 * (examples/experts_1024.ini: 1,024 experts, where the experts are most of
 * the version) instead of the demo's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/internal.h"
#include "common/ini_doc.h"
#include "learner/internal.h"

#define REPEATS 7
#define WARMUP_STEPS 10
#define N_SEQ 4
#define SEQ_LEN 64

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_sync_delta: %s: %s\n", what, msg ? msg : "");
  exit(1);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* ---- one publisher (its own thread) and one actor link ---- */
typedef struct {
  lh_learner_publisher *pub;
  lh_actors_link *link;
  uint32_t chunk_bytes;
  int zstd;
  pthread_t thread;
  /* handed from this thread to the serving one */
  _Atomic(const uint8_t *) pending;
  size_t pending_bytes;
  uint64_t pending_version;
  atomic_int reannounce, stop;
  atomic_llong announced_ns;
  uint64_t version;
  int reannounced;  /* the last sync needed the announcement again */
  uint64_t reannouncements;
} pair;

static void *serve_thread(void *p) {
  pair *a = p;
  lh_errbuf e = {0};
  while (!atomic_load(&a->stop)) {
    const uint8_t *b = atomic_load(&a->pending);
    if (b) {
      if (lh_learner_publisher_set(a->pub, a->pending_version, b, a->pending_bytes, 0, 0, 0.0f, &e) < 0)
        die("publish", e.msg);
      atomic_store(&a->announced_ns, (long long)lh_now_ns());
      atomic_store(&a->pending, NULL);
    }
    if (atomic_exchange(&a->reannounce, 0)) lh_learner_publisher_announce(a->pub, &e);
    if (lh_learner_publisher_poll(a->pub, 1, NULL, &e) < 0) die("publisher poll", e.msg);
  }
  return NULL;
}

static void pair_open(pair *a, void *ctx, uint32_t chunk_bytes, int zstd) {
  lh_errbuf e = {0};
  memset(a, 0, sizeof *a);
  a->chunk_bytes = chunk_bytes, a->zstd = zstd;
  a->pub = lh_learner_publisher_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", chunk_bytes, &e);
  if (!a->pub) die("publisher", e.msg);
  /* The ingest DEALER connects to a port nobody serves: only the weights
   * sockets are exercised. */
  lh_actors_link_config lc = {.name = "bench",
                              .ingest_endpoint = "tcp://127.0.0.1:9",
                              .weights_pub_endpoint = lh_learner_publisher_pub_endpoint(a->pub),
                              .weights_endpoint = lh_learner_publisher_router_endpoint(a->pub),
                              .outbox_messages = 16,
                              .outbox_bytes = 1 << 20,
                              .resend_timeout_ms = 1000,
                              .id_salt = 1,
                              .vocab = LH_TOK_VOCAB,
                              .weights_zstd = zstd};
  if (lh_actors_link_new(ctx, &lc, &a->link, &e) < 0) die("link", e.msg);
  for (int i = 0; i < 20; i++) lh_actors_link_poll(a->link, 10, &e); /* the SUB joins */
  pthread_create(&a->thread, NULL, serve_thread, a);
}


/* Milliseconds the learner spends compressing every chunk of a version
 * (once per version, on the first requests that accept zstd), 1 thread. */
static double zstd_ms(const uint8_t *bytes, size_t n, uint32_t chunk_bytes) {
  int64_t took[REPEATS];
  for (int r = 0; r < REPEATS; r++) {
    lh_learner_weights *w = lh_learner_weights_new(1, bytes, n, chunk_bytes, NULL);
    if (!w) die("weights", "cannot copy");
    int64_t t0 = lh_now_ns();
    for (uint32_t i = 0; i < lh_learner_weights_chunk_count(w); i++) {
      Longhaul__WeightsChunk c = LONGHAUL__WEIGHTS_CHUNK__INIT;
      if (lh_learner_weights_chunk_encoded(w, i, 1, &c, NULL) < 0) die("zstd", "failed");
    }
    took[r] = lh_now_ns() - t0;
    lh_learner_weights_free(w);
  }
  qsort(took, REPEATS, sizeof *took, cmp_i64);
  return (double)took[REPEATS / 2] / 1e6;
}

static void pair_close(pair *a) {
  atomic_store(&a->stop, 1);
  pthread_join(a->thread, NULL);
  lh_actors_link_free(a->link);
  lh_learner_publisher_free(a->pub);
}

/* Publishes bytes as the next version and waits until the actor holds it
 * verified; returns the nanoseconds from the announcement to then. */
static int64_t sync_once(pair *a, const uint8_t *bytes, size_t n) {
  a->reannounced = 0;
  lh_errbuf e = {0};
  a->pending_bytes = n;
  a->pending_version = ++a->version;
  atomic_store(&a->pending, bytes);
  while (atomic_load(&a->pending)) zmq_poll(NULL, 0, 0);
  uint64_t got = 0;
  int64_t waited_from = lh_now_ns();
  while (got != a->version) {
    if (lh_actors_link_poll(a->link, 1, &e) < 0) die("link poll", e.msg);
    lh_actors_link_weights(a->link, &got, NULL);
    if (got != a->version && lh_now_ns() - waited_from > 2000000000LL) {
      atomic_store(&a->reannounce, 1); /* an announcement the SUB missed */
      a->reannounced = 1, a->reannouncements++;
      waited_from = lh_now_ns();
    }
  }
  int64_t took = lh_now_ns() - (int64_t)atomic_load(&a->announced_ns);
  const uint8_t *w = lh_actors_link_weights(a->link, NULL, NULL);
  if (memcmp(w, bytes, n) != 0) die("weights", "the actor's bytes differ from the learner's");
  return took;
}

typedef struct {
  double seconds;
  lh_actors_weights_fetch_stats st;
} fetch_figure;

/* The actor holds `held`; the median time to get `next`, and what that
 * fetch took. Rounds alternate held and next, so each timed fetch starts
 * from held. */
static fetch_figure fetch(pair *a, const uint8_t *held, const uint8_t *next, size_t n) {
  int64_t took[REPEATS];
  fetch_figure f = {0};
  for (int r = 0; r < REPEATS; r++) {
    sync_once(a, held, n);
    took[r] = sync_once(a, next, n);
    lh_actors_link_weights_fetch(a->link, &f.st);
  }
  qsort(took, REPEATS, sizeof *took, cmp_i64);
  f.seconds = (double)took[REPEATS / 2] / 1e9;
  return f;
}

/* ---- the training loop ---- */
typedef struct {
  const char *name;
  int (*frozen)(const char *tensor);
} scenario;

static int none_frozen(const char *t) { (void)t; return 0; }
static int embeddings_frozen(const char *t) { return strcmp(t, "embed") == 0 || strcmp(t, "out") == 0; }
static int experts_frozen(const char *t) { return strstr(t, ".moe.w") || strstr(t, ".moe.shared.w"); }

typedef struct {
  lh_model *m;
  lh_model_cache *cache;
  float *saved;  /* the frozen tensors' values (whole buffer layout) */
  int (*frozen)(const char *);
  int32_t tok[N_SEQ * SEQ_LEN], tgt[N_SEQ * SEQ_LEN], off[N_SEQ + 1];
  uint64_t rng;
  int64_t step;
  double loss;
} trainer;

static void train_steps(trainer *t, int steps) {
  lh_errbuf e = {0};
  lh_adamw_params ap = {.lr = 5e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f,
                        .grad_scale = 1.0f};
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < N_SEQ * SEQ_LEN; i++) {
      t->rng = t->rng * 6364136223846793005ULL + 1442695040888963407ULL;
      t->tok[i] = (int32_t)((t->rng >> 33) % 256);
    }
    for (int i = 0; i < N_SEQ * SEQ_LEN; i++) t->tgt[i] = (i + 1) % SEQ_LEN ? t->tok[i + 1] : -1;
    lh_model_batch b = {.n_tokens = N_SEQ * SEQ_LEN, .tokens = t->tok, .targets = t->tgt, .n_seq = N_SEQ,
                        .seq_offsets = t->off};
    if (lh_model_forward(t->m, &b, &t->cache, NULL, &t->loss, NULL, &e) < 0 || lh_model_zero_grads(t->m) < 0 ||
        lh_model_backward(t->m, t->cache, NULL, NULL, &e) < 0)
      die("training step", e.msg);
    ap.step = ++t->step;
    if (lh_model_adamw_step(t->m, &ap) < 0) die("adamw", "failed");
    float *p = lh_model_params(t->m);
    for (int i = 0; i < lh_model_n_tensors(t->m); i++) {
      const lh_model_tensor *tt = lh_model_tensor_at(t->m, i);
      if (t->frozen(tt->name)) memcpy(p + tt->offset, t->saved + tt->offset, tt->numel * sizeof(float));
    }
  }
}

static uint8_t *snapshot(trainer *t, size_t *n) {
  unsigned char *b = NULL;
  if (lh_model_serialize(t->m, &b, n) < 0) die("serialize", "failed");
  return b;
}

static uint32_t chunks_differing(const uint8_t *a, const uint8_t *b, size_t n, uint32_t chunk, uint32_t *total) {
  uint32_t d = 0;
  *total = (uint32_t)((n + chunk - 1) / chunk);
  for (size_t off = 0; off < n; off += chunk)
    d += memcmp(a + off, b + off, n - off < chunk ? n - off : chunk) != 0;
  return d;
}

/* The model: the demo's (model/config.c defaults), or INI's [model]. */
static void read_model(const char *ini, lh_model_config *mc) {
  lh_model_config_default(mc);
  if (!ini) return;
  lh_ini_doc *doc = NULL;
  lh_errbuf e = {0};
  int rc = lh_ini_doc_load(ini, NULL, 0, &doc, &e);
  if (!rc) rc = lh_model_config_read(doc, mc, &e);
  lh_ini_doc_free(doc);
  if (rc) die(ini, e.msg);
}

int main(int argc, char **argv) {
  const char *ini = NULL;
  if (argc == 3 && !strcmp(argv[1], "--config")) {
    ini = argv[2];
  } else if (argc != 1) {
    fprintf(stderr, "usage: bench_sync_delta [--config INI (a model other than the demo's)]\n");
    return 2;
  }
  lh_model_config mc0;
  read_model(ini, &mc0);
  /* errors only: a line per version otherwise, and the actor link, which
   * has no learner here (weights alone), warns that none answers */
  lh_log_set_level(LH_LOG_ERROR);
  void *ctx = zmq_ctx_new();
  const uint32_t chunk_sizes[2] = {1u << 20, 64u << 10};
  pair pairs[2][2]; /* [chunk size][zstd] */
  for (int c = 0; c < 2; c++)
    for (int z = 0; z < 2; z++) pair_open(&pairs[c][z], ctx, chunk_sizes[c], z);
  const scenario scenarios[3] = {{"all trained", none_frozen},
                                 {"embed+out frozen", embeddings_frozen},
                                 {"experts frozen", experts_frozen}};
  const int ks[3] = {1, 10, 100};
  printf("weights sync after k learner steps: an actor holding the version k steps back fetches the newest.\n"
         "model %s (d %d, %d layers, %d experts top %d, expert_hidden %d), AdamW lr 5e-4 wd 0 (examples/calc.ini), %d warm-up steps,\n"
         "4x64 random tokens per step. Threads: the publisher serves in 1 thread, the actor link polls in 1,\n"
         "ZeroMQ has 1 I/O thread, training ran before (1 thread, not during the fetches).\n"
         "fetched = chunk bytes fetched / version size; +zstd = bytes on the wire with zstd / version size;\n"
         "time = announcement -> verified at the actor / a full fetch of the same version (every chunk, no zstd),\n"
         "median of %d; zstd cost = the learner compressing every chunk of the version once (1 thread).\n\n",
         ini ? ini : "the demo's", mc0.d_model, mc0.layers, mc0.experts, mc0.topk, mc0.expert_hidden, WARMUP_STEPS,
         REPEATS);
  printf("%-17s %6s %5s %14s %9s %7s %12s %9s %10s %10s\n", "run", "chunk", "steps", "chunks changed", "fetched",
         "+zstd", "full fetch", "time", "time+zstd", "zstd cost");
  for (int s = 0; s < 3; s++) {
    lh_model_config mc = mc0;
    mc.seed = 1;
    trainer t = {.frozen = scenarios[s].frozen, .rng = 12345};
    lh_errbuf e = {0};
    if (lh_model_new(&mc, lh_backend_cpu(), &t.m, &e) < 0) die("model", e.msg);
    if (lh_model_enable_training(t.m) < 0) die("training", "cannot enable");
    for (int i = 0; i <= N_SEQ; i++) t.off[i] = i * SEQ_LEN;
    size_t nf = lh_model_n_floats(t.m);
    t.saved = malloc(nf * sizeof(float));
    memcpy(t.saved, lh_model_params(t.m), nf * sizeof(float));
    int64_t t0 = lh_now_ns();
    train_steps(&t, WARMUP_STEPS);
    size_t n = 0, n2 = 0;
    uint8_t *held = snapshot(&t, &n), *next[3];
    for (int k = 0, done = 0; k < 3; k++) {
      train_steps(&t, ks[k] - done);
      done = ks[k];
      next[k] = snapshot(&t, &n2);
      if (n2 != n) die("snapshot", "the size changed");
    }
    double train_s = (double)(lh_now_ns() - t0) / 1e9;
    uint8_t *all_differ = malloc(n);
    for (int c = 0; c < 2; c++) {
      for (int k = 0; k < 3; k++) {
        memcpy(all_differ, next[k], n);
        for (size_t off = 0; off < n; off += chunk_sizes[c]) all_differ[off] ^= 1;
        uint32_t total = 0, changed = chunks_differing(held, next[k], n, chunk_sizes[c], &total);
        fetch_figure full = fetch(&pairs[c][0], all_differ, next[k], n);
        if (full.st.chunks_fetched != total) die("full fetch", "not every chunk was fetched");
        fetch_figure plain = fetch(&pairs[c][0], held, next[k], n);
        fetch_figure zstd = fetch(&pairs[c][1], held, next[k], n);
        if (plain.st.chunks_fetched != changed || zstd.st.chunks_fetched != changed)
          die("delta", "the actor fetched other chunks than those that changed");
        char cs[16], ch[24];
        snprintf(cs, sizeof cs, "%uK", chunk_sizes[c] >> 10);
        snprintf(ch, sizeof ch, "%u/%u", changed, total);
        double zms = zstd_ms(next[k], n, chunk_sizes[c]);
        printf("%-17s %6s %5d %14s %9.3f %7.3f %9.2f ms %9.3f %10.3f %7.1f ms\n", scenarios[s].name, cs, ks[k], ch,
               (double)plain.st.bytes_fetched / (double)n, (double)zstd.st.wire_bytes / (double)n,
               full.seconds * 1e3, plain.seconds / full.seconds, zstd.seconds / full.seconds, zms);
      }
    }
    printf("%-17s version %.2f MB, %d steps in %.1f s, loss %.3f\n\n", scenarios[s].name, (double)n / 1e6,
           WARMUP_STEPS + ks[2], train_s, t.loss);
    for (int k = 0; k < 3; k++) free(next[k]);
    free(held), free(all_differ), free(t.saved);
    lh_model_cache_free(t.cache);
    lh_model_free(t.m);
  }
  uint64_t again = 0;
  for (int c = 0; c < 2; c++)
    for (int z = 0; z < 2; z++) again += pairs[c][z].reannouncements, pair_close(&pairs[c][z]);
  printf("announcements sent again (a SUB that missed one; 2 s each): %llu\n", (unsigned long long)again);
  zmq_ctx_term(ctx);
  return 0;
}

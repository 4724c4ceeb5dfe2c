/* bench_store: 512-token segments committed per second through store/ as
 * the ingest stores them (lh_store_put_segment_wire: the segment's bytes as
 * they arrived, validated once by the decode; segment row, episode upsert,
 * batched transactions)
 * against a plain sqlite3 prepared-insert loop of the same payload bytes
 * into a (episode, seq, payload) table, with the same batch size and the
 * same PRAGMAs (WAL, synchronous=NORMAL), in the same run; and through
 * lh_store_put_segment (validate and encode the segment again), the path
 * the ingest took before. Rounds alternate between the three and the best
 * round of each is reported.
 * Usage: bench_store [SEGMENTS_PER_ROUND [BATCH [ROUNDS]]]
 *
 * bench_store --fill DB SEGMENTS writes a store of that many such segments
 * instead (episodes of 16, each ended with an EpisodeEnd and a reward, the
 * policy version rising every 1 024 segments), in batches of 64, for
 * bench/store_scale.sh; it prints the time it took. */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

#define TOKENS 512
#define LAYERS 4
#define TOPK 2
#define SEGS_PER_EPISODE 16

typedef struct {
  Longhaul__Segment seg;
  uint32_t tokens[TOKENS];
  uint8_t mask[TOKENS];
  float logp[TOKENS];
  uint32_t version[TOKENS];
  uint32_t experts[TOKENS * LAYERS * TOPK];
} bench_seg;

/* A segment as an actor sends it: text bytes, 3 in 4 tokens sampled,
 * routing recorded for 4 layers x top-2 of 16 experts. */
static void seg_init(bench_seg *b) {
  longhaul__segment__init(&b->seg);
  for (int i = 0; i < TOKENS; i++) {
    b->tokens[i] = (uint32_t)(32 + (i * 37) % 95);
    b->mask[i] = i % 4 != 0;
    b->logp[i] = b->mask[i] ? -0.1f - (float)(i % 13) * 0.3f : 0.0f;
    b->version[i] = 7;
  }
  for (int i = 0; i < TOKENS * LAYERS * TOPK; i++) b->experts[i] = (uint32_t)((i * 5) % 16);
  b->seg.actor = "a0";
  b->seg.env = "needle";
  b->seg.tokens = b->tokens;
  b->seg.n_tokens = TOKENS;
  b->seg.loss_mask.data = b->mask;
  b->seg.loss_mask.len = TOKENS;
  b->seg.behavior_logp = b->logp;
  b->seg.n_behavior_logp = TOKENS;
  b->seg.policy_version = b->version;
  b->seg.n_policy_version = TOKENS;
  b->seg.routed_layers = LAYERS;
  b->seg.routed_topk = TOPK;
  b->seg.routed_experts = b->experts;
  b->seg.n_routed_experts = TOKENS * LAYERS * TOPK;
}

static void remove_db(const char *path) {
  char p[300];
  unlink(path);
  snprintf(p, sizeof p, "%s-wal", path), unlink(p);
  snprintf(p, sizeof p, "%s-shm", path), unlink(p);
}

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

/* wire: store the encoded bytes (as the ingest does), else encode again. */
static void seg_key(bench_seg *b, int k) {
  b->seg.episode_id = (uint64_t)(k / SEGS_PER_EPISODE) + 1;
  b->seg.seq = (uint32_t)(k % SEGS_PER_EPISODE);
  b->seg.start_offset = (uint64_t)b->seg.seq * TOKENS;
}

/* wire: store the segments' encoded bytes (as the ingest does; encoded
 * before the clock starts, since the actor encodes them), else encode each
 * again in the store. */
static double run_store(const char *path, bench_seg *b, int n, int batch, int wire) {
  remove_db(path);
  lh_errbuf e = {0};
  lh_store *s;
  if (lh_store_open(path, &s, &e) < 0) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    exit(1);
  }
  uint8_t **payload = wire ? calloc((size_t)n, sizeof *payload) : NULL;
  size_t *bytes = wire ? calloc((size_t)n, sizeof *bytes) : NULL;
  if (wire && (!payload || !bytes)) goto fail;
  for (int k = 0; wire && k < n; k++) {
    seg_key(b, k);
    if (lh_wire_segment_encode(&b->seg, &payload[k], &bytes[k], &e) < 0) goto fail;
  }
  lh_wire_limits lim; /* what the ingest's decode validated under */
  lh_wire_limits_default(&lim);
  double t0 = now_s();
  for (int i = 0; i < n; i += batch) {
    if (lh_store_begin(s, &e) < 0) goto fail;
    for (int k = i; k < i + batch && k < n; k++) {
      seg_key(b, k);
      int ins;
      int rc = wire ? lh_store_put_segment_wire(s, &b->seg, payload[k], bytes[k], &lim, &ins, &e)
                    : lh_store_put_segment(s, &b->seg, &ins, &e);
      if (rc < 0 || !ins) goto fail;
    }
    if (lh_store_commit(s, &e) < 0) goto fail;
  }
  double dt = now_s() - t0;
  lh_store_close(s);
  for (int k = 0; wire && k < n; k++) free(payload[k]);
  free(payload), free(bytes);
  return n / dt;
fail:
  fprintf(stderr, "bench_store: store: %s\n", e.msg);
  exit(1);
}

static void check(int rc, sqlite3 *db, const char *what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fprintf(stderr, "bench_store: sqlite %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
  }
}

static double run_plain(const char *path, const uint8_t *payload, size_t bytes, int n, int batch) {
  remove_db(path);
  sqlite3 *db;
  check(sqlite3_open(path, &db), db, "open");
  check(sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE segments(episode INTEGER NOT NULL, seq INTEGER NOT NULL,"
                     " payload BLOB, PRIMARY KEY (episode, seq))",
                     NULL, NULL, NULL),
        db, "schema");
  sqlite3_stmt *st;
  check(sqlite3_prepare_v2(db, "INSERT INTO segments(episode, seq, payload) VALUES (?1, ?2, ?3)",
                           -1, &st, NULL),
        db, "prepare");
  double t0 = now_s();
  for (int i = 0; i < n; i += batch) {
    check(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), db, "begin");
    for (int k = i; k < i + batch && k < n; k++) {
      sqlite3_bind_int64(st, 1, k / SEGS_PER_EPISODE + 1);
      sqlite3_bind_int64(st, 2, k % SEGS_PER_EPISODE);
      sqlite3_bind_blob64(st, 3, payload, bytes, SQLITE_STATIC);
      check(sqlite3_step(st), db, "insert");
      sqlite3_reset(st);
    }
    check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "commit");
  }
  double dt = now_s() - t0;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n / dt;
}

/* The --fill mode: a store of n segments at path (which must not exist). */
static int fill(const char *path, long n) {
  static bench_seg b;
  seg_init(&b);
  lh_errbuf e = {0};
  lh_store *s;
  if (lh_store_open(path, &s, &e) < 0) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    return 1;
  }
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.actor = "a0";
  end.env = "needle";
  end.segment_count = SEGS_PER_EPISODE;
  double t0 = now_s();
  for (long i = 0; i < n; i += 64) {
    if (lh_store_begin(s, &e) < 0) goto fail;
    for (long k = i; k < i + 64 && k < n; k++) {
      uint32_t version = (uint32_t)(1 + k / 1024);
      for (int t = 0; t < TOKENS; t++) b.version[t] = b.mask[t] ? version : 0;
      b.seg.episode_id = (uint64_t)(k / SEGS_PER_EPISODE) + 1;
      b.seg.seq = (uint32_t)(k % SEGS_PER_EPISODE);
      b.seg.start_offset = (uint64_t)b.seg.seq * TOKENS;
      int ins;
      if (lh_store_put_segment(s, &b.seg, &ins, &e) < 0 || !ins) goto fail;
      if (b.seg.seq == SEGS_PER_EPISODE - 1) {
        end.episode_id = b.seg.episode_id;
        end.total_tokens = (uint64_t)TOKENS * SEGS_PER_EPISODE;
        end.outcome = b.seg.episode_id % 3 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
        end.reward = b.seg.episode_id % 3 ? 1.0f : 0.0f;
        if (lh_store_put_episode_end(s, &end, &ins, &e) < 0) goto fail;
      }
    }
    if (lh_store_commit(s, &e) < 0) goto fail;
    if ((i / 64) % 1024 == 0 && i > 0)
      fprintf(stderr, "bench_store: %ld of %ld segments\n", i, n);
  }
  double dt = now_s() - t0;
  lh_store_close(s);
  printf("filled %s: %ld segments in %.1f s (%.0f segments/s)\n", path, n, dt, n / dt);
  return 0;
fail:
  fprintf(stderr, "bench_store: store: %s\n", e.msg);
  lh_store_close(s);
  return 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--fill") == 0) {
    long n = argc > 3 ? atol(argv[3]) : 0;
    if (argc != 4 || n <= 0) {
      fprintf(stderr, "usage: bench_store --fill DB SEGMENTS\n");
      return 2;
    }
    lh_log_set_level(LH_LOG_WARN);
    return fill(argv[2], n);
  }
  int n = argc > 1 ? atoi(argv[1]) : 4000;
  int batch = argc > 2 ? atoi(argv[2]) : 64;
  int rounds = argc > 3 ? atoi(argv[3]) : 7;
  if (n <= 0 || batch <= 0 || rounds <= 0) {
    fprintf(stderr, "usage: bench_store [SEGMENTS_PER_ROUND [BATCH [ROUNDS]]]\n");
    return 2;
  }
  lh_log_set_level(LH_LOG_WARN);
  static bench_seg b;
  seg_init(&b);
  b.seg.episode_id = 1;
  uint8_t *payload;
  size_t bytes;
  lh_errbuf e = {0};
  if (lh_wire_segment_encode(&b.seg, &payload, &bytes, &e) < 0) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    return 1;
  }
  char store_path[128], plain_path[128];
  snprintf(store_path, sizeof store_path, "/tmp/lh-bench-store-%d.db", (int)getpid());
  snprintf(plain_path, sizeof plain_path, "/tmp/lh-bench-plain-%d.db", (int)getpid());
  double best_store = 0, best_plain = 0, best_encode = 0;
  for (int r = 0; r < rounds; r++) {
    double p = run_plain(plain_path, payload, bytes, n, batch);
    double s = run_store(store_path, &b, n, batch, 1);
    double c = run_store(store_path, &b, n, batch, 0);
    if (p > best_plain) best_plain = p;
    if (s > best_store) best_store = s;
    if (c > best_encode) best_encode = c;
    printf("round %d: store %.0f seg/s, plain sqlite3 %.0f seg/s, store encoding again %.0f seg/s\n",
           r + 1, s, p, c);
  }
  remove_db(store_path);
  remove_db(plain_path);
  free(payload);
  printf("segment: %d tokens, %d layers x top-%d routing, payload %zu bytes; batch %d; %d segments "
         "per round, best of %d rounds\n",
         TOKENS, LAYERS, TOPK, bytes, batch, n, rounds);
  printf("store/ ingest:      %.0f segments/s (%.1f MB/s of payload)\n", best_store,
         best_store * (double)bytes / 1e6);
  printf("plain sqlite3 loop: %.0f segments/s (%.1f MB/s)\n", best_plain,
         best_plain * (double)bytes / 1e6);
  printf("ratio store/plain:  %.2f (target >= 0.80)\n", best_store / best_plain);
  printf("store encoding each segment again (lh_store_put_segment): %.0f segments/s, %.2f of "
         "plain\n", best_encode, best_encode / best_plain);
  return 0;
}

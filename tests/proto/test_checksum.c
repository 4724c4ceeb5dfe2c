/* Checksums are XXH3-64 (common/common.h lh_xxh3_64): the same numbers as
 * Python's xxhash for the same bytes, a weights message of the older
 * algorithm refused naming both, and the files and store rows written with
 * the older one still read (docs/wire.md "Checksums"). */
#include <check.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case_main.h"
#include "common/common.h"
#include "learner/internal.h"
#include "proto/wire.h"
#include "store/store_internal.h"

#define N_BYTES 100000
/* Lengths on each side of XXH3's internal boundaries (16, 128, 240, a
 * 1024-byte stripe block), and a long one. */
static const size_t lengths[] = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 4096, N_BYTES};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])
#define N_SUMS 200 /* chunks of 500 bytes; over 64: lh_wire_weights_checksum streams 64 at a time */

static void fill(uint8_t *b, size_t n) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[i] = (uint8_t)x;
  }
}

static char tmpdir[64];

static void make_dir(void) {
  strcpy(tmpdir, "/tmp/lh_checksum_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_file(const char *name) {
  char p[160];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  unlink(p);
}

/* Python's xxhash prints, one line each, the XXH3-64 of the first L bytes
 * of the file for every length, then that of N_SUMS little-endian sums. */
static const char py_script[] =
    "import struct, sys, xxhash\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "for n in sys.argv[3:]:\n"
    "    print(xxhash.xxh3_64_intdigest(data[:int(n)]))\n"
    "sums = [xxhash.xxh3_64_intdigest(data[i:i + 500]) for i in range(0, 500 * int(sys.argv[2]), 500)]\n"
    "print(xxhash.xxh3_64_intdigest(b''.join(struct.pack('<Q', s) for s in sums)))\n";

static int python_has_xxhash(void) {
  return access("/usr/bin/python3", X_OK) == 0 &&
         system("/usr/bin/python3 -c 'import xxhash' >/dev/null 2>&1") == 0;
}

START_TEST(test_same_as_python_xxhash) {
  if (!python_has_xxhash()) {
    printf("checksum: /usr/bin/python3 with xxhash (python3-xxhash) not found; skipped\n");
    return;
  }
  make_dir();
  uint8_t *b = malloc(N_BYTES);
  ck_assert_ptr_nonnull(b);
  fill(b, N_BYTES);
  char data[128], script[128], cmd[1024];
  snprintf(data, sizeof data, "%s/data.bin", tmpdir);
  snprintf(script, sizeof script, "%s/sum.py", tmpdir);
  FILE *f = fopen(data, "wb");
  ck_assert(f && fwrite(b, 1, N_BYTES, f) == N_BYTES && fclose(f) == 0);
  f = fopen(script, "w");
  ck_assert(f && fputs(py_script, f) >= 0 && fclose(f) == 0);
  int at = snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %d", script, data, N_SUMS);
  for (size_t i = 0; i < N_LENGTHS; i++) at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %zu", lengths[i]);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < N_LENGTHS; i++) {
    unsigned long long want = 0;
    ck_assert_int_eq(fscanf(p, "%llu", &want), 1);
    ck_assert_msg(lh_wire_checksum(b, lengths[i]) == want, "%zu bytes: %016llx here, %016llx in Python",
                  lengths[i], (unsigned long long)lh_wire_checksum(b, lengths[i]), want);
    ck_assert_uint_eq(lh_xxh3_64(b, lengths[i]), want);
  }
  uint64_t sums[N_SUMS];
  for (int i = 0; i < N_SUMS; i++) sums[i] = lh_wire_checksum(b + 500 * i, 500);
  unsigned long long want = 0;
  ck_assert_int_eq(fscanf(p, "%llu", &want), 1);
  ck_assert_int_eq(pclose(p), 0);
  ck_assert_uint_eq(lh_wire_weights_checksum(sums, N_SUMS), want);
  /* The learner's announcement carries that same number. */
  lh_errbuf e;
  lh_learner_weights *w = lh_learner_weights_new(1, b, 500 * N_SUMS, 500, &e);
  ck_assert_msg(w != NULL, "%s", e.msg);
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  ck_assert_uint_eq(a.checksum, want);
  ck_assert_int_eq(a.checksum_algo, LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64);
  lh_learner_weights_free(w);
  free(b);
  remove_file("data.bin");
  remove_file("sum.py");
  rmdir(tmpdir);
}
END_TEST

/* Encodes env and decodes it: the decoder's code, its message in e. */
static int round_trip(Longhaul__Envelope *env, lh_errbuf *e) {
  env->protocol = LH_WIRE_PROTOCOL;
  env->msg_id = 1;
  env->sender = "learner";
  uint8_t *buf = NULL;
  size_t n = 0;
  ck_assert_int_eq(lh_wire_encode(env, &buf, &n, e), 0);
  Longhaul__Envelope *out = NULL;
  int rc = lh_wire_decode(buf, n, NULL, &out, e);
  lh_wire_free(out);
  free(buf);
  return rc;
}

START_TEST(test_older_algorithm_refused) {
  uint8_t b[3000];
  fill(b, sizeof b);
  lh_errbuf e;
  lh_learner_weights *w = lh_learner_weights_new(4, b, sizeof b, 1024, &e);
  ck_assert_ptr_nonnull(w);
  Longhaul__WeightsAnnounce a;
  longhaul__weights_announce__init(&a);
  lh_learner_weights_announce(w, &a);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
  env.weights_announce = &a;
  ck_assert_msg(round_trip(&env, &e) == 0, "%s", e.msg);
  /* What a learner from before checksum_algo sends: the field absent (0). */
  a.checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_LH_MX64;
  ck_assert_int_eq(round_trip(&env, &e), LH_EWIRE_CHECKSUM_ALGO);
  ck_assert_msg(strstr(e.msg, "checksum_algo=0") && strstr(e.msg, "LH_MX64") && strstr(e.msg, "XXH3_64"), "%s",
                e.msg);
  a.checksum_algo = (Longhaul__ChecksumAlgo)7;
  ck_assert_int_eq(round_trip(&env, &e), LH_EWIRE_CHECKSUM_ALGO);
  ck_assert_msg(strstr(e.msg, "unknown") && strstr(e.msg, "XXH3_64"), "%s", e.msg);

  Longhaul__WeightsChunk c;
  longhaul__weights_chunk__init(&c);
  ck_assert_int_eq(lh_learner_weights_chunk(w, 1, &c, &e), 0);
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
  env.weights_chunk = &c;
  ck_assert_msg(round_trip(&env, &e) == 0, "%s", e.msg);
  c.checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_LH_MX64;
  ck_assert_int_eq(round_trip(&env, &e), LH_EWIRE_CHECKSUM_ALGO);
  ck_assert_msg(strstr(e.msg, "weights_chunk") && strstr(e.msg, "LH_MX64") && strstr(e.msg, "XXH3_64"), "%s",
                e.msg);
  lh_learner_weights_free(w);
}
END_TEST

/* Rewrites the file at dir/name as the format before XXH3 wrote it: the
 * bytes at at (magic or format number) replaced by old, and the trailing
 * 8 bytes lh_hash64 of the rest. */
static void make_legacy_in(const char *dir, const char *name, size_t at, const void *old, size_t old_bytes) {
  char path[LH_LEARNER_TEXT_BYTES + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  ck_assert(size > 16);
  size_t n = (size_t)size;
  uint8_t *buf = malloc(n);
  rewind(f);
  ck_assert(buf && fread(buf, 1, n, f) == n);
  fclose(f);
  memcpy(buf + at, old, old_bytes);
  uint64_t sum = lh_hash64(buf, n - 8, 0);
  for (int i = 0; i < 8; i++) buf[n - 8 + (size_t)i] = (uint8_t)(sum >> (8 * i));
  f = fopen(path, "wb");
  ck_assert(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0);
  free(buf);
}

static void make_legacy(const char *name, size_t at, const void *old, size_t old_bytes) {
  make_legacy_in(tmpdir, name, at, old, old_bytes);
}

START_TEST(test_older_files_still_load) {
  make_dir();
  lh_errbuf e;
  lh_learner_state st, back;
  memset(&st, 0, sizeof st);
  st.step = 77, st.version = 9, st.stage_index = 1;
  lh_learner_adv_baseline_init(&st.baseline, 0.9);
  ck_assert_msg(lh_learner_state_save(tmpdir, &st, &e) == 0, "%s", e.msg);
  const uint8_t format1[4] = {1, 0, 0, 0};
  make_legacy(LH_LEARNER_STATE_FILE, 8, format1, 4);
  ck_assert_msg(lh_learner_state_load(tmpdir, &back, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(back.step, 77);
  ck_assert_uint_eq(back.version, 9);
  /* The format number says which checksum: format 2 with the older one fails. */
  const uint8_t format2[4] = {2, 0, 0, 0};
  make_legacy(LH_LEARNER_STATE_FILE, 8, format2, 4);
  ck_assert_int_eq(lh_learner_state_load(tmpdir, &back, &e), LH_ELEARNER_STATE_CORRUPT);
  ck_assert_msg(strstr(e.msg, "checksum"), "%s", e.msg);

  lh_learner_stage_state s, sback;
  memset(&s, 0, sizeof s);
  s.index = 2, s.began_step = 40, s.episodes = 123;
  ck_assert_msg(lh_learner_stage_save(tmpdir, &s, &e) == 0, "%s", e.msg);
  make_legacy(LH_LEARNER_STAGE_FILE, 0, "LHSTAGE1", 8);
  ck_assert_msg(lh_learner_stage_load(tmpdir, &sback, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(sback.index, 2);
  ck_assert_uint_eq(sback.episodes, 123);
  make_legacy(LH_LEARNER_STAGE_FILE, 0, "LHSTAGE2", 8);
  ck_assert_int_eq(lh_learner_stage_load(tmpdir, &sback, &e), LH_ELEARNER_STATE_CORRUPT);
  remove_file(LH_LEARNER_STATE_FILE);
  remove_file(LH_LEARNER_STAGE_FILE);
  rmdir(tmpdir);
}
END_TEST

/* A checkpoint whose optimizer.bin and episodes_done.bin are of the
 * format before XXH3 (LHOPT001, LHDONE01) resumes. */
START_TEST(test_older_checkpoint_resumes) {
  make_dir();
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 8, c.seed = 11;
  lh_model *m = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &e) == 0, "%s", e.msg);
  char db[160], ck[160], path[LH_LEARNER_TEXT_BYTES];
  snprintf(db, sizeof db, "%s/replay.db", tmpdir);
  snprintf(ck, sizeof ck, "%s/ckpt", tmpdir);
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "%s", e.msg);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  lh_learner_trainer *t = NULL;
  ck_assert_msg(lh_learner_trainer_new(m, s, &cfg, 1.0f, NULL, &t, &e) == 0, "%s", e.msg);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(t, &st);
  ck_assert_msg(lh_learner_ckpt_save(ck, m, &st, t, path, &e) == 0, "%s", e.msg);
  lh_learner_trainer_free(t);
  make_legacy_in(path, LH_LEARNER_OPTIMIZER_FILE, 0, "LHOPT001", 8);
  make_legacy_in(path, LH_LEARNER_EPISODES_FILE, 0, "LHDONE01", 8);
  lh_model *back = NULL;
  char from[LH_LEARNER_TEXT_BYTES];
  ck_assert_msg(lh_learner_ckpt_load_latest(ck, lh_backend_cpu(), &back, &st, from, &e) == 0, "%s", e.msg);
  size_t n = lh_model_n_floats(m);
  ck_assert_int_eq(memcmp(lh_model_moment2(m), lh_model_moment2(back), n * sizeof(float)), 0);
  ck_assert_msg(lh_learner_trainer_new(back, s, &cfg, 1.0f, &st, &t, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_learner_trainer_load_done(t, from, st.ingest_position, &e) == 0, "%s", e.msg);
  /* A new magic with the older checksum is refused. */
  make_legacy_in(path, LH_LEARNER_EPISODES_FILE, 0, "LHDONE02", 8);
  ck_assert_int_eq(lh_learner_trainer_load_done(t, from, st.ingest_position, &e), LH_ELEARNER_CKPT);
  lh_learner_trainer_free(t);
  lh_model_free(back);
  lh_model_free(m);
  lh_store_close(s);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static void sql(sqlite3 *db, const char *text) {
  char *msg = NULL;
  ck_assert_msg(sqlite3_exec(db, text, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", text, msg ? msg : "");
}

static void algo_of(sqlite3 *db, int version, const char *want) {
  sqlite3_stmt *st = NULL;
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT checksum_algo FROM policy_versions WHERE version = ?1", -1, &st,
                                      NULL),
                   SQLITE_OK);
  sqlite3_bind_int(st, 1, version);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), want);
  sqlite3_finalize(st);
}

/* A store of schema 11 (before checksum_algo), made as that build made
 * one (the first 11 migrations of the table, with its version 1 row),
 * migrates on a read-write open: its rows are lh_mx64, the rows written
 * after xxh3_64. */
START_TEST(test_older_store_migrates) {
  make_dir();
  char path[160];
  snprintf(path, sizeof path, "%s/replay.db", tmpdir);
  lh_errbuf e;
  lh_store *s = NULL;
  lh_store_policy_version v = {.version = 1, .step = 1, .checksum = 0x1234, .total_bytes = 10};
  sqlite3 *db = NULL;
  ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
  sql(db, "PRAGMA journal_mode = WAL;");
  for (int i = 0; i < 11; i++) {
    ck_assert_int_eq(lh_store_migrations[i].version, i + 1);
    sql(db, lh_store_migrations[i].sql);
    char row[96];
    snprintf(row, sizeof row, "INSERT INTO migrations VALUES (%d, 'v%d', 0);", i + 1, i + 1);
    sql(db, row);
  }
  sql(db,
      "INSERT INTO meta VALUES ('application', '" LH_STORE_APPLICATION "'), ('schema_version', '11');"
      "INSERT INTO policy_versions(version, step, checksum, total_bytes, created_ms) VALUES (1, 1, 4660, 10, 1);"
      "PRAGMA application_id = 1279808083; PRAGMA user_version = 11;");
  sqlite3_close(db);

  ck_assert_int_eq(lh_store_open_readonly(path, &s, &e), LH_ESTORE_NEEDS_MIGRATION);
  ck_assert_msg(lh_store_open(path, &s, &e) == 0, "%s", e.msg);
  v.version = 2;
  ck_assert_msg(lh_store_put_policy_version(s, &v, NULL, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
  algo_of(db, 1, "lh_mx64");
  algo_of(db, 2, "xxh3_64");
  sqlite3_close(db);
  remove_file("replay.db");
  remove_file("replay.db-wal");
  remove_file("replay.db-shm");
  rmdir(tmpdir);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"python_xxhash", test_same_as_python_xxhash, 0},
      {"older_algorithm_refused", test_older_algorithm_refused, 0},
      {"older_files_load", test_older_files_still_load, 0},
      {"older_checkpoint_resumes", test_older_checkpoint_resumes, 0},
      {"older_store_migrates", test_older_store_migrates, 0},
  };
  return lh_test_cases_main("checksum", cases, sizeof cases / sizeof cases[0], 60, argc, argv);
}

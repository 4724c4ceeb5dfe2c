/* Run identity (docs/operations.md, "Run ids"): the runs row and the run_id of every
 * row after a real learner run, a learner resumed under its run id, an
 * actor of another run refused while one of the right run trains beside
 * it, the store's step from schema 5 to 6, and the rows `longhaul sft`
 * and `longhaul eval` write (eval beside a learner writing the same
 * store). Real `longhaul` processes on ipc:// endpoints in a temporary
 * folder, a tiny model (d 16), real SQLite files.
 *
 * Run one case by its name: test_run_identity CASE. */
#define _GNU_SOURCE
#include "case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "common/run_id.h"
#include "fleet_fixture.h"
#include "learner/internal.h"
#include "peer_fixture.h"
#include "proc_util.h"
#include "store/store_internal.h"

/* ---- reading the store -------------------------------------------------- */

static int first_value(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  ck_assert_int_ge(ncols, 1);
  snprintf(ctx, 4096, "%s", values[0] ? values[0] : "NULL");
  return 0;
}

/* The first column of the first row of sql on the store at db (read-only,
 * beside a running learner), into out (4096 bytes); "" when no row. */
static void sql1(const char *db, const char *sql, char *out) {
  lh_store *s = NULL;
  lh_errbuf e;
  out[0] = 0;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_store_sql(s, sql, first_value, out, NULL, &e) == 0, "%s: %s", sql, e.msg);
  lh_store_close(s);
}

static long long sql_int(const char *db, const char *sql) {
  char v[4096];
  sql1(db, sql, v);
  return atoll(v);
}

/* Starts the learner with extra arguments (NULL-terminated, at most 4). */
static void start_learner_args(fleet *f, const char *const *extra) {
  char log[192], name[32];
  snprintf(name, sizeof name, "learner%d.log", ++f->learner_runs);
  path_in(f, log, sizeof log, name);
  const char *args[10] = {"learner", "--config", f->cfg};
  int n = 3;
  for (int i = 0; extra && extra[i] && n < 9; i++) args[n++] = extra[i];
  args[n] = NULL;
  f->learner = lh_proc_spawn_longhaul(log, args);
  ck_assert_int_gt(f->learner, 0);
}

/* Starts actor i (log a<i>.log, name a<i>) with --run-id run (NULL: none). */
static void start_actor_run(fleet *f, int i, const char *run) {
  char log[192], nm[16], idx[16];
  actor_log(f, i, log, sizeof log);
  snprintf(nm, sizeof nm, "a%d", i);
  snprintf(idx, sizeof idx, "%d", i);
  const char *plain[] = {"actor", "--config", f->cfg, "--name", nm, "--index", idx, NULL};
  const char *with[] = {"actor", "--config", f->cfg, "--name", nm, "--index", idx, "--run-id", run, NULL};
  f->actors[i] = lh_proc_spawn_longhaul(log, run ? with : plain);
  ck_assert_int_gt(f->actors[i], 0);
  if (f->n_actors < i + 1) f->n_actors = i + 1;
}

/* ---- 1. the runs row and run_id everywhere -------------------------------- */

/* A learner without --run-id makes a run id, logs it, writes its runs row
 * (command, the config file's text, version, kind, host, start; its end
 * once stopped) and sets it on every train_steps and policy_versions row;
 * an actor without --run-id (started by hand) trains with it. `longhaul
 * eval` stores its result in the same store while the learner writes it.
 * Resumed, the learner keeps the run id and counts a second start. */
/* "1,2,...,LH_STORE_SCHEMA_VERSION": the migrations table of a current store. */
static const char *all_versions(void) {
  static char list[256];
  size_t n = 0;
  list[0] = 0;
  for (int v = 1; v <= LH_STORE_SCHEMA_VERSION; v++)
    n += (size_t)snprintf(list + n, sizeof list - n, v > 1 ? ",%d" : "%d", v);
  return list;
}

START_TEST(test_runs_row) {
  fleet f;
  fleet_init(&f, "runid-row", NULL, NULL, NULL);
  start_learner(&f, 0);
  start_actor_run(&f, 0, NULL);
  ck_assert_msg(WAIT_FOR(120, train_rows(f.db) >= 3), "no 3 train steps (see %s)", f.dir);
  char log[192], v[4096];
  learner_log(&f, 1, log, sizeof log);
  char run[LH_STORE_NAME_BYTES];
  sql1(f.db, "SELECT run_id FROM runs", run);
  lh_errbuf e;
  ck_assert_msg(lh_run_id_check(run, &e) == 0, "runs.run_id '%s': %s", run, e.msg);
  ck_assert_msg(strlen(run) == 23 && run[8] == 'T' && run[15] == 'Z' && run[16] == '-', "run id '%s'", run);
  char line[320];
  snprintf(line, sizeof line, "run run_id=%s from=new", run);
  ck_assert_msg(lh_proc_file_has(log, line), "the learner does not log '%s' (see %s)", line, log);

  /* eval beside the running learner, into its store */
  char ckpt[192], cmd[1024], out[8192];
  path_in(&f, ckpt, sizeof ckpt, "ckpt");
  ck_assert_msg(WAIT_FOR(60, lh_learner_ckpt_exists(ckpt)), "no checkpoint (see %s)", f.dir);
  snprintf(cmd, sizeof cmd, "%s eval --config %s --ckpt %s --seeds 2 --run-id ev-1 --json 2>&1", lh_proc_longhaul(),
           f.cfg, ckpt);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);

  stop_all(&f);
  f.n_actors = 0;
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM runs WHERE kind = 'learner'"), 1);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM train_steps"), sql_int(f.db, "SELECT count(*) FROM train_steps"
                                                                                    " WHERE run_id = (SELECT run_id FROM runs WHERE kind = 'learner')"));
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM train_steps WHERE run_id IS NULL"), 0);
  ck_assert_int_gt(sql_int(f.db, "SELECT count(*) FROM policy_versions"), 0);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM policy_versions WHERE run_id IS NULL OR run_id <> "
                                 "(SELECT run_id FROM runs WHERE kind = 'learner')"),
                   0);
  sql1(f.db, "SELECT command FROM runs WHERE kind = 'learner'", v);
  ck_assert_msg(strstr(v, "longhaul learner --config ") && strstr(v, f.cfg), "command '%s'", v);
  sql1(f.db, "SELECT config FROM runs WHERE kind = 'learner'", v);
  char *text = lh_proc_read_file(f.cfg);
  ck_assert_ptr_nonnull(text);
  ck_assert_str_eq(v, text);
  free(text);
  sql1(f.db, "SELECT version FROM runs WHERE kind = 'learner'", v);
  ck_assert_str_eq(v, LH_VERSION);
  sql1(f.db, "SELECT host IS NOT NULL AND length(host) > 0 AND started_ms > 0 AND ended_ms >= started_ms"
             " AND outcome = 'ok' AND starts = 1 AND rank = 0 FROM runs WHERE kind = 'learner'", v);
  ck_assert_str_eq(v, "1");
  /* the evaluation: its own run, the checkpoint's step */
  sql1(f.db, "SELECT kind || ' ' || outcome FROM runs WHERE run_id = 'ev-1'", v);
  ck_assert_str_eq(v, "eval ok");
  sql1(f.db, "SELECT run_id || ' ' || kind || ' ' || env || ' ' || episodes || ' ' || (step IS NOT NULL)"
             " || ' ' || (success_rate BETWEEN 0 AND 1) FROM evals", v);
  ck_assert_str_eq(v, "ev-1 eval calc 2 1 1");
  snprintf(cmd, sizeof cmd, "%s replay stats --db %s 2>&1", lh_proc_longhaul(), f.db);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "runs         2 (evaluations 1)"), "%s", out);

  /* resumed: the same run, a second start */
  start_learner(&f, 1);
  learner_log(&f, 2, log, sizeof log);
  snprintf(line, sizeof line, "run run_id=%s from=resumed run", run);
  ck_assert_msg(lh_proc_wait_file(log, line, 60), "the resumed learner does not log '%s' (see %s)", line, log);
  ck_assert_msg(WAIT_FOR(30, sql_int(f.db, "SELECT starts FROM runs WHERE kind = 'learner'") == 2), "starts not 2");
  stop_all(&f);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM runs WHERE kind = 'learner'"), 1);
  sql1(f.db, "SELECT outcome FROM runs WHERE kind = 'learner'", v);
  ck_assert_str_eq(v, "ok");
  fleet_free(&f);
}
END_TEST

/* ---- 2. an actor of another run ---------------------------------------- */

/* A peer's Segment, EpisodeEnd and Hello of run run-b, in that order (the
 * segment before any Hello, as after a reconnection): each is refused by
 * its own run id, the Acks carry the learner's run; nothing is stored.
 * The same episode without a run id (a peer started by hand) is stored. */
static void peer_of_other_run(fleet *f) {
  void *ctx = zmq_ctx_new();
  void *d = lh_peer_dealer(ctx, f->ing, 10000);
  uint32_t tok[4] = {40, 41, 42, 43}, ver[4] = {0};
  uint8_t mask[4] = {0, 1, 1, 1};
  float logp[4] = {0, -1, -1, -1};
  Longhaul__Segment seg = LONGHAUL__SEGMENT__INIT;
  seg.episode_id = 424242, seg.actor = "p9", seg.env = "calc", seg.group_id = 7, seg.task_seed = 7;
  seg.n_tokens = 4, seg.tokens = tok, seg.loss_mask.len = 4, seg.loss_mask.data = mask;
  seg.n_behavior_logp = 4, seg.behavior_logp = logp, seg.n_policy_version = 4, seg.policy_version = ver;
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = 424242, end.actor = "p9", end.env = "calc", end.segment_count = 1, end.total_tokens = 4;
  end.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, end.reward = 1, end.group_id = 7, end.task_seed = 7;
  Longhaul__Hello hello = LONGHAUL__HELLO__INIT;
  hello.role = "actor", hello.name = "p9", hello.run_id = "run-b";
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.run_id = "run-b";
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &seg;
  lh_peer_send(d, &env, 901, "p9");
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
  lh_peer_send(d, &env, 902, "p9");
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &hello;
  lh_peer_send(d, &env, 903, "p9");
  int got = 0;
  while (got < 3) {
    Longhaul__Envelope *a = lh_peer_recv(d);
    ck_assert_int_eq(a->body_case, LONGHAUL__ENVELOPE__BODY_ACK);
    ck_assert_int_eq(a->ack->status, LONGHAUL__ACK_STATUS__ACK_REJECTED);
    ck_assert_str_eq(a->run_id, "run-a");
    ck_assert_msg(strstr(a->ack->reason, "run-b"), "%s", a->ack->reason);
    got += (int)a->ack->n_msg_ids;
    lh_wire_free(a);
  }
  ck_assert_int_eq(sql_int(f->db, "SELECT count(*) FROM episodes WHERE id = 424242"), 0);
  /* without a run id: any run's (its Hello first: the refused one bound
   * no name) */
  lh_peer_hello(d, "p9");
  env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &seg;
  lh_peer_send(d, &env, 904, "p9");
  ck_assert_int_eq(lh_peer_ack_of(d, 904), LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(sql_int(f->db, "SELECT count(*) FROM episodes WHERE id = 424242"), 1);
  zmq_close(d);
  zmq_ctx_term(ctx);
}

/* The learner runs run-a; actor a0 of run-a trains while a1, started with
 * --run-id run-b, is refused: it exits 2 naming both runs, and the store
 * holds nothing of it (no episode, no segment, no heartbeat). A peer's
 * messages of run-b are refused in whatever order they come. Bad
 * --run-id values are usage errors of both commands. */
START_TEST(test_foreign_actor) {
  fleet f;
  fleet_init(&f, "runid-foreign", NULL, NULL, NULL);
  const char *extra[] = {"--run-id", "run-a", NULL};
  start_learner_args(&f, extra);
  start_actor_run(&f, 1, "run-b");
  start_actor_run(&f, 0, "run-a");
  int code = lh_proc_wait(f.actors[1], 90, NULL);
  f.actors[1] = 0;
  char alog[192];
  actor_log(&f, 1, alog, sizeof alog);
  char *text = lh_proc_read_file(alog);
  ck_assert_ptr_nonnull(text);
  ck_assert_msg(code == 2, "the foreign actor exit %d, not 2: %s", code, text);
  ck_assert_msg(strstr(text, "serves run run-a, this actor was started for run run-b"), "no reason in: %s", text);
  free(text);
  ck_assert_msg(WAIT_FOR(120, train_rows(f.db) >= 3), "a0 did not train (see %s)", f.dir);
  char llog[192];
  learner_log(&f, 1, llog, sizeof llog);
  ck_assert_msg(lh_proc_file_has(llog, "of run run-b refused: this learner's run is run-a"), "no refusal logged in %s",
                llog);
  /* a1's name on nothing in the store, a0's on its episodes */
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a1'"), 0);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM segments s JOIN episodes e ON e.id = s.episode"
                                 " WHERE e.actor = 'a1'"),
                   0);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM actor_heartbeats WHERE actor = 'a1'"), 0);
  ck_assert_int_gt(sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0'"), 0);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM train_steps WHERE run_id IS NOT 'run-a'"), 0);
  peer_of_other_run(&f);
  f.n_actors = 1;
  stop_all(&f);
  printf("run_identity: foreign actor exit 2; refused messages %lld (learner's rejected_run); stored of run-b 0;"
         " a0 episodes %lld, train steps %lld\n",
         lh_proc_log_value(llog, "rejected_run"), sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0'"),
         sql_int(f.db, "SELECT count(*) FROM train_steps"));

  char cmd[1024], out[4096];
  const char *bad[] = {"''", "run/1", "'a b'", "x\\$y",
                       "12345678901234567890123456789012345678901234567890123456789012345"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s learner --config %s --run-id %s 2>&1", lh_proc_longhaul(), f.cfg, bad[i]);
    ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 2, "learner --run-id %s: %s", bad[i], out);
    ck_assert_msg(strstr(out, "--run-id"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s actor --config %s --name a9 --run-id %s 2>&1", lh_proc_longhaul(), f.cfg, bad[i]);
    ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 2, "actor --run-id %s: %s", bad[i], out);
  }
  fleet_free(&f);
}
END_TEST

/* ---- 3. run ids on the wire --------------------------------------------- */

/* A new run id is a run id and sorts by time; a message whose envelope
 * or Hello carries something else is refused by the decoder's checks
 * (LH_EWIRE_RUN_ID), an empty one is no run. */
START_TEST(test_run_id_wire) {
  char a[LH_RUN_ID_BYTES], b[LH_RUN_ID_BYTES];
  lh_errbuf e;
  ck_assert_int_eq(lh_run_id_new(a, &e), 0);
  ck_assert_int_eq(lh_run_id_new(b, &e), 0);
  ck_assert_int_eq(lh_run_id_check(a, &e), 0);
  ck_assert_str_ne(a, b);
  ck_assert_int_eq(lh_run_id_check("A-z_0.9", &e), 0);
  ck_assert_int_eq(lh_run_id_check("", &e), LH_EINVAL);
  ck_assert_int_eq(lh_run_id_check(NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_run_id_check("a/b", &e), LH_EINVAL);
  ck_assert_msg(strstr(e.msg, "0x2f at offset 1"), "%s", e.msg);
  char long_id[LH_RUN_ID_MAX + 2];
  memset(long_id, 'x', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = 0;
  ck_assert_int_eq(lh_run_id_check(long_id, &e), LH_EINVAL);
  long_id[LH_RUN_ID_MAX] = 0;
  ck_assert_int_eq(lh_run_id_check(long_id, &e), 0);

  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "a0";
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL, env.sender = "a0", env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  ck_assert_int_eq(lh_wire_validate(&env, NULL, &e), 0);
  env.run_id = "run 1";
  ck_assert_int_eq(lh_wire_validate(&env, NULL, &e), LH_EWIRE_RUN_ID);
  ck_assert_msg(strstr(e.msg, "envelope.run_id"), "%s", e.msg);
  env.run_id = "run-1", h.run_id = "run\n2";
  ck_assert_int_eq(lh_wire_validate(&env, NULL, &e), LH_EWIRE_RUN_ID);
  ck_assert_msg(strstr(e.msg, "hello.run_id"), "%s", e.msg);
  h.run_id = "run-2";
  uint8_t *buf = NULL;
  size_t n = 0;
  ck_assert_int_eq(lh_wire_encode(&env, &buf, &n, &e), 0);
  Longhaul__Envelope *back = NULL;
  ck_assert_msg(lh_wire_decode(buf, n, NULL, &back, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(back->run_id, "run-1");
  ck_assert_str_eq(back->hello->run_id, "run-2");
  lh_wire_free(back);
  free(buf);
}
END_TEST

/* ---- 4. schema 5 to 6 ---------------------------------------------------- */

static void raw_exec(const char *path, const char *sql) {
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(path, &d), SQLITE_OK);
  char *msg = NULL;
  int rc = sqlite3_exec(d, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s", msg ? msg : "");
  sqlite3_close(d);
}

/* A version-5 store with a run, a train step and a policy version of an
 * older build is migrated in place: its rows stay, the runs columns come
 * (starts 1, the rest NULL), evals and sft_steps are there, and the new
 * calls work on it. */
START_TEST(test_migration_v5) {
  char dir[64], db[128];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "runid-mig"), 0);
  snprintf(db, sizeof db, "%s/old.db", dir);
  ck_assert_uint_eq(lh_store_migrations[4].version, 5);
  char *sql = malloc(65536);
  ck_assert_ptr_nonnull(sql);
  int n = 0;
  for (int i = 0; i < 5; i++) n += snprintf(sql + n, 65536 - (size_t)n, "%s", lh_store_migrations[i].sql);
  snprintf(sql + n, 65536 - (size_t)n,
           "INSERT INTO migrations VALUES (1, 'v1', 0), (2, 'v2', 0), (3, 'v3', 0), (4, 'v4', 0), (5, 'v5', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '5');"
           "INSERT INTO runs(run_id, command, config, started_ms) VALUES ('old-run', 'longhaul learner', '[model]', 7);"
           "INSERT INTO train_steps(step, version, run_id, time_ms) VALUES (0, 1, NULL, 9);"
           "INSERT INTO policy_versions(version, step, created_ms) VALUES (1, 0, 9);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 5;",
           LH_STORE_APPLICATION);
  raw_exec(db, sql);
  free(sql);
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open_readonly(db, &s, &e), LH_ESTORE_NEEDS_MIGRATION);
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "%s", e.msg);
  char last[LH_STORE_NAME_BYTES];
  int found = 1;
  ck_assert_int_eq(lh_store_latest_run(s, "learner", last, &found, &e), 0);
  ck_assert_int_eq(found, 0);  /* an old row has no kind */
  lh_store_run run = {.run_id = "new-run", .command = "longhaul sft", .kind = "sft"};
  int inserted = 0;
  ck_assert_int_eq(lh_store_put_run(s, &run, &inserted, &e), 0);
  ck_assert_int_eq(inserted, 1);
  lh_store_eval ev = {.run_id = "new-run", .kind = "sft", .has_step = 1, .step = 4, .env = "calc", .seeds = 4,
                      .episodes = 4, .successes = 1, .reward_mean = 0.5};
  ck_assert_int_eq(lh_store_put_eval(s, &ev, &e), 0);
  lh_store_sft_step st = {.run_id = "new-run", .step = 1, .loss = 2.5, .lr = 1e-3, .tokens = 10};
  ck_assert_int_eq(lh_store_put_sft_step(s, &st, &e), 0);
  ck_assert_int_eq(lh_store_end_run(s, "new-run", "ok", 0, &e), 0);
  lh_store_close(s);
  char v[4096], want[128];
  sql1(db, "PRAGMA user_version", v);
  ck_assert_int_eq(atoi(v), LH_STORE_SCHEMA_VERSION);
  sql1(db, "SELECT group_concat(version) FROM migrations", v);
  ck_assert_str_eq(v, all_versions());
  sql1(db, "SELECT command || ' ' || config || ' ' || started_ms || ' ' || starts || ' ' || (kind IS NULL)"
           " || (version IS NULL) || (ended_ms IS NULL) FROM runs WHERE run_id = 'old-run'", v);
  ck_assert_str_eq(v, "longhaul learner [model] 7 1 111");
  ck_assert_int_eq(sql_int(db, "SELECT count(*) FROM train_steps"), 1);
  sql1(db, "SELECT kind || ' ' || version || ' ' || outcome || ' ' || (ended_ms > 0) FROM runs WHERE run_id = 'new-run'", v);
  snprintf(want, sizeof want, "sft %s ok 1", LH_VERSION);
  ck_assert_str_eq(v, want);
  sql1(db, "SELECT step || ' ' || success_rate || ' ' || reward_mean FROM evals", v);
  ck_assert_str_eq(v, "4 0.25 0.5");
  sql1(db, "SELECT loss || ' ' || tokens FROM sft_steps", v);
  ck_assert_str_eq(v, "2.5 10");
  lh_proc_rmdir(dir);
}
END_TEST

/* ---- 5. sft's rows ------------------------------------------------------- */

/* `longhaul sft --eval-every 1 --db FILE --run-id ID` writes a runs row of
 * kind sft, one sft_steps row per step and one evals row per evaluation;
 * --db none writes nothing; a bad --run-id is a usage error. */
START_TEST(test_sft_rows) {
  fleet f;
  fleet_init(&f, "runid-sft", NULL, NULL, NULL);
  char cmd[1024], out[8192], sdb[192], sdir[192], v[4096];
  path_in(&f, sdb, sizeof sdb, "sft.db");
  path_in(&f, sdir, sizeof sdir, "sft");
  snprintf(cmd, sizeof cmd,
           "%s sft --config %s --env calc --out %s --steps 2 --batch 1 --eval 2 --eval-every 1 --db %s"
           " --run-id sft-1 2>&1",
           lh_proc_longhaul(), f.cfg, sdir, sdb);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "sft: run sft-1 store "), "%s", out);
  sql1(sdb, "SELECT kind || ' ' || outcome || ' ' || (config LIKE '[model]%') FROM runs WHERE run_id = 'sft-1'", v);
  ck_assert_str_eq(v, "sft ok 1");
  sql1(sdb, "SELECT group_concat(step) FROM (SELECT step FROM sft_steps WHERE run_id = 'sft-1' ORDER BY step)", v);
  ck_assert_str_eq(v, "1,2");
  ck_assert_int_eq(sql_int(sdb, "SELECT count(*) FROM sft_steps WHERE loss IS NULL OR lr IS NULL"), 0);
  sql1(sdb, "SELECT group_concat(step || ':' || episodes || ':' || kind) FROM"
            " (SELECT * FROM evals WHERE run_id = 'sft-1' ORDER BY step)", v);
  ck_assert_str_eq(v, "1:2:sft,2:2:sft");
  /* --db none: nothing written; the default is [learner] db */
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s --steps 1 --batch 1 --eval 0 --db none 2>&1",
           lh_proc_longhaul(), f.cfg, sdir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "store none"), "%s", out);
  ck_assert_int_eq(access(f.db, F_OK), -1);
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s --steps 1 --batch 1 --eval 0 2>&1",
           lh_proc_longhaul(), f.cfg, sdir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_int_eq(sql_int(f.db, "SELECT count(*) FROM runs WHERE kind = 'sft'"), 1);
  snprintf(cmd, sizeof cmd, "%s sft --config %s --env calc --out %s --run-id 'a b' 2>&1", lh_proc_longhaul(), f.cfg,
           sdir);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 2);
  fleet_free(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"runs_row", test_runs_row, 0},
      {"foreign_actor", test_foreign_actor, 0},
      {"run_id_wire", test_run_id_wire, 0},
      {"migration_v5", test_migration_v5, 0},
      {"sft_rows", test_sft_rows, 0},
  };
  return lh_test_cases_main("run_identity", cases, sizeof cases / sizeof cases[0], 300, argc, argv);
}

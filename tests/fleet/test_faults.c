/* Fault tests with real processes:
 * `longhaul learner`, `longhaul actor` and `longhaul envs serve` on ipc://
 * endpoints in a temporary folder, a tiny model (d 16). Each fault is
 * injected for real (SIGKILL, SIGSTOP, a store cap lowered at run time
 * through SIGHUP, a read-only store, a corrupted weights chunk on a real
 * socket) and each test prints what it counted on one "faults:" line:
 * messages sent and acked (the actors' own counts, from their last log
 * line), stored (rows in the store) and lost (acked but not stored).
 *
 * Run one fault by its case name: test_faults CASE (faults.cmake registers
 * one ctest entry per case). */
#define _GNU_SOURCE
#include "case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proc_util.h"
#include "proto/wire.h"
#include "fleet_fixture.h"

/* ---- 1. the learner SIGKILLed mid-step and mid-ingest ------------------- */

typedef struct {
  uint64_t n, first, last;
  int contiguous;
} step_rows;

static int on_step(void *ctx, const lh_store_train_step *t) {
  step_rows *r = ctx;
  if (r->n == 0) r->first = t->step, r->contiguous = 1;
  else if (t->step != r->last + 1) r->contiguous = 0;
  r->last = t->step;
  r->n++;
  return 0;
}

/* Mid-step: killed once it has logged 3 training steps (episodes wait, so
 * it is training back to back); restarted with --resume it starts from
 * the last checkpoint's step and version, the actors resend what was not
 * acked, and training goes on. */
START_TEST(test_learner_killed_mid_step) {
  fleet f;
  /* loop 0: the checkpoint one step back; loop 1: four steps back */
  fleet_init(&f, "faults-step", _i ? "ckpt_every = 5\n" : NULL, NULL, NULL);
  int kill_at = _i ? 7 : 3;
  start_learner(&f, 0);
  start_actors(&f, 2);
  ck_assert_msg(WAIT_FOR(60, log_lines(&f, 1, "loss=") >= kill_at), "no %d steps (see %s)", kill_at, f.dir);
  ck_assert_int_eq(kill(f.learner, SIGKILL), 0);
  ck_assert_int_eq(lh_proc_wait(f.learner, 10, NULL), 128 + SIGKILL);
  int steps_before = log_lines(&f, 1, "loss=");
  char log1[192], log2[192];
  learner_log(&f, 1, log1, sizeof log1);
  learner_log(&f, 2, log2, sizeof log2);
  uint64_t ckpt_step = 0, ckpt_version = 0;
  ck_assert_int_eq(lh_proc_log_u64(log1, "checkpoint path=", "step", &ckpt_step), 0);
  ck_assert_int_eq(lh_proc_log_u64(log1, "checkpoint path=", "version", &ckpt_version), 0);
  lh_proc_sleep_ms(1000);  /* the actors go on into their outboxes */
  start_learner(&f, 1);
  uint64_t last_v1 = 0;
  ck_assert_int_eq(lh_proc_log_u64(log1, "loss=", "version", &last_v1), 0);
  /* Training goes on past every version the killed learner published
   * (the actors hold its newest weights until then). */
  ck_assert_msg(WAIT_FOR(60, log_lines(&f, 2, "loss=") >= (int)(last_v1 - ckpt_version) + 6),
                "learner 2 did not pass version %llu (see %s)", (unsigned long long)last_v1, f.dir);
  /* and the actors follow: each swaps in versions well above them all
   * (with the learner stepping back to back, a fetch must still end) */
  for (int i = 0; i < f.n_actors; i++) {
    char alog[192];
    actor_log(&f, i, alog, sizeof alog);
    uint64_t v = 0;
    ck_assert_msg(WAIT_FOR(60, lh_proc_log_u64(alog, "weights swapped", "version", &v) == 0 && v > last_v1 + 4),
                  "actor a%d stays at version %llu, not above %llu (see %s)", i, (unsigned long long)v,
                  (unsigned long long)last_v1 + 4, f.dir);
  }
  uint64_t res_step = 0, res_version = 0, first_step = 0, first_version = 0;
  ck_assert_int_eq(lh_proc_log_u64(log2, "resumed ckpt_dir=", "step", &res_step), 0);
  ck_assert_int_eq(lh_proc_log_u64(log2, "resumed ckpt_dir=", "version", &res_version), 0);
  /* The checkpoint it logged last, or one it wrote as the kill came. */
  ck_assert_uint_ge(res_step, ckpt_step);
  ck_assert_uint_ge(res_version, ckpt_version);
  ck_assert_uint_le(res_version, last_v1);
  FILE *l = fopen(log2, "r");
  ck_assert_ptr_nonnull(l);
  char line[8192];
  while (fgets(line, sizeof line, l)) {
    char *s = strstr(line, " step="), *v = strstr(line, " version=");
    if (strstr(line, "loss=") && s && v) {
      first_step = strtoull(s + 6, NULL, 10), first_version = strtoull(v + 9, NULL, 10);
      break;
    }
  }
  fclose(l);
  /* The first step after the restart is the checkpoint's next one. */
  ck_assert_uint_eq(first_step, res_step);
  ck_assert_uint_eq(first_version, res_version + 1);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  lh_store *s;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open_readonly(f.db, &s, &e), 0);
  step_rows r = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_step, &r, &e), 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  lh_store_close(s);
  uint64_t dups = 0;
  lh_proc_log_u64(log2, "status version=", "duplicates", &dups);
  int went_back = 0;
  for (int i = 0; i < f.n_actors; i++) {
    char alog[192];
    actor_log(&f, i, alog, sizeof alog);
    went_back += lh_proc_count_lines(alog, "the learner went back") > 0;
  }
  char extra[384];
  snprintf(extra, sizeof extra,
           "steps_before_kill=%d last_version_before_kill=%llu checkpoint_step=%llu resumed_first_step=%llu "
           "train_steps_rows=%llu latest_policy_version=%llu duplicates_after_restart=%llu "
           "actors_taking_older_versions=%d",
           steps_before, (unsigned long long)last_v1, (unsigned long long)res_step, (unsigned long long)first_step,
           (unsigned long long)r.n, (unsigned long long)st.latest_policy_version, (unsigned long long)dups, went_back);
  print_totals("learner SIGKILL mid-step", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  ck_assert(r.contiguous);
  ck_assert_uint_eq(r.first, 0);
  ck_assert_uint_gt(r.last, last_v1);
  fleet_free(&f);
}
END_TEST

/* Mid-ingest: no training (a batch never fills), the learner only stores
 * and acks; killed while segments flow, restarted with --resume, the
 * actors resend: every message acked once and stored once. */
START_TEST(test_learner_killed_mid_ingest) {
  fleet f;
  fleet_init(&f, "faults-ingest", "batch_episodes = 4000\n", NULL, NULL);
  start_learner(&f, 0);
  start_actors(&f, 2);
  ck_assert_msg(WAIT_FOR(60, stored_messages(f.db) >= 40), "nothing stored (see %s)", f.dir);
  ck_assert_int_eq(kill(f.learner, SIGKILL), 0);
  ck_assert_int_eq(lh_proc_wait(f.learner, 10, NULL), 128 + SIGKILL);
  uint64_t at_kill = stored_messages(f.db);
  lh_proc_sleep_ms(1000);
  start_learner(&f, 1);
  ck_assert_msg(WAIT_FOR(60, stored_messages(f.db) > at_kill + 20), "nothing stored after the restart");
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  char log2[192];
  learner_log(&f, 2, log2, sizeof log2);
  uint64_t dups = 0, stored2 = 0;
  lh_proc_log_u64(log2, "status version=", "duplicates", &dups);
  lh_proc_log_u64(log2, "status version=", "stored", &stored2);
  char extra[256];
  snprintf(extra, sizeof extra, "stored_at_kill=%llu stored_after_restart=%llu duplicates_after_restart=%llu",
           (unsigned long long)at_kill, (unsigned long long)stored2, (unsigned long long)dups);
  print_totals("learner SIGKILL mid-ingest", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  ck_assert_uint_eq(at_kill + stored2, t.stored);
  fleet_free(&f);
}
END_TEST

/* ---- 2. the env server killed or hung ----------------------------------- */

static void start_server(fleet *f, int run) {
  char log[192], ep[192], name[32];
  snprintf(name, sizeof name, "server%d.log", run);
  path_in(f, log, sizeof log, name);
  snprintf(ep, sizeof ep, "ipc://%s/env", f->dir);
  const char *args[] = {"envs", "serve", "--bind", ep, NULL};
  f->server = lh_proc_spawn_longhaul(log, args);
  ck_assert_int_gt(f->server, 0);
}

static uint64_t ok_after(const char *db, int64_t ms) {
  store_counts c;
  return count_store(db, ms, &c) == 0 ? c.ok_after : 0;
}

static uint64_t errors_after(const char *db, int64_t ms) {
  store_counts c;
  return count_store(db, ms, &c) == 0 ? c.error_after : 0;
}

/* The actor plays calc on a `longhaul envs serve` process. SIGKILL: the
 * episodes in flight end as error, and once a new server is up the actor
 * plays on. SIGSTOP: the steps time out (timeout_ms), the episodes end as
 * error, and after SIGCONT new episodes complete. */
static void env_server_case(int sig) {
  fleet f;
  fleet_init(&f, sig == SIGKILL ? "faults-envkill" : "faults-envhang", "batch_episodes = 4000\n", NULL, NULL);
  snprintf(f.env, sizeof f.env, "name = calc\nstages = 3\nserver = ipc://%s/env\ntimeout_ms = 1000\n", f.dir);
  write_config(&f);
  start_server(&f, 1);
  start_learner(&f, 0);
  start_actors(&f, 1);
  ck_assert_msg(WAIT_FOR(60, ok_after(f.db, 0) >= 4), "no episodes before the fault (see %s)", f.dir);
  int64_t fault_ms = lh_wall_ms();
  ck_assert_int_eq(kill(f.server, sig), 0);
  ck_assert_msg(WAIT_FOR(30, errors_after(f.db, fault_ms) >= 1), "no episode ended as error (see %s)", f.dir);
  int64_t back_ms = lh_wall_ms();
  if (sig == SIGKILL) {
    lh_proc_wait(f.server, 10, NULL);
    char ep[160];
    path_in(&f, ep, sizeof ep, "env");
    unlink(ep);  /* what a killed server leaves behind */
    start_server(&f, 2);
  } else {
    lh_proc_sleep_ms(1500);  /* longer than timeout_ms: later steps time out too */
    back_ms = lh_wall_ms();
    kill(f.server, SIGCONT);
  }
  ck_assert_msg(WAIT_FOR(60, ok_after(f.db, back_ms) >= 4), "the actor did not go on (see %s)", f.dir);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, fault_ms, &c, &t);
  uint64_t ok_back = ok_after(f.db, back_ms);
  char extra[256];
  snprintf(extra, sizeof extra, "error_episodes=%llu after_fault_ok=%llu ok_after_server_back=%llu",
           (unsigned long long)c.by_status[LH_EPISODE_ERROR], (unsigned long long)c.ok_after,
           (unsigned long long)ok_back);
  print_totals(sig == SIGKILL ? "env server SIGKILL" : "env server SIGSTOP", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  ck_assert_uint_ge(c.by_status[LH_EPISODE_ERROR], 1);
  ck_assert_uint_ge(ok_back, 4);
  fleet_free(&f);
}

START_TEST(test_env_server_killed) { env_server_case(SIGKILL); }
END_TEST

START_TEST(test_env_server_hung) { env_server_case(SIGSTOP); }
END_TEST

/* ---- 3. the store full, and read-only ---------------------------------- */

/* The learner's store cap is lowered below what it holds through SIGHUP
 * ([learner] max_db_bytes re-read): segments are answered ACK_RETRY, the
 * store does not grow, the log says why once per interval; the cap is
 * lifted (SIGHUP again) and every message comes in. */
START_TEST(test_store_full) {
  fleet f;
  fleet_init(&f, "faults-full", "max_db_bytes = 0\n", NULL, NULL);
  start_learner(&f, 0);
  start_actors(&f, 2);
  ck_assert_msg(WAIT_FOR(60, stored_messages(f.db) >= 20), "nothing stored (see %s)", f.dir);
  snprintf(f.learner_extra, sizeof f.learner_extra, "max_db_bytes = 4096\n");
  write_config(&f);
  kill(f.learner, SIGHUP);
  ck_assert_msg(WAIT_FOR(30, log_lines(&f, 1, "store batch failed") >= 1), "no store-full warning");
  uint64_t full_at = stored_messages(f.db);
  lh_proc_sleep_ms(3000);  /* the actors resend; nothing goes in */
  uint64_t full_after = stored_messages(f.db);
  int warnings = log_lines(&f, 1, "store batch failed");
  snprintf(f.learner_extra, sizeof f.learner_extra, "max_db_bytes = 0\n");
  write_config(&f);
  kill(f.learner, SIGHUP);
  ck_assert_msg(WAIT_FOR(30, log_lines(&f, 1, "store writes resumed") >= 1), "writes did not resume");
  ck_assert_msg(WAIT_FOR(30, stored_messages(f.db) > full_after + 10), "nothing stored after the cap was lifted");
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  char log1[192];
  learner_log(&f, 1, log1, sizeof log1);
  uint64_t retried = 0;
  lh_proc_log_u64(log1, "status version=", "retried", &retried);
  int rows_skipped = lh_proc_count_lines(log1, "row of step") + lh_proc_count_lines(log1, "row of version");
  char extra[256];
  snprintf(extra, sizeof extra, "stored_while_full=%llu retried=%llu full_warnings=%d metrics_rows_not_stored=%d",
           (unsigned long long)(full_after - full_at), (unsigned long long)retried, warnings, rows_skipped);
  print_totals("store full (max_db_bytes via SIGHUP)", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  ck_assert_uint_eq(full_after, full_at);
  ck_assert_uint_gt(retried, (uint64_t)warnings);
  fleet_free(&f);
}
END_TEST

/* Messages in the store's file alone, without its -wal (what a truncated
 * log leaves): a copy of it read as a store; 0 while a copy is torn by a
 * checkpoint under way. */
static uint64_t file_alone_messages(const fleet *f) {
  char copy[200], cmd[1200];
  path_in(f, copy, sizeof copy, "file-alone.db");
  snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-wal' '%s-shm' && cp '%s' '%s' 2>/dev/null", copy, copy, copy, f->db,
           copy);
  if (system(cmd) != 0) return 0;
  return stored_messages(copy);
}

/* The learner's write-ahead log truncated under it (replay.db-wal to 0
 * bytes), once the store's file alone holds 100 messages: the learner
 * notices at its next commit (that round is answered retry) and stops
 * with exit code 1 and a message naming the -wal; the store reopens whole
 * (before, it read as "not a database": nothing had been checkpointed),
 * with at least what its file held before the truncation. What was acked
 * after the last checkpoint is lost (printed); a learner restarted on it
 * checks it and goes on, the actors resending what was not acked.
 * Members of a shared prefix whose leader's segments went with the log
 * can never be stored (their first tokens are gone): the restarted
 * learner answers them retry until abort_after_ms, then rejected, so the
 * actors flush everything before they exit (those rejected are
 * printed). */
START_TEST(test_wal_truncated) {
  fleet f;
  fleet_init(&f, "faults-wal", "abort_after_ms = 8000\n", "flush_timeout_ms = 30000\n", NULL);
  start_learner(&f, 0);
  start_actors(&f, 2);
  uint64_t in_file = 0;
  ck_assert_msg(WAIT_FOR(300, (in_file = file_alone_messages(&f)) >= 100), "the store's file alone never held "
                "100 messages (see %s)", f.dir);
  uint64_t with_log = stored_messages(f.db);
  char wal[200], log1[192];
  snprintf(wal, sizeof wal, "%s-wal", f.db);
  learner_log(&f, 1, log1, sizeof log1);
  ck_assert_int_eq(truncate(wal, 0), 0);
  int rc = lh_proc_wait(f.learner, 300, NULL);
  f.learner = 0;
  ck_assert_msg(rc == 1, "learner exit %d (see %s)", rc, log1);
  ck_assert_msg(lh_proc_file_has(log1, "longhaul learner: ") && lh_proc_file_has(log1, "replay.db-wal (the "
                "write-ahead log of"), "no message naming the -wal (see %s)", log1);
  uint64_t problems = 1;
  lh_errbuf e;
  ck_assert_msg(lh_store_check_file(f.db, 0, 0, NULL, NULL, &problems, &e) == 0 && problems == 0,
                "the store is not whole: %s (see %s)", e.msg, f.dir);
  uint64_t survived = stored_messages(f.db);
  ck_assert_uint_ge(survived, in_file);
  start_learner(&f, 1);
  char log2[192];
  learner_log(&f, 2, log2, sizeof log2);
  ck_assert_msg(WAIT_FOR(300, stored_messages(f.db) > survived + 20), "nothing stored after the restart (see %s)",
                log2);
  ck_assert_msg(lh_proc_file_has(log2, "unclean shutdown"), "the restarted learner did not check the file (see %s)",
                log2);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  char extra[256];
  snprintf(extra, sizeof extra, "in_file_before=%llu with_log_before=%llu survived=%llu learner_exit=%d",
           (unsigned long long)in_file, (unsigned long long)with_log, (unsigned long long)survived, rc);
  print_totals("write-ahead log truncated under the learner", &t, &c, extra);
  ck_assert_uint_eq(t.unacked, 0);
  ck_assert_uint_gt(t.acked, 0);
  /* What the log alone held when it went is all that was lost. */
  ck_assert_uint_le(t.lost, t.acked - in_file);
  fleet_free(&f);
}
END_TEST

/* Ingest on a store opened read-only, in this process, for a real actor
 * process: every segment is answered ACK_RETRY with the reason logged;
 * then the ingest is rebuilt on the store opened read-write (the same
 * endpoint): the actor reconnects, resends, and everything is stored. */
START_TEST(test_store_readonly) {
  fleet f;
  fleet_init(&f, "faults-ro", NULL, "weights_pub_endpoint = none\n", NULL);
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(f.db, &s, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  ck_assert_msg(lh_store_open_readonly(f.db, &s, &e) == 0, "%s", e.msg);
  void *ctx = zmq_ctx_new();
  lh_learner_ingest *ig = lh_learner_ingest_new(ctx, f.ing, s, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  start_actors(&f, 1);
  size_t handled;
  for (int i = 0; i < 1000 && lh_learner_ingest_get_counts(ig)->retried < 50; i++)
    ck_assert_int_eq(lh_learner_ingest_poll(ig, 10, &handled, &e), 0);
  lh_learner_ingest_counts ro = *lh_learner_ingest_get_counts(ig);
  ck_assert_uint_ge(ro.retried, 50);
  ck_assert_uint_eq(ro.stored, 0);
  lh_learner_ingest_free(ig);
  lh_store_close(s);
  ck_assert_msg(lh_store_open(f.db, &s, &e) == 0, "%s", e.msg);
  ig = lh_learner_ingest_new(ctx, f.ing, s, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  for (int i = 0; i < 1000 && lh_learner_ingest_get_counts(ig)->stored < 40; i++)
    ck_assert_int_eq(lh_learner_ingest_poll(ig, 10, &handled, &e), 0);
  kill(f.actors[0], SIGTERM);
  int rc = -1;
  for (int i = 0; i < 4000 && rc < 0; i++) {
    ck_assert_int_eq(lh_learner_ingest_poll(ig, 10, &handled, &e), 0);
    rc = lh_proc_poll(f.actors[0]);
  }
  f.actors[0] = 0;
  ck_assert_int_eq(rc, 0);
  lh_learner_ingest_counts rw = *lh_learner_ingest_get_counts(ig);
  lh_learner_ingest_free(ig);
  lh_store_close(s);
  zmq_ctx_term(ctx);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  char extra[256];
  snprintf(extra, sizeof extra, "retried_read_only=%llu stored_read_write=%llu duplicates=%llu",
           (unsigned long long)ro.retried, (unsigned long long)rw.stored, (unsigned long long)rw.duplicates);
  print_totals("store read-only", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  ck_assert_uint_eq(rw.stored, t.acked);
  fleet_free(&f);
}
END_TEST

/* ---- 4. a corrupted weights chunk --------------------------------------- */

/* The test is the learner: it binds the ingest ROUTER (acking every
 * Segment and EpisodeEnd), the weights PUB and ROUTER, and serves version 1
 * in chunks, the first answer to chunk CORRUPT_CHUNK corrupted. Loop 0: a
 * byte flipped, the chunk's own checksum left (the chunk is refused, asked
 * for again after resend_timeout_ms); loop 1: a byte flipped and the
 * chunk checksum recomputed (the whole version's checksum fails and it is
 * fetched again from scratch). Until the good fetch completes, every
 * sampled token still carries version 0. */
#define CORRUPT_CHUNK 2

typedef struct {
  void *ctx, *router, *pub, *wsock;
  uint64_t seg_v0, seg_v1, segs_after_bad;
  int bad_served, good_done;  /* good_done: every chunk served after the bad one */
  uint64_t v1_before_good;    /* sampled version-1 tokens seen before that */
  uint32_t served_after_bad;
} fake_learner;

static void *bind_sock(void *ctx, int type, const char *ep) {
  void *s = zmq_socket(ctx, type);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_msg(zmq_bind(s, ep) == 0, "bind %s: %s", ep, zmq_strerror(zmq_errno()));
  return s;
}

static void send_env(void *sock, zmq_msg_t *id, Longhaul__Envelope *env) {
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  env->protocol = LH_WIRE_PROTOCOL;
  env->sender = "learner";
  ck_assert_int_eq(lh_wire_encode(env, &buf, &n, &e), 0);
  if (id) zmq_send(sock, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
  zmq_send(sock, buf, n, 0);
  free(buf);
}

static void serve_ingest(fake_learner *fl) {
  zmq_pollitem_t it = {fl->router, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&it, 1, 0) > 0) {
    zmq_msg_t id, pl;
    zmq_msg_init(&id);
    zmq_msg_init(&pl);
    zmq_msg_recv(&id, fl->router, 0);
    zmq_msg_recv(&pl, fl->router, 0);
    Longhaul__Envelope *env = NULL;
    lh_errbuf e;
    ck_assert_int_eq(lh_wire_decode(zmq_msg_data(&pl), zmq_msg_size(&pl), NULL, &env, &e), 0);
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT) {
      Longhaul__Segment *s = env->segment;
      for (size_t t = 0; t < s->n_tokens; t++) {
        if (!s->loss_mask.data[t]) continue;
        if (s->policy_version[t] == 0) fl->seg_v0++;
        if (s->policy_version[t] == 1) {
          fl->seg_v1++;
          if (!fl->good_done) fl->v1_before_good++;
        }
      }
      if (fl->bad_served) fl->segs_after_bad++;
    }
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_SEGMENT || env->body_case == LONGHAUL__ENVELOPE__BODY_EPISODE_END ||
        env->body_case == LONGHAUL__ENVELOPE__BODY_HELLO) {
      uint64_t mid = env->msg_id;
      Longhaul__Ack ack = LONGHAUL__ACK__INIT;
      ack.n_msg_ids = 1;
      ack.msg_ids = &mid;
      ack.status = LONGHAUL__ACK_STATUS__ACK_STORED;
      Longhaul__Envelope out = LONGHAUL__ENVELOPE__INIT;
      out.msg_id = mid;
      out.body_case = LONGHAUL__ENVELOPE__BODY_ACK;
      out.ack = &ack;
      send_env(fl->router, &id, &out);
    }
    lh_wire_free(env);
    zmq_msg_close(&id);
    zmq_msg_close(&pl);
  }
}

static void corrupted_chunk_case(int recompute) {
  fleet f;
  fleet_init(&f, "faults-weights", NULL, "max_steps = 50\n", NULL);
  /* A checkpoint for the actor to start from (version 0). */
  lh_model_config mc;
  lh_errbuf e;
  ck_assert_int_eq(lh_model_config_parse_file(f.cfg, &mc, &e), 0);
  lh_model *m0 = NULL, *m1 = NULL;
  ck_assert_int_eq(lh_model_new(&mc, lh_backend_cpu(), &m0, &e), 0);
  char ckpt[192];
  path_in(&f, ckpt, sizeof ckpt, "ckpt0");
  ck_assert_msg(lh_model_save(m0, ckpt, &e) == 0, "%s", e.msg);
  lh_model_free(m0);
  mc.seed = 77;
  ck_assert_int_eq(lh_model_new(&mc, lh_backend_cpu(), &m1, &e), 0);
  unsigned char *bytes = NULL;
  size_t n = 0;
  ck_assert_int_eq(lh_model_serialize(m1, &bytes, &n), 0);
  lh_model_free(m1);
  lh_learner_weights *w = lh_learner_weights_new(1, bytes, n, 4096, &e);
  ck_assert_msg(w != NULL, "%s", e.msg);
  free(bytes);
  ck_assert_uint_gt(lh_learner_weights_chunk_count(w), CORRUPT_CHUNK);
  fake_learner fl;
  memset(&fl, 0, sizeof fl);
  fl.ctx = zmq_ctx_new();
  char ep[192];
  fl.router = bind_sock(fl.ctx, ZMQ_ROUTER, f.ing);
  snprintf(ep, sizeof ep, "ipc://%s/pub", f.dir);
  fl.pub = bind_sock(fl.ctx, ZMQ_PUB, ep);
  snprintf(ep, sizeof ep, "ipc://%s/w", f.dir);
  fl.wsock = bind_sock(fl.ctx, ZMQ_ROUTER, ep);
  char log[192];
  actor_log(&f, 0, log, sizeof log);
  const char *args[] = {"actor", "--config", f.cfg, "--name", "a0", "--ckpt", ckpt, NULL};
  f.actors[0] = lh_proc_spawn_longhaul(log, args);
  f.n_actors = 1;
  uint32_t chunks = lh_learner_weights_chunk_count(w);
  uint8_t *served_good = calloc(chunks, 1);
  uint64_t requests = 0, requests_after_bad = 0;
  /* Sampling first, then the announcement (repeated: SUB joins late). */
  for (int i = 0; i < 3000 && fl.seg_v0 == 0; i++) serve_ingest(&fl), lh_proc_sleep_ms(10);
  ck_assert_uint_gt(fl.seg_v0, 0);
  uint64_t v0_at_bad = 0;
  for (int i = 0; i < 6000 && !(fl.good_done && fl.seg_v1 > 0); i++) {
    if (i % 20 == 0 && !fl.good_done) {
      Longhaul__WeightsAnnounce a = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
      lh_learner_weights_announce(w, &a);
      /* With the chunk checksums announced, the recomputed chunk is refused
       * on arrival (test_weights_delta covers it); without them, as from a
       * learner before they were announced, only the whole-version
       * checksum catches it. */
      if (recompute) a.n_chunk_checksums = 0;
      Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
      env.msg_id = (uint64_t)i + 1;
      env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE;
      env.weights_announce = &a;
      send_env(fl.pub, NULL, &env);
    }
    zmq_pollitem_t it = {fl.wsock, 0, ZMQ_POLLIN, 0};
    /* After the bad chunk, requests wait until the actor has sent a few
     * more segments: it must keep sampling at version 0 meanwhile. */
    while ((!fl.bad_served || fl.segs_after_bad >= 3) && zmq_poll(&it, 1, 0) > 0) {
      zmq_msg_t id, pl;
      zmq_msg_init(&id);
      zmq_msg_init(&pl);
      zmq_msg_recv(&id, fl.wsock, 0);
      zmq_msg_recv(&pl, fl.wsock, 0);
      Longhaul__Envelope *req = NULL;
      ck_assert_int_eq(lh_wire_decode(zmq_msg_data(&pl), zmq_msg_size(&pl), NULL, &req, &e), 0);
      ck_assert_int_eq(req->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST);
      requests++;
      if (fl.bad_served) requests_after_bad++;
      uint32_t first, count;
      ck_assert_msg(lh_learner_weights_serve(w, req->weights_request, &first, &count, &e) == 0, "%s", e.msg);
      for (uint32_t c = first; c < first + count; c++) {
        Longhaul__WeightsChunk ch = LONGHAUL__WEIGHTS_CHUNK__INIT;
        ck_assert_int_eq(lh_learner_weights_chunk(w, c, &ch, &e), 0);
        uint8_t *copy = NULL, *orig = ch.data.data;
        if (c == CORRUPT_CHUNK && !fl.bad_served) {
          copy = malloc(ch.data.len);
          memcpy(copy, ch.data.data, ch.data.len);
          copy[ch.data.len / 2] ^= 0x5a;
          ch.data.data = copy;
          if (recompute) ch.checksum = lh_wire_checksum(copy, ch.data.len);
          fl.bad_served = 1;
          v0_at_bad = fl.seg_v0;
        } else if (fl.bad_served) {
          served_good[c] = 1;
        }
        Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
        env.msg_id = c + 1;
        env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK;
        env.weights_chunk = &ch;
        /* A chunk whose bytes fail its own checksum does not pass
         * lh_wire_encode's checks either; send the bytes as encoded with
         * the good data, then patch them. */
        if (copy && !recompute) {
          ch.data.data = orig;
          uint8_t *buf;
          size_t bn;
          env.protocol = LH_WIRE_PROTOCOL;
          env.sender = "learner";
          ck_assert_int_eq(lh_wire_encode(&env, &buf, &bn, &e), 0);
          uint8_t *hit = memmem(buf, bn, ch.data.data, ch.data.len);
          ck_assert_ptr_nonnull(hit);
          hit[ch.data.len / 2] ^= 0x5a;
          zmq_send(fl.wsock, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
          zmq_send(fl.wsock, buf, bn, 0);
          free(buf);
        } else {
          send_env(fl.wsock, &id, &env);
        }
        free(copy);
      }
      if (fl.bad_served) {
        int all = 1;
        /* Loop 0 refetches the one refused chunk; loop 1 every chunk. */
        for (uint32_t c = 0; c < chunks; c++)
          if (recompute ? !served_good[c] : (c == CORRUPT_CHUNK && !served_good[c])) all = 0;
        if (all) fl.good_done = 1;
      }
      lh_wire_free(req);
      zmq_msg_close(&id);
      zmq_msg_close(&pl);
    }
    serve_ingest(&fl);
    lh_proc_sleep_ms(5);
  }
  uint64_t v0_between = 0;
  kill(f.actors[0], SIGTERM);
  for (int i = 0; i < 3000 && lh_proc_alive(f.actors[0]); i++) {
    serve_ingest(&fl);
    int rc = lh_proc_poll(f.actors[0]);
    if (rc >= 0) {
      ck_assert_int_eq(rc, 0);
      f.actors[0] = 0;
      break;
    }
    lh_proc_sleep_ms(10);
  }
  ck_assert_int_eq(f.actors[0], 0);
  v0_between = fl.seg_v0 - v0_at_bad;
  int swaps = lh_proc_count_lines(log, "weights swapped version=1");
  int refused = lh_proc_count_lines(log, "weights chunk refused") + lh_proc_count_lines(log, "bad weights message");
  printf("faults: corrupted weights chunk (%s): chunks=%u requests=%llu requests_after_bad=%llu "
         "v0_tokens_after_bad=%llu v1_tokens_before_good=%llu v1_tokens=%llu swaps=%d refusals_logged=%d\n",
         recompute ? "whole-version checksum" : "chunk checksum", chunks, (unsigned long long)requests,
         (unsigned long long)requests_after_bad, (unsigned long long)v0_between,
         (unsigned long long)fl.v1_before_good, (unsigned long long)fl.seg_v1, swaps, refused);
  ck_assert(fl.bad_served && fl.good_done);
  ck_assert_uint_gt(requests_after_bad, 0);
  ck_assert_uint_gt(v0_between, 0);      /* the old weights stayed in use */
  ck_assert_uint_eq(fl.v1_before_good, 0);
  ck_assert_uint_gt(fl.seg_v1, 0);       /* and the good version came in */
  ck_assert_int_eq(swaps, 1);
  ck_assert_int_ge(refused, 1);
  free(served_good);
  lh_learner_weights_free(w);
  zmq_close(fl.router);
  zmq_close(fl.pub);
  zmq_close(fl.wsock);
  zmq_ctx_term(fl.ctx);
  fleet_free(&f);
}

START_TEST(test_weights_chunk_corrupted) { corrupted_chunk_case(0); }
END_TEST

START_TEST(test_weights_chunk_recomputed) { corrupted_chunk_case(1); }
END_TEST

/* A learner that steps back to back replaces a version before the
 * actors' requests for it are read. The publisher still serves the
 * version before the current one: a request for version 1 read after
 * version 2 was set gets version 1's chunks (not a redirect to 2, which a
 * learner publishing every step would replace again before the next
 * request, so that no fetch would ever end), and they verify. */
START_TEST(test_weights_replaced_mid_fetch) {
  char dir[64], pub_ep[128], w_ep[128];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "faults-wrep"), 0);
  snprintf(pub_ep, sizeof pub_ep, "ipc://%s/pub", dir);
  snprintf(w_ep, sizeof w_ep, "ipc://%s/w", dir);
  lh_errbuf e;
  void *ctx = zmq_ctx_new();
  lh_learner_publisher *p = lh_learner_publisher_new(ctx, pub_ep, w_ep, 4096, &e);
  ck_assert_msg(p != NULL, "%s", e.msg);
  uint8_t v1[20000], v2[20000];
  for (size_t i = 0; i < sizeof v1; i++) v1[i] = (uint8_t)(i * 7), v2[i] = (uint8_t)(i * 7 + 1);
  ck_assert_int_eq(lh_learner_publisher_set(p, 1, v1, sizeof v1, 0, 0, 0.0f, &e), 0);
  lh_learner_weights *ref = lh_learner_weights_new(1, v1, sizeof v1, 4096, &e);
  Longhaul__WeightsAnnounce ann = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
  lh_learner_weights_announce(ref, &ann);
  lh_actors_weights *fetch = lh_actors_weights_new(1 << 20, &e);
  ck_assert_int_eq(lh_actors_weights_announce(fetch, &ann, &e), 1);
  void *dealer = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(dealer, w_ep), 0);
  Longhaul__WeightsRequest req = LONGHAUL__WEIGHTS_REQUEST__INIT;
  ck_assert_int_eq(lh_actors_weights_next_request(fetch, 64, &req), 1);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.msg_id = 1;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST;
  env.weights_request = &req;
  send_env(dealer, NULL, &env);
  /* the next step's version replaces it before the request is read */
  ck_assert_int_eq(lh_learner_publisher_set(p, 2, v2, sizeof v2, 0, 0, 0.0f, &e), 0);
  size_t served = 0;
  for (int i = 0; i < 500 && served == 0; i++) ck_assert_int_eq(lh_learner_publisher_poll(p, 10, &served, &e), 0);
  ck_assert_uint_eq(served, 1);
  int done = 0, chunks = 0;
  zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
  while (!done && zmq_poll(&it, 1, 2000) > 0) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    ck_assert_int_ge(zmq_msg_recv(&m, dealer, 0), 0);
    Longhaul__Envelope *got = NULL;
    ck_assert_int_eq(lh_wire_decode(zmq_msg_data(&m), zmq_msg_size(&m), NULL, &got, &e), 0);
    ck_assert_msg(got->body_case == LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK, "a %s instead of version 1's chunks",
                  lh_wire_body_name(got->body_case));
    chunks++;
    int rc = lh_actors_weights_add_chunk(fetch, got->weights_chunk, &e);
    ck_assert_int_ge(rc, 0);
    done = rc == 1;
    lh_wire_free(got);
    zmq_msg_close(&m);
  }
  uint64_t version = 0;
  size_t nbytes = 0;
  const uint8_t *b = lh_actors_weights_latest(fetch, &version, &nbytes);
  printf("faults: weights replaced mid-fetch: chunks=%d version=%llu redirects=%llu\n", chunks,
         (unsigned long long)version, (unsigned long long)lh_learner_publisher_get_counts(p)->redirects);
  ck_assert(done);
  ck_assert_uint_eq(version, 1);
  ck_assert_uint_eq(nbytes, sizeof v1);
  ck_assert(memcmp(b, v1, sizeof v1) == 0);
  ck_assert_uint_eq(lh_learner_publisher_get_counts(p)->redirects, 0);
  zmq_close(dealer);
  lh_actors_weights_free(fetch);
  lh_learner_weights_free(ref);
  lh_learner_publisher_free(p);
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

/* After a reconnect (the learner may have restarted from a checkpoint)
 * the next announcement is fetched even with an older version number, or
 * the same number with other bytes; without one, neither is. */
START_TEST(test_weights_after_learner_restart) {
  lh_errbuf e;
  lh_actors_weights *w = lh_actors_weights_new(1 << 20, &e);
  uint8_t a[9000], b[9000];
  for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)i, b[i] = (uint8_t)(i + 3);
  lh_learner_weights *v7 = lh_learner_weights_new(7, a, sizeof a, 4096, &e);
  lh_learner_weights *v5 = lh_learner_weights_new(5, b, sizeof b, 4096, &e);
  lh_learner_weights *v7b = lh_learner_weights_new(7, b, sizeof b, 4096, &e);
  Longhaul__WeightsAnnounce an = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
  lh_learner_weights_announce(v7, &an);
  ck_assert_int_eq(lh_actors_weights_announce(w, &an, &e), 1);
  for (uint32_t c = 0; c < lh_learner_weights_chunk_count(v7); c++) {
    Longhaul__WeightsChunk ch = LONGHAUL__WEIGHTS_CHUNK__INIT;
    ck_assert_int_eq(lh_learner_weights_chunk(v7, c, &ch, &e), 0);
    ck_assert_int_ge(lh_actors_weights_add_chunk(w, &ch, &e), 0);
  }
  uint64_t version = 0;
  ck_assert_ptr_nonnull(lh_actors_weights_latest(w, &version, NULL));
  ck_assert_uint_eq(version, 7);
  Longhaul__WeightsAnnounce older = LONGHAUL__WEIGHTS_ANNOUNCE__INIT, same = LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
  lh_learner_weights_announce(v5, &older);
  lh_learner_weights_announce(v7b, &same);
  ck_assert_int_eq(lh_actors_weights_announce(w, &older, &e), 0);
  ck_assert_int_eq(lh_actors_weights_announce(w, &same, &e), 0);
  ck_assert_int_eq(lh_actors_weights_announce(w, &an, &e), 0);
  lh_actors_weights_restarted(w);
  ck_assert_int_eq(lh_actors_weights_announce(w, &an, &e), 0);  /* the very same weights */
  lh_actors_weights_restarted(w);
  ck_assert_int_eq(lh_actors_weights_announce(w, &same, &e), 1);
  lh_actors_weights_restarted(w);
  ck_assert_int_eq(lh_actors_weights_announce(w, &older, &e), 1);
  ck_assert_int_eq(lh_actors_weights_announce(w, &same, &e), 1);  /* newer than 5 */
  printf("faults: weights after a learner restart: older and same-numbered versions taken once reconnected\n");
  lh_learner_weights_free(v7), lh_learner_weights_free(v5), lh_learner_weights_free(v7b);
  lh_actors_weights_free(w);
}
END_TEST

/* ---- 5. load: 8 actors, long episodes, full speed ----------------------- */

#define LOAD_SECONDS 20

START_TEST(test_load_eight_actors) {
  fleet f;
  fleet_init(&f, "faults-load", "batch_episodes = 8\ngroup_size = 4\ntrain_window = 256\nckpt_every = 20\n",
             "max_context = 2048\nsegment_tokens = 128\noutbox_messages = 64\n",
             "name = needle\ntokens = 1200\n");
  start_learner(&f, 0);
  start_actors(&f, MAX_ACTORS);
  long hwm[MAX_ACTORS + 1];
  for (int i = 0; i <= MAX_ACTORS; i++) hwm[i] = -1;
  uint64_t peak_stored = 0;
  for (int s = 0; s < LOAD_SECONDS * 4; s++) {
    lh_proc_sleep_ms(250);
    for (int i = 0; i < MAX_ACTORS; i++) {
      long k = lh_proc_vmhwm_kb(f.actors[i]);
      if (k > hwm[i]) hwm[i] = k;
    }
    long k = lh_proc_vmhwm_kb(f.learner);
    if (k > hwm[MAX_ACTORS]) hwm[MAX_ACTORS] = k;
  }
  peak_stored = stored_messages(f.db);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  char log1[192];
  learner_log(&f, 1, log1, sizeof log1);
  int steps = lh_proc_count_lines(log1, "loss=");
  uint64_t tokens = 0;
  for (int i = 0; i < MAX_ACTORS; i++) {
    char log[192];
    uint64_t tk = 0;
    actor_log(&f, i, log, sizeof log);
    lh_proc_log_u64(log, "stopped name=", "tokens", &tk);
    tokens += tk;
  }
  char extra[512];
  int at = snprintf(extra, sizeof extra,
                    "seconds=%d tokens=%llu steps=%d pauses=%llu stored_at_stop=%llu vmhwm_kb: learner=%ld",
                    LOAD_SECONDS, (unsigned long long)tokens, steps, (unsigned long long)t.pauses,
                    (unsigned long long)peak_stored, hwm[MAX_ACTORS]);
  for (int i = 0; i < MAX_ACTORS && at < (int)sizeof extra; i++)
    at += snprintf(extra + at, sizeof extra - (size_t)at, " a%d=%ld", i, hwm[i]);
  print_totals("load, 8 actors", &t, &c, extra);
  assert_nothing_lost(&t, &c);
  for (int i = 0; i <= MAX_ACTORS; i++) ck_assert_int_gt(hwm[i], 0);
  fleet_free(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"learner_kill_step", test_learner_killed_mid_step, 0},
      {"learner_kill_step_back4", test_learner_killed_mid_step, 1},
      {"learner_kill_ingest", test_learner_killed_mid_ingest, 0},
      {"env_server_kill", test_env_server_killed, 0},
      {"env_server_hang", test_env_server_hung, 0},
      {"store_full", test_store_full, 0},
      {"store_readonly", test_store_readonly, 0},
      {"wal_truncated", test_wal_truncated, 0},
      {"weights_corrupt", test_weights_chunk_corrupted, 0},
      {"weights_corrupt_whole", test_weights_chunk_recomputed, 0},
      {"weights_replaced_mid_fetch", test_weights_replaced_mid_fetch, 0},
      {"weights_learner_restart", test_weights_after_learner_restart, 0},
      {"load", test_load_eight_actors, 0},
  };
  return lh_test_cases_main("faults", cases, sizeof cases / sizeof cases[0], 170, argc, argv);
}

/* The fleet harness of the process tests (fleet_fixture.h). */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet_fixture.h"
#include "proc_util.h"

void path_in(const fleet *f, char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", f->dir, name);
}

/* Appends the section's base lines to out, leaving out each key the
 * extra lines give (they come after, so a test overrides any default). */
static void section(char *out, size_t cap, const char *base, const char *extra) {
  char line[512];
  for (const char *p = base; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    snprintf(line, sizeof line, "%.*s", (int)n, p);
    p += n + (nl != NULL);
    char key[128];
    int given = 0;
    if (sscanf(line, "%127[^ =]", key) == 1) {
      char pat[160];
      snprintf(pat, sizeof pat, "\n%s =", key);
      char with_nl[1024];
      snprintf(with_nl, sizeof with_nl, "\n%s", extra);
      given = strstr(with_nl, pat) != NULL;
    }
    if (!given) strncat(out, line, cap - strlen(out) - 1), strncat(out, "\n", cap - strlen(out) - 1);
  }
  strncat(out, extra, cap - strlen(out) - 1);
}

/* Writes the config from the extras (kept in f, so a test may rewrite it
 * with one key changed). */
void write_config(fleet *f) {
  char text[8192] = "[model]\n", base[2048];
  section(text, sizeof text,
          "d_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
          "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n",
          f->model_extra);
  strncat(text, "[learner]\n", sizeof text - strlen(text) - 1);
  snprintf(base, sizeof base,
           "batch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 2\n"
           "warmup_steps = 0\ntotal_steps = 100000\nmax_policy_lag = 1000\n"
           /* the tiny model's groups are flat (every reward 0); the
            * tests count its steps */
           "skip_flat_groups = false\n"
           "ingest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\nweights_endpoint = ipc://%s/w\n"
           "db = %s\nckpt_dir = %s/ckpt\n",
           f->dir, f->dir, f->dir, f->db, f->dir);
  section(text, sizeof text, base, f->learner_extra);
  strncat(text, "[actor]\n", sizeof text - strlen(text) - 1);
  snprintf(base, sizeof base,
           "learner_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\n"
           "weights_endpoint = ipc://%s/w\nmax_context = 400\ngroup_size = 4\nbatch = 4\n"
           "resend_timeout_ms = 500\nheartbeat_ms = 200\nflush_timeout_ms = 15000\n",
           f->dir, f->dir, f->dir);
  section(text, sizeof text, base, f->actor_extra);
  strncat(text, "[env]\n", sizeof text - strlen(text) - 1);
  strncat(text, f->env[0] ? f->env : "name = calc\n", sizeof text - strlen(text) - 1);
  ck_assert_int_eq(lh_proc_write_file(f->cfg, text), 0);
}

void fleet_init(fleet *f, const char *tag, const char *learner_extra, const char *actor_extra,
                       const char *env) {
  memset(f, 0, sizeof *f);
  ck_assert_msg(lh_proc_longhaul() != NULL, "LH_BIN is not set");
  ck_assert_int_eq(lh_proc_tmpdir(f->dir, sizeof f->dir, tag), 0);
  path_in(f, f->cfg, sizeof f->cfg, "run.ini");
  path_in(f, f->db, sizeof f->db, "replay.db");
  snprintf(f->ing, sizeof f->ing, "ipc://%s/ing", f->dir);
  snprintf(f->learner_extra, sizeof f->learner_extra, "%s", learner_extra ? learner_extra : "");
  snprintf(f->actor_extra, sizeof f->actor_extra, "%s", actor_extra ? actor_extra : "");
  snprintf(f->env, sizeof f->env, "%s", env ? env : "");
  write_config(f);
}

/* Starts learner run number f->learner_runs + 1 (log learnerN.log). */
void start_learner(fleet *f, int resume) {
  char log[192], name[32];
  snprintf(name, sizeof name, "learner%d.log", ++f->learner_runs);
  path_in(f, log, sizeof log, name);
  const char *plain[] = {"learner", "--config", f->cfg, NULL};
  const char *res[] = {"learner", "--config", f->cfg, "--resume", NULL};
  f->learner = lh_proc_spawn_longhaul(log, resume ? res : plain);
  ck_assert_int_gt(f->learner, 0);
}

void learner_log(const fleet *f, int run, char *out, size_t cap) {
  char name[32];
  snprintf(name, sizeof name, "learner%d.log", run);
  path_in(f, out, cap, name);
}

void actor_log(const fleet *f, int i, char *out, size_t cap) {
  char name[32];
  snprintf(name, sizeof name, "a%d.log", i);
  path_in(f, out, cap, name);
}

void start_actors(fleet *f, int n) {
  for (int i = 0; i < n; i++) {
    char log[192], nm[16], idx[16];
    actor_log(f, i, log, sizeof log);
    snprintf(nm, sizeof nm, "a%d", i);
    snprintf(idx, sizeof idx, "%d", i);
    const char *args[] = {"actor", "--config", f->cfg, "--name", nm, "--index", idx, NULL};
    f->actors[i] = lh_proc_spawn_longhaul(log, args);
    ck_assert_int_gt(f->actors[i], 0);
  }
  f->n_actors = n;
}

/* SIGTERM to every actor (they abort open episodes and flush), then to the
 * learner; each must exit 0. */
void stop_all(fleet *f) {
  for (int i = 0; i < f->n_actors; i++) kill(f->actors[i], SIGTERM);
  for (int i = 0; i < f->n_actors; i++) {
    int rc = lh_proc_wait(f->actors[i], 40, NULL);
    ck_assert_msg(rc == 0, "actor a%d exit %d (see %s/a%d.log)", i, rc, f->dir, i);
    f->actors[i] = 0;
  }
  if (f->learner > 0) {
    kill(f->learner, SIGTERM);
    int rc = lh_proc_wait(f->learner, 40, NULL);
    ck_assert_msg(rc == 0, "learner exit %d (see %s/learner%d.log)", rc, f->dir, f->learner_runs);
    f->learner = 0;
  }
}

void fleet_free(fleet *f) {
  for (int i = 0; i < f->n_actors; i++) lh_proc_kill(f->actors[i]);
  lh_proc_kill(f->learner);
  lh_proc_kill(f->server);
  if (!getenv("LH_KEEP")) lh_proc_rmdir(f->dir);
}

/* ---- what the store holds ---------------------------------------------- */


static int on_row(void *ctx, const lh_episode_row *r) {
  store_counts *c = ctx;
  c->episodes++;
  c->segments += r->segments_received;
  c->ends += (uint64_t)r->has_end;
  if (r->status >= 0 && r->status < LH_EPISODE_STATUS_COUNT) c->by_status[r->status]++;
  if (r->has_end) {
    c->ended++;
    /* a member of a shared prefix received its own tokens; the prefix's are its leader's */
    if (r->segments_received != r->segment_count || r->tokens_received + r->prefix_tokens != r->tokens) c->gaps++;
    if (r->ended_ms > c->after_ms) {
      if (r->status == LH_EPISODE_COMPLETE || r->status == LH_EPISODE_TRUNCATED) c->ok_after++;
      if (r->status == LH_EPISODE_ERROR) c->error_after++;
    }
  }
  int k = -1;
  if (r->actor[0] == 'a' && sscanf(r->actor + 1, "%d", &k) == 1 && k >= 0 && k < MAX_ACTORS)
    c->msgs[k] += r->segments_received + (uint64_t)r->has_end;
  return 0;
}

/* One actor's row of the retired episodes' sums: actor, episodes,
 * segments, ends, then the episodes per status in lh_episode_status order. */
static int on_retired(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  store_counts *c = ctx;
  if (ncols != 4 + LH_EPISODE_STATUS_COUNT || !values[0]) return 0;
  uint64_t episodes = strtoull(values[1], NULL, 10), segments = strtoull(values[2], NULL, 10);
  uint64_t ends = strtoull(values[3], NULL, 10);
  c->episodes += episodes, c->retired += episodes, c->segments += segments, c->ends += ends, c->ended += ends;
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) c->by_status[k] += strtoull(values[4 + k], NULL, 10);
  int k = -1;
  if (values[0][0] == 'a' && sscanf(values[0] + 1, "%d", &k) == 1 && k >= 0 && k < MAX_ACTORS)
    c->msgs[k] += segments + ends;
  return 0;
}

/* Reads the store (read-only, beside a running learner): its episodes,
 * and those retention retired. Returns 0, or -1 while the file is not
 * there yet. */
int count_store(const char *db, int64_t after_ms, store_counts *c) {
  memset(c, 0, sizeof *c);
  c->after_ms = after_ms;
  if (access(db, F_OK) != 0) return -1;
  lh_store *s = NULL;
  lh_errbuf e;
  if (lh_store_open_readonly(db, &s, &e) != 0) return -1;
  /* Two reads: beside a running learner, an episode retired between them
   * is counted twice (a count to wait for is a little early); once the
   * learner stopped, the counts are exact. */
  int rc = lh_store_episodes(s, NULL, on_row, c, NULL, &e);
  if (rc == 0)
    rc = lh_store_sql(s,
                      "SELECT actor, sum(episodes), sum(segments), sum(ends), 0, sum(CASE WHEN status = 'complete'"
                      " THEN episodes ELSE 0 END), sum(CASE WHEN status = 'truncated' THEN episodes ELSE 0 END),"
                      " sum(CASE WHEN status = 'aborted' THEN episodes ELSE 0 END),"
                      " sum(CASE WHEN status = 'error' THEN episodes ELSE 0 END)"
                      " FROM retired_episodes GROUP BY actor",
                      on_retired, c, NULL, &e);
  lh_store_close(s);
  return rc == 0 ? 0 : -1;
}


/* The actors' own counts (their "stopped" line) against the store: sent =
 * acked + unacked + rejected, lost = acked messages the store does not
 * hold. */
void totals(const fleet *f, const store_counts *c, actor_totals *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < f->n_actors; i++) {
    char log[192];
    actor_log(f, i, log, sizeof log);
    uint64_t acked = 0, unacked = 0, rejected = 0, resends = 0, pauses = 0;
    ck_assert_msg(lh_proc_log_u64(log, "stopped name=", "acked", &acked) == 0, "no stopped line in %s", log);
    lh_proc_log_u64(log, "stopped name=", "unacked", &unacked);
    lh_proc_log_u64(log, "stopped name=", "rejected", &rejected);
    lh_proc_log_u64(log, "stopped name=", "resends", &resends);
    lh_proc_log_u64(log, "stopped name=", "pauses", &pauses);
    t->acked += acked, t->unacked += unacked, t->rejected += rejected, t->resends += resends, t->pauses += pauses;
    t->sent += acked + unacked + rejected;
    t->stored += c->msgs[i];
    if (acked > c->msgs[i]) t->lost += acked - c->msgs[i];
  }
}

/* The store read (all episodes; ok_after and error_after count those ended
 * after after_ms) and the actors' totals against it. */
void tally(const fleet *f, int64_t after_ms, store_counts *c, actor_totals *t) {
  ck_assert_int_eq(count_store(f->db, after_ms, c), 0);
  totals(f, c, t);
  if (!t->unacked && !t->lost && !c->gaps) return;
  /* What the processes said of it: the learner's last counts and what it
   * last held back, each actor's last warnings. */
  char log[192];
  learner_log(f, f->learner_runs, log, sizeof log);
  lh_proc_print_last(log, "status version=");
  lh_proc_print_last(log, "held back");
  for (int i = 0; i < f->n_actors; i++) {
    actor_log(f, i, log, sizeof log);
    lh_proc_print_last(log, "resent messages");
    lh_proc_print_last(log, "stopping with messages");
  }
}

void print_totals(const char *fault, const actor_totals *t, const store_counts *c, const char *extra) {
  printf("faults: %s: sent=%llu acked=%llu rejected=%llu stored=%llu lost=%llu resends=%llu episodes=%llu ended=%llu "
         "gaps=%llu %s\n",
         fault, (unsigned long long)t->sent, (unsigned long long)t->acked, (unsigned long long)t->rejected,
         (unsigned long long)t->stored,
         (unsigned long long)t->lost, (unsigned long long)t->resends, (unsigned long long)c->episodes,
         (unsigned long long)c->ended, (unsigned long long)c->gaps, extra ? extra : "");
  fflush(stdout);
}

/* Nothing acked is lost, every message is acked, every ended episode is
 * whole. */
void assert_nothing_lost(const actor_totals *t, const store_counts *c) {
  ck_assert_uint_eq(t->lost, 0);
  ck_assert_uint_eq(t->unacked, 0);
  ck_assert_uint_eq(t->stored, t->acked);
  ck_assert_uint_eq(c->gaps, 0);
  ck_assert_uint_gt(t->acked, 0);
}


static int first_int(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  *(int64_t *)ctx = ncols > 0 && values[0] ? atoll(values[0]) : -1;
  return 0;
}

int64_t store_sql_int(const char *db, const char *sql) {
  lh_store *s = NULL;
  lh_errbuf e;
  if (lh_store_open_readonly(db, &s, &e)) return -1;
  int64_t v = -1;
  if (lh_store_sql(s, sql, first_int, &v, NULL, &e)) v = -1;
  lh_store_close(s);
  return v;
}

uint64_t stored_messages(const char *db) {
  store_counts c;
  return count_store(db, 0, &c) == 0 ? c.segments + c.ends : 0;
}

uint64_t train_rows(const char *db) {
  lh_store *s = NULL;
  lh_errbuf e;
  uint64_t n = 0;
  if (access(db, F_OK) != 0 || lh_store_open_readonly(db, &s, &e) != 0) return 0;
  lh_store_stats st;
  if (lh_store_stats_get(s, &st, &e) == 0) n = st.train_steps;
  lh_store_close(s);
  return n;
}

int log_lines(const fleet *f, int run, const char *needle) {
  char log[192];
  learner_log(f, run, log, sizeof log);
  return lh_proc_count_lines(log, needle);
}


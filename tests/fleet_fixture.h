/* The fleet harness of the process tests: a learner and actors of a tiny
 * model (d 16) as real `longhaul` processes on ipc:// endpoints in a
 * temporary folder, a config written from per-section extras, and what
 * the store holds against what the actors say they sent and got acked. */
#ifndef LH_TESTS_FLEET_FIXTURE_H
#define LH_TESTS_FLEET_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store.h"

#define MAX_ACTORS 8

typedef struct {
  char dir[64], cfg[160], db[160], ing[160];
  char learner_extra[512], actor_extra[512], env[512];
  char model_extra[256];  /* [model] keys over the tiny model's (set before write_config) */
  pid_t learner, server, actors[MAX_ACTORS];
  int n_actors, learner_runs;
} fleet;

typedef struct {
  uint64_t episodes, ended, gaps, segments, ends;
  uint64_t by_status[LH_EPISODE_STATUS_COUNT];
  uint64_t msgs[MAX_ACTORS];  /* segments + EpisodeEnds stored, per actor */
  int64_t after_ms;           /* count episodes ended after this wall time: */
  uint64_t ok_after, error_after;
  /* Of the figures above, those of the episodes retention retired at the
   * store's cap (retired_episodes): rows gone, messages still stored. A
   * retired episode was whole or ended by the learner, so no gap of it
   * is counted. */
  uint64_t retired;
} store_counts;

typedef struct {
  uint64_t sent, acked, unacked, rejected, stored, lost, resends, pauses;
} actor_totals;

/* Polls (10 ms) until cond holds or seconds pass; returns whether it held. */
#define WAIT_FOR(seconds, cond)                                        \
  ({                                                                   \
    int ok_ = 0;                                                       \
    for (int i_ = 0; i_ < (seconds) * 20 && !(ok_ = (cond)); i_++) lh_proc_sleep_ms(50); \
    ok_;                                                               \
  })

void path_in(const fleet *f, char *out, size_t cap, const char *name);
/* Writes the config from the extras (kept in f, so a test may rewrite it
 * with one key changed). */
void write_config(fleet *f);
void fleet_init(fleet *f, const char *tag, const char *learner_extra, const char *actor_extra,
                const char *env);
/* Starts learner run number f->learner_runs + 1 (log learnerN.log). */
void start_learner(fleet *f, int resume);
void learner_log(const fleet *f, int run, char *out, size_t cap);
void actor_log(const fleet *f, int i, char *out, size_t cap);
void start_actors(fleet *f, int n);
/* SIGTERM to every actor (they abort open episodes and flush), then to the
 * learner; each must exit 0. */
void stop_all(fleet *f);
void fleet_free(fleet *f);
/* Reads the store (read-only, beside a running learner). Returns 0, or -1
 * while the file is not there yet. */
int count_store(const char *db, int64_t after_ms, store_counts *c);
/* The actors' own counts (their "stopped" line) against the store: sent =
 * acked + unacked + rejected, lost = acked messages the store does not
 * hold. */
void totals(const fleet *f, const store_counts *c, actor_totals *t);
/* The store read (all episodes; ok_after and error_after count those ended
 * after after_ms) and the actors' totals against it. */
void tally(const fleet *f, int64_t after_ms, store_counts *c, actor_totals *t);
void print_totals(const char *fault, const actor_totals *t, const store_counts *c, const char *extra);
/* Nothing acked is lost, every message is acked, every ended episode is
 * whole. */
void assert_nothing_lost(const actor_totals *t, const store_counts *c);
uint64_t stored_messages(const char *db);
/* sql's first column of its first row on the store read-only (beside the
 * running learner); -1 while the store cannot be read, or for no row or
 * NULL. */
int64_t store_sql_int(const char *db, const char *sql);
/* Rows of train_steps in the store (0 while it is not there yet). */
uint64_t train_rows(const char *db);
int log_lines(const fleet *f, int run, const char *needle);

#endif

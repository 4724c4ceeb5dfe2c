/* cli: the launcher's watchdog: progress read from the store, and who is
 * stuck when there is none (cmd_launch.c acts on it).
 *
 * Progress is what the store shows, never what a process says of itself:
 * the newest train step (train_steps), and each actor's newest heartbeat
 * (actor_heartbeats, written by the learner rank the actor sends to: the
 * rank stores are read as one).
 * Only changes are compared, each against the launcher's own monotonic
 * clock, so hosts' clocks need not agree. With T = [fleet] stall_timeout_s:
 *   - the learner is stuck when no new train step has appeared for T since
 *     the later of its (re)start and the last one, while actors run;
 *   - an actor is stuck when no new heartbeat of it has appeared for T
 *     since the later of its (re)start and its last one, while the learner
 *     shows life (a step, or another actor's heartbeat, within T): when
 *     nothing at all moves, the learner, the one every actor talks to, is
 *     the one to blame first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "store/store.h"

#define WATCHDOG_LOOKBACK_MS 60000 /* heartbeats older than the launch by more than this are not read */

typedef struct {
  lh_launch_watchdog *w;
  const lh_launch_fleet *f;
  int64_t now_ms;
} hb_ctx;

static int on_heartbeat(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  hb_ctx *h = ctx;
  if (ncols < 2 || !values[0] || !values[1]) return 0;
  int64_t t = strtoll(values[1], NULL, 10);
  for (size_t i = 0; i < h->f->n; i++) {
    if (h->f->child[i].role != LH_CHILD_ACTOR || strcmp(h->f->child[i].name, values[0]) != 0) continue;
    if (t > h->w->heartbeat_ms[i]) {
      h->w->heartbeat_ms[i] = t;
      h->w->heartbeat_seen_ms[i] = h->now_ms;
    }
  }
  return 0;
}

static int on_step(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) *(int64_t *)ctx = strtoll(values[0], NULL, 10);
  return 1;
}

void lh_launch_watchdog_init(lh_launch_watchdog *w, int64_t now_ms) {
  memset(w, 0, sizeof *w);
  w->last_step = -1;
  w->step_seen_ms = now_ms;
  w->since_wall_ms = lh_wall_ms() - WATCHDOG_LOOKBACK_MS;
}

/* Reads the newest step and heartbeats; 0, or -1 when the store cannot be
 * read yet (not created, or busy): no verdict then. */
static int read_progress(lh_launch_watchdog *w, const lh_launch_fleet *f, int64_t now_ms) {
  lh_store *s = lh_launch_fleet_store(f); /* every rank's, as one */
  lh_errbuf e;
  if (!s) return -1;
  int64_t step = -1;
  int rc = lh_store_sql(s, "SELECT max(step) FROM train_steps", on_step, &step, NULL, &e);
  if (rc == 0 && step > w->last_step) {
    w->last_step = step;
    w->step_seen_ms = now_ms;
  }
  /* The index on time_ms keeps this a range read however long the run. */
  hb_ctx h = {w, f, now_ms};
  int64_t since = w->since_wall_ms;
  if (rc == 0)
    rc = lh_store_sql_ints(s, "SELECT actor, max(time_ms) FROM actor_heartbeats WHERE time_ms > ?1 GROUP BY actor",
                           &since, 1, on_heartbeat, &h, NULL, &e);
  lh_store_close(s);
  return rc == 0 ? 0 : -1;
}

static int64_t later(int64_t a, int64_t b) { return a > b ? a : b; }

int lh_launch_watchdog_poll(lh_launch_watchdog *w, const lh_launch_fleet *f, int64_t now_ms, char *why,
                            size_t why_bytes) {
  uint64_t timeout_ms = f->fleet.stall_timeout_s * 1000;
  if (!timeout_ms || read_progress(w, f, now_ms)) return -1;
  int64_t freshest = w->step_seen_ms;
  size_t actors_running = 0;
  for (size_t i = 0; i < f->n; i++)
    if (f->child[i].role == LH_CHILD_ACTOR && f->child[i].pid > 0) {
      actors_running++;
      freshest = later(freshest, w->heartbeat_seen_ms[i]);
    }
  for (size_t i = 0; i < f->n; i++) {
    const lh_launch_child *c = &f->child[i];
    if (c->pid <= 0) continue;
    if (c->role == LH_CHILD_LEARNER && actors_running) {
      int64_t quiet = now_ms - later(w->step_seen_ms, c->started_ms);
      if (quiet > (int64_t)timeout_ms) {
        if (w->last_step >= 0)
          snprintf(why, why_bytes, "no new train step for %.0f s (the newest is step %lld)", (double)quiet / 1000,
                   (long long)w->last_step);
        else
          snprintf(why, why_bytes, "no train step for %.0f s since it started", (double)quiet / 1000);
        return (int)i;
      }
    }
  }
  for (size_t i = 0; i < f->n; i++) {
    const lh_launch_child *c = &f->child[i];
    if (c->pid <= 0 || c->role != LH_CHILD_ACTOR) continue;
    int64_t quiet = now_ms - later(w->heartbeat_seen_ms[i], c->started_ms);
    /* Someone else moved since this one went quiet: the learner hears. */
    int others_alive = freshest > later(w->heartbeat_seen_ms[i], c->started_ms);
    if (quiet > (int64_t)timeout_ms && others_alive) {
      if (w->heartbeat_ms[i])
        snprintf(why, why_bytes, "no new heartbeat in the store for %.0f s while the learner hears others",
                 (double)quiet / 1000);
      else
        snprintf(why, why_bytes, "no heartbeat in the store for %.0f s since it started, while the learner hears others",
                 (double)quiet / 1000);
      return (int)i;
    }
  }
  return -1;
}

int64_t lh_launch_watchdog_progress(const lh_launch_watchdog *w, size_t i, const lh_launch_fleet *f) {
  return f->child[i].role == LH_CHILD_LEARNER ? w->step_seen_ms : w->heartbeat_seen_ms[i];
}

/* cli: the fleet's status screen. Everything but the launcher's own
 * process states and restart counts comes from the replay store, opened
 * read-only for each screen (a reader never blocks the learner): the
 * newest actor_heartbeats row of each actor and the newest train_steps row
 * with its largest per-layer MaxVio. With M learner ranks each rank keeps
 * its own file (its actors' heartbeats); rank 0's holds the train steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/launch/launch.h"
#include "cli/term.h"
#include "learner/learner.h"
#include "store/store.h"

#define STATUS_MAX_ACTORS LH_LAUNCH_MAX_ACTORS

typedef struct {
  int have;
  char step[32], version[32], loss[32], reward[32], success[32], maxvio[32], busy[32];
} learner_row;

typedef struct {
  size_t n;
  lh_store_heartbeat *h;
} heartbeats;

static int on_heartbeat(void *ctx, const lh_store_heartbeat *h) {
  heartbeats *hb = ctx;
  if (hb->n < STATUS_MAX_ACTORS) hb->h[hb->n++] = *h;
  return 0;
}

/* A number as text with the given precision; "-" for NULL. */
static void num(const char *v, int prec, char *out, size_t bytes) {
  if (!v) {
    snprintf(out, bytes, "-");
    return;
  }
  char *end;
  double x = strtod(v, &end);
  if (end == v) snprintf(out, bytes, "%.*s", (int)bytes - 1, v);
  else if (prec < 0) snprintf(out, bytes, "%.0f", x);
  else snprintf(out, bytes, "%.*f", prec, x);
}

static int on_step_row(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  learner_row *r = ctx;
  if (ncols < 7) return 1;
  r->have = 1;
  num(values[0], -1, r->step, sizeof r->step);
  num(values[1], -1, r->version, sizeof r->version);
  num(values[2], 4, r->loss, sizeof r->loss);
  num(values[3], 3, r->reward, sizeof r->reward);
  num(values[4], 3, r->success, sizeof r->success);
  num(values[5], 3, r->maxvio, sizeof r->maxvio);
  num(values[6], 3, r->busy, sizeof r->busy);
  return 1;
}

static const char *state_of(const lh_launch_child *c) {
  if (c->pid > 0) return c->stopping ? "stopping" : "running";
  if (c->done) return c->exited && WIFEXITED(c->last_status) && WEXITSTATUS(c->last_status) == 0 ? "exited" : "failed";
  if (c->restart_at_ms) return "backoff";
  return c->starts ? "down" : "starting";
}

/* "1h02m" / "4m05s" / "12s". */
static void span(int64_t s, char *out, size_t bytes) {
  if (s < 0) s = 0;
  if (s >= 3600) snprintf(out, bytes, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  else if (s >= 60) snprintf(out, bytes, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else snprintf(out, bytes, "%llds", (long long)s);
}

/* How far the fleet is towards its end ([fleet] steps or duration_s) and
 * the time left: from the steps' pace so far, or the clock. "" when it
 * runs until stopped. */
static void progress(const lh_launch_fleet *f, const learner_row *lr, int64_t uptime_ms, char *out, size_t bytes) {
  out[0] = 0;
  char left[32] = "";
  int64_t left_s = -1;
  if (f->fleet.steps) {
    uint64_t done = lr->have ? strtoull(lr->step, NULL, 10) + 1 : 0;
    if (done > f->fleet.steps) done = f->fleet.steps;
    if (done) left_s = (int64_t)((double)uptime_ms / 1000.0 * (double)(f->fleet.steps - done) / (double)done);
    if (left_s >= 0) span(left_s, left, sizeof left);
    snprintf(out, bytes, "steps %llu/%llu (%.0f%%) left %s", (unsigned long long)done,
             (unsigned long long)f->fleet.steps, 100.0 * (double)done / (double)f->fleet.steps,
             left[0] ? left : "?");
  }
  if (f->fleet.duration_s) {
    int64_t d = (int64_t)f->fleet.duration_s - uptime_ms / 1000;
    if (left_s < 0 || d < left_s) {
      span(d, left, sizeof left);
      size_t n = strlen(out);
      snprintf(out + n, bytes - n, "%sstops in %s (duration_s=%llu)", n ? ", " : "", left,
               (unsigned long long)f->fleet.duration_s);
    }
  }
}

/* The screen fits 80 columns: rows of at most 77, names cut to 10
 * characters, paths to their last characters. */
enum { SCREEN_COLUMNS = 80 };
#define LEARNER_ROW "%-10.10s %-8s %3s %7s %6s %8s %7s %7s %6s %5s\n"
#define ACTOR_ROW "%-10.10s %-8s %3s %6s %8s %5s %5s %4s %7s %6s %5s\n"

/* The last room bytes of text, "..." first when cut. */
static const char *tail(const char *text, size_t room, char *buf, size_t bytes) {
  size_t n = strlen(text);
  if (n <= room) return text;
  snprintf(buf, bytes, "...%s", text + n - (room > 3 ? room - 3 : 0));
  return buf;
}

static void rate(double v, int prec, char *out, size_t bytes) {
  if (!isfinite(v)) snprintf(out, bytes, "-");
  else snprintf(out, bytes, "%.*f", prec, v);
}

void lh_launch_status_print(const lh_launch_fleet *f, FILE *out, int ansi, int64_t uptime_ms) {
  learner_row lr;
  memset(&lr, 0, sizeof lr);
  heartbeats hb = {0, calloc(STATUS_MAX_ACTORS, sizeof(lh_store_heartbeat))};
  char store_note[LH_ERRMSG_BYTES + LH_LAUNCH_PATH_BYTES + 64] = "";
  lh_store_options o;
  lh_launch_store_options(&o);
  lh_errbuf e;
  memset(&e, 0, sizeof e);
  if (!hb.h) snprintf(store_note, sizeof store_note, "out of memory for the status");
  for (int r = 0; hb.h && r < (int)f->fleet.learners && !store_note[0]; r++) {
    char db[LH_LEARNER_TEXT_BYTES];
    lh_store *s = NULL;
    if (lh_learner_rank_db(f->db, r, db, &e)) {
      snprintf(store_note, sizeof store_note, "store of rank %d: %s", r, e.msg);
    } else if (lh_store_open_with(db, &o, &s, &e)) {
      snprintf(store_note, sizeof store_note, "store %s not readable yet: %s", db, e.msg);
    } else {
      if ((r == 0 && lh_store_sql(s,
                                  "SELECT step, version, loss, reward_mean, success_rate,"
                                  " (SELECT max(maxvio) FROM train_step_layers l WHERE l.step = t.step),"
                                  " busy_frac FROM train_steps t ORDER BY step DESC LIMIT 1",
                                  on_step_row, &lr, NULL, &e)) ||
          lh_store_latest_heartbeats(s, on_heartbeat, &hb, &e))
        snprintf(store_note, sizeof store_note, "store %s: %s", db, e.msg);
      lh_store_close(s);
    }
  }
  int64_t now_wall = lh_wall_ms(), up = uptime_ms / 1000;
  char prog[160];
  progress(f, &lr, uptime_ms, prog, sizeof prog);
  if (ansi) {
    char b1[SCREEN_COLUMNS], b2[SCREEN_COLUMNS], b3[SCREEN_COLUMNS];
    fputs("\033[H\033[2J", out); /* the screen redraw: the launcher's own control */
    lh_cli_term_printf(out, "longhaul launch %s  up %02lld:%02lld:%02lld\n", tail(f->config_path, 50, b1, sizeof b1),
                       (long long)(up / 3600), (long long)(up / 60 % 60), (long long)(up % 60));
    lh_cli_term_printf(out, "store %s  logs %s/\n", tail(f->db, 34, b2, sizeof b2),
                       tail(f->fleet.log_dir, 28, b3, sizeof b3));
    lh_cli_term_printf(out, "%s\n\n",
                       prog[0] ? tail(prog, SCREEN_COLUMNS - 1, b1, sizeof b1) : "runs until Ctrl-C or SIGTERM");
    lh_cli_term_printf(out, LEARNER_ROW, "LEARNER", "state", "rst", "step", "version", "loss", "reward", "success",
                       "maxvio", "busy");
  }
  for (size_t i = 0; i < f->n; i++) {
    const lh_launch_child *c = &f->child[i];
    if (c->role != LH_CHILD_LEARNER && c->role != LH_CHILD_ENV_SERVER) continue;
    const char *step = lr.have ? lr.step : "-", *ver = lr.have ? lr.version : "-";
    const char *loss = lr.have ? lr.loss : "-", *rw = lr.have ? lr.reward : "-";
    const char *sr = lr.have ? lr.success : "-", *mv = lr.have ? lr.maxvio : "-", *bz = lr.have ? lr.busy : "-";
    if (c->role == LH_CHILD_ENV_SERVER) step = ver = loss = rw = sr = mv = bz = "";
    char name[80];
    if (c->role == LH_CHILD_LEARNER && f->fleet.learners > 1)
      snprintf(name, sizeof name, "learner x%llu", (unsigned long long)f->fleet.learners);
    else
      snprintf(name, sizeof name, "%s", c->name);
    char restarts[24];
    snprintf(restarts, sizeof restarts, "%llu", (unsigned long long)c->restarts);
    if (ansi)
      lh_cli_term_printf(out, LEARNER_ROW, name, state_of(c), restarts, step, ver, loss, rw, sr, mv, bz);
    else if (c->role == LH_CHILD_ENV_SERVER)
      lh_cli_term_printf(out, "info launch: status name=%s state=%s restarts=%llu\n", c->name, state_of(c),
                         (unsigned long long)c->restarts);
    else
      lh_cli_term_printf(out,
                         "info launch: status name=%s ranks=%llu state=%s restarts=%llu step=%s version=%s loss=%s "
                         "reward_mean=%s success_rate=%s maxvio=%s busy_frac=%s\n",
                         c->name, (unsigned long long)f->fleet.learners, state_of(c), (unsigned long long)c->restarts,
                         step, ver, loss, rw, sr, mv, bz);
  }
  if (!ansi && prog[0]) lh_cli_term_printf(out, "info launch: progress %s\n", prog);
  if (ansi)
    lh_cli_term_printf(out, "\n" ACTOR_ROW, "ACTOR", "state", "rst", "eps/s", "tokens/s", "lag", "outbox", "open",
                       "eps", "version", "hb");
  for (size_t i = 0; i < f->n; i++) {
    const lh_launch_child *c = &f->child[i];
    if (c->role != LH_CHILD_ACTOR) continue;
    const lh_store_heartbeat *h = NULL;
    for (size_t j = 0; j < hb.n; j++)
      if (!strcmp(hb.h[j].actor, c->name)) h = &hb.h[j];
    char eps[24] = "-", tps[24] = "-", lag[24] = "-", outbox[24] = "-", open[24] = "-", done[24] = "-",
         ver[24] = "-", age[24] = "-";
    if (h) {
      rate(h->episodes_per_s, 2, eps, sizeof eps);
      rate(h->tokens_per_s, 1, tps, sizeof tps);
      rate(h->policy_lag, 1, lag, sizeof lag);
      snprintf(outbox, sizeof outbox, "%u", h->outbox_depth);
      snprintf(open, sizeof open, "%u", h->open_episodes);
      snprintf(done, sizeof done, "%llu", (unsigned long long)h->episodes_done);
      snprintf(ver, sizeof ver, "%llu", (unsigned long long)h->policy_version);
      snprintf(age, sizeof age, "%.1fs", (double)(now_wall - h->time_ms) / 1000.0);
    }
    char restarts[24];
    snprintf(restarts, sizeof restarts, "%llu", (unsigned long long)c->restarts);
    if (ansi)
      lh_cli_term_printf(out, ACTOR_ROW, c->name, state_of(c), restarts, eps, tps, lag, outbox, open, done, ver, age);
    else
      lh_cli_term_printf(
          out,
          "info launch: status name=%s state=%s restarts=%llu episodes_per_s=%s tokens_per_s=%s "
          "policy_lag=%s outbox_depth=%s open_episodes=%s episodes_done=%s version=%s heartbeat_age=%s\n",
          c->name, state_of(c), (unsigned long long)c->restarts, eps, tps, lag, outbox, open, done, ver, age);
  }
  /* The store's message, one line whatever it quotes. */
  char note[4 * sizeof store_note];
  lh_cli_term_field(store_note, note, sizeof note);
  if (store_note[0] && ansi)
    lh_cli_term_printf(out, "\n%.*s\n", SCREEN_COLUMNS - 1, note);
  else if (store_note[0])
    lh_cli_term_printf(out, "info launch: %s\n", note);
  if (ansi) lh_cli_term_printf(out, "\nCtrl-C: ordered shutdown (actors, then the learner); twice: kill now.\n");
  fflush(out);
  free(hb.h);
}

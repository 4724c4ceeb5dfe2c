/* longhaul launch FLEET.ini: starts and supervises a fleet (ARCHITECTURE.md §1):
 * the env server, the learner (M > 1: one mpirun job), N actors; restarts
 * what dies; stops in order; shows the status screen. The parts are in
 * cli/launch/launch_*.c (cli/launch/launch.h); this file is the loop and the signals. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/launch/launch.h"
#include "cli/run_record.h"
#include "cli/term.h"

#define LAUNCH_TICK_MS 50
#define LAUNCH_SCREEN_MS 1000   /* the terminal screen's refresh */
#define LAUNCH_STABLE_MS 60000  /* up this long: the next restart starts the backoff over */
#define LAUNCH_EVENTS 6         /* the last events shown under the screen */
#define LAUNCH_STEPS_MS 250     /* how often [fleet] steps is checked in the store */
#define LAUNCH_WATCHDOG_MS 1000 /* how often the watchdog reads the store */
#define LAUNCH_LIMIT_MS 5000    /* how often a Slurm job's time left is weighed against its stop */
#define LAUNCH_LIMIT_READ_MS 60000 /* how often the job's time limit is asked of Slurm (it may change) */

/* Counted by SIGINT/SIGTERM: the first starts the ordered shutdown, the
 * second kills whatever is left. The one state a handler touches. */
static volatile sig_atomic_t stop_signals = 0;

static void on_signal(int sig) {
  (void)sig;
  if (stop_signals < 100) stop_signals++;
}

static const lh_cli_help HELP = {
    .cmd = "launch",
    .usage = "FLEET.ini [OPTIONS]",
    .about = "Starts a fleet from one INI file ([fleet] [model] [learner] [actor] [env]) and supervises it: the "
        "env server ([fleet] env_server), the learner (`longhaul learner`; for learners = M > 1 `mpirun "
        "--oversubscribe -n M longhaul learner`, rank r binding its ingest at entry r of [learner] "
        "ingest_endpoints, or without it at the ingest_endpoint port + 10*r) and actors actor-0 "
        "..actor-(N-1) (actor i bound to rank i mod M). Each child logs to LOG_DIR/<name>.log (appended "
        "across restarts; LOG_DIR/<name>.pid holds its pid); the launcher's own events go to "
        "LOG_DIR/launch.log.",
    .notes = "Supervision: a child that dies is restarted after restart_backoff_ms, doubled per consecutive "
        "restart up to restart_backoff_max_ms (the count starts over once it stayed up 60 s); the learner "
        "comes back with --resume. More than max_restarts restarts of one child, or a child's usage error "
        "(exit 2; 126/127: its program could not run), ends the fleet. With [fleet] steps the fleet shuts "
        "down in order once the store holds that many train steps.\n\n"
        "Run: every learner and actor gets --run-id ID (the given one, or a new one per launch). Actors "
        "only: with learners = 0 this host runs actors actor-<first_actor>.. for learners started elsewhere "
        "(mpirun with a hostfile, or another host's launch), actor i sending to rank i mod R, R the entries "
        "of [learner] ingest_endpoints; give --run-id of that run, or none to join whichever run the "
        "learners serve.\n\n"
        "Before anything starts every section is checked, every environment the actors will open is opened "
        "once, the env_server program is looked up and the endpoints the fleet binds here must be free; the "
        "store and the log folder are locked, so a second launch on either is refused (exit 2). Watchdog: no "
        "new train step, or no heartbeat of an actor, in the store for stall_timeout_s (900; 0 off) restarts "
        "that process; stuck again after that restart, the fleet fails (exit 1).\n\n"
        "SIGINT/SIGTERM (or duration_s, or steps, or a Slurm job's time limit drawing near): ordered shutdown: "
        "SIGTERM to the actors (they abort open episodes and flush their outboxes), then to the learner (SIGUSR1 to mpirun, which forwards it to "
        "every rank; it acks what is stored and writes a final checkpoint), then to the env server; what is "
        "not gone after stop_timeout_ms gets SIGKILL (an actor: after the longer of stop_timeout_ms and its "
        "flush_timeout_ms + 4000 ms, the time it may take to deliver what it holds). A second signal kills at once.",
    .exits = "0 every child shut down cleanly, 1 a child failed or had to be killed, 2 usage or config error.",
};

typedef enum { PHASE_RUN, PHASE_AGENTS, PHASE_ACTORS, PHASE_LEARNER, PHASE_ENV, PHASE_DONE } phase;

typedef struct {
  lh_launch_fleet *f;
  FILE *events;  /* LOG_DIR/launch.log */
  int to_stderr;
  char recent[LAUNCH_EVENTS][300];
  int n_recent;
  phase ph;
  int64_t phase_deadline_ms;
  int failed;     /* a child failed for good, or the fleet was given up */
  int killed;     /* some child needed SIGKILL */
  char reason[128];
  char failure[768];  /* the first failure, whole, for the last line on stderr */
  lh_launch_watchdog watchdog;
  /* A Slurm job's time limit: when it was last read, its end (wall ms,
   * 0: none), and whether the launcher said so. */
  int64_t limit_read_ms, limit_end_ms;
  int limit_said;
} launcher;

static int64_t now_ms(void) { return lh_now_ns() / 1000000; }

static void event(launcher *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void event(launcher *L, const char *fmt, ...) {
  char raw[1024], line[4 * sizeof raw];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  /* An event may quote a child's last words or a store's message: one
   * line, no control character (cli/term.h), in the log as on the screen. */
  lh_cli_term_field(raw, line, sizeof line);
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  if (L->events) {
    fprintf(L->events, "%02d:%02d:%02d info launch: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, line);
    fflush(L->events);
  }
  if (L->to_stderr) lh_cli_term_printf(stderr, "info launch: %s\n", line);
  if (L->n_recent == LAUNCH_EVENTS) {
    memmove(L->recent[0], L->recent[1], sizeof L->recent[0] * (LAUNCH_EVENTS - 1));
    L->n_recent--;
  }
  /* The screen shows the start of each event; the log holds it whole. */
  snprintf(L->recent[L->n_recent++], sizeof L->recent[0], "%02d:%02d:%02d %.*s", tm.tm_hour, tm.tm_min, tm.tm_sec,
           (int)sizeof L->recent[0] - 16, line);
}

/* Keeps the first failure for the launcher's last words. */
static void failed(launcher *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(launcher *L, const char *fmt, ...) {
  L->failed = 1;
  if (L->failure[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(L->failure, sizeof L->failure, fmt, ap);
  va_end(ap);
}

static void write_pid(const launcher *L, size_t i) {
  char path[LH_LAUNCH_PATH_BYTES + LH_LAUNCH_NAME_BYTES + 8];
  snprintf(path, sizeof path, "%s/%s.pid", L->f->fleet.log_dir, L->f->child[i].name);
  FILE *p = fopen(path, "w");
  if (!p) return;
  fprintf(p, "%lld\n", (long long)L->f->child[i].pid);
  fclose(p);
}

static int start(launcher *L, size_t i) {
  lh_launch_child *c = &L->f->child[i];
  lh_errbuf e;
  memset(&e, 0, sizeof e);
  if (lh_launch_fleet_start(L->f, i, &e)) {
    event(L, "cannot start name=%s: %s", c->name, e.msg);
    return -1;
  }
  write_pid(L, i);
  event(L, "started name=%s pid=%lld attempt=%llu", c->name, (long long)c->pid, (unsigned long long)c->starts);
  return 0;
}

static void describe_exit(int status, char *out, size_t bytes) {
  if (WIFEXITED(status)) snprintf(out, bytes, "exit=%d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) snprintf(out, bytes, "signal=%s", strsignal(WTERMSIG(status)));
  else snprintf(out, bytes, "status=%d", status);
}

static void begin_shutdown(launcher *L, const char *why) {
  if (L->ph != PHASE_RUN) return;
  snprintf(L->reason, sizeof L->reason, "%s", why);
  event(L, "shutdown reason=%s: stopping the %s", why, L->f->fleet.agents ? "agents" : "actors");
  L->ph = PHASE_AGENTS;
  L->phase_deadline_ms = 0;
}

/* A child exited while the fleet runs: restart it after its backoff, or
 * give the fleet up. */
static void on_exit_running(launcher *L, lh_launch_child *c) {
  char how[64];
  describe_exit(c->last_status, how, sizeof how);
  int code = WIFEXITED(c->last_status) ? WEXITSTATUS(c->last_status) : -1;
  if (c->role == LH_CHILD_AGENT && code == 0) {  /* an agent that finished its work */
    c->done = 1;
    event(L, "finished name=%s %s", c->name, how);
    return;
  }
  /* 2: the child's usage or config error; 126, 127: the shell or exec
   * could not run the program. A restart cannot fix either. */
  if (code == LH_EXIT_USAGE || code == 126 || code == 127) {
    c->done = 1;
    L->failed = 1;
    char log[LH_LAUNCH_PATH_BYTES + LH_LAUNCH_NAME_BYTES + 8], said[200];
    lh_launch_fleet_log_path(L->f, (size_t)(c - L->f->child), log, sizeof log);
    lh_launch_child_last_line(log, said, sizeof said);
    const char *what = code == LH_EXIT_USAGE ? "a usage or config error" : "its program could not run";
    event(L, "exited name=%s %s: %s, not restarted: %s (%s)", c->name, how, what, said[0] ? said : "-", log);
    failed(L, "%s %s (%s): %s (its log: %s)", c->name, how, what, said[0] ? said : "-", log);
    begin_shutdown(L, "child failed");
    return;
  }
  if (c->restarts >= L->f->fleet.max_restarts) {
    c->done = 1;
    failed(L, "%s %s: max_restarts=%llu reached", c->name, how, (unsigned long long)L->f->fleet.max_restarts);
    event(L, "exited name=%s %s: max_restarts=%llu reached, giving up", c->name, how,
          (unsigned long long)L->f->fleet.max_restarts);
    begin_shutdown(L, "max_restarts reached");
    return;
  }
  int64_t now = now_ms();
  if (now - c->started_ms >= LAUNCH_STABLE_MS) c->consecutive = 0;
  uint64_t delay = L->f->fleet.restart_backoff_ms;
  for (uint32_t k = 0; k < c->consecutive && delay < L->f->fleet.restart_backoff_max_ms; k++) delay *= 2;
  if (delay > L->f->fleet.restart_backoff_max_ms) delay = L->f->fleet.restart_backoff_max_ms;
  c->consecutive++;
  c->restarts++;
  c->restart_at_ms = now + (int64_t)delay;
  event(L, "died name=%s %s restarts=%llu restart_in_ms=%llu%s", c->name, how, (unsigned long long)c->restarts,
        (unsigned long long)delay, c->role == LH_CHILD_LEARNER ? " (with --resume)" : "");
}

static void reap(launcher *L) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    lh_launch_fleet *f = L->f;
    lh_launch_child *c = NULL;
    for (size_t i = 0; i < f->n; i++)
      if (f->child[i].pid == pid) c = &f->child[i];
    if (!c) continue;
    c->pid = 0;
    c->kill_at_ms = 0;
    c->exited = 1;
    c->last_status = status;
    if (L->ph == PHASE_RUN && !c->stopping) {
      on_exit_running(L, c);
      continue;
    }
    c->done = 1;
    char how[64];
    describe_exit(status, how, sizeof how);
    /* Stopped by the shutdown: exit 0, or the SIGTERM itself when it came
     * before the child set its handler (or the child keeps the default). */
    int clean = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
                (c->stopping && !c->killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    if (!clean && !c->killed) failed(L, "%s did not stop cleanly: %s", c->name, how);
    event(L, "stopped name=%s %s%s", c->name, how, clean ? "" : c->killed ? " (killed)" : " (not clean)");
  }
}

/* The watchdog's turn (launch_watchdog.c says what counts as stuck): a
 * stuck child gets SIGTERM (and SIGCONT, should it be stopped), SIGKILL
 * after stop_timeout_ms, and the usual restart; one that is stuck again
 * after such a restart, with no progress between, ends the fleet. */
static void watchdog_step(launcher *L, int64_t now) {
  lh_launch_fleet *f = L->f;
  for (size_t i = 0; i < f->n; i++) {
    lh_launch_child *c = &f->child[i];
    int64_t seen = lh_launch_watchdog_progress(&L->watchdog, i, f);
    if (c->watchdog_restarts && c->pid > 0 && !c->kill_at_ms && seen > c->started_ms) c->watchdog_restarts = 0;
  }
  char why[256];
  int i = lh_launch_watchdog_poll(&L->watchdog, f, now, why, sizeof why);
  if (i < 0) return;
  lh_launch_child *c = &f->child[i];
  if (c->kill_at_ms) return; /* already on its way out */
  if (c->watchdog_restarts) {
    event(L, "watchdog: name=%s still stuck after its restart: %s; giving up", c->name, why);
    failed(L, "watchdog: %s is stuck and a restart did not help: %s (stall_timeout_s=%llu)", c->name, why,
           (unsigned long long)f->fleet.stall_timeout_s);
    begin_shutdown(L, "stalled");
    return;
  }
  event(L, "watchdog: name=%s pid=%lld stuck: %s (stall_timeout_s=%llu); restarting it", c->name, (long long)c->pid,
        why, (unsigned long long)f->fleet.stall_timeout_s);
  c->watchdog_restarts++;
  c->kill_at_ms = now + (int64_t)(c->role == LH_CHILD_LEARNER ? lh_launch_learner_stop_ms(f, NULL)
                                  : c->role == LH_CHILD_ACTOR  ? lh_launch_actor_stop_ms(f)
                                                               : f->fleet.stop_timeout_ms);
  lh_launch_child_signal(c, SIGTERM);
  lh_launch_child_signal(c, SIGCONT);
}

/* A Slurm job's time limit: the ordered shutdown begins once less time is
 * left than it may take, which follows from the learner's measured steps
 * (lh_launch_shutdown_ms), so that a long step and the final checkpoint
 * finish before Slurm kills the job. The batch script's --signal, fixed
 * when the job was submitted, is the backstop. */
static void time_limit_step(launcher *L, int64_t now) {
  lh_launch_fleet *f = L->f;
  if (!L->limit_read_ms || now - L->limit_read_ms >= LAUNCH_LIMIT_READ_MS) {
    L->limit_read_ms = now;
    lh_errbuf err = {0};
    int64_t end = 0;
    if (lh_launch_slurm_end_ms(f, &end, &err) != 0) {
      if (!L->limit_said) event(L, "slurm: cannot read the job's time limit (%s); its --signal stops it", err.msg);
      L->limit_said = 1;
      return;
    }
    if (end != L->limit_end_ms || !L->limit_said) {
      if (end)
        event(L, "slurm: job=%s time limit in %lld s; the ordered stop begins when less is left than it may take",
              f->slurm.job_id, (long long)((end - lh_wall_ms()) / 1000));
      else event(L, "slurm: job=%s has no time limit", f->slurm.job_id);
    }
    L->limit_end_ms = end, L->limit_said = 1;
  }
  if (!L->limit_end_ms) return;
  double step_ms = 0;
  uint64_t learner_ms = lh_launch_learner_stop_ms(f, &step_ms), need = lh_launch_shutdown_ms(f, learner_ms);
  int64_t left = L->limit_end_ms - lh_wall_ms();
  if (left > (int64_t)need) return;
  event(L,
        "slurm: job=%s time limit in %lld s, and the ordered stop may take %llu s (the learner %llu ms: longest recent "
        "step %.0f ms x %d or stop_timeout_ms; the actors %llu ms: stop_timeout_ms or flush_timeout_ms + %d ms; the "
        "env servers stop_timeout_ms; %d s to spare)",
        f->slurm.job_id, (long long)(left / 1000), (unsigned long long)(need / 1000), (unsigned long long)learner_ms,
        step_ms, LH_LAUNCH_STOP_STEP_FACTOR, (unsigned long long)lh_launch_actor_stop_ms(f),
        LH_LAUNCH_ACTOR_STOP_MARGIN_MS, LH_LAUNCH_STOP_MARGIN_S);
  begin_shutdown(L, "time limit");
}

/* SIGKILL to a stuck child whose SIGTERM did not end it in time. */
static void kill_overdue(launcher *L, int64_t now) {
  for (size_t i = 0; i < L->f->n; i++) {
    lh_launch_child *c = &L->f->child[i];
    if (c->pid > 0 && c->kill_at_ms && now >= c->kill_at_ms) {
      event(L, "watchdog: name=%s did not stop in stop_timeout_ms; SIGKILL", c->name);
      lh_launch_child_signal(c, SIGKILL);
      lh_launch_child_signal(c, SIGCONT);
      c->kill_at_ms = 0;
    }
  }
}

static int role_running(const lh_launch_fleet *f, lh_launch_role role) {
  for (size_t i = 0; i < f->n; i++)
    if (f->child[i].role == role && f->child[i].pid > 0) return 1;
  return 0;
}

/* One step of the ordered shutdown: SIGTERM to the phase's children when it
 * begins, SIGKILL to those left at its deadline, the next phase when none
 * is left. */
static void shutdown_step(launcher *L) {
  static const lh_launch_role role_of[] = {[PHASE_AGENTS] = LH_CHILD_AGENT, [PHASE_ACTORS] = LH_CHILD_ACTOR,
                                           [PHASE_LEARNER] = LH_CHILD_LEARNER, [PHASE_ENV] = LH_CHILD_ENV_SERVER};
  lh_launch_fleet *f = L->f;
  while (L->ph != PHASE_RUN && L->ph != PHASE_DONE) {
    lh_launch_role role = role_of[L->ph];
    int64_t now = now_ms();
    if (!L->phase_deadline_ms) {
      uint64_t wait_ms = f->fleet.stop_timeout_ms;
      if (role == LH_CHILD_LEARNER && role_running(f, role)) {
        /* The learner finishes its step and writes a checkpoint first. */
        double step_ms = 0;
        wait_ms = lh_launch_learner_stop_ms(f, &step_ms);
        event(L, "stopping the learner: waiting up to %llu ms (stop_timeout_ms=%llu, longest recent step %.0f ms x %d)",
              (unsigned long long)wait_ms, (unsigned long long)f->fleet.stop_timeout_ms, step_ms,
              LH_LAUNCH_STOP_STEP_FACTOR);
      } else if (role == LH_CHILD_ACTOR) {
        /* An actor asked to stop delivers what it holds first. */
        wait_ms = lh_launch_actor_stop_ms(f);
      }
      L->phase_deadline_ms = now + (int64_t)wait_ms;
      for (size_t i = 0; i < f->n; i++) {
        lh_launch_child *c = &f->child[i];
        if (c->role != role) continue;
        c->restart_at_ms = 0;
        if (c->pid > 0) {
          c->stopping = 1;
          /* mpirun forwards SIGUSR1 to every rank (they stop at the same
           * turn and it exits 0); on SIGTERM it would end the job itself.
           * So does srun, for a job step's tasks (cli/launch/launch_slurm.c). */
          if ((c->role == LH_CHILD_LEARNER && f->fleet.learners > 1) ||
              (f->slurm.on && (c->role == LH_CHILD_LEARNER || c->role == LH_CHILD_ACTOR)))
            kill(c->pid, SIGUSR1);
          else lh_launch_child_signal(c, SIGTERM);
        } else {
          c->done = 1;
        }
      }
    }
    if (role_running(f, role) && (now >= L->phase_deadline_ms || stop_signals >= 2)) {
      for (size_t i = 0; i < f->n; i++) {
        lh_launch_child *c = &f->child[i];
        if (c->role != role || c->pid <= 0 || c->killed) continue;
        event(L, "killing name=%s pid=%lld: %s", c->name, (long long)c->pid,
              stop_signals >= 2 ? "second signal" : "not gone after its stop timeout");
        c->killed = 1;
        L->killed = 1;
        lh_launch_child_signal(c, SIGKILL);
      }
    }
    if (role_running(f, role)) return;
    L->ph++;
    L->phase_deadline_ms = 0;
    if (L->ph == PHASE_ACTORS && f->fleet.agents) event(L, "agents stopped: stopping the actors");
    if (L->ph == PHASE_LEARNER) event(L, "actors stopped: stopping the learner");
    else if (L->ph == PHASE_ENV && f->child[0].role == LH_CHILD_ENV_SERVER) event(L, "learner stopped: stopping the env server");
  }
}

static void screen(launcher *L, FILE *out, int ansi, int64_t up_ms) {
  lh_launch_status_print(L->f, out, ansi, up_ms);
  if (!ansi) return;
  /* Within 80 columns, as the status above: a long event ends in "...",
   * whole in launch.log. */
  fprintf(out, "\nevents (all in launch.log of [fleet] log_dir):\n");
  for (int i = 0; i < L->n_recent; i++) {
    size_t n = strlen(L->recent[i]);
    if (n <= 77)
      lh_cli_term_printf(out, "  %s\n", L->recent[i]);
    else
      lh_cli_term_printf(out, "  %.74s...\n", L->recent[i]);
  }
  fflush(out);
}

/* A line of the plan: on stdout (--dry-run), or an event. */
static void plan_line(void *ctx, const char *text) { fprintf(ctx, "%s\n", text); }
static void plan_event(void *ctx, const char *text) { event(ctx, "%s", text); }

int lh_cmd_launch(int argc, char **argv) {
  const char *config = NULL, *status = "auto", *run_id = NULL, *engine = "local", *slurm_script = NULL;
  int slurm_submit = 0, dry_run = 0;
  lh_cli_sets sets = {0};
  const lh_cli_opt opts[] = {
      {"--status", LH_CLI_OPT_STRING, &status, NULL, "MODE",
       "screen: redraw in place; plain: status lines every status_interval_ms; off: none; auto "
       "(default): screen when stdout is a terminal, plain otherwise"},
      {"--run-id", LH_CLI_OPT_STRING, &run_id, NULL, "ID", "the run's id, given to every learner and actor"},
      {"--slurm", LH_CLI_OPT_FLAG, &slurm_submit, NULL, NULL,
       "write the batch script (LOG_DIR/slurm.sh, or --slurm-script's path) and submit it with sbatch; its "
       "body runs this launcher with --engine slurm in the allocation. [fleet] slurm_partition, "
       "slurm_time, slurm_nodes, slurm_options (sbatch), slurm_step_options (srun), slurm_mpi"},
      {"--slurm-script", LH_CLI_OPT_STRING, &slurm_script, NULL, "OUT.sh",
       "where the batch script goes; without --slurm it is only written"},
      {"--engine", LH_CLI_OPT_STRING, &engine, NULL, "local|slurm",
       "slurm: each child is a job step of the allocation it runs in (`srun --ntasks=M --mpi=pmix longhaul "
       "learner`, one `srun --ntasks=1 --overlap longhaul actor` per actor), supervised and restarted as "
       "below (docs/operations.md, \"Slurm\")"},
      {"--dry-run", LH_CLI_OPT_FLAG, &dry_run, NULL, NULL,
       "check everything a launch checks (its locks checked, none kept), create nothing (no folder or lock "
       "file), print the plan and start nothing: the learner ranks with their hosts, endpoints and stores, the expert groups of [learner] "
       "expert_parallel (P consecutive ranks; the learner count and [model] experts must be multiples of "
       "P, else exit 2), the actors and their ranks"},
      {"--set", LH_CLI_OPT_SETS, &sets, NULL, "S.K=V",
       "override key K of section [S] of FLEET.ini (repeatable); given to every child too"},
  };
  size_t npos = 0;
  int prc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], &config, 1, &npos);
  if (prc) return lh_cli_parse_exit(prc);
  if (!config) {
    fprintf(stderr, "longhaul launch: FLEET.ini is required (see longhaul launch --help)\n");
    return LH_EXIT_USAGE;
  }
  if (run_id && lh_cli_run_id_arg("launch", run_id)) return LH_EXIT_USAGE;
  if (dry_run && (slurm_submit || slurm_script)) {
    fprintf(stderr, "longhaul launch: --dry-run does not go with --slurm or --slurm-script\n");
    return LH_EXIT_USAGE;
  }
  if (strcmp(engine, "local") && strcmp(engine, "slurm")) {
    fprintf(stderr, "longhaul launch: --engine '%s' is not local or slurm\n", engine);
    return LH_EXIT_USAGE;
  }
  int mode; /* 0 off, 1 plain, 2 screen */
  if (!strcmp(status, "auto")) mode = isatty(STDOUT_FILENO) ? 2 : 1;
  else if (!strcmp(status, "screen")) mode = 2;
  else if (!strcmp(status, "plain")) mode = 1;
  else if (!strcmp(status, "off")) mode = 0;
  else {
    fprintf(stderr, "longhaul launch: --status '%s' is not auto, screen, plain or off\n", status);
    return LH_EXIT_USAGE;
  }
  lh_launch_fleet *f = calloc(1, sizeof *f);
  if (!f) {
    fprintf(stderr, "longhaul launch: out of memory\n");
    return LH_EXIT_RUNTIME;
  }
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  f->sets = sets.set, f->n_sets = sets.n, f->dry_run = dry_run;
  if (run_id) snprintf(f->run_id, sizeof f->run_id, "%s", run_id);
  if (lh_launch_fleet_init(f, config, &err)) {
    lh_cli_term_printf(stderr, "longhaul launch: %s\n", err.msg);
    lh_launch_unlock(f);
    free(f);
    return lh_cli_exit_for_error(err.code);
  }
  if (slurm_submit || slurm_script) {
    /* The job's own launcher takes the locks: they must be free before
     * it can start. */
    lh_launch_unlock(f);
    int rc = lh_launch_slurm_command(f, slurm_script, slurm_submit);
    free(f);
    return rc;
  }
  if (!strcmp(engine, "slurm") && lh_launch_slurm_prepare(f, &err)) {
    lh_cli_term_printf(stderr, "longhaul launch: %s\n", err.msg);
    lh_launch_unlock(f);
    free(f);
    return lh_cli_exit_for_error(err.code);
  }
  if (dry_run) {
    int rc = lh_launch_plan(f, 0, plan_line, stdout, &err);
    if (rc) lh_cli_term_printf(stderr, "longhaul launch: %s\n", err.msg);
    lh_launch_unlock(f);
    free(f);
    return lh_cli_exit_for_error(rc);
  }
  launcher L = {.f = f, .to_stderr = mode != 2, .ph = PHASE_RUN};
  char path[LH_LAUNCH_PATH_BYTES + 16];
  snprintf(path, sizeof path, "%s/launch.log", f->fleet.log_dir);
  L.events = fopen(path, "a");
  lh_cli_on_signals(on_signal, (const int[]){SIGINT, SIGTERM}, 2);
  signal(SIGPIPE, SIG_IGN);
  event(&L, "fleet run_id=%s config=%s learners=%llu actors=%llu log_dir=%s bin=%s", f->run_id, f->config_path,
        (unsigned long long)f->fleet.learners, (unsigned long long)f->fleet.actors, f->fleet.log_dir, f->bin);
  lh_launch_plan(f, 1, plan_event, &L, NULL);
  if (f->slurm.on)
    event(&L, "slurm job=%s learner_nodes=%u first=%s addr=%s", f->slurm.job_id, f->slurm.n_hosts,
          f->slurm.hosts[0], f->slurm.addrs[0]);
  int64_t t0 = now_ms(), last_screen = 0, last_steps = 0, last_watchdog = t0, last_limit = 0;
  lh_launch_watchdog_init(&L.watchdog, t0);
  for (size_t i = 0; i < f->n && !stop_signals; i++)
    if (start(&L, i)) {
      failed(&L, "%s could not start (see %s/launch.log)", f->child[i].name, f->fleet.log_dir);
      begin_shutdown(&L, "a child could not start");
      break;
    }
  while (L.ph != PHASE_DONE) {
    reap(&L);
    int64_t now = now_ms();
    if (stop_signals && L.ph == PHASE_RUN) begin_shutdown(&L, "signal");
    if (L.ph == PHASE_RUN && f->fleet.duration_s && now - t0 >= (int64_t)f->fleet.duration_s * 1000)
      begin_shutdown(&L, "duration_s");
    if (L.ph == PHASE_RUN && f->fleet.steps && now - last_steps >= LAUNCH_STEPS_MS) {
      last_steps = now;
      uint64_t done = lh_launch_fleet_steps_done(f);
      if (done >= f->fleet.steps) {
        event(&L, "steps done: the store holds %llu train steps (steps=%llu)", (unsigned long long)done,
              (unsigned long long)f->fleet.steps);
        begin_shutdown(&L, "steps done");
      }
    }
    if (L.ph == PHASE_RUN && f->slurm.on && now - last_limit >= LAUNCH_LIMIT_MS) {
      last_limit = now;
      time_limit_step(&L, now);
    }
    if (L.ph == PHASE_RUN && now - last_watchdog >= LAUNCH_WATCHDOG_MS) {
      last_watchdog = now;
      watchdog_step(&L, now);
    }
    kill_overdue(&L, now);
    if (L.ph == PHASE_RUN)
      for (size_t i = 0; i < f->n; i++) {
        lh_launch_child *c = &f->child[i];
        if (c->pid <= 0 && !c->done && c->restart_at_ms && now >= c->restart_at_ms && start(&L, i)) {
          c->done = 1;
          failed(&L, "%s could not restart (see %s/launch.log)", c->name, f->fleet.log_dir);
          begin_shutdown(&L, "a child could not restart");
        }
      }
    if (L.ph != PHASE_RUN) shutdown_step(&L);
    if (L.ph == PHASE_DONE) break;
    int64_t every = mode == 2 ? LAUNCH_SCREEN_MS : (int64_t)f->fleet.status_interval_ms;
    if (mode && now - last_screen >= every) {
      screen(&L, stdout, mode == 2, now - t0);
      last_screen = now;
    }
    struct timespec ts = {0, LAUNCH_TICK_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (mode) screen(&L, stdout, 0, now_ms() - t0);
  int clean = !L.failed && !L.killed;
  char restarts[1024] = "";
  for (size_t i = 0; i < f->n; i++) {
    size_t len = strlen(restarts);
    snprintf(restarts + len, sizeof restarts - len, " %s=%llu", f->child[i].name,
             (unsigned long long)f->child[i].restarts);
  }
  L.to_stderr = 1;
  event(&L, "done reason=%s clean=%d uptime_s=%.1f restarts:%s", L.reason[0] ? L.reason : "none", clean,
        (double)(now_ms() - t0) / 1000.0, restarts);
  if (L.failure[0]) lh_cli_term_printf(stderr, "longhaul launch: the fleet failed: %s\n", L.failure);
  if (L.events) fclose(L.events);
  lh_launch_unlock(f);
  free(f);
  return clean ? LH_EXIT_OK : LH_EXIT_RUNTIME;
}

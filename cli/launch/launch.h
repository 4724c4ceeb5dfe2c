/* cli: `longhaul launch FLEET.ini`, the fleet supervisor (ARCHITECTURE.md §1, §8).
 *
 * One INI file holds [model] [learner] [actor] [env] and the launcher's own
 * [fleet]. The launcher starts M learners (one plain child, or one mpirun
 * job of M ranks), N actors and optionally an env server, each a child
 * process logging to LOG_DIR/<name>.log; restarts what dies (backoff
 * doubled per consecutive restart, capped; the learner with --resume);
 * shuts down in order on SIGINT/SIGTERM or after duration_s; and shows a
 * status screen read from the replay store. The files:
 *   launch_config.c    the [fleet] section
 *   launch_check.c     what is checked before any child starts
 *   launch_lock.c      one fleet per store and per log folder
 *   launch_child.c     one child process: spawn with its log, signal, reap
 *   launch_fleet.c     the children of a fleet, their command lines, restarts
 *   launch_watchdog.c  progress read from the store: who is stuck
 *   launch_status.c    the status screen
 *   launch_slurm.c     the Slurm engine: batch script, sbatch, job steps
 *   launch_plan.c      the plan --dry-run prints: ranks, hosts, expert groups
 *   cmd_launch.c       arguments, signals and the supervision loop */
#ifndef LH_CLI_LAUNCH_H
#define LH_CLI_LAUNCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cli/launch/launch_slurm.h"
#include "actors/actors.h"
#include "common/common.h"
#include "common/file_lock.h"
#include "common/ini_doc.h"
#include "common/run_id.h"
#include "learner/learner.h"
#include "store/store.h"

#define LH_LAUNCH_MAX_LEARNERS 64
#define LH_LAUNCH_MAX_ACTORS 256
#define LH_LAUNCH_MAX_AGENTS 256
#define LH_LAUNCH_PATH_BYTES 512
#define LH_LAUNCH_NAME_BYTES 64
#define LH_LAUNCH_COMMAND_BYTES 2048

typedef struct {
  uint64_t learners;              /* M, 1..64; 0: actors only, for learners started elsewhere (1) */
  uint64_t actors;                /* N, 0..256 (2) */
  uint64_t first_actor;           /* the first actor's index: actor-<first_actor> .. (0) */
  char log_dir[LH_LAUNCH_PATH_BYTES];  /* (logs) */
  char init[LH_LAUNCH_PATH_BYTES];     /* SFT checkpoint: learner --init, actors --ckpt ("") */
  uint64_t steps;                 /* ordered shutdown once the store holds this many train
                                     steps (the learner may finish one more); 0: none (0) */
  uint64_t duration_s;            /* ordered shutdown after this long; 0: until a signal (0) */
  uint64_t restart_backoff_ms;    /* first restart delay, doubled per consecutive one (1000) */
  uint64_t restart_backoff_max_ms;/* the cap (30000) */
  uint64_t max_restarts;          /* per process; one more death ends the fleet (10) */
  uint64_t stop_timeout_ms;       /* per shutdown phase, then SIGKILL (30000) */
  uint64_t status_interval_ms;    /* plain status lines when not a terminal (5000) */
  uint64_t stall_timeout_s;       /* the watchdog: no train step, or no heartbeat of an actor, for
                                     this long is a stuck process; 0: no watchdog (900) */
  char mpirun[LH_LAUNCH_PATH_BYTES];   /* the MPI launcher for M > 1 (mpirun) */
  char env_server[LH_LAUNCH_COMMAND_BYTES];  /* command run by /bin/sh as a supervised child ("") */
  uint64_t agents;                /* agent programs, 0..256, each a supervised child (0) */
  char agent_command[LH_LAUNCH_COMMAND_BYTES];  /* their command, run by /bin/sh, with OPENAI_BASE_URL
                                                  the endpoint of actor j mod N (docs/agents.md) ("") */
  uint32_t n_actor_envs;          /* actor_envs = calc,needle: actor i gets entry i mod n */
  char actor_envs[LH_LAUNCH_MAX_ACTORS][LH_LAUNCH_NAME_BYTES];
  /* Slurm (cli/launch/launch_slurm.h): sbatch's --partition, --time, --nodes (0:
   * Slurm's choice), more sbatch options for the batch script, more srun
   * options for every step, srun's --mpi for the learner, and srun. */
  char slurm_partition[LH_LAUNCH_NAME_BYTES];     /* ("") */
  char slurm_time[LH_LAUNCH_NAME_BYTES];          /* ("") */
  uint64_t slurm_nodes;                           /* (0) */
  char slurm_options[LH_SLURM_OPTION_BYTES];      /* ("") */
  char slurm_step_options[LH_SLURM_OPTION_BYTES]; /* ("") */
  char slurm_mpi[LH_LAUNCH_NAME_BYTES];           /* (pmix) */
  char srun[LH_LAUNCH_PATH_BYTES];                /* (srun) */
} lh_launch_config;

void lh_launch_config_default(lh_launch_config *c);
/* Appends the reference of [fleet] (every key: its values, default and
 * doc, from the reader's table; common/ini_section.h) in Markdown to out:
 * 0, LH_ENOMEM, or LH_EINVAL naming a key without a doc. */
int lh_launch_config_reference(lh_str *out, lh_errbuf *err);
/* Reads [fleet] of the INI file at path over the defaults; other sections
 * are the other modules'. An unknown key, a repeated key or a bad value is
 * LH_ECONFIG with err naming the file, the line and the key. */
int lh_launch_config_load(const char *path, lh_launch_config *c, lh_errbuf *err);
/* The same from a document (common/ini_doc.h); log_dir and init resolved
 * against their file's folder. */
int lh_launch_config_read(const lh_ini_doc *doc, lh_launch_config *c, lh_errbuf *err);
int lh_launch_config_parse(const char *text, const char *source, lh_launch_config *c, lh_errbuf *err);

/* ---- one child ---------------------------------------------------------- */

typedef enum { LH_CHILD_LEARNER, LH_CHILD_ACTOR, LH_CHILD_ENV_SERVER, LH_CHILD_AGENT } lh_launch_role;

typedef struct {
  char name[LH_LAUNCH_NAME_BYTES];  /* learner, actor-<i>, env-server, agent-<j>: the log's name */
  lh_launch_role role;
  int index;                        /* actor or agent index; 0 otherwise */
  pid_t pid;                        /* 0 when not running */
  int64_t started_ms;               /* monotonic, of the current or last start */
  int64_t restart_at_ms;            /* monotonic; 0 when no restart is due */
  uint64_t starts, restarts;
  uint32_t consecutive;             /* restarts since it last stayed up */
  int last_status;                  /* waitpid status of the last exit */
  int exited;                       /* has exited at least once */
  int stopping;                     /* SIGTERM sent by the shutdown */
  int killed;                       /* SIGKILL sent after stop_timeout_ms */
  int done;                         /* exited for good: not to be restarted */
  int64_t kill_at_ms;               /* monotonic: SIGKILL then, if still running (a stuck child) */
  uint32_t watchdog_restarts;       /* the watchdog's restarts since it last made progress */
} lh_launch_child;

/* Starts argv[0] (a path) with argv in a new process group (a terminal's
 * Ctrl-C reaches only the launcher, which stops the children in order),
 * stdout and stderr appended to log_path, and SIGTERM when the launcher
 * dies. One line naming the command goes into the log first. */
int lh_launch_child_spawn(lh_launch_child *c, char *const argv[], const char *log_path, lh_errbuf *err);
/* The last line of the log at log_path that the child wrote (not the
 * launcher's start line), control characters and all as one field of
 * terminal text (lh_cli_term_field: \xNN); "" when none:
 * what a child that exits with a usage error said about it. */
void lh_launch_child_last_line(const char *log_path, char *out, size_t bytes);
/* Sends sig to the child (and its process group); a no-op when not running. */
void lh_launch_child_signal(lh_launch_child *c, int sig);

/* ---- the fleet ---------------------------------------------------------- */

typedef struct {
  lh_launch_config fleet;
  char config_path[LH_LAUNCH_PATH_BYTES];  /* absolute */
  char bin[LH_LAUNCH_PATH_BYTES];          /* this binary (/proc/self/exe) */
  char db[LH_LAUNCH_PATH_BYTES];           /* [learner] db: rank 0's store, for the status screen */
  uint64_t actor_flush_ms;                 /* [actor] flush_timeout_ms: how long an actor waits for acks
                                              once asked to stop (lh_launch_actor_stop_ms) */
  uint64_t ranks;                          /* learner ranks: [fleet] learners, or for an actors-only fleet
                                              the entries of [learner] ingest_endpoints (1 without) */
  char run_id[LH_RUN_ID_BYTES];            /* this launch's run (launch --run-id, or a new one; none for an
                                              actors-only fleet not given one): --run-id of every child */
  const char *const *sets;                 /* --set overrides: read with the file and given to every */
  size_t n_sets;                           /* child; set by the caller before lh_launch_fleet_init */
  int dry_run;                             /* --dry-run, set by the caller before lh_launch_fleet_init:
                                              no folder or lock file is created, the locks only checked */
  size_t n;                                /* children: env server, learner, actors, agents, in that order */
  lh_launch_child child[LH_LAUNCH_MAX_ACTORS + LH_LAUNCH_MAX_AGENTS + 2];
  char agent_base[LH_LAUNCH_PATH_BYTES];   /* http://HOST: of [actor] agent_address, its port below */
  uint64_t agent_port, agent_group;        /* actor i serves on agent_port + i; [actor] group_size */
  char agent_key_file[LH_LAUNCH_PATH_BYTES]; /* [actor] agent_key_file: the agents' OPENAI_API_KEY */
  lh_launch_slurm slurm;                   /* --engine slurm (cli/launch/launch_slurm.c) */
  lh_file_lock *store_lock, *logs_lock;    /* lh_launch_lock's */
} lh_launch_fleet;

/* Fills f from the config file with f->sets applied (all sections checked
 * before anything starts); LH_ECONFIG/the modules' config codes with err
 * naming the line. */
int lh_launch_fleet_init(lh_launch_fleet *f, const char *config_path, lh_errbuf *err);
/* Everything a child would only find out by itself, checked before any
 * starts (launch_check.c): [learner] expert_parallel against the learners
 * and the [model] experts, the environments the actors open, the env
 * server's program, the endpoints the fleet binds here (well-formed, not
 * repeated, free). LH_ECONFIG with err naming the file, section and key. */
int lh_launch_check(const lh_launch_fleet *f, const lh_learner_config *lc, const lh_actors_config *ac,
                    const lh_model_config *mc, lh_errbuf *err);
/* Takes the fleet's locks on its store and log folder (launch_lock.c);
 * holder describes this launch. LH_ECONFIG naming the fleet that holds
 * one, or LH_EIO. Released by lh_launch_unlock or the process's end.
 * With probe (--dry-run) the same check, but no lock is kept and no lock
 * file created: one that is not there is held by nobody. */
int lh_launch_lock(lh_launch_fleet *f, const char *holder, int probe, lh_errbuf *err);
void lh_launch_unlock(lh_launch_fleet *f);

/* Starts child i (first start or a restart: the learner's restarts add
 * --resume and the steps still to go). */
int lh_launch_fleet_start(lh_launch_fleet *f, size_t i, lh_errbuf *err);
/* How the launcher opens a store: read-only, no check, waiting at most 1 s
 * for a lock (it polls every second; a busy store only skips a poll). */
void lh_launch_store_options(lh_store_options *o);
/* The fleet's rank stores opened read-only as one (store.h,
 * lh_store_open_ranks); NULL when this fleet has no learner here or a
 * rank's store cannot be read yet. Close with lh_store_close. */
lh_store *lh_launch_fleet_store(const lh_launch_fleet *f);
/* Train steps rank 0's store holds (max step + 1); 0 when it cannot be read yet. */
uint64_t lh_launch_fleet_steps_done(const lh_launch_fleet *f);
/* The log file of child i. */
void lh_launch_fleet_log_path(const lh_launch_fleet *f, size_t i, char *out, size_t bytes);

/* ---- stopping the learner (launch_stop.c) --------------------------------- */

/* How long the learner may take to stop (its SIGTERM to its SIGKILL, in
 * the ordered shutdown and for a stuck learner): the longer of [fleet]
 * stop_timeout_ms and LH_LAUNCH_STOP_STEP_FACTOR times the longest of its
 * last 8 train steps in the store, so that a stop during a long step waits
 * for the step and the final checkpoint. *step_ms (may be NULL) gets that
 * step time (0 when the store has none yet). */
#define LH_LAUNCH_STOP_STEP_FACTOR 3
uint64_t lh_launch_learner_stop_ms(const lh_launch_fleet *f, double *step_ms);
/* How long an actor may take to stop (its SIGTERM to its SIGKILL, in the
 * ordered shutdown and for a stuck actor): the longer of [fleet]
 * stop_timeout_ms and the actors' [actor] flush_timeout_ms plus
 * LH_LAUNCH_ACTOR_STOP_MARGIN_MS. An actor asked to stop waits that long
 * for the acks of what it holds, then closes its sockets (their linger is
 * at most 2 s): a SIGKILL before would throw away episodes it could still
 * deliver. */
#define LH_LAUNCH_ACTOR_STOP_MARGIN_MS 4000
uint64_t lh_launch_actor_stop_ms(const lh_launch_fleet *f);
/* How long a whole ordered shutdown may take when the learner may take
 * learner_ms: the actors' phase (lh_launch_actor_stop_ms), the env
 * servers' (stop_timeout_ms), the learner's, and LH_LAUNCH_STOP_MARGIN_S for the launcher to
 * exit. A Slurm job begins its stop this long before its time limit. */
#define LH_LAUNCH_STOP_MARGIN_S 30
uint64_t lh_launch_shutdown_ms(const lh_launch_fleet *f, uint64_t learner_ms);

/* ---- the watchdog (launch_watchdog.c) ------------------------------------ */

typedef struct {
  int64_t last_step;          /* the newest train step seen; -1 none */
  int64_t step_seen_ms;       /* monotonic: when it (or the launch) was first seen */
  int64_t since_wall_ms;      /* heartbeats older than this are not read */
  int64_t heartbeat_ms[LH_LAUNCH_MAX_ACTORS + 2];       /* per child: its newest heartbeat's time_ms */
  int64_t heartbeat_seen_ms[LH_LAUNCH_MAX_ACTORS + 2];  /* monotonic: when that one was first seen */
} lh_launch_watchdog;

void lh_launch_watchdog_init(lh_launch_watchdog *w, int64_t now_ms);
/* Reads the store's progress and returns the index of a stuck child, with
 * why saying what the store shows, or -1 when none is (or the store cannot
 * be read, or [fleet] stall_timeout_s is 0). now_ms is monotonic. */
int lh_launch_watchdog_poll(lh_launch_watchdog *w, const lh_launch_fleet *f, int64_t now_ms, char *why,
                            size_t why_bytes);
/* When child i last made progress (monotonic ms): its newest step or heartbeat. */
int64_t lh_launch_watchdog_progress(const lh_launch_watchdog *w, size_t i, const lh_launch_fleet *f);

/* ---- status ------------------------------------------------------------- */

/* Renders one status screen of the fleet to out: the actors' newest
 * heartbeats and the learner's newest train_steps row from the store (opened
 * read-only, and closed again, each time), the launcher's restart counts
 * and states. ansi: clear and redraw in place; else plain log lines. */
void lh_launch_status_print(const lh_launch_fleet *f, FILE *out, int ansi, int64_t uptime_ms);

/* ---- the plan (launch_plan.c) --------------------------------------------- */

/* One line of the plan, without its newline. */
typedef void (*lh_launch_plan_line)(void *ctx, const char *text);
/* Hands the plan of fleet f (after lh_launch_fleet_init, and under
 * --engine slurm lh_launch_slurm_prepare) to line, one line at a time:
 * the learner ranks with their host, ingest endpoint and store, [learner]
 * expert_parallel and its groups ("expert group 1: ranks 2,3 on node-a" or
 * "on node-a,node-b", a host per rank, when the ranks do not share one),
 * the actors with their rank and environment, the env server. groups_only:
 * the group lines alone (none when expert_parallel is 1). 0, or the code
 * of a config that can no longer be read. */
int lh_launch_plan(const lh_launch_fleet *f, int groups_only, lh_launch_plan_line line, void *ctx, lh_errbuf *err);

/* ---- Slurm (cli/launch/launch_slurm.c; cli/launch/launch_slurm.h says how) --- */

/* Writes the batch script of the fleet f (after lh_launch_fleet_init) to
 * path: #SBATCH lines from [fleet] and a body running `longhaul launch
 * CONFIG --engine slurm`. LH_ECONFIG for a value a script cannot hold. */
int lh_launch_slurm_write_script(const lh_launch_fleet *f, const char *path, lh_errbuf *err);
/* Runs `sbatch --parsable script`; job_id gets the job's id. */
int lh_launch_slurm_submit(const char *script, char *job_id, size_t bytes, lh_errbuf *err);
/* Inside an allocation: finds its nodes and their addresses, makes the
 * children's endpoint overrides, and turns f's children into job steps.
 * LH_ECONFIG outside an allocation or for endpoints a multi-node fleet
 * cannot use. */
int lh_launch_slurm_prepare(lh_launch_fleet *f, lh_errbuf *err);
/* Appends to argv[n..] the srun command that makes child i a job step
 * (nothing when the engine is not slurm); returns the new n. */
int lh_launch_slurm_step(lh_launch_fleet *f, size_t i, char **argv, int n);
/* `launch --slurm` / `--slurm-script path`: writes the batch script (path,
 * or LOG_DIR/slurm.sh) and with submit hands it to sbatch; prints what it
 * did and returns the command's exit code. */
int lh_launch_slurm_command(const lh_launch_fleet *f, const char *path, int submit);
/* Appends to argv[n..] child i's endpoint overrides under slurm (--set
 * pairs; nothing otherwise); returns the new n. */
int lh_launch_slurm_sets(lh_launch_fleet *f, size_t i, char **argv, int n);
/* The end of the job's time limit, in ms since the epoch, from
 * `squeue -h -j JOB -o %e`; *end_ms 0 when the job has none. */
int lh_launch_slurm_end_ms(const lh_launch_fleet *f, int64_t *end_ms, lh_errbuf *err);

#endif

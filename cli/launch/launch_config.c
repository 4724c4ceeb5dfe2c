/* cli: the [fleet] section of the one INI file, read by common's section
 * reader (common/ini_section.h) as the [actor] and [learner] sections are:
 * a table of keys, and every message names the file, line, section and key. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/launch/launch.h"
#include "common/ini_section.h"
#include "common/limits.h"

static int parse_envs(const char *v, void *cfg, char *why, size_t why_bytes);
static int format_envs(const void *cfg, char *out, size_t bytes);

/* Every key of [fleet], with what it does: the reader, its "known keys"
 * hint and the reference (docs/configuration.md) walk this one table. */
#define T lh_launch_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_U64(T, learners, 0, LH_LAUNCH_MAX_LEARNERS,
                   "M learner ranks. 0: actors only, for learners started elsewhere; 1 runs `longhaul learner` "
                   "as a plain child; M > 1 runs `mpirun --oversubscribe -n M longhaul learner` (rank r binds "
                   "its ingest at entry r of `[learner] ingest_endpoints`, or without it at the "
                   "`ingest_endpoint` port + 10 r, and keeps the store `db.rank<r>`). With `ingest_endpoints` "
                   "its entries must number M (checked before anything starts)."),
    LH_INI_KEY_U64(T, actors, 0, LH_LAUNCH_MAX_ACTORS,
                   "N actors, `actor-0` .. `actor-(N-1)`; actor i is bound to rank i mod M (`--learner-rank`)."),
    LH_INI_KEY_U64(T, first_actor, 0, 1000000,
                   "The first actor's index: `actor-<first_actor>` .. (actors of several hosts keep distinct "
                   "names)."),
    LH_INI_KEY_PATH(T, log_dir, 0,
                    "One log per child, `<name>.log`, appended across restarts (each start adds a `launch: "
                    "start` line with the command); `<name>.pid`; the launcher's own events in `launch.log`."),
    LH_INI_KEY_PATH(T, init, 1,
                    "An SFT checkpoint folder: the learner's `--init`, the actors' `--ckpt`."),
    LH_INI_KEY_U64(T, steps, 0, LH_MAX_COUNT,
                   "Stop in order once the store holds this many train steps (0: never)."),
    LH_INI_KEY_U64(T, duration_s, 0, 100.0 * 365 * 86400, "Stop in order after this many seconds (0: never)."),
    LH_INI_KEY_U64(T, restart_backoff_ms, 1, 3600000,
                   "The first restart delay, doubled per consecutive restart up to `restart_backoff_max_ms` "
                   "(the count starts over once a child stayed up 60 s)."),
    LH_INI_KEY_U64(T, restart_backoff_max_ms, 1, 86400000,
                   "The cap of the restart delay; at least `restart_backoff_ms`."),
    LH_INI_KEY_U64(T, max_restarts, 0, 1000000, "Restarts per child; one more death ends the fleet (exit 1)."),
    LH_INI_KEY_U64(T, stop_timeout_ms, 1, 3600000,
                   "Per shutdown phase; then SIGKILL. The learner's phase (and a stuck learner's restart) "
                   "waits the longer of this and 3 times the longest of its last 8 train steps "
                   "(`train_steps.step_ms`), so that a stop during a long step lets the step end and the final "
                   "checkpoint be written; the launcher logs the wait it chose (`stopping the learner: "
                   "waiting up to N ms`). The actors' phase (and a stuck actor's restart) waits the longer of "
                   "this and `[actor] flush_timeout_ms` + 4000, the time an actor may take to deliver what it "
                   "holds."),
    LH_INI_KEY_U64(T, status_interval_ms, 100, 3600000, "Plain status lines when stdout is not a terminal."),
    LH_INI_KEY_U64(T, stall_timeout_s, 0, 30 * 86400,
                   "The watchdog: this long without a new train step, or without a new heartbeat of an actor, "
                   "is a stuck process ([operations](operations.md#longhaul-launch)); 0: no watchdog. Set it "
                   "above the longest step plus the time the actors take to fill the first batch."),
    LH_INI_KEY_STR(T, mpirun, 0, "The MPI launcher for M > 1."),
    LH_INI_KEY_STR(T, env_server, 1,
                   "A command line (run by `/bin/sh` in the launcher's current folder) started first and "
                   "stopped last, supervised like the rest."),
    LH_INI_KEY_U64(T, agents, 0, LH_LAUNCH_MAX_AGENTS,
                   "Agent programs started after the actors, each a supervised child running `agent_command`; "
                   "agent j talks to actor j mod N, whose endpoint it gets in `OPENAI_BASE_URL` (with `[env] "
                   "name = agent`; [agents](agents.md)). An agent that exits 0 is done and not started again."),
    LH_INI_KEY_STR(T, agent_command, 1,
                   "The agents' command line, run by `/bin/sh` in the launcher's current folder with "
                   "`OPENAI_BASE_URL`, `OPENAI_API_KEY` (the token of `[actor] agent_key_file`, or `none`), "
                   "`LONGHAUL_GROUP_SIZE` (`[actor] group_size`) and `LONGHAUL_AGENT_INDEX` set."),
    LH_INI_KEY_CUSTOM(actor_envs, parse_envs, 0, format_envs,
                      "Names separated by commas (`calc, needle`): actor i plays entry i mod n instead of "
                      "`[env] name` (`--env`); the `[env]` options go to each, so they must suit all."),
    LH_INI_KEY_STR(T, slurm_partition, 1, "sbatch `--partition` ([operations](operations.md#slurm))."),
    LH_INI_KEY_STR(T, slurm_time, 1,
                   "sbatch `--time` (`2:00:00`); the launcher begins the ordered shutdown itself once less time "
                   "is left than it may take; SIGTERM reaches it that many seconds before the limit all the "
                   "same, counting the learner's phase as `stop_timeout_ms` (`--signal=B:TERM@...`)."),
    LH_INI_KEY_U64(T, slurm_nodes, 0, LH_LAUNCH_MAX_LEARNERS + LH_LAUNCH_MAX_ACTORS,
                   "sbatch `--nodes` (0: Slurm's choice)."),
    LH_INI_KEY_STR(T, slurm_options, 1,
                   "More sbatch options, one `#SBATCH` line (`--gres=gpu:1 --account=rl`)."),
    LH_INI_KEY_STR(T, slurm_step_options, 1,
                   "More srun options for every step, separated by spaces (at most 16; e.g. "
                   "`--mem-per-cpu=4G` for the learner where memory is a consumable resource)."),
    LH_INI_KEY_STR(T, slurm_mpi, 0,
                   "srun `--mpi` of the learner step for M > 1 (`srun --mpi=list`; Debian's OpenMPI 4.1 works "
                   "with `pmix`)."),
    LH_INI_KEY_STR(T, srun, 0, "The srun to run."),
};
#undef T

static const lh_ini_section SECTION = {
    .name = "fleet", .keys = KEYS, .n_keys = sizeof KEYS / sizeof KEYS[0],
    .unknown_key_error = LH_ECONFIG, .duplicate_error = LH_ECONFIG,
    .value_error = LH_ECONFIG, .syntax_error = LH_ECONFIG};

void lh_launch_config_default(lh_launch_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->learners = 1;
  c->actors = 2;
  snprintf(c->log_dir, sizeof c->log_dir, "logs");
  c->restart_backoff_ms = 1000;
  c->restart_backoff_max_ms = 30000;
  c->max_restarts = 10;
  c->stop_timeout_ms = 30000;
  c->status_interval_ms = 5000;
  c->stall_timeout_s = 900;
  snprintf(c->mpirun, sizeof c->mpirun, "mpirun");
  snprintf(c->slurm_mpi, sizeof c->slurm_mpi, "pmix");
  snprintf(c->srun, sizeof c->srun, "srun");
}

/* "calc, needle" into cfg->actor_envs; why says what is wrong. */
static int parse_envs(const char *v, void *cfg, char *why, size_t why_bytes) {
  lh_launch_config *c = cfg;
  c->n_actor_envs = 0;
  const char *s = v;
  while (*s) {
    while (*s == ' ' || *s == '\t') s++;
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    if (!len) return snprintf(why, why_bytes, "has an empty name (write names separated by commas)"), -1;
    if (len >= LH_LAUNCH_NAME_BYTES)
      return snprintf(why, why_bytes, "has a name over %d bytes", LH_LAUNCH_NAME_BYTES - 1), -1;
    if (c->n_actor_envs == LH_LAUNCH_MAX_ACTORS)
      return snprintf(why, why_bytes, "has more than %d names", LH_LAUNCH_MAX_ACTORS), -1;
    memcpy(c->actor_envs[c->n_actor_envs], s, len);
    c->actor_envs[c->n_actor_envs++][len] = 0;
    if (!end) break;
    s = end + 1;
    if (!*s) return snprintf(why, why_bytes, "ends with a comma"), -1;
  }
  if (!c->n_actor_envs) return snprintf(why, why_bytes, "is empty (leave the key out for [env] name)"), -1;
  return 0;
}

/* actor_envs as the config gives it: the names joined by ", ". */
static int format_envs(const void *cfg, char *out, size_t bytes) {
  const lh_launch_config *c = cfg;
  size_t n = 0;
  if (!bytes) return -1;
  out[0] = 0;
  for (size_t i = 0; i < c->n_actor_envs; i++) {
    int w = snprintf(out + n, bytes - n, "%s%s", i ? ", " : "", c->actor_envs[i]);
    if (w < 0 || (size_t)w >= bytes - n) return -1;
    n += (size_t)w;
  }
  return 0;
}

int lh_launch_config_reference(lh_str *out, lh_errbuf *err) {
  lh_launch_config defaults;
  lh_launch_config_default(&defaults);
  return lh_ini_section_reference(&SECTION, &defaults, out, err);
}

int lh_launch_config_read(const lh_ini_doc *doc, lh_launch_config *cfg, lh_errbuf *err) {
  if (!doc || !cfg) return lh_errbuf_set(err, LH_EINVAL, "fleet config: NULL document or config");
  lh_launch_config c;
  lh_launch_config_default(&c);
  lh_ini_lines lines;
  LH_TRY(lh_ini_section_read(&SECTION, doc, &c, NULL, &lines, err));
  if (c.restart_backoff_max_ms < c.restart_backoff_ms) {
    char where[300];
    lh_ini_later_where(&SECTION, &lines, "restart_backoff_max_ms", "restart_backoff_ms", where, sizeof where);
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [fleet] restart_backoff_max_ms = %llu is below restart_backoff_ms = %llu", where,
                         (unsigned long long)c.restart_backoff_max_ms, (unsigned long long)c.restart_backoff_ms);
  }
  *cfg = c;
  return 0;
}

int lh_launch_config_parse(const char *text, const char *source, lh_launch_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "fleet config: NULL text or config");
  lh_ini_source src = {.path = source, .text = text};
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_open(&src, &doc, err));
  int rc = lh_launch_config_read(doc, cfg, err);
  lh_ini_doc_free(doc);
  return rc;
}

int lh_launch_config_load(const char *path, lh_launch_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "fleet config: NULL path or config");
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_load(path, NULL, 0, &doc, err));
  int rc = lh_launch_config_read(doc, cfg, err);
  lh_ini_doc_free(doc);
  return rc;
}

/* cli: the children of a fleet and their command lines.
 *
 * Children, in the order they start (and the reverse of the order they
 * stop): the env server (when [fleet] env_server is set), the learner
 * (`longhaul learner`, or `mpirun -n M longhaul learner` for M > 1), then
 * actors actor-0 .. actor-(N-1). Actor i is bound to learner rank i mod M
 * (--learner-rank): rank r binds its ingest at entry r of [learner]
 * ingest_endpoints, or at the port of [learner] ingest_endpoint + 10 r
 * without it, and keeps its own store, db.rank<r> for r > 0
 * (learner/learner.h, "learner ranks"); rank 0 alone serves the weights. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/actors.h"
#include "cli/config.h"
#include "cli/launch/launch.h"
#include "learner/learner.h"
#include "model/model.h"
#include "store/store.h"

static int make_dirs(const char *path, lh_errbuf *err) {
  char buf[LH_LAUNCH_PATH_BYTES];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) && errno != EEXIST)
        return lh_errbuf_set(err, LH_ESYS, "cannot create the folder %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return 0;
}

int lh_launch_fleet_init(lh_launch_fleet *f, const char *config_path, lh_errbuf *err) {
  const char *const *sets = f->sets;
  size_t n_sets = f->n_sets;
  int dry_run = f->dry_run;
  char run_id[LH_RUN_ID_BYTES];
  memcpy(run_id, f->run_id, sizeof run_id);
  memset(f, 0, sizeof *f);
  f->sets = sets, f->n_sets = n_sets, f->dry_run = dry_run;
  memcpy(f->run_id, run_id, sizeof run_id);
  /* Every section is checked here, so a bad key stops the launch before
   * any process starts (each child would only stop on its own). */
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_load(config_path, sets, n_sets, &doc, err));
  lh_learner_config lc;
  lh_actors_config ac;
  lh_model_config mc;
  int rc = lh_cli_config_check(doc, err);
  if (!rc) rc = lh_launch_config_read(doc, &f->fleet, err);
  if (!rc) rc = lh_learner_config_read(doc, &lc, err);
  if (!rc) rc = lh_actors_config_read(doc, &ac, err);
  if (!rc) rc = lh_model_config_read(doc, &mc, err);
  lh_ini_doc_free(doc);
  LH_TRY(rc);
  if (!realpath(config_path, f->config_path))
    return lh_errbuf_set(err, LH_ESYS, "cannot resolve %s: %s", config_path, strerror(errno));
  ssize_t n = readlink("/proc/self/exe", f->bin, sizeof f->bin - 1);
  if (n <= 0 || (size_t)n >= sizeof f->bin - 1)
    return lh_errbuf_set(err, LH_ESYS, "cannot find this binary through /proc/self/exe: %s", strerror(errno));
  f->bin[n] = 0;
  snprintf(f->db, sizeof f->db, "%s", lc.db);
  f->actor_flush_ms = ac.flush_timeout_ms;
  const lh_launch_config *c = &f->fleet;
  if (c->init[0]) {
    char model[LH_LAUNCH_PATH_BYTES + 32];
    snprintf(model, sizeof model, "%s/model.safetensors", c->init);
    if (access(model, R_OK))
      return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] init = %s: no readable %s (run `longhaul sft` first)",
                           config_path, c->init, model);
  }
  /* Every rank must have its ingest endpoint: one entry of [learner]
   * ingest_endpoints per rank, or the last rank's port (+ 10 r) on both
   * sides. */
  char out[LH_LEARNER_TEXT_BYTES];
  /* Actors only: the learners run elsewhere, as many ranks as
   * ingest_endpoints has entries (one without). */
  f->ranks = c->learners ? c->learners : lc.n_ingest_endpoints ? lc.n_ingest_endpoints : 1;
  if ((c->learners && lh_learner_ranks_check(&lc, (int)c->learners, err)) ||
      (c->learners > 1 && !lc.n_ingest_endpoints &&
       lh_learner_rank_endpoint(ac.learner_endpoint, (int)c->learners - 1, out, err))) {
    snprintf(out, sizeof out, "%s", err->msg);
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] learners = %llu: %s", config_path,
                         (unsigned long long)c->learners, out);
  }
  /* OpenMPI refuses to run as root unless told twice (containers often
   * are root); the launcher's environment is its children's. */
  if (c->learners > 1 && geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  /* A dry run creates nothing: the folders are made by the launch. */
  if (!dry_run) LH_TRY(make_dirs(c->log_dir, err));
  /* The store's folder too: the fleet's lock lives beside the store. */
  char db_dir[LH_LAUNCH_PATH_BYTES];
  snprintf(db_dir, sizeof db_dir, "%s", lc.db);
  char *slash = strrchr(db_dir, '/');
  if (!dry_run && c->learners && slash && slash != db_dir) {
    *slash = 0;
    LH_TRY(make_dirs(db_dir, err));
  }
  /* Locked before the endpoints are checked: a second launch of the same
   * fleet hears that the fleet runs, not that its ports are taken. */
  /* One run per launch: its learner restarts resume it, and a learner
   * refuses actors of any other (docs/operations.md, "Run ids"). */
  if (f->run_id[0]) LH_TRY(lh_run_id_check(f->run_id, err));
  else if (c->learners) LH_TRY(lh_run_id_new(f->run_id, err));
  char holder[2 * LH_LAUNCH_PATH_BYTES + LH_RUN_ID_BYTES + 64];
  snprintf(holder, sizeof holder, "longhaul launch %s (run %s, logs in %s)", f->config_path, f->run_id, c->log_dir);
  LH_TRY(lh_launch_lock(f, holder, dry_run, err));
  /* What agent j is told: actor j mod N's endpoint (docs/agents.md). */
  const char *colon = strrchr(ac.agent_address, ':');
  f->agent_port = colon ? strtoull(colon + 1, NULL, 10) : 0;
  snprintf(f->agent_base, sizeof f->agent_base, "http://%.*s:", colon ? (int)(colon - ac.agent_address) : 0,
           ac.agent_address);
  f->agent_group = ac.group_size;
  snprintf(f->agent_key_file, sizeof f->agent_key_file, "%s", ac.agent_key_file);
  LH_TRY(lh_launch_check(f, &lc, &ac, &mc, err));
  if (c->env_server[0]) {
    lh_launch_child *ch = &f->child[f->n++];
    snprintf(ch->name, sizeof ch->name, "env-server");
    ch->role = LH_CHILD_ENV_SERVER;
  }
  if (c->learners) {
    lh_launch_child *lch = &f->child[f->n++];
    snprintf(lch->name, sizeof lch->name, "learner");
    lch->role = LH_CHILD_LEARNER;
  }
  for (uint64_t i = 0; i < c->actors; i++) {
    lh_launch_child *ch = &f->child[f->n++];
    snprintf(ch->name, sizeof ch->name, "actor-%llu", (unsigned long long)(c->first_actor + i));
    ch->role = LH_CHILD_ACTOR;
    ch->index = (int)(c->first_actor + i);
  }
  for (uint64_t j = 0; j < c->agents; j++) {
    lh_launch_child *ch = &f->child[f->n++];
    snprintf(ch->name, sizeof ch->name, "agent-%llu", (unsigned long long)j);
    ch->role = LH_CHILD_AGENT;
    ch->index = (int)j;
  }
  return 0;
}

void lh_launch_fleet_log_path(const lh_launch_fleet *f, size_t i, char *out, size_t bytes) {
  snprintf(out, bytes, "%s/%s.log", f->fleet.log_dir, f->child[i].name);
}

static int first_u64(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) *(uint64_t *)ctx = strtoull(values[0], NULL, 10);
  return 1;
}

void lh_launch_store_options(lh_store_options *o) {
  lh_store_options_default(o);
  o->readonly = 1;
  o->quick_check = 0;
  o->max_wait_ms = 1000;
  /* The supervision loop reads the store for its screen and its watchdog:
   * no query of them may hold it (their reads are index seeks). */
  o->time_budget_ms = 10000;
}

lh_store *lh_launch_fleet_store(const lh_launch_fleet *f) {
  if (!f->fleet.learners || access(f->db, F_OK)) return NULL;
  char paths[LH_LAUNCH_MAX_LEARNERS][LH_LEARNER_TEXT_BYTES];
  const char *p[LH_LAUNCH_MAX_LEARNERS];
  lh_errbuf e;
  size_t n = f->ranks < LH_LAUNCH_MAX_LEARNERS ? (size_t)f->ranks : LH_LAUNCH_MAX_LEARNERS;
  for (size_t r = 0; r < n; r++) {
    if (lh_learner_rank_db(f->db, (int)r, paths[r], &e) || access(paths[r], F_OK)) return NULL;
    p[r] = paths[r];
  }
  lh_store_options o;
  lh_launch_store_options(&o);
  lh_store *s = NULL;
  if (lh_store_open_ranks(p, n, &o, &s, &e)) return NULL;
  return s;
}

uint64_t lh_launch_fleet_steps_done(const lh_launch_fleet *f) {
  lh_store *s = lh_launch_fleet_store(f);
  lh_errbuf e;
  if (!s) return 0;
  uint64_t done = 0;
  if (lh_store_sql(s, "SELECT max(step) + 1 FROM train_steps", first_u64, &done, NULL, &e)) done = 0;
  lh_store_close(s);
  return done;
}

int lh_launch_fleet_start(lh_launch_fleet *f, size_t i, lh_errbuf *err) {
  lh_launch_child *c = &f->child[i];
  const lh_launch_config *fc = &f->fleet;
  char *argv[40 + 2 * LH_INI_MAX_SETS + 32];
  int n = 0;
  char index[32], rank[32], learners[32];
  static char sh[] = "/bin/sh", dash_c[] = "-c";
  static char cmd[LH_LAUNCH_COMMAND_BYTES + 2 * LH_LAUNCH_PATH_BYTES + 256];
  if (c->role == LH_CHILD_ENV_SERVER) {
    snprintf(cmd, sizeof cmd, "exec %s", fc->env_server);
    argv[n++] = sh, argv[n++] = dash_c, argv[n++] = cmd;
  } else if (c->role == LH_CHILD_AGENT) {
    /* Agent j talks to actor j mod N; the key file's path was checked to
     * hold no quote (launch_check.c). */
    uint64_t actor = fc->first_actor + (uint64_t)c->index % (fc->actors ? fc->actors : 1);
    char key[LH_LAUNCH_PATH_BYTES + 32];
    if (f->agent_key_file[0]) snprintf(key, sizeof key, "\"$(cat '%s')\"", f->agent_key_file);
    else snprintf(key, sizeof key, "none");
    snprintf(cmd, sizeof cmd,
             "OPENAI_BASE_URL=%s%llu/v1 OPENAI_API_KEY=%s LONGHAUL_GROUP_SIZE=%llu LONGHAUL_AGENT_INDEX=%d "
             "exec %s",
             f->agent_base, (unsigned long long)(f->agent_port + actor), key, (unsigned long long)f->agent_group,
             c->index, fc->agent_command);
    argv[n++] = sh, argv[n++] = dash_c, argv[n++] = cmd;
  } else if (c->role == LH_CHILD_LEARNER) {
    if (f->slurm.on) {
      n = lh_launch_slurm_step(f, i, argv, n);
    } else if (fc->learners > 1) {
      snprintf(learners, sizeof learners, "%llu", (unsigned long long)fc->learners);
      argv[n++] = (char *)fc->mpirun, argv[n++] = "--oversubscribe", argv[n++] = "-n", argv[n++] = learners;
    }
    argv[n++] = f->bin, argv[n++] = "learner", argv[n++] = "--config", argv[n++] = f->config_path;
    if (fc->init[0]) argv[n++] = "--init", argv[n++] = (char *)fc->init;
    /* No --steps: [fleet] steps is watched in the store by the launcher,
     * which then stops the actors before the learner (a learner that ended
     * by itself would leave the actors' last messages unacked). */
    if (c->starts) argv[n++] = "--resume";
  } else {
    n = lh_launch_slurm_step(f, i, argv, n);
    argv[n++] = f->bin, argv[n++] = "actor", argv[n++] = "--config", argv[n++] = f->config_path;
    argv[n++] = "--name", argv[n++] = c->name;
    snprintf(index, sizeof index, "%d", c->index);
    argv[n++] = "--index", argv[n++] = index;
    if (fc->init[0]) argv[n++] = "--ckpt", argv[n++] = (char *)fc->init;
    if (fc->n_actor_envs) argv[n++] = "--env", argv[n++] = (char *)fc->actor_envs[(uint32_t)c->index % fc->n_actor_envs];
    if (f->ranks > 1) {
      snprintf(rank, sizeof rank, "%llu", (unsigned long long)((uint64_t)c->index % f->ranks));
      argv[n++] = "--learner-rank", argv[n++] = rank;
    }
  }
  int ours = c->role == LH_CHILD_LEARNER || c->role == LH_CHILD_ACTOR;  /* longhaul's own processes */
  if (ours && f->run_id[0]) argv[n++] = "--run-id", argv[n++] = f->run_id;
  if (ours)
    for (size_t k = 0; k < f->n_sets && k < LH_INI_MAX_SETS; k++)
      argv[n++] = "--set", argv[n++] = (char *)f->sets[k];
  n = lh_launch_slurm_sets(f, i, argv, n);
  argv[n] = NULL;
  char log[LH_LAUNCH_PATH_BYTES + LH_LAUNCH_NAME_BYTES + 8];
  lh_launch_fleet_log_path(f, i, log, sizeof log);
  return lh_launch_child_spawn(c, argv, log, err);
}

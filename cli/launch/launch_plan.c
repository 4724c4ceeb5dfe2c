/* cli: the plan of a fleet, what `longhaul launch --dry-run` prints after
 * every check a launch makes: the learner ranks with their ingest
 * endpoints, hosts and stores, the expert groups of [learner]
 * expert_parallel, the actors and the rank each sends to, the env server.
 *
 * A rank's host is what is known of it here: under --engine slurm the
 * allocation's node it runs on (rank r on node r mod K, cli/launch/launch_slurm.c);
 * with [learner] ingest_endpoints the host of entry r, where the rank binds
 * and so must run; else this host (one mpirun --oversubscribe here). An
 * expert group is P consecutive ranks, which may sit on different hosts. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/launch/launch.h"
#include "common/ini_doc.h"
#include "learner/learner.h"
#include "model/model.h"

#define PLAN_LINE_BYTES 4096

typedef struct {
  lh_learner_config lc;
  lh_actors_config ac;
  lh_model_config mc;
} plan_configs;

/* The sections as the children read them: the file with the launcher's
 * --set overrides. */
static int read_configs(const lh_launch_fleet *f, plan_configs *pc, lh_errbuf *err) {
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_load(f->config_path, f->sets, f->n_sets, &doc, err));
  int rc = lh_learner_config_read(doc, &pc->lc, err);
  if (!rc) rc = lh_actors_config_read(doc, &pc->ac, err);
  if (!rc) rc = lh_model_config_read(doc, &pc->mc, err);
  lh_ini_doc_free(doc);
  return rc;
}

/* The host of rank r (the file's comment says which). */
static void rank_host(const lh_launch_fleet *f, const lh_learner_config *lc, uint64_t r, char *out, size_t bytes) {
  const lh_launch_slurm *s = &f->slurm;
  if (s->on && s->endpoints && s->n_hosts) {
    snprintf(out, bytes, "%s", s->hosts[r % s->n_hosts]);
    return;
  }
  char ep[LH_LEARNER_TEXT_BYTES];
  if (lc->n_ingest_endpoints && !lh_learner_rank_ingest(lc, (int)r, ep, NULL) && !strncmp(ep, "tcp://", 6)) {
    const char *host = ep + 6, *colon = strrchr(host, ':');
    int n = colon ? (int)(colon - host) : (int)strlen(host);
    snprintf(out, bytes, "%.*s", n, host);
    return;
  }
  snprintf(out, bytes, "this host");
}

/* printf into a line of at most PLAN_LINE_BYTES, then hand it over. */
static void put(lh_launch_plan_line line, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(lh_launch_plan_line line, void *ctx, const char *fmt, ...) {
  char text[PLAN_LINE_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  line(ctx, text);
}

/* Appends to out (a NUL-terminated text of room bytes) what fmt makes,
 * cut at the end of room. */
static void append(char *out, size_t room, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t room, const char *fmt, ...) {
  size_t len = strlen(out);
  if (len + 1 >= room) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + len, room - len, fmt, ap);
  va_end(ap);
}

/* One line per expert group: "expert group G: ranks a,b,.. on HOST" when
 * its ranks share a host, else "on HOST_a,HOST_b,.." (one per rank). */
static void groups(const lh_launch_fleet *f, const plan_configs *pc, lh_launch_plan_line line, void *ctx) {
  uint32_t P = pc->lc.expert_parallel;
  uint64_t R = f->fleet.learners;
  if (P <= 1 || !R) return;
  for (uint64_t g = 0; g < R / P; g++) {
    char ranks[PLAN_LINE_BYTES / 4] = "", hosts[PLAN_LINE_BYTES / 2] = "", first[LH_LEARNER_TEXT_BYTES] = "";
    int same = 1;
    for (uint64_t r = g * P; r < (g + 1) * P; r++) {
      char host[LH_LEARNER_TEXT_BYTES];
      rank_host(f, &pc->lc, r, host, sizeof host);
      if (r == g * P) snprintf(first, sizeof first, "%s", host);
      else same &= strcmp(host, first) == 0;
      append(ranks, sizeof ranks, "%s%llu", r > g * P ? "," : "", (unsigned long long)r);
      append(hosts, sizeof hosts, "%s%s", r > g * P ? "," : "", host);
    }
    put(line, ctx, "expert group %llu: ranks %s on %s", (unsigned long long)g, ranks, same ? first : hosts);
  }
}

int lh_launch_plan(const lh_launch_fleet *f, int groups_only, lh_launch_plan_line line, void *ctx, lh_errbuf *err) {
  plan_configs pc;
  LH_TRY(read_configs(f, &pc, err));
  if (groups_only) {
    groups(f, &pc, line, ctx);
    return 0;
  }
  const lh_launch_config *c = &f->fleet;
  put(line, ctx, "plan of %s (run %s)", f->config_path, f->run_id[0] ? f->run_id : "-");
  uint64_t R = c->learners;
  if (!R) {
    put(line, ctx, "learners: none here; the actors send to %llu rank%s started elsewhere",
        (unsigned long long)f->ranks, f->ranks == 1 ? "" : "s");
  } else {
    const char *how = f->slurm.on ? "one srun job step" : R > 1 ? "one mpirun job" : "one process";
    put(line, ctx, "learners: %llu rank%s as %s", (unsigned long long)R, R == 1 ? "" : "s", how);
    for (uint64_t r = 0; r < R; r++) {
      char ep[LH_LEARNER_TEXT_BYTES] = "?", db[LH_LEARNER_TEXT_BYTES] = "?", host[LH_LEARNER_TEXT_BYTES];
      lh_learner_rank_ingest(&pc.lc, (int)r, ep, NULL);
      lh_learner_rank_db(f->db, (int)r, db, NULL);
      rank_host(f, &pc.lc, r, host, sizeof host);
      put(line, ctx, "  rank %llu: host %s ingest %s store %s", (unsigned long long)r, host, ep, db);
    }
    uint32_t P = pc.lc.expert_parallel;
    if (P > 1)
      put(line, ctx, "expert_parallel = %u: %llu expert group%s of %u consecutive ranks, each rank holding %d of "
                     "the %d routed experts of every MoE layer",
          P, (unsigned long long)(R / P), R / P == 1 ? "" : "s", P, pc.mc.experts / (int)P, pc.mc.experts);
    else
      put(line, ctx, "expert_parallel = 1: data-parallel, every rank holds all %d routed experts", pc.mc.experts);
    groups(f, &pc, line, ctx);
  }
  put(line, ctx, "actors: %llu", (unsigned long long)c->actors);
  for (size_t i = 0; i < f->n; i++) {
    const lh_launch_child *ch = &f->child[i];
    if (ch->role != LH_CHILD_ACTOR) continue;
    const char *env = c->n_actor_envs ? c->actor_envs[(uint32_t)ch->index % c->n_actor_envs] : pc.ac.env_name;
    put(line, ctx, "  %s: rank %llu env %s", ch->name, (unsigned long long)((uint64_t)ch->index % f->ranks), env);
  }
  put(line, ctx, "env server: %s", c->env_server[0] ? c->env_server : "none");
  if (c->agents)
    put(line, ctx, "agents: %llu, each `%s` with OPENAI_BASE_URL=%s<port of actor j mod %llu>/v1",
        (unsigned long long)c->agents, c->agent_command, f->agent_base, (unsigned long long)c->actors);
  return 0;
}

/* cli: what `longhaul launch` checks before it starts any child, so that a
 * mistake stops the launch with one message instead of a crash loop:
 *   - every environment an actor will open, opened once here with the
 *     [env] options (the environment's own option table; a plugin's path
 *     and table), unless it lives on an env server that is not up yet,
 *     and once more for each stage whose long groups size it;
 *   - the [fleet] env_server command's program (on PATH or at its path);
 *   - [learner] expert_parallel against the fleet's learners and the
 *     [model] experts (both multiples of it);
 *   - the actors each learner rank gets against the connections its
 *     ingest admits (ingest_queue_bytes over 4 max_message_bytes): the
 *     ones past it would be refused at every connection;
 *   - [actor] group_size against [learner] group_size: the same;
 *   - what the learner is asked to use that the actors send: states for
 *     state_mode = stored, experts for routing_replay;
 *   - the endpoints the fleet binds on this host: well-formed, not given
 *     twice, and free (a TCP port nobody listens on, an ipc:// path no
 *     live socket holds). ZeroMQ takes over a live ipc:// path silently,
 *     which is how a second fleet's learner would steal the first's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "actors/actors.h"
#include "cli/launch/launch.h"
#include "envs/env.h"
#include "learner/learner.h"
#include "model/model.h"

/* Opens env name with the [env] options as an actor would (without the
 * actor's own max_steps), with size_key = size in place of or beside them
 * when size_key is given (a long group of a stage), and closes it again. */
static int check_env(const char *config, const char *name, const lh_actors_config *ac, const char *who,
                     const char *size_key, uint64_t size, const char *sized_by, lh_errbuf *err) {
  lh_env_option opts[LH_ACTORS_ENV_OPTIONS], sized[LH_ACTORS_ENV_OPTIONS + 1];
  char value[32];
  snprintf(value, sizeof value, "%llu", (unsigned long long)size);
  size_t n = ac->n_env_options;
  int remote = 0;
  for (uint32_t i = 0; i < ac->n_env_options; i++) {
    opts[i] = (lh_env_option){ac->env_keys[i], ac->env_values[i]};
    if (strcmp(ac->env_keys[i], "server") == 0) remote = 1;
  }
  if (size_key) n = lh_actors_env_options_set(opts, n, size_key, value, sized);
  if (!strcmp(name, LH_ACTORS_AGENT_ENV)) return 0; /* agents play it: nothing to open */
  if (remote) return 0; /* the env server starts with the fleet; its actors report what it refuses */
  lh_env *env = NULL;
  lh_errbuf e;
  memset(&e, 0, sizeof e);
  int rc = lh_env_open(name, size_key ? sized : opts, n, &env, &e);
  lh_env_free(env);
  if (rc < 0 && size_key)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [env] cannot open environment '%s'%s at %s (%s = %s): %s", config,
                         name, who, sized_by, size_key, value, e.msg);
  if (rc < 0)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [env] cannot open environment '%s'%s: %s", config, name, who, e.msg);
  return 0;
}

/* An environment as configured, and as each stage's long groups size it
 * ([actor] stage_option set to LH_ACTORS_STAGE_FILL of the stage's
 * context), so that a stage past what the environment takes is refused
 * here rather than ending every long episode of it. */
static int check_env_sizes(const char *config, const char *name, const lh_actors_config *ac,
                           const lh_learner_config *lc, const char *who, lh_errbuf *err) {
  LH_TRY(check_env(config, name, ac, who, NULL, 0, NULL, err));
  if (!ac->stage_option[0]) return 0;
  for (size_t i = 0; i < lc->n_stages; i++) {
    if (lc->stages[i].long_frac <= 0) continue;
    uint64_t size = lh_actors_stage_env_size(lc->stages[i].max_context);
    char sized_by[160];
    snprintf(sized_by, sizeof sized_by,
             "the size [learner] stages gives stage %zu's long groups ([actor] stage_option, %g of its context %llu)",
             i + 1, LH_ACTORS_STAGE_FILL, (unsigned long long)lc->stages[i].max_context);
    LH_TRY(check_env(config, name, ac, who, ac->stage_option, size, sized_by, err));
  }
  return 0;
}

static int check_envs(const lh_launch_fleet *f, const lh_learner_config *lc, const lh_actors_config *ac,
                      lh_errbuf *err) {
  const lh_launch_config *c = &f->fleet;
  if (!c->actors) return 0;
  if (!c->n_actor_envs) return check_env_sizes(f->config_path, ac->env_name, ac, lc, "", err);
  for (uint32_t i = 0; i < c->n_actor_envs && i < c->actors; i++) {
    int seen = 0;
    for (uint32_t j = 0; j < i; j++) seen |= strcmp(c->actor_envs[i], c->actor_envs[j]) == 0;
    if (seen) continue;
    char who[LH_LAUNCH_NAME_BYTES + 64];
    snprintf(who, sizeof who, " ([fleet] actor_envs entry %u)", i + 1);
    LH_TRY(check_env_sizes(f->config_path, c->actor_envs[i], ac, lc, who, err));
  }
  return 0;
}

/* The program of a /bin/sh command line: its first word, after any
 * NAME=value assignments. 0, or -1 when the line has none. */
static int first_program(const char *cmd, char *out, size_t bytes) {
  const char *s = cmd;
  for (;;) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strcspn(s, " \t");
    if (!n) return -1;
    const char *eq = memchr(s, '=', n);
    if (eq && eq > s && !memchr(s, '/', (size_t)(eq - s))) {
      s += n; /* an assignment */
      continue;
    }
    if (n >= bytes) n = bytes - 1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
  }
}

static int executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* A command's first program is there: on PATH or at its path. */
static int check_program(const lh_launch_fleet *f, const char *key, const char *cmd, lh_errbuf *err) {
  if (!cmd[0]) return 0;
  char prog[LH_LAUNCH_PATH_BYTES];
  if (first_program(cmd, prog, sizeof prog))
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] %s = '%s' names no program", f->config_path, key, cmd);
  if (strchr(prog, '/')) {
    if (executable(prog)) return 0;
    char cwd[LH_LAUNCH_PATH_BYTES] = "?";
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [fleet] %s: '%s' is not an executable file (a relative path is taken from %s, "
                         "the folder the launcher runs in)",
                         f->config_path, key, prog, cwd);
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    char full[2 * LH_LAUNCH_PATH_BYTES];
    snprintf(full, sizeof full, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", prog);
    if (executable(full)) return 0;
    p += n;
    if (*p == ':') p++;
  }
  return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] %s: no program '%s' on PATH (%s)", f->config_path, key, prog,
                       path);
}

/* Agents need actors that serve them: [env] name = agent on a fixed port,
 * and a key file path the shell can quote. */
static int check_agents(const lh_launch_fleet *f, const lh_actors_config *ac, lh_errbuf *err) {
  const lh_launch_config *c = &f->fleet;
  if (!c->agents) return 0;
  const char *p = f->config_path;
  if (!c->agent_command[0])
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] agents = %llu needs agent_command", p,
                         (unsigned long long)c->agents);
  if (!c->actors) return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] agents need actors to serve them", p);
  if (strcmp(ac->env_name, LH_ACTORS_AGENT_ENV) || c->n_actor_envs)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] agents need actors with [env] name = agent (and no "
                         "[fleet] actor_envs)", p);
  if (!f->agent_port)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] agents need [actor] agent_address with a port (not 0): "
                         "agent j is told actor j's port", p);
  if (strchr(ac->agent_key_file, '\''))
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [actor] agent_key_file: a path without quotes, for the agents' "
                         "shell", p);
  return check_program(f, "agent_command", c->agent_command, err);
}

/* ---- endpoints ---------------------------------------------------------- */

typedef struct {
  char endpoint[LH_LEARNER_TEXT_BYTES];
  char what[96]; /* "[learner] ingest_endpoint (rank 1)" */
} bind_point;

/* Whether a TCP listener holds host:port here: 0 free (or the address is
 * not this host's, which another host's fleet checks), 1 in use, -1 with
 * err when the endpoint is malformed. */
static int tcp_in_use(const char *config, const bind_point *b, lh_errbuf *err) {
  const char *hp = b->endpoint + 6;
  const char *colon = strrchr(hp, ':');
  if (!colon || colon == hp || !colon[1])
    return lh_errbuf_set(err, LH_ECONFIG, "%s: %s = '%s' is not tcp://HOST:PORT", config, b->what, b->endpoint), -1;
  if (strcmp(colon + 1, "*") == 0) return 0; /* a wildcard port is always free */
  char host[256];
  size_t hn = (size_t)(colon - hp);
  if (hn >= sizeof host) hn = sizeof host - 1;
  memcpy(host, hp, hn);
  host[hn] = 0;
  if (host[0] == '[' && hn > 1 && host[hn - 1] == ']') memmove(host, host + 1, hn - 2), host[hn - 2] = 0;
  const char *node = strcmp(host, "*") == 0 ? NULL : host;
  uint64_t port;
  if (lh_parse_u64(colon + 1, &port) || port < 1 || port > 65535)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: %s = '%s': the port is not 1..65535 or *", config, b->what,
                         b->endpoint),
           -1;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  struct addrinfo *ai = NULL;
  int g = getaddrinfo(node, colon + 1, &hints, &ai);
  if (g != 0)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: %s = '%s': cannot resolve '%s': %s", config, b->what, b->endpoint,
                         host, gai_strerror(g)),
           -1;
  int used = 0;
  for (struct addrinfo *a = ai; a && !used; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    /* As ZeroMQ binds: a port left in TIME_WAIT is free, a listener's not. */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) used = 1;
    close(fd);
  }
  freeaddrinfo(ai);
  return used;
}

/* Whether a live socket holds the ipc:// path: something accepts a
 * connection there. A stale file (its owner gone) is free. */
static int ipc_in_use(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) return 0; /* ZeroMQ refuses it at bind, with its own message */
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int used = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return used;
}

static int check_endpoints(const lh_launch_fleet *f, const lh_learner_config *lc, lh_errbuf *err) {
  bind_point b[LH_LAUNCH_MAX_LEARNERS + 2];
  size_t n = 0;
  for (uint64_t r = 0; r < f->fleet.learners; r++) {
    LH_TRY(lh_learner_rank_ingest(lc, (int)r, b[n].endpoint, err));
    const char *key = lc->n_ingest_endpoints ? "ingest_endpoints" : "ingest_endpoint";
    if (f->fleet.learners > 1)
      snprintf(b[n].what, sizeof b[n].what, "[learner] %s (rank %llu)", key, (unsigned long long)r);
    else
      snprintf(b[n].what, sizeof b[n].what, "[learner] %s", key);
    n++;
  }
  if (lc->weights_pub_endpoint[0] && strcmp(lc->weights_pub_endpoint, "none") != 0) {
    snprintf(b[n].endpoint, sizeof b[n].endpoint, "%s", lc->weights_pub_endpoint);
    snprintf(b[n++].what, sizeof b[0].what, "[learner] weights_pub_endpoint");
    snprintf(b[n].endpoint, sizeof b[n].endpoint, "%s", lc->weights_endpoint);
    snprintf(b[n++].what, sizeof b[0].what, "[learner] weights_endpoint");
  }
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < i; j++)
      if (strcmp(b[i].endpoint, b[j].endpoint) == 0 && !strstr(b[i].endpoint, ":*"))
        return lh_errbuf_set(err, LH_ECONFIG, "%s: %s = '%s' is also %s: each endpoint binds once", f->config_path,
                             b[i].what, b[i].endpoint, b[j].what);
    int used = 0;
    if (strncmp(b[i].endpoint, "tcp://", 6) == 0) {
      used = tcp_in_use(f->config_path, &b[i], err);
      if (used < 0) return err ? err->code : LH_ECONFIG;
    } else if (strncmp(b[i].endpoint, "ipc://", 6) == 0) {
      used = ipc_in_use(b[i].endpoint + 6);
    }
    if (used)
      return lh_errbuf_set(err, LH_ECONFIG,
                           "%s: %s = '%s' is in use on this host (another fleet or learner? `ss -ltnp` or "
                           "`fuser` names it): stop it, or give this fleet other endpoints",
                           f->config_path, b[i].what, b[i].endpoint);
  }
  return 0;
}

/* Expert groups of P consecutive ranks need R and the experts to be
 * multiples of P (learner.h, lh_learner_expert_parallel_check); the
 * learner would refuse the same at start, after the launch. An actors-only
 * fleet starts no learner: its learners' launch checks them. */
static int check_expert_parallel(const lh_launch_fleet *f, const lh_learner_config *lc, const lh_model_config *mc,
                                 lh_errbuf *err) {
  if (!f->fleet.learners) return 0;
  lh_errbuf e;
  memset(&e, 0, sizeof e);
  if (!lh_learner_expert_parallel_check(lc->expert_parallel, (int)f->fleet.learners, mc->experts, &e)) return 0;
  return lh_errbuf_set(err, LH_ECONFIG, "%s: %s ([fleet] learners = %llu, [model] experts = %d)", f->config_path,
                       e.msg, (unsigned long long)f->fleet.learners, mc->experts);
}

/* What the learner and the actors of one fleet file must agree on:
 *   - the group size: the learner completes a group at its own and skips
 *     the episodes past it (a smaller one) or trains only groups it can
 *     fill (a larger one);
 *   - what the learner is asked to use that only the actors send: the
 *     states a stored-state learner starts windows from (without them it
 *     recomputes every prefix), the experts routing replay replays
 *     (without them it trains on its own routing). */
static int check_learner_actors_agree(const lh_launch_fleet *f, const lh_learner_config *lc,
                                      const lh_actors_config *ac, lh_errbuf *err) {
  if (!f->fleet.actors) return 0;
  if (ac->group_size != lc->group_size)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [actor] group_size = %llu differs from [learner] group_size = %llu: the learner "
                         "trains groups of its own size, so give both the same",
                         f->config_path, (unsigned long long)ac->group_size, (unsigned long long)lc->group_size);
  if (lc->state_mode == LH_LEARNER_STATE_STORED && !ac->state_interval)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [learner] state_mode = stored, but [actor] state_interval = 0 sends no states: every "
                         "step would recompute whole prefixes; set state_interval (e.g. 256) or state_mode = exact",
                         f->config_path);
  if (lc->routing_replay && !ac->record_routing)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: [learner] routing_replay = 1, but [actor] record_routing = 0 records no experts to "
                         "replay; set record_routing = 1 or routing_replay = 0",
                         f->config_path);
  return 0;
}

/* Actor i goes to rank i % ranks, so a rank gets ceil(actors / ranks). */
static int check_ingest_peers(const lh_launch_fleet *f, const lh_learner_config *lc, lh_errbuf *err) {
  uint64_t ranks = f->ranks ? f->ranks : 1, per_rank = (f->fleet.actors + ranks - 1) / ranks;
  int admits = lh_learner_config_ingest_peers(lc);
  if (per_rank <= (uint64_t)admits) return 0;
  return lh_errbuf_set(err, LH_ECONFIG,
                       "%s: %llu actors per learner rank, but its ingest admits %d connections ([learner] "
                       "ingest_queue_bytes = %llu over %d messages of max_message_bytes = %llu): raise "
                       "ingest_queue_bytes or lower max_message_bytes",
                       f->config_path, (unsigned long long)per_rank, admits,
                       (unsigned long long)lc->ingest_queue_bytes, LH_LEARNER_INGEST_QUEUE_MESSAGES,
                       (unsigned long long)lc->max_message_bytes);
}

int lh_launch_check(const lh_launch_fleet *f, const lh_learner_config *lc, const lh_actors_config *ac,
                    const lh_model_config *mc, lh_errbuf *err) {
  LH_TRY(check_expert_parallel(f, lc, mc, err));
  LH_TRY(check_ingest_peers(f, lc, err));
  LH_TRY(check_learner_actors_agree(f, lc, ac, err));
  LH_TRY(check_envs(f, lc, ac, err));
  LH_TRY(check_program(f, "env_server", f->fleet.env_server, err));
  LH_TRY(check_agents(f, ac, err));
  if (f->fleet.learners) LH_TRY(check_endpoints(f, lc, err)); /* actors only: this host binds nothing */
  return 0;
}

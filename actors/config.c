/* actors: the [actor] section of the INI config, and [env] beside it.
 *
 * A table lists every [actor] key with its type, field and range, read by
 * common's section reader (common/ini_section.h), which names the file,
 * line, section and key of every error. The free-form [env] section (a name
 * and the environment's own options) is read in the same pass by the
 * section's `other` callback; its `plugin` option is a path. The three
 * endpoints, when [actor] does not give them, are [learner]'s. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "actors/internal.h"
#include "common/ini_section.h"
#include "common/limits.h"

/* Every key of [actor], with what it does: the reader, its "known keys"
 * hint and the reference (docs/configuration.md) walk this one table. */
#define T lh_actors_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_U64(T, batch, 1, 65536, "Episodes the actor runs at once, their decode steps batched."),
    LH_INI_KEY_F64(T, temperature, 0, 1e6, LH_INI_CLOSED,
                   "Sampling temperature (0: greedy). The learner's forward uses the same temperature."),
    LH_INI_KEY_F64(T, top_p, 0, 1, LH_INI_OPEN_MIN, "Nucleus sampling: the smallest set of tokens holding this "
                   "much probability (1: every token)."),
    LH_INI_KEY_U64(T, seed, 0, INFINITY, "Mixed with the actor's index into its sampling and task seeds."),
    LH_INI_KEY_U64(T, segment_tokens, 1, 65536,
                   "Positions per segment: a segment is sent as soon as it holds this many."),
    LH_INI_KEY_U64(T, outbox_messages, 1, LH_MAX_QUEUE_MESSAGES,
                   "Messages kept until acked; a full outbox pauses sampling."),
    LH_INI_KEY_U64(T, outbox_bytes, 1, LH_MAX_BYTES, "Bytes kept until acked; a full outbox pauses sampling."),
    LH_INI_KEY_U64(T, resend_timeout_ms, 1, LH_MAX_TIMEOUT_MS,
                   "A message not acked by then goes again, the wait doubling per silent round; the actor "
                   "warns, at most once per 5 s, while it resends. An endpoint whose ZMTP/CURVE handshake has "
                   "not completed within it, from the start or since its connection ended, is warned about, "
                   "again at most once per 5 s or `resend_timeout_ms`, whichever is longer (`cannot reach the "
                   "learner endpoint=... for 5017 ms unacked=1024 ...`, saying whether nothing accepted a "
                   "connection, no handshake completed, the handshake was refused or the peer went away); one "
                   "line says when such an endpoint is reached (`reached the learner endpoint=... after N ms "
                   "unreachable`)."),
    LH_INI_KEY_U64(T, heartbeat_ms, 1, LH_MAX_TIMEOUT_MS,
                   "Between Heartbeats (the learner stores them in `actor_heartbeats`; the launcher's watchdog "
                   "reads them)."),
    LH_INI_KEY_U64(T, blas_threads, 1, 256,
                   "The actor's compute team (OpenMP threads, OpenBLAS single-threaded on each), set whatever "
                   "`OMP_NUM_THREADS` or `OPENBLAS_NUM_THREADS` say."),
    LH_INI_KEY_U64(T, group_size, 1, LH_MAX_GROUP_SIZE,
                   "Episodes per task seed (a group); equal to `[learner] group_size`."),
    LH_INI_KEY_STR(T, learner_endpoint, 0,
                   "The learner's ingest; when not given, `[learner] ingest_endpoint` (an error when that binds "
                   "a wildcard host, `tcp://*:P`, `tcp://0.0.0.0:P` or `tcp://[::]:P`). With `[learner] "
                   "ingest_endpoints`, entry `--learner-rank` of it instead."),
    LH_INI_KEY_STR(T, weights_pub_endpoint, 0,
                   "Where version announcements come from; when not given, `[learner] weights_pub_endpoint`. "
                   "`none` turns weight updates off."),
    LH_INI_KEY_STR(T, weights_endpoint, 0,
                   "Where chunks are fetched; when not given, `[learner] weights_endpoint`."),
    LH_INI_KEY_PATH(T, curve_secret_key_file, 0,
                    "This actor's CURVE secret key (`NAME.key`); with `curve_server_key_file` its sockets are "
                    "CURVE clients of the learner, whose allow-list must hold its public key."),
    LH_INI_KEY_PATH(T, curve_server_key_file, 0, "The learner's public key (`NAME.pub`)."),
    LH_INI_KEY_U64(T, max_context, 0, LH_MAX_COUNT,
                   "Tokens per episode (0: no limit of the actor's own; the learner refuses an episode past its "
                   "`max_episode_tokens`); an episode that reaches it ends as truncated, unless "
                   "`beyond_context`. A context-extension stage caps it at the stage's."),
    LH_INI_KEY_U64(T, max_steps, 0, 1000000000,
                   "Environment steps per episode (0: the environment's default)."),
    LH_INI_KEY_U64(T, flush_timeout_ms, 1, LH_MAX_TIMEOUT_MS,
                   "Asked to stop, the actor ends its open episodes as aborted and waits this long for its "
                   "outbox to be acked."),
    LH_INI_KEY_U64(T, record_routing, 0, 1,
                   "1: record each sampled token's experts per layer in its segment, for `[learner] "
                   "routing_replay`."),
    LH_INI_KEY_U64(T, state_interval, 0, LH_MAX_COUNT,
                   "Tokens between the recurrent states sent with the segments, for `[learner] state_mode = "
                   "stored` (0: none). At least `segment_tokens`, best a multiple of it: one segment carries "
                   "at most one state, so a smaller interval is refused."),
    LH_INI_KEY_U64(T, share_prefix, 0, 1,
                   "1: the episodes of a group share the prefill of their common first observation: the first "
                   "to start prefills it, the others take its recurrent state, and their segments name its "
                   "episode for those tokens, so the prefix crosses the wire and lands in the store once "
                   "([shared prefixes](actors.md#shared-prefixes)); 0: each prefills its own."),
    LH_INI_KEY_U64(T, beyond_context, 0, 1,
                   "1: neither `max_context` nor the stage's ends an episode, they only size the environment, "
                   "and it runs until the environment ends it, `max_steps`, or `max_episode_tokens`."),
    LH_INI_KEY_U64(T, max_episode_tokens, 2, LH_MAX_COUNT,
                   "The cap under `beyond_context`; keep it within the learner's."),
    LH_INI_KEY_U64(T, weights_zstd, 0, 1,
                   "1 lets weights chunks come zstd-compressed where that makes them 1/16 smaller: trained "
                   "float32 weights shrink by about 7%, and the learner's service thread pays the compression "
                   "once per version, so turn it on where the network out of rank 0, not the learner's CPU, is "
                   "the limit (`bench_sync_delta`)."),
    LH_INI_KEY_STR(T, agent_address, 0,
                   "With `[env] name = agent`: where the actor serves its policy to agent programs over HTTP "
                   "(`host:port`, an IPv4 host or `localhost`; port 0 picks a free one; actor i of a fleet "
                   "serves on port + i). Beyond loopback it needs `agent_key_file` ([agents](agents.md))."),
    LH_INI_KEY_PATH(T, agent_key_file, 0,
                    "A file holding one bearer token (16..255 bytes) the agents must send (`Authorization: Bearer "
                    "...`); required when `agent_address` is beyond loopback."),
    LH_INI_KEY_U64(T, agent_max_episodes, 1, 65536,
                   "Agent episodes open or waiting to open at once; an agent that opens one more gets 429."),
    LH_INI_KEY_U64(T, agent_timeout_ms, 1, LH_MAX_TIMEOUT_MS,
                   "An agent episode whose agent sends nothing this long after a turn's answer ends as aborted."),
    LH_INI_KEY_U64(T, agent_max_body_bytes, 1024, 64u << 20,
                   "The largest request body the agent endpoint reads; a larger one gets 413."),
    LH_INI_KEY_STR(T, stage_option, 0,
                   "The `[env]` option that sizes long episodes to a context-extension stage (e.g. needle's "
                   "`tokens`): a long group gets it set to 3/4 of the stage's `max_context`."),
};
#undef T

void lh_actors_config_default(lh_actors_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->batch = 8;
  c->temperature = 1.0;
  c->top_p = 1.0;
  c->seed = 0;
  c->segment_tokens = 512;
  c->max_episode_tokens = (uint64_t)1 << 22;
  c->outbox_messages = 1024;
  c->outbox_bytes = 64u << 20;
  c->resend_timeout_ms = 5000;
  c->heartbeat_ms = 1000;
  c->blas_threads = 1;
  c->group_size = 8;
  snprintf(c->learner_endpoint, sizeof c->learner_endpoint, "tcp://127.0.0.1:5555");
  snprintf(c->weights_pub_endpoint, sizeof c->weights_pub_endpoint, "tcp://127.0.0.1:5556");
  snprintf(c->weights_endpoint, sizeof c->weights_endpoint, "tcp://127.0.0.1:5557");
  c->max_context = 4096;
  c->max_steps = 0;
  c->share_prefix = 1;
  c->flush_timeout_ms = 5000;
  snprintf(c->agent_address, sizeof c->agent_address, "127.0.0.1:8700");
  c->agent_max_episodes = 256;
  c->agent_timeout_ms = 300000;
  c->agent_max_body_bytes = 4u << 20;
  snprintf(c->env_name, sizeof c->env_name, "calc");
}

/* The [env] section's state: the lines its keys were given on. */
typedef struct {
  lh_actors_config *cfg;
  int env_name_seen, env_name_line;
  int env_line[LH_ACTORS_ENV_OPTIONS];
} env_ctx;

/* [env]: name, and every other key an option for the environment (plugin
 * a path, resolved like the table's paths); the keys of sections other
 * than [actor] and [env] are not ours. */
static int on_other_key(void *user, const lh_ini_entry *e, lh_errbuf *err) {
  env_ctx *p = user;
  lh_actors_config *c = p->cfg;
  if (strcmp(e->section, "env") != 0) return 0;
  const char *name = e->key, *value = e->value;
  char where[300];
  lh_ini_entry_where(e, where, sizeof where);
  if (strcmp(name, "name") == 0) {
    if (p->env_name_seen)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s: [env] name = %.64s: the key was already given on line %d", where, value,
                           p->env_name_line);
    if (!*value || strlen(value) >= sizeof c->env_name)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                           "%s: [env] name = '%.64s' is not an environment name of 1..%zu bytes", where, value,
                           sizeof c->env_name - 1);
    p->env_name_seen = 1;
    p->env_name_line = e->line;
    snprintf(c->env_name, sizeof c->env_name, "%s", value);
    return 0;
  }
  for (uint32_t i = 0; i < c->n_env_options; i++)
    if (strcmp(c->env_keys[i], name) == 0)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_DUPLICATE,
                           "%s: [env] %s = %.64s: the key was already given on line %d", where, name, value,
                           p->env_line[i]);
  uint32_t i = c->n_env_options;
  int bad = i == LH_ACTORS_ENV_OPTIONS || strlen(name) >= sizeof c->env_keys[0];
  if (!bad && strcmp(name, "plugin") == 0)
    bad = lh_ini_entry_path(e, c->env_values[i], sizeof c->env_values[0]) != 0;
  else if (!bad)
    bad = snprintf(c->env_values[i], sizeof c->env_values[i], "%s", value) >= (int)sizeof c->env_values[i];
  if (bad)
    return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                         "%s: [env] %.64s: at most %d options, keys under %zu bytes and values under "
                         "%zu bytes",
                         where, name, LH_ACTORS_ENV_OPTIONS, sizeof c->env_keys[0], sizeof c->env_values[0]);
  c->n_env_options++;
  snprintf(c->env_keys[i], sizeof c->env_keys[i], "%s", name);
  p->env_line[i] = e->line;
  return 0;
}

static const lh_ini_section SECTION = {
    .name = "actor", .keys = KEYS, .n_keys = sizeof KEYS / sizeof KEYS[0],
    .unknown_key_error = LH_EACTORS_CONFIG_UNKNOWN_KEY, .duplicate_error = LH_EACTORS_CONFIG_DUPLICATE,
    .value_error = LH_EACTORS_CONFIG_VALUE, .syntax_error = LH_EACTORS_CONFIG_FILE, .other = on_other_key};

int lh_actors_config_reference(lh_str *out, lh_errbuf *err) {
  lh_actors_config defaults;
  lh_actors_config_default(&defaults);
  int rc = lh_ini_section_reference(&SECTION, &defaults, out, err);
  if (rc == 0)
    rc = lh_str_printf(out,
                       "## [env]\n\n"
                       "- **`name`**: the environment the actors play; default `%s`. A built-in one (`calc`, "
                       "`needle`, `maze`), a plugin's or an env server's (`longhaul envs list`).\n"
                       "- every other key is an option for the environment, which refuses the ones it does not "
                       "know (`longhaul envs describe NAME` lists them; [envs/README.md](../envs/README.md)). "
                       "`plugin` is a path, resolved against the folder of the file it is written in. At most "
                       "%d options, keys under %d bytes and values under %d bytes.\n\n",
                       defaults.env_name, LH_ACTORS_ENV_OPTIONS, LH_ACTORS_ENV_NAME_BYTES, LH_ACTORS_ENDPOINT_BYTES);
  if (rc == LH_ENOMEM) return lh_errbuf_set(err, rc, "config reference: no memory for [env]");
  return rc;
}

/* A bind address every interface answers on, which no actor can connect
 * to: tcp:// with host "*", 0.0.0.0 or [::]. */
static int wildcard_endpoint(const char *ep) {
  if (strncmp(ep, "tcp://", 6) != 0) return 0;
  const char *host = ep + 6, *colon = strrchr(host, ':');
  size_t len = colon ? (size_t)(colon - host) : strlen(host);
  return (len == 1 && host[0] == '*') || (len == 7 && !strncmp(host, "0.0.0.0", 7)) ||
         (len == 4 && !strncmp(host, "[::]", 4));
}

/* [actor] endpoints not given are [learner]'s (written once). */
static int default_endpoints(const lh_ini_doc *doc, const lh_ini_lines *lines, lh_actors_config *c,
                             lh_errbuf *err) {
  static const struct {
    const char *actor_key, *learner_key;
    size_t offset;
  } map[] = {
      {"learner_endpoint", "ingest_endpoint", offsetof(lh_actors_config, learner_endpoint)},
      {"weights_pub_endpoint", "weights_pub_endpoint", offsetof(lh_actors_config, weights_pub_endpoint)},
      {"weights_endpoint", "weights_endpoint", offsetof(lh_actors_config, weights_endpoint)},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    if (lh_ini_key_entry(&SECTION, lines, map[i].actor_key)) continue;
    const lh_ini_entry *e = lh_ini_doc_find(doc, "learner", map[i].learner_key);
    if (!e) continue;
    char where[300];
    lh_ini_entry_where(e, where, sizeof where);
    if (wildcard_endpoint(e->value))
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                           "%s: [learner] %s = %.128s binds every interface, which an actor cannot connect to: "
                           "set [actor] %s",
                           where, map[i].learner_key, e->value, map[i].actor_key);
    char *field = (char *)c + map[i].offset;
    if (!*e->value || strlen(e->value) >= LH_ACTORS_ENDPOINT_BYTES)
      return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                           "%s: [learner] %s = '%.64s' is not an endpoint of 1..%d bytes for [actor] %s", where,
                           map[i].learner_key, e->value, LH_ACTORS_ENDPOINT_BYTES - 1, map[i].actor_key);
    snprintf(field, LH_ACTORS_ENDPOINT_BYTES, "%s", e->value);
  }
  return 0;
}

int lh_actors_config_read(const lh_ini_doc *doc, lh_actors_config *cfg, lh_errbuf *err) {
  if (!doc || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL document or config");
  lh_actors_config c;
  lh_actors_config_default(&c);
  env_ctx env = {.cfg = &c};
  lh_ini_lines lines;
  LH_TRY(lh_ini_section_read(&SECTION, doc, &c, &env, &lines, err));
  if (c.state_interval && c.state_interval < c.segment_tokens) {
    /* A segment carries one state: the others would be taken and dropped. */
    char where[300];
    lh_ini_later_where(&SECTION, &lines, "state_interval", "segment_tokens", where, sizeof where);
    return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE,
                         "%s: [actor] state_interval = %llu is below segment_tokens = %llu: a segment carries at "
                         "most one recurrent state, so the others would be taken and dropped; use segment_tokens "
                         "or a multiple of it",
                         where, (unsigned long long)c.state_interval, (unsigned long long)c.segment_tokens);
  }
  LH_TRY(default_endpoints(doc, &lines, &c, err));
  *cfg = c;
  return 0;
}

static int read_doc(const lh_ini_doc *doc, void *cfg, lh_errbuf *err) {
  return lh_actors_config_read(doc, cfg, err);
}

/* A file or text, with this module's codes. */
static const lh_ini_reader READER = {
    .file_error = LH_EACTORS_CONFIG_FILE, .error = LH_EACTORS_CONFIG_FILE, .read = read_doc};

int lh_actors_config_parse(const char *text, const char *source, lh_actors_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL text or config");
  return lh_ini_reader_read(&READER, source, text, cfg, err);
}

int lh_actors_config_load(const char *path, lh_actors_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return lh_errbuf_set(err, LH_EINVAL, "actor config: NULL path or config");
  return lh_ini_reader_read(&READER, path, NULL, cfg, err);
}

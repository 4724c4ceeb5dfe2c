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

#define T lh_launch_config
static const lh_ini_key KEYS[] = {
    LH_INI_KEY_U64(T, learners, 0, LH_LAUNCH_MAX_LEARNERS),
    LH_INI_KEY_U64(T, actors, 0, LH_LAUNCH_MAX_ACTORS),
    LH_INI_KEY_U64(T, first_actor, 0, 1000000),
    LH_INI_KEY_PATH(T, log_dir, 0),
    LH_INI_KEY_PATH(T, init, 1),
    LH_INI_KEY_U64(T, steps, 0, LH_MAX_COUNT),
    LH_INI_KEY_U64(T, duration_s, 0, 100.0 * 365 * 86400),
    LH_INI_KEY_U64(T, restart_backoff_ms, 1, 3600000),
    LH_INI_KEY_U64(T, restart_backoff_max_ms, 1, 86400000),
    LH_INI_KEY_U64(T, max_restarts, 0, 1000000),
    LH_INI_KEY_U64(T, stop_timeout_ms, 1, 3600000),
    LH_INI_KEY_U64(T, status_interval_ms, 100, 3600000),
    LH_INI_KEY_U64(T, stall_timeout_s, 0, 30 * 86400),
    LH_INI_KEY_STR(T, mpirun, 0),
    LH_INI_KEY_STR(T, env_server, 1),
    LH_INI_KEY_CUSTOM(actor_envs, parse_envs, 0),
    LH_INI_KEY_STR(T, slurm_partition, 1),
    LH_INI_KEY_STR(T, slurm_time, 1),
    LH_INI_KEY_U64(T, slurm_nodes, 0, LH_LAUNCH_MAX_LEARNERS + LH_LAUNCH_MAX_ACTORS),
    LH_INI_KEY_STR(T, slurm_options, 1),
    LH_INI_KEY_STR(T, slurm_step_options, 1),
    LH_INI_KEY_STR(T, slurm_mpi, 0),
    LH_INI_KEY_STR(T, srun, 0),
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

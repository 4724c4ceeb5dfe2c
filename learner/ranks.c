/* learner: the ingest endpoint of each rank when the ranks run on several
 * hosts ([learner] ingest_endpoints; learner.h, "ranks on several hosts").
 *
 * The list is checked when the config is read, entry by entry, so that a
 * typo is reported with its file, line and key; the count is checked
 * against the job's ranks where the ranks are known (the learner at start,
 * the launcher before it starts anything). So is [learner] expert_parallel
 * against the ranks and the model's experts (lh_learner_expert_parallel_check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

/* The next entry of a comma-separated list: [*start, *end) with blanks
 * trimmed; returns the position after its comma, or NULL after the last. */
static const char *next_entry(const char *s, const char **start, const char **end) {
  const char *comma = strchr(s, ',');
  const char *e = comma ? comma : s + strlen(s);
  while (s < e && (*s == ' ' || *s == '\t')) s++;
  const char *t = e;
  while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
  *start = s, *end = t;
  return comma ? comma + 1 : NULL;
}

/* Whether the host part of an entry is one an actor can connect to: a
 * name or an IPv4 address (letters, digits, '.', '-', '_'), or a bracketed
 * IPv6 address; never a wildcard. */
static int host_ok(const char *h, size_t n, char *why, size_t why_bytes, size_t entry) {
  if (n == 0) return snprintf(why, why_bytes, "entry %zu has no host (tcp://host:port)", entry + 1), -1;
  if ((n == 1 && h[0] == '*') || (n == 7 && !memcmp(h, "0.0.0.0", 7)) || (n == 4 && !memcmp(h, "[::]", 4)))
    return snprintf(why, why_bytes,
                    "entry %zu has the wildcard host '%.*s': give each rank an address its actors can reach",
                    entry + 1, (int)n, h),
           -1;
  if (h[0] == '[') {
    if (n < 3 || h[n - 1] != ']')
      return snprintf(why, why_bytes, "entry %zu has an unclosed IPv6 host '%.*s'", entry + 1, (int)n, h), -1;
    for (size_t i = 1; i + 1 < n; i++)
      if (!strchr("0123456789abcdefABCDEF:.", h[i]))
        return snprintf(why, why_bytes, "entry %zu has a bad IPv6 host '%.*s'", entry + 1, (int)n, h), -1;
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    char c = h[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
          c == '_'))
      return snprintf(why, why_bytes, "entry %zu has a bad host '%.*s' (a name or an address)", entry + 1, (int)n,
                      h),
             -1;
  }
  return 0;
}

/* One entry "tcp://host:port" of n bytes at e. */
static int entry_ok(const char *e, size_t n, size_t entry, char *why, size_t why_bytes) {
  if (n == 0) return snprintf(why, why_bytes, "entry %zu is empty", entry + 1), -1;
  if (n >= LH_LEARNER_TEXT_BYTES)
    return snprintf(why, why_bytes, "entry %zu is over %d bytes", entry + 1, LH_LEARNER_TEXT_BYTES - 1), -1;
  if (n < 6 || memcmp(e, "tcp://", 6))
    return snprintf(why, why_bytes, "entry %zu '%.*s' is not tcp://host:port (ranks on several hosts talk TCP)",
                    entry + 1, (int)n, e),
           -1;
  const char *h = e + 6;
  const char *colon = NULL;
  for (const char *p = e + n - 1; p >= h; p--)
    if (*p == ':') {
      colon = p;
      break;
    }
  if (!colon || colon == e + n - 1)
    return snprintf(why, why_bytes, "entry %zu '%.*s' has no port (tcp://host:port)", entry + 1, (int)n, e), -1;
  unsigned long port = 0;
  for (const char *p = colon + 1; p < e + n; p++) {
    if (*p < '0' || *p > '9' || port > 65535)
      return snprintf(why, why_bytes, "entry %zu '%.*s' needs a numeric port in 1..65535", entry + 1, (int)n, e),
             -1;
    port = port * 10 + (unsigned long)(*p - '0');
  }
  if (port < 1 || port > 65535)
    return snprintf(why, why_bytes, "entry %zu '%.*s' needs a numeric port in 1..65535", entry + 1, (int)n, e), -1;
  return host_ok(h, (size_t)(colon - h), why, why_bytes, entry);
}

int lh_learner_endpoints_parse(const char *text, size_t *count, char *why, size_t why_bytes) {
  if (!text || !count) return snprintf(why, why_bytes, "is missing"), -1;
  *count = 0;
  const char *starts[LH_LEARNER_MAX_RANKS], *ends[LH_LEARNER_MAX_RANKS];
  size_t n = 0;
  const char *s = text;
  do {
    const char *a, *b;
    s = next_entry(s, &a, &b);
    if (n == LH_LEARNER_MAX_RANKS)
      return snprintf(why, why_bytes, "has more than %d entries (the most ranks of a job)", LH_LEARNER_MAX_RANKS),
             -1;
    if (entry_ok(a, (size_t)(b - a), n, why, why_bytes)) return -1;
    for (size_t j = 0; j < n; j++)
      if (ends[j] - starts[j] == b - a && !memcmp(starts[j], a, (size_t)(b - a)))
        return snprintf(why, why_bytes, "names '%.*s' twice (entries %zu and %zu): each rank needs its own",
                        (int)(b - a), a, j + 1, n + 1),
               -1;
    starts[n] = a, ends[n] = b, n++;
  } while (s);
  *count = n;
  return 0;
}

int lh_learner_endpoints_entry(const char *text, size_t i, char *out, lh_errbuf *err) {
  if (!text || !out) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL endpoints or out");
  const char *s = text;
  for (size_t k = 0; s; k++) {
    const char *a, *b;
    s = next_entry(s, &a, &b);
    if (k < i) continue;
    if ((size_t)(b - a) >= LH_LEARNER_TEXT_BYTES) break;
    memcpy(out, a, (size_t)(b - a));
    out[b - a] = 0;
    return 0;
  }
  return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "[learner] ingest_endpoints has no entry for rank %zu", i);
}

int lh_learner_ranks_check(const lh_learner_config *cfg, int ranks, lh_errbuf *err) {
  if (!cfg) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL config");
  if (ranks < 1 || ranks > LH_LEARNER_MAX_RANKS)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "learner ranks: %d ranks, not in 1..%d", ranks,
                         LH_LEARNER_MAX_RANKS);
  if (cfg->n_ingest_endpoints) {
    if (cfg->n_ingest_endpoints != (size_t)ranks)
      return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                           "[learner] ingest_endpoints has %zu entr%s but the job has %d rank%s: give one "
                           "endpoint per rank, rank 0's first",
                           cfg->n_ingest_endpoints, cfg->n_ingest_endpoints == 1 ? "y" : "ies", ranks,
                           ranks == 1 ? "" : "s");
    return 0;
  }
  char out[LH_LEARNER_TEXT_BYTES];
  return lh_learner_rank_endpoint(cfg->ingest_endpoint, ranks - 1, out, err);
}

int lh_learner_rank_ingest(const lh_learner_config *cfg, int rank, char *out, lh_errbuf *err) {
  if (!cfg || !out || rank < 0) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL config or out");
  if (!cfg->n_ingest_endpoints) return lh_learner_rank_endpoint(cfg->ingest_endpoint, rank, out, err);
  if ((size_t)rank >= cfg->n_ingest_endpoints)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "[learner] ingest_endpoints has %zu entries: none for rank %d (one endpoint per rank)",
                         cfg->n_ingest_endpoints, rank);
  return lh_learner_endpoints_entry(cfg->ingest_endpoints, (size_t)rank, out, err);
}

int lh_learner_expert_parallel_check(uint32_t P, int ranks, int experts, lh_errbuf *err) {
  if (ranks < 1 || experts < 1)
    return lh_errbuf_set(err, LH_EINVAL, "expert parallelism: %d ranks and %d experts, not both >= 1", ranks,
                         experts);
  if (P < 1 || P > LH_LEARNER_MAX_EXPERT_PARALLEL)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "[learner] expert_parallel = %u is not in 1..%d", P,
                         LH_LEARNER_MAX_EXPERT_PARALLEL);
  if ((uint32_t)ranks % P)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "[learner] expert_parallel = %u needs a learner count that is a multiple of %u; the job "
                         "has %d rank%s",
                         P, P, ranks, ranks == 1 ? "" : "s");
  if ((uint32_t)experts % P)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "[learner] expert_parallel = %u needs [model] experts to be a multiple of %u; the model "
                         "has %d expert%s",
                         P, P, experts, experts == 1 ? "" : "s");
  return 0;
}

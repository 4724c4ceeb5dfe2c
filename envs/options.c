/* Option parsing and the deterministic RNG that environment code shares. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

const char *lh_env_opt(const lh_env_option *opts, size_t count, const char *key) {
  const char *v = NULL;
  for (size_t i = 0; opts && i < count; i++)
    if (opts[i].key && strcmp(opts[i].key, key) == 0) v = opts[i].value ? opts[i].value : "";
  return v;  /* the last one wins, as on a command line */
}

int lh_env_opt_int(const lh_env_option *opts, size_t count, const char *key, long def, long lo,
                   long hi, long *out, lh_errbuf *err) {
  const char *v = lh_env_opt(opts, count, key);
  *out = def;
  if (!v) return 0;
  int64_t x;
  if (lh_parse_i64(v, &x) || x < LONG_MIN || x > LONG_MAX)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "option %s='%s' is not an integer", key, v);
  if (x < lo || x > hi)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "option %s=%ld is outside %ld..%ld", key, (long)x, lo, hi);
  *out = (long)x;
  return 0;
}

int lh_env_opt_double(const lh_env_option *opts, size_t count, const char *key, double def,
                      double lo, double hi, double *out, lh_errbuf *err) {
  const char *v = lh_env_opt(opts, count, key);
  *out = def;
  if (!v) return 0;
  double x;
  if (lh_parse_f64(v, &x) || !isfinite(x))
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "option %s='%s' is not a number", key, v);
  if (x < lo || x > hi)
    return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "option %s=%g is outside %g..%g", key, x, lo, hi);
  *out = x;
  return 0;
}

int lh_env_opt_check_keys(const lh_env_option *opts, size_t count, const char *env,
                          const char *known, lh_errbuf *err) {
  for (size_t i = 0; opts && i < count; i++) {
    const char *k = opts[i].key ? opts[i].key : "";
    size_t n = strlen(k);
    const char *p = known;
    int found = 0;
    while (n && p && *p) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      if (len == n && memcmp(p, k, n) == 0) found = 1;
      p = comma ? comma + 1 : NULL;
    }
    if (!found)
      return lh_errbuf_set(err, LH_EENVS_BAD_OPTION, "%s: unknown option '%s'; options: %s", env, k,
                           known);
  }
  return 0;
}

int lh_envs_opt_error(lh_errbuf *err, int rc, const char *env) {
  if (rc >= 0 || !err) return rc;
  char msg[LH_ERRMSG_BYTES];
  snprintf(msg, sizeof msg, "%s", err->msg);
  return lh_errbuf_set(err, rc, "%s: %s", env, msg);
}

char *lh_envs_escape(const void *s, size_t n, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = s;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int plain = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\';
    size_t need = plain ? 1 : 4;
    /* keep room for "..." unless this is the last byte and it fits */
    if (o + need + (i + 1 < n ? 3 : 0) >= cap) {
      if (o + 3 < cap) memcpy(out + o, "...", 3), o += 3;
      break;
    }
    if (plain) {
      out[o++] = (char)p[i];
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[p[i] >> 4];
      out[o++] = hex[p[i] & 15];
    }
  }
  out[o] = 0;
  return out;
}

void lh_env_rng_seed(lh_env_rng *r, uint64_t seed) { r->state = seed ^ 0x6a09e667f3bcc909ull; }

uint64_t lh_env_rng_next(lh_env_rng *r) {
  uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t lh_env_rng_below(lh_env_rng *r, uint32_t n) {
  if (n <= 1) return 0;
  return (uint32_t)(((lh_env_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

double lh_env_rng_unit(lh_env_rng *r) { return (double)(lh_env_rng_next(r) >> 11) * 0x1.0p-53; }

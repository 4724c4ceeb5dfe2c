/* cli: the configs a Slurm fleet's children read, derived from the user's
 * (cli/launch_slurm.h): the user's INI text with the endpoint keys set to
 * the hosts the allocation gave. This is the one place that rewrites INI
 * text; once every command takes `--set section.key=value` the endpoints
 * can go on the children's command lines instead. */
#include <stdio.h>
#include <string.h>

#include "cli/launch_slurm.h"

#define INI_LINE_BYTES 4096
#define INI_MAX_SECTIONS 64

typedef struct {
  char *out;
  size_t bytes, len;
  int full;
} sink;

static void put(sink *s, const char *p, size_t n) {
  if (s->full || s->len + n + 1 > s->bytes) {
    s->full = 1;
    return;
  }
  memcpy(s->out + s->len, p, n);
  s->len += n;
  s->out[s->len] = 0;
}

static void put_kv(sink *s, const char *key, const char *value) {
  put(s, key, strlen(key));
  put(s, " = ", 3);
  put(s, value, strlen(value));
  put(s, "\n", 1);
}

/* Adds the keys of section that were not written yet. */
static void flush(sink *s, const char *section, const char *const *sections, const char *const *keys,
                  const char *const *values, size_t n, unsigned char *done) {
  for (size_t i = 0; i < n; i++)
    if (!done[i] && !strcmp(sections[i], section)) {
      put_kv(s, keys[i], values[i]);
      done[i] = 1;
    }
}

int lh_launch_slurm_ini_rewrite(const char *src, const char *const *sections, const char *const *keys,
                                const char *const *values, size_t n, char *out, size_t out_bytes, lh_errbuf *err) {
  if (!src || !out || !out_bytes || (n && (!sections || !keys || !values)) || n > 64)
    return lh_errbuf_set(err, LH_EINVAL, "slurm config: NULL text or output, or over 64 keys");
  unsigned char done[64] = {0};
  sink s = {.out = out, .bytes = out_bytes};
  out[0] = 0;
  char section[128] = "";
  int line_no = 0;
  const char *p = src;
  while (*p) {
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    line_no++;
    if (len >= INI_LINE_BYTES)
      return lh_errbuf_set(err, LH_EINVAL, "slurm config: line %d is over %d bytes", line_no, INI_LINE_BYTES - 1);
    char line[INI_LINE_BYTES];
    memcpy(line, p, len);
    line[len] = 0;
    p += len + (end != NULL);
    const char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    if (*t == '[') {
      const char *close = strchr(t, ']');
      if (close && (size_t)(close - t - 1) < sizeof section) {
        flush(&s, section, sections, keys, values, n, done);
        snprintf(section, sizeof section, "%.*s", (int)(close - t - 1), t + 1);
      }
    } else if (*t && *t != ';' && *t != '#') {
      size_t k = strcspn(t, "=:");
      while (k && (t[k - 1] == ' ' || t[k - 1] == '\t')) k--;
      size_t i = 0;
      while (i < n && !(!strcmp(sections[i], section) && strlen(keys[i]) == k && !strncmp(keys[i], t, k))) i++;
      if (i < n && t[strcspn(t, "=:")]) {
        if (!done[i]) put_kv(&s, keys[i], values[i]);
        done[i] = 1;
        continue;
      }
    }
    put(&s, line, len);
    put(&s, "\n", 1);
  }
  flush(&s, section, sections, keys, values, n, done);
  /* Sections the text lacks, in the order the keys name them. */
  for (size_t i = 0; i < n; i++)
    if (!done[i]) {
      put(&s, "\n[", 2);
      put(&s, sections[i], strlen(sections[i]));
      put(&s, "]\n", 2);
      flush(&s, sections[i], sections, keys, values, n, done);
    }
  if (s.full) return lh_errbuf_set(err, LH_EINVAL, "slurm config: the derived config is over %zu bytes", out_bytes);
  return 0;
}

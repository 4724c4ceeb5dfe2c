/* common: the one growable array and the one string copy (common/buf.h). */
#include "common/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t lh_grow_cap(size_t cap, size_t need, size_t first) {
  size_t c = cap ? cap : first ? first : 1;
  while (c < need) {
    if (c > SIZE_MAX / 2) return 0;
    c *= 2;
  }
  return c;
}

int lh_resize(void *pp, size_t count, size_t elem_bytes) {
  if (elem_bytes && count > SIZE_MAX / elem_bytes) return -1;
  size_t bytes = count * elem_bytes;
  void *q = realloc(*(void **)pp, bytes ? bytes : 1);
  if (!q) return -1;
  *(void **)pp = q;
  return 0;
}

int lh_reserve(void *pp, size_t *cap, size_t need, size_t elem_bytes, size_t first) {
  if (need <= *cap) return 0;
  size_t c = lh_grow_cap(*cap, need, first);
  if (!c || lh_resize(pp, c, elem_bytes)) return -1;
  *cap = c;
  return 0;
}

char *lh_strdup0(const char *s) {
  if (!s) s = "";
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* common: the one string builder (common/str.h). */
#include "common/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/common.h"

/* Makes room for extra more bytes and the NUL, doubling: 0 or LH_ENOMEM. */
static int grow(lh_str *s, size_t extra) {
  if (s->failed) return LH_ENOMEM;
  if (extra < s->cap && s->len + extra + 1 <= s->cap) return 0;
  size_t need = s->len + extra + 1;
  size_t cap = need > s->len ? lh_grow_cap(s->cap, need, 256) : 0;
  if (!cap || lh_resize(&s->data, cap, 1)) {
    s->failed = 1;
    return LH_ENOMEM;
  }
  if (!s->len) s->data[0] = 0;
  s->cap = cap;
  return 0;
}

int lh_str_reserve(lh_str *s, size_t bytes) {
  if (s->failed) return LH_ENOMEM;
  if (s->len + bytes + 1 <= s->cap) return 0;
  if (bytes > (size_t)-1 - s->len - 1 || lh_resize(&s->data, s->len + bytes + 1, 1)) {
    s->failed = 1;
    return LH_ENOMEM;
  }
  if (!s->len) s->data[0] = 0;
  s->cap = s->len + bytes + 1;
  return 0;
}

int lh_str_append(lh_str *s, const char *p, size_t n) {
  int rc = grow(s, n);
  if (rc) return rc;
  memcpy(s->data + s->len, p, n);
  s->len += n;
  s->data[s->len] = 0;
  return 0;
}

int lh_str_puts(lh_str *s, const char *p) { return p ? lh_str_append(s, p, strlen(p)) : 0; }

int lh_str_printf(lh_str *s, const char *fmt, ...) {
  /* Format into the room there is; only when it does not fit, grow and
   * format again. */
  int rc = grow(s, 64);
  if (rc) return rc;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(s->data + s->len, s->cap - s->len, fmt, ap);
  va_end(ap);
  if (n < 0) {
    s->data[s->len] = 0;
    s->failed = 1;
    return LH_EINVAL;
  }
  if ((size_t)n >= s->cap - s->len) {
    s->data[s->len] = 0; /* drop the truncated tail */
    if ((rc = grow(s, (size_t)n))) return rc;
    va_start(ap, fmt);
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  s->len += (size_t)n;
  return 0;
}

void lh_str_clear(lh_str *s) {
  s->len = 0;
  s->failed = 0;
  if (s->data) s->data[0] = 0;
}

void lh_str_free(lh_str *s) {
  if (!s) return;
  free(s->data);
  s->data = NULL;
  s->len = s->cap = 0;
  s->failed = 0;
}

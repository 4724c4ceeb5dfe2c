/* common: the one string builder. An lh_str is a NUL-terminated string
 * that grows as text is appended (doubling from 256 bytes, lh_grow_cap),
 * for observations, pages, exports and the like. Zeroed, it is empty and
 * holds no memory. A failed allocation sets failed; later appends do
 * nothing and return LH_ENOMEM until lh_str_clear, so that a writer may
 * check each call or only failed at the end. */
#ifndef LH_COMMON_STR_H
#define LH_COMMON_STR_H

#include <stddef.h>

typedef struct {
  char *data; /* NULL (nothing appended yet) or NUL-terminated */
  size_t len, cap;
  int failed;
} lh_str;

/* Appends n bytes of p: 0, or LH_ENOMEM (and failed). */
int lh_str_append(lh_str *s, const char *p, size_t n);
/* Appends the string p (NULL appends nothing): 0, or LH_ENOMEM. */
int lh_str_puts(lh_str *s, const char *p);
/* Appends printf's text: 0, LH_ENOMEM (nothing of it is kept), or
 * LH_EINVAL for a format vsnprintf refuses (failed too). */
int lh_str_printf(lh_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows s to hold bytes more exactly (not to a power of two), so that a
 * buffer sized up front has the capacity its owner states: 0 or LH_ENOMEM. */
int lh_str_reserve(lh_str *s, size_t bytes);
/* Empties s (keeping its memory) and forgets a failure. */
void lh_str_clear(lh_str *s);
/* Frees s's memory and leaves it empty; accepts NULL. */
void lh_str_free(lh_str *s);

#endif

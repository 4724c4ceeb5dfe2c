/* common: the one growable array and the one string copy. A growable
 * array is a pointer with a capacity in elements; lh_grow_cap says how far
 * to grow it (doubling) and lh_resize reallocates it, both refusing a size
 * that overflows. Text built piece by piece goes through the one string
 * builder, lh_str (common/str.h), which grows the same way. */
#ifndef LH_COMMON_BUF_H
#define LH_COMMON_BUF_H

#include <stddef.h>

/* The capacity that holds need elements: cap (or first when cap is 0)
 * doubled until it does; 0 when that would overflow a size_t. */
size_t lh_grow_cap(size_t cap, size_t need, size_t first);

/* Reallocates *(T **)pp to count elements of elem_bytes each: 0, or -1 (a
 * size that overflows, or no memory) with *pp unchanged. */
int lh_resize(void *pp, size_t count, size_t elem_bytes);

/* Makes room for need elements in the array *(T **)pp of *cap elements
 * of elem_bytes each: when need > *cap, *cap grows (lh_grow_cap, doubling
 * from first) and the array is reallocated. 0, or -1 (a size that
 * overflows, or no memory) with *pp and *cap unchanged. The one way an
 * array grows by a push: `if (lh_reserve(&a->v, &a->cap, a->n + 1,
 * sizeof *a->v, 16)) return LH_ENOMEM;`. */
int lh_reserve(void *pp, size_t *cap, size_t need, size_t elem_bytes, size_t first);

/* A malloc'd copy of s ("" when s is NULL); NULL when out of memory. */
char *lh_strdup0(const char *s);

#endif

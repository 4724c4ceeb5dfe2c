/* common: one INI section read by a table of keys (common/ini_section.h).
 *
 * The document's entries are read in order and the first error stops the
 * reading, so that the message left in err is about the first bad key. */
#include "common/ini_section.h"

#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const lh_ini_section *sec;
  void *cfg, *user;
  lh_errbuf *err;
  const lh_ini_entry *e; /* the key being read */
  char where[300];       /* its file and line, or --set section.key */
  lh_ini_lines seen;
} parse_state;

static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcmp(v, yes[i])) return *out = 1, 0;
    if (!strcmp(v, no[i])) return *out = 0, 0;
  }
  return -1;
}

/* 2^64: a U64 bound at or above it is no bound. */
#define U64_END 18446744073709551616.0

static int u64_value(const lh_ini_key *k, const char *value, char *field, char *why, size_t why_bytes) {
  uint64_t x;
  int bounded = k->max < U64_END;
  int bad = lh_parse_u64(value, &x) != 0;
  if (!bad && k->min > 0) bad = x < (uint64_t)k->min;
  if (!bad && bounded) bad = x > (uint64_t)k->max;
  if (k->bytes == sizeof(int)) {
    /* an int field: the table's bound must keep the value an int */
    if (!bounded || k->max > INT_MAX) return snprintf(why, why_bytes, "has an int field bounded above INT_MAX"), -1;
    if (!bad) {
      int v = (int)x;
      return memcpy(field, &v, sizeof v), 0;
    }
  } else if (k->bytes && k->bytes != sizeof x) {
    return snprintf(why, why_bytes, "has an integer field that is neither int- nor 64-bit-sized"), -1;
  }
  if (!bad) return memcpy(field, &x, sizeof x), 0;
  if (bounded)
    snprintf(why, why_bytes, "is not an integer in %.0f..%.0f", k->min, k->max);
  else
    snprintf(why, why_bytes, "is not an integer >= %.0f", k->min);
  return -1;
}

static int f64_value(const lh_ini_key *k, const char *value, char *field, char *why, size_t why_bytes) {
  double x;
  int min_open = (k->open & LH_INI_OPEN_MIN) != 0, max_open = (k->open & LH_INI_OPEN_MAX) != 0;
  int bad = lh_parse_f64(value, &x) != 0;
  if (!bad) bad = min_open ? !(x > k->min) : !(x >= k->min);
  if (!bad) bad = max_open ? !(x < k->max) : !(x <= k->max);
  if (k->bytes == sizeof(float)) {
    float v = (float)x;
    if (!bad && isfinite(v)) return memcpy(field, &v, sizeof v), 0;
    if (!bad) return snprintf(why, why_bytes, "is beyond a float's range (%g)", (double)FLT_MAX), -1;
  } else if (k->bytes && k->bytes != sizeof x) {
    return snprintf(why, why_bytes, "has a number field that is neither float- nor double-sized"), -1;
  } else if (!bad) {
    return memcpy(field, &x, sizeof x), 0;
  }
  if (isinf(k->max))
    snprintf(why, why_bytes, "is not a number %s %g", min_open ? ">" : ">=", k->min);
  else
    snprintf(why, why_bytes, "is not a number in %c%g, %g%c", min_open ? '(' : '[', k->min, k->max,
             max_open ? ')' : ']');
  return -1;
}

/* Checks value against key k and stores it in cfg: 0, or -1 with why. e
 * is where the value was written, which a PATH needs (NULL: not in a
 * file). */
static int key_value(const lh_ini_key *k, const lh_ini_entry *e, const char *value, void *cfg, char *why,
                     size_t why_bytes) {
  char *field = (char *)cfg + k->offset;
  switch (k->kind) {
    case LH_INI_U64:
      return u64_value(k, value, field, why, why_bytes);
    case LH_INI_F64:
      return f64_value(k, value, field, why, why_bytes);
    case LH_INI_BOOL: {
      int x;
      if (parse_bool(value, &x) == 0) return memcpy(field, &x, sizeof x), 0;
      snprintf(why, why_bytes, "is not true/false, yes/no, on/off or 1/0");
      return -1;
    }
    case LH_INI_STR: {
      size_t len = strlen(value);
      if ((len || k->allow_empty) && len < k->bytes) return memcpy(field, value, len + 1), 0;
      snprintf(why, why_bytes, "is not a text of %d..%zu bytes", k->allow_empty ? 0 : 1, k->bytes - 1);
      return -1;
    }
    case LH_INI_PATH: {
      if (!e) return snprintf(why, why_bytes, "is a path, which only an INI file can give"), -1;
      if (!*value && !k->allow_empty)
        return snprintf(why, why_bytes, "is not a text of 1..%zu bytes", k->bytes - 1), -1;
      if (lh_ini_entry_path(e, field, k->bytes) == 0) return 0;
      snprintf(why, why_bytes, "is not a path of at most %zu bytes once resolved against %.200s", k->bytes - 1,
               e->dir ? e->dir : ".");
      return -1;
    }
    case LH_INI_CHOICE: {
      if (k->bytes != sizeof(int)) return snprintf(why, why_bytes, "has a choice field that is not int-sized"), -1;
      for (int i = 0; k->names[i]; i++)
        if (!strcmp(value, k->names[i])) return memcpy(field, &i, sizeof i), 0;
      size_t n = (size_t)snprintf(why, why_bytes, "is not one of ");
      for (int i = 0; k->names[i] && n < why_bytes; i++)
        n += (size_t)snprintf(why + n, why_bytes - n, "%s%s", i ? ", " : "", k->names[i]);
      return -1;
    }
    case LH_INI_CUSTOM:
      if (k->parse(value, cfg, why, why_bytes) == 0) return 0;
      if (!why[0]) snprintf(why, why_bytes, "is not valid");
      return -1;
  }
  snprintf(why, why_bytes, "has a key kind this reader does not know");
  return -1;
}

int lh_ini_key_parse(const lh_ini_key *k, const char *value, void *cfg, char *why, size_t why_bytes) {
  if (why && why_bytes) why[0] = 0;
  if (!k || !value || !cfg || !why || !why_bytes) return -1;
  return key_value(k, NULL, value, cfg, why, why_bytes);
}

static int unknown_key(parse_state *st, const char *name) {
  const lh_ini_section *sec = st->sec;
  char known[LH_ERRMSG_BYTES] = "";
  for (size_t j = 0; j < sec->n_keys; j++) {
    strncat(known, sec->keys[j].name, sizeof known - strlen(known) - 1);
    if (j + 1 < sec->n_keys) strncat(known, ", ", sizeof known - strlen(known) - 1);
  }
  return lh_errbuf_set(st->err, sec->unknown_key_error, "%s: [%s] unknown key '%.64s' (known: %.400s)", st->where,
                       sec->name, name, known);
}

/* The code of the key's error, or 0 when it is good. */
static int section_key(parse_state *st) {
  const lh_ini_section *sec = st->sec;
  const lh_ini_entry *e = st->e;
  const char *name = e->key, *value = e->value;
  size_t i = 0;
  while (i < sec->n_keys && strcmp(sec->keys[i].name, name) != 0) i++;
  if (i == sec->n_keys) return unknown_key(st, name);
  if (st->seen.entry[i])
    return lh_errbuf_set(st->err, sec->duplicate_error, "%s: [%s] %s = %.64s: the key was already given on line %d",
                         st->where, sec->name, name, value, st->seen.line[i]);
  st->seen.line[i] = e->line;
  st->seen.entry[i] = e;
  const lh_ini_key *k = &sec->keys[i];
  char why[320] = "";
  if (key_value(k, e, value, st->cfg, why, sizeof why) == 0) return 0;
  int code = k->kind == LH_INI_CUSTOM && k->error ? k->error : sec->value_error;
  return lh_errbuf_set(st->err, code, "%s: [%s] %s = '%.64s' %s", st->where, sec->name, name, value, why);
}

static int check_section(const lh_ini_section *sec, lh_errbuf *err) {
  if (!sec || !sec->name || (sec->n_keys && !sec->keys))
    return lh_errbuf_set(err, LH_EINVAL, "ini section: NULL section, text or config");
  if (sec->n_keys > LH_INI_MAX_KEYS)
    return lh_errbuf_set(err, LH_EINVAL, "ini section [%s]: %zu keys, at most %d", sec->name, sec->n_keys,
                         LH_INI_MAX_KEYS);
  if (sec->unknown_key_error >= 0 || sec->duplicate_error >= 0 || sec->value_error >= 0 || sec->syntax_error >= 0)
    return lh_errbuf_set(err, LH_EINVAL, "ini section [%s]: its error codes must be negative lh_err codes",
                         sec->name);
  return 0;
}

int lh_ini_section_read(const lh_ini_section *sec, const lh_ini_doc *doc, void *cfg, void *user,
                        lh_ini_lines *lines, lh_errbuf *err) {
  LH_TRY(check_section(sec, err));
  if (!doc || !cfg) return lh_errbuf_set(err, LH_EINVAL, "ini section: NULL section, text or config");
  parse_state st = {.sec = sec, .cfg = cfg, .user = user, .err = err};
  for (size_t i = 0; i < lh_ini_doc_count(doc); i++) {
    st.e = lh_ini_doc_entry(doc, i);
    lh_ini_entry_where(st.e, st.where, sizeof st.where);
    int rc = 0;
    if (strcmp(st.e->section, sec->name) == 0) rc = section_key(&st);
    else if (sec->other) rc = sec->other(user, st.e, err);
    if (rc) return rc;
  }
  if (lines) *lines = st.seen;
  return 0;
}

int lh_ini_section_parse(const lh_ini_section *sec, const char *text, const char *source, void *cfg,
                         void *user, lh_ini_lines *lines, lh_errbuf *err) {
  LH_TRY(check_section(sec, err));
  if (!text || !cfg) return lh_errbuf_set(err, LH_EINVAL, "ini section: NULL section, text or config");
  lh_ini_source src = {.path = source, .text = text, .any_section = 1, .error = sec->syntax_error,
                       .file_error = sec->syntax_error};
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_open(&src, &doc, err));
  int rc = lh_ini_section_read(sec, doc, cfg, user, lines, err);
  if (!rc && lines) memset(lines->entry, 0, sizeof lines->entry);
  lh_ini_doc_free(doc);
  return rc;
}

int lh_ini_key_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *name) {
  if (!sec || !lines || !name) return 0;
  for (size_t i = 0; i < sec->n_keys && i < LH_INI_MAX_KEYS; i++)
    if (!strcmp(sec->keys[i].name, name)) return lines->line[i];
  return 0;
}

const lh_ini_entry *lh_ini_key_entry(const lh_ini_section *sec, const lh_ini_lines *lines, const char *name) {
  if (!sec || !lines || !name) return NULL;
  for (size_t i = 0; i < sec->n_keys && i < LH_INI_MAX_KEYS; i++)
    if (!strcmp(sec->keys[i].name, name)) return lines->entry[i];
  return NULL;
}

int lh_ini_later_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *a, const char *b) {
  int la = lh_ini_key_line(sec, lines, a), lb = lh_ini_key_line(sec, lines, b);
  return la > lb ? la : lb;
}

void lh_ini_later_where(const lh_ini_section *sec, const lh_ini_lines *lines, const char *a, const char *b,
                        char *out, size_t bytes) {
  const lh_ini_entry *later = NULL;
  for (size_t i = 0; sec && lines && i < sec->n_keys && i < LH_INI_MAX_KEYS; i++) {
    const lh_ini_entry *e = lines->entry[i];
    if (e && (!strcmp(sec->keys[i].name, a) || !strcmp(sec->keys[i].name, b)) && (!later || e > later)) later = e;
  }
  lh_ini_entry_where(later, out, bytes);
}

/* common: one INI section read by a table of keys (common/ini_section.h).
 *
 * inih calls on_entry for every key of every section; the state remembers
 * the first error, after which every call answers 0, so that the message
 * left in err is about the first bad line of the file. */
#include "common/ini_section.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const lh_ini_section *sec;
  const char *source;
  void *cfg, *user;
  lh_errbuf *err;
  lh_text_lines lines; /* the text, and the line inih last read */
  int code;            /* the first error's code; 0 while all is well */
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
  if (!bad) return memcpy(field, &x, sizeof x), 0;
  if (isinf(k->max))
    snprintf(why, why_bytes, "is not a number %s %g", min_open ? ">" : ">=", k->min);
  else
    snprintf(why, why_bytes, "is not a number in %c%g, %g%c", min_open ? '(' : '[', k->min, k->max,
             max_open ? ')' : ']');
  return -1;
}

/* Checks value against key k and stores it in cfg: 0, or -1 with why. */
static int key_value(const lh_ini_key *k, const char *value, void *cfg, char *why, size_t why_bytes) {
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
    case LH_INI_CUSTOM:
      if (k->parse(value, cfg, why, why_bytes) == 0) return 0;
      if (!why[0]) snprintf(why, why_bytes, "is not valid");
      return -1;
  }
  snprintf(why, why_bytes, "has a key kind this reader does not know");
  return -1;
}

static int unknown_key(parse_state *st, const char *name) {
  const lh_ini_section *sec = st->sec;
  char known[LH_ERRMSG_BYTES] = "";
  for (size_t j = 0; j < sec->n_keys; j++) {
    strncat(known, sec->keys[j].name, sizeof known - strlen(known) - 1);
    if (j + 1 < sec->n_keys) strncat(known, ", ", sizeof known - strlen(known) - 1);
  }
  return lh_errbuf_set(st->err, sec->unknown_key_error, "%s:%d: [%s] unknown key '%.64s' (known: %.400s)",
                       st->source, st->lines.line, sec->name, name, known);
}

/* The code of the key's error, or 0 when it is good. */
static int section_key(parse_state *st, const char *name, const char *value) {
  const lh_ini_section *sec = st->sec;
  size_t i = 0;
  while (i < sec->n_keys && strcmp(sec->keys[i].name, name) != 0) i++;
  if (i == sec->n_keys) return unknown_key(st, name);
  if (st->seen.line[i])
    return lh_errbuf_set(st->err, sec->duplicate_error,
                         "%s:%d: [%s] %s = %.64s: the key was already given on line %d", st->source,
                         st->lines.line, sec->name, name, value, st->seen.line[i]);
  st->seen.line[i] = st->lines.line;
  const lh_ini_key *k = &sec->keys[i];
  char why[256] = "";
  if (key_value(k, value, st->cfg, why, sizeof why) == 0) return 0;
  int code = k->kind == LH_INI_CUSTOM && k->error ? k->error : sec->value_error;
  return lh_errbuf_set(st->err, code, "%s:%d: [%s] %s = '%.64s' %s", st->source, st->lines.line, sec->name,
                       name, value, why);
}

static int on_entry(void *user, const char *section, const char *name, const char *value) {
  parse_state *st = user;
  if (st->code) return 0;
  if (strcmp(section, st->sec->name) == 0)
    st->code = section_key(st, name, value);
  else if (st->sec->other)
    st->code = st->sec->other(st->user, st->source, st->lines.line, section, name, value, st->err);
  return st->code == 0;
}

int lh_ini_section_parse(const lh_ini_section *sec, const char *text, const char *source, void *cfg,
                         void *user, lh_ini_lines *lines, lh_errbuf *err) {
  if (!sec || !sec->name || !text || !cfg || (sec->n_keys && !sec->keys))
    return lh_errbuf_set(err, LH_EINVAL, "ini section: NULL section, text or config");
  if (sec->n_keys > LH_INI_MAX_KEYS)
    return lh_errbuf_set(err, LH_EINVAL, "ini section [%s]: %zu keys, at most %d", sec->name, sec->n_keys,
                         LH_INI_MAX_KEYS);
  if (sec->unknown_key_error >= 0 || sec->duplicate_error >= 0 || sec->value_error >= 0 || sec->syntax_error >= 0)
    return lh_errbuf_set(err, LH_EINVAL, "ini section [%s]: its error codes must be negative lh_err codes",
                         sec->name);
  if (!source) source = "config";
  parse_state st = {.sec = sec, .source = source, .cfg = cfg, .user = user, .err = err, .lines = {.text = text}};
  int rc = ini_parse_stream(lh_text_lines_read, &st.lines, on_entry, &st);
  if (st.code) return st.code;
  if (rc == -2) return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory while parsing", source);
  if (rc != 0)
    return lh_errbuf_set(err, sec->syntax_error, "%s:%d: syntax error (expected '[section]' or 'key = value')",
                         source, rc);
  if (lines) *lines = st.seen;
  return 0;
}

int lh_ini_key_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *name) {
  if (!sec || !lines || !name) return 0;
  for (size_t i = 0; i < sec->n_keys && i < LH_INI_MAX_KEYS; i++)
    if (!strcmp(sec->keys[i].name, name)) return lines->line[i];
  return 0;
}

int lh_ini_later_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *a, const char *b) {
  int la = lh_ini_key_line(sec, lines, a), lb = lh_ini_key_line(sec, lines, b);
  return la > lb ? la : lb;
}

int lh_ini_load_file(const char *path, int file_error, lh_ini_text_fn parse, void *cfg, lh_errbuf *err) {
  if (!path || !parse || !cfg) return lh_errbuf_set(err, LH_EINVAL, "ini load: NULL path, parser or config");
  char *text;
  int rc = lh_read_text_file(path, file_error, &text, NULL, err);
  if (rc != 0) return rc;
  rc = parse(text, path, cfg, err);
  free(text);
  return rc;
}

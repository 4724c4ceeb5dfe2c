/* common: the reference of one INI section (common/ini_section.h,
 * lh_ini_section_reference), in Markdown, from the table the section's
 * reader uses: what each key takes from its kind and bounds, its default
 * from a default config, what it does from its doc. A key without a doc
 * is refused, so that no key goes undocumented. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ini_section.h"

/* 2^64: a U64 bound at or above it is no bound (as the reader has it). */
#define U64_END 18446744073709551616.0

/* A number as the reference writes it: integers in full, others by %g. */
static void number_text(double x, char *out, size_t bytes) {
  if (x == floor(x) && fabs(x) < 1.9e19)
    snprintf(out, bytes, "%.0f", x);
  else
    snprintf(out, bytes, "%g", x);
}

/* Whether key k counts bytes (its name ends in _bytes). */
static int is_bytes(const lh_ini_key *k) {
  size_t n = strlen(k->name);
  return n > 6 && strcmp(k->name + n - 6, "_bytes") == 0;
}

/* A count of bytes in its largest whole binary unit ("16 MiB"), or ""
 * when it is not a whole KiB or more, or would read as a million units or
 * more (a bound that means no bound). */
static void unit_text(double x, char *out, size_t bytes) {
  static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
  out[0] = 0;
  double scale = 1024;
  for (int u = 0; u < 4 && x >= scale && !isinf(x); u++, scale *= 1024)
    if (fmod(x, scale) == 0 && x / scale < 1e6) snprintf(out, bytes, "%.0f %s", x / scale, unit[u]);
}

/* What values key k takes, from its kind and bounds. */
static int takes(const lh_ini_key *k, lh_str *out) {
  char lo[64], hi[64], lo_unit[32], hi_unit[32];
  number_text(k->min, lo, sizeof lo);
  number_text(k->max, hi, sizeof hi);
  unit_text(k->min, lo_unit, sizeof lo_unit);
  unit_text(k->max, hi_unit, sizeof hi_unit);
  if (k->kind == LH_INI_U64 && is_bytes(k) && hi_unit[0] && k->max < U64_END)
    return lh_str_printf(out, "an integer in %s..%s (%s%s to %s)", lo, hi, lo_unit[0] ? "" : lo,
                         lo_unit[0] ? lo_unit : "", hi_unit);
  switch (k->kind) {
    case LH_INI_U64:
      if (k->max >= U64_END || isinf(k->max)) return lh_str_printf(out, "an integer, at least %s", lo);
      if (k->min == k->max) return lh_str_printf(out, "the integer %s", lo);
      return lh_str_printf(out, "an integer in %s..%s", lo, hi);
    case LH_INI_F64: {
      int min_open = (k->open & LH_INI_OPEN_MIN) != 0, max_open = (k->open & LH_INI_OPEN_MAX) != 0;
      if (isinf(k->max)) return lh_str_printf(out, "a number %s %s", min_open ? ">" : ">=", lo);
      return lh_str_printf(out, "a number in %s%s, %s%s", min_open ? "(" : "[", lo, hi, max_open ? ")" : "]");
    }
    case LH_INI_BOOL:
      return lh_str_puts(out, "true or false (also yes/no, on/off, 1/0)");
    case LH_INI_STR:
      return lh_str_printf(out, "a text of %d to %zu bytes", k->allow_empty ? 0 : 1, k->bytes - 1);
    case LH_INI_PATH:
      return lh_str_printf(out, "a path of %d to %zu bytes, relative to the folder of the file it is written in",
                           k->allow_empty ? 0 : 1, k->bytes - 1);
    case LH_INI_CHOICE: {
      int rc = lh_str_puts(out, "one of ");
      for (int i = 0; rc == 0 && k->names[i]; i++) rc = lh_str_printf(out, "%s`%s`", i ? ", " : "", k->names[i]);
      return rc;
    }
    case LH_INI_CUSTOM:
      return lh_str_puts(out, "see below");
  }
  return LH_EINVAL;
}

/* Key k's value in cfg as text ("" for an empty text); -1 when it cannot
 * be written. */
static int value_text(const lh_ini_key *k, const void *cfg, char *out, size_t bytes) {
  const char *field = (const char *)cfg + k->offset;
  switch (k->kind) {
    case LH_INI_U64:
      if (k->bytes == sizeof(int)) {
        int v;
        memcpy(&v, field, sizeof v);
        return snprintf(out, bytes, "%d", v) < (int)bytes ? 0 : -1;
      } else {
        uint64_t v;
        memcpy(&v, field, sizeof v);
        return snprintf(out, bytes, "%llu", (unsigned long long)v) < (int)bytes ? 0 : -1;
      }
    case LH_INI_F64: {
      double v;
      if (k->bytes == sizeof(float)) {
        float f;
        memcpy(&f, field, sizeof f);
        v = f;
        /* the float nearest a decimal default prints as that decimal */
        return snprintf(out, bytes, "%.7g", v) < (int)bytes ? 0 : -1;
      }
      memcpy(&v, field, sizeof v);
      return snprintf(out, bytes, "%g", v) < (int)bytes ? 0 : -1;
    }
    case LH_INI_BOOL: {
      int v;
      memcpy(&v, field, sizeof v);
      return snprintf(out, bytes, "%s", v ? "true" : "false") < (int)bytes ? 0 : -1;
    }
    case LH_INI_STR:
    case LH_INI_PATH:
      return snprintf(out, bytes, "%s", field) < (int)bytes ? 0 : -1;
    case LH_INI_CHOICE: {
      int v, n = 0;
      memcpy(&v, field, sizeof v);
      while (k->names[n]) n++;
      if (v < 0 || v >= n) return -1;
      return snprintf(out, bytes, "%s", k->names[v]) < (int)bytes ? 0 : -1;
    }
    case LH_INI_CUSTOM:
      return k->format ? k->format(cfg, out, bytes) : -1;
  }
  return -1;
}

/* A doc into its list item: every line after a newline indented by two
 * spaces (a blank line stays blank), so that paragraphs and lists of a
 * doc stay inside the item. */
static int doc_text(const char *doc, lh_str *out) {
  int rc = 0;
  for (const char *p = doc; rc == 0 && *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    rc = lh_str_append(out, p, n);
    if (rc == 0) rc = lh_str_puts(out, "\n");
    if (!nl) break;
    p = nl + 1;
    if (rc == 0 && *p && *p != '\n') rc = lh_str_puts(out, "  ");
  }
  return rc;
}

int lh_ini_section_reference(const lh_ini_section *sec, const void *defaults, lh_str *out, lh_errbuf *err) {
  if (!sec || !sec->name || !sec->keys || !defaults || !out)
    return lh_errbuf_set(err, LH_EINVAL, "config reference: NULL section, defaults or output");
  for (size_t i = 0; i < sec->n_keys; i++) {
    const lh_ini_key *k = &sec->keys[i];
    if (!k->doc || !k->doc[0])
      return lh_errbuf_set(err, LH_EINVAL, "[%s] %s has no documentation: give its table entry a doc", sec->name,
                           k->name);
  }
  int rc = lh_str_printf(out, "## [%s]\n\n", sec->name);
  for (size_t i = 0; rc == 0 && i < sec->n_keys; i++) {
    const lh_ini_key *k = &sec->keys[i];
    char value[512];
    int has_default = 1;
    if (k->kind == LH_INI_CUSTOM && !k->format) {
      has_default = 0;
    } else if (value_text(k, defaults, value, sizeof value) != 0) {
      return lh_errbuf_set(err, LH_EINVAL, "[%s] %s: its default cannot be written", sec->name, k->name);
    }
    char unit[32] = "";
    if (has_default && k->kind == LH_INI_U64 && is_bytes(k)) unit_text(strtod(value, NULL), unit, sizeof unit);
    rc = lh_str_printf(out, "- **`%s`**", k->name);
    if (rc == 0 && k->kind != LH_INI_CUSTOM) rc = lh_str_puts(out, ": "), rc = rc ? rc : takes(k, out);
    if (rc == 0 && has_default)
      rc = value[0] ? lh_str_printf(out, "%sdefault `%s`%s%s%s", k->kind != LH_INI_CUSTOM ? "; " : ": ", value,
                                    unit[0] ? " (" : "", unit, unit[0] ? ")" : "")
                    : lh_str_printf(out, "%sdefault none", k->kind != LH_INI_CUSTOM ? "; " : ": ");
    if (rc == 0) rc = lh_str_puts(out, ".\n  ");
    if (rc == 0) rc = doc_text(k->doc, out);
  }
  if (rc == 0) rc = lh_str_puts(out, "\n");
  if (rc != 0) return lh_errbuf_set(err, rc, "config reference: no memory for [%s]", sec->name);
  return 0;
}

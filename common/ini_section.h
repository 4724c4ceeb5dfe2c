/* common: one section of an INI document (common/ini_doc.h) read into a
 * config struct by a table of keys, the one way the [actor], [learner],
 * [fleet] and [model] readers work.
 *
 * A module lists every key of its section in a static table (name, kind,
 * the field's offset, its bounds or size, or a parser of its own for a
 * special kind) and hands the table, the document and its own error codes
 * to lh_ini_section_read. Every key of the document keeps its file and
 * line (or "--set section.key" for an override), so that every message
 * names the file, the line, the section and the key:
 *
 *   fleet.ini:3: [actor] unknown key 'batchsize' (known: batch, ...)
 *   fleet.ini:6: [actor] seed = 2: the key was already given on line 2
 *   fleet.ini:2: [actor] batch = '0' is not an integer in 1..65536
 *   fleet.ini:3: syntax error (expected '[section]' or 'key = value')
 *
 * Keys of other sections are skipped, or handed to the section's `other`
 * callback so that a module can read a second, free-form section in the
 * same pass (the actors' [env]).
 *
 * Each key carries its documentation, so that the reference of every key
 * (docs/configuration.md, `longhaul help config`) is printed from the
 * tables the readers use: its kind and range from the table, its default
 * from the section's default config, and what it does from its doc. */
#ifndef LH_INI_SECTION_H
#define LH_INI_SECTION_H

#include <math.h>
#include <stddef.h>

#include "common/common.h"
#include "common/ini_doc.h"
#include "common/str.h"

typedef enum {
  LH_INI_U64,    /* uint64_t, or int when the field is int-sized: decimal digits, in [min, max] */
  LH_INI_F64,    /* double, or float when the field is float-sized: in min..max, ends open or closed */
  LH_INI_BOOL,   /* int: true/false, yes/no, on/off, 1/0 */
  LH_INI_STR,    /* char[bytes]: at most bytes - 1 bytes, empty only when allow_empty */
  LH_INI_PATH,   /* as STR, a path: resolved against the folder of the file the key is written in */
  LH_INI_CHOICE, /* an enum (int-sized) field: the index of the value in names */
  LH_INI_CUSTOM  /* the key's own parse callback */
} lh_ini_kind;

/* The open ends of an F64 range (integers' ranges are closed). */
enum { LH_INI_CLOSED = 0, LH_INI_OPEN_MIN = 1, LH_INI_OPEN_MAX = 2 };

/* A special kind's value in cfg written as a config would give it (the
 * reference's default): 0, or -1 when out is too small. */
typedef int (*lh_ini_format_fn)(const void *cfg, char *out, size_t bytes);

/* A special kind's parser: reads value into the config struct cfg and
 * returns 0, or returns -1 with why set to what is wrong, worded to follow
 * "key = 'value' " in the message ("is not one of grpo, rloo"). */
typedef int (*lh_ini_parse_fn)(const char *value, void *cfg, char *why, size_t why_bytes);

typedef struct {
  const char *name;
  lh_ini_kind kind;
  size_t offset;          /* the field in the config struct (not CUSTOM) */
  double min, max;        /* U64, F64: the range; max INFINITY for no upper bound */
  int open;               /* F64: LH_INI_OPEN_MIN | LH_INI_OPEN_MAX, or LH_INI_CLOSED */
  size_t bytes;           /* the field's size (STR: with its NUL); U64, F64: 0 reads as 8 */
  const char *const *names; /* CHOICE: the values, NULL-terminated; the first is 0 */
  int allow_empty;        /* STR */
  lh_ini_parse_fn parse;  /* CUSTOM */
  int error;              /* CUSTOM: the code of a bad value; 0 for the section's value_error */
  lh_ini_format_fn format; /* CUSTOM: the value as text, for the default in the reference */
  /* What the key does, in Markdown sentences (never NULL or empty: the
   * reference refuses a key without it). A CUSTOM key's doc says what
   * form its value takes. */
  const char *doc;
} lh_ini_key;

/* Table rows for a key named like its field in the struct type, each with
 * its documentation last. */
#define LH_INI_KEY_U64(type, key, lo, hi, doc_text)                                                  \
  {#key, LH_INI_U64, offsetof(type, key), .min = (lo), .max = (hi), .bytes = sizeof(((type *)0)->key), \
   .doc = (doc_text)}
#define LH_INI_KEY_F64(type, key, lo, hi, open_ends, doc_text)                                        \
  {#key, LH_INI_F64, offsetof(type, key), .min = (lo), .max = (hi), .open = (open_ends),              \
   .bytes = sizeof(((type *)0)->key), .doc = (doc_text)}
#define LH_INI_KEY_BOOL(type, key, doc_text) {#key, LH_INI_BOOL, offsetof(type, key), .min = 0, .doc = (doc_text)}
#define LH_INI_KEY_STR(type, key, empty_ok, doc_text)                                                 \
  {#key, LH_INI_STR, offsetof(type, key), .bytes = sizeof(((type *)0)->key), .allow_empty = (empty_ok), \
   .doc = (doc_text)}
#define LH_INI_KEY_PATH(type, key, empty_ok, doc_text)                                                 \
  {#key, LH_INI_PATH, offsetof(type, key), .bytes = sizeof(((type *)0)->key), .allow_empty = (empty_ok), \
   .doc = (doc_text)}
/* An enum whose values 0, 1, ... are named by the strings given, in order:
 * LH_INI_KEY_CHOICE(T, loss_norm, "doc", "token", "episode"), in a table
 * at file scope (the names are a compound literal, static only there). */
#define LH_INI_KEY_CHOICE(type, key, doc_text, ...)                                           \
  {#key, LH_INI_CHOICE, offsetof(type, key), .bytes = sizeof(((type *)0)->key),             \
   .names = (const char *const[]){__VA_ARGS__, NULL}, .doc = (doc_text)}
/* A key of its own form: parse_fn reads it, format_fn (may be NULL, then
 * the doc gives the default) writes it back for the reference. */
#define LH_INI_KEY_CUSTOM(key, parse_fn, code, format_fn, doc_text) \
  {#key, LH_INI_CUSTOM, 0, .parse = (parse_fn), .error = (code), .format = (format_fn), .doc = (doc_text)}

/* Checks value against key k (any kind but PATH, whose value is resolved
 * against the file it was written in) and stores it in cfg: 0, or -1 with
 * why set as for a parse callback. For values that come from elsewhere
 * than an INI file (a checkpoint's JSON) read by the same table. */
int lh_ini_key_parse(const lh_ini_key *k, const char *value, void *cfg, char *why, size_t why_bytes);

/* A key of another section, for the section's `other` callback: returns 0,
 * or a negative lh_err code after setting err (which may be NULL); the
 * entry says where the key was written (lh_ini_entry_where). */
typedef int (*lh_ini_other_fn)(void *user, const lh_ini_entry *entry, lh_errbuf *err);

#define LH_INI_MAX_KEYS 64

/* One section: its name without brackets, its keys (at most
 * LH_INI_MAX_KEYS), the module's codes for each kind of error, and an
 * optional reader of the keys of every other section. */
typedef struct {
  const char *name;
  const lh_ini_key *keys;
  size_t n_keys;
  int unknown_key_error, duplicate_error, value_error, syntax_error;
  lh_ini_other_fn other;
} lh_ini_section;

/* The line each key of a section was given on, 0 when it was not, and
 * its entry in the document (valid while the document is). */
typedef struct {
  int line[LH_INI_MAX_KEYS];
  const lh_ini_entry *entry[LH_INI_MAX_KEYS];
} lh_ini_lines;

/* Reads the keys of section sec in doc into cfg (which holds the defaults
 * beforehand), in the document's order; keys of other sections go to
 * sec->other, or are skipped without one. Returns 0, or the first error's
 * code with err saying which file, line, section and key: an unknown key
 * (listing the known ones), a key given twice in one file (naming the
 * first line), a bad value (saying what would do), a code from sec->other,
 * LH_ENOMEM, or LH_EINVAL for NULL arguments, a table over LH_INI_MAX_KEYS
 * or error codes that are not negative. On failure cfg may hold some of
 * the values read, so callers read into a copy. lines (may be NULL) gets
 * each key's line and entry, for messages about several keys. */
int lh_ini_section_read(const lh_ini_section *sec, const lh_ini_doc *doc, void *cfg, void *user,
                        lh_ini_lines *lines, lh_errbuf *err);

/* lh_ini_section_read of the document of the NUL-terminated INI text
 * (lh_ini_doc_open with any section allowed; a syntax error is
 * sec->syntax_error); source names the text in messages ("config" when
 * NULL). lines gets the lines alone (its entries are NULL). */
int lh_ini_section_parse(const lh_ini_section *sec, const char *text, const char *source, void *cfg,
                         void *user, lh_ini_lines *lines, lh_errbuf *err);

/* The line key name was given on (0 when not given or not in the table). */
int lh_ini_key_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *name);
/* The entry key name was read from (NULL when not given or not in the
 * table): whether a key was given, an override's line being 0. */
const lh_ini_entry *lh_ini_key_entry(const lh_ini_section *sec, const lh_ini_lines *lines, const char *name);
/* The later of the lines of keys a and b: the line a check across the two
 * keys names. */
int lh_ini_later_line(const lh_ini_section *sec, const lh_ini_lines *lines, const char *a, const char *b);
/* Where the later of keys a and b (in the document's order) was written,
 * "file:line" or "--set section.key" (lh_ini_entry_where), into out; the
 * section's file ("config") when neither was given. */
void lh_ini_later_where(const lh_ini_section *sec, const lh_ini_lines *lines, const char *a, const char *b,
                        char *out, size_t bytes);

/* Appends the reference of section sec to out, in Markdown: a heading
 * "## [name]" and, per key in the table's order, a list item with its
 * name, what values it takes (from its kind and bounds), its default (its
 * value in defaults, a config as the section's reader starts from) and
 * its doc. Returns 0; LH_ENOMEM; or LH_EINVAL with err naming the section
 * and key when a key has no doc, or a table that cannot be described
 * (an unknown kind, a CUSTOM key's format failing). */
int lh_ini_section_reference(const lh_ini_section *sec, const void *defaults, lh_str *out, lh_errbuf *err);

#endif

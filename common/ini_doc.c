/* common: one INI document, a file with its includes and the overrides
 * (common/ini_doc.h).
 *
 * Each file goes through inih one line at a time (lh_text_lines_read); the
 * line reader also remembers the line of the last [section] header, which
 * an unknown section's message names. Entries are appended in the order
 * inih hands them over; when an include ends, its keys replace the earlier
 * ones of the same file's includes, and when the file ends, its own keys
 * replace all of its includes' keys of the same name. */
#include "common/ini_doc.h"
#include "common/buf.h"

#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The longest line inih's buffer (INI_MAX_LINE, with the newline and the
 * NUL) takes whole. */
#define LH_INI_MAX_LINE_BYTES (INI_MAX_LINE - 2)

const char *const lh_ini_known_sections[] = {"fleet", "model", "learner", "actor", "env", NULL};

#define SET_FILE "--set"
#define MAX_VALUE_BYTES 4096

struct lh_ini_doc {
  lh_ini_entry *e;
  size_t n, cap;
  char **owned; /* file names and folders the entries point at */
  size_t n_owned, cap_owned;
  char *path, *text;
  char **sets;
  size_t n_sets;
  int any_section, file_error, error;
  size_t files_read, bytes_read; /* by this document so far (LH_INI_MAX_FILES, LH_INI_MAX_BYTES) */
};

/* One file being read; chain holds the files that include it. */
typedef struct file_state {
  lh_ini_doc *doc;
  lh_errbuf *err;
  const char *name, *dir;   /* owned by doc */
  const char *chain[LH_INI_MAX_DEPTH + 1];
  char *real[LH_INI_MAX_DEPTH + 1]; /* the chain's real paths (NULL for text) */
  int depth;
  size_t file_start, own_start;
  lh_text_lines lines;
  int header_line;
  int code;
} file_state;

static int read_file(lh_ini_doc *doc, const char *name, const char *text, const file_state *parent,
                     lh_errbuf *err);

static const char *own(lh_ini_doc *doc, const char *s) {
  if (!s) return NULL;
  if (lh_reserve(&doc->owned, &doc->cap_owned, doc->n_owned + 1, sizeof *doc->owned, 8)) return NULL;
  char *copy = strdup(s);
  if (copy) doc->owned[doc->n_owned++] = copy;
  return copy;
}

static void entry_free(lh_ini_entry *e) {
  free((char *)e->section), free((char *)e->key), free((char *)e->value);
}

static int append(lh_ini_doc *doc, const char *file, int line, const char *dir, const char *section,
                  const char *key, const char *value, lh_errbuf *err) {
  if (doc->n == LH_INI_MAX_ENTRIES)
    return lh_errbuf_set(err, doc->error, "%s:%d: more than %d keys in the config and its includes", file, line,
                         LH_INI_MAX_ENTRIES);
  if (lh_reserve(&doc->e, &doc->cap, doc->n + 1, sizeof *doc->e, 64))
    return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory", file);
  lh_ini_entry *e = &doc->e[doc->n];
  *e = (lh_ini_entry){.file = file, .line = line, .dir = dir, .section = strdup(section), .key = strdup(key),
                      .value = strdup(value)};
  if (!e->section || !e->key || !e->value) {
    entry_free(e);
    return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory", file);
  }
  doc->n++;
  return 0;
}

/* Drops the entries in [from, to) whose section and key some entry in
 * [to, n) has; returns how many went. */
static size_t drop_replaced(lh_ini_doc *doc, size_t from, size_t to) {
  size_t out = from;
  for (size_t i = from; i < to; i++) {
    int replaced = 0;
    for (size_t j = to; j < doc->n && !replaced; j++)
      replaced = !strcmp(doc->e[i].section, doc->e[j].section) && !strcmp(doc->e[i].key, doc->e[j].key);
    if (replaced) entry_free(&doc->e[i]);
    else doc->e[out++] = doc->e[i];
  }
  size_t gone = to - out;
  if (gone && doc->n > to) memmove(&doc->e[out], &doc->e[to], (doc->n - to) * sizeof *doc->e);
  doc->n -= gone;
  return gone;
}

static int known_section(const char *s) {
  for (int i = 0; lh_ini_known_sections[i]; i++)
    if (!strcmp(s, lh_ini_known_sections[i])) return 1;
  return 0;
}

static void known_list(char *out, size_t bytes) {
  out[0] = 0;
  for (int i = 0; lh_ini_known_sections[i]; i++)
    snprintf(out + strlen(out), bytes - strlen(out), "%s%s", i ? ", " : "", lh_ini_known_sections[i]);
}


/* "a.ini -> b.ini -> last", cut at bytes - 1 (a message, not a path). */
static void chain_text(const file_state *st, const char *last, char *out, size_t bytes) {
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; i <= st->depth + 1 && used < bytes; i++) {
    int w = snprintf(out + used, bytes - used, "%s%s", i <= st->depth ? st->chain[i] : last,
                     i <= st->depth ? " -> " : "");
    if (w < 0) break;
    used += (size_t)w;
  }
}

static int include(file_state *st, const char *value, int line) {
  lh_ini_doc *doc = st->doc;
  char name[PATH_MAX], base[PATH_MAX], chain[LH_ERRMSG_BYTES];
  if (!*value)
    return lh_errbuf_set(st->err, doc->error, "%s:%d: include = '': name the file to include", st->name, line);
  lh_path_folder(st->name, base, sizeof base);
  int n = value[0] == '/' || !strcmp(base, ".") ? snprintf(name, sizeof name, "%s", value)
                                                 : snprintf(name, sizeof name, "%s/%s", base, value);
  if (n < 0 || (size_t)n >= sizeof name)
    return lh_errbuf_set(st->err, doc->error, "%s:%d: include = %.64s: the path is too long", st->name, line, value);
  char real[PATH_MAX];
  if (realpath(name, real)) {
    for (int i = 0; i <= st->depth; i++)
      if (st->real[i] && !strcmp(st->real[i], real)) {
        chain_text(st, name, chain, sizeof chain);
        return lh_errbuf_set(st->err, doc->error, "%s:%d: include = %s: an include cycle: %s", st->name, line,
                             value, chain);
      }
  }
  if (st->depth + 1 > LH_INI_MAX_DEPTH) {
    chain_text(st, name, chain, sizeof chain);
    return lh_errbuf_set(st->err, doc->error, "%s:%d: include = %s: includes nest more than %d deep: %s", st->name,
                         line, value, LH_INI_MAX_DEPTH, chain);
  }
  if (doc->files_read >= LH_INI_MAX_FILES)
    return lh_errbuf_set(st->err, doc->error,
                         "%s:%d: include = %s: a config reads at most %d files with its includes, and this would be "
                         "file %zu",
                         st->name, line, value, LH_INI_MAX_FILES, doc->files_read + 1);
  /* Told by its size before it is read; read_file caps the read at what is
   * left, should it grow meanwhile. */
  struct stat sb;
  if (stat(name, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > LH_INI_MAX_BYTES - doc->bytes_read)
    return lh_errbuf_set(st->err, doc->error,
                         "%s:%d: include = %s: %lld bytes, past the %u bytes a config reads with its includes "
                         "(%zu read before it)",
                         st->name, line, value, (long long)sb.st_size, LH_INI_MAX_BYTES, doc->bytes_read);
  size_t before = doc->n;
  int rc = read_file(doc, name, NULL, st, st->err);
  if (rc) return rc;
  /* A later include replaces what an earlier one of this file gave. */
  drop_replaced(doc, st->file_start, before);
  st->own_start = doc->n;
  return 0;
}

static int on_entry(void *user, const char *section, const char *key, const char *value) {
  file_state *st = user;
  lh_ini_doc *doc = st->doc;
  if (st->code) return 0;
  int line = st->lines.line;
  if (!section[0] && !strcmp(key, "include")) {
    st->code = include(st, value, line);
  } else if (section[0] && !strcmp(key, "include") && !doc->any_section) {
    st->code = lh_errbuf_set(st->err, doc->error, "%s:%d: [%s] include = %.64s: include must come before the "
                             "first [section]", st->name, line, section, value);
  } else if (!section[0] && !doc->any_section) {
    st->code = lh_errbuf_set(st->err, doc->error, "%s:%d: %.64s = %.64s is before the first [section] (only "
                             "include = FILE may come there)", st->name, line, key, value);
  } else if (!doc->any_section && !known_section(section)) {
    char known[256];
    known_list(known, sizeof known);
    st->code = lh_errbuf_set(st->err, doc->error, "%s:%d: unknown section [%.64s] (known: %s)", st->name,
                             st->header_line ? st->header_line : line, section, known);
  } else {
    st->code = append(doc, st->name, line, st->dir, section, key, value, st->err);
  }
  return st->code == 0;
}

/* lh_text_lines_read, remembering the line of the last [section] header. */
static char *read_line(char *str, int num, void *stream) {
  file_state *st = stream;
  char *r = lh_text_lines_read(str, num, &st->lines);
  if (r) {
    const char *p = r;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '[') st->header_line = st->lines.line;
  }
  return r;
}

/* Reads the file name (or text, named name) into doc; parent is the file
 * that includes it, NULL for the first. */
static int read_file(lh_ini_doc *doc, const char *name, const char *text, const file_state *parent,
                     lh_errbuf *err) {
  file_state st = {.doc = doc, .err = err, .depth = parent ? parent->depth + 1 : 0, .file_start = doc->n,
                   .own_start = doc->n};
  if (parent)
    for (int i = 0; i <= parent->depth; i++) st.chain[i] = parent->chain[i], st.real[i] = parent->real[i];
  st.name = own(doc, name ? name : "config");
  if (!st.name) return lh_errbuf_set(err, LH_ENOMEM, "config: out of memory");
  st.chain[st.depth] = st.name;
  char *buf = NULL;
  if (!text) {
    size_t got = 0;
    int rc = lh_read_text_file_max(name, parent ? doc->error : doc->file_error, LH_INI_MAX_BYTES - doc->bytes_read,
                                   &buf, &got, err);
    doc->files_read++;
    doc->bytes_read += got;
    if (rc) {
      if (parent && err) { /* name the line of the include */
        char why[LH_ERRMSG_BYTES];
        snprintf(why, sizeof why, "%s", err->msg);
        lh_errbuf_set(err, rc, "%s:%d: include: %s", parent->name, parent->lines.line, why);
      }
      return rc;
    }
    text = buf;
  }
  char real[PATH_MAX], folder[PATH_MAX];
  int have_real = (!doc->text || parent) && realpath(st.name, real) != NULL;
  st.real[st.depth] = have_real ? real : NULL;
  if (!doc->text || parent) {
    char where[PATH_MAX];
    lh_path_folder(st.name, where, sizeof where);
    if (realpath(where, folder)) st.dir = own(doc, folder);
  }
  st.lines.text = text;
  int rc = ini_parse_stream(read_line, &st, on_entry, &st);
  free(buf);
  if (st.code) return st.code;
  if (st.lines.too_long)
    return lh_errbuf_set(err, doc->error,
                         "%s:%d: the line is longer than %d bytes, the most a config line may hold (a comment "
                         "may be longer)",
                         st.name, st.lines.too_long, LH_INI_MAX_LINE_BYTES);
  if (rc == -2) return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory while parsing", st.name);
  if (rc != 0)
    return lh_errbuf_set(err, doc->error, "%s:%d: syntax error (expected '[section]' or 'key = value')", st.name,
                         rc);
  /* The file's own keys replace its includes'. */
  drop_replaced(doc, st.file_start, st.own_start);
  return 0;
}

static int apply_set(lh_ini_doc *doc, const char *set, const char *cwd, lh_errbuf *err) {
  const char *eq = strchr(set, '='), *dot = strchr(set, '.');
  if (!eq || !dot || dot > eq || dot == set || dot + 1 == eq || eq - set > 256 || strlen(eq + 1) >= MAX_VALUE_BYTES)
    return lh_errbuf_set(err, doc->error, "--set %.64s: not section.key=value", set);
  /* Blanks around the key and the value go, as in a file. */
  const char *key_end = eq, *value = eq + 1, *value_end = eq + 1 + strlen(eq + 1);
  while (key_end > dot + 1 && (key_end[-1] == ' ' || key_end[-1] == '\t')) key_end--;
  while (*value == ' ' || *value == '\t') value++;
  while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) value_end--;
  char section[257], key[257], text[MAX_VALUE_BYTES];
  snprintf(section, sizeof section, "%.*s", (int)(dot - set), set);
  snprintf(key, sizeof key, "%.*s", (int)(key_end - dot - 1), dot + 1);
  snprintf(text, sizeof text, "%.*s", (int)(value_end - value), value);
  if (!key[0]) return lh_errbuf_set(err, doc->error, "--set %.64s: not section.key=value", set);
  if (!doc->any_section && !known_section(section)) {
    char known[256];
    known_list(known, sizeof known);
    return lh_errbuf_set(err, doc->error, "--set %.64s.%.64s: unknown section [%.64s] (known: %s)", section, key,
                         section, known);
  }
  size_t before = doc->n;
  LH_TRY(append(doc, SET_FILE, 0, cwd, section, key, text, err));
  drop_replaced(doc, 0, before);
  return 0;
}

void lh_ini_doc_free(lh_ini_doc *doc) {
  if (!doc) return;
  for (size_t i = 0; i < doc->n; i++) entry_free(&doc->e[i]);
  for (size_t i = 0; i < doc->n_owned; i++) free(doc->owned[i]);
  for (size_t i = 0; i < doc->n_sets; i++) free(doc->sets[i]);
  free(doc->e), free(doc->owned), free(doc->sets), free(doc->path), free(doc->text);
  free(doc);
}

static int copy_source(lh_ini_doc *doc, const lh_ini_source *src) {
  doc->any_section = src->any_section;
  doc->file_error = src->file_error ? src->file_error : LH_ECONFIG;
  doc->error = src->error ? src->error : LH_ECONFIG;
  if (src->path && !(doc->path = strdup(src->path))) return -1;
  if (src->text && !(doc->text = strdup(src->text))) return -1;
  if (src->n_sets && !(doc->sets = calloc(src->n_sets, sizeof *doc->sets))) return -1;
  for (size_t i = 0; i < src->n_sets; i++, doc->n_sets++)
    if (!(doc->sets[i] = strdup(src->sets[i]))) return -1;
  return 0;
}

int lh_ini_doc_open(const lh_ini_source *src, lh_ini_doc **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!src || !out || (!src->path && !src->text) || (src->n_sets && !src->sets))
    return lh_errbuf_set(err, LH_EINVAL, "ini doc: NULL source, path or output");
  if (src->n_sets > LH_INI_MAX_SETS)
    return lh_errbuf_set(err, src->error ? src->error : LH_ECONFIG, "--set: %zu overrides, at most %d", src->n_sets,
                         LH_INI_MAX_SETS);
  for (size_t i = 0; i < src->n_sets; i++)
    if (!src->sets[i]) return lh_errbuf_set(err, LH_EINVAL, "ini doc: NULL override");
  lh_ini_doc *doc = calloc(1, sizeof *doc);
  if (!doc || copy_source(doc, src)) {
    lh_ini_doc_free(doc);
    return lh_errbuf_set(err, LH_ENOMEM, "config: out of memory");
  }
  int rc = read_file(doc, doc->path, doc->text, NULL, err);
  char cwd[PATH_MAX];
  const char *dir = NULL;
  if (!rc && doc->n_sets) {
    dir = getcwd(cwd, sizeof cwd) ? own(doc, cwd) : NULL;
    if (!dir) rc = lh_errbuf_set(err, LH_ESYS, "--set: cannot name the current directory");
  }
  for (size_t i = 0; !rc && i < doc->n_sets; i++) rc = apply_set(doc, doc->sets[i], dir, err);
  if (rc) {
    lh_ini_doc_free(doc);
    return rc;
  }
  *out = doc;
  return 0;
}

int lh_ini_doc_load(const char *path, const char *const *sets, size_t n_sets, lh_ini_doc **out, lh_errbuf *err) {
  lh_ini_source src = {.path = path, .sets = sets, .n_sets = n_sets};
  if (!path) return lh_errbuf_set(err, LH_EINVAL, "ini doc: NULL path");
  return lh_ini_doc_open(&src, out, err);
}

int lh_ini_reader_read(const lh_ini_reader *r, const char *path, const char *text, void *cfg, lh_errbuf *err) {
  if (!r || !r->read) return lh_errbuf_set(err, LH_EINVAL, "ini doc: NULL reader");
  lh_ini_source src = {.path = path, .text = text, .file_error = r->file_error, .error = r->error};
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_open(&src, &doc, err));
  int rc = r->read(doc, cfg, err);
  lh_ini_doc_free(doc);
  return rc;
}

int lh_ini_doc_reopen(const lh_ini_doc *doc, lh_ini_doc **out, lh_errbuf *err) {
  if (!doc) return lh_errbuf_set(err, LH_EINVAL, "ini doc: NULL document");
  lh_ini_source src = {.path = doc->path, .text = doc->text, .sets = (const char *const *)doc->sets,
                       .n_sets = doc->n_sets, .any_section = doc->any_section, .file_error = doc->file_error,
                       .error = doc->error};
  return lh_ini_doc_open(&src, out, err);
}

const char *lh_ini_doc_path(const lh_ini_doc *doc) { return doc ? doc->path : NULL; }
size_t lh_ini_doc_set_count(const lh_ini_doc *doc) { return doc ? doc->n_sets : 0; }
const char *lh_ini_doc_set(const lh_ini_doc *doc, size_t i) {
  return doc && i < doc->n_sets ? doc->sets[i] : NULL;
}
size_t lh_ini_doc_count(const lh_ini_doc *doc) { return doc ? doc->n : 0; }
const lh_ini_entry *lh_ini_doc_entry(const lh_ini_doc *doc, size_t i) {
  return doc && i < doc->n ? &doc->e[i] : NULL;
}

const lh_ini_entry *lh_ini_doc_find(const lh_ini_doc *doc, const char *section, const char *key) {
  if (!doc || !section || !key) return NULL;
  for (size_t i = doc->n; i-- > 0;)
    if (!strcmp(doc->e[i].section, section) && !strcmp(doc->e[i].key, key)) return &doc->e[i];
  return NULL;
}

void lh_ini_entry_where(const lh_ini_entry *e, char *out, size_t bytes) {
  if (!out || !bytes) return;
  if (!e) snprintf(out, bytes, "config");
  else if (e->line == 0 && !strcmp(e->file, SET_FILE))
    snprintf(out, bytes, SET_FILE " %.64s.%.64s", e->section, e->key);
  else snprintf(out, bytes, "%s:%d", e->file, e->line);
}

int lh_ini_entry_path(const lh_ini_entry *e, char *out, size_t bytes) {
  if (!e || !out || !bytes) return -1;
  const char *v = e->value;
  if (!e->dir || !v[0] || v[0] == '/') {
    int n = snprintf(out, bytes, "%s", v);
    return n >= 0 && (size_t)n < bytes ? 0 : -1;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", e->dir);
  for (;;) {
    if (v[0] == '.' && (v[1] == '/' || !v[1])) {
      v += 1;
    } else if (v[0] == '.' && v[1] == '.' && (v[2] == '/' || !v[2])) {
      char *slash = strrchr(dir, '/');
      if (slash && slash != dir) *slash = 0;
      else snprintf(dir, sizeof dir, "/");
      v += 2;
    } else {
      break;
    }
    while (*v == '/') v++;
  }
  int n = !*v ? snprintf(out, bytes, "%s", dir)
              : snprintf(out, bytes, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", v);
  return n >= 0 && (size_t)n < bytes ? 0 : -1;
}

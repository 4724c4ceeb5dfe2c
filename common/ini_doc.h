/* common: one INI document, the one way a config is read.
 *
 * A document is the list of the keys a command sees: the file named on its
 * command line with the files it includes, then the command's --set
 * overrides. Every module's section reader (common/ini_section.h) reads the
 * same document, so that the file is read once and each key keeps where it
 * was written: its file and line, or "--set section.key".
 *
 *   include = model.ini      ; before the first [section]; more than once
 *   [model]
 *   seed = 1                 ; overrides model.ini's seed
 *
 * Included files come first and the including file's own keys replace
 * theirs (a later include replaces an earlier one's); an override replaces
 * the file's value. A key given twice within one file is kept twice, so
 * that the section's reader reports it as a repeated key. Includes nest at
 * most LH_INI_MAX_DEPTH deep and may not form a cycle, and a document reads
 * at most LH_INI_MAX_FILES files and LH_INI_MAX_BYTES bytes in all; an
 * include path is relative to the folder of the file it is written in.
 * Only regular files are read (a pipe or a device is refused without
 * waiting on it).
 *
 * Paths written in a file resolve against the folder of that file
 * (lh_ini_entry_path); an override's against the current directory; text
 * read from memory has no folder and its paths stay as written. */
#ifndef LH_INI_DOC_H
#define LH_INI_DOC_H

#include <stddef.h>

#include "common/common.h"

#define LH_INI_MAX_DEPTH 8      /* include nesting */
#define LH_INI_MAX_ENTRIES 4096 /* keys in a document, with its includes */
#define LH_INI_MAX_SETS 64      /* --set overrides of one command */
/* What one document reads, the file and every include together (an
 * include read twice counts twice): depth alone does not bound it, since
 * a file may include another many times (12 includes a level, 7 levels
 * deep, are three million reads). */
#define LH_INI_MAX_FILES 64
#define LH_INI_MAX_BYTES (16u << 20)

/* The sections longhaul reads (NULL-terminated); any other is an error. */
extern const char *const lh_ini_known_sections[];

/* One key of the document. file is "--set" and line 0 for an override;
 * dir is the absolute folder its paths resolve against, NULL for text
 * read from memory. */
typedef struct {
  const char *file;
  int line;
  const char *section, *key, *value;
  const char *dir;
} lh_ini_entry;

typedef struct lh_ini_doc lh_ini_doc;

/* Where a document comes from. */
typedef struct {
  const char *path;         /* the file; with text, only the name messages give it (may be NULL) */
  const char *text;         /* NUL-terminated INI text to read instead of the file, or NULL */
  const char *const *sets;  /* overrides "section.key=value", applied in order */
  size_t n_sets;
  int any_section;          /* 1: sections are not checked against lh_ini_known_sections */
  int file_error;           /* the code of a file that cannot be read; 0 for LH_ECONFIG */
  int error;                /* the code of a syntax, include, section or override error; 0 for LH_ECONFIG */
} lh_ini_source;

/* Builds the document of src into *out (freed with lh_ini_doc_free).
 * Returns 0, or the code with err naming the file and line: a file that
 * cannot be read, a syntax error, a key before the first section other
 * than include, include inside a section, an include cycle (naming the
 * chain) or one nested too deep, an include past the files or bytes a
 * document may read (naming it and the bound), an unknown section (listing the known
 * ones), a bad override (naming --set section.key), LH_ENOMEM, or
 * LH_EINVAL for NULL arguments. */
int lh_ini_doc_open(const lh_ini_source *src, lh_ini_doc **out, lh_errbuf *err);
/* lh_ini_doc_open of the file at path with overrides, codes LH_ECONFIG. */
int lh_ini_doc_load(const char *path, const char *const *sets, size_t n_sets, lh_ini_doc **out, lh_errbuf *err);
/* Reads the same file with the same overrides again (SIGHUP's reload). */
int lh_ini_doc_reopen(const lh_ini_doc *doc, lh_ini_doc **out, lh_errbuf *err);
void lh_ini_doc_free(lh_ini_doc *doc);

/* A module's reader of its section from a document (lh_actors_config_read,
 * lh_learner_config_read, lh_model_config_read), with the codes its file
 * and text entry points give a document that cannot be built. */
typedef struct {
  int file_error;  /* lh_ini_source.file_error */
  int error;       /* lh_ini_source.error */
  int (*read)(const lh_ini_doc *doc, void *cfg, lh_errbuf *err);
} lh_ini_reader;

/* The one way a module's config is read from a file or from text: builds
 * the document of the file at path, or of text when text is not NULL (path
 * then only names it in messages and may be NULL), with r's codes, hands
 * it to r->read with cfg, and frees it. Returns 0, lh_ini_doc_open's code
 * or r->read's, with err set. */
int lh_ini_reader_read(const lh_ini_reader *r, const char *path, const char *text, void *cfg, lh_errbuf *err);

/* The file the document was read from (its name for text; may be NULL). */
const char *lh_ini_doc_path(const lh_ini_doc *doc);
/* The overrides it was built with. */
size_t lh_ini_doc_set_count(const lh_ini_doc *doc);
const char *lh_ini_doc_set(const lh_ini_doc *doc, size_t i);
/* Its keys in order: includes first, then the file's own, then overrides. */
size_t lh_ini_doc_count(const lh_ini_doc *doc);
const lh_ini_entry *lh_ini_doc_entry(const lh_ini_doc *doc, size_t i);
/* The last entry of section.key, or NULL. */
const lh_ini_entry *lh_ini_doc_find(const lh_ini_doc *doc, const char *section, const char *key);

/* "file:line" of e, or "--set section.key" for an override, into out. */
void lh_ini_entry_where(const lh_ini_entry *e, char *out, size_t bytes);
/* e's value as a path: absolute, or joined to e->dir ("./" and "../" at
 * its start taken off against the folder), or as written when e->dir is
 * NULL or the value empty. 0, or -1 when it does not fit in bytes. */
int lh_ini_entry_path(const lh_ini_entry *e, char *out, size_t bytes);

#endif

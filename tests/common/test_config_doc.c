/* The config document (common/ini_doc.h): includes in order with the
 * including file's keys on top, include cycles and depth, the files and
 * bytes a document reads bounded (a fan-out of includes, huge files, a
 * device or a pipe), a key repeated within one file, --set overrides
 * (valid, malformed, unknown section), unknown sections with their
 * header's line, paths resolved against the folder of the file they are
 * written in, and reading the same file and overrides again. Real files
 * in a temporary folder. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/ini_doc.h"
#include "common/ini_section.h"
#include "proc_util.h"

static char dir[PATH_MAX], real_dir[PATH_MAX];

static void setup(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "configdoc"), 0);
  ck_assert_ptr_nonnull(realpath(dir, real_dir));
}

static void teardown(void) { lh_proc_rmdir(dir); }

/* Writes text to dir/name (name may hold one folder level, made here). */
static void put(const char *name, const char *text) {
  char path[PATH_MAX + 64];
  const char *slash = strchr(name, '/');
  if (slash) {
    snprintf(path, sizeof path, "%s/%.*s", dir, (int)(slash - name), name);
    mkdir(path, 0755);
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
}

static const char *in_dir(const char *name) {
  static char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

/* The document of dir/name with the overrides; fails the test on an error. */
static lh_ini_doc *load(const char *name, const char *const *sets, size_t n_sets) {
  lh_ini_doc *doc = NULL;
  lh_errbuf e = {0};
  int rc = lh_ini_doc_load(in_dir(name), sets, n_sets, &doc, &e);
  ck_assert_msg(rc == 0, "%s: %s", name, e.msg);
  return doc;
}

/* The error of loading dir/name: its code, and its message holding n1 and n2. */
static void load_fails(const char *name, const char *const *sets, size_t n_sets, const char *n1, const char *n2) {
  lh_ini_doc *doc = NULL;
  lh_errbuf e = {0};
  int rc = lh_ini_doc_load(in_dir(name), sets, n_sets, &doc, &e);
  ck_assert_msg(rc == LH_ECONFIG, "%s: got %d (%s), want LH_ECONFIG", name, rc, e.msg);
  ck_assert_ptr_null(doc);
  ck_assert_msg(strstr(e.msg, n1), "message '%s' lacks '%s'", e.msg, n1);
  if (n2) ck_assert_msg(strstr(e.msg, n2), "message '%s' lacks '%s'", e.msg, n2);
  printf("config error: %s\n", e.msg);
}

/* Asserts section.key's value and where it was written. */
static void has(const lh_ini_doc *doc, const char *section, const char *key, const char *value, const char *where) {
  const lh_ini_entry *e = lh_ini_doc_find(doc, section, key);
  ck_assert_msg(e != NULL, "no %s.%s", section, key);
  ck_assert_str_eq(e->value, value);
  char w[512];
  lh_ini_entry_where(e, w, sizeof w);
  ck_assert_msg(strstr(w, where), "%s.%s: where '%s' lacks '%s'", section, key, w, where);
}

START_TEST(test_include_order) {
  put("base.ini", "[model]\nd_model = 64\nlayers = 2\n[learner]\nlr = 0.1\n");
  put("more.ini", "[learner]\nlr = 0.2\nclip_eps = 0.3\n");
  put("top.ini", "; the top file\ninclude = base.ini\ninclude = more.ini\n[model]\nlayers = 3\n");
  lh_ini_doc *doc = load("top.ini", NULL, 0);
  has(doc, "model", "d_model", "64", "base.ini:2");
  has(doc, "model", "layers", "3", "top.ini:5");      /* the file's own key wins */
  has(doc, "learner", "lr", "0.2", "more.ini:2");     /* a later include wins */
  has(doc, "learner", "clip_eps", "0.3", "more.ini:3");
  /* Each key once, includes first. */
  ck_assert_uint_eq(lh_ini_doc_count(doc), 4);
  ck_assert_str_eq(lh_ini_doc_entry(doc, lh_ini_doc_count(doc) - 1)->key, "layers");
  lh_ini_doc_free(doc);
  /* Nested includes, each path relative to its own file's folder. */
  put("sub/mid.ini", "include = ../base.ini\n[learner]\nlr = 0.5\n");
  put("nested.ini", "include = sub/mid.ini\n");
  doc = load("nested.ini", NULL, 0);
  has(doc, "learner", "lr", "0.5", "sub/mid.ini:3");
  has(doc, "model", "d_model", "64", "base.ini:2");
  lh_ini_doc_free(doc);
}
END_TEST

START_TEST(test_include_errors) {
  put("a.ini", "include = b.ini\n[model]\nlayers = 1\n");
  put("b.ini", "include = a.ini\n");
  load_fails("a.ini", NULL, 0, "b.ini:1: include = a.ini: an include cycle", "a.ini -> ");
  put("self.ini", "include = self.ini\n");
  load_fails("self.ini", NULL, 0, "self.ini:1: include = self.ini: an include cycle", NULL);
  /* A chain of ten files, nine includes deep: deeper than LH_INI_MAX_DEPTH. */
  for (int i = 0; i < 10; i++) {
    char name[32], text[64];
    snprintf(name, sizeof name, "d%d.ini", i);
    snprintf(text, sizeof text, i < 9 ? "include = d%d.ini\n" : "[model]\nlayers = %d\n", i + 1);
    put(name, text);
  }
  load_fails("d0.ini", NULL, 0, "includes nest more than 8 deep", "d0.ini -> ");
  /* Eight deep (d1 -> ... -> d9) is fine. */
  lh_ini_doc *doc = load("d1.ini", NULL, 0);
  has(doc, "model", "layers", "10", "d9.ini:2");
  lh_ini_doc_free(doc);
  put("missing.ini", "\ninclude = nonesuch.ini\n");
  load_fails("missing.ini", NULL, 0, "missing.ini:2: include:", "nonesuch.ini");
  put("late.ini", "[model]\nlayers = 1\ninclude = base.ini\n");
  load_fails("late.ini", NULL, 0, "late.ini:3: [model] include = base.ini: include must come before", NULL);
  put("empty.ini", "include =\n");
  load_fails("empty.ini", NULL, 0, "empty.ini:1: include = ''", NULL);
  put("top_key.ini", "layers = 2\n[model]\n");
  load_fails("top_key.ini", NULL, 0, "top_key.ini:1: layers = 2 is before the first [section]", NULL);
  put("syntax.ini", "include = ok.ini\n");
  put("ok.ini", "[model]\nthis is not ini\n");
  load_fails("syntax.ini", NULL, 0, "ok.ini:2: syntax error", NULL);
}
END_TEST

/* Writes dir/name as a file of bytes bytes: lines of comment (real text),
 * or with sparse set a hole of that size (its size is all that is read). */
static void put_sized(const char *name, long long bytes, int sparse) {
  FILE *f = fopen(in_dir(name), "wb");
  ck_assert_ptr_nonnull(f);
  if (sparse) {
    ck_assert_int_eq(ftruncate(fileno(f), (off_t)bytes), 0);
  } else {
    static const char line[] = "; a comment line of sixty-four bytes, to fill the file ........\n";
    for (long long at = 0; at + 64 <= bytes; at += 64) ck_assert_uint_eq(fwrite(line, 1, 64, f), 64);
  }
  ck_assert_int_eq(fclose(f), 0);
}

/* What one document reads is bounded in files and bytes, whatever the
 * depth: 12 includes a level, 7 levels deep (3 million reads before the
 * bound), two includes of 10 MiB, a single file of 1 GiB (a hole: refused
 * by its size, before a byte is read), /dev/zero and a pipe as includes and
 * a pipe as the config (refused without waiting for a writer). */
START_TEST(test_include_bounds) {
  for (int level = 1; level <= 7; level++) {
    char name[32], text[512] = "";
    snprintf(name, sizeof name, "fan%d.ini", level);
    for (int k = 0; level < 7 && k < 12; k++)
      snprintf(text + strlen(text), sizeof text - strlen(text), "include = fan%d.ini\n", level + 1);
    if (level == 7) snprintf(text, sizeof text, "[model]\nseed = 7\n");
    put(name, text);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  load_fails("fan1.ini", NULL, 0, "fan6.ini:7: include = fan7.ini: a config reads at most 64 files",
             "this would be file 65");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double fan_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* 64 files in all is fine: the top file and 63 includes of one. */
  char text[2048] = "";
  for (int k = 0; k < 63; k++) snprintf(text + strlen(text), sizeof text - strlen(text), "include = fan7.ini\n");
  put("wide.ini", text);
  lh_ini_doc *doc = load("wide.ini", NULL, 0);
  has(doc, "model", "seed", "7", "fan7.ini:2");
  lh_ini_doc_free(doc);
  snprintf(text + strlen(text), sizeof text - strlen(text), "include = fan7.ini\n");
  put("wider.ini", text);
  load_fails("wider.ini", NULL, 0, "wider.ini:64: include = fan7.ini: a config reads at most 64 files", NULL);
  /* Bytes: 10 MiB read, then another 10 MiB past the 16 MiB bound. */
  put_sized("ten.ini", 10ll << 20, 0);
  put_sized("ten_hole.ini", 10ll << 20, 1);
  put("twice.ini", "include = ten.ini\ninclude = ten_hole.ini\n[model]\nseed = 1\n");
  load_fails("twice.ini", NULL, 0, "twice.ini:2: include = ten_hole.ini: 10485760 bytes, past the 16777216 bytes",
             "(10485818 read before it)"); /* and twice.ini */
  put_sized("huge.ini", 1ll << 30, 1);
  load_fails("huge.ini", NULL, 0, "huge.ini: 1073741824 bytes, longer than 16777216", NULL);
  put("big_include.ini", "include = huge.ini\n");
  load_fails("big_include.ini", NULL, 0, "big_include.ini:1: include = huge.ini: 1073741824 bytes, past the", NULL);
  /* Not regular files: refused at once, never read or waited on. */
  put("zero.ini", "include = /dev/zero\n");
  load_fails("zero.ini", NULL, 0, "zero.ini:1: include: /dev/zero: not a regular file", NULL);
  ck_assert_int_eq(mkfifo(in_dir("pipe.ini"), 0644), 0);
  put("piped.ini", "include = pipe.ini\n");
  load_fails("piped.ini", NULL, 0, "piped.ini:1: include:", "pipe.ini: not a regular file");
  lh_ini_doc *none = NULL;
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_doc_load(in_dir("pipe.ini"), NULL, 0, &none, &e), LH_ECONFIG);
  ck_assert_msg(strstr(e.msg, "pipe.ini: not a regular file"), "%s", e.msg);
  printf("config_doc: include bounds: 12 includes x 7 levels refused at file 65 in %.1f ms; 64 files read, the "
         "65th refused; 10 MiB + 10 MiB refused at the second; 1 GiB file refused by its size; /dev/zero and a "
         "pipe (include and config) refused\n",
         fan_ms);
}
END_TEST

START_TEST(test_repeated_key) {
  /* Kept twice, so the section's reader names both lines. */
  static const lh_ini_key keys[] = {{"lr", LH_INI_STR, 0, .bytes = 16}};
  static const lh_ini_section sec = {.name = "learner", .keys = keys, .n_keys = 1, .unknown_key_error = LH_ENOENT,
                                     .duplicate_error = LH_EAGAIN, .value_error = LH_ERANGE,
                                     .syntax_error = LH_EINVAL};
  put("inc.ini", "[learner]\nlr = 1\n\nlr = 2\n");
  put("top.ini", "include = inc.ini\n");
  lh_ini_doc *doc = load("top.ini", NULL, 0);
  char field[16];
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_section_read(&sec, doc, field, NULL, NULL, &e), LH_EAGAIN);
  ck_assert_msg(strstr(e.msg, "inc.ini:4: [learner] lr = 2: the key was already given on line 2"), "%s", e.msg);
  lh_ini_doc_free(doc);
  /* An override replaces both. */
  const char *sets[] = {"learner.lr=3"};
  doc = load("top.ini", sets, 1);
  ck_assert_int_eq(lh_ini_section_read(&sec, doc, field, NULL, NULL, &e), 0);
  ck_assert_str_eq(field, "3");
  lh_ini_doc_free(doc);
}
END_TEST

START_TEST(test_set) {
  put("top.ini", "[learner]\nlr = 0.1\n[env]\nname = calc\n");
  const char *good[] = {"learner.lr=0.25", "env.digits = 2", "learner.lr=0.5"};
  lh_ini_doc *doc = load("top.ini", good, 3);
  has(doc, "learner", "lr", "0.5", "--set learner.lr"); /* the last override wins */
  has(doc, "env", "digits", "2", "--set env.digits");   /* blanks around the key and value go */
  has(doc, "env", "name", "calc", "top.ini:4");
  ck_assert_uint_eq(lh_ini_doc_set_count(doc), 3);
  ck_assert_str_eq(lh_ini_doc_set(doc, 0), "learner.lr=0.25");
  lh_ini_doc_free(doc);
  const char *bad[][2] = {{"flet.learners=1", "--set flet.learners: unknown section [flet] (known: fleet, model"},
                          {"nodot=1", "--set nodot=1: not section.key=value"},
                          {"learner.lr", "--set learner.lr: not section.key=value"},
                          {".lr=1", "not section.key=value"},
                          {"learner.=1", "not section.key=value"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) load_fails("top.ini", &bad[i][0], 1, bad[i][1], NULL);
}
END_TEST

START_TEST(test_unknown_section) {
  put("flet.ini", "; a fleet\n[flet]\n\nlearners = 2\n");
  load_fails("flet.ini", NULL, 0, "flet.ini:2: unknown section [flet] (known: fleet, model, learner, actor, env)",
             NULL);
  put("inc.ini", "[learner]\nlr = 1\n[leaner]\nlr = 2\n");
  put("top.ini", "include = inc.ini\n");
  load_fails("top.ini", NULL, 0, "inc.ini:3: unknown section [leaner]", NULL);
  /* Text that allows any section (lh_ini_section_parse's) keeps them. */
  lh_ini_source src = {.text = "[anything]\nx = 1\n", .any_section = 1};
  lh_ini_doc *doc = NULL;
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_doc_open(&src, &doc, &e), 0);
  has(doc, "anything", "x", "1", "config:2");
  lh_ini_doc_free(doc);
}
END_TEST

/* e's value as a path. */
static void resolves(const lh_ini_doc *doc, const char *section, const char *key, const char *want) {
  char path[PATH_MAX];
  const lh_ini_entry *e = lh_ini_doc_find(doc, section, key);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(lh_ini_entry_path(e, path, sizeof path), 0);
  ck_assert_msg(!strcmp(path, want), "%s.%s = %s: resolved to %s, want %s", section, key, e->value, path, want);
}

START_TEST(test_paths) {
  put("conf/inc.ini", "[learner]\ndb = data/r.db\nckpt_dir = ../runs/ckpt\n[env]\nplugin = ./lib.so\n");
  put("conf/top.ini",
      "include = inc.ini\n[fleet]\nlog_dir = logs\ninit = /abs/sft\n[actor]\ncurve_secret_key_file = ..\n");
  const char *sets[] = {"learner.ckpt_dir=here/ck"};
  lh_ini_doc *doc = load("conf/top.ini", NULL, 0);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "%s/conf/data/r.db", real_dir);
  resolves(doc, "learner", "db", want); /* an included key: against the included file's folder */
  snprintf(want, sizeof want, "%s/runs/ckpt", real_dir);
  resolves(doc, "learner", "ckpt_dir", want);
  snprintf(want, sizeof want, "%s/conf/lib.so", real_dir);
  resolves(doc, "env", "plugin", want);
  snprintf(want, sizeof want, "%s/conf/logs", real_dir);
  resolves(doc, "fleet", "log_dir", want);
  resolves(doc, "fleet", "init", "/abs/sft");
  resolves(doc, "actor", "curve_secret_key_file", real_dir);
  lh_ini_doc_free(doc);
  /* An override's path: against the current directory. */
  doc = load("conf/top.ini", sets, 1);
  char cwd[PATH_MAX];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  snprintf(want, sizeof want, "%s/here/ck", cwd);
  resolves(doc, "learner", "ckpt_dir", want);
  lh_ini_doc_free(doc);
  /* The table's path kind resolves; too long once resolved is a bad value. */
  typedef struct {
    char db[64], tiny[8];
  } paths;
  static const lh_ini_key keys[] = {LH_INI_KEY_PATH(paths, db, 0, "a path"), LH_INI_KEY_PATH(paths, tiny, 0, "a path")};
  static const lh_ini_section sec = {.name = "learner", .keys = keys, .n_keys = 2, .unknown_key_error = LH_ENOENT,
                                     .duplicate_error = LH_EAGAIN, .value_error = LH_ERANGE,
                                     .syntax_error = LH_EINVAL};
  put("short.ini", "[learner]\ndb = /x/y.db\ntiny = t\n");
  doc = load("short.ini", NULL, 0);
  paths p;
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_section_read(&sec, doc, &p, NULL, NULL, &e), LH_ERANGE);
  ck_assert_msg(strstr(e.msg, "short.ini:3: [learner] tiny = 't' is not a path of at most 7 bytes"), "%s", e.msg);
  lh_ini_doc_free(doc);
  /* Text in memory has no folder: its paths stay as written. */
  lh_ini_source src = {.text = "[learner]\ndb = rel/r.db\n", .path = "mem.ini"};
  ck_assert_int_eq(lh_ini_doc_open(&src, &doc, &e), 0);
  resolves(doc, "learner", "db", "rel/r.db");
  lh_ini_doc_free(doc);
}
END_TEST

/* The choice kind: a name stores its index in an enum field; any other
 * value is refused naming every choice. The table is at file scope, as a
 * module's is (its compound literals need static storage). */
typedef enum { PICK_A = 0, PICK_B = 1, PICK_C = 2 } pick;
typedef struct {
  pick first, second;
} picks;
static const lh_ini_key pick_keys[] = {LH_INI_KEY_CHOICE(picks, first, "a pick", "alpha", "beta", "gamma"),
                                       LH_INI_KEY_CHOICE(picks, second, "a pick", "alpha", "beta", "gamma")};

START_TEST(test_choice) {
  static const lh_ini_section sec = {.name = "learner", .keys = pick_keys, .n_keys = 2, .unknown_key_error = LH_ENOENT,
                                     .duplicate_error = LH_EAGAIN, .value_error = LH_ERANGE,
                                     .syntax_error = LH_EINVAL};
  put("pick.ini", "[learner]\nfirst = gamma\nsecond = alpha\n");
  lh_ini_doc *doc = load("pick.ini", NULL, 0);
  picks p = {PICK_B, PICK_B};
  lh_errbuf e = {0};
  ck_assert_msg(lh_ini_section_read(&sec, doc, &p, NULL, NULL, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(p.first, PICK_C);
  ck_assert_int_eq(p.second, PICK_A);
  lh_ini_doc_free(doc);
  put("pick.ini", "[learner]\nfirst = beta\nsecond = Beta\n");
  doc = load("pick.ini", NULL, 0);
  ck_assert_int_eq(lh_ini_section_read(&sec, doc, &p, NULL, NULL, &e), LH_ERANGE);
  ck_assert_msg(strstr(e.msg, "pick.ini:3: [learner] second = 'Beta' is not one of alpha, beta, gamma"), "%s",
                e.msg);
  lh_ini_doc_free(doc);
}
END_TEST

/* Integer and number keys fill int and float fields as well as 64-bit
 * ones, each within its field's range. */
typedef struct {
  int count;
  float rate;
  uint64_t big;
  double wide;
} widths;
static const lh_ini_key width_keys[] = {
    LH_INI_KEY_U64(widths, count, 1, 1000, "a count"),
    LH_INI_KEY_F64(widths, rate, 0, INFINITY, LH_INI_CLOSED, "a rate"),
    LH_INI_KEY_U64(widths, big, 0, INFINITY, "a big count"),
    LH_INI_KEY_F64(widths, wide, 0, INFINITY, LH_INI_CLOSED, "a wide rate"),
};
static const lh_ini_key unbounded_int = {"count", LH_INI_U64, offsetof(widths, count), .min = 0, .max = INFINITY,
                                         .bytes = sizeof(int)};

START_TEST(test_field_widths) {
  static const lh_ini_section sec = {.name = "learner", .keys = width_keys, .n_keys = 4,
                                     .unknown_key_error = LH_ENOENT, .duplicate_error = LH_EAGAIN,
                                     .value_error = LH_ERANGE, .syntax_error = LH_EINVAL};
  widths w = {0};
  lh_errbuf e = {0};
  const char *good = "[learner]\ncount = 1000\nrate = 0.25\nbig = 18446744073709551615\nwide = 1e300\n";
  ck_assert_msg(lh_ini_section_parse(&sec, good, "w.ini", &w, NULL, NULL, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(w.count, 1000);
  ck_assert(w.rate == 0.25f);
  ck_assert(w.big == UINT64_MAX);
  ck_assert(w.wide == 1e300);
  /* a double that is no float, an int past its bound: refused, the field kept */
  ck_assert_int_eq(lh_ini_section_parse(&sec, "[learner]\nrate = 1e39\n", "w.ini", &w, NULL, NULL, &e), LH_ERANGE);
  ck_assert_msg(strstr(e.msg, "w.ini:2: [learner] rate = '1e39' is beyond a float's range (3.40282e+38)"), "%s", e.msg);
  ck_assert(w.rate == 0.25f);
  ck_assert_int_eq(lh_ini_section_parse(&sec, "[learner]\ncount = 4294967297\n", "w.ini", &w, NULL, NULL, &e),
                   LH_ERANGE);
  ck_assert_msg(strstr(e.msg, "is not an integer in 1..1000"), "%s", e.msg);
  ck_assert_int_eq(w.count, 1000);
  /* the same check for a value from elsewhere than a file */
  char why[128];
  ck_assert_int_eq(lh_ini_key_parse(&width_keys[0], "7", &w, why, sizeof why), 0);
  ck_assert_int_eq(w.count, 7);
  ck_assert_int_eq(lh_ini_key_parse(&width_keys[0], "0", &w, why, sizeof why), -1);
  ck_assert_str_eq(why, "is not an integer in 1..1000");
  /* a table that would let an int overflow is refused whatever the value */
  ck_assert_int_eq(lh_ini_key_parse(&unbounded_int, "7", &w, why, sizeof why), -1);
  ck_assert_str_eq(why, "has an int field bounded above INT_MAX");
  ck_assert_int_eq(w.count, 7);
}
END_TEST

/* A line past inih's buffer: a comment's tail is never read as a key (it
 * set d_model = 32 from a commented-out note), and a longer key line is
 * refused naming its line, not a line past the file's end. */
START_TEST(test_long_lines) {
  char text[1024], pad[400];
  memset(pad, 'x', sizeof pad - 1);
  pad[sizeof pad - 1] = 0;
  snprintf(text, sizeof text, "[model]\nd_model = 16\n; %.197sd_model = 32\n  # %.300s https://example.org/a\nheads = 2\n",
           pad, pad);
  put("long.ini", text);
  lh_ini_doc *doc = load("long.ini", NULL, 0);
  has(doc, "model", "d_model", "16", "long.ini:2");
  has(doc, "model", "heads", "2", "long.ini:5");
  ck_assert_int_eq(lh_ini_doc_count(doc), 2);
  lh_ini_doc_free(doc);
  snprintf(text, sizeof text, "[learner]\nlr = 0.1\ningest_endpoints = %.250s\nbatch_episodes = 4\n", pad);
  put("long.ini", text);
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_doc_load(in_dir("long.ini"), NULL, 0, &doc, &e), LH_ECONFIG);
  ck_assert_msg(strstr(e.msg, "long.ini:3: the line is longer than 198 bytes"), "%s", e.msg);
  /* CRLF lines have an LF line's limit, and a byte order mark does not
   * make a long first-line comment a key line */
  snprintf(text, sizeof text, "[learner]\r\ndb = %.193s\r\n", pad);
  put("long.ini", text);
  doc = load("long.ini", NULL, 0);
  ck_assert_int_eq((int)strlen(lh_ini_doc_find(doc, "learner", "db")->value), 193);
  lh_ini_doc_free(doc);
  snprintf(text, sizeof text, "\xef\xbb\xbf; %.250s\n[learner]\nlr = 0.5\n", pad);
  put("long.ini", text);
  doc = load("long.ini", NULL, 0);
  has(doc, "learner", "lr", "0.5", "long.ini:3");
  lh_ini_doc_free(doc);
  /* 198 bytes are read whole */
  snprintf(text, sizeof text, "[learner]\ndb = %.193s\n", pad);
  put("long.ini", text);
  doc = load("long.ini", NULL, 0);
  ck_assert_int_eq((int)strlen(lh_ini_doc_find(doc, "learner", "db")->value), 193);
  lh_ini_doc_free(doc);
}
END_TEST

START_TEST(test_reopen) {
  put("top.ini", "[learner]\nmax_db_bytes = 1\n");
  const char *sets[] = {"learner.lr=0.5"};
  lh_ini_doc *doc = load("top.ini", sets, 1), *again = NULL;
  put("top.ini", "[learner]\nmax_db_bytes = 2\n");
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_doc_reopen(doc, &again, &e), 0);
  has(again, "learner", "max_db_bytes", "2", "top.ini:2");
  has(again, "learner", "lr", "0.5", "--set learner.lr");
  ck_assert_str_eq(lh_ini_doc_path(again), in_dir("top.ini"));
  lh_ini_doc_free(again);
  lh_ini_doc_free(doc);
  lh_ini_doc_free(NULL);
  ck_assert_int_eq(lh_ini_doc_load(NULL, NULL, 0, &doc, &e), LH_EINVAL);
  ck_assert_int_eq(lh_ini_doc_load(in_dir("nonesuch.ini"), NULL, 0, &doc, &e), LH_ECONFIG);
  ck_assert_msg(strstr(e.msg, "nonesuch.ini"), "%s", e.msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config_doc");
  TCase *tc = tcase_create("doc");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_include_order);
  tcase_add_test(tc, test_include_errors);
  tcase_add_test(tc, test_include_bounds);
  tcase_add_test(tc, test_repeated_key);
  tcase_add_test(tc, test_set);
  tcase_add_test(tc, test_unknown_section);
  tcase_add_test(tc, test_paths);
  tcase_add_test(tc, test_choice);
  tcase_add_test(tc, test_field_widths);
  tcase_add_test(tc, test_long_lines);
  tcase_add_test(tc, test_reopen);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

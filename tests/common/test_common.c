/* Tests of common/: the error table, the hash, text files, numbers, the
 * line reader and the INI section reader (common/ini_section.h). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "common/ini_section.h"

START_TEST(test_error_table) {
  ck_assert_str_eq(lh_strerror(LH_OK), "success");
  ck_assert_str_eq(lh_err_name(LH_EINVAL), "EINVAL");
  ck_assert_str_eq(lh_strerror(-99999), "unknown error");
  lh_errbuf e;
  ck_assert_int_eq(lh_errbuf_set(&e, LH_ECONFIG, "key %s", "x"), LH_ECONFIG);
  ck_assert_str_eq(e.msg, "key x");
}
END_TEST

START_TEST(test_hash_differs) {
  const char a[] = "abcdefghijk", b[] = "abcdefghijl";
  ck_assert(lh_hash64(a, sizeof a, 0) != lh_hash64(b, sizeof b, 0));
  ck_assert(lh_hash64(a, sizeof a, 0) == lh_hash64(a, sizeof a, 0));
  ck_assert(lh_hash64(a, sizeof a, 1) != lh_hash64(a, sizeof a, 0));
}
END_TEST

START_TEST(test_file_sum_in_parts) {
  /* Any split of a body into parts gives the one-shot checksum, in both
   * formats (the legacy one carries words across parts). */
  unsigned char body[203];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (unsigned char)(i * 131 + 7);
  const size_t cuts[][3] = {{0, 0, 0}, {1, 2, 3}, {7, 8, 9}, {5, 13, 200}, {100, 101, 202}};
  for (int legacy = 0; legacy <= 1; legacy++)
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
      lh_file_sum *s = NULL;
      ck_assert_int_eq(lh_file_sum_new(legacy, &s), 0);
      size_t at = 0;
      for (int j = 0; j < 3; j++) {
        lh_file_sum_add(s, body + at, cuts[k][j] - at);
        at = cuts[k][j];
      }
      lh_file_sum_add(s, body + at, sizeof body - at);
      ck_assert_uint_eq(lh_file_sum_value(s), lh_file_checksum(body, sizeof body, legacy));
      lh_file_sum_free(s);
    }
  lh_file_sum_free(NULL);
}
END_TEST

START_TEST(test_read_text_file) {
  char path[] = "/tmp/lh_common_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "a = 1\n", 6), 6);
  close(fd);
  char *text;
  size_t bytes;
  lh_errbuf e;
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, &bytes, &e), 0);
  ck_assert_str_eq(text, "a = 1\n");
  ck_assert_uint_eq(bytes, 6);
  free(text);
  /* A NUL byte inside: not a text file. */
  FILE *f = fopen(path, "wb");
  ck_assert_uint_eq(fwrite("a\0b", 1, 3, f), 3);
  fclose(f);
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert_ptr_null(text);
  ck_assert(strstr(e.msg, "NUL byte"));
  /* Longer than any config or key: refused, not read to the end. */
  f = fopen(path, "wb");
  ck_assert_int_eq(ftruncate(fileno(f), (off_t)LH_TEXT_FILE_MAX_BYTES + 1), 0);
  fclose(f);
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, "longer than"));
  unlink(path);
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, path) && strstr(e.msg, "cannot open"));
  /* A device never ends (/dev/zero) and a folder is no text: refused. */
  ck_assert_int_eq(lh_read_text_file("/dev/zero", LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, "not a regular file"));
  ck_assert_int_eq(lh_read_text_file("/tmp", LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, "not a regular file"));
  /* A pipe nobody writes: refused at once, not waited on. */
  char fifo[] = "/tmp/lh_common_fifo_XXXXXX";
  int tmp = mkstemp(fifo);
  ck_assert_int_ge(tmp, 0);
  close(tmp);
  unlink(fifo);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(lh_read_text_file(fifo, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, "not a regular file"));
  unlink(fifo);
}
END_TEST

START_TEST(test_parse_numbers) {
  uint64_t u;
  double d;
  ck_assert_int_eq(lh_parse_u64("42", &u), 0);
  ck_assert_uint_eq(u, 42);
  ck_assert_int_eq(lh_parse_u64("-1", &u), -1);
  ck_assert_int_eq(lh_parse_u64("4x", &u), -1);
  ck_assert_int_eq(lh_parse_u64("", &u), -1);
  ck_assert_int_eq(lh_parse_u64("99999999999999999999", &u), -1);
  ck_assert_int_eq(lh_parse_f64("0.25", &d), 0);
  ck_assert(d == 0.25);
  ck_assert_int_eq(lh_parse_f64("inf", &d), 0);
  ck_assert_int_eq(lh_parse_f64("nan", &d), -1);
  ck_assert_int_eq(lh_parse_f64("1e999", &d), -1);
  ck_assert_int_eq(lh_parse_f64("1.5 ", &d), -1);
}
END_TEST

START_TEST(test_text_lines) {
  lh_text_lines r = {.text = "a\nbb\n\nc"};
  char buf[8];
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "a\n");
  ck_assert_int_eq(r.line, 1);
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "bb\n");
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "\n");
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "c");
  ck_assert_int_eq(r.line, 4);
  ck_assert_ptr_null(lh_text_lines_read(buf, sizeof buf, &r));
  /* A line longer than the buffer never comes in pieces (inih would read
   * each piece as a line): a comment comes as an empty line, anything
   * else stops the reading with its number. */
  lh_text_lines l = {.text = "ab\n  ; a long comment, d_model = 32\n# another x = 1\nk\nabcdefghij\nz = 1\n"};
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "ab\n");
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "\n");
  ck_assert_int_eq(l.line, 2);
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "\n");
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "k\n");
  ck_assert_int_eq(l.line, 4);
  ck_assert_int_eq(l.too_long, 0);
  ck_assert_ptr_null(lh_text_lines_read(buf, 4, &l));
  ck_assert_int_eq(l.too_long, 5);
  ck_assert_ptr_null(lh_text_lines_read(buf, 4, &l));
  ck_assert_int_eq(l.too_long, 5);
}
END_TEST

/* The INI section reader, on a struct with a key of every kind. */
typedef struct {
  uint64_t count, limit;
  double ratio, scale;
  int verbose;
  char path[8];
  char note[8];
  int pair[2];
} demo_config;

/* "a:b" of two small integers into pair; one own error message each way. */
static int parse_pair(const char *v, void *cfg, char *why, size_t why_bytes) {
  demo_config *c = cfg;
  if (sscanf(v, "%d:%d", &c->pair[0], &c->pair[1]) != 2)
    return snprintf(why, why_bytes, "is not two integers a:b"), -1;
  if (c->pair[0] > c->pair[1]) return snprintf(why, why_bytes, "has a above b"), -1;
  return 0;
}

/* A custom parser that says nothing of why. */
static int parse_silent(const char *v, void *cfg, char *why, size_t why_bytes) {
  (void)v, (void)cfg, (void)why, (void)why_bytes;
  return -1;
}

#define T demo_config
static const lh_ini_key DEMO_KEYS[] = {
    LH_INI_KEY_U64(T, count, 1, 100, "a count"),
    LH_INI_KEY_U64(T, limit, 0, INFINITY, "a limit"),
    LH_INI_KEY_F64(T, ratio, 0, 1, LH_INI_OPEN_MIN | LH_INI_OPEN_MAX, "a ratio"),
    LH_INI_KEY_F64(T, scale, 1, INFINITY, LH_INI_CLOSED, "a scale"),
    LH_INI_KEY_BOOL(T, verbose, "verbose"),
    LH_INI_KEY_STR(T, path, 0, "a path"),
    LH_INI_KEY_STR(T, note, 1, "a note"),
    LH_INI_KEY_CUSTOM(pair, parse_pair, LH_ERANGE, NULL, "two integers a:b"),
    LH_INI_KEY_CUSTOM(silent, parse_silent, 0, NULL, "never valid"),
};
#undef T

/* Keys of [extra] are counted, and "stop" is refused. */
typedef struct {
  int calls, last_line;
  char last_section[16];
} demo_other;

static int demo_other_key(void *user, const lh_ini_entry *e, lh_errbuf *err) {
  demo_other *o = user;
  o->calls++;
  o->last_line = e->line;
  snprintf(o->last_section, sizeof o->last_section, "%s", e->section);
  if (!strcmp(e->key, "stop"))
    return lh_errbuf_set(err, LH_EIO, "%s:%d: [%s] %s = %s: refused", e->file, e->line, e->section, e->key, e->value);
  return 0;
}

static const lh_ini_section DEMO = {
    .name = "demo", .keys = DEMO_KEYS, .n_keys = sizeof DEMO_KEYS / sizeof DEMO_KEYS[0],
    .unknown_key_error = LH_ENOENT, .duplicate_error = LH_EAGAIN, .value_error = LH_ECONFIG, .syntax_error = LH_EINVAL};

static void demo_default(demo_config *c) {
  memset(c, 0, sizeof *c);
  c->count = 5;
  c->ratio = 0.5;
  c->scale = 2;
  snprintf(c->path, sizeof c->path, "p");
}

/* Text that must fail with code and a message holding each needle. */
static void demo_error(const lh_ini_section *sec, const char *text, int code, const char *n1, const char *n2) {
  demo_config c;
  demo_default(&c);
  lh_errbuf e = {0};
  int rc = lh_ini_section_parse(sec, text, "demo.ini", &c, NULL, NULL, &e);
  ck_assert_msg(rc == code, "'%s': got %d (%s), want %d", text, rc, e.msg, code);
  ck_assert_int_eq(e.code, code);
  ck_assert_msg(strstr(e.msg, n1), "message '%s' lacks '%s'", e.msg, n1);
  if (n2) ck_assert_msg(strstr(e.msg, n2), "message '%s' lacks '%s'", e.msg, n2);
}

START_TEST(test_ini_every_kind) {
  demo_config c;
  demo_default(&c);
  lh_errbuf e = {0};
  lh_ini_lines lines;
  const char *text =
      "; comment\n[other]\ncount = nonsense\n[demo]\ncount = 100\nlimit = 18446744073709551615\n"
      "ratio = 0.25\nscale = inf\nverbose = yes\npath = abcdefg\nnote =\npair = 2:3\n";
  ck_assert_msg(lh_ini_section_parse(&DEMO, text, "demo.ini", &c, NULL, &lines, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(c.count, 100);
  ck_assert_uint_eq(c.limit, UINT64_MAX);
  ck_assert(c.ratio == 0.25);
  ck_assert(isinf(c.scale));
  ck_assert_int_eq(c.verbose, 1);
  ck_assert_str_eq(c.path, "abcdefg");
  ck_assert_str_eq(c.note, "");
  ck_assert_int_eq(c.pair[0], 2);
  ck_assert_int_eq(c.pair[1], 3);
  /* Each key's line, and the later of two; 0 for a key not given. */
  ck_assert_int_eq(lh_ini_key_line(&DEMO, &lines, "count"), 5);
  ck_assert_int_eq(lh_ini_key_line(&DEMO, &lines, "pair"), 12);
  ck_assert_int_eq(lh_ini_key_line(&DEMO, &lines, "silent"), 0);
  ck_assert_int_eq(lh_ini_key_line(&DEMO, &lines, "nonesuch"), 0);
  ck_assert_int_eq(lh_ini_later_line(&DEMO, &lines, "ratio", "count"), 7);
  ck_assert_int_eq(lh_ini_later_line(&DEMO, &lines, "silent", "limit"), 6);
  /* Keys not given keep their defaults; an empty text is fine. */
  demo_default(&c);
  ck_assert_int_eq(lh_ini_section_parse(&DEMO, "", NULL, &c, NULL, NULL, &e), 0);
  ck_assert_uint_eq(c.count, 5);
  ck_assert_str_eq(c.path, "p");
  const char *bools[8] = {"true", "on", "1", "yes", "false", "off", "0", "no"};
  for (int i = 0; i < 8; i++) {
    char t[64];
    snprintf(t, sizeof t, "[demo]\nverbose = %s\n", bools[i]);
    ck_assert_int_eq(lh_ini_section_parse(&DEMO, t, "demo.ini", &c, NULL, NULL, &e), 0);
    ck_assert_int_eq(c.verbose, i < 4);
  }
}
END_TEST

START_TEST(test_ini_unknown_duplicate_syntax) {
  demo_error(&DEMO, "[demo]\ncount = 1\ncounts = 2\n", LH_ENOENT, "demo.ini:3: [demo] unknown key 'counts'",
             "(known: count, limit, ratio, scale, verbose, path, note, pair, silent)");
  demo_error(&DEMO, "[demo]\ncount = 1\n[x]\ny = 2\n[demo]\ncount = 2\n", LH_EAGAIN,
             "demo.ini:6: [demo] count = 2: the key was already given on line 2", NULL);
  demo_error(&DEMO, "[demo]\ncount = 1\nno equals sign here\n", LH_EINVAL, "demo.ini:3: syntax error", NULL);
  demo_error(&DEMO, "[demo\n", LH_EINVAL, "demo.ini:1: syntax error", NULL);
  /* The first error is the one reported. */
  demo_error(&DEMO, "[demo]\ncount = 0\nbogus = 1\n", LH_ECONFIG, "demo.ini:2: [demo] count", NULL);
  /* The file is read whole before its keys: a syntax error anywhere comes first. */
  demo_error(&DEMO, "[demo]\nbogus = 1\ncount = 0\nbroken\n", LH_EINVAL, "demo.ini:4: syntax error", NULL);
}
END_TEST

START_TEST(test_ini_bad_values) {
  const int V = LH_ECONFIG;
  demo_error(&DEMO, "[demo]\ncount = 0\n", V, "demo.ini:2: [demo] count = '0'", "is not an integer in 1..100");
  demo_error(&DEMO, "[demo]\ncount = 101\n", V, "count = '101'", "1..100");
  demo_error(&DEMO, "[demo]\ncount = -1\n", V, "count = '-1'", NULL);
  demo_error(&DEMO, "[demo]\nlimit = 18446744073709551616\n", V, "limit", "is not an integer >= 0");
  demo_error(&DEMO, "[demo]\nlimit = 1.5\n", V, "limit = '1.5'", NULL);
  demo_error(&DEMO, "[demo]\nratio = 0\n", V, "ratio = '0'", "is not a number in (0, 1)");
  demo_error(&DEMO, "[demo]\nratio = 1\n", V, "ratio = '1'", NULL);
  demo_error(&DEMO, "[demo]\nratio = nan\n", V, "ratio = 'nan'", NULL);
  demo_error(&DEMO, "[demo]\nratio = inf\n", V, "ratio = 'inf'", NULL);
  demo_error(&DEMO, "[demo]\nscale = 0.5\n", V, "scale = '0.5'", "is not a number >= 1");
  demo_error(&DEMO, "[demo]\nscale = 2x\n", V, "scale = '2x'", NULL);
  demo_error(&DEMO, "[demo]\nverbose = maybe\n", V, "verbose = 'maybe'", "true/false, yes/no, on/off or 1/0");
  demo_error(&DEMO, "[demo]\npath =\n", V, "path = ''", "is not a text of 1..7 bytes");
  demo_error(&DEMO, "[demo]\npath = abcdefgh\n", V, "path = 'abcdefgh'", "1..7 bytes");
  demo_error(&DEMO, "[demo]\nnote = abcdefgh\n", V, "note = 'abcdefgh'", "is not a text of 0..7 bytes");
  /* A custom key's own code and words; without words, a plain "is not valid". */
  demo_error(&DEMO, "[demo]\n\npair = 3\n", LH_ERANGE, "demo.ini:3: [demo] pair = '3' is not two integers a:b", NULL);
  demo_error(&DEMO, "[demo]\npair = 3:2\n", LH_ERANGE, "pair = '3:2' has a above b", NULL);
  demo_error(&DEMO, "[demo]\nsilent = x\n", V, "demo.ini:2: [demo] silent = 'x' is not valid", NULL);
}
END_TEST

START_TEST(test_ini_other_sections) {
  lh_ini_section sec = DEMO;
  sec.other = demo_other_key;
  demo_config c;
  demo_default(&c);
  demo_other o = {0};
  lh_errbuf e = {0};
  const char *text = "top = 1\n[extra]\na = 1\n[demo]\ncount = 7\n[more]\nb = 2\n";
  ck_assert_msg(lh_ini_section_parse(&sec, text, "demo.ini", &c, &o, NULL, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(o.calls, 3); /* the key before any section, a and b */
  ck_assert_int_eq(o.last_line, 7);
  ck_assert_str_eq(o.last_section, "more");
  ck_assert_uint_eq(c.count, 7);
  /* Its error stops the parse, and the next bad line is not reported. */
  memset(&o, 0, sizeof o);
  ck_assert_int_eq(lh_ini_section_parse(&sec, "[extra]\nstop = now\n[demo]\ncount = 0\n", "demo.ini", &c, &o,
                                        NULL, &e),
                   LH_EIO);
  ck_assert_str_eq(e.msg, "demo.ini:2: [extra] stop = now: refused");
  ck_assert_int_eq(o.calls, 1);
  /* Without an errbuf the code still comes back. */
  ck_assert_int_eq(lh_ini_section_parse(&DEMO, "[demo]\ncount = 0\n", "demo.ini", &c, NULL, NULL, NULL), LH_ECONFIG);
}
END_TEST

START_TEST(test_ini_bad_arguments) {
  demo_config c;
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_section_parse(NULL, "", "x", &c, NULL, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_ini_section_parse(&DEMO, NULL, "x", &c, NULL, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_ini_section_parse(&DEMO, "", "x", NULL, NULL, NULL, &e), LH_EINVAL);
  lh_ini_section sec = DEMO;
  sec.n_keys = LH_INI_MAX_KEYS + 1;
  ck_assert_int_eq(lh_ini_section_parse(&sec, "", "x", &c, NULL, NULL, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "at most"));
  sec = DEMO;
  sec.value_error = 0;
  ck_assert_int_eq(lh_ini_section_parse(&sec, "", "x", &c, NULL, NULL, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "negative"));
  ck_assert_int_eq(lh_ini_key_line(&DEMO, NULL, "count"), 0);
}
END_TEST

/* The reference of a section (common/ini_reference.c): each key's values,
 * default and doc, from the table and a default config; a key without a
 * doc is refused by name. */
START_TEST(test_ini_reference) {
  demo_config c;
  demo_default(&c);
  lh_str out = {0};
  lh_errbuf e = {0};
  ck_assert_int_eq(lh_ini_section_reference(&DEMO, &c, &out, &e), 0);
  ck_assert_msg(strncmp(out.data, "## [demo]\n\n", 11) == 0, "%s", out.data);
  static const char *const want[] = {
      "- **`count`**: an integer in 1..100; default `5`.\n  a count\n",
      "- **`limit`**: an integer, at least 0; default `0`.",
      "- **`ratio`**: a number in (0, 1); default `0.5`.",
      "- **`scale`**: a number >= 1; default `2`.",
      "- **`verbose`**: true or false (also yes/no, on/off, 1/0); default `false`.",
      "- **`path`**: a text of 1 to 7 bytes; default `p`.",
      "- **`note`**: a text of 0 to 7 bytes; default none.",
      "- **`pair`**.\n  two integers a:b\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    ck_assert_msg(strstr(out.data, want[i]), "the reference lacks '%s':\n%s", want[i], out.data);
  lh_str_free(&out);
  /* a key without a doc */
  lh_ini_key keys[sizeof DEMO_KEYS / sizeof DEMO_KEYS[0]];
  memcpy(keys, DEMO_KEYS, sizeof keys);
  keys[4].doc = "";
  lh_ini_section sec = DEMO;
  sec.keys = keys;
  ck_assert_int_eq(lh_ini_section_reference(&sec, &c, &out, &e), LH_EINVAL);
  ck_assert_msg(strstr(e.msg, "[demo] verbose has no documentation"), "%s", e.msg);
  keys[4].doc = NULL;
  ck_assert_int_eq(lh_ini_section_reference(&sec, &c, &out, &e), LH_EINVAL);
  ck_assert_int_eq(lh_ini_section_reference(NULL, &c, &out, &e), LH_EINVAL);
  ck_assert_int_eq(lh_ini_section_reference(&DEMO, NULL, &out, &e), LH_EINVAL);
  lh_str_free(&out);
}
END_TEST

int main(void) {
  Suite *s = suite_create("common");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_error_table);
  tcase_add_test(tc, test_hash_differs);
  tcase_add_test(tc, test_file_sum_in_parts);
  tcase_add_test(tc, test_read_text_file);
  tcase_add_test(tc, test_parse_numbers);
  tcase_add_test(tc, test_text_lines);
  tcase_add_test(tc, test_ini_every_kind);
  tcase_add_test(tc, test_ini_unknown_duplicate_syntax);
  tcase_add_test(tc, test_ini_bad_values);
  tcase_add_test(tc, test_ini_other_sections);
  tcase_add_test(tc, test_ini_bad_arguments);
  tcase_add_test(tc, test_ini_reference);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

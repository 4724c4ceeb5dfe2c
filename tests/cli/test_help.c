/* Every subcommand's --help through the real binary (LH_BIN): each one
 * exits 0 with nothing on stderr and prints the one shape of cli/args.h
 * (lh_cli_help): a usage line, a blank line, one paragraph, the
 * subcommands of a command that has them, one aligned options table that
 * ends in -h, --help, notes, and the exit codes last; no line past 79
 * columns. The commands come from `longhaul --help`, the subcommands
 * from each command's own table, so a new one is checked without a word
 * here. */
#include "tests/case_main.h" /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/proc_util.h"

enum { OUT_BYTES = 1 << 16, MAX_LINES = 400, MAX_NAMES = 32, WIDTH = 79 };

typedef struct {
  char *line[MAX_LINES];
  int n;
} lines;

/* Splits text (modified) into its lines. */
static void split(char *text, lines *l) {
  l->n = 0;
  char *p = text;
  while (*p && l->n < MAX_LINES) {
    l->line[l->n++] = p;
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = 0;
    p = nl + 1;
  }
}

/* What the last run_help wrote to stderr (its start). */
static char err_text[4096];

/* `longhaul WORDS ARG` with stderr to a file of its own: the exit code,
 * stdout in out; *err_bytes gets how much went to stderr, err_text its
 * start. */
static int run_help(const char *words, const char *arg, char *out, long *err_bytes) {
  const char *bin = lh_proc_longhaul();
  ck_assert_msg(bin != NULL, "LH_BIN is not set (run through ctest)");
  char err_path[] = "/tmp/lh_help_err_XXXXXX";
  int fd = mkstemp(err_path);
  ck_assert_int_ge(fd, 0);
  char cmd[1024];
  /* braces: lh_proc_run_capture's own 2>&1 applies to the group, not to longhaul */
  snprintf(cmd, sizeof cmd, "{ '%s' %s %s 2>%s; }", bin, words, arg, err_path);
  int rc = lh_proc_run_capture(cmd, out, OUT_BYTES);
  FILE *f = fopen(err_path, "rb");
  *err_bytes = -1;
  err_text[0] = 0;
  if (f) {
    size_t got = fread(err_text, 1, sizeof err_text - 1, f);
    err_text[got] = 0;
    fseek(f, 0, SEEK_END);
    *err_bytes = ftell(f);
    fclose(f);
  }
  unlink(err_path);
  return rc;
}

static int leading_spaces(const char *s) {
  int k = 0;
  while (s[k] == ' ') k++;
  return k;
}

/* The column of a table row's text: after the name (and value) and the
 * run of spaces that follows; 0 when the row holds the name alone (its
 * text starts on the next line). */
static int text_column(const char *row) {
  const char *gap = strstr(row + 2, "  ");
  if (!gap) return 0;
  return (int)(gap - row) + leading_spaces(gap);
}

/* Checks the rows of a table from l->line[*at] up to a blank line: every
 * row starts at column 2 (with prefix, when given), every text starts at
 * one column, continuation lines at that column. Names go to names[]. */
static void check_table(const char *what, const lines *l, int *at, const char *prefix, char names[][64],
                        int *count) {
  int col = -1, rows = 0;
  *count = 0;
  for (int i = *at; i < l->n && l->line[i][0]; i++, *at = i + 1) {
    const char *s = l->line[i];
    int lead = leading_spaces(s);
    if (lead == 2) {
      ck_assert_msg(!prefix || strncmp(s + 2, prefix, strlen(prefix)) == 0, "%s: row '%s' does not start with %s",
                    what, s, prefix);
      rows++;
      if (*count < MAX_NAMES) {
        size_t n = strcspn(s + 2, " ");
        snprintf(names[*count], 64, "%.*s", (int)n, s + 2);
        (*count)++;
      }
      int c = text_column(s);
      if (c == 0) continue; /* the name alone; its text follows */
      if (col < 0) col = c;
      ck_assert_msg(c == col, "%s: row '%s' has its text at column %d, not %d", what, s, c, col);
    } else {
      ck_assert_msg(rows > 0, "%s: '%s' before any row", what, s);
      if (col < 0) col = lead;
      ck_assert_msg(lead == col, "%s: line '%s' starts at column %d, not %d", what, s, lead, col);
    }
  }
  ck_assert_msg(rows > 0, "%s: an empty table", what);
}

/* Checks the shape of the help of `longhaul words`; subs gets the names
 * of its subcommands (when it lists them). */
static void check_help(const char *words, char subs[][64], int *sub_count) {
  static char out[OUT_BYTES], again[OUT_BYTES];
  long err_bytes = 0;
  int rc = run_help(words, "--help", out, &err_bytes);
  ck_assert_msg(rc == 0, "longhaul %s --help exited %d: %s", words, rc, out);
  ck_assert_msg(err_bytes == 0, "longhaul %s --help wrote %ld bytes to stderr", words, err_bytes);
  ck_assert_int_eq(run_help(words, "-h", again, &err_bytes), 0);
  ck_assert_msg(strcmp(out, again) == 0, "longhaul %s: -h and --help differ", words);
  lines l;
  split(out, &l);
  for (int i = 0; i < l.n; i++)
    ck_assert_msg(strlen(l.line[i]) <= WIDTH, "longhaul %s --help: line %d is %zu columns: '%s'", words, i + 1,
                  strlen(l.line[i]), l.line[i]);
  char usage[128];
  snprintf(usage, sizeof usage, "usage: longhaul %s", words);
  size_t un = strlen(usage);
  ck_assert_msg(l.n > 6, "longhaul %s --help: %d lines", words, l.n);
  ck_assert_msg(strncmp(l.line[0], usage, un) == 0 && (l.line[0][un] == ' ' || !l.line[0][un]),
                "longhaul %s --help: first line '%s'", words, l.line[0]);
  ck_assert_msg(!l.line[1][0], "longhaul %s --help: no blank line after the usage line", words);
  int at = 2, about = 0;
  for (; at < l.n && l.line[at][0]; at++) {
    ck_assert_msg(l.line[at][0] != ' ', "longhaul %s --help: the paragraph's line '%s' is indented", words,
                  l.line[at]);
    about++;
  }
  ck_assert_msg(about > 0, "longhaul %s --help: no paragraph after the usage line", words);
  at++;
  *sub_count = 0;
  char what[160];
  if (at < l.n && strcmp(l.line[at], "subcommands:") == 0) {
    at++;
    snprintf(what, sizeof what, "longhaul %s --help subcommands", words);
    check_table(what, &l, &at, NULL, subs, sub_count);
  }
  ck_assert_msg(at < l.n && strcmp(l.line[at], "options:") == 0, "longhaul %s --help: no 'options:' after the paragraph",
                words);
  at++;
  char flags[MAX_NAMES][64];
  int flag_count = 0;
  snprintf(what, sizeof what, "longhaul %s --help options", words);
  check_table(what, &l, &at, "-", flags, &flag_count);
  ck_assert_msg(flag_count > 0 && strcmp(flags[flag_count - 1], "-h,") == 0,
                "longhaul %s --help: the table does not end in -h, --help", words);
  int last = l.n - 1;
  while (last > 0 && !l.line[last][0]) last--;
  int exits = last;
  while (exits > 0 && l.line[exits - 1][0]) exits--;
  ck_assert_msg(strncmp(l.line[exits], "exit codes: 0 ", 14) == 0,
                "longhaul %s --help: the last paragraph is not the exit codes: '%s'", words, l.line[exits]);
  int named = 0;
  for (int i = exits; i <= last; i++) named |= strstr(l.line[i], " 2 ") || strncmp(l.line[i], "2 ", 2) == 0;
  ck_assert_msg(named, "longhaul %s --help: exit code 2 is not named", words);
}

/* The commands `longhaul --help` lists. */
static int commands(char names[][64]) {
  static char out[OUT_BYTES];
  long err_bytes;
  ck_assert_int_eq(run_help("", "--help", out, &err_bytes), 0);
  lines l;
  split(out, &l);
  int n = 0, in = 0;
  for (int i = 0; i < l.n; i++) {
    if (strcmp(l.line[i], "commands:") == 0) {
      in = 1;
      continue;
    }
    if (!in) continue;
    if (!l.line[i][0]) break;
    if (n < MAX_NAMES) sscanf(l.line[i], "%63s", names[n++]);
  }
  ck_assert_int_ge(n, 10);
  return n;
}

START_TEST(test_every_command) {
  char names[MAX_NAMES][64];
  int n = commands(names), checked = 0;
  for (int i = 0; i < n; i++) {
    char subs[MAX_NAMES][64];
    int sub_count = 0;
    check_help(names[i], subs, &sub_count);
    checked++;
    for (int k = 0; k < sub_count; k++) {
      char words[160], none[MAX_NAMES][64];
      int none_count;
      snprintf(words, sizeof words, "%.63s %.63s", names[i], subs[k]);
      check_help(words, none, &none_count);
      ck_assert_int_eq(none_count, 0);
      checked++;
    }
  }
  printf("help: %d commands and subcommands in one shape\n", checked);
}
END_TEST

/* --help wins over anything else on the line, and a bad flag names the
 * help to read. */
START_TEST(test_help_wins_and_is_named) {
  static char out[OUT_BYTES];
  long err_bytes;
  ck_assert_int_eq(run_help("report --no-such-flag", "--help", out, &err_bytes), 0);
  ck_assert_ptr_nonnull(strstr(out, "usage: longhaul report"));
  ck_assert_int_eq(run_help("keys", "--help", out, &err_bytes), 0);
  ck_assert_ptr_nonnull(strstr(out, "usage: longhaul keys generate"));
  ck_assert_int_eq(run_help("sft", "--no-such-flag", out, &err_bytes), 2);
  ck_assert_msg(strstr(err_text, "unknown option '--no-such-flag' (see longhaul sft --help)"), "%s", err_text);
}
END_TEST

int main(void) {
  Suite *s = suite_create("help");
  TCase *tc = tcase_create("help");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_every_command);
  tcase_add_test(tc, test_help_wins_and_is_named);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

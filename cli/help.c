/* cli: every command's --help in one shape (cli/args.h, lh_cli_help): the
 * usage line, one paragraph, the subcommands, the options table printed
 * from the parser's own table, notes and the exit codes. */
#include <string.h>

#include "cli/args.h"

enum { WIDTH = 79, TABLE_MAX_LEFT = 30 };

/* Prints text word by word from column col, breaking lines before WIDTH
 * and starting each new line at column indent; "\n" in text breaks the
 * line, "\n\n" leaves a blank one. A word longer than the line is printed
 * whole. Ends with a newline. */
static void wrap(FILE *out, const char *text, size_t col, size_t indent) {
  const char *p = text;
  int line_has_word = col > indent;
  while (*p) {
    if (*p == '\n') {
      fputc('\n', out);
      p++;
      if (*p == '\n') {
        fputc('\n', out);
        p++;
      }
      fprintf(out, "%*s", (int)indent, "");
      col = indent;
      line_has_word = 0;
      continue;
    }
    if (*p == ' ') {
      p++;
      continue;
    }
    size_t n = strcspn(p, " \n");
    if (line_has_word && col + 1 + n > WIDTH) {
      fprintf(out, "\n%*s", (int)indent, "");
      col = indent;
      line_has_word = 0;
    }
    if (line_has_word) {
      fputc(' ', out);
      col++;
    }
    fwrite(p, 1, n, out);
    col += n;
    p += n;
    line_has_word = 1;
  }
  fputc('\n', out);
}

/* One row of an aligned table: left at column 2, then text at column
 * left_width + 4 (on the next line when left does not fit). */
static void row(FILE *out, const char *left, const char *value, size_t left_width, const char *text) {
  size_t n = strlen(left) + (value ? 1 + strlen(value) : 0);
  fprintf(out, "  %s%s%s", left, value ? " " : "", value ? value : "");
  size_t indent = left_width + 4;
  if (n > left_width)
    fprintf(out, "\n%*s", (int)indent, "");
  else
    fprintf(out, "%*s", (int)(indent - 2 - n), "");
  wrap(out, text, indent, indent);
}

static const lh_cli_opt help_opt = {"-h, --help", LH_CLI_OPT_FLAG, NULL, NULL, NULL, "print this help and exit"};

static size_t left_of(const lh_cli_opt *o) { return strlen(o->name) + (o->value ? 1 + strlen(o->value) : 0); }

void lh_cli_print_help(FILE *out, const lh_cli_help *h, const lh_cli_opt *opts, size_t opt_count) {
  fprintf(out, "usage: longhaul %s%s%s\n\n", h->cmd, h->usage && *h->usage ? " " : "", h->usage ? h->usage : "");
  wrap(out, h->about, 0, 0);
  if (h->sub_count) {
    size_t w = 0;
    for (size_t i = 0; i < h->sub_count; i++)
      if (strlen(h->subs[i].name) > w) w = strlen(h->subs[i].name);
    fprintf(out, "\nsubcommands:\n");
    for (size_t i = 0; i < h->sub_count; i++) row(out, h->subs[i].name, NULL, w, h->subs[i].summary);
  }
  size_t w = left_of(&help_opt);
  for (size_t k = 0; k < opt_count; k++) {
    size_t n = left_of(&opts[k]);
    if (n > w && n <= TABLE_MAX_LEFT) w = n;
  }
  fprintf(out, "\noptions:\n");
  for (size_t k = 0; k < opt_count; k++) row(out, opts[k].name, opts[k].value, w, opts[k].help);
  row(out, help_opt.name, NULL, w, help_opt.help);
  if (h->notes) {
    fputc('\n', out);
    wrap(out, h->notes, 0, 0);
  }
  fprintf(out, "\nexit codes:");
  wrap(out, h->exits, 11, 0);
}

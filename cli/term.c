/* cli: terminal text through one filter (cli/term.h). */
#define _GNU_SOURCE /* fopencookie */
#include "cli/term.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

int lh_cli_term_write(FILE *out, const char *s, size_t n) {
  size_t run = 0, i = 0;
  while (i < n) {
    char esc[5];
    /* A C1 character is two bytes; a first one that ends the text is no
     * control alone and is written as it is (the stream below holds it
     * back until it sees the byte after it). */
    size_t took = s[i] == '\n' || s[i] == '\t' || (i + 1 == n && (unsigned char)s[i] == 0xc2)
                      ? 0
                      : lh_text_control_escape(s + i, esc);
    if (s[i] == 0) took = 1, snprintf(esc, sizeof esc, "\\x00");
    if (!took) {
      i++;
      continue;
    }
    if (i > run && fwrite(s + run, 1, i - run, out) != i - run) return EOF;
    if (fputs(esc, out) == EOF) return EOF;
    i += took;
    run = i;
  }
  if (n > run && fwrite(s + run, 1, n - run, out) != n - run) return EOF;
  return 0;
}

int lh_cli_term_printf(FILE *out, const char *fmt, ...) {
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  char *text = small;
  if ((size_t)n >= sizeof small) {
    if (!(text = malloc((size_t)n + 1))) return -1;
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  int rc = lh_cli_term_write(out, text, (size_t)n);
  if (text != small) free(text);
  return rc ? -1 : n;
}

/* A filtered stream: its target, and a C1 character's first byte held
 * back when a write ends with it, so that a character cut between two
 * writes is still seen whole. */
typedef struct {
  FILE *out;
  int held_c2;
} term_stream;

static ssize_t cookie_write(void *ctx, const char *buf, size_t n) {
  term_stream *t = ctx;
  if (!n) return 0;
  size_t take = n;
  if (t->held_c2) {
    char two[2] = {(char)0xc2, buf[0]};
    if (lh_cli_term_write(t->out, two, 2)) return -1;
    t->held_c2 = 0;
    buf++, take--;
  }
  int hold = take && (unsigned char)buf[take - 1] == 0xc2;
  if (lh_cli_term_write(t->out, buf, take - (size_t)hold)) return -1;
  t->held_c2 = hold;
  return (ssize_t)n;
}

static int cookie_close(void *ctx) {
  term_stream *t = ctx;
  int rc = t->held_c2 && fputc(0xc2, t->out) == EOF ? EOF : 0;
  if (fflush(t->out)) rc = EOF;
  free(t);
  return rc;
}

FILE *lh_cli_term_open(FILE *out) {
  term_stream *t = out ? calloc(1, sizeof *t) : NULL;
  if (!t) return NULL;
  t->out = out;
  cookie_io_functions_t io = {.write = cookie_write, .close = cookie_close};
  FILE *f = fopencookie(t, "w", io);
  if (!f) free(t);
  return f;
}

const char *lh_cli_term_field(const char *s, char *buf, size_t cap) {
  lh_text_escape(s ? s : "", buf, cap);
  return buf;
}

int lh_cli_term_json(FILE *out, const char *json) {
  const unsigned char *p = (const unsigned char *)json;
  size_t run = 0, i = 0;
  while (p[i]) {
    size_t took;
    int code = lh_text_control_at(json + i, &took);
    if (code < 0) {
      i++;
      continue;
    }
    /* Outside a string JSON holds only ASCII, so these bytes are inside
     * one, where \u00XX stands for the same character. */
    if (i > run && fwrite(json + run, 1, i - run, out) != i - run) return EOF;
    if (fprintf(out, "\\u%04x", (unsigned)code) < 0) return EOF;
    i += took;
    run = i;
  }
  if (i > run && fwrite(json + run, 1, i - run, out) != i - run) return EOF;
  return 0;
}

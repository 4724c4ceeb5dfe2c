/* cli report: the growing text buffer the page is written into, and HTML
 * escaping. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report.h"

void lh_report_buf_free(lh_report_buf *b) {
  if (!b) return;
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->failed = 0;
}

/* Makes room for extra more bytes plus the NUL; 0, or -1 (and failed). */
static int reserve(lh_report_buf *b, size_t extra) {
  if (b->failed) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->failed = 1;
      return -1;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->failed = 1;
    return -1;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

static void append(lh_report_buf *b, const char *s, size_t n) {
  if (reserve(b, n) != 0) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

void lh_report_puts(lh_report_buf *b, const char *s) {
  if (s) append(b, s, strlen(s));
}

void lh_report_printf(lh_report_buf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    append(b, small, (size_t)n);
    return;
  }
  if (reserve(b, (size_t)n) != 0) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void lh_report_escape(lh_report_buf *b, const char *s) {
  if (!s) return;
  const char *run = s;
  for (const char *p = s;; p++) {
    unsigned char c = (unsigned char)*p;
    const char *rep = NULL;
    switch (c) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&quot;"; break;
      case '\'': rep = "&#39;"; break;
      case '\t': case '\n': break;
      default:
        if (c != 0 && c < 0x20) rep = "\xEF\xBF\xBD";
        break;
    }
    if (rep || c == 0) {
      append(b, run, (size_t)(p - run));
      if (c == 0) return;
      lh_report_puts(b, rep);
      run = p + 1;
    }
  }
}

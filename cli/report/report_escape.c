/* cli report: HTML escaping into the page's text (an lh_str); a control
 * character, which HTML cannot show, becomes U+FFFD (cli/term.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report/report.h"

void lh_report_escape(lh_str *b, const char *s) {
  if (!s) return;
  const char *run = s;
  for (const char *p = s;; p++) {
    unsigned char c = (unsigned char)*p;
    const char *rep = NULL;
    size_t took = 1;
    switch (c) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&quot;"; break;
      case '\'': rep = "&#39;"; break;
      case '\t': case '\n': break;
      default:
        /* A control character (C0, DEL, C1: the one test every output
         * uses) shows as U+FFFD. */
        if (lh_text_control_at(p, &took) >= 0) rep = "\xEF\xBF\xBD";
        else took = 1;
        break;
    }
    if (rep || c == 0) {
      lh_str_append(b, run, (size_t)(p - run));
      if (c == 0) return;
      lh_str_puts(b, rep);
      p += took - 1;
      run = p + 1;
    }
  }
}

/* cli: what a command prints for a person, made safe for a terminal.
 *
 * Text that comes from a store or a peer (environment, actor and run
 * names, an episode's error, a runs row's command line, a transcript, an
 * environment's observation, SQLite's findings, a child's last words) may
 * hold control characters: ESC starts a sequence the terminal obeys
 * (clear the screen, move the cursor, set the title, answer back), CR
 * writes over what was printed, BEL rings. Every command's terminal text
 * goes out through lh_cli_term_write, which writes each control character
 * (C0, DEL, C1: lh_text_control_escape, the logger's) but newline and tab
 * as \xNN, so none from outside reaches the terminal as a control. A value
 * that must stay on its line (a name in a table, an error on a line of its
 * own) goes through lh_cli_term_field first, which escapes newline and tab
 * too, so that the lines and columns stay the command's own. A command's
 * own controls (launch's screen redraw, envs play --ansi's colours, a
 * progress line's CR) are written beside it, never through it.
 *
 * Machine formats keep their own escaping, each with no raw control byte:
 * JSON writes every control character as \u00XX (lh_cli_term_json for
 * what cJSON leaves raw: DEL and C1), CSV a control character but newline
 * as \xNN inside its quoted field, the HTML page as U+FFFD. */
#ifndef LH_CLI_TERM_H
#define LH_CLI_TERM_H

#include <stddef.h>
#include <stdio.h>

/* Writes the n bytes of s to out, each control character but newline and
 * tab as \xNN. 0, or EOF when out fails. */
int lh_cli_term_write(FILE *out, const char *s, size_t n);
/* printf through lh_cli_term_write: the whole formatted text is filtered,
 * so a %s of anything is safe. Returns what fprintf would, or -1. */
int lh_cli_term_printf(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A stream whose bytes reach out through lh_cli_term_write, for code that
 * writes to a FILE * (a transcript, eval's shown episodes); close it with
 * fclose (which flushes it and leaves out open). NULL when it cannot be
 * made. */
FILE *lh_cli_term_open(FILE *out);
/* s as one field of a line into buf (cap bytes, cut at a whole escape):
 * every control character, newline and tab among them, as \xNN
 * (lh_text_escape). Returns buf. NULL s is "". */
const char *lh_cli_term_field(const char *s, char *buf, size_t cap);
/* Writes a line of JSON (cJSON's output) to out with every control
 * character as \u00XX: cJSON escapes C0 itself, but leaves DEL and C1 raw,
 * which JSON allows. The same value, no control byte. 0, or EOF when out
 * fails. */
int lh_cli_term_json(FILE *out, const char *json);

#endif

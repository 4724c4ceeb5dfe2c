/* cli report: the series behind the charts as CSV or JSON lines, one
 * record per train step (kind "step") and per policy version (kind
 * "version") of every run. Whole numbers (steps, versions, times in
 * milliseconds, token and episode counts) are written as integers in
 * full; a value the store does not have is empty (CSV) or null (JSON). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/report/report.h"

#define COL(name, member, whole) {name, offsetof(lh_report_data, member), whole}

static const lh_report_column step_columns[] = {
    COL("step", step, 1),           COL("version", step_version, 1),  COL("wall_s", wall_s, 0),
    COL("samples", samples, 1),     COL("loss", loss, 0),             COL("reward_mean", reward_mean, 0),
    COL("success_rate", success_rate, 0), COL("lag_mean", lag_mean, 0), COL("lag_max", lag_max, 0),
    COL("stale_share", stale_share, 0), COL("approx_kl", approx_kl, 0), COL("entropy", entropy, 0),
    COL("clip_frac", clip_frac, 0), COL("iw_mean", iw_mean, 0),       COL("iw_max", iw_max, 0),
    COL("grad_norm", grad_norm, 0), COL("lr", lr, 0),                 COL("logp_diff", logp_diff, 0),
    COL("tok_s_step", tok_s_step, 0), COL("tok_s_wall", tok_s_wall, 0), COL("dead_experts", dead_total, 1),
    COL("balance_ms", balance_ms, 0),
};
enum { STEP_COLUMNS = sizeof step_columns / sizeof step_columns[0] };

const lh_report_column *lh_report_step_columns(size_t *n) {
  *n = STEP_COLUMNS;
  return step_columns;
}

const double *lh_report_column_of(const lh_report_data *d, size_t off) {
  return *(double *const *)(const void *)((const char *)d + off);
}

/* A number: whole ones in full (exact up to 2^53, as every count and step
 * the store holds is), others with 17 significant digits (exact round
 * trip); none: empty, or null in JSON. */
static void number(lh_str *b, double v, int whole, int json) {
  if (!isfinite(v))
    lh_str_puts(b, json ? "null" : "");
  else if (whole && v == floor(v) && fabs(v) < 9007199254740992.0)
    lh_str_printf(b, "%.0f", v);
  else
    lh_str_printf(b, "%.17g", v);
}

/* A JSON string: quotes, backslashes and every control character (C0,
 * DEL, C1) escaped as \u00XX, so no control byte is written raw. */
static void json_string(lh_str *b, const char *s) {
  lh_str_puts(b, "\"");
  for (const char *p = s; *p;) {
    size_t took;
    int code = lh_text_control_at(p, &took);
    if (code >= 0) lh_str_printf(b, "\\u%04x", (unsigned)code), p += took;
    else if (*p == '"' || *p == '\\') lh_str_printf(b, "\\%c", *p++);
    else lh_str_append(b, p++, 1);
  }
  lh_str_puts(b, "\"");
}

/* A CSV field: quoted when it holds a comma, a quote or a control
 * character; inside the quotes a newline stays (CSV allows it) and any
 * other control character is written \xNN, as on a terminal, since CSV has
 * no escape of its own for them. */
static void csv_string(lh_str *b, const char *s) {
  int plain = !strpbrk(s, ",\"");
  for (const char *p = s; plain && *p; p++) {
    size_t took;
    plain = lh_text_control_at(p, &took) < 0;
  }
  if (plain) {
    lh_str_puts(b, s);
    return;
  }
  lh_str_puts(b, "\"");
  for (const char *p = s; *p;) {
    size_t took;
    int code = *p == '\n' ? -1 : lh_text_control_at(p, &took);
    if (code >= 0) lh_str_printf(b, "\\x%02x", (unsigned)code), p += took;
    else lh_str_puts(b, *p == '"' ? "\"\"" : (char[2]){*p, 0}), p++;
  }
  lh_str_puts(b, "\"");
}

void lh_report_export_csv(lh_str *b, const lh_report_run *runs, size_t nruns) {
  lh_str_puts(b, "run,kind");
  for (size_t c = 0; c < STEP_COLUMNS; c++) lh_str_printf(b, ",%s", step_columns[c].name);
  lh_str_puts(b, ",time_ms,episodes\n");
  for (size_t r = 0; r < nruns; r++) {
    const lh_report_data *d = &runs[r].d;
    for (size_t i = 0; i < d->step_count; i++) {
      csv_string(b, runs[r].name);
      lh_str_puts(b, ",step");
      for (size_t c = 0; c < STEP_COLUMNS; c++) {
        lh_str_puts(b, ",");
        number(b, lh_report_column_of(d, step_columns[c].off)[i], step_columns[c].whole, 0);
      }
      lh_str_printf(b, ",%lld,\n", (long long)d->time_ms[i]);
    }
    for (size_t i = 0; i < d->version_count; i++) {
      csv_string(b, runs[r].name);
      lh_str_puts(b, ",version,,");
      number(b, d->version[i], 1, 0);
      /* the step columns after version, empty but reward and success */
      for (size_t c = 2; c < STEP_COLUMNS; c++) {
        lh_str_puts(b, ",");
        if (strcmp(step_columns[c].name, "reward_mean") == 0) number(b, d->version_reward[i], 0, 0);
        if (strcmp(step_columns[c].name, "success_rate") == 0) number(b, d->version_success[i], 0, 0);
      }
      lh_str_puts(b, ",,");
      number(b, d->version_episodes[i], 1, 0);
      lh_str_puts(b, "\n");
    }
  }
}

void lh_report_export_jsonl(lh_str *b, const lh_report_run *runs, size_t nruns) {
  for (size_t r = 0; r < nruns; r++) {
    const lh_report_data *d = &runs[r].d;
    for (size_t i = 0; i < d->step_count; i++) {
      lh_str_puts(b, "{\"run\":");
      json_string(b, runs[r].name);
      lh_str_puts(b, ",\"kind\":\"step\"");
      for (size_t c = 0; c < STEP_COLUMNS; c++) {
        lh_str_printf(b, ",\"%s\":", step_columns[c].name);
        number(b, lh_report_column_of(d, step_columns[c].off)[i], step_columns[c].whole, 1);
      }
      lh_str_printf(b, ",\"time_ms\":%lld}\n", (long long)d->time_ms[i]);
    }
    for (size_t i = 0; i < d->version_count; i++) {
      lh_str_puts(b, "{\"run\":");
      json_string(b, runs[r].name);
      lh_str_puts(b, ",\"kind\":\"version\",\"version\":");
      number(b, d->version[i], 1, 1);
      lh_str_puts(b, ",\"episodes\":");
      number(b, d->version_episodes[i], 1, 1);
      lh_str_puts(b, ",\"reward_mean\":");
      number(b, d->version_reward[i], 0, 1);
      lh_str_puts(b, ",\"success_rate\":");
      number(b, d->version_success[i], 0, 1);
      lh_str_puts(b, "}\n");
    }
  }
}

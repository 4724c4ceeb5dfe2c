/* The one parser of the policy's action text: a tool call
 * `<call>name(args)</call>` or an answer before `<eos>` (grammar in env.h).
 * Every rejection has its own code and a one-line message the model reads. */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "envs/env.h"

static const char CALL_OPEN[] = "<call>", CALL_CLOSE[] = "</call>", EOS[] = "<eos>";

typedef struct {
  size_t opens, closes, eoses;              /* how many of each marker */
  const char *open, *close, *eos;           /* the first of each */
} markers;

static void note(const char **first, size_t *n, const char *at) {
  if (!*first) *first = at;
  (*n)++;
}

/* One pass over the text: returns the offset of the first invalid UTF-8
 * sequence (or NUL byte), or bytes when all is valid, and finds the
 * markers. Rejects overlong forms, surrogates and code points above
 * U+10FFFF. */
static size_t scan(const char *text, size_t bytes, markers *m) {
  const unsigned char *s = (const unsigned char *)text;
  memset(m, 0, sizeof *m);
  size_t i = 0;
  while (i < bytes) {
    unsigned c = s[i];
    if (c == 0) return i;
    if (c < 0x80) {
      if (c == '<') {
        size_t left = bytes - i;
        if (left >= 6 && memcmp(s + i, CALL_OPEN, 6) == 0) note(&m->open, &m->opens, text + i);
        else if (left >= 7 && memcmp(s + i, CALL_CLOSE, 7) == 0) note(&m->close, &m->closes, text + i);
        else if (left >= 5 && memcmp(s + i, EOS, 5) == 0) note(&m->eos, &m->eoses, text + i);
      }
      i++;
      continue;
    }
    size_t n;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + n > bytes) return i;
    for (size_t k = 1; k < n; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return bytes;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int only_space(const char *p, const char *end) {
  for (; p < end; p++)
    if (!is_space(*p)) return 0;
  return 1;
}

/* True when the tool (not NUL-terminated) is in the comma-separated list. */
static int tool_known(const char *tools, const char *name, size_t len) {
  const char *p = tools;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n == len && memcmp(p, name, len) == 0) return 1;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

static int parse_call(const char *body, const char *body_end, const char *tools,
                      const lh_action_limits *lim, lh_action *out, lh_errbuf *err) {
  while (body < body_end && is_space(*body)) body++;
  while (body_end > body && is_space(body_end[-1])) body_end--;
  const char *name = body;
  const char *p = body;
  while (p < body_end && ((*p >= 'a' && *p <= 'z') || *p == '_' || (p > name && *p >= '0' && *p <= '9')))
    p++;
  size_t name_len = (size_t)(p - name);
  if (name_len == 0)
    return lh_errbuf_set(err, LH_EENVS_CALL_MALFORMED,
                         "malformed call: expected a tool name ([a-z_][a-z0-9_]*) after <call>");
  if (name_len > LH_ENV_MAX_TOOL_NAME)
    return lh_errbuf_set(err, LH_EENVS_CALL_MALFORMED,
                         "malformed call: tool name longer than %d bytes", LH_ENV_MAX_TOOL_NAME);
  const char *q = p;
  while (q < body_end && is_space(*q)) q++;
  if (q >= body_end || *q != '(')
    return lh_errbuf_set(err, LH_EENVS_CALL_MALFORMED,
                         "malformed call: expected '(' after tool name '%.*s'", (int)name_len, name);
  if (body_end - q < 2 || body_end[-1] != ')')
    return lh_errbuf_set(err, LH_EENVS_CALL_MALFORMED,
                         "malformed call: expected ')' right before </call>");
  const char *args = q + 1;
  size_t args_len = (size_t)(body_end - 1 - args);
  if (memmem(args, args_len, EOS, 5))
    return lh_errbuf_set(err, LH_EENVS_CALL_MALFORMED, "malformed call: <eos> inside a tool call");
  if (tools && !tool_known(tools, name, name_len))
    return lh_errbuf_set(err, LH_EENVS_CALL_UNKNOWN_TOOL, "unknown tool '%.*s'; tools: %s",
                         (int)name_len, name, tools);
  if (args_len > lim->max_arg_bytes)
    return lh_errbuf_set(err, LH_EENVS_CALL_ARGS_TOO_LONG,
                         "arguments of '%.*s' are %zu bytes; at most %zu", (int)name_len, name,
                         args_len, lim->max_arg_bytes);
  out->kind = LH_ACTION_CALL;
  out->tool = name;
  out->tool_bytes = name_len;
  out->args = args;
  out->args_bytes = args_len;
  return 0;
}

int lh_action_parse(const char *text, size_t bytes, const char *tools,
                    const lh_action_limits *lim, lh_action *out, lh_errbuf *err) {
  lh_action_limits defaults = {LH_ENV_DEFAULT_MAX_ARG_BYTES, LH_ENV_DEFAULT_MAX_ANSWER_BYTES};
  if (!lim) lim = &defaults;
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_action_parse: out is NULL");
  memset(out, 0, sizeof *out);
  if (!text && bytes) return lh_errbuf_set(err, LH_EINVAL, "lh_action_parse: text is NULL");
  if (!text) text = "";
  markers m;
  size_t bad = scan(text, bytes, &m);
  if (bad < bytes)
    return lh_errbuf_set(err, LH_EENVS_CALL_NOT_UTF8,
                         "not UTF-8: byte 0x%02x at offset %zu is not allowed",
                         (unsigned)(unsigned char)text[bad], bad);
  const char *end = text + bytes;
  size_t opens = m.opens, closes = m.closes;
  if (opens || closes) {
    if (opens == 0)
      return lh_errbuf_set(err, LH_EENVS_CALL_UNBALANCED, "unbalanced markers: </call> without <call>");
    if (closes == 0)
      return lh_errbuf_set(err, LH_EENVS_CALL_UNBALANCED, "unbalanced markers: <call> without </call>");
    if (opens > 1 || closes > 1)
      return lh_errbuf_set(err, LH_EENVS_CALL_UNBALANCED,
                           "unbalanced markers: %zu <call> and %zu </call>; one call per action",
                           opens, closes);
    const char *open = m.open, *close = m.close;
    if (close < open)
      return lh_errbuf_set(err, LH_EENVS_CALL_UNBALANCED, "unbalanced markers: </call> before <call>");
    const char *after = close + strlen(CALL_CLOSE);
    if (!only_space(after, end))
      return lh_errbuf_set(err, LH_EENVS_CALL_TRAILING, "text after </call>: end the action there");
    if (m.eos && m.eos < open)
      return lh_errbuf_set(err, LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there");
    return parse_call(open + strlen(CALL_OPEN), close, tools, lim, out, err);
  }
  const char *eos = m.eos;
  if (!eos)
    return lh_errbuf_set(err, LH_EENVS_CALL_EMPTY,
                         "no action: write <call>tool(args)</call> or ANSWER<eos>");
  if (!only_space(eos + strlen(EOS), end))
    return lh_errbuf_set(err, LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there");
  const char *a = text, *a_end = eos;
  while (a < a_end && is_space(*a)) a++;
  while (a_end > a && is_space(a_end[-1])) a_end--;
  if ((size_t)(a_end - a) > lim->max_answer_bytes)
    return lh_errbuf_set(err, LH_EENVS_CALL_ANSWER_TOO_LONG, "answer is %zu bytes; at most %zu",
                         (size_t)(a_end - a), lim->max_answer_bytes);
  out->kind = LH_ACTION_ANSWER;
  out->args = a;
  out->args_bytes = (size_t)(a_end - a);
  return 0;
}

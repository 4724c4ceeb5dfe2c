/* libFuzzer harness: any bytes as a policy's action text into envs' tool-call
 * parser (lh_action_parse), with no tool list and with each built-in
 * environment's, default and tight limits; a parsed calc call's arguments
 * then go through the calc expression parser, and an answer through its
 * literal parser, as the calc environment does. The contract: a rejection
 * is an LH_EENVS_CALL_* code with a message; an accepted action's views lie
 * inside the text and within the limits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/calc.h"
#include "envs/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, int rc, const lh_errbuf *err) {
  fprintf(stderr, "fuzz_toolcall: %s (%s: %s)\n", what, lh_err_name(rc), err->msg);
  abort();
}

static int inside(const char *p, size_t n, const char *text, size_t bytes) {
  return p >= text && n <= bytes && (size_t)(p - text) <= bytes - n;
}

static void check(const char *text, size_t bytes, const char *tools, const lh_action_limits *lim) {
  lh_action a;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_action_parse(text, bytes, tools, lim, &a, &err);
  if (rc < 0) {
    if (rc > LH_EENVS_CALL_EMPTY || rc < LH_EENVS_CALL_TRAILING)
      fail("rejected with a code outside LH_EENVS_CALL_*", rc, &err);
    if (!err.msg[0]) fail("rejected without a message", rc, &err);
    return;
  }
  size_t max_args = lim ? lim->max_arg_bytes : LH_ENV_DEFAULT_MAX_ARG_BYTES;
  size_t max_answer = lim ? lim->max_answer_bytes : LH_ENV_DEFAULT_MAX_ANSWER_BYTES;
  if (a.kind == LH_ACTION_CALL) {
    if (!a.tool || a.tool_bytes == 0 || !inside(a.tool, a.tool_bytes, text, bytes))
      fail("call's tool name lies outside the text", rc, &err);
    if (a.args_bytes && !inside(a.args, a.args_bytes, text, bytes))
      fail("call's arguments lie outside the text", rc, &err);
    if (a.args_bytes > max_args) fail("call's arguments over the limit", rc, &err);
    if (a.tool_bytes == 4 && memcmp(a.tool, "calc", 4) == 0) {
      lh_calc_q q;
      lh_errbuf_clear(&err);
      rc = lh_calc_eval(a.args, a.args_bytes, 64, &q, &err);
      if (rc == 0) {
        char buf[64];
        if (q.den <= 0) fail("calc gave a non-positive denominator", rc, &err);
        int n = lh_calc_format(q, buf, sizeof buf);
        if (n <= 0 || (size_t)n >= sizeof buf) fail("calc result does not format", rc, &err);
      } else if (!err.msg[0]) {
        fail("calc rejected without a message", rc, &err);
      }
    }
  } else if (a.kind == LH_ACTION_ANSWER) {
    if (a.args_bytes && !inside(a.args, a.args_bytes, text, bytes))
      fail("answer lies outside the text", rc, &err);
    if (a.args_bytes > max_answer) fail("answer over the limit", rc, &err);
    lh_calc_q q;
    if (lh_calc_parse_literal(a.args, a.args_bytes, &q) == 0 && q.den <= 0)
      fail("answer literal with a non-positive denominator", rc, &err);
  } else {
    fail("accepted with an unknown kind", rc, &err);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size copy, so that a read past the end is caught by ASan. */
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  static const char *const tool_lists[] = {NULL, "calc", "search,read", "move"};
  lh_action_limits tight = {8, 8};
  for (size_t i = 0; i < sizeof tool_lists / sizeof tool_lists[0]; i++) {
    check(text, size, tool_lists[i], NULL);
    check(text, size, tool_lists[i], &tight);
  }
  free(text);
  return 0;
}

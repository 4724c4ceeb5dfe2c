/* bench_toolcall: what envs/toolcall.c's lh_action_parse takes on long
 * hostile actions, the C side of bench/python_env_server.py's parse
 * figures: for each size (64 KiB and 256 KiB by default) and shape (the
 * opening of a call over and over, which made a regular expression try
 * every start; a long answer; a call with long arguments), the best time
 * of a few runs, in microseconds, one line each:
 *   c_parse shape=NAME bytes=N us=T result=ERROR-OR-KIND */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

static void fill(char *buf, size_t bytes, const char *shape) {
  if (!strcmp(shape, "open_calls")) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) memcpy(buf + i, "<call>a(", 8);
    return;
  }
  if (!strcmp(shape, "answer")) {
    memset(buf, 'x', bytes);
    memcpy(buf + bytes - 5, "<eos>", 5);
    return;
  }
  memset(buf, '1', bytes);  /* long_args: <call>calc(111...)</call> */
  memcpy(buf, "<call>calc(", 11);
  memcpy(buf + bytes - 8, ")</call>", 8);
}

int main(int argc, char **argv) {
  size_t sizes[8] = {64 << 10, 256 << 10};
  int n_sizes = 2;
  if (argc > 1) {
    n_sizes = 0;
    for (int i = 1; i < argc && n_sizes < 8; i++) sizes[n_sizes++] = strtoull(argv[i], NULL, 10);
  }
  static const char *const shapes[] = {"open_calls", "answer", "long_args"};
  for (int k = 0; k < n_sizes; k++) {
    size_t bytes = sizes[k] & ~(size_t)7;
    char *buf = malloc(bytes);
    if (!buf || bytes < 32) return 1;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      fill(buf, bytes, shapes[s]);
      double best = 1e30;
      lh_action a;
      lh_errbuf e;
      int rc = 0;
      for (int run = 0; run < 20; run++) {
        int64_t t0 = lh_now_ns();
        rc = lh_action_parse(buf, bytes, "calc", NULL, &a, &e);
        double us = (double)(lh_now_ns() - t0) / 1e3;
        if (us < best) best = us;
      }
      printf("c_parse shape=%s bytes=%zu us=%.1f result=%s\n", shapes[s], bytes, best,
             rc < 0 ? lh_err_name(rc) : a.kind == LH_ACTION_CALL ? "call" : "answer");
    }
    free(buf);
  }
  return 0;
}

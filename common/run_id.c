/* common: run ids (run_id.h). */
#include "common/run_id.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int lh_run_id_check(const char *id, lh_errbuf *err) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n > LH_RUN_ID_MAX)
    return lh_errbuf_set(err, LH_EINVAL, "run id is %zu bytes; a run id is 1..%d bytes of [A-Za-z0-9._-]", n,
                         LH_RUN_ID_MAX);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)id[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == '-';
    if (!ok)
      return lh_errbuf_set(err, LH_EINVAL,
                           "run id has byte 0x%02x at offset %zu; a run id is 1..%d bytes of [A-Za-z0-9._-]", c, i,
                           LH_RUN_ID_MAX);
  }
  return 0;
}

int lh_run_id_new(char out[LH_RUN_ID_BYTES], lh_errbuf *err) {
  unsigned char r[3];
  ssize_t got;
  do got = getrandom(r, sizeof r, 0);
  while (got < 0 && errno == EINTR);
  if (got != (ssize_t)sizeof r)
    return lh_errbuf_set(err, LH_ESYS, "no random bytes for a run id: %s", got < 0 ? strerror(errno) : "short read");
  time_t now = (time_t)(lh_wall_ms() / 1000);
  struct tm tm;
  char when[32] = "00000000T000000Z";
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(out, LH_RUN_ID_BYTES, "%s-%02x%02x%02x", when, r[0], r[1], r[2]);
  return 0;
}

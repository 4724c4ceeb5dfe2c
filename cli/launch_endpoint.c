/* cli: endpoints per learner rank. Rank r of an M-learner fleet binds each
 * [learner] endpoint at its port + r * LH_LAUNCH_RANK_PORT_STRIDE; an actor
 * bound to rank r (`longhaul actor --endpoint-offset`) adds the same. */
#include <stdio.h>
#include <string.h>

#include "cli/launch.h"

int lh_launch_endpoint_offset(const char *endpoint, unsigned offset, char *out, size_t out_bytes,
                              lh_errbuf *err) {
  if (!endpoint || !out || !out_bytes) return lh_errbuf_set(err, LH_EINVAL, "endpoint offset: NULL argument");
  if (offset == 0) {
    if (strlen(endpoint) >= out_bytes) return lh_errbuf_set(err, LH_ECONFIG, "endpoint '%.200s' is too long", endpoint);
    snprintf(out, out_bytes, "%s", endpoint);
    return 0;
  }
  const char *colon = strrchr(endpoint, ':');
  if (strncmp(endpoint, "tcp://", 6) != 0 || !colon || colon < endpoint + 6 || !colon[1])
    return lh_errbuf_set(err, LH_ECONFIG,
                         "endpoint '%.200s': an offset of %u needs a tcp://HOST:PORT endpoint (one port per "
                         "learner rank)",
                         endpoint, offset);
  uint64_t port = 0;
  if (lh_parse_u64(colon + 1, &port) || port == 0 || port + offset > 65535)
    return lh_errbuf_set(err, LH_ECONFIG, "endpoint '%.200s': port plus offset %u is not a port in 1..65535",
                         endpoint, offset);
  int n = snprintf(out, out_bytes, "%.*s:%llu", (int)(colon - endpoint), endpoint,
                   (unsigned long long)(port + offset));
  if (n < 0 || (size_t)n >= out_bytes)
    return lh_errbuf_set(err, LH_ECONFIG, "endpoint '%.200s' is too long", endpoint);
  return 0;
}

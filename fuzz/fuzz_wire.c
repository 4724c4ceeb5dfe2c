/* libFuzzer harness: any bytes into proto/wire's decoders, as an envelope
 * (lh_wire_decode) and as a stored segment payload (lh_wire_segment_decode).
 * The contract checked on every input: a rejection is an LH_EWIRE_* code
 * with a message and no message returned; an accepted message validates
 * again and re-encodes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_wire_code(int rc) { return rc <= -100 && rc > -200; }

static void fail(const char *what, int rc, const lh_errbuf *err) {
  fprintf(stderr, "fuzz_wire: %s (%s: %s)\n", what, lh_err_name(rc), err->msg);
  abort();
}

static void check_envelope(const uint8_t *data, size_t size, const lh_wire_limits *lim) {
  Longhaul__Envelope *env = (Longhaul__Envelope *)&env;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_decode(data, size, lim, &env, &err);
  if (rc < 0) {
    if (env) fail("decode failed but returned a message", rc, &err);
    if (!is_wire_code(rc) && rc != LH_ENOMEM) fail("decode failed with a non-wire code", rc, &err);
    if (!err.msg[0]) fail("decode failed without a message", rc, &err);
    return;
  }
  if (!env) fail("decode succeeded without a message", rc, &err);
  rc = lh_wire_validate(env, lim, &err);
  if (rc < 0) fail("a decoded envelope does not validate", rc, &err);
  uint8_t *out = NULL;
  size_t out_bytes = 0;
  rc = lh_wire_encode(env, &out, &out_bytes, &err);
  if (rc < 0) fail("a decoded envelope does not re-encode", rc, &err);
  free(out);
  lh_wire_free(env);
}

static void check_segment(const uint8_t *data, size_t size, const lh_wire_limits *lim) {
  Longhaul__Segment *seg = (Longhaul__Segment *)&seg;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_segment_decode(data, size, lim, &seg, &err);
  if (rc < 0) {
    if (seg) fail("segment decode failed but returned a message", rc, &err);
    if (!is_wire_code(rc) && rc != LH_ENOMEM) fail("segment decode failed with a non-wire code", rc, &err);
    return;
  }
  if (!seg) fail("segment decode succeeded without a message", rc, &err);
  rc = lh_wire_validate_segment(seg, lim, &err);
  if (rc < 0) fail("a decoded segment does not validate", rc, &err);
  uint8_t *out = NULL;
  size_t out_bytes = 0;
  rc = lh_wire_segment_encode(seg, &out, &out_bytes, &err);
  if (rc < 0) fail("a decoded segment does not re-encode", rc, &err);
  free(out);
  lh_wire_segment_free(seg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  check_envelope(data, size, &lim);
  check_segment(data, size, &lim);
  /* Tight limits too, so that every bound is reached by small inputs. */
  lim.max_message_bytes = 4096;
  lim.max_segment_tokens = 16;
  lim.max_images = 2;
  lim.max_image_side = 8;
  lim.max_string_bytes = 8;
  lim.max_text_bytes = 64;
  lim.max_layers = 2;
  lim.max_topk = 2;
  lim.max_experts = 8;
  lim.max_terms = 2;
  lim.max_chunk_bytes = 256;
  lim.max_ids = 4;
  lim.max_options = 2;
  check_envelope(data, size, &lim);
  return 0;
}

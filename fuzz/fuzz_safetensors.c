/* libFuzzer harness: any bytes as a model.safetensors checkpoint into the
 * model's loader (lh_model_load_bytes, the path lh_model_load_file and the
 * weights fetch also take) on the CPU backend. The contract: a rejection
 * is an error code with a message and no model; an accepted model
 * re-serializes, and the re-serialized bytes load to the same parameters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, int rc, const lh_errbuf *err) {
  fprintf(stderr, "fuzz_safetensors: %s (%s: %s)\n", what, lh_err_name(rc), err->msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const lh_backend *be = lh_backend_cpu();
  lh_model *m = (lh_model *)&m;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_model_load_bytes(data, size, "fuzz", be, &m, &err);
  if (rc < 0) {
    if (m) fail("load failed but returned a model", rc, &err);
    if (rc != LH_ENOMEM && !err.msg[0]) fail("load failed without a message", rc, &err);
    return 0;
  }
  if (rc > 0 || !m) fail("load succeeded without a model", rc, &err);
  unsigned char *bytes = NULL;
  size_t n_bytes = 0;
  rc = lh_model_serialize(m, &bytes, &n_bytes);
  if (rc < 0) fail("a loaded model does not serialize", rc, &err);
  lh_model *again = NULL;
  rc = lh_model_load_bytes(bytes, n_bytes, "fuzz (re-serialized)", be, &again, &err);
  if (rc < 0) fail("a re-serialized model does not load", rc, &err);
  size_t n = lh_model_n_floats(m);
  if (n != lh_model_n_floats(again)) fail("a reloaded model changed size", rc, &err);
  if (memcmp(lh_model_params(m), lh_model_params(again), n * sizeof(float)) != 0)
    fail("a reloaded model changed its parameters", rc, &err);
  lh_model_free(again);
  free(bytes);
  lh_model_free(m);
  return 0;
}

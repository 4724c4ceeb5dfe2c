/* Writes the seed corpora that are generated rather than written by hand:
 * DIR/wire/ one encoded envelope of every message kind (the wire suites'
 * fixture) and one bare segment payload, and DIR/safetensors/ the checkpoint
 * of a tiny model. Run once after a change to the formats:
 *   fuzz_make_seeds tests/corpus */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "tests/wire_fixture.h"

static int write_file(const char *dir, const char *sub, const char *name, const void *data,
                      size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/seed-%s", dir, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "fuzz_make_seeds: cannot write %s\n", path);
    return 1;
  }
  printf("%s %zu bytes\n", path, bytes);
  return 0;
}

static int wire_seeds(const char *dir) {
  static wire_fixture f;
  for (size_t i = 0; i < sizeof fx_bodies / sizeof fx_bodies[0]; i++) {
    fx_init(&f, fx_bodies[i]);
    size_t bytes = 0;
    uint8_t *buf = NULL;
    lh_errbuf err;
    lh_errbuf_clear(&err);
    /* lh_wire_encode itself: fx_encode reports through Check, which needs a runner. */
    if (lh_wire_encode(&f.env, &buf, &bytes, &err) < 0) {
      fprintf(stderr, "fuzz_make_seeds: %s: %s\n", lh_wire_body_name(fx_bodies[i]), err.msg);
      return 1;
    }
    int rc = write_file(dir, "wire", lh_wire_body_name(fx_bodies[i]), buf, bytes);
    free(buf);
    if (rc) return rc;
  }
  fx_init(&f, fx_bodies[0]);
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  if (lh_wire_segment_encode(&f.seg, &buf, &bytes, &err) < 0) {
    fprintf(stderr, "fuzz_make_seeds: segment: %s\n", err.msg);
    return 1;
  }
  int rc = write_file(dir, "wire", "segment-payload", buf, bytes);
  free(buf);
  return rc;
}

/* Models about as small as the config allows, so that the fuzzer's inputs
 * stay small: one layer, one head, two experts; and two layers (the second
 * has xres) with a shared expert. */
static int safetensors_seed(const char *dir, const char *name, int layers, int shared) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 4, c.layers = layers, c.heads = 1, c.experts = 2, c.topk = 1;
  c.shared_experts = shared, c.latent = 2, c.expert_hidden = 2, c.chunk = 2;
  c.patch = 1, c.max_patches = 1, c.seed = 3;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  lh_model *m = NULL;
  if (lh_model_new(&c, lh_backend_cpu(), &m, &err) < 0) {
    fprintf(stderr, "fuzz_make_seeds: model: %s\n", err.msg);
    return 1;
  }
  unsigned char *bytes = NULL;
  size_t n = 0;
  int rc = lh_model_serialize(m, &bytes, &n) < 0;
  if (!rc) rc = write_file(dir, "safetensors", name, bytes, n);
  free(bytes);
  lh_model_free(m);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  return wire_seeds(argv[1]) || safetensors_seed(argv[1], "tiny-model", 1, 0) ||
         safetensors_seed(argv[1], "two-layers-shared", 2, 1);
}

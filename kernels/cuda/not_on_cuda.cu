// The operations of the table that have no CUDA kernel yet: chunked linear
// attention forward and backward (the training form, which needs a
// tensor-core kernel of its own). Each answers
// LH_EKERNELS_NOT_AVAILABLE and logs its own name, so a model that reaches
// one on CUDA fails with a sentence instead of reading device pointers on
// the host.
#include "kernels/cuda/cuda_ctx.h"

static int missing(const char *op) {
  LH_ERROR("kernels", "%s is not on CUDA yet: use --backend cpu for a model that needs it", op);
  return LH_EKERNELS_NOT_AVAILABLE;
}

static int attn_chunked_forward(void *, float *, float *, const float *, const float *,
                                const float *, const float *, const float *, const int32_t *,
                                int, int, int, int) {
  return missing("attn_chunked_forward");
}

static int attn_chunked_backward(void *, float *, float *, float *, float *, float *,
                                 const float *, const float *, const float *, const float *,
                                 const float *, const float *, const float *, const int32_t *,
                                 int, int, int, int) {
  return missing("attn_chunked_backward");
}

extern "C" void lh_cuda_fill_missing(lh_backend *t) {
  t->attn_chunked_forward = attn_chunked_forward;
  t->attn_chunked_backward = attn_chunked_backward;
}

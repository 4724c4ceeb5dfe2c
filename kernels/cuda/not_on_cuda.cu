// The operations of the table that have no CUDA kernel yet: linear
// attention (chunked, recurrent, decode), MoE routing, experts and the
// auxiliary balancing loss. Each answers LH_EKERNELS_NOT_AVAILABLE and logs
// its own name, so a model that reaches one on CUDA fails with a sentence
// instead of reading device pointers on the host.
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

static int attn_recurrent_forward(void *, float *, float *, const float *, const float *,
                                  const float *, const float *, const float *, const int32_t *,
                                  int, int, int) {
  return missing("attn_recurrent_forward");
}

static int attn_recurrent_backward(void *, float *, float *, float *, float *, float *,
                                   const float *, const float *, const float *, const float *,
                                   const float *, const float *, const float *,
                                   const int32_t *, int, int, int) {
  return missing("attn_recurrent_backward");
}

static int attn_decode_step(void *, float *, float *, const float *, const float *,
                            const float *, const float *, int, int, int) {
  return missing("attn_decode_step");
}

static int moe_route_forward(void *, int32_t *, float *, float *, const float *, const float *,
                             int, int, int, int) {
  return missing("moe_route_forward");
}

static int moe_route_backward(void *, float *, const float *, const float *, const int32_t *,
                              int, int, int) {
  return missing("moe_route_backward");
}

static int moe_experts_forward(void *, float *, float *, const float *, const int32_t *,
                               const float *, const float *, const float *, const float *, int,
                               int, int, int, int) {
  return missing("moe_experts_forward");
}

static int moe_experts_backward(void *, float *, float *, float *, float *, float *,
                                const float *, const float *, const float *, const int32_t *,
                                const float *, const float *, const float *, const float *, int,
                                int, int, int, int) {
  return missing("moe_experts_backward");
}

static int moe_aux_loss_forward(void *, double *, const float *, const float *, int, int,
                                float) {
  return missing("moe_aux_loss_forward");
}

static int moe_aux_loss_backward(void *, float *, float, const float *, const float *, int, int,
                                 float) {
  return missing("moe_aux_loss_backward");
}

extern "C" void lh_cuda_fill_missing(lh_backend *t) {
  t->attn_chunked_forward = attn_chunked_forward;
  t->attn_chunked_backward = attn_chunked_backward;
  t->attn_recurrent_forward = attn_recurrent_forward;
  t->attn_recurrent_backward = attn_recurrent_backward;
  t->attn_decode_step = attn_decode_step;
  t->moe_route_forward = moe_route_forward;
  t->moe_route_backward = moe_route_backward;
  t->moe_experts_forward = moe_experts_forward;
  t->moe_experts_backward = moe_experts_backward;
  t->moe_aux_loss_forward = moe_aux_loss_forward;
  t->moe_aux_loss_backward = moe_aux_loss_backward;
}

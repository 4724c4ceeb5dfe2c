// The chunked entry points of linear attention on CUDA. They compute the
// same function as the CPU's chunked form (and its gradients) with the
// step-by-step kernels of attention_recurrent.cu, so a model runs end to
// end on CUDA and matches the CPU's chunked form within the bound the CPU
// tests put between its two forms (1e-5 forward, 1e-4 backward). It is the
// correct path, not the fast one: the tensor-core kernel with the
// intra-chunk products (DESIGN 4) is what the attention benchmark's target
// needs. chunk is checked as on the CPU.
#include "kernels/cuda/cuda_ctx.h"

// The CPU backend's largest chunk (kernels/cpu/attention_chunked.c).
#define LH_CUDA_CHUNK_MAX 256

extern "C" int lh_cuda_attn_chunked_forward(void *ctx, float *out, float *state_out,
                                            const float *q, const float *k, const float *v,
                                            const float *g, const float *state_in,
                                            const int32_t *seq_offsets, int n_seq, int H, int dk,
                                            int chunk) {
  if (chunk <= 0 || chunk > LH_CUDA_CHUNK_MAX) return LH_EKERNELS_SHAPE;
  return lh_cuda_attn_recurrent_forward(ctx, out, state_out, q, k, v, g, state_in, seq_offsets,
                                        n_seq, H, dk);
}

extern "C" int lh_cuda_attn_chunked_backward(void *ctx, float *dq, float *dk_, float *dv,
                                             float *dg, float *dstate_in, const float *dout,
                                             const float *dstate_out, const float *q,
                                             const float *k, const float *v, const float *g,
                                             const float *state_in, const int32_t *seq_offsets,
                                             int n_seq, int H, int dk, int chunk) {
  if (chunk <= 0 || chunk > LH_CUDA_CHUNK_MAX) return LH_EKERNELS_SHAPE;
  return lh_cuda_attn_recurrent_backward(ctx, dq, dk_, dv, dg, dstate_in, dout, dstate_out, q,
                                         k, v, g, state_in, seq_offsets, n_seq, H, dk);
}

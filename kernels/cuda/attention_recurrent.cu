// Linear attention one step at a time, S_t = diag(exp(g_t)) S_{t-1} +
// k_t^T v_t and o_t = q_t S_t: the batched decode step of actors and the
// reference form (forward and backward). One block per (sequence, head);
// thread j owns value column j of S, so every access to S is coalesced; the
// backward's key-side sums use thread i for row i. S stays in global memory
// (the L2 holds it): this form is for decode and checking, not training.
#include <stdlib.h>

#include "kernels/cuda/cuda_ctx.h"

static unsigned head_threads(int dk) {
  unsigned t = 32;
  while (t < LH_CUDA_THREADS && (int)t < dk) t <<= 1;
  return t;
}

// offs NULL means B sequences of one step each (decode). hist NULL keeps
// only the running state in work (n_seq, H, dk, dk); otherwise the states
// S_in, S_0 .. S_{L-1} of sequence s, head h go to hist at
// ((t0 + s) H + h (L + 1)) dk^2 for the backward.
__global__ void recurrent_fwd(float *out, float *work, float *hist, float *state_out,
                              const float *q, const float *k, const float *v, const float *g,
                              const float *state_in, const int32_t *offs, int H, int dk) {
  extern __shared__ float sh[];
  float *sq = sh, *sk = sh + dk, *sd = sh + 2 * dk;
  int s = blockIdx.x / H, h = blockIdx.x % H;
  int t0 = offs ? offs[s] : s, L = offs ? offs[s + 1] - t0 : 1;
  size_t SS = (size_t)dk * dk, D = (size_t)H * dk, si = ((size_t)s * H + h) * SS;
  float *S = hist ? hist + ((size_t)(t0 + s) * H + (size_t)h * (L + 1)) * SS : work + si;
  for (int j = threadIdx.x; j < dk; j += blockDim.x)
    for (int i = 0; i < dk; i++)
      S[(size_t)i * dk + j] = state_in ? state_in[si + (size_t)i * dk + j] : 0.0f;
  for (int t = 0; t < L; t++) {
    size_t o = (size_t)(t0 + t) * D + (size_t)h * dk;
    const float *Sp = hist ? S + (size_t)t * SS : S;
    float *Sc = hist ? S + (size_t)(t + 1) * SS : S;
    __syncthreads();
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      sq[i] = q[o + i];
      sk[i] = k[o + i];
      sd[i] = expf(g[o + i]);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < dk; j += blockDim.x) {
      float vj = v[o + j], acc = 0.0f;
      for (int i = 0; i < dk; i++) {
        size_t e = (size_t)i * dk + j;
        float val = sd[i] * Sp[e] + sk[i] * vj;
        Sc[e] = val;
        acc += sq[i] * val;
      }
      if (out) out[o + j] = acc;
    }
  }
  const float *last = hist ? S + (size_t)L * SS : S;
  if (state_out && state_out + si != last)
    for (int j = threadIdx.x; j < dk; j += blockDim.x)
      for (int i = 0; i < dk; i++)
        state_out[si + (size_t)i * dk + j] = last[(size_t)i * dk + j];
}

// Newest step first, with dS the gradient of S_t:
// dS += q_t^T do_t; dv_t = k_t dS; dq_t = do_t S_t^T; dk_t = dS v_t;
// dg_t = exp(g_t) rowsum(dS * S_{t-1}); then dS = diag(exp(g_t)) dS.
__global__ void recurrent_bwd(float *dq, float *dk_, float *dv, float *dg, float *dstate_in,
                              float *dwork, const float *dout, const float *dstate_out,
                              const float *hist, const float *q, const float *k, const float *v,
                              const float *g, const int32_t *offs, int H, int dk) {
  extern __shared__ float sh[];
  float *sq = sh, *sk = sh + dk, *sdo = sh + 2 * dk, *sv = sh + 3 * dk;
  int s = blockIdx.x / H, h = blockIdx.x % H;
  int t0 = offs[s], L = offs[s + 1] - t0;
  size_t SS = (size_t)dk * dk, D = (size_t)H * dk, si = ((size_t)s * H + h) * SS;
  const float *Sh = hist + ((size_t)(t0 + s) * H + (size_t)h * (L + 1)) * SS;
  float *dS = dwork + si;
  for (int j = threadIdx.x; j < dk; j += blockDim.x)
    for (int i = 0; i < dk; i++)
      dS[(size_t)i * dk + j] = dstate_out ? dstate_out[si + (size_t)i * dk + j] : 0.0f;
  for (int t = L - 1; t >= 0; t--) {
    size_t o = (size_t)(t0 + t) * D + (size_t)h * dk;
    const float *St = Sh + (size_t)(t + 1) * SS, *Sp = Sh + (size_t)t * SS;
    __syncthreads();
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      sq[i] = q[o + i];
      sk[i] = k[o + i];
      sdo[i] = dout[o + i];
      sv[i] = v[o + i];
    }
    __syncthreads();
    for (int j = threadIdx.x; j < dk; j += blockDim.x) {
      float doj = sdo[j], accv = 0.0f;
      for (int i = 0; i < dk; i++) {
        size_t e = (size_t)i * dk + j;
        float d = dS[e] + sq[i] * doj;
        dS[e] = d;
        accv += sk[i] * d;
      }
      if (dv) dv[o + j] += accv;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      float aq = 0.0f, ak = 0.0f, ag = 0.0f;
      float *row = dS + (size_t)i * dk;
      const float *st = St + (size_t)i * dk, *sp = Sp + (size_t)i * dk;
      for (int j = 0; j < dk; j++) {
        aq += sdo[j] * st[j];
        ak += row[j] * sv[j];
        ag += row[j] * sp[j];
      }
      float decay = expf(g[o + i]);
      if (dq) dq[o + i] += aq;
      if (dk_) dk_[o + i] += ak;
      if (dg) dg[o + i] += decay * ag;
      for (int j = 0; j < dk; j++) row[j] *= decay;
    }
  }
  __syncthreads();
  if (dstate_in)
    for (int j = threadIdx.x; j < dk; j += blockDim.x)
      for (int i = 0; i < dk; i++) dstate_in[si + (size_t)i * dk + j] += dS[(size_t)i * dk + j];
}

int lh_cuda_check_offsets(lh_cuda_ctx *c, const int32_t *seq_offsets, int n_seq, int H, int dk,
                         int *max_len) {
  if (n_seq <= 0 || H <= 0 || dk <= 0) return LH_EKERNELS_SHAPE;
  if (!seq_offsets) return LH_EKERNELS_NULL_ARG;
  int32_t *h = (int32_t *)malloc(sizeof(int32_t) * ((size_t)n_seq + 1));
  if (!h) return LH_ENOMEM;
  cudaError_t e = cudaMemcpyAsync(h, seq_offsets, sizeof(int32_t) * ((size_t)n_seq + 1),
                                  cudaMemcpyDeviceToHost, c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) {
    free(h);
    return lh_cuda_fail(e, "download seq_offsets", __FILE__, __LINE__);
  }
  int rc = h[0] == 0 ? LH_OK : LH_EKERNELS_SHAPE;
  *max_len = 0;
  for (int s = 0; rc == LH_OK && s < n_seq; s++) {
    if (h[s + 1] < h[s]) rc = LH_EKERNELS_SHAPE;
    else if (h[s + 1] - h[s] > *max_len) *max_len = h[s + 1] - h[s];
  }
  int T = h[n_seq];
  free(h);
  return rc < 0 ? rc : T;
}

extern "C" int lh_cuda_attn_decode_step(void *ctx, float *out, float *state, const float *q,
                                        const float *k, const float *v, const float *g, int B,
                                        int H, int dk) {
  if (B < 0 || H <= 0 || dk <= 0) return LH_EKERNELS_SHAPE;
  if (B == 0) return LH_OK;
  if (!ctx || !out || !state || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  recurrent_fwd<<<(unsigned)((size_t)B * H), head_threads(dk), sizeof(float) * 3 * dk,
                  c->stream>>>(out, state, NULL, NULL, q, k, v, g, state, NULL, H, dk);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_attn_recurrent_forward(void *ctx, float *out, float *state_out,
                                              const float *q, const float *k, const float *v,
                                              const float *g, const float *state_in,
                                              const int32_t *seq_offsets, int n_seq, int H,
                                              int dk) {
  if (!ctx) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int max_len = 0;
  int T = lh_cuda_check_offsets(c, seq_offsets, n_seq, H, dk, &max_len);
  if (T < 0) return T;
  if (!out || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t SS = (size_t)dk * dk;
  float *work = state_out;
  if (!work) work = (float *)lh_cuda_scratch(c, 0, sizeof(float) * SS * n_seq * H);
  if (!work) return LH_ENOMEM;
  recurrent_fwd<<<(unsigned)((size_t)n_seq * H), head_threads(dk), sizeof(float) * 3 * dk,
                  c->stream>>>(out, work, NULL, state_out, q, k, v, g, state_in, seq_offsets, H,
                               dk);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_attn_recurrent_backward(void *ctx, float *dq, float *dk_, float *dv,
                                               float *dg, float *dstate_in, const float *dout,
                                               const float *dstate_out, const float *q,
                                               const float *k, const float *v, const float *g,
                                               const float *state_in,
                                               const int32_t *seq_offsets, int n_seq, int H,
                                               int dk) {
  if (!ctx) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int max_len = 0;
  int T = lh_cuda_check_offsets(c, seq_offsets, n_seq, H, dk, &max_len);
  if (T < 0) return T;
  if (!dout || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t SS = (size_t)dk * dk;
  float *dwork = (float *)lh_cuda_scratch(c, 0, sizeof(float) * SS * n_seq * H);
  float *hist = (float *)lh_cuda_scratch(c, 1, sizeof(float) * SS * ((size_t)T + n_seq) * H);
  if (!dwork || !hist) return LH_ENOMEM;
  unsigned blocks = (unsigned)((size_t)n_seq * H), threads = head_threads(dk);
  recurrent_fwd<<<blocks, threads, sizeof(float) * 3 * dk, c->stream>>>(
      NULL, NULL, hist, NULL, q, k, v, g, state_in, seq_offsets, H, dk);
  LH_CUDA_LAUNCHED();
  recurrent_bwd<<<blocks, threads, sizeof(float) * 4 * dk, c->stream>>>(
      dq, dk_, dv, dg, dstate_in, dwork, dout, dstate_out, hist, q, k, v, g, seq_offsets, H, dk);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

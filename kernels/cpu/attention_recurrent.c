/* Linear attention one step at a time: S_t = diag(exp(g_t)) S_{t-1} +
 * k_t^T v_t, o_t = q_t S_t. This is the decode path and the reference the
 * chunked form is tested against. Per head, S is (dk, dk): row i is a key
 * channel, column j a value channel. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/real.h"

/* One step of one head: S updated in place, out (dk) = q S. */
static void step_head(lh_real *out, lh_real *S, const lh_real *q, const lh_real *k,
                      const lh_real *v, const lh_real *g, int dk) {
  for (int j = 0; j < dk; j++) out[j] = 0;
  for (int i = 0; i < dk; i++) {
    lh_real decay = LH_EXP(g[i]);
    lh_real *row = S + (size_t)i * dk;
    for (int j = 0; j < dk; j++) {
      row[j] = decay * row[j] + k[i] * v[j];
      out[j] += q[i] * row[j];
    }
  }
}

int LH_CPU(attn_decode_step)(void *ctx, lh_real *out, lh_real *state, const lh_real *q,
                             const lh_real *k, const lh_real *v, const lh_real *g, int B,
                             int H, int dk) {
  (void)ctx;
  if (B < 0 || H <= 0 || dk <= 0) return LH_EKERNELS_SHAPE;
  if (B == 0) return LH_OK;
  if (!out || !state || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t D = (size_t)H * dk;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      size_t o = b * D + (size_t)h * dk;
      step_head(out + o, state + ((size_t)b * H + h) * dk * dk, q + o, k + o, v + o, g + o,
                dk);
    }
  return LH_OK;
}

int LH_CPU(attn_recurrent_forward)(void *ctx, lh_real *out, lh_real *state_out,
                                   const lh_real *q, const lh_real *k, const lh_real *v,
                                   const lh_real *g, const lh_real *state_in,
                                   const int32_t *seq_offsets, int n_seq, int H, int dk) {
  (void)ctx;
  int T = lh_attn_check(seq_offsets, n_seq, H, dk);
  if (T < 0) return T;
  if (!out || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk;
  lh_real *S = malloc(sizeof(lh_real) * SS);
  if (!S) return LH_ENOMEM;
  for (int s = 0; s < n_seq; s++)
    for (int h = 0; h < H; h++) {
      size_t si = ((size_t)s * H + h) * SS;
      if (state_in) memcpy(S, state_in + si, sizeof(lh_real) * SS);
      else memset(S, 0, sizeof(lh_real) * SS);
      for (int t = seq_offsets[s]; t < seq_offsets[s + 1]; t++) {
        size_t o = (size_t)t * D + (size_t)h * dk;
        step_head(out + o, S, q + o, k + o, v + o, g + o, dk);
      }
      if (state_out) memcpy(state_out + si, S, sizeof(lh_real) * SS);
    }
  free(S);
  return LH_OK;
}

/* Backward through the recurrence, newest step first. The forward is rerun
 * keeping every S_t of the sequence (L * dk^2 values per head): this is the
 * reference, simple rather than frugal. With dS the gradient of S_t:
 * dS += q_t^T do_t; dq_t = do_t S_t^T; dk_t = dS v_t; dv_t = k_t dS;
 * dg_t = exp(g_t) * rowsum(dS * S_{t-1}); then dS_{t-1} = diag(exp(g_t)) dS. */
int LH_CPU(attn_recurrent_backward)(void *ctx, lh_real *dq, lh_real *dk_, lh_real *dv,
                                    lh_real *dg, lh_real *dstate_in, const lh_real *dout,
                                    const lh_real *dstate_out, const lh_real *q,
                                    const lh_real *k, const lh_real *v, const lh_real *g,
                                    const lh_real *state_in, const int32_t *seq_offsets,
                                    int n_seq, int H, int dk) {
  (void)ctx;
  int T = lh_attn_check(seq_offsets, n_seq, H, dk);
  if (T < 0) return T;
  if (!dout || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk;
  int max_len = 0;
  for (int s = 0; s < n_seq; s++)
    if (seq_offsets[s + 1] - seq_offsets[s] > max_len) max_len = seq_offsets[s + 1] - seq_offsets[s];
  lh_real *hist = malloc(sizeof(lh_real) * SS * ((size_t)max_len + 1));
  lh_real *dS = malloc(sizeof(lh_real) * SS);
  lh_real *tmp = malloc(sizeof(lh_real) * (size_t)dk);
  if (!hist || !dS || !tmp) {
    free(hist), free(dS), free(tmp);
    return LH_ENOMEM;
  }
  for (int s = 0; s < n_seq; s++)
    for (int h = 0; h < H; h++) {
      int t0 = seq_offsets[s], L = seq_offsets[s + 1] - t0;
      size_t si = ((size_t)s * H + h) * SS;
      /* hist[0] = S_in, hist[t+1] = S after step t. */
      if (state_in) memcpy(hist, state_in + si, sizeof(lh_real) * SS);
      else memset(hist, 0, sizeof(lh_real) * SS);
      for (int t = 0; t < L; t++) {
        size_t o = (size_t)(t0 + t) * D + (size_t)h * dk;
        memcpy(hist + (t + 1) * SS, hist + t * SS, sizeof(lh_real) * SS);
        step_head(tmp, hist + (t + 1) * SS, q + o, k + o, v + o, g + o, dk);
      }
      if (dstate_out) memcpy(dS, dstate_out + si, sizeof(lh_real) * SS);
      else memset(dS, 0, sizeof(lh_real) * SS);
      for (int t = L - 1; t >= 0; t--) {
        size_t o = (size_t)(t0 + t) * D + (size_t)h * dk;
        const lh_real *St = hist + (t + 1) * SS, *Sp = hist + t * SS;
        const lh_real *qt = q + o, *kt = k + o, *vt = v + o, *gt = g + o, *dot = dout + o;
        for (int i = 0; i < dk; i++) {
          lh_real acc_q = 0, acc_k = 0, acc_g = 0;
          lh_real *dSi = dS + (size_t)i * dk;
          for (int j = 0; j < dk; j++) {
            dSi[j] += qt[i] * dot[j];
            acc_q += dot[j] * St[(size_t)i * dk + j];
            acc_k += dSi[j] * vt[j];
            acc_g += dSi[j] * Sp[(size_t)i * dk + j];
            if (dv) dv[o + j] += kt[i] * dSi[j];
          }
          lh_real decay = LH_EXP(gt[i]);
          if (dq) dq[o + i] += acc_q;
          if (dk_) dk_[o + i] += acc_k;
          if (dg) dg[o + i] += decay * acc_g;
          for (int j = 0; j < dk; j++) dSi[j] *= decay;
        }
      }
      if (dstate_in)
        for (size_t e = 0; e < SS; e++) dstate_in[si + e] += dS[e];
    }
  free(hist), free(dS), free(tmp);
  return LH_OK;
}

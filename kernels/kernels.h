/* kernels: the compute backend interface.
 *
 * Model code calls the operations of an lh_backend table and never bypasses
 * it; the CPU backend (kernels/cpu/, C and OpenBLAS) fills one static const
 * table and is the reference for the CUDA backend (kernels/cuda/).
 *
 * Conventions shared by every operation:
 * - fp32 at the interface, row-major, contiguous. Pointers are backend
 *   memory (host memory for "cpu"; see alloc/upload/download).
 * - Weights are stored [out, in], so y = W x; a batch of rows inp (N, IN)
 *   gives out (N, OUT) = inp W^T.
 * - Every operation returns 0 or a negative lh_err code (LH_EKERNELS_* for
 *   shapes, indices and arguments; LH_ENOMEM when scratch memory fails).
 * - Forward outputs are overwritten. Backward operations ADD into every
 *   gradient they write (llm.c style: the caller zeroes gradients once per
 *   step, residual branches simply accumulate). A gradient pointer that is
 *   NULL is not computed (e.g. no dinp for the first layer's inputs).
 * - A backward takes its gradients first, then the forward inputs it needs
 *   in the forward's order; it never depends on hidden state of the backend
 *   (what it needs from the forward, e.g. the MoE cache, is passed in).
 * - Nothing here keeps global state. The CPU backend's threads are one
 *   OpenMP team per process, sized per backend instance by set_threads;
 *   OpenBLAS's own pool is kept at one thread (docs/model.md "CPU threads, exp and scratch").
 *
 * The table is versioned like ggml's backend and SQLite's VFS: fields are
 * only ever appended at the end and `version` says how many exist, so code
 * built against version n can use any table whose version is >= n. */
#ifndef LH_KERNELS_H
#define LH_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* Whether this build has the CUDA backend compiled in (1) or not (0). */
int lh_kernels_cuda_compiled(void);

/* Number of usable CUDA devices (0 when the backend is not compiled, its
 * library cannot be loaded, there is no driver or no device); the first
 * device's name goes to name. */
int lh_kernels_cuda_devices(char *name, int name_bytes);

/* Loads the CUDA backend's library, liblonghaul_cuda.so, once per process
 * (kernels/cuda_loader.c; a program that never asks for CUDA never maps
 * CUDA's libraries). LH_EKERNELS_NOT_AVAILABLE with err saying why when
 * this build has no CUDA or the library cannot be loaded. */
int lh_kernels_cuda_load(lh_errbuf *err);

/* The version a table built from this header carries. */
#define LH_BACKEND_VERSION 2

/* The widest short convolution (conv_forward), the most [model] conv takes. */
#define LH_CONV_MAX_WIDTH 8
/* The longest chunk the chunked attention takes, the most [model] chunk
 * takes. */
#define LH_CHUNK_MAX 256

/* RMSNorm epsilon of the model (docs/model.md). */
#define LH_RMSNORM_EPS 1e-6f

/* AdamW hyper-parameters of one step. step is 1-based (bias correction uses
 * beta^step). grad_scale multiplies every gradient before use; it is how
 * global-norm clipping is applied without another pass (1.0 for none). */
typedef struct {
  float lr;
  float beta1;         /* 0.9 */
  float beta2;         /* 0.95 */
  float eps;           /* 1e-8 */
  float weight_decay;  /* 0.01; applied only when the tensor's flag is set */
  float grad_scale;    /* 1.0, or clip / norm when clipping */
  int64_t step;        /* 1, 2, ... */
} lh_adamw_params;

/* Floats of the activation cache one moe_experts_forward call fills for its
 * backward: per routed (token, slot) pair, the two hidden pre-activations
 * (2 * hidden) and the expert's output (latent). n_pairs is n_tokens * k for
 * routed experts and n_tokens * n_experts for the dense (shared) form. */
static inline size_t lh_moe_cache_floats(int n_pairs, int hidden, int latent) {
  return (size_t)n_pairs * (size_t)(2 * hidden + latent);
}

typedef struct lh_backend lh_backend;
struct lh_backend {
  int version;         /* LH_BACKEND_VERSION of the code that filled it */
  const char *name;    /* "cpu", "cuda" */
  void *context;       /* passed as ctx to every operation */

  /* ---- memory ---------------------------------------------------------- */
  /* Backend memory of bytes (64-byte aligned on CPU), NULL when out of
   * memory. free accepts NULL. */
  void *(*alloc)(void *ctx, size_t bytes);
  void (*free)(void *ctx, void *ptr);
  /* Host <-> backend copies and zero fill; plain memcpy/memset on CPU. */
  int (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes);
  int (*download)(void *ctx, void *host_dst, const void *src, size_t bytes);
  int (*zero)(void *ctx, void *ptr, size_t bytes);
  /* Wait for queued work (no-op on CPU). */
  int (*synchronize)(void *ctx);
  /* Compute threads (on CPU the OpenMP team of this instance, OpenBLAS
   * single-threaded per member); n <= 0 leaves it as it is. */
  int (*set_threads)(void *ctx, int n);

  /* ---- matrix products ------------------------------------------------- */
  // inp is (N,IN), weight is (OUT,IN), bias is (OUT) or NULL, out is (N,OUT):
  // out = inp weight^T + bias.
  int (*matmul_forward)(void *ctx, float *out, const float *inp, const float *weight,
                        const float *bias, int N, int IN, int OUT);
  // dout is (N,OUT); dinp (N,IN) += dout weight; dweight (OUT,IN) += dout^T inp;
  // dbias (OUT) += column sums of dout. Each of dinp, dweight, dbias may be NULL.
  int (*matmul_backward)(void *ctx, float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int N, int IN, int OUT);

  /* ---- normalisation and activation ------------------------------------ */
  // inp is (N,C), weight is (C), out is (N,C), rstd is (N) or NULL:
  // out = inp / sqrt(mean(inp^2) + eps) * weight; rstd keeps 1/sqrt(..) per row.
  // Per-head RMSNorm of attention outputs is this with N = T*heads, C = dk.
  int (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps);
  // dout is (N,C); dinp (N,C) += ...; dweight (C) += ... (rstd is not needed:
  // it is recomputed from inp).
  int (*rmsnorm_backward)(void *ctx, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int C, float eps);
  // a, b, out are (n): out = silu(a) * b, silu(a) = a * sigmoid(a).
  int (*swiglu_forward)(void *ctx, float *out, const float *a, const float *b, size_t n);
  // dout is (n); da (n) += ...; db (n) += ...
  int (*swiglu_backward)(void *ctx, float *da, float *db, const float *dout,
                         const float *a, const float *b, size_t n);

  /* ---- inputs ----------------------------------------------------------- */
  // ids is (N) in [0,V), table is (V,C), out is (N,C): out[n] = table[ids[n]].
  // An id outside [0,V) is LH_EKERNELS_INDEX.
  int (*embedding_forward)(void *ctx, float *out, const int32_t *ids, const float *table,
                           int N, int V, int C);
  // dout is (N,C); dtable (V,C) += scatter-add of dout rows at ids.
  int (*embedding_backward)(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                            int N, int V, int C);
  // image is (H,W,3) RGB in [0,1], H and W multiples of patch; the image is cut
  // into P = (H/patch)*(W/patch) patches in row-major order, each flattened in
  // (row, column, channel) order into 3*patch^2 values. w is (C,3*patch^2),
  // b is (C), pos is (max_patches,C) with P <= max_patches, out is (P,C):
  // out[p] = w flatten(patch p) + b + pos[p].
  int (*patch_forward)(void *ctx, float *out, const float *image, int H, int W, int patch,
                       const float *w, const float *b, const float *pos, int max_patches, int C);
  // dout is (P,C); dw, db, dpos += ... (no gradient to the image).
  int (*patch_backward)(void *ctx, float *dw, float *db, float *dpos, const float *dout,
                        const float *image, int H, int W, int patch, const float *w,
                        int max_patches, int C);

  /* ---- linear attention ------------------------------------------------ */
  // raw, g are (n): g = g_min * sigmoid(raw / tau), the lower-bounded log-decay
  // in (g_min, 0); raw = W_g u + b_g comes from matmul_forward.
  int (*decay_gate_forward)(void *ctx, float *g, const float *raw, size_t n,
                            float g_min, float tau);
  // dg is (n); draw (n) += ...
  int (*decay_gate_backward)(void *ctx, float *draw, const float *dg, const float *raw,
                             size_t n, float g_min, float tau);

  // Packed sequences: the T rows are n_seq sequences, sequence s being rows
  // seq_offsets[s] .. seq_offsets[s+1]-1 (seq_offsets is (n_seq+1), starts at
  // 0, ends at T, non-decreasing). Each sequence starts from its own state and
  // chunks start at each sequence start, so nothing leaks across sequences.
  // q, k, g are (T,H*dk), v and out are (T,H*dk) (dv = dk), head h owning
  // columns h*dk..(h+1)*dk-1. q is used as given (the caller applies dk^-1/2);
  // g is the log-decay (<= 0). state_in, state_out are (n_seq,H,dk,dk):
  // state_in NULL means zero states, state_out NULL means not wanted; a window
  // continues the previous one by passing its state_out as state_in
  // (state_out may be the same buffer as state_in: each state is read before
  // it is written).
  // Per head: S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t, out_t = q_t S_t,
  // computed chunk by chunk (chunk rows, intra-chunk as matrix products).
  int (*attn_chunked_forward)(void *ctx, float *out, float *state_out, const float *q,
                              const float *k, const float *v, const float *g,
                              const float *state_in, const int32_t *seq_offsets, int n_seq,
                              int H, int dk, int chunk);
  // dout is (T,H*dk), dstate_out is (n_seq,H,dk,dk) or NULL (zero). dq, dk_,
  // dv, dg (T,H*dk) += ...; dstate_in (n_seq,H,dk,dk) += ..., or NULL to stop
  // the gradient at the window boundary.
  int (*attn_chunked_backward)(void *ctx, float *dq, float *dk_, float *dv, float *dg,
                               float *dstate_in, const float *dout, const float *dstate_out,
                               const float *q, const float *k, const float *v, const float *g,
                               const float *state_in, const int32_t *seq_offsets, int n_seq,
                               int H, int dk, int chunk);
  // The same function as attn_chunked_forward computed one step at a time
  // (the reference and the benchmark's baseline). Shapes as above.
  int (*attn_recurrent_forward)(void *ctx, float *out, float *state_out, const float *q,
                                const float *k, const float *v, const float *g,
                                const float *state_in, const int32_t *seq_offsets, int n_seq,
                                int H, int dk);
  int (*attn_recurrent_backward)(void *ctx, float *dq, float *dk_, float *dv, float *dg,
                                 float *dstate_in, const float *dout, const float *dstate_out,
                                 const float *q, const float *k, const float *v,
                                 const float *g, const float *state_in,
                                 const int32_t *seq_offsets, int n_seq, int H, int dk);
  // The short causal convolution of q, k and v, each channel on its own:
  // out[t][c] = sum_{j<W} w[j][c] x[t-j][c] within each packed sequence
  // (seq_offsets as above); x, out are (T,C), w is (W,C), W <=
  // LH_CONV_MAX_WIDTH. Rows before a sequence's start come from its tail:
  // sequence s's at tail_in + s * tail_stride, (W-1,C), oldest row first;
  // tail_in NULL means zero rows. tail_out (same layout, or NULL) gets each
  // sequence's last W-1 input rows, reaching into tail_in when the
  // sequence is shorter; it may be tail_in (the tails go out last). The
  // decode runs it on B sequences of one row each.
  int (*conv_forward)(void *ctx, float *out, float *tail_out, const float *x, const float *w,
                      const float *tail_in, size_t tail_stride, const int32_t *seq_offsets,
                      int n_seq, int C, int W);
  // dout is (T,C); dx (T,C) and dw (W,C) += ... (either may be NULL); the
  // tail gets no gradient, like the attention state a window starts from.
  int (*conv_backward)(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                       const float *w, const float *tail_in, size_t tail_stride,
                       const int32_t *seq_offsets, int n_seq, int C, int W);
  // Batched decode: one new token for each of B independent sequences.
  // q, k, v, g, out are (B,H*dk), state is (B,H,dk,dk), updated in place:
  // S = diag(exp(g)) S + k^T v, out = q S.
  int (*attn_decode_step)(void *ctx, float *out, float *state, const float *q,
                          const float *k, const float *v, const float *g, int B, int H,
                          int dk);

  /* ---- mixture of experts ---------------------------------------------- */
  // logits is (N,E) (router logits w_e . z from matmul_forward), bias is (E)
  // or NULL, affinity is (N,E), expert_idx and gates are (N,k):
  // affinity = sigmoid(logits); expert_idx[n] = top-k of affinity[n] + bias,
  // in decreasing order, ties to the lower expert index;
  // gates[n][j] = affinity[n][e_j] / sum_j' affinity[n][e_j'].
  // replay != 0 takes expert_idx as given (routing replay) and checks it
  // (LH_EKERNELS_INDEX when an index is out of range or repeated in a row).
  int (*moe_route_forward)(void *ctx, int32_t *expert_idx, float *gates, float *affinity,
                           const float *logits, const float *bias, int N, int E, int k,
                           int replay);
  // dgates is (N,k); dlogits (N,E) += gradient through the gate normalisation
  // and the sigmoid (none through bias).
  int (*moe_route_backward)(void *ctx, float *dlogits, const float *dgates,
                            const float *affinity, const int32_t *expert_idx, int N, int E,
                            int k);
  // The router's backward without the dense (N,E) gradient, for routings
  // where only the chosen experts' logits carry one (every balancing but
  // aux, whose loss reaches every logit): with dl (N,k) the values
  // moe_route_backward puts at expert_idx, dz (N,r) += sum_j dl[n][j]
  // router[idx[n][j]] and drouter (E,r) += sum over the pairs (n, j) routed
  // to e of dl[n][j] z[n]; router is (E,r). Equal to moe_route_backward into
  // a zeroed (N,E) then matmul_backward through the router, up to the order
  // of the sums. Either output may be NULL. On LH_EKERNELS_INDEX (an index
  // outside 0..E-1) nothing is written.
  int (*moe_router_backward)(void *ctx, float *dz, float *drouter, const float *dgates,
                             const float *affinity, const int32_t *expert_idx, const float *z,
                             const float *router, int N, int E, int k, int r);
  // z is (N,r), expert_idx and gates are (N,k), w1 and w3 are (E,f,r), w2 is
  // (E,r,f), out is (N,r):
  // out[n] = sum_j gates[n][j] * F_{e_j}(z[n]), F_e(z) = w2_e (silu(w1_e z) * (w3_e z)).
  // Tokens are grouped by expert and each expert runs one batched product
  // per weight. expert_idx = gates = NULL is the dense form (shared experts):
  // every token goes to each of the E experts with gate 1 (k must equal E).
  // cache is lh_moe_cache_floats(N*k, f, r) floats for the backward, or NULL
  // when no backward will follow (decode).
  int (*moe_experts_forward)(void *ctx, float *out, float *cache, const float *z,
                             const int32_t *expert_idx, const float *gates, const float *w1,
                             const float *w2, const float *w3, int N, int E, int k, int r,
                             int f);
  // dout is (N,r); dz (N,r), dw1, dw3 (E,f,r), dw2 (E,r,f) += ...;
  // dgates (N,k) += dout[n] . F_{e_j}(z[n]) (NULL in the dense form).
  // cache must be the one the forward filled (LH_EKERNELS_NULL_ARG if NULL).
  int (*moe_experts_backward)(void *ctx, float *dz, float *dw1, float *dw2, float *dw3,
                              float *dgates, const float *dout, const float *cache,
                              const float *z, const int32_t *expert_idx, const float *gates,
                              const float *w1, const float *w2, const float *w3, int N,
                              int E, int k, int r, int f);

  /* ---- output ----------------------------------------------------------- */
  // logits is (N,V), out is (N,V): out = log_softmax(logits) per row
  // (sampling, scoring).
  int (*log_softmax_forward)(void *ctx, float *out, const float *logits, int N, int V);
  // logits is (N,V), targets is (N) with -1 meaning "no target" (padding),
  // logp is (N): logp[n] = log_softmax(logits[n])[targets[n]] (0 without a
  // target); cross-entropy is -logp. entropy is (N) or NULL:
  // entropy[n] = -sum_v p log p. A target >= V or < -1 is LH_EKERNELS_INDEX.
  int (*logprob_forward)(void *ctx, float *logp, float *entropy, const float *logits,
                         const int32_t *targets, int N, int V);
  // dlogp is (N), dentropy is (N) or NULL; dlogits (N,V) += ...
  int (*logprob_backward)(void *ctx, float *dlogits, const float *dlogp,
                          const float *dentropy, const float *logits,
                          const int32_t *targets, int N, int V);

  /* ---- vector helpers (residuals, scalars, gradient norms) ------------- */
  // x is (n): x *= s.
  int (*scale)(void *ctx, float *x, size_t n, float s);
  // x, y are (n): y += a * x.
  int (*axpy)(void *ctx, float *y, float a, const float *x, size_t n);
  // x, y are (n): *out = sum x*y, accumulated in double (host pointer out).
  int (*dot)(void *ctx, double *out, const float *x, const float *y, size_t n);
  // x is (n): *out = sum x^2 in double; a non-finite x gives a non-finite
  // *out, which is how a step with a bad gradient is detected.
  int (*sum_squares)(void *ctx, double *out, const float *x, size_t n);

  /* ---- optimizer -------------------------------------------------------- */
  // param, grad, m, v are (n): one AdamW step on one tensor.
  // g = grad_scale * grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // param -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * param), the
  // weight-decay term only when decay != 0 (decoupled, per tensor).
  int (*adamw_step)(void *ctx, float *param, const float *grad, float *m, float *v,
                    size_t n, const lh_adamw_params *p, int decay);

  /* ---- appended in version 1 (new fields go below, never above) -------- */
  // The conventional balancing loss of balance = aux (docs/model.md), for
  // comparison with the bias rules. affinity is (N,E) from moe_route_forward,
  // load is (E), the fraction of routed (token, slot) pairs per expert, held
  // constant; p = affinity normalised over experts per token:
  // *loss = weight * E * sum_e load_e * mean_n p[n][e] (host pointer loss).
  int (*moe_aux_loss_forward)(void *ctx, double *loss, const float *affinity,
                              const float *load, int N, int E, float weight);
  // dlogits (N,E) += dloss * d loss / d logits, through p and the sigmoid.
  int (*moe_aux_loss_backward)(void *ctx, float *dlogits, float dloss, const float *affinity,
                               const float *load, int N, int E, float weight);
  // Backend-to-backend copy of bytes (dst and src may overlap), e.g. placing
  // patch_forward's rows at their positions in a packed sequence.
  int (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
};

/* The CPU backend's table (static const; never NULL). It has no context:
 * its team is OpenMP's default (OMP_NUM_THREADS, else one per core) and its
 * scratch is malloc'd per call; lh_backend_by_name("cpu") gives an instance
 * with its own team size and arena. */
const lh_backend *lh_backend_cpu(void);

/* The CUDA backend (kernels/cuda/): a table created at run time on device 0
 * with its own stream, cuBLAS handle and ONE device memory pool of
 * pool_bytes taken with cudaMalloc at open (0: 90% of the free device
 * memory); alloc carves that pool, so running out is alloc returning NULL.
 * Pointers are device memory: move data with upload/download. Operations
 * are queued on the stream (call them from one thread at a time); upload,
 * download, dot, sum_squares and index checks wait for it.
 * The chunked attention entries run chunk-parallel kernels for chunk 16
 * and dk <= 128 (WMMA bf16 tiles in bf16 mode) and the step-by-step kernels
 * otherwise; MoE experts run grouped GEMMs. No build
 * support, no driver or no device is LH_EKERNELS_NOT_AVAILABLE with err
 * saying so. Release it with lh_backend_close. */
int lh_backend_cuda_open(const lh_backend **out, size_t pool_bytes, lh_errbuf *err);

/* Precision of a CUDA table's matrix products: fp32 (the default and the
 * checking mode) or bf16 operands with fp32 accumulation (training speed). */
typedef enum { LH_GEMM_FP32 = 0, LH_GEMM_BF16 = 1 } lh_gemm_mode;
int lh_backend_cuda_set_gemm(const lh_backend *b, lh_gemm_mode mode);

/* Releases a table from lh_backend_by_name or lh_backend_cuda_open (all its
 * device memory with it); NULL and the CPU table are no-ops. */
void lh_backend_close(const lh_backend *b);

/* The backend called name: "cpu" (an instance of the CPU table whose
 * context holds its team size, OpenMP's default until set_threads, and its
 * scratch arena; one thread uses it at a time), or "cuda"
 * (lh_backend_cuda_open with the default pool; LH_EKERNELS_NOT_AVAILABLE
 * when this build or machine has none). Release either with
 * lh_backend_close. An unknown
 * name is LH_EKERNELS_UNKNOWN_BACKEND. err (may be NULL) gets a sentence
 * naming what failed and what to do. */
int lh_backend_by_name(const char *name, const lh_backend **out, lh_errbuf *err);

/* The CPU team's idle members sleep rather than spin (docs/model.md,
 * "CPU threads, exp and scratch"): on shared cores a spinning member takes the core its partner
 * waits for. libgomp reads OMP_WAIT_POLICY when the process loads, before
 * main, so a program calls this first thing in main: when the variable is
 * not set it sets PASSIVE and runs the program again (execv of
 * /proc/self/exe with argv), and returns only when it need not (0) or the
 * exec failed (-1, errno set; the program goes on spinning). The user's
 * own setting always wins. */
int lh_kernels_wait_passive(char **argv);

#endif

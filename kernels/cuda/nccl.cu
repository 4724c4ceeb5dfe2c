// NCCL all-reduce of gradients and all-to-all of bytes on a CUDA table's stream (kernels/nccl.h).
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ctx.h"

extern "C" {
#include "kernels/nccl.h"
}

static_assert(LH_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL unique id size");

struct lh_cuda_nccl {
  ncclComm_t comm;
  lh_cuda_ctx *ctx;
  int nranks, rank;
};

static int nccl_fail(ncclResult_t r, const char *what, const char *file, int line) {
  LH_ERROR("kernels", "NCCL call failed: %s: %s at %s:%d", what, ncclGetErrorString(r), file,
           line);
  return LH_EKERNELS_DEVICE;
}

extern "C" int lh_cuda_nccl_compiled(void) { return 1; }

extern "C" int lh_cuda_nccl_unique_id(unsigned char id[LH_NCCL_ID_BYTES], lh_errbuf *err) {
  if (!id) return lh_errbuf_set(err, LH_EKERNELS_NULL_ARG, "nccl: id buffer is required");
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "nccl: cannot make a unique id: %s",
                         ncclGetErrorString(r));
  memcpy(id, u.internal, LH_NCCL_ID_BYTES);
  return LH_OK;
}

extern "C" int lh_cuda_nccl_init(lh_cuda_nccl **out, const lh_backend *b,
                                 const unsigned char id[LH_NCCL_ID_BYTES], int nranks, int rank,
                                 lh_errbuf *err) {
  if (out) *out = NULL;
  if (!out || !id) return lh_errbuf_set(err, LH_EKERNELS_NULL_ARG, "nccl: out and id are required");
  if (!b || !b->name || strcmp(b->name, "cuda") != 0 || !b->context)
    return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                         "nccl: needs a 'cuda' backend table (got '%s')",
                         b && b->name ? b->name : "none");
  if (nranks <= 0 || rank < 0 || rank >= nranks)
    return lh_errbuf_set(err, LH_EKERNELS_SHAPE, "nccl: rank %d of %d ranks is out of range",
                         rank, nranks);
  lh_cuda_ctx *c = lh_cuda(b->context);
  cudaError_t e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "nccl: cannot use device %d: %s", c->device,
                         cudaGetErrorString(e));
  lh_cuda_nccl *n = (lh_cuda_nccl *)calloc(1, sizeof *n);
  if (!n) return lh_errbuf_set(err, LH_ENOMEM, "nccl: out of host memory");
  ncclUniqueId u;
  memcpy(u.internal, id, LH_NCCL_ID_BYTES);
  ncclResult_t r = ncclCommInitRank(&n->comm, nranks, u, rank);
  if (r != ncclSuccess) {
    free(n);
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE,
                         "nccl: rank %d of %d cannot join the communicator: %s", rank, nranks,
                         ncclGetErrorString(r));
  }
  n->ctx = c;
  n->nranks = nranks;
  n->rank = rank;
  LH_INFO("kernels", "nccl communicator: rank=%d nranks=%d device=%d", rank, nranks, c->device);
  *out = n;
  return LH_OK;
}

extern "C" int lh_cuda_nccl_allreduce_sum(lh_cuda_nccl *comm, float *buf, size_t n) {
  if (!comm) return LH_EKERNELS_NULL_ARG;
  if (n == 0) return LH_OK;
  if (!buf) return LH_EKERNELS_NULL_ARG;
  ncclResult_t r =
      ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm->comm, comm->ctx->stream);
  if (r != ncclSuccess) return nccl_fail(r, "ncclAllReduce", __FILE__, __LINE__);
  return LH_OK;
}

extern "C" int lh_cuda_nccl_alltoallv(lh_cuda_nccl *comm, const void *send, const size_t *scounts,
                                      const size_t *sdispls, void *recv, const size_t *rcounts,
                                      const size_t *rdispls) {
  if (!comm || !scounts || !sdispls || !rcounts || !rdispls) return LH_EKERNELS_NULL_ARG;
  for (int j = 0; j < comm->nranks; j++)
    if ((scounts[j] && !send) || (rcounts[j] && !recv)) return LH_EKERNELS_NULL_ARG;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(r, "ncclGroupStart", __FILE__, __LINE__);
  for (int j = 0; j < comm->nranks && r == ncclSuccess; j++) {
    if (scounts[j])
      r = ncclSend((const char *)send + sdispls[j], scounts[j], ncclUint8, j, comm->comm,
                   comm->ctx->stream);
    if (r == ncclSuccess && rcounts[j])
      r = ncclRecv((char *)recv + rdispls[j], rcounts[j], ncclUint8, j, comm->comm,
                   comm->ctx->stream);
  }
  // The group is closed whatever happened inside it, so NCCL's state stays whole.
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess) return nccl_fail(r, "ncclSend/ncclRecv", __FILE__, __LINE__);
  if (end != ncclSuccess) return nccl_fail(end, "ncclGroupEnd", __FILE__, __LINE__);
  return LH_OK;
}

extern "C" int lh_cuda_nccl_size(const lh_cuda_nccl *comm) { return comm ? comm->nranks : 0; }
extern "C" int lh_cuda_nccl_rank(const lh_cuda_nccl *comm) { return comm ? comm->rank : 0; }

extern "C" void lh_cuda_nccl_free(lh_cuda_nccl *comm) {
  if (!comm) return;
  cudaStreamSynchronize(comm->ctx->stream);
  ncclCommDestroy(comm->comm);
  free(comm);
}

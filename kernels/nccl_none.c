/* kernels/nccl.h in a build without the CUDA backend or without NCCL:
 * every call says so. */
#include "kernels/nccl.h"

int lh_cuda_nccl_compiled(void) { return 0; }

static int none(lh_errbuf *err) {
  return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                       "nccl: this build has no NCCL (CUDA backend off or nccl.h not found)");
}

int lh_cuda_nccl_unique_id(unsigned char id[LH_NCCL_ID_BYTES], lh_errbuf *err) {
  (void)id;
  return none(err);
}

int lh_cuda_nccl_init(lh_cuda_nccl **out, const lh_backend *b,
                      const unsigned char id[LH_NCCL_ID_BYTES], int nranks, int rank,
                      lh_errbuf *err) {
  (void)b, (void)id, (void)nranks, (void)rank;
  if (out) *out = NULL;
  return none(err);
}

int lh_cuda_nccl_allreduce_sum(lh_cuda_nccl *comm, float *buf, size_t n) {
  (void)comm, (void)buf, (void)n;
  return LH_EKERNELS_NOT_AVAILABLE;
}

int lh_cuda_nccl_alltoallv(lh_cuda_nccl *comm, const void *send, const size_t *scounts,
                           const size_t *sdispls, void *recv, const size_t *rcounts,
                           const size_t *rdispls) {
  (void)comm, (void)send, (void)scounts, (void)sdispls, (void)recv, (void)rcounts, (void)rdispls;
  return LH_EKERNELS_NOT_AVAILABLE;
}

int lh_cuda_nccl_size(const lh_cuda_nccl *comm) {
  (void)comm;
  return 0;
}

int lh_cuda_nccl_rank(const lh_cuda_nccl *comm) {
  (void)comm;
  return 0;
}

void lh_cuda_nccl_free(lh_cuda_nccl *comm) { (void)comm; }

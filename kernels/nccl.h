/* kernels/nccl: gradient all-reduce and the experts' all-to-all across
 * learners with NCCL, on the stream of a CUDA backend table
 * (kernels/cuda/nccl.cu).
 *
 * Bootstrap: rank 0 calls lh_cuda_nccl_unique_id and sends the
 * LH_NCCL_ID_BYTES bytes to every other rank by any means (the learner
 * broadcasts them over MPI); then every rank calls lh_cuda_nccl_init with
 * the same id, nranks and its own rank (a collective call: it returns once
 * all ranks have joined). Each rank uses its own CUDA table (one device per
 * process).
 *
 * lh_cuda_nccl_allreduce_sum sums n floats of backend memory over all ranks
 * in place; it is queued on the table's stream like every backend
 * operation (operations queued after it see the sum; synchronize to wait
 * for it on the host). Call it from the thread that drives the table.
 *
 * Without the CUDA backend or NCCL in this build, or without a device,
 * every call is LH_EKERNELS_NOT_AVAILABLE with err saying so. The learner
 * does not call these yet: its gradient all-reduce and expert exchange go
 * through MPI in host memory for every backend (learner/allreduce.c). */
#ifndef LH_KERNELS_NCCL_H
#define LH_KERNELS_NCCL_H

#include <stddef.h>

#include "common/common.h"
#include "kernels/kernels.h"

#define LH_NCCL_ID_BYTES 128

typedef struct lh_cuda_nccl lh_cuda_nccl;

/* Whether this build has NCCL (1) or not (0). */
int lh_cuda_nccl_compiled(void);

/* A fresh unique id (rank 0 only). */
int lh_cuda_nccl_unique_id(unsigned char id[LH_NCCL_ID_BYTES], lh_errbuf *err);

/* Joins the communicator of nranks ranks named by id as rank (0-based) on
 * the device of backend b (a "cuda" table). *out is set on success. */
int lh_cuda_nccl_init(lh_cuda_nccl **out, const lh_backend *b,
                      const unsigned char id[LH_NCCL_ID_BYTES], int nranks, int rank,
                      lh_errbuf *err);

/* buf (n floats, memory of the communicator's backend) = sum over ranks. */
int lh_cuda_nccl_allreduce_sum(lh_cuda_nccl *comm, float *buf, size_t n);

/* All-to-all of bytes in backend memory (the expert exchange's transport
 * on the CUDA backend, ARCHITECTURE.md §5): the scounts[j] bytes at
 * send + sdispls[j] go to rank j, which receives them at recv + its
 * rdispls[i] for this rank i, rcounts[i] bytes; every count and
 * displacement is in bytes, one per rank of comm, and a pair's counts
 * must agree on both sides (the caller exchanged them first). Grouped
 * point-to-point sends and receives (ncclSend / ncclRecv), queued on the
 * table's stream; send and recv must not overlap. */
int lh_cuda_nccl_alltoallv(lh_cuda_nccl *comm, const void *send, const size_t *scounts,
                           const size_t *sdispls, void *recv, const size_t *rcounts,
                           const size_t *rdispls);

/* Ranks and this rank of comm (0 for NULL). */
int lh_cuda_nccl_size(const lh_cuda_nccl *comm);
int lh_cuda_nccl_rank(const lh_cuda_nccl *comm);

/* Leaves and releases the communicator (waits for its queued work); NULL
 * is a no-op. */
void lh_cuda_nccl_free(lh_cuda_nccl *comm);

#endif

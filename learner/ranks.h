/* learner, internal: learner ranks (learner/allreduce.c), experts across
 * ranks (learner/experts.c) and ranks on several hosts (learner/ranks.c).
 * learner/internal.h includes it; a file that needs only the ranks may
 * include this alone. */
#ifndef LH_LEARNER_RANKS_H
#define LH_LEARNER_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "model/model.h"

typedef struct lh_learner_trainer lh_learner_trainer;  /* learner/internal.h */

/* ---- learner ranks (learner/allreduce.c) ----------------------------------
 * Data parallelism over M learner ranks (ARCHITECTURE.md §1): one MPI job launched
 * with `mpirun -n M longhaul learner ...`, or a plain process for M = 1.
 *
 * Roles. Rank r binds its own ingest ROUTER: entry r of [learner]
 * ingest_endpoints when that list is given (one tcp://host:port per rank,
 * ranks on several hosts), else the configured ingest_endpoint's port +
 * 10 * r on one host (lh_learner_rank_ingest). An actor bound to rank r
 * (`longhaul actor --learner-rank r`; the launcher binds actor i to rank
 * i mod M) sends only there, so an episode's segments all reach one rank.
 * Only rank 0 binds the weights PUB and ROUTER (it serves weights to every
 * actor, on other hosts too, at the weights endpoints' addresses as
 * configured), writes the train_steps rows, records policy versions and
 * writes checkpoints.
 *
 * Stores. Each rank has its own SQLite file: rank 0 uses [learner] db, rank
 * r > 0 db with the suffix ".rank<r>" (lh_learner_rank_db). A message is
 * acked by the one rank that stored it, so "every acked message stored
 * exactly once" holds per file with no cross-process locking, and a rank's
 * scan sees only its own actors' episodes. Rank 0's file holds the run's
 * train_steps and versions; `longhaul report` and `replay` read every
 * rank's file of a run as one store (lh_store_open_ranks).
 *
 * A step. Each rank forms its own batch (batch_episodes is per rank, whole
 * groups, from its own episodes); the ranks step only when every one has a
 * batch ready (a MIN reduce of the flag, so no rank trains alone). The PPO
 * normaliser is the global count of sampled tokens (summed before the
 * loss); gradients are summed over ranks in one flat buffer before the
 * global-norm clip; the routers' expert loads are summed before the
 * balancing update; the loss, reward and success figures are reduced for
 * the train_steps row. Every rank thus applies the same AdamW step and
 * bias update and holds the same weights; a non-finite step is skipped on
 * every rank together. balance = quantile needs every token's scores and
 * is refused with M > 1. With advantage = reinforce each rank's running
 * baseline follows its own batches (advantages are per rank's groups; rank
 * 0's baseline is the one a checkpoint keeps). A rank that fails aborts the
 * whole job (the others would wait for it for ever); the launcher restarts
 * it with --resume.
 *
 * Resume. Rank 0's checkpoint holds the model, optimizer and state; every
 * rank loads it (ckpt_dir must be the same directory for all ranks). Each
 * rank's done-episode set concerns its own store: at a checkpoint rank 0
 * gathers them (lh_learner_trainer_gather_done) and writes
 * episodes_done.bin (its own) and episodes_done.rank<r>.bin inside the same
 * atomically renamed directory; on resume rank r loads its own file. A
 * resume needs at most as many ranks as the checkpoint's run had (a rank
 * without a file is an error naming it).
 *
 * The comm is a table of operations with a context, so another transport
 * (NCCL for CUDA gradients) can fill one; allreduce_backend takes backend
 * memory (the model's gradient buffer), the others host memory. */
typedef enum { LH_LEARNER_COMM_SUM = 0, LH_LEARNER_COMM_MAX = 1, LH_LEARNER_COMM_MIN = 2 } lh_learner_comm_op;

#define LH_LEARNER_COMM_OPS_VERSION 1

typedef struct {
  int version;       /* LH_LEARNER_COMM_OPS_VERSION */
  const char *name;  /* "single", "mpi" */
  /* In place over every rank: buf[i] = op over ranks of buf[i]. 0 or a
   * negative lh_err code. */
  int (*allreduce_f32)(void *ctx, float *buf, size_t n, lh_learner_comm_op op);
  int (*allreduce_f64)(void *ctx, double *buf, size_t n, lh_learner_comm_op op);
  /* The sum over a buffer of backend memory (host memory on CPU). */
  int (*allreduce_backend_f32)(void *ctx, float *buf, size_t n);
  int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
  int (*barrier)(void *ctx);
  /* Ends the whole job at once. */
  void (*abort)(void *ctx, int code);
  /* Releases the context (MPI_Finalize when it initialised MPI). */
  void (*close)(void *ctx);
  /* Optional (NULL: this transport cannot run expert parallelism). Every
   * rank sends `bytes` bytes to each rank and receives as many from each;
   * alltoallv sends scounts[j] bytes at sdispls[j] to rank j and receives
   * rcounts[j] at rdispls[j] from it. */
  int (*alltoall)(void *ctx, const void *send, void *recv, size_t bytes);
  int (*alltoallv)(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                   const size_t *rcounts, const size_t *rdispls);
  /* The ranks of the same color as a comm of their own, ordered by key
   * (MPI_Comm_split); *out_ctx is the new comm's context, rank and size
   * its place in it. */
  int (*split)(void *ctx, int color, int key, void **out_ctx, int *rank, int *size);
} lh_learner_comm_ops;

typedef struct lh_learner_comm lh_learner_comm;

/* The ranks of this process: under mpirun (OMPI_COMM_WORLD_SIZE, or
 * PMI_SIZE / PMIX_RANK, set in the environment) MPI is initialised and the
 * comm is MPI_COMM_WORLD; otherwise a single rank that makes no MPI call at
 * all, so a plain `longhaul learner` needs neither mpirun nor MPI singleton
 * support. LH_ELEARNER_COMM when the environment says mpirun but the build
 * has no MPI, or MPI_Init fails. */
int lh_learner_comm_open(lh_learner_comm **out, lh_errbuf *err);
/* A single rank, never touching MPI. */
int lh_learner_comm_open_single(lh_learner_comm **out, lh_errbuf *err);
/* A comm over another transport's table (copied); ctx is handed to ops. */
int lh_learner_comm_new(const lh_learner_comm_ops *ops, void *ctx, int rank, int size, lh_learner_comm **out,
                        lh_errbuf *err);
/* Whether this build can run more than one rank (linked with MPI). */
int lh_learner_comm_mpi_built(void);
/* Closes the transport (MPI_Finalize); accepts NULL. */
void lh_learner_comm_close(lh_learner_comm *c);
int lh_learner_comm_rank(const lh_learner_comm *c);  /* 0 for NULL */
int lh_learner_comm_size(const lh_learner_comm *c);  /* 1 for NULL */
const char *lh_learner_comm_name(const lh_learner_comm *c);
/* Collectives: every rank calls them in the same order. With one rank (or
 * c NULL) they return at once and change nothing. LH_ELEARNER_COMM on a
 * failure. */
int lh_learner_comm_allreduce_f32(lh_learner_comm *c, float *buf, size_t n, lh_learner_comm_op op, lh_errbuf *err);
int lh_learner_comm_allreduce_f64(lh_learner_comm *c, double *buf, size_t n, lh_learner_comm_op op,
                                  lh_errbuf *err);
int lh_learner_comm_allreduce_backend_f32(lh_learner_comm *c, float *buf, size_t n, lh_errbuf *err);
int lh_learner_comm_bcast(lh_learner_comm *c, void *buf, size_t bytes, int root, lh_errbuf *err);
int lh_learner_comm_barrier(lh_learner_comm *c, lh_errbuf *err);
/* *same = 1 when every rank passed the same value (a checksum). */
int lh_learner_comm_same_u64(lh_learner_comm *c, uint64_t value, int *same, lh_errbuf *err);
/* Ends the whole job (with one rank: nothing; the caller exits). */
void lh_learner_comm_abort(lh_learner_comm *c, int code);
/* Milliseconds spent in allreduce_backend (the gradient sum) so far. */
double lh_learner_comm_backend_ms(const lh_learner_comm *c);
/* Collective: the ranks that pass the same color as a comm of their own,
 * ranked by key (closed with lh_learner_comm_close; closing it leaves c
 * open). LH_ELEARNER_COMM when the transport cannot split. */
int lh_learner_comm_split(lh_learner_comm *c, int color, int key, lh_learner_comm **out, lh_errbuf *err);
/* Whether c's transport has the all-to-all exchanges (expert parallelism). */
int lh_learner_comm_has_alltoall(const lh_learner_comm *c);
int lh_learner_comm_alltoall(lh_learner_comm *c, const void *send, void *recv, size_t bytes, lh_errbuf *err);
int lh_learner_comm_alltoallv(lh_learner_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                              void *recv, const size_t *rcounts, const size_t *rdispls, lh_errbuf *err);

/* ---- experts across ranks (learner/experts.c) ---------------------------- */
typedef struct lh_learner_experts lh_learner_experts;
/* Collective over world: the groups of P and the shards' replicas
 * (lh_learner_expert_parallel_check first). */
int lh_learner_experts_open(lh_learner_comm *world, uint32_t P, int experts, lh_learner_experts **out,
                            lh_errbuf *err);
void lh_learner_experts_close(lh_learner_experts *x);  /* accepts NULL */
int lh_learner_experts_shard(const lh_learner_experts *x);  /* this rank's shard; 0 for NULL */
int lh_learner_experts_size(const lh_learner_experts *x);   /* P; 1 for NULL */
int lh_learner_experts_group_index(const lh_learner_experts *x);  /* rank / P; 0 for NULL */
lh_learner_comm *lh_learner_experts_group(lh_learner_experts *x);
lh_learner_comm *lh_learner_experts_replicas(lh_learner_experts *x);
/* Gives m (shard lh_learner_experts_shard of P) its transport: the group. */
int lh_learner_experts_attach(lh_learner_experts *x, lh_model *m, lh_errbuf *err);
/* Collective over the group: serves the others until all are done. */
int lh_learner_experts_drain(lh_learner_experts *x, lh_model *m, lh_errbuf *err);
/* Sums the gradients over the job: the replicated tensors over every rank,
 * the expert shard over its replicas. */
int lh_learner_experts_reduce_grads(lh_learner_experts *x, lh_model *m, lh_errbuf *err);
/* The sum of squares of the whole model's gradients (collective over the
 * group), after lh_learner_experts_reduce_grads. */
int lh_learner_experts_grad_squares(lh_learner_experts *x, lh_model *m, double *sq, lh_errbuf *err);
/* *any = whether flag is set on any rank of the group. */
int lh_learner_experts_any(lh_learner_experts *x, int flag, int *any, lh_errbuf *err);
/* What a rank's model holds: floats of expert shards and of the rest, and
 * which experts. */
typedef struct {
  size_t expert_floats, other_floats;
  int first, count;
} lh_learner_expert_memory;
void lh_learner_experts_memory(const lh_model *m, lh_learner_expert_memory *out);
/* Collective over the group for piece p of m's whole model
 * (lh_model_each_piece) and buf, m's parameters or a moment: the rank of
 * the shard that holds it reads it into host (room for p->n floats) and
 * sends it to the group's rank 0, which gets it in host. A piece every
 * shard holds is rank 0's own: it reads it, nothing moves. */
int lh_learner_experts_piece(lh_learner_experts *x, lh_model *m, const float *buf, const lh_model_piece *p,
                             float *host, lh_errbuf *err);
/* Weights for actors, collective over group 0 (other groups return at
 * once): *out on rank 0 only is what lh_model_serialize gives for the
 * whole model (malloc'd), the shards gathered straight into it, so rank 0
 * holds one copy of the whole parameters and nothing more. An expert
 * tensor must be under 1 GiB. */
int lh_learner_experts_gather_bytes(lh_learner_experts *x, lh_model *m, unsigned char **out, size_t *n_bytes,
                                    lh_errbuf *err);

/* ---- ranks on several hosts (learner/ranks.c; the rest in learner/learner.h) */
/* Checks the text of ingest_endpoints and counts its entries (*count; at
 * most LH_LEARNER_MAX_RANKS). Returns 0, or -1 with why saying what is
 * wrong (worded to follow "ingest_endpoints = '...' "), as the INI
 * reader's custom keys do. */
int lh_learner_endpoints_parse(const char *text, size_t *count, char *why, size_t why_bytes);
/* Entry i of a checked ingest_endpoints text into out (room for
 * LH_LEARNER_TEXT_BYTES), blanks trimmed. LH_ELEARNER_CONFIG_VALUE when
 * the text has no entry i. */
int lh_learner_endpoints_entry(const char *text, size_t i, char *out, lh_errbuf *err);
/* The trainer's ranks (borrowed, must outlive it; NULL: one rank). Set it
 * before the first step and before lh_learner_trainer_load_done, which
 * then reads this rank's own file. LH_ELEARNER_COMM for balance = quantile
 * with more than one rank. */
int lh_learner_trainer_set_comm(lh_learner_trainer *t, lh_learner_comm *c, lh_errbuf *err);
/* The run whose train_steps rows the trainer writes (train_steps.run_id);
 * copied, cut to LH_STORE_NAME_BYTES - 1. NULL or "": none. */
void lh_learner_trainer_set_run(lh_learner_trainer *t, const char *run_id);
/* Collective: brings every rank's done set to rank 0, which writes them
 * with its next lh_learner_ckpt_save (nothing to do with one rank). */
int lh_learner_trainer_gather_done(lh_learner_trainer *t, lh_errbuf *err);
/* lh_hash64 of the live parameters (balancing biases included), for ranks
 * to compare with lh_learner_comm_same_u64. */
int lh_learner_trainer_params_hash(const lh_learner_trainer *t, uint64_t *hash, lh_errbuf *err);
/* Collective: *same = 1 when every rank holds the weights it should: the
 * same as every other rank, or with experts across ranks the same
 * replicated tensors as every rank and the same shard as its replicas. */
int lh_learner_trainer_same_weights(lh_learner_trainer *t, int *same, lh_errbuf *err);
/* The trainer's expert groups (NULL without expert parallelism). */
lh_learner_experts *lh_learner_trainer_experts(lh_learner_trainer *t);

#endif

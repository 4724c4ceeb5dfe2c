/* learner: the ranks of a data-parallel learner job (learner.h, "learner
 * ranks"). A comm is a table of collectives with a context: the single-rank
 * table below (every collective is the identity, no MPI call is made) and,
 * in a build linked with MPI, one over MPI_COMM_WORLD. The table is the seam
 * where another transport (NCCL for gradients on CUDA) slots in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

#ifdef LH_HAVE_MPI
#include <mpi.h>
#endif

struct lh_learner_comm {
  lh_learner_comm_ops ops;
  void *ctx;
  int rank, size;
  int64_t backend_ns;  /* time in allreduce_backend */
};

/* ---- one rank ------------------------------------------------------------ */

static int single_allreduce_f32(void *ctx, float *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx, (void)buf, (void)n, (void)op;
  return 0;
}
static int single_allreduce_f64(void *ctx, double *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx, (void)buf, (void)n, (void)op;
  return 0;
}
static int single_allreduce_backend_f32(void *ctx, float *buf, size_t n) {
  (void)ctx, (void)buf, (void)n;
  return 0;
}
static int single_bcast(void *ctx, void *buf, size_t bytes, int root) {
  (void)ctx, (void)buf, (void)bytes, (void)root;
  return 0;
}
static int single_barrier(void *ctx) {
  (void)ctx;
  return 0;
}
static void single_abort(void *ctx, int code) { (void)ctx, (void)code; }
static void single_close(void *ctx) { (void)ctx; }
/* To itself: a copy. */
static int single_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  (void)ctx;
  if (bytes) memcpy(recv, send, bytes);
  return 0;
}
static int single_alltoallv(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                            const size_t *rcounts, const size_t *rdispls) {
  (void)ctx;
  if (scounts[0] != rcounts[0]) return LH_ELEARNER_COMM;
  if (scounts[0]) memcpy((char *)recv + rdispls[0], (const char *)send + sdispls[0], scounts[0]);
  return 0;
}
static int single_split(void *ctx, int color, int key, void **out_ctx, int *rank, int *size) {
  (void)ctx, (void)color, (void)key;
  *out_ctx = NULL, *rank = 0, *size = 1;
  return 0;
}

static const lh_learner_comm_ops single_ops = {
    .version = LH_LEARNER_COMM_OPS_VERSION, .name = "single",
    .allreduce_f32 = single_allreduce_f32, .allreduce_f64 = single_allreduce_f64,
    .allreduce_backend_f32 = single_allreduce_backend_f32, .bcast = single_bcast, .barrier = single_barrier,
    .abort = single_abort, .close = single_close, .alltoall = single_alltoall, .alltoallv = single_alltoallv,
    .split = single_split};

/* ---- MPI ------------------------------------------------------------------ */
#ifdef LH_HAVE_MPI

/* MPI counts are int: large buffers go in pieces. */
#define MPI_PIECE ((size_t)1 << 30)

/* The context is NULL for MPI_COMM_WORLD, or the MPI_Comm of a split. */
static MPI_Comm comm_of(void *ctx) { return ctx ? *(MPI_Comm *)ctx : MPI_COMM_WORLD; }

static MPI_Op mpi_op(lh_learner_comm_op op) {
  return op == LH_LEARNER_COMM_MAX ? MPI_MAX : op == LH_LEARNER_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static int mpi_allreduce(void *ctx, void *buf, size_t n, size_t elem, MPI_Datatype type, lh_learner_comm_op op) {
  for (size_t at = 0; at < n; at += MPI_PIECE) {
    size_t k = n - at < MPI_PIECE ? n - at : MPI_PIECE;
    if (MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * elem, (int)k, type, mpi_op(op), comm_of(ctx)) !=
        MPI_SUCCESS)
      return LH_ELEARNER_COMM;
  }
  return 0;
}

static int mpi_allreduce_f32(void *ctx, float *buf, size_t n, lh_learner_comm_op op) {
  return mpi_allreduce(ctx, buf, n, sizeof(float), MPI_FLOAT, op);
}
static int mpi_allreduce_f64(void *ctx, double *buf, size_t n, lh_learner_comm_op op) {
  return mpi_allreduce(ctx, buf, n, sizeof(double), MPI_DOUBLE, op);
}
/* The CPU backend's memory is host memory. */
static int mpi_allreduce_backend_f32(void *ctx, float *buf, size_t n) {
  return mpi_allreduce(ctx, buf, n, sizeof(float), MPI_FLOAT, LH_LEARNER_COMM_SUM);
}
static int mpi_bcast(void *ctx, void *buf, size_t bytes, int root) {
  for (size_t at = 0; at < bytes; at += MPI_PIECE) {
    size_t k = bytes - at < MPI_PIECE ? bytes - at : MPI_PIECE;
    if (MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, comm_of(ctx)) != MPI_SUCCESS) return LH_ELEARNER_COMM;
  }
  return 0;
}
static int mpi_barrier(void *ctx) {
  return MPI_Barrier(comm_of(ctx)) == MPI_SUCCESS ? 0 : LH_ELEARNER_COMM;
}
static int mpi_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  if (bytes > MPI_PIECE) return LH_ELEARNER_COMM;
  return MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(ctx)) == MPI_SUCCESS
             ? 0 : LH_ELEARNER_COMM;
}
/* Byte counts and displacements as MPI's ints: a round of more than 1 GiB
 * per rank is refused (the exchange's rounds are one window's pairs). */
static int mpi_alltoallv(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                         const size_t *rcounts, const size_t *rdispls) {
  MPI_Comm comm = comm_of(ctx);
  int n = 0;
  MPI_Comm_size(comm, &n);
  int *v = malloc(4 * (size_t)n * sizeof *v);
  if (!v) return LH_ENOMEM;
  int ok = 1;
  for (int j = 0; j < n; j++) {
    ok = ok && scounts[j] <= MPI_PIECE && sdispls[j] <= MPI_PIECE && rcounts[j] <= MPI_PIECE &&
         rdispls[j] <= MPI_PIECE;
    v[j] = (int)scounts[j], v[n + j] = (int)sdispls[j], v[2 * n + j] = (int)rcounts[j], v[3 * n + j] = (int)rdispls[j];
  }
  int rc = ok && MPI_Alltoallv(send, v, v + n, MPI_BYTE, recv, v + 2 * n, v + 3 * n, MPI_BYTE, comm) == MPI_SUCCESS
               ? 0 : LH_ELEARNER_COMM;
  free(v);
  return rc;
}
static int mpi_split(void *ctx, int color, int key, void **out_ctx, int *rank, int *size) {
  MPI_Comm *sub = malloc(sizeof *sub);
  if (!sub) return LH_ENOMEM;
  if (MPI_Comm_split(comm_of(ctx), color, key, sub) != MPI_SUCCESS) {
    free(sub);
    return LH_ELEARNER_COMM;
  }
  MPI_Comm_set_errhandler(*sub, MPI_ERRORS_RETURN);
  MPI_Comm_rank(*sub, rank);
  MPI_Comm_size(*sub, size);
  *out_ctx = sub;
  return 0;
}
static void mpi_abort(void *ctx, int code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, code);
}
static void mpi_close(void *ctx) {
  if (ctx) {  /* a split: its comm only */
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free((MPI_Comm *)ctx);
    free(ctx);
    return;
  }
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

static const lh_learner_comm_ops mpi_ops = {
    .version = LH_LEARNER_COMM_OPS_VERSION, .name = "mpi",
    .allreduce_f32 = mpi_allreduce_f32, .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_backend_f32 = mpi_allreduce_backend_f32, .bcast = mpi_bcast, .barrier = mpi_barrier,
    .abort = mpi_abort, .close = mpi_close, .alltoall = mpi_alltoall, .alltoallv = mpi_alltoallv,
    .split = mpi_split};
#endif

/* ---- the comm ------------------------------------------------------------ */

int lh_learner_comm_mpi_built(void) {
#ifdef LH_HAVE_MPI
  return 1;
#else
  return 0;
#endif
}

int lh_learner_comm_new(const lh_learner_comm_ops *ops, void *ctx, int rank, int size, lh_learner_comm **out,
                        lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL out");
  *out = NULL;
  if (!ops || ops->version != LH_LEARNER_COMM_OPS_VERSION || !ops->allreduce_f32 || !ops->allreduce_f64 ||
      !ops->allreduce_backend_f32 || !ops->bcast || !ops->barrier || !ops->abort || !ops->close)
    return lh_errbuf_set(err, LH_EINVAL, "learner ranks: the operations table is incomplete or of version %d, not %d",
                         ops ? ops->version : -1, LH_LEARNER_COMM_OPS_VERSION);
  if (size < 1 || rank < 0 || rank >= size)
    return lh_errbuf_set(err, LH_EINVAL, "learner ranks: rank %d of %d is not a rank", rank, size);
  lh_learner_comm *c = calloc(1, sizeof *c);
  if (!c) return lh_errbuf_set(err, LH_ENOMEM, "learner ranks: out of memory");
  c->ops = *ops, c->ctx = ctx, c->rank = rank, c->size = size;
  *out = c;
  return 0;
}

int lh_learner_comm_open_single(lh_learner_comm **out, lh_errbuf *err) {
  return lh_learner_comm_new(&single_ops, NULL, 0, 1, out, err);
}

/* Whether a launcher started this process as one rank of a job. */
static const char *launcher_env(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i]) && *getenv(vars[i])) return vars[i];
  return NULL;
}

int lh_learner_comm_open(lh_learner_comm **out, lh_errbuf *err) {
  const char *var = launcher_env();
  if (!var) return lh_learner_comm_open_single(out, err);
#ifdef LH_HAVE_MPI
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL out");
  *out = NULL;
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  /* FUNNELED: the learner has a service thread too (learner/service.c),
   * but only the training thread, the one that initialised MPI, calls it. */
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "learner ranks: MPI_Init failed (%s is set, so mpirun started this "
                         "process; run without mpirun for one learner)", var);
  /* Errors come back as codes, so a failing collective is reported. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = lh_learner_comm_new(&mpi_ops, NULL, rank, size, out, err);
  if (rc) MPI_Finalize();
  return rc;
#else
  if (out) *out = NULL;
  return lh_errbuf_set(err, LH_ELEARNER_COMM,
                       "learner ranks: %s is set (started by mpirun) but this build has no MPI; install OpenMPI "
                       "(libopenmpi-dev) and rebuild, or run one learner without mpirun", var);
#endif
}

void lh_learner_comm_close(lh_learner_comm *c) {
  if (!c) return;
  c->ops.close(c->ctx);
  free(c);
}

int lh_learner_comm_rank(const lh_learner_comm *c) { return c ? c->rank : 0; }
int lh_learner_comm_size(const lh_learner_comm *c) { return c ? c->size : 1; }
const char *lh_learner_comm_name(const lh_learner_comm *c) { return c ? c->ops.name : "single"; }
double lh_learner_comm_backend_ms(const lh_learner_comm *c) { return c ? (double)c->backend_ns / 1e6 : 0.0; }

static int failed(lh_errbuf *err, int rc, const lh_learner_comm *c, const char *what, size_t n) {
  return lh_errbuf_set(err, rc, "learner ranks: %s of %zu on rank %d of %d (%s) failed: %s", what, n, c->rank,
                       c->size, c->ops.name, lh_strerror(rc));
}

int lh_learner_comm_allreduce_f32(lh_learner_comm *c, float *buf, size_t n, lh_learner_comm_op op, lh_errbuf *err) {
  if (!c || c->size == 1 || n == 0) return 0;
  if (!buf) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL buffer");
  int rc = c->ops.allreduce_f32(c->ctx, buf, n, op);
  return rc ? failed(err, rc, c, "allreduce of floats", n) : 0;
}

int lh_learner_comm_allreduce_f64(lh_learner_comm *c, double *buf, size_t n, lh_learner_comm_op op,
                                  lh_errbuf *err) {
  if (!c || c->size == 1 || n == 0) return 0;
  if (!buf) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL buffer");
  int rc = c->ops.allreduce_f64(c->ctx, buf, n, op);
  return rc ? failed(err, rc, c, "allreduce of doubles", n) : 0;
}

int lh_learner_comm_allreduce_backend_f32(lh_learner_comm *c, float *buf, size_t n, lh_errbuf *err) {
  if (!c || c->size == 1 || n == 0) return 0;
  if (!buf) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL buffer");
  int64_t t0 = lh_now_ns();
  int rc = c->ops.allreduce_backend_f32(c->ctx, buf, n);
  c->backend_ns += lh_now_ns() - t0;
  return rc ? failed(err, rc, c, "gradient allreduce", n) : 0;
}

int lh_learner_comm_bcast(lh_learner_comm *c, void *buf, size_t bytes, int root, lh_errbuf *err) {
  if (!c || c->size == 1 || bytes == 0) return 0;
  if (!buf || root < 0 || root >= c->size)
    return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL buffer or root %d not a rank of %d", root, c->size);
  int rc = c->ops.bcast(c->ctx, buf, bytes, root);
  return rc ? failed(err, rc, c, "broadcast of bytes", bytes) : 0;
}

int lh_learner_comm_barrier(lh_learner_comm *c, lh_errbuf *err) {
  if (!c || c->size == 1) return 0;
  int rc = c->ops.barrier(c->ctx);
  return rc ? failed(err, rc, c, "barrier", 0) : 0;
}

int lh_learner_comm_same_u64(lh_learner_comm *c, uint64_t value, int *same, lh_errbuf *err) {
  if (!same) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL same");
  *same = 1;
  if (!c || c->size == 1) return 0;
  /* Halves of 32 bits are exact in a double; MIN and MAX agree only when
   * every rank holds the same value. */
  double lo[2] = {(double)(value & 0xffffffffu), (double)(value >> 32)};
  double hi[2] = {lo[0], lo[1]};
  LH_TRY(lh_learner_comm_allreduce_f64(c, lo, 2, LH_LEARNER_COMM_MIN, err));
  LH_TRY(lh_learner_comm_allreduce_f64(c, hi, 2, LH_LEARNER_COMM_MAX, err));
  *same = lo[0] == hi[0] && lo[1] == hi[1];
  return 0;
}

int lh_learner_comm_split(lh_learner_comm *c, int color, int key, lh_learner_comm **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL out");
  *out = NULL;
  if (!c) return lh_learner_comm_open_single(out, err);
  if (!c->ops.split)
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "learner ranks: the %s transport cannot split its ranks", c->ops.name);
  void *ctx = NULL;
  int rank = 0, size = 1;
  int rc = c->ops.split(c->ctx, color, key, &ctx, &rank, &size);
  if (rc) return failed(err, rc, c, "split of ranks", (size_t)color);
  rc = lh_learner_comm_new(&c->ops, ctx, rank, size, out, err);
  if (rc) c->ops.close(ctx);
  return rc;
}

int lh_learner_comm_has_alltoall(const lh_learner_comm *c) {
  return !c || (c->ops.alltoall && c->ops.alltoallv);
}

int lh_learner_comm_alltoall(lh_learner_comm *c, const void *send, void *recv, size_t bytes, lh_errbuf *err) {
  if (!lh_learner_comm_has_alltoall(c))
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "learner ranks: the %s transport has no all-to-all", c->ops.name);
  if (!c) return bytes && send != recv ? (memcpy(recv, send, bytes), 0) : 0;
  int rc = c->ops.alltoall(c->ctx, send, recv, bytes);
  return rc ? failed(err, rc, c, "all-to-all of bytes", bytes) : 0;
}

int lh_learner_comm_alltoallv(lh_learner_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                              void *recv, const size_t *rcounts, const size_t *rdispls, lh_errbuf *err) {
  if (!c) return single_alltoallv(NULL, send, scounts, sdispls, recv, rcounts, rdispls);
  if (!lh_learner_comm_has_alltoall(c))
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "learner ranks: the %s transport has no all-to-all", c->ops.name);
  int rc = c->ops.alltoallv(c->ctx, send, scounts, sdispls, recv, rcounts, rdispls);
  return rc ? failed(err, rc, c, "all-to-all of pieces", scounts[0]) : 0;
}

void lh_learner_comm_abort(lh_learner_comm *c, int code) {
  if (c && c->size > 1) c->ops.abort(c->ctx, code);
}

/* ---- per-rank names ------------------------------------------------------ */

int lh_learner_rank_endpoint(const char *endpoint, int rank, char *out, lh_errbuf *err) {
  if (!endpoint || !out || rank < 0) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL endpoint or out");
  if (strlen(endpoint) >= LH_LEARNER_TEXT_BYTES)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "learner ranks: endpoint '%.64s...' is too long", endpoint);
  const char *colon = strrchr(endpoint, ':');
  if (rank == 0 || (colon && !strcmp(colon, ":*"))) {
    snprintf(out, LH_LEARNER_TEXT_BYTES, "%s", endpoint);
    return 0;
  }
  /* An ipc:// path (or inproc:// name) has no port: each rank takes its
   * own name beside it. */
  if (!strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9)) {
    int n = snprintf(out, LH_LEARNER_TEXT_BYTES, "%s.rank%d", endpoint, rank);
    if (n < 0 || n >= LH_LEARNER_TEXT_BYTES)
      return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "learner ranks: endpoint '%.64s...' is too long", endpoint);
    return 0;
  }
  uint64_t port = 0;
  if (!colon || lh_parse_u64(colon + 1, &port) || port < 1 || port + 10u * (uint64_t)rank > 65535)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "learner ranks: [learner] ingest_endpoint '%s' needs a numeric port (tcp://host:port) with "
                         "room for rank %d at port + %d",
                         endpoint, rank, 10 * rank);
  snprintf(out, LH_LEARNER_TEXT_BYTES, "%.*s:%ld", (int)(colon - endpoint), endpoint, (long)port + 10L * rank);
  return 0;
}

int lh_learner_rank_db(const char *db, int rank, char *out, lh_errbuf *err) {
  if (!db || !out || rank < 0) return lh_errbuf_set(err, LH_EINVAL, "learner ranks: NULL db or out");
  int n = rank == 0 ? snprintf(out, LH_LEARNER_TEXT_BYTES, "%s", db)
                    : snprintf(out, LH_LEARNER_TEXT_BYTES, "%s.rank%d", db, rank);
  if (n < 0 || n >= LH_LEARNER_TEXT_BYTES)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE, "learner ranks: [learner] db '%.64s...' is too long", db);
  return 0;
}

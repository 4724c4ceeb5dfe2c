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

static const lh_learner_comm_ops single_ops = {
    .version = LH_LEARNER_COMM_OPS_VERSION, .name = "single",
    .allreduce_f32 = single_allreduce_f32, .allreduce_f64 = single_allreduce_f64,
    .allreduce_backend_f32 = single_allreduce_backend_f32, .bcast = single_bcast, .barrier = single_barrier,
    .abort = single_abort, .close = single_close};

/* ---- MPI ------------------------------------------------------------------ */
#ifdef LH_HAVE_MPI

/* MPI counts are int: large buffers go in pieces. */
#define MPI_PIECE ((size_t)1 << 30)

static MPI_Op mpi_op(lh_learner_comm_op op) {
  return op == LH_LEARNER_COMM_MAX ? MPI_MAX : op == LH_LEARNER_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static int mpi_allreduce(void *buf, size_t n, size_t elem, MPI_Datatype type, lh_learner_comm_op op) {
  for (size_t at = 0; at < n; at += MPI_PIECE) {
    size_t k = n - at < MPI_PIECE ? n - at : MPI_PIECE;
    if (MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * elem, (int)k, type, mpi_op(op), MPI_COMM_WORLD) !=
        MPI_SUCCESS)
      return LH_ELEARNER_COMM;
  }
  return 0;
}

static int mpi_allreduce_f32(void *ctx, float *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx;
  return mpi_allreduce(buf, n, sizeof(float), MPI_FLOAT, op);
}
static int mpi_allreduce_f64(void *ctx, double *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx;
  return mpi_allreduce(buf, n, sizeof(double), MPI_DOUBLE, op);
}
/* The CPU backend's memory is host memory. */
static int mpi_allreduce_backend_f32(void *ctx, float *buf, size_t n) {
  (void)ctx;
  return mpi_allreduce(buf, n, sizeof(float), MPI_FLOAT, LH_LEARNER_COMM_SUM);
}
static int mpi_bcast(void *ctx, void *buf, size_t bytes, int root) {
  (void)ctx;
  for (size_t at = 0; at < bytes; at += MPI_PIECE) {
    size_t k = bytes - at < MPI_PIECE ? bytes - at : MPI_PIECE;
    if (MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS) return LH_ELEARNER_COMM;
  }
  return 0;
}
static int mpi_barrier(void *ctx) {
  (void)ctx;
  return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : LH_ELEARNER_COMM;
}
static void mpi_abort(void *ctx, int code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, code);
}
static void mpi_close(void *ctx) {
  (void)ctx;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

static const lh_learner_comm_ops mpi_ops = {
    .version = LH_LEARNER_COMM_OPS_VERSION, .name = "mpi",
    .allreduce_f32 = mpi_allreduce_f32, .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_backend_f32 = mpi_allreduce_backend_f32, .bcast = mpi_bcast, .barrier = mpi_barrier,
    .abort = mpi_abort, .close = mpi_close};
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

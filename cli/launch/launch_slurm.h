/* cli: a fleet launched through Slurm (docs/operations.md "Slurm", ARCHITECTURE.md §1).
 *
 * Two halves. On the submit host, `longhaul launch FLEET.ini --slurm`
 * writes a batch script (lh_launch_slurm_write_script) whose body runs
 * `longhaul launch FLEET.ini --engine slurm` inside the allocation, and
 * hands it to sbatch. Inside the allocation the launcher supervises as it
 * does on one machine, but each child is a job step: the learner
 * `srun --ntasks=M --mpi=pmix ... longhaul learner` (rank r on the
 * allocation's node r mod K, K = min(M, nodes)), each actor
 * `srun --ntasks=1 --overlap ... longhaul actor`; a dead child is restarted
 * as a new step. srun ends a step on SIGTERM but forwards SIGUSR1 to its
 * tasks, so that is what the ordered shutdown sends.
 *
 * Endpoints. The learner ranks bind the addresses of their nodes (IPv4,
 * from NodeAddr): rank r entry r of [learner] ingest_endpoints, at the port
 * of ingest_endpoint + 10 r; rank 0 the weights endpoints at their ports.
 * The actors of rank r connect to entry r, and to rank 0's node for the
 * weights. These values reach every child as --set overrides after the
 * launcher's own (lh_launch_slurm_sets). */
#ifndef LH_CLI_LAUNCH_SLURM_H
#define LH_CLI_LAUNCH_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define LH_SLURM_HOST_BYTES 256
#define LH_SLURM_MAX_HOSTS 64        /* = LH_LAUNCH_MAX_LEARNERS: K <= M */
#define LH_SLURM_MAX_STEP_OPTIONS 16
#define LH_SLURM_OPTION_BYTES 1024
#define LH_SLURM_SETS 6              /* --set overrides the engine adds to each child */

/* What the slurm engine knows inside an allocation (zero: not on). */
typedef struct {
  int on;
  int endpoints;     /* the children get the allocation's endpoints (not for learners = 0) */
  char job_id[32];
  uint32_t n_hosts;  /* K: the first K nodes of the allocation hold the learner ranks */
  char hosts[LH_SLURM_MAX_HOSTS][LH_SLURM_HOST_BYTES];  /* their node names */
  char addrs[LH_SLURM_MAX_HOSTS][LH_SLURM_HOST_BYTES];  /* their NodeAddr: what actors connect to */
  uint32_t n_step_options;
  char step_options[LH_SLURM_OPTION_BYTES];           /* [fleet] slurm_step_options, split in place */
  char *step_option[LH_SLURM_MAX_STEP_OPTIONS];
  /* The endpoint overrides every child gets (section.key=value):
   * learner.ingest_endpoints, then the weights endpoints of both sides and
   * the actors' learner_endpoint (rank 0's node). */
  char set_ingest[64 + LH_SLURM_MAX_HOSTS * 48];
  char set[LH_SLURM_SETS - 1][LH_SLURM_HOST_BYTES + 64];
  /* The arguments of the srun command being built (one child at a time). */
  char arg_ntasks[32], arg_nodes[32], arg_mpi[80], arg_name[96];
  char arg_nodelist[LH_SLURM_MAX_HOSTS * LH_SLURM_HOST_BYTES / 4];
} lh_launch_slurm;

#endif

/* cli: a fleet launched through Slurm (README "Slurm", ARCHITECTURE.md §1).
 *
 * Two halves. On the submit host, `longhaul launch FLEET.ini --slurm`
 * writes a batch script (lh_launch_slurm_write_script) whose body runs
 * `longhaul launch FLEET.ini --engine slurm` inside the allocation, and
 * hands it to sbatch. Inside the allocation the launcher supervises as it
 * does on one machine, but each child is a job step: the learner
 * `srun --ntasks=M --mpi=pmix ... longhaul learner` (rank r on the
 * allocation's node r mod K, K = min(M, nodes)), each actor
 * `srun --ntasks=1 --overlap ... longhaul actor`; a dead actor is restarted
 * as a new step. srun forwards the launcher's signals to its tasks.
 *
 * Endpoints. The learner ranks bind tcp://\*:PORT (PORT from [learner],
 * rank r at + 10 r); the actors bound to rank r connect to the address of
 * rank r's node, and to rank 0's for the weights. These values reach the
 * children through configs derived from the user's
 * (cli/launch_slurm_ini.c): LOG_DIR/slurm/learner.ini and
 * LOG_DIR/slurm/actors-rank<r>.ini, the user's text with those keys
 * replaced. */
#ifndef LH_CLI_LAUNCH_SLURM_H
#define LH_CLI_LAUNCH_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define LH_SLURM_HOST_BYTES 256
#define LH_SLURM_MAX_HOSTS 64        /* = LH_LAUNCH_MAX_LEARNERS: K <= M */
#define LH_SLURM_MAX_STEP_OPTIONS 16
#define LH_SLURM_OPTION_BYTES 1024

/* What the slurm engine knows inside an allocation (zero: not on). */
typedef struct {
  int on;
  char job_id[32];
  uint32_t n_hosts;  /* K: the first K nodes of the allocation hold the learner ranks */
  char hosts[LH_SLURM_MAX_HOSTS][LH_SLURM_HOST_BYTES];  /* their node names */
  char addrs[LH_SLURM_MAX_HOSTS][LH_SLURM_HOST_BYTES];  /* their NodeAddr: what actors connect to */
  char dir[512];     /* LOG_DIR/slurm: the derived configs */
  uint32_t n_step_options;
  char step_options[LH_SLURM_OPTION_BYTES];           /* [fleet] slurm_step_options, split in place */
  char *step_option[LH_SLURM_MAX_STEP_OPTIONS];
  /* The arguments of the srun command being built (one child at a time). */
  char arg_ntasks[32], arg_nodes[32], arg_mpi[80], arg_name[96], arg_config[512 + 64];
  char arg_nodelist[LH_SLURM_MAX_HOSTS * LH_SLURM_HOST_BYTES / 4];
} lh_launch_slurm;

/* Rewrites the INI text src into out: for each (section, key, value) of
 * the three arrays, the key's line in that section gets the value; a key
 * the section lacks is added at the section's end, a missing section at the
 * end of the file. LH_EINVAL when out is too small or a line too long. */
int lh_launch_slurm_ini_rewrite(const char *src, const char *const *sections, const char *const *keys,
                                const char *const *values, size_t n, char *out, size_t out_bytes, lh_errbuf *err);

#endif

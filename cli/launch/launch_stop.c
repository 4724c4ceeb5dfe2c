/* cli: how long the launcher waits for the learner to stop (launch.h,
 * lh_launch_learner_stop_ms). A learner asked to stop finishes the step
 * it is in and writes a final checkpoint; a step on long episodes can take
 * longer than [fleet] stop_timeout_ms, and a SIGKILL then would end it in
 * the middle of a step or of the checkpoint's write. So the wait is the
 * longer of stop_timeout_ms and LH_LAUNCH_STOP_STEP_FACTOR times the
 * longest of the learner's last 8 steps, as the store records them
 * (train_steps.step_ms: measured, never what a process says of itself).
 * The whole shutdown's length follows from it, which a Slurm job needs to
 * begin its stop in time before its limit (lh_launch_shutdown_ms). An
 * actor's wait follows from its own flush_timeout_ms the same way
 * (lh_launch_actor_stop_ms). */
#include <stdlib.h>

#include "cli/launch/launch.h"
#include "store/store.h"

static int on_ms(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) *(double *)ctx = strtod(values[0], NULL);
  return 1;
}

uint64_t lh_launch_learner_stop_ms(const lh_launch_fleet *f, double *step_ms) {
  double longest = 0;
  lh_store *s = lh_launch_fleet_store(f); /* every rank's, as one */
  if (s) {
    lh_errbuf e;
    if (lh_store_sql(s,
                     "SELECT max(step_ms) FROM (SELECT step_ms FROM train_steps ORDER BY step DESC LIMIT 8)",
                     on_ms, &longest, NULL, &e) != 0)
      longest = 0;
    lh_store_close(s);
  }
  if (!(longest > 0) || longest > 1e9) longest = 0;
  if (step_ms) *step_ms = longest;
  uint64_t wait = (uint64_t)(longest * LH_LAUNCH_STOP_STEP_FACTOR);
  return wait > f->fleet.stop_timeout_ms ? wait : f->fleet.stop_timeout_ms;
}

uint64_t lh_launch_actor_stop_ms(const lh_launch_fleet *f) {
  uint64_t flush = f->actor_flush_ms + LH_LAUNCH_ACTOR_STOP_MARGIN_MS;
  return flush > f->fleet.stop_timeout_ms ? flush : f->fleet.stop_timeout_ms;
}

uint64_t lh_launch_shutdown_ms(const lh_launch_fleet *f, uint64_t learner_ms) {
  return lh_launch_actor_stop_ms(f) + f->fleet.stop_timeout_ms + learner_ms + (uint64_t)LH_LAUNCH_STOP_MARGIN_S * 1000;
}

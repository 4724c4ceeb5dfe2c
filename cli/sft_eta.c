/* cli sft: the expected end of training under --target (sft_eta.h). */
#include <math.h>

#include "cli/sft_eta.h"

uint64_t lh_cli_sft_expected_end(uint64_t steps, uint64_t eval_every, double target, uint64_t done,
                                 const double ev_step[2], const double ev_rate[2], int evals) {
  if (!(target > 0) || evals < 2 || !eval_every || !(ev_rate[1] > ev_rate[0]) || !(ev_step[1] > ev_step[0]))
    return steps;
  if (ev_rate[1] >= target) return done < steps ? done : steps;
  double slope = (ev_rate[1] - ev_rate[0]) / (ev_step[1] - ev_step[0]);
  double at = ev_step[1] + (target - ev_rate[1]) / slope;
  if (!(at < (double)steps)) return steps;
  uint64_t next = (done / eval_every + 1) * eval_every;
  uint64_t end = ((uint64_t)ceil(at) + eval_every - 1) / eval_every * eval_every;
  if (end < next) end = next;
  return end < steps ? end : steps;
}

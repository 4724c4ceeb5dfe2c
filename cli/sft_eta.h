/* cli sft: where training is expected to end, for its time left. Private
 * to cli/. */
#ifndef LH_CLI_SFT_ETA_H
#define LH_CLI_SFT_ETA_H

#include <stdint.h>

/* The step `longhaul sft` is expected to end at after done steps: steps,
 * or with a target success rate (target > 0, evaluations every
 * eval_every steps), once two evaluations (ev_step, ev_rate: the second
 * to last and the last; evals: how many ran) show the rate rising, where
 * the line through them reaches the target, rounded up to an evaluation:
 * never before the next one, never past steps. */
uint64_t lh_cli_sft_expected_end(uint64_t steps, uint64_t eval_every, double target, uint64_t done,
                                 const double ev_step[2], const double ev_rate[2], int evals);

#endif

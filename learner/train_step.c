/* learner: one training step, phase by phase: take a batch and read its
 * episodes back (train_batch.c), compute the gradient and move the model
 * (train_optim.c), count what was trained and write the train_steps row
 * (train_rows.c), and let the stage advance (train_stage.c). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "learner/train_internal.h"

/* Test hooks, read at every step after it took its batch: with
 * LH_LEARNER_TEST_STEP_GATE naming a file, the step waits until that file
 * is gone (a test holds a step open for as long as it needs, with no
 * clock); LH_LEARNER_TEST_STEP_DELAY_MS adds that much to every step's own
 * time (counted in its step_ms: a learner slower than its actors, for
 * back-pressure, or a long step for the launcher's stop timeout). */
static void test_step_delay(void) {
  const char *delay = getenv("LH_LEARNER_TEST_STEP_DELAY_MS");
  if (delay && atoi(delay) > 0) usleep((useconds_t)atoi(delay) * 1000u);
}

static void test_step_gate(void) {
  const char *gate = getenv("LH_LEARNER_TEST_STEP_GATE");
  if (!gate || !*gate || access(gate, F_OK) != 0) return;
  LH_INFO("train", "step gate: holding the step while %s exists", gate);
  while (access(gate, F_OK) == 0) usleep(2000);
}

/* One batch, if one is ready (*took = 1); *stepped = 1 when it trained. */
static int step_once(lh_learner_trainer *t, int *took, int *stepped, lh_learner_train_stats *stats,
                     lh_errbuf *err) {
  *took = 0;
  size_t n = 0;
  int multi = lh_learner_comm_size(t->comm) > 1;
  int ready = lh_learner_train_take_batch(t, multi, &n, err);
  if (ready <= 0) return ready;
  *took = 1;
  test_step_gate();
  int64_t t0 = lh_now_ns();
  test_step_delay();
  lh_learner_step_batch b;
  LH_TRY(lh_learner_step_batch_alloc(&b, n, err));
  int rc = lh_learner_train_read_batch(t, &b, err);
  size_t N = 0, positions = 0, E = 0;
  for (size_t i = 0; i < b.m; i++)
    N += b.eps[i]->sampled, positions += b.eps[i]->n, E += b.eps[i]->sampled > 0;
  /* The loss is a mean over the sampled tokens of every rank's batch (or
   * over its episodes: loss_norm). A rank with nothing to train on still
   * takes part (its gradient is 0). */
  double g[2] = {(double)N, (double)E};
  if (!rc && multi) rc = lh_learner_comm_allreduce_f64(t->comm, g, 2, LH_LEARNER_COMM_SUM, err);
  double gN = g[0];
  lh_learner_train_stats st = {.step = t->step, .episodes = b.m, .positions = positions};
  double lr = lh_learner_lr_at(t->cfg.lr, t->cfg.warmup_steps, t->cfg.total_steps, t->step);
  st.lr = lr;
  double reduce_ms0 = lh_learner_comm_backend_ms(t->comm);
  lh_model_expert_traffic x0, x1;
  lh_model_expert_traffic_get(t->m, &x0);
  if (!rc && gN > 0) rc = lh_learner_train_optimize(t, &b, gN, g[1], multi, lr, &st, err);
  lh_model_expert_traffic_get(t->m, &x1);
  st.exchange_ms = (double)(x1.transport_ns - x0.transport_ns) / 1e6;
  st.serve_ms = (double)(x1.serve_ns - x0.serve_ns) / 1e6;
  st.exchange_bytes = x1.bytes - x0.bytes;
  lh_learner_step_counts c = {0};
  if (!rc) rc = lh_learner_train_count(t, &b, multi && gN > 0, st.zero_adv_tokens, &c, err);
  lh_learner_step_batch_free(&b);
  if (rc) return rc;
  size_t m = (size_t)c.trained;
  if (multi && gN > 0) st.episodes = m;
  st.allreduce_ms = lh_learner_comm_backend_ms(t->comm) - reduce_ms0;
  st.reward_mean = m ? c.rsum / (double)m : 0;
  st.success_rate = m ? c.succ / (double)m : 0;
  st.flat_groups = (uint64_t)c.flat_groups;
  st.zero_adv_tokens = (size_t)c.zero_adv_tokens;
  if (gN == 0) return 0;  /* nothing to train on (on any rank): no step */
  t->flat_groups_counted = c.flat_now;
  t->step++;
  st.version = t->version;
  int64_t row_ns = lh_now_ns();
  st.step_ms = (double)(row_ns - t0) / 1e6;
  /* Busy: this step's time over the wall time since the previous row. */
  double since_ms = (double)(row_ns - t->last_row_ns) / 1e6;
  st.busy_frac = since_ms > 0 ? fmin(1.0, st.step_ms / since_ms) : 1.0;
  t->last_row_ns = row_ns;
  lh_learner_train_forget(t);
  LH_TRY(lh_learner_train_write_row(t, &st, c.dropped_stale, err));
  LH_TRY(lh_learner_train_stage_after(t, &st, &c, err));
  if (stats) *stats = st;
  *stepped = 1;
  return 0;
}

int lh_learner_trainer_step(lh_learner_trainer *t, int *stepped, lh_learner_train_stats *stats, lh_errbuf *err) {
  int local = 0, took = 1;
  if (!stepped) stepped = &local;
  *stepped = 0;
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  /* Batches whose episodes all went stale (or did not join) are passed
   * over, so a backlog drains without a step each. */
  while (took && !*stepped) LH_TRY(step_once(t, &took, stepped, stats, err));
  return 0;
}

/* actors: the figures an actor's heartbeat carries. */
#include "actors/internal.h"

void lh_actors_meter_init(lh_actors_meter *m, int64_t now_ms) {
  if (!m) return;
  *m = (lh_actors_meter){.window_start_ms = now_ms};
}

void lh_actors_meter_tokens(lh_actors_meter *m, uint64_t n) {
  if (!m) return;
  m->tokens += n;
  m->window_tokens += n;
}

void lh_actors_meter_episode_done(lh_actors_meter *m) {
  if (!m) return;
  m->episodes++;
  m->window_episodes++;
}

void lh_actors_meter_heartbeat(lh_actors_meter *m, int64_t now_ms, uint64_t policy_version,
                               uint32_t outbox_depth, uint32_t open_episodes, double policy_lag,
                               Longhaul__Heartbeat *hb) {
  if (!m || !hb) return;
  double seconds = (double)(now_ms - m->window_start_ms) / 1000.0;
  hb->tokens_per_s = seconds > 0 ? (double)m->window_tokens / seconds : 0.0;
  hb->episodes_per_s = seconds > 0 ? (double)m->window_episodes / seconds : 0.0;
  hb->episodes_done = m->episodes;
  hb->policy_version = policy_version;
  hb->outbox_depth = outbox_depth;
  hb->open_episodes = open_episodes;
  hb->policy_lag = policy_lag;
  m->window_tokens = m->window_episodes = 0;
  m->window_start_ms = now_ms;
}

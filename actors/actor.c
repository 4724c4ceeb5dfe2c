/* actors: the actor process's loop (ARCHITECTURE.md §1, §6).
 *
 * One thread: a runner step (B episodes, one decode step each), the
 * messages it made into the link (a full outbox keeps the one that did not
 * fit and pauses generation until acks make room), the link's traffic
 * (acks, resends, weights), new weights swapped into the live model
 * between steps (the episodes go on: partial rollouts), and a heartbeat
 * every heartbeat_ms. A stop request (a signal handler sets *stop) aborts
 * the open episodes, whose EpisodeEnds go out with the rest, and waits at
 * most flush_timeout_ms for the acks. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/internal.h"
#include "proto/wire.h"

static int64_t now_ms(void) { return lh_now_ns() / 1000000; }

typedef struct {
  Longhaul__Segment *seg;
  Longhaul__EpisodeEnd *end;
} pending;

/* Sends p; 1 when it went (or was dropped), 0 when the outbox is full. */
static int send_pending(lh_actors_link *link, pending *p, lh_actors_meter *meter, lh_errbuf *err) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  if (p->seg) env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = p->seg;
  else env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = p->end;
  int rc = lh_actors_link_send(link, &env, err);
  if (rc == LH_EACTORS_OUTBOX_FULL) return 0;
  if (rc < 0) return rc;
  if (p->end) lh_actors_meter_episode_done(meter);
  lh_actors_segment_free(p->seg);
  lh_actors_episode_end_free(p->end);
  p->seg = NULL;
  p->end = NULL;
  return 1;
}

/* Moves the runner's queue into the link until it is empty or the outbox
 * is full; returns 1 when everything went. */
static int flush_queue(lh_actors_runner *r, lh_actors_link *link, pending *p, lh_actors_meter *meter,
                       lh_errbuf *err) {
  for (;;) {
    if (!p->seg && !p->end && !lh_actors_runner_pop(r, &p->seg, &p->end)) return 1;
    int rc = send_pending(link, p, meter, err);
    if (rc <= 0) return rc;
  }
}

static int swap_weights(lh_model *model, lh_actors_link *link, lh_actors_runner *r, uint64_t *version,
                        lh_errbuf *err) {
  uint64_t v = 0;
  size_t n = 0;
  const uint8_t *bytes = lh_actors_link_weights(link, &v, &n);
  if (!bytes) return 0;
  lh_model *fresh = NULL;
  int64_t t0 = now_ms();
  int rc = lh_model_load_bytes(bytes, n, "weights from the learner", lh_model_backend(model), &fresh, err);
  if (rc == 0) rc = lh_model_copy_params(model, fresh, err);
  lh_model_free(fresh);
  if (rc < 0) return rc;
  *version = v;
  lh_actors_runner_set_version(r, v);
  lh_actors_link_set_version(link, v);
  lh_actors_stage stage;
  if (lh_actors_link_stage(link, &stage)) lh_actors_runner_set_stage(r, &stage);
  LH_INFO("actor", "weights swapped version=%llu bytes=%zu ms=%lld", (unsigned long long)v, n,
          (long long)(now_ms() - t0));
  return 1;
}

static int heartbeat(lh_actors_link *link, lh_actors_meter *meter, lh_actors_runner *r, uint64_t version,
                     lh_errbuf *err) {
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  hb.role = "actor";
  uint64_t announced = lh_actors_link_announced(link);
  double lag = announced > version ? (double)(announced - version) : 0.0;
  lh_actors_meter_heartbeat(meter, now_ms(), version, (uint32_t)lh_actors_link_unacked(link),
                            lh_actors_runner_open_episodes(r), lag, &hb);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT;
  env.heartbeat = &hb;
  return lh_actors_link_send(link, &env, err);
}

/* The actor's CURVE keys from [actor] curve_secret_key_file and
 * curve_server_key_file: both or neither (plain). */
static int load_curve(const lh_actors_config *a, lh_zsock_curve *curve, lh_errbuf *err) {
  memset(curve, 0, sizeof *curve);
  int has_secret = a->curve_secret_key_file[0] != 0, has_server = a->curve_server_key_file[0] != 0;
  if (!has_secret && !has_server) return 0;
  if (!has_secret || !has_server)
    return lh_errbuf_set(err, LH_EACTORS_CONFIG_VALUE, "[actor] curve_secret_key_file and curve_server_key_file "
                         "go together (CURVE needs this actor's secret key and the learner's public key)");
  lh_errbuf why;
  int rc = lh_zsock_key_read(a->curve_secret_key_file, 1, curve->secret, &why);
  if (rc) return lh_errbuf_set(err, rc, "[actor] curve_secret_key_file: %s", why.msg);
  rc = lh_zsock_key_read(a->curve_server_key_file, 0, curve->server_key, &why);
  return rc ? lh_errbuf_set(err, rc, "[actor] curve_server_key_file: %s", why.msg) : 0;
}

int lh_actors_config_check_keys(const lh_actors_config *cfg, lh_errbuf *err) {
  if (!cfg) return lh_errbuf_set(err, LH_EINVAL, "actor curve: NULL config");
  lh_zsock_curve curve;
  int rc = load_curve(cfg, &curve, err);
  memset(&curve, 0, sizeof curve);
  return rc;
}

/* The agent endpoint of [env] name = agent: actor i of a fleet serves on
 * the configured port + i (port 0: one the system picks). */
static int open_agent(const lh_actors_actor_config *cfg, const lh_actors_config *a, uint64_t salt,
                      lh_actors_agent **out, lh_errbuf *err) {
  char address[LH_ACTORS_ENDPOINT_BYTES + 16];
  snprintf(address, sizeof address, "%s", a->agent_address);
  char *colon = strrchr(address, ':');
  long port = colon ? strtol(colon + 1, NULL, 10) : 0;
  if (colon && port > 0) {
    if (port + (long)cfg->index > 65535)
      return lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_address = %s: actor %u would serve past port 65535",
                           a->agent_address, (unsigned)cfg->index);
    snprintf(colon + 1, sizeof address - (size_t)(colon + 1 - address), "%ld", port + (long)cfg->index);
  }
  lh_actors_agent_config ac = {.address = address,
                               .key_file = a->agent_key_file,
                               .max_episodes = (uint32_t)a->agent_max_episodes,
                               .timeout_ms = a->agent_timeout_ms,
                               .max_body_bytes = a->agent_max_body_bytes,
                               .group_size = (uint32_t)a->group_size,
                               .rows = (uint32_t)a->batch,
                               .temperature = a->temperature,
                               .top_p = a->top_p,
                               .max_tokens = (uint32_t)(a->max_context > UINT32_MAX ? UINT32_MAX : a->max_context),
                               .salt = salt};
  return lh_actors_agent_new(&ac, out, err);
}

int lh_actors_actor_run(const lh_actors_actor_config *cfg, lh_model *model, volatile sig_atomic_t *stop,
                        lh_actors_actor_stats *stats, lh_errbuf *err) {
  if (!cfg || !cfg->actor || !model) return lh_errbuf_set(err, LH_EINVAL, "actor: NULL config or model");
  const lh_actors_config *a = cfg->actor;
  const lh_model_config *mc = lh_model_get_config(model);
  uint64_t salt_parts[3] = {lh_hash64(cfg->name, strlen(cfg->name), 0), (uint64_t)lh_wall_ms(),
                            (uint64_t)lh_now_ns() ^ ((uint64_t)getpid() << 32)};
  uint64_t salt = lh_hash64(salt_parts, sizeof salt_parts, 0x6163746f72ull);
  lh_env_option opts[LH_ACTORS_ENV_OPTIONS];
  for (uint32_t i = 0; i < a->n_env_options; i++) opts[i] = (lh_env_option){a->env_keys[i], a->env_values[i]};
  lh_actors_runner_config rc_cfg = {.actor = cfg->name,
                                    .env = a->env_name,
                                    .env_options = opts,
                                    .n_env_options = a->n_env_options,
                                    .batch = (uint32_t)a->batch,
                                    .group_size = (uint32_t)a->group_size,
                                    .segment_tokens = (uint32_t)a->segment_tokens,
                                    .max_context = (uint32_t)(a->max_context > UINT32_MAX ? UINT32_MAX : a->max_context),
                                    .max_steps = (uint32_t)a->max_steps,
                                    .temperature = (float)a->temperature,
                                    .top_p = (float)a->top_p,
                                    .seed = a->seed + cfg->index * 0x9E3779B97F4A7C15ull,
                                    .id_salt = salt,
                                    .episodes = cfg->episodes,
                                    .record_routing = a->record_routing != 0,
                                    .state_interval = a->state_interval,
                                    .share_prefix = a->share_prefix != 0,
                                    .beyond_context = a->beyond_context != 0,
                                    .max_episode_tokens = a->max_episode_tokens,
                                    .stage_option = a->stage_option};
  lh_actors_link_config lc = {.name = cfg->name,
                              .ingest_endpoint = a->learner_endpoint,
                              .weights_pub_endpoint = a->weights_pub_endpoint,
                              .weights_endpoint = a->weights_endpoint,
                              .outbox_messages = a->outbox_messages,
                              .outbox_bytes = a->outbox_bytes,
                              .resend_timeout_ms = (int64_t)a->resend_timeout_ms,
                              .linger_ms = (int)(a->flush_timeout_ms < 2000 ? a->flush_timeout_ms : 2000),
                              .id_salt = salt,
                              .vocab = (uint32_t)mc->vocab,
                              .layers = (uint32_t)mc->layers,
                              .topk = (uint32_t)mc->topk,
                              .pid = (uint64_t)getpid(),
                              .run_id = cfg->run_id,
                              .weights_zstd = a->weights_zstd != 0};
  lh_actors_agent *agent = NULL;
  if (strcmp(a->env_name, LH_ACTORS_AGENT_ENV) == 0) {
    LH_TRY(open_agent(cfg, a, salt, &agent, err));
    rc_cfg.agent = agent;
  }
  lh_zsock_curve curve;
  int crc = load_curve(a, &curve, err);
  if (crc < 0) {
    lh_actors_agent_free(agent);
    return crc;
  }
  if (curve.secret[0]) lc.curve = &curve;
  void *ctx = zmq_ctx_new();
  if (!ctx) {
    lh_actors_agent_free(agent);
    return lh_errbuf_set(err, LH_EZMQ, "actor: zmq_ctx_new failed");
  }
  lh_env_hub *hub = NULL;
  lh_actors_runner *r = NULL;
  lh_actors_link *link = NULL;
  pending p = {0};
  int rc = lh_env_hub_new(ctx, &hub, err);
  lh_env_hub_set_stop(hub, stop);  /* env-server waits end when a stop is asked for */
  rc_cfg.hub = hub;
  if (rc == 0) rc = lh_actors_link_new(ctx, &lc, &link, err);
  if (rc == 0 && agent) lh_actors_link_set_wake_fd(link, lh_actors_agent_wake_fd(agent));
  if (rc == 0) rc = lh_actors_runner_new(model, &rc_cfg, &r, err);
  lh_actors_meter meter;
  lh_actors_meter_init(&meter, now_ms());
  uint64_t version = 0;
  int64_t next_hb = now_ms() + (int64_t)a->heartbeat_ms, paused_since = -1;
  uint64_t pauses = 0;
  int have_weights = 0;
  if (rc == 0)
    LH_INFO("actor", "started name=%s env=%s batch=%u episodes=%llu learner=%s run_id=%s", cfg->name, a->env_name,
            (unsigned)a->batch, (unsigned long long)cfg->episodes, a->learner_endpoint,
            cfg->run_id && *cfg->run_id ? cfg->run_id : "none");
  while (rc == 0 && !*stop && !lh_actors_runner_done(r)) {
    int all_sent = flush_queue(r, link, &p, &meter, err);
    if (all_sent < 0) {
      rc = all_sent;
      break;
    }
    int waiting = cfg->wait_for_weights && !have_weights;
    lh_actors_runner_set_window(r, lh_actors_link_window(link));
    if (all_sent && !waiting) {
      if (paused_since >= 0) paused_since = -1;
      int n = lh_actors_runner_step(r, err);
      if (n < 0) {
        rc = n;
        break;
      }
      lh_actors_meter_tokens(&meter, (uint64_t)n);
    } else if (!waiting && paused_since < 0) {
      paused_since = now_ms();
      pauses++;
      LH_DEBUG("actor", "outbox full: generation paused unacked=%zu", lh_actors_link_unacked(link));
    }
    /* Idle (paused, waiting, or no episode open: the window left no room
     * for a group, whatever its size): the poll waits for traffic, an Ack
     * that opens the window among it, instead of spinning. */
    int idle = !all_sent || waiting || lh_actors_runner_open_episodes(r) == 0 || lh_actors_runner_waiting(r);
    int got = lh_actors_link_poll(link, idle ? 20 : 0, err);
    lh_actors_agent_clear_wake(agent);  /* what woke the poll is in the table for the next step */
    if (got < 0) {
      rc = got;
      break;
    }
    if (got) {
      if ((rc = swap_weights(model, link, r, &version, err)) < 0) break;
      have_weights = 1;
    }
    rc = 0;
    if (now_ms() >= next_hb) {
      if ((rc = heartbeat(link, &meter, r, version, err)) < 0) break;
      next_hb = now_ms() + (int64_t)a->heartbeat_ms;
    }
  }
  /* Stopping: open episodes end as aborted, everything queued goes into
   * the outbox as room allows, and acks are awaited for a bounded time. */
  if (rc == 0 || *stop) {
    int stopped_by_signal = *stop != 0;
    if (r && stopped_by_signal) {
      lh_errbuf e = {0};
      if (lh_actors_runner_abort(r, "actor stopped", &e) < 0) LH_WARN("actor", "abort: %s", e.msg);
    }
    int64_t deadline = now_ms() + (int64_t)a->flush_timeout_ms;
    while (link && r && now_ms() < deadline) {
      int sent = flush_queue(r, link, &p, &meter, err);
      if (sent < 0) break;
      if (sent && lh_actors_link_unacked(link) == 0) break;
      if (lh_actors_link_poll(link, 20, err) < 0) break;
    }
    if (link && (lh_actors_link_unacked(link) || p.seg || p.end || lh_actors_runner_queued(r)))
      LH_WARN("actor", "stopping with messages not acked unacked=%zu queued=%zu",
              lh_actors_link_unacked(link), lh_actors_runner_queued(r) + (p.seg || p.end));
    if (rc == 0 && !stopped_by_signal && link && lh_actors_link_unacked(link))
      rc = lh_errbuf_set(err, LH_ETIMEOUT, "actor: %zu messages still unacked after flush_timeout_ms=%llu",
                         lh_actors_link_unacked(link), (unsigned long long)a->flush_timeout_ms);
    else if (stopped_by_signal)
      rc = 0;
  }
  if (stats) {
    stats->episodes = lh_actors_runner_finished(r);
    stats->tokens = meter.tokens;
    stats->resends = lh_actors_link_resends(link);
    stats->unacked = lh_actors_link_unacked(link);
    stats->version = version;
    stats->pauses = pauses;
  }
  uint64_t shared = 0, shared_tokens = 0;
  lh_actors_runner_shared(r, &shared, &shared_tokens);
  LH_INFO("actor",
          "stopped name=%s episodes=%llu tokens=%llu resends=%llu acked=%llu unacked=%zu rejected=%llu "
          "pauses=%llu shared_prefixes=%llu shared_prefix_tokens=%llu",
          cfg->name, (unsigned long long)lh_actors_runner_finished(r), (unsigned long long)meter.tokens,
          (unsigned long long)lh_actors_link_resends(link), (unsigned long long)lh_actors_link_acked(link),
          lh_actors_link_unacked(link), (unsigned long long)lh_actors_link_rejected(link), (unsigned long long)pauses, (unsigned long long)shared,
          (unsigned long long)shared_tokens);
  lh_actors_segment_free(p.seg);
  lh_actors_episode_end_free(p.end);
  if (agent) {
    uint64_t rewrites = 0, refused = 0, turns = 0;
    lh_actors_agent_counts(agent, &rewrites, &refused, &turns);
    LH_INFO("actor", "agent endpoint turns=%llu rewrites=%llu refused=%llu", (unsigned long long)turns,
            (unsigned long long)rewrites, (unsigned long long)refused);
  }
  lh_actors_runner_free(r);
  lh_actors_agent_free(agent);
  lh_env_hub_free(hub);
  lh_actors_link_free(link);
  zmq_ctx_term(ctx);
  return rc;
}

/* learner: the service thread (learner.h says what it holds and why).
 *
 * One loop: poll the ingest ROUTER and the weights ROUTER together, run an
 * ingest round or serve requests as they come, publish a version the
 * training thread handed over, and once a second sweep idle episodes and
 * re-announce. Its sockets and its store connection are used by this
 * thread alone (ZeroMQ sockets and SQLite connections opened NOMUTEX are
 * not to be shared); what crosses threads sits behind one mutex. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "learner/internal.h"

#define SERVICE_POLL_MS 10
#define SERVICE_SWEEP_NS 1000000000ll      /* idle-episode sweep, once a second */
#define SERVICE_ANNOUNCE_NS 1000000000ll   /* re-announce for late subscribers */
/* Ids of episodes stored since the trainer last took them. A trainer busy
 * in a long step may fall behind; past this bound the ids are dropped and
 * the trainer told to rescan the store, so memory stays bounded. */
#define SERVICE_HINT_CAP 65536
#define SERVICE_DRAIN_ROUNDS 100           /* rounds stored and acked at stop */

/* A version the training thread handed over, with what its announcement
 * and its policy_versions row say. */
typedef struct {
  void *bytes;
  size_t n;
  uint64_t version, step;
  uint32_t stage, max_context;
  float long_frac;
} pending_version;

struct lh_learner_service {
  lh_learner_config cfg;
  char run_id[LH_STORE_NAME_BYTES];  /* policy_versions.run_id; "" none */
  lh_store *store;
  lh_learner_ingest *ingest;
  lh_learner_publisher *pub;
  pthread_t thread;
  int started;

  pthread_mutex_t mu;
  pthread_cond_t cv;  /* hint ids arrived, or the thread ended */
  int stop, failed, done;
  lh_errbuf fail;
  uint64_t *hint;
  size_t n_hint;
  int hint_lost;
  pending_version pending;  /* handed over, not yet published (bytes NULL: none) */
  uint64_t backlog, backlog_cap;  /* the trainer's (lh_learner_service_set_backlog) */
  uint64_t untaken_ends, ends_seen;  /* ends stored and not yet taken; the ingest's count at the last round */
  /* Ends the trainer took that its backlog did not count yet: they stay
   * untrained until its next lh_learner_service_set_backlog. Forgotten at
   * the take, they left the cap that many episodes short for as long as
   * the trainer took to offer them (a step's length), and the ingest
   * granted that room as credit, then took it back from actors that had
   * already opened episodes with it. */
  uint64_t taken_ends;
  int hold_sent;
  uint64_t max_bytes;
  int max_bytes_changed;
  uint64_t version;  /* the trainer's newest version (lh_learner_service_set_version), for retention */
  int has_version;
  lh_learner_service_counts counts;
  /* What retirement did since its last log line (retire_rows), and when
   * that line was. */
  lh_store_retired retired_since;
  uint64_t thinned_since;
  int64_t retired_logged_ns;
  int64_t started_ms;  /* wall time of lh_learner_service_start */
};

int lh_learner_service_new(const lh_learner_service_config *c, lh_learner_service **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!c || !c->zmq_ctx || !c->cfg || !out) return lh_errbuf_set(err, LH_EINVAL, "service: NULL argument");
  lh_learner_service *s = calloc(1, sizeof *s);
  if (!s) return lh_errbuf_set(err, LH_ENOMEM, "service: out of memory");
  s->hint = malloc(SERVICE_HINT_CAP * sizeof *s->hint);
  if (!s->hint) {
    free(s);
    return lh_errbuf_set(err, LH_ENOMEM, "service: out of memory");
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->cfg = *c->cfg;
  s->max_bytes = s->cfg.max_db_bytes;
  *out = s;
  /* Its own connection: the training thread's reads and writes go through
   * another, and WAL lets this one commit while the other reads. The file
   * was checked and migrated by the trainer's open, so no second check. */
  lh_store_options so;
  lh_store_options_default(&so);
  so.max_bytes = s->cfg.max_db_bytes;
  so.quick_check = 0;
  LH_TRY(lh_store_open_with(s->cfg.db, &so, &s->store, err));
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lim.max_message_bytes = s->cfg.max_message_bytes;
  s->ingest = lh_learner_ingest_new_curve(c->zmq_ctx, s->cfg.ingest_endpoint, s->store, &lim, c->curve, c->zap,
                                          lh_learner_config_ingest_peers(&s->cfg), err);
  if (!s->ingest) return err ? err->code : LH_ELEARNER_INGEST_SOCKET;
  if (c->limits) lh_learner_ingest_set_model_limits(s->ingest, c->limits);
  lh_learner_ingest_set_abort_after(s->ingest, s->cfg.abort_after_ms);
  if (c->run_id) {
    snprintf(s->run_id, sizeof s->run_id, "%s", c->run_id);
    LH_TRY(lh_learner_ingest_set_run(s->ingest, c->run_id, err));
  }
  if (!c->serve_weights) return 0;
  s->pub = lh_learner_publisher_new_curve(c->zmq_ctx, s->cfg.weights_pub_endpoint, s->cfg.weights_endpoint,
                                          c->chunk_bytes, c->curve, err);
  return s->pub ? 0 : err ? err->code : LH_ELEARNER_PUBLISH;
}

/* Publishes the version handed over, if any, and records its row. */
static int publish_pending(lh_learner_service *s, lh_errbuf *err) {
  pthread_mutex_lock(&s->mu);
  pending_version p = s->pending;
  s->pending.bytes = NULL;
  pthread_mutex_unlock(&s->mu);
  if (!p.bytes) return 0;
  int rc = s->pub ? lh_learner_publisher_set(s->pub, p.version, p.bytes, p.n, p.stage, p.max_context, p.long_frac, err)
                  : 0;
  free(p.bytes);
  if (rc) return rc;
  lh_store_policy_version v = {.version = p.version, .run_id = s->run_id[0] ? s->run_id : NULL, .step = p.step, .checksum = lh_learner_publisher_checksum(s->pub),
                               .total_bytes = p.n, .stage_index = p.stage, .max_context = p.max_context};
  lh_errbuf pe;
  /* The version is out; only its row waits for room in the store. */
  if (lh_store_put_policy_version(s->store, &v, NULL, &pe))
    LH_WARN("learner", "policy_versions row of version %llu not stored: %s", (unsigned long long)p.version, pe.msg);
  pthread_mutex_lock(&s->mu);
  s->counts.versions++;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* Hands the round's stored episode ids to the trainer. */
static void share_hint(lh_learner_service *s) {
  size_t n = 0;
  const uint64_t *ids = lh_learner_ingest_touched(s->ingest, &n);
  uint64_t ends = lh_learner_ingest_get_counts(s->ingest)->ends_stored;
  pthread_mutex_lock(&s->mu);
  s->untaken_ends += ends - s->ends_seen;
  s->ends_seen = ends;
  for (size_t i = 0; i < n; i++) {
    if (s->n_hint == SERVICE_HINT_CAP) {
      s->hint_lost = 1;
      s->counts.hint_overflows++;
      break;
    }
    s->hint[s->n_hint++] = ids[i];
  }
  if (n) pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* actor_heartbeats rows kept when the store is near its cap. */
#define LEARNER_HEARTBEATS_AT_CAP 4096
/* Retirement at the cap (retire_rows): episodes per transaction, and
 * transactions per sweep at most. */
#define RETIRE_BATCH 1024
#define RETIRE_BATCHES 16
/* An episode ended this long ago (or abort_after_ms, when shorter) may be
 * retired: an actor resends a message whose ack was lost within its
 * resend_timeout_ms (5 s by default) of reaching the learner. Nothing is
 * retired in the first RETIRE_AFTER_MS after the service started: the
 * acks a learner before it lost come again once the actors reach this one. */
#define RETIRE_AFTER_MS 10000
/* The train steps whose rows stay whole at the cap; older ones are
 * thinned in groups of RETIRE_STEP_GROUP steps, of RETIRE_STEP_GROUP^2
 * further back, and so on (store.h, lh_store_thin_step_rows). */
#define RETIRE_KEEP_STEPS 256
#define RETIRE_STEP_GROUP 8
/* At most one line about retirement per this many ns (the counts since). */
#define RETIRE_LOG_NS 10000000000ll

/* Still near the cap once old payloads are gone: the rows that describe
 * them fill it. The rows of old train steps are thinned (store.h,
 * lh_store_thin_step_rows), then old episodes that can no longer be trained are
 * retired (store.h, lh_store_retire_episodes), a batch at a time, until
 * the pages in use fall below 80% of the cap or none is left to retire.
 * *used is updated. Logged at most once per RETIRE_LOG_NS. */
static void retire_rows(lh_learner_service *s, uint64_t cap, uint64_t *used) {
  lh_errbuf e;
  uint64_t thinned = 0;
  if (lh_store_thin_step_rows(s->store, RETIRE_KEEP_STEPS, RETIRE_STEP_GROUP, &thinned, &e))
    LH_WARN("learner", "the rows of old train steps not thinned at the cap: %s", e.msg);
  s->thinned_since += thinned;
  uint64_t after_ms = s->cfg.abort_after_ms < RETIRE_AFTER_MS ? s->cfg.abort_after_ms : RETIRE_AFTER_MS;
  int64_t now_ms = lh_wall_ms(), ended_before = now_ms - (int64_t)after_ms;
  int settled = now_ms - s->started_ms >= RETIRE_AFTER_MS;
  lh_store_retired sum = {0};
  for (int i = 0; settled && i < RETIRE_BATCHES && *used >= cap / 10 * 8; i++) {
    lh_store_retired r;
    if (lh_store_retire_episodes(s->store, ended_before, RETIRE_BATCH, &r, &e)) {
      LH_WARN("learner", "retirement failed: %s", e.msg);
      break;
    }
    sum.episodes += r.episodes, sum.segments += r.segments, sum.reward_terms += r.reward_terms;
    sum.leaders_kept = r.leaders_kept;
    if (lh_store_used_bytes(s->store, used, &e) || r.episodes == 0) break;
  }
  pthread_mutex_lock(&s->mu);
  s->counts.retired_episodes += sum.episodes;
  s->counts.retired_segments += sum.segments;
  uint64_t total = s->counts.retired_episodes;
  pthread_mutex_unlock(&s->mu);
  lh_store_retired *since = &s->retired_since;
  since->episodes += sum.episodes, since->segments += sum.segments, since->reward_terms += sum.reward_terms;
  since->leaders_kept = sum.leaders_kept;
  int64_t now = lh_now_ns();
  if ((!since->episodes && !s->thinned_since) || (s->retired_logged_ns && now - s->retired_logged_ns < RETIRE_LOG_NS))
    return;
  LH_INFO("learner",
          "retention retired episodes=%llu segments=%llu reward_terms=%llu step_rows=%llu leaders_kept=%llu "
          "since_s=%.0f retired_total=%llu retire_after_ms=%llu used=%llu cap=%llu",
          (unsigned long long)since->episodes, (unsigned long long)since->segments,
          (unsigned long long)since->reward_terms, (unsigned long long)s->thinned_since,
          (unsigned long long)since->leaders_kept,
          s->retired_logged_ns ? (double)(now - s->retired_logged_ns) / 1e9 : 0.0, (unsigned long long)total,
          (unsigned long long)after_ms, (unsigned long long)*used, (unsigned long long)cap);
  memset(since, 0, sizeof *since);
  s->thinned_since = 0;
  s->retired_logged_ns = now;
}

/* Retention (learner.h, retain_versions): near the cap, old payloads go,
 * so a full store does not stay full. The versions kept cover every
 * episode the trainer may still admit. */
static void retain(lh_learner_service *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t cap = s->max_bytes, used = 0, newest = s->version;
  int has_version = s->has_version;
  pthread_mutex_unlock(&s->mu);
  lh_errbuf e;
  if (!cap || !has_version || lh_store_used_bytes(s->store, &used, &e) || used < cap / 10 * 9) return;
  /* Heartbeats first: a peer sending them under many names fills the
   * store with rows no payload retention frees. The newest few thousand
   * keep the fleet's status. */
  uint64_t hb_deleted = 0;
  if (lh_store_prune_heartbeats(s->store, LEARNER_HEARTBEATS_AT_CAP, &hb_deleted, &e))
    LH_WARN("learner", "heartbeats not pruned at the cap: %s", e.msg);
  else if (hb_deleted)
    LH_INFO("learner", "retention pruned heartbeats=%llu kept=%d (the store is near its cap)",
            (unsigned long long)hb_deleted, LEARNER_HEARTBEATS_AT_CAP);
  uint64_t keep = s->cfg.max_policy_lag + 2;
  if (s->cfg.retain_versions > keep) keep = s->cfg.retain_versions;
  uint64_t segments = 0, bytes = 0, after = used;
  if (lh_store_retain_versions(s->store, newest, keep, &segments, &bytes, &e)) {
    LH_WARN("learner", "retention failed: %s", e.msg);
    return;
  }
  lh_store_used_bytes(s->store, &after, &e);
  pthread_mutex_lock(&s->mu);
  s->counts.retained_segments += segments;
  pthread_mutex_unlock(&s->mu);
  if (after >= cap / 10 * 9) retire_rows(s, cap, &after);
  /* Once per sweep at most, and only when it did something or cannot. */
  if (segments || after >= cap)
    LH_INFO("learner", "retention keep_versions=%llu dropped_segments=%llu dropped_bytes=%llu used=%llu cap=%llu%s",
            (unsigned long long)keep, (unsigned long long)segments, (unsigned long long)bytes,
            (unsigned long long)after, (unsigned long long)cap,
            after >= cap ? " (still full: what stays fills the cap: the payloads of the kept versions, the rows of "
                           "the episodes not retired yet (running, trainable, or ended in the last seconds) and the "
                           "rows of the newest train steps; raise max_db_bytes)"
                         : "");
}

static void sweep(lh_learner_service *s) {
  uint64_t aborted = 0;
  lh_errbuf ae;
  /* abort_after_ms is at most a year ([learner] config), so the cutoff
   * cannot wrap */
  if (lh_store_abort_idle_episodes(s->store, lh_wall_ms() - (int64_t)s->cfg.abort_after_ms,
                                   "no segment for abort_after_ms: its actor is gone", &aborted, &ae))
    LH_WARN("learner", "idle episodes not aborted: %s", ae.msg);
  else if (aborted)
    LH_INFO("learner", "aborted idle episodes=%llu abort_after_ms=%llu", (unsigned long long)aborted,
            (unsigned long long)s->cfg.abort_after_ms);
  pthread_mutex_lock(&s->mu);
  s->counts.aborted += aborted;
  pthread_mutex_unlock(&s->mu);
}

/* The settings the trainer changed since the last turn. */
static void apply_settings(lh_learner_service *s) {
  pthread_mutex_lock(&s->mu);
  /* The fleet may keep open what the cap leaves after the untrained
   * episodes: the trainer's backlog, the ends it has not taken yet and
   * those it took but has not counted yet (the ingest shares it out as
   * credit, learner/peers.c). */
  int64_t untrained = (int64_t)(s->backlog + s->untaken_ends + s->taken_ends);
  int64_t budget = (int64_t)s->backlog_cap - untrained;
  int64_t cap = (int64_t)s->backlog_cap;
  int hold = budget < (int64_t)s->cfg.group_size;
  int changed = s->max_bytes_changed;
  s->counts.untaken_ends = s->untaken_ends;
  uint64_t max_bytes = s->max_bytes;
  s->max_bytes_changed = 0;
  s->counts.hold = hold;
  pthread_mutex_unlock(&s->mu);
  if (cap) lh_learner_ingest_set_backlog(s->ingest, cap, untrained, s->cfg.group_size);
  if (hold != s->hold_sent) {
    LH_DEBUG("learner", "back-pressure hold=%d budget=%lld", hold, (long long)budget);
    s->hold_sent = hold;
  }
  if (changed) lh_store_set_max_bytes(s->store, max_bytes);
}

static int turn(lh_learner_service *s, int timeout_ms, size_t *handled, lh_errbuf *err) {
  zmq_pollitem_t items[2] = {{lh_learner_ingest_socket(s->ingest), 0, ZMQ_POLLIN, 0},
                             {lh_learner_publisher_socket(s->pub), 0, ZMQ_POLLIN, 0}};
  int pr = zmq_poll(items, s->pub ? 2 : 1, timeout_ms);
  if (pr < 0 && zmq_errno() != EINTR)
    return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "service: poll failed: %s", zmq_strerror(zmq_errno()));
  apply_settings(s);
  LH_TRY(lh_learner_ingest_tick(s->ingest, err));
  *handled = 0;
  if (pr > 0 && (items[0].revents & ZMQ_POLLIN)) {
    LH_TRY(lh_learner_ingest_poll(s->ingest, 0, handled, err));
    share_hint(s);
  }
  if (pr > 0 && s->pub && (items[1].revents & ZMQ_POLLIN)) {
    size_t served = 0;
    LH_TRY(lh_learner_publisher_poll(s->pub, 0, &served, err));
  }
  pthread_mutex_lock(&s->mu);
  s->counts.ingest = *lh_learner_ingest_get_counts(s->ingest);
  if (s->pub) s->counts.weights = *lh_learner_publisher_get_counts(s->pub);
  pthread_mutex_unlock(&s->mu);
  return publish_pending(s, err);
}

static void *service_main(void *arg) {
  lh_learner_service *s = arg;
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  int rc = 0;
  int64_t now = lh_now_ns(), last_sweep = now, last_announce = now;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop) break;
    size_t handled = 0;
    if ((rc = turn(s, SERVICE_POLL_MS, &handled, &err))) break;
    /* A lost write-ahead log (store.h, lh_store_wal_check) stops the
     * learner: the round that found it was answered retry, and nothing
     * more can be stored. Checked after every round (a commit checks it)
     * and once a second without one. */
    now = lh_now_ns();
    if (lh_store_wal_lost(s->store) || (now - last_sweep > SERVICE_SWEEP_NS && lh_store_wal_check(s->store, &err))) {
      rc = lh_store_wal_check(s->store, &err);
      break;
    }
    if (now - last_sweep > SERVICE_SWEEP_NS) {
      sweep(s);
      retain(s);
      last_sweep = now;
    }
    if (s->pub && now - last_announce > SERVICE_ANNOUNCE_NS) {
      if ((rc = lh_learner_publisher_announce(s->pub, &err))) break;
      last_announce = now;
    }
  }
  /* Whatever already arrived is stored and acked before the end, so the
   * actors need not resend it (not into a lost log: they resend it to the
   * next learner). */
  size_t handled = 1;
  for (int i = 0; !rc && i < SERVICE_DRAIN_ROUNDS && handled; i++) {
    rc = lh_learner_ingest_poll(s->ingest, 0, &handled, &err);
    share_hint(s);
  }
  pthread_mutex_lock(&s->mu);
  if (rc) s->failed = rc, s->fail = err;
  s->done = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int lh_learner_service_start(lh_learner_service *s, lh_errbuf *err) {
  if (!s || s->started) return lh_errbuf_set(err, LH_EINVAL, "service: NULL or already started");
  /* pthread_create is a full barrier: the sockets made on this thread
   * migrate to the new one safely (ZeroMQ's rule for moving a socket). */
  s->started_ms = lh_wall_ms();
  int prc = pthread_create(&s->thread, NULL, service_main, s);
  if (prc) return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "service: cannot start its thread: %s", strerror(prc));
  s->started = 1;
  return 0;
}

void lh_learner_service_free(lh_learner_service *s) {
  if (!s) return;
  if (s->started) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    LH_INFO("learner", "service stopped received=%llu stored=%llu duplicates=%llu acks_sent=%llu",
            (unsigned long long)s->counts.ingest.received, (unsigned long long)s->counts.ingest.stored,
            (unsigned long long)s->counts.ingest.duplicates, (unsigned long long)s->counts.ingest.acks_sent);
  }
  lh_learner_ingest_free(s->ingest);
  lh_learner_publisher_free(s->pub);
  lh_store_close(s->store);
  free(s->pending.bytes);
  free(s->hint);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

void lh_learner_service_take(lh_learner_service *s, uint64_t *ids, size_t cap, size_t *n, int *rescan,
                             int timeout_ms) {
  *n = 0, *rescan = 0;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  if (!s->n_hint && !s->hint_lost && !s->done && timeout_ms > 0) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)timeout_ms * 1000000l;
    until.tv_sec += until.tv_nsec / 1000000000l;
    until.tv_nsec %= 1000000000l;
    pthread_cond_timedwait(&s->cv, &s->mu, &until);
  }
  size_t k = s->n_hint < cap ? s->n_hint : cap;
  memcpy(ids, s->hint, k * sizeof *ids);
  memmove(s->hint, s->hint + k, (s->n_hint - k) * sizeof *s->hint);
  s->n_hint -= k;
  if (!s->n_hint) s->taken_ends += s->untaken_ends, s->untaken_ends = 0;  /* every stored end is the trainer's now */
  *n = k;
  *rescan = s->hint_lost;
  s->hint_lost = 0;
  pthread_mutex_unlock(&s->mu);
}

int lh_learner_service_publish(lh_learner_service *s, uint64_t version, uint64_t step, void *bytes, size_t n,
                               uint32_t stage_index, uint32_t max_context, float long_frac, lh_errbuf *err) {
  if (!s || !bytes || !n) {
    free(bytes);
    return lh_errbuf_set(err, LH_EINVAL, "service: NULL service or no bytes to publish");
  }
  pthread_mutex_lock(&s->mu);
  free(s->pending.bytes);  /* a newer version replaces one not yet out */
  s->pending = (pending_version){.bytes = bytes, .n = n, .version = version, .step = step, .stage = stage_index,
                                 .max_context = max_context, .long_frac = long_frac};
  pthread_mutex_unlock(&s->mu);
  if (!s->started) return publish_pending(s, err);  /* before the thread: publish on this one */
  return 0;
}

void lh_learner_service_set_version(lh_learner_service *s, uint64_t version) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->version = version;
  s->has_version = 1;
  pthread_mutex_unlock(&s->mu);
}

void lh_learner_service_set_backlog(lh_learner_service *s, uint64_t backlog, uint64_t cap) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->backlog = backlog, s->backlog_cap = cap;
  s->taken_ends = 0;  /* the backlog counts what the trainer took */
  pthread_mutex_unlock(&s->mu);
}

void lh_learner_service_set_max_bytes(lh_learner_service *s, uint64_t max_bytes) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->max_bytes = max_bytes, s->max_bytes_changed = 1;
  pthread_mutex_unlock(&s->mu);
}

void lh_learner_service_counts_get(lh_learner_service *s, lh_learner_service_counts *out) {
  memset(out, 0, sizeof *out);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  *out = s->counts;
  pthread_mutex_unlock(&s->mu);
}

int lh_learner_service_failed(lh_learner_service *s, lh_errbuf *err) {
  if (!s) return 0;
  pthread_mutex_lock(&s->mu);
  int rc = s->failed;
  if (rc && err) *err = s->fail;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

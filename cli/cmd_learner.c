/* longhaul learner: the learner process of DESIGN §1 (one rank). It binds
 * the ingest ROUTER and the weights PUB/ROUTER, stores what actors send,
 * trains on complete episodes, publishes each new version and checkpoints.
 * The parts are learner/'s; this file is the loop, the arguments and the
 * signals. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "learner/learner.h"

#define LEARNER_CHUNK_BYTES (1u << 20)
#define LEARNER_POLL_MS 20
/* A full scan of the store reads every ready row, so it runs at the start
 * and then rarely (for episodes made ready some other way); new episodes
 * come through the ingest's list of what it just stored. */
#define LEARNER_SCAN_NS 30000000000ll
#define LEARNER_ANNOUNCE_NS 1000000000ll  /* re-announce for late subscribers */
#define LEARNER_STATUS_NS 10000000000ll   /* status line */
#define LEARNER_ABORT_SWEEP_NS 1000000000ll  /* episodes of lost actors: checked once a second */

/* Set by SIGINT/SIGTERM; the loop stops at its next turn. The one piece of
 * process state a signal handler may touch. */
static volatile sig_atomic_t stop_requested = 0;

/* Set by SIGHUP: re-read [learner] max_db_bytes at the next turn. */
static volatile sig_atomic_t reload_requested = 0;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void on_hup(int sig) {
  (void)sig;
  reload_requested = 1;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: longhaul learner --config FILE [--init CKPT_DIR] [--resume] [--steps N]\n"
          "                        [--backend cpu|cuda]\n\n"
          "Runs the learner: binds [learner] ingest_endpoint (ROUTER, actors' segments\n"
          "and episode ends, acked once committed to the replay store [learner] db),\n"
          "weights_pub_endpoint (PUB, announcements) and weights_endpoint (ROUTER,\n"
          "weights in chunks); trains on complete episodes (PPO-clip, AdamW) and\n"
          "publishes every new version. A checkpoint goes to [learner] ckpt_dir every\n"
          "ckpt_every steps and at the end.\n"
          "  --init DIR   start from DIR/model.safetensors (e.g. written by `longhaul sft`)\n"
          "  --resume     continue from ckpt_dir/latest (model, optimizer, step, version,\n"
          "               ingest position); without one, start as if not given\n"
          "  --steps N    stop after N training steps (default: run until SIGINT/SIGTERM)\n"
          "  --backend B  cpu (default) or cuda (the GPU backend; without a GPU, an error)\n"
          "The [model] section gives a fresh model, [actor] temperature the sampling\n"
          "temperature the log-probabilities are compared at.\n"
          "SIGINT/SIGTERM: acks what is stored, writes a final checkpoint, exits 0.\n"
          "Several ranks: mpirun -n M longhaul learner ... (rank r binds the ingest port\n"
          "+ 10*r, or an ipc:// path + .rank<r>, and keeps the store db.rank<r>; rank 0\n"
          "serves the weights and writes checkpoints). SIGUSR1, which mpirun forwards to\n"
          "every rank, stops the job in order with exit 0 (after SIGTERM or SIGINT the\n"
          "ranks stop the same way but mpirun itself exits 1).\n"
          "SIGHUP: re-reads [learner] max_db_bytes (the store's cap; while the store is\n"
          "full or read-only, segments are answered ACK_RETRY and the actors resend).\n"
          "Exit codes: 0 done, 1 runtime error, 2 usage or config error.\n");
}

typedef struct {
  const char *config, *init, *backend;
  int resume;
  unsigned long long steps;
} args;

static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "--resume")) {
      a->resume = 1;
      continue;
    }
    if (strcmp(f, "--config") && strcmp(f, "--init") && strcmp(f, "--steps") && strcmp(f, "--backend")) {
      fprintf(stderr, "longhaul learner: unknown argument '%s' (see --help)\n", f);
      return -1;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "longhaul learner: %s needs a value\n", f);
      return -1;
    }
    const char *v = argv[++i];
    if (!strcmp(f, "--config")) a->config = v;
    else if (!strcmp(f, "--init")) a->init = v;
    else if (!strcmp(f, "--backend")) a->backend = v;
    else {
      char *end = NULL;
      errno = 0;
      a->steps = strtoull(v, &end, 10);
      if (v[0] == '-' || end == v || *end || errno || a->steps < 1) {
        fprintf(stderr, "longhaul learner: --steps '%s' is not an integer >= 1\n", v);
        return -1;
      }
    }
  }
  if (!a->config) {
    fprintf(stderr, "longhaul learner: --config FILE is required (see --help)\n");
    return -1;
  }
  return 0;
}

/* Everything the loop holds; freed in one place whatever failed. */
typedef struct {
  lh_learner_config cfg;
  lh_model *m;
  lh_store *store;
  lh_learner_trainer *trainer;
  void *zctx;
  lh_learner_ingest *ingest;
  lh_learner_publisher *pub;
  lh_zsock_curve curve;  /* the sockets' CURVE keys (plain when none) */
  lh_zsock_zap *zap;     /* the ZAP handler when CURVE is on */
  lh_learner_state st;
  uint64_t last_ckpt_step;
  /* The learner ranks (learner.h): rank 0 alone has the weights sockets,
   * writes checkpoints and the run's rows. Borrowed from lh_cmd_learner. */
  lh_learner_comm *comm;
  int rank, ranks;
  const lh_backend *be;  /* --backend's, closed after the model */
} learner;

static void learner_close(learner *L) {
  lh_learner_trainer_free(L->trainer);
  lh_learner_ingest_free(L->ingest);
  lh_learner_publisher_free(L->pub);
  lh_zsock_zap_stop(L->zap);
  lh_store_close(L->store);
  lh_model_free(L->m);
  lh_backend_close(L->be);
  if (L->zctx) zmq_ctx_term(L->zctx);
}

/* Serializes the live parameters and publishes them as the trainer's
 * version, recording it in the store. */
static int publish(learner *L, lh_errbuf *err) {
  if (!L->pub) return 0;  /* not rank 0 */
  unsigned char *bytes = NULL;
  size_t n = 0;
  int rc = lh_model_serialize(L->m, &bytes, &n);
  if (rc) return lh_errbuf_set(err, rc, "cannot serialize the weights: %s", lh_strerror(rc));
  uint64_t version = lh_learner_trainer_version(L->trainer);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(L->trainer, &st);
  int stage = lh_learner_stage_at(&L->cfg, st.step);
  uint32_t max_context = stage < 0 ? 0 : (uint32_t)L->cfg.stages[stage].max_context;
  float long_frac = stage < 0 ? 0.0f : (float)L->cfg.stages[stage].long_frac;
  rc = lh_learner_publisher_set(L->pub, version, bytes, n, stage < 0 ? 0 : (uint32_t)stage, max_context, long_frac,
                                err);
  if (!rc) {
    lh_store_policy_version v = {.version = version, .step = st.step, .checksum = lh_learner_publisher_checksum(L->pub),
                                 .total_bytes = n, .stage_index = stage < 0 ? 0 : (uint32_t)stage,
                                 .max_context = max_context};
    rc = lh_store_put_policy_version(L->store, &v, NULL, err);
    /* The version is published; only its row waits for room in the store. */
    if (rc == LH_ESTORE_FULL || rc == LH_ESTORE_READONLY) {
      LH_WARN("learner", "policy_versions row of version %llu not stored: %s", (unsigned long long)version,
              err->msg);
      rc = 0;
    }
  }
  free(bytes);
  return rc;
}

/* Collective with several ranks: every rank's done set goes to rank 0, the
 * ranks' weights are checked to be the same, and rank 0 writes. */
static int checkpoint(learner *L, lh_errbuf *err) {
  lh_learner_trainer_state(L->trainer, &L->st);
  char path[LH_LEARNER_TEXT_BYTES];
  if (L->ranks > 1) {
    uint64_t hash = 0;
    int same = 0;
    LH_TRY(lh_learner_trainer_gather_done(L->trainer, err));
    LH_TRY(lh_learner_trainer_params_hash(L->trainer, &hash, err));
    LH_TRY(lh_learner_comm_same_u64(L->comm, hash, &same, err));
    if (!same)
      return lh_errbuf_set(err, LH_ELEARNER_COMM, "the %d learner ranks hold different weights at step %llu", L->ranks,
                           (unsigned long long)L->st.step);
    if (L->rank != 0) {
      L->last_ckpt_step = L->st.step;
      return 0;
    }
  }
  int rc = lh_learner_ckpt_save(L->cfg.ckpt_dir, L->m, &L->st, L->trainer, path, err);
  if (!rc) {
    L->last_ckpt_step = L->st.step;
    LH_INFO("learner", "checkpoint path=%s step=%llu version=%llu", path, (unsigned long long)L->st.step,
            (unsigned long long)L->st.version);
  }
  return rc;
}

static int open_all(learner *L, const args *a, lh_errbuf *err, int *usage_error) {
  *usage_error = 1;
  LH_TRY(lh_learner_config_load(a->config, &L->cfg, err));
  lh_actors_config ac;
  LH_TRY(lh_actors_config_load(a->config, &ac, err));
  lh_model_config mc;
  LH_TRY(lh_model_config_parse_file(a->config, &mc, err));
  /* This rank's own ingest port and store file (learner.h, "learner ranks"). */
  char rank_text[LH_LEARNER_TEXT_BYTES];
  LH_TRY(lh_learner_rank_endpoint(L->cfg.ingest_endpoint, L->rank, rank_text, err));
  memcpy(L->cfg.ingest_endpoint, rank_text, sizeof rank_text);
  LH_TRY(lh_learner_rank_db(L->cfg.db, L->rank, rank_text, err));
  memcpy(L->cfg.db, rank_text, sizeof rank_text);
  int brc = lh_backend_by_name(a->backend ? a->backend : "cpu", &L->be, err);
  if (brc) {
    *usage_error = brc == LH_EKERNELS_UNKNOWN_BACKEND;  /* no GPU is a runtime error */
    return brc;
  }
  *usage_error = 0;
  const lh_backend *be = L->be;
  memset(&L->st, 0, sizeof L->st);
  lh_learner_adv_baseline_init(&L->st.baseline, L->cfg.baseline_decay);
  int resumed = 0;
  char from[LH_LEARNER_TEXT_BYTES] = "";
  if (a->resume && lh_learner_ckpt_exists(L->cfg.ckpt_dir)) {
    LH_TRY(lh_learner_ckpt_load_latest(L->cfg.ckpt_dir, be, &L->m, &L->st, from, err));
    resumed = 1;
    L->last_ckpt_step = L->st.step;
    LH_INFO("learner", "resumed ckpt_dir=%s step=%llu version=%llu ingest_position=%llu", L->cfg.ckpt_dir,
            (unsigned long long)L->st.step, (unsigned long long)L->st.version,
            (unsigned long long)L->st.ingest_position);
  } else if (a->init) {
    if (a->resume) LH_INFO("learner", "no checkpoint in ckpt_dir=%s: starting from --init", L->cfg.ckpt_dir);
    LH_TRY(lh_model_load(a->init, be, &L->m, err));
    LH_INFO("learner", "init from=%s", a->init);
  } else {
    if (a->resume) LH_INFO("learner", "no checkpoint in ckpt_dir=%s: starting fresh", L->cfg.ckpt_dir);
    LH_TRY(lh_model_new(&mc, be, &L->m, err));
  }
  lh_store_options so;
  lh_store_options_default(&so);
  so.max_bytes = L->cfg.max_db_bytes;
  LH_TRY(lh_store_open_with(L->cfg.db, &so, &L->store, err));
  LH_TRY(lh_learner_trainer_new(L->m, L->store, &L->cfg, (float)ac.temperature, resumed ? &L->st : NULL,
                                &L->trainer, err));
  LH_TRY(lh_learner_trainer_set_comm(L->trainer, L->comm, err));
  if (resumed) LH_TRY(lh_learner_trainer_load_done(L->trainer, from, L->st.ingest_position, err));
  if (L->ranks > 1) {
    /* Every rank starts from the same weights and step (the same
     * checkpoint, --init directory or [model] seed). */
    uint64_t hash = 0;
    int same_step = 0, same_weights = 0;
    LH_TRY(lh_learner_comm_same_u64(L->comm, L->st.step, &same_step, err));
    LH_TRY(lh_learner_trainer_params_hash(L->trainer, &hash, err));
    LH_TRY(lh_learner_comm_same_u64(L->comm, hash, &same_weights, err));
    if (!same_step || !same_weights)
      return lh_errbuf_set(err, LH_ELEARNER_COMM,
                           "the %d learner ranks start from different %s: give them the same ckpt_dir, --init "
                           "directory and [model] section",
                           L->ranks, same_step ? "weights" : "steps");
    LH_INFO("learner", "rank=%d ranks=%d comm=%s ingest=%s db=%s", L->rank, L->ranks,
            lh_learner_comm_name(L->comm), L->cfg.ingest_endpoint, L->cfg.db);
  }
  L->zctx = zmq_ctx_new();
  if (!L->zctx) return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "cannot create a ZeroMQ context");
  LH_TRY(lh_learner_curve_start(L->zctx, &L->cfg, &L->curve, &L->zap, err));
  L->ingest = lh_learner_ingest_new_curve(L->zctx, L->cfg.ingest_endpoint, L->store, NULL, &L->curve, err);
  if (!L->ingest) return err->code;
  if (L->rank != 0) return 0;  /* rank 0 alone serves the weights */
  L->pub = lh_learner_publisher_new_curve(L->zctx, L->cfg.weights_pub_endpoint, L->cfg.weights_endpoint,
                                          LEARNER_CHUNK_BYTES, &L->curve, err);
  if (!L->pub) return err->code;
  return publish(L, err);
}

static void status_line(learner *L, uint64_t steps_run, double busy) {
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(L->ingest);
  const lh_learner_admission_counts *ad = lh_learner_trainer_admission(L->trainer);
  const lh_learner_publisher_counts *pc = lh_learner_publisher_get_counts(L->pub);
  LH_INFO("learner",
          "status version=%llu steps_run=%llu received=%llu stored=%llu duplicates=%llu rejected=%llu "
          "retried=%llu hellos=%llu heartbeats=%llu admitted=%llu dropped_stale=%llu chunks_sent=%llu "
          "busy_fraction=%.3f",
          (unsigned long long)lh_learner_trainer_version(L->trainer), (unsigned long long)steps_run,
          (unsigned long long)c->received, (unsigned long long)c->stored, (unsigned long long)c->duplicates,
          (unsigned long long)c->rejected, (unsigned long long)c->retried, (unsigned long long)c->hellos,
          (unsigned long long)c->heartbeats, (unsigned long long)ad->admitted,
          (unsigned long long)ad->dropped_stale, (unsigned long long)(pc ? pc->chunks_sent : 0), busy);
}

/* Whether to stop now; with several ranks they stop at the same turn (a
 * signal reaches them at different moments), or a collective would wait
 * for a rank that left. */
static int agree_stop(learner *L, const args *a, uint64_t steps_run, int *stop, lh_errbuf *err) {
  double flag = stop_requested || (a->steps && steps_run >= a->steps);
  LH_TRY(lh_learner_comm_allreduce_f64(L->comm, &flag, 1, LH_LEARNER_COMM_MAX, err));
  *stop = flag > 0;
  return 0;
}

static int run_loop(learner *L, const args *a, lh_errbuf *err) {
  uint64_t steps_run = 0;
  int64_t now = lh_now_ns(), last_scan = 0, last_announce = now, last_status = now, start = now;
  double busy_ms = 0;  /* time in training steps: the busy fraction's numerator */
  int64_t last_abort_sweep = now;
  for (;;) {
    int stop = 0;
    LH_TRY(agree_stop(L, a, steps_run, &stop, err));
    if (stop) break;
    size_t handled = 0, served = 0;
    LH_TRY(lh_learner_ingest_poll(L->ingest, LEARNER_POLL_MS, &handled, err));
    if (L->pub) LH_TRY(lh_learner_publisher_poll(L->pub, 0, &served, err));
    now = lh_now_ns();
    if (!last_scan || now - last_scan > LEARNER_SCAN_NS) {
      LH_TRY(lh_learner_trainer_scan(L->trainer, NULL, err));
      last_scan = now;
    } else if (handled) {
      size_t n_touched = 0;
      const uint64_t *touched = lh_learner_ingest_touched(L->ingest, &n_touched);
      LH_TRY(lh_learner_trainer_offer(L->trainer, touched, n_touched, NULL, err));
    }
    int stepped = 0;
    lh_learner_train_stats s;
    LH_TRY(lh_learner_trainer_step(L->trainer, &stepped, &s, err));
    if (stepped) {
      steps_run++;
      busy_ms += s.step_ms;
      LH_INFO("learner",
              "step=%llu version=%llu loss=%.6g reward_mean=%.4g success_rate=%.3f episodes=%zu tokens=%zu "
              "lag_mean=%.3g logp_diff=%.3g grad_norm=%.4g lr=%.3g skipped=%d step_ms=%.1f",
              (unsigned long long)s.step, (unsigned long long)s.version, s.loss, s.reward_mean, s.success_rate,
              s.episodes, s.tokens, s.lag_mean, s.logp_diff, s.grad_norm, s.lr, s.skipped, s.step_ms);
      if (L->ranks > 1)
        LH_INFO("learner", "ranks=%d step=%llu allreduce_ms=%.2f step_ms=%.1f", L->ranks, (unsigned long long)s.step,
                s.allreduce_ms, s.step_ms);
      if (!s.skipped) LH_TRY(publish(L, err));
      if ((s.step + 1) % L->cfg.ckpt_every == 0) LH_TRY(checkpoint(L, err));
    }
    /* An actor that died mid-episode never ends it: running episodes with
     * no new segment for abort_after_ms end as aborted (never trained). */
    if (now - last_abort_sweep > LEARNER_ABORT_SWEEP_NS) {
      uint64_t aborted = 0;
      lh_errbuf ae;
      if (lh_store_abort_idle_episodes(L->store, lh_wall_ms() - (int64_t)L->cfg.abort_after_ms,
                                       "no segment for abort_after_ms: its actor is gone", &aborted, &ae))
        LH_WARN("learner", "idle episodes not aborted: %s", ae.msg);
      else if (aborted)
        LH_INFO("learner", "aborted idle episodes=%llu abort_after_ms=%llu", (unsigned long long)aborted,
                (unsigned long long)L->cfg.abort_after_ms);
      last_abort_sweep = now;
    }
    if (L->pub && now - last_announce > LEARNER_ANNOUNCE_NS) {
      LH_TRY(lh_learner_publisher_announce(L->pub, err));
      last_announce = now;
    }
    if (reload_requested) {
      reload_requested = 0;
      lh_learner_config fresh;
      lh_errbuf re;
      if (lh_learner_config_load(a->config, &fresh, &re)) {
        LH_WARN("learner", "SIGHUP: config not re-read, keeping max_db_bytes=%llu: %s",
                (unsigned long long)L->cfg.max_db_bytes, re.msg);
      } else {
        L->cfg.max_db_bytes = fresh.max_db_bytes;
        lh_store_set_max_bytes(L->store, fresh.max_db_bytes);
        LH_INFO("learner", "SIGHUP: re-read config=%s max_db_bytes=%llu", a->config,
                (unsigned long long)fresh.max_db_bytes);
      }
    }
    if (now - last_status > LEARNER_STATUS_NS) {
      status_line(L, steps_run, busy_ms / ((double)(now - start) / 1e6));
      last_status = now;
    }
  }
  /* Whatever already arrived is stored and acked before the end, so the
   * actors need not resend it. */
  size_t handled = 1;
  for (int i = 0; i < 100 && handled; i++) LH_TRY(lh_learner_ingest_poll(L->ingest, 0, &handled, err));
  now = lh_now_ns();
  status_line(L, steps_run, now > start ? busy_ms / ((double)(now - start) / 1e6) : 0.0);
  LH_INFO("learner", "stopping reason=%s", stop_requested ? "signal" : "steps done");
  return 0;
}

int lh_cmd_learner(int argc, char **argv) {
  if (lh_cli_wants_help(argc, argv)) {
    usage(stdout);
    return LH_EXIT_OK;
  }
  args a;
  if (parse_args(argc, argv, &a)) return LH_EXIT_USAGE;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);  /* what mpirun forwards to every rank */
  sa.sa_handler = on_hup;
  sigaction(SIGHUP, &sa, NULL);
  learner L;
  memset(&L, 0, sizeof L);
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  int usage_error = 0;
  /* One rank, or one of an mpirun job (MPI is started only then). */
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &err)) {
    fprintf(stderr, "longhaul learner: %s\n", err.msg);
    return LH_EXIT_RUNTIME;
  }
  L.comm = comm, L.rank = lh_learner_comm_rank(comm), L.ranks = lh_learner_comm_size(comm);
  int rc = open_all(&L, &a, &err, &usage_error);
  if (rc) {
    fprintf(stderr, "longhaul learner: %s%s\n", L.ranks > 1 ? "rank failed, ending the job: " : "", err.msg);
    learner_close(&L);
    /* The other ranks would wait for this one for ever. */
    lh_learner_comm_abort(comm, usage_error ? LH_EXIT_USAGE : LH_EXIT_RUNTIME);
    lh_learner_comm_close(comm);
    return usage_error ? LH_EXIT_USAGE : LH_EXIT_RUNTIME;
  }
  rc = run_loop(&L, &a, &err);
  if (rc) fprintf(stderr, "longhaul learner: %s\n", err.msg);
  if (rc && L.ranks > 1) {
    fprintf(stderr, "longhaul learner: rank %d of %d failed, ending the job (restart it with --resume)\n", L.rank,
            L.ranks);
    learner_close(&L);
    lh_learner_comm_abort(comm, LH_EXIT_RUNTIME);
    lh_learner_comm_close(comm);
    return LH_EXIT_RUNTIME;
  }
  /* A final checkpoint, unless this step already has one (rank 0 decides
   * for every rank: the checkpoint is collective). */
  lh_learner_state now;
  memset(&now, 0, sizeof now);
  lh_learner_trainer_state(L.trainer, &now);
  double want_final = now.step != L.last_ckpt_step || !lh_learner_ckpt_exists(L.cfg.ckpt_dir);
  if (L.ranks > 1 && lh_learner_comm_bcast(comm, &want_final, sizeof want_final, 0, &err)) {
    fprintf(stderr, "longhaul learner: %s\n", err.msg);
    rc = err.code;
    want_final = 0;
  }
  if (want_final > 0) {
    lh_errbuf ce;
    if (checkpoint(&L, &ce)) {
      fprintf(stderr, "longhaul learner: final checkpoint failed: %s\n", ce.msg);
      rc = rc ? rc : ce.code;
    }
  }
  learner_close(&L);
  if (rc && L.ranks > 1) lh_learner_comm_abort(comm, LH_EXIT_RUNTIME);
  lh_learner_comm_close(comm);
  return rc ? LH_EXIT_RUNTIME : LH_EXIT_OK;
}

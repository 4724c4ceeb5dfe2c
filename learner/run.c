/* learner: the learner process from top to bottom (learner.h, "the
 * learner process"; docs/learner.md, "The learner process").
 *
 * Two threads. The service thread (learner/service.c) owns every socket
 * and a store connection of its own: it stores and acks, serves weights
 * and sweeps idle episodes whatever training does. This thread trains:
 * it takes the ids the service stored, offers them to the trainer, steps
 * when a batch is ready, hands each new version to the service, writes
 * checkpoints, sets the back-pressure flag from the trainer's backlog, and
 * runs every collective of the learner ranks (MPI is called from this
 * thread only). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/run_id.h"
#include "learner/internal.h"

#define RUN_WAIT_MS 20          /* longest wait for stored ids when no batch is ready */
#define RUN_HINT_IDS 4096       /* ids taken per turn */
/* A full scan of the store reads every ready row, so it runs at the start
 * and then rarely (for episodes made ready some other way: the sweep, a
 * hint lost to its bound); new episodes come through the service's ids. */
#define RUN_SCAN_NS 30000000000ll
#define RUN_STATUS_NS 10000000000ll
/* A checkpoint that keeps failing (a full disk) is reported at once, then
 * at most this often, with the count. */
#define RUN_CKPT_LOG_NS 60000000000ll

/* Everything the process holds; freed in one place whatever failed. */
typedef struct {
  const lh_learner_run_args *a;
  lh_learner_config cfg;
  lh_model *m;
  lh_store *store;  /* the training thread's connection */
  lh_store_writer_lock *lock;  /* this store's one writing learner */
  lh_learner_trainer *trainer;
  void *zctx;
  lh_learner_service *svc;
  lh_zsock_curve curve;
  lh_zsock_zap *zap;
  lh_learner_state st;
  uint64_t last_ckpt_step;
  int have_ckpt;               /* last_ckpt_step holds: resumed from it, or written this run */
  int flat_warned;             /* the "every group flat, no step" warning was given */
  size_t ckpt_links_said;      /* symbolic links in ckpt_dir the last prune found and logged */
  uint64_t ckpt_failures;      /* periodic checkpoints not written, this run */
  uint64_t ckpt_failing;       /* of those, since the last one written */
  int64_t ckpt_fail_log_ns;    /* when the last failure was logged */
  int64_t gather_ns;           /* publishing: gathering the expert shards, this run */
  int ckpt_fail_logged_code;   /* and its error code */
  lh_learner_comm *comm;
  int rank, ranks;
  const lh_backend *be;
  uint64_t *ids;
  char run_id[LH_RUN_ID_BYTES];  /* the run this learner serves (choose_run) */
  int run_row;                   /* this rank's store has its runs row */
  int warned_no_states;          /* stored mode found no state to start from: said once */
} learner;

static void learner_close(learner *L) {
  /* The service first: it acks what arrived, using the store and context. */
  lh_learner_service_free(L->svc);
  lh_learner_trainer_free(L->trainer);
  lh_zsock_zap_stop(L->zap);
  lh_store_close(L->store);
  lh_store_unlock_writer(L->lock);
  lh_model_free(L->m);
  lh_backend_close(L->be);
  if (L->zctx) zmq_ctx_term(L->zctx);
  free(L->ids);
}

/* Back-pressure: the actors keep open no more than the cap leaves after the
 * untrained backlog (learner.h, max_backlog_episodes); set before every
 * step, which may be long, and after it. */
static void set_backlog(learner *L) {
  lh_learner_service_set_backlog(L->svc, lh_learner_trainer_backlog(L->trainer),
                                 lh_learner_trainer_backlog_cap(L->trainer));
}

/* Serializes the live parameters and hands them to the service as the
 * trainer's version (rank 0 only: the others serve no weights). */
static int publish(learner *L, lh_errbuf *err) {
  /* With experts across ranks, group 0 gathers its shards into rank 0's
   * bytes. */
  lh_learner_experts *x = lh_learner_trainer_experts(L->trainer);
  unsigned char *bytes = NULL;
  size_t n = 0;
  if (x) {
    int64_t t0 = lh_now_ns();
    LH_TRY(lh_learner_experts_gather_bytes(x, L->m, &bytes, &n, err));
    L->gather_ns += lh_now_ns() - t0;
  }
  lh_learner_service_set_version(L->svc, lh_learner_trainer_version(L->trainer));
  if (L->rank != 0) return 0;
  int rc = x ? 0 : lh_model_serialize(L->m, &bytes, &n);
  if (rc) return lh_errbuf_set(err, rc, "cannot serialize the weights: %s", lh_strerror(rc));
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(L->trainer, &st);
  const lh_learner_stage_state *g = lh_learner_trainer_stage(L->trainer);
  int stage = g ? (int)g->index : -1;
  uint32_t max_context = stage < 0 ? 0 : (uint32_t)L->cfg.stages[stage].max_context;
  float long_frac = stage < 0 ? 0.0f : (float)L->cfg.stages[stage].long_frac;
  return lh_learner_service_publish(L->svc, lh_learner_trainer_version(L->trainer), st.step, bytes, n,
                                    stage < 0 ? 0 : (uint32_t)stage, max_context, long_frac, err);
}

/* Collective with several ranks: every rank's done set goes to rank 0, the
 * ranks' weights are checked to be the same, rank 0 writes and tells every
 * rank whether it could, so that they agree on the outcome. A checkpoint
 * that could not be written (a full disk, an unwritable ckpt_dir) is
 * *written = 0 on every rank with the reason in *why, and the previous one
 * is still whole and named by `latest` (lh_learner_ckpt_save). After one
 * that was, rank 0 prunes ckpt_dir to [learner] keep_checkpoints. Returns
 * non-zero only for what must end the learner: a collective that failed,
 * ranks that hold different weights. */
static int checkpoint(learner *L, int *written, lh_errbuf *why, lh_errbuf *err) {
  *written = 0;
  lh_learner_trainer_state(L->trainer, &L->st);
  char path[LH_LEARNER_TEXT_BYTES];
  lh_learner_experts *x = NULL;
  if (L->ranks > 1) {
    int same = 0;
    LH_TRY(lh_learner_trainer_gather_done(L->trainer, err));
    LH_TRY(lh_learner_trainer_same_weights(L->trainer, &same, err));
    if (!same)
      return lh_errbuf_set(err, LH_ELEARNER_COMM, "the %d learner ranks hold different weights at step %llu", L->ranks,
                           (unsigned long long)L->st.step);
    /* A checkpoint is one whole model, whatever the expert groups: any
     * rank count and expert_parallel resume from it. Rank 0 writes it
     * while the other ranks of group 0 send their shards' pieces as it
     * writes them. */
    x = lh_learner_trainer_experts(L->trainer);
  }
  double ok = 1;
  if (L->rank == 0 || x) {
    int rc = lh_learner_ckpt_save_group(L->cfg.ckpt_dir, L->m, x, &L->st, L->trainer, path, why);
    if (rc == LH_ELEARNER_COMM) {
      *err = *why;
      return rc;
    }
    ok = rc == 0;
  }
  LH_TRY(lh_learner_comm_bcast(L->comm, &ok, sizeof ok, 0, err));
  if (!(ok > 0)) {
    if (L->rank != 0) lh_errbuf_set(why, LH_ELEARNER_CKPT, "rank 0 could not write the checkpoint (its log says why)");
    return 0;
  }
  *written = 1;
  L->last_ckpt_step = L->st.step;
  L->have_ckpt = 1;
  if (L->rank != 0) return 0;
  LH_INFO("learner", "checkpoint path=%s step=%llu version=%llu", path, (unsigned long long)L->st.step,
          (unsigned long long)L->st.version);
  size_t removed = 0, links = 0;
  lh_errbuf pe;
  int prc = lh_learner_ckpt_prune(L->cfg.ckpt_dir, L->cfg.keep_checkpoints, &removed, &links, &pe);
  /* Links are left alone; said once, and again when their count changes. */
  if (links != L->ckpt_links_said)
    LH_WARN("learner", "checkpoints: symbolic links in ckpt_dir left alone (never followed, never pruned) links=%zu "
            "ckpt_dir=%s", links, L->cfg.ckpt_dir);
  L->ckpt_links_said = links;
  if (prc)
    LH_WARN("learner", "checkpoints not pruned: removed=%zu keep=%llu error=%s", removed,
            (unsigned long long)L->cfg.keep_checkpoints, pe.msg);
  else if (removed)
    LH_INFO("learner", "checkpoints pruned removed=%zu keep=%llu", removed,
            (unsigned long long)L->cfg.keep_checkpoints);
  return 0;
}

/* The checkpoint of every ckpt_every-th step. One that cannot be written
 * does not end the learner: training goes on, the previous checkpoint
 * stays whole and `latest` names it, and the next boundary tries again
 * (a failed write is not retried sooner: what failed, a full disk, rarely
 * clears within a step). Failures are counted (ckpt_failures on the status
 * line) and logged at once; while they go on, one with another error code
 * than the last logged is logged too, the same error at most once per
 * RUN_CKPT_LOG_NS with the count so far. The first checkpoint written
 * after them says so. */
static int periodic_checkpoint(learner *L, lh_errbuf *err) {
  int written = 0;
  lh_errbuf why;
  memset(&why, 0, sizeof why);
  LH_TRY(checkpoint(L, &written, &why, err));
  if (written) {
    if (L->ckpt_failing)
      LH_INFO("learner", "checkpoints written again step=%llu failed_before=%llu", (unsigned long long)L->st.step,
              (unsigned long long)L->ckpt_failing);
    L->ckpt_failing = 0;
    L->ckpt_fail_log_ns = 0;
    return 0;
  }
  L->ckpt_failures++, L->ckpt_failing++;
  int64_t now = lh_now_ns();
  if (!L->ckpt_fail_log_ns || why.code != L->ckpt_fail_logged_code ||
      now - L->ckpt_fail_log_ns >= RUN_CKPT_LOG_NS) {
    LH_WARN("learner",
            "checkpoint failed, training goes on and the previous checkpoint stays: step=%llu next_try_step=%llu "
            "failures=%llu error=%s",
            (unsigned long long)L->st.step, (unsigned long long)(L->st.step + L->cfg.ckpt_every),
            (unsigned long long)L->ckpt_failures, why.msg);
    L->ckpt_fail_log_ns = now;
    L->ckpt_fail_logged_code = why.code;
  }
  return 0;
}

/* The checkpoint's [model] must be the config file's (keys the file leaves
 * out at their defaults; the seed aside, it only says where the weights
 * came from): the actors build their model from the file and could not
 * take the learner's weights. Refused at start (a config error), naming
 * every key that differs. */
static int same_model(learner *L, const lh_model_config *mc, const char *dir, lh_errbuf *err) {
  char diff[320];
  if (!lh_model_config_diff(mc, lh_model_get_config(L->m), "checkpoint", diff, sizeof diff)) return 0;
  return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                       "%s: [model] %s (checkpoint %s): give [model] the checkpoint's values, or start from "
                       "another checkpoint",
                       L->a->config, diff, dir);
}

/* The model from the checkpoint `latest` names (--resume), the --init
 * directory or [model]. --resume over a ckpt_dir it cannot go on from
 * (step-N folders but no readable `latest` naming one) and a checkpoint
 * whose [model] is not the file's are config errors (their codes say so). */
static int open_model(learner *L, const lh_model_config *mc, lh_errbuf *err, int *resumed, char *from) {
  const lh_learner_run_args *a = L->a;
  memset(&L->st, 0, sizeof L->st);
  lh_learner_adv_baseline_init(&L->st.baseline, L->cfg.baseline_decay);
  /* A rank of an expert group reads or makes its shard only. */
  int P = (int)L->cfg.expert_parallel, shards = P > 1 ? P : 1, shard = L->rank % shards;
  int found = 0;
  if (a->resume) LH_TRY(lh_learner_ckpt_resume_find(L->cfg.ckpt_dir, &found, err));
  if (found) {
    LH_TRY(lh_learner_ckpt_load_latest_shard(L->cfg.ckpt_dir, L->be, shard, shards, &L->m, &L->st, from, err));
    LH_TRY(same_model(L, mc, from, err));
    *resumed = 1;
    L->last_ckpt_step = L->st.step;
    L->have_ckpt = 1;
    LH_INFO("learner", "resumed ckpt_dir=%s step=%llu version=%llu ingest_position=%llu", L->cfg.ckpt_dir,
            (unsigned long long)L->st.step, (unsigned long long)L->st.version,
            (unsigned long long)L->st.ingest_position);
  } else if (a->init) {
    if (a->resume) LH_INFO("learner", "no checkpoint in ckpt_dir=%s: starting from --init", L->cfg.ckpt_dir);
    LH_TRY(lh_model_load_shard(a->init, L->be, shard, shards, &L->m, err));
    LH_TRY(same_model(L, mc, a->init, err));
    LH_INFO("learner", "init from=%s", a->init);
  } else {
    if (a->resume) LH_INFO("learner", "no checkpoint in ckpt_dir=%s: starting fresh", L->cfg.ckpt_dir);
    LH_TRY(lh_model_new_shard(mc, L->be, shard, shards, &L->m, err));
  }
  return 0;
}

/* With [learner] expert_parallel = P, what the rank's shard (open_model:
 * experts rank % P of every MoE layer, with their moments) holds: 1 / P of
 * the experts. */
static void log_shard(learner *L) {
  uint32_t P = L->cfg.expert_parallel;  /* checked against the ranks and experts at the start */
  const lh_model_config *mc = lh_model_get_config(L->m);
  lh_learner_expert_memory mem;
  lh_learner_experts_memory(L->m, &mem);
  /* Parameters, gradients and two moments: four floats each. */
  LH_INFO("learner", "rank=%d expert_parallel=%u group=%d shard=%d experts=%d..%d of %d expert_mib=%.1f "
          "other_mib=%.1f (parameters, gradients, AdamW moments)", L->rank, P,
          L->rank / (int)P, L->rank % (int)P, mem.first, mem.first + mem.count - 1, mc->experts,
          4.0 * (double)mem.expert_floats * sizeof(float) / 1048576.0,
          4.0 * (double)mem.other_floats * sizeof(float) / 1048576.0);
}

/* [learner] and [model] (when mc) of the command's document, or of the
 * file config when there is none; reread: the same file and overrides read
 * again (SIGHUP). */
static int read_config(const lh_ini_doc *given, int reread, const char *config, lh_learner_config *cfg,
                       lh_model_config *mc, lh_errbuf *err) {
  lh_ini_doc *fresh = NULL;
  if (given && reread) LH_TRY(lh_ini_doc_reopen(given, &fresh, err));
  if (!given) LH_TRY(lh_ini_doc_load(config, NULL, 0, &fresh, err));
  const lh_ini_doc *doc = fresh ? fresh : given;
  int rc = lh_learner_config_read(doc, cfg, err);
  if (!rc && mc) rc = lh_model_config_read(doc, mc, err);
  lh_ini_doc_free(fresh);
  return rc;
}

/* The run this learner serves (docs/operations.md, "Run ids"): --run-id; else, when
 * it resumed a checkpoint, the run of the newest learner row of rank 0's
 * store (a resumed run stays one run, whatever restarted it); else a new
 * one. Rank 0 decides and tells the others, so that every rank's rows and
 * acks name one run. Collective. */
static int choose_run(learner *L, int resumed, lh_errbuf *err) {
  char id[LH_RUN_ID_BYTES] = "";
  double how = 0;  /* 0 given, 1 resumed, 2 new: for the log line */
  if (L->a->run_id) {
    LH_TRY(lh_run_id_check(L->a->run_id, err));
    snprintf(id, sizeof id, "%s", L->a->run_id);
  } else if (L->rank == 0) {
    char last[LH_STORE_NAME_BYTES];
    int found = 0;
    lh_errbuf le;
    if (resumed && lh_store_latest_run(L->store, "learner", last, &found, &le) == 0 && found &&
        lh_run_id_check(last, &le) == 0) {
      memcpy(id, last, sizeof id - 1);  /* checked: at most LH_RUN_ID_MAX bytes */
      how = 1;
    } else {
      LH_TRY(lh_run_id_new(id, err));
      how = 2;
    }
  }
  LH_TRY(lh_learner_comm_bcast(L->comm, id, sizeof id, 0, err));
  LH_TRY(lh_learner_comm_bcast(L->comm, &how, sizeof how, 0, err));
  id[LH_RUN_ID_MAX] = 0;
  LH_TRY(lh_run_id_check(id, err));
  memcpy(L->run_id, id, sizeof id);
  LH_INFO("learner", "run run_id=%s from=%s rank=%d", L->run_id, how == 0 ? "--run-id" : how == 1 ? "resumed run" : "new",
          L->rank);
  return 0;
}

/* This rank's runs row: the command line, the config file's text, the
 * build, host and rank (lh_store_put_run; a resumed run's row counts one
 * more start). A row that cannot be written (a store at its cap) is
 * logged and the learner goes on: it is a record, not its work. */
static void record_run(learner *L) {
  char *text = NULL;
  size_t bytes = 0;
  lh_errbuf e;
  if (lh_read_text_file(L->a->config, LH_EIO, &text, &bytes, &e))
    LH_WARN("learner", "runs row without the config text: %s", e.msg);
  lh_store_run row = {.run_id = L->run_id, .command = L->a->command, .config = text, .kind = "learner",
                      .rank = L->rank};
  int inserted = 0;
  if (lh_store_put_run(L->store, &row, &inserted, &e))
    LH_WARN("learner", "runs row of run %s not stored: %s", L->run_id, e.msg);
  else
    L->run_row = 1;
  free(text);
}

/* The end of the run's row: ok, or error. */
static void end_run(learner *L, const char *outcome) {
  lh_errbuf e;
  if (L->store && L->run_row && lh_store_end_run(L->store, L->run_id, outcome, 0, &e))
    LH_WARN("learner", "runs row of run %s not ended: %s", L->run_id, e.msg);
  L->run_row = 0;
}

static int open_all(learner *L, lh_errbuf *err) {
  const lh_learner_run_args *a = L->a;
  lh_model_config mc;
  LH_TRY(read_config(a->doc, 0, a->config, &L->cfg, &mc, err));
  /* This rank's own ingest port and store file (learner.h, "learner ranks"). */
  char rank_text[LH_LEARNER_TEXT_BYTES];
  LH_TRY(lh_learner_ranks_check(&L->cfg, L->ranks, err));
  LH_TRY(lh_learner_expert_parallel_check(L->cfg.expert_parallel, L->ranks, mc.experts, err));
  LH_TRY(lh_learner_rank_ingest(&L->cfg, L->rank, rank_text, err));
  memcpy(L->cfg.ingest_endpoint, rank_text, sizeof rank_text);
  LH_TRY(lh_learner_rank_db(L->cfg.db, L->rank, rank_text, err));
  memcpy(L->cfg.db, rank_text, sizeof rank_text);
  /* One writing learner per store: a second one (another run in the same
   * folder, a stale restart) would re-train the first's episodes. Refused
   * naming the holder (LH_ESTORE_WRITER_LOCKED, a usage error: exit 2, so
   * that no supervisor retries it in a loop). */
  char holder[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(holder, sizeof holder, "longhaul learner rank %d --config %s", L->rank, a->config);
  LH_TRY(lh_store_lock_writer(L->cfg.db, holder, &L->lock, err));
  /* An unknown backend is a usage error, no GPU a runtime one (their codes). */
  LH_TRY(lh_backend_by_name(a->backend ? a->backend : "cpu", &L->be, err));
  /* Chosen, not inherited: the training thread's compute team is sized by
   * [learner] blas_threads (1 by default: the actors usually share the
   * machine); OpenBLAS runs single-threaded on each member (docs/model.md,
   * "CPU threads, exp and scratch"). The service thread does no compute. */
  if (L->be->set_threads) L->be->set_threads(L->be->context, (int)L->cfg.blas_threads);
  LH_INFO("learner", "threads training=1 team=%llu blas_per_member=1 service=1",
          (unsigned long long)L->cfg.blas_threads);
  int resumed = 0;
  char from[LH_LEARNER_TEXT_BYTES] = "";
  LH_TRY(open_model(L, &mc, err, &resumed, from));
  if (L->cfg.expert_parallel > 1) log_shard(L);
  lh_store_options so;
  lh_store_options_default(&so);
  so.max_bytes = L->cfg.max_db_bytes;
  /* The training thread's writes (train_steps, an episode's status) wait
   * for the service's commits rather than fail. */
  so.busy_timeout_ms = 30000;
  /* The writer's connection (it holds the writer lock): its open checks the
   * file when the learner before it did not shut down cleanly, and its close
   * marks this one's clean end (store.h, lh_store_options.writer). */
  so.writer = 1;
  LH_TRY(lh_store_open_with(L->cfg.db, &so, &L->store, err));
  LH_TRY(choose_run(L, resumed, err));
  record_run(L);
  LH_TRY(lh_learner_trainer_new(L->m, L->store, &L->cfg, a->temperature, resumed ? &L->st : NULL, &L->trainer, err));
  LH_TRY(lh_learner_trainer_set_comm(L->trainer, L->comm, err));
  lh_learner_trainer_set_run(L->trainer, L->run_id);
  if (resumed) LH_TRY(lh_learner_trainer_load_done(L->trainer, from, L->st.ingest_position, err));
  if (L->ranks > 1) {
    /* Every rank starts from the same weights and step (the same
     * checkpoint, --init directory or [model] seed). */
    int same_step = 0, same_weights = 0;
    LH_TRY(lh_learner_comm_same_u64(L->comm, L->st.step, &same_step, err));
    LH_TRY(lh_learner_trainer_same_weights(L->trainer, &same_weights, err));
    if (!same_step || !same_weights)
      return lh_errbuf_set(err, LH_ELEARNER_COMM,
                           "the %d learner ranks start from different %s: give them the same ckpt_dir, --init "
                           "directory and [model] section",
                           L->ranks, same_step ? "weights" : "steps");
    LH_INFO("learner", "rank=%d ranks=%d comm=%s ingest=%s db=%s", L->rank, L->ranks,
            lh_learner_comm_name(L->comm), L->cfg.ingest_endpoint, L->cfg.db);
  }
  L->ids = malloc(RUN_HINT_IDS * sizeof *L->ids);
  if (!L->ids) return lh_errbuf_set(err, LH_ENOMEM, "learner: out of memory");
  L->zctx = zmq_ctx_new();
  if (!L->zctx) return lh_errbuf_set(err, LH_ELEARNER_INGEST_SOCKET, "cannot create a ZeroMQ context");
  LH_TRY(lh_learner_curve_start(L->zctx, &L->cfg, &L->curve, &L->zap, err));
  lh_learner_model_limits limits;
  lh_learner_model_limits_init(&limits, lh_model_get_config(L->m), &L->cfg);
  lh_learner_service_config sc = {.zmq_ctx = L->zctx, .cfg = &L->cfg, .curve = &L->curve, .zap = L->zap,
                                  .serve_weights = L->rank == 0, .chunk_bytes = (uint32_t)L->cfg.weights_chunk_bytes,
                                  .limits = &limits, .run_id = L->run_id};
  LH_TRY(lh_learner_service_new(&sc, &L->svc, err));
  /* The first version is out, and the back-pressure set, before anything
   * is acked. */
  LH_TRY(publish(L, err));
  set_backlog(L);
  return lh_learner_service_start(L->svc, err);
}

/* Under skip_flat_groups a policy that never succeeds (or always does)
 * gives only flat groups: no step ever runs, which the status line's
 * counts alone would leave a person to work out. Said once, as soon as a
 * batch's worth of episodes has been left out with no step run. */
static void warn_all_flat(learner *L, uint64_t steps_run) {
  uint64_t groups = 0, episodes = 0;
  lh_learner_trainer_flat(L->trainer, &groups, &episodes);
  if (L->flat_warned || steps_run > 0 || episodes < L->cfg.batch_episodes) return;
  L->flat_warned = 1;
  LH_WARN("learner", "no step yet: every group completed so far had equal rewards, so none taught anything "
          "(flat_groups=%llu flat_episodes=%llu left out by [learner] skip_flat_groups); a policy that never "
          "succeeds wants a warm start (longhaul sft), and skip_flat_groups = false trains such groups anyway",
          (unsigned long long)groups, (unsigned long long)episodes);
}

static void status_line(learner *L, uint64_t steps_run, double busy) {
  /* Where the memory is, for a soak that watches it (bench/soak.sh): the
   * heap's bytes in use and held from the system (glibc's count, every
   * arena; 0 under a sanitizer's allocator), and SQLite's share of them. */
  struct mallinfo2 heap = mallinfo2();
  int64_t sqlite_used, sqlite_peak;
  lh_store_memory(&sqlite_used, &sqlite_peak);
  lh_learner_service_counts sc;
  lh_learner_service_counts_get(L->svc, &sc);
  const lh_learner_ingest_counts *c = &sc.ingest;
  const lh_learner_admission_counts *ad = lh_learner_trainer_admission(L->trainer);
  uint64_t flat_groups = 0, flat_episodes = 0;
  lh_learner_trainer_flat(L->trainer, &flat_groups, &flat_episodes);
  LH_INFO("learner",
          "status version=%llu steps_run=%llu received=%llu stored=%llu duplicates=%llu rejected=%llu "
          "retried=%llu rejected_run=%llu refused_name=%llu held_hello=%llu held_window=%llu held_prefix=%llu hellos=%llu "
          "heartbeats=%llu "
          "admitted=%llu dropped_stale=%llu chunks_sent=%llu "
          "backlog=%zu backlog_cap=%llu hold=%d stale_share=%.3f busy_fraction=%.3f ckpt_failures=%llu "
          "weights_bytes_sent=%llu chunks_zstd=%llu weights_requests_held=%llu episodes_left_out=%llu "
          "flat_groups=%llu flat_episodes=%llu ingest_peers=%d peers_refused=%llu heap_in_use=%zu heap_held=%zu sqlite_bytes=%lld sqlite_peak=%lld",
          (unsigned long long)lh_learner_trainer_version(L->trainer), (unsigned long long)steps_run,
          (unsigned long long)c->received, (unsigned long long)c->stored, (unsigned long long)c->duplicates,
          (unsigned long long)c->rejected, (unsigned long long)c->retried, (unsigned long long)c->rejected_run,
          (unsigned long long)c->refused_name, (unsigned long long)c->held_hello, (unsigned long long)c->held_window,
          (unsigned long long)c->held_prefix, (unsigned long long)c->hellos,
          (unsigned long long)c->heartbeats, (unsigned long long)ad->admitted,
          (unsigned long long)ad->dropped_stale, (unsigned long long)sc.weights.chunks_sent,
          lh_learner_trainer_backlog(L->trainer), (unsigned long long)lh_learner_trainer_backlog_cap(L->trainer),
          sc.hold, lh_learner_trainer_stale_share(L->trainer), busy, (unsigned long long)L->ckpt_failures,
          (unsigned long long)sc.weights.bytes_sent, (unsigned long long)sc.weights.chunks_zstd,
          (unsigned long long)sc.weights.requests_held,
          (unsigned long long)lh_learner_trainer_left_out(L->trainer), (unsigned long long)flat_groups,
          (unsigned long long)flat_episodes, lh_zsock_zap_open_peers(L->zap),
          (unsigned long long)lh_zsock_zap_cap_refused(L->zap), heap.uordblks + heap.hblkhd, heap.arena + heap.hblkhd,
          (long long)sqlite_used, (long long)sqlite_peak);
}

/* Whether to stop now; with several ranks they stop at the same turn (a
 * signal reaches them at different moments), or a collective would wait
 * for a rank that left. */
static int agree_stop(learner *L, uint64_t steps_run, int *stop, lh_errbuf *err) {
  double flag = *L->a->stop || (L->a->steps && steps_run >= L->a->steps);
  LH_TRY(lh_learner_comm_allreduce_f64(L->comm, &flag, 1, LH_LEARNER_COMM_MAX, err));
  *stop = flag > 0;
  return 0;
}

/* The ids the service stored since the last turn go to the trainer; a
 * rescan replaces them when some were lost, or now and then. */
static int take_stored(learner *L, int wait_ms, int64_t *last_scan, lh_errbuf *err) {
  size_t n = 0;
  int rescan = 0;
  lh_learner_service_take(L->svc, L->ids, RUN_HINT_IDS, &n, &rescan, wait_ms);
  int64_t now = lh_now_ns();
  if (rescan || !*last_scan || now - *last_scan > RUN_SCAN_NS) {
    *last_scan = now;
    return lh_learner_trainer_scan(L->trainer, NULL, err);
  }
  return n ? lh_learner_trainer_offer(L->trainer, L->ids, n, NULL, err) : 0;
}

static void reload_config(learner *L) {
  lh_learner_config fresh;
  lh_errbuf re;
  if (read_config(L->a->doc, 1, L->a->config, &fresh, NULL, &re)) {
    LH_WARN("learner", "SIGHUP: config not re-read, keeping max_db_bytes=%llu: %s",
            (unsigned long long)L->cfg.max_db_bytes, re.msg);
    return;
  }
  L->cfg.max_db_bytes = fresh.max_db_bytes;
  lh_store_set_max_bytes(L->store, fresh.max_db_bytes);
  lh_learner_service_set_max_bytes(L->svc, fresh.max_db_bytes);
  LH_INFO("learner", "SIGHUP: re-read config=%s max_db_bytes=%llu", L->a->config,
          (unsigned long long)fresh.max_db_bytes);
}

static int run_loop(learner *L, lh_errbuf *err) {
  uint64_t steps_run = 0;
  int64_t now = lh_now_ns(), last_scan = 0, last_status = now, start = now;
  double busy_ms = 0;  /* time in training steps: the busy fraction's numerator */
  int wait_ms = 0;
  for (;;) {
    int stop = 0;
    LH_TRY(agree_stop(L, steps_run, &stop, err));
    if (stop) break;
    LH_TRY(lh_learner_service_failed(L->svc, err));
    LH_TRY(take_stored(L, wait_ms, &last_scan, err));
    set_backlog(L);
    int stepped = 0;
    lh_learner_train_stats s;
    LH_TRY(lh_learner_trainer_step(L->trainer, &stepped, &s, err));
    if (stepped) {
      steps_run++;
      busy_ms += s.step_ms;
      LH_INFO("learner",
              "step=%llu version=%llu loss=%.6g reward_mean=%.4g success_rate=%.3f episodes=%zu tokens=%zu "
              "lag_mean=%.3g logp_diff=%.3g grad_norm=%.4g lr=%.3g skipped=%d step_ms=%.1f positions=%zu "
              "run_positions=%zu",
              (unsigned long long)s.step, (unsigned long long)s.version, s.loss, s.reward_mean, s.success_rate,
              s.episodes, s.tokens, s.lag_mean, s.logp_diff, s.grad_norm, s.lr, s.skipped, s.step_ms, s.positions,
              s.run_positions);
      if (L->cfg.state_mode == LH_LEARNER_STATE_STORED) {
        LH_INFO("learner", "step=%llu state_mode=stored run_positions=%zu states_used=%zu tokens=%zu",
                (unsigned long long)s.step, s.run_positions, s.states_used, s.tokens);
        /* Gaps were bridged, yet none from a stored state: the actors send
         * none, and every gap is recomputed from the episode's start. */
        if (s.burn_ins && !s.states_used && !L->warned_no_states) {
          L->warned_no_states = 1;
          LH_WARN("learner", "step=%llu state_mode=stored found no stored state for any of %zu gaps and ran %zu "
                  "positions for %zu sampled tokens: the actors send no states (set [actor] state_interval) or none "
                  "lies within burn_in before a window; said once", (unsigned long long)s.step, s.burn_ins,
                  s.run_positions, s.tokens);
        }
      }
      if (L->ranks > 1)
        LH_INFO("learner", "ranks=%d step=%llu allreduce_ms=%.2f step_ms=%.1f", L->ranks, (unsigned long long)s.step,
                s.allreduce_ms, s.step_ms);
      if (L->cfg.expert_parallel > 1)
        LH_INFO("learner", "rank=%d step=%llu expert_exchange_ms=%.2f serve_ms=%.2f exchange_bytes=%llu "
                "publish_gather_ms=%.2f", L->rank, (unsigned long long)s.step, s.exchange_ms, s.serve_ms,
                (unsigned long long)s.exchange_bytes, (double)L->gather_ns / 1e6);
      L->gather_ns = 0;
      if (!s.skipped) LH_TRY(publish(L, err));
      if ((s.step + 1) % L->cfg.ckpt_every == 0) LH_TRY(periodic_checkpoint(L, err));
    }
    set_backlog(L);
    warn_all_flat(L, steps_run);
    /* Nothing to train: wait for the service's next stored ids. */
    wait_ms = stepped ? 0 : RUN_WAIT_MS;
    if (*L->a->reload) {
      *L->a->reload = 0;
      reload_config(L);
    }
    now = lh_now_ns();
    if (now - last_status > RUN_STATUS_NS) {
      status_line(L, steps_run, busy_ms / ((double)(now - start) / 1e6));
      last_status = now;
    }
  }
  now = lh_now_ns();
  status_line(L, steps_run, now > start ? busy_ms / ((double)(now - start) / 1e6) : 0.0);
  LH_INFO("learner", "stopping reason=%s", *L->a->stop ? "signal" : "steps done");
  return 0;
}

/* The exit code the job ends with when a rank fails with code. */
static int exit_code(const lh_learner_run_args *a, int code) { return a->exit_code ? a->exit_code(code) : 1; }

int lh_learner_run(const lh_learner_run_args *a) {
  learner L;
  memset(&L, 0, sizeof L);
  L.a = a;
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  /* One rank, or one of an mpirun job (MPI is started only then). */
  lh_learner_comm *comm = NULL;
  int rc = lh_learner_comm_open(&comm, &err);
  if (rc) {
    fprintf(stderr, "longhaul learner: %s\n", err.msg);
    return rc;
  }
  L.comm = comm, L.rank = lh_learner_comm_rank(comm), L.ranks = lh_learner_comm_size(comm);
  rc = open_all(&L, &err);
  if (rc) {
    fprintf(stderr, "longhaul learner: %s%s\n", L.ranks > 1 ? "rank failed, ending the job: " : "", err.msg);
    end_run(&L, "error");
    learner_close(&L);
    /* The other ranks would wait for this one for ever. */
    lh_learner_comm_abort(comm, exit_code(a, rc));
    lh_learner_comm_close(comm);
    return rc;
  }
  rc = run_loop(&L, &err);
  if (rc) fprintf(stderr, "longhaul learner: %s\n", err.msg);
  /* The service found the write-ahead log lost: the training thread's
   * connection must not checkpoint it into the store's file either. */
  if (rc == LH_ESTORE_WAL_LOST) lh_store_wal_give_up(L.store, err.msg);
  if (rc && L.ranks > 1) {
    fprintf(stderr, "longhaul learner: rank %d of %d failed, ending the job (restart it with --resume)\n", L.rank,
            L.ranks);
    end_run(&L, "error");
    learner_close(&L);
    lh_learner_comm_abort(comm, exit_code(a, rc));
    lh_learner_comm_close(comm);
    return rc;
  }
  /* The service stops first: what arrived is stored and acked, and the
   * episodes it stored are the trainer's to checkpoint as not done. */
  lh_learner_service_free(L.svc);
  L.svc = NULL;
  /* A final checkpoint, unless this step already has one (rank 0 decides
   * for every rank: the checkpoint is collective). */
  lh_learner_state now;
  memset(&now, 0, sizeof now);
  lh_learner_trainer_state(L.trainer, &now);
  double want_final = !L.have_ckpt || now.step != L.last_ckpt_step;
  if (L.ranks > 1 && lh_learner_comm_bcast(comm, &want_final, sizeof want_final, 0, &err)) {
    fprintf(stderr, "longhaul learner: %s\n", err.msg);
    rc = err.code;
    want_final = 0;
  }
  if (want_final > 0) {
    lh_errbuf ce, why;
    memset(&why, 0, sizeof why);
    int written = 0;
    if (checkpoint(&L, &written, &why, &ce)) {
      fprintf(stderr, "longhaul learner: final checkpoint failed: %s\n", ce.msg);
      rc = rc ? rc : ce.code;
    } else if (!written) {
      /* The previous checkpoint is whole: --resume goes on from it. */
      fprintf(stderr, "longhaul learner: final checkpoint failed (%s): %s\n",
              lh_learner_ckpt_exists(L.cfg.ckpt_dir) ? "--resume goes on from the previous one"
                                                     : "there is none to resume from",
              why.msg);
      rc = rc ? rc : why.code;
    }
  }
  end_run(&L, rc ? "error" : "ok");
  learner_close(&L);
  if (rc && L.ranks > 1) lh_learner_comm_abort(comm, exit_code(a, rc));
  lh_learner_comm_close(comm);
  return rc;
}

/* learner: the learner process and its parts (ARCHITECTURE.md §5): the
 * process itself (run.c) and its service thread (service.c: ingest,
 * weights publishing, the idle sweep); the trainer (train.c and the
 * train_*.c beside it, listed in train_internal.h) and what it is made
 * of: advantage estimators, admission by staleness, the PPO-clip loss,
 * the [learner] config and the learning-rate schedule, joining an
 * episode's segments, batches of whole groups, back-pressure; weights
 * served in chunks, checkpoints, learner ranks and SFT.
 *
 * This header holds what other modules call: the [learner] config, the
 * learner process (`longhaul learner`), SFT, the learner's checkpoint
 * state, the latest checkpoint and the ranks' endpoints and stores. The
 * parts of the process are declared in learner/internal.h (ARCHITECTURE.md
 * §2.2).
 *
 * Free functions accept NULL. */
#ifndef LH_LEARNER_H
#define LH_LEARNER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/ini_doc.h"
#include "model/model.h"

/* ---- advantages -----------------------------------------------------------
 * One scalar per episode, broadcast by the caller to every sampled token of
 * the episode. Episodes are grouped by a key (the group id, or the task
 * seed: the episodes of one task seed form one group); groups need not be
 * contiguous. Rewards must be finite (LH_ELEARNER_ADV_INPUT). Arithmetic is
 * in double. */
typedef enum {
  LH_LEARNER_ADV_GRPO = 1,      /* (R - mean) / (std + 1e-6), population std of the group */
  LH_LEARNER_ADV_RLOO = 2,      /* R - mean of the other episodes of the group; 0 alone */
  LH_LEARNER_ADV_REINFORCE = 3  /* R - running mean of earlier batches (below) */
} lh_learner_adv_kind;

#define LH_LEARNER_ADV_GRPO_EPS 1e-6

/* The REINFORCE baseline: an exponential moving average of batch mean
 * rewards, mean <- decay * mean + (1 - decay) * batch_mean, applied after
 * the batch's advantages are computed against the previous value. Before
 * the first batch there is no history, and the first batch is measured
 * against its own mean (which then becomes the baseline). A plain value:
 * copy it into a checkpoint with lh_learner_adv_baseline_save and back. */
typedef struct {
  double mean;
  double decay;      /* in [0, 1); 0.9 by default */
  uint64_t batches;  /* batches seen; 0: no history yet */
} lh_learner_adv_baseline;

#define LH_LEARNER_ADV_BASELINE_BYTES 24

/* ---- admission ------------------------------------------------------------
 * Whether a complete episode may enter a batch. Staleness is the learner's
 * version minus the oldest policy version among the episode's tokens; an
 * episode is admitted when 0 <= staleness <= max_policy_lag and its outcome
 * is success, failure or truncated. Aborted and error episodes (and an
 * unknown outcome) are never admitted. An episode whose oldest version is
 * newer than the learner's came from a learner run that got further before
 * a restart from an older checkpoint: it was acked and stored, its version
 * numbers are simply ahead of the resumed lineage, so it is admitted as
 * fresh (staleness 0; PPO's ratio and is_cap weigh its tokens) and counted
 * in admitted_future as well as admitted. Every decision is counted. */
typedef enum {
  LH_LEARNER_ADMIT = 0,
  LH_LEARNER_DROP_STALE = 1,   /* staleness > max_policy_lag */
  LH_LEARNER_DROP_STATUS = 2   /* aborted, error or unknown outcome */
} lh_learner_admission;

typedef struct {
  uint64_t admitted, dropped_stale, dropped_status, admitted_future;
  uint64_t max_admitted_staleness;
} lh_learner_admission_counts;

/* ---- [learner] config -----------------------------------------------------
 * The [learner] section of the one INI file shared by all commands (other
 * sections are ignored here). Every key is optional with the default shown;
 * an unknown key, a key given twice, or a bad value is an error whose
 * message names the file, line, section and key (LH_ELEARNER_CONFIG_*). */
#define LH_LEARNER_MAX_STAGES 16
/* Room for a text value (endpoint, path) with its NUL. */
#define LH_LEARNER_TEXT_BYTES 512
/* The most learner ranks one job may have, and room for [learner]
 * ingest_endpoints (one endpoint per rank, comma-separated). */
#define LH_LEARNER_MAX_RANKS 64
#define LH_LEARNER_ENDPOINTS_BYTES 4096
/* The largest [learner] expert_parallel. */
#define LH_LEARNER_MAX_EXPERT_PARALLEL 4096

/* One context-extension stage (docs/operations.md, "Context-extension stages"):
 * `MAX_CONTEXT key=value ...`. A stage advances by what it has trained of
 * its own episodes (learner/stage.c), never by learner steps: every stage
 * but the last gives episodes= or tokens= (both: both must be reached),
 * and may add a gate on the success rate of its latest episodes. */
#define LH_LEARNER_STAGE_GATE_MAX 4096  /* the longest gate window, episodes */
typedef struct {
  uint64_t max_context;     /* >= 1, increasing from stage to stage */
  double long_frac;         /* long_frac=, in [0, 1]: share of groups sized to max_context (0) */
  uint64_t episodes;        /* episodes=: trained episodes of this stage before the next (0: not counted) */
  uint64_t tokens;          /* tokens=: their tokens (0: not counted); a suffix K, M or G multiplies */
  double gate_success;      /* success=X/N: success rate >= X over the stage's last N episodes */
  uint64_t gate_episodes;   /* N, 1..LH_LEARNER_STAGE_GATE_MAX (0: no gate) */
  double lr;                /* lr=: the stage's peak learning rate (0: [learner] lr) */
  uint64_t train_window;    /* train_window= (0: [learner] train_window) */
  uint64_t batch_episodes;  /* batch_episodes=, a multiple of group_size (0: [learner] batch_episodes) */
} lh_learner_stage;

typedef enum { LH_LEARNER_STATE_EXACT = 0, LH_LEARNER_STATE_STORED = 1 } lh_learner_state_mode;
const char *lh_learner_state_mode_name(lh_learner_state_mode mode);

/* How the policy loss weighs its tokens (docs/learner.md, "What a step
 * computes"): token, a mean over every sampled token of the step (a long
 * episode weighs more); episode, each episode's tokens averaged first and
 * the episodes then averaged, so every episode weighs the same whatever
 * its length. */
typedef enum { LH_LEARNER_LOSS_NORM_TOKEN = 0, LH_LEARNER_LOSS_NORM_EPISODE = 1 } lh_learner_loss_norm;

/* The episode weighting of loss_norm = episode as an advantage scale: an
 * episode of sampled > 0 tokens gets N / (E sampled), N the step's sampled
 * tokens and E its episodes with any (both over every rank), so that the
 * token mean over N becomes the mean over episodes of each one's token
 * mean; 0 for an episode without sampled tokens. */
double lh_learner_episode_scale(size_t sampled, double N, double E);

/* What becomes of an earlier stage's episodes trained after a stage began
 * (those whose oldest sampled token is of a version before the stage's
 * first): trained (counted as carried, not toward the stage) or dropped
 * (counted as carry_dropped). */
typedef enum { LH_LEARNER_CARRY_TRAIN = 0, LH_LEARNER_CARRY_DROP = 1 } lh_learner_carry;

/* Messages libzmq queues per ingest connection (ZMQ_RCVHWM): with
 * max_message_bytes, what one peer can make the learner hold before it
 * reads. */
#define LH_LEARNER_INGEST_QUEUE_MESSAGES 4

typedef struct {
  lh_learner_adv_kind advantage;    /* advantage = grpo | rloo | reinforce (grpo) */
  double baseline_decay;    /* reinforce running-mean decay, [0, 1) (0.9) */
  double clip_eps;          /* (0, 1) (0.2) */
  double is_cap;            /* >= 1, "inf" allowed (2.0) */
  double entropy_coef;      /* >= 0 (0) */
  uint64_t max_policy_lag;  /* versions (2) */
  double lr;                /* > 0 (3e-4) */
  uint64_t warmup_steps;    /* <= total_steps (10) */
  uint64_t total_steps;     /* >= 1 (1000) */
  double weight_decay;      /* >= 0 (0.01) */
  double grad_clip;         /* > 0, global norm (1.0) */
  uint64_t batch_episodes;  /* >= 1, a multiple of group_size (32) */
  uint64_t group_size;      /* >= 1 (8) */
  uint64_t train_window;    /* tokens, >= 1 (2048) */
  uint64_t ckpt_every;      /* steps, >= 1 (50) */
  uint64_t keep_checkpoints; /* step-N folders kept after each checkpoint, 0 all (3) */
  int routing_replay;       /* true/false, yes/no, on/off, 1/0 (false) */
  /* In exact mode, the windows before each episode's first trained one
   * run once a step for all episodes whose tokens there are the same (a
   * group's shared first observation; learner/shared_prefix.c). Not with
   * expert_parallel > 1. (true) */
  int share_prefix;
  /* A group whose rewards are all the same is not trained: under grpo and
   * rloo its advantages are all 0 (it would cost a forward and a backward
   * and teach nothing), so it is left out when it completes and the batch
   * fills from other groups; counted in train_steps.flat_groups. No effect
   * under reinforce, whose advantages are against a running mean. (true) */
  int skip_flat_groups;
  /* Where a training window's attention state comes from (docs/learner.md
   * "Stored state"): exact recomputes the whole prefix under the current
   * weights; stored starts from the nearest state the actor sent
   * (Segment.state) at least burn_in tokens before the window and re-runs
   * only those tokens, without gradient, and trains only the windows that
   * hold sampled tokens. */
  lh_learner_state_mode state_mode; /* state_mode = exact | stored (exact) */
  lh_learner_loss_norm loss_norm;   /* loss_norm = token | episode (token) */
  uint64_t burn_in;         /* tokens re-run before a window in stored mode (64: 4 chunks) */
  size_t n_stages;          /* stages = "MAX_CONTEXT key=value ..., ..." (none) */
  lh_learner_stage stages[LH_LEARNER_MAX_STAGES];
  lh_learner_carry stage_carry;  /* stage_carry = train | drop (train) */
  /* Where the learner process binds and writes (ZeroMQ endpoints, paths). */
  char ingest_endpoint[LH_LEARNER_TEXT_BYTES];       /* (tcp://127.0.0.1:5555) */
  /* Per-rank ingest endpoints for ranks on several hosts, "tcp://host:port,
   * ..." (one per rank, rank r binds entry r; learner ranks below). Given,
   * it replaces ingest_endpoint and the port + 10 r rule. (none) */
  char ingest_endpoints[LH_LEARNER_ENDPOINTS_BYTES];
  size_t n_ingest_endpoints;                         /* its entries, 0 when not given */
  char weights_pub_endpoint[LH_LEARNER_TEXT_BYTES];  /* (tcp://127.0.0.1:5556) */
  char weights_endpoint[LH_LEARNER_TEXT_BYTES];      /* (tcp://127.0.0.1:5557) */
  char db[LH_LEARNER_TEXT_BYTES];                    /* replay store file (replay.db) */
  uint64_t max_db_bytes;    /* cap on the store's pages in use, 0 none (0); SIGHUP re-reads it */
  char ckpt_dir[LH_LEARNER_TEXT_BYTES];              /* checkpoints (ckpt) */
  /* CURVE (net/zsock.h): with both set, the three sockets are CURVE
   * servers and a ZAP handler admits only the allowed actor keys. */
  char curve_secret_key_file[LH_LEARNER_TEXT_BYTES]; /* the learner's NAME.key (none) */
  char curve_allowed_keys[LH_LEARNER_TEXT_BYTES];    /* a file of Z85 keys, or a folder of .pub (none) */
  uint64_t abort_after_ms;  /* a running episode with no new segment for this long (its actor
                               is gone) ends as aborted, >= 1 (60000) */
  /* Back-pressure (learner/train.c): the actors are told to start no new
   * episode group while this many admitted episodes wait untrained; 0 is
   * max(1, max_policy_lag) * batch_episodes. The learner lowers it (never
   * below batch_episodes) while more than max_stale_share of the episodes
   * it took in over its recent steps were dropped as stale, and raises it
   * back when the share is low. */
  uint64_t max_backlog_episodes;  /* (0) */
  double max_stale_share;         /* [0, 1] (0.05) */
  uint64_t blas_threads;          /* the training thread's compute team, 1..256 (1) */
  uint64_t max_episode_tokens;    /* longer episodes are refused at ingest, 0 none (4194304) */
  uint64_t max_message_bytes;     /* the largest ingest message, 4096..64 MiB (16 MiB) */
  /* What libzmq may queue on the ingest ROUTER for all peers together, in
   * bytes (1 GiB). libzmq queues up to LH_LEARNER_INGEST_QUEUE_MESSAGES
   * messages per connection, so this caps the connections open at once:
   * ingest_queue_bytes / (LH_LEARNER_INGEST_QUEUE_MESSAGES *
   * max_message_bytes) of them (16 with the defaults), counted by the ZAP
   * handler, which refuses the handshake of one more. At least one
   * connection's worth. */
  uint64_t ingest_queue_bytes;
  /* Retention: with max_db_bytes set, once the store's pages in use pass
   * 90% of it, the payloads of segments older than the newest
   * retain_versions versions are dropped. Never fewer than
   * max_policy_lag + 2 versions are kept, so no episode that may still be
   * trained loses its tokens (0: that least). */
  uint64_t retain_versions;       /* (0) */
  /* Weights are served in chunks of this size: an actor fetches only the
   * chunks that changed, so smaller chunks send less of a model with
   * frozen parts, at more messages per version. */
  uint64_t weights_chunk_bytes;   /* 4096..16 MiB (1 MiB) */
  /* Expert parallelism (docs/operations.md, "Expert parallelism"): the R learner ranks
   * form groups of P consecutive ranks (ranks gP .. gP+P-1), each rank of
   * a group holding experts/P of every MoE layer's routed experts; R and
   * [model] experts must be multiples of P (lh_learner_expert_parallel_check). */
  uint32_t expert_parallel;       /* P, 1..LH_LEARNER_MAX_EXPERT_PARALLEL (1: data-parallel only) */
} lh_learner_config;

void lh_learner_config_default(lh_learner_config *cfg);
/* The ingest connections cfg admits at once (ingest_queue_bytes over one
 * connection's queue), at least 1 and at most LH_LEARNER_INGEST_MAX_PEERS. */
#define LH_LEARNER_INGEST_MAX_PEERS 65536
int lh_learner_config_ingest_peers(const lh_learner_config *cfg);
/* Reads the defaults, then the [learner] section of doc (common/ini_doc.h;
 * db, ckpt_dir and the CURVE files resolved against their file's folder). */
int lh_learner_config_read(const lh_ini_doc *doc, lh_learner_config *cfg, lh_errbuf *err);
/* The files cfg's CURVE keys name, read as the learner will read them
 * (learner/curve.c): curve_secret_key_file and curve_allowed_keys both or
 * neither, the secret key readable by its owner alone and a key, the
 * allow-list a file or folder of keys with at least one. 0, or a config
 * error's code naming the key. */
int lh_learner_config_check_keys(const lh_learner_config *cfg, lh_errbuf *err);
/* Appends the reference of [learner] (every key: its values, default and
 * doc, from the reader's table; common/ini_section.h) in Markdown to out:
 * 0, LH_ENOMEM, or LH_EINVAL naming a key without a doc. */
int lh_learner_config_reference(lh_str *out, lh_errbuf *err);
/* Loads the defaults, then the [learner] section of the file at path. */
int lh_learner_config_load(const char *path, lh_learner_config *cfg, lh_errbuf *err);
/* The same from INI text in memory; source names it in messages. */
int lh_learner_config_parse(const char *text, const char *source, lh_learner_config *cfg,
                            lh_errbuf *err);

/* Learning rate at optimizer step (0-based): linear warmup to lr over
 * warmup_steps (lr * (step + 1) / warmup_steps), then cosine from lr down to
 * 0 at total_steps: lr * (1 + cos(pi * progress)) / 2 with progress =
 * (step - warmup_steps) / (total_steps - warmup_steps), held at 0 after. */
double lh_learner_lr_at(double lr, uint64_t warmup_steps, uint64_t total_steps, uint64_t step);

/* ---- the learner's own checkpoint state -----------------------------------
 * What a checkpoint needs besides the model's tensors and moments (which
 * model/ saves) for `--resume` to continue exactly: counters, the
 * REINFORCE baseline, admission counts, the learner's generator state and
 * the ingest position. Saved as DIR/learner_state.bin, written to a
 * temporary file, flushed to disk and renamed over the old one, so that a
 * crash leaves either the old state or the new, never a mix. The file is
 * little-endian binary (doubles bit for bit) with a magic, a format version
 * and a checksum. */
#define LH_LEARNER_STATE_FILE "learner_state.bin"

typedef struct {
  uint64_t step;             /* optimizer steps taken */
  uint64_t version;          /* policy version published */
  uint64_t ingest_position;  /* the store's position the learner has consumed up to */
  uint64_t skipped_steps;    /* non-finite steps skipped */
  uint32_t stage_index;
  lh_learner_adv_baseline baseline;
  lh_learner_admission_counts admission;
  uint8_t rng[32];           /* a generator state (e.g. lh_actors_rng_save's bytes) */
} lh_learner_state;

int lh_learner_state_save(const char *dir, const lh_learner_state *st, lh_errbuf *err);
/* LH_ELEARNER_STATE_IO when the file cannot be opened (the message says
 * why, e.g. it does not exist), LH_ELEARNER_STATE_CORRUPT when its size,
 * magic, format, checksum or baseline is wrong; *st is untouched then. */
int lh_learner_state_load(const char *dir, lh_learner_state *st, lh_errbuf *err);

/* ---- the learner process (learner/run.c) ----------------------------------
 * `longhaul learner` from top to bottom: open (checkpoint, --init or a
 * fresh model; the store; the ranks), start the service thread, then the
 * training loop on this thread (take the stored ids, offer them, step,
 * publish, checkpoint, back-pressure, status), and stop in order (the
 * service stores and acks what arrived, then a final checkpoint). The
 * command keeps only the arguments, the signals and the exit codes. */
typedef struct {
  const char *config, *init, *backend;
  const lh_ini_doc *doc;  /* the config with its includes and --set overrides; NULL: read config */
  int resume;
  uint64_t steps;       /* stop after this many steps; 0: until *stop */
  float temperature;    /* the actors' sampling temperature ([actor] temperature) */
  volatile sig_atomic_t *stop;    /* set by SIGINT/SIGTERM/SIGUSR1 */
  volatile sig_atomic_t *reload;  /* set by SIGHUP: re-read max_db_bytes */
  const char *run_id;   /* --run-id; NULL: kept from the resumed run (rank 0's store), or a new one */
  const char *command;  /* the command line, for the runs row; may be NULL */
  /* The process exit code of an lh_err code (the command's one mapping),
   * which a failing rank of several ends the whole job with, so that
   * mpirun exits as one rank alone would; NULL: 1. */
  int (*exit_code)(int code);
} lh_learner_run_args;

/* 0 when done; else the lh_err code of what ended it (a config error's
 * code for a bad config, checkpoint folder or argument), after printing
 * the reason to stderr. The command turns the code into its exit code. */
int lh_learner_run(const lh_learner_run_args *a);

/* ---- SFT (learner/sft.c) ---------------------------------------------------
 * Supervised steps on demonstrations: cross-entropy on the policy's tokens
 * only. Episodes (tokens with a loss mask, 1 on the policy's tokens, as
 * actors/ transcripts give them) are packed into one batch, each its own
 * sequence (attention state reset); position t is trained to predict token
 * t+1 when that token has mask 1, and the loss is the mean over those
 * targets. Then the global gradient norm is clipped to cfg->grad_clip, AdamW
 * (beta 0.9/0.95, eps 1e-8, cfg->weight_decay) steps at
 * lh_learner_lr_at(cfg->lr, warmup, total_steps, step) with warmup =
 * min(cfg->warmup_steps, total_steps), and the routers' balancing biases
 * move. A step whose loss or gradient is not finite is skipped (parameters
 * untouched) and counted. The model stays the caller's and must outlive
 * the trainer. */
typedef struct {
  size_t n_tokens;
  const int32_t *tokens;
  const uint8_t *mask;           /* 1 on the policy's tokens */
  int n_images;
  const lh_model_image *images;  /* .at relative to this episode */
} lh_learner_sft_episode;

typedef struct {
  uint64_t step;       /* 0-based index of the step just taken */
  double loss;         /* mean cross-entropy over the trained targets */
  double lr;
  double grad_norm;    /* before clipping */
  size_t tokens;       /* packed positions */
  size_t targets;      /* trained (mask 1) targets */
  int skipped;         /* 1 when the step was not finite and was skipped */
} lh_learner_sft_stats;

typedef struct lh_learner_sft lh_learner_sft;

/* Enables training on m (gradients, moments) when not yet enabled.
 * total_steps >= 1 sets the schedule's length. */
int lh_learner_sft_new(lh_model *m, const lh_learner_config *cfg, uint64_t total_steps,
                       lh_learner_sft **out, lh_errbuf *err);
void lh_learner_sft_free(lh_learner_sft *s);
/* One step on the n >= 1 episodes; LH_EINVAL for an empty batch or one
 * without any mask-1 target, the model's codes for bad tokens. */
int lh_learner_sft_step(lh_learner_sft *s, const lh_learner_sft_episode *eps, size_t n,
                        lh_learner_sft_stats *stats, lh_errbuf *err);
uint64_t lh_learner_sft_skipped(const lh_learner_sft *s);
/* The loop of `longhaul sft` (lh_learner_sft_train): loop->steps steps
 * (the schedule's length) of loop->batch episodes each, which loop->demos
 * fills (they stay the caller's until its next call; learner/ does not
 * see where demonstrations come from), with loop->on_step (may be NULL)
 * after each; every eval_every steps (0: never) loop->evaluate writes and
 * evaluates the model and gives its success rate, and with target > 0 the
 * loop stops at the first evaluation whose rate reaches target. A
 * callback's nonzero code ends the loop with it. */
typedef struct {
  uint64_t step;                 /* steps taken, the last included */
  size_t tokens;                 /* packed positions so far */
  double elapsed_s;              /* since the loop began */
  double ev_step[2], ev_rate[2]; /* the second to last and the last evaluation */
  int evals;                     /* evaluations run */
} lh_learner_sft_progress;

typedef struct {
  uint64_t steps;      /* >= 1 */
  size_t batch;        /* >= 1 */
  uint64_t eval_every; /* 0: no evaluation in the loop */
  double target;       /* > 0: the success rate that ends training; 0: none */
  int (*demos)(void *ctx, lh_learner_sft_episode *eps, size_t n, lh_errbuf *err);
  void (*on_step)(void *ctx, const lh_learner_sft_stats *st, const lh_learner_sft_progress *p);
  int (*evaluate)(void *ctx, uint64_t step, double *rate, lh_errbuf *err);
  void *ctx;
} lh_learner_sft_loop;

typedef struct {
  uint64_t taken;        /* steps taken: steps, or the step target was reached at */
  uint64_t evaluated_at; /* the step of the last evaluation; 0: none ran */
  int reached;           /* 1: stopped at target, with rate */
  double rate;
  size_t tokens;
  double elapsed_s;
  uint64_t skipped;      /* steps skipped as not finite */
} lh_learner_sft_result;

int lh_learner_sft_train(lh_model *m, const lh_learner_config *cfg, const lh_learner_sft_loop *loop,
                         lh_learner_sft_result *res, lh_errbuf *err);
/* Writes DIR/model.safetensors atomically: the file is written in a fresh
 * temporary directory inside DIR and renamed over the old one, so a reader
 * sees the old checkpoint or the new one, never a part. */
int lh_learner_sft_save(const lh_model *m, const char *dir, lh_errbuf *err);

/* ---- checkpoints (learner/checkpoint.c) ---------------------------------
 * Their layout, writing and loading: learner/internal.h. */
/* The directory `latest` names (room for LH_LEARNER_TEXT_BYTES), or
 * LH_ELEARNER_CKPT when there is none or it names no step-N directory. */
int lh_learner_ckpt_latest_dir(const char *ckpt_dir, char *dir, lh_errbuf *err);

/* ---- ranks' endpoints and stores (learner/allreduce.c) ------------------
 * What the launcher and the readers need to find each rank's socket and
 * store file. */
/* Rank r's ingest endpoint: the port of endpoint ("tcp://host:port") plus
 * 10 * rank; rank 0 and a wildcard port (tcp://host:*) keep it as it is,
 * and an ipc:// or inproc:// endpoint gets the suffix ".rank<r>".
 * LH_ELEARNER_CONFIG_VALUE naming the endpoint when a tcp one has no
 * numeric port or the port would pass 65535. out has room for
 * LH_LEARNER_TEXT_BYTES. */
int lh_learner_rank_endpoint(const char *endpoint, int rank, char *out, lh_errbuf *err);
/* Rank r's store file: db for rank 0, db.rank<r> otherwise (out: room for
 * LH_LEARNER_TEXT_BYTES). */
int lh_learner_rank_db(const char *db, int rank, char *out, lh_errbuf *err);

/* ---- ranks on several hosts (learner/ranks.c) ----------------------------
 * [learner] ingest_endpoints lists one ingest endpoint per rank, so that
 * ranks on different hosts each bind their own address and the actors of
 * rank r, wherever they run, connect to entry r. Every entry is
 * tcp://host:port with a numeric port in 1..65535 and a host an actor can
 * connect to (a name, an IPv4 address or a bracketed IPv6 one; never the
 * wildcard *, 0.0.0.0 or [::]); entries are distinct. Without the list
 * the one-host rule above (port + 10 * r) stays. */


/* Whether cfg suits a job of `ranks` ranks (1..LH_LEARNER_MAX_RANKS): with
 * ingest_endpoints given it must hold exactly `ranks` entries; without,
 * the last rank's port (ingest_endpoint's + 10 * (ranks - 1)) must exist.
 * LH_ELEARNER_CONFIG_VALUE naming the key and both counts otherwise. The
 * learner checks it at start and the launcher before it starts anything. */
int lh_learner_ranks_check(const lh_learner_config *cfg, int ranks, lh_errbuf *err);
/* Rank r's ingest endpoint under cfg: entry r of ingest_endpoints when
 * given, else lh_learner_rank_endpoint(cfg->ingest_endpoint, r). out has
 * room for LH_LEARNER_TEXT_BYTES. */
int lh_learner_rank_ingest(const lh_learner_config *cfg, int rank, char *out, lh_errbuf *err);
/* Whether expert_parallel = P suits a job of `ranks` learner ranks and a
 * model of `experts` routed experts per MoE layer: both must be multiples
 * of P (ranks gP .. gP+P-1 form expert group g, each rank holding
 * experts/P of every layer's experts). 0, or LH_ELEARNER_CONFIG_VALUE
 * naming the key, P and the count that does not divide ("[learner]
 * expert_parallel = 2 needs a learner count that is a multiple of 2; the
 * job has 3 ranks"), or P outside 1..LH_LEARNER_MAX_EXPERT_PARALLEL;
 * LH_EINVAL for a count below 1. Pure: the
 * learner and the launcher call it with what they know. */
int lh_learner_expert_parallel_check(uint32_t P, int ranks, int experts, lh_errbuf *err);


#endif

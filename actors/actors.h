/* actors: the actor process (ARCHITECTURE.md §1, §6) and its parts: the
 * process itself (actor.c), the episode runner that batches B episodes'
 * decode steps on the model and calls their environments (runner.c), each
 * episode's transcript (transcript.c), the seeded generator and the
 * sampler, the segmenter that cuts an episode's token stream into Segment
 * messages, the outbox of unacked messages, the link to the learner's
 * sockets (link.c), weights fetched in chunks, the heartbeat meter, and the
 * [actor] section of the config.
 *
 * This header holds what other modules call: the [actor] config, the
 * transcript of an episode, SFT's demonstrations and evaluation (SFT and
 * `longhaul eval`), and
 * the actor process (`longhaul actor`). The parts of the process are
 * declared in actors/internal.h (ARCHITECTURE.md §2.2).
 *
 * All objects are single-threaded; free functions accept NULL. */
#ifndef LH_ACTORS_H
#define LH_ACTORS_H

#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/ini_doc.h"
#include "common/str.h"
#include "envs/env.h"
#include "model/model.h"

/* ---- [actor] config -------------------------------------------------------
 * The [actor] section of the one INI file shared by all commands (other
 * sections are ignored here). Every key is optional with the default shown;
 * an unknown key, a key given twice, or a bad value is an error whose
 * message names the file, line, section and key (LH_EACTORS_CONFIG_*). */
#define LH_ACTORS_ENDPOINT_BYTES 256
#define LH_ACTORS_ENV_NAME_BYTES 64
#define LH_ACTORS_ENV_OPTIONS 32
/* `[env] name = agent`: the actor serves its policy to agent programs
 * over HTTP instead of playing an environment (docs/agents.md). */
#define LH_ACTORS_AGENT_ENV "agent"

typedef struct {
  uint64_t batch;              /* B episodes decoded together, 1..65536 (8) */
  double temperature;          /* >= 0, 0 is greedy (1.0) */
  double top_p;                /* (0, 1] (1.0) */
  uint64_t seed;               /* any 64-bit integer (0) */
  uint64_t segment_tokens;     /* 1..65536 (512) */
  uint64_t outbox_messages;    /* >= 1 (1024) */
  uint64_t outbox_bytes;       /* >= 1 (67108864) */
  uint64_t resend_timeout_ms;  /* >= 1 (5000) */
  uint64_t heartbeat_ms;       /* >= 1 (1000) */
  uint64_t blas_threads;       /* the actor's compute team, 1..256 (1: actors share the machine) */
  uint64_t group_size;         /* episodes per task seed, >= 1 (8) */
  /* The actor process (longhaul actor): the learner's three sockets (ARCHITECTURE.md
   * §1; weights_pub_endpoint "none" turns weight updates off), episode
   * limits, and the bounded wait for acks when it stops. */
  char learner_endpoint[LH_ACTORS_ENDPOINT_BYTES];      /* (tcp://127.0.0.1:5555) */
  char weights_pub_endpoint[LH_ACTORS_ENDPOINT_BYTES];  /* (tcp://127.0.0.1:5556) */
  char weights_endpoint[LH_ACTORS_ENDPOINT_BYTES];      /* (tcp://127.0.0.1:5557) */
  /* CURVE (net/zsock.h): with both set, the three sockets are CURVE
   * clients of the learner, whose allow-list must hold this actor's key. */
  char curve_secret_key_file[LH_ACTORS_ENDPOINT_BYTES]; /* this actor's NAME.key (none) */
  char curve_server_key_file[LH_ACTORS_ENDPOINT_BYTES]; /* the learner's NAME.pub (none) */
  uint64_t max_context;        /* tokens per episode, 0 no limit (4096) */
  uint64_t max_steps;          /* environment steps, 0 the env's default (0) */
  uint64_t flush_timeout_ms;   /* wait for acks on exit, >= 1 (5000) */
  uint64_t record_routing;     /* 1: record each token's experts (routing replay), 0 or 1 (0) */
  uint64_t state_interval;     /* tokens between recurrent states sent with the segments, 0 none (0) */
  uint64_t share_prefix;       /* 1: a group's members share the prefill of their first observation, 0 or 1 (1) */
  uint64_t beyond_context;     /* 1: max_context and the stage's do not end an episode, 0 or 1 (0) */
  uint64_t max_episode_tokens; /* the cap with beyond_context, >= 2 (4194304, the learner's default) */
  uint64_t weights_zstd;       /* 1: weights chunks may come zstd-compressed, 0 or 1 (0) */
  /* The [env] option a context-extension stage sizes long episodes by
   * (e.g. needle's "tokens"; lh_actors_runner_set_stage); empty: none. */
  char stage_option[LH_ACTORS_ENDPOINT_BYTES];          /* () */
  /* The agent endpoint, with [env] name = agent (docs/agents.md). */
  char agent_address[LH_ACTORS_ENDPOINT_BYTES];         /* host:port, actor i on port + i (127.0.0.1:8700) */
  char agent_key_file[LH_ACTORS_ENDPOINT_BYTES];        /* a bearer token's file (none: loopback only) */
  uint64_t agent_max_episodes;  /* opened and waiting, 1..65536 (256) */
  uint64_t agent_timeout_ms;    /* an agent silent this long loses its episode (300000) */
  uint64_t agent_max_body_bytes; /* a request body's most, 1 KiB..64 MiB (4194304) */
  /* The [env] section: name, and every other key an option for the
   * environment (which refuses the ones it does not know). */
  char env_name[LH_ACTORS_ENV_NAME_BYTES];              /* (calc) */
  uint32_t n_env_options;
  char env_keys[LH_ACTORS_ENV_OPTIONS][LH_ACTORS_ENV_NAME_BYTES];
  char env_values[LH_ACTORS_ENV_OPTIONS][LH_ACTORS_ENDPOINT_BYTES];
} lh_actors_config;

void lh_actors_config_default(lh_actors_config *cfg);
/* Appends the reference of [actor] and [env] (every [actor] key from the
 * reader's table, common/ini_section.h) in Markdown to out: 0, LH_ENOMEM,
 * or LH_EINVAL naming a key without a doc. */
int lh_actors_config_reference(lh_str *out, lh_errbuf *err);
/* Reads the defaults, then the [actor] and [env] sections of doc
 * (common/ini_doc.h): curve_*_key_file and [env] plugin resolved against
 * their file's folder; learner_endpoint, weights_pub_endpoint and
 * weights_endpoint, when not given, are [learner]'s ingest_endpoint,
 * weights_pub_endpoint and weights_endpoint (a wildcard bind address
 * there is an error asking for [actor]'s own). */
int lh_actors_config_read(const lh_ini_doc *doc, lh_actors_config *cfg, lh_errbuf *err);
/* The files cfg's CURVE keys name, read as the actor will read them
 * (actors/actor.c): curve_secret_key_file and curve_server_key_file both
 * or neither, the secret key readable by its owner alone, each a key. 0,
 * or a config error's code naming the key. */
int lh_actors_config_check_keys(const lh_actors_config *cfg, lh_errbuf *err);
/* Loads the defaults, then the [actor] section of the file at path. */
int lh_actors_config_load(const char *path, lh_actors_config *cfg, lh_errbuf *err);
/* The same from INI text in memory; source names it in messages. */
int lh_actors_config_parse(const char *text, const char *source, lh_actors_config *cfg, lh_errbuf *err);

/* ---- context-extension stages -------------------------------------------
 * The share of a long episode's token budget that the actor gives the
 * stage's [env] option (stage_option), the rest being room for the
 * policy's actions and the tools' answers (lh_actors_runner_set_stage). */
#define LH_ACTORS_STAGE_FILL 0.75
/* That share of a stage's max_context: the value a long group of the stage
 * gives stage_option. */
uint64_t lh_actors_stage_env_size(uint64_t max_context);
/* The n options opts with key = value: in place of key's entry, or after
 * the others when none has key; into out (room for n + 1). Returns how
 * many out holds. */
size_t lh_actors_env_options_set(const lh_env_option *opts, size_t n, const char *key, const char *value,
                                 lh_env_option *out);

/* ---- transcripts (actors/transcript.c) -------------------------------------
 * An episode as the policy sees it, in the one format that SFT trains on and
 * the actor plays in:
 *   <bos> first-observation-text [<img> patches]...
 *   action tokens (loss mask 1): thought bytes, <call> NAME(ARGS) </call>
 *   <obs> observation-text [<img> patches]... </obs>       (loss mask 0)
 *   ... and the final action: ANSWER <eos> (loss mask 1).
 * Action text is encoded with its markers (<call>, </call>, <eos> become
 * their ids); observation text is encoded byte by byte, so that an
 * environment can never inject a special token. An image is <img> followed
 * by (height/patch)*(width/patch) positions holding <pad> (the model ignores
 * their ids and embeds the patches), pixels converted to RGB floats in [0,1];
 * an image whose sides are not multiples of patch is padded with black on
 * the right and at the bottom up to the next ones (its .height and .width
 * are the padded sides). An image of 0 or 2 or more than 3 channels, or of
 * more patches than the max_patches set, is LH_EACTORS_IMAGE; the tokens
 * before it stay appended.
 *
 * An actor forgets what it has sent and fed (lh_actors_transcript_forget):
 * positions before the transcript's first kept one are gone, the tokens
 * and mask accessors then start at that position
 * (lh_actors_transcript_first), and the images at the first kept image
 * (lh_actors_transcript_first_image). SFT and evaluation never forget, so
 * for them both are 0. */
typedef struct lh_actors_transcript lh_actors_transcript;

/* patch is the model's patch size (images need it); >= 1. */
lh_actors_transcript *lh_actors_transcript_new(int patch, lh_errbuf *err);
void lh_actors_transcript_free(lh_actors_transcript *t);
/* Empties t for a new episode (memory kept). */
void lh_actors_transcript_clear(lh_actors_transcript *t);
/* <bos> and the first observation (after clear). */
int lh_actors_transcript_begin(lh_actors_transcript *t, const lh_env_obs *obs, lh_errbuf *err);
/* An action's text with its markers (what lh_env_step takes), mask 1. */
int lh_actors_transcript_action(lh_actors_transcript *t, const char *text, size_t bytes,
                                lh_errbuf *err);
/* One token the policy drew (mask 1). */
int lh_actors_transcript_policy_token(lh_actors_transcript *t, int32_t token, lh_errbuf *err);
/* A token with the given mask (0: not trained), and text as tokens with
 * mask 0, its marker spellings special tokens when markup is set: how an
 * agent's turns go in (docs/agents.md). */
int lh_actors_transcript_token(lh_actors_transcript *t, int32_t token, uint8_t mask, lh_errbuf *err);
int lh_actors_transcript_text(lh_actors_transcript *t, const char *text, size_t bytes, int markup, lh_errbuf *err);
/* <obs> text and images </obs>, mask 0. */
int lh_actors_transcript_observation(lh_actors_transcript *t, const lh_env_obs *obs,
                                     lh_errbuf *err);
/* Bounds images to max_patches patches (the model's; 0: no bound). */
void lh_actors_transcript_set_max_patches(lh_actors_transcript *t, int max_patches);
/* Drops the positions before upto (at most len), and the images whose
 * patches all lie before it, so that an episode's transcript holds only
 * what its runner still needs, whatever the episode's length; the
 * buffers shrink back when a long observation grew them. */
void lh_actors_transcript_forget(lh_actors_transcript *t, size_t upto);
/* The first kept position, and the index (in the episode's order) of the
 * first kept image. */
size_t lh_actors_transcript_first(const lh_actors_transcript *t);
int lh_actors_transcript_first_image(const lh_actors_transcript *t);
/* The length in positions since <bos>, forgotten ones included. */
size_t lh_actors_transcript_len(const lh_actors_transcript *t);
/* Positions first .. len-1. */
const int32_t *lh_actors_transcript_tokens(const lh_actors_transcript *t);
const uint8_t *lh_actors_transcript_mask(const lh_actors_transcript *t);
/* The images in order; .at is the position of their first patch (the <img>
 * token is at .at - 1); pixels stay valid until clear or free. */
/* The kept images (lh_actors_transcript_first_image on). */
int lh_actors_transcript_n_images(const lh_actors_transcript *t);
const lh_model_image *lh_actors_transcript_images(const lh_actors_transcript *t);

/* One demonstration: reset(seed), then the expert's proposal, step, until
 * done (the wrapper's max_steps ends it too). t receives the transcript,
 * *outcome (may be NULL) how it ended. LH_EENVS_NO_EXPERT without one. */
int lh_actors_transcript_expert(lh_env *env, uint64_t seed, lh_actors_transcript *t,
                                lh_env_outcome *outcome, lh_errbuf *err);

/* ---- SFT demonstrations (actors/sft_demos.c) -------------------------------
 * The expert's episodes `longhaul sft` trains on, batch at a time: each
 * batch is lh_actors_transcript_expert of env on the next batch training
 * seeds LH_ACTORS_SFT_SEED_BASE + seed * 2^20 + k, k counting on from 0
 * across batches. Training seeds lie far from the evaluation seeds 1..N,
 * so evaluation is on held-out tasks whatever the seed and the steps. */
#define LH_ACTORS_SFT_SEED_BASE (1ull << 40)
#define LH_ACTORS_SFT_SEEDS (1ull << 19) /* seed is below it */
typedef struct lh_actors_sft_demos lh_actors_sft_demos;
/* env stays the caller's and must outlive the demonstrations; patch is the
 * model's; batch >= 1. */
int lh_actors_sft_demos_new(lh_env *env, int patch, size_t batch, uint64_t seed, lh_actors_sft_demos **out,
                            lh_errbuf *err);
void lh_actors_sft_demos_free(lh_actors_sft_demos *d);
/* Plays the next batch (LH_EENVS_NO_EXPERT for an environment without an
 * expert); its transcripts stay valid until the next call. */
int lh_actors_sft_demos_next(lh_actors_sft_demos *d, lh_errbuf *err);
/* The i-th transcript of the batch, NULL past it. */
const lh_actors_transcript *lh_actors_sft_demos_get(const lh_actors_sft_demos *d, size_t i);

/* Evaluation, greedy (temperature 0, the default) or sampled at
 * temperature (top_p 1) from a generator seeded by each episode's seed, so
 * that a seed plays the same whatever else runs beside it: the episodes of seeds[0..n)
 * played by model, n_envs at a time (one environment each, opened alike by
 * the caller) through one batched decoder (the
 * first observation and every observation go in by prefill), each action
 * ending at </call> or <eos> and stepped through env. An episode that
 * reaches max_context tokens, or an action of more than max_action_tokens,
 * ends as truncated (not a success). *successes counts LH_ENV_SUCCESS. */
typedef struct {
  int max_context;            /* tokens per episode, >= 2 */
  int max_action_tokens;      /* >= 1 */
  FILE *show;                 /* when set, the first show_count episodes to end */
  size_t show_count;          /*   are written there as text, with their seed and outcome */
  float temperature;          /* >= 0; 0: greedy */
} lh_actors_eval_params;

int lh_actors_eval(lh_model *model, lh_env *const *envs, int n_envs, const uint64_t *seeds, size_t n,
                          const lh_actors_eval_params *p, size_t *successes, lh_errbuf *err);

/* The evaluation driver (eval_seeds.c): episodes of m on the held-out
 * seeds 1..seeds of environment env (LH_ACTORS_EVAL_ENVS of them, each
 * opened with the options), through lh_actors_eval: greedy at temperature
 * 0, else sampled at it; *wins counts successes. The first show episodes
 * to end are written to out (NULL when show is 0). An episode ends at
 * max_context tokens (bounded to 2..INT_MAX). With more seeds than one
 * chunk (about a tenth of them, whole rounds of the environments),
 * progress (may be NULL) is called after each chunk with the seeds done,
 * the successes so far and the seconds left at the rate so far. */
#define LH_ACTORS_EVAL_ENVS 16
typedef struct {
  uint64_t max_context, seeds;
  float temperature;
  size_t show;
  FILE *out;
  void (*progress)(void *ctx, size_t done, uint64_t seeds, size_t wins, double left_s);
  void *progress_ctx;
} lh_actors_eval_seeds_params;
int lh_actors_eval_seeds(lh_model *m, const char *env, const lh_env_option *opts, size_t n_opts,
                         const lh_actors_eval_seeds_params *p, size_t *wins, lh_errbuf *err);


/* ---- the actor process (actors/actor.c) -----------------------------------
 * The loop of `longhaul actor`: a runner on model (borrowed; weights from
 * the learner are copied into it between decode steps) and a link, in one
 * thread, until `episodes` episodes ended and were acked (0: no limit) or
 * *stop becomes non-zero (set by a signal handler): then the open episodes
 * end as aborted and the outbox is flushed for at most flush_timeout_ms.
 * Episode, group and msg ids mix the name, the wall and monotonic clocks and
 * the pid, so that they stay unique across actors and restarts. */
typedef struct {
  const char *name;              /* actor name */
  const lh_actors_config *actor; /* [actor] and [env] */
  uint64_t index;                /* mixed into the seed: actors differ */
  uint64_t episodes;             /* 0: until stopped */
  int wait_for_weights;          /* sample nothing before the first weights arrive */
  const char *run_id;            /* --run-id: the run it belongs to; NULL: any run's (started by hand) */
} lh_actors_actor_config;

typedef struct {
  uint64_t episodes, tokens, resends, version, pauses;
  size_t unacked;
} lh_actors_actor_stats;

/* Returns 0 on a clean end (a stop request included), or a negative code
 * with err set (LH_EACTORS_RUN_MISMATCH: the learner is of another run and
 * refused the actor; it stops at once, flushing nothing); stats (may be
 * NULL) gets the totals either way. */
int lh_actors_actor_run(const lh_actors_actor_config *cfg, lh_model *model, volatile sig_atomic_t *stop,
                        lh_actors_actor_stats *stats, lh_errbuf *err);

#endif

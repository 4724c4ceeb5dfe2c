/* actors: what the runner's files share (runner.c, which plays the
 * episodes, and runner_share.c, a group's shared prefix) and nothing
 * else sees. */
#ifndef LH_ACTORS_RUNNER_INTERNAL_H
#define LH_ACTORS_RUNNER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "actors/internal.h"

/* ROW_FORK: the episode has begun (its environment reset, its first
 * observation in the transcript) and waits for its group's leader to
 * finish the prefill of the prefix they share (lh_actors_prefix_share). */
typedef enum { ROW_FREE, ROW_POLICY, ROW_ENV, ROW_FORK } lh_actors_row_state;

typedef struct {
  lh_actors_row_state state;
  lh_env *env;
  lh_actors_transcript *tr;
  lh_actors_segmenter *seg;
  size_t pushed;       /* transcript tokens already in the segmenter */
  size_t fed;          /* transcript tokens already fed to the model */
  int images_pushed;   /* transcript images already in the segmenter */
  size_t action_start; /* where the current action began in the transcript */
  int have_logp;       /* logp holds the next-token distribution */
  float *logp;         /* (vocab) */
  /* Per kept transcript position (index = position - the transcript's
   * first): the sampler's logp (sampled ones), the version, and
   * layers*topk experts when routing is recorded. */
  float *behavior;
  uint32_t *version;
  uint32_t *experts;
  size_t cap;
  size_t end_at;       /* tokens that belong to the episode when it ends (SIZE_MAX: all) */
  uint32_t steps;
  uint32_t max_context;  /* this episode's token budget; 0: no limit */
  size_t next_state;     /* the fed count at which the next recurrent state is due (state_interval) */
  uint64_t env_size;     /* the stage_option value the row's env was opened with; 0: as configured */
  lh_actors_rng rng;     /* the episode's own sampler stream, seeded by its number */
  int share;             /* the lh_actors_prefix_share it leads or waits for; -1: none */
  /* An agent's episode (docs/agents.md): its handle in the agent table
   * (0: none), the turn's sampled tokens and cap, and whether the agent
   * rewrote the history: the tokens sampled since are not trained. */
  uint64_t agent;
  uint32_t turn_tokens, turn_max, turn_prompt;
  int turn_cut;          /* the turn reached its max_tokens */
  uint32_t turn_stops;   /* the turn's stop strings: 0 spares the check per token */
  int masked;
} lh_actors_row;

/* A group's shared prefix (docs/actors.md "Shared prefixes"). The
 * episodes of a group play one task, so their first observations are the
 * same tokens: the first member to start (the leader) prefills them, and
 * the others take the recurrent state and next-token distribution it
 * reaches, instead of prefilling the same tokens again. Their segments
 * then start after the prefix and name the leader's episode, whose
 * segments are cut where the prefix ends, so the prefix crosses the wire
 * and lands in the store once. A member that starts after new weights
 * came leads the share again (lh_actors_share_join): the state of the old weights
 * is not the prefill it would have done. */
typedef struct {
  uint64_t group;     /* the group's key (its number + 1, or an agent group's id); 0: a free slot */
  uint32_t members;   /* its episodes that have joined, the leader's included */
  uint64_t leader;    /* the leader's episode id */
  int ready;          /* the leader's prefill is done: state and logp hold */
  uint64_t version;   /* the weights' version when it was done */
  int failed;         /* the leader ended before it: nobody shares */
  size_t tokens;      /* the prefix: the first observation's length */
  uint64_t hash;      /* XXH3-64 of its tokens and images */
  float *state;       /* (lh_model_state_floats) after the prefix */
  float *logp;        /* (vocab) the distribution of the first action token */
} lh_actors_prefix_share;

typedef struct {
  Longhaul__Segment *seg;
  Longhaul__EpisodeEnd *end;
} lh_actors_queue_item;

struct lh_actors_runner {
  lh_actors_runner_config cfg;
  char *actor, *env_name;
  lh_env_option *opts;
  lh_env_option *sized_opts; /* opts with stage_option set: n_opts + 1 */
  char **opt_strings;
  size_t n_opts;
  lh_env_hub *hub, *own_hub;
  lh_model *model;
  lh_model_decoder *dec;
  lh_actors_sampler *sampler;
  int vocab;
  int record;          /* routing recorded: L layers x K slots of E experts */
  size_t LK;
  int32_t *dec_experts, *one_experts;
  uint64_t version;
  lh_actors_stage stage;
  char *stage_option;
  uint64_t group_long_for;   /* the group whose draw group_long holds (+1; 0: none) */
  int group_long;
  uint32_t group_budget;
  uint64_t long_groups, short_groups;
  lh_actors_row *rows;
  lh_actors_prefix_share *shares;  /* batch slots: a group in flight holds at most one */
  size_t share_floats;   /* lh_model_state_floats */
  uint64_t prefixes_shared, prefix_tokens_shared;
  uint64_t started, finished;
  uint32_t window;  /* back-pressure (lh_actors_runner_set_window) */
  int stopped;
  /* per step scratch */
  float *state;        /* (lh_model_state_floats) a row's recurrent state, with state_interval */
  size_t state_floats;
  uint8_t *image_bytes;  /* an image's pixels as the segment carries them */
  size_t image_bytes_cap;
  int32_t *dec_rows, *dec_tokens;
  float *dec_logp;
  /* the output queue, a ring */
  lh_actors_queue_item *q;
  size_t q_head, q_n, q_cap;
};

/* ---- rows (runner.c) ------------------------------------------------------ */
/* Forgets the positions of w both fed to the model and in the segmenter. */
void lh_actors_row_forget(const lh_actors_runner *r, lh_actors_row *w);
/* Moves w's finished segments to the output queue. */
int lh_actors_row_drain(lh_actors_runner *r, lh_actors_row *w, lh_errbuf *err);

/* Feeds the row's next prefill window (runner.c). */
int lh_actors_row_prefill(lh_actors_runner *r, uint32_t b, lh_errbuf *err);
/* Ends the row's episode: its last segment and EpisodeEnd to the queue. */
int lh_actors_row_finish(lh_actors_runner *r, lh_actors_row *w, Longhaul__Outcome outcome, float reward,
                         const lh_env_term *terms, uint32_t n_terms, const char *why, lh_errbuf *err);
Longhaul__Outcome lh_actors_outcome_of(lh_env_outcome o);

/* ---- an agent's episodes (runner_agent.c) --------------------------------- */
/* The row takes the opening's episode (handle 0: an environment's). */
void lh_actors_agent_row_begin(lh_actors_row *w, const lh_actors_agent_turn *opening);
/* Whether the row's turn ends after the token just sampled: the turn's
 * max_tokens or one of its stop strings (<eos> and </call> end every turn). */
int lh_actors_agent_turn_over(lh_actors_runner *r, lh_actors_row *w);
/* Answers the agent with the row's turn (finish_reason "length" when its
 * max_tokens cut it, else "stop"); the row waits for the agent's next move. */
int lh_actors_agent_row_answer(lh_actors_runner *r, uint32_t b, lh_errbuf *err);
/* The agent's next move, when it made one: a turn to read, or the end. */
int lh_actors_agent_row_collect(lh_actors_runner *r, uint32_t b, lh_errbuf *err);
/* The row's episode ended (lh_actors_row_finish): a turn in flight is
 * answered with what it has, and the agent table lets the episode go. */
void lh_actors_agent_row_end(lh_actors_runner *r, lh_actors_row *w, const char *why);

/* ---- shared prefixes (runner_share.c) ------------------------------------- */
/* Row b, a leader whose prefill is done, makes its share ready and forks
 * the members waiting for it. */
int lh_actors_share_ready(lh_actors_runner *r, uint32_t b, lh_errbuf *err);
/* Row b's episode has begun (n positions of first observation): it leads
 * the share of its group (group_key: the group's number + 1, or an agent
 * group's id) or joins it. 1 when the row needs no prefill of its own, 0
 * when it prefills. */
int lh_actors_share_join(lh_actors_runner *r, uint32_t b, uint64_t group_key, uint64_t episode_id, size_t n,
                         lh_errbuf *err);
/* Whether the share of group group_key has a leader still prefilling it:
 * the group's next members wait to start (runner.c's may_start) rather
 * than each hold a copy of the first observation meanwhile. */
int lh_actors_share_pending(const lh_actors_runner *r, uint64_t group_key);
/* Row b leaves its share before the share was ready (its episode ended). */
void lh_actors_share_leave(lh_actors_runner *r, uint32_t b);

#endif

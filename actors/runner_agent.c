/* actors: the runner's side of an agent's episodes (docs/agents.md).
 *
 * A row plays an agent's episode as it plays an environment's, with the
 * agent in the environment's place: the first request is the first
 * observation, each answer is the policy's action as it sampled it, and
 * the agent's next request adds the next observation. The tokens are the
 * row's own, never re-derived from the agent's text: only what the agent
 * added is tokenised. The row never waits for the agent: it stays in
 * ROW_ENV, and each runner step looks whether its agent moved. */
#include <stdlib.h>
#include <string.h>

#include "actors/runner_internal.h"

void lh_actors_agent_row_begin(lh_actors_row *w, const lh_actors_agent_turn *opening) {
  w->agent = opening->handle;
  w->masked = 0;
  w->turn_tokens = 0;
  w->turn_cut = 0;
  w->turn_max = opening->max_tokens;
  w->turn_stops = opening->n_stop;
  w->turn_prompt = 0;
}

/* The policy's turn so far (from action_start), as text with markers. */
static int turn_text(const lh_actors_row *w, size_t from, lh_str *out, lh_errbuf *err) {
  const int32_t *tok = lh_actors_transcript_tokens(w->tr) + (from - lh_actors_transcript_first(w->tr));
  size_t n = lh_actors_transcript_len(w->tr) - from, need = 0;
  lh_str_clear(out);
  if (lh_str_reserve(out, n * 8 + 1) < 0) return lh_errbuf_set(err, LH_ENOMEM, "agent: out of memory for a turn");
  LH_TRY(lh_tok_decode(tok, n, out->data, out->cap, &need, err));
  out->len = need;
  return 0;
}

int lh_actors_agent_turn_over(lh_actors_runner *r, lh_actors_row *w) {
  w->turn_tokens++;
  w->turn_cut = w->turn_max && w->turn_tokens >= w->turn_max;
  if (w->turn_cut) return 1;
  if (!w->turn_stops) return 0;
  /* A stop string is at most LH_AGENT_STOP_BYTES: the last that many
   * tokens hold it, whatever markers they spell. */
  size_t n = lh_actors_transcript_len(w->tr), from = w->action_start;
  if (n - from > LH_AGENT_STOP_BYTES) from = n - LH_AGENT_STOP_BYTES;
  lh_str tail = {0};
  lh_errbuf e = {0};
  int over = turn_text(w, from, &tail, &e) == 0 && lh_actors_agent_stop_at(r->cfg.agent, w->agent, tail.data, tail.len);
  lh_str_free(&tail);
  return over;
}

/* Sends the turn's text to the agent; the stop string that ended it, if
 * any, stays in the tokens but not in the answer (as OpenAI's API does). */
static int answer(lh_actors_runner *r, lh_actors_row *w, const char *finish, lh_errbuf *err) {
  lh_str text = {0};
  int rc = turn_text(w, w->action_start, &text, err);
  if (rc == 0) {
    size_t cut = lh_actors_agent_stop_at(r->cfg.agent, w->agent, text.data, text.len);
    lh_actors_agent_reply(r->cfg.agent, w->agent, text.data ? text.data : "", text.len - cut, finish, w->turn_prompt,
                          w->turn_tokens, r->version);
  }
  lh_str_free(&text);
  return rc;
}

int lh_actors_agent_row_answer(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  w->steps++;
  w->state = ROW_ENV;
  int rc = answer(r, w, w->turn_cut ? "length" : "stop", err);
  if (rc < 0) return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f, NULL, 0, err->msg, err);
  return 0;
}

void lh_actors_agent_row_end(lh_actors_runner *r, lh_actors_row *w, const char *why) {
  lh_errbuf e = {0};
  if (w->state == ROW_POLICY && w->turn_tokens) (void)answer(r, w, "length", &e);  /* the context filled mid-turn */
  lh_actors_agent_close(r->cfg.agent, w->agent, r->stopped ? 503 : 409, why);
  w->agent = 0;
}

/* What the agent added goes in as the environment's observation would;
 * a rewritten history restarts the row's state from all of it, and the
 * tokens sampled from then on are not trained (the stored stream before
 * them is not the context they were sampled in). */
static int read_turn(lh_actors_runner *r, uint32_t b, const lh_actors_agent_turn *t, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  size_t before = lh_actors_transcript_len(w->tr);
  int rc;
  if (t->restart) {
    w->masked = 1;
    LH_TRY(lh_model_decoder_reset(r->dec, (int)b));
    rc = lh_actors_transcript_text(w->tr, t->text, t->bytes, 1, err);
  } else if (t->observation) {
    lh_env_obs obs = {.text = t->text, .text_bytes = t->bytes};
    rc = lh_actors_transcript_observation(w->tr, &obs, err);
  } else {
    rc = lh_actors_transcript_text(w->tr, t->text, t->bytes, 0, err);
  }
  if (rc < 0) return rc;
  size_t n = lh_actors_transcript_len(w->tr);
  w->turn_tokens = 0;
  w->turn_cut = 0;
  w->turn_max = t->max_tokens;
  w->turn_stops = t->n_stop;
  w->turn_prompt = (uint32_t)(n - before);
  if (w->max_context && n >= w->max_context) {
    /* as an environment's observation that fills the context: cut before it */
    w->end_at = before;
    return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, NULL, 0,
                                "the agent's turn does not fit the context", err);
  }
  w->state = ROW_POLICY;
  w->action_start = n;
  return lh_actors_row_prefill(r, b, err);
}

int lh_actors_agent_row_collect(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  lh_actors_agent_turn t;
  lh_actors_agent_end end;
  switch (lh_actors_agent_poll(r->cfg.agent, w->agent, &t, &end)) {
    case LH_AGENT_NONE: return 0;
    case LH_AGENT_TURN: return read_turn(r, b, &t, err);
    case LH_AGENT_END: {
      w->agent = 0;  /* the table let it go */
      lh_env_term terms[LH_AGENT_MAX_TERMS];
      for (uint32_t i = 0; i < end.n_terms; i++) terms[i] = (lh_env_term){end.names[i], end.values[i]};
      Longhaul__Outcome o = !end.rewarded ? LONGHAUL__OUTCOME__OUTCOME_ABORTED
                            : lh_actors_outcome_of(end.reward > 0 ? LH_ENV_SUCCESS : LH_ENV_FAILURE);
      return lh_actors_row_finish(r, w, o, end.reward, terms, end.n_terms,
                                  end.rewarded ? NULL : "the agent ended it without a reward", err);
    }
    case LH_AGENT_GONE:
    default:
      w->agent = 0;
      return lh_actors_row_finish(r, w, LONGHAUL__OUTCOME__OUTCOME_ABORTED, 0.0f, NULL, 0,
                                  "the agent went silent past [actor] agent_timeout_ms", err);
  }
}

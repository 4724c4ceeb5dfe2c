/* Tests of proto/wire: a round trip of each of the eleven message kinds with
 * every field compared, and the segment payload the store keeps. One test
 * per validation error code is in test_wire_errors.c, the random and
 * mutated inputs in test_wire_fuzz.c. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/wire_fixture.h"

/* ---- round trips ---------------------------------------------------- */

static void same_images(Longhaul__Image *const *a, size_t na, Longhaul__Image *const *b,
                        size_t nb) {
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    ck_assert_uint_eq(a[i]->offset, b[i]->offset);
    ck_assert_uint_eq(a[i]->width, b[i]->width);
    ck_assert_uint_eq(a[i]->height, b[i]->height);
    ck_assert_uint_eq(a[i]->channels, b[i]->channels);
    ck_assert_uint_eq(a[i]->pixels.len, b[i]->pixels.len);
    ck_assert_mem_eq(a[i]->pixels.data, b[i]->pixels.data, a[i]->pixels.len);
  }
}

static void same_terms(Longhaul__RewardTerm *const *a, size_t na, Longhaul__RewardTerm *const *b,
                       size_t nb) {
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    ck_assert_str_eq(a[i]->name, b[i]->name);
    ck_assert_float_eq(a[i]->value, b[i]->value);
    ck_assert_uint_eq(a[i]->step, b[i]->step);
  }
}

static void same_segment(const Longhaul__Segment *a, const Longhaul__Segment *b) {
  ck_assert_uint_eq(a->episode_id, b->episode_id);
  ck_assert_uint_eq(a->seq, b->seq);
  ck_assert_str_eq(a->actor, b->actor);
  ck_assert_str_eq(a->env, b->env);
  ck_assert_uint_eq(a->start_offset, b->start_offset);
  ck_assert_uint_eq(a->n_tokens, b->n_tokens);
  ck_assert_mem_eq(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens);
  ck_assert_uint_eq(a->loss_mask.len, b->loss_mask.len);
  ck_assert_mem_eq(a->loss_mask.data, b->loss_mask.data, a->loss_mask.len);
  ck_assert_uint_eq(a->n_behavior_logp, b->n_behavior_logp);
  ck_assert_mem_eq(a->behavior_logp, b->behavior_logp, a->n_behavior_logp * sizeof(float));
  ck_assert_uint_eq(a->n_policy_version, b->n_policy_version);
  ck_assert_mem_eq(a->policy_version, b->policy_version, a->n_policy_version * sizeof(uint32_t));
  ck_assert_uint_eq(a->routed_layers, b->routed_layers);
  ck_assert_uint_eq(a->routed_topk, b->routed_topk);
  ck_assert_uint_eq(a->n_routed_experts, b->n_routed_experts);
  ck_assert_mem_eq(a->routed_experts, b->routed_experts, a->n_routed_experts * sizeof(uint32_t));
  same_images(a->images, a->n_images, b->images, b->n_images);
  ck_assert_uint_eq(a->group_id, b->group_id);
  ck_assert_uint_eq(a->task_seed, b->task_seed);
}

static void same_env_request(const Longhaul__EnvRequest *x, const Longhaul__EnvRequest *y) {
  ck_assert_uint_eq(x->request_id, y->request_id);
  ck_assert_int_eq(x->op, y->op);
  ck_assert_uint_eq(x->session_id, y->session_id);
  ck_assert_str_eq(x->env_name, y->env_name);
  ck_assert_uint_eq(x->n_options, y->n_options);
  for (size_t i = 0; i < x->n_options; i++) {
    ck_assert_str_eq(x->options[i]->key, y->options[i]->key);
    ck_assert_str_eq(x->options[i]->value, y->options[i]->value);
  }
  ck_assert_uint_eq(x->seed, y->seed);
  ck_assert_str_eq(x->action, y->action);
}

static void same_env_response(const Longhaul__EnvResponse *x, const Longhaul__EnvResponse *y) {
  ck_assert_uint_eq(x->request_id, y->request_id);
  ck_assert_uint_eq(x->session_id, y->session_id);
  ck_assert_int_eq(x->status, y->status);
  ck_assert_str_eq(x->error, y->error);
  ck_assert_ptr_nonnull(y->observation);
  ck_assert_str_eq(x->observation->text, y->observation->text);
  same_images(x->observation->images, x->observation->n_images, y->observation->images, y->observation->n_images);
  ck_assert_float_eq(x->reward, y->reward);
  ck_assert_int_eq(x->done, y->done);
  same_terms(x->terms, x->n_terms, y->terms, y->n_terms);
  ck_assert_str_eq(x->description, y->description);
  ck_assert_str_eq(x->expert_action, y->expert_action);
  ck_assert_uint_eq(x->max_batch, y->max_batch);
  ck_assert_uint_eq(x->max_batch_bytes, y->max_batch_bytes);
}

static void same_body(const Longhaul__Envelope *a, const Longhaul__Envelope *b) {
  switch (a->body_case) {
    case LONGHAUL__ENVELOPE__BODY_HELLO: {
      const Longhaul__Hello *x = a->hello, *y = b->hello;
      ck_assert_str_eq(x->role, y->role);
      ck_assert_str_eq(x->name, y->name);
      ck_assert_uint_eq(x->vocab, y->vocab);
      ck_assert_uint_eq(x->layers, y->layers);
      ck_assert_uint_eq(x->topk, y->topk);
      ck_assert_uint_eq(x->pid, y->pid);
      ck_assert_uint_eq(x->policy_version, y->policy_version);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_SEGMENT: same_segment(a->segment, b->segment); break;
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END: {
      const Longhaul__EpisodeEnd *x = a->episode_end, *y = b->episode_end;
      ck_assert_uint_eq(x->episode_id, y->episode_id);
      ck_assert_str_eq(x->actor, y->actor);
      ck_assert_str_eq(x->env, y->env);
      ck_assert_uint_eq(x->segment_count, y->segment_count);
      ck_assert_uint_eq(x->total_tokens, y->total_tokens);
      ck_assert_int_eq(x->outcome, y->outcome);
      ck_assert_float_eq(x->reward, y->reward);
      same_terms(x->terms, x->n_terms, y->terms, y->n_terms);
      ck_assert_uint_eq(x->group_id, y->group_id);
      ck_assert_uint_eq(x->task_seed, y->task_seed);
      ck_assert_uint_eq(x->steps, y->steps);
      ck_assert_str_eq(x->error, y->error);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_ACK: {
      ck_assert_uint_eq(a->ack->n_msg_ids, b->ack->n_msg_ids);
      ck_assert_mem_eq(a->ack->msg_ids, b->ack->msg_ids, a->ack->n_msg_ids * sizeof(uint64_t));
      ck_assert_int_eq(a->ack->status, b->ack->status);
      ck_assert_str_eq(a->ack->reason, b->ack->reason);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT: {
      const Longhaul__Heartbeat *x = a->heartbeat, *y = b->heartbeat;
      ck_assert_str_eq(x->role, y->role);
      ck_assert_uint_eq(x->policy_version, y->policy_version);
      ck_assert_double_eq(x->episodes_per_s, y->episodes_per_s);
      ck_assert_double_eq(x->tokens_per_s, y->tokens_per_s);
      ck_assert_uint_eq(x->outbox_depth, y->outbox_depth);
      ck_assert_uint_eq(x->open_episodes, y->open_episodes);
      ck_assert_uint_eq(x->episodes_done, y->episodes_done);
      ck_assert_double_eq(x->policy_lag, y->policy_lag);
      ck_assert_uint_eq(x->step, y->step);
      ck_assert_double_eq(x->loss, y->loss);
      ck_assert_double_eq(x->reward_mean, y->reward_mean);
      ck_assert_double_eq(x->success_rate, y->success_rate);
      ck_assert_double_eq(x->busy_fraction, y->busy_fraction);
      ck_assert_double_eq(x->max_vio, y->max_vio);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE: {
      const Longhaul__WeightsAnnounce *x = a->weights_announce, *y = b->weights_announce;
      ck_assert_uint_eq(x->version, y->version);
      ck_assert_uint_eq(x->total_bytes, y->total_bytes);
      ck_assert_uint_eq(x->chunk_bytes, y->chunk_bytes);
      ck_assert_uint_eq(x->chunk_count, y->chunk_count);
      ck_assert_uint_eq(x->checksum, y->checksum);
      ck_assert_uint_eq(x->stage_index, y->stage_index);
      ck_assert_uint_eq(x->max_context, y->max_context);
      ck_assert_float_eq(x->long_frac, y->long_frac);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST:
      ck_assert_uint_eq(a->weights_request->version, b->weights_request->version);
      ck_assert_uint_eq(a->weights_request->first_chunk, b->weights_request->first_chunk);
      ck_assert_uint_eq(a->weights_request->chunk_count, b->weights_request->chunk_count);
      break;
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK: {
      const Longhaul__WeightsChunk *x = a->weights_chunk, *y = b->weights_chunk;
      ck_assert_uint_eq(x->version, y->version);
      ck_assert_uint_eq(x->chunk_index, y->chunk_index);
      ck_assert_uint_eq(x->offset, y->offset);
      ck_assert_uint_eq(x->data.len, y->data.len);
      ck_assert_mem_eq(x->data.data, y->data.data, x->data.len);
      ck_assert_uint_eq(x->checksum, y->checksum);
      break;
    }
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST: same_env_request(a->env_request, b->env_request); break;
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE: same_env_response(a->env_response, b->env_response); break;
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH:
      ck_assert_uint_eq(a->env_request_batch->n_requests, b->env_request_batch->n_requests);
      for (size_t i = 0; i < a->env_request_batch->n_requests; i++)
        same_env_request(a->env_request_batch->requests[i], b->env_request_batch->requests[i]);
      break;
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH:
      ck_assert_uint_eq(a->env_response_batch->n_responses, b->env_response_batch->n_responses);
      for (size_t i = 0; i < a->env_response_batch->n_responses; i++)
        same_env_response(a->env_response_batch->responses[i], b->env_response_batch->responses[i]);
      break;
    case LONGHAUL__ENVELOPE__BODY_SHUTDOWN:
      ck_assert_str_eq(a->shutdown->reason, b->shutdown->reason);
      ck_assert_uint_eq(a->shutdown->grace_ms, b->shutdown->grace_ms);
      break;
    default: ck_abort_msg("unexpected body case %d", (int)a->body_case);
  }
}

START_TEST(test_round_trip) {
  wire_fixture *f = malloc(sizeof *f);
  fx_init(f, fx_bodies[_i]);
  size_t bytes = 0;
  uint8_t *buf = fx_encode(f, &bytes);
  Longhaul__Envelope *got = NULL;
  lh_errbuf err;
  int rc = lh_wire_decode(buf, bytes, NULL, &got, &err);
  ck_assert_msg(rc == 0, "%s: %s", lh_wire_body_name(fx_bodies[_i]), err.msg);
  ck_assert_uint_eq(got->protocol, LH_WIRE_PROTOCOL);
  ck_assert_uint_eq(got->msg_id, f->env.msg_id);
  ck_assert_str_eq(got->sender, f->env.sender);
  ck_assert_int_eq(got->body_case, f->env.body_case);
  same_body(&f->env, got);
  /* Re-encoding what was decoded gives the same bytes: nothing was lost. */
  uint8_t *again = NULL;
  size_t again_bytes = 0;
  ck_assert_int_eq(lh_wire_encode(got, &again, &again_bytes, &err), 0);
  ck_assert_uint_eq(again_bytes, bytes);
  ck_assert_mem_eq(again, buf, bytes);
  free(again);
  lh_wire_free(got);
  free(buf);
  free(f);
}
END_TEST

START_TEST(test_segment_payload) {
  wire_fixture *f = malloc(sizeof *f);
  fx_init(f, LONGHAUL__ENVELOPE__BODY_SEGMENT);
  uint8_t *buf = NULL;
  size_t bytes = 0;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_segment_encode(&f->seg, &buf, &bytes, &err), 0);
  Longhaul__Segment *got = NULL;
  ck_assert_int_eq(lh_wire_segment_decode(buf, bytes, NULL, &got, &err), 0);
  same_segment(&f->seg, got);
  lh_wire_segment_free(got);
  free(buf);

  /* The same validation as a Segment in an Envelope. */
  f->tokens[17] = 900;
  ck_assert_int_eq(lh_wire_segment_encode(&f->seg, &buf, &bytes, &err), 0);
  got = (Longhaul__Segment *)buf; /* must be reset to NULL on failure */
  ck_assert_int_eq(lh_wire_segment_decode(buf, bytes, NULL, &got, &err), LH_EWIRE_TOKEN_RANGE);
  ck_assert_ptr_null(got);
  ck_assert_str_eq(err.msg, "segment.tokens[17]=900 is not below vocab 264");
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  lim.max_message_bytes = bytes - 1;
  ck_assert_int_eq(lh_wire_segment_decode(buf, bytes, &lim, &got, &err), LH_EWIRE_TOO_LARGE);
  ck_assert_ptr_nonnull(strstr(err.msg, "over the limit"));
  ck_assert_int_eq(lh_wire_segment_decode(buf, bytes / 2, NULL, &got, &err), LH_EWIRE_UNPARSEABLE);
  ck_assert_ptr_nonnull(strstr(err.msg, "segment"));
  ck_assert_int_eq(lh_wire_validate_segment(NULL, NULL, &err), LH_EWIRE_MISSING);
  ck_assert_int_eq(lh_wire_segment_encode(NULL, &buf, &bytes, &err), LH_EINVAL);
  free(buf);
  lh_wire_segment_free(NULL);
  free(f);
}
END_TEST

START_TEST(test_limits_and_names) {
  lh_wire_limits l;
  lh_wire_limits_default(&l);
  ck_assert_uint_eq(l.max_message_bytes, 64u << 20);
  ck_assert_uint_eq(l.vocab, 264);
  ck_assert_uint_eq(l.max_segment_tokens, 65536);
  ck_assert_uint_eq(l.max_string_bytes, 256);
  lh_wire_limits_default(NULL);
  ck_assert_str_eq(lh_wire_body_name(LONGHAUL__ENVELOPE__BODY_SEGMENT), "segment");
  ck_assert_str_eq(lh_wire_body_name(LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE), "env_response");
  ck_assert_str_eq(lh_wire_body_name(LONGHAUL__ENVELOPE__BODY__NOT_SET), "none");
  ck_assert_str_eq(lh_wire_body_name((Longhaul__Envelope__BodyCase)99), "unknown");
  /* Every code of the table has its own name and message. */
  for (int c = -100; c >= -137; c--) {
    ck_assert_str_ne(lh_err_name(c), "EUNKNOWN");
    ck_assert_ptr_nonnull(strstr(lh_strerror(c), "wire"));
  }
  lh_wire_free(NULL);
  Longhaul__Envelope *out = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_wire_decode(NULL, 5, NULL, &out, &err), LH_EINVAL);
  ck_assert_int_eq(lh_wire_decode((const uint8_t *)"", 0, NULL, NULL, &err), LH_EINVAL);
  ck_assert_int_eq(lh_wire_encode(NULL, NULL, NULL, &err), LH_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wire");
  TCase *rt = tcase_create("round_trip");
  tcase_add_loop_test(rt, test_round_trip, 0, FX_BODIES);
  tcase_add_test(rt, test_segment_payload);
  tcase_add_test(rt, test_limits_and_names);
  suite_add_tcase(s, rt);
  return lh_test_run(s, CK_FORK);
}

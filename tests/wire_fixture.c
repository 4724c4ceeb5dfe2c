/* The wire suites' fixture: see wire_fixture.h. */
#include "tests/wire_fixture.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

const Longhaul__Envelope__BodyCase fx_bodies[FX_BODIES] = {
    LONGHAUL__ENVELOPE__BODY_HELLO,           LONGHAUL__ENVELOPE__BODY_SEGMENT,
    LONGHAUL__ENVELOPE__BODY_EPISODE_END,     LONGHAUL__ENVELOPE__BODY_ACK,
    LONGHAUL__ENVELOPE__BODY_HEARTBEAT,       LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE,
    LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST, LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK,
    LONGHAUL__ENVELOPE__BODY_ENV_REQUEST,     LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE,
    LONGHAUL__ENVELOPE__BODY_SHUTDOWN,        LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH,
    LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH,
};

static void init_image(Longhaul__Image *im, uint32_t offset, uint32_t w, uint32_t h, uint32_t c,
                       uint8_t *pix) {
  *im = (Longhaul__Image)LONGHAUL__IMAGE__INIT;
  im->offset = offset;
  im->width = w;
  im->height = h;
  im->channels = c;
  for (uint32_t i = 0; i < w * h * c; i++) pix[i] = (uint8_t)(i * 7 + offset);
  im->pixels.data = pix;
  im->pixels.len = (size_t)w * h * c;
}

static void init_term(Longhaul__RewardTerm *t, char *name, float value, uint32_t step) {
  *t = (Longhaul__RewardTerm)LONGHAUL__REWARD_TERM__INIT;
  t->name = name;
  t->value = value;
  t->step = step;
}

static void init_segment(wire_fixture *f) {
  Longhaul__Segment *s = &f->seg;
  *s = (Longhaul__Segment)LONGHAUL__SEGMENT__INIT;
  s->episode_id = 0x1234567890abULL;
  s->seq = 7;
  s->actor = "a0";
  s->env = "calc";
  s->start_offset = 448;
  for (int i = 0; i < FX_TOKENS; i++) {
    f->tokens[i] = (uint32_t)((i * 37) % 264);
    f->mask[i] = (uint8_t)(i % 3 != 0);
    f->logp[i] = f->mask[i] ? -0.01f * (float)(i + 1) : 0.0f;
    f->version[i] = 40 + (uint32_t)i / 16;
  }
  for (int i = 0; i < FX_TOKENS * FX_LAYERS * FX_TOPK; i++) f->experts[i] = (uint32_t)(i * 5 % 16);
  s->n_tokens = FX_TOKENS;
  s->tokens = f->tokens;
  s->loss_mask.len = FX_TOKENS;
  s->loss_mask.data = f->mask;
  s->n_behavior_logp = FX_TOKENS;
  s->behavior_logp = f->logp;
  s->n_policy_version = FX_TOKENS;
  s->policy_version = f->version;
  s->routed_layers = FX_LAYERS;
  s->routed_topk = FX_TOPK;
  s->n_routed_experts = FX_TOKENS * FX_LAYERS * FX_TOPK;
  s->routed_experts = f->experts;
  init_image(&f->seg_img[0], 3, 8, 6, 3, f->pix_rgb);
  init_image(&f->seg_img[1], 40, 5, 4, 1, f->pix_gray);
  f->seg_imgp[0] = &f->seg_img[0];
  f->seg_imgp[1] = &f->seg_img[1];
  s->n_images = 2;
  s->images = f->seg_imgp;
  s->group_id = 99;
  s->task_seed = 0xfeedULL;
}

static void init_env_messages(wire_fixture *f) {
  Longhaul__EnvRequest *q = &f->ereq;
  *q = (Longhaul__EnvRequest)LONGHAUL__ENV_REQUEST__INIT;
  q->request_id = 11;
  q->op = LONGHAUL__ENV_OP__ENV_OP_STEP;
  q->session_id = 12;
  q->env_name = "needle";
  f->kv[0] = (Longhaul__KeyValue)LONGHAUL__KEY_VALUE__INIT;
  f->kv[0].key = "stages";
  f->kv[0].value = "3";
  f->kv[1] = (Longhaul__KeyValue)LONGHAUL__KEY_VALUE__INIT;
  f->kv[1].key = "doc_tokens";
  f->kv[1].value = "4096";
  f->kvp[0] = &f->kv[0];
  f->kvp[1] = &f->kv[1];
  q->n_options = 2;
  q->options = f->kvp;
  q->seed = 13;
  q->action = "search(\"r\xc3\xa9sum\xc3\xa9\")"; /* UTF-8 passes */

  Longhaul__EnvResponse *r = &f->eresp;
  *r = (Longhaul__EnvResponse)LONGHAUL__ENV_RESPONSE__INIT;
  r->request_id = 11;
  r->session_id = 12;
  r->status = -2;
  r->error = "bad argument";
  f->obs = (Longhaul__Observation)LONGHAUL__OBSERVATION__INIT;
  f->obs.text = "record 42: \xe2\x82\xac 17";
  init_image(&f->obs_img, 0, 3, 2, 3, f->obs_pix);
  f->obs_imgp[0] = &f->obs_img;
  f->obs.n_images = 1;
  f->obs.images = f->obs_imgp;
  r->observation = &f->obs;
  r->reward = 0.5f;
  r->done = 1;
  init_term(&f->resp_term[0], "found", 1.0f, 4);
  init_term(&f->resp_term[1], "steps", -0.25f, 5);
  f->resp_termp[0] = &f->resp_term[0];
  f->resp_termp[1] = &f->resp_term[1];
  r->n_terms = 2;
  r->terms = f->resp_termp;
  r->description = "needle: find a record";
  r->expert_action = "<call>read(42)</call>";
  r->max_batch = 512;
  r->max_batch_bytes = 1u << 20;

  f->ereq2 = f->ereq;
  f->ereq2.request_id = q->request_id + 1;
  f->ereq2.session_id = q->session_id + 1;
  f->ereq2.action = "<call>read(7)</call>";
  f->ereq_batchp[0] = q;
  f->ereq_batchp[1] = &f->ereq2;
  f->ereq_batch = (Longhaul__EnvRequestBatch)LONGHAUL__ENV_REQUEST_BATCH__INIT;
  f->ereq_batch.n_requests = 2;
  f->ereq_batch.requests = f->ereq_batchp;
  f->eresp2 = *r;
  f->eresp2.request_id = r->request_id + 1;
  f->eresp2.status = LH_ENOENT;
  f->eresp2.error = "no session";
  f->eresp_batchp[0] = r;
  f->eresp_batchp[1] = &f->eresp2;
  f->eresp_batch = (Longhaul__EnvResponseBatch)LONGHAUL__ENV_RESPONSE_BATCH__INIT;
  f->eresp_batch.n_responses = 2;
  f->eresp_batch.responses = f->eresp_batchp;
}

void fx_init(wire_fixture *f, Longhaul__Envelope__BodyCase body) {
  memset(f, 0, sizeof *f);
  f->hello = (Longhaul__Hello)LONGHAUL__HELLO__INIT;
  f->hello.role = "actor";
  f->hello.name = "a3";
  f->hello.vocab = 264;
  f->hello.layers = 4;
  f->hello.topk = 2;
  f->hello.pid = 4242;
  f->hello.policy_version = 17;

  init_segment(f);

  Longhaul__EpisodeEnd *e = &f->end;
  *e = (Longhaul__EpisodeEnd)LONGHAUL__EPISODE_END__INIT;
  e->episode_id = 0x1234567890abULL;
  e->actor = "a0";
  e->env = "calc";
  e->segment_count = 8;
  e->total_tokens = 512;
  e->outcome = LONGHAUL__OUTCOME__OUTCOME_TRUNCATED;
  e->reward = -1.5f;
  init_term(&f->end_term[0], "correct", 0.0f, 3);
  init_term(&f->end_term[1], "format", 0.5f, 3);
  init_term(&f->end_term[2], "length", -2.0f, 2);
  for (int i = 0; i < 3; i++) f->end_termp[i] = &f->end_term[i];
  e->n_terms = 3;
  e->terms = f->end_termp;
  e->group_id = 99;
  e->task_seed = 0xfeedULL;
  e->steps = 6;
  e->error = "max_context reached";

  f->ack = (Longhaul__Ack)LONGHAUL__ACK__INIT;
  for (int i = 0; i < 5; i++) f->ids[i] = 1000 + (uint64_t)i * 3;
  f->ack.n_msg_ids = 5;
  f->ack.msg_ids = f->ids;
  f->ack.status = LONGHAUL__ACK_STATUS__ACK_DUPLICATE;
  f->ack.reason = "already stored";

  Longhaul__Heartbeat *h = &f->hb;
  *h = (Longhaul__Heartbeat)LONGHAUL__HEARTBEAT__INIT;
  h->role = "learner";
  h->policy_version = 21;
  h->episodes_per_s = 3.5;
  h->tokens_per_s = 12000.25;
  h->outbox_depth = 4;
  h->open_episodes = 16;
  h->episodes_done = 123456;
  h->policy_lag = 1.75;
  h->step = 88;
  h->loss = 0.0123;
  h->reward_mean = 0.4;
  h->success_rate = 0.375;
  h->busy_fraction = 0.9;
  h->max_vio = 0.2;

  Longhaul__WeightsAnnounce *wa = &f->wa;
  *wa = (Longhaul__WeightsAnnounce)LONGHAUL__WEIGHTS_ANNOUNCE__INIT;
  wa->version = 22;
  wa->total_bytes = 10 * 1000 + 1;
  wa->chunk_bytes = 1000;
  wa->chunk_count = 11;
  wa->checksum = 0xabcdef0123456789ULL;
  wa->checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64;
  wa->stage_index = 2;
  wa->max_context = 8192;
  wa->long_frac = 0.25f;

  f->wr = (Longhaul__WeightsRequest)LONGHAUL__WEIGHTS_REQUEST__INIT;
  f->wr.version = 22;
  f->wr.first_chunk = 3;
  f->wr.chunk_count = 5;

  Longhaul__WeightsChunk *wc = &f->wc;
  *wc = (Longhaul__WeightsChunk)LONGHAUL__WEIGHTS_CHUNK__INIT;
  for (int i = 0; i < FX_CHUNK; i++) f->chunk[i] = (uint8_t)(i * 13 + 1);
  wc->version = 22;
  wc->chunk_index = 3;
  wc->offset = 3000;
  wc->data.data = f->chunk;
  wc->data.len = FX_CHUNK;
  wc->checksum = lh_wire_checksum(f->chunk, FX_CHUNK);
  wc->checksum_algo = LONGHAUL__CHECKSUM_ALGO__CHECKSUM_ALGO_XXH3_64;

  init_env_messages(f);

  f->sd = (Longhaul__Shutdown)LONGHAUL__SHUTDOWN__INIT;
  f->sd.reason = "launch: stop requested";
  f->sd.grace_ms = 2500;

  f->env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  f->env.protocol = LH_WIRE_PROTOCOL;
  f->env.msg_id = 77;
  f->env.sender = "a0";
  f->env.body_case = body;
  switch (body) {
    case LONGHAUL__ENVELOPE__BODY_HELLO: f->env.hello = &f->hello; break;
    case LONGHAUL__ENVELOPE__BODY_SEGMENT: f->env.segment = &f->seg; break;
    case LONGHAUL__ENVELOPE__BODY_EPISODE_END: f->env.episode_end = &f->end; break;
    case LONGHAUL__ENVELOPE__BODY_ACK: f->env.ack = &f->ack; break;
    case LONGHAUL__ENVELOPE__BODY_HEARTBEAT: f->env.heartbeat = &f->hb; break;
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE: f->env.weights_announce = &f->wa; break;
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST: f->env.weights_request = &f->wr; break;
    case LONGHAUL__ENVELOPE__BODY_WEIGHTS_CHUNK: f->env.weights_chunk = &f->wc; break;
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST: f->env.env_request = &f->ereq; break;
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE: f->env.env_response = &f->eresp; break;
    case LONGHAUL__ENVELOPE__BODY_SHUTDOWN: f->env.shutdown = &f->sd; break;
    case LONGHAUL__ENVELOPE__BODY_ENV_REQUEST_BATCH: f->env.env_request_batch = &f->ereq_batch; break;
    case LONGHAUL__ENVELOPE__BODY_ENV_RESPONSE_BATCH: f->env.env_response_batch = &f->eresp_batch; break;
    default: break;
  }
}

uint8_t *fx_encode(const wire_fixture *f, size_t *bytes) {
  uint8_t *buf = NULL;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_wire_encode(&f->env, &buf, bytes, &err);
  ck_assert_msg(rc == 0, "encode %s: %s (%s)", lh_wire_body_name(f->env.body_case), err.msg,
                lh_err_name(rc));
  ck_assert_ptr_nonnull(buf);
  return buf;
}

uint8_t *fx_image_flood(size_t reps, size_t *bytes, size_t *segment) {
  uint8_t *buf = malloc(reps * 2 + 16);
  if (!buf) return NULL;
  size_t n = 0;
  buf[n++] = 0x08, buf[n++] = 0x01; /* protocol 1 */
  buf[n++] = 0x5a;                  /* field 11 (segment), length-delimited */
  uint64_t len = reps * 2;
  while (len >= 0x80) buf[n++] = (uint8_t)(len | 0x80), len >>= 7;
  buf[n++] = (uint8_t)len;
  *segment = n;
  for (size_t i = 0; i < reps; i++) buf[n++] = 0x6a, buf[n++] = 0x00; /* images: {} */
  *bytes = n;
  return buf;
}

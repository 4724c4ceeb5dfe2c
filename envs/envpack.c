/* Packers of the two messages every env step sends: EnvRequest (a
 * client, at each begin) and EnvResponse (a server, for each answer).
 *
 * protobuf-c sizes a message before it packs it, and sizes each embedded
 * message again when it writes its length, walking the descriptors each
 * time: an answer's observation text was measured three times. These
 * write the same bytes as protobuf_c_message_pack (fields in order of
 * number, proto3 defaults left out: 0, false, NULL or "" and a float
 * equal to 0, -0 too; an embedded message written whenever it is there) from
 * one measure of each string. tests/envs/test_envs_pack.c checks them
 * byte for byte against protobuf-c. Unknown fields are not written: the
 * messages packed here are built by the caller, never decoded ones. */
#include <string.h>

#include "envs/internal.h"

static size_t varint_bytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

static uint8_t *varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* A field of length len under its key: the bytes it takes. */
static size_t delimited_bytes(uint32_t field, size_t len) {
  return varint_bytes((uint64_t)field << 3 | 2) + varint_bytes(len) + len;
}

static uint8_t *key(uint8_t *p, uint32_t field, unsigned wire_type) { return varint(p, (uint64_t)field << 3 | wire_type); }

/* A varint field (an int32 or an enum sign-extended, as protobuf-c
 * writes it), left out when 0. */
static size_t scalar_bytes(uint32_t field, uint64_t v) { return v ? varint_bytes((uint64_t)field << 3) + varint_bytes(v) : 0; }

static uint8_t *scalar(uint8_t *p, uint32_t field, uint64_t v) { return v ? varint(key(p, field, 0), v) : p; }

static uint8_t *delimited(uint8_t *p, uint32_t field, const void *data, size_t len) {
  p = varint(key(p, field, 2), len);
  if (len) memcpy(p, data, len);
  return p + len;
}

static uint8_t *string(uint8_t *p, uint32_t field, const char *s, size_t len) {
  return len ? delimited(p, field, s, len) : p;
}

static size_t string_bytes(uint32_t field, size_t len) { return len ? delimited_bytes(field, len) : 0; }

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static size_t float_bytes(uint32_t field, float f) { return f != 0.0f ? varint_bytes((uint64_t)field << 3) + 4 : 0; }

static uint8_t *fixed_float(uint8_t *p, uint32_t field, float f) {
  if (f == 0.0f) return p;
  uint32_t u = float_bits(f);
  p = key(p, field, 5);
  for (int i = 0; i < 4; i++) *p++ = (uint8_t)(u >> (8 * i));
  return p;
}

static size_t len_of(const char *s) { return s ? strlen(s) : 0; }

/* ---- EnvResponse ---- */

static size_t image_bytes(const Longhaul__Image *im) {
  return scalar_bytes(1, im->offset) + scalar_bytes(2, im->width) + scalar_bytes(3, im->height) +
         scalar_bytes(4, im->channels) + (im->pixels.len ? delimited_bytes(5, im->pixels.len) : 0);
}

static uint8_t *image(uint8_t *p, const Longhaul__Image *im) {
  p = varint(key(p, 2, 2), image_bytes(im));
  p = scalar(p, 1, im->offset);
  p = scalar(p, 2, im->width);
  p = scalar(p, 3, im->height);
  p = scalar(p, 4, im->channels);
  return im->pixels.len ? delimited(p, 5, im->pixels.data, im->pixels.len) : p;
}

static size_t term_bytes(const Longhaul__RewardTerm *t) {
  return string_bytes(1, len_of(t->name)) + float_bytes(2, t->value) + scalar_bytes(3, t->step);
}

static uint8_t *term(uint8_t *p, const Longhaul__RewardTerm *t) {
  p = varint(key(p, 8, 2), term_bytes(t));
  p = string(p, 1, t->name, len_of(t->name));
  p = fixed_float(p, 2, t->value);
  return scalar(p, 3, t->step);
}

int lh_envs_bytes_put_response(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvResponse *r, size_t *at) {
  const Longhaul__Observation *o = r->observation;
  size_t error = len_of(r->error), description = len_of(r->description), expert = len_of(r->expert_action);
  size_t text = o ? len_of(o->text) : 0, obs = string_bytes(1, text);
  for (size_t i = 0; o && i < o->n_images; i++) obs += delimited_bytes(2, image_bytes(o->images[i]));
  uint64_t status = (uint64_t)(int64_t)r->status;
  size_t n = scalar_bytes(1, r->request_id) + scalar_bytes(2, r->session_id) + scalar_bytes(3, status) +
             string_bytes(4, error) + (o ? delimited_bytes(5, obs) : 0) + float_bytes(6, r->reward) +
             scalar_bytes(7, r->done != 0) + string_bytes(9, description) + string_bytes(10, expert) +
             scalar_bytes(100, r->max_batch) + scalar_bytes(101, r->max_batch_bytes);
  for (size_t i = 0; i < r->n_terms; i++) n += delimited_bytes(8, term_bytes(r->terms[i]));
  if (lh_envs_bytes_reserve(b, n + 20) < 0) return LH_ENOMEM;
  uint8_t *p = varint(key(b->data + b->len, field, 2), n);
  if (at) *at = (size_t)(p - b->data);
  p = scalar(p, 1, r->request_id);
  p = scalar(p, 2, r->session_id);
  p = scalar(p, 3, status);
  p = string(p, 4, r->error, error);
  if (o) {
    p = varint(key(p, 5, 2), obs);
    p = string(p, 1, o->text, text);
    for (size_t i = 0; i < o->n_images; i++) p = image(p, o->images[i]);
  }
  p = fixed_float(p, 6, r->reward);
  p = scalar(p, 7, r->done != 0);
  for (size_t i = 0; i < r->n_terms; i++) p = term(p, r->terms[i]);
  p = string(p, 9, r->description, description);
  p = string(p, 10, r->expert_action, expert);
  p = scalar(p, 100, r->max_batch);
  p = scalar(p, 101, r->max_batch_bytes);
  b->len = (size_t)(p - b->data);
  return 0;
}

/* ---- EnvRequest ---- */

static size_t option_bytes(const Longhaul__KeyValue *kv) {
  return string_bytes(1, len_of(kv->key)) + string_bytes(2, len_of(kv->value));
}

int lh_envs_bytes_put_request(lh_envs_bytes *b, uint32_t field, const Longhaul__EnvRequest *q, size_t *at) {
  size_t env_name = len_of(q->env_name), action = len_of(q->action);
  uint64_t op = (uint64_t)(int64_t)(int32_t)q->op;  /* an enum may be unsigned in C */
  size_t n = scalar_bytes(1, q->request_id) + scalar_bytes(2, op) + scalar_bytes(3, q->session_id) +
             string_bytes(4, env_name) + scalar_bytes(6, q->seed) + string_bytes(7, action);
  for (size_t i = 0; i < q->n_options; i++) n += delimited_bytes(5, option_bytes(q->options[i]));
  if (lh_envs_bytes_reserve(b, n + 20) < 0) return LH_ENOMEM;
  uint8_t *p = varint(key(b->data + b->len, field, 2), n);
  if (at) *at = (size_t)(p - b->data);
  p = scalar(p, 1, q->request_id);
  p = scalar(p, 2, op);
  p = scalar(p, 3, q->session_id);
  p = string(p, 4, q->env_name, env_name);
  for (size_t i = 0; i < q->n_options; i++) {
    const Longhaul__KeyValue *kv = q->options[i];
    p = varint(key(p, 5, 2), option_bytes(kv));
    p = string(p, 1, kv->key, len_of(kv->key));
    p = string(p, 2, kv->value, len_of(kv->value));
  }
  p = scalar(p, 6, q->seed);
  p = string(p, 7, q->action, action);
  b->len = (size_t)(p - b->data);
  return 0;
}

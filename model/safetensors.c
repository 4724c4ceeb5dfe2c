/* model.safetensors: an 8-byte little-endian header length, a JSON header
 * (dtype, shape, data_offsets per tensor; __metadata__.config holds the
 * [model] section as JSON), then the float32 data, row-major, in table
 * order. The loader trusts nothing in the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "model/internal.h"

/* Largest header accepted (the safetensors format's own limit). */
#define MAX_HEADER_BYTES (100u * 1024u * 1024u)

static char *header_json(const lh_model *m) {
  cJSON *root = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
  char *cfg = lh_model_config_to_json(&m->cfg);
  int ok = root && meta && cfg && cJSON_AddStringToObject(meta, "config", cfg);
  free(cfg);
  size_t begin = 0;
  for (int i = 0; ok && i < m->n_tensors; i++) {
    const lh_model_tensor *t = &m->tensors[i];
    cJSON *o = cJSON_AddObjectToObject(root, t->name);
    cJSON *shape = cJSON_CreateArray();
    cJSON *offs = cJSON_CreateArray();
    ok = o && shape && offs && cJSON_AddStringToObject(o, "dtype", "F32");
    for (int j = 0; ok && j < t->ndim; j++)
      ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->shape[j]));
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin));
    begin += t->numel * sizeof(float);
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin));
    if (ok) {
      cJSON_AddItemToObject(o, "shape", shape);
      cJSON_AddItemToObject(o, "data_offsets", offs);
    } else {
      cJSON_Delete(shape);
      cJSON_Delete(offs);
    }
  }
  char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return s;
}

int lh_model_serialize_whole(const lh_model *m, unsigned char **out, size_t *n_bytes, size_t *offsets) {
  if (!m || !out || !n_bytes) return LH_EINVAL;
  *out = NULL;
  /* The whole model's table names the file's tensors and shapes. */
  lh_model *w = NULL;
  int rc = m->shards == 1 ? LH_OK : lh_model_new_table(&m->cfg, m->be, &w, NULL);
  if (rc) return rc;
  const lh_model *layout = w ? w : m;
  char *json = header_json(layout);
  size_t jlen = json ? strlen(json) : 0;
  size_t padded = (jlen + 7) / 8 * 8; /* data starts 8-byte aligned */
  size_t data = 0;
  for (int i = 0; i < layout->n_tensors; i++) data += layout->tensors[i].numel * sizeof(float);
  size_t total = 8 + padded + data;
  unsigned char *buf = json ? malloc(total) : NULL;
  float *host = malloc(m->n_floats * sizeof(float));
  rc = buf && host ? LH_OK : LH_ENOMEM;
  if (!rc) rc = m->be->download(m->be->context, host, m->params, m->n_floats * sizeof(float));
  if (!rc) {
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, json, jlen);
    memset(buf + 8 + jlen, ' ', padded - jlen);
    size_t at = 8 + padded;
    for (int i = 0; i < layout->n_tensors; i++) {
      const lh_model_tensor *t = &m->tensors[i], *tw = &layout->tensors[i];
      size_t skip = t->expert_shard ? (size_t)m->e_first * (t->numel / (size_t)m->e_local) : 0;
      if (offsets) offsets[i] = at;
      /* The other shards' experts are the caller's to fill. */
      if (skip) memset(buf + at, 0, skip * sizeof(float));
      memcpy(buf + at + skip * sizeof(float), host + t->offset, t->numel * sizeof(float));
      size_t after = tw->numel - skip - t->numel;
      if (after) memset(buf + at + (skip + t->numel) * sizeof(float), 0, after * sizeof(float));
      at += tw->numel * sizeof(float);
    }
    *out = buf;
    *n_bytes = total;
  } else {
    free(buf);
  }
  free(host);
  free(json);
  lh_model_free(w);
  return rc;
}

int lh_model_serialize(const lh_model *m, unsigned char **out, size_t *n_bytes) {
  if (!m || !out || !n_bytes) return LH_EINVAL;
  *out = NULL;
  /* A file is one whole model: shards are gathered first (learner/experts.c). */
  if (m->shards > 1) return LH_EMODEL_STATE;
  return lh_model_serialize_whole(m, out, n_bytes, NULL);
}

int lh_model_save(const lh_model *m, const char *dir, lh_errbuf *err) {
  if (!m || !dir) return LH_EINVAL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return lh_errbuf_set(err, LH_EMODEL_IO, "cannot create directory '%s': %s", dir,
                         strerror(errno));
  unsigned char *bytes = NULL;
  size_t n = 0;
  LH_TRY(lh_model_serialize(m, &bytes, &n));
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  /* write then rename, so a reader never sees half a checkpoint */
  int rc = LH_OK;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rc = lh_errbuf_set(err, LH_EMODEL_IO, "cannot write '%s': %s", tmp, strerror(errno));
  } else {
    int ok = fwrite(bytes, 1, n, f) == n;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
      remove(tmp);
      rc = lh_errbuf_set(err, LH_EMODEL_IO, "cannot write '%s': %s", path, strerror(errno));
    }
  }
  free(bytes);
  return rc;
}

static int read_file(const char *path, unsigned char **data, size_t *size, lh_errbuf *err) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return lh_errbuf_set(err, LH_EMODEL_IO, "cannot open checkpoint '%s': %s", path,
                         strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    unsigned char *bigger = realloc(buf, cap * 2);
    if (!bigger) {
      free(buf);
      buf = NULL;
    } else {
      buf = bigger;
      cap *= 2;
    }
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) return LH_ENOMEM;
  if (bad) {
    free(buf);
    return lh_errbuf_set(err, LH_EMODEL_IO, "cannot read checkpoint '%s'", path);
  }
  *data = buf;
  *size = n;
  return LH_OK;
}

/* Checks one tensor entry of the header against the table; fills the
 * byte range. */
static int check_entry(const lh_model *m, const cJSON *e, int *index, size_t *begin,
                       size_t *end, const char *path, lh_errbuf *err) {
  const char *name = e->string;
  int i = lh_model_find(m, name);
  if (i < 0)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_UNKNOWN,
                         "checkpoint '%s' holds tensor '%s', which this config does not have",
                         path, name);
  const lh_model_tensor *t = &m->tensors[i];
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_DTYPE, "checkpoint '%s': tensor '%s' has dtype %s, "
                         "expected F32", path, name,
                         cJSON_IsString(dtype) ? dtype->valuestring : "(missing)");
  int ok = cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == t->ndim;
  for (int j = 0; ok && j < t->ndim; j++) {
    const cJSON *s = cJSON_GetArrayItem(shape, j);
    ok = cJSON_IsNumber(s) && s->valuedouble == t->shape[j];
  }
  if (!ok) {
    char want[64];
    if (t->ndim == 1) snprintf(want, sizeof want, "[%d]", t->shape[0]);
    else if (t->ndim == 2) snprintf(want, sizeof want, "[%d,%d]", t->shape[0], t->shape[1]);
    else snprintf(want, sizeof want, "[%d,%d,%d]", t->shape[0], t->shape[1], t->shape[2]);
    return lh_errbuf_set(err, LH_EMODEL_CKPT_SHAPE,
                         "checkpoint '%s': tensor '%s' does not have shape %s", path, name,
                         want);
  }
  const cJSON *a = cJSON_GetArrayItem(offs, 0), *b = cJSON_GetArrayItem(offs, 1);
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !cJSON_IsNumber(a) ||
      !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < a->valuedouble ||
      b->valuedouble > 1e15 || b->valuedouble - a->valuedouble != (double)(t->numel * 4))
    return lh_errbuf_set(err, LH_EMODEL_CKPT_OFFSETS,
                         "checkpoint '%s': tensor '%s' has data_offsets that are not a pair "
                         "[begin, begin + %zu]", path, name, t->numel * 4);
  *index = i;
  *begin = (size_t)a->valuedouble;
  *end = (size_t)b->valuedouble;
  return LH_OK;
}

typedef struct {
  size_t begin, end;
  int index;
} span;

static int by_begin(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* Parses the header and places each tensor's data; *out is the new model. */
static int load_parsed(const cJSON *root, const unsigned char *data, size_t data_bytes,
                       const char *path, const lh_backend *be, lh_model **out,
                       lh_errbuf *err) {
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  const cJSON *cfgs = cJSON_GetObjectItemCaseSensitive(meta, "config");
  if (!cJSON_IsString(cfgs))
    return lh_errbuf_set(err, LH_EMODEL_CKPT_METADATA,
                         "checkpoint '%s' has no __metadata__.config string", path);
  lh_model_config cfg;
  lh_errbuf sub = {0};
  if (lh_model_config_from_json(cfgs->valuestring, &cfg, &sub))
    return lh_errbuf_set(err, LH_EMODEL_CKPT_METADATA, "checkpoint '%s': metadata config: %s",
                         path, sub.msg);
  lh_model *m = NULL;
  LH_TRY(lh_model_new_table(&cfg, be, &m, err));
  span *spans = calloc((size_t)m->n_tensors, sizeof *spans);
  char *seen = calloc((size_t)m->n_tensors, 1);
  int rc = spans && seen ? LH_OK : LH_ENOMEM, n = 0;
  for (const cJSON *e = root->child; !rc && e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) continue;
    span s;
    rc = check_entry(m, e, &s.index, &s.begin, &s.end, path, err);
    if (!rc && seen[s.index])
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_JSON, "checkpoint '%s' names tensor '%s' twice",
                         path, e->string);
    if (!rc) {
      seen[s.index] = 1;
      spans[n++] = s;
    }
  }
  for (int i = 0; !rc && i < m->n_tensors; i++)
    if (!seen[i])
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_MISSING, "checkpoint '%s' lacks tensor '%s'",
                         path, m->tensors[i].name);
  if (!rc) qsort(spans, (size_t)n, sizeof *spans, by_begin);
  size_t at = 0;
  for (int i = 0; !rc && i < n; i++) {
    if (spans[i].begin != at)
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_OFFSETS,
                         "checkpoint '%s': tensor '%s' starts at byte %zu, expected %zu "
                         "(data must be contiguous)", path, m->tensors[spans[i].index].name,
                         spans[i].begin, at);
    at = spans[i].end;
  }
  if (!rc && at > data_bytes)
    rc = lh_errbuf_set(err, LH_EMODEL_CKPT_TRUNCATED,
                       "checkpoint '%s' is truncated: its tensors need %zu data bytes, the "
                       "file has %zu", path, at, data_bytes);
  if (!rc && at < data_bytes)
    rc = lh_errbuf_set(err, LH_EMODEL_CKPT_SIZE,
                       "checkpoint '%s' has %zu bytes after its last tensor", path,
                       data_bytes - at);
  /* allocated only now that the file is known to hold every tensor */
  if (!rc) rc = lh_model_alloc_params(m, err);
  float *host = rc ? NULL : calloc(m->n_floats, sizeof(float));
  if (!rc && !host) rc = LH_ENOMEM;
  for (int i = 0; !rc && i < n; i++) {
    const lh_model_tensor *t = &m->tensors[spans[i].index];
    memcpy(host + t->offset, data + spans[i].begin, t->numel * sizeof(float));
  }
  if (!rc) rc = be->upload(be->context, m->params, host, m->n_floats * sizeof(float));
  if (!rc) m->params_version++;
  free(host);
  free(spans);
  free(seen);
  if (rc) {
    lh_model_free(m);
    return rc;
  }
  *out = m;
  return LH_OK;
}

int lh_model_load_bytes(const void *bytes, size_t size, const char *path,
                        const lh_backend *be, lh_model **out, lh_errbuf *err) {
  if ((!bytes && size) || !be || !out) return LH_EINVAL;
  if (!path) path = "(memory)";
  *out = NULL;
  const unsigned char *data = bytes;
  int rc = LH_OK;
  uint64_t hlen = 0;
  if (size < 8) {
    rc = lh_errbuf_set(err, LH_EMODEL_CKPT_TRUNCATED,
                       "checkpoint '%s' is truncated: %zu bytes, shorter than the 8-byte "
                       "header length", path, size);
  } else {
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)data[i] << (8 * i);
    if (hlen > MAX_HEADER_BYTES)
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_HEADER_SIZE,
                         "checkpoint '%s' declares a %llu-byte header, over the %u-byte limit",
                         path, (unsigned long long)hlen, MAX_HEADER_BYTES);
    else if (hlen < 2)
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_HEADER_SIZE,
                         "checkpoint '%s' declares a %llu-byte header, too short for JSON",
                         path, (unsigned long long)hlen);
    else if (hlen > size - 8)
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_TRUNCATED,
                         "checkpoint '%s' is truncated: its header needs %llu bytes, the file "
                         "has %zu after the length", path, (unsigned long long)hlen, size - 8);
  }
  cJSON *root = NULL;
  if (!rc) {
    root = cJSON_ParseWithLength((const char *)data + 8, (size_t)hlen);
    if (!cJSON_IsObject(root))
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_JSON,
                         "checkpoint '%s': the header is not a JSON object", path);
  }
  if (!rc) rc = load_parsed(root, data + 8 + hlen, size - 8 - (size_t)hlen, path, be, out, err);
  cJSON_Delete(root);
  return rc;
}

int lh_model_load_file(const char *path, const lh_backend *be, lh_model **out,
                       lh_errbuf *err) {
  if (!path || !be || !out) return LH_EINVAL;
  *out = NULL;
  unsigned char *data = NULL;
  size_t size = 0;
  LH_TRY(read_file(path, &data, &size, err));
  int rc = lh_model_load_bytes(data, size, path, be, out, err);
  free(data);
  return rc;
}

int lh_model_load(const char *dir, const lh_backend *be, lh_model **out, lh_errbuf *err) {
  if (!dir) return LH_EINVAL;
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  return lh_model_load_file(path, be, out, err);
}

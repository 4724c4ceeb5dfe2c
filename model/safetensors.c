/* model.safetensors: an 8-byte little-endian header length, a JSON header
 * (dtype, shape, data_offsets per tensor; __metadata__.config holds the
 * [model] section as JSON), then the float32 data, row-major, in table
 * order. The loader trusts nothing in the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The file's first bytes for the whole model m is or is a shard of: the
 * 8-byte header length and the header, padded with blanks so that the data
 * starts 8-byte aligned (malloc'd into *out). LH_ENOMEM. */
static int file_header(const lh_model *m, unsigned char **out, size_t *n_bytes) {
  *out = NULL;
  /* The whole model's table names the file's tensors and shapes. */
  lh_model *w = NULL;
  if (m->shards > 1 && lh_model_new_table(&m->cfg, m->be, &w, NULL)) return LH_ENOMEM;
  char *json = header_json(w ? w : m);
  lh_model_free(w);
  size_t jlen = json ? strlen(json) : 0, padded = (jlen + 7) / 8 * 8;
  unsigned char *buf = json ? malloc(8 + padded) : NULL;
  if (buf) {
    lh_put_le64(buf, padded);
    memcpy(buf + 8, json, jlen);
    memset(buf + 8 + jlen, ' ', padded - jlen);
  }
  free(json);
  if (!buf) return LH_ENOMEM;
  *out = buf, *n_bytes = 8 + padded;
  return LH_OK;
}

/* serialize_whole's walk: each piece at the next bytes of the file, m's
 * own from host, the others' zero. */
typedef struct {
  const lh_model *m;
  const float *host;
  unsigned char *buf;
  size_t at, *offsets;
} whole_bytes;

static int place_piece(void *arg, const lh_model_piece *p, lh_errbuf *err) {
  (void)err;
  whole_bytes *w = arg;
  if (w->offsets && p->at == 0 && p->shard <= 0) w->offsets[p->tensor] = w->at;
  if (lh_model_holds_piece(w->m, p))
    memcpy(w->buf + w->at, w->host + w->m->tensors[p->tensor].offset + p->at, p->n * sizeof(float));
  else
    memset(w->buf + w->at, 0, p->n * sizeof(float));
  w->at += p->n * sizeof(float);
  return 0;
}

int lh_model_serialize_whole(const lh_model *m, unsigned char **out, size_t *n_bytes, size_t *offsets) {
  if (!m || !out || !n_bytes) return LH_EINVAL;
  *out = NULL;
  unsigned char *head = NULL;
  size_t head_bytes = 0, total = 0;
  LH_TRY(file_header(m, &head, &head_bytes));
  total = head_bytes + lh_model_whole_floats(m) * sizeof(float);  /* an upper bound: the padding */
  whole_bytes w = {m, malloc(m->n_floats * sizeof(float)), malloc(total), head_bytes, offsets};
  int rc = w.host && w.buf ? LH_OK : LH_ENOMEM;
  if (!rc) rc = m->be->download(m->be->context, (float *)w.host, m->params, m->n_floats * sizeof(float));
  if (!rc) {
    memcpy(w.buf, head, head_bytes);
    rc = lh_model_each_piece(m, LH_MODEL_PIECE_FLOATS, place_piece, &w, NULL);
  }
  free((float *)w.host);
  free(head);
  if (rc) {
    free(w.buf);
    return rc;
  }
  *out = w.buf;
  *n_bytes = w.at;
  return LH_OK;
}

int lh_model_serialize(const lh_model *m, unsigned char **out, size_t *n_bytes) {
  if (!m || !out || !n_bytes) return LH_EINVAL;
  *out = NULL;
  /* A file is one whole model: a shard's is gathered or streamed
   * (learner/experts.c, learner/checkpoint.c). */
  if (m->shards > 1) return LH_EMODEL_STATE;
  return lh_model_serialize_whole(m, out, n_bytes, NULL);
}

/* save_pieces' walk: each piece filled into buf and appended to f (while
 * the file can be written). */
typedef struct {
  FILE *f;
  float *buf;
  lh_model_fill_fn fill;
  void *ctx;
  int write_errno;  /* the first failed write's, or 0 */
} file_writer;

static int write_piece(void *arg, const lh_model_piece *p, lh_errbuf *err) {
  file_writer *w = arg;
  LH_TRY(w->fill(w->ctx, p, w->buf, err));
  if (w->f && !w->write_errno && fwrite(w->buf, sizeof(float), p->n, w->f) != p->n)
    w->write_errno = errno ? errno : EIO;
  return 0;
}

int lh_model_save_pieces(const lh_model *m, const char *dir, float *buf, size_t max_floats, lh_model_fill_fn fill,
                         void *ctx, lh_errbuf *err) {
  if (!m || !dir || !buf || !max_floats || !fill) return LH_EINVAL;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  /* What goes wrong with the file is told after the walk: every piece is
   * filled whatever happens to it. */
  int rc = LH_OK;
  lh_errbuf file_err = {0};
  unsigned char *head = NULL;
  size_t head_bytes = 0;
  file_writer w = {NULL, buf, fill, ctx, 0};
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    rc = lh_errbuf_set(&file_err, LH_EMODEL_IO, "cannot create directory '%s': %s", dir, strerror(errno));
  else if (file_header(m, &head, &head_bytes))
    rc = lh_errbuf_set(&file_err, LH_ENOMEM, "cannot write '%s': out of memory for its header", path);
  /* write then rename, so a reader never sees half a checkpoint */
  else if (!(w.f = fopen(tmp, "wb")) || fwrite(head, 1, head_bytes, w.f) != head_bytes)
    w.write_errno = errno ? errno : EIO;
  free(head);
  int walk = lh_model_each_piece(m, max_floats, write_piece, &w, err);
  if (w.f && fclose(w.f) != 0 && !w.write_errno) w.write_errno = errno ? errno : EIO;
  if (!rc && !walk && !w.write_errno && rename(tmp, path) != 0) w.write_errno = errno ? errno : EIO;
  if (!rc && w.write_errno) {
    remove(tmp);
    rc = lh_errbuf_set(&file_err, LH_EMODEL_IO, "cannot write '%s': %s", path, strerror(w.write_errno));
  }
  if (walk) {
    if (w.f) remove(tmp);
    return walk;
  }
  if (rc && err) *err = file_err;
  return rc;
}

/* lh_model_save's pieces: m's own parameters. */
static int download_piece(void *ctx, const lh_model_piece *p, float *dst, lh_errbuf *err) {
  const lh_model *m = ctx;
  int rc = lh_model_piece_download(m, m->params, p, dst);
  return rc ? lh_errbuf_set(err, rc, "cannot read the parameters: %s", lh_strerror(rc)) : 0;
}

int lh_model_save(const lh_model *m, const char *dir, lh_errbuf *err) {
  if (!m || !dir) return LH_EINVAL;
  if (m->shards > 1) return LH_EMODEL_STATE;
  size_t room = lh_model_largest_piece(m, LH_MODEL_PIECE_FLOATS);
  float *buf = malloc(room * sizeof(float));
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "cannot write '%s': out of memory", dir);
  int rc = lh_model_save_pieces(m, dir, buf, room, download_piece, (void *)m, err);
  free(buf);
  return rc;
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

/* Where a file's data (what follows its header) is read from: memory, or
 * an open file from byte data_at on. */
typedef struct {
  const unsigned char *bytes;
  int fd;
  size_t data_at;
} data_source;

/* n bytes at byte `at` of the data into dst: 0, or -1 with errno. */
static int read_data(const data_source *src, size_t at, void *dst, size_t n) {
  if (src->bytes) {
    memcpy(dst, src->bytes + at, n);
    return 0;
  }
  unsigned char *d = dst;
  for (size_t done = 0; done < n;) {
    ssize_t got = pread(src->fd, d + done, n - done, (off_t)(src->data_at + at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EIO;  /* the file shrank under us */
      return -1;
    }
    done += (size_t)got;
  }
  return 0;
}

/* load_parsed's walk: the pieces m holds, read from their place in the
 * file (data_begin[tensor] + the piece's place in the whole tensor). */
typedef struct {
  lh_model *m;
  const data_source *src;
  const size_t *data_begin;
  float *buf;
  const char *path;
} piece_reader;

static int read_piece(void *arg, const lh_model_piece *p, lh_errbuf *err) {
  piece_reader *r = arg;
  if (!lh_model_holds_piece(r->m, p)) return 0;
  if (read_data(r->src, r->data_begin[p->tensor] + p->whole_at * sizeof(float), r->buf, p->n * sizeof(float)))
    return lh_errbuf_set(err, LH_EMODEL_IO, "cannot read checkpoint '%s': %s", r->path, strerror(errno));
  return lh_model_piece_upload(r->m, r->m->params, p, r->buf);
}

/* Parses the header and places each tensor's data: *out is the new model,
 * expert shard `shard` of `shards` of the file's, which gets only what it
 * holds. */
static int load_parsed(const cJSON *root, const data_source *src, size_t data_bytes, const char *path,
                       const lh_backend *be, int shard, int shards, lh_model **out, lh_errbuf *err) {
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
  /* The whole model's table checks the file. */
  lh_model *w = NULL, *m = NULL;
  LH_TRY(lh_model_new_table(&cfg, be, &w, err));
  span *spans = calloc((size_t)w->n_tensors, sizeof *spans);
  char *seen = calloc((size_t)w->n_tensors, 1);
  size_t *data_begin = calloc((size_t)w->n_tensors, sizeof *data_begin);
  int rc = spans && seen && data_begin ? LH_OK : LH_ENOMEM, n = 0;
  for (const cJSON *e = root->child; !rc && e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) continue;
    span s;
    rc = check_entry(w, e, &s.index, &s.begin, &s.end, path, err);
    if (!rc && seen[s.index])
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_JSON, "checkpoint '%s' names tensor '%s' twice",
                         path, e->string);
    if (!rc) {
      seen[s.index] = 1;
      data_begin[s.index] = s.begin;
      spans[n++] = s;
    }
  }
  for (int i = 0; !rc && i < w->n_tensors; i++)
    if (!seen[i])
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_MISSING, "checkpoint '%s' lacks tensor '%s'",
                         path, w->tensors[i].name);
  if (!rc) qsort(spans, (size_t)n, sizeof *spans, by_begin);
  size_t at = 0;
  for (int i = 0; !rc && i < n; i++) {
    if (spans[i].begin != at)
      rc = lh_errbuf_set(err, LH_EMODEL_CKPT_OFFSETS,
                         "checkpoint '%s': tensor '%s' starts at byte %zu, expected %zu "
                         "(data must be contiguous)", path, w->tensors[spans[i].index].name,
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
  if (!rc) rc = lh_model_new_shard_uninit(&cfg, be, shard, shards, &m, err);
  size_t room = rc ? 0 : lh_model_largest_piece(m, LH_MODEL_PIECE_FLOATS);
  piece_reader r = {m, src, data_begin, rc ? NULL : malloc(room * sizeof(float)), path};
  if (!rc && !r.buf) rc = LH_ENOMEM;
  if (!rc) rc = lh_model_each_piece(m, LH_MODEL_PIECE_FLOATS, read_piece, &r, err);
  if (!rc) m->params_version++;
  free(r.buf);
  free(spans);
  free(seen);
  free(data_begin);
  lh_model_free(w);
  if (rc) {
    lh_model_free(m);
    return rc;
  }
  *out = m;
  return LH_OK;
}

/* The header length of a file of size bytes whose first 8 are len8. */
static int check_header_length(const unsigned char *len8, size_t size, const char *path, uint64_t *hlen,
                               lh_errbuf *err) {
  if (size < 8)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_TRUNCATED,
                         "checkpoint '%s' is truncated: %zu bytes, shorter than the 8-byte "
                         "header length", path, size);
  *hlen = lh_get_le64(len8);
  if (*hlen > MAX_HEADER_BYTES)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_HEADER_SIZE,
                         "checkpoint '%s' declares a %llu-byte header, over the %u-byte limit",
                         path, (unsigned long long)*hlen, MAX_HEADER_BYTES);
  if (*hlen < 2)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_HEADER_SIZE,
                         "checkpoint '%s' declares a %llu-byte header, too short for JSON",
                         path, (unsigned long long)*hlen);
  if (*hlen > size - 8)
    return lh_errbuf_set(err, LH_EMODEL_CKPT_TRUNCATED,
                         "checkpoint '%s' is truncated: its header needs %llu bytes, the file "
                         "has %zu after the length", path, (unsigned long long)*hlen, size - 8);
  return LH_OK;
}

/* The header JSON text (hlen bytes) and the data after it. */
static int load_header(const char *text, uint64_t hlen, const data_source *src, size_t data_bytes, const char *path,
                       const lh_backend *be, int shard, int shards, lh_model **out, lh_errbuf *err) {
  cJSON *root = cJSON_ParseWithLength(text, (size_t)hlen);
  int rc = cJSON_IsObject(root) ? LH_OK
                                : lh_errbuf_set(err, LH_EMODEL_CKPT_JSON,
                                                "checkpoint '%s': the header is not a JSON object", path);
  if (!rc) rc = load_parsed(root, src, data_bytes, path, be, shard, shards, out, err);
  cJSON_Delete(root);
  return rc;
}

int lh_model_load_bytes(const void *bytes, size_t size, const char *path,
                        const lh_backend *be, lh_model **out, lh_errbuf *err) {
  if ((!bytes && size) || !be || !out) return LH_EINVAL;
  if (!path) path = "(memory)";
  *out = NULL;
  const unsigned char *data = bytes;
  uint64_t hlen = 0;
  LH_TRY(check_header_length(data, size, path, &hlen, err));
  data_source src = {data + 8 + hlen, -1, 0};
  return load_header((const char *)data + 8, hlen, &src, size - 8 - (size_t)hlen, path, be, 0, 1, out, err);
}

/* Reads the header of the file at path, then only the floats of the shard. */
static int load_path(const char *path, const lh_backend *be, int shard, int shards, lh_model **out,
                     lh_errbuf *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return lh_errbuf_set(err, LH_EMODEL_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
  struct stat sb;
  unsigned char len8[8];
  char *text = NULL;
  uint64_t hlen = 0;
  int rc = LH_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    rc = lh_errbuf_set(err, LH_EMODEL_IO, "cannot read checkpoint '%s': not a regular file", path);
  size_t size = rc ? 0 : (size_t)sb.st_size;
  data_source head = {NULL, fd, 0};
  if (!rc && size >= 8 && read_data(&head, 0, len8, 8))
    rc = lh_errbuf_set(err, LH_EMODEL_IO, "cannot read checkpoint '%s': %s", path, strerror(errno));
  if (!rc) rc = check_header_length(len8, size, path, &hlen, err);
  if (!rc && !(text = malloc((size_t)hlen))) rc = LH_ENOMEM;
  if (!rc && read_data(&head, 8, text, (size_t)hlen))
    rc = lh_errbuf_set(err, LH_EMODEL_IO, "cannot read checkpoint '%s': %s", path, strerror(errno));
  data_source src = {NULL, fd, 8 + (size_t)hlen};
  if (!rc) rc = load_header(text, hlen, &src, size - 8 - (size_t)hlen, path, be, shard, shards, out, err);
  free(text);
  close(fd);
  return rc;
}

int lh_model_load_file(const char *path, const lh_backend *be, lh_model **out,
                       lh_errbuf *err) {
  if (!path || !be || !out) return LH_EINVAL;
  return load_path(path, be, 0, 1, out, err);
}

int lh_model_load_shard(const char *dir, const lh_backend *be, int shard, int shards, lh_model **out,
                        lh_errbuf *err) {
  if (!dir || !be || !out) return LH_EINVAL;
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  return load_path(path, be, shard, shards, out, err);
}

int lh_model_load(const char *dir, const lh_backend *be, lh_model **out, lh_errbuf *err) {
  return lh_model_load_shard(dir, be, 0, 1, out, err);
}

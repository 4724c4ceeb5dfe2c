/* learner: atomic checkpoints of the learner process (learner.h says what
 * a checkpoint holds and in what order it is made durable). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "learner/learner.h"

#define OPT_MAGIC "LHOPT001"

static int fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* Removes a directory of plain files (a stale temporary one). */
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[2 * LH_LEARNER_TEXT_BYTES];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static void put_u64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* optimizer.bin: magic, n floats, moment1, moment2 (host floats), then
 * lh_hash64 of everything before it. */
static int save_optimizer(lh_model *m, const char *dir, lh_errbuf *err) {
  size_t n = lh_model_n_floats(m);
  if (!lh_model_moment1(m)) return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: the model has no moments");
  size_t bytes = 16 + 2 * n * sizeof(float) + 8;
  uint8_t *buf = malloc(bytes);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory for the optimizer state");
  memcpy(buf, OPT_MAGIC, 8);
  put_u64(buf + 8, n);
  const lh_backend *be = lh_model_backend(m);
  int rc = be->download(be->context, buf + 16, lh_model_moment1(m), n * sizeof(float));
  if (!rc) rc = be->download(be->context, buf + 16 + n * sizeof(float), lh_model_moment2(m), n * sizeof(float));
  put_u64(buf + bytes - 8, lh_hash64(buf, bytes - 8, 0));
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_OPTIMIZER_FILE);
  FILE *f = rc ? NULL : fopen(path, "wb");
  if (!rc && (!f || fwrite(buf, 1, bytes, f) != bytes || fflush(f) || fsync(fileno(f))))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(errno));
  else if (rc)
    lh_errbuf_set(err, rc, "checkpoint: cannot read the moments from the backend");
  if (f) fclose(f);
  free(buf);
  return rc;
}

static int load_optimizer(lh_model *m, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_OPTIMIZER_FILE);
  size_t n = lh_model_n_floats(m), bytes = 16 + 2 * n * sizeof(float) + 8;
  FILE *f = fopen(path, "rb");
  if (!f) return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s", path, strerror(errno));
  uint8_t *buf = malloc(bytes + 1);
  size_t got = buf ? fread(buf, 1, bytes + 1, f) : 0;
  fclose(f);
  int rc = 0;
  if (!buf) rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  else if (got != bytes || memcmp(buf, OPT_MAGIC, 8) || get_u64(buf + 8) != n)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT,
                       "checkpoint: %s is not the optimizer state of this model (%zu bytes, want %zu)", path,
                       got, bytes);
  else if (get_u64(buf + bytes - 8) != lh_hash64(buf, bytes - 8, 0))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s fails its checksum", path);
  if (!rc) {
    const lh_backend *be = lh_model_backend(m);
    rc = be->upload(be->context, lh_model_moment1(m), buf + 16, n * sizeof(float));
    if (!rc) rc = be->upload(be->context, lh_model_moment2(m), buf + 16 + n * sizeof(float), n * sizeof(float));
    if (rc) lh_errbuf_set(err, rc, "checkpoint: cannot upload the moments");
  }
  free(buf);
  return rc;
}

int lh_learner_ckpt_save(const char *ckpt_dir, lh_model *m, const lh_learner_state *st,
                         const lh_learner_trainer *t, char *path_out, lh_errbuf *err) {
  if (!ckpt_dir || !*ckpt_dir || !m || !st)
    return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL directory, model or state");
  if (strlen(ckpt_dir) > LH_LEARNER_TEXT_BYTES - 64)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: directory name too long");
  if (mkdir(ckpt_dir, 0777) && errno != EEXIST)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot create %s: %s (set [learner] ckpt_dir)",
                         ckpt_dir, strerror(errno));
  char name[64], tmp[LH_LEARNER_TEXT_BYTES], final[LH_LEARNER_TEXT_BYTES];
  snprintf(name, sizeof name, "step-%08llu", (unsigned long long)st->step);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld", ckpt_dir, name, (long)getpid());
  snprintf(final, sizeof final, "%s/%s", ckpt_dir, name);
  remove_tree(tmp);
  int rc = lh_model_save(m, tmp, err);
  if (!rc) rc = save_optimizer(m, tmp, err);
  if (!rc) rc = lh_learner_state_save(tmp, st, err);
  if (!rc && t) rc = lh_learner_trainer_save_done(t, tmp, err);
  char p[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(p, sizeof p, "%s/model.safetensors", tmp);
  if (!rc && (fsync_path(p, 0) || fsync_path(tmp, 1)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot flush %s: %s", tmp, strerror(errno));
  /* A checkpoint of the same step from an earlier run is replaced. */
  if (!rc) remove_tree(final);
  if (!rc && rename(tmp, final))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(errno));
  if (rc) {
    remove_tree(tmp);
    return rc;
  }
  /* Then `latest`, through a temporary file. */
  char lt[LH_LEARNER_TEXT_BYTES + 32], lf[LH_LEARNER_TEXT_BYTES + 32];
  snprintf(lt, sizeof lt, "%s/.%s.tmp", ckpt_dir, LH_LEARNER_LATEST_FILE);
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  FILE *f = fopen(lt, "wb");
  if (!f || fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f))) rc = -1;
  if (f && fclose(f)) rc = -1;
  if (!rc && rename(lt, lf)) rc = -1;
  if (!rc && fsync_path(ckpt_dir, 1)) rc = -1;
  if (rc) {
    unlink(lt);
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", lf, strerror(errno));
  }
  if (path_out) snprintf(path_out, LH_LEARNER_TEXT_BYTES, "%s", final);
  return 0;
}

int lh_learner_ckpt_latest_dir(const char *ckpt_dir, char *dir, lh_errbuf *err) {
  char lf[LH_LEARNER_TEXT_BYTES + 32];
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  FILE *f = fopen(lf, "rb");
  if (!f)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s (nothing to resume from)", lf,
                         strerror(errno));
  char name[128] = "";
  int ok = fgets(name, sizeof name, f) != NULL;
  fclose(f);
  name[strcspn(name, "\r\n")] = 0;
  if (!ok || strncmp(name, "step-", 5) || strchr(name, '/'))
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s does not name a step-N directory", lf);
  snprintf(dir, LH_LEARNER_TEXT_BYTES, "%s/%s", ckpt_dir, name);
  return 0;
}

int lh_learner_ckpt_exists(const char *ckpt_dir) {
  if (!ckpt_dir) return 0;
  char lf[LH_LEARNER_TEXT_BYTES + 32];
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  return access(lf, R_OK) == 0;
}

int lh_learner_ckpt_load_latest(const char *ckpt_dir, const lh_backend *be, lh_model **out,
                                lh_learner_state *st, char *dir_out, lh_errbuf *err) {
  if (!ckpt_dir || !be || !out || !st) return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL argument");
  *out = NULL;
  char dir[LH_LEARNER_TEXT_BYTES];
  LH_TRY(lh_learner_ckpt_latest_dir(ckpt_dir, dir, err));
  lh_model *m = NULL;
  int rc = lh_model_load(dir, be, &m, err);
  if (!rc && (rc = lh_model_enable_training(m))) lh_errbuf_set(err, rc, "checkpoint: cannot enable training");
  if (!rc) rc = load_optimizer(m, dir, err);
  if (!rc) rc = lh_learner_state_load(dir, st, err);
  if (rc) {
    lh_model_free(m);
    return rc;
  }
  *out = m;
  if (dir_out) snprintf(dir_out, LH_LEARNER_TEXT_BYTES, "%s", dir);
  return 0;
}

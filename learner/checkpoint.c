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

#include "common/buf.h"
#include "learner/internal.h"

/* LHOPT002: the checksum is XXH3-64; an LHOPT001 file (lh_hash64) still
 * loads. */
#define OPT_MAGIC "LHOPT002"
#define OPT_MAGIC_LEGACY_SUM "LHOPT001"

static int fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* What goes on inside ckpt_dir goes through a descriptor of it (opened
 * once per call, following ckpt_dir itself when it is a link: that is
 * where the user put the checkpoints) and never through a symbolic link
 * found inside it: entries are looked at with AT_SYMLINK_NOFOLLOW, folders
 * opened with O_NOFOLLOW, and a link is only ever unlinked itself. So
 * neither pruning nor replacing a checkpoint can remove or write anything
 * outside ckpt_dir, whatever links someone left there. */
static int open_ckpt_dir(const char *ckpt_dir) { return open(ckpt_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

/* The deepest folder remove_at goes into: a checkpoint holds plain files,
 * so this only bounds what a hand-made tree can make it do. */
#define REMOVE_MAX_DEPTH 8

/* Removes the entry name of the folder dfd: a folder with what it holds,
 * anything else (a file, a symbolic link, whatever it points at) unlinked
 * itself. 0 when it is gone (or was not there), else -1 with errno. */
static int remove_at(int dfd, const char *name, int depth) {
  struct stat sb;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW)) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(sb.st_mode)) return unlinkat(dfd, name, 0);
  if (depth >= REMOVE_MAX_DEPTH) {
    errno = ENOTEMPTY;
    return -1;
  }
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove_at(fd, e->d_name, depth + 1);
  closedir(d);
  return unlinkat(dfd, name, AT_REMOVEDIR);
}

/* Whether the entry name of dfd is a symbolic link. */
static int is_link_at(int dfd, const char *name) {
  struct stat sb;
  return fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode);
}

/* The step of a folder named step-N (N decimal digits only), or -1. */
static long long step_of(const char *name) {
  uint64_t step;
  if (strncmp(name, "step-", 5) || strlen(name + 5) > 18 || lh_parse_u64(name + 5, &step)) return -1;
  return (long long)step;
}

/* The folder name `latest` in the folder dfd holds, into name (cap
 * bytes); with nofollow, a `latest` that is a symbolic link is not read
 * (errno ELOOP). 0; or -1 with errno set when the file cannot be read
 * (ENOENT: there is none), or -2 when it holds no step-N name. */
static int read_latest_name(int dfd, int nofollow, char *name, size_t cap) {
  int fd = openat(dfd, LH_LEARNER_LATEST_FILE, O_RDONLY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
  FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
  if (!f) {
    int saved_errno = errno;
    if (fd >= 0) close(fd);
    errno = saved_errno;
    return -1;
  }
  char line[128] = "";
  int ok = fgets(line, sizeof line, f) != NULL;
  int saved_errno = errno;
  int read_error = ferror(f);
  fclose(f);
  if (read_error) {
    errno = saved_errno ? saved_errno : EIO;
    return -1;
  }
  line[strcspn(line, "\r\n")] = 0;
  if (!ok || step_of(line) < 0 || strlen(line) >= cap) return -2;
  snprintf(name, cap, "%s", line);
  return 0;
}

/* Whether `latest` in the folder dfd names the folder name. */
static int latest_names(int dfd, const char *name) {
  char held[64];
  return read_latest_name(dfd, 0, held, sizeof held) == 0 && !strcmp(held, name);
}

/* ---- the model's floats, piece by piece (lh_model_each_piece) ----------- */

/* What a checkpoint streams: this rank's model, its expert group (NULL:
 * the model is whole and this rank alone writes or reads it), which of
 * its buffers (0 the parameters, 1 and 2 the AdamW moments), and one
 * piece's room. */
typedef struct {
  lh_model *m;
  lh_learner_experts *x;
  int buffer;
  float *piece;
  size_t room;
  int group_rc;  /* the group's exchange failed: the job cannot go on */
  lh_errbuf group_err;
} ckpt_stream;

static float *buffer_of(lh_model *m, int b) {
  return b == 0 ? lh_model_params(m) : b == 1 ? lh_model_moment1(m) : lh_model_moment2(m);
}

/* The floats of piece p of the streamed buffer into dst: this rank's own,
 * or with a group, from whichever rank holds it (collective). */
static int fill_piece(void *ctx, const lh_model_piece *p, float *dst, lh_errbuf *err) {
  ckpt_stream *s = ctx;
  const float *buf = buffer_of(s->m, s->buffer);
  if (s->x) {
    int rc = lh_learner_experts_piece(s->x, s->m, buf, p, dst, &s->group_err);
    if (rc) {
      s->group_rc = rc;
      return lh_errbuf_set(err, LH_ELEARNER_COMM, "checkpoint: the expert group's exchange failed: %s",
                           s->group_err.msg);
    }
    return 0;
  }
  int rc = lh_model_piece_download(s->m, buf, p, dst);
  return rc ? lh_errbuf_set(err, rc, "checkpoint: cannot read the model from the backend: %s", lh_strerror(rc)) : 0;
}

static int serve_piece(void *ctx, const lh_model_piece *p, lh_errbuf *err) {
  ckpt_stream *s = ctx;
  return fill_piece(s, p, s->piece, err);
}

/* A rank of the group other than rank 0, or rank 0 with nothing to write:
 * takes part in every piece's exchange of every buffer, in the order rank
 * 0 writes them. */
static int serve(ckpt_stream *s, lh_errbuf *err) {
  int buffers = lh_model_moment1(s->m) ? 3 : 1;
  for (s->buffer = 0; s->buffer < buffers; s->buffer++)
    LH_TRY(lh_model_each_piece(s->m, s->room, serve_piece, s, err));
  return 0;
}

/* optimizer.bin: magic, n floats, moment1, moment2 (n floats each: the
 * whole model's buffers, its padding between tensors zero), then
 * lh_file_checksum of everything before it. */
typedef struct {
  ckpt_stream *s;
  FILE *f;            /* NULL: streamed, not written */
  lh_file_sum *sum;
  size_t at;          /* floats of the moment so far */
  int write_errno;
} opt_writer;

static void emit(opt_writer *w, const void *bytes, size_t n) {
  if (w->f && !w->write_errno && fwrite(bytes, 1, n, w->f) != n) w->write_errno = errno ? errno : EIO;
  if (w->sum) lh_file_sum_add(w->sum, bytes, n);
}

/* Zeros up to float `to` of the moment. */
static void pad_to(opt_writer *w, size_t to) {
  static const float zeros[16];
  while (w->at < to) {
    size_t n = to - w->at < 16 ? to - w->at : 16;
    emit(w, zeros, n * sizeof(float));
    w->at += n;
  }
}

static int write_moment_piece(void *ctx, const lh_model_piece *p, lh_errbuf *err) {
  opt_writer *w = ctx;
  pad_to(w, p->whole_offset + p->whole_at);
  LH_TRY(fill_piece(w->s, p, w->s->piece, err));
  emit(w, w->s->piece, p->n * sizeof(float));
  w->at += p->n;
  return 0;
}

/* Streams both moments, into DIR/optimizer.bin when dir is not NULL. */
static int save_optimizer(ckpt_stream *s, const char *dir, lh_errbuf *err) {
  if (!lh_model_moment1(s->m)) return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: the model has no moments");
  size_t n = lh_model_whole_floats(s->m);
  char path[2 * LH_LEARNER_TEXT_BYTES] = "";
  opt_writer w = {s, NULL, NULL, 0, 0};
  if (dir) {
    snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_OPTIMIZER_FILE);
    if (!(w.f = fopen(path, "wb"))) w.write_errno = errno;
    if (lh_file_sum_new(0, &w.sum)) w.write_errno = ENOMEM;
  }
  uint8_t head[16];
  memcpy(head, OPT_MAGIC, 8);
  lh_put_le64(head + 8, n);
  emit(&w, head, sizeof head);
  int rc = 0;
  for (s->buffer = 1; !rc && s->buffer <= 2; s->buffer++) {
    w.at = 0;
    rc = lh_model_each_piece(s->m, s->room, write_moment_piece, &w, err);
    pad_to(&w, n);
  }
  if (w.sum) {
    uint8_t sum[8];
    lh_put_le64(sum, lh_file_sum_value(w.sum));
    emit(&w, sum, sizeof sum);
  }
  if (w.f && (fflush(w.f) || fsync(fileno(w.f))) && !w.write_errno) w.write_errno = errno;
  if (w.f && fclose(w.f) && !w.write_errno) w.write_errno = errno;
  lh_file_sum_free(w.sum);
  if (rc || !dir) return rc;
  if (w.write_errno)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(w.write_errno));
  return 0;
}

/* Reading optimizer.bin through: every byte checksummed, the pieces the
 * model holds uploaded. */
typedef struct {
  lh_model *m;
  FILE *f;
  lh_file_sum *sum;
  float *buf, *moment;
  size_t room, at;
  const char *path;
} opt_reader;

/* n floats of the file into r->buf, checksummed. */
static int take(opt_reader *r, size_t n, lh_errbuf *err) {
  if (fread(r->buf, sizeof(float), n, r->f) != n)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot read %s: %s", r->path,
                         ferror(r->f) ? strerror(errno) : "it ends early");
  lh_file_sum_add(r->sum, r->buf, n * sizeof(float));
  r->at += n;
  return 0;
}

static int skip_to(opt_reader *r, size_t to, lh_errbuf *err) {
  while (r->at < to) LH_TRY(take(r, to - r->at < r->room ? to - r->at : r->room, err));
  return 0;
}

static int read_moment_piece(void *ctx, const lh_model_piece *p, lh_errbuf *err) {
  opt_reader *r = ctx;
  LH_TRY(skip_to(r, p->whole_offset + p->whole_at, err));
  LH_TRY(take(r, p->n, err));
  if (!lh_model_holds_piece(r->m, p)) return 0;
  int rc = lh_model_piece_upload(r->m, r->moment, p, r->buf);
  return rc ? lh_errbuf_set(err, rc, "checkpoint: cannot upload the moments") : 0;
}

static int load_optimizer(lh_model *m, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_OPTIMIZER_FILE);
  size_t n = lh_model_whole_floats(m), bytes = 16 + 2 * n * sizeof(float) + 8;
  FILE *f = fopen(path, "rb");
  if (!f) return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  size_t got = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) ? (size_t)sb.st_size : 0;
  uint8_t head[16];
  int rc = got == bytes && fread(head, 1, sizeof head, f) == sizeof head ? 0 : -1;
  int legacy = !rc && !memcmp(head, OPT_MAGIC_LEGACY_SUM, 8);
  if (rc || (memcmp(head, OPT_MAGIC, 8) && !legacy) || lh_get_le64(head + 8) != n) {
    fclose(f);
    return lh_errbuf_set(err, LH_ELEARNER_CKPT,
                         "checkpoint: %s is not the optimizer state of this model (%zu bytes, want %zu)", path,
                         got, bytes);
  }
  size_t room = lh_model_largest_piece(m, LH_MODEL_PIECE_FLOATS);
  opt_reader r = {m, f, NULL, malloc(room * sizeof(float)), NULL, room, 0, path};
  if (!r.buf || lh_file_sum_new(legacy, &r.sum)) rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  if (!rc) lh_file_sum_add(r.sum, head, sizeof head);
  for (int b = 1; !rc && b <= 2; b++) {
    r.moment = b == 1 ? lh_model_moment1(m) : lh_model_moment2(m), r.at = 0;
    rc = lh_model_each_piece(m, room, read_moment_piece, &r, err);
    if (!rc) rc = skip_to(&r, n, err);
  }
  uint8_t sum[8];
  if (!rc && fread(sum, 1, sizeof sum, f) != sizeof sum)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot read %s: it ends early", path);
  if (!rc && lh_get_le64(sum) != lh_file_sum_value(r.sum))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s fails its checksum", path);
  fclose(f);
  free(r.buf);
  lh_file_sum_free(r.sum);
  return rc;
}

/* Clears the temporary folder's name: a folder or a link there goes (the
 * files would be written through a link); a file there is not the
 * learner's to remove, so it stays and the write fails on it. */
static void clear_tmp(int dfd, const char *name) {
  struct stat sb;
  if (!fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) && (S_ISDIR(sb.st_mode) || S_ISLNK(sb.st_mode)))
    remove_at(dfd, name, 0);
}

/* Names the folder name (in ckpt_dir, open as dfd) in `latest`, through a
 * temporary file created afresh (never opened through a link left at its
 * name), flushed and renamed over it. */
static int write_latest(const char *ckpt_dir, int dfd, const char *name, lh_errbuf *err) {
  char lt_name[32], lt[LH_LEARNER_TEXT_BYTES + 32], lf[LH_LEARNER_TEXT_BYTES + 32];
  snprintf(lt_name, sizeof lt_name, ".%s.tmp", LH_LEARNER_LATEST_FILE);
  snprintf(lt, sizeof lt, "%s/%s", ckpt_dir, lt_name);
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  int rc = 0, saved_errno = 0;
  const char *failed = lt;
  unlinkat(dfd, lt_name, 0);
  int fd = openat(dfd, lt_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
  if (!f) {
    rc = -1, saved_errno = errno;
    if (fd >= 0) close(fd);
  }
  if (f && (fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f)))) rc = -1, saved_errno = errno;
  if (f && fclose(f) && !rc) rc = -1, saved_errno = errno;
  if (!rc && renameat(dfd, lt_name, dfd, LH_LEARNER_LATEST_FILE)) rc = -1, saved_errno = errno, failed = lf;
  if (!rc && fsync(dfd)) rc = -1, saved_errno = errno, failed = ckpt_dir;
  if (!rc) return 0;
  if (f) unlinkat(dfd, lt_name, 0);
  return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s (to name %s in %s): %s", failed, name, lf,
                       strerror(saved_errno));
}

/* save_files' work once ckpt_dir is open as dfd: the folder's files under a
 * temporary name, renamed into place, then `latest`. */
static int save_into(const char *ckpt_dir, int dfd, ckpt_stream *s, const lh_learner_state *st,
                     const lh_learner_trainer *t, char *path_out, lh_errbuf *err) {
  char name[64], tmp_name[96], tmp[LH_LEARNER_TEXT_BYTES], final[LH_LEARNER_TEXT_BYTES];
  snprintf(name, sizeof name, "step-%08llu", (unsigned long long)st->step);
  snprintf(tmp_name, sizeof tmp_name, ".tmp-%s-%ld", name, (long)getpid());
  snprintf(tmp, sizeof tmp, "%s/%s", ckpt_dir, tmp_name);
  snprintf(final, sizeof final, "%s/%s", ckpt_dir, name);
  clear_tmp(dfd, tmp_name);
  s->buffer = 0;
  int rc = lh_model_save_pieces(s->m, tmp, s->piece, s->room, fill_piece, s, err);
  /* Alone, a rank that could not write the parameters has nobody to
   * serve the moments to. */
  lh_errbuf opt_err;
  int orc = s->group_rc || (rc && !s->x) ? 0 : save_optimizer(s, rc ? NULL : tmp, &opt_err);
  if (s->group_rc) {
    if (orc) *err = opt_err;
    clear_tmp(dfd, tmp_name);
    return LH_ELEARNER_COMM;
  }
  if (!rc && orc) rc = orc, *err = opt_err;
  if (!rc) rc = lh_learner_state_save(tmp, st, err);
  if (!rc && t) rc = lh_learner_trainer_save_done(t, tmp, err);
  char p[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(p, sizeof p, "%s/model.safetensors", tmp);
  if (!rc && (fsync_path(p, 0) || fsync_path(tmp, 1)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot flush %s: %s", tmp, strerror(errno));
  /* A checkpoint of the same step from an earlier run is replaced: moved
   * aside first and removed only once the new one is in place, since
   * `latest` may name it. A link of that name is replaced the same way,
   * the link itself removed and what it points at left alone. */
  char old[sizeof tmp_name + 8];
  snprintf(old, sizeof old, "%s.old", tmp_name);
  remove_at(dfd, old, 0);
  int was_link = !rc && is_link_at(dfd, name);
  int moved = !rc && renameat(dfd, name, dfd, old) == 0;
  if (!rc && renameat(dfd, tmp_name, dfd, name)) {
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (moved) renameat(dfd, old, dfd, name);
    moved = 0;
  }
  if (moved) remove_at(dfd, old, 0);
  if (moved && was_link)
    LH_WARN("learner", "checkpoint: %s was a symbolic link; the checkpoint replaced the link (what it pointed at is "
            "untouched)", final);
  if (rc) {
    clear_tmp(dfd, tmp_name);
    return rc;
  }
  /* Then `latest`. */
  rc = write_latest(ckpt_dir, dfd, name, err);
  /* `latest` still names the previous checkpoint: the new folder, which
   * nothing names, goes (a full disk gets its space back). Once renamed,
   * `latest` may name it, so it stays. */
  if (rc && !latest_names(dfd, name)) remove_at(dfd, name, 0);
  if (rc) return rc;
  if (path_out) snprintf(path_out, LH_LEARNER_TEXT_BYTES, "%s", final);
  return 0;
}

/* Rank 0's part of lh_learner_ckpt_save_group: the folder, its model
 * files streamed through s. Every piece is streamed whatever fails (the
 * group is in each exchange); s->group_rc says the exchange failed. */
static int save_files(const char *ckpt_dir, ckpt_stream *s, const lh_learner_state *st, const lh_learner_trainer *t,
                      char *path_out, lh_errbuf *err) {
  int rc = 0;
  if (!ckpt_dir || !*ckpt_dir || !st)
    rc = lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL directory, model or state");
  else if (strlen(ckpt_dir) > LH_LEARNER_TEXT_BYTES - 64)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: directory name too long");
  else if (mkdir(ckpt_dir, 0777) && errno != EEXIST)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot create %s: %s (set [learner] ckpt_dir)",
                       ckpt_dir, strerror(errno));
  int dfd = rc ? -1 : open_ckpt_dir(ckpt_dir);
  if (!rc && dfd < 0)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s (set [learner] ckpt_dir)", ckpt_dir,
                       strerror(errno));
  if (rc) {
    lh_errbuf served;
    if (s->x && serve(s, &served)) *err = served;
    return s->group_rc ? LH_ELEARNER_COMM : rc;
  }
  rc = save_into(ckpt_dir, dfd, s, st, t, path_out, err);
  close(dfd);
  return rc;
}

int lh_learner_ckpt_save_group(const char *ckpt_dir, lh_model *m, lh_learner_experts *x, const lh_learner_state *st,
                               const lh_learner_trainer *t, char *path_out, lh_errbuf *err) {
  if (!m) return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL model");
  int shards = 1;
  lh_model_expert_shard(m, NULL, &shards, NULL, NULL);
  if (shards != lh_learner_experts_size(x))
    return lh_errbuf_set(err, LH_EINVAL, "checkpoint: a model of %d expert shards, a group of %d ranks", shards,
                         lh_learner_experts_size(x));
  if (lh_learner_experts_group_index(x) != 0) return 0;
  ckpt_stream s = {m, x, 0, NULL, lh_model_largest_piece(m, LH_MODEL_PIECE_FLOATS), 0, {0}};
  s.piece = malloc(s.room * sizeof(float));
  if (x) {
    /* Every rank learns whether each has a piece's room, so that none
     * waits in an exchange another left. */
    double ok = s.piece != NULL;
    int rc = lh_learner_comm_allreduce_f64(lh_learner_experts_group(x), &ok, 1, LH_LEARNER_COMM_MIN, err);
    if (rc || !(ok > 0)) {
      free(s.piece);
      return rc ? lh_errbuf_set(err, LH_ELEARNER_COMM, "checkpoint: the expert group cannot agree to write it")
                : lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory for one piece of the model");
    }
  } else if (!s.piece) {
    return lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory for one piece of the model");
  }
  int rc = lh_learner_experts_shard(x) == 0 ? save_files(ckpt_dir, &s, st, t, path_out, err) : serve(&s, err);
  free(s.piece);
  return rc;
}

int lh_learner_ckpt_save(const char *ckpt_dir, lh_model *m, const lh_learner_state *st,
                         const lh_learner_trainer *t, char *path_out, lh_errbuf *err) {
  return lh_learner_ckpt_save_group(ckpt_dir, m, NULL, st, t, path_out, err);
}

/* read_latest_name of the folder ckpt_dir, following `latest` when it is
 * a link (reading it for a resume touches nothing). */
static int read_latest_in(const char *ckpt_dir, char *name, size_t cap) {
  int dfd = open_ckpt_dir(ckpt_dir);
  if (dfd < 0) return -1;
  int rc = read_latest_name(dfd, 0, name, cap);
  int saved_errno = errno;
  close(dfd);
  errno = saved_errno;
  return rc;
}

int lh_learner_ckpt_latest_dir(const char *ckpt_dir, char *dir, lh_errbuf *err) {
  char lf[LH_LEARNER_TEXT_BYTES + 32], name[64];
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  int rc = read_latest_in(ckpt_dir, name, sizeof name);
  if (rc == -1)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s (nothing to resume from)", lf,
                         strerror(errno));
  if (rc)
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
  return lh_learner_ckpt_load_latest_shard(ckpt_dir, be, 0, 1, out, st, dir_out, err);
}

int lh_learner_ckpt_load_latest_shard(const char *ckpt_dir, const lh_backend *be, int shard, int shards,
                                      lh_model **out, lh_learner_state *st, char *dir_out, lh_errbuf *err) {
  if (!ckpt_dir || !be || !out || !st) return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL argument");
  *out = NULL;
  char dir[LH_LEARNER_TEXT_BYTES];
  LH_TRY(lh_learner_ckpt_latest_dir(ckpt_dir, dir, err));
  lh_model *m = NULL;
  int rc = lh_model_load_shard(dir, be, shard, shards, &m, err);
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

/* One step-N folder of a checkpoint directory. */
typedef struct {
  long long step;
  char name[32];
} step_dir;

static int by_step(const void *a, const void *b) {
  long long x = ((const step_dir *)a)->step, y = ((const step_dir *)b)->step;
  return (x > y) - (x < y);
}

/* The step-N folders of the folder dfd, oldest first, into *out (malloc'd,
 * may be NULL when there are none). With links (not NULL) a symbolic
 * link of such a name is left out and counted there, never followed;
 * without, a link to a folder counts as one. 0; -1 with errno when the
 * folder cannot be read, -2 out of memory. */
static int list_steps(int dfd, step_dir **out, size_t *n, size_t *links) {
  *out = NULL, *n = 0;
  int fd = dup(dfd);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    if (fd >= 0) close(fd);
    return -1;
  }
  rewinddir(d);
  size_t cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long step = step_of(e->d_name);
    if (step < 0 || strlen(e->d_name) >= sizeof(*out)->name) continue;
    struct stat sb;
    if (fstatat(dfd, e->d_name, &sb, links ? AT_SYMLINK_NOFOLLOW : 0)) continue;
    if (links && S_ISLNK(sb.st_mode)) (*links)++;
    if (!S_ISDIR(sb.st_mode)) continue;
    if (*n == cap) {
      size_t grown = lh_grow_cap(cap, cap + 1, 16);
      if (!grown || lh_resize(out, grown, sizeof **out)) {
        rc = -2;
        break;
      }
      cap = grown;
    }
    (*out)[*n].step = step;
    memcpy((*out)[*n].name, e->d_name, strlen(e->d_name) + 1);  /* its length was checked above */
    (*n)++;
  }
  closedir(d);
  if (rc) {
    free(*out);
    *out = NULL, *n = 0;
    return rc;
  }
  if (*n) qsort(*out, *n, sizeof **out, by_step);
  return 0;
}

#define PRUNED_PREFIX ".prune-"

/* Removes what an earlier prune left halfway (a crash while removing): the
 * hidden folders, never a link of such a name (counted in *links). */
static void sweep_pruned(int dfd, size_t *links) {
  int fd = dup(dfd);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    if (fd >= 0) close(fd);
    return;
  }
  rewinddir(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, PRUNED_PREFIX, strlen(PRUNED_PREFIX)) || step_of(e->d_name + strlen(PRUNED_PREFIX)) < 0)
      continue;
    struct stat sb;
    if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW)) continue;
    if (S_ISLNK(sb.st_mode)) (*links)++;
    else if (S_ISDIR(sb.st_mode)) remove_at(dfd, e->d_name, 0);
  }
  closedir(d);
}

int lh_learner_ckpt_prune(const char *ckpt_dir, uint64_t keep, size_t *removed, size_t *links, lh_errbuf *err) {
  if (removed) *removed = 0;
  if (links) *links = 0;
  if (!ckpt_dir) return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL directory");
  if (keep == 0) return 0;
  int dfd = open_ckpt_dir(ckpt_dir);
  if (dfd < 0)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s", ckpt_dir, strerror(errno));
  char latest[64];
  int lrc = read_latest_name(dfd, 1, latest, sizeof latest);
  if (lrc) {
    int link = lrc == -1 && errno == ELOOP;
    close(dfd);
    return lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: not pruning %s: its %s %s", ckpt_dir,
                         LH_LEARNER_LATEST_FILE,
                         link ? "is a symbolic link (what it names cannot be told from what the learner wrote)"
                              : "names no step-N folder");
  }
  step_dir *steps = NULL;
  size_t n = 0, found_links = 0;
  int lr = list_steps(dfd, &steps, &n, &found_links);
  if (lr) {
    int saved_errno = errno;
    close(dfd);
    return lh_errbuf_set(err, lr == -2 ? LH_ENOMEM : LH_ELEARNER_CKPT, "checkpoint: cannot list %s: %s", ckpt_dir,
                         lr == -2 ? "out of memory" : strerror(saved_errno));
  }
  int rc = 0;
  sweep_pruned(dfd, &found_links);
  for (size_t i = 0; n > keep && i < n - keep; i++) {
    if (!strcmp(steps[i].name, latest)) continue;
    /* Renamed out of sight first: a crash halfway leaves a hidden folder
     * (swept by the next prune), never a step-N folder missing files. */
    char gone[sizeof PRUNED_PREFIX + sizeof steps[i].name];
    snprintf(gone, sizeof gone, PRUNED_PREFIX "%s", steps[i].name);
    remove_at(dfd, gone, 0);
    if (renameat(dfd, steps[i].name, dfd, gone) || remove_at(dfd, gone, 0)) {
      if (!rc)
        rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot remove %s/%s: %s", ckpt_dir, steps[i].name,
                           strerror(errno));
      continue;
    }
    if (removed) (*removed)++;
  }
  free(steps);
  close(dfd);
  if (links) *links = found_links;
  return rc;
}

int lh_learner_ckpt_resume_find(const char *ckpt_dir, int *found, lh_errbuf *err) {
  if (!ckpt_dir || !found) return lh_errbuf_set(err, LH_EINVAL, "checkpoint: NULL directory");
  *found = 0;
  step_dir *steps = NULL;
  size_t n = 0;
  int dfd = open_ckpt_dir(ckpt_dir);
  if (dfd < 0 && errno == ENOENT) return 0; /* no ckpt_dir: nothing to resume from */
  int lr = dfd < 0 ? -1 : list_steps(dfd, &steps, &n, NULL);
  if (lr) {
    int saved_errno = errno;
    if (dfd >= 0) close(dfd);
    return lh_errbuf_set(err, lr == -2 ? LH_ENOMEM : LH_ECONFIG,
                         "checkpoint: cannot read [learner] ckpt_dir %s: %s", ckpt_dir,
                         lr == -2 ? "out of memory" : strerror(saved_errno));
  }
  char lf[LH_LEARNER_TEXT_BYTES + 32], name[64], newest[32] = "";
  snprintf(lf, sizeof lf, "%s/%s", ckpt_dir, LH_LEARNER_LATEST_FILE);
  if (n) snprintf(newest, sizeof newest, "%s", steps[n - 1].name);
  free(steps);
  int rc = read_latest_in(ckpt_dir, name, sizeof name);
  int missing = rc == -1 && errno == ENOENT;
  /* A learner stopped between renaming its first checkpoint's folder
   * into place and naming it in `latest` leaves that one whole folder and
   * no `latest` (every later checkpoint finds the previous `latest`
   * there). It is the only checkpoint there is, so --resume names it and
   * goes on from it; with several folders, which one a run should go on
   * from is a person's choice, and a link of that name is not one the
   * learner wrote. */
  struct stat lone;
  if (missing && n == 1 && !fstatat(dfd, newest, &lone, AT_SYMLINK_NOFOLLOW) && S_ISDIR(lone.st_mode)) {
    int wrc = write_latest(ckpt_dir, dfd, newest, err);
    close(dfd);
    if (wrc) return wrc;
    LH_WARN("learner", "checkpoint: %s was missing and %s holds one step-N folder, %s (the learner stopped before "
            "naming its first checkpoint): %s now names it", lf, ckpt_dir, newest, LH_LEARNER_LATEST_FILE);
    *found = 1;
    return 0;
  }
  close(dfd);
  if (missing && n == 0) return 0; /* empty: nothing to resume from */
  if (rc == 0) {
    char p[2 * LH_LEARNER_TEXT_BYTES];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", ckpt_dir, name);
    if (!stat(p, &sb) && S_ISDIR(sb.st_mode)) {
      *found = 1;
      return 0;
    }
    return lh_errbuf_set(err, LH_ECONFIG,
                         "checkpoint: %s names %s, which is not there: write the name of a step-N folder of %s "
                         "into it to resume from that one, or give an empty ckpt_dir to start fresh",
                         lf, name, ckpt_dir);
  }
  char why[160];
  if (missing) snprintf(why, sizeof why, "is missing");
  else if (rc == -1) snprintf(why, sizeof why, "cannot be read (%s)", strerror(errno));
  else snprintf(why, sizeof why, "does not name a step-N folder");
  if (!n)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "checkpoint: %s %s and %s holds no step-N folder: remove it to start fresh", lf, why,
                         ckpt_dir);
  return lh_errbuf_set(err, LH_ECONFIG,
                       "checkpoint: %s %s, but %s holds %zu step-N folder%s (the newest %s): --resume does not "
                       "start fresh over them; write the name of the one to resume from into it (echo %s > %s), "
                       "or move them away to start fresh",
                       lf, why, ckpt_dir, n, n == 1 ? "" : "s", newest, newest, lf);
}

/* learner: the learner's checkpoint state, written atomically (temporary
 * file, fsync, rename, fsync of the folder) in a small checksummed binary
 * format. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

#define MAGIC "LHLSTATE"
/* Format 2: the checksum is XXH3-64; format 1 (lh_hash64) still loads. */
#define FORMAT 2
#define FORMAT_LEGACY_SUM 1
/* magic 8, format 4, fields, checksum 8 */
#define N_U64 12
#define BODY_BYTES (8 + 4 + N_U64 * 8 + 4 + LH_LEARNER_ADV_BASELINE_BYTES + 32)
#define FILE_BYTES (BODY_BYTES + 8)

static void put(uint8_t **p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) (*p)[i] = (uint8_t)(v >> (8 * i));
  *p += bytes;
}
static uint64_t get(const uint8_t **p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)(*p)[i] << (8 * i);
  *p += bytes;
  return v;
}

static void encode(const lh_learner_state *st, uint8_t *buf) {
  uint8_t *p = buf;
  memcpy(p, MAGIC, 8);
  p += 8;
  put(&p, FORMAT, 4);
  const lh_learner_admission_counts *a = &st->admission;
  uint64_t u[N_U64] = {st->step, st->version, st->ingest_position, st->skipped_steps,
                       a->admitted, a->dropped_stale, a->dropped_status, a->admitted_future,
                       a->max_admitted_staleness, 0, 0, 0};
  for (int i = 0; i < N_U64; i++) put(&p, u[i], 8);
  put(&p, st->stage_index, 4);
  lh_learner_adv_baseline_save(&st->baseline, p);
  p += LH_LEARNER_ADV_BASELINE_BYTES;
  memcpy(p, st->rng, 32);
  p += 32;
  put(&p, lh_file_checksum(buf, BODY_BYTES, 0), 8);
}

int lh_learner_state_save(const char *dir, const lh_learner_state *st, lh_errbuf *err) {
  if (!dir || !st) return lh_errbuf_set(err, LH_EINVAL, "learner state save: NULL folder or state");
  char path[4096], tmp[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_STATE_FILE) >= (int)sizeof path ||
      snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, LH_LEARNER_STATE_FILE) >= (int)sizeof tmp)
    return lh_errbuf_set(err, LH_EINVAL, "learner state save: folder path too long");
  uint8_t buf[FILE_BYTES];
  encode(st, buf);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "learner state save: cannot create %s: %s", tmp,
                         strerror(errno));
  size_t done = 0;
  while (done < sizeof buf) {
    ssize_t w = write(fd, buf + done, sizeof buf - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp);
      return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "learner state save: writing %s: %s", tmp, strerror(e));
    }
    done += (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "learner state save: flushing %s: %s", tmp, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "learner state save: renaming %s to %s: %s", tmp, path,
                         strerror(e));
  }
  /* Make the rename itself durable. */
  int dfd = open(dir, O_RDONLY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

int lh_learner_state_load(const char *dir, lh_learner_state *st, lh_errbuf *err) {
  if (!dir || !st) return lh_errbuf_set(err, LH_EINVAL, "learner state load: NULL folder or state");
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, LH_LEARNER_STATE_FILE) >= (int)sizeof path)
    return lh_errbuf_set(err, LH_EINVAL, "learner state load: folder path too long");
  FILE *f = fopen(path, "rb");
  if (!f)
    return lh_errbuf_set(err, LH_ELEARNER_STATE_IO, "learner state load: cannot open %s: %s", path,
                         strerror(errno));
  uint8_t buf[FILE_BYTES + 1];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  if (n != FILE_BYTES)
    return lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT, "learner state load: %s is %s%zu bytes, not %d", path,
                         n > FILE_BYTES ? "over " : "", n, FILE_BYTES);
  if (memcmp(buf, MAGIC, 8) != 0)
    return lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT, "learner state load: %s is not a learner state file",
                         path);
  const uint8_t *p = buf + 8;
  uint64_t format = get(&p, 4);
  if (format != FORMAT && format != FORMAT_LEGACY_SUM)
    return lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT,
                         "learner state load: %s has format %llu; this build reads %d and %d", path,
                         (unsigned long long)format, FORMAT_LEGACY_SUM, FORMAT);
  const uint8_t *q = buf + BODY_BYTES;
  uint64_t sum = get(&q, 8);
  if (sum != lh_file_checksum(buf, BODY_BYTES, format == FORMAT_LEGACY_SUM))
    return lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT, "learner state load: %s fails its checksum (corrupt)",
                         path);
  lh_learner_state t;
  memset(&t, 0, sizeof t);
  uint64_t u[N_U64];
  for (int i = 0; i < N_U64; i++) u[i] = get(&p, 8);
  t.step = u[0], t.version = u[1], t.ingest_position = u[2], t.skipped_steps = u[3];
  t.admission.admitted = u[4], t.admission.dropped_stale = u[5], t.admission.dropped_status = u[6];
  t.admission.admitted_future = u[7], t.admission.max_admitted_staleness = u[8];
  t.stage_index = (uint32_t)get(&p, 4);
  char why[LH_ERRMSG_BYTES];
  lh_errbuf be;
  if (lh_learner_adv_baseline_load(&t.baseline, p, &be) < 0) {
    snprintf(why, sizeof why, "%s", be.msg);
    return lh_errbuf_set(err, LH_ELEARNER_STATE_CORRUPT, "learner state load: %s: %s", path, why);
  }
  p += LH_LEARNER_ADV_BASELINE_BYTES;
  memcpy(t.rng, p, 32);
  *st = t;
  return 0;
}

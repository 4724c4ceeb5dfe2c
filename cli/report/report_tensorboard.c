/* cli report: the per-step series as TensorBoard event files. A file is
 * TFRecord records: the data's length (uint64, little-endian), the masked
 * CRC32C of those 8 bytes, the data, the masked CRC32C of the data; each
 * record's data is an Event (proto/tensorboard.proto, encoded by
 * protobuf-c): first the file version, then per train step one Event with
 * a scalar per exported column (lh_report_step_columns, less the step). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/report/report.h"
#include "proto/tensorboard.pb-c.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bitwise: the
 * files are small. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

/* TFRecord's mask, so that a CRC of data holding CRCs stays strong. */
static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static void le32(uint8_t *out, uint32_t v) {
  for (int i = 0; i < 4; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* Appends one record of ev to f; 0 or -1 (errno set). */
static int put_event(FILE *f, const Tensorboard__Event *ev) {
  size_t n = tensorboard__event__get_packed_size(ev);
  uint8_t *data = malloc(n ? n : 1);
  if (!data) return -1;
  tensorboard__event__pack(ev, data);
  uint8_t head[12], tail[4];
  lh_put_le64(head, (uint64_t)n);
  le32(head + 8, masked(crc32c(head, 8)));
  le32(tail, masked(crc32c(data, n)));
  int ok = fwrite(head, 1, 12, f) == 12 && fwrite(data, 1, n, f) == n && fwrite(tail, 1, 4, f) == 4;
  free(data);
  return ok ? 0 : -1;
}

/* A folder name of a run's name: letters, digits, '.', '-' and '_' kept,
 * everything else '_'; never "." or "..". */
static void folder_name(const char *name, char *out, size_t cap) {
  size_t n = 0;
  for (const char *p = name; *p && n + 1 < cap; p++) {
    char c = *p;
    int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
               c == '-' || c == '_';
    out[n++] = keep ? c : '_';
  }
  out[n] = 0;
  while (out[0] == '_' || out[0] == '.') memmove(out, out + 1, strlen(out));
  if (!out[0]) snprintf(out, cap, "run");
}

static int write_run(const char *dir, const lh_report_run *run, size_t index, lh_errbuf *err) {
  char name[128], sub[4096], path[4400], host[64] = "longhaul";
  folder_name(run->name, name, sizeof name);
  if (snprintf(sub, sizeof sub, "%s/%zu-%s", dir, index, name) >= (int)sizeof sub)
    return lh_errbuf_set(err, LH_EINVAL, "the folder name under %s is too long", dir);
  if (mkdir(sub, 0755) != 0 && errno != EEXIST)
    return lh_errbuf_set(err, LH_EIO, "cannot make %s: %s", sub, strerror(errno));
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  for (char *p = host; *p; p++)
    if (*p == '/') *p = '_';
  const lh_report_data *d = &run->d;
  /* The file's time: the run's first step (so that writing it again
   * replaces it), else now. */
  long long t0 = d->step_count ? (long long)(d->time_ms[0] / 1000) : (long long)time(NULL);
  snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s", sub, t0, host);
  FILE *f = fopen(path, "wb");
  if (!f) return lh_errbuf_set(err, LH_EIO, "cannot write %s: %s", path, strerror(errno));
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = d->step_count ? (double)d->time_ms[0] / 1000.0 : (double)t0;
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  int rc = put_event(f, &ev);
  size_t ncols;
  const lh_report_column *cols = lh_report_step_columns(&ncols);
  Tensorboard__SummaryValue *vals = calloc(ncols, sizeof *vals);
  Tensorboard__SummaryValue **ptrs = calloc(ncols, sizeof *ptrs);
  if (!vals || !ptrs) rc = -1, errno = ENOMEM;
  for (size_t i = 0; i < d->step_count && rc == 0; i++) {
    size_t n = 0;
    for (size_t c = 1; c < ncols; c++) {  /* every column but the step */
      double v = lh_report_column_of(d, cols[c].off)[i];
      if (!isfinite(v)) continue;
      tensorboard__summary_value__init(&vals[n]);
      vals[n].tag = (char *)cols[c].name;
      vals[n].simple_value = (float)v;
      ptrs[n] = &vals[n];
      n++;
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = n;
    sum.value = ptrs;
    Tensorboard__Event e = TENSORBOARD__EVENT__INIT;
    e.wall_time = (double)d->time_ms[i] / 1000.0;
    e.step = (int64_t)d->step[i];
    e.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    e.summary = &sum;
    rc = put_event(f, &e);
  }
  free(vals);
  free(ptrs);
  int e = errno;
  if (fclose(f) != 0 && rc == 0) rc = -1, e = errno;
  if (rc != 0) return lh_errbuf_set(err, LH_EIO, "writing %s: %s", path, strerror(e));
  return 0;
}

int lh_report_tensorboard(const char *dir, const lh_report_run *runs, size_t nruns, lh_errbuf *err) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return lh_errbuf_set(err, LH_EIO, "cannot make %s: %s", dir, strerror(errno));
  for (size_t r = 0; r < nruns; r++) LH_TRY(write_run(dir, &runs[r], r, err));
  return 0;
}

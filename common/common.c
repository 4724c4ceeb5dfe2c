/* common: error table, logger, clocks, hashing. */
#include "common/common.h"
#include "common/str.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

const char *lh_strerror(int err) {
  switch (err) {
#define LH_ERR_MSG(name, value, msg) \
  case value:                        \
    return msg;
    LH_ERR_ALL(LH_ERR_MSG)
#undef LH_ERR_MSG
  }
  return "unknown error";
}

const char *lh_err_name(int err) {
  switch (err) {
#define LH_ERR_NAME(name, value, msg) \
  case value:                         \
    return #name;
    LH_ERR_ALL(LH_ERR_NAME)
#undef LH_ERR_NAME
  }
  return "EUNKNOWN";
}

int lh_errbuf_set(lh_errbuf *e, int code, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

void lh_errbuf_clear(lh_errbuf *e) {
  if (e) {
    e->code = 0;
    e->msg[0] = '\0';
  }
}

/* The logger is the one piece of global mutable state the style allows. */
static lh_log_level log_level = LH_LOG_INFO;
static FILE *log_sink;
static int log_time;

void lh_log_set_level(lh_log_level level) { log_level = level; }
void lh_log_set_file(FILE *sink) { log_sink = sink; }
void lh_log_set_time(int on) { log_time = on != 0; }

int lh_log_from_env(void) {
  const char *t = getenv("LH_LOG_TIME");
  if (t) lh_log_set_time(strcmp(t, "1") == 0);
  const char *l = getenv("LH_LOG_LEVEL");
  if (!l || !*l) return 0;
  lh_log_level level = lh_log_level_from_name(l);
  if (level > LH_LOG_OFF) return -1;
  lh_log_set_level(level);
  return 0;
}

lh_log_level lh_log_level_from_name(const char *name) {
  static const char *names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i <= LH_LOG_OFF; i++)
    if (strcmp(name, names[i]) == 0) return (lh_log_level)i;
  return (lh_log_level)(LH_LOG_OFF + 1);
}

int lh_text_control_at(const char *s, size_t *took) {
  const unsigned char *p = (const unsigned char *)s;
  *took = 0;
  if (*p && (*p < 0x20 || *p == 0x7f)) return *took = 1, *p;
  if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return *took = 2, p[1];
  return -1;
}

size_t lh_text_control_escape(const char *s, char esc[5]) {
  size_t took;
  int code = lh_text_control_at(s, &took);
  if (code >= 0) snprintf(esc, 5, "\\x%02x", (unsigned)(unsigned char)code);
  return took;
}

size_t lh_text_escape(const char *in, char *out, size_t cap) {
  if (!out || !cap) return 0;
  size_t o = 0;
  const char *p = in ? in : "";
  while (*p) {
    char esc[5];
    size_t took = lh_text_control_escape(p, esc), n = took ? 4 : 1;
    if (!took) esc[0] = *p, took = 1;
    if (o + n >= cap) break;
    memcpy(out + o, esc, n);
    o += n;
    p += took;
  }
  out[o] = 0;
  return o;
}

void lh_path_folder(const char *path, char *out, size_t bytes) {
  const char *slash = path ? strrchr(path, '/') : NULL;
  if (!slash) snprintf(out, bytes, ".");
  else if (slash == path) snprintf(out, bytes, "/");
  else snprintf(out, bytes, "%.*s", (int)(slash - path), path);
}

size_t lh_text_cut_utf8(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max) return n;
  n = max;
  while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
  return n;
}

void lh_log(lh_log_level level, const char *component, const char *fmt, ...) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  if (level < log_level || level >= LH_LOG_OFF) return;
  FILE *out = log_sink ? log_sink : stderr;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  char safe[4 * sizeof line];
  lh_text_escape(line, safe, sizeof safe);
  /* One write per line so that lines from several processes sharing a file
   * do not interleave. */
  char when[40] = "";
  if (log_time) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (gmtime_r(&ts.tv_sec, &tm)) {
      size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
      snprintf(when + n, sizeof when - n, ".%03dZ ", (int)(ts.tv_nsec / 1000000));
    }
  }
  fprintf(out, "%s%s %s: %s\n", when, names[level], component, safe);
  fflush(out);
}

void lh_log_meter_warn(lh_log_meter *m, const char *fmt, ...) {
  int64_t now = lh_now_ns();
  m->total++;
  m->since_log++;
  if (m->last_log_ns && now - m->last_log_ns < LH_LOG_METER_INTERVAL_NS) return;
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  LH_WARN(m->component ? m->component : "log", "%s (since last report=%llu total=%llu)", what,
          (unsigned long long)m->since_log, (unsigned long long)m->total);
  m->last_log_ns = now;
  m->since_log = 0;
}

void lh_malloc_return_large(void) { mallopt(M_MMAP_THRESHOLD, 1 << 20); }

int64_t lh_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t lh_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* lh_hash64's FNV-1a, 64-bit, 8 bytes at a time with a final mix: fast
 * enough for weight checksums, and no dependency. words() takes whole
 * words, finish() the last bytes (fewer than 8) and the mix. */
static uint64_t fnv_words(uint64_t h, const unsigned char *p, size_t words) {
  for (size_t i = 0; i < words; i++) {
    uint64_t w;
    memcpy(&w, p + 8 * i, 8);
    h ^= w;
    h *= 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

static uint64_t fnv_finish(uint64_t h, const unsigned char *tail, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= tail[i];
    h *= 1099511628211ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

uint64_t lh_hash64(const void *data, size_t bytes, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = fnv_words(1469598103934665603ULL ^ seed, p, bytes / 8);
  return fnv_finish(h, p + bytes / 8 * 8, bytes % 8);
}

uint64_t lh_xxh3_64(const void *data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t lh_file_checksum(const void *body, size_t bytes, int legacy) {
  return legacy ? lh_hash64(body, bytes, 0) : lh_xxh3_64(body, bytes);
}

struct lh_file_sum {
  XXH3_state_t *xxh3;  /* NULL: legacy */
  uint64_t h;          /* legacy: the words so far */
  unsigned char tail[8];
  size_t tail_bytes;
};

int lh_file_sum_new(int legacy, lh_file_sum **out) {
  lh_file_sum *s = calloc(1, sizeof *s);
  if (!s) return LH_ENOMEM;
  s->h = 1469598103934665603ULL;
  if (!legacy && (!(s->xxh3 = XXH3_createState()) || XXH3_64bits_reset(s->xxh3) != XXH_OK)) {
    lh_file_sum_free(s);
    return LH_ENOMEM;
  }
  *out = s;
  return LH_OK;
}

void lh_file_sum_add(lh_file_sum *s, const void *data, size_t bytes) {
  const unsigned char *p = data;
  if (s->xxh3) {
    XXH3_64bits_update(s->xxh3, p, bytes);
    return;
  }
  if (s->tail_bytes) {  /* complete the word begun by the last call */
    size_t take = 8 - s->tail_bytes < bytes ? 8 - s->tail_bytes : bytes;
    memcpy(s->tail + s->tail_bytes, p, take);
    s->tail_bytes += take, p += take, bytes -= take;
    if (s->tail_bytes < 8) return;
    s->h = fnv_words(s->h, s->tail, 1);
    s->tail_bytes = 0;
  }
  s->h = fnv_words(s->h, p, bytes / 8);
  memcpy(s->tail, p + bytes / 8 * 8, bytes % 8);
  s->tail_bytes = bytes % 8;
}

uint64_t lh_file_sum_value(const lh_file_sum *s) {
  return s->xxh3 ? XXH3_64bits_digest(s->xxh3) : fnv_finish(s->h, s->tail, s->tail_bytes);
}

void lh_file_sum_free(lh_file_sum *s) {
  if (!s) return;
  if (s->xxh3) XXH3_freeState(s->xxh3);
  free(s);
}

int lh_read_text_file(const char *path, int file_error, char **text, size_t *bytes,
                      lh_errbuf *err) {
  return lh_read_text_file_max(path, file_error, LH_TEXT_FILE_MAX_BYTES, text, bytes, err);
}

int lh_read_text_file_max(const char *path, int file_error, size_t max_bytes, char **text, size_t *bytes,
                          lh_errbuf *err) {
  *text = NULL;
  if (bytes) *bytes = 0;
  if (max_bytes > LH_TEXT_FILE_MAX_BYTES) max_bytes = LH_TEXT_FILE_MAX_BYTES;
  /* O_NONBLOCK: opening a pipe would wait for its writer; the file's kind
   * is told from the open descriptor, so nothing can be swapped in
   * between the check and the read. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return lh_errbuf_set(err, file_error, "%s: cannot open the file: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return lh_errbuf_set(err, file_error, "%s: not a regular file (a folder, a device or a pipe)", path);
  }
  if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
    close(fd);
    return lh_errbuf_set(err, file_error, "%s: %lld bytes, longer than %zu; not a config or key file", path,
                         (long long)st.st_size, max_bytes);
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory reading the file", path);
  }
  lh_str buf = {0};
  char chunk[4096];
  int rc = 0;
  for (;;) {
    size_t got = fread(chunk, 1, sizeof chunk, f);
    if (lh_str_append(&buf, chunk, got)) {
      rc = lh_errbuf_set(err, LH_ENOMEM, "%s: out of memory reading the file", path);
      break;
    }
    if (buf.len > max_bytes) {
      rc = lh_errbuf_set(err, file_error, "%s: longer than %zu bytes; not a config or key file", path, max_bytes);
      break;
    }
    if (got < sizeof chunk) {
      if (ferror(f)) rc = lh_errbuf_set(err, file_error, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (rc == 0 && strlen(buf.data) != buf.len)
    rc = lh_errbuf_set(err, file_error, "%s: holds a NUL byte; not a text file", path);
  if (rc != 0) {
    lh_str_free(&buf);
    return rc;
  }
  *text = buf.data;
  if (bytes) *bytes = buf.len;
  return 0;
}

char *lh_text_lines_read(char *str, int num, void *stream) {
  lh_text_lines *r = stream;
  if (!*r->text || r->too_long || num < 2) return NULL;
  size_t len = strcspn(r->text, "\n"), step = len + (r->text[len] == '\n');
  /* a CRLF line goes without its CR (inih drops it anyway), so its limit
   * is an LF line's */
  if (len > 0 && r->text[len - 1] == '\r') len--;
  r->line++;
  if (len + 1 < (size_t)num) { /* the line and its newline fit */
    memcpy(str, r->text, len);
    if (r->text[len] == '\r' || r->text[len] == '\n') str[len++] = '\n';
    str[len] = 0;
  } else {
    /* inih would parse the pieces of a longer line as lines of their own
     * (a comment's tail as a key), so a comment goes as an empty line and
     * anything else stops the reading: the caller names the line. The
     * first line's UTF-8 byte order mark (inih skips it) is no content. */
    size_t lead = r->line == 1 && !strncmp(r->text, "\xef\xbb\xbf", 3) ? 3 : 0;
    lead += strspn(r->text + lead, " \t");
    if (r->text[lead] != ';' && r->text[lead] != '#') {
      r->too_long = r->line;
      return NULL;
    }
    snprintf(str, (size_t)num, "\n");
  }
  r->text += step;
  return str;
}

int lh_parse_u64(const char *v, uint64_t *out) {
  if (!v || *v < '0' || *v > '9') return -1; /* refuses "", "-3", "+3", " 3" */
  errno = 0;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

int lh_parse_i64(const char *v, int64_t *out) {
  if (!v) return -1;
  const char *digits = *v == '-' ? v + 1 : v;
  if (*digits < '0' || *digits > '9') return -1;
  errno = 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

int lh_parse_f64(const char *v, double *out) {
  if (!v || !*v || *v == '+' || isspace((unsigned char)*v)) return -1;
  errno = 0;
  char *end;
  double x = strtod(v, &end);
  if (errno == ERANGE || *end || isnan(x)) return -1;
  *out = x;
  return 0;
}

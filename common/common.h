/* common: error codes, the logger and small helpers every module shares.
 *
 * Errors are negative lh_err codes generated from one table, as libuv does:
 * the enum, lh_strerror() and lh_err_name() come from the same macro lists,
 * one per module, kept in common/errors_<module>.def. A code is never reused
 * or renumbered; each module owns a range of a hundred values. */
#ifndef LH_COMMON_H
#define LH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* XX(NAME, value, "message") */
#define LH_ERR_GENERAL(XX)                                              \
  XX(OK, 0, "success")                                                  \
  XX(ENOMEM, -1, "out of memory")                                       \
  XX(EINVAL, -2, "invalid argument")                                    \
  XX(EIO, -3, "input/output error")                                     \
  XX(ENOENT, -4, "no such file or entry")                               \
  XX(ERANGE, -5, "value out of range")                                  \
  XX(ECONFIG, -6, "bad configuration")                                  \
  XX(ETIMEOUT, -7, "timed out")                                         \
  XX(EZMQ, -8, "ZeroMQ call failed")                                    \
  XX(ESYS, -9, "system call failed")                                    \
  XX(EUNSUPPORTED, -10, "not supported here")                           \
  XX(EINTERRUPTED, -11, "interrupted")                                  \
  XX(EAGAIN, -12, "try again later")                                    \
  XX(EBUSY, -13, "in use by another process")

#include "common/errors_wire.def"
#include "common/errors_store.def"
#include "common/errors_kernels.def"
#include "common/errors_model.def"
#include "common/errors_envs.def"
#include "common/errors_actors.def"
#include "common/errors_learner.def"

#define LH_ERR_ALL(XX)                                                  \
  LH_ERR_GENERAL(XX)                                                    \
  LH_ERR_WIRE(XX)                                                       \
  LH_ERR_STORE(XX)                                                      \
  LH_ERR_KERNELS(XX)                                                    \
  LH_ERR_MODEL(XX)                                                      \
  LH_ERR_ENVS(XX)                                                       \
  LH_ERR_ACTORS(XX)                                                     \
  LH_ERR_LEARNER(XX)

typedef enum {
#define LH_ERR_ENUM(name, value, msg) LH_##name = (value),
  LH_ERR_ALL(LH_ERR_ENUM)
#undef LH_ERR_ENUM
} lh_err;

/* The fixed message of a code ("unknown error" for one not in the table). */
const char *lh_strerror(int err);
/* The code's name without the LH_ prefix, e.g. "EWIRE_TOKEN_RANGE". */
const char *lh_err_name(int err);

/* Error detail kept by an object or written by a caller: what failed, which
 * input, what to do. lh_errbuf_set formats into it and returns err so that
 * a failing path can `return lh_errbuf_set(&e, LH_EINVAL, "...")`. */
#define LH_ERRMSG_BYTES 512
typedef struct {
  int code;
  char msg[LH_ERRMSG_BYTES];
} lh_errbuf;
int lh_errbuf_set(lh_errbuf *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void lh_errbuf_clear(lh_errbuf *e);

/* Text safe for a terminal or a log line: copies in into out (room for
 * cap bytes, always terminated), each control character (below 0x20, 0x7f,
 * and the C1 range U+0080..U+009F, which terminals also obey) written as
 * \xNN. Names a peer sends (actor, environment, reward term, sender) go
 * through it before anyone sees them. Returns the length written (cut at
 * cap - 1). */
size_t lh_text_escape(const char *in, char *out, size_t cap);
/* The length of the longest prefix of s of at most max bytes that ends at
 * a UTF-8 character's start (strlen(s) when that is within max): where to
 * cut a valid text without splitting a character. */
size_t lh_text_cut_utf8(const char *s, size_t max);
/* The escape lh_text_escape writes for the control character at p (C0,
 * DEL, or a C1 character's two bytes) into esc as "\xNN": the bytes of p
 * it stands for, or 0 when p is no control character. */
size_t lh_text_control_escape(const char *p, char esc[5]);
/* The one test of what a control character is, for every output that
 * escapes them (the logger, the terminal, JSON, CSV, HTML): the code of
 * the one at p (0x00..0x1f, 0x7f, or 0x80..0x9f for a C1 character's two
 * bytes C2 80..9F) with its length in *took, or -1 (*took 0) when p is
 * none; the NUL that ends p is none. */
int lh_text_control_at(const char *p, size_t *took);
/* The folder part of path ("." when it has none, "/" for the root), into
 * out. */
void lh_path_folder(const char *path, char *out, size_t bytes);

/* The logger: one line each, `level component: message key=value ...`.
 * The whole message goes through lh_text_escape, so no text from a peer
 * can break a line or drive a terminal. The only global mutable state of
 * the project (level and sink). */
typedef enum { LH_LOG_DEBUG, LH_LOG_INFO, LH_LOG_WARN, LH_LOG_ERROR, LH_LOG_OFF } lh_log_level;
void lh_log_set_level(lh_log_level level);
void lh_log_set_file(FILE *sink);   /* NULL means stderr */
/* With on, every line starts with its UTC time in ISO 8601 with
 * milliseconds ("2026-12-03T14:02:03.123Z info learner: ..."). */
void lh_log_set_time(int on);
/* The logger's settings from the environment: LH_LOG_LEVEL (debug, info,
 * warn, error, off) and LH_LOG_TIME (1: timestamps). Returns 0, or -1 when
 * LH_LOG_LEVEL names no level (the level is then left as it was). */
int lh_log_from_env(void);
lh_log_level lh_log_level_from_name(const char *name);  /* LH_LOG_OFF+1 when unknown */
void lh_log(lh_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A warning that may come often (a peer's bad input, poisoned episodes
 * left out of a step): every call counts, and one line is logged per
 * LH_LOG_METER_INTERVAL_NS at most (the first at once), with how many came
 * since the last line and in all, so that no input can flood the log. */
#define LH_LOG_METER_INTERVAL_NS 5000000000ll
typedef struct {
  const char *component; /* the log component, e.g. "weights" */
  int64_t last_log_ns;
  uint64_t total, since_log;
} lh_log_meter;
void lh_log_meter_warn(lh_log_meter *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LH_DEBUG(comp, ...) lh_log(LH_LOG_DEBUG, comp, __VA_ARGS__)
#define LH_INFO(comp, ...) lh_log(LH_LOG_INFO, comp, __VA_ARGS__)
#define LH_WARN(comp, ...) lh_log(LH_LOG_WARN, comp, __VA_ARGS__)
#define LH_ERROR(comp, ...) lh_log(LH_LOG_ERROR, comp, __VA_ARGS__)

/* Has every block of 1 MiB or more in its own mapping, returned to the
 * system when freed, for the process's lifetime. glibc otherwise raises its
 * mmap threshold after a large block is freed (up to 32 MiB), after which
 * large blocks come from the heap and stay resident once freed: a process
 * whose buffers grow and shrink with its inputs (a long observation, a
 * reply, a weights fetch) keeps its largest footprint for good. Called
 * first thing by the long-lived processes that hold such buffers. */
void lh_malloc_return_large(void);

/* Monotonic clock in nanoseconds and wall clock in milliseconds. */
int64_t lh_now_ns(void);
int64_t lh_wall_ms(void);

/* A 64-bit hash of bytes with a seed (keys, salts); not cryptographic.
 * Also the checksum of files written before XXH3-64 (format 1 of the
 * checkpoint files), which still open. */
uint64_t lh_hash64(const void *data, size_t bytes, uint64_t seed);

/* The checksum of everything that crosses the wire or lands on disk:
 * XXH3-64 with seed 0 from libxxhash, so that Python's
 * xxhash.xxh3_64_intdigest(data) gives the same number. */
uint64_t lh_xxh3_64(const void *data, size_t bytes);

/* The trailing checksum of a checkpoint file's body: lh_xxh3_64, or for a
 * file of the format before it (legacy != 0, told by its magic or format
 * number) lh_hash64 with seed 0. */
uint64_t lh_file_checksum(const void *body, size_t bytes, int legacy);
/* The same checksum of a body that comes in parts (a file written or read
 * piece by piece): lh_file_sum_value after lh_file_sum_add of every part
 * in order is lh_file_checksum of them all. new: LH_ENOMEM or 0; free
 * accepts NULL. */
typedef struct lh_file_sum lh_file_sum;
int lh_file_sum_new(int legacy, lh_file_sum **out);
void lh_file_sum_add(lh_file_sum *s, const void *data, size_t bytes);
uint64_t lh_file_sum_value(const lh_file_sum *s);
void lh_file_sum_free(lh_file_sum *s);

/* A 64-bit number as 8 little-endian bytes and back: the layout of every
 * fixed-size file the checkpoints hold, whatever the host's byte order. */
static inline void lh_put_le64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t lh_get_le64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* Reads the whole text file at path into a new NUL-terminated buffer
 * (*text, freed by the caller; *bytes its length). A file that cannot be
 * opened or read, that holds a NUL byte (so is not text), that is not a
 * regular file (/dev/zero would never end, a pipe may never be written;
 * it is opened without waiting for a writer, so a pipe put in the file's
 * place does not hang the open either), or that is longer than
 * LH_TEXT_FILE_MAX_BYTES (told by its size before a byte is read, and
 * again while reading, should it grow) gives file_error with err naming
 * the path; out of memory gives LH_ENOMEM. Its callers read configs and
 * keys, which are small. */
#define LH_TEXT_FILE_MAX_BYTES (16u << 20)
int lh_read_text_file(const char *path, int file_error, char **text, size_t *bytes,
                      lh_errbuf *err);
/* The same with a cap of max_bytes (at most LH_TEXT_FILE_MAX_BYTES). */
int lh_read_text_file_max(const char *path, int file_error, size_t max_bytes, char **text, size_t *bytes,
                          lh_errbuf *err);

/* INI text held in memory, handed to inih's ini_parse_stream one line at
 * a time by lh_text_lines_read (the stream argument is the lh_text_lines).
 * line is the number of the line last handed out, so that a config error
 * can name it. A line that does not fit inih's buffer (num - 2 bytes
 * without its newline) is never handed out in pieces: a comment is handed
 * out as an empty line, anything else ends the reading (NULL) with
 * too_long set to its number. */
typedef struct {
  const char *text;  /* the reader's position */
  int line;
  int too_long;      /* the number of a line too long to read, or 0 */
} lh_text_lines;
char *lh_text_lines_read(char *str, int num, void *stream);

/* The one set of number parsers for config values, flags and keys: 0, or
 * -1 when v is not one. One rule for all: the whole string is the number,
 * with no blank around it and no leading '+'; overflow is refused.
 * lh_parse_u64: decimal digits only. lh_parse_i64: digits after an
 * optional '-'. lh_parse_f64: strtod's syntax, infinities allowed, NaN
 * refused. Range checks belong to the caller, whose message names the key
 * or flag (lh_ini_u64 and friends, lh_cli_u64 and friends). */
int lh_parse_u64(const char *v, uint64_t *out);
int lh_parse_i64(const char *v, int64_t *out);
int lh_parse_f64(const char *v, double *out);

/* Return early with the code when an lh call fails. */
#define LH_TRY(expr)                                                    \
  do {                                                                  \
    int lh_try_rc_ = (expr);                                            \
    if (lh_try_rc_ < 0) return lh_try_rc_;                              \
  } while (0)

#endif

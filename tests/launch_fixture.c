/* tests: the `longhaul launch` fixture (launch_fixture.h). */
#include "launch_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_util.h"
#include "store/store.h"

void lfx_init(lfx_fleet *f, const char *tag) {
  memset(f, 0, sizeof *f);
  char tmp_tag[64];
  snprintf(tmp_tag, sizeof tmp_tag, "launch-%s", tag);
  ck_assert_int_eq(lh_proc_tmpdir(f->dir, sizeof f->dir, tmp_tag), 0);
  snprintf(f->config, sizeof f->config, "%s/fleet.ini", f->dir);
  snprintf(f->db, sizeof f->db, "%s/replay.db", f->dir);
  snprintf(f->logs, sizeof f->logs, "%s/logs", f->dir);
}

#define MAX_OVER 64
#define MAX_SECTIONS 16

typedef struct {
  char key[64], value[LFX_PATH * 2];
  int used;
} item;

static void add(item *items, int *n, const char *key, const char *value) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(items[i].key, key)) {
      snprintf(items[i].value, sizeof items[i].value, "%s", value);
      return;
    }
  ck_assert_int_lt(*n, MAX_OVER);
  snprintf(items[*n].key, sizeof items[*n].key, "%s", key);
  snprintf(items[*n].value, sizeof items[*n].value, "%s", value);
  (*n)++;
}

/* Writes the overrides of section that were not used yet. */
static void flush_section(FILE *out, item *items, int n, const char *section) {
  size_t len = strlen(section);
  for (int i = 0; i < n; i++)
    if (!items[i].used && !strncmp(items[i].key, section, len) && items[i].key[len] == '.') {
      fprintf(out, "%s = %s\n", items[i].key + len + 1, items[i].value);
      items[i].used = 1;
    }
}

void lfx_write_config(lfx_fleet *f, const char *src, const lfx_override *over, int n_over) {
  static item items[MAX_OVER];
  int n = 0;
  char v[LFX_PATH * 2];
  static const char *const tiny[][2] = {
      {"model.d_model", "16"},        {"model.layers", "2"},         {"model.heads", "2"},
      {"model.experts", "4"},         {"model.topk", "2"},           {"model.shared_experts", "1"},
      {"model.latent", "8"},          {"model.expert_hidden", "8"},  {"model.chunk", "4"},
      {"learner.batch_episodes", "4"}, {"learner.group_size", "4"},  {"learner.train_window", "64"},
      {"learner.ckpt_every", "2"},    {"learner.warmup_steps", "0"}, {"actor.batch", "4"},
      {"actor.group_size", "4"},      {"fleet.status_interval_ms", "500"},
      {"fleet.stop_timeout_ms", "20000"}, {"fleet.restart_backoff_ms", "200"},
      /* Time enough to flush an outbox to a learner restarted under load,
       * whatever the example's own settings. */
      {"actor.flush_timeout_ms", "15000"}, {"learner.max_policy_lag", "4"},
      /* The tiny model seldom solves anything: its groups are flat (every
       * reward 0), and the fleets' tests count its steps. */
      {"learner.skip_flat_groups", "false"}};
  for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) add(items, &n, tiny[i][0], tiny[i][1]);
  snprintf(v, sizeof v, "ipc://%s/ing", f->dir);
  add(items, &n, "learner.ingest_endpoint", v);
  add(items, &n, "actor.learner_endpoint", v);
  snprintf(v, sizeof v, "ipc://%s/pub", f->dir);
  add(items, &n, "learner.weights_pub_endpoint", v);
  add(items, &n, "actor.weights_pub_endpoint", v);
  snprintf(v, sizeof v, "ipc://%s/w", f->dir);
  add(items, &n, "learner.weights_endpoint", v);
  add(items, &n, "actor.weights_endpoint", v);
  add(items, &n, "learner.db", f->db);
  snprintf(v, sizeof v, "%s/ckpt", f->dir);
  add(items, &n, "learner.ckpt_dir", v);
  add(items, &n, "fleet.log_dir", f->logs);
  for (int i = 0; i < n_over; i++) add(items, &n, over[i].key, over[i].value);
  for (int i = 0; i < n; i++) items[i].used = 0;
  FILE *out = fopen(f->config, "w");
  ck_assert_ptr_nonnull(out);
  char section[64] = "";
  char seen[MAX_SECTIONS][64];
  int n_seen = 0;
  const char *p = src;
  while (*p) {
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char line[1024];
    ck_assert_uint_lt(len, sizeof line);
    memcpy(line, p, len);
    line[len] = 0;
    p += len + (end != NULL);
    const char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '[') {
      flush_section(out, items, n, section);
      const char *close = strchr(s, ']');
      ck_assert_ptr_nonnull(close);
      snprintf(section, sizeof section, "%.*s", (int)(close - s - 1), s + 1);
      ck_assert_int_lt(n_seen, MAX_SECTIONS);
      snprintf(seen[n_seen++], sizeof seen[0], "%s", section);
      fprintf(out, "%s\n", line);
      continue;
    }
    const char *eq = strchr(s, '=');
    int replaced = 0;
    if (eq && *s != ';' && *s != '#') {
      const char *k_end = eq;
      while (k_end > s && (k_end[-1] == ' ' || k_end[-1] == '\t')) k_end--;
      char key[128];
      snprintf(key, sizeof key, "%s.%.*s", section, (int)(k_end - s), s);
      /* An example's include names a file beside it in examples/. */
      if (!section[0] && !strcmp(key, ".include")) {
        const char *v0 = eq + 1;
        while (*v0 == ' ' || *v0 == '\t') v0++;
        fprintf(out, "include = %s/examples/%s\n", getenv("LH_SOURCE_DIR"), v0);
        continue;
      }
      for (int i = 0; i < n; i++)
        if (!strcmp(items[i].key, key)) {
          fprintf(out, "%.*s = %s\n", (int)(k_end - s), s, items[i].value);
          items[i].used = replaced = 1;
        }
    }
    if (!replaced) fprintf(out, "%s\n", line);
  }
  flush_section(out, items, n, section);
  /* Sections the text did not have. */
  for (int i = 0; i < n; i++) {
    if (items[i].used) continue;
    const char *dot = strchr(items[i].key, '.');
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - items[i].key), items[i].key);
    fprintf(out, "[%s]\n", sec);
    flush_section(out, items, n, sec);
  }
  fclose(out);
}

void lfx_start(lfx_fleet *f) {
  ck_assert_msg(lh_proc_longhaul() != NULL, "LH_BIN is not set");
  char out[LFX_PATH + 16];
  snprintf(out, sizeof out, "%s/launch.out", f->dir);
  const char *args[] = {"launch", f->config, "--status", "plain", NULL};
  f->launcher = lh_proc_spawn_longhaul(out, args);
  ck_assert_int_gt(f->launcher, 0);
}

int lfx_wait(lfx_fleet *f, int seconds) {
  int rc = lh_proc_wait(f->launcher, seconds, NULL);
  f->launcher = 0;
  return rc;
}

typedef struct {
  char *out;
  size_t bytes;
  int got;
} first_ctx;

static int first(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  first_ctx *c = ctx;
  if (ncols > 0 && values[0]) snprintf(c->out, c->bytes, "%s", values[0]);
  c->got = 1;
  return 1;
}

void lfx_sql_text(const lfx_fleet *f, const char *sql, char *out, size_t bytes) {
  out[0] = 0;
  lh_store_options o;
  lh_store_options_default(&o);
  o.readonly = 1;
  o.quick_check = 0;
  lh_store *s = NULL;
  lh_errbuf e;
  if (access(f->db, F_OK) || lh_store_open_with(f->db, &o, &s, &e)) return;
  first_ctx c = {out, bytes, 0};
  if (lh_store_sql(s, sql, first, &c, NULL, &e)) snprintf(out, bytes, "error: %s", e.msg);
  lh_store_close(s);
}

int64_t lfx_sql_int(const lfx_fleet *f, const char *sql) {
  char v[64];
  lfx_sql_text(f, sql, v, sizeof v);
  if (!v[0] || !strncmp(v, "error", 5)) return -1;
  return strtoll(v, NULL, 10);
}

void lfx_assert_intact(const lfx_fleet *f) {
  char ok[64];
  lfx_sql_text(f, "PRAGMA integrity_check", ok, sizeof ok);
  ck_assert_msg(!strcmp(ok, "ok"), "%s: integrity_check says '%s'", f->db, ok);
}

int lfx_wait_sql(const lfx_fleet *f, const char *sql, int64_t want, int seconds) {
  for (int i = 0; i < seconds * 10; i++) {
    if (lfx_sql_int(f, sql) >= want) return 1;
    usleep(100000);
  }
  return 0;
}

char *lfx_read(const lfx_fleet *f, const char *name) {
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  char *text = lh_proc_read_file(path);
  if (!text) text = strdup("");
  ck_assert_ptr_nonnull(text);
  return text;
}

const char *lfx_events_tail(const char *text) {
  static char *events;
  free(events);
  events = malloc(strlen(text) + 1);
  if (!events) return text;
  size_t n = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
    if (strncmp(p, "info launch: status name=", 25) != 0) memcpy(events + n, p, len), n += len;
    p += len;
  }
  events[n] = 0;
  const char *from = n > 1500 ? strchr(events + n - 1500, '\n') : NULL;
  return from ? from + 1 : events;
}

int lfx_wait_file(const lfx_fleet *f, const char *name, const char *needle, int seconds) {
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  return lh_proc_wait_file(path, needle, seconds);
}

char *lfx_example(const char *name) {
  const char *src = getenv("LH_SOURCE_DIR");
  ck_assert_msg(src != NULL, "LH_SOURCE_DIR is not set");
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/examples/%s", src, name);
  char *text = lh_proc_read_file(path);
  ck_assert_msg(text != NULL, "cannot read %s", path);
  return text;
}

uint64_t lfx_sum_key(const char *text, const char *prefix, const char *key, int *lines) {
  uint64_t sum = 0;
  size_t plen = strlen(prefix), klen = strlen(key);
  if (lines) *lines = 0;
  for (const char *p = text; p && *p;) {
    const char *end = strchr(p, '\n');
    /* A child's line may start with its time (LH_LOG_TIME, which the
     * launcher sets): "2026-12-03T14:02:03.123Z info ...". */
    if (strlen(p) > 25 && p[4] == '-' && p[10] == 'T' && p[23] == 'Z' && p[24] == ' ') p += 25;
    if (!strncmp(p, prefix, plen)) {
      for (const char *q = p; q && (!end || q < end); q = strchr(q + 1, ' ')) {
        const char *w = *q == ' ' ? q + 1 : q;
        if (!strncmp(w, key, klen) && w[klen] == '=') {
          sum += strtoull(w + klen + 1, NULL, 10);
          if (lines) (*lines)++;
          break;
        }
      }
    }
    p = end ? end + 1 : NULL;
  }
  return sum;
}

void lfx_cleanup(lfx_fleet *f) {
  if (f->launcher > 0) lfx_wait(f, 1);
  lh_proc_rmdir(f->dir);
}

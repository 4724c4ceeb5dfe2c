/* longhaul replay export: episodes with their decoded segments, one JSON
 * object per line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"
#include "common/buf.h"

/* 64-bit ids, seeds and counts go out exactly: up to 2^53 as decimal
 * numbers (a cJSON number is a double, which would round above that),
 * above as strings of their digits, since readers that parse numbers as
 * doubles (jq, JavaScript) would round them. */
static int add_u64(cJSON *o, const char *key, uint64_t v) {
  char digits[24];
  snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
  if (v > (1ull << 53)) return cJSON_AddStringToObject(o, key, digits) ? 0 : -1;
  return cJSON_AddRawToObject(o, key, digits) ? 0 : -1;
}

static int add_num(cJSON *o, const char *key, double v) {
  return cJSON_AddNumberToObject(o, key, v) ? 0 : -1;
}

static int add_str(cJSON *o, const char *key, const char *v) {
  return cJSON_AddStringToObject(o, key, v) ? 0 : -1;
}

/* Names come through wire validation (valid UTF-8), but the store cuts a
 * long error text to fit, maybe mid-character: that one is cleaned the
 * way decoded text is. */
static int add_clean_str(cJSON *o, const char *key, const char *v) {
  size_t n = strlen(v);
  uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return -1;
  for (size_t i = 0; i < n; i++) ids[i] = (unsigned char)v[i];
  lh_str clean = {0};
  int bad = lh_cli_tokens_text(ids, n, &clean) != 0;
  free(ids);
  bad = bad || add_str(o, key, clean.data ? clean.data : "");
  lh_str_free(&clean);
  return bad ? -1 : 0;
}

static cJSON *terms_json(const lh_reward_term *terms, size_t count) {
  cJSON *a = cJSON_CreateArray();
  for (size_t k = 0; a && k < count; k++) {
    cJSON *t = cJSON_CreateObject();
    if (!t || !cJSON_AddItemToArray(a, t)) {
      cJSON_Delete(t);
      cJSON_Delete(a);
      return NULL;
    }
    if (add_str(t, "name", terms[k].name) || add_num(t, "value", terms[k].value) ||
        add_num(t, "step", terms[k].step)) {
      cJSON_Delete(a);  /* t with it */
      return NULL;
    }
  }
  return a;
}

static cJSON *report_json(const lh_segment_report *rep) {
  cJSON *o = cJSON_CreateObject();
  cJSON *missing = cJSON_AddArrayToObject(o, "missing");
  int bad = !o || !missing;
  for (uint32_t k = 0; !bad && k < rep->missing_listed; k++) {
    cJSON *x = cJSON_CreateNumber(rep->missing[k]);
    bad = !x || !cJSON_AddItemToArray(missing, x);
  }
  bad = bad || add_num(o, "missing_count", rep->missing_count) ||
        add_num(o, "dropped", rep->dropped) ||
        !cJSON_AddBoolToObject(o, "complete", rep->complete);
  if (!bad && rep->prefix_episode) bad = !cJSON_AddBoolToObject(o, "prefix_whole", rep->prefix_whole);
  if (bad) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *episode_json(const lh_episode_row *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  const char *status = lh_episode_status_name(r->status);
  const char *outcome = lh_episode_outcome_name(r->outcome);
  int bad = add_u64(o, "id", r->id) || add_str(o, "actor", r->actor) || add_str(o, "env", r->env) ||
            add_u64(o, "task_seed", r->task_seed) || add_u64(o, "group_id", r->group_id) ||
            add_str(o, "status", status ? status : "unknown");
  bad = bad || (outcome ? add_str(o, "outcome", outcome) : !cJSON_AddNullToObject(o, "outcome"));
  bad = bad || add_clean_str(o, "error", r->error) || add_num(o, "steps", r->steps) ||
        add_u64(o, "tokens", r->tokens) || add_u64(o, "tokens_received", r->tokens_received);
  bad = bad || (r->has_reward ? add_num(o, "reward", r->reward) : !cJSON_AddNullToObject(o, "reward"));
  if (r->has_versions)
    bad = bad || add_u64(o, "min_version", r->min_version) || add_u64(o, "max_version", r->max_version);
  else
    bad = bad || !cJSON_AddNullToObject(o, "min_version") || !cJSON_AddNullToObject(o, "max_version");
  bad = bad || !cJSON_AddBoolToObject(o, "ended", r->has_end) ||
        add_num(o, "segment_count", r->segment_count) ||
        add_num(o, "segments_received", r->segments_received) ||
        add_num(o, "payloads_dropped", r->payloads_dropped) || add_num(o, "created_ms", (double)r->created_ms) ||
        add_num(o, "updated_ms", (double)r->updated_ms) || add_num(o, "ended_ms", (double)r->ended_ms);
  /* A member of a shared prefix: its segments begin with its leader's
   * (their episode_id says so), so the episode reads whole. */
  if (r->prefix_episode)
    bad = bad || add_u64(o, "prefix_episode", r->prefix_episode) || add_u64(o, "prefix_tokens", r->prefix_tokens);
  if (bad) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

typedef struct {
  cJSON *segments;
  uint64_t id;  /* the episode exported */
} segments_ctx;

static int add_segment(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  segments_ctx *c = ctx;
  cJSON *segments = c->segments;
  cJSON *j;
  if (seg) {
    j = lh_cli_segment_json(seg);
    /* a segment of the shared prefix is its leader's: which one */
    if (j && seg->episode_id != c->id && add_u64(j, "episode", seg->episode_id)) {
      cJSON_Delete(j);
      j = NULL;
    }
  } else {
    /* Retention dropped the payload: the row says which one. */
    j = cJSON_CreateObject();
    if (j && (!cJSON_AddNumberToObject(j, "seq", seq) || !cJSON_AddTrueToObject(j, "dropped"))) {
      cJSON_Delete(j);
      j = NULL;
    }
  }
  if (!j) return LH_ENOMEM;
  if (!cJSON_AddItemToArray(segments, j)) {
    cJSON_Delete(j);
    return LH_ENOMEM;
  }
  return 0;
}

/* One episode as one line of out. Returns 0 or an lh_err with err set. */
static int export_one(lh_store *s, uint64_t id, FILE *out, lh_errbuf *err) {
  lh_episode_row row;
  LH_TRY(lh_store_episode_get(s, id, &row, err));
  cJSON *o = episode_json(&row);
  if (!o) return lh_errbuf_set(err, LH_ENOMEM, "out of memory encoding episode %llu", (unsigned long long)id);
  size_t count = 0;
  lh_reward_term *terms = NULL;
  int rc = lh_store_episode_rewards(s, id, NULL, 0, &count, err);
  if (rc >= 0 && count) {
    terms = calloc(count, sizeof *terms);
    rc = terms ? lh_store_episode_rewards(s, id, terms, count, &count, err)
               : lh_errbuf_set(err, LH_ENOMEM, "out of memory reading reward terms");
  }
  cJSON *tj = rc >= 0 ? terms_json(terms, count) : NULL;
  free(terms);
  if (rc >= 0 && (!tj || !cJSON_AddItemToObject(o, "terms", tj))) {
    cJSON_Delete(tj);
    rc = lh_errbuf_set(err, LH_ENOMEM, "out of memory encoding episode %llu", (unsigned long long)id);
  }
  cJSON *segments = rc >= 0 ? cJSON_AddArrayToObject(o, "segments") : NULL;
  if (rc >= 0 && !segments) rc = lh_errbuf_set(err, LH_ENOMEM, "out of memory");
  lh_segment_report rep;
  memset(&rep, 0, sizeof rep);
  if (rc >= 0) {
    segments_ctx sc = {segments, id};
    rc = lh_store_episode_segments(s, id, add_segment, &sc, &rep, err);
    if (rc == LH_ENOMEM) lh_errbuf_set(err, rc, "out of memory encoding episode %llu", (unsigned long long)id);
  }
  cJSON *gaps = rc >= 0 ? report_json(&rep) : NULL;
  if (rc >= 0 && (!gaps || !cJSON_AddItemToObject(o, "gaps", gaps))) {
    cJSON_Delete(gaps);
    rc = lh_errbuf_set(err, LH_ENOMEM, "out of memory");
  }
  char *line = rc >= 0 ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (rc >= 0 && !line) rc = lh_errbuf_set(err, LH_ENOMEM, "out of memory printing episode %llu", (unsigned long long)id);
  /* cJSON writes C0 as \u00XX; DEL and C1 go the same way here. */
  if (rc >= 0 && (lh_cli_term_json(out, line) || fputc('\n', out) < 0))
    rc = lh_errbuf_set(err, LH_EIO, "cannot write: %s", strerror(errno));
  free(line);
  return rc < 0 ? rc : 0;
}

typedef struct {
  uint64_t *ids;
  size_t count, cap;
} id_list;

static int collect_id(void *ctx, const lh_episode_row *r) {
  id_list *l = ctx;
  if (lh_reserve(&l->ids, &l->cap, l->count + 1, sizeof *l->ids, 1024)) return LH_ENOMEM;
  l->ids[l->count++] = r->id;
  return 0;
}

/* The progress line with the time left at the rate so far; start_ns is
 * when the export began. */
static void progress(size_t done, size_t total, int64_t start_ns, int64_t *last_ns, int final) {
  int64_t now = lh_now_ns();
  if (!final && now - *last_ns < 200000000) return;  /* five updates a second at most */
  *last_ns = now;
  double elapsed = (double)(now - start_ns) / 1e9;
  double left = done ? elapsed / (double)done * (double)(total - done) : 0.0;
  fprintf(stderr, "\rexport: %zu/%zu episodes (%.0f%%) %.0fs, left %.0fs\033[K", done, total,
          total ? 100.0 * (double)done / (double)total : 100.0, elapsed, left);
  if (final) fputc('\n', stderr);
}

static const lh_cli_help HELP = {
    .cmd = "replay export",
    .usage = "--db FILE [OPTIONS]",
    .about = "Writes one JSON object per line and episode: the episode's fields, its reward terms, its gaps and "
        "its decoded segments (tokens, text, loss_mask, versions, logps, images without their pixels), "
        "filtered as by 'longhaul replay episodes'. Progress goes to stderr when stderr is a terminal (and "
        "the lines do not go to that terminal).",
    .exits = "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
};

int lh_cli_replay_export(int argc, char **argv) {
  const char *format = "jsonl", *out_path = NULL;
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  lh_cli_filter_args fa;
  memset(&fa, 0, sizeof fa);
  lh_cli_opt opts[5 + LH_CLI_FILTER_OPT_COUNT] = {LH_CLI_DB_OPTS(&dbs),
                                                  {"--format", LH_CLI_OPT_STRING, &format, NULL, "jsonl",
                                                   "the only format there is (default)"},
                                                  {"--out", LH_CLI_OPT_STRING, &out_path, NULL, "FILE",
                                                   "write to FILE instead of stdout ('-' is stdout)"},
                                                  LH_CLI_TIMEOUT_OPT(&dbs)};
  lh_cli_filter_opts(&fa, opts + 5);
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, 5 + LH_CLI_FILTER_OPT_COUNT, NULL, 0, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  if (strcmp(format, "jsonl") != 0) {
    fprintf(stderr, "longhaul replay export: --format '%s' is not known (jsonl is the one there is)\n",
            format);
    return LH_EXIT_USAGE;
  }
  lh_episode_filter f;
  if ((rc = lh_cli_filter_build("export", &fa, 0, &f))) return rc;
  lh_store *s;
  if ((rc = lh_cli_replay_open("export", &dbs, &s))) return rc;
  const char *db = dbs.db.v[0];
  /* The ids first: that gives the total for the progress line, and no
   * query stays open on the connection while each episode is read. */
  id_list ids = {NULL, 0, 0};
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int e = lh_store_episodes(s, &f, collect_id, &ids, NULL, &err);
  if (e < 0) {
    free(ids.ids);
    lh_store_close(s);
    return lh_cli_replay_fail("export", db, e, &err);
  }
  FILE *out = stdout;
  int to_file = out_path && strcmp(out_path, "-") != 0;
  if (to_file && lh_cli_dbs_holds(&dbs, out_path)) {
    fprintf(stderr, "longhaul replay export: --out '%s' is a file of the store it reads; write elsewhere\n", out_path);
    free(ids.ids);
    lh_store_close(s);
    return LH_EXIT_USAGE;
  }
  if (to_file && !(out = fopen(out_path, "w"))) {
    fprintf(stderr, "longhaul replay export: cannot write --out '%s': %s\n", out_path, strerror(errno));
    free(ids.ids);
    lh_store_close(s);
    return LH_EXIT_RUNTIME;
  }
  /* Progress only where someone watches, and not into the lines
   * themselves when they go to the same terminal. */
  int show_progress = isatty(STDERR_FILENO) && (to_file || !isatty(STDOUT_FILENO));
  int64_t last_ns = 0, start_ns = lh_now_ns();
  size_t done = 0;
  for (; done < ids.count && e >= 0; done++) {
    e = export_one(s, ids.ids[done], out, &err);
    if (show_progress) progress(done + 1, ids.count, start_ns, &last_ns, 0);
  }
  if (show_progress && e >= 0) progress(done, ids.count, start_ns, &last_ns, 1);
  else if (show_progress) fputc('\n', stderr);
  int closed = to_file ? fclose(out) : fflush(out);
  int close_errno = errno;
  free(ids.ids);
  lh_store_close(s);
  if (e < 0 && e != LH_EIO) return lh_cli_replay_fail("export", db, e, &err);
  if (e == LH_EIO || closed != 0) {
    fprintf(stderr, "longhaul replay export: writing %s failed: %s\n", to_file ? out_path : "stdout",
            e == LH_EIO ? err.msg : strerror(close_errno));
    return LH_EXIT_RUNTIME;
  }
  if (to_file) fprintf(stderr, "longhaul replay export: %zu episodes written to %s\n", done, out_path);
  return LH_EXIT_OK;
}

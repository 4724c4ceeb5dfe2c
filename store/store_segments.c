/* store: reassembly of an episode's segments in seq order, with the gaps
 * (missing seq numbers, count against EpisodeEnd.segment_count). */
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "store/store_internal.h"

/* Seq numbers [from, to) have no row: the first of them listed while room
 * is left, all counted, in time independent of the gap (a peer's
 * EpisodeEnd may claim 2^32 - 1 segments). */
static void note_missing(lh_segment_report *r, uint32_t from, uint32_t to) {
  for (uint32_t q = from; q < to && r->missing_listed < LH_STORE_MAX_GAPS; q++)
    r->missing[r->missing_listed++] = q;
  uint64_t count = (uint64_t)r->missing_count + (to - from);
  r->missing_count = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
}

/* The walk behind both entry points. With keep, fn takes each decoded
 * segment over (frees it with lh_wire_segment_free); without, the walk
 * frees it after the call. */
typedef int (*owned_fn)(void *ctx, uint32_t seq, Longhaul__Segment *seg);

/* The payload rows of an episode, walked in seq order beside its segment
 * rows (segment_payloads, schema 13), and the read of a payload stored in
 * its segment's row (before schema 13). */
typedef struct {
  sqlite3_stmt *rows, *inline_payload;
  int rc;  /* of the last step of rows */
} payload_walk;

/* The payload of segment seq into *buf, *bytes: the walk's row for seq
 * when there is one (valid until its next step), else the one in the
 * segments row, else none (*buf NULL: dropped). 0 or a negative lh_err. */
static int payload_of(lh_store *s, payload_walk *w, uint64_t id, int64_t seq, const void **buf, size_t *bytes,
                      lh_errbuf *err) {
  *buf = NULL, *bytes = 0;
  while (w->rc == SQLITE_ROW && sqlite3_column_int64(w->rows, 0) < seq)
    w->rc = lh_store_step(s, w->rows, "reading payloads", err);
  if (w->rc < 0) return w->rc;
  if (w->rc == SQLITE_ROW && sqlite3_column_int64(w->rows, 0) == seq) {
    *buf = sqlite3_column_blob(w->rows, 1);
    *bytes = (size_t)sqlite3_column_bytes(w->rows, 1);
    if (!*buf) *buf = "";  /* a blob of no bytes */
    return 0;
  }
  if (!w->inline_payload)
    LH_TRY(lh_store_prepare(s, "SELECT payload FROM segments WHERE episode = ?1 AND seq = ?2", &w->inline_payload,
                            err));
  sqlite3_reset(w->inline_payload);
  lh_store_bind_u64(w->inline_payload, 1, id);
  sqlite3_bind_int64(w->inline_payload, 2, seq);
  int rc = lh_store_step(s, w->inline_payload, "reading a payload", err);
  if (rc < 0) return rc;
  if (rc == SQLITE_ROW && sqlite3_column_type(w->inline_payload, 0) != SQLITE_NULL) {
    *buf = sqlite3_column_blob(w->inline_payload, 0);
    *bytes = (size_t)sqlite3_column_bytes(w->inline_payload, 0);
    if (!*buf) *buf = "";
  }
  return 0;
}

/* Starts w's walk of episode id's payload rows in seq order, at its
 * first row. 0 or a negative code (w holds nothing to finalize then). */
static int payload_walk_begin(lh_store *s, payload_walk *w, uint64_t id, lh_errbuf *err) {
  *w = (payload_walk){NULL, NULL, 0};
  LH_TRY(lh_store_prepare(s, "SELECT seq, payload FROM segment_payloads WHERE episode = ?1 ORDER BY seq", &w->rows,
                          err));
  lh_store_bind_u64(w->rows, 1, id);
  w->rc = lh_store_step(s, w->rows, "reading payloads", err);
  return 0;
}

static void payload_walk_end(payload_walk *w) {
  sqlite3_finalize(w->rows);
  sqlite3_finalize(w->inline_payload);
}

/* Decodes segment seq of episode id from its payload (buf NULL: dropped,
 * *seg NULL) and checks that it is that segment. 0 or LH_ESTORE_PAYLOAD. */
static int decode_payload(lh_store *s, uint64_t id, uint32_t seq, const void *buf, size_t bytes,
                          Longhaul__Segment **seg, lh_errbuf *err) {
  *seg = NULL;
  if (!buf) return 0;
  lh_errbuf why = {0};
  if (lh_wire_segment_decode(buf, bytes, &s->opt.limits, seg, &why) < 0)
    return lh_errbuf_set(err, LH_ESTORE_PAYLOAD, "%s: the payload of episode %llu segment %u does not decode: %s",
                         s->path, (unsigned long long)id, seq, why.msg);
  if ((*seg)->episode_id != id || (*seg)->seq != seq) {
    int rc = lh_errbuf_set(err, LH_ESTORE_PAYLOAD,
                           "%s: the payload stored as episode %llu segment %u is episode %llu segment %u", s->path,
                           (unsigned long long)id, seq, (unsigned long long)(*seg)->episode_id, (*seg)->seq);
    lh_wire_segment_free(*seg);
    *seg = NULL;
    return rc;
  }
  return 0;
}

/* Hands seg (may be NULL) to keep (which takes it over) or fn (after
 * which it is freed): 0 to go on, SQLITE_DONE when the callback asked to
 * stop, or its negative code. */
static int hand_on(lh_store_segment_fn fn, owned_fn keep, void *ctx, uint32_t seq, Longhaul__Segment *seg) {
  int cb;
  if (keep) {
    cb = keep(ctx, seq, seg);
  } else {
    cb = fn ? fn(ctx, seq, seg) : 0;
    lh_wire_segment_free(seg);
  }
  return cb == 0 ? 0 : cb < 0 ? cb : SQLITE_DONE;
}

/* A member's shared prefix (docs/actors.md "Shared prefixes"): the
 * segments of episode row->prefix_episode that begin before
 * row->prefix_tokens, in seq order, handed on before the episode's own;
 * r->prefix_whole when they run from 0 to exactly prefix_tokens with no
 * gap and no payload dropped. A segment whose payload retention dropped
 * is counted, not handed on. 0, SQLITE_DONE (a callback stopped) or a
 * negative code. */
static int walk_prefix(lh_store *s, const lh_episode_row *row, lh_store_segment_fn fn, owned_fn keep, void *ctx,
                       lh_segment_report *r, lh_errbuf *err) {
  uint64_t id = row->prefix_episode, end = row->prefix_tokens;
  r->prefix_episode = id, r->prefix_tokens = end;
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT seq, start_offset, tokens FROM segments WHERE episode = ?1 AND start_offset < ?2"
                          " ORDER BY seq",
                          &st, err));
  lh_store_bind_u64(st, 1, id);
  lh_store_bind_u64(st, 2, end > INT64_MAX ? INT64_MAX : end);
  payload_walk w;
  int rc = payload_walk_begin(s, &w, id, err);
  if (rc < 0) {
    sqlite3_finalize(st);
    return rc;
  }
  uint64_t at = 0;
  int whole = 1, stopped = 0;
  int64_t next = 0;
  while (w.rc >= 0 && (rc = lh_store_step(s, st, "reading a shared prefix's segments", err)) == SQLITE_ROW) {
    int64_t seq64 = sqlite3_column_int64(st, 0);
    uint64_t start = lh_store_column_u64(st, 1), tokens = lh_store_column_u64(st, 2);
    if (seq64 < 0 || seq64 > UINT32_MAX || seq64 != next || start != at || start + tokens > end) whole = 0;
    next = seq64 + 1;
    at = start + tokens;
    const void *buf = NULL;
    size_t bytes = 0;
    Longhaul__Segment *seg = NULL;
    if ((rc = payload_of(s, &w, id, seq64, &buf, &bytes, err)) < 0) break;
    if (!buf) {
      whole = 0;
      continue;
    }
    if ((rc = decode_payload(s, id, (uint32_t)seq64, buf, bytes, &seg, err)) < 0) break;
    r->prefix_segments++;
    int cb = hand_on(fn, keep, ctx, (uint32_t)seq64, seg);
    if (cb < 0) {
      rc = cb;
      break;
    }
    if (cb == SQLITE_DONE) {
      stopped = 1;
      break;
    }
  }
  if (w.rc < 0) rc = w.rc;
  sqlite3_finalize(st);
  payload_walk_end(&w);
  if (rc < 0) return rc;
  r->prefix_whole = whole && at == end;
  return stopped ? SQLITE_DONE : 0;
}

static int reassemble(lh_store *s, uint64_t id, lh_store_segment_fn fn, owned_fn keep, void *ctx,
                      lh_segment_report *report, lh_errbuf *err) {
  lh_segment_report local;
  lh_segment_report *r = report ? report : &local;
  memset(r, 0, sizeof *r);
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_segments: store is NULL");
  lh_episode_row row;
  LH_TRY(lh_store_episode_get(s, id, &row, err));
  r->has_end = row.has_end;
  r->expected = row.segment_count;
  if (row.prefix_episode) {
    int prc = walk_prefix(s, &row, fn, keep, ctx, r, err);
    if (prc < 0) return prc;
    if (prc == SQLITE_DONE) return 0;
  }
  /* Two walks of the keys in seq order, merged here: the segment rows'
   * (the key's index alone) and the payload rows'. A join would seek each
   * segment's row and then its payload's; over rank stores, whose tables
   * are union views, it would read every rank's payloads (store_ranks.c).
   * A segment without a payload row has its payload in its own row
   * (stored before schema 13) or none (dropped). */
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "SELECT seq FROM segments WHERE episode = ?1 ORDER BY seq", &st, err));
  lh_store_bind_u64(st, 1, id);
  payload_walk w;
  int rc = payload_walk_begin(s, &w, id, err);
  if (rc < 0) {
    sqlite3_finalize(st);
    return rc;
  }
  int64_t next = 0;  /* the seq number expected next (up to 2^32) */
  while (w.rc >= 0 && (rc = lh_store_step(s, st, "reading segments", err)) == SQLITE_ROW) {
    int64_t seq64 = sqlite3_column_int64(st, 0);
    if (seq64 < next || seq64 > UINT32_MAX) { /* written by something else, or damaged */
      rc = lh_errbuf_set(err, LH_ESTORE_PAYLOAD,
                         "%s: episode %llu has a segment row with seq %lld, outside %lld..%u (the store was "
                         "written by something else, or is damaged)",
                         s->path, (unsigned long long)id, (long long)seq64, (long long)next, UINT32_MAX);
      break;
    }
    uint32_t seq = (uint32_t)seq64;
    if (seq > next) note_missing(r, (uint32_t)next, seq);
    next = seq64 + 1;
    r->received++;
    Longhaul__Segment *seg = NULL;
    const void *buf = NULL;
    size_t bytes = 0;
    if ((rc = payload_of(s, &w, id, seq64, &buf, &bytes, err)) < 0) break;
    if (!buf) r->dropped++;
    if ((rc = decode_payload(s, id, seq, buf, bytes, &seg, err)) < 0) break;
    if ((rc = hand_on(fn, keep, ctx, seq, seg)) != 0) break;
  }
  if (w.rc < 0) rc = w.rc;
  sqlite3_finalize(st);
  payload_walk_end(&w);
  if (rc < 0) return rc;
  if (r->expected > next) note_missing(r, (uint32_t)next, r->expected);
  r->complete = r->has_end && r->missing_count == 0 && r->dropped == 0 &&
                r->received == r->expected && (!row.prefix_episode || r->prefix_whole);
  return 0;
}

int lh_store_episode_segments(lh_store *s, uint64_t id, lh_store_segment_fn fn, void *ctx,
                              lh_segment_report *report, lh_errbuf *err) {
  return reassemble(s, id, fn, NULL, ctx, report, err);
}

typedef struct {
  Longhaul__Segment **segs;
  size_t count, cap;
  lh_errbuf *err;
} collect_ctx;

static int collect(void *ctx, uint32_t seq, Longhaul__Segment *seg) {
  (void)seq;
  collect_ctx *c = ctx;
  if (lh_reserve(&c->segs, &c->cap, c->count + 1, sizeof *c->segs, 16)) {
    lh_wire_segment_free(seg);
    return lh_errbuf_set(c->err, LH_ENOMEM, "no memory for the segments");
  }
  c->segs[c->count++] = seg;
  return 0;
}

int lh_store_episode_segments_array(lh_store *s, uint64_t id, Longhaul__Segment ***segs,
                                    size_t *count, lh_segment_report *report, lh_errbuf *err) {
  if (!segs || !count) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_segments_array: out is NULL");
  *segs = NULL;
  *count = 0;
  collect_ctx c = {NULL, 0, 0, err};
  int rc = reassemble(s, id, NULL, collect, &c, report, err);
  if (rc < 0) {
    lh_store_segments_free(c.segs, c.count);
    return rc;
  }
  *segs = c.segs;
  *count = c.count;
  return 0;
}

/* The state stored with one of episode's own segments at the largest
 * offset <= at_most: 1 (found), 0 (none) or a negative code. */
static int own_state(lh_store *s, uint64_t episode, uint64_t at_most, size_t n, uint64_t *offset, float *state,
                     lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT state_offset, coalesce(state, (SELECT p.state FROM segment_payloads p"
                          " WHERE p.episode = ?1 AND p.seq = segments.seq)), seq"
                          " FROM segments INDEXED BY segments_state"
                          " WHERE episode = ?1 AND state_offset IS NOT NULL AND state_offset <= ?2"
                          " ORDER BY state_offset DESC LIMIT 1",
                          &st, err));
  lh_store_bind_u64(st, 1, episode);
  lh_store_bind_u64(st, 2, at_most > INT64_MAX ? INT64_MAX : at_most);
  int rc = lh_store_step(s, st, "reading a recurrent state", err), found = 0;
  if (rc == SQLITE_ROW) {
    size_t bytes = (size_t)sqlite3_column_bytes(st, 1);
    if (bytes != n * sizeof *state) {
      rc = lh_errbuf_set(err, LH_ESTORE_PAYLOAD,
                         "%s: the recurrent state of episode %llu segment %lld is %zu bytes, not the model's %zu",
                         s->path, (unsigned long long)episode, (long long)sqlite3_column_int64(st, 2), bytes,
                         n * sizeof *state);
    } else {
      *offset = lh_store_column_u64(st, 0);
      memcpy(state, sqlite3_column_blob(st, 1), bytes);
      found = 1;
    }
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : found;
}

int lh_store_segment_state(lh_store *s, uint64_t episode, uint64_t at_most, size_t n, uint64_t *offset,
                           float *state, lh_errbuf *err) {
  if (!s || !offset || (n && !state)) return lh_errbuf_set(err, LH_EINVAL, "lh_store_segment_state: NULL argument");
  int found = own_state(s, episode, at_most, n, offset, state, err);
  if (found) return found;
  /* Before an episode's own segments, its shared prefix's states hold
   * (its leader's, up to the prefix's end: the state there is the same). */
  lh_episode_row row;
  lh_errbuf ignored;
  int rc = lh_store_episode_get(s, episode, &row, &ignored);
  if (rc == LH_ESTORE_NO_EPISODE || (rc == 0 && !row.prefix_episode)) return 0;
  if (rc < 0) return lh_errbuf_set(err, rc, "%s", ignored.msg);
  return own_state(s, row.prefix_episode, at_most < row.prefix_tokens ? at_most : row.prefix_tokens, n, offset,
                   state, err);
}

void lh_store_segments_free(Longhaul__Segment **segs, size_t count) {
  if (!segs) return;
  for (size_t i = 0; i < count; i++) lh_wire_segment_free(segs[i]);
  free(segs);
}

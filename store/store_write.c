/* store: the writes of the ingest path (segments and episode ends) and
 * episode status updates. Each is idempotent on its key, and each checks
 * a message against the episode it names before writing anything: a
 * message that contradicts what the store holds (another actor's episode,
 * another environment, a segment past the end, a resend with other
 * content) is refused, not stored (store.h, "writes"). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "store/store_internal.h"

/* The segment's row holds its metadata; its payload and state go to a row
 * of segment_payloads (schema 13), which retention deletes. */
static const char sql_seg_insert[] =
    "INSERT OR IGNORE INTO segments(episode, seq, start_offset, tokens, sampled, min_version,"
    " max_version, images, payload_bytes, created_ms, state_offset)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
/* OR REPLACE: a payload row without its segment row (a store changed by
 * hand) must not refuse the segment. */
static const char sql_payload_insert[] =
    "INSERT OR REPLACE INTO segment_payloads(episode, seq, payload, state) VALUES (?1, ?2, ?3, ?4)";

/* A segment that arrives first creates the episode as running; later ones
 * add their tokens and widen the version range (NULL-aware min/max). The
 * segments that make an episode the sweep ended short of segments whole
 * (status error, swept, outcome still its EpisodeEnd's) give it the status
 * of that outcome again: they were acked, and it is trained like any
 * other (before, it stayed error, its text saying they were missing). */
#define SWEPT_SHORT_NOW_WHOLE                                                                    \
  "status = 'error' AND swept_ms IS NOT NULL AND segment_count IS NOT NULL"                       \
  " AND outcome IN ('success', 'failure', 'truncated')"                                           \
  " AND segments_received + excluded.segments_received = segment_count"
static const char sql_ep_upsert_seg[] =
    "INSERT INTO episodes(id, actor, env, task_seed, group_id, status, tokens_received,"
    " segments_received, min_version, max_version, created_ms, updated_ms, prefix_episode, prefix_tokens)"
    " VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?10, ?7, ?8, ?9, ?9, ?11, ?12)"
    " ON CONFLICT(id) DO UPDATE SET"
    "  status = CASE WHEN " SWEPT_SHORT_NOW_WHOLE
    "    THEN CASE outcome WHEN 'truncated' THEN 'truncated' ELSE 'complete' END ELSE status END,"
    "  error = CASE WHEN " SWEPT_SHORT_NOW_WHOLE " THEN NULL ELSE error END,"
    "  tokens_received = tokens_received + excluded.tokens_received,"
    "  segments_received = segments_received + excluded.segments_received,"
    "  min_version = coalesce(min(min_version, excluded.min_version), min_version,"
    "                         excluded.min_version),"
    "  max_version = coalesce(max(max_version, excluded.max_version), max_version,"
    "                         excluded.max_version),"
    "  updated_ms = excluded.updated_ms";

/* An EpisodeEnd that comes before any segment creates the row. */
static const char sql_ep_insert_end[] =
    "INSERT INTO episodes(id, actor, env, task_seed, group_id, status, outcome, error, steps,"
    " tokens, reward, segment_count, created_ms, updated_ms, ended_ms, prefix_episode, prefix_tokens)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13, ?14, ?15)";

/* The first EpisodeEnd of an episode that has a row (its segments came
 * first, or the sweep ended it): the end's figures go in. Its status,
 * outcome and error replace the row's unless the learner ended the
 * episode itself with lh_store_episode_set_status (ended, not by the
 * sweep): that verdict stands. The caller has checked that no EpisodeEnd
 * is stored yet (segment_count IS NULL). */
static const char sql_ep_update_end[] =
    "UPDATE episodes SET"
    "  status = CASE WHEN ended_ms IS NOT NULL AND swept_ms IS NULL THEN status ELSE ?6 END,"
    "  outcome = CASE WHEN ended_ms IS NOT NULL AND swept_ms IS NULL THEN outcome ELSE ?7 END,"
    "  error = CASE WHEN ended_ms IS NOT NULL AND swept_ms IS NULL THEN error ELSE ?8 END,"
    "  steps = ?9, tokens = ?10, reward = ?11, segment_count = ?12, updated_ms = ?13,"
    "  ended_ms = ?13"
    " WHERE id = ?1 AND segment_count IS NULL";

/* What the checks of a put need to know about the episode it names. */
static const char sql_ep_owner[] =
    "SELECT actor, env, group_id, task_seed, segment_count,"
    " (SELECT max(seq) FROM segments WHERE episode = ?1), prefix_episode, prefix_tokens"
    " FROM episodes WHERE id = ?1";

/* Whether a group's leader holds the shared prefix a member names: one
 * of its segments ends exactly where the prefix ends (its segments are
 * cut there, and come before any member's). */
static const char sql_prefix_cut[] =
    "SELECT 1 FROM segments WHERE episode = ?1 AND start_offset + tokens = ?2 LIMIT 1";

/* A stored segment, to tell a resend from a conflicting one: its payload
 * from its row of segment_payloads, or from the segments row itself when
 * it was stored before schema 13; NULL once retention dropped it. */
static const char sql_seg_stored[] =
    "SELECT coalesce(payload, (SELECT p.payload FROM segment_payloads p WHERE p.episode = ?1 AND p.seq = ?2)),"
    " payload_bytes, start_offset, tokens FROM segments WHERE episode = ?1 AND seq = ?2";

static const char sql_reward_insert[] =
    "INSERT OR IGNORE INTO rewards(episode, term, value, step) VALUES (?1, ?2, ?3, ?4)";

static const char *nonempty(const char *s) { return s && *s ? s : NULL; }
static const char *text_or_empty(const char *s) { return s ? s : ""; }

/* A shared prefix's two columns at i and i + 1: NULL for a whole episode. */
static void bind_prefix(sqlite3_stmt *st, int i, uint64_t episode, uint64_t tokens) {
  if (episode) {
    lh_store_bind_u64(st, i, episode);
    lh_store_bind_u64(st, i + 1, tokens);
  } else {
    sqlite3_bind_null(st, i);
    sqlite3_bind_null(st, i + 1);
  }
}

static void copy_name(char *dst, const char *src) {
  size_t n = src ? strlen(src) : 0;
  if (n >= LH_STORE_NAME_BYTES) n = LH_STORE_NAME_BYTES - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

int lh_store_flush(lh_store *s, lh_errbuf *err) {
  if (!s || s->pending_count == 0) return 0;
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_EP_UPSERT_SEG, sql_ep_upsert_seg, &st, err));
  int rc = 0;
  for (size_t i = 0; i < s->pending_count && rc >= 0; i++) {
    const lh_store_pending_episode *p = &s->pending[i];
    lh_store_bind_u64(st, 1, p->id);
    sqlite3_bind_text(st, 2, p->actor, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, p->env, -1, SQLITE_STATIC);
    lh_store_bind_u64(st, 4, p->task_seed);
    lh_store_bind_u64(st, 5, p->group_id);
    lh_store_bind_u64(st, 6, p->tokens);
    if (p->has_versions) {
      lh_store_bind_u64(st, 7, p->vmin);
      lh_store_bind_u64(st, 8, p->vmax);
    } else {
      sqlite3_bind_null(st, 7);
      sqlite3_bind_null(st, 8);
    }
    sqlite3_bind_int64(st, 9, p->updated_ms);
    sqlite3_bind_int64(st, 10, p->segments);
    bind_prefix(st, 11, p->prefix_episode, p->prefix_tokens);
    rc = lh_store_step(s, st, "updating the episode of a segment", err);
    sqlite3_reset(st);
  }
  s->pending_count = 0;
  return rc < 0 ? rc : 0;
}

/* ---- who an episode belongs to ---- */

/* What the store holds about an episode before a put: its owner (actor,
 * environment, group, task seed) and how far it got. */
typedef struct {
  int found;
  char actor[LH_STORE_NAME_BYTES], env[LH_STORE_NAME_BYTES];
  uint64_t group_id, task_seed;
  int has_count;        /* an EpisodeEnd is stored: segment_count holds */
  uint32_t segment_count;
  int has_seq;          /* a segment is stored: max_seq holds */
  uint32_t max_seq;
  uint64_t prefix_episode, prefix_tokens;  /* its shared prefix (0: whole) */
} episode_owner;

static lh_store_pending_episode *pending_find(lh_store *s, uint64_t id) {
  for (size_t i = s->pending_count; i-- > 0;)
    if (s->pending[i].id == id) return &s->pending[i];
  return NULL;
}

/* Reads the row of episode id into *o (o->found 0 when there is none).
 * The caller has flushed the batch's pending change of that episode, or
 * knows there is none. */
static int owner_read(lh_store *s, uint64_t id, episode_owner *o, lh_errbuf *err) {
  memset(o, 0, sizeof *o);
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_EP_OWNER, sql_ep_owner, &st, err));
  lh_store_bind_u64(st, 1, id);
  int rc = lh_store_step(s, st, "reading an episode's owner", err);
  if (rc == SQLITE_ROW) {
    o->found = 1;
    lh_store_column_text(st, 0, o->actor, sizeof o->actor);
    lh_store_column_text(st, 1, o->env, sizeof o->env);
    o->group_id = lh_store_column_u64(st, 2);
    o->task_seed = lh_store_column_u64(st, 3);
    o->has_count = sqlite3_column_type(st, 4) != SQLITE_NULL;
    o->segment_count = (uint32_t)sqlite3_column_int64(st, 4);
    o->has_seq = sqlite3_column_type(st, 5) != SQLITE_NULL;
    o->max_seq = (uint32_t)sqlite3_column_int64(st, 5);
    o->prefix_episode = lh_store_column_u64(st, 6);
    o->prefix_tokens = lh_store_column_u64(st, 7);
  }
  sqlite3_reset(st);
  return rc < 0 ? rc : 0;
}

/* Refuses a put: *inserted = LH_STORE_REFUSED and err says why (code
 * LH_ESTORE_REFUSED), but the call returns 0 so that the caller's batch
 * goes on with its other messages. */
static int refuse(int *inserted, lh_errbuf *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(int *inserted, lh_errbuf *err, const char *fmt, ...) {
  char msg[LH_ERRMSG_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lh_errbuf_set(err, LH_ESTORE_REFUSED, "%s", msg);
  *inserted = LH_STORE_REFUSED;
  return 0;
}

/* Whether a message about episode id from (actor, env, group, seed)
 * matches the owner the store holds; refuses it (returns 1) when not.
 * what names the message in the reason ("segment 3", "EpisodeEnd"). */
static int owner_differs(const char *o_actor, const char *o_env, uint64_t o_group, uint64_t o_seed,
                         uint64_t id, const char *what, const char *actor, const char *env,
                         uint64_t group, uint64_t seed, int *inserted, lh_errbuf *err) {
  char a[LH_STORE_NAME_BYTES], v[LH_STORE_NAME_BYTES];
  copy_name(a, actor);
  copy_name(v, env);
  unsigned long long ep = (unsigned long long)id;
  if (strcmp(a, o_actor) != 0)
    refuse(inserted, err, "episode %llu belongs to actor %s, not %s (%s refused: two actors use one "
           "episode id)", ep, o_actor, a, what);
  else if (strcmp(v, o_env) != 0)
    refuse(inserted, err, "episode %llu of actor %s runs env %s, not %s (%s refused)", ep, o_actor,
           o_env, v, what);
  else if (group != o_group)
    refuse(inserted, err, "episode %llu of actor %s is in group %llu, not %llu (%s refused)", ep,
           o_actor, (unsigned long long)o_group, (unsigned long long)group, what);
  else if (seed != o_seed)
    refuse(inserted, err, "episode %llu of actor %s has task seed %llu, not %llu (%s refused)", ep,
           o_actor, (unsigned long long)o_seed, (unsigned long long)seed, what);
  else
    return 0;
  return 1;
}

/* ---- shared prefixes ---- */

/* Whether a message of episode id names another shared prefix than the
 * one the store holds for it (o_prefix, o_tokens; both 0: whole);
 * refuses it (returns 1) when so. */
static int prefix_differs(uint64_t o_prefix, uint64_t o_tokens, uint64_t id, const char *what, uint64_t prefix,
                          uint64_t tokens, int *inserted, lh_errbuf *err) {
  if (prefix == o_prefix && tokens == o_tokens) return 0;
  refuse(inserted, err,
         "episode %llu starts with the first %llu tokens of episode %llu, but its %s names %llu tokens of "
         "episode %llu (refused)",
         (unsigned long long)id, (unsigned long long)o_tokens, (unsigned long long)o_prefix, what,
         (unsigned long long)tokens, (unsigned long long)prefix);
  return 1;
}

/* A message that makes episode id, which names the first `tokens` tokens
 * of episode `prefix` as its group's shared prefix: the prefix must be
 * stored, an episode of the same actor, environment, group and task seed,
 * whole itself (a prefix is its leader's own tokens: no chain, so no
 * cycle), with a segment that ends where the prefix does (the leader cuts
 * its segments there and sends them before any member's, so they are
 * stored first). Returns 1 when refused, 0 when accepted, or a negative
 * code. */
static int prefix_refused(lh_store *s, uint64_t id, const char *what, const char *actor, const char *env,
                          uint64_t group, uint64_t seed, uint64_t prefix, uint64_t tokens, int *inserted,
                          lh_errbuf *err) {
  unsigned long long ep = (unsigned long long)id, pe = (unsigned long long)prefix, n = (unsigned long long)tokens;
  if (s->pending && pending_find(s, prefix)) LH_TRY(lh_store_flush(s, err));
  episode_owner l;
  LH_TRY(owner_read(s, prefix, &l, err));
  char a[LH_STORE_NAME_BYTES], v[LH_STORE_NAME_BYTES];
  copy_name(a, actor);
  copy_name(v, env);
  if (!l.found) {
    refuse(inserted, err, "episode %llu names the first %llu tokens of episode %llu as its shared prefix, but no "
           "such episode is stored (%s refused)", ep, n, pe, what);
    *inserted = LH_STORE_NO_PREFIX;
    return 1;
  }
  if (strcmp(l.actor, a) || strcmp(l.env, v) || l.group_id != group || l.task_seed != seed) {
    refuse(inserted, err, "episode %llu of actor %s, group %llu names episode %llu of actor %s, group %llu as its "
           "shared prefix: a prefix is shared within a group of one actor (%s refused)", ep, a,
           (unsigned long long)group, pe, l.actor, (unsigned long long)l.group_id, what);
    return 1;
  }
  if (l.prefix_episode) {
    refuse(inserted, err, "episode %llu names episode %llu as its shared prefix, which starts from episode %llu's "
           "itself: a prefix is one episode's own tokens (%s refused)", ep, pe,
           (unsigned long long)l.prefix_episode, what);
    return 1;
  }
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql_prefix_cut, &st, err));
  lh_store_bind_u64(st, 1, prefix);
  lh_store_bind_u64(st, 2, tokens);
  int rc = lh_store_step(s, st, "reading a shared prefix's segments", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (rc != SQLITE_ROW) {
    refuse(inserted, err, "episode %llu names the first %llu tokens of episode %llu as its shared prefix, but no "
           "stored segment of it ends there (%s refused)", ep, n, pe, what);
    /* Until the leader has all its segments, the one that ends there may
     * yet come (held back and resent after its members' messages). */
    LH_TRY(lh_store_prepare(s, "SELECT segments_received < segment_count OR segment_count IS NULL FROM episodes"
                               " WHERE id = ?1", &st, err));
    lh_store_bind_u64(st, 1, prefix);
    rc = lh_store_step(s, st, "counting a shared prefix's segments", err);
    int short_of_segments = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (rc < 0) return rc;
    if (short_of_segments) *inserted = LH_STORE_NO_PREFIX;
    return 1;
  }
  return 0;
}

/* ---- segments ---- */

/* Adds a stored segment's tokens and versions to its episode's pending
 * change (p, or a new one from o, flushing first when the table is
 * full). */
static int pending_add(lh_store *s, lh_store_pending_episode *p, const episode_owner *o,
                       const Longhaul__Segment *seg, uint64_t sampled, uint64_t vmin, uint64_t vmax,
                       int64_t now, lh_errbuf *err) {
  if (!p) {
    if (s->pending_count == LH_STORE_PENDING) LH_TRY(lh_store_flush(s, err));
    p = &s->pending[s->pending_count++];
    memset(p, 0, offsetof(lh_store_pending_episode, actor));
    p->id = seg->episode_id;
    p->task_seed = seg->task_seed;
    p->group_id = seg->group_id;
    p->has_count = o->has_count;
    p->segment_count = o->segment_count;
    p->prefix_episode = seg->prefix_episode_id;
    p->prefix_tokens = seg->prefix_tokens;
    copy_name(p->actor, seg->actor);
    copy_name(p->env, seg->env);
  }
  p->tokens += seg->n_tokens;
  p->segments++;
  p->updated_ms = now;
  if (sampled) {
    if (!p->has_versions || vmin < p->vmin) p->vmin = vmin;
    if (!p->has_versions || vmax > p->vmax) p->vmax = vmax;
    p->has_versions = 1;
  }
  return 0;
}

/* A segment whose (episode, seq) is stored already: a resend when it is
 * the same segment (the same encoding; after retention dropped the
 * payload, the same size, offset and token count), else refused. */
static int segment_resent(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                          size_t payload_bytes, int *inserted, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_SEG_STORED, sql_seg_stored, &st, err));
  lh_store_bind_u64(st, 1, seg->episode_id);
  sqlite3_bind_int64(st, 2, seg->seq);
  int rc = lh_store_step(s, st, "reading a stored segment", err);
  int same = 0;
  int64_t stored_bytes = 0;
  if (rc == SQLITE_ROW) {
    stored_bytes = sqlite3_column_int64(st, 1);
    if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
      same = stored_bytes == (int64_t)payload_bytes &&
             lh_store_column_u64(st, 2) == seg->start_offset &&
             sqlite3_column_int64(st, 3) == (int64_t)seg->n_tokens;
    } else {
      const void *b = sqlite3_column_blob(st, 0);
      same = (size_t)sqlite3_column_bytes(st, 0) == payload_bytes &&
             (payload_bytes == 0 || memcmp(b, payload, payload_bytes) == 0);
    }
  }
  sqlite3_reset(st);
  if (rc < 0) return rc;
  if (rc != SQLITE_ROW)
    return lh_errbuf_set(err, LH_ESTORE_SQLITE, "%s: episode %llu segment %u was ignored as a duplicate "
                         "but is not stored", s->path, (unsigned long long)seg->episode_id, seg->seq);
  *inserted = 0;
  if (same) return 0;
  return refuse(inserted, err,
                "episode %llu segment %u from actor %s differs from the one stored (its payload %zu "
                "bytes, the stored one %lld): a resend must be the same segment (refused as a "
                "conflict)",
                (unsigned long long)seg->episode_id, seg->seq, text_or_empty(seg->actor), payload_bytes,
                (long long)stored_bytes);
}

/* The checks, the segment columns and the episode update, under the
 * caller's transaction. */
static int insert_segment(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                          size_t payload_bytes, int *inserted, lh_errbuf *err) {
  if (!s->pending) {
    s->pending = malloc(LH_STORE_PENDING * sizeof *s->pending);
    if (!s->pending) return lh_errbuf_set(err, LH_ENOMEM, "no memory for pending episode rows");
  }
  /* Whose episode: the batch's pending change knows when an earlier
   * segment of the batch was checked; else the row says (or, without a
   * row, this segment makes the episode its actor's). */
  char what[48];
  snprintf(what, sizeof what, "segment %u", seg->seq);
  episode_owner o;
  memset(&o, 0, sizeof o);
  lh_store_pending_episode *p = pending_find(s, seg->episode_id);
  if (p) {
    if (owner_differs(p->actor, p->env, p->group_id, p->task_seed, seg->episode_id, what, seg->actor,
                      seg->env, seg->group_id, seg->task_seed, inserted, err) ||
        prefix_differs(p->prefix_episode, p->prefix_tokens, seg->episode_id, what, seg->prefix_episode_id,
                       seg->prefix_tokens, inserted, err))
      return 0;
    o.has_count = p->has_count;
    o.segment_count = p->segment_count;
  } else {
    LH_TRY(owner_read(s, seg->episode_id, &o, err));
    if (o.found && (owner_differs(o.actor, o.env, o.group_id, o.task_seed, seg->episode_id, what, seg->actor,
                                  seg->env, seg->group_id, seg->task_seed, inserted, err) ||
                    prefix_differs(o.prefix_episode, o.prefix_tokens, seg->episode_id, what,
                                   seg->prefix_episode_id, seg->prefix_tokens, inserted, err)))
      return 0;
    if (!o.found && seg->prefix_episode_id) {
      int r = prefix_refused(s, seg->episode_id, what, seg->actor, seg->env, seg->group_id, seg->task_seed,
                             seg->prefix_episode_id, seg->prefix_tokens, inserted, err);
      if (r) return r < 0 ? r : 0;
    }
  }
  if (o.has_count && seg->seq >= o.segment_count)
    return refuse(inserted, err,
                  "episode %llu ended with %u segments; segment %u of actor %s is past its end "
                  "(refused)",
                  (unsigned long long)seg->episode_id, o.segment_count, seg->seq,
                  text_or_empty(seg->actor));

  uint64_t sampled = 0, vmin = 0, vmax = 0;
  for (size_t i = 0; i < seg->n_tokens; i++) {
    if (seg->loss_mask.data[i] != 1) continue;
    uint64_t v = seg->policy_version[i];
    if (sampled == 0 || v < vmin) vmin = v;
    if (sampled == 0 || v > vmax) vmax = v;
    sampled++;
  }
  int64_t now = lh_wall_ms();
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_SEG_INSERT, sql_seg_insert, &st, err));
  lh_store_bind_u64(st, 1, seg->episode_id);
  sqlite3_bind_int64(st, 2, seg->seq);
  lh_store_bind_u64(st, 3, seg->start_offset);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)seg->n_tokens);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)sampled);
  if (sampled) {
    lh_store_bind_u64(st, 6, vmin);
    lh_store_bind_u64(st, 7, vmax);
  } else {
    sqlite3_bind_null(st, 6);
    sqlite3_bind_null(st, 7);
  }
  sqlite3_bind_int64(st, 8, (sqlite3_int64)seg->n_images);
  sqlite3_bind_int64(st, 9, (sqlite3_int64)payload_bytes);
  sqlite3_bind_int64(st, 10, now);
  if (seg->n_state)
    lh_store_bind_u64(st, 11, seg->state_offset);
  else
    sqlite3_bind_null(st, 11);
  int rc = lh_store_step(s, st, "inserting a segment", err);
  sqlite3_reset(st);
  if (rc < 0) return rc;
  if (sqlite3_changes(s->db) == 0) return segment_resent(s, seg, payload, payload_bytes, inserted, err);
  LH_TRY(lh_store_cached(s, ST_PAYLOAD_INSERT, sql_payload_insert, &st, err));
  lh_store_bind_u64(st, 1, seg->episode_id);
  sqlite3_bind_int64(st, 2, seg->seq);
  /* zeroblob: a blob of no bytes stays a blob, never NULL */
  if (payload_bytes)
    sqlite3_bind_blob64(st, 3, payload, payload_bytes, SQLITE_STATIC);
  else
    sqlite3_bind_zeroblob(st, 3, 0);
  if (seg->n_state)
    sqlite3_bind_blob64(st, 4, seg->state, seg->n_state * sizeof *seg->state, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 4);
  rc = lh_store_step(s, st, "inserting a segment's payload", err);
  sqlite3_reset(st);
  if (rc < 0) return rc;
  *inserted = 1;
  return pending_add(s, p, &o, seg, sampled, vmin, vmax, now, err);
}

/* Stores seg with payload, under the caller's batch or one of its own. */
static int put_payload(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                       size_t bytes, int *inserted, lh_errbuf *err) {
  int own;
  int rc = lh_store_write_begin(s, &own, err);
  if (rc >= 0) {
    rc = insert_segment(s, seg, payload, bytes, inserted, err);
    if (rc >= 0 && own) rc = lh_store_flush(s, err);
    rc = lh_store_write_end(s, own, rc, err);
  }
  if (rc < 0) *inserted = 0;
  return rc;
}

int lh_store_put_segment(lh_store *s, const Longhaul__Segment *seg, int *inserted,
                         lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !seg) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_segment: store or segment is NULL");
  LH_TRY(lh_wire_validate_segment(seg, &s->opt.limits, err));
  uint8_t *payload = NULL;
  size_t bytes = 0;
  /* The payload without the recurrent state, which has a column of its
   * own (schema 9). */
  Longhaul__Segment bare = *seg;
  bare.n_state = 0, bare.state = NULL, bare.state_offset = 0;
  LH_TRY(lh_wire_segment_encode(&bare, &payload, &bytes, err));
  int rc = put_payload(s, seg, payload, bytes, inserted, err);
  free(payload);
  return rc;
}

int lh_store_put_segment_wire(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                              size_t payload_bytes, const lh_wire_limits *validated,
                              int *inserted, lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !seg || !payload || !payload_bytes)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_segment_wire: store, segment or payload is NULL");
  if (payload_bytes > s->opt.limits.max_message_bytes)
    return lh_errbuf_set(err, LH_EWIRE_TOO_LARGE, "%s: episode %llu segment %u is %zu bytes, over the "
                         "limit of %zu", s->path, (unsigned long long)seg->episode_id, seg->seq,
                         payload_bytes, s->opt.limits.max_message_bytes);
  /* A segment with a recurrent state: the bytes as they arrived hold the
   * state, which goes to its own column, so the payload is encoded again
   * without it. */
  if (seg->n_state) return lh_store_put_segment(s, seg, inserted, err);
  /* validated once: again only when the decode's limits were looser */
  if (!lh_wire_limits_segment_within(validated, &s->opt.limits))
    LH_TRY(lh_wire_validate_segment(seg, &s->opt.limits, err));
  return put_payload(s, seg, payload, payload_bytes, inserted, err);
}

/* ---- episode ends ---- */

static lh_episode_status status_of_outcome(Longhaul__Outcome o) {
  switch (o) {
    case LONGHAUL__OUTCOME__OUTCOME_TRUNCATED: return LH_EPISODE_TRUNCATED;
    case LONGHAUL__OUTCOME__OUTCOME_ABORTED: return LH_EPISODE_ABORTED;
    case LONGHAUL__OUTCOME__OUTCOME_ERROR: return LH_EPISODE_ERROR;
    default: return LH_EPISODE_COMPLETE;
  }
}

/* Binds the end's figures as both end statements number them. */
static void bind_end(sqlite3_stmt *st, const Longhaul__EpisodeEnd *end, int64_t now) {
  lh_store_bind_u64(st, 1, end->episode_id);
  sqlite3_bind_text(st, 2, text_or_empty(end->actor), -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, text_or_empty(end->env), -1, SQLITE_STATIC);
  lh_store_bind_u64(st, 4, end->task_seed);
  lh_store_bind_u64(st, 5, end->group_id);
  sqlite3_bind_text(st, 6, lh_episode_status_name(status_of_outcome(end->outcome)), -1,
                    SQLITE_STATIC);
  sqlite3_bind_text(st, 7, lh_episode_outcome_name(end->outcome), -1, SQLITE_STATIC);
  /* kept for good: at most LH_EPISODE_ERROR_BYTES of it (a peer may send
   * megabytes) */
  const char *error = nonempty(end->error);
  if (error)
    sqlite3_bind_text(st, 8, error, (int)lh_text_cut_utf8(error, LH_EPISODE_ERROR_BYTES), SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 8);
  sqlite3_bind_int64(st, 9, end->steps);
  lh_store_bind_u64(st, 10, end->total_tokens);
  sqlite3_bind_double(st, 11, end->reward);
  sqlite3_bind_int64(st, 12, end->segment_count);
  sqlite3_bind_int64(st, 13, now);
}

static int insert_end(lh_store *s, const Longhaul__EpisodeEnd *end, int *inserted, lh_errbuf *err) {
  /* The batch's pending change of this episode goes to its row first, so
   * that the row is whole and later segments of the batch see the end. */
  if (s->pending && pending_find(s, end->episode_id)) LH_TRY(lh_store_flush(s, err));
  episode_owner o;
  LH_TRY(owner_read(s, end->episode_id, &o, err));
  if (o.found) {
    if (owner_differs(o.actor, o.env, o.group_id, o.task_seed, end->episode_id, "EpisodeEnd",
                      end->actor, end->env, end->group_id, end->task_seed, inserted, err) ||
        prefix_differs(o.prefix_episode, o.prefix_tokens, end->episode_id, "EpisodeEnd", end->prefix_episode_id,
                       end->prefix_tokens, inserted, err))
      return 0;
    if (o.has_count) return 0;  /* the first EpisodeEnd wins: a duplicate */
    if (o.has_seq && o.max_seq >= end->segment_count)
      return refuse(inserted, err,
                    "episode %llu has segment %u stored, but its EpisodeEnd from actor %s counts %u "
                    "segments (refused)",
                    (unsigned long long)end->episode_id, o.max_seq, o.actor, end->segment_count);
  }
  if (!o.found && end->prefix_episode_id) {
    int r = prefix_refused(s, end->episode_id, "EpisodeEnd", end->actor, end->env, end->group_id, end->task_seed,
                           end->prefix_episode_id, end->prefix_tokens, inserted, err);
    if (r) return r < 0 ? r : 0;
  }
  sqlite3_stmt *st;
  if (o.found)
    LH_TRY(lh_store_cached(s, ST_EP_UPDATE_END, sql_ep_update_end, &st, err));
  else
    LH_TRY(lh_store_cached(s, ST_EP_INSERT_END, sql_ep_insert_end, &st, err));
  bind_end(st, end, lh_wall_ms());
  if (!o.found) bind_prefix(st, 14, end->prefix_episode_id, end->prefix_tokens);
  int rc = lh_store_step(s, st, "recording an episode end", err);
  sqlite3_reset(st);
  if (rc < 0) return rc;
  if (sqlite3_changes(s->db) == 0)
    return lh_errbuf_set(err, LH_ESTORE_SQLITE, "%s: the end of episode %llu changed no row",
                         s->path, (unsigned long long)end->episode_id);
  *inserted = 1;
  LH_TRY(lh_store_cached(s, ST_REWARD_INSERT, sql_reward_insert, &st, err));
  for (size_t i = 0; i < end->n_terms; i++) {
    const Longhaul__RewardTerm *t = end->terms[i];
    lh_store_bind_u64(st, 1, end->episode_id);
    sqlite3_bind_text(st, 2, text_or_empty(t->name), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, t->value);
    sqlite3_bind_int64(st, 4, t->step);
    rc = lh_store_step(s, st, "inserting a reward term", err);
    sqlite3_reset(st);
    if (rc < 0) return rc;
  }
  return 0;
}

int lh_store_put_episode_end(lh_store *s, const Longhaul__EpisodeEnd *end, int *inserted,
                             lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !end) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_episode_end: store or end is NULL");
  /* The wire validates an EpisodeEnd as an envelope's body. */
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  env.episode_end = (Longhaul__EpisodeEnd *)end;
  LH_TRY(lh_wire_validate(&env, &s->opt.limits, err));
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  int rc = insert_end(s, end, inserted, err);
  rc = lh_store_write_end(s, own, rc, err);
  if (rc < 0) *inserted = 0;
  return rc;
}

int lh_store_episode_set_status(lh_store *s, uint64_t id, int status, const char *reason,
                                lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_set_status: store is NULL");
  if (status <= LH_EPISODE_RUNNING || status >= LH_EPISODE_STATUS_COUNT)
    return lh_errbuf_set(err, LH_EINVAL,
                         "episode %llu: status %d cannot be set (complete, truncated, aborted or "
                         "error only)",
                         (unsigned long long)id, (int)status);
  static const char *const outcome_of[] = {NULL, NULL, "truncated", "aborted", "error"};
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st;
  int rc = lh_store_flush(s, err);
  if (rc >= 0)
    rc = lh_store_prepare(s,
                            "UPDATE episodes SET status = ?2,"
                            " outcome = coalesce(?3, CASE WHEN outcome IN ('success','failure')"
                            "   THEN outcome ELSE 'failure' END),"
                            " error = coalesce(?4, error), updated_ms = ?5,"
                            " ended_ms = coalesce(ended_ms, ?5) WHERE id = ?1",
                            &st, err);
  if (rc >= 0) {
    lh_store_bind_u64(st, 1, id);
    sqlite3_bind_text(st, 2, lh_episode_status_name((lh_episode_status)status), -1, SQLITE_STATIC);
    lh_store_bind_text(st, 3, outcome_of[status]);
    lh_store_bind_text(st, 4, nonempty(reason));
    sqlite3_bind_int64(st, 5, lh_wall_ms());
    rc = lh_store_step(s, st, "updating an episode's status", err);
    sqlite3_finalize(st);
    if (rc >= 0 && sqlite3_changes(s->db) == 0)
      rc = lh_errbuf_set(err, LH_ESTORE_NO_EPISODE, "%s has no episode %llu", s->path,
                         (unsigned long long)id);
  }
  return lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
}

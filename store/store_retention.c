/* store: retention. Old payloads go; the rows that describe them stay, so
 * statistics and the episode list still cover the whole run. A payload's
 * row is deleted (schema 13), so the pages it held go to the free list,
 * where later inserts take them (the file does not shrink). */
#include "store/store_internal.h"

/* Which segments a drop below ?1 takes: those whose payload is still
 * stored and whose newest sampled token is older, and those without
 * sampled tokens whose episode is older; but none of an episode that
 * holds the shared prefix of a member with a sampled token at ?1 or newer
 * (docs/actors.md "Shared prefixes"): the member may still be
 * trained, and reads its first tokens from there. A row stored before
 * schema 13 holds its payload itself, ahead of dropped_ms: testing the
 * payload first reads no overflow page of it. */
#define KEPT "(payload IS NOT NULL OR dropped_ms IS NULL)"
#define OLDER                                                                               \
  "((max_version < ?1 OR (max_version IS NULL AND episode IN"                                \
  " (SELECT id FROM episodes WHERE max_version < ?1)))"                                      \
  " AND episode NOT IN (SELECT prefix_episode FROM episodes"                                 \
  "  WHERE prefix_episode IS NOT NULL AND max_version >= ?1))"
#define DROP_WHERE " WHERE " KEPT " AND " OLDER

/* Runs sql with ?1 = min_version and ?2 = now (a statement without them
 * leaves them unbound); *changes (may be NULL) gets the rows it changed. */
static int run(lh_store *s, const char *sql, uint64_t min_version, int64_t now, const char *what,
               uint64_t *changes, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int params = sqlite3_bind_parameter_count(st);
  if (params >= 1) lh_store_bind_u64(st, 1, min_version);
  if (params >= 2) sqlite3_bind_int64(st, 2, now);
  int rc = lh_store_step(s, st, what, err);
  sqlite3_finalize(st);
  if (rc >= 0 && changes) *changes = (uint64_t)sqlite3_changes(s->db);
  return rc < 0 ? rc : 0;
}

/* The rows stored before schema 13 hold their payloads: set to NULL in
 * place, a small one would leave its leaf page in use and mostly empty
 * (SQLite balances pages when rows are deleted, not when they shrink). So
 * they are deleted and written again without their payloads: the pages
 * they held empty and go to the free list, and the rows, small now, go
 * where new rows go. */
static int rewrite_inline(lh_store *s, uint64_t min_version, int64_t now, lh_errbuf *err) {
  uint64_t moved = 0;
  LH_TRY(lh_store_exec(s,
                       "CREATE TEMP TABLE IF NOT EXISTS retention_inline(episode, seq, start_offset, tokens,"
                       " sampled, min_version, max_version, images, payload_bytes, created_ms)",
                       err));
  int rc = run(s,
               "INSERT INTO temp.retention_inline SELECT episode, seq, start_offset, tokens, sampled, min_version,"
               " max_version, images, payload_bytes, created_ms FROM segments WHERE payload IS NOT NULL AND " OLDER,
               min_version, now, "finding payloads stored in their segments' rows", &moved, err);
  if (rc >= 0 && moved)
    rc = run(s,
             "DELETE FROM segments WHERE (episode, seq) IN (SELECT episode, seq FROM temp.retention_inline)",
             min_version, now, "deleting segments rows with their payloads", NULL, err);
  if (rc >= 0 && moved)
    rc = run(s,
             "INSERT INTO segments(episode, seq, start_offset, tokens, sampled, min_version, max_version, images,"
             " payload_bytes, created_ms, dropped_ms) SELECT episode, seq, start_offset, tokens, sampled,"
             " min_version, max_version, images, payload_bytes, created_ms, ?2 FROM temp.retention_inline",
             min_version, now, "writing segments rows again without their payloads", NULL, err);
  int drc = lh_store_exec(s, "DELETE FROM temp.retention_inline", err);
  return rc < 0 ? rc : drc;
}

static int drop(lh_store *s, uint64_t min_version, uint64_t *segments, uint64_t *bytes,
                lh_errbuf *err) {
  LH_TRY(lh_store_flush(s, err));
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "SELECT count(*), coalesce(sum(payload_bytes), 0) FROM segments"
                          DROP_WHERE, &st, err));
  lh_store_bind_u64(st, 1, min_version);
  int rc = lh_store_step(s, st, "counting payloads to drop", err);
  if (rc == SQLITE_ROW) {
    *segments = lh_store_column_u64(st, 0);
    *bytes = lh_store_column_u64(st, 1);
  }
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (*segments == 0) return 0;
  int64_t now = lh_wall_ms();
  /* The payload rows go first (the segments rows still say which), then
   * the rows from before schema 13, then the mark on the rest. */
  LH_TRY(run(s, "DELETE FROM segment_payloads WHERE (episode, seq) IN (SELECT episode, seq FROM segments" DROP_WHERE
                ")",
             min_version, now, "deleting payloads", NULL, err));
  LH_TRY(rewrite_inline(s, min_version, now, err));
  LH_TRY(run(s,
             "UPDATE segments SET state_offset = NULL, dropped_ms = ?2 WHERE payload IS NULL AND dropped_ms IS NULL"
             " AND " OLDER,
             min_version, now, "dropping payloads", NULL, err));
  /* Every episode with a segment dropped now has min_version below the
   * bound and, before this drop, a payload left; the count reads only the
   * columns stored before a payload, never its overflow pages, and only
   * the rows whose count changed are written. */
  return run(s,
             "UPDATE episodes SET payloads_dropped = (SELECT count(*) FROM segments g"
             "   WHERE g.episode = episodes.id AND g.payload IS NULL AND g.dropped_ms IS NOT NULL), updated_ms = ?2"
             " WHERE min_version < ?1 AND payloads_dropped < segments_received AND payloads_dropped <>"
             "  (SELECT count(*) FROM segments g WHERE g.episode = episodes.id AND g.payload IS NULL"
             "   AND g.dropped_ms IS NOT NULL)",
             min_version, now, "counting dropped payloads per episode", NULL, err);
}

int lh_store_drop_payloads_before(lh_store *s, uint64_t min_version, uint64_t *segments_dropped,
                                  uint64_t *bytes_dropped, lh_errbuf *err) {
  uint64_t segments = 0, bytes = 0;
  /* Versions are stored as signed integers: a bound above INT64_MAX is
   * the largest one. */
  if (min_version > INT64_MAX) min_version = INT64_MAX;
  if (segments_dropped) *segments_dropped = 0;
  if (bytes_dropped) *bytes_dropped = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_drop_payloads_before: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; retention needs lh_store_open",
                         s->path);
  /* Uncapped: retention is what frees a store at its cap. */
  int own = 0;
  LH_TRY(lh_store_write_begin_uncapped(s, &own, err));
  int rc = lh_store_write_end(s, own, drop(s, min_version, &segments, &bytes, err), err);
  if (rc < 0) return rc;
  if (segments)
    LH_INFO("store", "retention dropped segments=%llu bytes=%llu below_version=%llu",
            (unsigned long long)segments, (unsigned long long)bytes,
            (unsigned long long)min_version);
  if (segments_dropped) *segments_dropped = segments;
  if (bytes_dropped) *bytes_dropped = bytes;
  return 0;
}

int lh_store_retain_versions(lh_store *s, uint64_t newest, uint64_t keep_versions, uint64_t *segments_dropped,
                             uint64_t *bytes_dropped, lh_errbuf *err) {
  if (segments_dropped) *segments_dropped = 0;
  if (bytes_dropped) *bytes_dropped = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_retain_versions: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; retention needs lh_store_open",
                         s->path);
  if (keep_versions == 0)
    return lh_errbuf_set(err, LH_EINVAL, "retention must keep at least one version");
  /* The newest version is the writer's: a segment's versions are what its
   * actor said, and one segment claiming version 2^32 - 1 made an earlier
   * rule (the newest stored) drop every honest payload. */
  if (newest + 1 <= keep_versions) return 0;
  return lh_store_drop_payloads_before(s, newest + 1 - keep_versions, segments_dropped,
                                       bytes_dropped, err);
}

/* store: retention. Old payloads go; the rows that describe them stay, so
 * statistics and the episode list still cover the whole run. The pages
 * freed are reused by later inserts (the file does not shrink). */
#include "store/store_internal.h"

/* Which segments a drop below ?1 takes: those whose newest sampled token
 * is older, and those without sampled tokens whose episode is older. */
#define DROP_WHERE                                                                         \
  " WHERE payload IS NOT NULL AND (max_version < ?1 OR (max_version IS NULL AND episode IN" \
  " (SELECT id FROM episodes WHERE max_version < ?1)))"

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
  LH_TRY(lh_store_prepare(s, "UPDATE segments SET payload = NULL, state = NULL, state_offset = NULL, dropped_ms = ?2" DROP_WHERE, &st,
                          err));
  lh_store_bind_u64(st, 1, min_version);
  sqlite3_bind_int64(st, 2, now);
  rc = lh_store_step(s, st, "dropping payloads", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  /* Every episode with a segment dropped now has min_version below the
   * bound, so recounting those covers them; the count reads only the
   * columns stored before the payload, never its overflow pages. */
  LH_TRY(lh_store_prepare(s,
                          "UPDATE episodes SET payloads_dropped = (SELECT count(*) FROM segments g"
                          " WHERE g.episode = episodes.id AND g.payload IS NULL), updated_ms = ?2"
                          " WHERE min_version < ?1",
                          &st, err));
  lh_store_bind_u64(st, 1, min_version);
  sqlite3_bind_int64(st, 2, now);
  rc = lh_store_step(s, st, "counting dropped payloads per episode", err);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
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

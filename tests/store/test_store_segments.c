/* test_store: round trips of segments and episode ends, duplicates, a reward
 * before its segments, gaps in an episode. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

START_TEST(test_round_trip) {
  lh_store *s = open_rw();
  static sfx_seg f0, f1;
  rich_segment(&f0, 7, 0, 3);
  rich_segment(&f1, 7, 1, 4);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  put_seg(s, &f0.seg, 1);
  put_seg(s, &f1.seg, 1);
  sfx_end end;
  sfx_end_init(&end, 7, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  put_end(s, &end.end, 1);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_close(s);

  s = open_ro();
  ck_assert(lh_store_is_readonly(s));
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 7, &r, &e), 0);
  ck_assert_str_eq(r.env, "calc");
  ck_assert_str_eq(r.actor, "a0");
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert(r.has_reward && r.reward == 1.0);
  ck_assert(r.has_end);
  ck_assert_uint_eq(r.segment_count, 2);
  ck_assert_uint_eq(r.segments_received, 2);
  ck_assert_uint_eq(r.tokens_received, f0.seg.n_tokens + f1.seg.n_tokens);
  ck_assert_uint_eq(r.tokens, end.end.total_tokens);
  ck_assert(r.has_versions);
  ck_assert_uint_eq(r.min_version, 3);  /* sampled tokens only */
  ck_assert_uint_eq(r.max_version, 5);
  ck_assert_uint_eq(r.task_seed, 1001);
  ck_assert_uint_eq(r.group_id, 1);

  Longhaul__Segment **segs;
  size_t n;
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments_array(s, 7, &segs, &n, &rep, &e), 0);
  ck_assert_uint_eq(n, 2);
  same_segment(segs[0], &f0.seg);
  same_segment(segs[1], &f1.seg);
  lh_store_segments_free(segs, n);
  ck_assert(rep.complete);
  ck_assert_uint_eq(rep.missing_count, 0);

  lh_reward_term terms[4];
  size_t nt;
  ck_assert_int_eq(lh_store_episode_rewards(s, 7, terms, 4, &nt, &e), 0);
  ck_assert_uint_eq(nt, 2);
  ck_assert_str_eq(terms[0].name, "correct");
  ck_assert_uint_eq(terms[0].step, 1);
  ck_assert(fabs(terms[0].value - 0.75) < 1e-6);
  ck_assert_str_eq(terms[1].name, "format");

  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.schema_version, LH_STORE_SCHEMA_VERSION);
  ck_assert_uint_eq(st.episodes, 1);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 1);
  ck_assert_uint_eq(st.successes, 1);
  ck_assert_uint_eq(st.segments, 2);
  ck_assert_uint_eq(st.reward_terms, 2);
  ck_assert_uint_eq(st.tokens, f0.seg.n_tokens + f1.seg.n_tokens);
  ck_assert(st.payload_bytes > 0 && st.file_bytes > 0);
  ck_assert_uint_eq(st.min_version, 3);
  ck_assert_uint_eq(st.max_version, 5);
  ck_assert_int_eq(lh_store_episode_get(s, 8, &r, &e), LH_ESTORE_NO_EPISODE);
  ck_assert_int_eq(lh_store_episode_segments(s, 8, NULL, NULL, &rep, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
}
END_TEST

START_TEST(test_duplicates) {
  lh_store *s = open_rw();
  static sfx_seg f;
  sfx_seg_plain(&f, 1, 0, 16, 2);
  put_seg(s, &f.seg, 1);
  put_seg(s, &f.seg, 0);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  int dups = 0, ins;
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(lh_store_put_segment(s, &f.seg, &ins, &e), 0);
    dups += !ins;
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(dups, 5);
  sfx_end end;
  sfx_end_init(&end, 1, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  put_end(s, &end.end, 1);
  end.end.reward = 5.0f;  /* a resend never changes what is stored */
  put_end(s, &end.end, 0);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), 0);
  ck_assert_uint_eq(r.segments_received, 1);
  ck_assert_uint_eq(r.tokens_received, 16);
  ck_assert(r.reward == 0.0);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_FAILURE);
  size_t nt;
  ck_assert_int_eq(lh_store_episode_rewards(s, 1, NULL, 0, &nt, &e), 0);
  ck_assert_uint_eq(nt, 2);

  lh_store_run run = {.run_id = "run-1", .command = "longhaul learner", .config = "[model]\n"};
  ck_assert_int_eq(lh_store_put_run(s, &run, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_run(s, &run, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  lh_store_policy_version v = {.version = 3, .run_id = "run-1", .step = 30, .checkpoint = "ckpt/3"};
  ck_assert_int_eq(lh_store_put_policy_version(s, &v, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_policy_version(s, &v, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.runs, 1);
  ck_assert_uint_eq(st.policy_versions, 1);
  ck_assert_uint_eq(st.latest_policy_version, 3);
  ck_assert_int_eq(lh_store_put_run(s, &(lh_store_run){0}, &ins, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

START_TEST(test_reward_before_segments) {
  lh_store *s = open_rw();
  sfx_end end;
  sfx_end_init(&end, 9, "needle", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  put_end(s, &end.end, 1);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 9, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_uint_eq(r.segments_received, 0);
  ck_assert(!r.has_versions);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 9, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.missing_count, 3);
  ck_assert(!rep.complete);
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  uint64_t count;
  ck_assert_int_eq(lh_store_episodes(s, &f, NULL, NULL, &count, &e), LH_EINVAL);
  static sfx_seg g;
  for (uint32_t q = 0; q < 3; q++) {
    sfx_seg_init(&g, 9, q, "a0", "needle");
    sfx_seg_fill(&g, 16, 6 + q);
    put_seg(s, &g.seg, 1);
  }
  ck_assert_int_eq(lh_store_episode_get(s, 9, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);  /* a late segment keeps the end */
  ck_assert(r.reward == 1.0);
  ck_assert_uint_eq(r.segments_received, 3);
  ck_assert_uint_eq(r.min_version, 6);
  ck_assert_uint_eq(r.max_version, 8);
  ck_assert_int_eq(lh_store_episode_segments(s, 9, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  lh_store_close(s);
}
END_TEST

/* An end claiming 2^32 - 1 segments (a peer's, under max_episode_tokens
 * = 0) is counted, not walked seq by seq (that took seconds an episode in
 * every replay show and export); a row whose seq is outside 0..2^32 - 1
 * (another program's, or a damaged file) is an error, not a wrap. */
START_TEST(test_huge_gap_and_bad_seq) {
  lh_store *s = open_rw();
  static sfx_seg g;
  sfx_seg_plain(&g, 11, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  sfx_end end;
  sfx_end_init(&end, 11, "calc", UINT32_MAX, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f);
  int ins = 0;
  ck_assert_int_eq(lh_store_put_episode_end(s, &end.end, &ins, &e), 0);
  ck_assert_msg(ins == 1, "%d: %s", ins, e.msg);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 11, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.expected, UINT32_MAX);
  ck_assert_uint_eq(rep.missing_count, UINT32_MAX - 1);
  ck_assert_uint_eq(rep.missing_listed, LH_STORE_MAX_GAPS);
  ck_assert_uint_eq(rep.missing[0], 1);
  ck_assert_uint_eq(rep.missing[LH_STORE_MAX_GAPS - 1], LH_STORE_MAX_GAPS);
  ck_assert(!rep.complete);
  ck_assert_int_eq(sqlite3_exec(s->db, "UPDATE segments SET seq = -1 WHERE episode = 11", NULL, NULL, NULL), SQLITE_OK);
  ck_assert_int_eq(lh_store_episode_segments(s, 11, NULL, NULL, &rep, &e), LH_ESTORE_PAYLOAD);
  ck_assert_msg(strstr(e.msg, "episode 11 has a segment row with seq -1, outside 0..4294967295"), "%s", e.msg);
  lh_store_close(s);
}
END_TEST

/* An EpisodeEnd's error is kept for good: a long one (a peer's, or an
 * actor's from before it cut them) is stored cut to LH_EPISODE_ERROR_BYTES
 * at a character's start, never refused with its end (refusing it left
 * the episode's segments unended, never trained). */
START_TEST(test_long_error_kept_cut) {
  lh_store *s = open_rw();
  static char why[20001];
  why[0] = 'x'; /* then 2-byte characters: the cut at 4096 falls inside one */
  for (size_t i = 1; i + 1 < 20000; i += 2) why[i] = (char)0xc3, why[i + 1] = (char)0xa9;
  sfx_end end;
  sfx_end_init(&end, 12, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f);
  end.end.error = why + 0;
  int ins = 0;
  ck_assert_int_eq(lh_store_put_episode_end(s, &end.end, &ins, &e), 0);
  ck_assert_msg(ins == 1, "%d: %s", ins, e.msg);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 12, &r, &e), 0);
  sqlite3_stmt *st;
  ck_assert_int_eq(sqlite3_prepare_v2(s->db, "SELECT length(CAST(error AS BLOB)) FROM episodes WHERE id = 12", -1, &st,
                                      NULL),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  ck_assert_int_eq(sqlite3_column_int(st, 0), 4095);
  sqlite3_finalize(st);
  lh_store_close(s);
}
END_TEST

static int count_seg(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  ck_assert(seg != NULL);
  ck_assert_uint_eq(seg->seq, seq);
  (*(int *)ctx)++;
  return 0;
}

START_TEST(test_gaps) {
  lh_store *s = open_rw();
  static sfx_seg g;
  const uint32_t seqs[] = {5, 0, 3, 1};
  for (int i = 0; i < 4; i++) {
    sfx_seg_plain(&g, 4, seqs[i], 8, 1);
    put_seg(s, &g.seg, 1);
  }
  lh_segment_report rep;
  int visited = 0;
  ck_assert_int_eq(lh_store_episode_segments(s, 4, count_seg, &visited, &rep, &e), 0);
  ck_assert_int_eq(visited, 4);
  ck_assert(!rep.has_end);
  ck_assert_uint_eq(rep.received, 4);
  ck_assert_uint_eq(rep.missing_count, 2);  /* 2 and 4, below the highest stored */
  ck_assert_uint_eq(rep.missing[0], 2);
  ck_assert_uint_eq(rep.missing[1], 4);
  sfx_end end;
  sfx_end_init(&end, 4, "needle", 8, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f);
  put_end(s, &end.end, 1);
  ck_assert_int_eq(lh_store_episode_segments(s, 4, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.expected, 8);
  ck_assert_uint_eq(rep.missing_count, 4);  /* 2, 4, 6, 7 */
  ck_assert_uint_eq(rep.missing_listed, 4);
  ck_assert_uint_eq(rep.missing[2], 6);
  ck_assert_uint_eq(rep.missing[3], 7);
  ck_assert(!rep.complete);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.incomplete, 1);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_TRUNCATED], 1);
  lh_store_close(s);
}
END_TEST

void lh_test_store_segments(TCase *tc) {
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_duplicates);
  tcase_add_test(tc, test_reward_before_segments);
  tcase_add_test(tc, test_gaps);
  tcase_add_test(tc, test_huge_gap_and_bad_seq);
  tcase_add_test(tc, test_long_error_kept_cut);
}

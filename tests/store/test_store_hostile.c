/* Tests of the replay store against hostile or broken peers and a second
 * learner: a late EpisodeEnd after the idle sweep, ends that count
 * segments that never come, one episode id from two actors (and from one
 * actor with another env, group or seed), a resent segment with other
 * content, segments past the end, and the writer lock (a second taker in
 * this process and in another, released when its holder is killed). Each
 * test prints what it counted. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_util.h"
#include "store/store_internal.h"
#include "tests/store_fixture.h"

static char db[256];
static lh_errbuf e;

static void remove_files(void) {
  char p[300];
  lh_proc_rm_db(db);
  snprintf(p, sizeof p, "%s.writer", db), unlink(p);
}

static void setup(void) {
  snprintf(db, sizeof db, "/tmp/lh-test-store-hostile-%d.db", (int)getpid());
  remove_files();
  memset(&e, 0, sizeof e);
  lh_log_set_level(LH_LOG_WARN);
}

static void teardown(void) { remove_files(); }

/* Asserts that a put was refused and counts it. */
#define REFUSE(call)                                \
  do {                                              \
    ck_assert_int_eq((call), LH_STORE_REFUSED);     \
    refused++;                                      \
  } while (0)

static lh_store *open_rw(void) {
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "open: %s", e.msg);
  return s;
}

/* Puts a segment or an end; returns *inserted (1, 0 or LH_STORE_REFUSED)
 * after checking that the call itself succeeded. */
static int seg(lh_store *s, const Longhaul__Segment *g) {
  int ins = 7;
  lh_errbuf_clear(&e);
  int rc = lh_store_put_segment(s, g, &ins, &e);
  ck_assert_msg(rc == 0, "put_segment episode %llu seq %u: %s", (unsigned long long)g->episode_id,
                g->seq, e.msg);
  ck_assert(ins == 1 || ins == 0 || ins == LH_STORE_REFUSED || ins == LH_STORE_NO_PREFIX);
  if (ins == LH_STORE_REFUSED || ins == LH_STORE_NO_PREFIX) ck_assert_int_eq(e.code, LH_ESTORE_REFUSED);
  return ins;
}

static int end(lh_store *s, const Longhaul__EpisodeEnd *x) {
  int ins = 7;
  lh_errbuf_clear(&e);
  int rc = lh_store_put_episode_end(s, x, &ins, &e);
  ck_assert_msg(rc == 0, "put_episode_end %llu: %s", (unsigned long long)x->episode_id, e.msg);
  ck_assert(ins == 1 || ins == 0 || ins == LH_STORE_REFUSED);
  if (ins == LH_STORE_REFUSED) ck_assert_int_eq(e.code, LH_ESTORE_REFUSED);
  return ins;
}

/* Segment seq of episode ep from actor, env calc, 16 sampled tokens. */
static void make_seg(sfx_seg *f, uint64_t ep, uint32_t seq, const char *actor) {
  sfx_seg_init(f, ep, seq, actor, "calc");
  f->seg.start_offset = (uint64_t)seq * 16;
  sfx_seg_fill(f, 16, 1);
}

static lh_episode_row row_of(lh_store *s, uint64_t ep) {
  lh_episode_row r;
  ck_assert_msg(lh_store_episode_get(s, ep, &r, &e) == 0, "%s", e.msg);
  return r;
}

static int note_id(void *ctx, const lh_episode_row *r) {
  *(uint64_t *)ctx = r->id;
  return 1;
}

/* Whether ep is ready as the trainer asks (lh_episode_filter.ready_only),
 * checked against the reassembly report. */
static int is_ready(lh_store *s, uint64_t ep) {
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  f.after_id = ep - 1;
  f.limit = 1;
  uint64_t found = 0;
  ck_assert_int_eq(lh_store_episodes(s, &f, note_id, &found, NULL, &e), 0);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, ep, NULL, NULL, &rep, &e), 0);
  ck_assert_int_eq(found == ep, rep.complete);
  return found == ep;
}

static int64_t future(void) { return lh_wall_ms() + 60000; }

/* A: an episode the sweep aborted gets its EpisodeEnd later: stored whole
 * (inserted 1), status from the end, swept_ms kept, ready when every
 * segment is there; its resend is a duplicate. A late end short of
 * segments is stored and swept again as error; a late end of outcome
 * error keeps its text; an episode the learner ended itself keeps that
 * status. */
START_TEST(test_late_end_after_sweep) {
  lh_store *s = open_rw();
  static sfx_seg f;
  for (uint64_t ep = 10; ep <= 13; ep++)
    for (uint32_t q = 0; q < 2; q++) {
      make_seg(&f, ep, q, "a0");
      ck_assert_int_eq(seg(s, &f.seg), 1);
    }
  lh_store_sweep_counts n;
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, lh_wall_ms() - 60000, "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n.aborted, 0);
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, future(), "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n.aborted, 4);
  ck_assert_uint_eq(n.incomplete, 0);
  lh_episode_row r = row_of(s, 10);
  ck_assert_int_eq(r.status, LH_EPISODE_ABORTED);
  ck_assert_str_eq(r.error, "actor lost");
  int64_t swept = r.swept_ms;

  /* The late end of 10: every segment is there. */
  sfx_end x;
  sfx_end_init(&x, 10, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 0.75f);
  x.end.total_tokens = 32, x.end.steps = 5;
  int late = end(s, &x.end);
  printf("late end of a swept episode: inserted=%d\n", late);
  ck_assert_int_eq(late, 1);
  r = row_of(s, 10);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert(r.has_reward && r.reward == 0.75);
  ck_assert_str_eq(r.error, "");
  ck_assert_uint_eq(r.segment_count, 2);
  ck_assert_uint_eq(r.tokens, 32);
  ck_assert_uint_eq(r.steps, 5);
  ck_assert_int_gt(swept, 0);
  ck_assert_int_eq(r.swept_ms, swept);
  lh_reward_term terms[4];
  size_t nt = 0;
  ck_assert_int_eq(lh_store_episode_rewards(s, 10, terms, 4, &nt, &e), 0);
  ck_assert_uint_eq(nt, 2);
  ck_assert_str_eq(terms[0].name, "correct");
  ck_assert(is_ready(s, 10));
  /* A true duplicate: the same end again, or another one. */
  ck_assert_int_eq(end(s, &x.end), 0);
  x.end.reward = 5.0f;
  ck_assert_int_eq(end(s, &x.end), 0);
  ck_assert(row_of(s, 10).reward == 0.75);

  /* 11: the late end counts 3; one never comes. */
  sfx_end_init(&x, 11, "calc", 3, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  r = row_of(s, 11);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert(!is_ready(s, 11));
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, future(), "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n.incomplete, 1);
  r = row_of(s, 11);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_str_eq(r.error, "1 of 3 segments missing after the idle limit");

  /* 12: a late end of outcome error keeps its text; 13: truncated. */
  sfx_end_init(&x, 12, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_ERROR, 0.0f);
  x.end.error = "env crashed";
  ck_assert_int_eq(end(s, &x.end), 1);
  r = row_of(s, 12);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_str_eq(r.error, "env crashed");
  sfx_end_init(&x, 13, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.5f);
  ck_assert_int_eq(end(s, &x.end), 1);
  ck_assert_int_eq(row_of(s, 13).status, LH_EPISODE_TRUNCATED);

  /* 14: ended by the learner itself, not the sweep: that verdict stands,
   * the end's figures go in. */
  make_seg(&f, 14, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert_int_eq(lh_store_episode_set_status(s, 14, LH_EPISODE_ERROR, "payload does not decode", &e), 0);
  sfx_end_init(&x, 14, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  r = row_of(s, 14);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_str_eq(r.error, "payload does not decode");
  ck_assert(r.has_reward && r.reward == 1.0);
  ck_assert_int_eq(r.swept_ms, 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  printf("late ends: complete=%llu truncated=%llu error=%llu aborted=%llu\n",
         (unsigned long long)st.by_status[LH_EPISODE_COMPLETE],
         (unsigned long long)st.by_status[LH_EPISODE_TRUNCATED],
         (unsigned long long)st.by_status[LH_EPISODE_ERROR],
         (unsigned long long)st.by_status[LH_EPISODE_ABORTED]);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_ABORTED], 0);
  lh_store_close(s);
}
END_TEST

/* B1: an ended episode short of segments after the idle time ends as
 * error naming how many are missing, keeping its end's outcome; complete
 * ones, recent ones and ends whose own outcome is aborted stay; the
 * segments that come after make it whole again (they were acked: it
 * stayed error, never trained, its text saying they were missing). The
 * old entry point counts both kinds. */
START_TEST(test_sweep_short_episodes) {
  lh_store *s = open_rw();
  static sfx_seg f;
  sfx_end x;
  /* 20: 0, 1 and 3 of 5. 21: an end of 2 and no segment. 22: complete.
   * 23: running. 24: its own end says aborted, 1 of 2. */
  const uint32_t seqs[] = {0, 1, 3};
  for (int i = 0; i < 3; i++) {
    make_seg(&f, 20, seqs[i], "a0");
    ck_assert_int_eq(seg(s, &f.seg), 1);
  }
  sfx_end_init(&x, 20, "calc", 5, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  sfx_end_init(&x, 21, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  make_seg(&f, 22, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  sfx_end_init(&x, 22, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  make_seg(&f, 23, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  make_seg(&f, 24, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  sfx_end_init(&x, 24, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_ABORTED, 0.0f);
  ck_assert_int_eq(end(s, &x.end), 1);

  lh_store_sweep_counts n;
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, lh_wall_ms() - 60000, NULL, &n, &e), 0);
  ck_assert_uint_eq(n.aborted + n.incomplete, 0);
  uint64_t ended = 0;
  ck_assert_int_eq(lh_store_abort_idle_episodes(s, future(), "actor lost", &ended, &e), 0);
  printf("sweep: ended=%llu (1 running, 2 short)\n", (unsigned long long)ended);
  ck_assert_uint_eq(ended, 3);
  lh_episode_row r = row_of(s, 20);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert_str_eq(r.error, "2 of 5 segments missing after the idle limit");
  ck_assert(r.has_reward && r.reward == 1.0);
  ck_assert_int_gt(r.swept_ms, 0);
  r = row_of(s, 21);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_str_eq(r.error, "2 of 2 segments missing after the idle limit");
  r = row_of(s, 22);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_int_eq(r.swept_ms, 0);
  ck_assert_int_eq(row_of(s, 23).status, LH_EPISODE_ABORTED);
  r = row_of(s, 24);
  ck_assert_int_eq(r.status, LH_EPISODE_ABORTED);
  ck_assert_int_eq(r.swept_ms, 0);
  /* Nothing left to sweep. */
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, future(), NULL, &n, &e), 0);
  ck_assert_uint_eq(n.aborted + n.incomplete, 0);
  /* The missing segments come after all: one still leaves it short and
   * error, the last makes it complete (its end's outcome) and ready. */
  make_seg(&f, 20, 2, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  r = row_of(s, 20);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert(!is_ready(s, 20));
  make_seg(&f, 20, 4, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  r = row_of(s, 20);
  ck_assert_uint_eq(r.segments_received, 5);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert(r.error[0] == 0);
  ck_assert(r.has_reward && r.reward == 1.0);
  ck_assert(is_ready(s, 20));
  /* 21 (truncated, no segment) made whole in one batch */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  make_seg(&f, 21, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  make_seg(&f, 21, 1, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(row_of(s, 21).status, LH_EPISODE_TRUNCATED);
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, future(), NULL, &n, &e), 0);
  ck_assert_uint_eq(n.aborted + n.incomplete, 0);
  ck_assert_int_eq(lh_store_sweep_idle_episodes(NULL, 0, NULL, &n, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

/* B2: one episode id from two actors, and from its own actor with
 * another env, group or task seed: refused (inserted LH_STORE_REFUSED,
 * rc 0, the reason in err), in a batch or not, whether the episode's row
 * is committed or only pending in the batch; the owner's episode stays as
 * it was and the batch commits the rest. */
START_TEST(test_two_actors_one_id) {
  lh_store *s = open_rw();
  static sfx_seg f;
  int refused = 0;
  make_seg(&f, 30, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  make_seg(&f, 30, 0, "a1");
  int ins = seg(s, &f.seg);
  printf("second actor's segment 0: inserted=%d (%s)\n", ins, e.msg);
  ck_assert_int_eq(ins, LH_STORE_REFUSED);
  ck_assert_msg(strstr(e.msg, "episode 30 belongs to actor a0, not a1") != NULL, "%s", e.msg);
  refused++;
  make_seg(&f, 30, 1, "a1");
  REFUSE(seg(s, &f.seg));
  make_seg(&f, 30, 1, "");
  REFUSE(seg(s, &f.seg));
  make_seg(&f, 30, 1, "a0");
  f.seg.env = "needle";
  REFUSE(seg(s, &f.seg));
  ck_assert_msg(strstr(e.msg, "runs env calc, not needle") != NULL, "%s", e.msg);
  make_seg(&f, 30, 1, "a0");
  f.seg.group_id = 99;
  REFUSE(seg(s, &f.seg));
  ck_assert_msg(strstr(e.msg, "group") != NULL, "%s", e.msg);
  make_seg(&f, 30, 1, "a0");
  f.seg.task_seed = 99;
  REFUSE(seg(s, &f.seg));
  ck_assert_msg(strstr(e.msg, "task seed") != NULL, "%s", e.msg);

  /* In a batch: against the committed row and against one pending. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  make_seg(&f, 30, 1, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  make_seg(&f, 30, 2, "a1");
  REFUSE(seg(s, &f.seg));
  make_seg(&f, 31, 0, "a1");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  make_seg(&f, 31, 1, "a0");
  REFUSE(seg(s, &f.seg));
  ck_assert_msg(strstr(e.msg, "episode 31 belongs to actor a1, not a0") != NULL, "%s", e.msg);
  sfx_end x;
  sfx_end_init(&x, 31, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);  /* from a0 */
  REFUSE(end(s, &x.end));
  make_seg(&f, 30, 2, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);

  /* Ends: another actor's, another env's; then the owner's. */
  sfx_end_init(&x, 30, "calc", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  snprintf(x.actor, sizeof x.actor, "a1");
  REFUSE(end(s, &x.end));
  ck_assert_msg(strstr(e.msg, "belongs to actor a0, not a1") != NULL, "%s", e.msg);
  sfx_end_init(&x, 30, "needle", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  REFUSE(end(s, &x.end));
  sfx_end_init(&x, 30, "calc", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  x.end.group_id = 77;
  REFUSE(end(s, &x.end));
  sfx_end_init(&x, 30, "calc", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  snprintf(x.actor, sizeof x.actor, "a1");  /* after the end too */
  REFUSE(end(s, &x.end));

  lh_episode_row r = row_of(s, 30);
  ck_assert_str_eq(r.actor, "a0");
  ck_assert_str_eq(r.env, "calc");
  ck_assert_uint_eq(r.segments_received, 3);
  ck_assert_uint_eq(r.tokens_received, 48);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert(is_ready(s, 30));
  r = row_of(s, 31);
  ck_assert_str_eq(r.actor, "a1");
  ck_assert_uint_eq(r.segments_received, 1);
  ck_assert_int_eq(r.status, LH_EPISODE_RUNNING);
  printf("collisions refused=%d; episode 30 kept %u segments of a0\n", refused, 3);
  ck_assert_int_eq(refused, 13);
  lh_store_close(s);
}
END_TEST

/* A resent segment must be the same: another content under a stored
 * (episode, seq) is refused as a conflict and the stored one stays; after
 * retention dropped the payload, the size, offset and token count decide. */
START_TEST(test_segment_conflict) {
  lh_store *s = open_rw();
  static sfx_seg f, g;
  make_seg(&f, 40, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert_int_eq(seg(s, &f.seg), 0);
  sfx_seg_init(&g, 40, 0, "a0", "calc");
  sfx_seg_fill(&g, 16, 1);
  g.tokens[5] = 'z';
  int ins = seg(s, &g.seg);
  printf("same key, other content: inserted=%d (%s)\n", ins, e.msg);
  ck_assert_int_eq(ins, LH_STORE_REFUSED);
  ck_assert_msg(strstr(e.msg, "episode 40 segment 0 from actor a0 differs") != NULL, "%s", e.msg);
  sfx_seg_fill(&g, 1, 1);  /* longer */
  ck_assert_int_eq(seg(s, &g.seg), LH_STORE_REFUSED);
  /* In a batch the refusal leaves the batch usable. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  ck_assert_int_eq(seg(s, &g.seg), LH_STORE_REFUSED);
  make_seg(&g, 40, 1, "a0");
  ck_assert_int_eq(seg(s, &g.seg), 1);
  ck_assert_int_eq(seg(s, &f.seg), 0);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  Longhaul__Segment **segs;
  size_t count;
  ck_assert_int_eq(lh_store_episode_segments_array(s, 40, &segs, &count, NULL, &e), 0);
  ck_assert_uint_eq(count, 2);
  ck_assert_uint_eq(segs[0]->n_tokens, 16);
  ck_assert_int_eq(memcmp(segs[0]->tokens, f.tokens, 16 * sizeof f.tokens[0]), 0);
  lh_store_segments_free(segs, count);
  ck_assert_uint_eq(row_of(s, 40).segments_received, 2);

  /* Retention drops the payloads (version 1 < 2): same figures resend. */
  uint64_t dropped;
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 2, &dropped, NULL, &e), 0);
  ck_assert_uint_eq(dropped, 2);
  ck_assert_int_eq(seg(s, &f.seg), 0);
  sfx_seg_init(&g, 40, 0, "a0", "calc");
  sfx_seg_fill(&g, 17, 1);
  ck_assert_int_eq(seg(s, &g.seg), LH_STORE_REFUSED);
  lh_store_close(s);
}
END_TEST

/* Past the end: a segment whose seq is not below the stored end's count,
 * and an end counting fewer segments than are stored, are refused; the
 * right end then goes in. In one batch too (the end after its segments). */
START_TEST(test_past_the_end) {
  lh_store *s = open_rw();
  static sfx_seg f;
  sfx_end x;
  make_seg(&f, 50, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  sfx_end_init(&x, 50, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  make_seg(&f, 50, 2, "a0");
  int ins = seg(s, &f.seg);
  printf("segment past the end: inserted=%d (%s)\n", ins, e.msg);
  ck_assert_int_eq(ins, LH_STORE_REFUSED);
  ck_assert_msg(strstr(e.msg, "ended with 2 segments; segment 2") != NULL, "%s", e.msg);
  make_seg(&f, 50, 1, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert(is_ready(s, 50));

  for (uint32_t q = 0; q < 4; q++) {
    make_seg(&f, 51, q, "a0");
    ck_assert_int_eq(seg(s, &f.seg), 1);
  }
  sfx_end_init(&x, 51, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), LH_STORE_REFUSED);
  ck_assert_msg(strstr(e.msg, "has segment 3 stored, but its EpisodeEnd from actor a0 counts 2") != NULL,
                "%s", e.msg);
  ck_assert_int_eq(row_of(s, 51).status, LH_EPISODE_RUNNING);
  sfx_end_init(&x, 51, "calc", 4, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  ck_assert(is_ready(s, 51));

  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  make_seg(&f, 52, 0, "a0");
  ck_assert_int_eq(seg(s, &f.seg), 1);
  sfx_end_init(&x, 52, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  ck_assert_int_eq(end(s, &x.end), 1);
  make_seg(&f, 52, 1, "a0");
  ck_assert_int_eq(seg(s, &f.seg), LH_STORE_REFUSED);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_episode_row r = row_of(s, 52);
  ck_assert_uint_eq(r.segments_received, 1);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  lh_store_close(s);
}
END_TEST

/* ---- the writer lock ---- */

static void expect_locked(const char *holder_text) {
  lh_store_writer_lock *l = (lh_store_writer_lock *)1;
  lh_errbuf_clear(&e);
  int rc = lh_store_lock_writer(db, "second learner", &l, &e);
  printf("second writer: %s (%s)\n", lh_err_name(rc), e.msg);
  ck_assert_int_eq(rc, LH_ESTORE_WRITER_LOCKED);
  ck_assert(l == NULL);
  ck_assert_msg(strstr(e.msg, holder_text) != NULL, "%s", e.msg);
  ck_assert_msg(strstr(e.msg, db) != NULL, "%s", e.msg);
}

START_TEST(test_writer_lock) {
  lh_store_writer_lock *l = NULL;
  ck_assert_msg(lh_store_lock_writer(db, "learner rank 0\nrun r1", &l, &e) == 0, "%s", e.msg);
  ck_assert(l != NULL);
  char want[64];
  snprintf(want, sizeof want, "pid %d on ", (int)getpid());
  /* A second taker in this process is refused too, naming the holder. */
  expect_locked(want);
  expect_locked("learner rank 0 run r1");
  lh_store_unlock_writer(l);
  lh_store_unlock_writer(NULL);
  ck_assert_msg(lh_store_lock_writer(db, NULL, &l, &e) == 0, "%s", e.msg);
  expect_locked("no description");
  lh_store_unlock_writer(l);

  /* Another process holds it, then is killed: the lock goes with it. */
  int ready[2];
  ck_assert_int_eq(pipe(ready), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    alarm(120);  /* an orphan, should the test fail before its kill, goes too */
    lh_store_writer_lock *mine = NULL;
    lh_errbuf ce;
    if (lh_store_lock_writer(db, "child learner", &mine, &ce) != 0) _exit(3);
    if (write(ready[1], "L", 1) != 1) _exit(4);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  ck_assert_int_eq(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ck_assert_int_eq(c, 'L');
  snprintf(want, sizeof want, "pid %d on ", (int)pid);
  expect_locked(want);
  expect_locked("child learner");
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ck_assert_msg(lh_store_lock_writer(db, "after the kill", &l, &e) == 0, "%s", e.msg);
  printf("writer lock taken after its holder (pid %d) was killed\n", (int)pid);
  lh_store_unlock_writer(l);

  /* Other spellings of the same store share its lock: a symbolic link, a
   * path through "." (the store exists by now). */
  lh_store_close(open_rw());
  char link[300], dotted[300];
  snprintf(link, sizeof link, "%s-link", db);
  unlink(link);
  ck_assert_int_eq(symlink(db, link), 0);
  const char *slash = strrchr(db, '/');
  snprintf(dotted, sizeof dotted, "%.*s/./%s", (int)(slash - db), db, slash + 1);
  ck_assert_msg(lh_store_lock_writer(link, "through the link", &l, &e) == 0, "%s", e.msg);
  lh_store_writer_lock *l2 = NULL;
  ck_assert_int_eq(lh_store_lock_writer(db, NULL, &l2, &e), LH_ESTORE_WRITER_LOCKED);
  ck_assert_int_eq(lh_store_lock_writer(dotted, NULL, &l2, &e), LH_ESTORE_WRITER_LOCKED);
  ck_assert_msg(strstr(e.msg, "through the link") != NULL, "%s", e.msg);
  lh_store_unlock_writer(l);
  unlink(link);

  /* Bad arguments and a folder that does not exist. */
  ck_assert_int_eq(lh_store_lock_writer(NULL, NULL, &l, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_lock_writer(db, NULL, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_lock_writer("/nonexistent-lh-dir/x.db", NULL, &l, &e), LH_EIO);
  ck_assert_msg(strstr(e.msg, "/nonexistent-lh-dir/x.db.writer") != NULL, "%s", e.msg);
  ck_assert(l == NULL);
}
END_TEST

/* Shared prefixes (docs/actors.md): a member names the first tokens of
 * its group's leader, stored once. Refused: a prefix that is not stored,
 * one of another actor or group, a member's (a chain, so no cycle), a
 * length at which no segment of the leader ends, a later segment or an
 * end that names another prefix than the episode's first message did; an
 * episode that names itself is not even a valid message. The honest
 * member is stored and reads whole, its resend a duplicate. */
START_TEST(test_shared_prefix_refs) {
  lh_store *s = open_rw();
  static sfx_seg f;
  static sfx_end x;
  int refused = 0;
  /* leader 40 (group 10): two segments, cut at 16 */
  for (uint32_t q = 0; q < 2; q++) {
    make_seg(&f, 40, q, "a0");
    ck_assert_int_eq(seg(s, &f.seg), 1);
  }
  /* a member: its first segment starts where the prefix ends */
  make_seg(&f, 41, 0, "a0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 40, f.seg.prefix_tokens = 16;
  ck_assert_int_eq(seg(s, &f.seg), 1);
  ck_assert_int_eq(seg(s, &f.seg), 0);  /* a resend */
  /* its second names another length, then no prefix: refused */
  make_seg(&f, 41, 1, "a0");
  f.seg.start_offset = 32, f.seg.prefix_episode_id = 40, f.seg.prefix_tokens = 32;
  REFUSE(seg(s, &f.seg));
  ck_assert(strstr(e.msg, "starts with the first 16 tokens of episode 40"));
  f.seg.prefix_episode_id = 0, f.seg.prefix_tokens = 0;
  REFUSE(seg(s, &f.seg));
  /* no segment of the leader ends at 8: while the leader is not whole
   * that segment may yet come (the ingest lets the member wait); once it
   * is, refused */
  make_seg(&f, 42, 0, "a0");
  f.seg.start_offset = 8, f.seg.prefix_episode_id = 40, f.seg.prefix_tokens = 8;
  ck_assert_int_eq(seg(s, &f.seg), LH_STORE_NO_PREFIX);
  ck_assert(strstr(e.msg, "no stored segment of it ends there"));
  sfx_end_init(&x, 40, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  x.end.actor = "a0", x.end.group_id = 10, x.end.task_seed = 1010, x.end.total_tokens = 32;
  ck_assert_int_eq(end(s, &x.end), 1);
  REFUSE(seg(s, &f.seg));
  ck_assert(strstr(e.msg, "no stored segment of it ends there"));
  /* a member's tokens as a prefix: a chain */
  make_seg(&f, 43, 0, "a0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 41, f.seg.prefix_tokens = 16;
  REFUSE(seg(s, &f.seg));
  ck_assert(strstr(e.msg, "a prefix is one episode's own tokens"));
  /* another group (44: group 11), another actor, a prefix never stored */
  make_seg(&f, 44, 0, "a0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 40, f.seg.prefix_tokens = 16;
  REFUSE(seg(s, &f.seg));
  ck_assert(strstr(e.msg, "shared within a group of one actor"));
  make_seg(&f, 42, 0, "b0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 40, f.seg.prefix_tokens = 16;
  REFUSE(seg(s, &f.seg));
  /* a prefix not stored (yet: the ingest lets it wait a while) */
  make_seg(&f, 42, 0, "a0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 999, f.seg.prefix_tokens = 16;
  ck_assert_int_eq(seg(s, &f.seg), LH_STORE_NO_PREFIX);
  refused++;
  ck_assert(strstr(e.msg, "no such episode is stored"));
  /* an end that creates its episode names a prefix as checked; one that
   * names another than the episode's segments did is refused */
  sfx_end_init(&x, 43, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  x.end.actor = "a0", x.end.group_id = 10, x.end.task_seed = 1010;
  x.end.prefix_episode_id = 41, x.end.prefix_tokens = 16, x.end.total_tokens = 32;
  REFUSE(end(s, &x.end));
  sfx_end_init(&x, 41, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  x.end.actor = "a0", x.end.group_id = 10, x.end.task_seed = 1010, x.end.total_tokens = 32;
  REFUSE(end(s, &x.end));
  x.end.prefix_episode_id = 40, x.end.prefix_tokens = 16;
  ck_assert_int_eq(end(s, &x.end), 1);
  /* an episode that names itself: not a valid message */
  make_seg(&f, 45, 0, "a0");
  f.seg.start_offset = 16, f.seg.prefix_episode_id = 45, f.seg.prefix_tokens = 16;
  int ins = 7;
  ck_assert_int_lt(lh_store_put_segment(s, &f.seg, &ins, &e), 0);
  ck_assert(strstr(e.msg, "is the episode itself"));
  /* the member reads whole: the leader's first segment, then its own */
  Longhaul__Segment **segs = NULL;
  size_t n = 0;
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments_array(s, 41, &segs, &n, &rep, &e), 0);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(segs[0]->episode_id, 40);
  ck_assert_uint_eq(segs[0]->start_offset, 0);
  ck_assert_uint_eq(segs[1]->episode_id, 41);
  ck_assert_uint_eq(segs[1]->start_offset, 16);
  ck_assert(rep.prefix_whole && rep.complete && rep.prefix_segments == 1);
  lh_store_segments_free(segs, n);
  lh_episode_row r = row_of(s, 41);
  ck_assert_uint_eq(r.prefix_episode, 40);
  ck_assert_uint_eq(r.prefix_tokens, 16);
  ck_assert_uint_eq(r.tokens, 32);
  ck_assert_uint_eq(r.tokens_received, 16);
  ck_assert(is_ready(s, 41));
  printf("shared prefix references: %d refused, the member stored whole\n", refused);
  ck_assert_int_eq(refused, 9);
  lh_store_close(s);
}
END_TEST

static Suite *hostile_suite(void) {
  Suite *su = suite_create("store_hostile");
  TCase *tc = tcase_create("store_hostile");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_late_end_after_sweep);
  tcase_add_test(tc, test_sweep_short_episodes);
  tcase_add_test(tc, test_two_actors_one_id);
  tcase_add_test(tc, test_segment_conflict);
  tcase_add_test(tc, test_past_the_end);
  tcase_add_test(tc, test_writer_lock);
  tcase_add_test(tc, test_shared_prefix_refs);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) {
  return lh_test_run(hostile_suite(), CK_FORK);
}

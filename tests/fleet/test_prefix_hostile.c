/* Shared prefixes (docs/actors.md) against a real `longhaul learner`,
 * beside an honest actor process whose groups share their prefixes: a
 * DEALER in this process says Hello under names of its own and sends
 * members that name other episodes' tokens as their prefix. Each case
 * prints what each attack was answered (after how many retries); nothing
 * hostile may be stored, the learner never exits and training goes on.
 * Waits for acks and for the store, never for a time. Run one case:
 * test_prefix_hostile CASE. */
#define _GNU_SOURCE
#include "case_main.h" /* check.h and the suite runner */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/common.h"
#include "fleet_fixture.h"
#include "peer_fixture.h"
#include "proc_util.h"
#include "proto/wire.h"
#include "store/store.h"

#define TOK 8 /* tokens of each segment here; a leader's prefix is its first segment */

static uint64_t next_msg = 1;

/* A segment of n tokens from start: the environment's (not sampled) or
 * sampled at version 0, naming a prefix (0, 0: none). */
typedef struct {
  Longhaul__Segment s;
  uint32_t tok[TOK], ver[TOK];
  uint8_t mask[TOK];
  float logp[TOK];
  char actor[16];
} seg_buf;

static void make_seg(seg_buf *b, const char *actor, uint64_t id, uint32_t seq, uint64_t group, uint64_t start,
                     int sampled, uint64_t prefix, uint64_t prefix_tokens) {
  longhaul__segment__init(&b->s);
  snprintf(b->actor, sizeof b->actor, "%s", actor);
  for (int i = 0; i < TOK; i++) {
    b->tok[i] = (uint32_t)(40 + (start + (uint64_t)i + group * 3) % 60);
    b->ver[i] = 0, b->mask[i] = (uint8_t)sampled, b->logp[i] = sampled ? -4.0f : 0.0f;
  }
  b->s.episode_id = id, b->s.seq = seq, b->s.actor = b->actor, b->s.env = "calc";
  b->s.start_offset = start, b->s.group_id = group, b->s.task_seed = group;
  b->s.n_tokens = TOK, b->s.tokens = b->tok;
  b->s.loss_mask.len = TOK, b->s.loss_mask.data = b->mask;
  b->s.n_behavior_logp = TOK, b->s.behavior_logp = b->logp;
  b->s.n_policy_version = TOK, b->s.policy_version = b->ver;
  b->s.prefix_episode_id = prefix, b->s.prefix_tokens = prefix_tokens;
}

typedef struct {
  Longhaul__EpisodeEnd e;
  char actor[16];
} end_buf;

static void make_end(end_buf *b, const char *actor, uint64_t id, uint64_t group, uint32_t segments, uint64_t total,
                     float reward, uint64_t prefix, uint64_t prefix_tokens) {
  longhaul__episode_end__init(&b->e);
  snprintf(b->actor, sizeof b->actor, "%s", actor);
  b->e.episode_id = id, b->e.actor = b->actor, b->e.env = "calc", b->e.segment_count = segments;
  b->e.total_tokens = total, b->e.reward = reward, b->e.group_id = group, b->e.task_seed = group;
  b->e.outcome = reward > 0 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  b->e.prefix_episode_id = prefix, b->e.prefix_tokens = prefix_tokens;
}

/* Sends one message; returns the msg id it went under. */
static uint64_t send_seg(void *d, seg_buf *b) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &b->s;
  uint64_t id = next_msg++;
  lh_peer_send(d, &env, id, b->actor);
  return id;
}

static uint64_t send_end(void *d, end_buf *b) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &b->e;
  uint64_t id = next_msg++;
  lh_peer_send(d, &env, id, b->actor);
  return id;
}

static int seg_status(void *d, seg_buf *b) { return lh_peer_ack_of(d, send_seg(d, b)); }
static int end_status(void *d, end_buf *b) { return lh_peer_ack_of(d, send_end(d, b)); }

/* Sends the segment again while it is answered ACK_RETRY, as an actor
 * would (every 20 ms, at most 300 s): the answer that ends it, and how
 * many retries came before. */
static int seg_final(void *d, seg_buf *b, int *retries) {
  int status = LONGHAUL__ACK_STATUS__ACK_RETRY;
  *retries = 0;
  int64_t start = lh_wall_ms();
  while ((status = seg_status(d, b)) == LONGHAUL__ACK_STATUS__ACK_RETRY && lh_wall_ms() - start < 300000) {
    (*retries)++;
    lh_proc_sleep_ms(20);
  }
  return status;
}

/* A leader: its first observation (TOK tokens, the prefix, a segment of
 * its own as the actor cuts it), TOK sampled tokens, and its end. */
static void send_leader(void *d, const char *actor, uint64_t id, uint64_t group, float reward) {
  seg_buf b;
  make_seg(&b, actor, id, 0, group, 0, 0, 0, 0);
  ck_assert_int_eq(seg_status(d, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  make_seg(&b, actor, id, 1, group, TOK, 1, 0, 0);
  ck_assert_int_eq(seg_status(d, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  end_buf e;
  make_end(&e, actor, id, group, 2, 2 * TOK, reward, 0, 0);
  ck_assert_int_eq(end_status(d, &e), LONGHAUL__ACK_STATUS__ACK_STORED);
}

/* A member of leader's prefix (its first TOK tokens): TOK sampled tokens
 * from there, and its end. */
static void send_member(void *d, const char *actor, uint64_t id, uint64_t group, uint64_t leader, float reward) {
  seg_buf b;
  make_seg(&b, actor, id, 0, group, TOK, 1, leader, TOK);
  ck_assert_int_eq(seg_status(d, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  end_buf e;
  make_end(&e, actor, id, group, 1, 2 * TOK, reward, leader, TOK);
  ck_assert_int_eq(end_status(d, &e), LONGHAUL__ACK_STATUS__ACK_STORED);
}

static const char *status_name(int s) {
  switch (s) {
    case LONGHAUL__ACK_STATUS__ACK_STORED: return "stored";
    case LONGHAUL__ACK_STATUS__ACK_DUPLICATE: return "duplicate";
    case LONGHAUL__ACK_STATUS__ACK_RETRY: return "retry";
    case LONGHAUL__ACK_STATUS__ACK_REJECTED: return "rejected";
    default: return "?";
  }
}

typedef struct {
  const char *what;
  int status, retries;
} attack;

static int n_attacks;
static attack attacks[32];

static void record(const char *what, int status, int retries) {
  ck_assert_int_lt(n_attacks, 32);
  attacks[n_attacks++] = (attack){what, status, retries};
  printf("prefix hostile: %-62s %s after %d retries\n", what, status_name(status), retries);
  fflush(stdout);
}

/* An honest actor process plays beside the hostile peer (its groups share
 * their prefixes); once its members are stored, the peer's references:
 * another actor's leader, another group's, a member's (a chain), a cycle
 * in both arrival orders and one closed on a stored episode, a prefix past
 * max_episode_tokens, one longer than the leader's segments reach, a
 * member's first segment inside its prefix, a member whose messages name
 * different prefixes, a leader that never comes. Each is refused (those
 * whose leader may still come after abort_after_ms of retries), none is
 * stored; the honest actor's episodes and the steps go on. */
START_TEST(test_prefix_refs) {
  fleet f;
  fleet_init(&f, "prefix-refs", "abort_after_ms = 5000\nmax_episode_tokens = 1000\n", NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(WAIT_FOR(300, store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND prefix_episode "
                                            "IS NOT NULL AND status = 'complete'") >= 3),
                "the honest actor stored no member (see %s)", alog);
  void *ctx = zmq_ctx_new();
  void *h0 = lh_peer_dealer(ctx, f.ing, 60000), *h1 = lh_peer_dealer(ctx, f.ing, 60000);
  lh_peer_hello(h0, "h0");
  lh_peer_hello(h1, "h1");
  int64_t attack_ms = lh_wall_ms();
  uint64_t steps_before = train_rows(f.db);
  send_leader(h1, "h1", 1001, 70, 1.0f);
  send_leader(h0, "h0", 2001, 80, 1.0f);
  seg_buf b;
  end_buf e;
  int r = 0;
  /* another actor's leader (same group and seed) */
  make_seg(&b, "h0", 2101, 0, 70, TOK, 1, 1001, TOK);
  record("another actor's leader", seg_final(h0, &b, &r), r);
  /* another group's leader */
  make_seg(&b, "h0", 2102, 0, 81, TOK, 1, 2001, TOK);
  record("another group's leader", seg_final(h0, &b, &r), r);
  /* a chain: 2103 is a member of 2001, 2104 names 2103's tokens */
  send_member(h0, "h0", 2103, 80, 2001, 0.0f);
  make_seg(&b, "h0", 2104, 0, 80, 2 * TOK, 1, 2103, 2 * TOK);
  record("a member's tokens (a chain)", seg_final(h0, &b, &r), r);
  /* a prefix past max_episode_tokens (1000) */
  make_seg(&b, "h0", 2105, 0, 80, 2000, 1, 2001, 2000);
  record("a prefix of 2000 tokens, past max_episode_tokens", seg_final(h0, &b, &r), r);
  /* longer than the (ended) leader's segments reach */
  make_seg(&b, "h0", 2106, 0, 80, 3 * TOK, 1, 2001, 3 * TOK);
  record("a prefix past the leader's last token", seg_final(h0, &b, &r), r);
  /* where no segment of the leader ends */
  make_seg(&b, "h0", 2111, 0, 80, TOK + 3, 1, 2001, TOK + 3);
  record("a prefix ending inside a leader's segment", seg_final(h0, &b, &r), r);
  /* the member's first segment starts inside its prefix */
  make_seg(&b, "h0", 2107, 0, 80, TOK / 2, 1, 2001, TOK);
  record("a first segment inside the prefix", seg_final(h0, &b, &r), r);
  /* a member whose later messages name another prefix, or none */
  make_seg(&b, "h0", 2108, 0, 80, TOK, 1, 2001, TOK);
  ck_assert_int_eq(seg_status(h0, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  make_seg(&b, "h0", 2108, 1, 80, 2 * TOK, 1, 2001, 2 * TOK);
  record("a second segment naming another prefix length", seg_final(h0, &b, &r), r);
  make_seg(&b, "h0", 2108, 1, 80, 2 * TOK, 1, 0, 0);
  record("a second segment naming no prefix", seg_final(h0, &b, &r), r);
  make_seg(&b, "h0", 2108, 1, 80, 2 * TOK, 1, 2103, TOK);
  record("a second segment naming another episode", seg_final(h0, &b, &r), r);
  make_end(&e, "h0", 2108, 80, 2, 3 * TOK, 1.0f, 0, 0);
  r = end_status(h0, &e) == LONGHAUL__ACK_STATUS__ACK_RETRY;
  record("an end naming no prefix", end_status(h0, &e), r);
  /* a cycle closed on a stored episode: 2402 is a member of 2401, whose
   * next segment names 2402 */
  make_seg(&b, "h0", 2401, 0, 82, 0, 0, 0, 0);
  ck_assert_int_eq(seg_status(h0, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  make_seg(&b, "h0", 2402, 0, 82, TOK, 1, 2401, TOK);
  ck_assert_int_eq(seg_status(h0, &b), LONGHAUL__ACK_STATUS__ACK_STORED);
  make_seg(&b, "h0", 2401, 1, 82, TOK, 1, 2402, TOK);
  record("a leader's later segment naming its member (a cycle)", seg_final(h0, &b, &r), r);
  /* What waits for a leader that may still come: each first answered
   * retry, all at once, then resent until answered otherwise. A cycle of
   * two episodes naming each other, in both arrival orders (neither is
   * ever stored, so neither's tokens come); a leader that never comes. */
  seg_buf w[5];
  make_seg(&w[0], "h0", 2201, 0, 83, TOK, 1, 2202, TOK);
  make_seg(&w[1], "h0", 2202, 0, 83, TOK, 1, 2201, TOK);
  make_seg(&w[2], "h0", 2302, 0, 84, TOK, 1, 2301, TOK);
  make_seg(&w[3], "h0", 2301, 0, 84, TOK, 1, 2302, TOK);
  make_seg(&w[4], "h0", 2109, 0, 80, TOK, 1, 999999, TOK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(seg_status(h0, &w[i]), LONGHAUL__ACK_STATUS__ACK_RETRY);
  const char *waits[5] = {"a cycle, first arrival (2201 -> 2202)", "a cycle, second arrival (2202 -> 2201)",
                          "a cycle, other order, first (2302 -> 2301)", "a cycle, other order, second (2301 -> 2302)",
                          "a leader that never comes"};
  for (int i = 0; i < 5; i++) {
    int st = seg_final(h0, &w[i], &r);
    record(waits[i], st, r + 1);
  }
  /* Nothing of it stored but the valid leaders and members. */
  int64_t stored = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor IN ('h0', 'h1') AND id NOT IN "
                                 "(1001, 2001, 2103, 2108, 2401, 2402)");
  int64_t segs_2108 = store_sql_int(f.db, "SELECT count(*) FROM segments WHERE episode = 2108");
  int64_t segs_2401 = store_sql_int(f.db, "SELECT count(*) FROM segments WHERE episode = 2401");
  int64_t prefix_2108 = store_sql_int(f.db, "SELECT prefix_episode FROM episodes WHERE id = 2108");
  /* The honest actor and the steps went on. */
  ck_assert_msg(WAIT_FOR(300, store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND prefix_episode "
                                            "IS NOT NULL AND status = 'complete'") >= 6 &&
                                  train_rows(f.db) >= steps_before + 2),
                "no progress after the attacks (see %s)", log);
  int64_t honest = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND status = 'complete'");
  ck_assert_int_eq(lh_proc_poll(f.learner), -1);
  zmq_close(h0);
  zmq_close(h1);
  zmq_ctx_term(ctx);
  stop_all(&f);
  long long held = lh_proc_log_value(log, "held_prefix");
  printf("prefix hostile: %d attacks, %lld hostile episodes stored, 2108 holds %lld segment naming %lld, 2401 %lld; "
         "honest episodes complete=%lld, steps %llu -> %llu; learner held_prefix=%lld, attacks began %.1f s before "
         "the end\n",
         n_attacks, (long long)stored, (long long)segs_2108, (long long)prefix_2108, (long long)segs_2401,
         (long long)honest, (unsigned long long)steps_before, (unsigned long long)train_rows(f.db), held,
         (double)(lh_wall_ms() - attack_ms) / 1000);
  for (int i = 0; i < n_attacks; i++)
    ck_assert_msg(attacks[i].status == LONGHAUL__ACK_STATUS__ACK_REJECTED, "%s: %s", attacks[i].what,
                  status_name(attacks[i].status));
  ck_assert_int_eq(stored, 0);
  ck_assert_int_eq(segs_2108, 1);
  ck_assert_int_eq(prefix_2108, 2001);
  ck_assert_int_eq(segs_2401, 1);
  ck_assert_int_ge(held, 5);
  fleet_free(&f);
}
END_TEST

/* The ingest's table of members waiting for their leader holds 1024
 * entries. A member (2) of a leader (1) not sent yet is answered retry;
 * then a flood of 3000 members of leaders that never come, from the same
 * name, each answered retry too (the back-pressure window is opened wide
 * so that they reach the table). The first member's entry is pushed out
 * of the table by the flood: its next resend is answered retry again (a
 * new entry, a new abort_after_ms: never refused early), then its leader
 * comes and it is stored. The learner's peak memory hardly moves, and the
 * honest actor's episodes are stored during the flood. The bound that
 * holds: a member is answered retry for at least abort_after_ms after its
 * first such answer (an entry pushed out starts again, it never ends
 * early); while more than 1024 members wait at once, one whose leader
 * never comes may be answered retry longer than that. A name reaches the
 * table only with what its back-pressure window lets it open. */
START_TEST(test_prefix_flood) {
  fleet f;
  fleet_init(&f, "prefix-flood", "max_backlog_episodes = 100000\n", NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(WAIT_FOR(300, store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND status = "
                                            "'complete'") >= 4),
                "the honest actor stored nothing (see %s)", alog);
  void *ctx = zmq_ctx_new();
  void *d = lh_peer_dealer(ctx, f.ing, 60000);
  lh_peer_hello(d, "h0");
  seg_buf m;
  make_seg(&m, "h0", 2, 0, 90, TOK, 1, 1, TOK);
  ck_assert_int_eq(seg_status(d, &m), LONGHAUL__ACK_STATUS__ACK_RETRY);
  long before = lh_proc_vmhwm_kb(f.learner);
  int64_t flood_ms = lh_wall_ms();
  int64_t honest_before =
      store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND status = 'complete'");
  enum { FLOOD = 3000, AT_ONCE = 100 };
  int status[AT_ONCE];
  uint64_t retried = 0, other = 0;
  for (uint64_t k = 0; k < FLOOD; k += AT_ONCE) {
    uint64_t first = next_msg;
    for (uint64_t j = 0; j < AT_ONCE; j++) {
      seg_buf b;
      make_seg(&b, "h0", 100000 + k + j, 0, 91 + (k + j) / 4, TOK, 1, 900000 + k + j, TOK);
      send_seg(d, &b);
    }
    lh_peer_acks(d, first, AT_ONCE, status);
    for (int j = 0; j < AT_ONCE; j++) status[j] == LONGHAUL__ACK_STATUS__ACK_RETRY ? retried++ : other++;
  }
  int again = seg_status(d, &m);
  long after = lh_proc_vmhwm_kb(f.learner);
  seg_buf l;
  make_seg(&l, "h0", 1, 0, 90, 0, 0, 0, 0);
  ck_assert_int_eq(seg_status(d, &l), LONGHAUL__ACK_STATUS__ACK_STORED);
  int stored = seg_status(d, &m);
  ck_assert_msg(WAIT_FOR(300, store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'a0' AND status = "
                                            "'complete'") >= honest_before + 4),
                "the honest actor stored nothing after the flood (see %s)", alog);
  int64_t flood_stored = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE id >= 100000 AND id < 200000");
  ck_assert_int_eq(lh_proc_poll(f.learner), -1);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_all(&f);
  printf("prefix hostile: flood of %d members whose leaders never come: %llu answered retry, %llu otherwise, "
         "%lld stored, in %.1f s; the waiting member's resend after it: %s, after its leader: %s; learner peak "
         "%ld kB -> %ld kB\n",
         FLOOD, (unsigned long long)retried, (unsigned long long)other, (long long)flood_stored,
         (double)(lh_wall_ms() - flood_ms) / 1000, status_name(again), status_name(stored), before, after);
  ck_assert_uint_eq(retried, FLOOD);
  ck_assert_int_eq(flood_stored, 0);
  ck_assert_int_eq(again, LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_int_eq(stored, LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_lt(after - before, 64 * 1024);
  fleet_free(&f);
}
END_TEST

/* Members the trainer cannot read whole, written into the store behind
 * the ingest's back (a store an older learner or retention left so): a
 * member whose own segments start past its prefix (a gap), one with no
 * segment of its own that says it ends where its prefix does (it would
 * read as its leader's tokens alone, under its leader's id), and a group
 * whose leader's prefix payload is gone (its members and the leader read
 * short, the leader too). Each is left out as error, with the reason; the rest of their
 * groups and a whole group train, and the learner stops cleanly. */
START_TEST(test_prefix_quarantine) {
  fleet f;
  fleet_init(&f, "prefix-quarantine", NULL, NULL, NULL);
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open(f.db, &s, &e), 0);
  int ins = 0;
  seg_buf b;
  end_buf x;
#define PUT_SEG() ck_assert_msg(lh_store_put_segment(s, &b.s, &ins, &e) == 0 && ins == 1, "%s", e.msg)
#define PUT_END() ck_assert_msg(lh_store_put_episode_end(s, &x.e, &ins, &e) == 0 && ins == 1, "%s", e.msg)
  /* group 60: leader 601, member 602, 603 with a gap, 604 with no own segment */
  for (uint64_t g = 60; g <= 61; g++) {
    uint64_t l = g * 10 + 1;
    make_seg(&b, "a9", l, 0, g, 0, 0, 0, 0), PUT_SEG();
    make_seg(&b, "a9", l, 1, g, TOK, 1, 0, 0), PUT_SEG();
    make_end(&x, "a9", l, g, 2, 2 * TOK, 1.0f, 0, 0), PUT_END();
    for (uint64_t id = l + 1; id <= l + 3; id++) {
      float reward = (float)(id % 2);
      if (g == 60 && id == l + 3) {
        make_end(&x, "a9", id, g, 0, TOK, 1.0f, l, TOK), PUT_END();
        continue;
      }
      uint64_t start = g == 60 && id == l + 2 ? TOK + 4 : TOK;
      make_seg(&b, "a9", id, 0, g, start, 1, l, TOK), PUT_SEG();
      make_end(&x, "a9", id, g, 1, start + TOK, reward, l, TOK), PUT_END();
    }
  }
  /* group 62: whole episodes */
  for (uint64_t id = 621; id <= 624; id++) {
    make_seg(&b, "a9", id, 0, 62, 0, 1, 0, 0), PUT_SEG();
    make_end(&x, "a9", id, 62, 1, TOK, (float)(id % 2), 0, 0), PUT_END();
  }
  lh_store_close(s);
  /* group 61's leader's prefix payload is gone, unmarked (a damaged
   * store: one whose loss retention marks is never offered to the trainer,
   * and keeps its group waiting) */
  sqlite3 *db;
  ck_assert_int_eq(sqlite3_open(f.db, &db), SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM segment_payloads WHERE episode = 611 AND seq = 0", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  start_learner(&f, 0);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  const char *errors = "SELECT count(*) FROM episodes WHERE status = 'error'";
  ck_assert_msg(WAIT_FOR(300, store_sql_int(f.db, errors) >= 6 && train_rows(f.db) >= 1), "see %s", log);
  ck_assert_int_eq(lh_proc_poll(f.learner), -1);
  stop_all(&f);
  int64_t wrong = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE status = 'error' AND id NOT IN "
                                "(603, 604, 611, 612, 613, 614)");
  int64_t left = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE status = 'error' AND id IN "
                               "(603, 604, 611, 612, 613, 614)");
  char why[4][512];
  const uint64_t ids[4] = {603, 604, 611, 612};
  ck_assert_int_eq(lh_store_open_readonly(f.db, &s, &e), 0);
  for (int i = 0; i < 4; i++) {
    lh_episode_row row;
    ck_assert_int_eq(lh_store_episode_get(s, ids[i], &row, &e), 0);
    snprintf(why[i], sizeof why[i], "%s", row.error);
  }
  lh_store_close(s);
  printf("prefix hostile: quarantined %lld of 6 (others %lld): 603 (gap): %s; 604 (no own segment): %s; 611 (leader, "
         "prefix payload gone): %s; 612 (its member): %s\n",
         (long long)left, (long long)wrong, why[0], why[1], why[2], why[3]);
  ck_assert_int_eq(left, 6);
  ck_assert_int_eq(wrong, 0);
  ck_assert_msg(strstr(why[1], "604"), "604's reason does not name it: %s", why[1]);
  fleet_free(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"refs", test_prefix_refs, 0},
      {"flood", test_prefix_flood, 0},
      {"quarantine", test_prefix_quarantine, 0},
  };
  return lh_test_cases_main("prefix_hostile", cases, sizeof cases / sizeof cases[0], 600, argc, argv);
}

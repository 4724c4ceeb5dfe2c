/* The ingest's peers (learner/peers.c): names bound to the connection
 * that said Hello under them (and under CURVE to its key), and the
 * back-pressure credit each name may open episodes with. First the table
 * alone, then a real ingest over real ZeroMQ sockets and a real store,
 * with DEALERs in this process as honest and hostile peers: messages in
 * another's name are refused and never stored, a name is taken back by a
 * new connection, new episodes past a name's window are held back with
 * ACK_RETRY while another name's are stored, and a late segment of an
 * ended episode is stored past it. Last the service, whose windows count
 * the ends the trainer took as untrained until its backlog does. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "learner/internal.h"
#include "proc_util.h"

static const uint8_t CONN_A[] = {0, 1, 2, 3, 4}, CONN_B[] = {0, 1, 2, 3, 5}, CONN_C[] = {0, 1, 2, 3, 6};
#define KEY_A "rq:rI>wJt:>WaSOn%eo#!oGKt7Dy=MAN6&x0bEYa"
#define KEY_B "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"

START_TEST(test_names_bound) {
  lh_learner_peers *p = lh_learner_peers_new();
  ck_assert_ptr_nonnull(p);
  int a = -1, i = -1;
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_A, 5, "a0", NULL, 11, 1, &a), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "a0", 2, &i), LH_PEER_BOUND);
  ck_assert_int_eq(i, a);
  /* Another connection in a0's name: held back while it said no Hello,
   * refused once it said one under another name. */
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "a0", 3, &i), LH_PEER_NO_HELLO);
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_B, 5, "m", NULL, 12, 4, &i), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "a0", 5, &i), LH_PEER_OTHER_NAME);
  /* A second name from one connection, and a name nobody said Hello
   * under, from a bound connection. */
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_B, 5, "eve", NULL, 12, 6, &i), LH_PEER_OTHER_NAME);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "ghost", 7, &i), LH_PEER_OTHER_NAME);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_C, 5, "ghost", 7, &i), LH_PEER_NO_HELLO);
  /* A restarted a0 on a new connection takes its name back; the old
   * connection holds nothing now. */
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_C, 5, "a0", NULL, 13, 8, &i), LH_PEER_BOUND);
  ck_assert_int_eq(i, a);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_C, 5, "a0", 9, &i), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "a0", 9, &i), LH_PEER_NO_HELLO);
  ck_assert_uint_eq(lh_learner_peers_get_counts(p)->rebinds, 1);
  ck_assert_str_eq(lh_learner_peers_name(p, a), "a0");
  ck_assert_int_eq(lh_learner_peers_of_conn(p, CONN_C, 5), a);
  ck_assert_int_eq(lh_learner_peers_of_conn(p, CONN_A, 5), -1);
  lh_learner_peers_free(p);
  lh_learner_peers_free(NULL);
}
END_TEST

/* Under CURVE a name stays with its key: another allowed key cannot take
 * it over, the same key on a new connection can. */
START_TEST(test_names_curve_key) {
  lh_learner_peers *p = lh_learner_peers_new();
  int a = -1, i = -1;
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_A, 5, "a0", KEY_A, 11, 1, &a), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_B, 5, "a0", KEY_B, 12, 2, &i), LH_PEER_OTHER_KEY);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "a0", 3, &i), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_C, 5, "a0", KEY_A, 13, 4, &i), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_C, 5, "a0", 5, &i), LH_PEER_BOUND);
  lh_learner_peers_free(p);
}
END_TEST

/* The table is fixed: a name past it replaces the one heard from least
 * lately, whose open episodes go with it. */
START_TEST(test_names_table_full) {
  lh_learner_peers *p = lh_learner_peers_new();
  lh_learner_peers_set_backlog(p, 1 << 20, 0, 1);
  uint8_t conn[5] = {0};
  char name[32];
  int i = -1;
  for (uint32_t k = 0; k < LH_LEARNER_PEERS_MAX; k++) {
    memcpy(conn + 1, &k, 4);
    snprintf(name, sizeof name, "n%u", k);
    ck_assert_int_eq(lh_learner_peers_hello(p, conn, 5, name, NULL, k, 100 + k, &i), LH_PEER_BOUND);
  }
  /* n0 spoke last of all; n1 is the oldest now */
  ck_assert_int_eq(lh_learner_peers_check(p, (const uint8_t[]){0, 0, 0, 0, 0}, 5, "n0", 1 << 30, &i), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, 1 << 30);
  memcpy(conn + 1, &(uint32_t){1}, 4);
  int n1 = lh_learner_peers_of_conn(p, conn, 5);  /* (no check: that would make n1 heard from) */
  ck_assert_int_ge(n1, 0);
  ck_assert_int_eq(lh_learner_peers_open(p, n1, 77, 1), 1);
  ck_assert_int_eq(lh_learner_peers_is_open(p, n1, 77, 1), 1);
  uint32_t k = LH_LEARNER_PEERS_MAX;
  memcpy(conn + 1, &k, 4);
  ck_assert_int_eq(lh_learner_peers_hello(p, conn, 5, "late", NULL, k, 2000, &i), LH_PEER_BOUND);
  ck_assert_uint_eq(lh_learner_peers_get_counts(p)->evicted, 1);
  memcpy(conn + 1, &(uint32_t){1}, 4);
  ck_assert_int_eq(lh_learner_peers_check(p, conn, 5, "n1", 2001, &i), LH_PEER_NO_HELLO);
  ck_assert_int_eq(lh_learner_peers_is_open(p, n1, 77, 1), 0);
  lh_learner_peers_free(p);
}
END_TEST

/* Two names, a (on CONN_A) and b (CONN_B), under a cap of cap episodes
 * in groups of group, nothing untrained, and the first grants at now_ns. */
static lh_learner_peers *two_names(const char *a, int *ia, const char *b, int *ib, int64_t cap, uint64_t group,
                                   int64_t now_ns) {
  lh_learner_peers *p = lh_learner_peers_new();
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_A, 5, a, NULL, 1, 1, ia), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_B, 5, b, NULL, 2, 1, ib), LH_PEER_BOUND);
  lh_learner_peers_set_backlog(p, cap, 0, group);
  lh_learner_peers_grant(p, 0, now_ns);
  return p;
}

/* Credit: a name opens new episodes with it, one group of slack past it;
 * ends do not give it back (the episodes join the untrained backlog);
 * what the trainer frees goes round the names below their share. */
START_TEST(test_credit) {
  int honest = -1, flood = -1;
  /* cap 16, nothing untrained, groups of 4: a share of 8 each */
  lh_learner_peers *p = two_names("a0", &honest, "flood", &flood, 16, 4, 2);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 8);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 8);
  /* The flood opens what its credit and one group of slack allow. */
  uint64_t opened = 0;
  for (uint64_t e = 1000; e < 1100; e++) opened += lh_learner_peers_open(p, flood, e, 3) == 1;
  ck_assert_uint_eq(opened, 12);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 8);  /* 12 open, 4 owed */
  /* The honest name keeps its window and opens within it. */
  for (uint64_t e = 1; e <= 4; e++) ck_assert_int_eq(lh_learner_peers_open(p, honest, e, 3), 1);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 8);
  /* The flood ends its 12: they join the backlog, nothing is free. */
  for (uint64_t e = 1000; e < 1012; e++) lh_learner_peers_close(p, e);
  lh_learner_peers_grant(p, 12, 4);
  ck_assert_int_eq(lh_learner_peers_open(p, flood, 2000, 5), 0);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 0);
  /* The trainer takes 8 of them: 8 come free; the flood owes 4, and it
   * and the honest name (still at its share) take turns below the share. */
  lh_learner_peers_set_backlog(p, 16, 4, 4);
  lh_learner_peers_grant(p, 0, 6);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 4);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 8);
  /* The cap shrinks to 8: the credit out is taken back, the most held first. */
  lh_learner_peers_set_backlog(p, 8, 4, 4);
  lh_learner_peers_grant(p, 0, 7);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 4);  /* its 4 open, no credit */
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 0);
  ck_assert_uint_gt(lh_learner_peers_get_counts(p)->reclaimed, 0);
  /* Episodes left open past the idle limit no longer count. */
  lh_learner_peers_expire(p, 100);
  ck_assert_int_eq(lh_learner_peers_open_count(p, honest), 0);
  /* A name gone quiet gives its credit back; credit left unused past its
   * lease comes back too, its name sated: told one group of slack, and
   * granted nothing until it opens an episode again. */
  lh_learner_peers_set_backlog(p, 16, 0, 4);
  lh_learner_peers_grant(p, 0, 8);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 8);
  int64_t later = LH_LEARNER_PEER_ACTIVE_NS + 9;
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "a0", later, &honest), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, later);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 0);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 4);
  ck_assert_int_eq(lh_learner_peers_open(p, honest, 5000, later + 1), 1);
  /* Alone now, it may take the whole cap (16: 1 open, 15 credit). */
  lh_learner_peers_grant(p, 0, later + 1);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 16);
  lh_learner_peers_free(p);
}
END_TEST

/* A name that holds credit and opens nothing (a peer that stopped
 * sending, still heard from) does not keep the room a batch needs: with a
 * cap of one batch (16) and a share of 8 each, the other name's 8 ended
 * episodes wait for 8 more, and the idle name's credit comes back after
 * its lease (2 s), so the busy name fills the batch. */
START_TEST(test_credit_idle) {
  int busy = -1, idle = -1;
  lh_learner_peers *p = two_names("busy", &busy, "idle", &idle, 16, 4, 1);
  ck_assert_uint_eq(lh_learner_peers_window(p, busy), 8);
  ck_assert_uint_eq(lh_learner_peers_window(p, idle), 8);
  int64_t t = 2;
  for (uint64_t e = 1; e <= 8; e++) ck_assert_int_eq(lh_learner_peers_open(p, busy, e, t), 1);
  for (uint64_t e = 1; e <= 8; e++) lh_learner_peers_close(p, e);
  lh_learner_peers_set_backlog(p, 16, 8, 4);
  lh_learner_peers_grant(p, 0, t);
  ck_assert_uint_eq(lh_learner_peers_window(p, busy), 0);  /* within the lease: the idle name keeps its 8 */
  t = 3000000000ll;  /* past the lease; both still heard from */
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "busy", t, &busy), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "idle", t, &idle), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, t);
  ck_assert_uint_eq(lh_learner_peers_window(p, busy), 8);
  ck_assert_uint_eq(lh_learner_peers_window(p, idle), 4);  /* sated: its slack */
  for (uint64_t e = 9; e <= 16; e++) ck_assert_int_eq(lh_learner_peers_open(p, busy, e, t), 1);
  printf("peers: idle credit back after its lease: the busy name opened 16 of a cap of 16 (share 8), reclaimed=%llu\n",
         (unsigned long long)lh_learner_peers_get_counts(p)->reclaimed);
  lh_learner_peers_free(p);
}
END_TEST

/* A name that stops mid-group (an actor stopped, its episodes open) holds
 * no room once it is quiet: with a cap of one group (the least a stale
 * share leaves), the other name is granted that group after 10 s, not
 * when the idle limit ends the stopped name's episodes. */
START_TEST(test_credit_quiet_open) {
  int live = -1, stopped = -1;
  lh_learner_peers *p = two_names("live", &live, "stopped", &stopped, 4, 4, 1);
  int who = lh_learner_peers_window(p, live) ? live : stopped;
  if (who == live) {  /* the stopped name must hold the group: live ends its own */
    for (uint64_t e = 1; e <= 4; e++) ck_assert_int_eq(lh_learner_peers_open(p, live, e, 1), 1);
    for (uint64_t e = 1; e <= 4; e++) lh_learner_peers_close(p, e);
    lh_learner_peers_grant(p, 0, 2);
  }
  ck_assert_uint_eq(lh_learner_peers_window(p, stopped), 4);
  for (uint64_t e = 100; e <= 103; e++) ck_assert_int_eq(lh_learner_peers_open(p, stopped, e, 3), 1);
  lh_learner_peers_grant(p, 0, 4);
  ck_assert_uint_eq(lh_learner_peers_window(p, live), 0);
  int64_t t = LH_LEARNER_PEER_ACTIVE_NS + 5;  /* live still heard from, stopped not */
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "live", t, &live), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, t);
  ck_assert_uint_eq(lh_learner_peers_window(p, live), 4);
  ck_assert_int_eq(lh_learner_peers_open_count(p, stopped), 4); /* still open: it may end them */
  /* Woken, its open episodes count again: the cap is over, and no new
   * credit goes out until the backlog drains. */
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "stopped", t + 1, &stopped), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, t + 1);
  ck_assert_uint_eq(lh_learner_peers_window(p, live), 0);
  ck_assert_uint_eq(lh_learner_peers_window(p, stopped), 4);
  lh_learner_peers_free(p);
}
END_TEST

/* A name that ignores its window (more than a group held back within a
 * lease) is served last: what the trainer frees goes to the name that
 * keeps to its window, past its share, and the other gets what is left;
 * two seconds of keeping to it and it is served in turn again. */
START_TEST(test_credit_ignores_window) {
  int honest = -1, flood = -1;
  lh_learner_peers *p = two_names("a0", &honest, "flood", &flood, 16, 4, 2);
  uint64_t e = 1000;
  int opened = 0;
  for (int k = 0; k < 20; k++, e++) {
    if (lh_learner_peers_open(p, flood, e, 3) == 1) opened++;
    else lh_learner_peers_refused(p, flood, 3);
  }
  ck_assert_int_eq(opened, 12);
  for (uint64_t x = 1000; x < 1012; x++) lh_learner_peers_close(p, x);
  /* The trainer took all 12: 12 free; the honest name gets them (8 + 12),
   * the flood nothing. */
  lh_learner_peers_set_backlog(p, 16, 0, 4);
  lh_learner_peers_grant(p, 0, 4);
  ck_assert_uint_eq(lh_learner_peers_window(p, honest), 20);
  ck_assert_uint_eq(lh_learner_peers_window(p, flood), 0);
  /* Past the lease, keeping to its window: served in turn again (the
   * honest name's unused credit is past its lease too, and comes back). */
  int64_t later = 3 + 2100000000ll;
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_A, 5, "a0", later, &honest), LH_PEER_BOUND);
  ck_assert_int_eq(lh_learner_peers_check(p, CONN_B, 5, "flood", later, &flood), LH_PEER_BOUND);
  lh_learner_peers_grant(p, 0, later);
  ck_assert_uint_gt(lh_learner_peers_window(p, flood), 0);
  lh_learner_peers_free(p);
}
END_TEST

/* Open episodes are a hash table with deletion by backward shift: many
 * ids in, every other one out, the rest still found. */
START_TEST(test_open_table) {
  lh_learner_peers *p = lh_learner_peers_new();
  int a = -1;
  ck_assert_int_eq(lh_learner_peers_hello(p, CONN_A, 5, "a0", NULL, 1, 1, &a), LH_PEER_BOUND);
  enum { N = 16384 };
  for (uint64_t e = 0; e < N; e++) ck_assert_int_eq(lh_learner_peers_adopt(p, a, e * 0x9e3779b97f4a7c15ull, 1), 0);
  ck_assert_int_eq(lh_learner_peers_adopt(p, a, 12345, 1), -1);  /* full */
  for (uint64_t e = 0; e < N; e += 2) lh_learner_peers_close(p, e * 0x9e3779b97f4a7c15ull);
  for (uint64_t e = 0; e < N; e++)
    ck_assert_int_eq(lh_learner_peers_is_open(p, a, e * 0x9e3779b97f4a7c15ull, 2), (int)(e % 2));
  ck_assert_int_eq(lh_learner_peers_open_count(p, a), N / 2);
  lh_learner_peers_expire(p, 2);  /* every one left was touched at 2 */
  ck_assert_int_eq(lh_learner_peers_open_count(p, a), N / 2);
  lh_learner_peers_expire(p, 3);
  ck_assert_int_eq(lh_learner_peers_open_count(p, a), 0);
  lh_learner_peers_free(p);
}
END_TEST

/* ---- a real ingest ------------------------------------------------------ */

static char dir[64], db[128], ep[160];

typedef struct {
  Longhaul__Envelope env;
  Longhaul__Segment seg;
  Longhaul__EpisodeEnd end;
  Longhaul__Heartbeat hb;
  Longhaul__Hello hello;
  uint32_t tokens[4], version[4];
  uint8_t mask[4];
  float logp[4];
} msg;

static void envelope(msg *m, uint64_t id, const char *sender) {
  memset(m, 0, sizeof *m);
  longhaul__envelope__init(&m->env);
  m->env.protocol = LH_WIRE_PROTOCOL, m->env.msg_id = id, m->env.sender = (char *)sender;
}

static void hello(msg *m, uint64_t id, const char *name) {
  envelope(m, id, name);
  longhaul__hello__init(&m->hello);
  m->hello.role = "actor", m->hello.name = (char *)name, m->hello.pid = 1;
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, m->env.hello = &m->hello;
}

static void segment(msg *m, uint64_t id, const char *sender, uint64_t episode) {
  envelope(m, id, sender);
  longhaul__segment__init(&m->seg);
  for (int i = 0; i < 4; i++) m->tokens[i] = 'a' + i, m->mask[i] = 1, m->logp[i] = -1.0f;
  m->seg.episode_id = episode, m->seg.actor = (char *)sender, m->seg.env = "calc";
  m->seg.n_tokens = 4, m->seg.tokens = m->tokens;
  m->seg.loss_mask.len = 4, m->seg.loss_mask.data = m->mask;
  m->seg.n_behavior_logp = 4, m->seg.behavior_logp = m->logp;
  m->seg.n_policy_version = 4, m->seg.policy_version = m->version;
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, m->env.segment = &m->seg;
}

static void end(msg *m, uint64_t id, const char *sender, uint64_t episode) {
  envelope(m, id, sender);
  longhaul__episode_end__init(&m->end);
  m->end.episode_id = episode, m->end.actor = (char *)sender, m->end.env = "calc";
  m->end.segment_count = 1, m->end.total_tokens = 4, m->end.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, m->env.episode_end = &m->end;
}

static void heartbeat(msg *m, uint64_t id, const char *sender, uint64_t version) {
  envelope(m, id, sender);
  longhaul__heartbeat__init(&m->hb);
  m->hb.role = "actor", m->hb.policy_version = version;
  m->env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, m->env.heartbeat = &m->hb;
}

static void send_msg(void *d, const msg *m) {
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(&m->env, &buf, &n, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(zmq_send(d, buf, n, 0), (int)n);
  free(buf);
}

typedef struct {
  int status;
  uint32_t window;
  int hold;
  char reason[160];
} ack_of;

/* Acks read so far, by msg id (an Ack names several): the tests' ids are
 * below ACKS. */
#define ACKS 1024
static ack_of acks[ACKS];

static void acks_clear(void) {
  for (size_t i = 0; i < ACKS; i++) acks[i].status = -1;
}

/* Records the Acks that reached d, waiting up to wait_ms for the first. */
static void read_acks(void *d, int wait_ms) {
  zmq_pollitem_t item = {d, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, wait_ms) <= 0) return;
  lh_errbuf e;
  uint8_t buf[65536];
  int got;
  while ((got = zmq_recv(d, buf, sizeof buf, ZMQ_DONTWAIT)) > 0) {
    Longhaul__Envelope *env;
    ck_assert_msg(lh_wire_decode(buf, (size_t)got, NULL, &env, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(env->body_case, LONGHAUL__ENVELOPE__BODY_ACK);
    for (size_t i = 0; i < env->ack->n_msg_ids; i++) {
      uint64_t k = env->ack->msg_ids[i];
      ck_assert_uint_lt(k, ACKS);
      acks[k] = (ack_of){.status = env->ack->status, .window = env->ack->window, .hold = env->ack->hold};
      snprintf(acks[k].reason, sizeof acks[k].reason, "%s", env->ack->reason ? env->ack->reason : "");
    }
    lh_wire_free(env);
  }
}

/* Waits until the Ack of msg id reaches d: the ingest ig polled here, or
 * (ig NULL) a service whose thread polls its own (bounded by turns). */
static ack_of wait_ack(lh_learner_ingest *ig, void *d, uint64_t id) {
  ck_assert_uint_lt(id, ACKS);
  lh_errbuf e;
  for (int turn = 0; turn < (ig ? 5000 : 3000) && acks[id].status < 0; turn++) {
    if (ig) ck_assert_msg(lh_learner_ingest_poll(ig, 2, NULL, &e) == 0, "%s", e.msg);
    read_acks(d, ig ? 0 : 10);
  }
  ck_assert_msg(acks[id].status >= 0, "no ack of message %llu", (unsigned long long)id);
  return acks[id];
}

static int send_and_wait(lh_learner_ingest *ig, void *d, const msg *m) {
  send_msg(d, m);
  return wait_ack(ig, d, m->env.msg_id).status;
}

static void *dealer(void *ctx) {
  void *d = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  ck_assert_int_eq(zmq_connect(d, ep), 0);
  return d;
}

/* A real ingest on a fresh store in a folder of its own, the acks read so
 * far cleared; ingest_close undoes it. */
static lh_learner_ingest *ingest_open(lh_store **store, void **ctx) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "peers"), 0);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  snprintf(ep, sizeof ep, "ipc://%s/ingest", dir);
  lh_errbuf e;
  ck_assert_msg(lh_store_open(db, store, &e) == 0, "%s", e.msg);
  *ctx = zmq_ctx_new();
  lh_learner_ingest *ig = lh_learner_ingest_new(*ctx, ep, *store, NULL, &e);
  ck_assert_msg(ig != NULL, "%s", e.msg);
  acks_clear();
  return ig;
}

static void ingest_close(lh_learner_ingest *ig, lh_store *store, void *ctx) {
  lh_learner_ingest_free(ig);
  lh_store_close(store);
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}

static int first_int(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  *(int64_t *)ctx = ncols > 0 && values[0] ? atoll(values[0]) : -1;
  return 0;
}

/* The first column of sql's first row, from a reader of its own. */
static int64_t sql_int(const char *sql) {
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  int64_t v = -1;
  ck_assert_msg(lh_store_sql(s, sql, first_int, &v, NULL, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  return v;
}

/* Segments, ends and heartbeats in a0's name from other connections are
 * held back (no Hello on the connection) or refused (a Hello under another
 * name), counted, never stored; a0's own are stored; a new connection's
 * Hello as a0 takes the name over. */
START_TEST(test_ingest_names) {
  lh_store *store;
  void *ctx;
  lh_learner_ingest *ig = ingest_open(&store, &ctx);
  void *a0 = dealer(ctx), *spoof = dealer(ctx), *later = dealer(ctx);
  msg m;
  hello(&m, 1, "a0");
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  heartbeat(&m, 2, "a0", 5);
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  /* No Hello on the spoofing connection: held back. */
  int held = 0, refused = 0;
  heartbeat(&m, 10, "a0", 777);
  held += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_RETRY;
  segment(&m, 11, "a0", 9001);
  held += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_RETRY;
  end(&m, 12, "a0", 9001);
  send_msg(spoof, &m);
  ack_of a = wait_ack(ig, spoof, 12);
  held += a.status == LONGHAUL__ACK_STATUS__ACK_RETRY;
  ck_assert_msg(strstr(a.reason, "say Hello"), "%s", a.reason);
  heartbeat(&m, 13, "ghost", 777);  /* a name nobody said Hello under */
  held += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_RETRY;
  /* A Hello under its own name, then a0's name: refused. */
  hello(&m, 20, "mallory");
  ck_assert_int_eq(send_and_wait(ig, spoof, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  heartbeat(&m, 21, "a0", 777);
  refused += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  segment(&m, 22, "a0", 9002);
  refused += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  end(&m, 23, "a0", 9002);
  send_msg(spoof, &m);
  a = wait_ack(ig, spoof, 23);
  refused += a.status == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  ck_assert_msg(strstr(a.reason, "do not resend"), "%s", a.reason);
  heartbeat(&m, 24, "ghost", 777);
  refused += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* A second name from the same connection. */
  hello(&m, 25, "eve");
  refused += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* A Hello whose name is not its sender's. */
  hello(&m, 26, "a0");
  m.env.sender = "mallory";
  refused += send_and_wait(ig, spoof, &m) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  const lh_learner_ingest_counts *c = lh_learner_ingest_get_counts(ig);
  printf("peers: in a0's name from another connection: held back %d of 4 (no Hello), refused %d of 6; counts "
         "held_hello=%llu refused_name=%llu\n", held, refused, (unsigned long long)c->held_hello,
         (unsigned long long)c->refused_name);
  ck_assert_int_eq(held, 4);
  ck_assert_int_eq(refused, 6);
  ck_assert_uint_eq(c->held_hello, 4);
  ck_assert_uint_eq(c->refused_name, 6);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM actor_heartbeats WHERE policy_version = 777"), 0);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM actor_heartbeats WHERE actor = 'ghost'"), 0);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM episodes WHERE id IN (9001, 9002)"), 0);
  /* A new connection of a restarted a0 takes the name back; the old one's
   * messages are held back from then on. */
  hello(&m, 30, "a0");
  m.hello.pid = 2;
  ck_assert_int_eq(send_and_wait(ig, later, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  segment(&m, 31, "a0", 9003);
  ck_assert_int_eq(send_and_wait(ig, later, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  segment(&m, 3, "a0", 9004);
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM episodes WHERE id = 9003"), 1);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM episodes WHERE id = 9004"), 0);
  ck_assert_uint_eq(lh_learner_peers_get_counts(lh_learner_ingest_peers(ig))->rebinds, 1);
  /* Segments queued ahead of a Hello on a new connection (an actor that
   * reconnected) are its own when they arrive in the Hello's round. */
  void *again = dealer(ctx);
  segment(&m, 40, "a0", 9005);
  send_msg(again, &m);
  hello(&m, 41, "a0");
  m.hello.pid = 2;
  send_msg(again, &m);
  ck_assert_int_eq(wait_ack(ig, again, 41).status, LONGHAUL__ACK_STATUS__ACK_STORED);
  int first = wait_ack(ig, again, 40).status;
  ck_assert_msg(first == LONGHAUL__ACK_STATUS__ACK_STORED || first == LONGHAUL__ACK_STATUS__ACK_RETRY, "%d", first);
  printf("peers: a segment queued ahead of its connection's Hello: %s\n",
         first == LONGHAUL__ACK_STATUS__ACK_STORED ? "stored (same round)" : "held back (an earlier round)");
  zmq_close(a0), zmq_close(spoof), zmq_close(later), zmq_close(again);
  ingest_close(ig, store, ctx);
}
END_TEST

/* With a backlog set (cap 16, groups of 4), a peer that ignores its
 * window and opens new episodes without end gets 12 stored (its share of
 * 8 and a group of slack) and the rest held back with ACK_RETRY; the other
 * name keeps its window and its episodes are stored meanwhile. */
START_TEST(test_ingest_window) {
  lh_store *store;
  void *ctx;
  lh_learner_ingest *ig = ingest_open(&store, &ctx);
  void *a0 = dealer(ctx), *flood = dealer(ctx);
  msg m;
  hello(&m, 1, "a0");
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  hello(&m, 2, "flood");
  ck_assert_int_eq(send_and_wait(ig, flood, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  lh_learner_ingest_set_backlog(ig, 16, 0, 4);
  heartbeat(&m, 3, "a0", 0);
  send_msg(a0, &m);
  ack_of a = wait_ack(ig, a0, 3);
  ck_assert_uint_eq(a.window, 8);
  ck_assert_int_eq(a.hold, 0);
  enum { FLOOD = 40 };
  int stored = 0, held = 0;
  for (uint64_t k = 0; k < FLOOD; k++) {
    segment(&m, 100 + k, "flood", 50000 + k);
    send_msg(flood, &m);
  }
  for (uint64_t k = 0; k < FLOOD; k++) {
    a = wait_ack(ig, flood, 100 + k);
    stored += a.status == LONGHAUL__ACK_STATUS__ACK_STORED;
    held += a.status == LONGHAUL__ACK_STATUS__ACK_RETRY;
  }
  /* The honest name: four new episodes, each ended. */
  int honest = 0;
  for (uint64_t k = 0; k < 4; k++) {
    segment(&m, 200 + 2 * k, "a0", 60000 + k);
    honest += send_and_wait(ig, a0, &m) == LONGHAUL__ACK_STATUS__ACK_STORED;
    end(&m, 201 + 2 * k, "a0", 60000 + k);
    honest += send_and_wait(ig, a0, &m) == LONGHAUL__ACK_STATUS__ACK_STORED;
  }
  int64_t flood_rows = sql_int("SELECT count(*) FROM episodes WHERE actor = 'flood'");
  printf("peers: a peer opening %d episodes past its window: stored %d (rows %lld), held back %d (held_window=%llu); "
         "the other name's 8 messages stored %d\n", FLOOD, stored, (long long)flood_rows, held,
         (unsigned long long)lh_learner_ingest_get_counts(ig)->held_window, honest);
  ck_assert_int_eq(stored, 12);
  ck_assert_int_eq(held, FLOOD - 12);
  ck_assert_int_eq(flood_rows, 12);
  ck_assert_int_eq(honest, 8);
  /* Its window says hold now (12 open against a share of 8, 4 owed). */
  heartbeat(&m, 300, "flood", 0);
  send_msg(flood, &m);
  a = wait_ack(ig, flood, 300);
  ck_assert_uint_eq(a.window, 8);
  segment(&m, 301, "flood", 70000);
  send_msg(flood, &m);
  a = wait_ack(ig, flood, 301);
  ck_assert_int_eq(a.status, LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_msg(strstr(a.reason, "window"), "%s", a.reason);
  zmq_close(a0), zmq_close(flood);
  ingest_close(ig, store, ctx);
}
END_TEST

/* A segment of an episode whose EpisodeEnd is stored (the segment was
 * held back while its episode was new, the end got in after a grant) is
 * stored past the name's credit: it opens nothing, and held back it would
 * leave its episode a gap until the trainer freed room. A new episode is
 * still held back. */
START_TEST(test_ingest_late_segment) {
  lh_store *store;
  void *ctx;
  lh_learner_ingest *ig = ingest_open(&store, &ctx);
  void *a0 = dealer(ctx);
  msg m;
  hello(&m, 1, "a0");
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  lh_learner_ingest_set_backlog(ig, 8, 0, 4);
  heartbeat(&m, 2, "a0", 0);
  send_msg(a0, &m);
  ck_assert_uint_eq(wait_ack(ig, a0, 2).window, 8);
  /* The end of episode 500 first (its one segment still to come). */
  end(&m, 3, "a0", 500);
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_STORED);
  /* New episodes until one is held back: credit and slack spent. */
  uint64_t id = 10;
  int status = LONGHAUL__ACK_STATUS__ACK_STORED;
  for (; id < 40 && status == LONGHAUL__ACK_STATUS__ACK_STORED; id++) {
    segment(&m, id, "a0", 600 + id);
    status = send_and_wait(ig, a0, &m);
  }
  ck_assert_int_eq(status, LONGHAUL__ACK_STATUS__ACK_RETRY);
  uint64_t opened = id - 11;
  /* Episode 500's segment now: stored, the episode whole. */
  segment(&m, 50, "a0", 500);
  send_msg(a0, &m);
  ack_of a = wait_ack(ig, a0, 50);
  int64_t received = sql_int("SELECT segments_received FROM episodes WHERE id = 500");
  printf("peers: past its credit (%llu episodes opened), a segment of an ended episode: %s, its episode %lld of 1 "
         "segments\n", (unsigned long long)opened, a.status == LONGHAUL__ACK_STATUS__ACK_STORED ? "stored" : a.reason,
         (long long)received);
  ck_assert_int_eq(a.status, LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(received, 1);
  /* A new episode is still held back. */
  segment(&m, 51, "a0", 700);
  ck_assert_int_eq(send_and_wait(ig, a0, &m), LONGHAUL__ACK_STATUS__ACK_RETRY);
  zmq_close(a0);
  ingest_close(ig, store, ctx);
}
END_TEST

/* The service's back-pressure across the trainer's hand-off: ends the
 * trainer took from the service stay untrained until it sets its backlog
 * again, so a window told meanwhile leaves them out. Counted as free then,
 * that room went out as credit and came back from actors that had opened
 * episodes with it (a step's worth, held back and resent). */
START_TEST(test_service_taken_ends) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "peers"), 0);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  snprintf(cfg.db, sizeof cfg.db, "%s/replay.db", dir);
  snprintf(ep, sizeof ep, "ipc://%s/ingest", dir);
  snprintf(cfg.ingest_endpoint, sizeof cfg.ingest_endpoint, "%s", ep);
  cfg.group_size = 4;
  void *ctx = zmq_ctx_new();
  lh_learner_service_config sc = {.zmq_ctx = ctx, .cfg = &cfg};
  lh_learner_service *svc = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_learner_service_new(&sc, &svc, &e) == 0, "%s", e.msg);
  lh_learner_service_set_backlog(svc, 0, 16);
  ck_assert_msg(lh_learner_service_start(svc, &e) == 0, "%s", e.msg);
  acks_clear();
  void *a0 = dealer(ctx);
  msg m;
  hello(&m, 1, "a0");
  send_msg(a0, &m);
  ck_assert_int_eq(wait_ack(NULL, a0, 1).status, LONGHAUL__ACK_STATUS__ACK_STORED);
  /* Eight episodes, each ended: they are untrained now. */
  for (uint64_t k = 0; k < 8; k++) {
    end(&m, 10 + k, "a0", 800 + k);
    send_msg(a0, &m);
    ck_assert_int_eq(wait_ack(NULL, a0, 10 + k).status, LONGHAUL__ACK_STATUS__ACK_STORED);
  }
  uint64_t ids[64];
  size_t n = 0, got = 0;
  int rescan = 0;
  for (int turn = 0; turn < 200 && got < 8; turn++, got += n)
    lh_learner_service_take(svc, ids + got, 64 - got, &n, &rescan, 50);
  ck_assert_uint_eq(got, 8);
  /* Taken, not yet in the trainer's backlog: still untrained. */
  heartbeat(&m, 30, "a0", 0);
  send_msg(a0, &m);
  uint32_t between = wait_ack(NULL, a0, 30).window;
  lh_learner_service_set_backlog(svc, 8, 16);
  heartbeat(&m, 31, "a0", 0);
  send_msg(a0, &m);
  uint32_t after = wait_ack(NULL, a0, 31).window;
  printf("peers: cap 16, 8 episodes ended: window %u after the trainer took them, %u once its backlog counts them\n",
         between, after);
  ck_assert_uint_eq(between, 8);
  ck_assert_uint_eq(after, 8);
  zmq_close(a0);
  lh_learner_service_free(svc);
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_peers");
  TCase *tc = tcase_create("peers");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_names_bound);
  tcase_add_test(tc, test_names_curve_key);
  tcase_add_test(tc, test_names_table_full);
  tcase_add_test(tc, test_credit);
  tcase_add_test(tc, test_credit_idle);
  tcase_add_test(tc, test_credit_quiet_open);
  tcase_add_test(tc, test_credit_ignores_window);
  tcase_add_test(tc, test_open_table);
  tcase_add_test(tc, test_ingest_names);
  tcase_add_test(tc, test_ingest_window);
  tcase_add_test(tc, test_ingest_late_segment);
  tcase_add_test(tc, test_service_taken_ends);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* Hostile peers against a real `longhaul learner`: messages
 * that are valid on the wire but not what the model can take, poisoned
 * episodes already in the store, peers that flood or never read, a peer
 * that ignores its back-pressure window beside an honest actor process,
 * and messages in another actor's name. A DEALER in this process plays
 * the peer. Each case prints what it counted (and peers past the ingest's
 * cap are refused, then admitted when others leave); memory bounds are
 * checked on the learner's peak resident memory (VmHWM), and progress by
 * waiting for the store, never on time. Run one case: test_hostile CASE. */
#define _GNU_SOURCE
#include "case_main.h"  /* check.h and the suite runner */
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "fleet_fixture.h"
#include "learner/learner.h"
#include "store/store.h"
#include "peer_fixture.h"
#include "proc_util.h"
#include "proto/wire.h"

#define SEG_TOKENS 8

static void *dealer(void *ctx, const char *ep) { return lh_peer_dealer(ctx, ep, 60000); }

/* A segment of SEG_TOKENS sampled tokens at version 0 (every array points
 * into the caller's buffers). */
typedef struct {
  Longhaul__Segment s;
  uint32_t tok[SEG_TOKENS], ver[SEG_TOKENS];
  uint8_t mask[SEG_TOKENS];
  float logp[SEG_TOKENS];
} seg_buf;

static void make_segment(seg_buf *b, uint64_t id, uint32_t seq, uint64_t group, const char *actor) {
  longhaul__segment__init(&b->s);
  for (int i = 0; i < SEG_TOKENS; i++)
    b->tok[i] = (uint32_t)(40 + (id * 7 + (uint64_t)i) % 60), b->ver[i] = 0, b->mask[i] = 1, b->logp[i] = -4.0f;
  b->s.episode_id = id, b->s.seq = seq, b->s.actor = (char *)actor, b->s.env = "calc";
  b->s.start_offset = (uint64_t)seq * SEG_TOKENS, b->s.group_id = group, b->s.task_seed = group;
  b->s.n_tokens = SEG_TOKENS, b->s.tokens = b->tok;
  b->s.loss_mask.len = SEG_TOKENS, b->s.loss_mask.data = b->mask;
  b->s.n_behavior_logp = SEG_TOKENS, b->s.behavior_logp = b->logp;
  b->s.n_policy_version = SEG_TOKENS, b->s.policy_version = b->ver;
}

static int send_segment(void *d, Longhaul__Segment *s, uint64_t msg_id, const char *sender) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = s;
  lh_peer_send(d, &env, msg_id, sender);
  return lh_peer_ack_of(d, msg_id);
}

static int send_end(void *d, uint64_t id, uint64_t group, uint32_t segments, uint64_t tokens, uint64_t msg_id) {
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = id, end.actor = "a0", end.env = "calc", end.segment_count = segments, end.total_tokens = tokens;
  end.reward = (float)(id % 2), end.group_id = group, end.task_seed = group;
  end.outcome = id % 2 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
  lh_peer_send(d, &env, msg_id, "a0");
  return lh_peer_ack_of(d, msg_id);
}

/* One valid episode of one segment, acked STORED. */
static void send_valid_episode(void *d, uint64_t id, uint64_t group) {
  seg_buf b;
  make_segment(&b, id, 0, group, "a0");
  ck_assert_int_eq(send_segment(d, &b.s, id * 100, "a0"), LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(send_end(d, id, group, 1, SEG_TOKENS, id * 100 + 99), LONGHAUL__ACK_STATUS__ACK_STORED);
}

/* An image of w x h RGB pixels at segment offset at. */
static void image(Longhaul__Image *im, uint8_t *pixels, uint32_t w, uint32_t h, uint32_t at) {
  longhaul__image__init(im);
  im->width = w, im->height = h, im->channels = 3, im->offset = at;
  im->pixels.len = (size_t)w * h * 3, im->pixels.data = pixels;
}

/* Wire-valid messages the model cannot take are refused one by one; the
 * learner lives on and trains the valid episodes sent around them. */
START_TEST(test_model_input_refused) {
  fleet f;
  fleet_init(&f, "hostile-model", "routing_replay = 1\nmax_episode_tokens = 1000\n", NULL, NULL);
  start_learner(&f, 0);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, f.ing);
  lh_peer_hello(d, "a0");
  static uint8_t pixels[96 * 96 * 3];
  int refused = 0, cases = 0;
  send_valid_episode(d, 11, 5);
  send_valid_episode(d, 13, 5);
  /* 1: an image of 12 x 12 patches of 8 = 144, over max_patches 64. */
  seg_buf b;
  Longhaul__Image im[2], *imp[2] = {&im[0], &im[1]};
  make_segment(&b, 101, 0, 9, "a0");
  image(&im[0], pixels, 96, 96, 0);
  b.s.n_images = 1, b.s.images = imp;
  cases++, refused += send_segment(d, &b.s, 1001, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 2: two images at one token offset. */
  make_segment(&b, 102, 0, 9, "a0");
  image(&im[0], pixels, 8, 8, 1), image(&im[1], pixels, 8, 8, 1);
  b.s.n_images = 2, b.s.images = imp;
  cases++, refused += send_segment(d, &b.s, 1002, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 3: images out of order. */
  make_segment(&b, 103, 0, 9, "a0");
  image(&im[0], pixels, 8, 8, 5), image(&im[1], pixels, 8, 8, 1);
  b.s.n_images = 2, b.s.images = imp;
  cases++, refused += send_segment(d, &b.s, 1003, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 4: routing to expert 7 of a model with 4 (the wire allows 4096). */
  uint32_t experts[SEG_TOKENS * 2 * 2];
  for (size_t i = 0; i < sizeof experts / sizeof experts[0]; i++) experts[i] = i == 5 ? 7 : (uint32_t)(i % 4);
  make_segment(&b, 104, 0, 9, "a0");
  b.s.routed_layers = 2, b.s.routed_topk = 2, b.s.n_routed_experts = SEG_TOKENS * 4, b.s.routed_experts = experts;
  cases++, refused += send_segment(d, &b.s, 1004, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 5: routing of another shape (3 layers). */
  make_segment(&b, 105, 0, 9, "a0");
  for (size_t i = 0; i < sizeof experts / sizeof experts[0]; i++) experts[i] = 0;
  b.s.routed_layers = 1, b.s.routed_topk = 2, b.s.n_routed_experts = SEG_TOKENS * 2, b.s.routed_experts = experts;
  cases++, refused += send_segment(d, &b.s, 1005, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 6: past max_episode_tokens (1000). */
  make_segment(&b, 106, 125, 9, "a0");
  cases++, refused += send_segment(d, &b.s, 1006, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 7: an end claiming more tokens than max_episode_tokens. */
  cases++, refused += send_end(d, 107, 9, 2, 5000, 1007) == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 8: a segment naming another actor than its sender. */
  make_segment(&b, 108, 0, 9, "a1");
  cases++, refused += send_segment(d, &b.s, 1008, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 9: an image whose sides are not multiples of the patch (8): an actor
   * pads its images, so only a hostile peer sends this one. (An image
   * across a training window is taken: windows are cut around it.) */
  seg_buf big;
  make_segment(&big, 109, 7, 9, "a0");
  image(&im[0], pixels, 12, 8, 3);
  big.s.n_images = 1, big.s.images = imp;
  cases++, refused += send_segment(d, &big.s, 1009, "a0") == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  /* 10: names that would drive a terminal: a Hello (from a connection of
   * its own: d holds a0), and a segment whose actor is its sender; the log
   * shows them escaped. */
  void *evil = dealer(ctx, f.ing);
  Longhaul__Envelope hello = LONGHAUL__ENVELOPE__INIT;
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "evil\n\x1b[2J";
  hello.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, hello.hello = &h;
  lh_peer_send(evil, &hello, 1010, "evil\n\x1b[2J");
  ck_assert_int_eq(lh_peer_ack_of(evil, 1010), LONGHAUL__ACK_STATUS__ACK_STORED);
  zmq_close(evil);
  /* The rest of the valid group: a step follows, and the learner lives. */
  send_valid_episode(d, 15, 5);
  send_valid_episode(d, 17, 5);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(WAIT_FOR(120, train_rows(f.db) >= 1), "no step on the valid episodes (see %s)", log);
  ck_assert_int_eq(lh_proc_poll(f.learner), -1);
  printf("hostile: model input: cases=%d refused=%d learner alive, steps=%llu\n", cases, refused,
         (unsigned long long)train_rows(f.db));
  fflush(stdout);
  ck_assert_int_eq(refused, cases);
  char *text = lh_proc_read_file(log);
  ck_assert_ptr_nonnull(text);
  ck_assert_msg(strchr(text, 0x1b) == NULL, "a raw escape byte reached the learner's log");
  ck_assert_msg(strstr(text, "evil\\x0a\\x1b[2J") != NULL, "the hello's name is not in the log, escaped");
  free(text);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_all(&f);
  fleet_free(&f);
}
END_TEST

/* Episodes the model cannot take, written into the store behind the
 * ingest's back (an older learner, a hand-edited file): each step leaves
 * them out as error, with the reason, and the learner goes on; its resume
 * does too. */
START_TEST(test_stored_poison_quarantined) {
  fleet f;
  fleet_init(&f, "hostile-store", NULL, NULL, NULL);
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open(f.db, &s, &e), 0);
  static uint8_t pixels[96 * 96 * 3];
  Longhaul__Image im, *imp[1] = {&im};
  for (uint64_t id = 21; id <= 24; id++) {
    seg_buf b;
    make_segment(&b, id, 0, 3, "a0");
    if (id == 22) image(&im, pixels, 96, 96, 0), b.s.n_images = 1, b.s.images = imp;  /* 144 patches */
    int inserted = 0;
    ck_assert_int_eq(lh_store_put_segment(s, &b.s, &inserted, &e), 0);
    Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
    end.episode_id = id, end.actor = "a0", end.env = "calc", end.segment_count = 1, end.total_tokens = SEG_TOKENS;
    end.reward = (float)(id % 2), end.group_id = 3, end.task_seed = 3, end.outcome = LONGHAUL__OUTCOME__OUTCOME_FAILURE;
    ck_assert_int_eq(lh_store_put_episode_end(s, &end, &inserted, &e), 0);
  }
  lh_store_close(s);
  start_learner(&f, 0);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(WAIT_FOR(120, train_rows(f.db) >= 1), "no step (see %s)", log);
  stop_all(&f);
  /* its log line comes once per interval; the status line at the stop
   * carries the count */
  ck_assert_msg(lh_proc_file_has(log, "episodes_left_out=1"), "see %s", log);
  lh_episode_row row;
  ck_assert_int_eq(lh_store_open_readonly(f.db, &s, &e), 0);
  ck_assert_int_eq(lh_store_episode_get(s, 22, &row, &e), 0);
  lh_store_close(s);
  ck_assert_int_eq(row.status, LH_EPISODE_ERROR);
  /* The resume starts and stops cleanly over the same store. */
  start_learner(&f, 1);
  char log2[192];
  learner_log(&f, 2, log2, sizeof log2);
  ck_assert_msg(lh_proc_wait_file(log2, "resumed ckpt_dir=", 120), "no resume (see %s)", log2);
  stop_all(&f);
  printf("hostile: poisoned store: episode 22 status=error (%s), learner and its resume exit 0\n", row.error);
  fleet_free(&f);
}
END_TEST

/* Peers that ask for weights and never read: the learner serves each a
 * bounded number of chunks, so its peak memory stays under the bound. */
START_TEST(test_weights_requests_unread) {
  fleet f;
  fleet_init(&f, "hostile-weights", NULL, NULL, NULL);
  /* The demo model: a version of about 9 chunks of 1 MiB. */
  snprintf(f.model_extra, sizeof f.model_extra,
           "d_model = 128\nlayers = 4\nheads = 4\nexperts = 16\nlatent = 64\nexpert_hidden = 128\nchunk = 16\n");
  write_config(&f);
  start_learner(&f, 0);
  char log[192], wep[200];
  learner_log(&f, 1, log, sizeof log);
  snprintf(wep, sizeof wep, "ipc://%s/w", f.dir);
  void *ctx = zmq_ctx_new();
  /* A well-behaved peer learns the current version. */
  void *probe = dealer(ctx, wep);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__WeightsRequest req = LONGHAUL__WEIGHTS_REQUEST__INIT;
  req.version = 999;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST, env.weights_request = &req;
  lh_peer_send(probe, &env, 1, "probe");
  static uint8_t buf[4 << 20];
  int got = zmq_recv(probe, buf, sizeof buf, 0);
  ck_assert_int_gt(got, 0);
  long before = lh_proc_vmhwm_kb(f.learner);
  /* 4 peers, 150 whole-version requests each, never read. */
  void *peers[4];
  req.version = 0, req.first_chunk = 0, req.chunk_count = 0;
  for (int p = 0; p < 4; p++) {
    peers[p] = dealer(ctx, wep);
    for (int k = 0; k < 150; k++) lh_peer_send(peers[p], &env, (uint64_t)(100 + k), "flood");
  }
  /* The probe's next answer comes after the learner went through them. */
  for (int k = 0; k < 3; k++) {
    req.chunk_count = 1;
    lh_peer_send(probe, &env, (uint64_t)(10 + k), "probe");
    ck_assert_int_gt(zmq_recv(probe, buf, sizeof buf, 0), 0);
  }
  long after = lh_proc_vmhwm_kb(f.learner);
  /* Bound: each peer holds at most 32 chunk copies of 1 MiB. */
  long bound_kb = 4 * 32 * 1024 + 64 * 1024;
  printf("hostile: weights flood: peers=4 requests=600 learner peak %ld kB -> %ld kB (growth %ld kB, bound %ld kB)\n",
         before, after, after - before, bound_kb);
  ck_assert_int_lt(after - before, bound_kb);
  ck_assert_int_eq(lh_proc_poll(f.learner), -1);
  for (int p = 0; p < 4; p++) zmq_close(peers[p]);
  zmq_close(probe);
  zmq_ctx_term(ctx);
  stop_all(&f);
  fleet_free(&f);
}
END_TEST

/* Large segments back to back from one peer: what the learner holds for
 * them is bounded by the ingest's round and queue bounds, whatever the
 * peer sends (these are refused: their images are over max_patches, but
 * only after they arrived and decoded). */
START_TEST(test_large_segments_flood) {
  fleet f;
  fleet_init(&f, "hostile-large", NULL, NULL, NULL);
  start_learner(&f, 0);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, f.ing);
  lh_peer_hello(d, "a0");
  send_valid_episode(d, 31, 2);
  long before = lh_proc_vmhwm_kb(f.learner);
  /* 40 segments of 15 MiB: 4 images of 1280 x 1024 each. */
  static uint8_t pixels[1280 * 1024 * 3];
  Longhaul__Image im[4], *imp[4] = {&im[0], &im[1], &im[2], &im[3]};
  for (int i = 0; i < 4; i++) image(&im[i], pixels, 1280, 1024, (uint32_t)i);
  seg_buf b;
  for (int k = 0; k < 40; k++) {
    make_segment(&b, 200 + (uint64_t)k, 0, 4, "a0");
    b.s.n_images = 4, b.s.images = imp;
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &b.s;
    lh_peer_send(d, &env, 5000 + (uint64_t)k, "a0");
  }
  /* Every one answered (refused), however the learner's acks group them. */
  int status[40], refused = 0;
  lh_peer_acks(d, 5000, 40, status);
  for (int k = 0; k < 40; k++) refused += status[k] == LONGHAUL__ACK_STATUS__ACK_REJECTED;
  long after = lh_proc_vmhwm_kb(f.learner);
  long bound_kb = 300 * 1024;
  printf("hostile: large segments: sent=40 x 15 MiB refused=%d learner peak %ld kB -> %ld kB (growth %ld kB, "
         "bound %ld kB)\n", refused, before, after, after - before, bound_kb);
  ck_assert_int_eq(refused, 40);
  ck_assert_int_lt(after - before, bound_kb);
  zmq_close(d);
  zmq_ctx_term(ctx);
  stop_all(&f);
  fleet_free(&f);
}
END_TEST

/* Peers beyond the ingest's cap (ingest_queue_bytes): libzmq queues up to
 * 4 messages per connection, so the learner caps its connections. Two
 * DEALERs take the learner's two places (1 MiB messages, 8 MiB in all);
 * an actor process started then is refused at its handshake, counted on
 * the learner's status line and logged by the actor, and gets in as soon
 * as the two leave: its episodes are stored, nothing lost. */
START_TEST(test_many_peers_capped) {
  fleet f;
  fleet_init(&f, "hostile-peers", "max_message_bytes = 1048576\ningest_queue_bytes = 8388608\n", NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  ck_assert_msg(lh_proc_wait_file(log, "max_peers=2", 60), "no cap (see %s)", log);
  void *ctx = zmq_ctx_new();
  void *hog[2];
  for (int i = 0; i < 2; i++) {
    hog[i] = dealer(ctx, f.ing);
    lh_peer_hello(hog[i], "a0");  /* the second takes a0 over: each sends in turn */
    send_valid_episode(hog[i], 41 + (uint64_t)i, 2);  /* acked: both admitted */
  }
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(lh_proc_wait_file(log, "the socket has its most peers", 120), "no refusal (see %s)", log);
  ck_assert_msg(lh_proc_wait_file(alog, "the learner refused the connection", 120), "actor silent (see %s)", alog);
  uint64_t before = stored_messages(f.db);
  for (int i = 0; i < 2; i++) zmq_close(hog[i]);
  /* the actor's next connection is admitted and its episodes stored */
  ck_assert_msg(WAIT_FOR(300, stored_messages(f.db) >= before + 20), "actor never admitted (see %s)", alog);
  ck_assert_msg(lh_proc_wait_file(log, "peers_refused=", 120), "no status line (see %s)", log);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  print_totals("hostile peers past the cap", &t, &c, "max_peers=2");
  ck_assert_uint_gt(t.acked, 0);
  ck_assert_uint_eq(t.lost, 0);
  ck_assert_uint_eq(t.unacked, 0);
  zmq_ctx_term(ctx);
  fleet_free(&f);
}
END_TEST

/* A store at its cap (max_db_bytes) does not stay full: retention drops
 * the payloads of versions no step can admit any more, and writes go on;
 * nothing acked is lost. */
START_TEST(test_full_store_retention) {
  fleet f;
  /* Needle's long documents: payloads of pages of their own, as real
   * segments are (retention frees whole pages, not bytes inside one). */
  fleet_init(&f, "hostile-full", "max_policy_lag = 1\nmax_db_bytes = 6000000\n",
             "max_context = 6000\nsegment_tokens = 2048\n", "name = needle\ntokens = 2000\n");
  start_learner(&f, 0);
  start_actors(&f, 2);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "retention keep_versions=", 300), "no retention (see %s)", log);
  uint64_t at_retention = stored_messages(f.db);
  /* Writes go on past the point where the store first filled. */
  ck_assert_msg(WAIT_FOR(300, stored_messages(f.db) >= at_retention + 1000), "writes did not resume (see %s)", log);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  lh_store *s = NULL;
  lh_errbuf e;
  lh_store_stats st;
  ck_assert_int_eq(lh_store_open_readonly(f.db, &s, &e), 0);
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  lh_store_close(s);
  char extra[160];
  snprintf(extra, sizeof extra, "cap=6000000 file_bytes=%llu payloads_dropped=%llu", (unsigned long long)st.file_bytes,
           (unsigned long long)st.payloads_dropped);
  print_totals("hostile full store", &t, &c, extra);
  ck_assert_uint_gt(st.payloads_dropped, 0);
  /* gaps: episodes whose payloads retention dropped count as not whole */
  ck_assert_uint_eq(t.lost, 0);
  ck_assert_uint_eq(t.unacked, 0);
  ck_assert_uint_eq(t.stored, t.acked);
  fleet_free(&f);
}
END_TEST

/* A smaller cap, 1 MB, with calc's small segments (128 tokens, a
 * payload of about 1.5 KB), whose payloads sit in the leaf pages of the
 * store. Retention deletes their rows, the pages go to the free list and
 * take new rows; once the rows that describe them (segments, episodes,
 * train steps) fill the cap, it retires old episodes whole and thins
 * the rows of old steps. So writes go on until the store has stored ten
 * times what it held at its first fill, the file stays near the cap, the
 * counts over the whole run (live rows and retired_episodes) hold every
 * acked message, and the file checks whole. Before retirement, the rows
 * kept filled the cap for good (every write answered retry). */
START_TEST(test_full_store_small_payloads) {
  fleet f;
  fleet_init(&f, "hostile-full-small", "max_policy_lag = 1\nmax_db_bytes = 1000000\n", "segment_tokens = 128\n", NULL);
  start_learner(&f, 0);
  start_actors(&f, 2);
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "retention keep_versions=", 300), "no retention (see %s)", log);
  uint64_t at_retention = stored_messages(f.db);
  ck_assert_msg(lh_proc_wait_file(log, "retention retired episodes=", 300), "no retirement (see %s)", log);
  /* Ten times what the store held at its first fill (a bound on the wait
   * only: the condition is the store's) */
  ck_assert_msg(WAIT_FOR(500, stored_messages(f.db) >= 10 * at_retention),
                "writes did not go on past the cap (stored %llu, first fill %llu; see %s)",
                (unsigned long long)stored_messages(f.db), (unsigned long long)at_retention, log);
  stop_all(&f);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  lh_store *s = NULL;
  lh_errbuf e;
  lh_store_stats st;
  ck_assert_int_eq(lh_store_open_readonly(f.db, &s, &e), 0);
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  lh_store_close(s);
  int retentions = lh_proc_count_lines(log, "retention keep_versions=");
  int full = lh_proc_count_lines(log, "still full");
  char extra[384];
  snprintf(extra, sizeof extra, "cap=1000000 file_bytes=%llu segments=%llu payloads_dropped=%llu at_first_retention=%llu "
           "retentions=%d still_full=%d retired_episodes=%llu retired_segments=%llu train_steps=%llu",
           (unsigned long long)st.file_bytes, (unsigned long long)st.segments,
           (unsigned long long)st.payloads_dropped, (unsigned long long)at_retention, retentions, full,
           (unsigned long long)st.retired_episodes, (unsigned long long)st.retired_segments,
           (unsigned long long)st.train_steps);
  print_totals("hostile full store, small payloads", &t, &c, extra);
  ck_assert_uint_gt(st.payloads_dropped, 0);
  ck_assert_uint_gt(st.retired_episodes, 0);
  ck_assert_uint_eq(c.retired, st.retired_episodes);
  /* the statistics and the fixture's count agree over the whole run */
  ck_assert_uint_eq(st.episodes, c.episodes);
  ck_assert_uint_eq(st.segments, c.segments);
  ck_assert_uint_eq(t.lost, 0);
  ck_assert_uint_eq(t.unacked, 0);
  ck_assert_uint_eq(t.stored, t.acked);
  /* the file stays near the cap: freed pages are taken again */
  ck_assert_uint_lt(st.file_bytes, 2 * 1000000);
  uint64_t problems = 99;
  ck_assert_msg(lh_store_check_file(f.db, 0, 0, NULL, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);
  fleet_free(&f);
}
END_TEST

/* ---- peers past their window, and names that are not theirs ------------ */

/* Episodes of actor begun (their first message stored) after wall time
 * after_ms and ended complete or truncated: what the actor started then
 * (one ending then may have started long before). */
static int64_t ended_of(const char *db, const char *actor, int64_t after_ms) {
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM episodes WHERE actor = '%s' AND status IN ('complete', 'truncated') AND created_ms > %lld",
           actor, (long long)after_ms);
  return store_sql_int(db, sql);
}

/* What a flooding peer counted of the acks it read. */
typedef struct {
  uint64_t sent, stored, retried, rejected;
  uint32_t window;
} flood_counts;

/* Reads the acks waiting on d without blocking. */
static void read_acks(void *d, flood_counts *fc) {
  static uint8_t buf[1 << 16];
  int got;
  while ((got = zmq_recv(d, buf, sizeof buf, ZMQ_DONTWAIT)) > 0) {
    Longhaul__Envelope *env;
    lh_errbuf e;
    if (lh_wire_decode(buf, (size_t)got, NULL, &env, &e)) continue;
    if (env->body_case == LONGHAUL__ENVELOPE__BODY_ACK) {
      Longhaul__Ack *a = env->ack;
      if (a->status == LONGHAUL__ACK_STATUS__ACK_STORED) fc->stored += a->n_msg_ids;
      else if (a->status == LONGHAUL__ACK_STATUS__ACK_RETRY) fc->retried += a->n_msg_ids;
      else if (a->status == LONGHAUL__ACK_STATUS__ACK_REJECTED) fc->rejected += a->n_msg_ids;
      fc->window = a->hold ? 0 : a->window;
    }
    lh_wire_free(env);
  }
}

/* Sends one message without blocking for long: while the learner's queue
 * for this peer is full, the acks are read (so that its answers are not
 * dropped) and the send tried again. */
static void flood_send(void *d, Longhaul__Envelope *env, uint64_t msg_id, flood_counts *fc) {
  env->protocol = LH_WIRE_PROTOCOL, env->msg_id = msg_id, env->sender = "flood";
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_msg(lh_wire_encode(env, &buf, &n, &e) == 0, "%s", e.msg);
  while (zmq_send(d, buf, n, ZMQ_DONTWAIT) < 0) {
    ck_assert_int_eq(zmq_errno(), EAGAIN);
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN | ZMQ_POLLOUT, 0};
    zmq_poll(&it, 1, 100);
    read_acks(d, fc);
  }
  free(buf);
  fc->sent++;
  read_acks(d, fc);
}

/* Episode id of the flood: one segment (msg id 2k) and, when whole, its
 * end (2k + 1), in groups of 4 as the learner's group_size asks, so that
 * its episodes train like anyone's. */
static void flood_episode(void *d, uint64_t k, int whole, flood_counts *fc) {
  uint64_t id = 1000000 + k, group = 1000000 + k / 4;
  seg_buf b;
  make_segment(&b, id, 0, group, "flood");
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &b.s;
  flood_send(d, &env, 2 * k, fc);
  if (!whole) return;
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = id, end.actor = "flood", end.env = "calc", end.segment_count = 1, end.total_tokens = SEG_TOKENS;
  end.reward = (float)(k % 2), end.group_id = group, end.task_seed = group;
  end.outcome = k % 2 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
  flood_send(d, &env, 2 * k + 1, fc);
}

/* The cap on untrained and open episodes in these cases (groups of 4). */
#define FLOOD_CAP 16

/* A peer that ignores its window and hold opens new episodes (a segment
 * each, never an end) beside an honest actor process: the learner stores
 * at most its share of the cap and a group of slack (<= FLOOD_CAP + 4 in
 * all), answers the rest ACK_RETRY, and the honest actor's episodes are
 * stored meanwhile. */
START_TEST(test_flood_open) {
  fleet f;
  fleet_init(&f, "hostile-flood-open", "max_backlog_episodes = 16\n", NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(WAIT_FOR(300, ended_of(f.db, "a0", 0) >= 4), "the honest actor stored nothing (see %s)", alog);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, f.ing);
  lh_peer_hello(d, "flood");
  enum { OPEN = 400 };
  flood_counts fc = {0};
  int64_t start_ms = lh_wall_ms();
  for (uint64_t k = 0; k < OPEN; k++) flood_episode(d, k, 0, &fc);
  /* Every segment answered (stored or held back), whatever the acks' grouping. */
  for (int i = 0; i < 20 * 300 && fc.stored + fc.retried + fc.rejected < OPEN; i++) {
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, 50);
    read_acks(d, &fc);
  }
  ck_assert_uint_eq(fc.stored + fc.retried + fc.rejected, OPEN);
  ck_assert_msg(WAIT_FOR(300, ended_of(f.db, "a0", start_ms) >= 8), "the honest actor stored nothing during the flood "
                "(see %s)", alog);
  int64_t rows = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'flood'");
  int64_t honest = ended_of(f.db, "a0", start_ms);
  stop_all(&f);
  long long held = lh_proc_log_value(log, "held_window");
  printf("hostile: flood of open episodes: sent=%llu stored=%llu (rows %lld, bound %d) held back=%llu "
         "(learner held_window=%lld); honest episodes stored meanwhile=%lld\n",
         (unsigned long long)fc.sent, (unsigned long long)fc.stored, (long long)rows, FLOOD_CAP + 4,
         (unsigned long long)fc.retried, held, (long long)honest);
  fflush(stdout);
  ck_assert_int_le(rows, FLOOD_CAP + 4);
  ck_assert_uint_le(fc.stored, FLOOD_CAP + 4);
  ck_assert_uint_ge(fc.retried, OPEN - FLOOD_CAP - 4);
  ck_assert_int_ge(held, (long long)fc.retried);
  zmq_close(d);
  zmq_ctx_term(ctx);
  fleet_free(&f);
}
END_TEST

/* A store with a trigger on insert into segments (and a view that never
 * ends): a real learner refuses it at its open, naming the trigger, and
 * exits 1 before it stores or runs anything of the file's. */
START_TEST(test_crafted_store_refused) {
  fleet f;
  fleet_init(&f, "hostile-crafted", NULL, NULL, NULL);
  lh_store *s = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(f.db, &s, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(f.db, &d), SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(d,
                                "CREATE TRIGGER stamp AFTER INSERT ON segments BEGIN"
                                " UPDATE meta SET value = 'stamped' WHERE key = 'application'; END;"
                                "DROP VIEW segment_metadata; CREATE VIEW segment_metadata AS WITH RECURSIVE r(x) AS"
                                " (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS created_ms, 1 AS sampled,"
                                " 1 AS tokens, 1 AS payload_bytes, 1 AS min_version, 1 AS max_version,"
                                " NULL AS dropped_ms FROM r",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(d);
  start_learner(&f, 0);
  int rc = lh_proc_wait(f.learner, 300, NULL);
  f.learner = 0;
  char log[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(rc == 1, "learner exit %d (see %s)", rc, log);
  ck_assert_msg(lh_proc_file_has(log, "trigger stamp"), "the refusal names no trigger (see %s)", log);
  ck_assert_msg(lh_proc_file_has(log, "replay.db"), "the refusal names no file (see %s)", log);
  printf("hostile: crafted store: learner exit %d\n", rc);
  fleet_free(&f);
}
END_TEST

/* The same peer sending whole episodes of new ids as fast as the learner
 * takes them, ignoring its window: the honest actor's episodes are stored
 * during the flood (before, none were: the flood held the whole backlog),
 * and the flood's new episodes past its credit are held back. Waits for 8
 * honest episodes during the flood, not for a time. */
START_TEST(test_flood_whole) {
  fleet f;
  fleet_init(&f, "hostile-flood", "max_backlog_episodes = 16\n", NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(WAIT_FOR(300, ended_of(f.db, "a0", 0) >= 4), "the honest actor stored nothing (see %s)", alog);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, f.ing);
  lh_peer_hello(d, "flood");
  flood_counts fc = {0};
  int64_t start_ms = lh_wall_ms(), honest = 0;
  /* Bounded by the honest actor's progress; 300 s at most for a learner
   * that lets the flood take everything. */
  uint64_t k = 0;
  for (; lh_wall_ms() - start_ms < 300000; k++) {
    flood_episode(d, k, 1, &fc);
    if (k % 256 == 0 && (honest = ended_of(f.db, "a0", start_ms)) >= 8) break;
  }
  int64_t flood_stored =
      store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE actor = 'flood' AND status = 'complete'");
  stop_all(&f);
  long long held = lh_proc_log_value(log, "held_window");
  printf("hostile: flood of whole episodes: sent=%llu episodes, stored=%lld, messages held back=%llu "
         "(learner held_window=%lld); honest episodes stored during the flood=%lld in %.1f s\n",
         (unsigned long long)k, (long long)flood_stored, (unsigned long long)fc.retried, held, (long long)honest,
         (double)(lh_wall_ms() - start_ms) / 1000);
  fflush(stdout);
  ck_assert_int_ge(honest, 8);
  ck_assert_uint_gt(fc.retried, 0);
  ck_assert_int_gt(held, 0);
  zmq_close(d);
  zmq_ctx_term(ctx);
  fleet_free(&f);
}
END_TEST

/* A peer sends Heartbeats, Segments and EpisodeEnds in a running honest
 * actor's name from its own connection: first without a Hello (held back,
 * ACK_RETRY), then after a Hello under its own name (refused,
 * ACK_REJECTED); none is stored, each is counted. The honest actor trains
 * on; killed and started again, it takes its name back on its new
 * connection and its episodes are stored. */
START_TEST(test_names_spoofed) {
  fleet f;
  fleet_init(&f, "hostile-names", NULL, NULL, NULL);
  start_learner(&f, 0);
  char log[192], alog[192];
  learner_log(&f, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "bound endpoint=", 60), "no ingest (see %s)", log);
  start_actors(&f, 1);
  actor_log(&f, 0, alog, sizeof alog);
  ck_assert_msg(WAIT_FOR(300, ended_of(f.db, "a0", 0) >= 4), "the honest actor stored nothing (see %s)", alog);
  void *ctx = zmq_ctx_new();
  int statuses[2][4];
  for (int round = 0; round < 2; round++) {
    void *d = dealer(ctx, f.ing);
    if (round == 1) lh_peer_hello(d, "mallory");
    uint64_t base = 7000 + 10 * (uint64_t)round;
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
    hb.role = "actor", hb.policy_version = 4242424;  /* no honest heartbeat says this */
    env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
    lh_peer_send(d, &env, base, "a0");
    seg_buf b;
    make_segment(&b, 777000 + (uint64_t)round, 0, 77, "a0");
    env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_SEGMENT, env.segment = &b.s;
    lh_peer_send(d, &env, base + 1, "a0");
    Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
    end.episode_id = 777000 + (uint64_t)round, end.actor = "a0", end.env = "calc", end.segment_count = 1;
    end.total_tokens = SEG_TOKENS, end.group_id = 77, end.task_seed = 77;
    end.outcome = LONGHAUL__OUTCOME__OUTCOME_SUCCESS, end.reward = 1;
    env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END, env.episode_end = &end;
    lh_peer_send(d, &env, base + 2, "a0");
    /* and a heartbeat under a name nobody said Hello under */
    env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
    lh_peer_send(d, &env, base + 3, "ghost");
    lh_peer_acks(d, base, 4, statuses[round]);
    zmq_close(d);
  }
  int64_t spoofed_hb = store_sql_int(f.db, "SELECT count(*) FROM actor_heartbeats WHERE policy_version = 4242424");
  int64_t spoofed_eps = store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE id IN (777000, 777001)");
  int64_t ghost = store_sql_int(f.db, "SELECT count(*) FROM actor_heartbeats WHERE actor = 'ghost'");
  /* The honest actor, killed and started again under its name. Its
   * episodes are counted from once it has the weights: by then the killed
   * one's last messages are stored, and the new one is past its start
   * (a SIGTERM before its handler would end it with 143). */
  lh_proc_kill(f.actors[0]);
  int swapped = lh_proc_count_lines(alog, "weights swapped");
  start_actors(&f, 1);
  ck_assert_msg(WAIT_FOR(300, lh_proc_count_lines(alog, "weights swapped") > swapped),
                "the restarted actor never took the weights (see %s)", alog);
  int64_t restart_ms = lh_wall_ms();
  ck_assert_msg(WAIT_FOR(300, ended_of(f.db, "a0", restart_ms) >= 4), "the restarted actor stored nothing (see %s)",
                alog);
  int taken_over = lh_proc_file_has(log, "name=a0 pid=") && lh_proc_file_has(log, "bound=taken_over");
  stop_all(&f);
  long long held = lh_proc_log_value(log, "held_hello"), refused = lh_proc_log_value(log, "refused_name");
  printf("hostile: names: without a Hello statuses %d %d %d %d, after a Hello as mallory %d %d %d %d "
         "(0 stored, 2 rejected, 3 retry); stored: spoofed heartbeats=%lld episodes=%lld ghost heartbeats=%lld; "
         "learner held_hello=%lld refused_name=%lld; restarted actor took its name back=%d\n",
         statuses[0][0], statuses[0][1], statuses[0][2], statuses[0][3], statuses[1][0], statuses[1][1],
         statuses[1][2], statuses[1][3], (long long)spoofed_hb, (long long)spoofed_eps, (long long)ghost, held,
         refused, taken_over);
  fflush(stdout);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(statuses[0][i], LONGHAUL__ACK_STATUS__ACK_RETRY);
    ck_assert_int_eq(statuses[1][i], LONGHAUL__ACK_STATUS__ACK_REJECTED);
  }
  ck_assert_int_eq(spoofed_hb, 0);
  ck_assert_int_eq(spoofed_eps, 0);
  ck_assert_int_eq(ghost, 0);
  ck_assert_int_ge(held, 4);
  ck_assert_int_ge(refused, 4);
  ck_assert(taken_over);
  zmq_ctx_term(ctx);
  fleet_free(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"model_input", test_model_input_refused, 0},
      {"stored_poison", test_stored_poison_quarantined, 0},
      {"weights_unread", test_weights_requests_unread, 0},
      {"large_segments", test_large_segments_flood, 0},
      {"full_store", test_full_store_retention, 0},
      {"full_store_small", test_full_store_small_payloads, 0},
      {"many_peers", test_many_peers_capped, 0},
      {"crafted_store", test_crafted_store_refused, 0},
      {"flood_open", test_flood_open, 0},
      {"flood_whole", test_flood_whole, 0},
      {"names", test_names_spoofed, 0},
  };
  return lh_test_cases_main("hostile", cases, sizeof cases / sizeof cases[0], 600, argc, argv);
}

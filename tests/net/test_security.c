/* Security: CURVE with a ZAP allow-list on the learner's
 * sockets, over real processes. `longhaul keys generate` writes a key pair
 * with the right modes; a learner with CURVE and an allow-list acks the
 * segments of an actor process whose key is allowed, refuses an actor
 * process whose key is not (nothing of it stored, the refusals counted in
 * the learner's log) and answers nothing to a plain (non-CURVE) client;
 * CURVE keys given by halves, or a secret key file others can read, are
 * config errors. A ZAP handler caps a socket's connections (the ingest's
 * bound in all). Plugins load only from allowed paths. An env server (C
 * or Python) given a key file that is not a regular file names it and
 * exits 2 before it listens. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "envs/env.h"
#include "learner/learner.h"
#include "net/zsock.h"
#include "proto/wire.h"
#include "store/store.h"
#include "peer_fixture.h"
#include "proc_util.h"

static char dir[64];

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static void gen_key(const char *name) {
  char log[128], kdir[96];
  path_of(log, sizeof log, "keys.log");
  path_of(kdir, sizeof kdir, "keys");
  const char *args[] = {"keys", "generate", "--out", kdir, "--name", name, NULL};
  pid_t p = lh_proc_spawn_longhaul(log, args);
  ck_assert_int_gt(p, 0);
  ck_assert_int_eq(lh_proc_wait(p, 30, NULL), 0);
}

/* The whole run config; actor_key names the [actor] secret key ("" for
 * none), extra goes at the end of [learner]. */
static void write_config(const char *file, const char *actor_key, const char *learner_extra) {
  char path[128], text[4096];
  path_of(path, sizeof path, file);
  snprintf(text, sizeof text,
           "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
           "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
           "[learner]\nbatch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 50\n"
           "warmup_steps = 0\ntotal_steps = 1000\nmax_policy_lag = 100\n"
           "ingest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\nweights_endpoint = ipc://%s/w\n"
           "db = %s/replay.db\nckpt_dir = %s/ckpt\n%s"
           "[actor]\nlearner_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\n"
           "weights_endpoint = ipc://%s/w\nmax_context = 200\ngroup_size = 4\nbatch = 4\nflush_timeout_ms = 2000\n"
           "%s%s%s%s%s"
           "[env]\nname = calc\n",
           dir, dir, dir, dir, dir, learner_extra, dir, dir, dir, *actor_key ? "curve_secret_key_file = " : "",
           *actor_key ? dir : "", *actor_key ? "/keys/" : "", actor_key,
           *actor_key ? ".key\ncurve_server_key_file = KEYDIR/learner.pub\n" : "");
  /* KEYDIR is this run's keys folder. */
  char out[4096], *o = out;
  for (const char *s = text; *s;)
    if (!strncmp(s, "KEYDIR", 6)) o += sprintf(o, "%s/keys", dir), s += 6;
    else *o++ = *s++;
  *o = 0;
  ck_assert_int_eq(lh_proc_write_file(path, out), 0);
}

static const char *curve_learner(void) {
  static char buf[512];
  snprintf(buf, sizeof buf, "curve_secret_key_file = %s/keys/learner.key\ncurve_allowed_keys = %s/allowed\n", dir,
           dir);
  return buf;
}

START_TEST(test_keys_generate) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("n1");
  char kpath[128], ppath[128];
  path_of(kpath, sizeof kpath, "keys/n1.key");
  path_of(ppath, sizeof ppath, "keys/n1.pub");
  struct stat ks, ps;
  ck_assert_int_eq(stat(kpath, &ks), 0);
  ck_assert_int_eq(stat(ppath, &ps), 0);
  printf("keys: n1.key mode %03o, n1.pub mode %03o\n", (unsigned)(ks.st_mode & 0777), (unsigned)(ps.st_mode & 0777));
  ck_assert_uint_eq(ks.st_mode & 0777, 0600);
  ck_assert_uint_eq(ps.st_mode & 0777, 0644);
  ck_assert_int_eq((int)ks.st_size, LH_ZSOCK_KEY_CHARS + 1);
  ck_assert_int_eq((int)ps.st_size, LH_ZSOCK_KEY_CHARS + 1);
  char sec[41], pub[41], derived[41];
  lh_errbuf e;
  ck_assert_msg(lh_zsock_key_read(kpath, 1, sec, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_zsock_key_read(ppath, 0, pub, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(zmq_curve_public(derived, sec), 0);
  ck_assert_str_eq(derived, pub);
  /* Never overwritten. */
  char log[128];
  path_of(log, sizeof log, "keys.log");
  const char *again[] = {"keys", "generate", "--out", dir, "--name", "keys/n1", NULL};
  pid_t p = lh_proc_spawn_longhaul(log, again);
  ck_assert_int_eq(lh_proc_wait(p, 30, NULL), 2);
  char kdir[96];
  path_of(kdir, sizeof kdir, "keys");
  const char *same[] = {"keys", "generate", "--out", kdir, "--name", "n1", NULL};
  p = lh_proc_spawn_longhaul(log, same);
  ck_assert_int_eq(lh_proc_wait(p, 30, NULL), 1);
  ck_assert(lh_proc_file_has(log, "File exists"));
  ck_assert_int_eq(lh_zsock_key_read(kpath, 1, derived, &e), 0);
  ck_assert_str_eq(derived, sec);
  /* A secret others can read is refused; a public key file is not a
   * secret. A file that is not a key says so. */
  ck_assert_int_eq(chmod(kpath, 0644), 0);
  ck_assert_int_eq(lh_zsock_key_read(kpath, 1, derived, &e), LH_ECONFIG);
  printf("keys: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "chmod 600"));
  ck_assert_int_eq(lh_proc_write_file(ppath, "not a key\n"), 0);
  ck_assert_int_eq(lh_zsock_key_read(ppath, 0, derived, &e), LH_ECONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "Z85"));
  lh_proc_rmdir(dir);
}
END_TEST

/* The allow-list: a file of keys or a folder of .pub files; a bad line is
 * an error naming it; an empty list is refused (it would admit nobody). */
START_TEST(test_allow_list) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("a");
  gen_key("b");
  char list[128], apub[128], bpub[128], text[256];
  path_of(list, sizeof list, "list.txt");
  path_of(apub, sizeof apub, "keys/a.pub");
  path_of(bpub, sizeof bpub, "keys/b.pub");
  char *a = lh_proc_read_file(apub), *b = lh_proc_read_file(bpub);
  snprintf(text, sizeof text, "%s\n%s", a, b);
  ck_assert_int_eq(lh_proc_write_file(list, text), 0);
  void *ctx = zmq_ctx_new();
  lh_zsock_zap *z = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_zsock_zap_start(ctx, list, &z, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(lh_zsock_zap_keys(z), 2);
  lh_zsock_zap *twice = NULL;
  ck_assert_int_eq(lh_zsock_zap_start(ctx, list, &twice, &e), LH_EZMQ);
  lh_zsock_zap_stop(z);
  char kdir[96];
  path_of(kdir, sizeof kdir, "keys");
  ck_assert_msg(lh_zsock_zap_start(ctx, kdir, &z, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(lh_zsock_zap_keys(z), 2);
  lh_zsock_zap_stop(z);
  snprintf(text, sizeof text, "%sshort\n", a); /* a ends with its newline */
  ck_assert_int_eq(lh_proc_write_file(list, text), 0);
  ck_assert_int_eq(lh_zsock_zap_start(ctx, list, &z, &e), LH_ECONFIG);
  printf("allow-list: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, ":2:"));
  ck_assert_int_eq(lh_proc_write_file(list, "\n\n"), 0);
  ck_assert_int_eq(lh_zsock_zap_start(ctx, list, &z, &e), LH_ECONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "no key"));
  zmq_ctx_term(ctx);
  free(a);
  free(b);
  lh_proc_rmdir(dir);
}
END_TEST

typedef struct {
  int ok_ended, bad_any;
} ep_counts;

static int on_episode(void *ctx, const lh_episode_row *r) {
  ep_counts *c = ctx;
  if (!strcmp(r->actor, "ok") && r->status != LH_EPISODE_RUNNING) c->ok_ended++;
  if (!strcmp(r->actor, "bad")) c->bad_any++;
  return 0;
}

/* A plain DEALER sends a Hello to the CURVE ingest: no answer comes. */
static int plain_client_answers(void) {
  void *ctx = zmq_ctx_new();
  void *s = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  char ep[128];
  snprintf(ep, sizeof ep, "ipc://%s/ing", dir);
  ck_assert_int_eq(zmq_connect(s, ep), 0);
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor";
  h.name = "plain";
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.msg_id = 1;
  env.sender = "plain";
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  uint8_t *buf;
  size_t n;
  lh_errbuf e;
  ck_assert_int_eq(lh_wire_encode(&env, &buf, &n, &e), 0);
  zmq_send(s, buf, n, ZMQ_DONTWAIT);
  free(buf);
  zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
  int got = zmq_poll(&it, 1, 2000);
  zmq_close(s);
  zmq_ctx_term(ctx);
  return got;
}

/* A ZAP handler without an allow-list caps one plain ROUTER at 2
 * connections: two DEALERs are served, a third is refused at its
 * handshake (counted) and its message never reaches the ROUTER; once one
 * of the two leaves, its next connection is admitted and its message
 * arrives. Six connecting at once: at most two are admitted. */
static int wait_open_peers(const lh_zsock_zap *z, int want) {
  for (int i = 0; i < 3000; i++) {
    if (lh_zsock_zap_open_peers(z) == want) return 1;
    usleep(10000);
  }
  return 0;
}

/* Connects a DEALER that may be refused, never to connect again by
 * itself: libzmq connects a refused DEALER again when the connection
 * closed before it read the refusal (on a loaded machine), and such a
 * connection, admitted once a place frees, threw the counts off. */
static void connect_by_hand(void *dealer, const char *ep) {
  int never = -1;
  ck_assert_int_eq(zmq_setsockopt(dealer, ZMQ_RECONNECT_IVL, &never, sizeof never), 0);
  ck_assert_int_eq(zmq_connect(dealer, ep), 0);
}

/* A refusal that comes before the send ends the pipe the message would
 * queue on: the send must not wait for another. */
static void send_unless_refused(void *dealer, const char *text) {
  int sent = zmq_send(dealer, text, strlen(text), ZMQ_DONTWAIT);
  ck_assert(sent == (int)strlen(text) || (sent < 0 && zmq_errno() == EAGAIN));
}

START_TEST(test_peer_cap) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "cap"), 0);
  void *ctx = zmq_ctx_new();
  lh_zsock_zap *z = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_zsock_zap_start(ctx, NULL, &z, &e) == 0, "%s", e.msg);
  lh_zsock_opts ro = {.linger_ms = LH_ZSOCK_LINGER_NONE, .zap_domain = "longhaul.test"};
  void *r = lh_zsock_open(ctx, ZMQ_ROUTER, &ro, "capped ROUTER", &e);
  ck_assert_ptr_nonnull(r);
  /* the default domain and a second cap are refused */
  ck_assert_int_eq(lh_zsock_zap_cap_peers(z, r, LH_ZSOCK_ZAP_DOMAIN, 2, "capped ROUTER", &e), LH_EINVAL);
  ck_assert_msg(lh_zsock_zap_cap_peers(z, r, "longhaul.test", 2, "capped ROUTER", &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_zsock_zap_cap_peers(z, r, "longhaul.other", 2, "capped ROUTER", &e), LH_EINVAL);
  char ep[128];
  snprintf(ep, sizeof ep, "ipc://%s/capped", dir);
  ck_assert_int_eq(lh_zsock_bind(r, ep, NULL, NULL, 0, "capped ROUTER", &e), 0);
  int timeout = 30000;
  ck_assert_int_eq(zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof timeout), 0);
  lh_zsock_opts dopt = {.linger_ms = LH_ZSOCK_LINGER_NONE};
  void *d[3];
  char buf[32];
  for (int i = 0; i < 3; i++) {
    d[i] = lh_zsock_open(ctx, ZMQ_DEALER, &dopt, "DEALER", &e);
    ck_assert_ptr_nonnull(d[i]);
  }
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(zmq_connect(d[i], ep), 0);
    snprintf(buf, sizeof buf, "from %d", i);
    ck_assert_int_eq(zmq_send(d[i], buf, strlen(buf), 0), (int)strlen(buf));
    zmq_msg_t f[2];
    int n = 0;
    ck_assert_int_eq(lh_zsock_recv_frames(r, f, 2, 0, &n), 1);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(memcmp(zmq_msg_data(&f[1]), buf, strlen(buf)), 0);
    lh_zsock_frames_close(f, n);
  }
  ck_assert(wait_open_peers(z, 2));
  ck_assert_uint_eq(lh_zsock_zap_refused(z), 0);
  connect_by_hand(d[2], ep);
  send_unless_refused(d[2], "from 2");
  for (int i = 0; i < 3000 && lh_zsock_zap_refused(z) < 1; i++) usleep(10000);
  ck_assert_uint_eq(lh_zsock_zap_refused(z), 1);
  ck_assert(wait_open_peers(z, 2)); /* the refused connection is closed */
  zmq_pollitem_t item = {r, 0, ZMQ_POLLIN, 0};
  ck_assert_int_eq(zmq_poll(&item, 1, 0), 0);
  /* one leaves; the third connects again, as an actor does after a
   * refusal (libzmq ends a refused connection for good), and is admitted */
  zmq_close(d[0]);
  ck_assert(wait_open_peers(z, 1));
  zmq_disconnect(d[2], ep);
  ck_assert_int_eq(zmq_connect(d[2], ep), 0);
  ck_assert_int_eq(zmq_send(d[2], "again", 5, 0), 5);
  zmq_msg_t f[2];
  int n = 0;
  ck_assert_int_eq(lh_zsock_recv_frames(r, f, 2, 0, &n), 1);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(zmq_msg_size(&f[1]), 5);
  ck_assert_int_eq(memcmp(zmq_msg_data(&f[1]), "again", 5), 0);
  lh_zsock_frames_close(f, n);
  ck_assert_uint_eq(lh_zsock_zap_refused(z), 1);
  ck_assert(wait_open_peers(z, 2));
  zmq_close(d[1]);
  zmq_close(d[2]);
  ck_assert(wait_open_peers(z, 0));
  /* six at once: each ends refused or delivers its message, and at most
   * two deliver (connections in their handshake count too, so a burst may
   * be refused whole) */
  void *burst[6];
  uint64_t refused_before = lh_zsock_zap_refused(z);
  for (int i = 0; i < 6; i++) {
    burst[i] = lh_zsock_open(ctx, ZMQ_DEALER, &dopt, "DEALER", &e);
    connect_by_hand(burst[i], ep);
    send_unless_refused(burst[i], "burst");
  }
  int delivered = 0;
  timeout = 10;
  ck_assert_int_eq(zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof timeout), 0);
  for (int i = 0; i < 6000 && delivered + (int)(lh_zsock_zap_refused(z) - refused_before) < 6; i++) {
    if (lh_zsock_recv_frames(r, f, 2, 0, &n) == 1) {
      delivered++;
      lh_zsock_frames_close(f, n);
    }
  }
  printf("peer cap: a burst of 6, %d delivered, %llu refused\n", delivered,
         (unsigned long long)(lh_zsock_zap_refused(z) - refused_before));
  ck_assert_int_eq(delivered + (int)(lh_zsock_zap_refused(z) - refused_before), 6);
  ck_assert_int_le(delivered, 2);
  ck_assert(wait_open_peers(z, delivered));
  ck_assert_uint_eq(lh_zsock_zap_cap_refused(z), lh_zsock_zap_refused(z)); /* no allow-list here */
  for (int i = 0; i < 6; i++) zmq_close(burst[i]);
  zmq_close(r);
  lh_zsock_zap_stop(z);
  zmq_ctx_term(ctx);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_curve_allow_list_processes) {
  ck_assert(zmq_has("curve"));
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("learner");
  gen_key("ok");
  gen_key("bad");
  char allowed[96], from[128], to[128];
  path_of(allowed, sizeof allowed, "allowed");
  ck_assert_int_eq(mkdir(allowed, 0700), 0);
  path_of(from, sizeof from, "keys/ok.pub");
  path_of(to, sizeof to, "allowed/ok.pub");
  char *okpub = lh_proc_read_file(from);
  ck_assert_int_eq(lh_proc_write_file(to, okpub), 0);
  free(okpub);
  write_config("ok.ini", "ok", curve_learner());
  write_config("bad.ini", "bad", curve_learner());
  char okini[128], badini[128], llog[128], oklog[128], badlog[128];
  path_of(okini, sizeof okini, "ok.ini");
  path_of(badini, sizeof badini, "bad.ini");
  path_of(llog, sizeof llog, "learner.log");
  path_of(oklog, sizeof oklog, "ok.log");
  path_of(badlog, sizeof badlog, "bad.log");
  const char *largs[] = {"learner", "--config", okini, "--steps", "1000", NULL};
  pid_t lp = lh_proc_spawn_longhaul(llog, largs);
  ck_assert_msg(lh_proc_wait_file(llog, "curve=on", 60), "the learner did not bind (see %s)", llog);
  const char *oargs[] = {"actor", "--config", okini, "--name", "ok", "--episodes", "4", NULL};
  const char *bargs[] = {"actor", "--config", badini, "--name", "bad", "--episodes", "1", NULL};
  pid_t op = lh_proc_spawn_longhaul(oklog, oargs), bp = lh_proc_spawn_longhaul(badlog, bargs);
  int plain = plain_client_answers();
  int orc = lh_proc_wait(op, 120, NULL);
  ck_assert_msg(orc == 0, "allowed actor exit %d (see %s)", orc, oklog);
  long long acked = lh_proc_log_value(oklog, "acked"), unacked = lh_proc_log_value(oklog, "unacked");
  /* The refused actor never gets weights; asked to stop, it exits. */
  ck_assert_msg(lh_proc_wait_file(llog, "zap: peer refused", 30), "no refusal in %s", llog);
  kill(bp, SIGTERM);
  int brc = lh_proc_wait(bp, 10, NULL);
  kill(lp, SIGTERM);
  int lrc = lh_proc_wait(lp, 10, NULL);
  long long refused = lh_proc_log_value(llog, "refused"), accepted = lh_proc_log_value(llog, "accepted");
  printf("curve: allowed actor acked=%lld unacked=%lld; refused actor exit=%d; plain client answers=%d; "
         "learner zap accepted=%lld refused=%lld exit=%d\n", acked, unacked, brc, plain, accepted, refused, lrc);
  ck_assert_int_gt(acked, 0);
  ck_assert_int_eq(unacked, 0);
  ck_assert_int_eq(plain, 0);
  ck_assert_msg(brc >= 0, "the refused actor did not stop within 10 s of SIGTERM");
  ck_assert_msg(lrc == 0, "learner exit %d (see %s)", lrc, llog);
  ck_assert_int_ge(accepted, 3);
  ck_assert_int_ge(refused, 1);
  ck_assert(lh_proc_file_has(llog, "public key not in the allow-list"));
  lh_store *s;
  lh_errbuf e;
  char db[128];
  path_of(db, sizeof db, "replay.db");
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  ep_counts c = {0};
  ck_assert_int_eq(lh_store_episodes(s, NULL, on_episode, &c, NULL, &e), 0);
  lh_store_close(s);
  printf("curve: stored episodes ok=%d bad=%d\n", c.ok_ended, c.bad_any);
  ck_assert_int_ge(c.ok_ended, 4);
  ck_assert_int_eq(c.bad_any, 0);
  lh_proc_rmdir(dir);
}
END_TEST

static int ok_episodes(void) {
  lh_store *s;
  lh_errbuf e;
  char db[128];
  path_of(db, sizeof db, "replay.db");
  if (lh_store_open_readonly(db, &s, &e)) return 0;
  ep_counts c = {0};
  lh_store_episodes(s, NULL, on_episode, &c, NULL, &e);
  lh_store_close(s);
  return c.ok_ended;
}

static int first_int(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  *(long long *)ctx = ncols > 0 && values[0] ? atoll(values[0]) : -1;
  return 0;
}

/* Under CURVE a name is bound to the key that said Hello under it: a peer
 * holding another allowed key can neither take an actor's name with a
 * Hello nor send in it; the actor, killed and started again with its own
 * key, takes its name back on its new connection. */
START_TEST(test_curve_names) {
  ck_assert(zmq_has("curve"));
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("learner");
  gen_key("ok");
  gen_key("other");
  char allowed[96];
  path_of(allowed, sizeof allowed, "allowed");
  ck_assert_int_eq(mkdir(allowed, 0700), 0);
  const char *names[] = {"ok", "other"};
  for (int i = 0; i < 2; i++) {
    char from[128], to[128];
    snprintf(from, sizeof from, "%s/keys/%s.pub", dir, names[i]);
    snprintf(to, sizeof to, "%s/allowed/%s.pub", dir, names[i]);
    char *pub = lh_proc_read_file(from);
    ck_assert_int_eq(lh_proc_write_file(to, pub), 0);
    free(pub);
  }
  write_config("ok.ini", "ok", curve_learner());
  char okini[128], llog[128], oklog[128];
  path_of(okini, sizeof okini, "ok.ini");
  path_of(llog, sizeof llog, "learner.log");
  path_of(oklog, sizeof oklog, "ok.log");
  const char *largs[] = {"learner", "--config", okini, "--steps", "100000", NULL};
  pid_t lp = lh_proc_spawn_longhaul(llog, largs);
  ck_assert_msg(lh_proc_wait_file(llog, "curve=on", 60), "the learner did not bind (see %s)", llog);
  const char *oargs[] = {"actor", "--config", okini, "--name", "ok", NULL};
  pid_t op = lh_proc_spawn_longhaul(oklog, oargs);
  ck_assert_int_gt(op, 0);
  int i;
  for (i = 0; i < 1200 && ok_episodes() < 2; i++) lh_proc_sleep_ms(100);
  ck_assert_msg(ok_episodes() >= 2, "the allowed actor stored nothing (see %s)", oklog);
  /* A CURVE DEALER holding the other allowed key. */
  char key_path[128], pub_path[128];
  path_of(key_path, sizeof key_path, "keys/other.key");
  path_of(pub_path, sizeof pub_path, "keys/learner.pub");
  lh_zsock_curve cv;
  memset(&cv, 0, sizeof cv);
  lh_errbuf e;
  ck_assert_int_eq(lh_zsock_key_read(key_path, 1, cv.secret, &e), 0);
  ck_assert_int_eq(lh_zsock_key_read(pub_path, 0, cv.server_key, &e), 0);
  void *ctx = zmq_ctx_new();
  lh_zsock_opts so = {.linger_ms = LH_ZSOCK_LINGER_NONE, .curve = &cv};
  void *d = lh_zsock_open(ctx, ZMQ_DEALER, &so, "test dealer", &e);
  ck_assert_msg(d != NULL, "%s", e.msg);
  int timeout = 30000;
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  char ep[128];
  snprintf(ep, sizeof ep, "ipc://%s/ing", dir);
  ck_assert_int_eq(zmq_connect(d, ep), 0);
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "ok";
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  lh_peer_send(d, &env, 1, "ok");
  int hello_as_ok = lh_peer_ack_of(d, 1);
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  hb.role = "actor", hb.policy_version = 4242424;
  env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
  lh_peer_send(d, &env, 2, "ok");
  int hb_unbound = lh_peer_ack_of(d, 2);
  h.name = "other";
  env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  lh_peer_send(d, &env, 3, "other");
  int hello_as_other = lh_peer_ack_of(d, 3);
  env = (Longhaul__Envelope)LONGHAUL__ENVELOPE__INIT;
  env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
  lh_peer_send(d, &env, 4, "ok");
  int hb_bound_other = lh_peer_ack_of(d, 4);
  zmq_close(d);
  zmq_ctx_term(ctx);
  /* The actor killed and started again with its key: its name back, and
   * episodes it began stored (the killed one's open episodes are swept as
   * aborted a minute on, so they are not counted). */
  kill(op, SIGKILL);
  lh_proc_wait(op, 30, NULL);
  int64_t restart_ms = lh_wall_ms();
  op = lh_proc_spawn_longhaul(oklog, oargs);
  ck_assert_int_gt(op, 0);
  int taken_over = lh_proc_wait_file(llog, "bound=taken_over", 120);
  char fresh_sql[200];
  snprintf(fresh_sql, sizeof fresh_sql,
           "SELECT count(*) FROM episodes WHERE actor = 'ok' AND status IN ('complete', 'truncated') AND "
           "created_ms > %lld", (long long)restart_ms);
  long long fresh = 0;
  for (i = 0; i < 1200 && taken_over && fresh < 2; i++) {
    lh_store *rs;
    char rdb[128];
    path_of(rdb, sizeof rdb, "replay.db");
    if (lh_store_open_readonly(rdb, &rs, &e) == 0) {
      lh_store_sql(rs, fresh_sql, first_int, &fresh, NULL, &e);
      lh_store_close(rs);
    }
    if (fresh < 2) lh_proc_sleep_ms(100);
  }
  kill(op, SIGTERM);
  int orc = lh_proc_wait(op, 60, NULL);
  kill(lp, SIGTERM);
  int lrc = lh_proc_wait(lp, 60, NULL);
  char db[128];
  path_of(db, sizeof db, "replay.db");
  lh_store *s;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  long long spoofed = -1;
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM actor_heartbeats WHERE policy_version = 4242424", first_int,
                                &spoofed, NULL, &e), 0);
  lh_store_close(s);
  printf("curve names: another allowed key: Hello as ok %d (2 rejected), heartbeat as ok %d (3 retry), Hello as "
         "itself %d (0 stored), then heartbeat as ok %d; stored spoofed heartbeats=%lld; restarted actor took its "
         "name back=%d and stored %lld episodes it began; exits actor=%d learner=%d\n",
         hello_as_ok, hb_unbound, hello_as_other, hb_bound_other, spoofed, taken_over, fresh, orc, lrc);
  fflush(stdout);
  ck_assert_int_eq(hello_as_ok, LONGHAUL__ACK_STATUS__ACK_REJECTED);
  ck_assert_int_eq(hb_unbound, LONGHAUL__ACK_STATUS__ACK_RETRY);
  ck_assert_int_eq(hello_as_other, LONGHAUL__ACK_STATUS__ACK_STORED);
  ck_assert_int_eq(hb_bound_other, LONGHAUL__ACK_STATUS__ACK_REJECTED);
  ck_assert_int_eq(spoofed, 0);
  ck_assert_msg(taken_over, "the restarted actor did not take its name back (see %s and %s)", llog, oklog);
  ck_assert_int_ge(fresh, 2);
  ck_assert(lh_proc_file_has(llog, "bound under another CURVE key"));
  ck_assert_int_eq(orc, 0);
  ck_assert_int_eq(lrc, 0);
  lh_proc_rmdir(dir);
}
END_TEST

/* Half a CURVE config is an error that says what goes with what. */
START_TEST(test_curve_config_halves) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("learner");
  char extra[256], ini[128], log[128];
  snprintf(extra, sizeof extra, "curve_secret_key_file = %s/keys/learner.key\n", dir);
  write_config("half.ini", "", extra);
  path_of(ini, sizeof ini, "half.ini");
  path_of(log, sizeof log, "half.log");
  const char *largs[] = {"learner", "--config", ini, "--steps", "1", NULL};
  pid_t lp = lh_proc_spawn_longhaul(log, largs);
  int rc = lh_proc_wait(lp, 60, NULL);
  printf("curve config halves: exit %d\n", rc);
  ck_assert_int_ne(rc, 0);
  ck_assert(lh_proc_file_has(log, "go together"));
  lh_proc_rmdir(dir);
}
END_TEST

/* Plugins load only from an absolute path, resolved, and inside
 * LH_PLUGIN_PATH when it is set; a symbolic link cannot lead out of it. An
 * env server refuses a plugin named in a request (envs/envserver.c). */
START_TEST(test_plugin_paths) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  lh_env_plugin *p = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_plugin_load("libreverse.so", &p, &e), LH_EENVS_PLUGIN_PATH);
  printf("plugin: %s\n", e.msg);
  ck_assert_int_eq(lh_env_plugin_load("./x/libreverse.so", &p, &e), LH_EENVS_PLUGIN_PATH);
  ck_assert_int_eq(setenv("LH_PLUGIN_PATH", dir, 1), 0);
  ck_assert_int_eq(lh_env_plugin_load(LH_TEST_PLUGIN_GOOD, &p, &e), LH_EENVS_PLUGIN_PATH);
  printf("plugin: %s\n", e.msg);
  char link[128];
  path_of(link, sizeof link, "libreverse.so");
  ck_assert_int_eq(symlink(LH_TEST_PLUGIN_GOOD, link), 0);
  ck_assert_int_eq(lh_env_plugin_load(link, &p, &e), LH_EENVS_PLUGIN_PATH);
  char both[512], good_dir[256];
  snprintf(good_dir, sizeof good_dir, "%s", LH_TEST_PLUGIN_GOOD);
  *strrchr(good_dir, '/') = 0;
  snprintf(both, sizeof both, "/nonexistent:%s:%s", dir, good_dir);
  ck_assert_int_eq(setenv("LH_PLUGIN_PATH", both, 1), 0);
  ck_assert_msg(lh_env_plugin_load(LH_TEST_PLUGIN_GOOD, &p, &e) == 0, "%s", e.msg);
  lh_env_plugin_free(p);
  ck_assert_int_eq(unsetenv("LH_PLUGIN_PATH"), 0);
  ck_assert_msg(lh_env_plugin_load(LH_TEST_PLUGIN_GOOD, &p, &e) == 0, "%s", e.msg);
  lh_env_plugin_free(p);
  lh_proc_rmdir(dir);
}
END_TEST

/* SQL takes values as bound parameters, never in its text: the report's
 * ingest query goes through lh_store_sql_ints. A parameter count that does
 * not match is refused; the statement stays read-only. */
static int on_sum(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols == 1 && values[0]) snprintf(ctx, 32, "%s", values[0]);
  return 0;
}

START_TEST(test_sql_parameters) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  char db[128];
  path_of(db, sizeof db, "x.db");
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  const int64_t p[2] = {2, 3};
  char got[32] = "";
  ck_assert_msg(lh_store_sql_ints(s, "SELECT ?1 + ?2", p, 2, on_sum, got, NULL, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(got, "5");
  ck_assert_int_eq(lh_store_sql_ints(s, "SELECT ?1 + ?2", p, 1, on_sum, got, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_sql_ints(s, "DELETE FROM meta WHERE rowid = ?1", p, 1, NULL, NULL, NULL, &e),
                   LH_ESTORE_SQL_WRITE);
  lh_store_close(s);
  lh_proc_rmdir(dir);
}
END_TEST

/* zsock's pieces on their own: which endpoints count as local (a TCP bind
 * elsewhere without CURVE is warned about), the frame-count limit (a
 * message of too many frames is read whole and dropped, the next one comes
 * through), and the linger bound. */
START_TEST(test_zsock_pieces) {
  ck_assert(lh_zsock_endpoint_is_local("tcp://127.0.0.1:5555"));
  ck_assert(lh_zsock_endpoint_is_local("tcp://localhost:5555"));
  ck_assert(lh_zsock_endpoint_is_local("tcp://[::1]:5555"));
  ck_assert(lh_zsock_endpoint_is_local("ipc:///tmp/x"));
  ck_assert(lh_zsock_endpoint_is_local("inproc://x"));
  ck_assert(!lh_zsock_endpoint_is_local("tcp://*:5555"));
  ck_assert(!lh_zsock_endpoint_is_local("tcp://0.0.0.0:5555"));
  ck_assert(!lh_zsock_endpoint_is_local("tcp://10.0.0.1:5555"));
  ck_assert(!lh_zsock_endpoint_is_local("tcp://127.example.com:5555"));
  void *ctx = zmq_ctx_new();
  lh_errbuf e;
  lh_zsock_opts o = {.linger_ms = 60000, .max_message_bytes = 64};
  void *a = lh_zsock_open(ctx, ZMQ_PAIR, &o, "test PAIR", &e), *b = lh_zsock_open(ctx, ZMQ_PAIR, NULL, "test", &e);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  int linger = 0;
  size_t len = sizeof linger;
  ck_assert_int_eq(zmq_getsockopt(a, ZMQ_LINGER, &linger, &len), 0);
  ck_assert_int_eq(linger, LH_ZSOCK_LINGER_MS);
  int64_t maxmsg = 0;
  len = sizeof maxmsg;
  ck_assert_int_eq(zmq_getsockopt(a, ZMQ_MAXMSGSIZE, &maxmsg, &len), 0);
  ck_assert_int_eq(maxmsg, 64);
  ck_assert_int_eq(lh_zsock_bind(a, "inproc://zsock-test", NULL, NULL, 0, "test PAIR", &e), 0);
  ck_assert_int_eq(zmq_connect(b, "inproc://zsock-test"), 0);
  for (int i = 0; i < 5; i++) zmq_send(b, "x", 1, i < 4 ? ZMQ_SNDMORE : 0);
  zmq_send(b, "a", 1, ZMQ_SNDMORE);
  zmq_send(b, "b", 1, 0);
  zmq_msg_t f[3];
  int n = -1;
  ck_assert_int_eq(lh_zsock_recv_frames(a, f, 3, 0, &n), 2);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(lh_zsock_recv_frames(a, f, 3, 0, &n), 1);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(memcmp(zmq_msg_data(&f[1]), "b", 1), 0);
  lh_zsock_frames_close(f, n);
  ck_assert_int_eq(lh_zsock_recv_frames(a, f, 3, ZMQ_DONTWAIT, &n), 0);
  /* A TCP bind off loopback without CURVE is warned about; on loopback not. */
  char logpath[] = "/tmp/lh_zsock_log_XXXXXX";
  int fd = mkstemp(logpath);
  ck_assert_int_ge(fd, 0);
  FILE *logf = fdopen(fd, "w");
  lh_log_set_file(logf);
  void *lo = lh_zsock_open(ctx, ZMQ_ROUTER, NULL, "loopback ROUTER", &e);
  void *any = lh_zsock_open(ctx, ZMQ_ROUTER, NULL, "wildcard ROUTER", &e);
  char bound[128];
  ck_assert_int_eq(lh_zsock_bind(lo, "tcp://127.0.0.1:*", NULL, bound, sizeof bound, "loopback ROUTER", &e), 0);
  ck_assert_int_eq(strncmp(bound, "tcp://127.0.0.1:", 16), 0);
  ck_assert_int_eq(lh_zsock_bind(any, "tcp://0.0.0.0:*", NULL, NULL, 0, "wildcard ROUTER", &e), 0);
  fflush(logf);
  lh_log_set_file(NULL);
  fclose(logf);
  ck_assert(lh_proc_file_has(logpath, "wildcard ROUTER binds a non-loopback address without CURVE"));
  ck_assert(!lh_proc_file_has(logpath, "loopback ROUTER binds"));
  unlink(logpath);
  zmq_close(lo);
  zmq_close(any);
  lh_zsock_meter m = {.component = "test"};
  for (int i = 0; i < 100; i++) lh_zsock_meter_bad(&m, "test input");
  ck_assert_uint_eq(m.total, 100);
  ck_assert_uint_eq(m.since_log, 99); /* one line for the first; the rest wait for the interval */
  zmq_close(a);
  zmq_close(b);
  zmq_ctx_term(ctx);
}
END_TEST

/* An env server with CURVE (`envs serve --curve-secret-key-file
 * --curve-allowed-keys`): an allowed client plays, one with another key
 * and a plain one get no answer (a timeout), and the server logs the
 * refusal. */
static int env_reset_with(const char *ep, const char *name, const char *key, const char *server_pub) {
  lh_env_option o[5] = {{"server", ep}, {"timeout_ms", "1000"}};
  size_t n = 2;
  if (key) o[n++] = (lh_env_option){"curve_secret_key_file", key};
  if (server_pub) o[n++] = (lh_env_option){"curve_server_key_file", server_pub};
  lh_env *env = NULL;
  lh_errbuf e;
  int rc = lh_env_open(name, o, n, &env, &e);
  if (rc == 0) {
    lh_env_obs obs;
    rc = lh_env_reset(env, 3, &obs, &e);
  }
  if (rc) printf("env server curve: %s\n", e.msg);
  lh_env_free(env);
  return rc;
}

/* The keys and paths of an env server test with CURVE: a fresh folder,
 * the server's key pair, an allowed client ("ok", whose public key is the
 * allow-list) and another one ("bad"). */
typedef struct {
  char ep[128], log[128], key[128], pub[128], allowed[128], ok[128], bad[128];
} curve_env;

static void curve_env_setup(curve_env *c) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "sec"), 0);
  gen_key("envs");
  gen_key("ok");
  gen_key("bad");
  snprintf(c->ep, sizeof c->ep, "ipc://%s/env", dir);
  path_of(c->log, sizeof c->log, "env.log");
  path_of(c->key, sizeof c->key, "keys/envs.key");
  path_of(c->pub, sizeof c->pub, "keys/envs.pub");
  path_of(c->allowed, sizeof c->allowed, "keys/ok.pub");
  path_of(c->ok, sizeof c->ok, "keys/ok.key");
  path_of(c->bad, sizeof c->bad, "keys/bad.key");
}

START_TEST(test_env_server_curve) {
  curve_env c;
  curve_env_setup(&c);
  const char *args[] = {"envs", "serve", "--bind", c.ep, "--curve-secret-key-file", c.key, "--curve-allowed-keys",
                        c.allowed, NULL};
  pid_t p = lh_proc_spawn_longhaul(c.log, args);
  ck_assert_msg(lh_proc_wait_file(c.log, "curve=on", 30), "the env server did not start (see %s)", c.log);
  int allowed_rc = env_reset_with(c.ep, "calc", c.ok, c.pub), refused_rc = env_reset_with(c.ep, "calc", c.bad, c.pub),
      plain_rc = env_reset_with(c.ep, "calc", NULL, NULL), half_rc = env_reset_with(c.ep, "calc", c.ok, NULL);
  kill(p, SIGTERM);
  int rc = lh_proc_wait(p, 10, NULL);
  printf("env server curve: allowed=%d refused=%d plain=%d half=%d server exit=%d\n", allowed_rc, refused_rc,
         plain_rc, half_rc, rc);
  ck_assert_int_eq(allowed_rc, 0);
  ck_assert_int_eq(refused_rc, LH_EENVS_SERVER_TIMEOUT);
  ck_assert_int_eq(plain_rc, LH_EENVS_SERVER_TIMEOUT);
  ck_assert_int_eq(half_rc, LH_EENVS_BAD_OPTION);
  ck_assert_int_ge(rc, 0);
  ck_assert(lh_proc_file_has(c.log, "zap: peer refused"));
  lh_proc_rmdir(dir);
}
END_TEST

/* The Python env server with CURVE (--curve-secret-key-file,
 * --curve-allowed-keys; pyzmq's ZAP thread with the same allow-list). */
START_TEST(test_python_env_server_curve) {
  if (!lh_proc_have_python_envs()) {
    printf("python env server: /usr/bin/python3 with zmq and protobuf not found; skipped\n");
    return;
  }
  curve_env c;
  curve_env_setup(&c);
  char script[512];
  snprintf(script, sizeof script, "%s/envs/python/env_server.py", LH_TEST_SOURCE_DIR);
  const char *argv[] = {"/usr/bin/python3", script, "--bind", c.ep, "--proto-dir", LH_TEST_PY_PROTO_DIR,
                        "--curve-secret-key-file", c.key, "--curve-allowed-keys", c.allowed, NULL};
  pid_t p = lh_proc_spawn(c.log, argv);
  ck_assert_int_gt(p, 0);
  ck_assert_msg(lh_proc_wait_file(c.log, "curve=on", 30), "the env server did not start (see %s)", c.log);
  int allowed_rc = env_reset_with(c.ep, "guess", c.ok, c.pub), refused_rc = env_reset_with(c.ep, "guess", c.bad, c.pub),
      plain_rc = env_reset_with(c.ep, "guess", NULL, NULL);
  kill(p, SIGTERM);
  int rc = lh_proc_wait(p, 10, NULL);
  printf("python env server curve: allowed=%d refused=%d plain=%d server exit=%d\n", allowed_rc, refused_rc,
         plain_rc, rc);
  ck_assert_int_eq(allowed_rc, 0);
  ck_assert_int_eq(refused_rc, LH_EENVS_SERVER_TIMEOUT);
  ck_assert_int_eq(plain_rc, LH_EENVS_SERVER_TIMEOUT);
  ck_assert_int_ge(rc, 0);
  ck_assert(lh_proc_file_has(c.log, "zap: peer refused"));
  lh_proc_rmdir(dir);
}
END_TEST

/* A key file that is not a regular file (a FIFO: opening one waits for a
 * writer) in the allow-list folder, and as the secret key: both servers
 * refuse it by name before they listen and exit 2, a usage error
 * `longhaul launch` does not retry. */
START_TEST(test_env_server_key_fifo) {
  int python = lh_proc_have_python_envs();
  curve_env c;
  curve_env_setup(&c);
  char allowed[128], evil[160], fifo_key[128], line[320];
  path_of(allowed, sizeof allowed, "allowed");
  ck_assert_int_eq(mkdir(allowed, 0755), 0);
  snprintf(evil, sizeof evil, "%s/ok.pub", allowed);
  char *ok = lh_proc_read_file(c.allowed);
  ck_assert_ptr_nonnull(ok);
  ck_assert_int_eq(lh_proc_write_file(evil, ok), 0);
  free(ok);
  snprintf(evil, sizeof evil, "%s/evil.pub", allowed);
  ck_assert_int_eq(mkfifo(evil, 0644), 0);
  path_of(fifo_key, sizeof fifo_key, "keys/fifo.key");
  ck_assert_int_eq(mkfifo(fifo_key, 0600), 0);
  char script[512];
  snprintf(script, sizeof script, "%s/envs/python/env_server.py", LH_TEST_SOURCE_DIR);
  for (int k = 0; k < 4; k++) {
    int py = k >= 2, secret_fifo = k % 2;
    if (py && !python) {
      printf("python env server: /usr/bin/python3 with zmq and protobuf not found; skipped\n");
      break;
    }
    const char *key = secret_fifo ? fifo_key : c.key, *list = secret_fifo ? c.allowed : allowed;
    char log[128];
    snprintf(log, sizeof log, "%s/fifo-%d.log", dir, k);
    const char *args[] = {"envs", "serve", "--bind", c.ep, "--curve-secret-key-file", key, "--curve-allowed-keys",
                          list, NULL};
    const char *argv[] = {"/usr/bin/python3", script, "--bind", c.ep, "--proto-dir", LH_TEST_PY_PROTO_DIR,
                          "--curve-secret-key-file", key, "--curve-allowed-keys", list, NULL};
    pid_t p = py ? lh_proc_spawn(log, argv) : lh_proc_spawn_longhaul(log, args);
    ck_assert_int_gt(p, 0);
    int rc = lh_proc_wait(p, 30, NULL);
    snprintf(line, sizeof line, "%s: not a regular file (a folder, a device or a pipe)", secret_fifo ? fifo_key : evil);
    printf("%s env server, a FIFO as %s: exit %d, %s\n", py ? "python" : "C",
           secret_fifo ? "the secret key" : "an allowed key", rc,
           lh_proc_file_has(log, line) ? "the file named" : "the file not named");
    ck_assert_msg(rc == 2, "exit %d (see %s)", rc, log);
    ck_assert_msg(lh_proc_file_has(log, line), "no '%s' in %s", line, log);
    ck_assert(!lh_proc_file_has(log, "listening"));
  }
  lh_proc_rmdir(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("security");
  TCase *t = tcase_create("curve");
  tcase_set_timeout(t, 240);
  tcase_add_test(t, test_zsock_pieces);
  tcase_add_test(t, test_keys_generate);
  tcase_add_test(t, test_allow_list);
  tcase_add_test(t, test_peer_cap);
  tcase_add_test(t, test_curve_allow_list_processes);
  tcase_add_test(t, test_curve_names);
  tcase_add_test(t, test_curve_config_halves);
  tcase_add_test(t, test_plugin_paths);
  tcase_add_test(t, test_sql_parameters);
  tcase_add_test(t, test_env_server_curve);
  tcase_add_test(t, test_python_env_server_curve);
  tcase_add_test(t, test_env_server_key_fifo);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return lh_test_run(suite(), CK_FORK);
}

/* net/zsock: the one place where the project's ZeroMQ sockets are set
 * up, and what every port shares in refusing bad input.
 *
 * Every socket gets a bounded ZMQ_LINGER (LH_ZSOCK_LINGER_MS at most, so
 * that closing a socket whose peer is gone never waits longer), a
 * receiving socket gets ZMQ_MAXMSGSIZE (a larger frame disconnects its
 * sender before it is buffered), and a multipart message of more frames
 * than its reader expects is read and dropped whole by
 * lh_zsock_recv_frames. Bad input is counted and logged at most once per
 * LH_ZSOCK_LOG_INTERVAL_NS by an lh_zsock_meter.
 *
 * CURVE: a server socket is given its secret key, ZMQ_ZAP_DOMAIN
 * LH_ZSOCK_ZAP_DOMAIN and ZMQ_ZAP_ENFORCE_DOMAIN, and the process runs a
 * ZAP handler (lh_zsock_zap_start) that accepts only the public keys of an
 * allow-list: CURVE without ZAP encrypts but authenticates nobody, and with
 * the domain enforced a server with no handler refuses every peer. A client
 * socket is given its own key pair and the server's public key. Keys are
 * 40-character Z85 text, as zmq_curve_keypair writes them.
 *
 * Why a module of its own: common/ is what every module links, and the
 * sockets in it made even kernels/ link ZeroMQ; net/zsock.c includes only
 * common/common.h, and only envs/, actors/, learner/ and cli/ include it.
 * It is not part of proto/ either: proto/ is the codec (bytes to
 * messages) and store/ links it to keep segments, while nothing in the
 * store touches a socket; a socket layer inside proto/ would give the
 * store ZeroMQ. So net/ (library lh_net) sits beside proto/, above
 * common/, and common/, kernels/, proto/, store/ and model/ link no
 * ZeroMQ (ARCHITECTURE.md §2.2). */
#ifndef LH_NET_ZSOCK_H
#define LH_NET_ZSOCK_H

#include <stdint.h>
#include <zmq.h>

#include "common/common.h"

#define LH_ZSOCK_LINGER_MS 1000
#define LH_ZSOCK_LINGER_NONE (-1) /* linger_ms: drop unsent messages at close */
#define LH_ZSOCK_LOG_INTERVAL_NS LH_LOG_METER_INTERVAL_NS
#define LH_ZSOCK_ZAP_DOMAIN "longhaul"
#define LH_ZSOCK_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define LH_ZSOCK_KEY_CHARS 40

/* A socket's CURVE role: secret empty means plain (no CURVE). A server has
 * server_key empty; a client names the server's public key in it. */
typedef struct {
  char secret[LH_ZSOCK_KEY_CHARS + 1];
  char server_key[LH_ZSOCK_KEY_CHARS + 1];
} lh_zsock_curve;

typedef struct {
  /* 0: LH_ZSOCK_LINGER_MS; 1..LH_ZSOCK_LINGER_MS as given (larger values
   * are bounded to it); LH_ZSOCK_LINGER_NONE: 0. */
  int linger_ms;
  /* ZMQ_MAXMSGSIZE: the largest frame accepted (a larger one cuts its
   * sender off); 0 leaves libzmq's default (no limit). */
  int64_t max_message_bytes;
  /* ZMQ_SNDHWM and ZMQ_RCVHWM: messages queued per peer before libzmq
   * drops (a ROUTER's sends) or stops reading (receives); 0 leaves
   * libzmq's default (1000). What a peer that never reads, or floods, can
   * make a process hold is about this times the message size. */
  int sndhwm, rcvhwm;
  const lh_zsock_curve *curve;  /* NULL or secret "": plain */
  /* ZMQ_ZAP_DOMAIN for a server socket whose peers a ZAP handler caps
   * (lh_zsock_zap_cap_peers); NULL: LH_ZSOCK_ZAP_DOMAIN when the socket
   * is a CURVE server, none otherwise. Set, every handshake (CURVE or
   * plain) goes to the handler, and without one it is refused. */
  const char *zap_domain;
  /* ZMQ_HANDSHAKE_IVL: a connection that has not finished its handshake
   * by then is closed; 0 leaves libzmq's 30 s. */
  int handshake_ms;
  /* ZMQ_HEARTBEAT_IVL and ZMQ_HEARTBEAT_TIMEOUT: a ZMTP ping every
   * heartbeat_ms, and a connection that answers nothing for
   * heartbeat_timeout_ms is closed (its peer's host gone, with no FIN ever
   * coming); 0 sends none. libzmq answers pings by itself. */
  int heartbeat_ms, heartbeat_timeout_ms;
} lh_zsock_opts;

/* A new socket of type on ctx with the options of o applied; what names it
 * in messages ("ingest ROUTER"). NULL with err set on failure. */
void *lh_zsock_open(void *ctx, int type, const lh_zsock_opts *o, const char *what, lh_errbuf *err);

/* Binds s to endpoint and writes the endpoint bound (ZMQ_LAST_ENDPOINT,
 * with any wildcard port resolved) into bound[bound_bytes] when bound is
 * not NULL. A TCP bind to anything but a loopback address is logged as a
 * warning when s has no CURVE (curve NULL or plain): only an explicit
 * config value can ask for it. */
int lh_zsock_bind(void *s, const char *endpoint, const lh_zsock_curve *curve, char *bound,
                  size_t bound_bytes, const char *what, lh_errbuf *err);

/* 1 when endpoint is tcp:// to 127.0.0.0/8, ::1 or localhost, or is ipc://
 * or inproc://; 0 for any other address (a wildcard included). */
int lh_zsock_endpoint_is_local(const char *endpoint);

/* Reads one multipart message into frames[0..max_frames) (*n of them; the
 * caller closes them with lh_zsock_frames_close). Returns 1 for a message;
 * 0 when flags has ZMQ_DONTWAIT and nothing is waiting; 2 when it had more
 * than max_frames frames: all were read and closed, *n is 0 and the whole
 * message is dropped; -1 for a socket error (zmq_errno says which, EINTR
 * for a signal). flags apply to the first frame only: the others of a
 * message are already there. */
int lh_zsock_recv_frames(void *s, zmq_msg_t *frames, int max_frames, int flags, int *n);
void lh_zsock_frames_close(zmq_msg_t *frames, int n);

/* Bad input on one port: an lh_log_meter whose line reads "bad message:
 * WHAT (bad since last report=N total=M)". */
typedef lh_log_meter lh_zsock_meter;
void lh_zsock_meter_bad(lh_zsock_meter *m, const char *what);

/* Reads a key file: its first line holds a 40-character Z85 key (blanks
 * around it allowed). A secret key file must not be readable by group or
 * others (as ssh asks of its keys). Errors name the path (LH_ECONFIG). */
int lh_zsock_key_read(const char *path, int secret, char key[LH_ZSOCK_KEY_CHARS + 1], lh_errbuf *err);

/* Writes a new key pair: dir/name.key (the secret, mode 0600) and
 * dir/name.pub (the public key, mode 0644), each one Z85 line. An
 * existing file is not overwritten (LH_EIO naming it). */
int lh_zsock_keys_generate(const char *dir, const char *name, char public_key[LH_ZSOCK_KEY_CHARS + 1],
                           lh_errbuf *err);

/* The ZAP handler of one ZeroMQ context: a thread with a REP socket on
 * LH_ZSOCK_ZAP_ENDPOINT that accepts a CURVE peer of the domain
 * LH_ZSOCK_ZAP_DOMAIN whose public key is in the allow-list and refuses
 * every other request (counted, logged once per interval). allowed is a
 * file of Z85 public keys, one a line (blank lines skipped; no comments,
 * as '#' is a Z85 character), or a folder whose *.pub files hold one each;
 * NULL or "": no allow-list, so no CURVE peer is accepted (a handler that
 * only caps peers). An accepted CURVE peer's messages carry its public
 * key, 40 Z85 characters, as their "User-Id" property (zmq_msg_gets); a
 * plain peer's is "". Start it before the server sockets bind; stop it
 * before zmq_ctx_term. */
typedef struct lh_zsock_zap lh_zsock_zap;
int lh_zsock_zap_start(void *ctx, const char *allowed, lh_zsock_zap **out, lh_errbuf *err);
/* Reads the allow-list allowed as lh_zsock_zap_start would, without a
 * handler: 0 with *keys (may be NULL) its key count, or LH_ECONFIG naming
 * what is wrong (a file that cannot be read, a line that is no key, no key
 * at all). */
int lh_zsock_allowed_check(const char *allowed, size_t *keys, lh_errbuf *err);
/* Caps the connections of one server socket s (opened with zap_domain
 * domain, not yet bound) at max_peers: the handler counts s's open
 * connections through a socket monitor (accepted, closed) and refuses the
 * handshake of a connection while more than max_peers are open, itself
 * among them (counted and logged as a refusal); a CURVE peer must also be
 * in the allow-list. So at most max_peers admitted connections are open
 * at any time, whatever peers send. Connections still in their handshake
 * count too: a burst of more than max_peers may be refused whole, and
 * each refused client connects again (libzmq ends a refused connection
 * for good, but for one that closed before the client read the refusal:
 * that one it connects again by itself). libzmq bounds the messages it
 * queues per connection (ZMQ_RCVHWM), not over all of them: this is what
 * bounds them in all.
 * One capped socket per handler. what names the socket in the log. */
int lh_zsock_zap_cap_peers(lh_zsock_zap *z, void *s, const char *domain, int max_peers, const char *what,
                           lh_errbuf *err);
/* Connections of the capped socket open now (admitted or not yet
 * through their handshake); 0 without a capped socket. */
int lh_zsock_zap_open_peers(const lh_zsock_zap *z);
/* Handshakes refused for the cap alone (lh_zsock_zap_refused counts
 * every refusal, the allow-list's too). */
uint64_t lh_zsock_zap_cap_refused(const lh_zsock_zap *z);
uint64_t lh_zsock_zap_accepted(const lh_zsock_zap *z);
uint64_t lh_zsock_zap_refused(const lh_zsock_zap *z);
size_t lh_zsock_zap_keys(const lh_zsock_zap *z);
void lh_zsock_zap_stop(lh_zsock_zap *z);  /* NULL is fine */

#endif

/* net/zsock: socket setup, frame limits, bad-input meters, CURVE keys
 * and the ZAP handler (see zsock.h). */
#include "net/zsock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93 /* a draft option in libzmq 4.3's header, present in its library */
#endif

#define ZAP_POLL_MS 100
#define ZAP_MAX_KEYS 65536

static int has_curve(const lh_zsock_curve *c) { return c && c->secret[0]; }

void *lh_zsock_open(void *ctx, int type, const lh_zsock_opts *o, const char *what, lh_errbuf *err) {
  lh_zsock_opts none = {0};
  if (!o) o = &none;
  if (!what) what = "socket";
  void *s = ctx ? zmq_socket(ctx, type) : NULL;
  if (!s) {
    lh_errbuf_set(err, LH_EZMQ, "%s: zmq_socket: %s", what, ctx ? zmq_strerror(zmq_errno()) : "no context");
    return NULL;
  }
  int linger = o->linger_ms == LH_ZSOCK_LINGER_NONE            ? 0
               : o->linger_ms <= 0 || o->linger_ms > LH_ZSOCK_LINGER_MS ? LH_ZSOCK_LINGER_MS
                                                                : o->linger_ms;
  const char *opt = "ZMQ_LINGER";
  int rc = zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  if (!rc && o->max_message_bytes > 0) {
    opt = "ZMQ_MAXMSGSIZE";
    rc = zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &o->max_message_bytes, sizeof o->max_message_bytes);
  }
  /* The integer options, each set when asked for (positive); a heartbeat
   * timeout goes with a heartbeat only. */
  const struct {
    int option, value;
    const char *name;
  } ints[] = {{ZMQ_SNDHWM, o->sndhwm, "ZMQ_SNDHWM"},
              {ZMQ_RCVHWM, o->rcvhwm, "ZMQ_RCVHWM"},
              {ZMQ_HANDSHAKE_IVL, o->handshake_ms, "ZMQ_HANDSHAKE_IVL"},
              {ZMQ_HEARTBEAT_IVL, o->heartbeat_ms, "ZMQ_HEARTBEAT_IVL"},
              {ZMQ_HEARTBEAT_TIMEOUT, o->heartbeat_ms > 0 ? o->heartbeat_timeout_ms : 0, "ZMQ_HEARTBEAT_TIMEOUT"}};
  for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
    if (ints[i].value > 0)
      opt = ints[i].name, rc = zmq_setsockopt(s, ints[i].option, &ints[i].value, sizeof ints[i].value);
  if (!rc && has_curve(o->curve)) {
    const lh_zsock_curve *c = o->curve;
    if (!zmq_has("curve")) {
      zmq_close(s);
      lh_errbuf_set(err, LH_EUNSUPPORTED, "%s: CURVE keys are configured but this libzmq has no CURVE", what);
      return NULL;
    }
    if (!c->server_key[0]) {
      int one = 1;
      opt = "ZMQ_CURVE_SERVER";
      rc = zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
      if (!rc) opt = "ZMQ_CURVE_SECRETKEY", rc = zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret, LH_ZSOCK_KEY_CHARS + 1);
      if (!rc) {
        const char *domain = o->zap_domain ? o->zap_domain : LH_ZSOCK_ZAP_DOMAIN;
        opt = "ZMQ_ZAP_DOMAIN";
        rc = zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, domain, strlen(domain));
      }
      if (!rc) opt = "ZMQ_ZAP_ENFORCE_DOMAIN", rc = zmq_setsockopt(s, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one);
    } else {
      char pub[LH_ZSOCK_KEY_CHARS + 1];
      opt = "the public key of ZMQ_CURVE_SECRETKEY";
      rc = zmq_curve_public(pub, c->secret);
      if (!rc) opt = "ZMQ_CURVE_SERVERKEY", rc = zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_key, LH_ZSOCK_KEY_CHARS + 1);
      if (!rc) opt = "ZMQ_CURVE_PUBLICKEY", rc = zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, LH_ZSOCK_KEY_CHARS + 1);
      if (!rc) opt = "ZMQ_CURVE_SECRETKEY", rc = zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret, LH_ZSOCK_KEY_CHARS + 1);
    }
  }
  if (!rc && !has_curve(o->curve) && o->zap_domain) {
    /* A plain socket with a domain: libzmq asks the handler about every
     * NULL-mechanism handshake, and with the domain enforced a context
     * without a handler refuses them all rather than letting them by. */
    int one = 1;
    opt = "ZMQ_ZAP_DOMAIN";
    rc = zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, o->zap_domain, strlen(o->zap_domain));
    if (!rc) opt = "ZMQ_ZAP_ENFORCE_DOMAIN", rc = zmq_setsockopt(s, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one);
  }
  if (rc) {
    lh_errbuf_set(err, LH_EZMQ, "%s: cannot set %s: %s", what, opt, zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

int lh_zsock_endpoint_is_local(const char *ep) {
  if (!ep) return 0;
  if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) return 1;
  if (strncmp(ep, "tcp://", 6) != 0) return 0;
  const char *h = ep + 6;
  if (!strncmp(h, "localhost:", 10) || !strncmp(h, "[::1]:", 6)) return 1;
  if (strncmp(h, "127.", 4) != 0) return 0;
  size_t n = strspn(h, "0123456789.");  /* 127.x.y.z, not a name that starts so */
  return h[n] == ':';
}

int lh_zsock_bind(void *s, const char *endpoint, const lh_zsock_curve *curve, char *bound, size_t bound_bytes,
                  const char *what, lh_errbuf *err) {
  if (!what) what = "socket";
  if (!s || !endpoint || !*endpoint) return lh_errbuf_set(err, LH_EINVAL, "%s: no socket or endpoint to bind", what);
  if (zmq_bind(s, endpoint) != 0)
    return lh_errbuf_set(err, LH_EZMQ, "%s: cannot bind %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
  if (!lh_zsock_endpoint_is_local(endpoint) && !has_curve(curve))
    LH_WARN("zsock", "%s binds a non-loopback address without CURVE: endpoint=%s (anyone who reaches it "
            "can send; set the curve_* keys)", what, endpoint);
  if (bound && bound_bytes) {
    size_t len = bound_bytes;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len)) snprintf(bound, bound_bytes, "%s", endpoint);
  }
  return 0;
}

int lh_zsock_recv_frames(void *s, zmq_msg_t *frames, int max_frames, int flags, int *n) {
  *n = 0;
  int more = 1, extra = 0;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, *n == 0 && !extra ? flags : 0) < 0) {
      int en = zmq_errno();
      zmq_msg_close(&m);
      lh_zsock_frames_close(frames, *n);
      int first = *n == 0 && !extra;
      *n = 0;
      errno = en;
      if (first && en == EAGAIN) return 0;
      return -1;
    }
    more = zmq_msg_more(&m);
    if (*n < max_frames) frames[(*n)++] = m;
    else zmq_msg_close(&m), extra++;
  }
  if (extra) {
    lh_zsock_frames_close(frames, *n);
    *n = 0;
    return 2;
  }
  return 1;
}

void lh_zsock_frames_close(zmq_msg_t *frames, int n) {
  for (int i = 0; i < n; i++) zmq_msg_close(&frames[i]);
}

void lh_zsock_meter_bad(lh_zsock_meter *m, const char *what) {
  if (!m->component) m->component = "zsock";
  lh_log_meter_warn(m, "bad message: %s", what ? what : "");
}

/* A Z85 key from the start of text: blanks, 40 key characters, blanks. */
static int parse_key(const char *text, char key[LH_ZSOCK_KEY_CHARS + 1]) {
  while (*text == ' ' || *text == '\t') text++;
  size_t len = strcspn(text, " \t\r\n");
  if (len != LH_ZSOCK_KEY_CHARS) return -1;
  const char *rest = text + len;
  while (*rest == ' ' || *rest == '\t' || *rest == '\r') rest++;
  if (*rest && *rest != '\n') return -1;
  memcpy(key, text, LH_ZSOCK_KEY_CHARS);
  key[LH_ZSOCK_KEY_CHARS] = 0;
  uint8_t bin[32];
  return zmq_z85_decode(bin, key) ? 0 : -1;
}

int lh_zsock_key_read(const char *path, int secret, char key[LH_ZSOCK_KEY_CHARS + 1], lh_errbuf *err) {
  if (!path || !*path) return lh_errbuf_set(err, LH_ECONFIG, "key file: no path given");
  struct stat st;
  if (stat(path, &st) != 0)
    return lh_errbuf_set(err, LH_ECONFIG, "key file %s: %s", path, strerror(errno));
  if (secret && (st.st_mode & 077))
    return lh_errbuf_set(err, LH_ECONFIG, "secret key file %s is readable by group or others (mode %03o); "
                         "chmod 600 it", path, (unsigned)(st.st_mode & 0777));
  char *text = NULL;
  size_t bytes = 0;
  LH_TRY(lh_read_text_file(path, LH_ECONFIG, &text, &bytes, err));
  int rc = parse_key(text, key);
  free(text);
  if (rc) return lh_errbuf_set(err, LH_ECONFIG, "key file %s: the first line is not a 40-character Z85 key "
                               "(write one with `longhaul keys generate`)", path);
  return 0;
}

static int write_file(const char *path, const char *line, mode_t mode, lh_errbuf *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) return lh_errbuf_set(err, LH_EIO, "cannot create %s: %s", path, strerror(errno));
  size_t n = strlen(line);
  int bad = write(fd, line, n) != (ssize_t)n || fchmod(fd, mode) != 0;
  if (close(fd) != 0) bad = 1;
  if (bad) {
    unlink(path);
    return lh_errbuf_set(err, LH_EIO, "cannot write %s: %s", path, strerror(errno));
  }
  return 0;
}

int lh_zsock_keys_generate(const char *dir, const char *name, char public_key[LH_ZSOCK_KEY_CHARS + 1],
                           lh_errbuf *err) {
  if (!dir || !*dir || !name || !*name || strchr(name, '/'))
    return lh_errbuf_set(err, LH_EINVAL, "keys: a folder and a name without '/' are required");
  char pub[LH_ZSOCK_KEY_CHARS + 1], sec[LH_ZSOCK_KEY_CHARS + 1];
  if (!zmq_has("curve")) return lh_errbuf_set(err, LH_EUNSUPPORTED, "keys: this libzmq has no CURVE");
  if (zmq_curve_keypair(pub, sec) != 0)
    return lh_errbuf_set(err, LH_EZMQ, "keys: zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
  char kpath[4096], ppath[4096], line[LH_ZSOCK_KEY_CHARS + 2];
  if (snprintf(kpath, sizeof kpath, "%s/%s.key", dir, name) >= (int)sizeof kpath ||
      snprintf(ppath, sizeof ppath, "%s/%s.pub", dir, name) >= (int)sizeof ppath)
    return lh_errbuf_set(err, LH_EINVAL, "keys: the path under %s is too long", dir);
  snprintf(line, sizeof line, "%s\n", sec);
  LH_TRY(write_file(kpath, line, 0600, err));
  snprintf(line, sizeof line, "%s\n", pub);
  int rc = write_file(ppath, line, 0644, err);
  memset(sec, 0, sizeof sec);
  memset(line, 0, sizeof line);
  if (rc) {
    unlink(kpath);
    return rc;
  }
  if (public_key) memcpy(public_key, pub, sizeof pub);
  return 0;
}

/* ---- the ZAP handler ---------------------------------------------------- */

/* The capped socket, as the handler thread sees it: the monitor's PAIR
 * end (handed over through an atomic pointer, the memory barrier libzmq
 * asks for when a socket changes threads) and which fds are open.
 *
 * Only the open connections are counted, from the monitor's accepted and
 * closed events, which name their fd: libzmq's handshake events name
 * none, some failed handshakes report no event at all, and a ZAP request
 * does not say which connection asks, so a count of admitted connections
 * drifts with what peers choose to send. The open count cannot: a
 * connection admitted only while at most max_peers are open (itself
 * among them) keeps the admitted ones at max_peers or fewer. */
typedef struct {
  void *monitor;
  char domain[64];
  char what[64];
  int max_peers;
  uint8_t *open_fd;  /* open_fd[fd]: an accepted connection not yet closed */
  size_t open_cap;
  int open;
} zap_cap;

struct lh_zsock_zap {
  void *ctx;
  void *sock;
  pthread_t thread;
  atomic_int stop;
  atomic_uint_least64_t accepted, refused, cap_refused;
  atomic_int open_peers;
  _Atomic(zap_cap *) handed;  /* set by lh_zsock_zap_cap_peers, taken by the thread */
  zap_cap *cap;               /* the thread's */
  uint8_t (*keys)[32];
  size_t n_keys;
  int64_t last_log_ns;
  uint64_t refused_since_log;
};

static int add_key(lh_zsock_zap *z, const char *z85, const char *source, int line, lh_errbuf *err) {
  char key[LH_ZSOCK_KEY_CHARS + 1];
  if (parse_key(z85, key))
    return lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s:%d: not a 40-character Z85 public key", source, line);
  if (z->n_keys >= ZAP_MAX_KEYS)
    return lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s: more than %d keys", source, ZAP_MAX_KEYS);
  void *grown = realloc(z->keys, (z->n_keys + 1) * sizeof *z->keys);
  if (!grown) return lh_errbuf_set(err, LH_ENOMEM, "allowed keys: out of memory");
  z->keys = grown;
  zmq_z85_decode(z->keys[z->n_keys++], key);
  return 0;
}

/* Every key line of the file at path (blank lines skipped; no comments:
 * '#' is a Z85 character). */
static int load_key_file(lh_zsock_zap *z, const char *path, lh_errbuf *err) {
  char *text = NULL;
  size_t bytes = 0;
  LH_TRY(lh_read_text_file(path, LH_ECONFIG, &text, &bytes, err));
  int rc = 0, line = 0;
  for (char *p = text; *p && rc == 0;) {
    char *end = strchr(p, '\n');
    line++;
    const char *q = p;
    while (*q == ' ' || *q == '\t' || *q == '\r') q++;
    if (*q && *q != '\n') rc = add_key(z, p, path, line, err);
    p = end ? end + 1 : p + strlen(p);
  }
  free(text);
  return rc;
}

static int load_allowed(lh_zsock_zap *z, const char *allowed, lh_errbuf *err) {
  struct stat st;
  if (stat(allowed, &st) != 0)
    return lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s: %s", allowed, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return load_key_file(z, allowed, err);
  DIR *d = opendir(allowed);
  if (!d) return lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s: %s", allowed, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".pub") != 0) continue;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", allowed, e->d_name) >= (int)sizeof path) continue;
    rc = load_key_file(z, path, err);
  }
  closedir(d);
  return rc;
}

static int key_allowed(const lh_zsock_zap *z, const uint8_t *key) {
  for (size_t i = 0; i < z->n_keys; i++)
    if (memcmp(z->keys[i], key, 32) == 0) return 1;
  return 0;
}

static int frame_is(zmq_msg_t *f, const char *text) {
  size_t n = strlen(text);
  return zmq_msg_size(f) == n && memcmp(zmq_msg_data(f), text, n) == 0;
}

static const char cap_why[] = "the socket has its most peers";

/* Applies the capped socket's monitor events that are waiting. Each
 * event is two frames: a 6-byte (event, value: the connection's fd) and
 * the endpoint. */
static void cap_drain(lh_zsock_zap *z) {
  zap_cap *c = z->cap;
  if (!c) return;
  for (;;) {
    zmq_msg_t f[2];
    int n = 0;
    if (lh_zsock_recv_frames(c->monitor, f, 2, ZMQ_DONTWAIT, &n) != 1) break;
    if (n >= 1 && zmq_msg_size(&f[0]) >= 6) {
      const uint8_t *d = zmq_msg_data(&f[0]);
      uint16_t event;
      uint32_t fd;
      memcpy(&event, d, sizeof event);
      memcpy(&fd, d + 2, sizeof fd);
      if (event == ZMQ_EVENT_ACCEPTED) {
        if (fd >= c->open_cap) {
          size_t cap = c->open_cap ? c->open_cap : 1024;
          while (cap <= fd) cap *= 2;
          uint8_t *grown = realloc(c->open_fd, cap);
          if (grown) {
            memset(grown + c->open_cap, 0, cap - c->open_cap);
            c->open_fd = grown, c->open_cap = cap;
          }
        }
        if (fd < c->open_cap && !c->open_fd[fd]) c->open_fd[fd] = 1, c->open++;
      } else if (fd < c->open_cap && c->open_fd[fd]) { /* DISCONNECTED, CLOSED */
        c->open_fd[fd] = 0, c->open--;
      }
    }
    lh_zsock_frames_close(f, n);
  }
  atomic_store(&z->open_peers, c->open);
}

/* Whether one more connection would pass the cap: the asking connection
 * was accepted before its handshake began, so it is among the open ones. */
static int cap_full(lh_zsock_zap *z) {
  cap_drain(z);
  return z->cap->open > z->cap->max_peers;
}

/* Answers one ZAP request (RFC 27: version, request id, domain, address,
 * routing id, mechanism, credentials...). */
static void zap_answer(lh_zsock_zap *z) {
  zmq_msg_t f[8];
  int n = 0;
  int r = lh_zsock_recv_frames(z->sock, f, 8, ZMQ_DONTWAIT, &n);
  if (r == 0 || r < 0) return;
  const char *why = NULL;
  char peer[64] = "";
  char user[LH_ZSOCK_KEY_CHARS + 1] = "";
  int capped = 0;
  if (r == 2 || n < 6) {
    why = "malformed ZAP request";
  } else {
    size_t an = zmq_msg_size(&f[3]) < sizeof peer - 1 ? zmq_msg_size(&f[3]) : sizeof peer - 1;
    memcpy(peer, zmq_msg_data(&f[3]), an);
    peer[an] = 0;
    capped = z->cap && frame_is(&f[2], z->cap->domain);
    int curve = frame_is(&f[5], "CURVE");
    if (!frame_is(&f[0], "1.0")) why = "ZAP version is not 1.0";
    else if (!capped && !frame_is(&f[2], LH_ZSOCK_ZAP_DOMAIN)) why = "not the longhaul ZAP domain";
    else if (!curve && !(capped && frame_is(&f[5], "NULL"))) why = "not a CURVE peer";
    else if (curve && (n < 7 || zmq_msg_size(&f[6]) != 32)) why = "no CURVE public key";
    else if (curve && !key_allowed(z, zmq_msg_data(&f[6]))) why = "public key not in the allow-list";
    else if (capped && cap_full(z)) why = cap_why;
    /* The user id a CURVE peer's messages carry (their "User-Id"
     * property): its public key, so that a server can tell which key
     * sent what (the learner binds actor names to it). */
    if (!why && curve && !zmq_z85_encode(user, zmq_msg_data(&f[6]), 32)) user[0] = 0;
  }
  /* The reply: version, the request id echoed, status code and text,
   * user id, metadata. */
  const char *code = why ? "400" : "200";
  zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
  if (n >= 2) zmq_send(z->sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
  else zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
  zmq_send(z->sock, code, 3, ZMQ_SNDMORE);
  zmq_send(z->sock, why ? why : "OK", strlen(why ? why : "OK"), ZMQ_SNDMORE);
  zmq_send(z->sock, user, strlen(user), ZMQ_SNDMORE);
  zmq_send(z->sock, "", 0, 0);
  lh_zsock_frames_close(f, n);
  if (!why) {
    atomic_fetch_add(&z->accepted, 1);
    return;
  }
  uint64_t total = atomic_fetch_add(&z->refused, 1) + 1;
  if (why == cap_why) atomic_fetch_add(&z->cap_refused, 1);
  z->refused_since_log++;
  int64_t now = lh_now_ns();
  if (z->last_log_ns && now - z->last_log_ns < LH_ZSOCK_LOG_INTERVAL_NS) return;
  if (why == cap_why)
    LH_WARN("zap", "peer refused: %s socket=%s max_peers=%d open=%d address=%s (refused since last report=%llu "
            "total=%llu)", why, z->cap->what, z->cap->max_peers, atomic_load(&z->open_peers), peer,
            (unsigned long long)z->refused_since_log, (unsigned long long)total);
  else
    LH_WARN("zap", "peer refused: %s address=%s (refused since last report=%llu total=%llu)", why, peer,
            (unsigned long long)z->refused_since_log, (unsigned long long)total);
  z->last_log_ns = now;
  z->refused_since_log = 0;
}

static void cap_free(zap_cap *c) {
  if (!c) return;
  if (c->monitor) zmq_close(c->monitor);
  free(c->open_fd);
  free(c);
}

static void *zap_thread(void *arg) {
  lh_zsock_zap *z = arg;
  while (!atomic_load(&z->stop)) {
    if (!z->cap) z->cap = atomic_exchange(&z->handed, NULL);
    zmq_pollitem_t items[2] = {{z->sock, 0, ZMQ_POLLIN, 0}, {z->cap ? z->cap->monitor : NULL, 0, ZMQ_POLLIN, 0}};
    int pr = zmq_poll(items, z->cap ? 2 : 1, ZAP_POLL_MS);
    if (pr < 0 && zmq_errno() == ETERM) break;
    /* A registration made while this poll waited is taken before the
     * request is answered: it was made before its socket bound. */
    if (!z->cap) z->cap = atomic_exchange(&z->handed, NULL);
    if (pr > 0 && (items[1].revents & ZMQ_POLLIN)) cap_drain(z);
    if (pr > 0 && (items[0].revents & ZMQ_POLLIN)) zap_answer(z);
  }
  cap_free(z->cap);
  z->cap = NULL;
  cap_free(atomic_exchange(&z->handed, NULL));
  /* Unbinding an inproc endpoint is synchronous, closing is not: a new
   * handler may bind the endpoint as soon as this one is stopped. */
  zmq_unbind(z->sock, LH_ZSOCK_ZAP_ENDPOINT);
  zmq_close(z->sock);
  z->sock = NULL;
  return NULL;
}

int lh_zsock_allowed_check(const char *allowed, size_t *keys, lh_errbuf *err) {
  if (keys) *keys = 0;
  if (!allowed || !*allowed) return lh_errbuf_set(err, LH_ECONFIG, "allowed keys: no file or folder given");
  lh_zsock_zap z;
  memset(&z, 0, sizeof z);
  int rc = load_allowed(&z, allowed, err);
  if (rc == 0 && z.n_keys == 0)
    rc = lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s: no key in it (every peer would be refused)", allowed);
  if (keys) *keys = z.n_keys;
  free(z.keys);
  return rc;
}

int lh_zsock_zap_start(void *ctx, const char *allowed, lh_zsock_zap **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "zap: out is NULL");
  *out = NULL;
  if (!ctx) return lh_errbuf_set(err, LH_EINVAL, "zap: no ZeroMQ context");
  int has_list = allowed && *allowed;
  lh_zsock_zap *z = calloc(1, sizeof *z);
  if (!z) return lh_errbuf_set(err, LH_ENOMEM, "zap: out of memory");
  z->ctx = ctx;
  int rc = has_list ? load_allowed(z, allowed, err) : 0;
  if (rc == 0 && has_list && z->n_keys == 0)
    rc = lh_errbuf_set(err, LH_ECONFIG, "allowed keys %s: no key in it (every peer would be refused)", allowed);
  lh_zsock_opts o = {.linger_ms = LH_ZSOCK_LINGER_NONE, .max_message_bytes = 4096};
  if (rc == 0 && !(z->sock = lh_zsock_open(ctx, ZMQ_REP, &o, "ZAP handler", err))) rc = err ? err->code : LH_EZMQ;
  if (rc == 0 && zmq_bind(z->sock, LH_ZSOCK_ZAP_ENDPOINT) != 0)
    rc = lh_errbuf_set(err, LH_EZMQ, "zap: cannot bind %s: %s (one handler per context)", LH_ZSOCK_ZAP_ENDPOINT,
                       zmq_strerror(zmq_errno()));
  if (rc == 0 && pthread_create(&z->thread, NULL, zap_thread, z) != 0)
    rc = lh_errbuf_set(err, LH_ESYS, "zap: cannot start its thread");
  if (rc) {
    if (z->sock) zmq_close(z->sock);
    free(z->keys);
    free(z);
    return rc;
  }
  LH_INFO("zap", "ZAP handler started domain=%s allowed_keys=%zu source=%s", LH_ZSOCK_ZAP_DOMAIN, z->n_keys,
          has_list ? allowed : "(none: no CURVE peer)");
  *out = z;
  return 0;
}

int lh_zsock_zap_cap_peers(lh_zsock_zap *z, void *s, const char *domain, int max_peers, const char *what,
                           lh_errbuf *err) {
  if (!z || !s || !domain || !*domain || max_peers < 1)
    return lh_errbuf_set(err, LH_EINVAL, "zap: a capped socket needs a socket, a domain and max_peers >= 1");
  if (strlen(domain) >= sizeof ((zap_cap *)0)->domain || !strcmp(domain, LH_ZSOCK_ZAP_DOMAIN))
    return lh_errbuf_set(err, LH_EINVAL, "zap: domain '%s' cannot name a capped socket", domain);
  if (z->cap || atomic_load(&z->handed))
    return lh_errbuf_set(err, LH_EINVAL, "zap: this handler caps a socket already");
  zap_cap *c = calloc(1, sizeof *c);
  if (!c) return lh_errbuf_set(err, LH_ENOMEM, "zap: out of memory");
  snprintf(c->domain, sizeof c->domain, "%s", domain);
  snprintf(c->what, sizeof c->what, "%s", what ? what : "socket");
  c->max_peers = max_peers;
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://longhaul.zap-monitor.%p", (void *)c);
  int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED;
  int rc = zmq_socket_monitor(s, ep, events);
  if (rc == 0) {
    lh_zsock_opts o = {.linger_ms = LH_ZSOCK_LINGER_NONE};
    c->monitor = lh_zsock_open(z->ctx, ZMQ_PAIR, &o, "ZAP monitor", err);
    /* libzmq drops a monitor event its pipe has no room for, and a lost
     * close would hold a place for good: no high-water mark on this end
     * makes the inproc pipe unbounded (the thread drains it at once). */
    int unbounded = 0;
    if (!c->monitor) rc = -1;
    else if (zmq_setsockopt(c->monitor, ZMQ_RCVHWM, &unbounded, sizeof unbounded) != 0 ||
             zmq_connect(c->monitor, ep) != 0)
      rc = lh_errbuf_set(err, LH_EZMQ, "zap: cannot connect the monitor of %s: %s", c->what,
                         zmq_strerror(zmq_errno()));
  } else {
    rc = lh_errbuf_set(err, LH_EZMQ, "zap: cannot monitor %s: %s", c->what, zmq_strerror(zmq_errno()));
  }
  if (rc) {
    cap_free(c);
    return rc < 0 && err ? err->code : rc;
  }
  atomic_store(&z->handed, c);
  LH_INFO("zap", "peers capped socket=%s domain=%s max_peers=%d", c->what, c->domain, max_peers);
  return 0;
}

uint64_t lh_zsock_zap_cap_refused(const lh_zsock_zap *z) {
  return z ? atomic_load(&((lh_zsock_zap *)z)->cap_refused) : 0;
}

int lh_zsock_zap_open_peers(const lh_zsock_zap *z) {
  return z ? atomic_load(&((lh_zsock_zap *)z)->open_peers) : 0;
}

uint64_t lh_zsock_zap_accepted(const lh_zsock_zap *z) { return z ? atomic_load(&((lh_zsock_zap *)z)->accepted) : 0; }
uint64_t lh_zsock_zap_refused(const lh_zsock_zap *z) { return z ? atomic_load(&((lh_zsock_zap *)z)->refused) : 0; }
size_t lh_zsock_zap_keys(const lh_zsock_zap *z) { return z ? z->n_keys : 0; }

void lh_zsock_zap_stop(lh_zsock_zap *z) {
  if (!z) return;
  atomic_store(&z->stop, 1);
  pthread_join(z->thread, NULL);
  LH_INFO("zap", "ZAP handler stopped accepted=%llu refused=%llu", (unsigned long long)atomic_load(&z->accepted),
          (unsigned long long)atomic_load(&z->refused));
  free(z->keys);
  free(z);
}

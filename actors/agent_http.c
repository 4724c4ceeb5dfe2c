/* actors: the agent endpoint's HTTP server (docs/agents.md), on
 * libmicrohttpd's own thread.
 *
 * Every request is read whole (at most max_body_bytes, past which it gets
 * 413 without being kept), parsed with cJSON and checked before anything
 * reaches the table: a bad field is a 400 naming it. A turn waits for its
 * answer with its connection suspended, so the server thread goes on with
 * every other client; a slow client costs its own connection only, which
 * the server drops after 30 s without a byte, and one that has not sent a
 * whole request REQUEST_DEADLINE_S after its connection or its last answer
 * (a client that trickles a byte now and then) is cut by the sweeper
 * thread. Beyond loopback a bearer token from a key file is required. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/agent.h"

#define IDLE_TIMEOUT_S 30u
#define REQUEST_DEADLINE_S 30 /* no sooner than the idle timeout: a keep-alive client between requests is not cut earlier */
#define EXTRA_CONNECTIONS 1024u /* past agent_max_episodes: clients between requests, refused ones */

/* A connection as the sweeper sees it (the socket context of
 * MHD_OPTION_NOTIFY_CONNECTION), in the server's list under the sweeper's
 * lock. fd is our own dup of the connection's socket: libmicrohttpd closes
 * its descriptor before it says the connection closed, and a shutdown()
 * through a number closed meanwhile could hit a socket opened since. */
typedef struct conn_clock {
  int fd, waiting, cut;
  int64_t since_ms;  /* its connection or its last answer */
  struct conn_clock *prev, *next;
} conn_clock;

typedef struct {
  pthread_mutex_t mu;
  pthread_t thread;
  int running, stop;
  conn_clock *head;
} sweeper;

static int64_t clock_ms(void) { return lh_now_ns() / 1000000; }

typedef struct {
  lh_str body;
  int too_big, suspended;
  lh_agent_wait wait;
} request;

/* The connection's clock: waiting (for the runner: no deadline) or not,
 * restarted at each answer. */
static void clock_set(lh_actors_agent *a, struct MHD_Connection *c, int waiting) {
  const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  sweeper *s = a->sweeper;
  conn_clock *k = info ? info->socket_context : NULL;
  if (!k || !s) return;
  pthread_mutex_lock(&s->mu);
  k->waiting = waiting;
  if (!waiting) k->since_ms = clock_ms();
  pthread_mutex_unlock(&s->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  sweeper *s = ((lh_actors_agent *)cls)->sweeper;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_clock *k = calloc(1, sizeof *k);
    if (!k || !info || (k->fd = dup(info->connect_fd)) < 0) {  /* no clock: the idle timeout alone */
      free(k);
      return;
    }
    k->since_ms = clock_ms();
    pthread_mutex_lock(&s->mu);
    k->next = s->head;
    if (s->head) s->head->prev = k;
    s->head = k;
    pthread_mutex_unlock(&s->mu);
    *socket_context = k;
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
    conn_clock *k = *socket_context;
    pthread_mutex_lock(&s->mu);
    if (k->prev) k->prev->next = k->next;
    else s->head = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&s->mu);
    close(k->fd);
    free(k);
    *socket_context = NULL;
  }
}

/* Cuts each connection past its deadline: shutdown() makes the server's
 * thread see it end and close it as any other. */
static void *sweep(void *arg) {
  sweeper *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    int64_t now = clock_ms();
    for (conn_clock *k = s->head; k; k = k->next)
      if (!k->waiting && !k->cut && now - k->since_ms > REQUEST_DEADLINE_S * 1000) {
        k->cut = 1;
        shutdown(k->fd, SHUT_RDWR);
      }
    pthread_mutex_unlock(&s->mu);
    usleep(250 * 1000);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, const char *json) {
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result send_error(lh_actors_agent *a, struct MHD_Connection *c, int status, const char *msg) {
  if (a) lh_agent_table_refused(a);
  char *s = lh_agent_error_json(status, msg);
  enum MHD_Result ok = send_json(c, status, s ? s : "{}");
  cJSON_free(s);
  return ok;
}

/* The fields a request may carry: anything else is refused by name, so
 * that a parameter the actor would not honour is never silently dropped. */
static const char *unknown_field(const cJSON *root, const char *const *known) {
  for (const cJSON *f = root->child; f; f = f->next) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++) ok = f->string && strcmp(f->string, *k) == 0;
    if (!ok) return f->string ? f->string : "";
  }
  return NULL;
}

static int read_same(const cJSON *root, const char *key, double actor, lh_errbuf *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || fabs(v->valuedouble - actor) > 1e-6)
    return lh_errbuf_set(err, 400, "%s is the actor's, %g: the learner trains at it, so a request may not change it",
                         key, actor);
  return 0;
}

/* The sampling parameters both endpoints share. */
static int read_sampling(lh_actors_agent *a, const cJSON *root, lh_agent_request *q, lh_errbuf *err) {
  int rc = read_same(root, "temperature", a->cfg.temperature, err);  /* statuses are positive: no LH_TRY */
  if (!rc) rc = read_same(root, "top_p", a->cfg.top_p, err);
  if (rc) return rc;
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "n");
  q->n = 1;
  if (n && !cJSON_IsNull(n)) {
    /* n members of a group: each an episode of its own, answered together */
    if (!cJSON_IsNumber(n) || (n->valuedouble != 1 && n->valuedouble != a->cfg.group_size))
      return lh_errbuf_set(err, 400, "n must be 1 or %u (the actor's group_size): n = %u opens a whole group",
                           a->cfg.group_size, a->cfg.group_size);
    q->n = (uint32_t)n->valuedouble;
    if (a->cfg.rows && q->n > a->cfg.rows)
      return lh_errbuf_set(err, 400, "n = %u is past the actor's batch (%u rows): a request's members play at once",
                           q->n, a->cfg.rows);
  }
  const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
  if (stream && !cJSON_IsFalse(stream) && !cJSON_IsNull(stream))
    return lh_errbuf_set(err, 400, "stream is not supported: a turn is answered whole");
  const char *keys[2] = {"max_tokens", "max_completion_tokens"};
  for (int i = 0; i < 2; i++) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
    if (!m || cJSON_IsNull(m)) continue;
    if (!cJSON_IsNumber(m) || m->valuedouble < 1 || m->valuedouble != floor(m->valuedouble) ||
        (a->cfg.max_tokens && m->valuedouble > a->cfg.max_tokens))
      return lh_errbuf_set(err, 400, "%s must be a whole number in 1..%u (the actor's max_context)", keys[i],
                           a->cfg.max_tokens ? a->cfg.max_tokens : UINT32_MAX);
    q->max_tokens = (uint32_t)m->valuedouble;
  }
  const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
  if (cJSON_IsString(stop)) {
    q->stop[q->n_stop++] = stop->valuestring;
  } else if (cJSON_IsArray(stop)) {
    for (const cJSON *s = stop->child; s; s = s->next) {
      if (!cJSON_IsString(s) || q->n_stop == LH_AGENT_MAX_STOP)
        return lh_errbuf_set(err, 400, "stop: at most %d strings", LH_AGENT_MAX_STOP);
      q->stop[q->n_stop++] = s->valuestring;
    }
  } else if (stop && !cJSON_IsNull(stop)) {
    return lh_errbuf_set(err, 400, "stop must be a string or an array of strings");
  }
  for (uint32_t i = 0; i < q->n_stop; i++) {
    size_t k = strlen(q->stop[i]);
    if (k < 1 || k > LH_AGENT_STOP_BYTES)
      return lh_errbuf_set(err, 400, "stop: each string 1..%d bytes", LH_AGENT_STOP_BYTES);
  }
  return 0;
}

/* The episode's, task's and role's names: headers first, then metadata. */
static int read_names(struct MHD_Connection *c, const cJSON *root, lh_agent_request *q, lh_errbuf *err) {
  q->episode = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Longhaul-Episode");
  q->task = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Longhaul-Task");
  q->role = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Longhaul-Role");
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
  if (md && !cJSON_IsNull(md)) {
    if (!cJSON_IsObject(md)) return lh_errbuf_set(err, 400, "metadata must be an object of strings");
    for (const cJSON *f = md->child; f; f = f->next)
      if (!cJSON_IsString(f)) return lh_errbuf_set(err, 400, "metadata.%.40s must be a string", f->string);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(md, "episode"), *task = cJSON_GetObjectItemCaseSensitive(md, "task");
    if (!q->episode && ep) q->episode = ep->valuestring;
    if (!q->task && task) q->task = task->valuestring;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(md, "role");
    if (!q->role && role) q->role = role->valuestring;
  }
  return 0;
}

static const char *const CHAT_FIELDS[] = {"model", "messages", "temperature", "top_p", "max_tokens",
                                          "max_completion_tokens", "stop", "n", "stream", "metadata", "user", NULL};
static const char *const COMPLETION_FIELDS[] = {"model", "prompt", "temperature", "top_p", "max_tokens", "stop",
                                                "n", "stream", "metadata", "user", NULL};

/* Whether a JSON text holds a NUL character (a raw byte or the escape
 * \u0000): cJSON's strings end at it, so the rest of a field would be
 * dropped without a word. An escaped backslash is skipped whole. */
static int holds_nul(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!s[i]) return 1;
    if (s[i] != '\\' || i + 1 >= n) continue;
    if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
    i++;
  }
  return 0;
}

static enum MHD_Result turn(lh_actors_agent *a, struct MHD_Connection *c, request *rq, lh_agent_kind kind) {
  lh_errbuf err = {0};
  if (holds_nul(rq->body.data, rq->body.len))
    return send_error(a, c, 400, "the body holds a NUL character (\\u0000), which no field may");
  cJSON *root = cJSON_ParseWithLength(rq->body.data ? rq->body.data : "", rq->body.len);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return send_error(a, c, 400, "the body is not a JSON object");
  }
  lh_agent_request q = {.kind = kind};
  lh_agent_messages m = {0};
  int status = 0;
  const char *bad = unknown_field(root, kind == LH_AGENT_CHAT ? CHAT_FIELDS : COMPLETION_FIELDS);
  if (bad) status = lh_errbuf_set(&err, 400, "unknown field '%.40s'", bad);
  if (!status) status = read_sampling(a, root, &q, &err);
  if (!status) status = read_names(c, root, &q, &err);
  if (!status && kind == LH_AGENT_CHAT) {
    if (lh_agent_messages_read(cJSON_GetObjectItemCaseSensitive(root, "messages"), &m, &err) < 0) status = 400;
    q.msgs = &m;
  } else if (!status) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!cJSON_IsString(p) || !*p->valuestring) status = lh_errbuf_set(&err, 400, "prompt must be a non-empty string");
    else q.prompt = p->valuestring, q.prompt_bytes = strlen(p->valuestring);
  }
  if (status) {
    lh_agent_messages_free(&m);
    cJSON_Delete(root);
    return send_error(a, c, status, err.msg);
  }
  /* Suspended before the table has it: the runner may answer at once, and
   * a resume must never come before its suspend. */
  rq->suspended = 1;
  clock_set(a, c, 1);  /* the runner's time is no client's slowness */
  MHD_suspend_connection(c);
  status = lh_agent_table_turn(a, &q, &rq->wait, &err);
  lh_agent_messages_free(&m);
  cJSON_Delete(root);
  if (status) {  /* refused (the table counted it): answered on the resume */
    char *s = lh_agent_error_json(status, err.msg);
    pthread_mutex_lock(a->mu);
    rq->wait.status = s ? status : 500;
    lh_str_clear(&rq->wait.body);
    if (lh_str_puts(&rq->wait.body, s ? s : "{}") < 0) rq->wait.status = 500;
    pthread_mutex_unlock(a->mu);
    cJSON_free(s);
    MHD_resume_connection(c);
  }
  return MHD_YES;
}

/* POST /v1/episodes/{id}/reward or /end. */
static enum MHD_Result end_episode(lh_actors_agent *a, struct MHD_Connection *c, request *rq, const char *id,
                                   int rewarded) {
  lh_errbuf err = {0};
  lh_actors_agent_end end = {.rewarded = rewarded};
  if (holds_nul(rq->body.data, rq->body.len))  /* a term's name would be cut at it */
    return send_error(a, c, 400, "the body holds a NUL character (\\u0000), which no field may");
  cJSON *root = rq->body.len ? cJSON_ParseWithLength(rq->body.data, rq->body.len) : cJSON_CreateObject();
  int status = cJSON_IsObject(root) ? 0 : lh_errbuf_set(&err, 400, "the body is not a JSON object");
  static const char *const REWARD_FIELDS[] = {"reward", "terms", "roles", NULL}, *const END_FIELDS[] = {NULL};
  const char *bad = status ? NULL : unknown_field(root, rewarded ? REWARD_FIELDS : END_FIELDS);
  if (bad) status = lh_errbuf_set(&err, 400, "unknown field '%.40s'", bad);
  if (!status && rewarded) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "reward"), *terms = cJSON_GetObjectItemCaseSensitive(root, "terms");
    if (!cJSON_IsNumber(r) || !isfinite(r->valuedouble) || fabs(r->valuedouble) > 1e6)
      status = lh_errbuf_set(&err, 400, "reward must be a finite number within 1e6");
    else end.reward = (float)r->valuedouble;
    if (!status && terms && !cJSON_IsObject(terms)) status = lh_errbuf_set(&err, 400, "terms must be an object");
    for (const cJSON *t = terms ? terms->child : NULL; !status && t; t = t->next) {
      if (end.n_terms == LH_AGENT_MAX_TERMS || !t->string || !*t->string || strlen(t->string) >= sizeof end.names[0] ||
          !cJSON_IsNumber(t) || !isfinite(t->valuedouble))
        status = lh_errbuf_set(&err, 400, "terms: at most %d names of 1..%zu bytes, each a finite number",
                               LH_AGENT_MAX_TERMS, sizeof end.names[0] - 1);
      else {
        snprintf(end.names[end.n_terms], sizeof end.names[0], "%s", t->string);
        end.values[end.n_terms++] = (float)t->valuedouble;
      }
    }
    const cJSON *roles = cJSON_GetObjectItemCaseSensitive(root, "roles");  /* a reward of its own per role */
    if (!status && roles && !cJSON_IsObject(roles)) status = lh_errbuf_set(&err, 400, "roles must be an object");
    for (const cJSON *r = roles ? roles->child : NULL; !status && r; r = r->next) {
      if (end.n_roles == LH_AGENT_MAX_ROLES || !r->string || !*r->string ||
          strlen(r->string) > LH_AGENT_ROLE_BYTES || !cJSON_IsNumber(r) || !isfinite(r->valuedouble) ||
          fabs(r->valuedouble) > 1e6)
        status = lh_errbuf_set(&err, 400, "roles: at most %d role names of 1..%d bytes, each a finite reward within "
                               "1e6", LH_AGENT_MAX_ROLES, LH_AGENT_ROLE_BYTES);
      else {
        snprintf(end.roles[end.n_roles], sizeof end.roles[0], "%s", r->string);
        end.role_rewards[end.n_roles++] = (float)r->valuedouble;
      }
    }
  }
  cJSON_Delete(root);
  if (status) return send_error(a, c, status, err.msg);
  status = lh_agent_table_end(a, id, &end, &err);
  if (status != 200) return send_error(NULL, c, status, err.msg);
  return send_json(c, 200, rewarded ? "{\"ended\":true,\"rewarded\":true}" : "{\"ended\":true,\"rewarded\":false}");
}

/* Constant-time: the token's bytes are not told by the answer's timing. */
static int token_ok(const lh_actors_agent *a, struct MHD_Connection *c) {
  if (!a->token[0]) return 1;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h || strncmp(h, "Bearer ", 7) != 0) return 0;
  h += 7;
  size_t n = strlen(h), m = strlen(a->token);
  unsigned diff = (unsigned)(n ^ m);
  for (size_t i = 0; i < m; i++) diff |= (unsigned)(unsigned char)a->token[i] ^ (unsigned)(unsigned char)(i < n ? h[i] : 0);
  return diff == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_bytes, void **con_cls) {
  (void)version;
  lh_actors_agent *a = cls;
  request *rq = *con_cls;
  if (!rq) {
    if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
    rq->wait.conn = c;
    *con_cls = rq;
    return MHD_YES;
  }
  if (rq->suspended) {  /* resumed: the table answered */
    pthread_mutex_lock(a->mu);
    int status = rq->wait.status;
    char *body = rq->wait.body.data ? strdup(rq->wait.body.data) : NULL;
    rq->suspended = 0;
    pthread_mutex_unlock(a->mu);
    enum MHD_Result ok = send_json(c, status ? status : 500, body ? body : "{}");
    free(body);
    return ok;
  }
  if (*upload_bytes) {
    if (!rq->too_big && rq->body.len + *upload_bytes > a->cfg.max_body_bytes) {
      rq->too_big = 1;
      lh_str_free(&rq->body);
    }
    if (!rq->too_big && lh_str_append(&rq->body, upload, *upload_bytes) < 0) rq->too_big = 1;
    *upload_bytes = 0;
    return MHD_YES;
  }
  if (!token_ok(a, c)) return send_error(a, c, 401, "a bearer token is required (Authorization: Bearer ...)");
  if (rq->too_big) {
    char msg[96];
    snprintf(msg, sizeof msg, "the body is past %llu bytes ([actor] agent_max_body_bytes)",
             (unsigned long long)a->cfg.max_body_bytes);
    return send_error(a, c, 413, msg);
  }
  int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
  if (strcmp(url, "/v1/models") == 0) {
    if (!get) return send_error(a, c, 405, "GET /v1/models");
    return send_json(c, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"longhaul\",\"object\":\"model\",\"created\":0,"
                             "\"owned_by\":\"longhaul\"}]}");
  }
  if (strcmp(url, "/v1/chat/completions") == 0)
    return post ? turn(a, c, rq, LH_AGENT_CHAT) : send_error(a, c, 405, "POST /v1/chat/completions");
  if (strcmp(url, "/v1/completions") == 0)
    return post ? turn(a, c, rq, LH_AGENT_COMPLETION) : send_error(a, c, 405, "POST /v1/completions");
  static const char prefix[] = "/v1/episodes/";
  if (strncmp(url, prefix, sizeof prefix - 1) == 0) {
    const char *id = url + sizeof prefix - 1, *slash = strrchr(id, '/');
    char name[LH_AGENT_ID_BYTES + 2];
    size_t len = slash ? (size_t)(slash - id) : 0;
    if (slash && len && len <= LH_AGENT_ID_BYTES && (!strcmp(slash, "/reward") || !strcmp(slash, "/end"))) {
      if (!post) return send_error(a, c, 405, "POST /v1/episodes/{id}/reward or /end");
      memcpy(name, id, len);
      name[len] = 0;
      return end_episode(a, c, rq, name, strcmp(slash, "/reward") == 0);
    }
  }
  return send_error(a, c, 404, "no such endpoint: /v1/chat/completions, /v1/completions, /v1/models, "
                               "/v1/episodes/{id}/reward, /v1/episodes/{id}/end");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
  (void)why;
  clock_set(cls, c, 0);  /* the next request's deadline counts from here */
  request *rq = *con_cls;
  if (!rq) return;
  lh_str_free(&rq->body);
  lh_str_free(&rq->wait.body);
  free(rq);
  *con_cls = NULL;
}

static void resume(void *conn) { MHD_resume_connection(conn); }

/* host:port, host an IPv4 address or localhost. */
static int parse_address(const char *s, struct sockaddr_in *sa, int *loopback, lh_errbuf *err) {
  const char *colon = strrchr(s, ':');
  char host[64];
  if (!colon || (size_t)(colon - s) >= sizeof host)
    return lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_address = '%.80s': give host:port", s);
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = 0;
  if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  if (!*(colon + 1) || *end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
    return lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_address = '%.80s': an IPv4 host (or localhost) and a port "
                         "in 0..65535", s);
  sa->sin_port = htons((uint16_t)port);
  *loopback = (ntohl(sa->sin_addr.s_addr) >> 24) == 127;
  return 0;
}

static int read_token(lh_actors_agent *a, lh_errbuf *err) {
  FILE *f = fopen(a->cfg.key_file, "r");
  if (!f) return lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_key_file %.200s: %s", a->cfg.key_file, strerror(errno));
  size_t n = fread(a->token, 1, sizeof a->token - 1, f);
  fclose(f);
  a->token[n] = 0;
  while (n && (a->token[n - 1] == '\n' || a->token[n - 1] == '\r' || a->token[n - 1] == ' ')) a->token[--n] = 0;
  if (n < 16 || strchr(a->token, '\n'))
    return lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_key_file %.200s: one token of 16..255 bytes on one line",
                         a->cfg.key_file);
  return 0;
}

int lh_actors_agent_new(const lh_actors_agent_config *cfg, lh_actors_agent **out, lh_errbuf *err) {
  *out = NULL;
  if (!cfg || !cfg->address || cfg->max_episodes < 1 || cfg->group_size < 1)
    return lh_errbuf_set(err, LH_EINVAL, "agent: no address, or max_episodes or group_size 0");
  lh_actors_agent *a = calloc(1, sizeof *a);
  if (!a) return lh_errbuf_set(err, LH_ENOMEM, "agent: out of memory");
  a->cfg = *cfg;
  a->wake_fd = -1;
  snprintf(a->address, sizeof a->address, "%s", cfg->address);
  a->cfg.address = a->address;
  a->cfg.key_file = NULL;
  struct sockaddr_in sa;
  int loopback = 0, rc = parse_address(cfg->address, &sa, &loopback, err);
  if (rc == 0 && cfg->key_file && *cfg->key_file) {
    a->cfg.key_file = cfg->key_file;
    rc = read_token(a, err);
  }
  if (rc == 0 && !loopback && !a->token[0])
    rc = lh_errbuf_set(err, LH_ECONFIG, "[actor] agent_address = %s is beyond loopback: give agent_key_file (a bearer "
                       "token the agents send)", cfg->address);
  if (rc == 0) rc = lh_agent_table_init(a, err);
  if (rc == 0 && (a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
    rc = lh_errbuf_set(err, LH_EIO, "agent: eventfd: %s", strerror(errno));
  sweeper *s = rc == 0 ? calloc(1, sizeof *s) : NULL;
  if (rc == 0 && !s) rc = lh_errbuf_set(err, LH_ENOMEM, "agent: out of memory");
  if (rc == 0) {
    pthread_mutex_init(&s->mu, NULL);
    a->sweeper = s;
    if (pthread_create(&s->thread, NULL, sweep, s) != 0) rc = lh_errbuf_set(err, LH_EIO, "agent: no sweeper thread");
    else s->running = 1;
  }
  if (rc == 0) {
    a->resume = resume;
    a->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, ntohs(sa.sin_port), NULL,
                                 NULL, handle, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_episodes + EXTRA_CONNECTIONS),
                                 MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, (void *)a,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, (void *)a, MHD_OPTION_END);
    if (!a->daemon) rc = lh_errbuf_set(err, LH_EIO, "agent: cannot serve on %s (in use?)", cfg->address);
  }
  if (rc == 0) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->daemon, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info ? info->port : ntohs(sa.sin_port);
    LH_INFO("agent", "serving address=%s port=%u max_episodes=%u template=%s", cfg->address, (unsigned)a->port,
            cfg->max_episodes, LH_AGENT_TEMPLATE);
    *out = a;
    return 0;
  }
  lh_actors_agent_free(a);
  return rc;
}

void lh_actors_agent_free(lh_actors_agent *a) {
  if (!a) return;
  if (a->daemon) {
    lh_agent_table_drain(a, 503, "the actor is stopping");
    MHD_stop_daemon(a->daemon);  /* closes every connection: their clocks go */
  }
  sweeper *s = a->sweeper;
  if (s) {
    if (s->running) {
      pthread_mutex_lock(&s->mu);
      s->stop = 1;
      pthread_mutex_unlock(&s->mu);
      pthread_join(s->thread, NULL);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
  }
  lh_agent_table_free(a);
  if (a->wake_fd >= 0) close(a->wake_fd);
  memset(a->token, 0, sizeof a->token);
  free(a);
}

uint16_t lh_actors_agent_port(const lh_actors_agent *a) { return a ? a->port : 0; }
int lh_actors_agent_wake_fd(const lh_actors_agent *a) { return a ? a->wake_fd : -1; }

void lh_actors_agent_clear_wake(lh_actors_agent *a) {
  uint64_t v;
  if (a && a->wake_fd >= 0 && read(a->wake_fd, &v, sizeof v) < 0) {}  /* EAGAIN: nothing came */
}

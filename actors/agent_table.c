/* actors: the agent endpoint's episodes, between the server's thread and
 * the runner's (docs/agents.md).
 *
 * An episode is a slot of a fixed table (cfg.max_episodes: the server's
 * memory per episode is bounded, and so is their number). Its life:
 * QUEUED (the agent's first request waits for a row and for the credit
 * window), TURN (a row plays the turn; the request waits), WAITING (the
 * turn was answered; the next request, the reward or the end is the
 * agent's). A handle names a slot and its use, so a late call on a slot
 * reused by another episode finds nothing. Every function takes the one
 * lock; the runner's calls cost a slot lookup, never a scan, except take. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "actors/agent.h"

/* Ended episodes' names are remembered this many (8 bytes each), so a
 * late or retried request cannot open a second episode under one. */
#define ENDED_RING 65536

typedef enum { EP_FREE = 0, EP_QUEUED, EP_TURN, EP_WAITING } ep_state;

struct lh_agent_entry {
  ep_state state;
  uint64_t handle, name_hash;
  char id[LH_AGENT_ID_BYTES + 1];
  lh_agent_kind kind;
  uint64_t group_id, task_seed;
  int task;                   /* its slot in tasks (which holds its group while task_serial matches); -1: none */
  uint64_t task_serial;
  uint64_t hist;              /* chat: the messages' chained hash */
  uint32_t hist_n;            /* chat: how many messages it covers */
  XXH3_state_t *text_hash;    /* completions: the prompt and completions so far */
  uint64_t text_bytes;
  lh_str text;                /* the next turn's text for the runner */
  int obs, restart, turn_ready, end_ready;
  uint32_t max_tokens, prompt_tokens;
  char stop[LH_AGENT_MAX_STOP][LH_AGENT_STOP_BYTES + 1];
  uint32_t n_stop, turn;
  lh_actors_agent_end end;
  int64_t last_ms;
  lh_agent_wait *wait;
};

/* A task whose last group is not full yet: its next episode joins that
 * group, whether the members play at once or one after another. A slot
 * whose members have all ended may be taken by a new task when no slot is
 * free (the group it held stays short: its agent never opened the rest). */
struct lh_agent_task {
  uint64_t hash, serial;
  uint32_t members, open;
  int used;
};

static int64_t now_ms(void) { return lh_now_ns() / 1000000; }
static pthread_mutex_t *MU(lh_actors_agent *a) { return a->mu; }

static void wake(lh_actors_agent *a) {
  uint64_t one = 1;
  if (a->wake_fd >= 0 && write(a->wake_fd, &one, sizeof one) < 0) {}  /* full: already readable */
}

int lh_agent_table_init(lh_actors_agent *a, lh_errbuf *err) {
  a->mu = malloc(sizeof(pthread_mutex_t));
  a->entries = calloc(a->cfg.max_episodes, sizeof *a->entries);
  a->tasks = calloc(a->cfg.max_episodes, sizeof *a->tasks);
  a->ended = calloc(ENDED_RING, sizeof *a->ended);
  if (!a->mu || !a->entries || !a->tasks || !a->ended)
    return lh_errbuf_set(err, LH_ENOMEM, "agent: out of memory for %u episodes", a->cfg.max_episodes);
  pthread_mutex_init(a->mu, NULL);
  return 0;
}

static void entry_clear(struct lh_agent_entry *e) {
  lh_str_free(&e->text);
  if (e->text_hash) XXH3_freeState(e->text_hash);
  memset(e, 0, sizeof *e);
}

void lh_agent_table_free(lh_actors_agent *a) {
  if (a->entries)
    for (uint32_t i = 0; i < a->cfg.max_episodes; i++) entry_clear(&a->entries[i]);
  if (a->mu) pthread_mutex_destroy(a->mu);
  free(a->mu);
  free(a->entries);
  free(a->tasks);
  free(a->ended);
}

static uint64_t name_hash(const char *id) { return lh_hash64(id, strlen(id), 0x6167656e74ull); }

static struct lh_agent_entry *by_name(lh_actors_agent *a, const char *id) {
  uint64_t h = name_hash(id);
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *e = &a->entries[i];
    if (e->state != EP_FREE && e->name_hash == h && strcmp(e->id, id) == 0) return e;
  }
  return NULL;
}

static struct lh_agent_entry *by_handle(lh_actors_agent *a, uint64_t handle) {
  uint32_t i = (uint32_t)(handle & 0xffffffffu);
  if (i >= a->cfg.max_episodes) return NULL;
  struct lh_agent_entry *e = &a->entries[i];
  return e->state != EP_FREE && e->handle == handle ? e : NULL;
}

static int was_ended(const lh_actors_agent *a, const char *id) {
  uint64_t h = name_hash(id);
  for (uint32_t i = 0; i < ENDED_RING; i++)
    if (a->ended[i] == h) return 1;
  return 0;
}

/* Answers e's waiting request and lets its connection go on. */
static void answer(lh_actors_agent *a, struct lh_agent_entry *e, int status, const char *json) {
  lh_agent_wait *w = e->wait;
  if (!w) return;
  e->wait = NULL;
  lh_str_clear(&w->body);
  if (lh_str_puts(&w->body, json) < 0) status = 500;
  w->status = status;
  w->answered = 1;
  if (a->resume) a->resume(w->conn);
}

static void answer_error(lh_actors_agent *a, struct lh_agent_entry *e, int status, const char *msg) {
  char *s = lh_agent_error_json(status, msg);
  answer(a, e, status, s ? s : "{}");
  cJSON_free(s);
}

/* The slot goes free and its name is remembered as ended. */
static void retire(lh_actors_agent *a, struct lh_agent_entry *e) {
  a->ended[a->ended_at++ % ENDED_RING] = e->name_hash;
  if (e->task >= 0) {
    struct lh_agent_task *t = &a->tasks[e->task];
    int same = t->used && t->hash == e->task_seed && t->serial == e->task_serial;  /* not a slot reused since */
    if (same && t->open) t->open--;
  }
  entry_clear(e);
}

static int id_ok(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n < 1 || n > LH_AGENT_ID_BYTES) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == ':' || c == '-'))
      return 0;
  }
  return 1;
}

/* The group of a new episode of task (NULL: none): the k-th episode of a
 * task joins group k / group_size of it. */
static int assign_group(lh_actors_agent *a, struct lh_agent_entry *e, const char *task, lh_errbuf *err) {
  uint64_t salt = a->cfg.salt;
  e->task = -1;
  if (!task || !*task) {
    if (a->cfg.group_size > 1)
      return lh_errbuf_set(err, 400, "this actor forms groups of %u episodes of one task: name the task "
                           "(header X-Longhaul-Task or metadata.task) and open %u episodes of it",
                           a->cfg.group_size, a->cfg.group_size);
    e->task_seed = lh_hash64(&e->handle, sizeof e->handle, salt);
    e->group_id = lh_hash64(&e->task_seed, sizeof e->task_seed, salt ^ 0x67726f7570ull) | 1;
    return 0;
  }
  if (!id_ok(task)) return lh_errbuf_set(err, 400, "task: 1..%d bytes of [A-Za-z0-9._:-]", LH_AGENT_ID_BYTES);
  uint64_t h = lh_hash64(task, strlen(task), salt);
  struct lh_agent_task *t = NULL, *free_slot = NULL, *idle = NULL;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_task *s = &a->tasks[i];
    if (s->used && s->hash == h) t = s;
    else if (!s->used && !free_slot) free_slot = s;
    else if (s->used && !s->open && (!idle || s->serial < idle->serial)) idle = s;  /* the oldest idle */
  }
  if (!free_slot) free_slot = idle;
  if (!t) {
    /* A task whose last group filled (or a new one) opens a group whose
     * serial is the handle count, never used before for it. The table
     * holds no more tasks with an open group than it holds episodes. */
    if (!free_slot) return lh_errbuf_set(err, 429, "too many tasks with a group still open (%u)", a->cfg.max_episodes);
    t = free_slot;
    *t = (struct lh_agent_task){.hash = h, .serial = a->next_handle, .members = 0, .used = 1};
  }
  uint64_t key[2] = {h, t->serial};
  e->task_serial = t->serial;
  e->task_seed = h;
  e->group_id = lh_hash64(key, sizeof key, salt ^ 0x67726f7570ull) | 1;
  if (++t->members == a->cfg.group_size) {
    t->used = 0;  /* full: the next episode of the task opens a new group */
  } else {
    t->open++;  /* the open members of a group still short */
    e->task = (int)(t - a->tasks);
  }
  return 0;
}

static int set_params(struct lh_agent_entry *e, const lh_agent_request *q) {
  e->max_tokens = q->max_tokens;
  e->n_stop = q->n_stop;
  for (uint32_t i = 0; i < q->n_stop; i++) snprintf(e->stop[i], sizeof e->stop[i], "%s", q->stop[i]);
  return 0;
}

/* A follow-up turn of a chat episode: the new messages, or (rewritten
 * history) all of them. */
static int chat_follow(lh_actors_agent *a, struct lh_agent_entry *e, const lh_agent_messages *m) {
  uint64_t earlier = lh_agent_messages_hash(LH_AGENT_HISTORY_SEED, m, 0, e->hist_n);
  int ok = m->n > e->hist_n && earlier == e->hist;
  for (uint32_t i = e->hist_n; ok && i < m->n; i++) ok = strcmp(m->role[i], "assistant") != 0;
  e->restart = !ok;
  e->obs = ok;
  if (!ok) {
    a->rewrites++;
    LH_WARN("agent", "episode %s: the history differs from the tokens recorded (turn %u): the episode goes on "
            "from what the agent sent, its later tokens masked", e->id, e->turn);
  }
  uint32_t from = e->hist_n;
  e->hist = lh_agent_messages_hash(earlier, m, from, m->n);  /* all m->n: earlier covers min(from, m->n) */
  e->hist_n = m->n;
  return ok ? lh_agent_render(m, from, &e->text) : lh_agent_render_all(m, &e->text);
}

static int completion_follow(lh_actors_agent *a, struct lh_agent_entry *e, const char *p, size_t n) {
  int ok = n > e->text_bytes && XXH3_64bits(p, e->text_bytes) == XXH3_64bits_digest(e->text_hash);
  e->restart = !ok;
  e->obs = 0;
  lh_str_clear(&e->text);
  if (ok) {
    XXH3_64bits_update(e->text_hash, p + e->text_bytes, n - e->text_bytes);
    int rc = lh_str_append(&e->text, p + e->text_bytes, n - e->text_bytes);
    e->text_bytes = n;
    return rc < 0 ? LH_ENOMEM : 0;
  }
  a->rewrites++;
  LH_WARN("agent", "episode %s: the prompt does not extend the text recorded (turn %u): the episode goes on from "
          "it, its later tokens masked", e->id, e->turn);
  XXH3_64bits_reset(e->text_hash);
  XXH3_64bits_update(e->text_hash, p, n);
  e->text_bytes = n;
  return lh_str_puts(&e->text, "<bos>") < 0 || lh_str_append(&e->text, p, n) < 0 ? LH_ENOMEM : 0;
}

int lh_agent_table_turn(lh_actors_agent *a, const lh_agent_request *q, lh_agent_wait *w, lh_errbuf *err) {
  if (!id_ok(q->episode))
    return lh_errbuf_set(err, 400, "name the episode (header X-Longhaul-Episode or metadata.episode): 1..%d bytes "
                         "of [A-Za-z0-9._:-]", LH_AGENT_ID_BYTES);
  pthread_mutex_lock(MU(a));
  int status = 0;
  struct lh_agent_entry *e = a->stopping ? NULL : by_name(a, q->episode);
  if (a->stopping) {
    status = lh_errbuf_set(err, 503, "the actor is stopping");
  } else if (e) {
    if (e->kind != q->kind)
      status = lh_errbuf_set(err, 400, "episode %s was opened on the other endpoint (chat or completions)", e->id);
    else if (e->state != EP_WAITING || e->turn_ready || e->end_ready)
      status = lh_errbuf_set(err, 409, "episode %s has a turn in flight: send the next one after its answer", e->id);
    else {
      int rc = q->kind == LH_AGENT_CHAT ? chat_follow(a, e, q->msgs) : completion_follow(a, e, q->prompt, q->prompt_bytes);
      if (rc < 0) status = lh_errbuf_set(err, 500, "out of memory for the turn");
    }
  } else if (was_ended(a, q->episode)) {
    status = lh_errbuf_set(err, 409, "episode %s has ended", q->episode);
  } else {
    int history = 0;
    for (uint32_t i = 0; q->kind == LH_AGENT_CHAT && i < q->msgs->n; i++) history |= !strcmp(q->msgs->role[i], "assistant");
    uint32_t slot = UINT32_MAX, used = 0;
    for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
      if (a->entries[i].state != EP_FREE) used++;
      else if (slot == UINT32_MAX) slot = i;
    }
    if (history)
      status = lh_errbuf_set(err, 404, "unknown episode %s (its messages hold an assistant turn this actor did not "
                             "play)", q->episode);
    else if (slot == UINT32_MAX)
      status = lh_errbuf_set(err, 429, "too many open episodes (%u, [actor] agent_max_episodes): end some first", used);
    else {
      e = &a->entries[slot];
      memset(e, 0, sizeof *e);
      e->handle = (++a->next_handle << 32) | slot;
      e->kind = q->kind;
      snprintf(e->id, sizeof e->id, "%s", q->episode);
      e->name_hash = name_hash(e->id);
      int rc = assign_group(a, e, q->task, err);
      if (rc) {
        status = rc;
        memset(e, 0, sizeof *e);
        e = NULL;
      } else {
        e->state = EP_QUEUED;
        if (q->kind == LH_AGENT_CHAT) {
          e->hist = lh_agent_messages_hash(LH_AGENT_HISTORY_SEED, q->msgs, 0, q->msgs->n);
          e->hist_n = q->msgs->n;
          rc = lh_agent_render(q->msgs, 0, &e->text);
        } else {
          e->text_hash = XXH3_createState();
          if (!e->text_hash) rc = LH_ENOMEM;
          else {
            XXH3_64bits_reset(e->text_hash);
            XXH3_64bits_update(e->text_hash, q->prompt, q->prompt_bytes);
            e->text_bytes = q->prompt_bytes;
            rc = lh_str_append(&e->text, q->prompt, q->prompt_bytes) < 0 ? LH_ENOMEM : 0;
          }
        }
        if (rc < 0) {
          entry_clear(e);
          e = NULL;
          status = lh_errbuf_set(err, 500, "out of memory for the episode");
        } else if (a->cfg.max_tokens && e->text.len + 1 >= a->cfg.max_tokens) {
          /* <bos> and a byte a token: it leaves the policy no room */
          status = lh_errbuf_set(err, 400, "the first prompt is %zu tokens, and the actor's max_context is %u",
                                 e->text.len + 1, a->cfg.max_tokens);
          entry_clear(e);
          e = NULL;
        }
      }
    }
  }
  if (!status && e) {
    set_params(e, q);
    e->turn_ready = 1;
    e->last_ms = now_ms();
    e->wait = w;
    w->answered = 0;
    wake(a);
  }
  if (status) a->refused++;
  pthread_mutex_unlock(MU(a));
  return status;
}

int lh_agent_table_end(lh_actors_agent *a, const char *episode, const lh_actors_agent_end *end, lh_errbuf *err) {
  pthread_mutex_lock(MU(a));
  int status = 200;
  struct lh_agent_entry *e = id_ok(episode) ? by_name(a, episode) : NULL;
  if (!e)
    status = was_ended(a, episode) ? lh_errbuf_set(err, 409, "episode %.64s has ended", episode)
                                   : lh_errbuf_set(err, 404, "unknown episode %.64s", episode);
  else if (e->state != EP_WAITING || e->turn_ready || e->end_ready)
    status = lh_errbuf_set(err, 409, "episode %s has a turn in flight: end it after the turn's answer", e->id);
  else {
    e->end = *end;
    e->end_ready = 1;
    e->last_ms = now_ms();
    wake(a);
  }
  if (status != 200) a->refused++;
  pthread_mutex_unlock(MU(a));
  return status;
}

void lh_agent_table_drain(lh_actors_agent *a, int status, const char *msg) {
  pthread_mutex_lock(MU(a));
  a->stopping = 1;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++)
    if (a->entries[i].wait) answer_error(a, &a->entries[i], status, msg);
  pthread_mutex_unlock(MU(a));
}

void lh_agent_table_refused(lh_actors_agent *a) {
  pthread_mutex_lock(MU(a));
  a->refused++;
  pthread_mutex_unlock(MU(a));
}

static void fill_turn(struct lh_agent_entry *e, lh_actors_agent_turn *t) {
  *t = (lh_actors_agent_turn){.handle = e->handle,
                              .group_id = e->group_id,
                              .task_seed = e->task_seed,
                              .text = e->text.data ? e->text.data : "",
                              .bytes = e->text.len,
                              .observation = e->obs,
                              .restart = e->restart,
                              .max_tokens = e->max_tokens,
                              .n_stop = e->n_stop};
  e->turn_ready = 0;
  e->state = EP_TURN;
  e->turn++;
}

lh_actors_agent_event lh_actors_agent_take(lh_actors_agent *a, lh_actors_agent_turn *t) {
  pthread_mutex_lock(MU(a));
  struct lh_agent_entry *first = NULL;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *e = &a->entries[i];
    if (e->state == EP_QUEUED && (!first || e->handle < first->handle)) first = e;  /* oldest first */
  }
  if (first) fill_turn(first, t);
  pthread_mutex_unlock(MU(a));
  return first ? LH_AGENT_TURN : LH_AGENT_NONE;
}

lh_actors_agent_event lh_actors_agent_poll(lh_actors_agent *a, uint64_t handle, lh_actors_agent_turn *t,
                                           lh_actors_agent_end *end) {
  pthread_mutex_lock(MU(a));
  lh_actors_agent_event ev = LH_AGENT_NONE;
  struct lh_agent_entry *e = by_handle(a, handle);
  if (!e) {
    ev = LH_AGENT_GONE;
  } else if (e->state == EP_WAITING && e->end_ready) {
    *end = e->end;
    retire(a, e);
    ev = LH_AGENT_END;
  } else if (e->state == EP_WAITING && e->turn_ready) {
    fill_turn(e, t);
    ev = LH_AGENT_TURN;
  } else if (e->state == EP_WAITING && now_ms() - e->last_ms > (int64_t)a->cfg.timeout_ms) {
    LH_WARN("agent", "episode %s: no request for %llu ms ([actor] agent_timeout_ms): aborted", e->id,
            (unsigned long long)a->cfg.timeout_ms);
    retire(a, e);
    ev = LH_AGENT_GONE;
  }
  pthread_mutex_unlock(MU(a));
  return ev;
}

size_t lh_actors_agent_stop_at(lh_actors_agent *a, uint64_t handle, const char *text, size_t n) {
  pthread_mutex_lock(MU(a));
  size_t at = 0;
  struct lh_agent_entry *e = by_handle(a, handle);
  for (uint32_t i = 0; e && i < e->n_stop && !at; i++) {
    size_t k = strlen(e->stop[i]);
    if (k && k <= n && memcmp(text + n - k, e->stop[i], k) == 0) at = k;
  }
  pthread_mutex_unlock(MU(a));
  return at;
}

/* The answer's JSON in OpenAI's shape, with longhaul's own fields under
 * "longhaul". */
static char *answer_json(const struct lh_agent_entry *e, const char *text, size_t bytes, const char *finish,
                         uint32_t prompt_tokens, uint32_t completion_tokens, uint64_t version) {
  char id[128], *content = malloc(bytes + 1);
  if (!content) return NULL;
  memcpy(content, text, bytes);
  content[bytes] = 0;
  snprintf(id, sizeof id, "%s-%s-%u", e->kind == LH_AGENT_CHAT ? "chatcmpl" : "cmpl", e->id, e->turn);
  cJSON *root = cJSON_CreateObject(), *choices = cJSON_AddArrayToObject(root, "choices");
  cJSON_AddStringToObject(root, "id", id);
  cJSON_AddStringToObject(root, "object", e->kind == LH_AGENT_CHAT ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(root, "created", (double)time(NULL));
  cJSON_AddStringToObject(root, "model", "longhaul");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(choices, c);
  cJSON_AddNumberToObject(c, "index", 0);
  if (e->kind == LH_AGENT_CHAT) {
    cJSON *msg = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "content", content);
  } else {
    cJSON_AddStringToObject(c, "text", content);
    cJSON_AddNullToObject(c, "logprobs");
  }
  cJSON_AddStringToObject(c, "finish_reason", finish);
  cJSON *u = cJSON_AddObjectToObject(root, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", (double)prompt_tokens + completion_tokens);
  cJSON *lh = cJSON_AddObjectToObject(root, "longhaul");
  cJSON_AddStringToObject(lh, "episode", e->id);
  cJSON_AddNumberToObject(lh, "turn", e->turn);
  cJSON_AddNumberToObject(lh, "version", (double)version);
  cJSON_AddStringToObject(lh, "template", LH_AGENT_TEMPLATE);
  cJSON_AddBoolToObject(lh, "rewritten", e->restart);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  free(content);
  return s;
}

void lh_actors_agent_reply(lh_actors_agent *a, uint64_t handle, const char *text, size_t bytes, const char *finish,
                           uint32_t prompt_tokens, uint32_t completion_tokens, uint64_t version) {
  pthread_mutex_lock(MU(a));
  struct lh_agent_entry *e = by_handle(a, handle);
  lh_str clean = {0};
  if (e && e->state == EP_TURN && lh_agent_utf8_clean(text, bytes, &clean) < 0) {
    answer_error(a, e, 500, "out of memory for the answer");
    e->state = EP_WAITING;
    e = NULL;
  }
  if (e && e->state == EP_TURN) {
    text = clean.data;
    bytes = clean.len;
    if (e->kind == LH_AGENT_CHAT) {
      e->hist = lh_agent_history_extend(e->hist, text, bytes);
      e->hist_n++;
    } else {
      XXH3_64bits_update(e->text_hash, text, bytes);
      e->text_bytes += bytes;
    }
    char *json = answer_json(e, text, bytes, finish, prompt_tokens, completion_tokens, version);
    if (json) answer(a, e, 200, json);
    else answer_error(a, e, 500, "out of memory for the answer");
    cJSON_free(json);
    e->state = EP_WAITING;
    e->last_ms = now_ms();
    a->turns++;
  }
  lh_str_free(&clean);
  pthread_mutex_unlock(MU(a));
}

void lh_actors_agent_close(lh_actors_agent *a, uint64_t handle, int status, const char *why) {
  pthread_mutex_lock(MU(a));
  struct lh_agent_entry *e = by_handle(a, handle);
  if (e) {
    char msg[LH_ERRMSG_BYTES + 64];
    snprintf(msg, sizeof msg, "episode %s has ended: %s", e->id, why ? why : "ended by the actor");
    if (e->wait) answer_error(a, e, status, msg);
    retire(a, e);
  }
  pthread_mutex_unlock(MU(a));
}

void lh_actors_agent_counts(const lh_actors_agent *a, uint64_t *rewrites, uint64_t *refused, uint64_t *turns) {
  pthread_mutex_lock(((lh_actors_agent *)a)->mu);
  if (rewrites) *rewrites = a->rewrites;
  if (refused) *refused = a->refused;
  if (turns) *turns = a->turns;
  pthread_mutex_unlock(((lh_actors_agent *)a)->mu);
}

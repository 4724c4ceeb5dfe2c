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
 * lock; the runner's calls cost a slot lookup, never a scan, except take.
 *
 * A slot is one sample: an episode, or one role of an episode that holds
 * several (its own tokens, its own row; the episode's reward ends them
 * all). A request of n > 1 opens n members of a group at once, named
 * EPISODE.0 .. EPISODE.n-1, and is answered once each has its first
 * turn (a fan). */
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
  char role[LH_AGENT_ROLE_BYTES + 1];
  uint64_t base_group;        /* the group before the role is mixed in: a sibling role's starts from it */
  struct lh_agent_fan *fan;   /* the n > 1 request it was opened by, until that is answered */
  uint32_t fan_at;
  int fan_done;               /* its first answer is in the fan */
};

/* A request of n > 1 that waits for its members' first answers. */
struct lh_agent_fan {
  lh_agent_wait *wait;
  lh_agent_kind kind;
  char episode[LH_AGENT_ID_BYTES + 1];
  uint32_t n, left;
  int status;                 /* 200, or the first refusal's */
  char *error;                /* that refusal's JSON */
  uint32_t prompt_tokens, completion_tokens;
  uint64_t version;
  uint64_t *handles;          /* the members' */
  cJSON **choices;            /* member i's choice, NULL until answered */
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

static void fan_free(struct lh_agent_fan *f);

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
  for (uint32_t i = 0; a->entries && i < a->cfg.max_episodes; i++) {
    struct lh_agent_fan *f = a->entries[i].fan;  /* each member still to answer holds one count */
    if (f && !a->entries[i].fan_done && --f->left == 0) fan_free(f);
    entry_clear(&a->entries[i]);
  }
  if (a->mu) pthread_mutex_destroy(a->mu);
  free(a->mu);
  free(a->entries);
  free(a->tasks);
  free(a->ended);
}

/* A sample's name: its episode's and its role's ("" none). An episode
 * that ended by its reward or end is remembered by episode_hash too, so
 * that no role opens under it later. */
static uint64_t name_hash(const char *id, const char *role) {
  return lh_hash64(role, strlen(role), lh_hash64(id, strlen(id), 0x6167656e74ull));
}
static uint64_t episode_hash(const char *id) { return lh_hash64(id, strlen(id), 0x657069736f6465ull); }

static struct lh_agent_entry *by_name(lh_actors_agent *a, const char *id, const char *role) {
  uint64_t h = name_hash(id, role);
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *e = &a->entries[i];
    if (e->state != EP_FREE && e->name_hash == h && strcmp(e->id, id) == 0 && strcmp(e->role, role) == 0) return e;
  }
  return NULL;
}

/* An open sample of episode id, any role, and how many it has. */
static struct lh_agent_entry *sibling(lh_actors_agent *a, const char *id, uint32_t *count) {
  struct lh_agent_entry *found = NULL;
  *count = 0;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *e = &a->entries[i];
    if (e->state != EP_FREE && strcmp(e->id, id) == 0) found = e, ++*count;
  }
  return found;
}

static struct lh_agent_entry *by_handle(lh_actors_agent *a, uint64_t handle) {
  uint32_t i = (uint32_t)(handle & 0xffffffffu);
  if (i >= a->cfg.max_episodes) return NULL;
  struct lh_agent_entry *e = &a->entries[i];
  return e->state != EP_FREE && e->handle == handle ? e : NULL;
}

static int was_ended(const lh_actors_agent *a, const char *id, const char *role) {
  uint64_t h = name_hash(id, role), g = episode_hash(id);
  for (uint32_t i = 0; i < ENDED_RING; i++)
    if (a->ended[i] == h || a->ended[i] == g) return 1;
  return 0;
}

static void resume_with(lh_actors_agent *a, lh_agent_wait *w, int status, const char *json) {
  lh_str_clear(&w->body);
  if (lh_str_puts(&w->body, json) < 0) status = 500;
  w->status = status;
  w->answered = 1;
  if (a->resume) a->resume(w->conn);
}

static void fan_free(struct lh_agent_fan *f) {
  for (uint32_t i = 0; f->choices && i < f->n; i++) cJSON_Delete(f->choices[i]);
  free(f->choices);
  free(f->handles);
  free(f->error);
  free(f);
}

static char *fan_json(struct lh_agent_fan *f);

/* Every member has its first answer: the request gets all the choices,
 * or the first refusal; after a refusal the members that did answer end
 * unrewarded (the agent never saw their turns). */
static void fan_finish(lh_actors_agent *a, struct lh_agent_fan *f) {
  char *s = f->status == 200 ? fan_json(f) : NULL, *oom = NULL;
  if (f->status == 200 && !s) f->status = 500, oom = lh_agent_error_json(500, "out of memory for the answer");
  for (uint32_t i = 0; i < f->n; i++) {
    struct lh_agent_entry *e = by_handle(a, f->handles[i]);
    if (!e) continue;
    e->fan = NULL;
    e->fan_done = 0;
    e->last_ms = now_ms();  /* the agent's clock starts now that it has the answer */
    if (f->status != 200 && e->state == EP_WAITING && !e->turn_ready && !e->end_ready) {
      memset(&e->end, 0, sizeof e->end);
      e->end_ready = 1;
      wake(a);
    }
  }
  const char *body = s ? s : oom ? oom : f->error ? f->error : "{}";
  if (f->wait) resume_with(a, f->wait, f->status, body);
  cJSON_free(s);
  cJSON_free(oom);
  fan_free(f);
}

/* Member e's first answer: its choice, or a refusal (status, json). */
static void fan_take(lh_actors_agent *a, struct lh_agent_entry *e, int status, const char *json, cJSON *choice) {
  struct lh_agent_fan *f = e->fan;
  e->fan_done = 1;
  if (status == 200 && choice) {
    f->choices[e->fan_at] = choice;
  } else {
    cJSON_Delete(choice);
    if (f->status == 200) {
      f->status = status == 200 ? 500 : status;
      f->error = json ? strdup(json) : NULL;
    }
  }
  if (--f->left == 0) fan_finish(a, f);
}

/* Answers e's waiting request and lets its connection go on. */
static void answer(lh_actors_agent *a, struct lh_agent_entry *e, int status, const char *json) {
  if (e->fan && !e->fan_done) return fan_take(a, e, status, json, NULL);
  lh_agent_wait *w = e->wait;
  if (!w) return;
  e->wait = NULL;
  resume_with(a, w, status, json);
}

static void answer_error(lh_actors_agent *a, struct lh_agent_entry *e, int status, const char *msg) {
  char *s = lh_agent_error_json(status, msg);
  answer(a, e, status, s ? s : "{}");
  cJSON_free(s);
}

/* The slot goes free (its group's open count too). */
static void release(lh_actors_agent *a, struct lh_agent_entry *e) {
  if (e->task >= 0) {
    struct lh_agent_task *t = &a->tasks[e->task];
    int same = t->used && t->hash == e->task_seed && t->serial == e->task_serial;  /* not a slot reused since */
    if (same && t->open) t->open--;
  }
  entry_clear(e);
}

/* The slot goes free and its name is remembered as ended. */
static void retire(lh_actors_agent *a, struct lh_agent_entry *e) {
  a->ended[a->ended_at++ % ENDED_RING] = e->name_hash;
  release(a, e);
}

static int name_ok(const char *s, size_t most) {
  size_t n = s ? strlen(s) : 0;
  if (n < 1 || n > most) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == ':' || c == '-'))
      return 0;
  }
  return 1;
}

static int id_ok(const char *s) { return name_ok(s, LH_AGENT_ID_BYTES); }

/* The group of a new episode of task (NULL: none): the k-th episode of a
 * task joins group k / group_size of it. */
static int assign_group(lh_actors_agent *a, struct lh_agent_entry *e, const char *task, lh_errbuf *err) {
  uint64_t salt = a->cfg.salt;
  e->task = -1;
  if (!task || !*task) {
    if (a->cfg.group_size > 1)
      return lh_errbuf_set(err, 400, "this actor forms groups of %u episodes of one task: name the task "
                           "(header X-Longhaul-Task or metadata.task) and open %u episodes of it, or open "
                           "them in one request with n = %u",
                           a->cfg.group_size, a->cfg.group_size, a->cfg.group_size);
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

/* Opens slot as sample (name, q's role) of request q, in the group of
 * task, or in that of like (an open sibling role, or a fan's group): 0,
 * or the status of a refusal (the slot left free). */
static int open_entry(lh_actors_agent *a, uint32_t slot, const lh_agent_request *q, const char *name, const char *task,
                      const struct lh_agent_entry *like, lh_errbuf *err) {
  struct lh_agent_entry *e = &a->entries[slot];
  memset(e, 0, sizeof *e);
  e->handle = (++a->next_handle << 32) | slot;
  e->kind = q->kind;
  snprintf(e->id, sizeof e->id, "%s", name);
  snprintf(e->role, sizeof e->role, "%s", q->role ? q->role : "");
  e->name_hash = name_hash(e->id, e->role);
  int rc = 0;
  if (like) {  /* another role of an open episode (its group, counted once), or a fan's member */
    e->task = -1;
    e->task_seed = like->task_seed;
    e->base_group = like->base_group;
  } else if ((rc = assign_group(a, e, task, err)) != 0) {
    memset(e, 0, sizeof *e);
    return rc;
  } else {
    e->base_group = e->group_id;
  }
  /* A role's samples form groups of their own: each is trained against
   * the same role of the other members. */
  e->group_id = e->role[0] ? lh_hash64(e->role, strlen(e->role), e->base_group ^ a->cfg.salt) | 1 : e->base_group;
  e->state = EP_QUEUED;
  if (q->kind == LH_AGENT_CHAT) {
    e->hist = lh_agent_messages_hash(LH_AGENT_HISTORY_SEED, q->msgs, 0, q->msgs->n);
    e->hist_n = q->msgs->n;
    rc = lh_agent_render(q->msgs, 0, &e->text);
  } else if (!(e->text_hash = XXH3_createState())) {
    rc = LH_ENOMEM;
  } else {
    XXH3_64bits_reset(e->text_hash);
    XXH3_64bits_update(e->text_hash, q->prompt, q->prompt_bytes);
    e->text_bytes = q->prompt_bytes;
    rc = lh_str_append(&e->text, q->prompt, q->prompt_bytes) < 0 ? LH_ENOMEM : 0;
  }
  int status = 0;
  if (rc < 0)
    status = lh_errbuf_set(err, 500, "out of memory for the episode");
  else if (a->cfg.max_tokens && e->text.len + 1 >= a->cfg.max_tokens)  /* <bos> and a byte a token: no room */
    status = lh_errbuf_set(err, 400, "the first prompt is %zu tokens, and the actor's max_context is %u",
                           e->text.len + 1, a->cfg.max_tokens);
  if (status) {
    release(a, e);
    return status;
  }
  set_params(e, q);
  e->turn_ready = 1;
  e->last_ms = now_ms();
  return 0;
}

static int holds_history(const lh_agent_request *q) {
  for (uint32_t i = 0; q->kind == LH_AGENT_CHAT && i < q->msgs->n; i++)
    if (!strcmp(q->msgs->role[i], "assistant")) return 1;
  return 0;
}

/* The free slots, up to want of them, into slots; how many there are. */
static uint32_t free_slots(const lh_actors_agent *a, uint32_t *slots, uint32_t want, uint32_t *used) {
  uint32_t n = 0;
  *used = 0;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    if (a->entries[i].state != EP_FREE) ++*used;
    else if (n < want) slots[n++] = i;
  }
  return n;
}

/* A request of n > 1 (n = group_size): members EPISODE.0 .. EPISODE.n-1,
 * a group of their own of the task (the episode's name when the request
 * names none; a group of single requests of the task is not joined, so
 * that the n are one group), answered together. */
static int open_fan(lh_actors_agent *a, const lh_agent_request *q, lh_agent_wait *w, lh_errbuf *err) {
  uint32_t n = q->n, count, used;
  char name[LH_AGENT_ID_BYTES + 16];
  if (sibling(a, q->episode, &count))
    return lh_errbuf_set(err, 400, "episode %s is open: n > 1 opens new episodes (%s.0 .. %s.%u), an open one "
                         "takes its turns with n = 1", q->episode, q->episode, q->episode, n - 1);
  snprintf(name, sizeof name, "%s.%u", q->episode, n - 1);
  if (strlen(name) > LH_AGENT_ID_BYTES)
    return lh_errbuf_set(err, 400, "with n = %u the members are named %s.0 .. %s: a name is at most %d bytes", n,
                         q->episode, name, LH_AGENT_ID_BYTES);
  for (uint32_t i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s.%u", q->episode, i);
    if (sibling(a, name, &count) || was_ended(a, name, q->role ? q->role : ""))
      return lh_errbuf_set(err, 409, "episode %s (member %u of n = %u) is open or has ended", name, i, n);
  }
  if (holds_history(q))
    return lh_errbuf_set(err, 400, "n > 1 opens new episodes: their messages cannot hold an assistant turn");
  const char *task = q->task && *q->task ? q->task : q->episode;
  if (!id_ok(task)) return lh_errbuf_set(err, 400, "task: 1..%d bytes of [A-Za-z0-9._:-]", LH_AGENT_ID_BYTES);
  /* the members' group: the task's seed, a group id no other group has */
  struct lh_agent_entry group = {.task_seed = lh_hash64(task, strlen(task), a->cfg.salt)};
  uint64_t key[3] = {group.task_seed, a->next_handle, 0x66616eull};
  group.base_group = lh_hash64(key, sizeof key, a->cfg.salt ^ 0x67726f7570ull) | 1;
  uint32_t *slots = calloc(n, sizeof *slots);
  struct lh_agent_fan *f = calloc(1, sizeof *f);
  if (f) f->handles = calloc(n, sizeof *f->handles), f->choices = calloc(n, sizeof *f->choices);
  int status = 0;
  if (!slots || !f || !f->handles || !f->choices)
    status = lh_errbuf_set(err, 500, "out of memory for %u episodes", n);
  else if (free_slots(a, slots, n, &used) < n)
    status = lh_errbuf_set(err, 429, "too many open episodes (%u, [actor] agent_max_episodes) for %u more: end some "
                           "first", used, n);
  uint32_t opened = 0;
  for (; !status && opened < n; opened++) {
    snprintf(name, sizeof name, "%s.%u", q->episode, opened);
    if ((status = open_entry(a, slots[opened], q, name, task, &group, err)) != 0) break;
    struct lh_agent_entry *e = &a->entries[slots[opened]];
    e->fan = f;
    e->fan_at = opened;
    f->handles[opened] = e->handle;
  }
  if (status) {  /* nothing opened stays: the agent may send it again */
    for (uint32_t i = 0; i < opened; i++) release(a, &a->entries[slots[i]]);
    if (f) fan_free(f);
  } else {
    *f = (struct lh_agent_fan){.wait = w, .kind = q->kind, .n = n, .left = n, .status = 200,
                               .handles = f->handles, .choices = f->choices};
    snprintf(f->episode, sizeof f->episode, "%s", q->episode);
    w->answered = 0;
    wake(a);
  }
  free(slots);
  return status;
}

int lh_agent_table_turn(lh_actors_agent *a, const lh_agent_request *q, lh_agent_wait *w, lh_errbuf *err) {
  if (!id_ok(q->episode))
    return lh_errbuf_set(err, 400, "name the episode (header X-Longhaul-Episode or metadata.episode): 1..%d bytes "
                         "of [A-Za-z0-9._:-]", LH_AGENT_ID_BYTES);
  const char *role = q->role ? q->role : "";
  if (*role && !name_ok(role, LH_AGENT_ROLE_BYTES))
    return lh_errbuf_set(err, 400, "role (header X-Longhaul-Role or metadata.role): 1..%d bytes of [A-Za-z0-9._:-]",
                         LH_AGENT_ROLE_BYTES);
  pthread_mutex_lock(MU(a));
  int status = 0;
  uint32_t roles = 0;
  struct lh_agent_entry *e = a->stopping || q->n > 1 ? NULL : by_name(a, q->episode, role);
  struct lh_agent_entry *sib = e || a->stopping || q->n > 1 ? NULL : sibling(a, q->episode, &roles);
  if (a->stopping) {
    status = lh_errbuf_set(err, 503, "the actor is stopping");
  } else if (q->n > 1) {
    status = open_fan(a, q, w, err);
  } else if (e) {
    if (e->kind != q->kind)
      status = lh_errbuf_set(err, 400, "episode %s was opened on the other endpoint (chat or completions)", e->id);
    else if (e->state != EP_WAITING || e->turn_ready || e->end_ready)
      status = lh_errbuf_set(err, 409, "episode %s has a turn in flight: send the next one after its answer", e->id);
    else {
      int rc = q->kind == LH_AGENT_CHAT ? chat_follow(a, e, q->msgs) : completion_follow(a, e, q->prompt, q->prompt_bytes);
      if (rc < 0) {
        status = lh_errbuf_set(err, 500, "out of memory for the turn");
      } else {
        set_params(e, q);
        e->turn_ready = 1;
        e->last_ms = now_ms();
      }
    }
  } else if (was_ended(a, q->episode, role)) {
    status = lh_errbuf_set(err, 409, "episode %s%s%s has ended", q->episode, *role ? " role " : "", role);
  } else if (sib && sib->kind != q->kind) {
    status = lh_errbuf_set(err, 400, "episode %s was opened on the other endpoint (chat or completions)", sib->id);
  } else if (roles >= LH_AGENT_MAX_ROLES) {
    status = lh_errbuf_set(err, 400, "episode %s holds %u roles, the most an episode may", q->episode, roles);
  } else if (holds_history(q)) {
    status = lh_errbuf_set(err, 404, "unknown episode %s%s%s (its messages hold an assistant turn this actor did not "
                           "play)", q->episode, *role ? " role " : "", role);
  } else {
    uint32_t slot = 0, used;
    if (free_slots(a, &slot, 1, &used) < 1)
      status = lh_errbuf_set(err, 429, "too many open episodes (%u, [actor] agent_max_episodes): end some first", used);
    else if ((status = open_entry(a, slot, q, q->episode, q->task, sib, err)) == 0)
      e = &a->entries[slot];
  }
  if (!status && e) {
    e->wait = w;
    w->answered = 0;
    wake(a);
  }
  if (status) a->refused++;
  pthread_mutex_unlock(MU(a));
  return status;
}

/* Ends every sample of the episode (its roles) with end, each role named
 * in end->roles with its own reward; none while one has a turn in
 * flight. */
int lh_agent_table_end(lh_actors_agent *a, const char *episode, const lh_actors_agent_end *end, lh_errbuf *err) {
  pthread_mutex_lock(MU(a));
  int status = 200;
  uint32_t count = 0;
  struct lh_agent_entry *e = id_ok(episode) ? sibling(a, episode, &count) : NULL;
  if (!e)
    status = was_ended(a, episode, "") ? lh_errbuf_set(err, 409, "episode %.64s has ended", episode)
                                       : lh_errbuf_set(err, 404, "unknown episode %.64s", episode);
  for (uint32_t i = 0; status == 200 && i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *s = &a->entries[i];
    if (s->state != EP_FREE && !strcmp(s->id, episode) && (s->state != EP_WAITING || s->turn_ready || s->end_ready))
      status = lh_errbuf_set(err, 409, "episode %s%s%s has a turn in flight: end it after the turn's answer", s->id,
                             s->role[0] ? " role " : "", s->role);
  }
  for (uint32_t r = 0; status == 200 && r < end->n_roles; r++)
    if (!by_name(a, episode, end->roles[r]))
      status = lh_errbuf_set(err, 400, "roles.%s: episode %s has no such role", end->roles[r], episode);
  for (uint32_t i = 0; status == 200 && i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *s = &a->entries[i];
    if (s->state == EP_FREE || strcmp(s->id, episode) != 0) continue;
    s->end = *end;
    for (uint32_t r = 0; r < end->n_roles; r++)
      if (!strcmp(end->roles[r], s->role)) s->end.reward = end->role_rewards[r];
    s->end_ready = 1;
    s->last_ms = now_ms();
  }
  if (status == 200) {
    a->ended[a->ended_at++ % ENDED_RING] = episode_hash(episode);  /* no role opens under it later */
    wake(a);
  } else {
    a->refused++;
  }
  pthread_mutex_unlock(MU(a));
  return status;
}

void lh_agent_table_drain(lh_actors_agent *a, int status, const char *msg) {
  pthread_mutex_lock(MU(a));
  a->stopping = 1;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    struct lh_agent_entry *e = &a->entries[i];
    if (e->wait || (e->fan && !e->fan_done)) answer_error(a, e, status, msg);
  }
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
  snprintf(t->role, sizeof t->role, "%s", e->role);
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

/* Whether another role of e's episode kept its agent busy within the
 * timeout: a role may wait while the others play. Its clock is moved
 * on, so that the scan comes once a timeout at most. */
static int episode_busy(lh_actors_agent *a, struct lh_agent_entry *e) {
  int64_t now = now_ms(), last = e->last_ms;
  for (uint32_t i = 0; i < a->cfg.max_episodes; i++) {
    const struct lh_agent_entry *s = &a->entries[i];
    if (s == e || s->state == EP_FREE || strcmp(s->id, e->id) != 0) continue;
    if (s->state != EP_WAITING || s->turn_ready || s->end_ready) last = now;
    else if (s->last_ms > last) last = s->last_ms;
  }
  e->last_ms = last;
  return now - last <= (int64_t)a->cfg.timeout_ms;
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
  } else if (e->state == EP_WAITING && !e->fan && now_ms() - e->last_ms > (int64_t)a->cfg.timeout_ms &&
             !episode_busy(a, e)) {  /* a member of a fan still waiting for the others: not the agent's silence */
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

/* longhaul's fields of e's turn: its episode, role, turn and version. */
static cJSON *turn_fields(const struct lh_agent_entry *e, uint64_t version) {
  cJSON *lh = cJSON_CreateObject();
  cJSON_AddStringToObject(lh, "episode", e->id);
  if (e->role[0]) cJSON_AddStringToObject(lh, "role", e->role);
  cJSON_AddNumberToObject(lh, "turn", e->turn);
  cJSON_AddNumberToObject(lh, "version", (double)version);
  cJSON_AddBoolToObject(lh, "rewritten", e->restart);
  return lh;
}

static char *answer_json(const struct lh_agent_entry *e, const char *text, size_t bytes, const char *finish,
                         uint32_t prompt_tokens, uint32_t completion_tokens, uint64_t version) {
  char id[LH_AGENT_ID_BYTES + 32];
  snprintf(id, sizeof id, "%s-%s-%u", e->kind == LH_AGENT_CHAT ? "chatcmpl" : "cmpl", e->id, e->turn);
  cJSON *choices = cJSON_CreateArray(), *c = lh_agent_choice_json(e->kind, text, bytes, finish, 0);
  if (!choices || !c) {
    cJSON_Delete(choices);
    cJSON_Delete(c);
    return NULL;
  }
  cJSON_AddItemToArray(choices, c);
  return lh_agent_response_json(e->kind, id, choices, prompt_tokens, completion_tokens, turn_fields(e, version));
}

/* A fan's answer: choice i is member i's first turn and names its
 * episode (longhaul.episode); longhaul.episodes lists them in order. */
static char *fan_json(struct lh_agent_fan *f) {
  char id[LH_AGENT_ID_BYTES + 32];
  snprintf(id, sizeof id, "%s-%s-1", f->kind == LH_AGENT_CHAT ? "chatcmpl" : "cmpl", f->episode);
  cJSON *choices = cJSON_CreateArray(), *lh = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(lh, "episodes");
  for (uint32_t i = 0; choices && names && i < f->n; i++) {
    cJSON *c = f->choices[i], *fields = cJSON_GetObjectItemCaseSensitive(c, "longhaul");
    cJSON *name = cJSON_GetObjectItemCaseSensitive(fields, "episode");
    cJSON_AddItemToArray(names, cJSON_CreateString(cJSON_IsString(name) ? name->valuestring : ""));
    f->choices[i] = NULL;  /* the array holds it now */
    cJSON_AddItemToArray(choices, c);
  }
  cJSON_AddStringToObject(lh, "episode", f->episode);
  cJSON_AddNumberToObject(lh, "version", (double)f->version);
  return lh_agent_response_json(f->kind, id, choices, f->prompt_tokens, f->completion_tokens, lh);
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
    if (e->fan && !e->fan_done) {  /* a member's first turn: its choice waits for the others' */
      cJSON *c = lh_agent_choice_json(e->kind, text, bytes, finish, e->fan_at);
      if (c) cJSON_AddItemToObject(c, "longhaul", turn_fields(e, version));
      struct lh_agent_fan *f = e->fan;
      if (prompt_tokens > f->prompt_tokens) f->prompt_tokens = prompt_tokens;
      f->completion_tokens += completion_tokens;
      if (version > f->version) f->version = version;
      if (c) fan_take(a, e, 200, NULL, c);
      else answer_error(a, e, 500, "out of memory for the answer");
    } else {
      char *json = answer_json(e, text, bytes, finish, prompt_tokens, completion_tokens, version);
      if (json) answer(a, e, 200, json);
      else answer_error(a, e, 500, "out of memory for the answer");
      cJSON_free(json);
    }
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
    if (e->wait || (e->fan && !e->fan_done)) answer_error(a, e, status, msg);
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

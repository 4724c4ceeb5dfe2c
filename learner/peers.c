/* learner: the ingest's peers: which connection speaks in which actor's
 * name, and the episodes each name may keep open (ARCHITECTURE.md §1, and
 * docs/learner.md "What gets in" and "Back-pressure"; learner/internal.h says what
 * each call promises).
 *
 * Names live in a fixed table, so that no flood of names or connections
 * grows memory: a new name past it replaces the one heard from least
 * lately. Open episodes live in a fixed hash table (open addressing,
 * linear probing, deletion by backward shift) keyed by episode id, mixed
 * with a seed drawn at start so that a peer cannot choose ids that pile up
 * in one probe run. A name's credit is what it may still open; the credits
 * handed out, the open episodes and the untrained backlog together stay
 * under the cap, and the grants go round the names below their share in
 * turn, so that one that opens and ends episodes as fast as it can takes
 * no more of what the trainer frees than any other name that asks. Credit
 * is a lease: left unused while another name is short of its share, it
 * comes back, so that a name that stopped cannot hold the room a batch
 * needs; what nobody below its share asks for goes to any name that does.
 * A name that keeps opening past its window is served last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

#define OPEN_SLOTS 32768u /* a power of two; at most half are used */
#define OPEN_MAX (OPEN_SLOTS / 2)
/* The most grants one call hands out: the rest waits for the next round,
 * so that a huge cap with groups of 1 cannot make one round long. */
#define GRANTS_PER_CALL 4096
/* Credit a name has not used (opened no episode with) for this long comes
 * back while another name is below its share: a name that stopped, or
 * whose episodes all run, must not hold the room a batch needs. */
#define CREDIT_LEASE_NS 2000000000ll

typedef struct {
  char name[LH_LEARNER_PEER_NAME_BYTES];
  uint64_t name_hash;
  uint8_t conn[LH_LEARNER_PEER_CONN_BYTES];
  size_t conn_bytes;
  char key[LH_LEARNER_PEER_KEY_BYTES];  /* the CURVE public key (Z85); "" without CURVE */
  uint64_t pid;                         /* the Hello's */
  int64_t seen_ns;                      /* its bound connection last spoke */
  int64_t used_ns;                      /* it last opened an episode, or was granted credit */
  int sated;                            /* its credit lapsed unused: no grants until it opens again */
  uint32_t told;                        /* the window its connection was last sent */
  uint64_t refused;                     /* new episodes held back past its window since refused_ns */
  int64_t refused_ns;
  int64_t open, credit;                 /* credit < 0: opened past its grants (the slack) */
} peer;

typedef struct {
  uint64_t episode;
  uint32_t peer;  /* index + 1; 0: the slot is free */
  int64_t seen_ns;
} open_slot;

struct lh_learner_peers {
  peer *peers;
  size_t n;
  open_slot *open;
  size_t n_open;
  uint64_t seed;
  int budgeted;
  int64_t cap, untrained;
  uint64_t group;
  size_t cursor;  /* where the next round of grants starts */
  lh_learner_peers_counts counts;
};

lh_learner_peers *lh_learner_peers_new(void) {
  lh_learner_peers *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->peers = calloc(LH_LEARNER_PEERS_MAX, sizeof *p->peers);
  p->open = calloc(OPEN_SLOTS, sizeof *p->open);
  if (!p->peers || !p->open) {
    lh_learner_peers_free(p);
    return NULL;
  }
  int64_t t = lh_now_ns();
  uint64_t salt[2] = {(uint64_t)t, (uint64_t)getpid()};
  p->seed = lh_hash64(salt, sizeof salt, (uint64_t)(uintptr_t)p);
  p->group = 1;
  return p;
}

void lh_learner_peers_free(lh_learner_peers *p) {
  if (!p) return;
  free(p->peers);
  free(p->open);
  free(p);
}

const lh_learner_peers_counts *lh_learner_peers_get_counts(const lh_learner_peers *p) {
  return p ? &p->counts : NULL;
}

/* Heard from lately: a name that counts for shares and keeps its credit. */
static int active(const peer *q, int64_t now_ns) { return now_ns - q->seen_ns < LH_LEARNER_PEER_ACTIVE_NS; }

/* More than a group of new episodes held back past its window within a
 * lease: the name ignores its window (an actor that reads its Acks is
 * held back at most its slack's worth, when the cap shrank under it). */
static int ignores_window(const peer *q, int64_t now_ns, uint64_t group) {
  return now_ns - q->refused_ns < CREDIT_LEASE_NS && q->refused > group;
}

/* ---- open episodes ---------------------------------------------------- */

static size_t slot_of(const lh_learner_peers *p, uint64_t episode) {
  return (size_t)(lh_hash64(&episode, sizeof episode, p->seed) & (OPEN_SLOTS - 1));
}

/* The slot holding episode, or the free slot where it would go. */
static size_t find_slot(const lh_learner_peers *p, uint64_t episode) {
  size_t i = slot_of(p, episode);
  while (p->open[i].peer && p->open[i].episode != episode) i = (i + 1) & (OPEN_SLOTS - 1);
  return i;
}

static void remove_slot(lh_learner_peers *p, size_t i) {
  peer *owner = &p->peers[p->open[i].peer - 1];
  owner->open--;
  p->n_open--;
  /* Backward shift: later members of the probe run move up, so lookups
   * never meet a hole before their entry. */
  size_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & (OPEN_SLOTS - 1);
    if (!p->open[j].peer) break;
    size_t home = slot_of(p, p->open[j].episode);
    /* j's entry may fill the hole when its home is not in (hole, j] */
    int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    p->open[hole] = p->open[j];
    hole = j;
  }
  memset(&p->open[hole], 0, sizeof p->open[hole]);
}

/* Removes the open episodes that keep(entry) refuses, in one pass over
 * the table (once a second, and when a name changes hands). A removal
 * moves later entries of its probe run up, into the slot just looked at
 * (looked at again) or, for a run that wraps past the table's end, into
 * slots already passed: those entries were looked at where they were. */
static void sweep_open(lh_learner_peers *p, int (*keep)(const open_slot *, const void *), const void *arg) {
  for (size_t i = 0; i < OPEN_SLOTS;) {
    if (p->open[i].peer && !keep(&p->open[i], arg)) {
      remove_slot(p, i);  /* an entry may have moved into i: look at it again */
      continue;
    }
    i++;
  }
}

static int keep_other_peer(const open_slot *s, const void *arg) { return s->peer != *(const uint32_t *)arg; }
static int keep_recent(const open_slot *s, const void *arg) { return s->seen_ns >= *(const int64_t *)arg; }

int lh_learner_peers_is_open(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns) {
  size_t i = find_slot(p, episode);
  if (!p->open[i].peer) return 0;
  if (p->open[i].peer == (uint32_t)index + 1) p->open[i].seen_ns = now_ns;
  return 1;
}

static int insert_open(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns) {
  if (p->n_open >= OPEN_MAX) return -1;
  size_t i = find_slot(p, episode);
  if (p->open[i].peer) return 0;
  p->open[i] = (open_slot){.episode = episode, .peer = (uint32_t)index + 1, .seen_ns = now_ns};
  p->n_open++;
  p->peers[index].open++;
  return 0;
}

int lh_learner_peers_may_open(const lh_learner_peers *p, int index) {
  return !p->budgeted || p->peers[index].credit > -(int64_t)p->group;
}

int lh_learner_peers_open(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns) {
  peer *q = &p->peers[index];
  /* One group of slack past the grants: an honest actor decides on the
   * window of the last Ack it read, which may predate the ends it just
   * sent. */
  if (!lh_learner_peers_may_open(p, index)) return 0;
  if (insert_open(p, index, episode, now_ns)) return -1;
  if (p->budgeted) q->credit--;
  q->used_ns = now_ns, q->sated = 0;
  return 1;
}

void lh_learner_peers_refused(lh_learner_peers *p, int index, int64_t now_ns) {
  if (!p || index < 0 || (size_t)index >= p->n) return;
  peer *q = &p->peers[index];
  if (now_ns - q->refused_ns >= CREDIT_LEASE_NS) q->refused_ns = now_ns, q->refused = 0;
  q->refused++;
}

int lh_learner_peers_ignores_window(const lh_learner_peers *p, int index, int64_t now_ns) {
  return p && index >= 0 && (size_t)index < p->n && ignores_window(&p->peers[index], now_ns, p->group);
}

int lh_learner_peers_adopt(lh_learner_peers *p, int index, uint64_t episode, int64_t now_ns) {
  return insert_open(p, index, episode, now_ns);
}

void lh_learner_peers_close(lh_learner_peers *p, uint64_t episode) {
  size_t i = find_slot(p, episode);
  if (p->open[i].peer) remove_slot(p, i);
}

void lh_learner_peers_expire(lh_learner_peers *p, int64_t idle_before_ns) {
  sweep_open(p, keep_recent, &idle_before_ns);
}

/* ---- names ------------------------------------------------------------ */

static uint64_t name_hash(const char *name) { return lh_hash64(name, strlen(name), 0x6e616d65ull); }

static int find_name(const lh_learner_peers *p, const char *name) {
  uint64_t h = name_hash(name);
  for (size_t i = 0; i < p->n; i++)
    if (p->peers[i].name_hash == h && !strcmp(p->peers[i].name, name)) return (int)i;
  return -1;
}

static int same_conn(const peer *q, const uint8_t *conn, size_t conn_bytes) {
  return q->conn_bytes == conn_bytes && !memcmp(q->conn, conn, conn_bytes);
}

static int find_conn(const lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes) {
  for (size_t i = 0; i < p->n; i++)
    if (same_conn(&p->peers[i], conn, conn_bytes)) return (int)i;
  return -1;
}

/* Forgets the open episodes of name index (their process is gone: the
 * store's idle sweep ends them as aborted). */
static void drop_open(lh_learner_peers *p, int index) {
  uint32_t tag = (uint32_t)index + 1;
  sweep_open(p, keep_other_peer, &tag);
}

static void take_conn(peer *q, const uint8_t *conn, size_t conn_bytes, const char *key) {
  memcpy(q->conn, conn, conn_bytes);
  q->conn_bytes = conn_bytes;
  snprintf(q->key, sizeof q->key, "%s", key ? key : "");
}

lh_learner_peer_verdict lh_learner_peers_hello(lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes,
                                               const char *name, const char *key, uint64_t pid, int64_t now_ns,
                                               int *index) {
  *index = -1;
  if (conn_bytes > LH_LEARNER_PEER_CONN_BYTES || strlen(name) >= LH_LEARNER_PEER_NAME_BYTES)
    return LH_PEER_OTHER_NAME;
  int mine = find_conn(p, conn, conn_bytes), i = find_name(p, name);
  /* One name a connection: a second name from it is another actor's. */
  if (mine >= 0 && mine != i) return LH_PEER_OTHER_NAME;
  if (i >= 0) {
    peer *q = &p->peers[i];
    if (!same_conn(q, conn, conn_bytes)) {
      /* Under CURVE the name stays with its key: a peer holding another
       * allowed key cannot take it. */
      if (q->key[0] && strcmp(q->key, key ? key : "")) return LH_PEER_OTHER_KEY;
      take_conn(q, conn, conn_bytes, key);
      p->counts.rebinds++;
      /* Another process under the name: its predecessor's episodes end
       * as aborted in the store and hold no window any more. */
      if (pid != q->pid) drop_open(p, i);
    }
    q->pid = pid, q->seen_ns = now_ns;
    *index = i;
    return LH_PEER_BOUND;
  }
  if (p->n < LH_LEARNER_PEERS_MAX) {
    i = (int)p->n++;
  } else {
    i = 0;
    for (size_t k = 1; k < p->n; k++)
      if (p->peers[k].seen_ns < p->peers[i].seen_ns) i = (int)k;
    drop_open(p, i);
    p->counts.evicted++;
  }
  peer *q = &p->peers[i];
  memset(q, 0, sizeof *q);
  snprintf(q->name, sizeof q->name, "%s", name);
  q->name_hash = name_hash(name);
  take_conn(q, conn, conn_bytes, key);
  q->pid = pid, q->seen_ns = now_ns;
  p->counts.bound++;
  *index = i;
  return LH_PEER_BOUND;
}

lh_learner_peer_verdict lh_learner_peers_check(lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes,
                                               const char *name, int64_t now_ns, int *index) {
  *index = -1;
  int i = find_name(p, name);
  if (i >= 0 && same_conn(&p->peers[i], conn, conn_bytes)) {
    p->peers[i].seen_ns = now_ns;
    *index = i;
    return LH_PEER_BOUND;
  }
  return find_conn(p, conn, conn_bytes) >= 0 ? LH_PEER_OTHER_NAME : LH_PEER_NO_HELLO;
}

const char *lh_learner_peers_name(const lh_learner_peers *p, int index) {
  return p && index >= 0 && (size_t)index < p->n ? p->peers[index].name : "";
}

size_t lh_learner_peers_count(const lh_learner_peers *p) { return p ? p->n : 0; }

const uint8_t *lh_learner_peers_conn(const lh_learner_peers *p, int index, size_t *conn_bytes) {
  if (!p || index < 0 || (size_t)index >= p->n) return NULL;
  *conn_bytes = p->peers[index].conn_bytes;
  return p->peers[index].conn;
}

void lh_learner_peers_told(lh_learner_peers *p, int index, uint32_t window) {
  if (p && index >= 0 && (size_t)index < p->n) p->peers[index].told = window;
}

int lh_learner_peers_window_grew(const lh_learner_peers *p, int index, int64_t now_ns) {
  if (!p || !p->budgeted || index < 0 || (size_t)index >= p->n || !active(&p->peers[index], now_ns)) return 0;
  return (uint64_t)lh_learner_peers_window(p, index) >= (uint64_t)p->peers[index].told + p->group;
}

/* ---- credit ----------------------------------------------------------- */

void lh_learner_peers_set_backlog(lh_learner_peers *p, int64_t cap, int64_t untrained, uint64_t group) {
  p->budgeted = 1;
  p->cap = cap, p->untrained = untrained, p->group = group ? group : 1;
}


void lh_learner_peers_grant(lh_learner_peers *p, uint64_t ends_since, int64_t now_ns) {
  if (!p->budgeted) return;
  int64_t g = (int64_t)p->group;
  size_t n_active = 0;
  int64_t open_active = 0;
  for (size_t i = 0; i < p->n; i++) {
    peer *q = &p->peers[i];
    /* A name gone quiet gives its credit back (and is forgiven its slack),
     * and its open episodes stop taking room: a stopped actor's group
     * must not hold a cap of one batch until the idle limit ends its
     * episodes (they are still taken when it wakes, past the cap by at
     * most its window). */
    if (!active(q, now_ns)) q->credit = 0;
    else n_active++, open_active += q->open;
  }
  /* A name's share of the cap, in whole groups, at least one group. */
  int64_t share = n_active ? p->cap / (int64_t)n_active / g * g : p->cap;
  if (share < g) share = g;
  /* While a name that asks for credit (not sated) is below its share,
   * credit above the share that others hold comes back (a name that came
   * when another held the whole cap gets its share as the trainer frees
   * room, not after the other spent all of it), and so does credit left
   * unused past its lease: its name is sated until it opens an episode
   * again. */
  int short_of_share = 0;
  for (size_t i = 0; i < p->n && !short_of_share; i++) {
    const peer *q = &p->peers[i];
    short_of_share = active(q, now_ns) && !q->sated && !ignores_window(q, now_ns, p->group) &&
                     q->open + q->credit < share;
  }
  int64_t held = 0, owed = 0;
  for (size_t i = 0; i < p->n; i++) {
    peer *q = &p->peers[i];
    int64_t over = q->open + q->credit - share;
    int lapsed = q->credit > 0 && now_ns - q->used_ns >= CREDIT_LEASE_NS;
    if (short_of_share && lapsed) over = q->credit, q->sated = 1;
    if (short_of_share && q->credit > 0 && over > 0) {
      int64_t take = q->credit < over ? q->credit : over;
      q->credit -= take;
      p->counts.reclaimed += (uint64_t)take;
    }
    if (q->credit > 0) held += q->credit;
    else owed -= q->credit;
  }
  /* What is free: the cap less the untrained backlog (with the ends stored
   * since it was counted), the active names' open episodes and the credit
   * held. The episodes a name opened on its slack are its own debt, repaid
   * from its next grants, not taken from the others' credit. */
  int64_t free_now = p->cap - p->untrained - (int64_t)ends_since - open_active - held + owed;
  /* Over the cap (it shrank, or the backlog grew from episodes nobody
   * was granted): credit comes back, from the name that holds most. */
  while (free_now < 0) {
    int most = -1;
    for (size_t i = 0; i < p->n; i++)
      if (p->peers[i].credit > 0 &&
          (most < 0 || p->peers[i].open + p->peers[i].credit > p->peers[most].open + p->peers[most].credit))
        most = (int)i;
    if (most < 0) break;
    int64_t take = p->peers[most].credit < -free_now ? p->peers[most].credit : -free_now;
    p->peers[most].credit -= take;
    free_now += take;
    p->counts.reclaimed += (uint64_t)take;
  }
  /* What is free goes a group at a time round the names that ask for it:
   * first those below their share, then (so that the room a batch needs
   * is never left idle) any of them; a name that ignores its window is
   * served last, below its share, from what the others leave. */
  for (int pass = 0; pass < 3; pass++)
    for (int k = 0; k < GRANTS_PER_CALL && n_active && free_now >= g; k++) {
      size_t i = 0;
      int found = 0;
      for (size_t step = 0; step < p->n && !found; step++) {
        i = (p->cursor + step) % p->n;
        const peer *q = &p->peers[i];
        int below = q->open + q->credit < share, ignores = ignores_window(q, now_ns, p->group);
        found = active(q, now_ns) && !q->sated && (pass == 2 ? ignores && below : !ignores && (pass || below));
      }
      if (!found) break;
      p->peers[i].credit += g;
      p->peers[i].used_ns = now_ns;
      free_now -= g;
      p->counts.granted += (uint64_t)g;
      p->cursor = (i + 1) % p->n;
    }
}

uint32_t lh_learner_peers_window(const lh_learner_peers *p, int index) {
  if (!p || index < 0 || (size_t)index >= p->n) return 0;
  const peer *q = &p->peers[index];
  /* A sated name is told its slack: one group, which it opens on when it
   * wants more again, and so asks for credit. */
  int64_t w = q->open + (q->sated && q->credit < (int64_t)p->group ? (int64_t)p->group : q->credit);
  return w <= 0 ? 0 : w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

int64_t lh_learner_peers_open_count(const lh_learner_peers *p, int index) {
  return p && index >= 0 && (size_t)index < p->n ? p->peers[index].open : 0;
}

int lh_learner_peers_of_conn(const lh_learner_peers *p, const uint8_t *conn, size_t conn_bytes) {
  return p ? find_conn(p, conn, conn_bytes) : -1;
}

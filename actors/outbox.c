/* actors: the outbox of sent, unacked messages.
 *
 * Entries live in a fixed array of max_messages slots, linked in order of
 * their last send; a hash table (open addressing, linear probing, deletion
 * by backward shift) finds a slot by msg_id. Because every send, first or
 * resend, moves its entry to the tail, the list stays ordered by last-send
 * time and the next message due is always at the head: O(1) per resend,
 * O(1) expected per ack. A message that is due now (never gone: its send
 * would have blocked; or marked by a reconnect) sits in a prefix of the
 * list that ends at due_tail, so that one whose send blocked goes again
 * first, in push order, instead of waiting a resend timeout. */
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"

#define NIL UINT32_MAX
#define OUTBOX_MAX_BACKOFF 4

typedef struct {
  uint64_t id;
  uint8_t *data;
  size_t n;
  int64_t sent_ms;
  int64_t pushed_ms;  /* the first send: an ack's latency counts from here */
  int64_t wait_ms;    /* due again this long after sent_ms (the timeout, backed off) */
  int went;           /* a send of it went out (a hand-out of it since is a resend) */
  int marked;         /* lh_actors_outbox_mark: counted in marked until it goes */
  uint32_t prev, next;
} slot;

struct lh_actors_outbox {
  size_t max_messages, max_bytes;
  int64_t timeout_ms;
  slot *slots;
  uint32_t *free_list;  /* stack of free slot indices */
  size_t n_free;
  uint32_t head, tail;  /* least and most recently sent */
  uint32_t due_tail;    /* the last of the due-now prefix (sent_ms INT64_MIN), or NIL */
  uint32_t handed;      /* the slot next_due handed out last, until a push or ack; or NIL */
  int handed_resend;    /* that hand-out counted as a resend */
  uint32_t *table;      /* slot index + 1; 0 is empty */
  size_t table_mask;
  size_t depth, bytes;
  size_t marked;      /* waiting messages marked (the link marks EpisodeEnds) */
  uint64_t resends;
  /* Backoff: while resends bring no ack (the learner is stopped or busy
   * beyond the timeout, the connection itself alive), each round waits
   * twice as long as the last, up to 2^OUTBOX_MAX_BACKOFF timeouts; an ack
   * brings it back. Over a live connection nothing is lost in flight, so
   * resending faster would only queue copies. */
  unsigned backoff;
  int resent_since_ack;
  int64_t last_bump_ms;
};

static size_t hash_id(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (size_t)x;
}

lh_actors_outbox *lh_actors_outbox_new(size_t max_messages, size_t max_bytes, int64_t resend_timeout_ms,
                         lh_errbuf *err) {
  if (max_messages < 1 || max_messages >= NIL || max_bytes < 1 || resend_timeout_ms < 1) {
    lh_errbuf_set(err, LH_EACTORS_OUTBOX_CONFIG,
                  "outbox: outbox_messages=%zu, outbox_bytes=%zu and resend_timeout_ms=%lld must all "
                  "be at least 1",
                  max_messages, max_bytes, (long long)resend_timeout_ms);
    return NULL;
  }
  size_t tsize = 16;
  while (tsize < 2 * max_messages) tsize *= 2;
  lh_actors_outbox *ob = calloc(1, sizeof *ob);
  if (ob) {
    ob->slots = calloc(max_messages, sizeof *ob->slots);
    ob->free_list = malloc(max_messages * sizeof *ob->free_list);
    ob->table = calloc(tsize, sizeof *ob->table);
  }
  if (!ob || !ob->slots || !ob->free_list || !ob->table) {
    lh_actors_outbox_free(ob);
    lh_errbuf_set(err, LH_ENOMEM, "outbox: out of memory for %zu messages", max_messages);
    return NULL;
  }
  ob->max_messages = max_messages;
  ob->max_bytes = max_bytes;
  ob->timeout_ms = resend_timeout_ms;
  for (size_t i = 0; i < max_messages; i++) ob->free_list[i] = (uint32_t)(max_messages - 1 - i);
  ob->n_free = max_messages;
  ob->head = ob->tail = ob->due_tail = ob->handed = NIL;
  ob->table_mask = tsize - 1;
  return ob;
}

void lh_actors_outbox_free(lh_actors_outbox *ob) {
  if (!ob) return;
  if (ob->slots)
    for (uint32_t i = ob->head; i != NIL; i = ob->slots[i].next) free(ob->slots[i].data);
  free(ob->slots);
  free(ob->free_list);
  free(ob->table);
  free(ob);
}

/* The table position holding id, or the empty position where it would go. */
static size_t find_pos(const lh_actors_outbox *ob, uint64_t id) {
  size_t p = hash_id(id) & ob->table_mask;
  while (ob->table[p] && ob->slots[ob->table[p] - 1].id != id) p = (p + 1) & ob->table_mask;
  return p;
}

static void table_delete(lh_actors_outbox *ob, size_t p) {
  /* Backward shift: move later entries of the probe run into the hole
   * when their home position does not lie cyclically in (hole, them]. */
  size_t hole = p, q = p;
  for (;;) {
    q = (q + 1) & ob->table_mask;
    if (!ob->table[q]) break;
    size_t home = hash_id(ob->slots[ob->table[q] - 1].id) & ob->table_mask;
    int stays = hole <= q ? (home > hole && home <= q) : (home > hole || home <= q);
    if (!stays) {
      ob->table[hole] = ob->table[q];
      hole = q;
    }
  }
  ob->table[hole] = 0;
}

static void list_unlink(lh_actors_outbox *ob, uint32_t i) {
  slot *s = &ob->slots[i];
  if (ob->due_tail == i) ob->due_tail = s->prev;  /* the prefix starts at head */
  if (s->prev != NIL) ob->slots[s->prev].next = s->next;
  else ob->head = s->next;
  if (s->next != NIL) ob->slots[s->next].prev = s->prev;
  else ob->tail = s->prev;
  s->prev = s->next = NIL;
}

static void list_append(lh_actors_outbox *ob, uint32_t i) {
  slot *s = &ob->slots[i];
  s->prev = ob->tail;
  s->next = NIL;
  if (ob->tail != NIL) ob->slots[ob->tail].next = i;
  else ob->head = i;
  ob->tail = i;
}

int lh_actors_outbox_has_room(const lh_actors_outbox *ob, size_t n) {
  return ob && ob->depth < ob->max_messages && n <= ob->max_bytes - ob->bytes;
}

int lh_actors_outbox_push(lh_actors_outbox *ob, uint64_t msg_id, const uint8_t *bytes, size_t n, int64_t now_ms,
                   lh_errbuf *err) {
  if (!ob || (!bytes && n)) return lh_errbuf_set(err, LH_EINVAL, "outbox push: NULL outbox or bytes");
  if (n > ob->max_bytes)
    return lh_errbuf_set(err, LH_EACTORS_OUTBOX_TOO_LARGE,
                         "outbox push: message %llu is %zu bytes, more than the whole outbox "
                         "(outbox_bytes=%zu); raise outbox_bytes or lower segment_tokens",
                         (unsigned long long)msg_id, n, ob->max_bytes);
  size_t p = find_pos(ob, msg_id);
  if (ob->table[p])
    return lh_errbuf_set(err, LH_EACTORS_OUTBOX_DUPLICATE, "outbox push: message %llu is already waiting",
                         (unsigned long long)msg_id);
  if (!lh_actors_outbox_has_room(ob, n))
    return lh_errbuf_set(err, LH_EACTORS_OUTBOX_FULL,
                         "outbox push: full (%zu of %zu messages, %zu of %zu bytes) for %zu more bytes",
                         ob->depth, ob->max_messages, ob->bytes, ob->max_bytes, n);
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) return lh_errbuf_set(err, LH_ENOMEM, "outbox push: out of memory for %zu bytes", n);
  if (n) memcpy(copy, bytes, n);
  uint32_t i = ob->free_list[--ob->n_free];
  ob->slots[i] = (slot){.id = msg_id, .data = copy, .n = n, .sent_ms = now_ms, .pushed_ms = now_ms,
                        .wait_ms = ob->timeout_ms, .went = 1};
  list_append(ob, i);
  ob->handed = NIL;
  ob->table[p] = i + 1;
  ob->depth++;
  ob->bytes += n;
  return 0;
}

int lh_actors_outbox_ack(lh_actors_outbox *ob, uint64_t msg_id) { return lh_actors_outbox_ack_at(ob, msg_id, NULL); }

int lh_actors_outbox_ack_at(lh_actors_outbox *ob, uint64_t msg_id, int64_t *pushed_ms) {
  if (!ob) return 0;
  size_t p = find_pos(ob, msg_id);
  if (!ob->table[p]) return 0;
  uint32_t i = ob->table[p] - 1;
  if (pushed_ms) *pushed_ms = ob->slots[i].pushed_ms;
  ob->backoff = 0, ob->resent_since_ack = 0;
  table_delete(ob, p);
  if (ob->handed == i) ob->handed = NIL;
  list_unlink(ob, i);
  if (ob->slots[i].marked) ob->marked--;
  free(ob->slots[i].data);
  ob->bytes -= ob->slots[i].n;
  ob->slots[i].data = NULL;
  ob->free_list[ob->n_free++] = i;
  ob->depth--;
  return 1;
}

int lh_actors_outbox_mark(lh_actors_outbox *ob, uint64_t msg_id) {
  if (!ob) return 0;
  size_t p = find_pos(ob, msg_id);
  if (!ob->table[p]) return 0;
  slot *s = &ob->slots[ob->table[p] - 1];
  if (!s->marked) s->marked = 1, ob->marked++;
  return 1;
}

size_t lh_actors_outbox_marked(const lh_actors_outbox *ob) { return ob ? ob->marked : 0; }

const uint8_t *lh_actors_outbox_peek(const lh_actors_outbox *ob, uint64_t msg_id, size_t *n) {
  if (!ob) return NULL;
  size_t p = find_pos(ob, msg_id);
  if (!ob->table[p]) return NULL;
  const slot *s = &ob->slots[ob->table[p] - 1];
  if (n) *n = s->n;
  return s->data;
}

size_t lh_actors_outbox_ack_many(lh_actors_outbox *ob, const uint64_t *msg_ids, size_t n) {
  size_t acked = 0;
  for (size_t i = 0; msg_ids && i < n; i++) acked += (size_t)lh_actors_outbox_ack(ob, msg_ids[i]);
  return acked;
}

int lh_actors_outbox_next_due(lh_actors_outbox *ob, int64_t now_ms, uint64_t *msg_id, const uint8_t **bytes,
                       size_t *n) {
  if (!ob || ob->head == NIL) return 0;
  uint32_t i = ob->head;
  slot *s = &ob->slots[i];
  /* INT64_MIN marks "due now" (resend_all); otherwise compare without
   * overflow for any caller clock. */
  if (s->sent_ms != INT64_MIN && now_ms - s->sent_ms < s->wait_ms) return 0;
  if (s->went) {
    /* A new round of resends while the last brought no ack: back off. */
    if (!ob->resent_since_ack) ob->resent_since_ack = 1, ob->last_bump_ms = now_ms;
    else if (now_ms - ob->last_bump_ms >= (ob->timeout_ms << ob->backoff)) {
      if (ob->backoff < OUTBOX_MAX_BACKOFF) ob->backoff++;
      ob->last_bump_ms = now_ms;
    }
  }
  s->wait_ms = ob->timeout_ms << ob->backoff;
  s->sent_ms = now_ms;
  list_unlink(ob, i);
  list_append(ob, i);
  ob->resends += (uint64_t)s->went;
  ob->handed = i, ob->handed_resend = s->went;
  s->went = 1;
  if (msg_id) *msg_id = s->id;
  if (bytes) *bytes = s->data;
  if (n) *n = s->n;
  return 1;
}

void lh_actors_outbox_resend_all(lh_actors_outbox *ob) {
  if (!ob) return;
  /* Every entry gets the same mark, so the list order (push order of the
   * last sends) is kept. */
  for (uint32_t i = ob->head; i != NIL; i = ob->slots[i].next) ob->slots[i].sent_ms = INT64_MIN;
  ob->due_tail = ob->tail;
}

int lh_actors_outbox_unsent(lh_actors_outbox *ob, uint64_t msg_id) {
  if (!ob) return 0;
  size_t p = find_pos(ob, msg_id);
  if (!ob->table[p]) return 0;
  uint32_t i = ob->table[p] - 1;
  slot *s = &ob->slots[i];
  if (s->sent_ms == INT64_MIN) return 1;  /* already due now */
  /* Nothing of this hand-out (or push) went: it is no resend. */
  int handed = i == ob->handed, resend = handed && ob->handed_resend;
  ob->resends -= (uint64_t)resend;
  s->went = resend;
  list_unlink(ob, i);
  /* The hand-out came off the head: back there, first in line. A fresh
   * push goes after the due-now prefix, ahead of everything that went. */
  uint32_t after = handed ? NIL : ob->due_tail;
  s->prev = after;
  s->next = after == NIL ? ob->head : ob->slots[after].next;
  if (s->next != NIL) ob->slots[s->next].prev = i;
  else ob->tail = i;
  if (after != NIL) ob->slots[after].next = i;
  else ob->head = i;
  s->sent_ms = INT64_MIN;
  if (after == ob->due_tail) ob->due_tail = i;
  ob->handed = NIL;
  return 1;
}

int lh_actors_outbox_has_unsent(const lh_actors_outbox *ob) { return ob && ob->due_tail != NIL; }

size_t lh_actors_outbox_depth(const lh_actors_outbox *ob) { return ob ? ob->depth : 0; }
size_t lh_actors_outbox_bytes(const lh_actors_outbox *ob) { return ob ? ob->bytes : 0; }
uint64_t lh_actors_outbox_resends(const lh_actors_outbox *ob) { return ob ? ob->resends : 0; }

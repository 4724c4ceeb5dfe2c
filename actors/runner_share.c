/* actors: a group's shared prefix (docs/actors.md "Shared prefixes";
 * lh_actors_prefix_share in runner_internal.h says how it works): the
 * hash that tells two first observations alike, the leader's share made
 * ready, a member forked from it, and a share left or freed. */
#include <stdlib.h>
#include <string.h>

#include "actors/runner_internal.h"

/* XXH3-64 of the transcript's first n positions (tokens, then each image's
 * place, size and pixels): two members share a prefix only when their
 * first observations hash alike and have the same length. */
static int prefix_hash(const lh_actors_row *w, size_t n, uint64_t *out, lh_errbuf *err) {
  lh_file_sum *h = NULL;
  if (lh_file_sum_new(0, &h) < 0) return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for a prefix hash");
  size_t first = lh_actors_transcript_first(w->tr);
  lh_file_sum_add(h, lh_actors_transcript_tokens(w->tr), (n - first) * sizeof(int32_t));
  const lh_model_image *im = lh_actors_transcript_images(w->tr);
  for (int i = 0; i < lh_actors_transcript_n_images(w->tr); i++) {
    if ((size_t)im[i].at >= n) break;
    int32_t dims[3] = {im[i].at, im[i].height, im[i].width};
    lh_file_sum_add(h, dims, sizeof dims);
    lh_file_sum_add(h, im[i].pixels, (size_t)im[i].height * (size_t)im[i].width * 3 * sizeof(float));
  }
  *out = lh_file_sum_value(h);
  lh_file_sum_free(h);
  return 0;
}

/* Whether a row leads share i or waits for it. */
static int share_in_use(const lh_actors_runner *r, int i) {
  for (uint32_t b = 0; b < r->cfg.batch; b++)
    if (r->rows[b].share == i) return 1;
  return 0;
}

/* The slot of group group_key's share, or -1. */
static int share_of(const lh_actors_runner *r, uint64_t group_key) {
  for (uint32_t k = 0; r->shares && k <= r->cfg.batch; k++)
    if (r->shares[k].group == group_key) return (int)k;
  return -1;
}

int lh_actors_share_pending(const lh_actors_runner *r, uint64_t group_key) {
  int i = share_of(r, group_key);
  if (i < 0) return 0;
  const lh_actors_prefix_share *sh = &r->shares[i];
  return !sh->ready && !sh->failed && share_in_use(r, i);
}

/* Frees share i once every episode of its group has started (whether it
 * joined the share or ended before it could: a reset that failed) and no
 * row leads it or waits for it. An agent group's episodes start when its
 * agents open them: it is whole when group_size of them have joined. */
static void share_release(lh_actors_runner *r, int i) {
  lh_actors_prefix_share *sh = &r->shares[i];
  if (!sh->group) return;
  if (r->cfg.agent ? sh->members < r->cfg.group_size : r->started < sh->group * r->cfg.group_size) return;
  if (!share_in_use(r, i)) sh->group = 0;
}

/* Row b (its episode just begun, in ROW_FORK or waiting) takes the shared
 * prefix of share w->share: the state and distribution the leader reached,
 * its segments starting after the prefix and naming the leader's episode,
 * and (with state_interval) the state at the prefix's end in its first
 * segment, where a stored-state learner starts it. */
static int fork_row(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  int i = w->share;
  lh_actors_prefix_share *sh = &r->shares[i];
  LH_TRY(lh_model_decoder_state_set(r->dec, (int)b, sh->state));
  memcpy(w->logp, sh->logp, (size_t)r->vocab * sizeof *w->logp);
  LH_TRY(lh_actors_segmenter_set_prefix(w->seg, sh->leader, sh->tokens, err));
  if (r->cfg.state_interval) {
    size_t every = r->cfg.state_interval;
    w->next_state = (sh->tokens / every + 1) * every;
    LH_TRY(lh_actors_segmenter_set_state(w->seg, sh->tokens, sh->state, r->share_floats, err));
  }
  w->fed = w->pushed = sh->tokens;
  w->images_pushed = lh_actors_transcript_first_image(w->tr) + lh_actors_transcript_n_images(w->tr);
  w->have_logp = 1;
  w->state = ROW_POLICY;
  w->share = -1;
  r->prefixes_shared++;
  r->prefix_tokens_shared += sh->tokens;
  lh_actors_row_forget(r, w);
  share_release(r, i);
  return 0;
}

/* The leader (row b) has prefilled the prefix and pushed it: its segments
 * are cut there, so that the prefix is whole segments sent before any
 * member's; the state and distribution it reached are kept for the members
 * to come, and those waiting fork now. */
int lh_actors_share_ready(lh_actors_runner *r, uint32_t b, lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  int i = w->share;
  lh_actors_prefix_share *sh = &r->shares[i];
  LH_TRY(lh_model_decoder_state_get(r->dec, (int)b, sh->state));
  memcpy(sh->logp, w->logp, (size_t)r->vocab * sizeof *sh->logp);
  sh->ready = 1;
  sh->version = r->version;
  w->share = -1;
  LH_TRY(lh_actors_segmenter_cut(w->seg, err));
  if (r->cfg.state_interval)
    LH_TRY(lh_actors_segmenter_set_state(w->seg, sh->tokens, sh->state, r->share_floats, err));
  LH_TRY(lh_actors_row_drain(r, w, err));
  for (uint32_t c = 0; c < r->cfg.batch; c++)
    if (r->rows[c].state == ROW_FORK && r->rows[c].share == i) LH_TRY(fork_row(r, c, err));
  share_release(r, i);
  return 0;
}

/* Row b's episode, of group `group`, has begun with its first observation
 * (n positions) in the transcript. The group's first member leads a new
 * share and prefills as usual; a later one with the same prefix forks from
 * the leader's state (or waits in ROW_FORK until the leader has it).
 * Returns 1 when the row needs no prefill of its own, 0 when it prefills
 * (the leader, or a member whose first observation differs: an
 * environment that is not deterministic in its seed plays unshared). A
 * member that starts after the share was ready, under other weights than
 * those that computed it, prefills and leads the share anew for the
 * members after it: the old state and distribution are not what its own
 * prefill gives, and its first token would carry a version that did not
 * compute it. */
int lh_actors_share_join(lh_actors_runner *r, uint32_t b, uint64_t group_key, uint64_t episode_id, size_t n,
                         lh_errbuf *err) {
  lh_actors_row *w = &r->rows[b];
  uint64_t hash = 0;
  LH_TRY(prefix_hash(w, n, &hash, err));
  int i = share_of(r, group_key), free_slot = -1;
  for (uint32_t k = 0; k <= r->cfg.batch && i < 0 && free_slot < 0; k++) {
    share_release(r, (int)k);  /* a group whose last episodes ended at their start */
    if (!r->shares[k].group) free_slot = (int)k;
  }
  /* An environment's groups start in turn, so a slot per row and one more
   * always leaves one free. An agent group's members come when its agents
   * open them, if ever: a share no row leads or waits for gives its slot
   * up (a member that comes after it prefills for itself). */
  for (uint32_t k = 0; k <= r->cfg.batch && i < 0 && free_slot < 0; k++)
    if (!share_in_use(r, (int)k)) free_slot = (int)k;
  if (i < 0) {
    if (free_slot < 0) return 0;  /* cannot happen: a slot per row, and one more */
    lh_actors_prefix_share *sh = &r->shares[free_slot];
    if (!sh->state && r->share_floats && !(sh->state = malloc(r->share_floats * sizeof *sh->state)))
      return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for a shared prefix's state");
    if (!sh->logp && !(sh->logp = malloc((size_t)r->vocab * sizeof *sh->logp)))
      return lh_errbuf_set(err, LH_ENOMEM, "runner: out of memory for a shared prefix's distribution");
    *sh = (lh_actors_prefix_share){.group = group_key, .leader = episode_id, .tokens = n, .hash = hash,
                                   .members = 1, .state = sh->state, .logp = sh->logp};
    w->share = free_slot;
    return 0;
  }
  lh_actors_prefix_share *sh = &r->shares[i];
  sh->members++;
  if (sh->failed || sh->tokens != n || sh->hash != hash) {
    share_release(r, i);
    return 0;
  }
  w->share = i;
  if (sh->ready && sh->version != r->version) {
    /* nobody waits on a ready share: this row leads it from now on */
    sh->ready = 0, sh->leader = episode_id;
    return 0;
  }
  if (sh->ready) {
    LH_TRY(fork_row(r, b, err));
    return 1;
  }
  w->state = ROW_FORK;
  return 1;
}

/* Row b leaves its share before the share was ready (its episode ended):
 * a leader's waiting members prefill on their own, and no later member
 * shares. */
void lh_actors_share_leave(lh_actors_runner *r, uint32_t b) {
  lh_actors_row *w = &r->rows[b];
  int i = w->share;
  if (i < 0) return;
  w->share = -1;
  lh_actors_prefix_share *sh = &r->shares[i];
  if (w->state != ROW_FORK) {
    sh->failed = 1;
    for (uint32_t c = 0; c < r->cfg.batch; c++)
      if (r->rows[c].state == ROW_FORK && r->rows[c].share == i) r->rows[c].state = ROW_POLICY, r->rows[c].share = -1;
  }
  share_release(r, i);
}

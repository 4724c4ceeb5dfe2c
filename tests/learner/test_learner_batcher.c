/* Tests of learner/batcher.c: batches of whole groups in completion order,
 * dropped episodes counting toward their group, groups closed early, and
 * every error. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <string.h>

#include "learner/internal.h"

static void add(lh_learner_batcher *b, uint64_t ep, uint64_t group, int admitted) {
  lh_learner_batch_item it = {.episode_id = ep, .group_id = group, .reward = (float)ep, .admitted = admitted};
  lh_errbuf e;
  ck_assert_msg(lh_learner_batcher_add(b, &it, &e) == 0, "%s", e.msg);
}

START_TEST(test_whole_groups_in_completion_order) {
  /* batch 4, groups of 2 */
  lh_learner_batcher *b = lh_learner_batcher_new(4, 2, 100, NULL);
  lh_learner_batch_item out[8];
  size_t n;
  add(b, 1, 10, 1);
  add(b, 2, 20, 1);
  add(b, 3, 30, 1);
  add(b, 4, 20, 1);  /* group 20 completes first */
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 2);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 0);
  add(b, 5, 30, 1);  /* then 30 */
  add(b, 6, 10, 1);  /* then 10 */
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 6);
  ck_assert_uint_eq(lh_learner_batcher_pending_groups(b), 0);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  ck_assert_uint_eq(n, 4);
  uint64_t want[4] = {2, 4, 3, 5};
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(out[i].episode_id, want[i]);
  ck_assert(out[0].reward == 2.0f);
  ck_assert_uint_eq(out[0].group_id, 20);
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 2);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 0);
  lh_learner_batcher_free(b);
}
END_TEST

START_TEST(test_dropped_episodes_count_toward_their_group) {
  lh_learner_batcher *b = lh_learner_batcher_new(3, 3, 100, NULL);
  lh_learner_batch_item out[8];
  size_t n;
  add(b, 1, 7, 1);
  add(b, 2, 7, 0);  /* stale */
  add(b, 3, 7, 1);  /* group 7 complete with 2 admitted */
  add(b, 4, 8, 0);
  add(b, 5, 8, 0);
  add(b, 6, 8, 0);  /* all dropped: discarded */
  ck_assert_uint_eq(lh_learner_batcher_discarded(b), 1);
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 2);
  add(b, 7, 9, 1);
  add(b, 8, 9, 1);
  add(b, 9, 9, 1);
  /* Whole groups: 2 + 3 = 5 admitted episodes, more than batch 3. */
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 2 + 3, &n, NULL), 1);
  ck_assert_uint_eq(n, 5);
  ck_assert_uint_eq(out[0].episode_id, 1);
  ck_assert_uint_eq(out[1].episode_id, 3);
  ck_assert_uint_eq(out[4].episode_id, 9);
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(out[i].admitted, 1);
  lh_learner_batcher_free(b);
}
END_TEST

START_TEST(test_oldest_incomplete_group_closed_early) {
  lh_learner_batcher *b = lh_learner_batcher_new(2, 4, 2, NULL);
  lh_learner_batch_item out[8];
  size_t n;
  add(b, 1, 100, 1);  /* its actor dies: group 100 never fills */
  add(b, 2, 200, 1);
  ck_assert_uint_eq(lh_learner_batcher_pending_groups(b), 2);
  add(b, 3, 300, 1);  /* a third incomplete group: 100 is closed */
  ck_assert_uint_eq(lh_learner_batcher_closed_early(b), 1);
  ck_assert_uint_eq(lh_learner_batcher_pending_groups(b), 2);
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 1);
  add(b, 4, 400, 1);  /* and then 200 */
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(out[0].episode_id, 1);
  ck_assert_uint_eq(out[1].episode_id, 2);
  lh_learner_batcher_free(b);
}
END_TEST

START_TEST(test_batcher_errors) {
  lh_errbuf e;
  ck_assert_ptr_null(lh_learner_batcher_new(0, 2, 2, &e));
  ck_assert_int_eq(e.code, LH_ELEARNER_BATCH_PARAMS);
  ck_assert(strstr(e.msg, "batch_episodes=0"));
  ck_assert_ptr_null(lh_learner_batcher_new(2, 0, 2, &e));
  ck_assert_ptr_null(lh_learner_batcher_new(2, 2, 0, &e));
  lh_learner_batcher *b = lh_learner_batcher_new(4, 2, 10, NULL);
  add(b, 1, 5, 1);
  lh_learner_batch_item it = {.episode_id = 1, .group_id = 6, .admitted = 1};
  ck_assert_int_eq(lh_learner_batcher_add(b, &it, &e), LH_ELEARNER_BATCH_DUPLICATE);
  ck_assert(strstr(e.msg, "episode 1"));
  add(b, 2, 5, 1);
  it.episode_id = 3, it.group_id = 5;
  ck_assert_int_eq(lh_learner_batcher_add(b, &it, &e), LH_ELEARNER_BATCH_GROUP_FULL);
  ck_assert(strstr(e.msg, "group 5"));
  add(b, 3, 6, 1);
  add(b, 4, 6, 1);
  lh_learner_batch_item out[8];
  size_t n = 99;
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 3, &n, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "room for 3"));
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 4);  /* nothing lost */
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 4, &n, &e), 1);
  ck_assert_uint_eq(n, 4);
  ck_assert_int_eq(lh_learner_batcher_add(NULL, &it, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_batcher_take(b, NULL, 4, &n, &e), LH_EINVAL);
  lh_learner_batcher_free(b);
  lh_learner_batcher_free(NULL);
  ck_assert_uint_eq(lh_learner_batcher_ready(NULL), 0);
}
END_TEST

static void add_v(lh_learner_batcher *b, uint64_t ep, uint64_t group, int admitted, uint64_t version) {
  lh_learner_batch_item it = {.episode_id = ep, .group_id = group, .admitted = admitted, .oldest_version = version};
  lh_errbuf e;
  ck_assert_msg(lh_learner_batcher_add(b, &it, &e) == 0, "%s", e.msg);
}

static int count_drop(void *ctx, const lh_learner_batch_item *item) {
  uint64_t *sum = ctx;
  *sum += item->episode_id;
  return 0;
}

/* Complete groups whose admitted members are all older than min_version
 * leave (each admitted one seen by the callback); a group with one fresh
 * member, an incomplete group and the counts stay right. */
START_TEST(test_stale_groups_dropped) {
  lh_learner_batcher *b = lh_learner_batcher_new(4, 2, 100, NULL);
  add_v(b, 1, 10, 1, 3), add_v(b, 2, 10, 1, 4);  /* stale below 5 */
  add_v(b, 3, 20, 1, 4), add_v(b, 4, 20, 1, 6);  /* one fresh member */
  add_v(b, 5, 30, 0, 9), add_v(b, 6, 30, 1, 2);  /* the admitted one stale */
  add_v(b, 7, 40, 1, 1);                         /* incomplete: waits */
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 5);
  uint64_t sum = 0;
  ck_assert_int_eq(lh_learner_batcher_drop_stale(b, 5, count_drop, &sum), 3);
  ck_assert_uint_eq(sum, 1 + 2 + 6);
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 2);
  ck_assert_uint_eq(lh_learner_batcher_pending_groups(b), 1);
  ck_assert_int_eq(lh_learner_batcher_drop_stale(b, 5, NULL, NULL), 0);
  add_v(b, 8, 40, 1, 7);
  add_v(b, 9, 50, 1, 8), add_v(b, 10, 50, 1, 8);
  lh_learner_batch_item out[8];
  size_t n;
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  ck_assert_uint_eq(n, 4);  /* groups 20 and 40, in completion order */
  ck_assert_uint_eq(out[0].episode_id, 3);
  ck_assert_uint_eq(out[2].episode_id, 7);
  ck_assert_int_eq(lh_learner_batcher_drop_stale(NULL, 5, NULL, NULL), 0);
  lh_learner_batcher_free(b);
}
END_TEST

/* Flat groups (every reward the same) are left out as they complete, their
 * admitted episodes handed to on_flat, counted; the batch forms from the
 * groups that teach; off, they wait like any other; a group of one is
 * never flat; a stale member's reward counts toward flatness. */
typedef struct {
  uint64_t ids[16];
  int n;
} flat_seen;

static int on_flat(void *ctx, const lh_learner_batch_item *it) {
  flat_seen *f = ctx;
  f->ids[f->n++] = it->episode_id;
  return 0;
}

static void add_reward(lh_learner_batcher *b, uint64_t ep, uint64_t group, float reward, int admitted) {
  lh_learner_batch_item it = {.episode_id = ep, .group_id = group, .reward = reward, .admitted = admitted};
  lh_errbuf e;
  ck_assert_msg(lh_learner_batcher_add(b, &it, &e) == 0, "%s", e.msg);
}

START_TEST(test_flat_groups_skipped) {
  lh_learner_batcher *b = lh_learner_batcher_new(4, 2, 100, NULL);
  flat_seen f = {0};
  lh_learner_batcher_skip_flat(b, 1, on_flat, &f);
  lh_learner_batch_item out[8];
  size_t n;
  add_reward(b, 1, 10, 0.0f, 1);
  add_reward(b, 2, 10, 0.0f, 1);  /* flat: all failed */
  add_reward(b, 3, 11, 1.0f, 1);
  add_reward(b, 4, 11, 1.0f, 0);  /* flat: all solved (one stale: counts, not handed on) */
  add_reward(b, 5, 12, 1.0f, 1);
  add_reward(b, 6, 12, 0.0f, 1);  /* teaches */
  ck_assert_uint_eq(lh_learner_batcher_ready(b), 2);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 0);
  add_reward(b, 7, 13, 0.5f, 1);
  add_reward(b, 8, 13, 0.25f, 1);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  ck_assert_uint_eq(n, 4);
  uint64_t want[4] = {5, 6, 7, 8};
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(out[i].episode_id, want[i]);
  uint64_t groups, episodes;
  lh_learner_batcher_flat(b, &groups, &episodes);
  ck_assert_uint_eq(groups, 2);
  ck_assert_uint_eq(episodes, 3);
  ck_assert_int_eq(f.n, 3);
  ck_assert_uint_eq(f.ids[0], 1);
  ck_assert_uint_eq(f.ids[1], 2);
  ck_assert_uint_eq(f.ids[2], 3);
  lh_learner_batcher_free(b);

  /* Off: a flat group waits for a batch like any other. */
  b = lh_learner_batcher_new(2, 2, 100, NULL);
  add_reward(b, 1, 10, 0.0f, 1);
  add_reward(b, 2, 10, 0.0f, 1);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  ck_assert_uint_eq(n, 2);
  lh_learner_batcher_free(b);

  /* Groups of one are never flat. */
  b = lh_learner_batcher_new(1, 1, 100, NULL);
  lh_learner_batcher_skip_flat(b, 1, NULL, NULL);
  add_reward(b, 1, 10, 0.0f, 1);
  ck_assert_int_eq(lh_learner_batcher_take(b, out, 8, &n, NULL), 1);
  lh_learner_batcher_free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_batcher");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_whole_groups_in_completion_order);
  tcase_add_test(tc, test_dropped_episodes_count_toward_their_group);
  tcase_add_test(tc, test_oldest_incomplete_group_closed_early);
  tcase_add_test(tc, test_batcher_errors);
  tcase_add_test(tc, test_stale_groups_dropped);
  tcase_add_test(tc, test_flat_groups_skipped);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

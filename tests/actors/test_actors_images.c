/* actors: images of any size never cost the actor (docs/model.md "Inputs").
 * The runner in process on a tiny model (patch 2, max_patches 16) and the
 * maze environment: an image whose sides are not multiples of the patch
 * (5x5) goes in padded (6x6, black right and bottom) and its segments pass
 * the learner's checks, so the episodes play on; an image over max_patches
 * (15x15: 64 patches) ends its episode as an error with the reason, and
 * the runner goes on to the next episodes. Evaluation does the same: such
 * an episode is not solved, is shown with the reason, and the seeds after
 * it are played. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/internal.h"
#include "learner/internal.h"
#include "proto/wire.h"

static lh_model *tiny_model(void) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 16, c.seed = 3;
  lh_model *m = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  return m;
}

typedef struct {
  int ends, errors, images, segments;
  char reason[256];
} tally;

/* Runs a maze runner of the given cell size to the end (bounded), every
 * message checked against the model's limits as the learner's ingest
 * checks them. */
static void run_maze(lh_model *m, const char *cell_px, tally *t) {
  lh_env_option opts[2] = {{"size", "2"}, {"cell_px", cell_px}};
  lh_actors_runner_config c = {.actor = "a0", .env = "maze", .env_options = opts, .n_env_options = 2,
                               .batch = 2, .group_size = 2, .segment_tokens = 16, .max_context = 400,
                               .max_steps = 3, .temperature = 1.0f, .top_p = 1.0f, .seed = 5, .id_salt = 9,
                               .episodes = 4};
  lh_actors_runner *r = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_actors_runner_new(m, &c, &r, &err) == 0, "%s", err.msg);
  lh_learner_config lc;
  lh_learner_config_default(&lc);
  lh_learner_model_limits lim;
  lh_learner_model_limits_init(&lim, lh_model_get_config(m), &lc);
  memset(t, 0, sizeof *t);
  for (int i = 0; i < 100000 && !lh_actors_runner_done(r); i++) {
    ck_assert_msg(lh_actors_runner_step(r, &err) >= 0, "step %d: %s", i, err.msg);
    Longhaul__Segment *seg;
    Longhaul__EpisodeEnd *end;
    while (lh_actors_runner_pop(r, &seg, &end)) {
      if (seg) {
        ck_assert_msg(lh_learner_check_segment(seg, &lim, &err) == 0, "%s", err.msg);
        for (size_t k = 0; k < seg->n_images; k++) {
          const Longhaul__Image *im = seg->images[k];
          ck_assert_uint_eq(im->width % 2, 0);
          ck_assert_uint_eq(im->height % 2, 0);
          ck_assert_uint_eq(im->channels, 3);
          /* the padding: the last pixel of the last row is black */
          const uint8_t *last = im->pixels.data + ((size_t)im->width * im->height - 1) * 3;
          ck_assert(last[0] == 0 && last[1] == 0 && last[2] == 0);
          t->images++;
        }
        t->segments++;
        lh_actors_segment_free(seg);
      } else {
        ck_assert_msg(lh_learner_check_episode_end(end, &lim, &err) == 0, "%s", err.msg);
        t->ends++;
        if (end->outcome == LONGHAUL__OUTCOME__OUTCOME_ERROR) {
          t->errors++;
          snprintf(t->reason, sizeof t->reason, "%s", end->error ? end->error : "");
        }
        lh_actors_episode_end_free(end);
      }
    }
  }
  ck_assert(lh_actors_runner_done(r));
  lh_actors_runner_free(r);
}

START_TEST(test_odd_size_is_padded) {
  lh_model *m = tiny_model();
  tally t;
  run_maze(m, "1", &t); /* 5x5 pixels */
  printf("maze 5x5 images at patch 2: %d episodes, %d errors, %d images in %d segments\n", t.ends, t.errors,
         t.images, t.segments);
  ck_assert_int_eq(t.ends, 4);
  ck_assert_int_eq(t.errors, 0);
  ck_assert_int_ge(t.images, 4);
  lh_model_free(m);
}
END_TEST

START_TEST(test_too_many_patches_ends_one_episode) {
  lh_model *m = tiny_model();
  tally t;
  run_maze(m, "3", &t); /* 15x15 pixels: 8x8 = 64 patches, over 16 */
  printf("maze 15x15 images at patch 2, max_patches 16: %d episodes, %d errors: %s\n", t.ends, t.errors, t.reason);
  ck_assert_int_eq(t.ends, 4); /* each ended alone, and the runner went on to the next */
  ck_assert_int_eq(t.errors, 4);
  ck_assert_int_eq(t.images, 0);
  ck_assert_ptr_nonnull(strstr(t.reason, "max_patches"));
  lh_model_free(m);
}
END_TEST

START_TEST(test_eval_goes_past_a_refused_image) {
  lh_model *m = tiny_model();
  lh_env_option opts[2] = {{"size", "2"}, {"cell_px", "3"}}; /* 64 patches, over 16 */
  lh_env *envs[2] = {NULL, NULL};
  lh_errbuf err = {0};
  for (int i = 0; i < 2; i++)
    ck_assert_msg(lh_env_open("maze", opts, 2, &envs[i], &err) == 0, "%s", err.msg);
  uint64_t seeds[5] = {1, 2, 3, 4, 5};
  char *shown = NULL;
  size_t shown_bytes = 0;
  FILE *out = open_memstream(&shown, &shown_bytes);
  ck_assert_ptr_nonnull(out);
  lh_actors_eval_params p = {.max_context = 400, .max_action_tokens = 16, .show = out, .show_count = 5};
  size_t wins = 99;
  ck_assert_msg(lh_actors_eval(m, envs, 2, seeds, 5, &p, &wins, &err) == 0, "%s", err.msg);
  fclose(out);
  ck_assert_uint_eq(wins, 0);
  int ended = 0;
  for (const char *at = shown; (at = strstr(at, "ended: ")); at++) ended++;
  ck_assert_int_eq(ended, 5); /* every seed played, each ended by its image */
  ck_assert_ptr_nonnull(strstr(shown, "max_patches"));
  free(shown);
  for (int i = 0; i < 2; i++) lh_env_free(envs[i]);
  lh_model_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_images");
  TCase *tc = tcase_create("images");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_odd_size_is_padded);
  tcase_add_test(tc, test_too_many_patches_ends_one_episode);
  tcase_add_test(tc, test_eval_goes_past_a_refused_image);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* longhaul score's input parse is linear in the input, shown by counting
 * its work, not by timing it: the parse (cli/score_input.c) walks every
 * array once along cJSON's list and counts the items it visits. For inputs
 * of 1 000 and 1 000 000 tokens (and an image's pixel values) the count is
 * exactly the number of items, so the work per item is constant; the
 * quadratic parse it replaced stepped from the head of the list for every
 * item, 1 000 000 * 999 999 / 2 visits for the long input. cJSON_Parse
 * itself is one pass that links each item after the one before. The long
 * input also goes through completely and its ids come back in order. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/score_input.h"

/* {"tokens":[n ids],"images":[one h x w image at 2]} as text. */
static char *make_input(size_t n, int h, int w) {
  size_t px = (size_t)h * w * 3, cap = n * 8 + px * 6 + 256, len = 0;
  char *s = malloc(cap);
  ck_assert_ptr_nonnull(s);
  len += (size_t)snprintf(s + len, cap - len, "{\"tokens\":[");
  for (size_t i = 0; i < n; i++) len += (size_t)snprintf(s + len, cap - len, "%s%zu", i ? "," : "", i % 256);
  len += (size_t)snprintf(s + len, cap - len, "]");
  if (px) {
    len += (size_t)snprintf(s + len, cap - len, ",\"images\":[{\"at\":2,\"height\":%d,\"width\":%d,\"pixels\":[", h, w);
    for (size_t i = 0; i < px; i++) len += (size_t)snprintf(s + len, cap - len, "%s0.5", i ? "," : "");
    len += (size_t)snprintf(s + len, cap - len, "]}]");
  }
  snprintf(s + len, cap - len, "}");
  return s;
}

static size_t visits_of(size_t n, int h, int w) {
  char *text = make_input(n, h, w);
  lh_score_input in = {0};
  size_t visits = 0;
  ck_assert_int_eq(lh_score_input_parse(text, &in, &visits), 0);
  ck_assert_int_eq(in.n, (int)n);
  for (size_t i = 0; i < n; i += n / 16 + 1) ck_assert_int_eq(in.tokens[i], (int32_t)(i % 256));
  ck_assert_int_eq(in.tokens[n - 1], (int32_t)((n - 1) % 256));
  ck_assert_int_eq(in.n_images, h ? 1 : 0);
  lh_score_input_free(&in);
  free(text);
  return visits;
}

START_TEST(test_parse_work_is_linear) {
  size_t short_n = 1000, long_n = 1000000;
  size_t v_short = visits_of(short_n, 4, 4), v_long = visits_of(long_n, 4, 4);
  printf("score input parse: %zu items walked for %zu tokens + 48 pixel values, %zu for %zu tokens + 48\n",
         v_short, short_n, v_long, long_n);
  ck_assert_uint_eq(v_short, short_n + 48);
  ck_assert_uint_eq(v_long, long_n + 48);
  ck_assert_uint_eq(visits_of(long_n, 0, 0), long_n);
}
END_TEST

START_TEST(test_parse_refuses_bad_input) {
  const char *bad[] = {"[]", "{\"tokens\":[]}", "{\"tokens\":[1,-2]}", "{\"tokens\":[1,\"a\"]}",
                       "{\"tokens\":[1],\"images\":3}",
                       "{\"tokens\":[1],\"images\":[{\"at\":0,\"height\":1,\"width\":1,\"pixels\":[1]}]}",
                       /* not integers in range: an "at" past an int wrapped the model's bound check
                        * and the image was dropped without a word; fractions were cut */
                       "{\"tokens\":[1],\"images\":[{\"at\":2147483647,\"height\":1,\"width\":1,\"pixels\":[0,0,0]}]}",
                       "{\"tokens\":[1],\"images\":[{\"at\":1e300,\"height\":1,\"width\":1,\"pixels\":[0,0,0]}]}",
                       "{\"tokens\":[1],\"images\":[{\"at\":0.5,\"height\":1,\"width\":1,\"pixels\":[0,0,0]}]}",
                       "{\"tokens\":[1],\"images\":[{\"at\":0,\"height\":1.7,\"width\":1,\"pixels\":[0,0,0]}]}",
                       "{\"tokens\":[1],\"images\":[{\"at\":0,\"height\":1,\"width\":-1,\"pixels\":[0,0,0]}]}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lh_score_input in = {0};
    ck_assert_int_eq(lh_score_input_parse(bad[i], &in, NULL), -1);
    lh_score_input_free(&in);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("score_input");
  TCase *tc = tcase_create("parse");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_parse_work_is_linear);
  tcase_add_test(tc, test_parse_refuses_bad_input);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

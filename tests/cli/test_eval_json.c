/* longhaul eval --json through the real binary (LH_BIN): the one line it
 * prints is valid JSON even when the checkpoint's path holds a quote and a
 * backslash, and it names the path as given. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/proc_util.h"

static const char *ini =
    "[model]\nd_model = 32\nlayers = 2\nheads = 2\nexperts = 4\nlatent = 16\n"
    "expert_hidden = 16\npatch = 4\nmax_patches = 16\n[learner]\nlr = 3e-4\n";

START_TEST(test_json_path_with_quote) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set (run through ctest)");
  char work[] = "/tmp/lh_eval_json_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(work));
  char cfg[256], ckpt[256], cmd[2048], out[1 << 16];
  snprintf(cfg, sizeof cfg, "%s/model.ini", work);
  FILE *f = fopen(cfg, "w");
  ck_assert_ptr_nonnull(f);
  fputs(ini, f);
  fclose(f);
  snprintf(ckpt, sizeof ckpt, "%s/ck\"pt\\x", work);
  snprintf(cmd, sizeof cmd, "%s init --config %s --seed 1 --out '%s'", bin, cfg, ckpt);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  snprintf(cmd, sizeof cmd, "%s eval --config %s --env calc --ckpt '%s' --seeds 2 --db none --json",
           bin, cfg, ckpt);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  /* stderr comes along: the object is the line that starts with '{' */
  const char *line = out[0] == '{' ? out : strstr(out, "\n{");
  ck_assert_msg(line != NULL, "no JSON line: %s", out);
  if (*line == '\n') line++;
  cJSON *o = cJSON_ParseWithOpts(line, NULL, 0);
  ck_assert_msg(o != NULL, "not JSON: %s", out);
  const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "ckpt");
  ck_assert_msg(cJSON_IsString(path) && strcmp(path->valuestring, ckpt) == 0, "%s", out);
  const cJSON *episodes = cJSON_GetObjectItemCaseSensitive(o, "episodes");
  ck_assert(cJSON_IsNumber(episodes) && episodes->valuedouble == 2);
  ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "success_rate")));
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "env")->valuestring, "calc");
  cJSON_Delete(o);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("eval_json");
  TCase *tc = tcase_create("json");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_json_path_with_quote);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

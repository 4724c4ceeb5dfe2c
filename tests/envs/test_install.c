/* make install: `cmake --install` of this build into a temporary PREFIX;
 * the example plugin (envs/examples/reverse_plugin.c, copied out of the
 * tree) compiled with nothing but `pkg-config --cflags longhaul-env` of
 * the installed files, and played by the installed binary; the installed
 * man page holds every command's --help. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc_util.h"

static char out[1 << 16];

START_TEST(test_install_and_build_plugin) {
  char dir[256], cmd[4096];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "install"), 0);
  snprintf(cmd, sizeof cmd, "cmake --install %s --prefix %s/prefix", LH_TEST_BUILD_DIR, dir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "prefix/bin/longhaul") && strstr(out, "prefix/include/longhaul/envs/env.h") &&
                    strstr(out, "prefix/lib/pkgconfig/longhaul-env.pc") &&
                    strstr(out, "prefix/share/man/man1/longhaul.1"),
                "%s", out);
  /* The plugin's source alone, in a folder outside the tree. */
  snprintf(cmd, sizeof cmd, "mkdir -p %s/src && cp %s/envs/examples/reverse_plugin.c %s/src/", dir,
           LH_TEST_SOURCE_DIR, dir);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  snprintf(cmd, sizeof cmd,
           "cd %s/src && export PKG_CONFIG_PATH=%s/prefix/lib/pkgconfig PKG_CONFIG_LIBDIR=%s/prefix/lib/pkgconfig && "
           "flags=$(pkg-config --cflags longhaul-env) && echo \"cflags: $flags\" && "
           "%s -std=c11 -Wall -Wextra -Werror -fPIC -shared $flags -o %s/libreverse.so reverse_plugin.c",
           dir, dir, dir, LH_TEST_CC, dir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "the plugin did not build: %s", out);
  ck_assert_msg(strstr(out, "cflags: -I") && strstr(out, "include/longhaul") &&
                    !strstr(out, LH_TEST_SOURCE_DIR),
                "%s", out);
  snprintf(cmd, sizeof cmd, "%s/prefix/bin/longhaul envs play reverse --plugin %s/libreverse.so --expert --seed 2",
           dir, dir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "episode over: success") != NULL, "%s", out);
  /* The man page: the top-level help and a section per command. */
  snprintf(cmd, sizeof cmd, "cat %s/prefix/share/man/man1/longhaul.1", dir);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  ck_assert_msg(strstr(out, ".TH LONGHAUL 1") && strstr(out, ".SH LONGHAUL REPORT") &&
                    strstr(out, ".SH LONGHAUL ENVS") && strstr(out, "--tensorboard DIR"),
                "%.2000s", out);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("install");
  TCase *tc = tcase_create("install");
  tcase_set_timeout(tc, 150);
  tcase_add_test(tc, test_install_and_build_plugin);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}

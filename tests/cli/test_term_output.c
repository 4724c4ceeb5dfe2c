/* What commands print for a person holds no control character from
 * outside (cli/term.h): a store written through store/ whose environment
 * and actor names, error, reward term names, text tokens, run id, command
 * line and config, stage and evaluation hold ESC sequences (a screen clear,
 * a window title ended by BEL), CR, BEL, DEL and a C1 CSI, in a file whose
 * own name holds ESC and BEL; then the real binary: every replay
 * subcommand (stats, episodes, show with and without --tokens, export,
 * check, sql in both layouts), report in its three formats to stdout,
 * eval --show of a policy sampling at T 1 (whose bytes are any byte), envs
 * play echoing actions that hold ESC and BEL, and launch's status lines
 * and events quoting a child that wrote ESC sequences before exiting.
 * Every output (stdout and stderr) is checked for raw control bytes other
 * than newline and tab: none. Machine formats keep their own escaping:
 * JSON as \u00XX (checked to decode back to the very names), CSV \xNN
 * inside a quoted field, HTML U+FFFD. Each case prints one `term_output:`
 * line with what it counted. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_util.h"
#include "store/store.h"
#include "tests/store_fixture.h"

/* ESC sequences (clear the screen; a window title ended by BEL; colour by
 * a C1 CSI), CR, BEL, DEL and a newline: what a hostile peer would send. */
#define HOSTILE "x\x1b[2J\x1b]0;pwned\x07\rgone\x07\x7f\xc2\x9b" "31m\nnext"

enum { BOS = 256, EOS, CALL, CALL_END, OBS, OBS_END };

static char dir[256], db[320];
static char out[1 << 20];

/* The raw control bytes of text[0..n): C0 but newline and tab, DEL, and
 * C1 (C2 80..9F). */
static int raw_controls(const char *text, size_t n) {
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) count++;
    else if (c == 0xc2 && i + 1 < n && (unsigned char)text[i + 1] >= 0x80 && (unsigned char)text[i + 1] <= 0x9f)
      count++, i++;
  }
  return count;
}

/* Runs argv (argv[0] "longhaul": LH_BIN) with stdin from input (NULL: none)
 * and stdout and stderr into out; its exit code, *n the bytes captured. */
static int run_argv(const char *const *argv, const char *input, size_t *n) {
  char out_path[400], in_path[400];
  snprintf(out_path, sizeof out_path, "%s/out.%d", dir, (int)getpid());
  snprintf(in_path, sizeof in_path, "%s/in.%d", dir, (int)getpid());
  ck_assert_int_eq(lh_proc_write_file(in_path, input ? input : ""), 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), i = open(in_path, O_RDONLY);
    if (o < 0 || i < 0 || chdir(dir)) _exit(126);
    dup2(o, 1), dup2(o, 2), dup2(i, 0);
    execv(strcmp(argv[0], "longhaul") ? argv[0] : lh_proc_longhaul(), (char *const *)argv);
    _exit(127);
  }
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  FILE *f = fopen(out_path, "rb");
  ck_assert_ptr_nonnull(f);
  *n = fread(out, 1, sizeof out - 1, f);
  out[*n] = 0;
  fclose(f);
  unlink(out_path), unlink(in_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs `longhaul ARGS...` (NULL-terminated) and checks its output holds no
 * raw control byte; returns the exit code. */
static int checked(const char *input, const char *first, ...) {
  const char *argv[32] = {"longhaul"};
  int argc = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  size_t n = 0;
  int rc = run_argv(argv, input, &n);
  int raw = raw_controls(out, n);
  char shown[160];
  snprintf(shown, sizeof shown, "%s %s %s", argv[1], argc > 2 ? argv[2] : "", argc > 3 ? argv[3] : "");
  for (char *p = shown; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
  printf("term_output: %-32.32s exit %d, %zu bytes, raw control bytes %d\n", shown, rc, n, raw);
  ck_assert_msg(raw == 0, "longhaul %s: %d raw control bytes in:\n%s", shown, raw, out);
  return rc;
}

/* Each case's folder (removed by teardown at its end). */
static void setup(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "term"), 0);
  /* The store's own file name is hostile too: commands print it. */
  snprintf(db, sizeof db, "%s/st\x1b[7more\x07.db", dir);
}

static void teardown(void) { lh_proc_rmdir(dir); }

/* ---- the hostile store ---------------------------------------------------- */

static void put_episode(lh_store *s, uint64_t id, const char *env, const char *actor, const char *error) {
  static sfx_seg b;
  sfx_seg_init(&b, id, 0, actor, env);
  b.seg.group_id = id, b.seg.task_seed = id;
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "task: " HOSTILE, 0, 0);
  sfx_seg_token(&b, CALL, 1, 1);
  sfx_seg_text(&b, "calc(" HOSTILE ")", 1, 1);
  sfx_seg_token(&b, CALL_END, 1, 1);
  sfx_seg_token(&b, OBS, 0, 0);
  sfx_seg_text(&b, HOSTILE, 0, 0);
  sfx_seg_token(&b, OBS_END, 0, 0);
  sfx_seg_token(&b, EOS, 1, 1);
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int inserted = 0;
  ck_assert_msg(lh_store_put_segment(s, &b.seg, &inserted, &err) == 0, "%s", err.msg);
  sfx_end end;
  sfx_end_init(&end, id, env, 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  snprintf(end.actor, sizeof end.actor, "%s", actor);
  end.end.total_tokens = b.seg.n_tokens, end.end.group_id = id, end.end.task_seed = id, end.end.steps = 1;
  end.end.error = (char *)error;
  /* one reward term, named by the hostile text */
  end.term[0].name = (char *)HOSTILE, end.term[0].value = 1.0f, end.term[0].step = 1, end.end.n_terms = 1;
  ck_assert_msg(lh_store_put_episode_end(s, &end.end, NULL, &err) == 0, "%s", err.msg);
}

static void build_store(void) {
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "%s", err.msg);
  put_episode(s, 1, HOSTILE, "actor " HOSTILE, "error " HOSTILE);
  put_episode(s, 2, "calc", "a0", "");
  lh_store_run run = {.run_id = "run\x1b[2J\x07", .command = "longhaul " HOSTILE, .config = HOSTILE,
                      .kind = "learner"};
  ck_assert_msg(lh_store_put_run(s, &run, NULL, &err) == 0, "%s", err.msg);
  lh_store_stage st;
  memset(&st, 0, sizeof st);
  snprintf(st.run_id, sizeof st.run_id, "%s", run.run_id);
  st.max_context = 4096;
  ck_assert_msg(lh_store_put_stage(s, &st, 0, &err) == 0, "%s", err.msg);
  lh_store_eval ev = {.run_id = run.run_id, .kind = "eval", .env = HOSTILE, .seeds = 1, .episodes = 1,
                      .successes = 1, .checkpoint = HOSTILE};
  ck_assert_msg(lh_store_put_eval(s, &ev, &err) == 0, "%s", err.msg);
  for (uint64_t step = 1; step <= 3; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step, t.version = step, t.loss = 0.5, t.reward_mean = 0.5, t.tokens = 100, t.episodes = 2;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "%s", err.msg);
  }
  lh_store_close(s);
}

/* ---- the cases ------------------------------------------------------------- */

START_TEST(test_replay) {
  setup();
  build_store();
  int runs = 0;
  ck_assert_int_eq(checked(NULL, "replay", "stats", "--db", db, NULL), 0);
  runs++;
  ck_assert_msg(strstr(out, "\\x1b[2J\\x1b]0;pwned\\x07\\x0dgone"), "the name is not shown escaped:\n%s", out);
  ck_assert_int_eq(checked(NULL, "replay", "episodes", "--db", db, NULL), 0);
  runs++;
  /* The header and two rows: the name's newline is no line of its own. */
  int lines = 0;
  for (const char *p = out; *p; p++) lines += *p == '\n';
  ck_assert_int_eq(lines, 3);
  ck_assert_int_eq(checked(NULL, "replay", "show", "--db", db, "1", NULL), 0);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "show", "--db", db, "1", "--tokens", NULL), 0);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "check", "--db", db, NULL), 0);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "sql", "--db", db, "SELECT * FROM runs", NULL), 0);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "sql", "--db", db, "--aligned",
                           "SELECT env AS \"e\x1b[2J\x07\", actor, error FROM episodes", NULL),
                   0);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "sql", "--db", db, "SELECT * FROM nonesuch\x1b[2J", NULL), 1);
  runs++;
  ck_assert_int_eq(checked(NULL, "replay", "show", "--db", db, "1\x1b[2J", NULL), 2);
  runs++;
  /* export: JSON lines, each control character \u00XX, decoding back to
   * the very bytes. */
  ck_assert_int_eq(checked(NULL, "replay", "export", "--db", db, NULL), 0);
  runs++;
  cJSON *o = cJSON_Parse(out);
  ck_assert_ptr_nonnull(o);
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
  ck_assert(cJSON_IsString(env));
  ck_assert_str_eq(env->valuestring, HOSTILE);
  cJSON_Delete(o);
  printf("term_output: replay: %d runs of 7 subcommands, 0 raw control bytes; export decodes to the names\n", runs);
  teardown();
}
END_TEST

START_TEST(test_report) {
  setup();
  build_store();
  ck_assert_int_eq(checked(NULL, "report", "--db", db, "--format", "csv", "--out", "-", NULL), 0);
  ck_assert_msg(strstr(out, "\\x1b[7more\\x07.db\""), "the store's name is not in its quoted field:\n%s", out);
  ck_assert_int_eq(checked(NULL, "report", "--db", db, "--format", "jsonl", "--out", "-", NULL), 0);
  ck_assert_msg(strstr(out, "\\u001b[7more\\u0007.db"), "the store's name is not \\u-escaped:\n%s", out);
  ck_assert_int_eq(checked(NULL, "report", "--db", db, "--out", "-", NULL), 0);
  printf("term_output: report: csv, jsonl and html to stdout, 0 raw control bytes\n");
  teardown();
}
END_TEST

/* A tiny model and the config of calc for eval and envs. */
static void model_config(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/run.ini", dir);
  ck_assert_int_eq(lh_proc_write_file(path, "[model]\nd_model = 16\nlayers = 1\nheads = 2\nexperts = 4\ntopk = 2\n"
                                            "latent = 8\nexpert_hidden = 8\nchunk = 4\n[env]\nname = calc\n"),
                   0);
  ck_assert_int_eq(checked(NULL, "init", "--config", "run.ini", "--seed", "1", "--out", "init", NULL), 0);
}

/* eval --show prints what an untrained policy sampled at T 1: any byte. */
START_TEST(test_eval_show) {
  setup();
  model_config();
  ck_assert_int_eq(checked(NULL, "eval", "--config", "run.ini", "--ckpt", "init", "--seeds", "3", "--show", "3",
                           "--temperature", "1", "--db", "none", NULL),
                   0);
  int escaped = 0;
  for (const char *p = out; (p = strstr(p, "\\x")); p += 2) escaped++;
  printf("term_output: eval --show 3 at T 1: %d escapes written for control bytes, 0 raw\n", escaped);
  ck_assert_int_gt(escaped, 0);
  teardown();
}
END_TEST

/* envs play echoes each action, and calc answers a bad one quoting it. */
START_TEST(test_envs_play) {
  setup();
  ck_assert_int_eq(checked("calc(1\x1b[2J\x07)\n<call>calc(\x1b]0;t\x07)</call>\n", "envs", "play", "calc", "--seed",
                           "1", NULL),
                   0);
  ck_assert_msg(strstr(out, "\\x1b[2J\\x07"), "the action is not shown escaped:\n%s", out);
  printf("term_output: envs play: actions with ESC and BEL echoed escaped, 0 raw control bytes\n");
  teardown();
}
END_TEST

/* launch --status plain: the events quote an env server that wrote ESC
 * sequences, CR and BEL to stderr and exited 2. */
START_TEST(test_launch_events) {
  setup();
  char path[512], text[2048];
  snprintf(path, sizeof path, "%s/fleet.ini", dir);
  snprintf(text, sizeof text,
           "[fleet]\nlearners = 0\nactors = 1\nlog_dir = %s/logs\nstop_timeout_ms = 10000\n"
           "env_server = /bin/sh -c \"printf 'bad \\\\033[2J\\\\033]0;pwned\\\\007\\\\rgone\\\\n' >&2; exit 2\"\n"
           "[model]\nd_model = 16\nlayers = 1\nheads = 2\nexperts = 4\ntopk = 2\nlatent = 8\nexpert_hidden = 8\n"
           "chunk = 4\n[learner]\ningest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/wpub\n"
           "weights_endpoint = ipc://%s/wrt\n[env]\nname = calc\n",
           dir, dir, dir, dir);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
  int rc = checked(NULL, "launch", "fleet.ini", "--status", "plain", NULL);
  ck_assert_msg(rc == 1 && strstr(out, "exited name=env-server exit=2") && strstr(out, "\\x1b[2J"),
                "exit %d:\n%s", rc, out);
  snprintf(path, sizeof path, "%s/logs/launch.log", dir);
  char *log = lh_proc_read_file(path);
  ck_assert_ptr_nonnull(log);
  int raw = raw_controls(log, strlen(log));
  free(log);
  printf("term_output: launch: the env server's ESC, BEL and CR quoted escaped in its events; launch.log raw "
         "control bytes %d\n",
         raw);
  ck_assert_int_eq(raw, 0);
  teardown();
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {{"replay", test_replay, 0},       {"report", test_report, 0},
                                {"eval_show", test_eval_show, 0}, {"envs_play", test_envs_play, 0},
                                {"launch_events", test_launch_events, 0}};
  return lh_test_cases_main("term_output", cases, sizeof cases / sizeof cases[0], 300, argc, argv);
}

/* The config document as the modules and the commands read it: every
 * section reader refuses an unknown section and names an override as
 * "--set section.key"; the path keys of [learner], [actor], [fleet] and
 * [env] resolve against their file's folder; [actor] endpoints default to
 * [learner]'s (a wildcard bind host refused); lh_cli_config_check finds a
 * bad key of a section the command does not use; and through the real
 * binary: --set on every command that reads a config, unknown keys and
 * sections exit 2 naming --set, and `longhaul launch --set` hands the
 * overrides to every child (a tiny calc fleet run to its end). */
#include "case_main.h"  /* check.h and the suite runner */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/actors.h"
#include "cli/config.h"
#include "cli/launch/launch.h"
#include "cli/policy_eval.h"
#include "launch_fixture.h"
#include "learner/learner.h"
#include "model/model.h"
#include "proc_util.h"

/* A folder with dir/name written; returns the file's path (static). */
static const char *file_in(const char *dir, const char *name, const char *text) {
  static char path[PATH_MAX];
  int w = snprintf(path, sizeof path, "%s/%s", dir, name);
  ck_assert(w > 0 && (size_t)w < sizeof path);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
  return path;
}

static lh_ini_doc *doc_of(const char *path, const char *const *sets, size_t n) {
  lh_ini_doc *doc = NULL;
  lh_errbuf e = {0};
  ck_assert_msg(lh_ini_doc_load(path, sets, n, &doc, &e) == 0, "%s", e.msg);
  return doc;
}

static void msg_has(const lh_errbuf *e, const char *needle) {
  ck_assert_msg(strstr(e->msg, needle) != NULL, "message '%s' lacks '%s'", e->msg, needle);
}

START_TEST(test_unknown_section_every_reader) {
  const char *text = "[learner]\nlr = 0.1\n\n[flet]\nlearners = 2\n";
  const char *want = "fleet.ini:4: unknown section [flet] (known: fleet, model, learner, actor, env)";
  lh_errbuf e = {0};
  lh_actors_config ac;
  ck_assert_int_eq(lh_actors_config_parse(text, "fleet.ini", &ac, &e), LH_EACTORS_CONFIG_FILE);
  msg_has(&e, want);
  lh_learner_config lc;
  ck_assert_int_eq(lh_learner_config_parse(text, "fleet.ini", &lc, &e), LH_ELEARNER_CONFIG_FILE);
  msg_has(&e, want);
  lh_launch_config fc;
  ck_assert_int_eq(lh_launch_config_parse(text, "fleet.ini", &fc, &e), LH_ECONFIG);
  msg_has(&e, want);
  lh_model_config mc;
  ck_assert_int_eq(lh_model_config_parse_string(text, &mc, &e), LH_EMODEL_CONFIG_VALUE);
  msg_has(&e, "config:4: unknown section [flet]");
  /* And from a file, for every loader. */
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "configcli"), 0);
  const char *path = file_in(dir, "fleet.ini", text);
  ck_assert_int_eq(lh_actors_config_load(path, &ac, &e), LH_EACTORS_CONFIG_FILE);
  msg_has(&e, "fleet.ini:4: unknown section [flet]");
  ck_assert_int_eq(lh_learner_config_load(path, &lc, &e), LH_ELEARNER_CONFIG_FILE);
  msg_has(&e, "fleet.ini:4: unknown section [flet]");
  ck_assert_int_eq(lh_launch_config_load(path, &fc, &e), LH_ECONFIG);
  msg_has(&e, "fleet.ini:4: unknown section [flet]");
  ck_assert_int_eq(lh_model_config_parse_file(path, &mc, &e), LH_EMODEL_CONFIG_VALUE);
  msg_has(&e, "fleet.ini:4: unknown section [flet]");
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_set_in_every_reader) {
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "configcli"), 0);
  const char *path = file_in(dir, "fleet.ini", "[learner]\nlr = 0.1\n[model]\nlayers = 2\n[env]\nname = calc\n");
  lh_errbuf e = {0};
  /* Valid overrides replace the file's values. */
  const char *good[] = {"learner.lr=0.5", "model.layers=3", "actor.batch=5", "fleet.actors=7", "env.name=needle"};
  lh_ini_doc *doc = doc_of(path, good, 5);
  lh_learner_config lc;
  lh_model_config mc;
  lh_actors_config ac;
  lh_launch_config fc;
  ck_assert_int_eq(lh_learner_config_read(doc, &lc, &e), 0);
  ck_assert(lc.lr == 0.5);
  ck_assert_int_eq(lh_model_config_read(doc, &mc, &e), 0);
  ck_assert_int_eq(mc.layers, 3);
  ck_assert_int_eq(lh_actors_config_read(doc, &ac, &e), 0);
  ck_assert_uint_eq(ac.batch, 5);
  ck_assert_str_eq(ac.env_name, "needle");
  ck_assert_int_eq(lh_launch_config_read(doc, &fc, &e), 0);
  ck_assert_uint_eq(fc.actors, 7);
  ck_assert_int_eq(lh_cli_config_check(doc, &e), 0);
  lh_ini_doc_free(doc);
  /* An unknown key or a bad value of each section names --set section.key. */
  const struct {
    const char *set, *needle;
  } bad[] = {
      {"learner.bogus=1", "--set learner.bogus: [learner] unknown key 'bogus'"},
      {"learner.lr=x", "--set learner.lr: [learner] lr = 'x' is not a number"},
      {"actor.bogus=1", "--set actor.bogus: [actor] unknown key 'bogus'"},
      {"actor.batch=0", "--set actor.batch: [actor] batch = '0' is not an integer in 1..65536"},
      {"fleet.bogus=1", "--set fleet.bogus: [fleet] unknown key 'bogus'"},
      {"model.bogus=1", "--set model.bogus: [model] unknown key 'bogus'"},
      {"model.layers=0", "--set model.layers: [model] layers = '0' is not an integer in 1..256"},
      {"learner.warmup_steps=5000", "--set learner.warmup_steps: [learner] warmup_steps = 5000 is above"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    doc = doc_of(path, &bad[i].set, 1);
    int rc = lh_cli_config_check(doc, &e);
    ck_assert_msg(rc < 0, "%s: accepted", bad[i].set);
    msg_has(&e, bad[i].needle);
    printf("config error: %s\n", e.msg);
    lh_ini_doc_free(doc);
  }
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_path_keys) {
  char dir[64], real[PATH_MAX], want[PATH_MAX + 64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "configcli"), 0);
  ck_assert_ptr_nonnull(realpath(dir, real));
  file_in(dir, "inc.ini", "[learner]\ndb = data/r.db\n[actor]\ncurve_server_key_file = keys/l.pub\n");
  char sub[PATH_MAX];
  snprintf(sub, sizeof sub, "%s/conf", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  const char *path = file_in(sub, "fleet.ini",
                 "include = ../inc.ini\n[fleet]\nlog_dir = ../runs/logs\ninit = sft\n[learner]\nckpt_dir = ck\n"
                 "curve_secret_key_file = k/l.key\ncurve_allowed_keys = allowed\n[actor]\n"
                 "curve_secret_key_file = /abs/a.key\n[env]\nplugin = ../build/lib.so\nname = reverse\n");
  lh_ini_doc *doc = doc_of(path, NULL, 0);
  lh_errbuf e = {0};
  lh_learner_config lc;
  ck_assert_msg(lh_learner_config_read(doc, &lc, &e) == 0, "%s", e.msg);
  snprintf(want, sizeof want, "%s/data/r.db", real); /* the included file's folder */
  ck_assert_str_eq(lc.db, want);
  snprintf(want, sizeof want, "%s/conf/ck", real);
  ck_assert_str_eq(lc.ckpt_dir, want);
  snprintf(want, sizeof want, "%s/conf/k/l.key", real);
  ck_assert_str_eq(lc.curve_secret_key_file, want);
  snprintf(want, sizeof want, "%s/conf/allowed", real);
  ck_assert_str_eq(lc.curve_allowed_keys, want);
  lh_actors_config ac;
  ck_assert_msg(lh_actors_config_read(doc, &ac, &e) == 0, "%s", e.msg);
  snprintf(want, sizeof want, "%s/keys/l.pub", real);
  ck_assert_str_eq(ac.curve_server_key_file, want);
  ck_assert_str_eq(ac.curve_secret_key_file, "/abs/a.key");
  snprintf(want, sizeof want, "%s/build/lib.so", real);
  ck_assert_uint_eq(ac.n_env_options, 1);
  ck_assert_str_eq(ac.env_keys[0], "plugin");
  ck_assert_str_eq(ac.env_values[0], want);
  lh_cli_env_section o;
  char msg[512];
  ck_assert_int_eq(lh_cli_env_section_read(doc, &o, msg, sizeof msg), 0);
  ck_assert_str_eq(o.name, "reverse");
  ck_assert_uint_eq(o.n, 1);
  ck_assert_str_eq(o.opts[0].value, want);
  lh_cli_env_section_free(&o);
  lh_launch_config fc;
  ck_assert_msg(lh_launch_config_read(doc, &fc, &e) == 0, "%s", e.msg);
  snprintf(want, sizeof want, "%s/runs/logs", real);
  ck_assert_str_eq(fc.log_dir, want);
  snprintf(want, sizeof want, "%s/conf/sft", real);
  ck_assert_str_eq(fc.init, want);
  lh_ini_doc_free(doc);
  /* --set paths: against the current directory. */
  const char *sets[] = {"learner.db=x.db"};
  doc = doc_of(path, sets, 1);
  ck_assert_int_eq(lh_learner_config_read(doc, &lc, &e), 0);
  char cwd[PATH_MAX];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  snprintf(want, sizeof want, "%s/x.db", cwd);
  ck_assert_str_eq(lc.db, want);
  lh_ini_doc_free(doc);
  lh_proc_rmdir(dir);
}
END_TEST

/* [actor] of text read whole: 0 or the code, message in e. */
static int actor_of(const char *text, lh_actors_config *ac, lh_errbuf *e) {
  return lh_actors_config_parse(text, "fleet.ini", ac, e);
}

START_TEST(test_endpoints_once) {
  lh_actors_config ac;
  lh_errbuf e = {0};
  /* Not given anywhere: the defaults, the same on both sides. */
  ck_assert_int_eq(actor_of("[actor]\nbatch = 2\n", &ac, &e), 0);
  ck_assert_str_eq(ac.learner_endpoint, "tcp://127.0.0.1:5555");
  /* Written once in [learner]. */
  const char *learner = "[learner]\ningest_endpoint = tcp://10.1.2.3:7000\nweights_pub_endpoint = none\n"
                        "weights_endpoint = ipc:///tmp/w\n";
  ck_assert_msg(actor_of(learner, &ac, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(ac.learner_endpoint, "tcp://10.1.2.3:7000");
  ck_assert_str_eq(ac.weights_pub_endpoint, "none");
  ck_assert_str_eq(ac.weights_endpoint, "ipc:///tmp/w");
  /* [actor]'s own win. */
  char text[512];
  snprintf(text, sizeof text, "%s[actor]\nlearner_endpoint = tcp://learner.example:7000\n", learner);
  ck_assert_int_eq(actor_of(text, &ac, &e), 0);
  ck_assert_str_eq(ac.learner_endpoint, "tcp://learner.example:7000");
  ck_assert_str_eq(ac.weights_endpoint, "ipc:///tmp/w");
  /* A wildcard bind host is no address to connect to. */
  const char *wild[] = {"tcp://*:7000", "tcp://0.0.0.0:7000", "tcp://[::]:7000"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(text, sizeof text, "[learner]\n\ningest_endpoint = %s\n", wild[i]);
    ck_assert_int_eq(actor_of(text, &ac, &e), LH_EACTORS_CONFIG_VALUE);
    msg_has(&e, "fleet.ini:3: [learner] ingest_endpoint = ");
    msg_has(&e, "set [actor] learner_endpoint");
    snprintf(text, sizeof text, "[learner]\ningest_endpoint = %s\n[actor]\nlearner_endpoint = tcp://h:7000\n",
             wild[i]);
    ck_assert_int_eq(actor_of(text, &ac, &e), 0);
  }
  ck_assert_int_eq(actor_of("[learner]\nweights_endpoint = tcp://*:1\n", &ac, &e), LH_EACTORS_CONFIG_VALUE);
  msg_has(&e, "set [actor] weights_endpoint");
}
END_TEST

/* `longhaul ARGS` through sh: its exit code, output in out. */
static int longhaul(const char *args, char *out, size_t cap) {
  char cmd[4096];
  int n = snprintf(cmd, sizeof cmd, "%s %s", lh_proc_longhaul(), args);
  ck_assert(n > 0 && (size_t)n < sizeof cmd);
  return lh_proc_run_capture(cmd, out, cap);
}

START_TEST(test_commands_set) {
  ck_assert_msg(lh_proc_longhaul() != NULL, "LH_BIN is not set");
  char dir[64], args[8192], out[8192];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "configcli"), 0);
  char cfg[128];
  snprintf(cfg, sizeof cfg, "%s/fleet.ini", dir);
  ck_assert_int_eq(lh_proc_write_file(cfg, "[model]\nd_model = 16\nheads = 2\n[env]\nname = calc\n"), 0);
  /* The process-level check: an unknown key in an override. */
  snprintf(args, sizeof args, "learner --config %s --set learner.bogus=1 2>&1", cfg);
  ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--set learner.bogus") != NULL, "%s", out);
  /* An actor's name the learner would refuse is refused at start (it was
   * refused at the first send, exit 1). */
  snprintf(args, sizeof args, "actor --config %s --name %0300d 2>&1", cfg, 7);
  ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--name is 300 bytes, over the limit of 256"), "%s", out);
  snprintf(args, sizeof args, "actor --config %s --name $(printf 'a\\377') 2>&1", cfg);
  ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--name is not valid UTF-8"), "%s", out);
  /* Every command that reads the config takes --set, both spellings. */
  const char *commands[] = {"learner --config %s",
                            "actor --name a0 --config %s",
                            "launch %s",
                            "sft --out %s.sft --config %s",
                            "eval --ckpt /nonexistent --config %s",
                            "init --seed 1 --out %s.init --config %s"};
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, commands[i], cfg, cfg);
    snprintf(args, sizeof args, "%s --set model.bogus=1 2>&1", cmd);
    ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--set model.bogus: [model] unknown key 'bogus'"), "%s: %s", cmd, out);
    snprintf(args, sizeof args, "%s --set=flet.learners=1 2>&1", cmd);
    ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--set flet.learners: unknown section [flet]"), "%s: %s", cmd, out);
    snprintf(args, sizeof args, "%s --set 2>&1", cmd);
    ck_assert_int_eq(longhaul(args, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--set needs section.key=value"), "%s: %s", cmd, out);
  }
  /* A valid override is taken: init writes the overridden model. */
  snprintf(args, sizeof args, "init --config %s --seed 1 --out %s/m --set model.layers=3 2>&1", cfg, dir);
  ck_assert_msg(longhaul(args, out, sizeof out) == 0, "%s", out);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/m", dir);
  lh_model *m = NULL;
  lh_errbuf e = {0};
  ck_assert_msg(lh_model_load(path, lh_backend_cpu(), &m, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_model_get_config(m)->layers, 3);
  ck_assert_int_eq(lh_model_get_config(m)->d_model, 16);
  lh_model_free(m);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_launch_forwards_set) {
  /* A tiny calc fleet whose learner and actors agree only through the
   * overrides: the model is changed by --set alone, so an actor that did
   * not get it would build another model than the learner's weights. */
  lfx_fleet f;
  lfx_init(&f, "configset");
  char *src = lfx_example("calc.ini");
  lfx_override o[] = {{"fleet.steps", "2"}, {"fleet.duration_s", "200"}, {"fleet.actors", "1"}};
  lfx_write_config(&f, src, o, 3);
  free(src);
  char out[LFX_PATH + 16];
  snprintf(out, sizeof out, "%s/launch.out", f.dir);
  const char *args[] = {"launch", f.config, "--status", "plain", "--set", "model.layers=1", "--set=learner.lr=0.002",
                        NULL};
  f.launcher = lh_proc_spawn_longhaul(out, args);
  ck_assert_int_gt(f.launcher, 0);
  int rc = lfx_wait(&f, 240);
  char *text = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d:\n%s", rc, text);
  ck_assert_msg(strstr(text, "done reason=steps done clean=1"), "%s", text);
  free(text);
  const char *children[] = {"learner.log", "actor-0.log"};
  for (int i = 0; i < 2; i++) {
    char log[LFX_PATH + 32];
    snprintf(log, sizeof log, "%s/%s", f.logs, children[i]);
    ck_assert_msg(lh_proc_file_has(log, "--set model.layers=1 --set learner.lr=0.002"), "%s lacks the overrides",
                  log);
  }
  ck_assert_int_ge(lfx_sql_int(&f, "SELECT count(*) FROM train_steps"), 2);
  lfx_cleanup(&f);
}
END_TEST

/* sft's and eval's [env] (lh_cli_env_section_read) is the actors' reader:
 * the same options in the same order, no name when [env] gives none, and
 * the actors' message for a key given twice. */
START_TEST(test_env_one_reader) {
  char dir[256];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "env_reader"), 0);
  lh_ini_doc *doc = doc_of(file_in(dir, "a.ini", "[env]\ntokens = 600\nexpert_noise = 0.1\n"), NULL, 0);
  lh_actors_config ac;
  lh_errbuf e = {0};
  ck_assert_msg(lh_actors_config_read(doc, &ac, &e) == 0, "%s", e.msg);
  lh_cli_env_section o;
  char msg[512];
  ck_assert_int_eq(lh_cli_env_section_read(doc, &o, msg, sizeof msg), 0);
  ck_assert_ptr_null(o.name);
  ck_assert_uint_eq(o.n, ac.n_env_options);
  for (size_t i = 0; i < o.n; i++) {
    ck_assert_str_eq(o.opts[i].key, ac.env_keys[i]);
    ck_assert_str_eq(o.opts[i].value, ac.env_values[i]);
  }
  lh_cli_env_section_free(&o);
  lh_ini_doc_free(doc);
  doc = doc_of(file_in(dir, "b.ini", "[env]\nname = needle\ntokens = 600\ntokens = 700\n"), NULL, 0);
  ck_assert_int_ne(lh_actors_config_read(doc, &ac, &e), 0);
  ck_assert_int_eq(lh_cli_env_section_read(doc, &o, msg, sizeof msg), -1);
  ck_assert_str_eq(msg, e.msg);
  ck_assert_msg(strstr(msg, "b.ini:4: [env] tokens = 700: the key was already given on line 3"), "%s", msg);
  lh_ini_doc_free(doc);
  lh_proc_rmdir(dir);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {
      {"env_one_reader", test_env_one_reader, 0},
      {"unknown_section", test_unknown_section_every_reader, 0},
      {"set_readers", test_set_in_every_reader, 0},
      {"path_keys", test_path_keys, 0},
      {"endpoints", test_endpoints_once, 0},
      {"commands", test_commands_set, 0},
      {"launch", test_launch_forwards_set, 0},
  };
  return lh_test_cases_main("config_cli", cases, sizeof cases / sizeof cases[0], 300, argc, argv);
}

/* Tests of envs/: the action parser, the calc evaluator, the built-ins
 * (expert solves, random rarely does, determinism), the wrapper and plugins. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/calc.h"
#include "envs/env.h"

/* ---- parser ---- */

static int parse(const char *s, const char *tools, lh_action *a, lh_errbuf *e) {
  return lh_action_parse(s, strlen(s), tools, NULL, a, e);
}

START_TEST(test_parse_valid) {
  lh_action a;
  lh_errbuf e;
  ck_assert_int_eq(parse("<call>calc(1 + (2*3))</call>", "calc", &a, &e), 0);
  ck_assert_int_eq(a.kind, LH_ACTION_CALL);
  ck_assert_int_eq((int)a.tool_bytes, 4);
  ck_assert(memcmp(a.args, "1 + (2*3)", a.args_bytes) == 0);
  ck_assert_int_eq(parse("let me think <call> read( 12 ) </call>\n", "search,read", &a, &e), 0);
  ck_assert(memcmp(a.tool, "read", 4) == 0 && a.args_bytes == 4);
  ck_assert_int_eq(parse("  42/7 <eos>", "calc", &a, &e), 0);
  ck_assert_int_eq(a.kind, LH_ACTION_ANSWER);
  ck_assert(a.args_bytes == 4 && memcmp(a.args, "42/7", 4) == 0);
  ck_assert_int_eq(parse("<call>hint()</call>", "hint", &a, &e), 0);
  ck_assert_int_eq((int)a.args_bytes, 0);
  ck_assert_int_eq(parse("<call>anything_9(x)</call>", NULL, &a, &e), 0);
  ck_assert_int_eq(parse("héllo wörld<eos>", NULL, &a, &e), 0);
}
END_TEST

typedef struct {
  const char *text;
  size_t bytes;  /* 0: strlen */
  int code;
  const char *needle;  /* part of the message */
} bad_case;

START_TEST(test_parse_errors) {
  char long_args[LH_ENV_DEFAULT_MAX_ARG_BYTES + 64], long_answer[LH_ENV_DEFAULT_MAX_ANSWER_BYTES + 64];
  snprintf(long_args, sizeof long_args, "<call>calc(%0*d)</call>", LH_ENV_DEFAULT_MAX_ARG_BYTES + 1, 1);
  memset(long_answer, 'x', sizeof long_answer);
  memcpy(long_answer + sizeof long_answer - 6, "<eos>", 6);
  const bad_case cases[] = {
      {"", 0, LH_EENVS_CALL_EMPTY, "no action"},
      {"just some text", 0, LH_EENVS_CALL_EMPTY, "no action"},
      {"<call>(1+2)</call>", 0, LH_EENVS_CALL_MALFORMED, "tool name"},
      {"<call>Calc(1)</call>", 0, LH_EENVS_CALL_MALFORMED, "tool name"},
      {"<call>calc 1+2</call>", 0, LH_EENVS_CALL_MALFORMED, "'('"},
      {"<call>calc(1+2</call>", 0, LH_EENVS_CALL_MALFORMED, "')'"},
      {"<call>calc(1<eos>)</call>", 0, LH_EENVS_CALL_MALFORMED, "<eos> inside"},
      {"<call>abcdefghijabcdefghijabcdefghijabc(1)</call>", 0, LH_EENVS_CALL_MALFORMED, "longer than"},
      {"<call>rm(-rf)</call>", 0, LH_EENVS_CALL_UNKNOWN_TOOL, "unknown tool 'rm'"},
      {"<call>cal(1)</call>", 0, LH_EENVS_CALL_UNKNOWN_TOOL, "tools: calc"},
      {long_args, 0, LH_EENVS_CALL_ARGS_TOO_LONG, "at most"},
      {"<call>calc(1)", 0, LH_EENVS_CALL_UNBALANCED, "without </call>"},
      {"calc(1)</call>", 0, LH_EENVS_CALL_UNBALANCED, "without <call>"},
      {"<call>calc(1)</call><call>calc(2)</call>", 0, LH_EENVS_CALL_UNBALANCED, "one call"},
      {"<call><call>calc(1)</call>", 0, LH_EENVS_CALL_UNBALANCED, "one call"},
      {"</call>x<call>", 0, LH_EENVS_CALL_UNBALANCED, "before <call>"},
      {"\xff<eos>", 0, LH_EENVS_CALL_NOT_UTF8, "offset 0"},
      {"ab\xc0\x80<eos>", 0, LH_EENVS_CALL_NOT_UTF8, "offset 2"},
      {"\xed\xa0\x80<eos>", 0, LH_EENVS_CALL_NOT_UTF8, "0xed"},
      {"ok\xe2\x82", 0, LH_EENVS_CALL_NOT_UTF8, "offset 2"},
      {"\xf4\x90\x80\x80<eos>", 0, LH_EENVS_CALL_NOT_UTF8, "0xf4"},
      {"a\0b<eos>", 8, LH_EENVS_CALL_NOT_UTF8, "0x00"},
      {long_answer, sizeof long_answer - 1, LH_EENVS_CALL_ANSWER_TOO_LONG, "answer is"},
      {"<call>calc(1)</call> and more", 0, LH_EENVS_CALL_TRAILING, "after </call>"},
      {"42<eos> 43", 0, LH_EENVS_CALL_TRAILING, "after <eos>"},
      {"42<eos><eos>", 0, LH_EENVS_CALL_TRAILING, "after <eos>"},
      {"done<eos><call>calc(1)</call>", 0, LH_EENVS_CALL_TRAILING, "after <eos>"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lh_action a;
    lh_errbuf e;
    lh_errbuf_clear(&e);
    size_t n = cases[i].bytes ? cases[i].bytes : strlen(cases[i].text);
    int rc = lh_action_parse(cases[i].text, n, "calc", NULL, &a, &e);
    ck_assert_msg(rc == cases[i].code, "case %zu: got %s (%s), want %s", i, lh_err_name(rc), e.msg,
                  lh_err_name(cases[i].code));
    ck_assert_msg(strstr(e.msg, cases[i].needle) != NULL, "case %zu: message '%s' lacks '%s'", i, e.msg,
                  cases[i].needle);
  }
  lh_action a;
  ck_assert_int_eq(lh_action_parse(NULL, 3, "calc", NULL, &a, NULL), LH_EINVAL);
  ck_assert_int_eq(lh_action_parse("x", 1, "calc", NULL, NULL, NULL), LH_EINVAL);
}
END_TEST

/* Random bytes mixed with marker fragments, through the parser and the
 * whole calc step path: nothing may crash, every result is 0 or a CALL
 * error, and the observation is always text. */
START_TEST(test_parse_fuzz) {
  static const char *const pieces[] = {"<call>", "</call>", "<eos>", "calc", "(", ")", "1", "/", "0",
                                       "*", "-", " ", "\xff", "\xc3\xa9", "\xe2\x82", "<", ">", "9999999999"};
  lh_env_rng r;
  lh_env_rng_seed(&r, 7);
  lh_env *env;
  lh_errbuf e;
  const lh_env_option opts[] = {{"max_steps", "1000000"}};
  ck_assert_int_eq(lh_env_open("calc", opts, 1, &env, &e), 0);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 1, &obs, &e), 0);
  char buf[256];
  int calls = 0, errors = 0;
  for (int i = 0; i < 100000; i++) {
    size_t n = 0, parts = lh_env_rng_below(&r, 12);
    int wrap = lh_env_rng_below(&r, 3) == 0;  /* a third look like calls */
    if (wrap) memcpy(buf, "<call>calc(", 11), n = 11;
    for (size_t k = 0; k < parts; k++) {
      if (lh_env_rng_below(&r, 3) == 0) {
        size_t raw = lh_env_rng_below(&r, 6);
        for (size_t j = 0; j < raw && n < sizeof buf - 8; j++) buf[n++] = (char)lh_env_rng_below(&r, 256);
      } else {
        const char *p = pieces[lh_env_rng_below(&r, sizeof pieces / sizeof pieces[0])];
        size_t len = strlen(p);
        if (n + len <= sizeof buf - 8) memcpy(buf + n, p, len), n += len;
      }
    }
    if (wrap) memcpy(buf + n, ")</call>", 8), n += 8;
    lh_action a;
    int rc = lh_action_parse(buf, n, "calc", NULL, &a, &e);
    ck_assert(rc == 0 || (rc <= LH_EENVS_CALL_EMPTY && rc >= LH_EENVS_CALL_TRAILING));
    if (rc == 0) {
      ck_assert(a.args + a.args_bytes <= buf + n && a.args >= buf);
      lh_calc_q q;
      lh_calc_eval(a.args, a.args_bytes, 0, &q, &e);
      calls++;
    } else {
      errors++;
    }
    lh_env_result res;
    if (lh_env_step(env, buf, n, &res, &e) < 0 || res.done) {
      ck_assert_int_eq(lh_env_reset(env, (uint64_t)i, &obs, &e), 0);
    } else {
      ck_assert(res.obs.text != NULL && strlen(res.obs.text) == res.obs.text_bytes);
    }
  }
  printf("fuzz: 100000 actions, %d parsed, %d rejected\n", calls, errors);
  lh_env_free(env);
}
END_TEST

/* ---- calc evaluator ---- */

static lh_calc_q eval_ok(const char *s) {
  lh_calc_q q = {0, 0};
  lh_errbuf e;
  int rc = lh_calc_eval(s, strlen(s), 0, &q, &e);
  ck_assert_msg(rc == 0, "'%s': %s", s, e.msg);
  return q;
}

static int eval_code(const char *s, int max_ops, char *msg) {
  lh_calc_q q;
  lh_errbuf e;
  lh_errbuf_clear(&e);
  int rc = lh_calc_eval(s, strlen(s), max_ops, &q, &e);
  if (msg) strcpy(msg, e.msg);
  return rc;
}

START_TEST(test_calc_eval) {
  lh_calc_q q = eval_ok("1 + 2 * 3");
  ck_assert(q.num == 7 && q.den == 1);
  q = eval_ok("(1 + 2) * 3 - -4");
  ck_assert(q.num == 13 && q.den == 1);
  q = eval_ok("1/3 + 1/6");
  ck_assert(q.num == 1 && q.den == 2);
  q = eval_ok("-(6/4)");
  ck_assert(q.num == -3 && q.den == 2);
  q = eval_ok("2/-4");
  ck_assert(q.num == -1 && q.den == 2);
  q = eval_ok("9223372036854775807 - 1 + 1");
  ck_assert(q.num == INT64_MAX);
  q = eval_ok("(9223372036854775807 / 2) * 2");  /* the 128-bit product reduces back */
  ck_assert(q.num == INT64_MAX && q.den == 1);
  ck_assert_int_eq(eval_code("4611686018427387904 * 4 / 8", 0, NULL), LH_EENVS_CALC_OVERFLOW);
  char msg[LH_ERRMSG_BYTES];
  ck_assert_int_eq(eval_code("1/0", 0, msg), LH_EENVS_CALC_DIV_ZERO);
  ck_assert(strstr(msg, "division by zero at offset 1"));
  ck_assert_int_eq(eval_code("5 / (3 - 3)", 0, msg), LH_EENVS_CALC_DIV_ZERO);
  ck_assert_int_eq(eval_code("9223372036854775807 + 1", 0, msg), LH_EENVS_CALC_OVERFLOW);
  ck_assert_int_eq(eval_code("99999999999999999999", 0, msg), LH_EENVS_CALC_OVERFLOW);
  ck_assert_int_eq(eval_code("3037000500 * 3037000500", 0, msg), LH_EENVS_CALC_OVERFLOW);
  ck_assert_int_eq(eval_code("1 / 9223372036854775807 / 9223372036854775807", 0, msg), LH_EENVS_CALC_OVERFLOW);
  ck_assert_int_eq(eval_code("", 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(eval_code("1 +", 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(eval_code("(1", 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(eval_code("1 2", 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert(strstr(msg, "unexpected character at offset 2"));
  ck_assert_int_eq(eval_code("x", 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(eval_code("1 + 2 + 3 + 4", 2, msg), LH_EENVS_CALC_TOO_MANY_OPS);
  ck_assert_int_eq(eval_code("-1 + -2", 1, msg), 0);
  char deep[400];
  memset(deep, '(', 100);
  strcpy(deep + 100, "1");
  ck_assert_int_eq(eval_code(deep, 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert(strstr(msg, "deeper than 64"));
  memset(deep, '-', 300);
  strcpy(deep + 300, "1");
  ck_assert_int_eq(eval_code(deep, 0, msg), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(lh_calc_parse_literal("-17/3", 5, &q), 0);
  ck_assert(q.num == -17 && q.den == 3);
  ck_assert_int_eq(lh_calc_parse_literal("4/2", 3, &q), 0);
  ck_assert(q.num == 2 && q.den == 1);
  ck_assert_int_eq(lh_calc_parse_literal("1/0", 3, &q), LH_EENVS_CALC_DIV_ZERO);
  ck_assert_int_eq(lh_calc_parse_literal("1+1", 3, &q), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(lh_calc_parse_literal("", 0, &q), LH_EENVS_CALC_SYNTAX);
  ck_assert_int_eq(lh_calc_parse_literal("3/", 2, &q), LH_EENVS_CALC_SYNTAX);
}
END_TEST

/* ---- built-ins ---- */

typedef struct {
  int success;
  uint32_t steps;
  uint64_t hash;  /* of every observation's text and pixels */
} episode;

static uint64_t hash_obs(uint64_t h, const lh_env_obs *o) {
  h = lh_hash64(o->text, o->text_bytes, h);
  for (uint32_t i = 0; i < o->image_count; i++)
    h = lh_hash64(o->images[i].pixels,
                  (size_t)o->images[i].width * o->images[i].height * o->images[i].channels, h);
  return h;
}

/* A policy that knows each tool's shape but nothing of the task. */
static void random_action(const char *env, lh_env_rng *r, char *buf, size_t cap) {
  static const char ops[] = "+-*/";
  static const char *const words[] = {"red", "teal", "Lisbon", "Osaka", "1234", "Park", "ID-"};
  uint32_t k = lh_env_rng_below(r, 3);
  if (strcmp(env, "calc") == 0) {
    if (k < 2) snprintf(buf, cap, "<call>calc(%u %c %u)</call>", lh_env_rng_below(r, 100),
                        ops[lh_env_rng_below(r, 4)], 1 + lh_env_rng_below(r, 99));
    else snprintf(buf, cap, "%d<eos>", (int)lh_env_rng_below(r, 400) - 200);
  } else if (strcmp(env, "needle") == 0) {
    const char *w = words[lh_env_rng_below(r, 7)];
    if (k == 0) snprintf(buf, cap, "<call>search(%s)</call>", w);
    else if (k == 1) snprintf(buf, cap, "<call>read(%u)</call>", 1 + lh_env_rng_below(r, 40));
    else snprintf(buf, cap, "%s<eos>", w);
  } else {
    snprintf(buf, cap, "<call>move(%c)</call>", "NSEW"[lh_env_rng_below(r, 4)]);
  }
}

static episode run_episode(lh_env *env, uint64_t seed, int use_expert) {
  episode ep = {0, 0, 0};
  lh_errbuf e;
  lh_env_obs obs;
  ck_assert_msg(lh_env_reset(env, seed, &obs, &e) == 0, "%s", e.msg);
  ep.hash = hash_obs(seed, &obs);
  lh_env_rng r;
  lh_env_rng_seed(&r, seed * 31 + 5);
  char buf[256];
  for (;;) {
    const char *action = buf;
    if (use_expert) ck_assert_msg(lh_env_expert(env, &action, &e) == 0, "%s", e.msg);
    else random_action(lh_env_name(env), &r, buf, sizeof buf);
    lh_env_result res;
    ck_assert_msg(lh_env_step(env, action, strlen(action), &res, &e) == 0, "%s", e.msg);
    ep.hash = hash_obs(ep.hash, &res.obs);
    ep.steps++;
    if (res.done) {
      ep.success = res.outcome == LH_ENV_SUCCESS;
      ck_assert(!ep.success || res.reward == 1.0f);
      return ep;
    }
  }
}

static void check_env(const char *name, const lh_env_option *opts, size_t n, double max_random_rate) {
  lh_env *env, *twin;
  lh_errbuf e;
  ck_assert_msg(lh_env_open(name, opts, n, &env, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_env_open(name, opts, n, &twin, &e), 0);
  int solved = 0, random_solved = 0;
  for (uint64_t seed = 0; seed < 100; seed++) {
    episode a = run_episode(env, seed, 1);
    ck_assert_msg(a.success, "%s: the expert failed seed %llu", name, (unsigned long long)seed);
    solved += a.success;
    episode b = run_episode(twin, seed, 1);
    ck_assert(a.hash == b.hash && a.steps == b.steps);  /* same seed, same episode */
    episode c = run_episode(env, seed, 0), d = run_episode(twin, seed, 0);
    ck_assert(c.hash == d.hash && c.steps == d.steps);
    random_solved += c.success;
  }
  episode x = run_episode(env, 1, 1), y = run_episode(env, 2, 1);
  ck_assert(x.hash != y.hash);  /* different seeds, different tasks */
  printf("%s: expert solved %d/100 seeds, random policy %d/100\n", name, solved, random_solved);
  ck_assert_msg(random_solved <= max_random_rate * 100, "%s: random policy solved %d/100", name,
                random_solved);
  lh_env_free(env);
  lh_env_free(twin);
}

START_TEST(test_calc_env) {
  check_env("calc", NULL, 0, 0.02);
  const lh_env_option hard[] = {{"stages", "8"}, {"digits", "3"}};
  check_env("calc", hard, 2, 0.02);
}
END_TEST

START_TEST(test_needle_env) {
  check_env("needle", NULL, 0, 0.03);
  const lh_env_option big[] = {{"tokens", "120000"}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("needle", big, 1, &env, &e), 0);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 3, &obs, &e), 0);
  ck_assert_msg(obs.text_bytes > 100000, "document of %zu bytes", obs.text_bytes);
  episode ep = run_episode(env, 3, 1);
  ck_assert(ep.success && ep.steps == 3);
  lh_env_free(env);
}
END_TEST

/* remind = 1: read's result ends with the question's id and field (the
 * answer then needs no memory of the first observation); search's does
 * not, and the expert still solves the episode. */
START_TEST(test_needle_remind) {
  const lh_env_option opts[] = {{"remind", "1"}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("needle", opts, 1, &env, &e), 0);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 5, &obs, &e), 0);
  const char *q = strstr(obs.text, "Question: what is the ");
  ck_assert_ptr_nonnull(q);
  char field[16] = "", id[16] = "", want[48];
  ck_assert_int_eq(sscanf(q, "Question: what is the %15s of the record with id %15[^?]", field, id), 2);
  snprintf(want, sizeof want, "\nasked: %s %s", id, field);
  lh_env_result res = {0};
  for (int step = 0; step < 3; step++) {
    const char *action;
    ck_assert_int_eq(lh_env_expert(env, &action, &e), 0);
    ck_assert_int_eq(lh_env_step(env, action, strlen(action), &res, &e), 0);
    if (step == 0) ck_assert_ptr_null(strstr(res.obs.text, "asked:"));
    if (step == 1) {
      size_t n = strlen(res.obs.text), w = strlen(want);
      ck_assert_msg(n > w && strcmp(res.obs.text + n - w, want) == 0, "read's result: %s", res.obs.text);
    }
  }
  ck_assert(res.done && res.reward == 1.0f);
  lh_env_free(env);
  const lh_env_option bad[] = {{"remind", "2"}};
  ck_assert_int_eq(lh_env_open("needle", bad, 1, &env, &e), LH_EENVS_BAD_OPTION);
}
END_TEST

START_TEST(test_maze_env) {
  check_env("maze", NULL, 0, 0.05);
  lh_env *env;
  lh_errbuf e;
  const lh_env_option opts[] = {{"size", "3"}, {"cell_px", "2"}};
  ck_assert_int_eq(lh_env_open("maze", opts, 2, &env, &e), 0);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 0, &obs, &e), 0);
  ck_assert_int_eq((int)obs.image_count, 1);
  ck_assert_int_eq((int)obs.images[0].width, 14);
  ck_assert_int_eq((int)obs.images[0].channels, 3);
  /* top-left block is a wall, the agent's block (1,1) is red */
  const uint8_t *px = obs.images[0].pixels;
  ck_assert_int_eq(px[0], 40);
  ck_assert(px[(2 * 14 + 2) * 3] == 220 && px[(2 * 14 + 2) * 3 + 1] == 40);
  lh_env_result res;
  ck_assert_int_eq(lh_env_step(env, "<call>move(up)</call>", 21, &res, &e), 0);
  ck_assert(strstr(res.obs.text, "expected N, S, E or W"));
  ck_assert_int_eq(lh_env_step(env, "<call>move(N)</call>", 20, &res, &e), 0);
  ck_assert(strstr(res.obs.text, "Blocked"));
  lh_env_free(env);
}
END_TEST

START_TEST(test_expert_noise) {
  const lh_env_option opts[] = {{"expert_noise", "0.5"}};
  const char *names[] = {"calc", "needle", "maze"};
  for (int k = 0; k < 3; k++) {
    lh_env *env;
    lh_errbuf e;
    ck_assert_int_eq(lh_env_open(names[k], opts, 1, &env, &e), 0);
    int solved = 0;
    for (uint64_t seed = 0; seed < 50; seed++) solved += run_episode(env, seed, 1).success;
    printf("%s: expert with noise 0.5 solved %d/50\n", names[k], solved);
    ck_assert(solved < 50);
    lh_env_free(env);
  }
}
END_TEST

START_TEST(test_calc_observations) {
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("calc", NULL, 0, &env, &e), 0);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 9, &obs, &e), 0);
  ck_assert(strstr(obs.text, "What is c?"));
  lh_env_result res;
  const char *div0 = "<call>calc(1/(2-2))</call>";
  ck_assert_int_eq(lh_env_step(env, div0, strlen(div0), &res, &e), 0);
  ck_assert_str_eq(res.obs.text, "error: calc: division by zero at offset 1");
  ck_assert(!res.done);
  const char *many = "<call>calc(1+2+3+4+5)</call>";
  ck_assert_int_eq(lh_env_step(env, many, strlen(many), &res, &e), 0);
  ck_assert(strstr(res.obs.text, "more than 3 operators"));
  ck_assert_int_eq(lh_env_step(env, "<call>nope(1)</call>", 20, &res, &e), 0);
  ck_assert(strstr(res.obs.text, "error: unknown tool 'nope'; tools: calc"));
  ck_assert_int_eq(lh_env_step(env, "\xfe<eos>", 6, &res, &e), 0);
  ck_assert(strstr(res.obs.text, "error: not UTF-8"));
  ck_assert_int_eq(lh_env_step(env, "<call>calc(7/14)</call>", 23, &res, &e), 0);
  ck_assert_str_eq(res.obs.text, "= 1/2");
  ck_assert_int_eq(lh_env_step(env, "banana<eos>", 11, &res, &e), 0);
  ck_assert(res.done && res.outcome == LH_ENV_FAILURE && res.reward == 0.0f);
  ck_assert(res.term_count == 1 && strcmp(res.terms[0].name, "correct") == 0);
  ck_assert_int_eq(lh_env_step(env, "1<eos>", 6, &res, &e), LH_EENVS_EPISODE_DONE);
  lh_env_free(env);
}
END_TEST

START_TEST(test_wrapper_errors) {
  lh_env *env = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("chess", NULL, 0, &env, &e), LH_EENVS_UNKNOWN_ENV);
  ck_assert(env == NULL && strstr(e.msg, "unknown environment 'chess'"));
  const lh_env_option bad[] = {{"stagez", "3"}};
  ck_assert_int_eq(lh_env_open("calc", bad, 1, &env, &e), LH_EENVS_BAD_OPTION);
  ck_assert(strstr(e.msg, "unknown option 'stagez'"));
  const lh_env_option range[] = {{"size", "99"}};
  ck_assert_int_eq(lh_env_open("maze", range, 1, &env, &e), LH_EENVS_BAD_OPTION);
  ck_assert(strstr(e.msg, "size=99 is outside"));
  const lh_env_option nan_[] = {{"expert_noise", "lots"}};
  ck_assert_int_eq(lh_env_open("needle", nan_, 1, &env, &e), LH_EENVS_BAD_OPTION);
  const lh_env_option steps[] = {{"max_steps", "2"}};
  ck_assert_int_eq(lh_env_open("calc", steps, 1, &env, &e), 0);
  lh_env_result res;
  ck_assert_int_eq(lh_env_step(env, "1<eos>", 6, &res, &e), LH_EENVS_NOT_RESET);
  const char *act;
  ck_assert_int_eq(lh_env_expert(env, &act, &e), LH_EENVS_NOT_RESET);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 1, &obs, &e), 0);
  ck_assert_int_eq(lh_env_step(env, "x", 1, &res, &e), 0);
  ck_assert(!res.done && strstr(res.obs.text, "error: no action"));
  ck_assert_int_eq(lh_env_step(env, "<call>calc(1)</call>", 20, &res, &e), 0);
  ck_assert(res.done && res.outcome == LH_ENV_TRUNCATED);
  ck_assert_int_eq(lh_env_steps(env), 2);
  ck_assert_int_eq(lh_env_max_steps(env), 2);
  ck_assert(strstr(lh_env_describe(env), "tools: calc"));
  lh_env_free(env);
  lh_env_free(NULL);
  lh_env_vtable broken = *lh_envs_find_builtin("calc");
  broken.step = NULL;
  ck_assert_int_eq(lh_env_open_vtable(&broken, NULL, 0, &env, &e), LH_EENVS_BAD_TABLE);
  ck_assert(strstr(e.msg, "'step' is NULL"));
  broken = *lh_envs_find_builtin("calc");
  broken.version = 0;
  ck_assert_int_eq(lh_env_open_vtable(&broken, NULL, 0, &env, &e), LH_EENVS_PLUGIN_VERSION);
  size_t n;
  const lh_env_vtable *const *all = lh_envs_builtin(&n);
  ck_assert_int_eq((int)n, 3);
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(lh_env_vtable_check(all[i], all[i]->name, &e), 0);
}
END_TEST

/* Option values that size an environment stop at explicit maxima, and the
 * error names the environment, the option and the range. */
START_TEST(test_option_maxima) {
  struct {
    const char *env, *key, *value, *says;
  } cases[] = {
      {"needle", "tokens", "4000001", "needle: option tokens=4000001 is outside 200..4000000"},
      {"needle", "tokens", "99999999999999999999", "needle: option tokens='99999999999999999999' is not an integer"},
      {"calc", "digits", "5", "calc: option digits=5 is outside 1..4"},
      {"calc", "stages", "9", "calc: option stages=9 is outside 1..8"},
      {"calc", "max_ops", "1001", "calc: option max_ops=1001 is outside 0..1000"},
      {"maze", "size", "17", "maze: option size=17 is outside 2..16"},
      {"maze", "cell_px", "17", "maze: option cell_px=17 is outside 1..16"},
      {"calc", "max_steps", "1000001", "option max_steps=1000001 is outside 1..1000000"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const lh_env_option o[] = {{cases[i].key, cases[i].value}};
    lh_env *env = NULL;
    lh_errbuf e;
    ck_assert_int_eq(lh_env_open(cases[i].env, o, 1, &env, &e), LH_EENVS_BAD_OPTION);
    ck_assert_msg(env == NULL && strstr(e.msg, cases[i].says), "%s", e.msg);
  }
  const lh_env_option top[] = {{"tokens", "4000000"}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("needle", top, 1, &env, &e), 0);
  lh_env_free(env);
}
END_TEST

static size_t heap_in_use(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

/* What an environment states as its footprint is at least what it
 * allocates, from open through a reset, steps, the expert and describe
 * (the heap's bytes in use before and after), and not far above it: an
 * env server charges each session this. */
START_TEST(test_footprint) {
  struct {
    const char *env;
    lh_env_option o[2];
    size_t n;
  } cases[] = {
      {"needle", {{"tokens", "4000000"}}, 1},
      {"needle", {{"tokens", "4000000"}, {"show_document", "0"}}, 2},
      {"needle", {{"tokens", "123457"}}, 1},
      {"needle", {{"tokens", "200"}}, 1},
      {"calc", {{"stages", "8"}, {"digits", "4"}}, 2},
      {"maze", {{"size", "16"}, {"cell_px", "16"}}, 2},
      {"maze", {{"size", "2"}, {"cell_px", "1"}}, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t before = heap_in_use(), most = 0;
    lh_env *env;
    lh_errbuf e;
    ck_assert_int_eq(lh_env_open(cases[i].env, cases[i].o, cases[i].n, &env, &e), 0);
    size_t stated = lh_env_footprint(env);
    for (uint64_t seed = 0; seed < 3; seed++) {
      lh_env_obs obs;
      ck_assert_int_eq(lh_env_reset(env, seed, &obs, &e), 0);
      for (int step = 0; step < 4; step++) {
        lh_env_result r;
        ck_assert_int_eq(lh_env_step(env, "<call>nope(1)</call>", 20, &r, &e), 0);  /* an error observation */
        if (r.done) break;
        const char *a;
        ck_assert_int_eq(lh_env_expert(env, &a, &e), 0);
        char act[256];
        snprintf(act, sizeof act, "%s", a);
        ck_assert_int_eq(lh_env_step(env, act, strlen(act), &r, &e), 0);
        if (heap_in_use() - before > most) most = heap_in_use() - before;
        if (r.done) break;
      }
      lh_env_describe(env);
      if (heap_in_use() - before > most) most = heap_in_use() - before;
    }
    printf("footprint %s %s=%s: stated %zu bytes, allocated at most %zu\n", cases[i].env, cases[i].o[0].key,
           cases[i].o[0].value, stated, most);
#ifndef __SANITIZE_ADDRESS__
    /* AddressSanitizer's allocator is not glibc's: mallinfo2 sees nothing. */
    ck_assert_msg(most <= stated, "%s allocated %zu bytes, stated %zu", cases[i].env, most, stated);
    ck_assert_msg(stated <= 2 * most + (64 << 10), "%s states %zu bytes for %zu", cases[i].env, stated, most);
#endif
    ck_assert_int_eq(lh_env_footprint(NULL), 0);
    lh_env_free(env);
  }
  /* a table of version 1 states none: charged the fixed amount */
  lh_env_vtable old = *lh_envs_find_builtin("calc");
  old.version = 1;
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open_vtable(&old, NULL, 0, &env, &e), 0);
  ck_assert(lh_env_footprint(env) >= LH_ENV_UNSTATED_FOOTPRINT_BYTES);
  lh_env_free(env);
}
END_TEST

/* begin/end in process give what lh_env_step gives */
START_TEST(test_split_steps_in_process) {
  lh_env *a, *b;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("maze", NULL, 0, &a, &e), 0);
  ck_assert_int_eq(lh_env_open("maze", NULL, 0, &b, &e), 0);
  lh_env_obs oa, ob;
  ck_assert_int_eq(lh_env_reset_begin(a, 4, &e), 0);
  ck_assert_int_eq(lh_env_reset_end(a, &oa, &e), 0);
  ck_assert_int_eq(lh_env_reset(b, 4, &ob, &e), 0);
  ck_assert(hash_obs(0, &oa) == hash_obs(0, &ob));
  for (;;) {
    const char *act;
    char buf[64];
    ck_assert_int_eq(lh_env_expert(a, &act, &e), 0);
    snprintf(buf, sizeof buf, "%s", act);
    lh_env_result ra, rb;
    ck_assert_int_eq(lh_env_step_begin(a, buf, strlen(buf), &e), 0);
    ck_assert_int_eq(lh_env_step_begin(a, buf, strlen(buf), &e), LH_EINVAL);
    ck_assert_int_eq(lh_env_step_end(a, &ra, &e), 0);
    ck_assert_int_eq(lh_env_step(b, buf, strlen(buf), &rb, &e), 0);
    ck_assert(hash_obs(0, &ra.obs) == hash_obs(0, &rb.obs) && ra.done == rb.done);
    if (ra.done) break;
  }
  lh_env_result r;
  ck_assert_int_eq(lh_env_step_end(a, &r, &e), LH_EINVAL);
  ck_assert_int_eq(lh_env_step_begin(a, "x", 1, &e), LH_EENVS_EPISODE_DONE);
  lh_env_free(a);
  lh_env_free(b);
  ck_assert_int_eq(lh_env_step_begin(NULL, "x", 1, &e), LH_EINVAL);
  ck_assert_int_eq(lh_env_reset_begin(NULL, 1, &e), LH_EINVAL);
}
END_TEST

/* ---- plugins (paths from the build) ---- */

START_TEST(test_plugin_good) {
  const lh_env_option opts[] = {{"plugin", LH_TEST_PLUGIN_GOOD}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_msg(lh_env_open("reverse", opts, 1, &env, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(lh_env_name(env), "reverse");
  for (uint64_t seed = 0; seed < 20; seed++) {
    episode ep = run_episode(env, seed, 1);
    ck_assert(ep.success && ep.steps == 2);
  }
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 1, &obs, &e), 0);
  lh_env_result res;
  ck_assert_int_eq(lh_env_step(env, "<call>peek()</call>", 19, &res, &e), 0);
  ck_assert(strstr(res.obs.text, "unknown tool 'peek'; tools: hint"));
  lh_env_free(env);
  /* a name that is not the plugin's */
  ck_assert_int_eq(lh_env_open("calc", opts, 1, &env, &e), LH_EENVS_UNKNOWN_ENV);
  ck_assert(strstr(e.msg, "provides 'reverse'"));
  /* options the plugin does not take are its own error */
  const lh_env_option more[] = {{"plugin", LH_TEST_PLUGIN_GOOD}, {"level", "3"}};
  ck_assert_int_eq(lh_env_open(NULL, more, 2, &env, &e), LH_EENVS_BAD_OPTION);
  ck_assert(strstr(e.msg, "reverse: takes no options"));
}
END_TEST

START_TEST(test_plugin_bad) {
  lh_env_plugin *p = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_plugin_load(LH_TEST_PLUGIN_BAD_VERSION, &p, &e), LH_EENVS_PLUGIN_VERSION);
  ck_assert(p == NULL && strstr(e.msg, "table version 99 not supported"));
  ck_assert_int_eq(lh_env_plugin_load(LH_TEST_PLUGIN_BAD_SYMBOL, &p, &e), LH_EENVS_PLUGIN_SYMBOL);
  ck_assert(strstr(e.msg, "does not export the symbol 'lh_env_plugin_table'"));
  ck_assert_int_eq(lh_env_plugin_load("/nonexistent/libnothing.so", &p, &e), LH_EENVS_PLUGIN_OPEN);
  ck_assert(strstr(e.msg, "/nonexistent/libnothing.so"));
  ck_assert_int_eq(lh_env_plugin_load("", &p, &e), LH_EINVAL);
  const lh_env_option opts[] = {{"plugin", LH_TEST_PLUGIN_BAD_VERSION}};
  lh_env *env = NULL;
  ck_assert_int_eq(lh_env_open(NULL, opts, 1, &env, &e), LH_EENVS_PLUGIN_VERSION);
  ck_assert(env == NULL);
  const lh_env_option both[] = {{"plugin", LH_TEST_PLUGIN_GOOD}, {"server", "ipc:///tmp/x"}};
  ck_assert_int_eq(lh_env_open("reverse", both, 2, &env, &e), LH_EENVS_BAD_OPTION);
  ck_assert_int_eq(lh_env_plugin_load(LH_TEST_PLUGIN_GOOD, &p, &e), 0);
  ck_assert_str_eq(lh_env_plugin_vtable(p)->name, "reverse");
  lh_env_plugin_free(p);
  lh_env_plugin_free(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("envs");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_parse_valid);
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_parse_fuzz);
  tcase_add_test(tc, test_calc_eval);
  tcase_add_test(tc, test_calc_env);
  tcase_add_test(tc, test_needle_env);
  tcase_add_test(tc, test_needle_remind);
  tcase_add_test(tc, test_maze_env);
  tcase_add_test(tc, test_expert_noise);
  tcase_add_test(tc, test_calc_observations);
  tcase_add_test(tc, test_wrapper_errors);
  tcase_add_test(tc, test_option_maxima);
  tcase_add_test(tc, test_footprint);
  tcase_add_test(tc, test_split_steps_in_process);
  tcase_add_test(tc, test_plugin_good);
  tcase_add_test(tc, test_plugin_bad);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

/* calc: a chain of variable definitions, each using the previous one; the
 * tool calc(EXPR) evaluates exactly but knows no variables and takes at
 * most max_ops operators, so the chain needs one call per variable before
 * the answer. Sparse reward: 1 for the exact final value, else 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/calc.h"
#include "envs/internal.h"

/* Option maxima: a chain of at most 8 variables of at most 4-digit
 * operands (the values stay in exact 64-bit fractions), a tool call of at
 * most 1000 operators. */
#define CALC_MAX_STAGES 8
#define CALC_MAX_DIGITS 4
#define CALC_MAX_OPS 1000
#define CALC_TEXT_BYTES 1024 /* the question, an answer, an error (lh_errbuf) */

typedef struct {
  int form;          /* 0: (X op0 n0) op1 n1   1: n0 op0 (X op1 n1); stage 0 uses n2 for X */
  char op[2];
  int64_t n[3];
} stage;

typedef struct {
  long stages, digits, max_ops;
  double noise;
  stage st[CALC_MAX_STAGES];
  lh_calc_q value[CALC_MAX_STAGES];
  int progress, calls;
  lh_env_rng expert_rng;
  lh_str text, expert, desc;
  lh_env_term terms[1];
} calc_env;

static const char OPTIONS[] = "stages,digits,max_ops,expert_noise";

static int apply(char op, lh_calc_q a, lh_calc_q b, lh_calc_q *out) {
  switch (op) {
    case '+': return lh_calc_add(a, b, out);
    case '-': return lh_calc_sub(a, b, out);
    case '*': return lh_calc_mul(a, b, out);
    default: return lh_calc_div(a, b, out);
  }
}

static int stage_eval(const stage *s, lh_calc_q x, lh_calc_q *out) {
  lh_calc_q n0 = {s->n[0], 1}, n1 = {s->n[1], 1}, t;
  if (s->form == 0) {
    LH_TRY(apply(s->op[0], x, n0, &t));
    return apply(s->op[1], t, n1, out);
  }
  LH_TRY(apply(s->op[1], x, n1, &t));
  return apply(s->op[0], n0, t, out);
}

/* Writes the stage with X as text: the variable name, or a value. */
static void stage_print(lh_str *t, const stage *s, const char *x) {
  if (s->form == 0)
    lh_str_printf(t, "(%s %c %lld) %c %lld", x, s->op[0], (long long)s->n[0], s->op[1],
                        (long long)s->n[1]);
  else
    lh_str_printf(t, "%lld %c (%s %c %lld)", (long long)s->n[0], s->op[0], x, s->op[1],
                        (long long)s->n[1]);
}

static void value_operand(lh_calc_q q, char *buf, size_t cap) {
  int n = lh_calc_format(q, buf + 1, cap - 2);
  if (q.den != 1 || q.num < 0) {
    buf[0] = '(';
    buf[n + 1] = ')';
    buf[n + 2] = 0;
  } else {
    memmove(buf, buf + 1, (size_t)n + 1);
  }
}

static int calc_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  LH_TRY(lh_env_opt_check_keys(opts, count, "calc", OPTIONS, err));
  calc_env *e = calloc(1, sizeof *e);
  if (!e) return lh_errbuf_set(err, LH_ENOMEM, "calc: out of memory");
  int rc = lh_env_opt_int(opts, count, "stages", 3, 1, CALC_MAX_STAGES, &e->stages, err);
  if (!rc) rc = lh_env_opt_int(opts, count, "digits", 2, 1, CALC_MAX_DIGITS, &e->digits, err);
  if (!rc) rc = lh_env_opt_int(opts, count, "max_ops", 3, 0, CALC_MAX_OPS, &e->max_ops, err);
  if (!rc) rc = lh_env_opt_double(opts, count, "expert_noise", 0, 0, 1, &e->noise, err);
  if (rc) {
    free(e);
    return lh_envs_opt_error(err, rc, "calc");
  }
  *ctx = e;
  return 0;
}

/* Fixed by the option maxima: the context and three small text buffers. */
static size_t calc_footprint(void *ctx) {
  (void)ctx;
  return sizeof(calc_env) + 3 * LH_ENVS_TEXT_FOOTPRINT(CALC_TEXT_BYTES);
}

static void calc_destroy(void *ctx) {
  calc_env *e = ctx;
  if (!e) return;
  lh_str_free(&e->text);
  lh_str_free(&e->expert);
  lh_str_free(&e->desc);
  free(e);
}

static int64_t operand(lh_env_rng *r, long digits) {
  int64_t hi = 1;
  for (long i = 0; i < digits; i++) hi *= 10;
  return 2 + (int64_t)lh_env_rng_below(r, (uint32_t)(hi - 2));
}

static int calc_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  calc_env *e = ctx;
  lh_env_rng r;
  lh_env_rng_seed(&r, seed);
  lh_env_rng_seed(&e->expert_rng, seed ^ 0xe4e47ull);
  static const char ops[] = "+-*/";
  lh_calc_q x = {0, 1};
  for (int k = 0; k < e->stages; k++) {
    /* Redraw a stage until it divides by no zero and stays in range. */
    int tries = 0;
    for (;;) {
      stage *s = &e->st[k];
      s->form = (int)lh_env_rng_below(&r, 2);
      s->op[0] = ops[lh_env_rng_below(&r, 4)];
      s->op[1] = ops[lh_env_rng_below(&r, 4)];
      for (int i = 0; i < 3; i++) s->n[i] = operand(&r, e->digits);
      if (++tries > 200) s->op[0] = s->op[1] = '+';
      lh_calc_q in = k == 0 ? (lh_calc_q){s->n[2], 1} : x, out;
      if (stage_eval(s, in, &out) == 0 && out.den < 100000 && out.num < 100000000 &&
          out.num > -100000000) {
        e->value[k] = x = out;
        break;
      }
    }
  }
  e->progress = 0;
  e->calls = 0;
  /* The instructions come first and the question last, so that what the
   * first call copies sits right before it: a small policy with linear
   * attention copies from near by far more easily than from far. */
  lh_str_clear(&e->text);
  lh_str_printf(&e->text,
                      "The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, "
                      "+ - * /, parentheses; at most %ld operators; it knows no variables). "
                      "Answer with an integer or a fraction p/q, then <eos>.\n",
                      e->max_ops);
  lh_str_printf(&e->text, "Variables:\n");
  for (int k = 0; k < e->stages; k++) {
    char name[2] = {(char)('a' + k), 0}, prev[64];
    if (k == 0) snprintf(prev, sizeof prev, "%lld", (long long)e->st[0].n[2]);
    else snprintf(prev, sizeof prev, "%c", 'a' + k - 1);
    lh_str_printf(&e->text, "  %s = ", name);
    stage_print(&e->text, &e->st[k], prev);
    lh_str_printf(&e->text, "\n");
  }
  lh_str_printf(&e->text, "What is %c?", (char)('a' + e->stages - 1));
  (void)err;
  obs->text = e->text.data;
  obs->text_bytes = e->text.len;
  return 0;
}

static int calc_step(void *ctx, const char *action, size_t bytes, const lh_action *a,
                     lh_env_result *out, lh_errbuf *err) {
  (void)action, (void)bytes, (void)err;
  calc_env *e = ctx;
  lh_str_clear(&e->text);
  lh_calc_q goal = e->value[e->stages - 1], v;
  char buf[64];
  if (a->kind == LH_ACTION_CALL) {
    e->calls++;
    lh_errbuf cerr;
    if (lh_calc_eval(a->args, a->args_bytes, (int)e->max_ops, &v, &cerr) < 0) {
      lh_str_printf(&e->text, "error: calc: %s", cerr.msg);
    } else {
      lh_calc_format(v, buf, sizeof buf);
      lh_str_printf(&e->text, "= %s", buf);
      if (e->progress < e->stages && v.num == e->value[e->progress].num &&
          v.den == e->value[e->progress].den)
        e->progress++;
    }
  } else {
    int ok = lh_calc_parse_literal(a->args, a->args_bytes, &v) == 0 && v.num == goal.num &&
             v.den == goal.den;
    lh_calc_format(goal, buf, sizeof buf);
    lh_str_printf(&e->text, ok ? "correct: %s" : "wrong: the answer is %s", buf);
    out->done = 1;
    out->reward = ok ? 1.0f : 0.0f;
    out->outcome = ok ? LH_ENV_SUCCESS : LH_ENV_FAILURE;
    e->terms[0] = (lh_env_term){"correct", out->reward};
    out->terms = e->terms;
    out->term_count = 1;
  }
  out->obs.text = e->text.data;
  out->obs.text_bytes = e->text.len;
  return 0;
}

static int calc_expert(void *ctx, const char **action, lh_errbuf *err) {
  (void)err;
  calc_env *e = ctx;
  lh_str_clear(&e->expert);
  char buf[64];
  if (e->noise > 0 && lh_env_rng_unit(&e->expert_rng) < e->noise) {
    /* A wrong move: a useless call or a wrong answer, equally often. */
    if (lh_env_rng_below(&e->expert_rng, 2))
      lh_str_printf(&e->expert, "<call>calc(%u * %u)</call>",
                          lh_env_rng_below(&e->expert_rng, 100), lh_env_rng_below(&e->expert_rng, 100));
    else
      lh_str_printf(&e->expert, "%lld<eos>",
                          (long long)e->value[e->stages - 1].num + 1 + lh_env_rng_below(&e->expert_rng, 50));
  } else if (e->progress < e->stages) {
    const stage *s = &e->st[e->progress];
    if (e->progress == 0) snprintf(buf, sizeof buf, "%lld", (long long)s->n[2]);
    else value_operand(e->value[e->progress - 1], buf, sizeof buf);
    lh_str_printf(&e->expert, "<call>calc(");
    stage_print(&e->expert, s, buf);
    lh_str_printf(&e->expert, ")</call>");
  } else {
    lh_calc_format(e->value[e->stages - 1], buf, sizeof buf);
    lh_str_printf(&e->expert, "%s<eos>", buf);
  }
  *action = e->expert.data;
  return 0;
}

static const char *calc_describe(void *ctx) {
  calc_env *e = ctx;
  lh_str_clear(&e->desc);
  lh_str_printf(&e->desc,
                      "calc: multi-step exact arithmetic. The task defines variables a, b, ... "
                      "each from the previous one; the tool calc(EXPR) evaluates integers and "
                      "fractions exactly with at most max_ops operators and no variables, so each "
                      "variable takes one call. Division by zero and overflow are error "
                      "observations. Answer the last variable as n or p/q before <eos>.\n"
                      "tools: calc\n"
                      "options: stages=%ld (1..8), digits=%ld (1..4), max_ops=%ld (0 = any), "
                      "expert_noise=%g (0..1), max_steps (default 16)\n"
                      "reward: 1 for the exact answer, else 0 (term 'correct'); expert: evaluates "
                      "each variable in turn, then answers",
                      e->stages, e->digits, e->max_ops, e->noise);
  return e->desc.data;
}

const lh_env_vtable lh_envs_calc_vtable =
    LH_ENVS_BUILTIN(calc, "calc", "multi-step exact arithmetic with a calc(expr) tool", "calc", 16);

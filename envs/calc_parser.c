/* Exact rational arithmetic over int64 with overflow checks, and a
 * recursive-descent parser:
 *   expr  := term (('+' | '-') term)*
 *   term  := unary (('*' | '/') unary)*
 *   unary := ('-' | '+') unary | primary
 *   primary := integer | '(' expr ')'
 * Products are formed in 128 bits and reduced before the range check, so a
 * result is refused only when its lowest terms do not fit. */
#include <stdio.h>
#include <string.h>

#include "envs/calc.h"

typedef __int128 i128;

static i128 gcd128(i128 a, i128 b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int make(i128 num, i128 den, lh_calc_q *out) {
  if (den == 0) return LH_EENVS_CALC_DIV_ZERO;
  if (den < 0) num = -num, den = -den;
  i128 g = gcd128(num, den);
  if (g > 1) num /= g, den /= g;
  if (num > INT64_MAX || num < -INT64_MAX || den > INT64_MAX) return LH_EENVS_CALC_OVERFLOW;
  out->num = (int64_t)num;
  out->den = (int64_t)den;
  return 0;
}

int lh_calc_add(lh_calc_q a, lh_calc_q b, lh_calc_q *out) {
  return make((i128)a.num * b.den + (i128)b.num * a.den, (i128)a.den * b.den, out);
}
int lh_calc_sub(lh_calc_q a, lh_calc_q b, lh_calc_q *out) {
  return make((i128)a.num * b.den - (i128)b.num * a.den, (i128)a.den * b.den, out);
}
int lh_calc_mul(lh_calc_q a, lh_calc_q b, lh_calc_q *out) {
  /* Cross-reduce first so that the 128-bit product cannot overflow. */
  return make((i128)a.num * b.num, (i128)a.den * b.den, out);
}
int lh_calc_div(lh_calc_q a, lh_calc_q b, lh_calc_q *out) {
  if (b.num == 0) return LH_EENVS_CALC_DIV_ZERO;
  return make((i128)a.num * b.den, (i128)a.den * b.num, out);
}

typedef struct {
  const char *s, *p, *end;
  int ops, max_ops, depth;
  lh_errbuf *err;
} parser;

static void skip(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int fail(parser *ps, int code, const char *what) {
  return lh_errbuf_set(ps->err, code, "%s at offset %d", what, (int)(ps->p - ps->s));
}

static int expr(parser *ps, lh_calc_q *out);

static int primary(parser *ps, lh_calc_q *out) {
  skip(ps);
  if (ps->p >= ps->end) return fail(ps, LH_EENVS_CALC_SYNTAX, "expected a number or '('");
  if (*ps->p == '(') {
    if (++ps->depth > 64) return fail(ps, LH_EENVS_CALC_SYNTAX, "parentheses nested deeper than 64");
    ps->p++;
    LH_TRY(expr(ps, out));
    skip(ps);
    if (ps->p >= ps->end || *ps->p != ')') return fail(ps, LH_EENVS_CALC_SYNTAX, "expected ')'");
    ps->p++;
    ps->depth--;
    return 0;
  }
  if (*ps->p < '0' || *ps->p > '9') return fail(ps, LH_EENVS_CALC_SYNTAX, "expected a number or '('");
  int64_t v = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    int d = *ps->p - '0';
    if (v > (INT64_MAX - d) / 10) return fail(ps, LH_EENVS_CALC_OVERFLOW, "integer literal too large");
    v = v * 10 + d;
    ps->p++;
  }
  out->num = v;
  out->den = 1;
  return 0;
}

static int unary(parser *ps, lh_calc_q *out) {
  skip(ps);
  if (ps->p < ps->end && (*ps->p == '-' || *ps->p == '+')) {
    char sign = *ps->p++;
    if (++ps->depth > 64) return fail(ps, LH_EENVS_CALC_SYNTAX, "too many signs in a row");
    LH_TRY(unary(ps, out));
    ps->depth--;
    if (sign == '-') out->num = -out->num;
    return 0;
  }
  return primary(ps, out);
}

static int count_op(parser *ps) {
  ps->ops++;
  if (ps->max_ops > 0 && ps->ops > ps->max_ops) {
    lh_errbuf_set(ps->err, LH_EENVS_CALC_TOO_MANY_OPS,
                  "more than %d operators in one call; split the computation into steps",
                  ps->max_ops);
    return LH_EENVS_CALC_TOO_MANY_OPS;
  }
  return 0;
}

static int binary_result(parser *ps, int rc, const char *op_at) {
  if (rc == 0) return 0;
  const char *saved = ps->p;
  ps->p = op_at;
  rc = fail(ps, rc, rc == LH_EENVS_CALC_DIV_ZERO ? "division by zero" : "result does not fit in 64 bits");
  ps->p = saved;
  return rc;
}

static int term(parser *ps, lh_calc_q *out) {
  LH_TRY(unary(ps, out));
  for (;;) {
    skip(ps);
    if (ps->p >= ps->end || (*ps->p != '*' && *ps->p != '/')) return 0;
    const char *at = ps->p;
    char op = *ps->p++;
    LH_TRY(count_op(ps));
    lh_calc_q rhs;
    LH_TRY(unary(ps, &rhs));
    LH_TRY(binary_result(ps, op == '*' ? lh_calc_mul(*out, rhs, out) : lh_calc_div(*out, rhs, out), at));
  }
}

static int expr(parser *ps, lh_calc_q *out) {
  LH_TRY(term(ps, out));
  for (;;) {
    skip(ps);
    if (ps->p >= ps->end || (*ps->p != '+' && *ps->p != '-')) return 0;
    const char *at = ps->p;
    char op = *ps->p++;
    LH_TRY(count_op(ps));
    lh_calc_q rhs;
    LH_TRY(term(ps, &rhs));
    LH_TRY(binary_result(ps, op == '+' ? lh_calc_add(*out, rhs, out) : lh_calc_sub(*out, rhs, out), at));
  }
}

int lh_calc_eval(const char *s, size_t bytes, int max_ops, lh_calc_q *out, lh_errbuf *err) {
  if (!s && bytes) return lh_errbuf_set(err, LH_EINVAL, "lh_calc_eval: NULL text");
  if (!s) s = "";
  parser ps = {s, s, s + bytes, 0, max_ops, 0, err};
  lh_calc_q v;
  LH_TRY(expr(&ps, &v));
  skip(&ps);
  if (ps.p != ps.end) return fail(&ps, LH_EENVS_CALC_SYNTAX, "unexpected character");
  *out = v;
  return 0;
}

int lh_calc_parse_literal(const char *s, size_t bytes, lh_calc_q *out) {
  const char *p = s, *end = s + bytes;
  int neg = 0;
  if (p < end && (*p == '-' || *p == '+')) neg = *p++ == '-';
  int64_t v[2] = {0, 1};
  for (int part = 0; part < 2; part++) {
    if (p >= end || *p < '0' || *p > '9') return LH_EENVS_CALC_SYNTAX;
    int64_t x = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      int d = *p++ - '0';
      if (x > (INT64_MAX - d) / 10) return LH_EENVS_CALC_OVERFLOW;
      x = x * 10 + d;
    }
    v[part] = x;
    if (p == end) break;
    if (part == 1 || *p != '/') return LH_EENVS_CALC_SYNTAX;
    p++;
  }
  if (p != end) return LH_EENVS_CALC_SYNTAX;
  return make(neg ? -(i128)v[0] : (i128)v[0], v[1], out);
}

int lh_calc_format(lh_calc_q q, char *buf, size_t cap) {
  if (q.den == 1) return snprintf(buf, cap, "%lld", (long long)q.num);
  return snprintf(buf, cap, "%lld/%lld", (long long)q.num, (long long)q.den);
}

/* calc: exact rational arithmetic and its recursive-descent parser
 * (private to envs/; the calc environment and its tests use it). */
#ifndef LH_ENVS_CALC_H
#define LH_ENVS_CALC_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* num/den in lowest terms, den > 0, both within int64 (never INT64_MIN). */
typedef struct {
  int64_t num, den;
} lh_calc_q;

/* Arithmetic with overflow checks: LH_EENVS_CALC_OVERFLOW or
 * LH_EENVS_CALC_DIV_ZERO, result untouched on error. */
int lh_calc_add(lh_calc_q a, lh_calc_q b, lh_calc_q *out);
int lh_calc_sub(lh_calc_q a, lh_calc_q b, lh_calc_q *out);
int lh_calc_mul(lh_calc_q a, lh_calc_q b, lh_calc_q *out);
int lh_calc_div(lh_calc_q a, lh_calc_q b, lh_calc_q *out);

/* Evaluates an expression of integers, + - * /, unary minus and
 * parentheses (nesting at most 64). max_ops > 0 bounds the binary
 * operators (LH_EENVS_CALC_TOO_MANY_OPS). err->msg says what and where. */
int lh_calc_eval(const char *s, size_t bytes, int max_ops, lh_calc_q *out, lh_errbuf *err);

/* Parses an answer literal: optional sign, digits, optional /digits. */
int lh_calc_parse_literal(const char *s, size_t bytes, lh_calc_q *out);

/* Writes "n" or "n/d"; returns the length. */
int lh_calc_format(lh_calc_q q, char *buf, size_t cap);

#endif

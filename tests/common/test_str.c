/* common/str.h: the one string builder. Appends and printf of every size
 * against the plain C string they should make, exact reserves, and the
 * sticky failure that lh_str_clear forgets. And common/buf.h's
 * lh_reserve, the push growth of every array. */
#include "tests/case_main.h" /* check.h and the suite runner */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/common.h"
#include "common/str.h"

START_TEST(test_zero_is_empty) {
  lh_str s = {0};
  ck_assert_ptr_null(s.data);
  ck_assert_int_eq(lh_str_puts(&s, NULL), 0);
  ck_assert_int_eq(lh_str_puts(&s, ""), 0);
  ck_assert_ptr_nonnull(s.data);
  ck_assert_str_eq(s.data, "");
  lh_str_free(&s);
  lh_str_free(&s);
  lh_str_free(NULL);
}
END_TEST

/* Pieces of every length from 0 to 700 through append, puts and printf
 * (crossing the 64-byte room printf tries first and the doubling from
 * 256) make exactly the string a plain buffer makes. */
START_TEST(test_pieces_match_plain_text) {
  static char want[1 << 20];
  char piece[701];
  for (int i = 0; i < 700; i++) piece[i] = (char)('a' + i % 26);
  lh_str s = {0};
  size_t n = 0;
  for (int len = 0; len <= 700; len += 7) {
    memcpy(want + n, piece, (size_t)len);
    n += (size_t)len;
    switch (len % 3) {
      case 0: ck_assert_int_eq(lh_str_append(&s, piece, (size_t)len), 0); break;
      case 1: {
        char z[701];
        memcpy(z, piece, (size_t)len);
        z[len] = 0;
        ck_assert_int_eq(lh_str_puts(&s, z), 0);
        break;
      }
      default: ck_assert_int_eq(lh_str_printf(&s, "%.*s", len, piece), 0); break;
    }
    ck_assert_uint_eq(s.len, n);
    ck_assert_uint_lt(s.len, s.cap);
    ck_assert_int_eq(memcmp(s.data, want, n), 0);
    ck_assert_int_eq(s.data[n], 0);
  }
  ck_assert_int_eq(lh_str_printf(&s, "%d-%s-%.2f", 42, "x", 1.5), 0);
  ck_assert_str_eq(s.data + n, "42-x-1.50");
  lh_str_clear(&s);
  ck_assert_uint_eq(s.len, 0);
  ck_assert_str_eq(s.data, "");
  lh_str_free(&s);
}
END_TEST

START_TEST(test_reserve_is_exact) {
  lh_str s = {0};
  ck_assert_int_eq(lh_str_reserve(&s, 1000), 0);
  ck_assert_uint_eq(s.cap, 1001);
  ck_assert_str_eq(s.data, "");
  ck_assert_int_eq(lh_str_puts(&s, "abc"), 0);
  ck_assert_uint_eq(s.cap, 1001);
  ck_assert_int_eq(lh_str_reserve(&s, 10), 0);
  ck_assert_uint_eq(s.cap, 1001);
  lh_str_free(&s);
}
END_TEST

/* A size that cannot be had fails, sticks until a clear, and keeps what
 * was there. */
START_TEST(test_failure_sticks_until_clear) {
  lh_str s = {0};
  ck_assert_int_eq(lh_str_puts(&s, "kept"), 0);
  ck_assert_int_eq(lh_str_append(&s, "x", SIZE_MAX - 2), LH_ENOMEM);
  ck_assert_int_eq(s.failed, 1);
  ck_assert_int_eq(lh_str_puts(&s, "more"), LH_ENOMEM);
  ck_assert_int_eq(lh_str_printf(&s, "%d", 1), LH_ENOMEM);
  ck_assert_int_eq(lh_str_reserve(&s, SIZE_MAX), LH_ENOMEM);
  ck_assert_str_eq(s.data, "kept");
  lh_str_clear(&s);
  ck_assert_int_eq(s.failed, 0);
  ck_assert_int_eq(lh_str_puts(&s, "again"), 0);
  ck_assert_str_eq(s.data, "again");
  lh_str_free(&s);
}
END_TEST

/* Pushes through lh_reserve keep every value; capacities double from
 * first; an overflowing size fails and leaves the array as it was. */
START_TEST(test_reserve_pushes) {
  uint64_t *v = NULL;
  size_t n = 0, cap = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    ck_assert_int_eq(lh_reserve(&v, &cap, n + 1, sizeof *v, 16), 0);
    ck_assert(cap == 16 || (cap >= 32 && (cap & (cap - 1)) == 0));
    v[n++] = i * 7;
  }
  ck_assert_uint_eq(cap, 1024);
  for (uint64_t i = 0; i < 1000; i++) ck_assert_uint_eq(v[i], i * 7);
  uint64_t *before = v;
  ck_assert_int_eq(lh_reserve(&v, &cap, SIZE_MAX / 4, sizeof *v, 16), -1);
  ck_assert_ptr_eq(v, before);
  ck_assert_uint_eq(cap, 1024);
  ck_assert_int_eq(lh_reserve(&v, &cap, 10, sizeof *v, 16), 0);
  ck_assert_uint_eq(cap, 1024);
  free(v);
}
END_TEST

int main(void) {
  Suite *s = suite_create("str");
  TCase *tc = tcase_create("str");
  tcase_add_test(tc, test_zero_is_empty);
  tcase_add_test(tc, test_pieces_match_plain_text);
  tcase_add_test(tc, test_reserve_is_exact);
  tcase_add_test(tc, test_failure_sticks_until_clear);
  tcase_add_test(tc, test_reserve_pushes);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}

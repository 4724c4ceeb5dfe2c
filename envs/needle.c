/* needle: a generated document of records, one per line, and a question
 * about one record named by its unique id. Tools: search(TERM) lists the
 * lines holding TERM, read(N) shows line N. The document's length in tokens
 * (bytes; the tokenizer is byte-level) is an option, from a few hundred to
 * millions, so context-extension stages can grow it. Sparse reward: 1 for
 * the right field value, else 0. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

static const char *const FIRST[] = {"Ada", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana",
                                    "Ines", "Jonas", "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya"};
static const char *const LAST[] = {"Abe", "Barros", "Costa", "Dietz", "Eriksen", "Fofana", "Gupta", "Haas",
                                   "Ivanova", "Jensen", "Kaur", "Lopez", "Moreau", "Novak", "Okafor", "Park"};
static const char *const CITY[] = {"Lisbon", "Osaka", "Quito", "Tunis", "Oslo", "Lagos", "Perth", "Cusco",
                                   "Hanoi", "Turku", "Accra", "Leeds", "Porto", "Dakar", "Split", "Kyoto"};
static const char *const COLOR[] = {"red", "teal", "amber", "violet", "olive", "navy",
                                    "coral", "ivory", "jade", "plum", "rust", "slate"};
static const char *const FIELD[] = {"city", "color", "code"};
#define N_OF(a) (sizeof a / sizeof a[0])
#define ID_SPACE 2176782336ull /* 36^6 */
#define MAX_HITS 20
/* The document's length in tokens: 4e6 is a document of about 4.3 MB,
 * held twice while shown (the document and the observation); a server
 * charges a session that much (needle_footprint). */
#define NEEDLE_MIN_TOKENS 200
#define NEEDLE_MAX_TOKENS 4000000
#define NEEDLE_TEXT_BYTES 512 /* the question, a search's hits, one line */

typedef struct {
  long tokens, show_document, remind;
  double noise;
  lh_str doc;          /* all lines */
  size_t *line_at;           /* offset of each line in doc */
  size_t lines;
  size_t target;             /* 0-based line of the record asked about */
  int field;
  char id[16], answer[32];
  int line_known, line_read;
  lh_env_rng expert_rng;
  lh_str text, expert, desc;
  lh_env_term terms[1];
} needle_env;

static const char OPTIONS[] = "tokens,show_document,remind,expert_noise";

static int needle_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  LH_TRY(lh_env_opt_check_keys(opts, count, "needle", OPTIONS, err));
  needle_env *e = calloc(1, sizeof *e);
  if (!e) return lh_errbuf_set(err, LH_ENOMEM, "needle: out of memory");
  int rc = lh_env_opt_int(opts, count, "tokens", 2000, NEEDLE_MIN_TOKENS, NEEDLE_MAX_TOKENS, &e->tokens, err);
  if (!rc) rc = lh_env_opt_int(opts, count, "show_document", 1, 0, 1, &e->show_document, err);
  if (!rc) rc = lh_env_opt_int(opts, count, "remind", 0, 0, 1, &e->remind, err);
  if (!rc) rc = lh_env_opt_double(opts, count, "expert_noise", 0, 0, 1, &e->noise, err);
  if (rc) {
    free(e);
    return lh_envs_opt_error(err, rc, "needle");
  }
  *ctx = e;
  return 0;
}

static void needle_destroy(void *ctx) {
  needle_env *e = ctx;
  if (!e) return;
  lh_str_free(&e->doc);
  lh_str_free(&e->text);
  lh_str_free(&e->expert);
  lh_str_free(&e->desc);
  free(e->line_at);
  free(e);
}

static size_t doc_lines(const needle_env *e) {
  size_t lines = (size_t)e->tokens / 64;
  return lines < 3 ? 3 : lines;
}

static size_t longest(const char *const *names, size_t n) {
  size_t most = 0;
  for (size_t i = 0; i < n; i++)
    if (strlen(names[i]) > most) most = strlen(names[i]);
  return most;
}

/* The longest line write_line can write in a document of lines lines:
 * its fixed text, the longest value of each field, the line number. */
static size_t max_line_bytes(size_t lines) {
  size_t digits = 1;
  for (size_t v = lines; v >= 10; v /= 10) digits++;
  return sizeof "L id=ID-XXXXXX name=  city= color= code=9999\n" - 1 + digits + longest(FIRST, N_OF(FIRST)) +
         longest(LAST, N_OF(LAST)) + longest(CITY, N_OF(CITY)) + longest(COLOR, N_OF(COLOR));
}

/* The document and the observation are sized up front by reset (exact
 * capacities), so this is what they reach, with the line offsets and the
 * small buffers. */
static size_t needle_footprint(void *ctx) {
  needle_env *e = ctx;
  size_t lines = doc_lines(e), doc = lines * max_line_bytes(lines) + 1;
  size_t text = e->show_document ? doc + NEEDLE_TEXT_BYTES + 1 : LH_ENVS_TEXT_FOOTPRINT(NEEDLE_TEXT_BYTES);
  return sizeof *e + lines * sizeof *e->line_at + doc + text + LH_ENVS_TEXT_FOOTPRINT(NEEDLE_TEXT_BYTES) +
         LH_ENVS_TEXT_FOOTPRINT(1024) + 6 * LH_ENVS_ALLOC_SLACK;
}

static void format_id(uint64_t v, char *out) {
  static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  for (int i = 5; i >= 0; i--, v /= 36) out[i] = digits[v % 36];
  out[6] = 0;
}

/* Writes line i; the field values come from r, the id is a bijection of i
 * so that every id is unique. */
static void write_line(needle_env *e, lh_env_rng *r, size_t i, uint64_t id_offset, char *field_value[3],
                       char *id_out) {
  char id[8];
  format_id(((uint64_t)i * 2654435761ull + id_offset) % ID_SPACE, id);
  const char *city = CITY[lh_env_rng_below(r, N_OF(CITY))];
  const char *color = COLOR[lh_env_rng_below(r, N_OF(COLOR))];
  unsigned code = 1000 + lh_env_rng_below(r, 9000);
  const char *first = FIRST[lh_env_rng_below(r, N_OF(FIRST))];
  const char *last = LAST[lh_env_rng_below(r, N_OF(LAST))];
  lh_str_printf(&e->doc, "L%zu id=ID-%s name=%s %s city=%s color=%s code=%u\n", i + 1, id,
                      first, last, city, color, code);
  if (field_value) {
    snprintf(field_value[0], 32, "%s", city);
    snprintf(field_value[1], 32, "%s", color);
    snprintf(field_value[2], 32, "%u", code);
    snprintf(id_out, 16, "ID-%s", id);
  }
}

static int needle_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  needle_env *e = ctx;
  lh_env_rng r;
  lh_env_rng_seed(&r, seed);
  lh_env_rng_seed(&e->expert_rng, seed ^ 0x9ee71eull);
  size_t lines = doc_lines(e);
  if (lines != e->lines || !e->line_at) {
    free(e->line_at);
    e->line_at = malloc(lines * sizeof *e->line_at);
    if (!e->line_at) return lh_errbuf_set(err, LH_ENOMEM, "needle: out of memory for %zu lines", lines);
  }
  e->lines = lines;
  e->target = lh_env_rng_below(&r, (uint32_t)lines);
  e->field = (int)lh_env_rng_below(&r, 3);
  uint64_t id_offset = lh_env_rng_next(&r) % ID_SPACE;
  lh_str_clear(&e->doc);
  lh_str_clear(&e->text);
  if (lh_str_reserve(&e->doc, lines * max_line_bytes(lines)) < 0 ||
      (e->show_document && lh_str_reserve(&e->text, lines * max_line_bytes(lines) + NEEDLE_TEXT_BYTES) < 0))
    return lh_errbuf_set(err, LH_ENOMEM, "needle: out of memory for a document of %zu lines", lines);
  char values[3][32], *vp[3] = {values[0], values[1], values[2]};
  for (size_t i = 0; i < lines; i++) {
    e->line_at[i] = e->doc.len;
    write_line(e, &r, i, id_offset, i == e->target ? vp : NULL, e->id);
  }
  if (!e->doc.data) return lh_errbuf_set(err, LH_ENOMEM, "needle: out of memory for the document");
  snprintf(e->answer, sizeof e->answer, "%s", values[e->field]);
  e->line_known = e->line_read = 0;
  if (e->show_document) {
    lh_str_printf(&e->text, "Document (%zu lines):\n", lines);
    lh_str_append(&e->text, e->doc.data, e->doc.len);
  }
  /* The question comes last, right before the policy's first action: the
   * id it copies into search(...) is then a few tokens back, not behind
   * the tools' description (about 170 tokens, which a policy with
   * decaying memory must first learn to span before it can learn to copy
   * at all). */
  lh_str_printf(&e->text,
                      "Tools: <call>search(TERM)</call> lists the numbers of lines containing TERM; "
                      "<call>read(N)</call> shows line N. Answer with the value, then <eos>.\n"
                      "Question: what is the %s of the record with id %s?\n",
                      FIELD[e->field], e->id);
  if (!e->text.data) return lh_errbuf_set(err, LH_ENOMEM, "needle: out of memory for the observation");
  obs->text = e->text.data;
  obs->text_bytes = e->text.len;
  return 0;
}

static size_t line_len(const needle_env *e, size_t i) {
  size_t end = i + 1 < e->lines ? e->line_at[i + 1] : e->doc.len;
  return end - e->line_at[i] - 1;  /* without the newline */
}

static void do_search(needle_env *e, const char *term, size_t n) {
  while (n && isspace((unsigned char)*term)) term++, n--;
  while (n && isspace((unsigned char)term[n - 1])) n--;
  if (n >= 2 && (term[0] == '"' || term[0] == '\'') && term[n - 1] == term[0]) term++, n -= 2;
  if (n == 0) {
    lh_str_printf(&e->text, "error: search: empty term");
    return;
  }
  size_t hits = 0;
  lh_str_printf(&e->text, "lines:");
  for (size_t i = 0; i < e->lines; i++) {
    if (!memmem(e->doc.data + e->line_at[i], line_len(e, i), term, n)) continue;
    if (hits++ < MAX_HITS) lh_str_printf(&e->text, " %zu", i + 1);
    if (i == e->target && n >= 9) e->line_known = 1;  /* the id or more of it */
  }
  if (hits == 0) lh_str_printf(&e->text, " none");
  else if (hits > MAX_HITS) lh_str_printf(&e->text, " ... (%zu in all)", hits);
}

static void do_read(needle_env *e, const char *arg, size_t n) {
  while (n && isspace((unsigned char)*arg)) arg++, n--;
  while (n && isspace((unsigned char)arg[n - 1])) n--;
  if (n && (*arg == 'L' || *arg == 'l')) arg++, n--;
  size_t v = 0;
  int ok = n > 0 && n < 10;
  for (size_t i = 0; ok && i < n; i++) {
    if (arg[i] < '0' || arg[i] > '9') ok = 0;
    else v = v * 10 + (size_t)(arg[i] - '0');
  }
  if (!ok || v < 1 || v > e->lines) {
    lh_str_printf(&e->text, "error: read: expected a line number 1..%zu", e->lines);
    return;
  }
  lh_str_append(&e->text, e->doc.data + e->line_at[v - 1], line_len(e, v - 1));
  if (v - 1 == e->target) e->line_read = e->line_known = 1;
}

static int needle_step(void *ctx, const char *action, size_t bytes, const lh_action *a,
                       lh_env_result *out, lh_errbuf *err) {
  (void)action, (void)bytes, (void)err;
  needle_env *e = ctx;
  lh_str_clear(&e->text);
  if (a->kind == LH_ACTION_CALL) {
    if (a->tool_bytes == 6 && memcmp(a->tool, "search", 6) == 0) {
      do_search(e, a->args, a->args_bytes);
    } else {
      do_read(e, a->args, a->args_bytes);
      /* The question's id and field again after the line, the field
       * last: the answer that follows needs no memory reaching back to
       * the first observation. */
      if (e->remind) lh_str_printf(&e->text, "\nasked: %s %s", e->id, FIELD[e->field]);
    }
  } else {
    int ok = a->args_bytes == strlen(e->answer) && strncasecmp(a->args, e->answer, a->args_bytes) == 0;
    lh_str_printf(&e->text, ok ? "correct: %s" : "wrong: the answer is %s", e->answer);
    out->done = 1;
    out->reward = ok ? 1.0f : 0.0f;
    out->outcome = ok ? LH_ENV_SUCCESS : LH_ENV_FAILURE;
    e->terms[0] = (lh_env_term){"correct", out->reward};
    out->terms = e->terms;
    out->term_count = 1;
  }
  if (!e->text.data) lh_str_printf(&e->text, " ");
  out->obs.text = e->text.data;
  out->obs.text_bytes = e->text.len;
  return 0;
}

static int needle_expert(void *ctx, const char **action, lh_errbuf *err) {
  (void)err;
  needle_env *e = ctx;
  lh_str_clear(&e->expert);
  if (e->noise > 0 && lh_env_rng_unit(&e->expert_rng) < e->noise) {
    uint32_t kind = lh_env_rng_below(&e->expert_rng, 3);
    if (kind == 0)
      lh_str_printf(&e->expert, "<call>search(%s)</call>",
                          LAST[lh_env_rng_below(&e->expert_rng, N_OF(LAST))]);
    else if (kind == 1)
      lh_str_printf(&e->expert, "<call>read(%u)</call>",
                          1 + lh_env_rng_below(&e->expert_rng, (uint32_t)e->lines));
    else
      lh_str_printf(&e->expert, "%s<eos>", COLOR[lh_env_rng_below(&e->expert_rng, N_OF(COLOR))]);
  } else if (!e->line_known) {
    lh_str_printf(&e->expert, "<call>search(%s)</call>", e->id);
  } else if (!e->line_read) {
    lh_str_printf(&e->expert, "<call>read(%zu)</call>", e->target + 1);
  } else {
    lh_str_printf(&e->expert, "%s<eos>", e->answer);
  }
  *action = e->expert.data;
  return 0;
}

static const char *needle_describe(void *ctx) {
  needle_env *e = ctx;
  lh_str_clear(&e->desc);
  lh_str_printf(&e->desc,
                      "needle: a generated document of records (id, name, city, color, code), one "
                      "per line, and a question about the record with a given id. The document is "
                      "shown at reset (show_document=1) and can be searched.\n"
                      "tools: search(TERM) -> line numbers (at most %d), read(N) -> line N\n"
                      "options: tokens=%ld (document length, %d..%d), show_document=%ld, "
                      "remind=%ld (1: read's result ends with the question's id and field), "
                      "expert_noise=%g (0..1), max_steps (default 12)\n"
                      "reward: 1 for the right value (case-insensitive), else 0 (term 'correct'); "
                      "expert: search(id), read(line), answer",
                      MAX_HITS, e->tokens, NEEDLE_MIN_TOKENS, NEEDLE_MAX_TOKENS, e->show_document, e->remind,
                      e->noise);
  return e->desc.data;
}

const lh_env_vtable lh_envs_needle_vtable =
    LH_ENVS_BUILTIN(needle, "needle", "find a record in a long generated document with search/read tools",
                    "search,read", 12);

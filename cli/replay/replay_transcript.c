/* cli replay: token streams as readable text. Ids 0..255 are bytes; the
 * special tokens follow them (docs/model.md, "Tokens"). */
#include <stdlib.h>
#include <string.h>

#include "cli/replay/replay.h"
#include "cli/term.h"

enum {
  TOK_BOS = 256, TOK_EOS, TOK_CALL, TOK_CALL_END, TOK_OBS, TOK_OBS_END, TOK_IMG, TOK_PAD,
  TOK_VOCAB
};

static const char *const special_names[] = {"<bos>", "<eos>", "<call>", "</call>",
                                            "<obs>", "</obs>", "<img>",  "<pad>"};

const char *lh_cli_token_name(uint32_t token) {
  if (token < 256 || token >= TOK_VOCAB) return NULL;
  return special_names[token - 256];
}

typedef enum { KIND_TEXT, KIND_CALL, KIND_OBS } line_kind;

struct lh_cli_transcript {
  FILE *out;
  const char *indent;
  int line_open;
  int line_policy;      /* the open line's source: 1 policy, 0 environment */
  line_kind line_kind;
  int continuation;     /* the next line continues one a newline byte ended */
  int in_call, in_obs;
};

lh_cli_transcript *lh_cli_transcript_new(FILE *out, const char *indent) {
  lh_cli_transcript *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->out = out;
  t->indent = indent ? indent : "";
  return t;
}

static void end_line(lh_cli_transcript *t) {
  if (t->line_open) fputc('\n', t->out);
  t->line_open = 0;
}

void lh_cli_transcript_break(lh_cli_transcript *t) {
  if (!t) return;
  end_line(t);
  t->continuation = 0;
  t->in_call = t->in_obs = 0;
}

void lh_cli_transcript_free(lh_cli_transcript *t) {
  if (!t) return;
  end_line(t);
  free(t);
}

/* Makes sure a line of this source and kind is open. A continuation line
 * (after a newline byte inside the same run) leaves the marker column blank
 * so that a multi-line observation reads as one block. */
static void open_line(lh_cli_transcript *t, int policy, line_kind kind) {
  if (t->line_open && t->line_policy == policy && t->line_kind == kind) return;
  int cont = t->continuation && !t->line_open && t->line_policy == policy && t->line_kind == kind;
  end_line(t);
  lh_cli_term_printf(t->out, "%s%-7s", t->indent, policy ? "policy" : "env");
  const char *marker = kind == KIND_CALL ? "[call] " : kind == KIND_OBS ? "[obs] " : "";
  if (cont)
    lh_cli_term_printf(t->out, "%*s", (int)strlen(marker), "");
  else
    lh_cli_term_write(t->out, marker, strlen(marker));
  t->line_open = 1;
  t->line_policy = policy;
  t->line_kind = kind;
  t->continuation = 0;
}

static void put_byte(FILE *out, unsigned c) {
  if (c == '\\')
    fputs("\\\\", out);
  else if (c == '\t')
    fputs("\\t", out);
  else if (c == '\r')
    fputs("\\r", out);
  else if (c >= 0x20 && c < 0x7f)
    fputc((int)c, out);
  else
    lh_cli_term_printf(out, "\\x%02x", c);
}

static const Longhaul__Image *image_at(const Longhaul__Segment *seg, size_t offset) {
  for (size_t k = 0; k < seg->n_images; k++)
    if (seg->images[k] && seg->images[k]->offset == offset) return seg->images[k];
  return NULL;
}

void lh_cli_transcript_segment(lh_cli_transcript *t, const Longhaul__Segment *seg) {
  if (!t || !seg) return;
  size_t n = seg->n_tokens;
  for (size_t i = 0; i < n; i++) {
    uint32_t tok = seg->tokens[i];
    int policy = i < seg->loss_mask.len && seg->loss_mask.data[i] != 0;
    line_kind kind = t->in_call ? KIND_CALL : t->in_obs ? KIND_OBS : KIND_TEXT;
    /* Structure markers open and close call/observation lines. */
    if (tok == TOK_CALL && !t->in_call && !t->in_obs) {
      end_line(t);
      t->in_call = 1;
      t->continuation = 0;
      open_line(t, policy, KIND_CALL);
      continue;
    }
    if (tok == TOK_CALL_END && t->in_call) {
      if (!t->line_open) open_line(t, policy, KIND_CALL);  /* an empty call still shows */
      t->in_call = 0;
      t->continuation = 0;
      end_line(t);
      continue;
    }
    if (tok == TOK_OBS && !t->in_obs && !t->in_call) {
      end_line(t);
      t->in_obs = 1;
      t->continuation = 0;
      open_line(t, policy, KIND_OBS);
      continue;
    }
    if (tok == TOK_OBS_END && t->in_obs) {
      if (!t->line_open) open_line(t, policy, KIND_OBS);
      t->in_obs = 0;
      t->continuation = 0;
      end_line(t);
      continue;
    }
    const Longhaul__Image *img = image_at(seg, i);
    if (img) {
      open_line(t, policy, kind);
      lh_cli_term_printf(t->out, "[image %ux%ux%u at offset %llu]", img->width, img->height, img->channels,
                         (unsigned long long)(seg->start_offset + i));
      if (tok == TOK_IMG) continue;  /* the note stands for the <img> token */
    }
    if (tok == '\n') {
      if (!t->line_open) {
        /* An empty line: its tag alone, no trailing blanks. */
        lh_cli_term_printf(t->out, "%s%s\n", t->indent, policy ? "policy" : "env");
        t->line_policy = policy;
        t->line_kind = kind;
      }
      end_line(t);
      t->continuation = 1;
      continue;
    }
    open_line(t, policy, kind);
    if (tok < 256) {
      put_byte(t->out, tok);
      continue;
    }
    /* A run of one special token (image patches as <pad>, say) prints once
     * with its count, not hundreds of times. */
    size_t run = 1;
    while (i + run < n && seg->tokens[i + run] == tok && !image_at(seg, i + run) &&
           (i + run < seg->loss_mask.len && seg->loss_mask.data[i + run] != 0) == policy)
      run++;
    const char *name = lh_cli_token_name(tok);
    if (name)
      lh_cli_term_write(t->out, name, strlen(name));
    else
      lh_cli_term_printf(t->out, "<?%u>", tok);
    if (run > 1) lh_cli_term_printf(t->out, "x%zu", run);
    i += run - 1;
  }
  end_line(t);
}

/* The length of the valid UTF-8 sequence at s (of n bytes), or 0 when it
 * is not one (overlong forms, surrogates and values past U+10FFFF are not). */
static size_t utf8_length(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned min;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) len = 2, min = 0x80;
  else if ((c & 0xf0) == 0xe0) len = 3, min = 0x800;
  else if ((c & 0xf8) == 0xf0) len = 4, min = 0x10000;
  else return 0;
  if (len > n) return 0;
  unsigned cp = c & (0x7f >> len);
  for (size_t k = 1; k < len; k++) {
    if ((s[k] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[k] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

int lh_cli_tokens_text(const uint32_t *tokens, size_t n, lh_str *out) {
  size_t i = 0;
  while (i < n) {
    if (tokens[i] >= 256) {
      const char *name = lh_cli_token_name(tokens[i]);
      char unknown[24];
      if (!name) {
        snprintf(unknown, sizeof unknown, "<?%u>", tokens[i]);
        name = unknown;
      }
      if (lh_str_puts(out, name)) return -1;
      i++;
      continue;
    }
    /* A run of bytes: validate it as UTF-8 as a whole, since a character's
     * bytes are consecutive tokens. */
    size_t j = i;
    unsigned char bytes[64];
    while (j < n && tokens[j] < 256 && j - i < sizeof bytes) {
      bytes[j - i] = (unsigned char)tokens[j];
      j++;
    }
    size_t m = j - i;
    /* Do not cut a character at the chunk edge: keep up to 3 bytes back. */
    if (j < n && tokens[j] < 256 && m == sizeof bytes) {
      size_t back = 0;
      while (back < 3 && back < m && (bytes[m - 1 - back] & 0xc0) == 0x80) back++;
      if (back < m && bytes[m - 1 - back] >= 0xc0) m -= back + 1;
    }
    if (lh_str_reserve(out, 3 * m)) return -1;
    size_t k = 0;
    while (k < m) {
      /* NUL cannot travel in a C string (nor cJSON's): it is replaced too. */
      size_t l = bytes[k] ? utf8_length(bytes + k, m - k) : 0;
      lh_str_append(out, l ? (const char *)bytes + k : "\xef\xbf\xbd", l ? l : 3); /* U+FFFD */
      k += l ? l : 1;
    }
    i += m;
  }
  return lh_str_puts(out, "") || out->failed ? -1 : 0;
}

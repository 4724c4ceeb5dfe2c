/* The byte-level tokenizer of docs/model.md: ids 0..255 are bytes, 256..263 the
 * special tokens, spelled as markup when markup is on. */
#include <string.h>

#include "model/model.h"

static const char *const special_names[8] = {"<bos>", "<eos>", "<call>", "</call>",
                                             "<obs>", "</obs>", "<img>", "<pad>"};

const char *lh_tok_name(int32_t id) {
  if (id < LH_TOK_BOS || id >= LH_TOK_VOCAB) return NULL;
  return special_names[id - LH_TOK_BOS];
}

/* The special token spelled at text[i..], or -1; *len gets its length. */
static int32_t special_at(const char *text, size_t i, size_t n, size_t *len) {
  if (text[i] != '<') return -1;
  for (int s = 0; s < 8; s++) {
    size_t l = strlen(special_names[s]);
    if (i + l <= n && memcmp(text + i, special_names[s], l) == 0) {
      *len = l;
      return LH_TOK_BOS + s;
    }
  }
  return -1;
}

int lh_tok_encode(const char *text, size_t len, int markup, int32_t *ids, size_t cap,
                  size_t *n) {
  size_t count = 0;
  if (!text && len) return LH_EINVAL;
  for (size_t i = 0; i < len;) {
    size_t l = 1;
    int32_t id = markup ? special_at(text, i, len, &l) : -1;
    if (id < 0) {
      id = (unsigned char)text[i];
      l = 1;
    }
    if (ids && count < cap) ids[count] = id;
    count++;
    i += l;
  }
  if (n) *n = count;
  return count > cap ? LH_ERANGE : LH_OK;
}

int lh_tok_decode(const int32_t *ids, size_t n_ids, char *text, size_t cap, size_t *n,
                  lh_errbuf *err) {
  size_t len = 0, written = 0;
  if (!ids && n_ids) return LH_EINVAL;
  for (size_t i = 0; i < n_ids; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= LH_TOK_VOCAB)
      return lh_errbuf_set(err, LH_EMODEL_TOKEN, "token %zu is %d, outside [0, %d)", i,
                           (int)id, LH_TOK_VOCAB);
    const char *name = lh_tok_name(id);
    size_t l = name ? strlen(name) : 1;
    if (text && written == len && len + l < cap) {
      if (name)
        memcpy(text + len, name, l);
      else
        text[len] = (char)(unsigned char)id;
      written = len + l;
    }
    len += l;
  }
  if (text && cap) text[written] = '\0';
  if (n) *n = len;
  return len + 1 > cap ? LH_ERANGE : LH_OK;
}

/* actors: the agent endpoint's chat template, longhaul-chat-1
 * (docs/agents.md "The chat template").
 *
 * The messages before the first assistant message are the episode's first
 * prompt: their contents joined by newlines, so that one user message whose
 * content is an environment's first observation reads exactly as that
 * environment's episode does. Each assistant message is the policy's own
 * turn, as it sampled it. The messages after one (tool results, the user)
 * are the next observation, <obs>contents joined by newlines</obs>, as an
 * environment's observation is. A history is compared by a chained hash of
 * (role, content) per message, so that a turn is taken as the extension of
 * the tokens recorded only when every earlier message is the same. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "actors/agent.h"

static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool"};

static const char *known_role(const char *r) {
  for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
    if (strcmp(r, ROLES[i]) == 0) return ROLES[i];
  return NULL;
}

/* The fields a message may have: the others are refused, so that a field
 * the template would ignore (an image part, a tool call of the agent's
 * own) is not silently dropped from what the policy reads. */
static int message_fields_ok(const cJSON *msg, uint32_t i, lh_errbuf *err) {
  for (const cJSON *f = msg->child; f; f = f->next) {
    const char *k = f->string ? f->string : "";
    if (strcmp(k, "role") && strcmp(k, "content") && strcmp(k, "name") && strcmp(k, "tool_call_id"))
      return lh_errbuf_set(err, LH_EINVAL, "messages[%u]: unknown field '%.40s' (longhaul-chat-1 reads role, "
                           "content, name and tool_call_id)", i, k);
  }
  return 0;
}

int lh_agent_messages_read(const void *json, lh_agent_messages *m, lh_errbuf *err) {
  const cJSON *arr = json;
  memset(m, 0, sizeof *m);
  if (!cJSON_IsArray(arr)) return lh_errbuf_set(err, LH_EINVAL, "messages must be an array");
  int n = cJSON_GetArraySize(arr);
  if (n < 1) return lh_errbuf_set(err, LH_EINVAL, "messages is empty");
  if (n > LH_AGENT_MAX_MESSAGES)
    return lh_errbuf_set(err, LH_EINVAL, "messages: %d past the most, %d", n, LH_AGENT_MAX_MESSAGES);
  /* Joined text parts: at most the sum of their lengths plus newlines. */
  size_t owned = 0;
  for (const cJSON *msg = arr->child; msg; msg = msg->next) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (cJSON_IsArray(c))
      for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(t)) owned += strlen(t->valuestring) + 1;
      }
  }
  m->role = calloc((size_t)n, sizeof *m->role);
  m->text = calloc((size_t)n, sizeof *m->text);
  m->bytes = calloc((size_t)n, sizeof *m->bytes);
  m->owned = malloc(owned + 1);
  if (!m->role || !m->text || !m->bytes || !m->owned) {
    lh_agent_messages_free(m);
    return lh_errbuf_set(err, LH_ENOMEM, "messages: out of memory");
  }
  size_t at = 0;
  for (const cJSON *msg = arr->child; msg; msg = msg->next, m->n++) {
    uint32_t i = m->n;
    int rc = cJSON_IsObject(msg) ? message_fields_ok(msg, i, err)
                                 : lh_errbuf_set(err, LH_EINVAL, "messages[%u] is not an object", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!rc && (!cJSON_IsString(role) || !(m->role[i] = known_role(role->valuestring))))
      rc = lh_errbuf_set(err, LH_EINVAL, "messages[%u]: role must be one of system, developer, user, assistant, "
                         "tool", i);
    if (!rc && cJSON_IsString(c)) {
      m->text[i] = c->valuestring;
      m->bytes[i] = strlen(c->valuestring);
    } else if (!rc && cJSON_IsArray(c)) {
      m->text[i] = m->owned + at;
      size_t start = at;
      for (const cJSON *p = c->child; p && !rc; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
          rc = lh_errbuf_set(err, LH_EINVAL, "messages[%u].content: only parts {\"type\": \"text\", \"text\": ...} "
                             "are read", i);
          break;
        }
        if (at > start) m->owned[at++] = '\n';
        size_t len = strlen(t->valuestring);
        memcpy(m->owned + at, t->valuestring, len);
        at += len;
      }
      m->bytes[i] = at - start;
    } else if (!rc && !(cJSON_IsNull(c) || !c)) {
      rc = lh_errbuf_set(err, LH_EINVAL, "messages[%u].content must be a string or an array of text parts", i);
    } else if (!rc) {
      m->text[i] = "";
    }
    if (rc) {
      lh_agent_messages_free(m);
      return rc;
    }
  }
  return 0;
}

void lh_agent_messages_free(lh_agent_messages *m) {
  if (!m) return;
  free(m->role);
  free(m->text);
  free(m->bytes);
  free(m->owned);
  memset(m, 0, sizeof *m);
}

static uint64_t extend(uint64_t h, const char *role, const char *text, size_t bytes) {
  h = lh_hash64(role, strlen(role) + 1, h);  /* the role with its NUL: no role runs into its content */
  uint64_t len = bytes;
  h = lh_hash64(&len, sizeof len, h);
  return lh_hash64(text, bytes, h);
}

uint64_t lh_agent_messages_hash(uint64_t h, const lh_agent_messages *m, uint32_t from, uint32_t n) {
  for (uint32_t i = from; i < n && i < m->n; i++) h = extend(h, m->role[i], m->text[i], m->bytes[i]);
  return h;
}

uint64_t lh_agent_history_extend(uint64_t h, const char *text, size_t bytes) {
  return extend(h, "assistant", text, bytes);
}

int lh_agent_render(const lh_agent_messages *m, uint32_t from, lh_str *out) {
  lh_str_clear(out);
  for (uint32_t i = from; i < m->n; i++) {
    if (i > from && lh_str_append(out, "\n", 1) < 0) return LH_ENOMEM;
    if (m->bytes[i] && lh_str_append(out, m->text[i], m->bytes[i]) < 0) return LH_ENOMEM;
  }
  return 0;
}

int lh_agent_render_all(const lh_agent_messages *m, lh_str *out) {
  lh_str_clear(out);
  if (lh_str_puts(out, "<bos>") < 0) return LH_ENOMEM;
  uint32_t i = 0;
  for (; i < m->n && strcmp(m->role[i], "assistant"); i++)
    if ((i && lh_str_append(out, "\n", 1) < 0) || (m->bytes[i] && lh_str_append(out, m->text[i], m->bytes[i]) < 0))
      return LH_ENOMEM;
  while (i < m->n) {
    /* an assistant turn as written, then what followed it as one observation */
    if (m->bytes[i] && lh_str_append(out, m->text[i], m->bytes[i]) < 0) return LH_ENOMEM;
    uint32_t j = ++i;
    for (; j < m->n && strcmp(m->role[j], "assistant"); j++) {}
    if (j > i) {
      if (lh_str_puts(out, "<obs>") < 0) return LH_ENOMEM;
      for (uint32_t k = i; k < j; k++)
        if ((k > i && lh_str_append(out, "\n", 1) < 0) ||
            (m->bytes[k] && lh_str_append(out, m->text[k], m->bytes[k]) < 0))
          return LH_ENOMEM;
      if (lh_str_puts(out, "</obs>") < 0) return LH_ENOMEM;
    }
    i = j;
  }
  return 0;
}

/* At s (n bytes left): the length of the valid UTF-8 sequence there, or,
 * as a negative number, of its maximal ill-formed subpart (at least one
 * byte), which becomes one U+FFFD: the Unicode substitution that Python's
 * and the browsers' decoders make. NUL counts as ill-formed (JSON strings
 * here are C strings). */
static long utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c >= 0x01 && c < 0x80) return 1;
  size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!len) return -1;
  unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  size_t k = 1;
  for (; k < len && k < n; k++) {
    unsigned char b = s[k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) break;
  }
  return k == len ? (long)len : -(long)k;
}

int lh_agent_utf8_clean(const char *text, size_t bytes, lh_str *out) {
  lh_str_clear(out);
  if (lh_str_reserve(out, bytes + 1) < 0) return LH_ENOMEM;
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < bytes;) {
    long k = utf8_seq(s + i, bytes - i);
    int rc = k > 0 ? lh_str_append(out, text + i, (size_t)k) : lh_str_append(out, "\xef\xbf\xbd", 3);
    if (rc < 0) return LH_ENOMEM;
    i += (size_t)(k > 0 ? k : -k);
  }
  if (!out->data && lh_str_append(out, "", 0) < 0) return LH_ENOMEM;
  return 0;
}

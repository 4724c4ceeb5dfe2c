/* actors: the agent endpoint's answers as JSON in OpenAI's shapes (a
 * turn's choices around longhaul's own fields, and every refusal), for
 * the server's thread and the table's (docs/agents.md). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/agent.h"

char *lh_agent_error_json(int status, const char *msg) {
  cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
  cJSON_AddNumberToObject(e, "code", status);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

/* One choice in OpenAI's shape: its index, the message (chat) or text,
 * finish_reason. */
cJSON *lh_agent_choice_json(lh_agent_kind kind, const char *text, size_t bytes, const char *finish, uint32_t index) {
  char *content = malloc(bytes + 1);
  cJSON *c = cJSON_CreateObject();
  if (!content || !c) {
    free(content);
    cJSON_Delete(c);
    return NULL;
  }
  memcpy(content, text, bytes);
  content[bytes] = 0;
  cJSON_AddNumberToObject(c, "index", index);
  if (kind == LH_AGENT_CHAT) {
    cJSON *msg = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "content", content);
  } else {
    cJSON_AddStringToObject(c, "text", content);
    cJSON_AddNullToObject(c, "logprobs");
  }
  cJSON_AddStringToObject(c, "finish_reason", finish);
  free(content);
  return c;
}

/* The answer around its choices in OpenAI's shape, longhaul's own fields
 * under "longhaul"; takes choices and lh. */
char *lh_agent_response_json(lh_agent_kind kind, const char *id, cJSON *choices, uint32_t prompt_tokens,
                           uint32_t completion_tokens, cJSON *lh) {
  cJSON *root = cJSON_CreateObject();
  if (!root || !choices || !lh) {
    cJSON_Delete(root);
    cJSON_Delete(choices);
    cJSON_Delete(lh);
    return NULL;
  }
  cJSON_AddStringToObject(root, "id", id);
  cJSON_AddStringToObject(root, "object", kind == LH_AGENT_CHAT ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(root, "created", (double)time(NULL));
  cJSON_AddStringToObject(root, "model", "longhaul");
  cJSON_AddItemToObject(root, "choices", choices);
  cJSON *u = cJSON_AddObjectToObject(root, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", (double)prompt_tokens + completion_tokens);
  cJSON_AddStringToObject(lh, "template", LH_AGENT_TEMPLATE);
  cJSON_AddItemToObject(root, "longhaul", lh);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

/* envs: what the module's files share; not part of the public header. */
#ifndef LH_ENVS_INTERNAL_H
#define LH_ENVS_INTERNAL_H

#include "envs/env.h"

extern const lh_env_vtable lh_envs_calc_vtable;
extern const lh_env_vtable lh_envs_needle_vtable;
extern const lh_env_vtable lh_envs_maze_vtable;
/* The client side of an env server: options server=ENDPOINT, env=NAME,
 * timeout_ms; every other option goes to the server's CREATE. */
extern const lh_env_vtable lh_envs_server_vtable;

/* A growable text buffer for observations. */
typedef struct {
  char *data;
  size_t len, cap;
} lh_envs_text;
int lh_envs_text_printf(lh_envs_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lh_envs_text_append(lh_envs_text *t, const char *s, size_t n);
void lh_envs_text_clear(lh_envs_text *t);
void lh_envs_text_free(lh_envs_text *t);

#endif

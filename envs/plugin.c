/* Plugins: a shared library exporting LH_ENV_PLUGIN_SYMBOL, a
 * `const lh_env_vtable` whose version this host supports. The library
 * stays loaded while any lh_env made from its table lives. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

struct lh_env_plugin {
  void *handle;
  const lh_env_vtable *vt;
};

/* Where a plugin may come from: an absolute path (a bare name would make
 * dlopen search the library path, a relative one the working directory),
 * resolved by realpath so that a symbolic link cannot lead elsewhere, and,
 * when LH_PLUGIN_PATH is set (folders separated by ':'), inside one of its
 * folders. A remote peer cannot name a plugin at all (envs/envserver.c
 * refuses the option). resolved gets the path to load. */
static int check_path(const char *path, char resolved[PATH_MAX], lh_errbuf *err) {
  if (path[0] != '/')
    return lh_errbuf_set(err, LH_EENVS_PLUGIN_PATH,
                         "plugin path '%s' is not absolute (plugins load only from an absolute path given in the "
                         "config or on the command line)", path);
  if (!realpath(path, resolved))
    return lh_errbuf_set(err, LH_EENVS_PLUGIN_OPEN, "cannot load plugin %s: %s", path, strerror(errno));
  const char *allowed = getenv("LH_PLUGIN_PATH");
  if (!allowed || !*allowed) return 0;
  for (const char *d = allowed; *d;) {
    size_t n = strcspn(d, ":");
    char dir[PATH_MAX], want[PATH_MAX];
    if (n > 0 && n < sizeof dir) {
      memcpy(dir, d, n);
      dir[n] = 0;
      if (realpath(dir, want)) {
        size_t w = strlen(want);
        if (strncmp(resolved, want, w) == 0 && (resolved[w] == '/' || (w == 1 && want[0] == '/'))) return 0;
      }
    }
    d += n;
    if (*d == ':') d++;
  }
  return lh_errbuf_set(err, LH_EENVS_PLUGIN_PATH, "plugin %s (%s) is not inside a folder of LH_PLUGIN_PATH=%s", path,
                       resolved, allowed);
}

int lh_env_plugin_load(const char *path, lh_env_plugin **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_plugin_load: out is NULL");
  *out = NULL;
  if (!path || !*path) return lh_errbuf_set(err, LH_EINVAL, "plugin path is empty");
  char resolved[PATH_MAX];
  LH_TRY(check_path(path, resolved, err));
  void *h = dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return lh_errbuf_set(err, LH_EENVS_PLUGIN_OPEN, "cannot load plugin %s: %s", path,
                         why ? why : "unknown reason");
  }
  dlerror();
  const lh_env_vtable *vt = dlsym(h, LH_ENV_PLUGIN_SYMBOL);
  if (!vt) {
    int rc = lh_errbuf_set(err, LH_EENVS_PLUGIN_SYMBOL,
                           "plugin %s does not export the symbol '%s' (declare "
                           "`const lh_env_vtable %s = {...}` with default visibility)",
                           path, LH_ENV_PLUGIN_SYMBOL, LH_ENV_PLUGIN_SYMBOL);
    dlclose(h);
    return rc;
  }
  int rc = lh_env_vtable_check(vt, path, err);
  if (rc < 0) {
    dlclose(h);
    return rc;
  }
  lh_env_plugin *p = calloc(1, sizeof *p);
  if (!p) {
    dlclose(h);
    return lh_errbuf_set(err, LH_ENOMEM, "plugin %s: out of memory", path);
  }
  p->handle = h;
  p->vt = vt;
  *out = p;
  return 0;
}

const lh_env_vtable *lh_env_plugin_vtable(const lh_env_plugin *p) { return p ? p->vt : NULL; }

void lh_env_plugin_free(lh_env_plugin *p) {
  if (!p) return;
  dlclose(p->handle);
  free(p);
}

/* Plugins: a shared library exporting LH_ENV_PLUGIN_SYMBOL, a
 * `const lh_env_vtable` whose version this host supports. The library
 * stays loaded while any lh_env made from its table lives. */
#include <dlfcn.h>
#include <stdlib.h>

#include "envs/env.h"

struct lh_env_plugin {
  void *handle;
  const lh_env_vtable *vt;
};

int lh_env_plugin_load(const char *path, lh_env_plugin **out, lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_env_plugin_load: out is NULL");
  *out = NULL;
  if (!path || !*path) return lh_errbuf_set(err, LH_EINVAL, "plugin path is empty");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
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

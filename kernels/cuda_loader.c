/* kernels: the CUDA backend's library, loaded the first time it is asked
 * for (kernels.h, lh_backend_cuda_open). The backend (kernels/cuda/) is
 * built as liblonghaul_cuda.so: linked into every program instead, CUDA's
 * libraries cost each process about 0.4 s of CPU and 217 MB of memory
 * before main, which every actor, every `longhaul replay` and every test
 * that starts the binary paid without ever touching a GPU.
 *
 * Where it is looked for, first found wins: $LH_CUDA_LIBRARY (a path);
 * beside the program (the build tree's cli/); the program's
 * ../lib/longhaul/ (an installed tree); the build tree's own, for the
 * tests' programs elsewhere in it. The library carries lh_common, but its
 * references bind to the program's copy where the program exports one
 * (longhaul does), so logging stays one. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"

#define LIB_NAME "liblonghaul_cuda.so"

static struct {
  pthread_once_t once;
  void *lib;
  int (*open)(const lh_backend **, size_t, lh_errbuf *);
  void (*close)(const lh_backend *);
  int (*set_gemm)(const lh_backend *, lh_gemm_mode);
  int (*devices)(char *, int);
  char why[768];  /* why it could not be loaded */
} mod = {.once = PTHREAD_ONCE_INIT};

static void *try_open(const char *path, char *why, size_t bytes) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    size_t used = strlen(why);
    if (used + 1 < bytes) snprintf(why + used, bytes - used, "%s%s", used ? "; " : "", e ? e : path);
  }
  return lib;
}

static void load(void) {
  char why[sizeof mod.why] = "";
  const char *env = getenv("LH_CUDA_LIBRARY");
  void *lib = env && *env ? try_open(env, why, sizeof why) : NULL;
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (!lib && n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(path, sizeof path, "%s/" LIB_NAME, exe);
    if (access(path, F_OK) == 0) lib = try_open(path, why, sizeof why);
    snprintf(path, sizeof path, "%s/../lib/longhaul/" LIB_NAME, exe);
    if (!lib && access(path, F_OK) == 0) lib = try_open(path, why, sizeof why);
  }
#ifdef LH_CUDA_BUILD_LIBRARY
  if (!lib && access(LH_CUDA_BUILD_LIBRARY, F_OK) == 0) lib = try_open(LH_CUDA_BUILD_LIBRARY, why, sizeof why);
#endif
  if (!lib) {
    snprintf(mod.why, sizeof mod.why, "%s", why[0] ? why : LIB_NAME " was not found beside the program, in its "
             "../lib/longhaul or at $LH_CUDA_LIBRARY");
    return;
  }
  *(void **)&mod.open = dlsym(lib, "lh_cuda_module_open");
  *(void **)&mod.close = dlsym(lib, "lh_cuda_module_close");
  *(void **)&mod.set_gemm = dlsym(lib, "lh_cuda_module_set_gemm");
  *(void **)&mod.devices = dlsym(lib, "lh_cuda_device_count");
  if (!mod.open || !mod.close || !mod.set_gemm || !mod.devices) {
    snprintf(mod.why, sizeof mod.why, "%s is not longhaul's CUDA backend (an entry point is missing)", LIB_NAME);
    mod.open = NULL;
    dlclose(lib);
    return;
  }
  mod.lib = lib;
}

int lh_kernels_cuda_load(lh_errbuf *err) {
  pthread_once(&mod.once, load);
  if (mod.lib) return LH_OK;
  return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                       "backend 'cuda' is not available: its library cannot be loaded (%s); use --backend cpu",
                       mod.why);
}

int lh_kernels_cuda_compiled(void) { return 1; }

int lh_kernels_cuda_devices(char *name, int name_bytes) {
  if (name && name_bytes > 0) name[0] = '\0';
  if (lh_kernels_cuda_load(NULL)) return 0;
  return mod.devices(name, name_bytes);
}

int lh_backend_cuda_open(const lh_backend **out, size_t pool_bytes, lh_errbuf *err) {
  if (out) *out = NULL;
  LH_TRY(lh_kernels_cuda_load(err));
  LH_TRY(mod.open(out, pool_bytes, err));
  /* A library of another build fills a table of another layout: refused
   * before any of its entries is called. */
  if ((*out)->version != LH_BACKEND_VERSION) {
    int version = (*out)->version;
    mod.close(*out);
    *out = NULL;
    return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                         "backend 'cuda': %s fills backend table version %d, this program needs %d "
                         "(a library of another build: rebuild, or point LH_CUDA_LIBRARY at this build's)",
                         LIB_NAME, version, LH_BACKEND_VERSION);
  }
  return LH_OK;
}

void lh_backend_cuda_close(const lh_backend *b) {
  if (b && mod.lib) mod.close(b);
}

int lh_backend_cuda_set_gemm(const lh_backend *b, lh_gemm_mode mode) {
  if (lh_kernels_cuda_load(NULL)) return LH_EKERNELS_NOT_AVAILABLE;
  return mod.set_gemm(b, mode);
}

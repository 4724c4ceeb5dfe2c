/* A plain driver for the fuzz harnesses, so that every checked-in corpus
 * input runs in the ordinary test suite, with gcc and without libFuzzer:
 * each argument is a file or a folder of files, and each file's bytes go
 * once through LLVMFuzzerTestOneInput. A harness that finds its contract
 * broken aborts, which fails the test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (n == cap) {
      uint8_t *grown = realloc(buf, cap * 2);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f) || !buf;
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    free(buf);
    return 1;
  }
  /* An exact-size copy, so that a read past the input's end shows under ASan. */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return 1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file in dir, in name order (so a run is repeatable). */
static int run_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: cannot open folder %s\n", dir);
    return 1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown) {
        rc = 1;
        break;
      }
      names = grown;
    }
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (!names[n]) {
      rc = 1;
      break;
    }
    snprintf(names[n], len, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (!rc && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      rc = run_file(names[i]);
      (*count)++;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  int count = 0, rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: no such file or folder %s\n", argv[i]);
      rc = 1;
    } else if (S_ISDIR(st.st_mode)) {
      rc = run_dir(argv[i], &count);
    } else {
      rc = run_file(argv[i]);
      count++;
    }
  }
  printf("replay: %d inputs, %s\n", count, rc ? "failed" : "all passed the harness");
  return rc || count == 0;
}

/* cli: every learner rank's store file of a run, found and opened as one
 * (cli/rank_stores.h). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/rank_stores.h"
#include "learner/learner.h"
#include "store/store.h"

/* path with its folder resolved (the file itself need not exist), in out
 * (PATH_MAX bytes); -1 when the folder does not resolve. */
static int canonical(const char *path, char *out) {
  char dir[PATH_MAX], real[PATH_MAX];
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  lh_path_folder(path, dir, sizeof dir);
  if (!realpath(dir, real)) return -1;
  return snprintf(out, PATH_MAX, "%s/%s", real, base) < PATH_MAX ? 0 : -1;
}

/* Whether out (its stat in st when it exists, its canonical name in name)
 * is file + suffix: the same file, or, while neither exists (a store's
 * -wal comes and goes), the same name. */
static int same_file(const struct stat *st, const char *name, const char *file, const char *suffix) {
  char other[PATH_MAX], canon[PATH_MAX];
  struct stat o;
  if (snprintf(other, sizeof other, "%s%s", file, suffix) >= (int)sizeof other) return 0;
  if (st && stat(other, &o) == 0) return o.st_dev == st->st_dev && o.st_ino == st->st_ino;
  return name && canonical(other, canon) == 0 && strcmp(canon, name) == 0;
}

static int store_is(const struct stat *st, const char *name, const char *db) {
  return same_file(st, name, db, "") || same_file(st, name, db, "-wal") || same_file(st, name, db, "-shm") ||
         same_file(st, name, db, "-journal");
}

int lh_cli_dbs_holds(const lh_cli_dbs *d, const char *path) {
  if (!d || !path) return 0;
  struct stat st;
  char name[PATH_MAX];
  const struct stat *sp = stat(path, &st) == 0 ? &st : NULL;
  const char *np = canonical(path, name) == 0 ? name : NULL;
  for (size_t i = 0; i < d->db.n; i++) {
    if (store_is(sp, np, d->db.v[i])) return 1;
    /* the rank files next to it, as lh_cli_dbs_open finds them */
    for (int r = 1; r <= 4096; r++) {
      char rank[PATH_MAX];
      struct stat rs;
      if (snprintf(rank, sizeof rank, "%s.rank%d", d->db.v[i], r) >= (int)sizeof rank || stat(rank, &rs) != 0) break;
      if (store_is(sp, np, rank)) return 1;
    }
  }
  for (size_t i = 0; i < d->rank_db.n; i++)
    if (store_is(sp, np, d->rank_db.v[i])) return 1;
  return 0;
}

void lh_cli_dbs_init(lh_cli_dbs *d) {
  memset(d, 0, sizeof *d);
  d->timeout_ms = LH_CLI_READ_TIMEOUT_MS;
}

int lh_cli_dbs_check(const char *cmd, const lh_cli_dbs *d) {
  if (d->timeout_ms <= UINT32_MAX) return 0;
  fprintf(stderr, "longhaul %s: --timeout-ms %llu is too large (at most %u; 0 for no limit)\n", cmd,
          (unsigned long long)d->timeout_ms, UINT32_MAX);
  return LH_EXIT_USAGE;
}

int lh_cli_strings_add(lh_cli_strings *l, const char *value) {
  if (l->n >= LH_CLI_MAX_STRINGS) return -1;
  l->v[l->n++] = value;
  return 0;
}

/* The highest r of a file named like DB.rank<r> in db's folder (0: none). */
static int highest_rank_file(const char *db, size_t *highest, lh_errbuf *err) {
  *highest = 0;
  const char *slash = strrchr(db, '/');
  char dir[LH_LEARNER_TEXT_BYTES];
  const char *base = slash ? slash + 1 : db;
  lh_path_folder(db, dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d) return lh_errbuf_set(err, LH_ESTORE_NO_FILE, "cannot list %s to find the rank stores of %s", dir, db);
  size_t blen = strlen(base);
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *n = e->d_name;
    if (strncmp(n, base, blen) || strncmp(n + blen, ".rank", 5)) continue;
    const char *digits = n + blen + 5;
    size_t r = 0, k = 0;
    for (; digits[k] >= '0' && digits[k] <= '9' && k < 6; k++) r = r * 10 + (size_t)(digits[k] - '0');
    if (k == 0 || digits[k] || r == 0) continue;  /* DB.rank1-wal, DB.rank1.writer, ... */
    if (r > *highest) *highest = r;
  }
  closedir(d);
  return 0;
}

int lh_cli_dbs_open(const lh_cli_dbs *d, lh_store **out, size_t *ranks, lh_errbuf *err) {
  *out = NULL;
  if (!d->db.n) return lh_errbuf_set(err, LH_EINVAL, "--db FILE is required (the replay store to read)");
  size_t n = 0;
  const char *paths[LH_CLI_MAX_STRINGS];
  char found[LH_CLI_MAX_STRINGS][LH_LEARNER_TEXT_BYTES];
  for (size_t i = 0; i < d->db.n; i++) paths[n++] = d->db.v[i];
  for (size_t i = 0; i < d->rank_db.n && n < LH_CLI_MAX_STRINGS; i++) paths[n++] = d->rank_db.v[i];
  if (d->db.n + d->rank_db.n > LH_CLI_MAX_STRINGS)
    return lh_errbuf_set(err, LH_ESTORE_RANKS, "more than %d store files given", LH_CLI_MAX_STRINGS);
  if (n == 1) {
    size_t highest = 0;
    LH_TRY(highest_rank_file(paths[0], &highest, err));
    if (highest >= LH_CLI_MAX_STRINGS)
      return lh_errbuf_set(err, LH_ESTORE_RANKS, "%s.rank%zu: more rank stores than can be read (%d)", paths[0],
                           highest, LH_CLI_MAX_STRINGS);
    for (size_t r = 1; r <= highest; r++) {
      LH_TRY(lh_learner_rank_db(paths[0], (int)r, found[r], err));
      if (access(found[r], F_OK))
        return lh_errbuf_set(err, LH_ESTORE_RANKS,
                             "%s.rank%zu exists but %s does not: a rank's store is missing (give the files "
                             "with --db and --rank-db)",
                             paths[0], highest, found[r]);
      paths[n++] = found[r];
    }
  }
  if (ranks) *ranks = n;
  lh_store_options o;
  lh_store_options_default(&o);
  o.time_budget_ms = d->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)d->timeout_ms;
  return lh_store_open_ranks(paths, n, &o, out, err);
}

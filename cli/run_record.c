/* cli: a command's run and its runs row (run_record.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run_record.h"
#include "learner/learner.h"
#include "store/store.h"

char *lh_cli_command_line(int argc, char **argv) {
  size_t cap = sizeof "longhaul";
  for (int i = 0; i < argc; i++) cap += 3 + 4 * strlen(argv[i]);
  char *out = malloc(cap), *p = out;
  if (!out) return NULL;
  p += sprintf(p, "longhaul");
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    *p++ = ' ';
    if (*a && !strpbrk(a, " \t\n'\"\\$`")) {
      p += sprintf(p, "%s", a);
      continue;
    }
    *p++ = '\'';
    for (; *a; a++) {
      if (*a == '\'') p += sprintf(p, "'\\''");
      else *p++ = *a;
    }
    *p++ = '\'';
  }
  *p = 0;
  return out;
}

int lh_cli_run_id_arg(const char *command, const char *value) {
  lh_errbuf e;
  if (lh_run_id_check(value, &e) == 0) return 0;
  fprintf(stderr, "longhaul %s: --run-id '%s': %s\n", command, value, e.msg);
  return -1;
}

int lh_cli_run_start(lh_cli_run *r, const char *kind, const char *db, const char *run_id, const lh_ini_doc *doc,
                     int argc, char **argv, lh_errbuf *err) {
  const char *config = lh_ini_doc_path(doc);
  memset(r, 0, sizeof *r);
  if (run_id) {
    LH_TRY(lh_run_id_check(run_id, err));
    snprintf(r->run_id, sizeof r->run_id, "%s", run_id);
  } else {
    LH_TRY(lh_run_id_new(r->run_id, err));
  }
  if (db && !strcmp(db, "none")) return 0;
  if (!db) {
    lh_learner_config lc;
    LH_TRY(lh_learner_config_read(doc, &lc, err));
    snprintf(r->db, sizeof r->db, "%s", lc.db);
  } else {
    snprintf(r->db, sizeof r->db, "%s", db);
  }
  LH_TRY(lh_store_open(r->db, &r->store, err));
  char *text = NULL, *command = lh_cli_command_line(argc, argv);
  lh_errbuf te;
  if (!config || lh_read_text_file(config, LH_EIO, &text, NULL, &te)) text = NULL;
  lh_store_run row = {.run_id = r->run_id, .command = command, .config = text, .kind = kind};
  int rc = lh_store_put_run(r->store, &row, NULL, err);
  free(text);
  free(command);
  if (rc < 0) {
    lh_store_close(r->store);
    r->store = NULL;
  }
  return rc;
}

void lh_cli_run_end(lh_cli_run *r, int ok) {
  if (!r->store) return;
  lh_errbuf e;
  if (lh_store_end_run(r->store, r->run_id, ok ? "ok" : "error", 0, &e))
    fprintf(stderr, "longhaul: the runs row of %s in %s was not ended: %s\n", r->run_id, r->db, e.msg);
  lh_store_close(r->store);
  r->store = NULL;
}

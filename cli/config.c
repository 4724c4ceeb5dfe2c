/* cli: one config document per command, checked whole (cli/config.h). */
#include "cli/config.h"

#include <stdio.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "cli/launch/launch.h"
#include "learner/learner.h"
#include "model/model.h"

int lh_cli_config_check(const lh_ini_doc *doc, lh_errbuf *err) {
  lh_launch_config fleet;
  LH_TRY(lh_launch_config_read(doc, &fleet, err));
  lh_learner_config learner;
  LH_TRY(lh_learner_config_read(doc, &learner, err));
  lh_actors_config actor;
  LH_TRY(lh_actors_config_read(doc, &actor, err));
  lh_model_config model;
  LH_TRY(lh_model_config_read(doc, &model, err));
  /* The key files are values of the config too: a loose, missing or bad
   * one is the same error for every command that reads it. */
  LH_TRY(lh_learner_config_check_keys(&learner, err));
  return lh_actors_config_check_keys(&actor, err);
}

int lh_cli_config_open(const char *command, const char *path, const lh_cli_sets *sets, lh_ini_doc **out) {
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  *out = NULL;
  lh_ini_doc *doc = NULL;
  int rc = lh_ini_doc_load(path, sets ? sets->set : NULL, sets ? sets->n : 0, &doc, &err);
  if (!rc) rc = lh_cli_config_check(doc, &err);
  if (rc) {
    fprintf(stderr, "longhaul %s: %s\n", command, err.msg);
    lh_ini_doc_free(doc);
    return lh_cli_exit_for_error(rc);
  }
  *out = doc;
  return 0;
}

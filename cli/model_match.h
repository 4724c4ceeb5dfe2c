/* cli: a [model] section beside a checkpoint. A command that takes its
 * model from --ckpt or --init (actor, eval, sft) refuses a config whose
 * [model] is given and describes another model, naming every key that
 * differs, instead of ignoring the section (the learner does the same for
 * its --init and --resume, learner/run.c). A config without any [model]
 * key is accepted: the checkpoint says what the model is. */
#ifndef LH_CLI_MODEL_MATCH_H
#define LH_CLI_MODEL_MATCH_H

#include "common/ini_doc.h"
#include "model/model.h"

/* 1 when doc holds at least one [model] key (from the file, an include or
 * a --set override). */
int lh_cli_model_given(const lh_ini_doc *doc);

/* With given (lh_cli_model_given of the command's config): 0 when mc (the
 * [model] read from the config, keys it leaves out at their defaults, the
 * seed aside) is the model m loaded from dir; else prints "longhaul
 * COMMAND: CONFIG: [model] key = A differs from the checkpoint's B, ...
 * (checkpoint DIR)" to stderr and returns 2 (a config error). */
int lh_cli_model_match(const char *command, const char *config, int given, const lh_model_config *mc,
                       const lh_model *m, const char *dir);

#endif

/* longhaul init: a freshly initialised checkpoint from a [model] config. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/config.h"
#include "model/model.h"

static const lh_cli_help HELP = {
    .cmd = "init",
    .usage = "--config MODEL.ini --seed N --out DIR [OPTIONS]",
    .about = "Writes DIR/model.safetensors: the model of the [model] section of MODEL.ini (other sections are "
        "checked, not used; missing keys take the demo model's defaults), every parameter initialised from "
        "seed N. The config, with the seed, is kept in the file's __metadata__.",
    .exits = "0 written, 1 runtime error, 2 usage or config error.",
};

int lh_cmd_init(int argc, char **argv) {
  const char *config = NULL, *out = NULL, *seed_text = NULL;
  lh_cli_sets sets = {0};
  int force = 0;
  const lh_cli_opt opts[] = {
      {"--config", LH_CLI_OPT_STRING, &config, NULL, "MODEL.ini", "the INI file with the [model] section (required)"},
      {"--seed", LH_CLI_OPT_STRING, &seed_text, NULL, "N", "the seed every parameter is drawn from (required)"},
      {"--out", LH_CLI_OPT_STRING, &out, NULL, "DIR", "the checkpoint folder to write (required)"},
      {"--force", LH_CLI_OPT_FLAG, &force, NULL, NULL,
       "replace the model.safetensors DIR holds; without it such a DIR is refused (exit 2), so that a "
       "trained checkpoint is not overwritten by mistake"},
      LH_CLI_SET_OPT(&sets),
  };
  size_t npos = 0;
  int prc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (prc) return lh_cli_parse_exit(prc);
  if (!config || !out || !seed_text) {
    fprintf(stderr, "longhaul init: --config, --seed and --out are all required (see longhaul init --help)\n");
    return LH_EXIT_USAGE;
  }
  uint64_t seed = 0;
  if (lh_cli_u64("init", "--seed", seed_text, 0, UINT64_MAX, &seed)) return LH_EXIT_USAGE;
  char existing[4096];
  struct stat st;
  if (!force && snprintf(existing, sizeof existing, "%s/model.safetensors", out) < (int)sizeof existing &&
      stat(existing, &st) == 0) {
    fprintf(stderr,
            "longhaul init: %s exists: refusing to overwrite a checkpoint (give --force to replace it, or "
            "another --out)\n",
            existing);
    return LH_EXIT_USAGE;
  }
  lh_model_config cfg;
  lh_errbuf err = {0};
  lh_ini_doc *doc = NULL;
  int rc = lh_cli_config_open("init", config, &sets, &doc);
  if (rc) return rc;
  rc = lh_model_config_read(doc, &cfg, &err);
  lh_ini_doc_free(doc);
  if (rc) {
    fprintf(stderr, "longhaul init: %s\n", err.msg);
    return lh_cli_exit_for_error(rc);
  }
  cfg.seed = seed;
  lh_model *m = NULL;
  rc = lh_model_new(&cfg, lh_backend_cpu(), &m, &err);
  if (!rc) rc = lh_model_save(m, out, &err);
  if (rc) {
    fprintf(stderr, "longhaul init: %s\n", err.msg[0] ? err.msg : lh_strerror(rc));
    lh_model_free(m);
    return lh_cli_exit_for_error(rc);
  }
  size_t params = 0;
  for (int i = 0; i < lh_model_n_tensors(m); i++) params += lh_model_tensor_at(m, i)->numel;
  printf("wrote %s/model.safetensors: %d tensors, %zu parameters, seed %llu\n", out,
         lh_model_n_tensors(m), params, (unsigned long long)seed);
  lh_model_free(m);
  return LH_EXIT_OK;
}

/* longhaul help config | store: the references a user reads beside
 * `--help`, printed from the tables the program itself uses, so that they
 * cannot drift from it: every config key from the section readers' key
 * tables (common/ini_section.h), every table of the replay store from the
 * schema its migrations make (store/store_schema_doc.c). The build writes
 * them into docs/configuration.md and docs/store.md (cmake/doc_page.cmake),
 * and a test fails when a checked-in copy differs from what is printed. */
#include <stdio.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "cli/launch/launch.h"
#include "learner/learner.h"
#include "model/model.h"
#include "store/store.h"

/* What the config reference says before the sections: how a config is
 * read, whichever command reads it. */
static const char CONFIG_INTRO[] =
    "# Configuration\n"
    "\n"
    "<!-- Printed by `longhaul help config` from the key tables the readers use; `cmake --build build --target "
    "docs` writes this file. Edit the tables, not this file. -->\n"
    "\n"
    "Every command that reads a config (`launch`, `learner`, `actor`, `sft`, `eval`, `init`) reads one INI "
    "file with the sections `[fleet]`, `[model]`, `[learner]`, `[actor]` and `[env]`; any other section is an "
    "error (exit 2) naming the file, the line of its header and the known sections, whichever command reads "
    "the file, and so is an unknown key or a bad value in any of them. Every message names the file and line "
    "of the key (for an included key, the included file and its line; for an override, `--set "
    "section.key`). Every command that reads a config checks all of it, the key files it names included, "
    "whichever sections it uses itself: a loose key in `[learner]` stops `eval` and `launch --dry-run` as it "
    "stops the learner.\n"
    "\n"
    "- **`include = FILE`**, before the first `[section]` and as often as needed, reads FILE's keys first; "
    "the including file's own keys replace them, and a later include's replace an earlier one's. A key given "
    "twice within one file is still an error. Includes nest up to 8 deep; a cycle is an error naming the "
    "chain. A config reads at most 64 files (itself and its includes, a file included twice counting twice) "
    "and 16 MiB in all: the include past either bound is an error naming its line and the bound (exit 2), "
    "and so is a file over 16 MiB, told by its size before it is read. Only regular files are read: a device "
    "(`/dev/zero`) or a pipe is refused at once, never waited on. The examples share `examples/model.ini` "
    "this way and add `[model] seed = 1` on top.\n"
    "- **`--set section.key=value`** (or `--set=section.key=value`), repeatable, replaces the file's value (or "
    "adds the key). An override of an unknown section or key, or a bad value, is a config error (exit 2) "
    "naming `--set section.key`. `longhaul launch` hands its overrides to every child it starts (the learner "
    "and the actors).\n"
    "- **Paths** written in a file are relative to the folder of the file they are written in (absolute ones "
    "stay as they are), so a config works from any current directory: `[learner] db`, `ckpt_dir`, "
    "`curve_secret_key_file`, `curve_allowed_keys`, `[actor] curve_secret_key_file`, "
    "`curve_server_key_file`, `[fleet] log_dir`, `init`, `[env] plugin`, and the include paths. A `--set` "
    "path is relative to the current directory; the defaults of keys not given (`replay.db`, `ckpt`, `logs`) "
    "too. `[fleet] env_server` is a command line, run by `/bin/sh` in the launcher's current directory.\n"
    "- **Endpoints once.** When `[actor]` does not give `learner_endpoint`, `weights_pub_endpoint` or "
    "`weights_endpoint`, they are `[learner]`'s `ingest_endpoint`, `weights_pub_endpoint` and "
    "`weights_endpoint`. A learner bound to a wildcard host (`tcp://*:P`, `tcp://0.0.0.0:P`, `tcp://[::]:P`) "
    "gives no address an actor can connect to: then `[actor] learner_endpoint` (and the others) must be set, "
    "and a config that leaves them out is an error saying so.\n"
    "- **Numbers** are the whole word: decimal digits (a leading `-` where negatives make sense), no blank and "
    "no leading `+`. Every integer key but a seed has a ceiling far above real use (`common/limits.h`), so "
    "that no value overflows the clock arithmetic or the allocation it feeds; the ranges below are the "
    "readers' own.\n"
    "- A config line holds at most 198 bytes (a longer one is refused, naming its line; a comment may be "
    "longer).\n"
    "\n"
    "```sh\n"
    "longhaul launch examples/calc.ini --set fleet.duration_s=60 --set actor.temperature=0.5\n"
    "```\n"
    "\n"
    "The sections: [`[fleet]`](#fleet) (`longhaul launch` only), [`[model]`](#model), "
    "[`[learner]`](#learner), [`[actor]`](#actor) and [`[env]`](#env).\n"
    "\n";

static int config_reference(lh_str *out, lh_errbuf *err) {
  int rc = lh_str_puts(out, CONFIG_INTRO);
  if (rc == 0) rc = lh_launch_config_reference(out, err);
  if (rc == 0) rc = lh_model_config_reference(out, err);
  if (rc == 0) rc = lh_learner_config_reference(out, err);
  if (rc == 0) rc = lh_actors_config_reference(out, err);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul help config | store\n\n"
          "config: every config key of every section, with what it takes, its default and what it does\n"
          "(docs/configuration.md); store: every table, view and index of the replay store (docs/store.md).\n"
          "Both in Markdown, printed from the tables the program itself reads by.\n");
}

int lh_cmd_help_topic(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "config") != 0 && strcmp(argv[1], "store") != 0)) {
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  lh_str out = {0};
  lh_errbuf err = {0};
  int rc = strcmp(argv[1], "config") == 0 ? config_reference(&out, &err) : lh_store_schema_reference(&out, &err);
  if (rc == 0 && out.failed) rc = lh_errbuf_set(&err, LH_ENOMEM, "no memory for the reference");
  if (rc != 0) {
    fprintf(stderr, "longhaul help %s: %s\n", argv[1], err.msg[0] ? err.msg : lh_strerror(rc));
    lh_str_free(&out);
    return LH_EXIT_RUNTIME;
  }
  fputs(out.data ? out.data : "", stdout);
  lh_str_free(&out);
  return LH_EXIT_OK;
}

/* longhaul keys: CURVE key pairs for the learner and its actors. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "net/zsock.h"

static const lh_cli_help HELP = {
    .cmd = "keys generate",
    .usage = "--out DIR [OPTIONS]",
    .about = "Writes a new CURVE key pair (zmq_curve_keypair, Z85 text): DIR/NAME.key, the secret key (mode "
        "0600), and DIR/NAME.pub, the public key. DIR is created (mode 0700) when missing; an existing key "
        "file is never overwritten.",
    .notes = "The learner takes its own NAME.key as [learner] curve_secret_key_file and the actors' public keys "
        "in [learner] curve_allowed_keys (a file of keys, one a line, or a folder of .pub files); each actor "
        "takes its own NAME.key as [actor] curve_secret_key_file and the learner's NAME.pub as [actor] "
        "curve_server_key_file.",
    .exits = "0 written, 1 runtime error, 2 usage error.",
};

int lh_cmd_keys(int argc, char **argv) {
  int generate = argc >= 2 && strcmp(argv[1], "generate") == 0;
  if (!generate && !lh_cli_wants_help(argc, argv)) {
    fprintf(stderr, "longhaul keys: expected 'generate' (see longhaul keys --help)\n");
    return LH_EXIT_USAGE;
  }
  const char *dir = NULL, *name = "longhaul";
  const lh_cli_opt opts[] = {
      {"--out", LH_CLI_OPT_STRING, &dir, NULL, "DIR", "the folder to write the two files to (required)"},
      {"--name", LH_CLI_OPT_STRING, &name, NULL, "NAME", "the files' name (default longhaul)"},
  };
  size_t npos = 0;
  int prc = lh_cli_parse(&HELP, argc - generate, argv + generate, opts, sizeof opts / sizeof opts[0], NULL, 0,
                         &npos);
  if (prc) return lh_cli_parse_exit(prc);
  if ((dir && !*dir) || !*name) {
    fprintf(stderr, "longhaul keys generate: %s needs a non-empty value\n", dir && !*dir ? "--out" : "--name");
    return LH_EXIT_USAGE;
  }
  if (!dir) {
    fprintf(stderr, "longhaul keys generate: --out DIR is required (see longhaul keys generate --help)\n");
    return LH_EXIT_USAGE;
  }
  if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
    fprintf(stderr, "longhaul keys generate: --name '%s' must be a plain file name\n", name);
    return LH_EXIT_USAGE;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "longhaul keys generate: cannot create %s: %s\n", dir, strerror(errno));
    return LH_EXIT_RUNTIME;
  }
  char pub[LH_ZSOCK_KEY_CHARS + 1];
  lh_errbuf err;
  lh_errbuf_clear(&err);
  if (lh_zsock_keys_generate(dir, name, pub, &err) < 0) {
    fprintf(stderr, "longhaul keys generate: %s\n", err.msg);
    return LH_EXIT_RUNTIME;
  }
  printf("wrote %s/%s.key (secret, mode 0600) and %s/%s.pub\npublic key %s\n", dir, name, dir, name, pub);
  return LH_EXIT_OK;
}

/* longhaul envs: list, describe, play and serve tool environments. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/term.h"
#include "envs/env.h"

#define MAX_OPTS 64

static const lh_cli_help HELP = {
    .cmd = "envs",
    .usage = "list | describe NAME | play NAME | serve [OPTIONS]",
    .about = "Tool environments: the built-ins (calc, needle, maze), plugins and env servers. list: what there "
        "is; describe: one environment with its options; play: one episode, typed one action per line (e.g. "
        "<call>calc(2*21)</call> or 42<eos>), or with --expert played by the expert (press Enter for each "
        "step on a terminal), images drawn as text art; serve: the built-ins over ZeroMQ for any client.",
    .notes = "serve: with the two --curve options, a CURVE server admitting only the allowed public keys (clients "
        "give --opt curve_secret_key_file=KEY --opt curve_server_key_file=PUB). What clients can make it hold "
        "is capped (a client is one connection); a CREATE past a session cap is refused (EAGAIN) and the "
        "client's next reset asks again. BYTES take a K, M or G suffix (KiB, MiB, GiB).",
    .exits = "0 ok (the episode played), 1 runtime error, 2 usage or config error (an unknown environment or "
        "option, a plugin that cannot be loaded, a loose, missing or bad key file).",
};

typedef struct {
  const char *name;
  lh_env_option opts[MAX_OPTS];
  size_t count;
  char *owned[MAX_OPTS];
  size_t owned_count;
  uint64_t seed;
  int expert, ansi;
  long max_text;
  lh_envserver_config serve;
  const char *bind;
} args;

static void args_free(args *a) {
  for (size_t i = 0; i < a->owned_count; i++) free(a->owned[i]);
}

static int add_opt(args *a, const char *key, const char *value) {
  if (a->count >= MAX_OPTS) {
    fprintf(stderr, "longhaul envs: more than %d options\n", MAX_OPTS);
    return -1;
  }
  a->opts[a->count++] = (lh_env_option){key, value};
  return 0;
}

/* The serve limits: name, unit (1: a count, 2: bytes with a K/M/G suffix,
 * 3: milliseconds), where it goes. */
typedef struct {
  const char *flag;
  int unit;
  uint64_t lo, hi;
  const char *value, *help; /* for --help */
} limit_flag;
static const limit_flag LIMITS[] = {
    {"--max-sessions", 1, 1, 1000000, "N", "serve: sessions of all clients (default 4096)"},
    {"--max-sessions-per-client", 1, 1, 1000000, "N", "serve: sessions of one client (default 512)"},
    {"--max-session-bytes", 2, 1 << 20, 1ull << 44, "BYTES",
     "serve: what all sessions hold, each charged its environment's footprint (default 1G)"},
    {"--max-session-bytes-per-client", 2, 1 << 20, 1ull << 44, "BYTES",
     "serve: what the sessions of one client hold (default 256M)"},
    {"--max-reply-bytes", 2, 1 << 20, 1ull << 40, "BYTES",
     "serve: replies not yet read by their clients (default 256M; past it: EAGAIN)"},
    {"--max-reply-bytes-per-client", 2, 1 << 20, 1ull << 40, "BYTES",
     "serve: replies not yet read by one client (default 64M; past it its requests are dropped unanswered)"},
    {"--idle-timeout-ms", 3, 1, 7ull * 24 * 3600 * 1000, "MS",
     "serve: close a session unused this long (default 600000)"},
};

/* The flags of envs that take a value, handled by on_flag. */
static const struct {
  const char *flag, *value, *help;
} VALUE_FLAGS[] = {
    {"--opt", "KEY=VALUE", "describe, play: an environment option (repeatable), e.g. --opt size=8"},
    {"--plugin", "PATH", "describe, play: load NAME from the plugin library at PATH"},
    {"--server", "ENDPOINT", "describe, play: use NAME on the env server at ENDPOINT (tcp://, ipc://)"},
    {"--timeout-ms", "MS", "describe, play: env server timeout (default 5000)"},
    {"--seed", "N", "play: the episode's seed (default 0)"},
    {"--max-text", "BYTES", "play: show at most BYTES of an observation's text, its start and end (default 4000; 0: all)"},
    {"--bind", "ENDPOINT", "serve: where to listen (required), e.g. tcp://127.0.0.1:5600"},
    {"--curve-secret-key-file", "KEY", "serve: the server's CURVE secret key (longhaul keys generate)"},
    {"--curve-allowed-keys", "FILE|DIR", "serve: the clients' public keys admitted: a file of keys, one a line, or a folder of .pub files"},
};

static void set_limit(lh_envserver_config *c, size_t which, uint64_t v) {
  switch (which) {
    case 0: c->max_sessions = (uint32_t)v; break;
    case 1: c->max_sessions_per_client = (uint32_t)v; break;
    case 2: c->max_session_bytes = v; break;
    case 3: c->max_session_bytes_per_client = v; break;
    case 4: c->max_reply_bytes = v; break;
    case 5: c->max_reply_bytes_per_client = v; break;
    default: c->idle_timeout_ms = v; break;
  }
}

/* A serve limit's value: digits, and for bytes an optional K, M or G. */
static int parse_limit(const limit_flag *f, const char *text, uint64_t *out) {
  size_t n = strlen(text);
  int shift = 0;
  if (f->unit == 2 && n > 1) {
    char unit = (char)(text[n - 1] | 0x20);  /* lower case */
    shift = unit == 'k' ? 10 : unit == 'm' ? 20 : unit == 'g' ? 30 : 0;
    if (shift) n--;
  }
  char digits[32];
  if (n >= sizeof digits) return -1;
  memcpy(digits, text, n);
  digits[n] = 0;
  uint64_t v;
  if (lh_parse_u64(digits, &v) || v > (UINT64_MAX >> shift)) return -1;
  v <<= shift;
  if (v < f->lo || v > f->hi) return -1;
  *out = v;
  return 0;
}

static int limit_index(const char *s) {
  for (size_t i = 0; i < sizeof LIMITS / sizeof LIMITS[0]; i++)
    if (!strcmp(s, LIMITS[i].flag)) return (int)i;
  return -1;
}

/* One flag of envs with its value (lh_cli_call): 0, or LH_EXIT_USAGE
 * after printing what was wrong. --opt, --plugin, --server and
 * --timeout-ms add to the environment's options in the order given. */
static int on_flag(void *ctx, const char *s, const char *next) {
  args *a = ctx;
  if (!strcmp(s, "--opt")) {
    const char *eq = strchr(next, '=');
    if (!eq || eq == next) {
      fprintf(stderr, "longhaul envs: --opt takes KEY=VALUE, not '%s'\n", next);
      return LH_EXIT_USAGE;
    }
    char *key = strndup(next, (size_t)(eq - next));
    if (!key || a->owned_count >= MAX_OPTS) return LH_EXIT_USAGE;
    a->owned[a->owned_count++] = key;
    if (add_opt(a, key, eq + 1)) return LH_EXIT_USAGE;
  } else if (!strcmp(s, "--plugin") || !strcmp(s, "--server")) {
    if (add_opt(a, s + 2, next)) return LH_EXIT_USAGE;
  } else if (!strcmp(s, "--timeout-ms")) {
    if (add_opt(a, "timeout_ms", next)) return LH_EXIT_USAGE;
  } else if (limit_index(s) >= 0) {
    const limit_flag *f = &LIMITS[limit_index(s)];
    uint64_t v;
    if (parse_limit(f, next, &v) < 0) {
      fprintf(stderr, "longhaul envs: %s takes %s in %llu..%llu, not '%s'\n", s,
              f->unit == 2 ? "bytes (a K, M or G suffix allowed)" : f->unit == 3 ? "milliseconds" : "an integer",
              (unsigned long long)f->lo, (unsigned long long)f->hi, next);
      return LH_EXIT_USAGE;
    }
    set_limit(&a->serve, (size_t)limit_index(s), v);
  } else if (!strcmp(s, "--seed") || !strcmp(s, "--max-text")) {
    uint64_t v;
    if (lh_cli_u64("envs", s, next, 0, !strcmp(s, "--seed") ? UINT64_MAX : LONG_MAX, &v))
      return LH_EXIT_USAGE;
    if (!strcmp(s, "--seed")) a->seed = v;
    else a->max_text = (long)v;
  } else if (!strcmp(s, "--bind")) {
    a->bind = next;
  } else if (!strcmp(s, "--curve-secret-key-file")) {
    a->serve.curve_secret_key_file = next;
  } else if (!strcmp(s, "--curve-allowed-keys")) {
    a->serve.curve_allowed_keys = next;
  }
  return 0;
}

/* Returns 0, or LH_EXIT_USAGE after printing what was wrong. */
static int parse_args(int argc, char **argv, int first, args *a, int want_name) {
  enum { N_VALUE = sizeof VALUE_FLAGS / sizeof VALUE_FLAGS[0], N_LIMIT = sizeof LIMITS / sizeof LIMITS[0] };
  lh_cli_call call = {on_flag, a};
  lh_cli_opt opts[N_VALUE + N_LIMIT + 2];
  size_t n = 0;
  for (size_t k = 0; k < N_VALUE; k++)
    opts[n++] = (lh_cli_opt){VALUE_FLAGS[k].flag, LH_CLI_OPT_CALL, &call, NULL, VALUE_FLAGS[k].value,
                             VALUE_FLAGS[k].help};
  opts[n++] = (lh_cli_opt){"--expert", LH_CLI_OPT_FLAG, &a->expert, NULL, NULL, "play: the expert plays"};
  opts[n++] = (lh_cli_opt){"--ansi", LH_CLI_OPT_FLAG, &a->ansi, NULL, NULL, "play: draw images in colour"};
  for (size_t k = 0; k < N_LIMIT; k++)
    opts[n++] = (lh_cli_opt){LIMITS[k].flag, LH_CLI_OPT_CALL, &call, NULL, LIMITS[k].value, LIMITS[k].help};
  const char *name = NULL;
  size_t npos = 0;
  int rc = lh_cli_parse(&HELP, argc - first + 1, argv + first - 1, opts, n, &name, want_name ? 1 : 0, &npos);
  if (rc) return rc;
  if (want_name) a->name = name;
  if (want_name && !a->name) {
    fprintf(stderr, "longhaul envs: which environment? (longhaul envs list)\n");
    return LH_EXIT_USAGE;
  }
  return 0;
}

static int cmd_list(void) {
  size_t n;
  const lh_env_vtable *const *all = lh_envs_builtin(&n);
  printf("built-in environments:\n");
  for (size_t i = 0; i < n; i++) printf("  %-8s %s (tools: %s)\n", all[i]->name, all[i]->summary, all[i]->tools);
  printf("plugins: --plugin PATH (a library exporting %s, table version <= %d)\n", LH_ENV_PLUGIN_SYMBOL,
         LH_ENV_API_VERSION);
  printf("env servers: --server ENDPOINT (EnvRequest/EnvResponse over ZeroMQ)\n");
  return LH_EXIT_OK;
}

static int open_env(args *a, lh_env **env) {
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_env_open(a->name, a->opts, a->count, env, &err);
  if (rc < 0) {
    lh_cli_term_printf(stderr, "longhaul envs: cannot open '%s': %s (%s)\n", a->name, err.msg, lh_err_name(rc));
    return lh_cli_exit_for_error(rc);
  }
  return 0;
}

/* Draws an image as text: one character per sampled pixel, doubled
 * horizontally for a square look; red-ish pixels 'A', green-ish 'G', the
 * rest by brightness. --ansi paints the true colour instead. */
/* The largest k <= 16 such that the image is made of uniform k x k blocks
 * (a maze's cells), so that one block becomes one character. */
static uint32_t block_size(const lh_env_image *im) {
  for (uint32_t k = 16; k > 1; k--) {
    if (im->width % k || im->height % k) continue;
    int uniform = 1;
    for (uint32_t y = 0; uniform && y < im->height; y++)
      for (uint32_t x = 0; uniform && x < im->width; x++) {
        const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->channels;
        const uint8_t *q = im->pixels + ((size_t)(y - y % k) * im->width + (x - x % k)) * im->channels;
        uniform = memcmp(p, q, im->channels) == 0;
      }
    if (uniform) return k;
  }
  return 1;
}

static void draw_image(const lh_env_image *im, int ansi) {
  if (!im->pixels || !im->width || !im->height) return;
  uint32_t step = block_size(im);
  while (im->width / step > 48) step *= 2;
  static const char ramp[] = "##%+=-. ";
  for (uint32_t y = step / 2; y < im->height; y += step) {
    for (uint32_t x = step / 2; x < im->width; x += step) {
      const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->channels;
      int r = p[0], g = im->channels >= 3 ? p[1] : p[0], b = im->channels >= 3 ? p[2] : p[0];
      if (ansi) {
        printf("\x1b[48;2;%d;%d;%dm  ", r, g, b);
        continue;
      }
      char c;
      if (r > 150 && g < 100 && b < 100) c = 'A';
      else if (g > 150 && r < 100 && b < 100) c = 'G';
      else c = ramp[((r + g + b) / 3) * 8 / 256];
      printf("%c%c", c, c);
    }
    printf(ansi ? "\x1b[0m\n" : "\n");
  }
}

/* The observation's text is the environment's (a plugin's or an env
 * server's): through the terminal filter (cli/term.h), its own lines kept;
 * the images are drawn by this command, --ansi's colours its own. */
static void show_obs(const lh_env_obs *obs, const args *a) {
  size_t n = obs->text_bytes;
  const char *text = obs->text ? obs->text : "";
  if (a->max_text > 0 && n > (size_t)a->max_text) {
    size_t half = (size_t)a->max_text / 2;
    lh_cli_term_write(stdout, text, half);
    printf("\n[... %zu bytes not shown ...]\n", n - 2 * half);
    lh_cli_term_write(stdout, text + n - half, half);
  } else {
    lh_cli_term_write(stdout, text, obs->text ? n : 0);
  }
  putchar('\n');
  for (uint32_t i = 0; i < obs->image_count; i++) {
    printf("[image %u: %ux%u]\n", i, obs->images[i].width, obs->images[i].height);
    draw_image(&obs->images[i], a->ansi);
  }
}

static const char *outcome_name(lh_env_outcome o) {
  switch (o) {
    case LH_ENV_SUCCESS: return "success";
    case LH_ENV_FAILURE: return "failure";
    case LH_ENV_TRUNCATED: return "truncated";
    case LH_ENV_ERROR: return "error";
    default: return "running";
  }
}

static int cmd_play(args *a) {
  lh_env *env;
  int rc = open_env(a, &env);
  if (rc) return rc;
  lh_errbuf err;
  lh_env_obs obs;
  if ((rc = lh_env_reset(env, a->seed, &obs, &err)) < 0) {
    lh_cli_term_printf(stderr, "longhaul envs play: reset failed: %s (%s)\n", err.msg, lh_err_name(rc));
    lh_env_free(env);
    return lh_cli_exit_for_error(rc);
  }
  lh_cli_term_printf(stdout, "== %s, seed %llu, max_steps %u ==\n", lh_env_name(env), (unsigned long long)a->seed,
                     lh_env_max_steps(env));
  show_obs(&obs, a);
  int interactive = isatty(STDIN_FILENO);
  float total = 0;
  char *line = NULL;
  size_t cap = 0;
  int status = LH_EXIT_OK;
  for (;;) {
    const char *action;
    size_t bytes;
    if (a->expert) {
      if (interactive) {
        printf("(Enter: next expert step) ");
        fflush(stdout);
        if (getline(&line, &cap, stdin) < 0) break;
      }
      if ((rc = lh_env_expert(env, &action, &err)) < 0) {
        lh_cli_term_printf(stderr, "longhaul envs play: expert failed: %s (%s)\n", err.msg, lh_err_name(rc));
        status = LH_EXIT_RUNTIME;
        break;
      }
      bytes = strlen(action);
    } else {
      printf("action> ");
      fflush(stdout);
      ssize_t n = getline(&line, &cap, stdin);
      if (n < 0) {
        printf("\n(end of input: episode left unfinished)\n");
        break;
      }
      while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
      action = line;
      bytes = (size_t)n;
    }
    lh_cli_term_printf(stdout, "-- step %u: %.*s\n", lh_env_steps(env) + 1, (int)bytes, action);
    lh_env_result res;
    rc = lh_env_step(env, action, bytes, &res, &err);
    show_obs(&res.obs, a);
    total += res.reward;
    printf("reward %g", res.reward);
    for (uint32_t i = 0; i < res.term_count; i++) {
      char name[256];
      printf(" %s=%g", lh_cli_term_field(res.terms[i].name, name, sizeof name), res.terms[i].value);
    }
    printf("\n");
    if (rc < 0) {
      lh_cli_term_printf(stderr, "longhaul envs play: %s (%s)\n", err.msg, lh_err_name(rc));
      status = LH_EXIT_RUNTIME;
    }
    if (res.done) {
      printf("== episode over: %s, reward %g, steps %u ==\n", outcome_name(res.outcome), total,
             lh_env_steps(env));
      break;
    }
  }
  free(line);
  lh_env_free(env);
  return status;
}

/* serve stops on SIGINT or SIGTERM: the handler sets the flag the server
 * watches (and interrupts its wait), so that it logs its totals and exits 0. */
static volatile sig_atomic_t stop_requested;
static void on_stop_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

int lh_cmd_envs(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "longhaul envs: which subcommand? list, describe, play or serve (see longhaul envs --help)\n");
    return LH_EXIT_USAGE;
  }
  const char *sub = argv[1];
  args a;
  memset(&a, 0, sizeof a);
  a.max_text = 4000;
  int rc;
  if (lh_cli_wants_help(argc, argv)) {
    /* --help, after a subcommand or alone: the one help of envs. */
    rc = parse_args(argc, argv, sub[0] == '-' ? 1 : 2, &a, 0);
  } else if (!strcmp(sub, "list")) {
    rc = parse_args(argc, argv, 2, &a, 0);
    if (!rc) rc = cmd_list();
  } else if (!strcmp(sub, "describe")) {
    rc = parse_args(argc, argv, 2, &a, 1);
    lh_env *env;
    if (!rc && !(rc = open_env(&a, &env))) {
      lh_cli_term_printf(stdout, "%s\n", lh_env_describe(env));
      lh_env_free(env);
    }
  } else if (!strcmp(sub, "play")) {
    rc = parse_args(argc, argv, 2, &a, 1);
    if (!rc) rc = cmd_play(&a);
  } else if (!strcmp(sub, "serve")) {
    rc = parse_args(argc, argv, 2, &a, 0);
    if (!rc && !a.bind) {
      fprintf(stderr, "longhaul envs serve: --bind ENDPOINT is required (e.g. tcp://127.0.0.1:5600)\n");
      rc = LH_EXIT_USAGE;
    }
    if (!rc) {
      lh_cli_on_signals(on_stop_signal, (const int[]){SIGINT, SIGTERM}, 2);
      a.serve.stop = &stop_requested;
      lh_errbuf err;
      lh_errbuf_clear(&err);
      int s = lh_envserver_run(a.bind, &a.serve, &err);
      if (s < 0) {
        lh_cli_term_printf(stderr, "longhaul envs serve: %s (%s)\n", err.msg, lh_err_name(s));
        /* A key file or allow-list it cannot use is a usage error (2), which
         * `longhaul launch` does not retry; a bind that failed is not. */
        rc = lh_cli_exit_for_error(s);
      }
    }
  } else {
    fprintf(stderr, "longhaul envs: unknown subcommand '%s' (list, describe, play, serve)\n", sub);
    rc = LH_EXIT_USAGE;
  }
  args_free(&a);
  return lh_cli_parse_exit(rc);
}

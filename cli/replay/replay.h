/* cli replay: the pieces of `longhaul replay` shared between its files:
 * option parsing, the transcript renderer and the JSON encoding of a
 * segment. Private to cli/. */
#ifndef LH_CLI_REPLAY_H
#define LH_CLI_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "cli/rank_stores.h"
#include "common/str.h"
#include "proto/longhaul.pb-c.h"
#include "store/store.h"

/* ---- the subcommands (replay_<name>.c), called with argv[0] = name ---- */

int lh_cli_replay_stats(int argc, char **argv);
int lh_cli_replay_episodes(int argc, char **argv);
int lh_cli_replay_show(int argc, char **argv);
int lh_cli_replay_export(int argc, char **argv);
int lh_cli_replay_sql(int argc, char **argv);
int lh_cli_replay_check(int argc, char **argv);

/* ---- shared by the subcommands (cmd_replay.c) ---- */

/* Opens the store of dbs read-only for subcommand cmd: every learner
 * rank's file as one (lh_cli_dbs_open). Returns 0 with *out set,
 * LH_EXIT_USAGE without a --db (it is required), or LH_EXIT_RUNTIME after
 * printing a message that names the file and says what is wrong. */
int lh_cli_replay_open(const char *cmd, const lh_cli_dbs *dbs, lh_store **out);
/* Prints `longhaul replay CMD: reading 'DB': MESSAGE (CODE)` for a failed
 * store call and returns LH_EXIT_RUNTIME. */
int lh_cli_replay_fail(const char *cmd, const char *db, int code, const lh_errbuf *err);

/* ---- options (replay_filter.c, args.h) ---- */

/* An episode id: an unsigned 64-bit number, or a negative one, which is how
 * SQLite (`replay sql`, sqlite3) shows an id of 2^63 or more (its two's
 * complement). 0, or -1 when text is neither. */
int lh_cli_parse_id(const char *text, uint64_t *out);

/* The episode filters of `episodes` and `export` as given on the command
 * line; lh_cli_filter_opts lists their options for lh_cli_parse. */
typedef struct {
  const char *env, *status;
  double min_reward, max_reward;
  uint64_t min_version, max_version, limit;
  int has_min_reward, has_max_reward, has_min_version, has_max_version, has_limit;
} lh_cli_filter_args;

#define LH_CLI_FILTER_OPT_COUNT 7
/* Fills opts[0 .. LH_CLI_FILTER_OPT_COUNT-1] with the options that write
 * into a (--env, --status, --min-reward, --max-reward, --min-version,
 * --max-version, --limit). */
void lh_cli_filter_opts(lh_cli_filter_args *a, lh_cli_opt *opts);
/* Checks a (a known status, or several joined by commas; min <= max; a
 * limit that fits) and builds f from it, with default_limit when --limit
 * was not given. Prints what is wrong and returns LH_EXIT_USAGE, or 0. */
int lh_cli_filter_build(const char *cmd, const lh_cli_filter_args *a, uint32_t default_limit,
                        lh_episode_filter *f);

/* ---- transcript (replay_transcript.c) ---- */

/* The display name of a special token ("<bos>" ...), or NULL for a byte
 * or an id outside the vocabulary. */
const char *lh_cli_token_name(uint32_t token);

/* Renders token streams as readable text, one line per run of tokens from
 * one source: lines tagged `policy` hold tokens the policy sampled (loss
 * mask 1), lines tagged `env` tokens the environment gave. Tool calls are
 * shown as `[call] name(args)`, observations as `[obs] text`, images as
 * `[image WxHxC at offset N]`; bytes are text with non-printables escaped
 * (\n also ends the line). State (inside a call or an observation) carries
 * from one segment to the next, so a call cut by a segment boundary still
 * reads as one. */
typedef struct lh_cli_transcript lh_cli_transcript;

lh_cli_transcript *lh_cli_transcript_new(FILE *out, const char *indent);
void lh_cli_transcript_free(lh_cli_transcript *t);  /* accepts NULL; ends the open line */
/* Renders one segment's tokens (its images at their offsets). */
void lh_cli_transcript_segment(lh_cli_transcript *t, const Longhaul__Segment *seg);
/* Ends the open line and forgets the call/observation state (after a gap). */
void lh_cli_transcript_break(lh_cli_transcript *t);

/* Appends to out the decoded text of tokens: bytes as they are, special
 * tokens by name. Bytes that are not valid UTF-8 (and NUL) become U+FFFD
 * so the text can go into JSON. Returns 0 or -1 when out of memory. */
int lh_cli_tokens_text(const uint32_t *tokens, size_t n, lh_str *out);

/* ---- JSON (replay_json.c) ---- */

/* A new cJSON object for one decoded segment: seq, start_offset, tokens,
 * text, loss_mask, versions, logps, images (offset, width, height,
 * channels; no pixels), routed_layers/routed_topk. NULL when out of
 * memory. The caller frees it with cJSON_Delete. */
cJSON *lh_cli_segment_json(const Longhaul__Segment *seg);

#endif

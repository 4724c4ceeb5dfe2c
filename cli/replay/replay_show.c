/* longhaul replay show: one episode as a readable transcript. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"

typedef struct {
  uint64_t id;            /* the episode shown (its shared prefix's segments are another's) */
  lh_cli_transcript *transcript;
  int tokens;             /* --tokens: list every token too */
  int have_prev;
  uint32_t prev_seq;
  uint64_t next_offset;   /* where the previous segment's tokens ended */
  int offset_known;       /* next_offset holds (the first offset is 0) */
} show_state;

/* A gap: count missing segments from first (count may be 0 when only
 * tokens are missing) and the tokens from_offset..to_offset-1 they held,
 * when that is known (from_offset < to_offset). The transcript's
 * call/observation state is dropped: what the missing tokens opened or
 * closed is unknown. */
static void print_gap(show_state *st, uint32_t first, uint32_t count, uint64_t from_offset,
                      uint64_t to_offset) {
  lh_cli_transcript_break(st->transcript);
  lh_cli_term_printf(stdout, "-- gap:");
  if (count == 1) lh_cli_term_printf(stdout, " segment %u is missing", first);
  else if (count > 1) lh_cli_term_printf(stdout, " segments %u..%u are missing", first, first + count - 1);
  if (from_offset < to_offset)
    lh_cli_term_printf(stdout, "%s tokens %llu..%llu", count ? "," : "", (unsigned long long)from_offset,
                       (unsigned long long)(to_offset - 1));
  lh_cli_term_printf(stdout, " --\n");
}

static void print_token_table(const Longhaul__Segment *seg) {
  lh_cli_term_printf(stdout, "  %8s  %5s  %-8s %4s  %7s  %s\n", "OFFSET", "ID", "TEXT", "MASK", "VERSION", "LOGP");
  for (size_t i = 0; i < seg->n_tokens; i++) {
    uint32_t tok = seg->tokens[i];
    char text[16];
    const char *name = lh_cli_token_name(tok);
    if (name) snprintf(text, sizeof text, "%s", name);
    else if (tok >= 0x21 && tok < 0x7f) snprintf(text, sizeof text, "'%c'", (char)tok);
    else if (tok == ' ') snprintf(text, sizeof text, "' '");
    else if (tok < 256) snprintf(text, sizeof text, "\\x%02x", tok);
    else snprintf(text, sizeof text, "<?%u>", tok);
    int mask = i < seg->loss_mask.len ? seg->loss_mask.data[i] : 0;
    lh_cli_term_printf(stdout, "  %8llu  %5u  %-8s %4d  ", (unsigned long long)(seg->start_offset + i), tok, text,
                       mask);
    if (i < seg->n_policy_version) lh_cli_term_printf(stdout, "%7u  ", seg->policy_version[i]);
    else lh_cli_term_printf(stdout, "%7s  ", "-");
    if (i < seg->n_behavior_logp) lh_cli_term_printf(stdout, "%.6g\n", (double)seg->behavior_logp[i]);
    else lh_cli_term_printf(stdout, "-\n");
  }
}

/* The segment's header line: its token range, how many tokens each source
 * gave, and the policy versions of its sampled tokens. */
static void print_segment_header(const Longhaul__Segment *seg) {
  size_t sampled = 0;
  uint32_t vmin = UINT32_MAX, vmax = 0;
  for (size_t i = 0; i < seg->n_tokens; i++) {
    if (!(i < seg->loss_mask.len && seg->loss_mask.data[i])) continue;
    sampled++;
    if (i < seg->n_policy_version) {
      uint32_t v = seg->policy_version[i];
      if (v < vmin) vmin = v;
      if (v > vmax) vmax = v;
    }
  }
  lh_cli_term_printf(stdout, "segment %u  tokens %llu..%llu (%zu: %zu policy, %zu env)", seg->seq,
                     (unsigned long long)seg->start_offset,
                     (unsigned long long)(seg->start_offset + (seg->n_tokens ? seg->n_tokens - 1 : 0)), seg->n_tokens,
                     sampled, seg->n_tokens - sampled);
  if (vmin > vmax) lh_cli_term_printf(stdout, "  versions -");
  else if (vmin == vmax) lh_cli_term_printf(stdout, "  version %u", vmin);
  else lh_cli_term_printf(stdout, "  versions %u..%u", vmin, vmax);
  if (seg->n_images) lh_cli_term_printf(stdout, "  images %zu", seg->n_images);
  lh_cli_term_printf(stdout, "\n");
}

static int on_segment(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  show_state *st = ctx;
  if (seg && seg->episode_id != st->id) {
    /* the group's shared prefix, its leader's segments: shown as the
     * episode's first tokens, with whose they are */
    lh_cli_term_printf(stdout, "shared prefix, episode %llu ", (unsigned long long)seg->episode_id);
    print_segment_header(seg);
    lh_cli_transcript_segment(st->transcript, seg);
    if (st->tokens) print_token_table(seg);
    st->next_offset = seg->start_offset + seg->n_tokens;
    return 0;
  }
  uint32_t expect = st->have_prev ? st->prev_seq + 1 : 0;
  uint32_t missing = seq > expect ? seq - expect : 0;
  /* Which tokens are missing is known only between stored payloads. */
  int tokens_missing = seg && st->offset_known && seg->start_offset != st->next_offset;
  if (missing || tokens_missing)
    print_gap(st, expect, missing, st->next_offset, tokens_missing ? seg->start_offset : 0);
  st->have_prev = 1;
  st->prev_seq = seq;
  if (!seg) {
    lh_cli_transcript_break(st->transcript);
    lh_cli_term_printf(stdout, "segment %u  payload dropped by retention (its tokens are no longer stored)\n", seq);
    st->offset_known = 0;
    return 0;
  }
  print_segment_header(seg);
  lh_cli_transcript_segment(st->transcript, seg);
  if (st->tokens) print_token_table(seg);
  st->next_offset = seg->start_offset + seg->n_tokens;
  st->offset_known = 1;
  return 0;
}

static void print_episode(const lh_episode_row *r) {
  const char *status = lh_episode_status_name(r->status);
  /* Names an actor sent: shown with their control characters escaped. */
  char env[4 * LH_STORE_NAME_BYTES], actor[4 * LH_STORE_NAME_BYTES];
  lh_cli_term_field(r->env[0] ? r->env : "-", env, sizeof env);
  lh_cli_term_field(r->actor[0] ? r->actor : "-", actor, sizeof actor);
  lh_cli_term_printf(stdout, "episode %llu  env %s  actor %s  status %s\n", (unsigned long long)r->id, env, actor,
                     status ? status : "?");
  lh_cli_term_printf(stdout, "  task seed %llu  group %llu  steps %u  tokens %llu (%llu stored)\n",
                     (unsigned long long)r->task_seed, (unsigned long long)r->group_id, r->steps,
                     (unsigned long long)r->tokens, (unsigned long long)r->tokens_received);
  if (r->has_versions)
    lh_cli_term_printf(stdout, "  versions %llu..%llu", (unsigned long long)r->min_version,
                       (unsigned long long)r->max_version);
  else
    lh_cli_term_printf(stdout, "  versions -");
  if (r->has_end)
    lh_cli_term_printf(stdout, "  segments %u of %u stored", r->segments_received, r->segment_count);
  else
    lh_cli_term_printf(stdout, "  segments %u stored (no episode end yet)", r->segments_received);
  if (r->payloads_dropped) lh_cli_term_printf(stdout, ", %u payloads dropped", r->payloads_dropped);
  if (r->prefix_episode)
    lh_cli_term_printf(stdout, "\n  tokens 0..%llu are the group's shared prefix, stored once with episode %llu",
                       (unsigned long long)(r->prefix_tokens - 1), (unsigned long long)r->prefix_episode);
  lh_cli_term_printf(stdout, "\n\n");
}

static int print_outcome(lh_store *s, const char *db, const lh_episode_row *r,
                         const lh_segment_report *rep) {
  lh_cli_term_printf(stdout, "\n");
  if (rep->prefix_episode && !rep->prefix_whole)
    lh_cli_term_printf(stdout, "gap: the shared prefix of episode %llu is not whole (%u of its segments stored with "
                       "payloads)\n", (unsigned long long)rep->prefix_episode, rep->prefix_segments);
  if (rep->missing_count) {
    lh_cli_term_printf(stdout, "gaps: %u segment%s missing:", rep->missing_count, rep->missing_count == 1 ? "" : "s");
    for (uint32_t k = 0; k < rep->missing_listed; k++) lh_cli_term_printf(stdout, " %u", rep->missing[k]);
    if (rep->missing_listed < rep->missing_count) lh_cli_term_printf(stdout, " ...");
    lh_cli_term_printf(stdout, "\n");
  }
  if (!r->has_end) {
    lh_cli_term_printf(stdout, "outcome: none yet (the episode is running or its end was not stored)\n");
  } else {
    const char *outcome = lh_episode_outcome_name(r->outcome);
    lh_cli_term_printf(stdout, "outcome: %s", outcome ? outcome : "unspecified");
    if (r->has_reward) lh_cli_term_printf(stdout, "  reward %g", r->reward);
    lh_cli_term_printf(stdout, "\n");
    if (r->error[0]) {
      char error[4 * sizeof r->error];
      lh_cli_term_field(r->error, error, sizeof error);
      lh_cli_term_printf(stdout, "error: %s\n", error);
    }
  }
  size_t count = 0;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int e = lh_store_episode_rewards(s, r->id, NULL, 0, &count, &err);
  lh_reward_term *terms = NULL;
  if (e >= 0 && count) {
    terms = calloc(count, sizeof *terms);
    if (!terms) return lh_cli_replay_fail("show", db, LH_ENOMEM, NULL);
    e = lh_store_episode_rewards(s, r->id, terms, count, &count, &err);
  }
  if (e < 0) {
    free(terms);
    return lh_cli_replay_fail("show", db, e, &err);
  }
  if (count == 0) {
    lh_cli_term_printf(stdout, "reward terms: none\n");
  } else {
    int name_w = 4, value_w = 1;
    for (size_t k = 0; k < count; k++) {
      char value[32], name[4 * LH_STORE_NAME_BYTES];
      int l = snprintf(value, sizeof value, "%g", terms[k].value);
      if (l > value_w) value_w = l;
      int w = (int)strlen(lh_cli_term_field(terms[k].name, name, sizeof name));
      if (w > name_w) name_w = w;
    }
    lh_cli_term_printf(stdout, "reward terms:\n");
    for (size_t k = 0; k < count; k++) {
      char name[4 * LH_STORE_NAME_BYTES];
      lh_cli_term_field(terms[k].name, name, sizeof name);
      lh_cli_term_printf(stdout, "  %-*s  %*g  (step %u)\n", name_w, name, value_w, terms[k].value, terms[k].step);
    }
  }
  free(terms);
  return LH_EXIT_OK;
}

static int first_u64(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols >= 1 && values[0]) *(uint64_t *)ctx = strtoull(values[0], NULL, 10);
  return 0;
}

/* The episodes retention retired at the store's cap (retired_episodes,
 * schema 15): their ids are not kept, so one asked for may be among them.
 * 0 when none, or when the count cannot be read (the message is then the
 * plain one). */
static uint64_t retired_episodes(lh_store *s) {
  uint64_t n = 0;
  lh_errbuf err;
  if (lh_store_sql(s, "SELECT coalesce(sum(episodes), 0) FROM retired_episodes", first_u64, &n, NULL, &err)) return 0;
  return n;
}

static const lh_cli_help HELP = {
    .cmd = "replay show",
    .usage = "--db FILE ID [OPTIONS]",
    .about = "Prints episode ID: its fields, then each segment with its token range and policy versions, then "
        "the outcome and the reward terms. In the transcript, lines tagged 'policy' hold tokens the policy "
        "sampled (loss mask 1), lines tagged 'env' tokens the environment gave. Tool calls read '[call] "
        "name(args)', observations '[obs] text', images '[image WxHxC at offset N]' (N: token offset in the "
        "episode). Bytes that are not printable ASCII are escaped (\\t, \\r, \\\\, \\xHH); a newline byte "
        "ends the line. Missing segments are reported as gaps.",
    .exits = "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
};

int lh_cli_replay_show(int argc, char **argv) {
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  int tokens = 0;
  const lh_cli_opt opts[] = {LH_CLI_DB_OPTS(&dbs),
                             {"--tokens", LH_CLI_OPT_FLAG, &tokens, NULL, NULL,
                              "also list every token: offset, id, text, mask, version, logp"},
                             LH_CLI_TIMEOUT_OPT(&dbs)};
  const char *pos[1];
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], pos, 1, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  if (npos == 0) {
    fprintf(stderr, "longhaul replay show: which episode? give its ID (see longhaul replay episodes)\n");
    return LH_EXIT_USAGE;
  }
  uint64_t id;
  if (lh_cli_parse_id(pos[0], &id)) {
    lh_cli_term_printf(stderr, "longhaul replay show: ID must be an episode id (a 64-bit integer), not '%s'\n", pos[0]);
    return LH_EXIT_USAGE;
  }
  lh_store *s;
  if ((rc = lh_cli_replay_open("show", &dbs, &s))) return rc;
  const char *db = dbs.db.v[0];
  lh_episode_row row;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int e = lh_store_episode_get(s, id, &row, &err);
  if (e == LH_ESTORE_NO_EPISODE) {
    uint64_t retired = retired_episodes(s);
    if (retired)
      lh_cli_term_printf(stderr,
                         "longhaul replay show: no episode %llu in '%s': it is not stored, or it is one of the %llu "
                         "episodes retention retired at the store's cap (their rows deleted, their figures counted "
                         "in longhaul replay stats; see longhaul replay episodes for those stored)\n",
                         (unsigned long long)id, db, (unsigned long long)retired);
    else
      lh_cli_term_printf(stderr, "longhaul replay show: no episode %llu in '%s' (see longhaul replay episodes)\n",
                         (unsigned long long)id, db);
    lh_store_close(s);
    return LH_EXIT_RUNTIME;
  }
  if (e < 0) {
    lh_store_close(s);
    return lh_cli_replay_fail("show", db, e, &err);
  }
  print_episode(&row);
  show_state st;
  memset(&st, 0, sizeof st);
  st.tokens = tokens;
  st.offset_known = 1;
  st.id = id;
  st.transcript = lh_cli_transcript_new(stdout, "  ");
  if (!st.transcript) {
    lh_store_close(s);
    return lh_cli_replay_fail("show", db, LH_ENOMEM, NULL);
  }
  lh_segment_report rep;
  memset(&rep, 0, sizeof rep);
  e = lh_store_episode_segments(s, id, on_segment, &st, &rep, &err);
  if (e < 0) {
    lh_cli_transcript_free(st.transcript);
    fflush(stdout);
    lh_store_close(s);
    return lh_cli_replay_fail("show", db, e, &err);
  }
  /* Segments expected after the last stored one, and their tokens when
   * the episode's end said how many there were. */
  uint32_t next = st.have_prev ? st.prev_seq + 1 : 0;
  if (rep.expected > next)
    print_gap(&st, next, rep.expected - next, st.next_offset,
              st.offset_known && row.has_end ? row.tokens : 0);
  lh_cli_transcript_free(st.transcript);
  if (!st.have_prev && rep.expected == 0) lh_cli_term_printf(stdout, "(no segments stored)\n");
  rc = print_outcome(s, db, &row, &rep);
  lh_store_close(s);
  return rc;
}

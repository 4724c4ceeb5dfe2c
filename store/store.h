/* store: the SQLite replay store (ARCHITECTURE.md §7).
 *
 * One file in WAL mode holds the runs, the policy versions the learner
 * published, every episode (a row per episode, its segments' payloads and
 * its reward terms) and the learner's per-step metrics. The schema is
 * documented in docs/store.md (longhaul help store) so that a user can query the file with sqlite3.
 *
 * Writers (learners) open it read-write; lh_store_open creates a new file
 * or migrates an older schema in place. Readers (the `replay` commands)
 * open it read-only and never block a writer. Several processes may have
 * the same file open at once; a locked database is waited for (busy
 * timeout plus a retry loop) so that SQLITE_BUSY never reaches a caller
 * before the wait limit (LH_ESTORE_BUSY after it).
 *
 * Every write runs inside a transaction: either an explicit batch
 * (lh_store_begin ... lh_store_commit) or, for a put outside a batch, a
 * transaction of its own. Inserts are idempotent on their keys: a message
 * the store already holds is counted as a duplicate (*inserted = 0), not an
 * error, so an actor may resend whatever was not acked. A segment or an
 * EpisodeEnd that contradicts what the store holds is refused
 * (*inserted = LH_STORE_REFUSED, see "writes" below).
 *
 * A store has at most one writing learner: lh_store_lock_writer takes an
 * advisory lock on a side file that the learner holds while it runs.
 *
 * An lh_store is one SQLite connection: use it from one thread at a time.
 * All SQL is prepared with bound parameters. Unsigned 64-bit ids and seeds
 * are stored as SQLite's signed 64-bit integers (the same bits), so one
 * above 2^63 shows as negative in sqlite3 but reads back unchanged here. */
#ifndef LH_STORE_H
#define LH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/str.h"
#include "proto/wire.h"

/* The schema version this build writes (PRAGMA user_version; also the
 * meta table's schema_version). Older files are migrated on a read-write
 * open; a newer file is refused (LH_ESTORE_TOO_NEW). */
#define LH_STORE_SCHEMA_VERSION 15
/* meta.application and PRAGMA application_id ('LHRS'): what marks a
 * SQLite file as a longhaul store. */
#define LH_STORE_APPLICATION "longhaul-replay-store"
#define LH_STORE_APPLICATION_ID 0x4C485253

/* Appends the reference of the schema this build makes (every table, view
 * and index, each column with its type, key and the version that added
 * it, and what each holds; store_schema_doc.c) in Markdown to out: 0,
 * LH_ENOMEM, LH_ESTORE_SQLITE, or LH_EINVAL naming an object or column
 * without a doc, or a doc that names none. */
int lh_store_schema_reference(lh_str *out, lh_errbuf *err);

/* Fixed text sizes of the rows below (bytes including the NUL). Names are
 * bounded by the wire limits (256 bytes); longer error text is cut. */
#define LH_STORE_NAME_BYTES 257
#define LH_STORE_ERROR_BYTES 512
#define LH_STORE_MAX_LAYERS 256
/* The most experts per layer a train step's expert rows may have. */
#define LH_STORE_MAX_EXPERTS 4096
#define LH_STORE_MAX_GAPS 64   /* missing seq numbers listed in a report */

typedef struct lh_store lh_store;

/* ---- opening ----------------------------------------------------------- */

typedef struct {
  int readonly;            /* SQLITE_OPEN_READONLY; no schema changes, no writes */
  int busy_timeout_ms;     /* SQLite's busy handler per attempt; default 2000 */
  int max_wait_ms;         /* total wait for a lock before LH_ESTORE_BUSY; default 120000 */
  int synchronous;         /* PRAGMA synchronous: 0 OFF, 1 NORMAL (default), 2 FULL */
  int quick_check;         /* 1: run PRAGMA quick_check on every open; 0 (default): only on a
                              writer's open after an unclean shutdown (writer below), so
                              that an open costs the same at 1 GB and at 100 GB. A check
                              on demand: lh_store_check_file, `longhaul replay check` */
  int writer;              /* 1: the connection of the store's one writer, opened by the
                              holder of lh_store_lock_writer (the learner); read-write
                              only. Open runs quick_check when the previous writer did not
                              close the store (meta row writer_open still there: it was
                              killed, crashed, or the machine lost power), then writes its
                              own writer_open row; lh_store_close deletes it. Default 0 */
  lh_wire_limits limits;   /* for decoding payloads read back; default lh_wire_limits_default */
  uint64_t max_bytes;      /* cap on the pages in use; 0: none. A batch or put begun at or
                              over it fails with LH_ESTORE_FULL (ACK_RETRY for the actor)
                              until retention frees pages */
  uint32_t heartbeats_per_actor; /* actor_heartbeats rows kept per actor, the newest ones;
                                    default 3600 (an hour at one a second); 0: all */
  uint32_t heartbeats_total;     /* actor_heartbeats rows kept in all, the newest ones, so
                                    that senders of many names cannot grow the table without
                                    end; default 1048576 (an hour of 291 actors); 0: all */
  uint32_t time_budget_ms;       /* the most time one call into SQLite may take on this
                                    connection (preparing a statement, or one step of it:
                                    until it returns a row or ends; the open's own reads
                                    too); past it SQLite is interrupted and the call fails
                                    with LH_ESTORE_SQL_TIMEOUT. What a reader of a store it
                                    does not trust sets (the read commands: a query
                                    without end, or far longer than the store's size
                                    explains, must not hold them). 0 (default): none */
  uint32_t checkpoint_ms;        /* a read-write connection checkpoints its write-ahead log
                                    into the store's file (PASSIVE: readers are not waited
                                    for) after a commit once this long has passed since its
                                    last checkpoint; default 1000; 0: by pages only */
  uint32_t checkpoint_pages;     /* ... or once the log holds this many pages past it;
                                    default 1000 (SQLite's own); 0: by time only. What a
                                    lost -wal costs is at most the commits since the last
                                    checkpoint (lh_store_wal_check) */
} lh_store_options;

void lh_store_options_default(lh_store_options *o);

/* SQLite's heap in this process, every connection together (its page
 * caches, statements, schema): *used now and *peak since the start. For a
 * process's status line: what part of its memory the store holds. */
void lh_store_memory(int64_t *used, int64_t *peak);

/* Opens (creating if absent, migrating if older) the store at path for
 * reading and writing. On success *out is a new store the caller closes
 * with lh_store_close; on failure *out is NULL and err says why:
 * LH_ESTORE_NOT_SQLITE (the file is not a SQLite database),
 * LH_ESTORE_NOT_STORE (a SQLite database without the longhaul marker),
 * LH_ESTORE_CORRUPT (quick_check failed or SQLite reports corruption),
 * LH_ESTORE_TOO_NEW, LH_ESTORE_SCHEMA (a table, view, index or trigger
 * that its schema version does not create, or one that differs from it,
 * or one missing: the message names it; checked before anything is read,
 * since SQLite runs a view's or trigger's SQL as the file says),
 * LH_ESTORE_SQLITE. A new file gets WAL mode. The connection runs no
 * trigger of the file's, whenever it was made. */
int lh_store_open(const char *path, lh_store **out, lh_errbuf *err);
/* Opens an existing store read-only (SQLITE_OPEN_READONLY), as every query
 * path does. Besides the errors above: LH_ESTORE_NO_FILE when path does not
 * exist, LH_ESTORE_NEEDS_MIGRATION when the schema is older than this build
 * (open it read-write once to migrate). */
int lh_store_open_readonly(const char *path, lh_store **out, lh_errbuf *err);
/* Either of the above, as o->readonly says; o may be NULL for defaults. */
int lh_store_open_with(const char *path, const lh_store_options *o, lh_store **out,
                       lh_errbuf *err);
/* The write-ahead log (replay.db-wal) holds the commits since the last
 * checkpoint. A read-write connection checks it after each of its commits
 * (and at its close): the store's file and the -wal must be the files it
 * opened, the -wal's header there and the frames it knows of still there
 * (a truncation cuts them). When it finds them gone, the log is lost:
 * the commit that found it reports LH_ESTORE_WAL_LOST (it is not made
 * durable), every later write is refused with it, the message naming the
 * -wal and what happened, and the close does not checkpoint the damaged
 * log into the store's file, which keeps every commit up to the last
 * checkpoint (store.h, lh_store_options.checkpoint_ms). This call runs the
 * check without a commit, for a writer to call now and then (the
 * learner's service, once a second): 0, or LH_ESTORE_WAL_LOST. An empty
 * -wal may be another program's checkpoint (TRUNCATE): a one-row commit
 * tells. A no-op on a read-only store. */
int lh_store_wal_check(lh_store *s, lh_errbuf *err);
/* Whether s found its write-ahead log lost (0 for NULL). */
int lh_store_wal_lost(const lh_store *s);
/* Takes the log of s as lost, as another connection of the same store
 * found it (why: its message): each connection checks what it knows of
 * the log, and the close of one that did not see the damage would let
 * SQLite copy it into the store's file. A no-op on NULL or a read-only
 * store. */
void lh_store_wal_give_up(lh_store *s, const char *why);

/* Changes the time budget of an open store's calls into SQLite
 * (lh_store_options.time_budget_ms; 0: none) from the next call on. */
void lh_store_set_time_budget_ms(lh_store *s, uint32_t budget_ms);
/* Changes the cap of an open store (lh_store_options.max_bytes; 0: none),
 * say when the learner re-reads its config: the next batch or put is
 * checked against the new cap. */
void lh_store_set_max_bytes(lh_store *s, uint64_t max_bytes);
/* Rolls back an open batch, finalizes everything and closes; accepts NULL.
 * A writer's connection (lh_store_options.writer) deletes its writer_open
 * row first: the mark of a clean close. */
void lh_store_close(lh_store *s);
/* Whether the open of s ran PRAGMA quick_check (asked by the options, or
 * a writer's open after an unclean shutdown). */
int lh_store_open_checked(const lh_store *s);

/* One line of a check's findings, as SQLite words it ("*** in database
 * main ***", "Page 7: btreeInitPage() returns error code 11"). Returning
 * non-zero stops the check. */
typedef int (*lh_store_problem_fn)(void *ctx, const char *line);
/* Checks the SQLite file at path whatever its schema version or state:
 * PRAGMA quick_check (full = 0: the b-trees' structure, page by page, a
 * read of the whole file) or PRAGMA integrity_check (full = 1: also that
 * every index matches its table). Opens it read-only, without the store's
 * open (so an old or damaged store can be checked) and hands every
 * problem line to fn (may be NULL) up to max_problems (0: SQLite's 100);
 * a file with the store's application_id and a schema version this build
 * knows also has its schema objects compared with that version's, each
 * difference a line ("schema: view segment_metadata is not as schema 13
 * creates it ..."); *problems is their count, 0 for a whole file. Returns 0 when the check
 * ran (whatever it found); LH_ESTORE_NO_FILE, LH_ESTORE_NOT_SQLITE,
 * LH_ESTORE_CORRUPT (SQLite could not even run it: the header or schema is
 * damaged; err says what it said), LH_ESTORE_SQLITE. */
int lh_store_check_file(const char *path, int full, uint32_t max_problems, lh_store_problem_fn fn,
                        void *ctx, uint64_t *problems, lh_errbuf *err);

const char *lh_store_path(const lh_store *s);
int lh_store_is_readonly(const lh_store *s);

/* ---- the stores of several learner ranks (store/store_ranks.c) --------
 * A learner job of M ranks keeps one file per rank (learner/learner.h,
 * "learner ranks"): rank 0's holds the run's train steps, policy versions
 * and runs, and every rank's holds the episodes, segments, reward terms
 * and heartbeats of its own actors. Read as one, the files are one store:
 * the first file is the connection's main database, every other one is
 * ATTACHed (read-only) as rank1, rank2, ..., and TEMP views named
 * episodes, segments, segment_payloads, rewards and actor_heartbeats (and
 * the view segment_metadata), each the UNION ALL of
 * that table over the ranks, shadow the main database's tables for every
 * unqualified name (SQLite looks in temp first). Every read of this API
 * and `replay sql` thus sees all ranks; train_steps, train_step_layers,
 * train_step_experts, policy_versions, runs and meta are rank 0's.
 *
 * An actor sends to one rank, so an episode id is in one file. Should the
 * same id be in two (an actor moved between ranks while it kept its
 * episode counter), the views hold both rows: lists show it twice and a
 * lookup by id gets the lowest rank's. lh_store_rank_duplicates counts
 * such ids. SQLite attaches at most SQLITE_MAX_ATTACHED files (10 unless
 * the library was built with more, up to 125), so at most
 * lh_store_max_ranks() files can be read as one; more is LH_ESTORE_RANKS. */

/* Opens paths[0..n) (rank 0 first; n >= 1) read-only as one store (o:
 * NULL for defaults, its readonly flag is forced). Each file is checked as
 * lh_store_open_readonly does before it is attached. With n = 1 it is
 * lh_store_open_with. LH_ESTORE_RANKS for n over lh_store_max_ranks() or a
 * file given twice. */
int lh_store_open_ranks(const char *const *paths, size_t n, const lh_store_options *o, lh_store **out,
                        lh_errbuf *err);
/* The most files lh_store_open_ranks joins: 1 + this SQLite's ATTACH limit. */
size_t lh_store_max_ranks(void);
/* How many rank stores s reads: 1 for a store opened alone. */
size_t lh_store_rank_count(const lh_store *s);
/* Episode ids found in more than one of s's rank stores (0 with one). */
int lh_store_rank_duplicates(lh_store *s, uint64_t *episodes, lh_errbuf *err);

/* ---- batches ----------------------------------------------------------- */

/* Starts a write transaction (BEGIN IMMEDIATE, waiting for the write lock).
 * Every put until lh_store_commit joins it. LH_ESTORE_TXN when a batch is
 * already open, LH_ESTORE_READONLY on a read-only store. Inside a batch
 * the episode-row changes of its segments are gathered per episode and
 * written once at commit (reads through this store see them at once; other
 * connections see the batch only after its commit anyway). */
int lh_store_begin(lh_store *s, lh_errbuf *err);
/* Makes the batch durable (as PRAGMA synchronous says). LH_ESTORE_TXN when
 * no batch is open. On failure the batch is rolled back. */
int lh_store_commit(lh_store *s, lh_errbuf *err);
/* Drops the open batch; a no-op when none is open. */
int lh_store_rollback(lh_store *s, lh_errbuf *err);
int lh_store_in_batch(const lh_store *s);

/* ---- writes (each: *inserted = 1 when new, 0 when a duplicate) ---------- */

/* What *inserted says besides 1 (new) and 0 (a duplicate) after
 * lh_store_put_segment or lh_store_put_episode_end: the message
 * contradicts what the store holds and was not stored. The call returns 0
 * (an open batch goes on with its other messages; nothing of the refused
 * one was written) and err says why (code LH_ESTORE_REFUSED; the message
 * names the episode and what differs). The ingest answers it
 * ACK_REJECTED: a resend would be refused again. */
#define LH_STORE_REFUSED (-1)
/* *inserted for a member of a shared prefix whose leader is not stored,
 * or not yet the segment that ends where the prefix does while the
 * leader may still send it (a leader's message held back and resent can
 * come after its members'): not stored, err says why; the ingest answers
 * ACK_RETRY for a while, then ACK_REJECTED (learner/ingest.c). */
#define LH_STORE_NO_PREFIX (-2)

/* Validates seg (lh_wire_validate_segment with the store's limits), stores
 * its encoding (lh_wire_segment_encode) as the payload under (episode_id,
 * seq), and creates the episode row as `running` when there is none yet, or
 * adds the segment's tokens and versions to it. The version range counts
 * tokens sampled by the policy (loss_mask 1) only. inserted may be NULL.
 *
 * The first message of an episode (segment or EpisodeEnd) makes it its
 * actor's: a segment is refused when its actor, env, group_id or task_seed
 * differs from the episode's (the same episode id from two actors), when
 * the episode's EpisodeEnd is stored and seq is not below its
 * segment_count (past the end), and when (episode_id, seq) is stored with
 * other content (a conflict: a resend must encode to the same payload; one
 * whose payload retention dropped must have the same size, start_offset
 * and token count). Only a resend of the same segment is a duplicate. */
int lh_store_put_segment(lh_store *s, const Longhaul__Segment *seg, int *inserted,
                         lh_errbuf *err);
/* The same for a segment whose bytes the caller holds as they arrived:
 * payload is the encoded Segment that seg was decoded from (the ingest
 * finds it in the envelope with lh_wire_segment_bytes), stored as it is
 * instead of encoding seg again. validated is the limits the decode
 * validated seg under (NULL: none); seg is validated again only when they
 * are looser than the store's in some limit a segment's validation reads
 * (lh_wire_limits_segment_within). The checks of its episode, and what
 * counts as a duplicate or a conflict, are those of lh_store_put_segment;
 * a reader decodes and validates the payload as any other. */
int lh_store_put_segment_wire(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                              size_t payload_bytes, const lh_wire_limits *validated,
                              int *inserted, lh_errbuf *err);
/* Records the end of an episode: status and outcome, reward, reward terms,
 * expected segment count, total tokens, steps, group and task seed.
 * Creates the episode row when no segment came first.
 *
 * The first EpisodeEnd of an episode is stored; any later one from its
 * actor is a duplicate and changes nothing (the first wins). An EpisodeEnd
 * is refused when its actor, env, group_id or task_seed differs from the
 * episode's, and when a stored segment's seq is not below its
 * segment_count.
 *
 * Status rule: the episode takes the status of the end's outcome
 * (success or failure: complete; truncated, aborted and error: the same
 * name), also
 * when the idle sweep (lh_store_abort_idle_episodes) had ended it as
 * aborted before the end came: such a late end is stored whole (reward,
 * outcome, terms, segment_count, tokens, steps, error text) and inserted
 * is 1; swept_ms keeps the sweep's time. Only an episode the learner ended
 * itself with lh_store_episode_set_status (not the sweep) keeps its
 * status, outcome and error (the end's figures still go in). An episode is
 * trained only when it is ready as well (lh_episode_filter.ready_only:
 * every counted segment stored); the sweep ends one that stays short of
 * that as error. */
int lh_store_put_episode_end(lh_store *s, const Longhaul__EpisodeEnd *end, int *inserted,
                             lh_errbuf *err);

/* Ends or re-marks an episode from the learner's side (say its actor was
 * lost: aborted; its payload does not decode: error), with reason as its
 * error text (may be NULL). status must not be running. An outcome that
 * was success or failure is kept for complete; other statuses set the
 * matching outcome. LH_ESTORE_NO_EPISODE for an unknown id. */
int lh_store_episode_set_status(lh_store *s, uint64_t id, int status, const char *reason,
                                lh_errbuf *err);

/* ---- episodes ---------------------------------------------------------- */

typedef enum {
  LH_EPISODE_RUNNING = 0,   /* segments arrived, no EpisodeEnd yet */
  LH_EPISODE_COMPLETE = 1,  /* ended with success or failure */
  LH_EPISODE_TRUNCATED = 2, /* hit max_steps or max_context */
  LH_EPISODE_ABORTED = 3,
  LH_EPISODE_ERROR = 4,
  LH_EPISODE_STATUS_COUNT = 5
} lh_episode_status;

/* "running", "complete", ... as stored in episodes.status; NULL if unknown. */
const char *lh_episode_status_name(lh_episode_status st);
/* Returns the status, or -1 when name is not one. */
int lh_episode_status_from_name(const char *name);
/* "success", "failure", "truncated", "aborted", "error" as stored in
 * episodes.outcome; NULL for OUTCOME_UNSPECIFIED or unknown. */
const char *lh_episode_outcome_name(Longhaul__Outcome outcome);

typedef struct {
  uint64_t id;
  char actor[LH_STORE_NAME_BYTES];
  char env[LH_STORE_NAME_BYTES];
  uint64_t task_seed;
  uint64_t group_id;
  lh_episode_status status;
  Longhaul__Outcome outcome;       /* OUTCOME_UNSPECIFIED while running */
  char error[LH_STORE_ERROR_BYTES];/* EpisodeEnd.error, cut to fit */
  uint32_t steps;
  uint64_t tokens;                 /* EpisodeEnd.total_tokens; tokens_received while running */
  uint64_t tokens_received;        /* sum over the stored segments */
  int has_reward;                  /* 0 until the EpisodeEnd */
  double reward;
  int has_versions;                /* 0 when no sampled token was stored */
  uint64_t min_version, max_version;
  int has_end;                     /* ended: an EpisodeEnd arrived, or the learner ended it
                                      (the sweep, lh_store_episode_set_status) */
  uint32_t segment_count;          /* expected (EpisodeEnd); 0 until one is stored */
  uint32_t segments_received;
  uint32_t payloads_dropped;       /* segments whose payload retention removed */
  int64_t created_ms, updated_ms, ended_ms;  /* ended_ms 0 while running */
  int64_t swept_ms;                /* when the idle sweep ended it; 0 if it never did */
  /* Its first prefix_tokens tokens are episode prefix_episode's, its
   * group's shared prefix (both 0: the episode is whole; schema 14) */
  uint64_t prefix_episode, prefix_tokens;
} lh_episode_row;

/* Which episodes lh_store_episodes visits. Fields left as
 * lh_episode_filter_init sets them match everything. */
typedef struct {
  const char *env;          /* exact environment name; NULL: any */
  const char *actor;        /* exact actor name; NULL: any */
  unsigned status_mask;     /* bit (1u << lh_episode_status) per status; 0: any */
  int has_group;            /* only this group */
  uint64_t group_id;
  int reward_range;         /* reward in [reward_min, reward_max]; excludes episodes without one */
  double reward_min, reward_max;
  int version_range;        /* every sampled token's version in [version_min, version_max] */
  uint64_t version_min, version_max;
  int ready_only;           /* ended, and every expected segment is stored with its payload */
  uint64_t after_id;        /* only ids above (below, when newest_first); 0: from the start */
  int newest_first;         /* order by id descending instead of ascending */
  uint32_t limit;           /* at most this many rows; 0: no limit */
} lh_episode_filter;

void lh_episode_filter_init(lh_episode_filter *f);

/* Called per row; return 0 to go on, a positive value to stop quietly (the
 * query returns 0) or a negative lh_err to stop with that code. The row is
 * valid only during the call. */
typedef int (*lh_store_episode_fn)(void *ctx, const lh_episode_row *row);

/* Visits the episodes f selects (NULL: all), in id order. *count (may be
 * NULL) gets the number of rows visited. */
int lh_store_episodes(lh_store *s, const lh_episode_filter *f, lh_store_episode_fn fn, void *ctx,
                      uint64_t *count, lh_errbuf *err);
/* One episode; LH_ESTORE_NO_EPISODE when the store has none with that id. */
int lh_store_episode_get(lh_store *s, uint64_t id, lh_episode_row *row, lh_errbuf *err);

/* What reassembly found: the stored seq numbers against what should be
 * there (0 .. max(segment_count, highest stored seq + 1) - 1). */
typedef struct {
  int has_end;
  uint32_t expected;          /* EpisodeEnd.segment_count; 0 without one */
  uint32_t received;          /* segment rows stored */
  uint32_t dropped;           /* of those, payloads removed by retention */
  uint32_t missing_count;     /* seq numbers with no row */
  uint32_t missing_listed;    /* entries of missing[] used */
  uint32_t missing[LH_STORE_MAX_GAPS];  /* the first missing seq numbers, ascending */
  int complete;               /* has_end, no gap, nothing dropped, received == expected,
                                 and a shared prefix (below) whole */
  /* A shared prefix (schema 14): the episode's first prefix_tokens tokens
   * are episode prefix_episode's segments that end there, walked first
   * (their episode_id is prefix_episode's); prefix_segments of them were
   * stored with payloads, and prefix_whole says they cover the prefix
   * without a gap or a dropped payload. */
  uint64_t prefix_episode, prefix_tokens;
  uint32_t prefix_segments;
  int prefix_whole;
} lh_segment_report;

/* Called per stored segment in seq order. seg is the decoded, validated
 * payload (owned by the store, freed after the call), or NULL when
 * retention dropped it. Return as for lh_store_episode_fn. */
typedef int (*lh_store_segment_fn)(void *ctx, uint32_t seq, const Longhaul__Segment *seg);

/* Reassembles episode id (a member of a shared prefix: the prefix's
 * segments first, as the report says, then its own): decodes each stored payload with
 * lh_wire_segment_decode (LH_ESTORE_PAYLOAD naming the episode and seq when
 * one does not decode or names another episode/seq), hands it to fn (may
 * be NULL to only check) and fills *report (may be NULL). Gaps are not an
 * error: they are reported. LH_ESTORE_NO_EPISODE for an unknown id. */
int lh_store_episode_segments(lh_store *s, uint64_t id, lh_store_segment_fn fn, void *ctx,
                              lh_segment_report *report, lh_errbuf *err);
/* The same into an array: *segs gets a malloc'd array of *count decoded
 * segments in seq order (an entry NULL where retention dropped the
 * payload), freed with lh_store_segments_free. */
int lh_store_episode_segments_array(lh_store *s, uint64_t id, Longhaul__Segment ***segs,
                                    size_t *count, lh_segment_report *report, lh_errbuf *err);
/* The recurrent state stored with one of episode's segments (Segment.state,
 * schema 9: kept in segments.state, not in the payload) at the largest
 * offset <= at_most, or when none of its own is, one of its shared
 * prefix's segments at an offset up to the prefix's end: returns 1 with *offset and state[0..n) (float32,
 * native byte order), 0 when there is none; LH_ESTORE_PAYLOAD when the
 * stored one is not n floats. Its values are as the ingest checked them;
 * a caller that distrusts the file checks them again. */
int lh_store_segment_state(lh_store *s, uint64_t episode, uint64_t at_most, size_t n, uint64_t *offset,
                           float *state, lh_errbuf *err);
void lh_store_segments_free(Longhaul__Segment **segs, size_t count);  /* accepts NULL */

typedef struct {
  char name[LH_STORE_NAME_BYTES];
  double value;
  uint32_t step;
} lh_reward_term;

/* The reward terms of episode id, by step then name: up to cap of them
 * into terms (may be NULL when cap is 0); *count gets how many there are
 * in all (may exceed cap). An episode without terms gives 0. */
int lh_store_episode_rewards(lh_store *s, uint64_t id, lh_reward_term *terms, size_t cap,
                             size_t *count, lh_errbuf *err);

/* The idle sweep: ends the episodes that nothing will complete, as of
 * idle_before_ms (wall clock; the learner passes now - abort_after_ms),
 * each row's last change being its updated_ms:
 * - every episode still running (no EpisodeEnd) whose row last changed
 *   before idle_before_ms ends as aborted (outcome aborted, reason as its
 *   error text): an actor that died mid-episode never sends its end;
 * - every episode whose EpisodeEnd is stored with status complete or
 *   truncated, still short of segments (segments_received differs from
 *   segment_count) and unchanged since idle_before_ms ends as error
 *   (outcome error), its error text naming how many segments are missing
 *   ("3 of 5 segments missing after the idle limit"): an end that counts
 *   segments that never come would leave it never ready. Its reward and
 *   figures stay.
 * Both set swept_ms, which stays. A late EpisodeEnd of an episode the
 * sweep aborted is stored (lh_store_put_episode_end); segments that come
 * after are stored, but an episode the sweep ended as error stays error.
 * One transaction (or joins the open batch). counts may be NULL. */
typedef struct {
  uint64_t aborted;     /* running episodes ended as aborted */
  uint64_t incomplete;  /* ended episodes short of segments, ended as error */
} lh_store_sweep_counts;
int lh_store_sweep_idle_episodes(lh_store *s, int64_t idle_before_ms, const char *reason,
                                 lh_store_sweep_counts *counts, lh_errbuf *err);
/* The same sweep; *aborted (may be NULL) gets how many episodes it ended,
 * of both kinds. */
int lh_store_abort_idle_episodes(lh_store *s, int64_t idle_before_ms, const char *reason,
                                 uint64_t *aborted, lh_errbuf *err);

/* ---- one writer per store ----------------------------------------------- */

/* The writer lock: an exclusive advisory lock (flock) on the side file
 * `<db_path>.writer` (db_path with symbolic links and relative parts
 * resolved, so that two spellings of one store share one lock), which
 * also holds its holder's description (pid, host, start time and the
 * holder text). The kernel drops the lock when
 * the process ends, however it ends, so a crashed learner never leaves a
 * store locked; the side file stays (emptied on unlock). Readers take no
 * lock. */
typedef struct lh_store_writer_lock lh_store_writer_lock;

/* Takes the writer lock of the store at db_path (the file need not exist
 * yet), without waiting. holder describes the taker (say "learner rank 0
 * run r1: longhaul learner --config fleet.ini": what a user needs to find
 * it; may be NULL). On success
 * *out is the lock, released with lh_store_unlock_writer (or by the
 * process's end). When another open lock holds it (another process, or
 * another call in this one) the call fails at once with
 * LH_ESTORE_WRITER_LOCKED, err naming the holder as its side file
 * describes it; LH_EIO when the side file cannot be opened or written,
 * LH_EINVAL for a NULL or empty path or a NULL out, LH_ENOMEM. The descriptor is close-on-exec: a
 * process the holder starts does not inherit the lock. */
int lh_store_lock_writer(const char *db_path, const char *holder, lh_store_writer_lock **out,
                         lh_errbuf *err);
/* Empties the side file, releases the lock and frees l; accepts NULL. */
void lh_store_unlock_writer(lh_store_writer_lock *l);
/* The path of a side file of the store at db_path: its resolved path (as
 * SQLite resolves it for its -wal file, through its folder when the store
 * does not exist yet) with suffix appended (".writer": the writer lock;
 * ".fleet": the lock of the fleet that uses it, cli/launch/launch_lock.c).
 * malloc'd; NULL when out of memory. */
char *lh_store_side_path(const char *db_path, const char *suffix);

/* ---- statistics -------------------------------------------------------- */

typedef struct {
  uint32_t schema_version;
  uint64_t file_bytes;                   /* page_count * page_size of the main file */
  uint64_t runs;
  uint64_t evals;                        /* rows of evals (schema 6) */
  uint64_t policy_versions;
  uint64_t latest_policy_version;        /* 0 when none */
  uint64_t episodes;
  uint64_t by_status[LH_EPISODE_STATUS_COUNT];
  uint64_t successes;                    /* outcome success */
  uint64_t incomplete;                   /* ended, but segments missing or dropped */
  uint64_t segments;
  uint64_t payloads_dropped;
  uint64_t payload_bytes;                /* of the payloads still stored */
  uint64_t tokens;                       /* over the stored segments */
  uint64_t reward_terms;
  uint64_t rewarded;                     /* episodes with a reward */
  double reward_mean;                    /* over those; 0 when none */
  double reward_min, reward_max;
  int has_versions;
  uint64_t min_version, max_version;     /* over the stored sampled tokens */
  uint64_t train_steps;
  uint64_t last_train_step;              /* 0 when none */
  /* Of the figures above, those of the episodes retention retired (their
   * rows deleted, their figures kept in retired_episodes; schema 15): the
   * totals above count them. */
  uint64_t retired_episodes, retired_segments;
  int has_retired_versions;
  uint64_t retired_min_version, retired_max_version;  /* of their sampled tokens */
  int64_t retired_first_ms, retired_last_ms;          /* the first one's start, the last one's end; 0 none */
} lh_store_stats;

int lh_store_stats_get(lh_store *s, lh_store_stats *st, lh_errbuf *err);
/* The bytes of the pages in use (what lh_store_options.max_bytes caps):
 * page_count less freelist_count, times page_size. Cheap (three pragmas). */
int lh_store_used_bytes(lh_store *s, uint64_t *used, lh_errbuf *err);

typedef struct {
  char env[LH_STORE_NAME_BYTES];
  uint64_t episodes;
  uint64_t by_status[LH_EPISODE_STATUS_COUNT];
  uint64_t successes;
  uint64_t tokens;                       /* over the stored segments */
  uint64_t rewarded;
  double reward_mean;                    /* 0 when none rewarded */
  uint64_t retired;                      /* of episodes, those retired (counted in every figure above) */
} lh_store_env_stats;
typedef int (*lh_store_env_stats_fn)(void *ctx, const lh_store_env_stats *e);
/* One row per environment, by name. */
int lh_store_stats_by_env(lh_store *s, lh_store_env_stats_fn fn, void *ctx, lh_errbuf *err);

/* ---- retention --------------------------------------------------------- */

/* Drops the payload (and recurrent state) of every segment whose newest
 * sampled token is older than min_version (segments without sampled tokens
 * go with the versions around them: they are dropped when their episode's
 * max_version is older): deletes its row of segment_payloads, or, for a
 * segment stored before schema 13 with its payload in its own row, writes
 * that row again without it, so that the pages they held go to the free
 * list whatever their size (a store at its cap gets room back). Episode
 * rows, segment rows (tokens, versions; dropped_ms set) and reward terms
 * stay. One transaction (or joins the open batch). *segments_dropped and
 * *bytes_dropped may be NULL. */
int lh_store_drop_payloads_before(lh_store *s, uint64_t min_version, uint64_t *segments_dropped,
                                  uint64_t *bytes_dropped, lh_errbuf *err);
/* Keeps the payloads of the keep_versions versions up to newest (the
 * writer's own newest version: never one read from the segments, whose
 * versions a peer chose) and drops older ones as above. */
int lh_store_retain_versions(lh_store *s, uint64_t newest, uint64_t keep_versions, uint64_t *segments_dropped,
                             uint64_t *bytes_dropped, lh_errbuf *err);

/* What one lh_store_retire_episodes call deleted. */
typedef struct {
  uint64_t episodes;      /* episodes rows */
  uint64_t segments;      /* segments rows */
  uint64_t reward_terms;  /* rewards rows */
  uint64_t leaders_kept;  /* episodes it would have taken, kept as the leaders of shared prefixes a member
                             not retired still needs */
} lh_store_retired;

/* Retires up to max_episodes episodes, those that ended first: deletes
 * their episodes, segments (and any segment_payloads) and rewards rows,
 * after adding what `replay stats` and `longhaul report` count of them
 * into retired_episodes, retired_versions and retired_rewards (schema 15),
 * which the statistics add in. An episode is retired only when it can no
 * longer be trained or read for training: it ended before ended_before_ms
 * (the learner passes now less 10 s, or less abort_after_ms when shorter,
 * so that a resend of it is not expected), every payload it has is dropped (retention drops only
 * those of versions no step admits), it is whole or ended by the learner
 * (aborted, error), and no member of its shared prefix stays (a leader
 * goes with its members or after them). One transaction (or joins the
 * open batch), not capped: it is what frees a store at its cap. *out may
 * be NULL. */
int lh_store_retire_episodes(lh_store *s, int64_t ended_before_ms, uint32_t max_episodes, lh_store_retired *out,
                             lh_errbuf *err);
/* Thins the per-step rows of the train steps before the newest
 * keep_newest_steps, in groups of `every` steps (step / every): of the
 * expert loads (train_step_experts) each group keeps one row per layer and
 * expert, its mean load, under the group's first step (the report's heat
 * maps average steps into columns anyway); of train_step_layers and
 * train_steps it keeps its first step's rows. Further back the groups grow
 * by `every` per level: past keep_newest_steps * every steps, one step's
 * rows in every every^2, and so on, so that the rows of steps kept grow
 * with the log of the run's length (about keep_newest_steps a level).
 * policy_versions is thinned the same way by version. The train_steps and
 * policy_versions rows deleted are counted into retired_steps (schema 15),
 * which the statistics add in; the newest step and version always stay.
 * Idempotent: what is done is left as it is. *rows_deleted (may be NULL)
 * gets the rows it removed. every must be 2 or more (LH_EINVAL). */
int lh_store_thin_step_rows(lh_store *s, uint64_t keep_newest_steps, uint32_t every, uint64_t *rows_deleted,
                            lh_errbuf *err);

/* ---- read-only SQL (`longhaul replay sql`) ---------------------------- */

/* Called once per result row: ncols columns with their names and values
 * as text (NULL for SQL NULL; a BLOB as "<blob N bytes>"). Valid only
 * during the call. Return as for lh_store_episode_fn. */
typedef int (*lh_store_sql_row_fn)(void *ctx, int ncols, const char *const *names,
                                   const char *const *values);

/* Runs one SQL statement on a store opened read-only, with SQLite's
 * authorizer allowing reads only (SELECT, functions, recursive CTEs, and
 * PRAGMAs that read: a fixed list without a value, and the table_info
 * kind with a table name). Refuses, before running anything: a store not
 * opened read-only (LH_ESTORE_SQL_NEEDS_READONLY), text that does not
 * compile (LH_ESTORE_SQL_PARSE, with SQLite's message), more than one
 * statement (LH_ESTORE_SQL_MULTIPLE; comments and white space may follow
 * the first), and any statement that could write or change the
 * connection: INSERT, UPDATE, DELETE, CREATE, DROP, ATTACH, DETACH,
 * BEGIN, SAVEPOINT, VACUUM, a PRAGMA given a value or not on the list
 * (LH_ESTORE_SQL_WRITE, the message naming what was refused). A statement
 * that runs past the budget lh_store_set_sql_timeout_ms set is stopped
 * (LH_ESTORE_SQL_TIMEOUT; the rows before it were handed to fn). *rows
 * (may be NULL) gets the number of rows handed to fn. */
int lh_store_sql(lh_store *s, const char *sql, lh_store_sql_row_fn fn, void *ctx,
                 uint64_t *rows, lh_errbuf *err);
/* The same with integer parameters bound to ?1..?n (n_params must be the
 * statement's count; LH_EINVAL otherwise): values never go into SQL text. */
int lh_store_sql_ints(lh_store *s, const char *sql, const int64_t *params, int n_params, lh_store_sql_row_fn fn,
                      void *ctx, uint64_t *rows, lh_errbuf *err);
/* Sets the time budget of every later lh_store_sql(_ints) call on s: the
 * time SQLite spends preparing and running the statement, not fn's. 0 (the
 * default) is no limit. */
void lh_store_set_sql_timeout_ms(lh_store *s, uint32_t timeout_ms);

/* Runs, evaluations, SFT steps, stages, policy versions, train steps and
 * heartbeats. */
#include "store/store_runs.h"

#endif

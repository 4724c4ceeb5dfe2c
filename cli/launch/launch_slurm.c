/* cli: a fleet launched through Slurm: the batch script, its submission,
 * and the job steps the launcher starts inside the allocation
 * (cli/launch/launch_slurm.h says how the parts fit). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/launch/launch.h"
#include "cli/term.h"
#include "common/ini_doc.h"
#include "learner/learner.h"

#define SLURM_CAPTURE_BYTES 65536

/* Runs argv (argv[0] looked up in PATH) with stdout into out (at most
 * bytes - 1, NUL-terminated) and stderr the launcher's; 0 when it exits 0. */
static int capture(char *const argv[], char *out, size_t bytes, lh_errbuf *err) {
  int fds[2];
  if (pipe(fds)) return lh_errbuf_set(err, LH_ESYS, "slurm: cannot make a pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int en = errno;
    close(fds[0]), close(fds[1]);
    return lh_errbuf_set(err, LH_ESYS, "slurm: cannot fork %s: %s", argv[0], strerror(en));
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]), close(fds[1]);
    execvp(argv[0], argv);
    dprintf(2, "launch: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  for (;;) {
    char sink[4096];
    int room = len + 1 < bytes;
    ssize_t r = read(fds[0], room ? out + len : sink, room ? bytes - 1 - len : sizeof sink);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (room) len += (size_t)r;
  }
  out[len] = 0;
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return lh_errbuf_set(err, LH_ESYS, "slurm: waiting for %s: %s", argv[0], strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return lh_errbuf_set(err, LH_ESYS, "slurm: `%s %s` failed (status %d; its message is above)", argv[0],
                         argv[1] ? argv[1] : "", status);
  return 0;
}

/* Text that goes onto srun's command line as it is (argv, no shell):
 * printable ASCII, no quotes or backslashes. */
static int plain_text(const char *s, int spaces_ok) {
  for (; *s; s++)
    if (*s < 0x20 || *s > 0x7e || *s == '\'' || *s == '"' || *s == '\\' || (!spaces_ok && *s == ' ')) return 0;
  return 1;
}

/* What sbatch cannot take as it is in the value of an #SBATCH line: a
 * newline or another control character would end the line (what follows
 * it would be a shell command, and every #SBATCH line after a command is
 * ignored); sbatch splits the line at blanks, takes quotes and
 * backslashes as quoting and '#' as the start of a comment; '%' in a path
 * is a pattern (%j, %x). Returns the first such byte's description into
 * why (room for 48 bytes), or NULL when s is fine. */
static const char *sbatch_refusal(const char *s, int spaces_ok, int paths, char *why) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n') return snprintf(why, 48, "a newline"), why;
    if (c < 0x20 || c == 0x7f) return snprintf(why, 48, "the control character 0x%02x", c), why;
    if (c > 0x7e) return snprintf(why, 48, "the byte 0x%02x (not ASCII)", c), why;
    if (c == '\'' || c == '"' || c == '\\' || c == '#' || (paths && c == '%') || (!spaces_ok && c == ' '))
      return snprintf(why, 48, "'%c'", c), why;
  }
  return NULL;
}

/* A host name or address: letters, digits, '.', '-', '_'. */
static int host_text(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
          *s == '-' || *s == '_'))
      return 0;
  return 1;
}

/* s as one word for /bin/sh: in single quotes, inside which the shell
 * expands nothing ($, `, \, *, ; and blanks are all literal), each quote
 * of its own written '\'' (close, an escaped quote, open again). A newline
 * or a carriage return is written as "$nl" or "$cr" (set by the script
 * before its command), so that every line of the script is the script's
 * own: no value can start a line of its own (an #SBATCH one) or make a
 * DOS line break, which sbatch refuses. */
static void put_quoted(FILE *out, const char *s) {
  fputc('\'', out);
  for (; *s; s++)
    if (*s == '\'') fputs("'\\''", out);
    else if (*s == '\n') fputs("'\"$nl\"'", out);
    else if (*s == '\r') fputs("'\"$cr\"'", out);
    else fputc(*s, out);
  fputc('\'', out);
}

int lh_launch_slurm_write_script(const lh_launch_fleet *f, const char *path, lh_errbuf *err) {
  const lh_launch_config *c = &f->fleet;
  char why[48];
  static const char *const keys[3] = {"slurm_partition", "slurm_time", "slurm_options"};
  const char *values[3] = {c->slurm_partition, c->slurm_time, c->slurm_options};
  for (int k = 0; k < 3; k++)
    if (sbatch_refusal(values[k], k == 2, 0, why))
      return lh_errbuf_set(err, LH_ECONFIG,
                           "%s: [fleet] %s holds %s: an #SBATCH line takes printable ASCII without quotes, "
                           "backslashes or '#'%s",
                           f->config_path, keys[k], why, k == 2 ? "" : ", and this one no spaces");
  char cwd[LH_LAUNCH_PATH_BYTES], logs[2 * LH_LAUNCH_PATH_BYTES + 2];
  if (!getcwd(cwd, sizeof cwd)) return lh_errbuf_set(err, LH_ESYS, "slurm: getcwd: %s", strerror(errno));
  if (c->log_dir[0] == '/') snprintf(logs, sizeof logs, "%s", c->log_dir);
  else snprintf(logs, sizeof logs, "%s/%s", cwd, c->log_dir);
  const char *bad_dir = sbatch_refusal(cwd, 0, 1, why) ? cwd : sbatch_refusal(logs, 0, 1, why) ? logs : NULL;
  if (bad_dir) {
    char shown[256];
    lh_text_escape(bad_dir, shown, sizeof shown);
    return lh_errbuf_set(err, LH_ECONFIG,
                         "%s: the batch script's #SBATCH %s cannot hold '%s' (it holds %s; spaces, quotes, "
                         "backslashes, '#', '%%' and control characters are refused): %s",
                         f->config_path, bad_dir == cwd ? "--chdir" : "--output", shown, why,
                         bad_dir == cwd ? "launch from a plainer folder" : "set [fleet] log_dir to a plainer folder");
  }
  FILE *out = fopen(path, "w");
  if (!out) return lh_errbuf_set(err, LH_ESYS, "slurm: cannot write the batch script %s: %s", path, strerror(errno));
  /* sbatch reads #SBATCH lines only up to the first command, so they all
   * come first, right after the interpreter line; each value above was
   * refused unless the line takes it as it is. */
  fprintf(out, "#!/bin/sh\n");
  fprintf(out, "#SBATCH --job-name=longhaul\n");
  fprintf(out, "#SBATCH --ntasks=%llu\n", (unsigned long long)(c->learners + c->actors));
  if (c->slurm_nodes) fprintf(out, "#SBATCH --nodes=%llu\n", (unsigned long long)c->slurm_nodes);
  if (c->slurm_partition[0]) fprintf(out, "#SBATCH --partition=%s\n", c->slurm_partition);
  if (c->slurm_time[0]) fprintf(out, "#SBATCH --time=%s\n", c->slurm_time);
  fprintf(out, "#SBATCH --chdir=%s\n", cwd);
  fprintf(out, "#SBATCH --output=%s/slurm-%%j.out\n", logs);
  /* Before the time limit, SIGTERM to the launcher alone (B:), with time
   * for its ordered shutdown when each phase takes stop_timeout_ms. The
   * launcher itself begins earlier when the learner's steps are long
   * (cli/cmd_launch.c, the job's time limit): this is the backstop. */
  fprintf(out, "#SBATCH --signal=B:TERM@%llu\n",
          (unsigned long long)(lh_launch_shutdown_ms(f, c->stop_timeout_ms) / 1000));
  if (c->slurm_options[0]) fprintf(out, "#SBATCH %s\n", c->slurm_options);
  fprintf(out,
          "# The batch script of a longhaul fleet, written by `longhaul launch --slurm`\n"
          "# (docs/operations.md, \"Slurm\"): inside the allocation the launcher runs each\n"
          "# learner job and each actor as a job step (srun) and supervises them.\n");
  /* Every word from outside (paths, the run, the overrides) single-quoted,
   * with the newline and the carriage return put_quoted refers to. */
  fputs("nl=$(printf '\\nx'); nl=${nl%x}; cr=$(printf '\\r')\n", out);
  fputs("exec ", out);
  put_quoted(out, f->bin);
  fputs(" launch ", out);
  put_quoted(out, f->config_path);
  fputs(" --engine slurm --status plain", out);
  /* The run this submission named, and the overrides it was given. */
  if (f->run_id[0]) {
    fputs(" --run-id ", out);
    put_quoted(out, f->run_id);
  }
  for (size_t k = 0; k < f->n_sets; k++) {
    fputs(" --set ", out);
    put_quoted(out, f->sets[k]);
  }
  fputc('\n', out);
  int bad_write = ferror(out);
  if (fclose(out) || bad_write)
    return lh_errbuf_set(err, LH_ESYS, "slurm: cannot write the batch script %s", path);
  chmod(path, 0755);
  return 0;
}

int lh_launch_slurm_submit(const char *script, char *job_id, size_t bytes, lh_errbuf *err) {
  char out[256];
  char *argv[] = {"sbatch", "--parsable", (char *)script, NULL};
  LH_TRY(capture(argv, out, sizeof out, err));
  /* --parsable: "<id>" or "<id>;<cluster>". */
  size_t n = strspn(out, "0123456789");
  if (!n || n >= bytes) return lh_errbuf_set(err, LH_ESYS, "slurm: sbatch printed no job id: '%.64s'", out);
  memcpy(job_id, out, n);
  job_id[n] = 0;
  return 0;
}

/* The numeric port of a tcp://host:port endpoint; 0 when it has none. */
static long tcp_port(const char *ep) {
  const char *colon = strrchr(ep, ':');
  uint64_t port;
  if (strncmp(ep, "tcp://", 6) || !colon || lh_parse_u64(colon + 1, &port)) return 0;
  return port < 1 || port > 65535 ? 0 : (long)port;
}

/* Replaces the host name in addr (a node's NodeAddr) by its IPv4 address:
 * a rank binds its endpoints there, and ZeroMQ binds addresses, not names. */
static int ipv4_of(const char *node, char *addr, lh_errbuf *err) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(addr, NULL, &hints, &res);
  if (rc || !res)
    return lh_errbuf_set(err, LH_ESYS, "slurm: node %s: NodeAddr %s has no IPv4 address: %s", node, addr,
                         rc ? gai_strerror(rc) : "none");
  char ip[INET_ADDRSTRLEN];
  const struct sockaddr_in *sa = (const struct sockaddr_in *)res->ai_addr;
  rc = inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip) ? 0 : -1;
  freeaddrinfo(res);
  if (rc) return lh_errbuf_set(err, LH_ESYS, "slurm: node %s: cannot print its address", node);
  snprintf(addr, LH_SLURM_HOST_BYTES, "%s", ip);
  return 0;
}

/* The allocation's first K = min(M, nodes) node names and their addresses. */
static int find_hosts(lh_launch_fleet *f, const char *nodelist, lh_errbuf *err) {
  lh_launch_slurm *s = &f->slurm;
  char *text = malloc(SLURM_CAPTURE_BYTES);
  if (!text) return lh_errbuf_set(err, LH_ENOMEM, "slurm: out of memory");
  char *argv[] = {"scontrol", "show", "hostnames", (char *)nodelist, NULL};
  int rc = capture(argv, text, SLURM_CAPTURE_BYTES, err);
  s->n_hosts = 0;
  for (char *save = NULL, *h = rc ? NULL : strtok_r(text, "\n", &save); h && s->n_hosts < f->fleet.learners;
       h = strtok_r(NULL, "\n", &save)) {
    if (!host_text(h) || strlen(h) >= LH_SLURM_HOST_BYTES) {
      rc = lh_errbuf_set(err, LH_ESYS, "slurm: the allocation names a node '%.64s' that is not a host name", h);
      break;
    }
    snprintf(s->hosts[s->n_hosts++], LH_SLURM_HOST_BYTES, "%s", h);
  }
  if (!rc && !s->n_hosts) rc = lh_errbuf_set(err, LH_ESYS, "slurm: SLURM_JOB_NODELIST=%.64s names no node", nodelist);
  for (uint32_t i = 0; !rc && i < s->n_hosts; i++) {
    char *show[] = {"scontrol", "--oneliner", "show", "node", s->hosts[i], NULL};
    if ((rc = capture(show, text, SLURM_CAPTURE_BYTES, err))) break;
    const char *a = strstr(text, "NodeAddr=");
    size_t len = a ? strcspn(a + 9, " \n") : 0;
    if (!len) memcpy(s->addrs[i], s->hosts[i], LH_SLURM_HOST_BYTES);
    else if (len < LH_SLURM_HOST_BYTES) snprintf(s->addrs[i], LH_SLURM_HOST_BYTES, "%.*s", (int)len, a + 9);
    if (!host_text(s->addrs[i]))
      rc = lh_errbuf_set(err, LH_ESYS, "slurm: node %s has NodeAddr '%.64s', not a host name or IPv4 address",
                         s->hosts[i], a ? a + 9 : "");
    else
      rc = ipv4_of(s->hosts[i], s->addrs[i], err);
  }
  free(text);
  return rc;
}

static const char *const LEARNER_KEYS[3] = {"ingest_endpoint", "weights_pub_endpoint", "weights_endpoint"};

/* The ports of the learner's three endpoints, which must be tcp://HOST:PORT. */
static int learner_ports(const lh_launch_fleet *f, const lh_learner_config *lc, long ports[3], lh_errbuf *err) {
  const char *eps[3] = {lc->ingest_endpoint, lc->weights_pub_endpoint, lc->weights_endpoint};
  for (int i = 0; i < 3; i++)
    if (!(ports[i] = tcp_port(eps[i])))
      return lh_errbuf_set(err, LH_ECONFIG,
                           "%s: [learner] %s = %s: a Slurm fleet needs tcp://HOST:PORT endpoints (their ports "
                           "are kept, their hosts become the allocation's nodes)",
                           f->config_path, LEARNER_KEYS[i], eps[i]);
  if (ports[0] + 10L * ((long)f->fleet.learners - 1) > 65535)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [learner] ingest_endpoint = %s: no room for rank %llu at port + %llu",
                         f->config_path, eps[0], (unsigned long long)f->fleet.learners - 1,
                         (unsigned long long)(10 * (f->fleet.learners - 1)));
  return 0;
}

/* The --set overrides every child gets (the same for all, so that the
 * learner and the actors read one set of endpoints): rank r binds
 * entry r of [learner] ingest_endpoints, the address of its node at the
 * port of ingest_endpoint + 10 r (distinct when ranks share a node), and
 * the actors of rank r connect there; rank 0 binds the weights endpoints at
 * its node's address, where the actors take the weights. */
static void make_sets(lh_launch_fleet *f, const long ports[3]) {
  lh_launch_slurm *s = &f->slurm;
  char addr[LH_SLURM_HOST_BYTES];
  size_t len = (size_t)snprintf(s->set_ingest, sizeof s->set_ingest, "learner.ingest_endpoints=");
  for (uint64_t r = 0; r < f->fleet.learners && len < sizeof s->set_ingest; r++) {
    memcpy(addr, s->addrs[r % s->n_hosts], sizeof addr);
    len += (size_t)snprintf(s->set_ingest + len, sizeof s->set_ingest - len, "%stcp://%s:%ld", r ? "," : "", addr,
                            ports[0] + 10L * (long)r);
  }
  memcpy(addr, s->addrs[0], sizeof addr);
  static const char *const keys[5] = {"learner.weights_pub_endpoint", "learner.weights_endpoint",
                                      "actor.weights_pub_endpoint", "actor.weights_endpoint", "actor.learner_endpoint"};
  const long key_ports[5] = {ports[1], ports[2], ports[1], ports[2], ports[0]};
  for (int k = 0; k < 5; k++)
    snprintf(s->set[k], sizeof s->set[k], "%s=tcp://%s:%ld", keys[k], addr, key_ports[k]);
}

int lh_launch_slurm_prepare(lh_launch_fleet *f, lh_errbuf *err) {
  lh_launch_slurm *s = &f->slurm;
  const lh_launch_config *c = &f->fleet;
  const char *job = getenv("SLURM_JOB_ID"), *nodelist = getenv("SLURM_JOB_NODELIST");
  if (!job || !*job || !nodelist || !*nodelist)
    return lh_errbuf_set(err, LH_ECONFIG,
                         "--engine slurm runs inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST are "
                         "not set): submit one with `longhaul launch %s --slurm`",
                         f->config_path);
  if (strlen(job) >= sizeof s->job_id || strspn(job, "0123456789") != strlen(job))
    return lh_errbuf_set(err, LH_ECONFIG, "slurm: SLURM_JOB_ID=%.32s is not a job id", job);
  snprintf(s->job_id, sizeof s->job_id, "%s", job);
  if (!plain_text(c->slurm_mpi, 0) || !plain_text(c->slurm_step_options, 1))
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] %s: srun options are printable text without quotes",
                         f->config_path, plain_text(c->slurm_mpi, 0) ? "slurm_step_options" : "slurm_mpi");
  snprintf(s->step_options, sizeof s->step_options, "%s", c->slurm_step_options);
  s->n_step_options = 0;
  for (char *save = NULL, *o = strtok_r(s->step_options, " \t", &save); o; o = strtok_r(NULL, " \t", &save)) {
    if (s->n_step_options == LH_SLURM_MAX_STEP_OPTIONS)
      return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] slurm_step_options: more than %d options",
                           f->config_path, LH_SLURM_MAX_STEP_OPTIONS);
    s->step_option[s->n_step_options++] = o;
  }
  if (f->n_sets + LH_SLURM_SETS > LH_INI_MAX_SETS)
    return lh_errbuf_set(err, LH_ECONFIG, "slurm: more than %d --set overrides (the endpoints take %d)",
                         LH_INI_MAX_SETS - LH_SLURM_SETS, LH_SLURM_SETS);
  /* The learner's endpoints as the children would read them: the file
   * with the launcher's own --set overrides. */
  if (c->agents)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [fleet] agents: launch --engine slurm does not start agent programs "
                         "yet; start them beside the actors", f->config_path);
  s->on = 1;
  /* An actors-only fleet (learners = 0) connects to learners that run
   * elsewhere, at the endpoints its file names. */
  if (!c->learners) return 0;
  lh_ini_doc *doc = NULL;
  LH_TRY(lh_ini_doc_load(f->config_path, f->sets, f->n_sets, &doc, err));
  lh_learner_config lc;
  int rc = lh_learner_config_read(doc, &lc, err);
  lh_ini_doc_free(doc);
  LH_TRY(rc);
  long ports[3];
  s->on = 0;
  LH_TRY(learner_ports(f, &lc, ports, err));
  LH_TRY(find_hosts(f, nodelist, err));
  make_sets(f, ports);
  s->on = s->endpoints = 1;
  return 0;
}

int lh_launch_slurm_step(lh_launch_fleet *f, size_t i, char **argv, int n) {
  lh_launch_slurm *s = &f->slurm;
  const lh_launch_child *c = &f->child[i];
  if (!s->on || (c->role != LH_CHILD_LEARNER && c->role != LH_CHILD_ACTOR)) return n;
  argv[n++] = f->fleet.srun;
  if (c->role == LH_CHILD_LEARNER) {
    /* Rank r on node r mod K: cyclic over the first K nodes, in the
     * allocation's order (the order of the ingest_endpoints entries). */
    snprintf(s->arg_ntasks, sizeof s->arg_ntasks, "--ntasks=%llu", (unsigned long long)f->fleet.learners);
    snprintf(s->arg_nodes, sizeof s->arg_nodes, "--nodes=%u", s->n_hosts);
    size_t len = (size_t)snprintf(s->arg_nodelist, sizeof s->arg_nodelist, "--nodelist=");
    for (uint32_t h = 0; h < s->n_hosts && len < sizeof s->arg_nodelist; h++)
      len += (size_t)snprintf(s->arg_nodelist + len, sizeof s->arg_nodelist - len, "%s%s", h ? "," : "", s->hosts[h]);
    snprintf(s->arg_mpi, sizeof s->arg_mpi, "--mpi=%s", f->fleet.learners > 1 ? f->fleet.slurm_mpi : "none");
    argv[n++] = s->arg_ntasks, argv[n++] = s->arg_nodes, argv[n++] = s->arg_nodelist;
    argv[n++] = "--distribution=cyclic", argv[n++] = s->arg_mpi;
  } else {
    /* --overlap: an actor's step never holds CPUs (or memory) the
     * learner's needs, whichever starts or restarts first: the learner
     * finds its one CPU per rank on each of its nodes however the
     * allocation spread its CPUs. */
    argv[n++] = "--ntasks=1", argv[n++] = "--nodes=1", argv[n++] = "--overlap";
  }
  /* --exact: a step takes only the CPUs it asks for; a task that fails
   * ends its step. */
  argv[n++] = "--exact", argv[n++] = "--kill-on-bad-exit=1";
  snprintf(s->arg_name, sizeof s->arg_name, "--job-name=%s", c->name);
  argv[n++] = s->arg_name;
  for (uint32_t k = 0; k < s->n_step_options; k++) argv[n++] = s->step_option[k];
  return n;
}

int lh_launch_slurm_sets(lh_launch_fleet *f, size_t i, char **argv, int n) {
  lh_launch_slurm *s = &f->slurm;
  if (!s->on || !s->endpoints || (f->child[i].role != LH_CHILD_LEARNER && f->child[i].role != LH_CHILD_ACTOR))
    return n;
  argv[n++] = "--set", argv[n++] = s->set_ingest;
  for (int k = 0; k < LH_SLURM_SETS - 1; k++) argv[n++] = "--set", argv[n++] = s->set[k];
  return n;
}

int lh_launch_slurm_command(const lh_launch_fleet *f, const char *path, int submit) {
  char fallback[LH_LAUNCH_PATH_BYTES + 16];
  if (!path) {
    snprintf(fallback, sizeof fallback, "%s/slurm.sh", f->fleet.log_dir);
    path = fallback;
  }
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  if (lh_launch_slurm_write_script(f, path, &err)) {
    lh_cli_term_printf(stderr, "longhaul launch: %s\n", err.msg);
    return lh_cli_exit_for_error(err.code);
  }
  if (!submit) {
    lh_cli_term_printf(stdout, "wrote the batch script %s (submit it with: sbatch %s)\n", path, path);
    return 0;
  }
  char job[32];
  if (lh_launch_slurm_submit(path, job, sizeof job, &err)) {
    lh_cli_term_printf(stderr, "longhaul launch: %s\n", err.msg);
    return lh_cli_exit_for_error(err.code);
  }
  lh_cli_term_printf(stdout,
                     "submitted job %s (run %s, batch script %s); its launcher logs to %s/launch.log and "
                     "%s/slurm-%s.out\n"
                     "stop it in order with: scancel --batch --signal=TERM %s\n",
                     job, f->run_id[0] ? f->run_id : "-", path, f->fleet.log_dir, f->fleet.log_dir, job, job);
  fflush(stdout);
  return 0;
}

/* squeue's time ("2026-12-04T03:00:00", local time) in ms since the
 * epoch; 0 for anything else ("Unknown", "N/A", "NONE"). */
static int64_t parse_time(const char *text) {
  struct tm tm = {0};
  int used = 0;
  if (!text || sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &used) != 6 ||
      (text[used] && text[used] != '\n'))
    return 0;
  tm.tm_year -= 1900, tm.tm_mon -= 1, tm.tm_isdst = -1;
  time_t t = mktime(&tm);
  return t == (time_t)-1 ? 0 : (int64_t)t * 1000;
}

int lh_launch_slurm_end_ms(const lh_launch_fleet *f, int64_t *end_ms, lh_errbuf *err) {
  *end_ms = 0;
  char out[256];
  char *argv[] = {"squeue", "-h", "-j", (char *)f->slurm.job_id, "-o", "%e", NULL};
  LH_TRY(capture(argv, out, sizeof out, err));
  *end_ms = parse_time(out);
  return 0;
}

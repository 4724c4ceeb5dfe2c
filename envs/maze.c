/* maze: a perfect maze (depth-first backtracker from the seed) drawn as an
 * RGB image each step: walls dark, floor light, the agent red, the goal
 * green. Tool move(N|S|E|W); reward 1 on reaching the goal within
 * max_steps. The expert is a breadth-first search from the agent. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

/* Option maxima: a maze of at most 16 x 16 cells drawn with at most 16
 * pixels a block, an image of at most 528 x 528 x 3 bytes (836 KB). */
#define MAZE_MAX 16
#define MAZE_MAX_CELL_PX 16
#define MAZE_TEXT_BYTES 1024

typedef struct {
  long size, cell_px;
  double noise;
  int grid;                            /* 2*size+1 blocks per side */
  uint8_t open[(2 * MAZE_MAX + 1) * (2 * MAZE_MAX + 1)];
  int ar, ac, gr, gc;                  /* agent and goal, in blocks */
  uint8_t *pixels;
  lh_env_image image;
  lh_env_rng expert_rng;
  lh_str text, expert, desc;
  lh_env_term terms[1];
} maze_env;

static const char OPTIONS[] = "size,cell_px,expert_noise";
static const int DR[4] = {-1, 1, 0, 0}, DC[4] = {0, 0, 1, -1};
static const char DIRS[] = "NSEW";

static int maze_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  LH_TRY(lh_env_opt_check_keys(opts, count, "maze", OPTIONS, err));
  maze_env *e = calloc(1, sizeof *e);
  if (!e) return lh_errbuf_set(err, LH_ENOMEM, "maze: out of memory");
  int rc = lh_env_opt_int(opts, count, "size", 6, 2, MAZE_MAX, &e->size, err);
  if (!rc) rc = lh_env_opt_int(opts, count, "cell_px", 4, 1, MAZE_MAX_CELL_PX, &e->cell_px, err);
  if (!rc) rc = lh_env_opt_double(opts, count, "expert_noise", 0, 0, 1, &e->noise, err);
  if (!rc) {
    e->grid = 2 * (int)e->size + 1;
    size_t side = (size_t)e->grid * (size_t)e->cell_px;
    e->pixels = malloc(side * side * 3);
    if (!e->pixels) rc = lh_errbuf_set(err, LH_ENOMEM, "maze: out of memory for the image");
    e->image = (lh_env_image){(uint32_t)side, (uint32_t)side, 3, e->pixels};
  }
  if (rc) {
    free(e);
    return lh_envs_opt_error(err, rc, "maze");
  }
  *ctx = e;
  return 0;
}

/* The context, the image (allocated by create) and three small texts. */
static size_t maze_footprint(void *ctx) {
  const maze_env *e = ctx;
  return sizeof *e + (size_t)e->image.width * e->image.height * 3 + 3 * LH_ENVS_TEXT_FOOTPRINT(MAZE_TEXT_BYTES) +
         2 * LH_ENVS_ALLOC_SLACK;
}

static void maze_destroy(void *ctx) {
  maze_env *e = ctx;
  if (!e) return;
  free(e->pixels);
  lh_str_free(&e->text);
  lh_str_free(&e->expert);
  lh_str_free(&e->desc);
  free(e);
}

static int is_open(const maze_env *e, int r, int c) {
  return r >= 0 && c >= 0 && r < e->grid && c < e->grid && e->open[r * e->grid + c];
}

static void carve(maze_env *e, lh_env_rng *rng) {
  int n = (int)e->size, g = e->grid;
  memset(e->open, 0, sizeof e->open);
  int stack[MAZE_MAX * MAZE_MAX], top = 0;
  uint8_t seen[MAZE_MAX * MAZE_MAX] = {0};
  stack[top++] = 0;
  seen[0] = 1;
  e->open[1 * g + 1] = 1;
  while (top) {
    int cell = stack[top - 1], r = cell / n, c = cell % n, options[4], k = 0;
    for (int d = 0; d < 4; d++) {
      int nr = r + DR[d], nc = c + DC[d];
      if (nr >= 0 && nc >= 0 && nr < n && nc < n && !seen[nr * n + nc]) options[k++] = d;
    }
    if (!k) {
      top--;
      continue;
    }
    int d = options[lh_env_rng_below(rng, (uint32_t)k)], nr = r + DR[d], nc = c + DC[d];
    seen[nr * n + nc] = 1;
    e->open[(2 * r + 1 + DR[d]) * g + (2 * c + 1 + DC[d])] = 1;
    e->open[(2 * nr + 1) * g + (2 * nc + 1)] = 1;
    stack[top++] = nr * n + nc;
  }
}

static void draw(maze_env *e) {
  int g = e->grid, px = (int)e->cell_px, side = g * px;
  for (int y = 0; y < side; y++)
    for (int x = 0; x < side; x++) {
      int r = y / px, c = x / px;
      uint8_t *p = e->pixels + ((size_t)y * side + x) * 3;
      const uint8_t *col;
      static const uint8_t wall[3] = {40, 40, 40}, floor_[3] = {235, 235, 235}, agent[3] = {220, 40, 40},
                           goal[3] = {40, 180, 60};
      if (r == e->ar && c == e->ac) col = agent;
      else if (r == e->gr && c == e->gc) col = goal;
      else col = e->open[r * g + c] ? floor_ : wall;
      memcpy(p, col, 3);
    }
}

static void observe(maze_env *e, lh_env_obs *obs, const char *note) {
  draw(e);
  lh_str_clear(&e->text);
  lh_str_printf(&e->text,
                      "maze %ldx%ld (image: you are red, the goal is green, walls dark). %s "
                      "Move with <call>move(N|S|E|W)</call>.",
                      e->size, e->size, note);
  obs->text = e->text.data;
  obs->text_bytes = e->text.len;
  obs->images = &e->image;
  obs->image_count = 1;
}

static int maze_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  (void)err;
  maze_env *e = ctx;
  lh_env_rng r;
  lh_env_rng_seed(&r, seed);
  lh_env_rng_seed(&e->expert_rng, seed ^ 0x3a2eull);
  carve(e, &r);
  e->ar = e->ac = 1;
  e->gr = e->gc = e->grid - 2;
  observe(e, obs, "Reach the goal.");
  return 0;
}

/* The direction index named by args ("N", "north", ...), or -1. */
static int parse_dir(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) s++, n -= 2;
  static const char *const words[4] = {"north", "south", "east", "west"};
  for (int d = 0; d < 4; d++) {
    if (n == 1 && toupper((unsigned char)s[0]) == DIRS[d]) return d;
    if (n == strlen(words[d]) && strncasecmp(s, words[d], n) == 0) return d;
  }
  return -1;
}

static int maze_step(void *ctx, const char *action, size_t bytes, const lh_action *a,
                     lh_env_result *out, lh_errbuf *err) {
  (void)action, (void)bytes, (void)err;
  maze_env *e = ctx;
  const char *note;
  if (a->kind == LH_ACTION_ANSWER) {
    note = "There is nothing to answer here; move to the goal.";
  } else {
    int d = parse_dir(a->args, a->args_bytes);
    if (d < 0) {
      note = "error: move: expected N, S, E or W.";
    } else if (!is_open(e, e->ar + DR[d], e->ac + DC[d])) {
      note = "Blocked by a wall.";
    } else {
      e->ar += 2 * DR[d];
      e->ac += 2 * DC[d];
      note = "Moved.";
    }
  }
  if (e->ar == e->gr && e->ac == e->gc) {
    out->done = 1;
    out->reward = 1.0f;
    out->outcome = LH_ENV_SUCCESS;
    note = "You reached the goal.";
  }
  e->terms[0] = (lh_env_term){"goal", out->reward};
  out->terms = e->terms;
  out->term_count = 1;
  observe(e, &out->obs, note);
  return 0;
}

/* The first move of a shortest path from the agent to the goal. */
static int bfs_first_move(const maze_env *e) {
  int g = e->grid, total = g * g;
  int16_t first[(2 * MAZE_MAX + 1) * (2 * MAZE_MAX + 1)];
  int queue[(2 * MAZE_MAX + 1) * (2 * MAZE_MAX + 1)], head = 0, tail = 0;
  for (int i = 0; i < total; i++) first[i] = -1;
  int start = e->ar * g + e->ac;
  first[start] = 4;
  queue[tail++] = start;
  while (head < tail) {
    int cur = queue[head++], r = cur / g, c = cur % g;
    if (r == e->gr && c == e->gc) return first[cur] == 4 ? 0 : first[cur];
    for (int d = 0; d < 4; d++) {
      int nr = r + DR[d], nc = c + DC[d];
      if (!is_open(e, nr, nc) || first[nr * g + nc] != -1) continue;
      first[nr * g + nc] = (int16_t)(cur == start ? d : first[cur]);
      queue[tail++] = nr * g + nc;
    }
  }
  return 0;
}

static int maze_expert(void *ctx, const char **action, lh_errbuf *err) {
  (void)err;
  maze_env *e = ctx;
  int d = bfs_first_move(e);
  if (e->noise > 0 && lh_env_rng_unit(&e->expert_rng) < e->noise) d = (int)lh_env_rng_below(&e->expert_rng, 4);
  lh_str_clear(&e->expert);
  lh_str_printf(&e->expert, "<call>move(%c)</call>", DIRS[d]);
  *action = e->expert.data;
  return 0;
}

static const char *maze_describe(void *ctx) {
  maze_env *e = ctx;
  lh_str_clear(&e->desc);
  lh_str_printf(&e->desc,
                      "maze: a perfect grid maze shown as an RGB image each step (%dx%d pixels: "
                      "walls dark, floor light, agent red, goal green) with a short text. Start top "
                      "left, goal bottom right.\n"
                      "tools: move(N|S|E|W)\n"
                      "options: size=%ld (cells per side, 2..%d), cell_px=%ld (1..16), "
                      "expert_noise=%g (0..1), max_steps (default 64; raise it for mazes over 7)\n"
                      "reward: 1 on reaching the goal within max_steps, else 0 (term 'goal'); "
                      "expert: breadth-first search",
                      e->image.width, e->image.height, e->size, MAZE_MAX, e->cell_px, e->noise);
  return e->desc.data;
}

const lh_env_vtable lh_envs_maze_vtable =
    LH_ENVS_BUILTIN(maze, "maze", "walk a grid maze seen as an RGB image with move(N|S|E|W)", "move", 64);

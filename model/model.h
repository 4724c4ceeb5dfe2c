/* model: the sparse multimodal MoE policy of docs/model.md.
 *
 * The tokenizer, the [model] config, the parameter buffer with its table of
 * named views, safetensors checkpoints, the training forward/backward over
 * packed sequences, batched incremental decode, and the routers' balancing.
 * Every computation goes through an lh_backend table (kernels/kernels.h);
 * parameter, gradient and moment buffers live in that backend's memory.
 * Errors are LH_EMODEL_* codes with a sentence in an lh_errbuf. */
#ifndef LH_MODEL_H
#define LH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/ini_doc.h"
#include "common/str.h"
#include "kernels/kernels.h"

/* ---- tokens (docs/model.md "Tokens") ---------------------------------------- */
enum {
  LH_TOK_BOS = 256,
  LH_TOK_EOS = 257,
  LH_TOK_CALL = 258,
  LH_TOK_CALL_END = 259,
  LH_TOK_OBS = 260,
  LH_TOK_OBS_END = 261,
  LH_TOK_IMG = 262,
  LH_TOK_PAD = 263,
  LH_TOK_VOCAB = 264
};

/* The markup of a special token ("<bos>" ...), NULL for a byte or an id out
 * of range. */
const char *lh_tok_name(int32_t id);

/* Encodes len bytes of text. With markup != 0, the eight special-token
 * spellings ("<bos>", "</call>", ...) become their ids; everything else is
 * one id per byte. Writes at most cap ids and sets *n to the number the
 * whole text needs (never more than len); LH_ERANGE when cap was too small. */
int lh_tok_encode(const char *text, size_t len, int markup, int32_t *ids, size_t cap,
                  size_t *n);

/* Decodes ids to text: bytes as themselves, special tokens as their markup.
 * Writes at most cap-1 bytes plus a NUL and sets *n to the length the whole
 * text needs (without the NUL); LH_ERANGE when cap was too small,
 * LH_EMODEL_TOKEN (message in err) for an id outside [0, 264). */
int lh_tok_decode(const int32_t *ids, size_t n_ids, char *text, size_t cap, size_t *n,
                  lh_errbuf *err);

/* ---- config (the [model] section) -------------------------------------- */
typedef enum {
  LH_BALANCE_BIAS = 0,
  LH_BALANCE_QUANTILE = 1,
  LH_BALANCE_AUX = 2,
  LH_BALANCE_NONE = 3,
  LH_BALANCE_ADAPTIVE = 4  /* sign rule with a per-expert step that adapts */
} lh_balance_kind;

typedef struct {
  int d_model, layers, heads, experts, topk, shared_experts, latent, expert_hidden, chunk;
  float g_min, tau;
  int conv;  /* the short causal convolution's width on q, k, v; 0: none */
  int vocab, patch, max_patches;
  lh_balance_kind balance;
  float bias_rate, quantile_rate, aux_weight;
  uint64_t seed;
} lh_model_config;

/* The demo model of docs/model.md. */
void lh_model_config_default(lh_model_config *cfg);
/* Appends the reference of [model] (every key: its values, default and
 * doc, from the reader's table; common/ini_section.h) in Markdown to out:
 * 0, LH_ENOMEM, or LH_EINVAL naming a key without a doc. */
int lh_model_config_reference(lh_str *out, lh_errbuf *err);
/* Checks ranges and divisibility (d_model % heads, topk <= experts, ...);
 * LH_EMODEL_CONFIG_VALUE with the key named in err. */
int lh_model_config_validate(const lh_model_config *cfg, lh_errbuf *err);
/* Parses the [model] section of an INI file (or string) over the defaults.
 * Other sections ([learner], [actor], [env], ...) are ignored, so one file
 * can hold them all. An unknown key is LH_EMODEL_CONFIG_KEY, a bad value
 * LH_EMODEL_CONFIG_VALUE, an unreadable file LH_EMODEL_IO; err names the
 * key and the line. */
int lh_model_config_parse_file(const char *path, lh_model_config *cfg, lh_errbuf *err);
int lh_model_config_parse_string(const char *text, lh_model_config *cfg, lh_errbuf *err);
/* The same from a document (common/ini_doc.h): includes and --set
 * overrides applied; err names "file:line" or "--set model.key". */
int lh_model_config_read(const lh_ini_doc *doc, lh_model_config *cfg, lh_errbuf *err);
const char *lh_balance_name(lh_balance_kind kind);
/* The config as a JSON object (keys as in the INI file); malloc'd, the caller
 * frees it. NULL when out of memory. */
char *lh_model_config_to_json(const lh_model_config *cfg);
/* Parses such an object (every key required, no unknown key):
 * LH_EMODEL_CONFIG_KEY / LH_EMODEL_CONFIG_VALUE / LH_EMODEL_CKPT_METADATA. */
int lh_model_config_from_json(const char *json, lh_model_config *cfg, lh_errbuf *err);
/* The keys whose values differ between a and b, the seed aside (it says
 * where the weights came from, not what they are: lh_model_copy_params
 * ignores it too), as "key = A differs from the WHOSE's B" joined by ", "
 * into out (cap bytes, may be NULL; "" when none). Values print as the INI
 * file writes them, floats with the fewest digits that read back the same,
 * so a float differs exactly when its text does. Returns how many differ. */
int lh_model_config_diff(const lh_model_config *a, const lh_model_config *b, const char *whose, char *out,
                         size_t cap);

/* ---- the model: parameters and their table ----------------------------- */
#define LH_MODEL_NAME_BYTES 48

/* One named view of the parameter buffer (and of the gradient and moment
 * buffers, which share the layout). */
typedef struct {
  char name[LH_MODEL_NAME_BYTES];
  size_t offset;      /* in floats from the start of the buffer */
  size_t numel;
  int ndim;
  int shape[3];
  int decay;          /* AdamW weight decay applies (not norms, gains, xres) */
  int trainable;      /* 0 for layers.l.moe.bias: balancing updates it */
  int expert_shard;   /* dim 0 is the routed experts, of which a shard holds
                         experts / shards from the first of its shard */
} lh_model_tensor;

typedef struct lh_model lh_model;

/* A model of cfg on backend be with every parameter initialised from
 * cfg->seed. Allocates the parameter buffer only; gradients and moments come
 * with lh_model_enable_training. */
int lh_model_new(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                 lh_errbuf *err);
void lh_model_free(lh_model *m);
/* Re-initialises every parameter deterministically from seed: matrices
 * N(0, 1/fan_in), embed N(0,1), patch.pos N(0, 0.02^2), norms 1, xres 0,
 * biases 0 except the decay bias bg, which spreads the channels' initial
 * decay rates; out is scaled by 1/sqrt(d); the convolution the identity
 * (tap 0 is 1, the others 0). */
int lh_model_init(lh_model *m, uint64_t seed);
const lh_model_config *lh_model_get_config(const lh_model *m);
const lh_backend *lh_model_backend(const lh_model *m);
int lh_model_n_tensors(const lh_model *m);
const lh_model_tensor *lh_model_tensor_at(const lh_model *m, int i);
/* Index of the tensor called name, or -1. */
int lh_model_find(const lh_model *m, const char *name);
size_t lh_model_n_floats(const lh_model *m);
/* The buffers (backend memory). grads/m/v are NULL before enable_training.
 * lh_model_params hands out a writable view, so taking it counts as a
 * change of the parameters (the decode packs them again). */
float *lh_model_params(lh_model *m);
float *lh_model_grads(lh_model *m);
/* AdamW's first and second moments (same layout), for checkpoints that
 * resume exactly. */
float *lh_model_moment1(lh_model *m);
float *lh_model_moment2(lh_model *m);
/* Copies every parameter (balancing biases included) of src into dst, whose
 * config must match (the seed aside): how an actor takes new weights while
 * its decoders, which point at dst, keep their state. */
int lh_model_copy_params(lh_model *dst, const lh_model *src, lh_errbuf *err);
/* Allocates (zeroed) gradients and AdamW moments. */
int lh_model_enable_training(lh_model *m);
int lh_model_zero_grads(lh_model *m);
/* One AdamW step over every trainable tensor (p->step is 1-based); decay
 * per tensor flag. */
int lh_model_adamw_step(lh_model *m, const lh_adamw_params *p);

/* ---- expert parallelism (docs/learner.md, "Experts across ranks") ------ */
/* A model that holds shard `shard` of `shards` of every MoE layer's routed
 * experts (moe.w1, w3, w2: experts / shards of them, from expert
 * shard * experts / shards); every other tensor is whole. Its initial
 * values are the whole model's slice (lh_model_init's streams skip ahead),
 * so shards of one seed make up lh_model_new's model. experts must be a
 * multiple of shards. Shards = 1 is lh_model_new. A sharded model's
 * forward and backward exchange tokens with the other shards through the
 * transport set by lh_model_set_expert_transport. */
int lh_model_new_shard(const lh_model_config *cfg, const lh_backend *be, int shard, int shards,
                       lh_model **out, lh_errbuf *err);
/* The same without initialisation (a loader fills it). */
int lh_model_new_shard_uninit(const lh_model_config *cfg, const lh_backend *be, int shard,
                              int shards, lh_model **out, lh_errbuf *err);
/* shard and shards of m (0 and 1 for a whole model); the first expert it
 * holds and how many. */
void lh_model_expert_shard(const lh_model *m, int *shard, int *shards, int *first, int *count);

/* The ranks of one expert group, as the exchange needs them: rank `rank`
 * of `size` (the model's shard and shards). Counts and displacements are
 * in bytes; every call is collective over the group. */
typedef struct {
  void *ctx;
  /* Each rank sends `bytes` bytes to every rank (send holds size blocks)
   * and receives as many from each into recv. */
  int (*alltoall)(void *ctx, const void *send, void *recv, size_t bytes);
  /* Rank j gets scounts[j] bytes from send + sdispls[j]; what rank j sends
   * lands at recv + rdispls[j] (rcounts[j] bytes). */
  int (*alltoallv)(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls,
                   void *recv, const size_t *rcounts, const size_t *rdispls);
} lh_model_expert_transport;

/* Sets (copies) the transport of a sharded model. */
int lh_model_set_expert_transport(lh_model *m, const lh_model_expert_transport *t, lh_errbuf *err);
/* Ends a rank's share of a step: it serves the other shards' tokens until
 * every rank of the group has called this (collective). A forward or
 * backward of one rank is served by the others whatever they are doing:
 * their own forwards and backwards, or this. */
int lh_model_experts_drain(lh_model *m, lh_errbuf *err);
/* What the exchange moved so far: bytes sent (requests and replies, to
 * itself included), rounds, and the nanoseconds spent inside the
 * transport (waiting for the others included). */
typedef struct {
  uint64_t bytes, rounds;
  int64_t transport_ns, serve_ns;
} lh_model_expert_traffic;
void lh_model_expert_traffic_get(const lh_model *m, lh_model_expert_traffic *out);
/* Where the MoE layers' time went so far, forwards and backwards together,
 * by the host's clock around the backend's calls (the CPU backend's calls
 * return when done; a GPU's launches return before, so there these are
 * launch times): routing (the router's product, top-k and gates, and their
 * backward) and the routed experts' products run here. With a sharded
 * model the experts run inside the exchange: its serve_ns above. */
typedef struct {
  int64_t route_ns, experts_ns;
} lh_model_moe_times;
void lh_model_moe_times_get(const lh_model *m, lh_model_moe_times *out);

/* ---- a whole model in pieces (model/pieces.c) --------------------------- *
 * The floats of a whole model (a file, a gathered buffer) walked in pieces,
 * from the whole model or any expert shard of it: tensor by tensor in table
 * order, an expert tensor shard by shard (shard j's experts are the j-th of
 * `shards` equal parts of the whole tensor), each tensor's or shard's part
 * cut into pieces of at most max_floats. Every shard of a model walks the
 * same pieces in the same order, so a shard can write or read its share of
 * a whole file, or serve it to the rank that does, one piece at a time. */
typedef struct {
  int tensor;          /* its index in the whole model's table and every shard's */
  int shard;           /* the expert shard that holds it; -1: every shard holds it */
  size_t at;           /* its first float in the holder's tensor (tensor offset + at in its buffers) */
  size_t n;            /* floats, 1 .. max_floats */
  size_t whole_at;     /* its first float in the whole tensor */
  size_t whole_offset; /* the whole tensor's first float in the whole model's buffers */
} lh_model_piece;
typedef int (*lh_model_piece_fn)(void *ctx, const lh_model_piece *p, lh_errbuf *err);
/* The piece size files are moved in: 4 MiB of floats at once. */
#define LH_MODEL_PIECE_FLOATS ((size_t)1 << 20)
/* Calls fn on every piece of the whole model m is (or is a shard of), in
 * order; stops at fn's first error and returns it. */
int lh_model_each_piece(const lh_model *m, size_t max_floats, lh_model_piece_fn fn, void *ctx, lh_errbuf *err);
/* Whether m (a shard or the whole) holds piece p. */
int lh_model_holds_piece(const lh_model *m, const lh_model_piece *p);
/* The largest piece m's walk with max_floats gives: the room a buffer for
 * one piece needs. */
size_t lh_model_largest_piece(const lh_model *m, size_t max_floats);
/* The floats of the whole model's buffers (its lh_model_n_floats) that m is
 * a shard of; m's own for a whole model. 0 when out of memory. */
size_t lh_model_whole_floats(const lh_model *m);
/* Piece p (which m holds) of buf, m's parameters or a buffer laid out like
 * them (a moment), to the p->n host floats at dst, or from those at src;
 * the backend's code. */
int lh_model_piece_download(const lh_model *m, const float *buf, const lh_model_piece *p, float *dst);
int lh_model_piece_upload(const lh_model *m, float *buf, const lh_model_piece *p, const float *src);

/* ---- checkpoints -------------------------------------------------------- */
/* Writes DIR/model.safetensors (creating DIR when missing): float32,
 * row-major, tensors in table order, __metadata__.config = the config JSON.
 * LH_EMODEL_STATE for an expert shard (lh_model_save_pieces writes its
 * whole model). Holds one piece of the model at a time. */
int lh_model_save(const lh_model *m, const char *dir, lh_errbuf *err);
/* Fills dst with the n floats of piece p (whoever holds them). */
typedef int (*lh_model_fill_fn)(void *ctx, const lh_model_piece *p, float *dst, lh_errbuf *err);
/* Writes DIR/model.safetensors of the whole model m is or is a shard of,
 * piece by piece through buf (room for max_floats, the pieces' most), each
 * piece's floats from fill. fill is called for every piece in order even
 * when the file cannot be written (it may be a collective that other ranks
 * are in); its first error ends the walk and is returned. */
int lh_model_save_pieces(const lh_model *m, const char *dir, float *buf, size_t max_floats, lh_model_fill_fn fill,
                         void *ctx, lh_errbuf *err);
/* Reads DIR/model.safetensors into a new model on be. Checks the header
 * length, the JSON, every expected name present and nothing else, shapes,
 * dtype F32, contiguous in-bounds offsets and the file size; each failure
 * has its own LH_EMODEL_CKPT_* code and a sentence in err. Reads one piece
 * at a time into the model. */
int lh_model_load(const char *dir, const lh_backend *be, lh_model **out, lh_errbuf *err);
/* The same into expert shard `shard` of `shards` (1: the whole model) of
 * the file's whole model: reads only the floats the shard holds (and the
 * header), so a rank never holds the whole model. */
int lh_model_load_shard(const char *dir, const lh_backend *be, int shard, int shards, lh_model **out,
                        lh_errbuf *err);
/* The same for a file path (tests use it for hand-made files). */
int lh_model_load_file(const char *path, const lh_backend *be, lh_model **out,
                       lh_errbuf *err);
/* The same from size bytes in memory (e.g. weights received over the
 * network); path only names the source in messages (NULL: "(memory)"). */
int lh_model_load_bytes(const void *bytes, size_t size, const char *path,
                        const lh_backend *be, lh_model **out, lh_errbuf *err);
/* The bytes of model.safetensors in memory (malloc'd into *out, the caller
 * frees it), exactly what lh_model_save writes. */
int lh_model_serialize(const lh_model *m, unsigned char **out, size_t *n_bytes);
/* The same bytes for the whole model of m's config when m is an expert
 * shard: m's tensors in place, the other shards' experts zero for the
 * caller to fill (learner/experts.c gathers them straight into *out).
 * offsets (NULL, or room for lh_model_n_tensors) gets each tensor's data
 * offset in *out, in bytes. For a whole model it is lh_model_serialize. */
int lh_model_serialize_whole(const lh_model *m, unsigned char **out, size_t *n_bytes, size_t *offsets);

/* ---- training forward/backward over packed sequences -------------------- */
/* An image whose patches occupy positions at .. at+P-1 of the packed tokens
 * (P = (height/patch)*(width/patch)); the token ids at those positions are
 * ignored (the <img> token at at-1 is an ordinary token). */
typedef struct {
  int at;
  int height, width;
  const float *pixels;  /* (height,width,3) in [0,1], host memory */
} lh_model_image;

/* An image as environments and segments carry it (width*height pixels of
 * channels bytes, 1 gray or 3 RGB, HWC, 0..255) into lh_model_image pixels:
 * (height,width,3) floats in [0,1], gray repeated in the three channels.
 * dst holds 3*n_pixels floats. */
void lh_model_pixels_from_u8(const uint8_t *src, size_t n_pixels, uint32_t channels, float *dst);

typedef struct {
  int n_tokens;                 /* T */
  const int32_t *tokens;        /* (T) ids in [0, vocab) */
  const int32_t *targets;       /* (T) next-token target or -1 (no loss) */
  const float *loss_weight;     /* (T) or NULL (1 wherever a target exists) */
  int n_seq;
  const int32_t *seq_offsets;   /* (n_seq+1): 0 .. T; attention state resets at each */
  int n_images;
  const lh_model_image *images;
  /* (layers, n_seq, heads, dk, dk) attention state each sequence starts
   * from (a window continuing the previous one), or NULL for zeros. The
   * gradient stops there, unless lh_model_backward_states carries it. */
  const float *state_in;
  /* (layers, T, topk) routing replay: experts to use instead of top-k, or
   * NULL to route. */
  const int32_t *replay_experts;
  /* Sampling temperature: logp (and entropy) are those of
   * softmax(logits / temperature), as the actor sampled; 0 means 1. */
  float temperature;
} lh_model_batch;

/* The checks lh_model_forward makes before it runs (token and target
 * ranges, offsets, images in order and inside the tokens, replay indices,
 * temperature): 0 or LH_EMODEL_TOKEN / LH_EMODEL_BATCH with a sentence. */
int lh_model_batch_check(const lh_model *m, const lh_model_batch *b, lh_errbuf *err);

/* Everything one forward keeps for its backward; reused across calls. */
typedef struct lh_model_cache lh_model_cache;
void lh_model_cache_free(lh_model_cache *c);

/* Runs the training forward (chunked attention). *cache is created or
 * resized as needed. logp (T, host memory, may be NULL) gets
 * log p(targets[t] | ...) (0 where no target); *loss (may be NULL) the
 * weighted mean cross-entropy sum_t w_t (-logp_t) / sum_t w_t, plus with
 * balance = aux the layers' auxiliary balancing losses. state_out
 * (layers, n_seq, heads, dk, dk), host memory or NULL, gets each sequence's
 * final attention state. All the batch's arrays are host memory. */
int lh_model_forward(lh_model *m, const lh_model_batch *batch, lh_model_cache **cache,
                     float *logp, double *loss, float *state_out, lh_errbuf *err);
/* Backward of the last forward on this cache, adding into the gradients.
 * dlogp (T, host) is d objective / d logp_t; NULL means the forward's loss
 * (dlogp_t = -w_t / sum w). dentropy (T, host, or NULL) is d objective /
 * d entropy_t (an entropy bonus). With balance = aux, the auxiliary loss's
 * gradient is added too. */
int lh_model_backward(lh_model *m, lh_model_cache *cache, const float *dlogp,
                      const float *dentropy, lh_errbuf *err);
/* The same, with the attention state's gradient carried across the
 * forward's ends: dstate_out (layers, n_seq, heads, dk, dk) host, or NULL
 * for zero, is d objective / d state_out (the state each sequence ended
 * with, which later tokens read: a prefix tree's children); dstate_in,
 * the same shape, or NULL, gets (=) d objective / d state_in (zeros in,
 * when the forward had none). Only the linear attention's S: a model with
 * conv > 0 is refused (LH_EMODEL_STATE), its tails' gradient not being
 * carried. */
int lh_model_backward_states(lh_model *m, lh_model_cache *cache, const float *dlogp, const float *dentropy,
                             const float *dstate_out, float *dstate_in, lh_errbuf *err);
/* Per-position entropy -sum_v p log p of the next-token distribution of
 * the last forward (tempered as its batch said): (T) host copy. Its
 * gradient comes in through lh_model_backward's dentropy (T, or NULL). */
int lh_model_cache_entropy(const lh_model_cache *c, float *out);
/* Experts chosen by the last forward: (layers, T, topk) host copy into out. */
int lh_model_cache_experts(const lh_model_cache *c, int32_t *out);
/* Per-layer load of the last forward: (layers, experts) fractions of the
 * routed (token, slot) pairs. */
int lh_model_cache_load(const lh_model_cache *c, float *out);

/* ---- windows of a long sequence (window.c) -------------------------------- */
/* The positions an image's patches occupy: first .. first+count-1. */
typedef struct {
  size_t first, count;
} lh_model_span;

/* Where the window that starts at start ends, in a sequence of n positions
 * whose images' patches occupy spans (in order, not overlapping): start +
 * window (n at most), moved off any image it would cut, to the image's
 * first patch when the image begins after start, else past its last patch
 * (an image that starts a window is kept whole in it, so a window holds at
 * most max(window, max_patches) positions). Every window cut of the system
 * (the actor's prefill, the learner's train windows, `score --window`)
 * goes through it, so all cut the same sequence alike. */
size_t lh_model_window_end(size_t start, size_t n, size_t window, const lh_model_span *spans, size_t n_spans);
/* The spans of n_images images (positions as the batch gives them) into
 * out (n_images entries); returns how many. */
size_t lh_model_image_spans(const lh_model_config *cfg, const lh_model_image *images, int n_images,
                            lh_model_span *out);

/* ---- batched incremental decode ----------------------------------------- */
typedef struct lh_model_decoder lh_model_decoder;
/* B independent sequences, each with its own attention state (zero).
 * On the CPU backend a step runs on weights packed for small batches
 * (model/decode_pack.c), packed once per parameter version: at the first
 * step after the parameters changed (lh_model_init, lh_model_load,
 * lh_model_copy_params, lh_model_adamw_step, or a writable view taken with
 * lh_model_params), shared by the model's decoders. Each row's state is
 * updated where it lies. Other backends run the backend table's kernels.
 * A model's decoders share its packed weights: step them from one thread. */
int lh_model_decoder_new(lh_model *m, int B, lh_model_decoder **out, lh_errbuf *err);
void lh_model_decoder_free(lh_model_decoder *d);
/* Tokens per prefill window: LH_MODEL_PREFILL_CHUNKS chunks unless set. */
#define LH_MODEL_PREFILL_CHUNKS 64
/* Sets the prefill window to chunks chunks of the model's chunk (>= 1). */
int lh_model_decoder_set_prefill_chunks(lh_model_decoder *d, int chunks);
/* The prefill window in tokens. */
size_t lh_model_decoder_prefill_window(const lh_model_decoder *d);
/* Starts sequence b again from the zero state. */
int lh_model_decoder_reset(lh_model_decoder *d, int b);
/* The recurrent state a sequence carries from one token to the next: the
 * linear attention's S of every layer and head, (layers, heads, dk, dk)
 * floats (docs/model.md "LinAttn"), then with conv > 1 the last
 * conv - 1 rows of q, k and v before their convolution, (layers, 3,
 * conv - 1, d_model) floats; nothing else crosses a chunk: the
 * constant-size state a prefill carries from window to window.
 * lh_model_state_floats is its size for cfg (0 for a config without
 * heads); lh_model_decoder_state_get copies sequence b's state, after the
 * tokens fed so far, into out (host memory, that many floats), in the
 * layout lh_model_batch.state_in takes for one sequence. */
size_t lh_model_state_floats(const lh_model_config *cfg);
int lh_model_decoder_state_get(const lh_model_decoder *d, int b, float *out);
/* Sets sequence b's state to in (the layout state_get gives): the
 * sequence goes on from there as if it had been fed the tokens that made
 * in, bit for bit (how an actor forks a group's shared prefill). */
int lh_model_decoder_state_set(lh_model_decoder *d, int b, const float *in);
/* One token for each of the B sequences (recurrent step); logp (B,vocab,
 * host) gets log-probabilities of the next token; experts (layers, B, topk,
 * host) or NULL gets the routing (for routing replay). */
int lh_model_decode_step(lh_model_decoder *d, const int32_t *tokens, float *logp,
                         int32_t *experts, lh_errbuf *err);
/* The same for the n_rows sequences rows[0..n_rows) only (distinct, in
 * [0, B)); tokens, logp (n_rows, vocab) and experts (layers, n_rows, topk)
 * follow rows' order. The other sequences' states do not move: how an actor
 * keeps decoding while some episodes wait for a tool. */
int lh_model_decode_step_rows(lh_model_decoder *d, const int32_t *rows, int n_rows,
                              const int32_t *tokens, float *logp, int32_t *experts,
                              lh_errbuf *err);
/* Feeds n tokens (and images, positions relative to these tokens) to
 * sequence b through the chunked training path, continuing its state;
 * logp_next (vocab, host) or NULL gets the next-token distribution after
 * the last one. The tokens go through in windows of the decoder's prefill
 * window (lh_model_window_end cuts them, so an image stays whole), each
 * window starting from the state the one before left: the memory a
 * prefill takes is that of one window, whatever n, and the result is the
 * one-pass forward's up to float rounding (docs/model.md "Windows"). */
int lh_model_prefill(lh_model_decoder *d, int b, const int32_t *tokens, int n,
                     const lh_model_image *images, int n_images, float *logp_next,
                     lh_errbuf *err);

/* ---- balancing ----------------------------------------------------------- */
typedef struct lh_model_balancer lh_model_balancer;
/* Statistics and bias updates for layers x experts routers (docs/model.md
 * "Balancing"), with the rule and rates of cfg. */
int lh_model_balancer_new(const lh_model_config *cfg, lh_model_balancer **out);
void lh_model_balancer_free(lh_model_balancer *b);
/* Adds one layer's routing of N tokens to the current step: affinity (N,E)
 * and bias (E) (host) for the quantile rule, expert_idx (N,k). */
int lh_model_balancer_observe(lh_model_balancer *b, int layer, const float *affinity,
                              const float *bias, const int32_t *expert_idx, int N);
/* Adds every layer's routing of the model's last forward. */
int lh_model_balancer_observe_cache(lh_model_balancer *b, const lh_model *m,
                                    const lh_model_cache *c);
/* Ends the step: per layer load, MaxVio, dead-expert window, and (rules bias,
 * adaptive and quantile) the bias update bias[layer*E + e] (host). */
int lh_model_balancer_step(lh_model_balancer *b, float *bias);
/* The same applied to the model's layers.l.moe.bias tensors. */
int lh_model_balancer_step_model(lh_model_balancer *b, lh_model *m);
/* After a step: MaxVio of layer = max(load)/mean(load) - 1, and the number of
 * experts with load 0 over the last 100 steps. */
double lh_model_balancer_maxvio(const lh_model_balancer *b, int layer);
/* The last step's load of layer: (experts) fractions summing to 1. */
int lh_model_balancer_load(const lh_model_balancer *b, int layer, float *out);
int lh_model_balancer_dead(const lh_model_balancer *b, int layer);
/* The current step's routed (token, slot) counts, (layers, experts), and
 * their per-layer totals (layers), writable until lh_model_balancer_step:
 * data-parallel learners sum them over ranks first, so that every rank's
 * bias update, MaxVio and dead-expert count see the global loads. */
int lh_model_balancer_counts(lh_model_balancer *b, double **counts, double **pairs);
/* `quantile`'s histograms of the current step: (layers, experts, bins)
 * counts of affinities (*bins per expert), and each layer's number of
 * tokens in them (layers); writable until lh_model_balancer_step, to be
 * summed over ranks as the counts are (a sum of histograms is the
 * histogram of all the ranks' tokens). *hist NULL under another rule. */
int lh_model_balancer_histograms(lh_model_balancer *b, uint32_t **hist, int *bins, size_t **tokens);
/* Wall time of the last ended step's balancing, in milliseconds: every
 * observe since the step before, and the step itself (the bias rule, the
 * statistics, and for step_model the bias's way to and from the backend). */
double lh_model_balancer_ms(const lh_model_balancer *b);
/* The state a step leaves for the next (the adaptive rule's per-expert
 * steps and signs, the dead-expert window), as bytes for a checkpoint, so
 * that a resumed run balances exactly as an unbroken one: state_bytes is
 * their size for this balancer's layers and experts; state_get copies them
 * into buf (n must be that size); state_set checks them (size, header,
 * layers, experts, every value in range: LH_EMODEL_CKPT_SIZE or
 * LH_EMODEL_CKPT_METADATA) and takes them. Native byte order. */
size_t lh_model_balancer_state_bytes(const lh_model_balancer *b);
int lh_model_balancer_state_get(const lh_model_balancer *b, void *buf, size_t n);
int lh_model_balancer_state_set(lh_model_balancer *b, const void *buf, size_t n);

#endif

/* The demonstrations `longhaul sft` trains on (actors.h,
 * lh_actors_sft_demos): batches of the expert's episodes on the training
 * seeds, as transcripts in the one format the actor plays in. */
#include <stdlib.h>

#include "actors/actors.h"

struct lh_actors_sft_demos {
  lh_env *env;
  size_t batch;
  uint64_t seed, next;
  lh_actors_transcript **ts;
};

int lh_actors_sft_demos_new(lh_env *env, int patch, size_t batch, uint64_t seed, lh_actors_sft_demos **out,
                            lh_errbuf *err) {
  if (!env || !out || batch < 1 || seed >= LH_ACTORS_SFT_SEEDS)
    return lh_errbuf_set(err, LH_EINVAL, "sft demonstrations: need an environment, a batch and a seed below 2^19");
  *out = NULL;
  lh_actors_sft_demos *d = calloc(1, sizeof *d);
  lh_actors_transcript **ts = calloc(batch, sizeof *ts);
  if (!d || !ts) {
    free(d);
    free(ts);
    return lh_errbuf_set(err, LH_ENOMEM, "out of memory");
  }
  *d = (lh_actors_sft_demos){.env = env, .batch = batch, .seed = seed, .ts = ts};
  for (size_t i = 0; i < batch; i++)
    if (!(ts[i] = lh_actors_transcript_new(patch, err))) {
      lh_actors_sft_demos_free(d);
      return LH_ENOMEM;
    }
  *out = d;
  return 0;
}

void lh_actors_sft_demos_free(lh_actors_sft_demos *d) {
  if (!d) return;
  for (size_t i = 0; i < d->batch; i++) lh_actors_transcript_free(d->ts[i]);
  free(d->ts);
  free(d);
}

int lh_actors_sft_demos_next(lh_actors_sft_demos *d, lh_errbuf *err) {
  if (!d) return lh_errbuf_set(err, LH_EINVAL, "sft demonstrations: NULL");
  for (size_t i = 0; i < d->batch; i++) {
    uint64_t seed = LH_ACTORS_SFT_SEED_BASE + (d->seed << 20) + d->next++;
    LH_TRY(lh_actors_transcript_expert(d->env, seed, d->ts[i], NULL, err));
  }
  return 0;
}

const lh_actors_transcript *lh_actors_sft_demos_get(const lh_actors_sft_demos *d, size_t i) {
  return d && i < d->batch ? d->ts[i] : NULL;
}

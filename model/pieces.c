/* model: a whole model's floats in pieces, for the whole model or any of
 * its expert shards (model.h, "a whole model in pieces"). Files and
 * buffers that hold a whole model (model.safetensors, the learner's
 * optimizer.bin) are written and read in this order, so that a shard
 * moves its own share and never holds the whole. */
#include <stdlib.h>

#include "model/internal.h"

int lh_model_each_piece(const lh_model *m, size_t max_floats, lh_model_piece_fn fn, void *ctx, lh_errbuf *err) {
  if (!m || !fn || !max_floats) return LH_EINVAL;
  /* The whole model's table gives each tensor's place in its buffers. */
  lh_model *w = NULL;
  LH_TRY(lh_model_new_table(&m->cfg, m->be, &w, err));
  int rc = w->n_tensors == m->n_tensors ? 0 : lh_errbuf_set(err, LH_EMODEL_STATE, "model: a shard's table is "
                                                            "not the whole model's");
  for (int i = 0; !rc && i < m->n_tensors; i++) {
    const lh_model_tensor *t = &m->tensors[i];
    int holders = t->expert_shard ? m->shards : 1;
    for (int s = 0; !rc && s < holders; s++)
      for (size_t at = 0; !rc && at < t->numel; at += max_floats) {
        lh_model_piece p = {.tensor = i, .shard = t->expert_shard ? s : -1, .at = at,
                            .n = t->numel - at < max_floats ? t->numel - at : max_floats,
                            .whole_at = (size_t)s * t->numel + at, .whole_offset = w->tensors[i].offset};
        rc = fn(ctx, &p, err);
      }
  }
  lh_model_free(w);
  return rc;
}

int lh_model_holds_piece(const lh_model *m, const lh_model_piece *p) {
  return p->shard < 0 || p->shard == m->shard;
}

size_t lh_model_largest_piece(const lh_model *m, size_t max_floats) {
  size_t most = 1;
  for (int i = 0; m && i < m->n_tensors; i++)
    if (m->tensors[i].numel > most) most = m->tensors[i].numel;
  return most < max_floats ? most : max_floats;
}

int lh_model_piece_download(const lh_model *m, const float *buf, const lh_model_piece *p, float *dst) {
  return m->be->download(m->be->context, dst, buf + m->tensors[p->tensor].offset + p->at, p->n * sizeof(float));
}

int lh_model_piece_upload(const lh_model *m, float *buf, const lh_model_piece *p, const float *src) {
  return m->be->upload(m->be->context, buf + m->tensors[p->tensor].offset + p->at, src, p->n * sizeof(float));
}

size_t lh_model_whole_floats(const lh_model *m) {
  if (!m || m->shards == 1) return m ? m->n_floats : 0;
  lh_model *w = NULL;
  if (lh_model_new_table(&m->cfg, m->be, &w, NULL)) return 0;
  size_t n = w->n_floats;
  lh_model_free(w);
  return n;
}

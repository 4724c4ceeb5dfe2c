/* model: where a window of a long sequence ends, so that no image is cut.
 *
 * A forward pass (lh_model_forward) needs each image's patches inside its
 * tokens, so every place that runs a long sequence in windows (the actor's
 * prefill, the learner's train windows, `score --window`) cuts it with
 * this one rule (docs/model.md "Windows"). */
#include "model/model.h"

size_t lh_model_window_end(size_t start, size_t n, size_t window, const lh_model_span *spans, size_t n_spans) {
  if (start >= n) return n;
  if (window < 1) window = 1;
  size_t end = n - start > window ? start + window : n;
  /* Spans are in order and do not overlap, so one pass settles the end:
   * moved before a span that begins after start, or past one that starts
   * at or before it (the window then holds that image whole). */
  for (size_t i = 0; i < n_spans; i++) {
    const lh_model_span *s = &spans[i];
    if (s->first >= end) break;
    size_t last = s->first + s->count;
    if (s->count == 0 || last <= end) continue;
    end = s->first > start ? s->first : (last < n ? last : n);
    break;
  }
  return end;
}

size_t lh_model_image_spans(const lh_model_config *cfg, const lh_model_image *images, int n_images,
                            lh_model_span *out) {
  size_t k = 0;
  for (int i = 0; i < n_images; i++) {
    int p = cfg->patch > 0 ? cfg->patch : 1;
    out[k++] = (lh_model_span){(size_t)(images[i].at > 0 ? images[i].at : 0),
                               (size_t)(images[i].height / p) * (size_t)(images[i].width / p)};
  }
  return k;
}

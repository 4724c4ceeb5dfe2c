/* model: an image's bytes as the model's patch input. */
#include "model/model.h"

void lh_model_pixels_from_u8(const uint8_t *src, size_t n_pixels, uint32_t channels, float *dst) {
  for (size_t i = 0; i < n_pixels; i++)
    for (size_t c = 0; c < 3; c++)
      dst[3 * i + c] = src[i * channels + (channels == 3 ? c : 0)] / 255.0f;
}

/* longhaul score's input (cli/score_input.c). */
#ifndef LH_CLI_SCORE_INPUT_H
#define LH_CLI_SCORE_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct {
  int n;
  int32_t *tokens;
  int n_images;
  lh_model_image *images;
  float **pixels;
} lh_score_input;

/* Parses the input text into in (zeroed by the caller; lh_score_input_free
 * releases it, whatever the result): 0, or -1 with a message on stderr when
 * it is not as `longhaul score --help` describes. visits (may be NULL) gets
 * the number of array items walked: the tokens and every image's pixel
 * values, each once, so the work is linear in the input. */
int lh_score_input_parse(const char *text, lh_score_input *in, size_t *visits);
void lh_score_input_free(lh_score_input *in);

#endif

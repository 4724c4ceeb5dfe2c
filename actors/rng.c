/* actors: xoshiro256** seeded through splitmix64, with a byte form of its
 * state for checkpoints. */
#include "actors/internal.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void lh_actors_rng_seed(lh_actors_rng *r, uint64_t seed) {
  if (!r) return;
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
  /* splitmix64 is a bijection of a counter, so four consecutive outputs are
   * never all zero; no further check needed. */
}

uint64_t lh_actors_rng_next(lh_actors_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double lh_actors_rng_uniform(lh_actors_rng *r) { return (double)(lh_actors_rng_next(r) >> 11) * 0x1.0p-53; }

void lh_actors_rng_save(const lh_actors_rng *r, uint8_t out[LH_ACTORS_RNG_STATE_BYTES]) {
  for (int i = 0; i < 4; i++)
    for (int b = 0; b < 8; b++) out[i * 8 + b] = (uint8_t)(r->s[i] >> (8 * b));
}

int lh_actors_rng_load(lh_actors_rng *r, const uint8_t in[LH_ACTORS_RNG_STATE_BYTES], lh_errbuf *err) {
  if (!r || !in) return lh_errbuf_set(err, LH_EINVAL, "rng load: NULL generator or state");
  lh_actors_rng t;
  uint64_t any = 0;
  for (int i = 0; i < 4; i++) {
    t.s[i] = 0;
    for (int b = 0; b < 8; b++) t.s[i] |= (uint64_t)in[i * 8 + b] << (8 * b);
    any |= t.s[i];
  }
  if (!any)
    return lh_errbuf_set(err, LH_EACTORS_RNG_STATE,
                         "rng load: the saved state is all zero, which no seeded generator reaches "
                         "(corrupt checkpoint?)");
  *r = t;
  return 0;
}

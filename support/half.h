/* half.h: the 16-bit float formats on the host: bf16 and IEEE f16 bits to and from f32. Every
 * narrowing rounds to nearest even (a NaN stays a NaN, quieted), as the CPU kernels' stores, the
 * CUDA prelude's sn_f32_to_bf16 / sn_f32_to_f16 and the interpreter's sn_dtype_round do, so a
 * value rounded here equals the weight shadow a device's cast kernel makes of it. Widening is
 * exact. Readers of files (io/) and the trainer's 16-bit parameters (train/) share them. */
#ifndef SN_HALF_H
#define SN_HALF_H

#include <stdbool.h>
#include <stdint.h>

float sn_bf16_to_f32(uint16_t h);
float sn_f16_to_f32(uint16_t h);
uint16_t sn_f32_to_bf16(float f);
uint16_t sn_f32_to_f16(float f); /* past f16's range: infinity */

/* n floats to bf16 (bf16 true) or f16 bits (f and h distinct). */
void sn_half_from_f32(bool bf16, const float *f, uint16_t *h, int64_t n);
/* n bf16 or f16 bits widened to floats (h and f distinct). */
void sn_half_to_f32(bool bf16, const uint16_t *h, float *f, int64_t n);

#endif

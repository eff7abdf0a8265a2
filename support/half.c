/* half.c: the 16-bit float conversions of half.h, on the bits (no compiler _Float16 needed). */
#include "half.h"

#include <string.h>

float sn_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float sn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign; /* +-0 */
    else { /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sn_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

uint16_t sn_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
    if (a >= 0x38800000u) { /* 2^-14 and up: a normal f16, or past 65504 infinity */
        if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up (ties to even) */
        uint32_t r = a - 0x38000000u; /* the exponent rebiased from 127 to 15 */
        r += 0xfffu + ((r >> 13) & 1); /* a carry out of the mantissa raises the exponent */
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign; /* below 2^-25 (half the smallest subnormal): zero */
    /* a subnormal f16: the value in units of 2^-24 is man >> shift, rounded to nearest even */
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23);
    uint32_t q = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) q++; /* 0x400: the smallest normal */
    return (uint16_t)(sign | q);
}

void sn_half_from_f32(bool bf16, const float *f, uint16_t *h, int64_t n) {
    for (int64_t k = 0; k < n; k++) h[k] = bf16 ? sn_f32_to_bf16(f[k]) : sn_f32_to_f16(f[k]);
}

void sn_half_to_f32(bool bf16, const uint16_t *h, float *f, int64_t n) {
    for (int64_t k = 0; k < n; k++) f[k] = bf16 ? sn_bf16_to_f32(h[k]) : sn_f16_to_f32(h[k]);
}

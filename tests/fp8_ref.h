/* fp8_ref.h: the 8-bit float formats from their bit layouts (OCP FP8), written independently of
 * the code under test, for the fp8 suites (test_fp8, test_fp8_cpu, test_cuda_fp8). */
#ifndef SN_TEST_FP8_REF_H
#define SN_TEST_FP8_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
    sn_dtype t;
    int ebits, mbits, bias;
    bool ieee;        /* E5M2: an all-ones exponent is infinity or NaN; E4M3: only S.1111.111 is NaN */
    uint8_t nan_code; /* the NaN the kernels store (E4M3's only one, E5M2's quiet one) */
} fp8_fmt;

extern const fp8_fmt FP8_E4M3, FP8_E5M2;
/* FP8_E4M3 or FP8_E5M2 by dtype. */
const fp8_fmt *fp8_fmt_of(sn_dtype t);
/* The value of code c (0..255): NAN for a NaN code, +-INFINITY for E5M2's infinities. */
double fp8_decode(const fp8_fmt *f, int c);

#endif

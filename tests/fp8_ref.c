/* fp8_ref.c: the 8-bit float formats from their bit layouts (fp8_ref.h). */
#include "fp8_ref.h"

#include <math.h>

const fp8_fmt FP8_E4M3 = {SN_F8E4M3, 4, 3, 7, false, 0x7f}, FP8_E5M2 = {SN_F8E5M2, 5, 2, 15, true, 0x7e};

const fp8_fmt *fp8_fmt_of(sn_dtype t) { return t == SN_F8E4M3 ? &FP8_E4M3 : &FP8_E5M2; }

double fp8_decode(const fp8_fmt *f, int c) {
    int s = c >> 7, e = (c >> f->mbits) & ((1 << f->ebits) - 1), m = c & ((1 << f->mbits) - 1);
    int emax_field = (1 << f->ebits) - 1;
    double v;
    if (f->ieee && e == emax_field) v = m ? NAN : INFINITY;
    else if (!f->ieee && e == emax_field && m == (1 << f->mbits) - 1) v = NAN;
    else if (e == 0) v = ldexp(m, 1 - f->bias - f->mbits);
    else v = ldexp((1 << f->mbits) + m, e - f->bias - f->mbits);
    return s ? -v : v;
}

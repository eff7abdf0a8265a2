/* nf4.h: 4-bit NormalFloat weights with double quantization (QLoRA: Dettmers et al. 2023,
 * "QLoRA: Efficient Finetuning of Quantized LLMs"), as one packed byte buffer: the storage of a
 * frozen parameter in u8, which a dequant_nf4 node unpacks (the IR's shape rule and the
 * interpreter need the layout, so it lives beside the dtypes).
 * Convention: an array of n weights is cut into blocks of 64 consecutive elements in its flat
 * (row-major) order, so a block may straddle two rows and the last block may be short: any n
 * >= 1 is accepted, a row length need not be a multiple of 64. A block stores each weight as the
 * index of the NF4 level nearest to w / absmax(block) (4 bits) and its absmax once; the absmaxes
 * are stored double-quantized: their mean over the whole array is subtracted, and the rests are
 * 8-bit signed integers over one f32 step per group of 256 blocks.
 *
 * The packed buffer (sn_nf4_layout gives the offsets; host byte order), for n weights,
 * blocks = ceil(n / 64), groups = ceil(blocks / 256):
 *     f32    mean                      at off_mean = 0: the mean of the blocks' absmax
 *     f32    step[groups]              at off_steps = 4: group g's step (its largest |absmax -
 *                                      mean| / 127; 0 when all its blocks equal the mean)
 *     int8   scale_code[blocks]        at off_scale_codes: round((absmax_b - mean) / step_g)
 *     uint8  codes[ceil(n / 2)]        at off_codes: weight 2i in the high nibble of byte i,
 *                                      weight 2i+1 in the low one (bitsandbytes' order); an odd
 *                                      n's last low nibble is 0
 * That is 0.5 + 1/64 + 4/(64*256) bytes a weight, plus 4 bytes and the rounding up.
 *
 * Dequantizing is defined bit for bit, so that the interpreter and every kernel agree:
 *     scale_b = fmaf((float)scale_code[b], step[b / 256], mean)       (one rounding)
 *     w_i     = sn_nf4_levels[code_i] * scale_{i / 64}                  (one rounding, in f32)
 * and a 16-bit output rounds w_i once more (round to nearest even). */
#ifndef SN_NF4_H
#define SN_NF4_H

#include <stdint.h>

#include "ir.h"

enum {
    SN_NF4_BLOCK = 64,        /* weights a block, one absmax each */
    SN_NF4_SCALE_GROUP = 256, /* blocks a group of 8-bit absmaxes, one f32 step each */
};

/* The 16 NormalFloat4 levels in increasing order, as the QLoRA paper (appendix E) and
 * bitsandbytes give them: -1 and 1 at the ends, an exact 0 at index 7. */
extern const float sn_nf4_levels[16];

typedef struct {
    int64_t n;               /* weights */
    int64_t blocks, groups;  /* ceil(n / 64), ceil(blocks / 256) */
    int64_t off_steps;       /* 4: after the mean */
    int64_t off_scale_codes; /* 4 + 4 groups */
    int64_t off_codes;       /* off_scale_codes + blocks */
    int64_t bytes;           /* the whole buffer: off_codes + ceil(n / 2) */
} sn_nf4_layout;

/* The packed buffer's layout for n >= 1 weights. */
sn_nf4_layout sn_nf4_layout_of(int64_t n);

/* The index of the NF4 level nearest to x (x in [-1, 1]; outside it the end levels), ties to the
 * lower level, by the midpoints between neighbouring levels. */
int sn_nf4_nearest(float x);

/* Packs w[0..n) into out (sn_nf4_layout_of(n).bytes bytes). A NaN or infinite weight is refused
 * with SN_ERR_NUMERIC naming its (first) index (out is then undefined); SN_ERR_OOM when the
 * blocks' absmax (4 bytes a block) cannot be had. */
sn_status sn_nf4_quantize(const float *w, int64_t n, uint8_t *out, sn_err *e);
/* The same bytes with the work split: run(runner, n, fn, ctx) must call fn(ctx, begin, end) over
 * parts covering [0, n) exactly once each, in any order or at once (a thread pool's run: the
 * blocks' absmax, then the groups; each group's bytes are its own, and the mean of the absmax
 * is summed in block order between the two). run NULL: in order on this thread. */
typedef void (*sn_nf4_range_fn)(void *ctx, int64_t begin, int64_t end);
typedef void (*sn_nf4_run_fn)(void *runner, int64_t n, sn_nf4_range_fn fn, void *ctx);
sn_status sn_nf4_quantize_on(const float *w, int64_t n, uint8_t *out, sn_nf4_run_fn run,
                             void *runner, sn_err *e);

/* Block b's dequantized absmax (the formula above) of a buffer packed for n weights. */
float sn_nf4_block_scale(const uint8_t *q, int64_t n, int64_t b);

/* The n weights of buffer q, dequantized as defined above, into out (f32). */
void sn_nf4_dequantize(const uint8_t *q, int64_t n, float *out);

#endif

/* plot.h: loss curves as a PNG image with no library: an RGB canvas, lines, a 5x7 bitmap
 * font for tick labels, and a PNG encoder that stores (does not compress) its zlib stream.
 * Convention: images are 8-bit RGB, row-major (H, W, 3); files are replaced whole. */
#ifndef SN_PLOT_H
#define SN_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* A curve: n points (x[i], y[i]) in the order they were pushed. A zeroed series is empty. */
typedef struct {
    int n, cap;
    double *x, *y; /* (n,) */
} sn_series;

sn_status sn_series_push(sn_series *s, double x, double y, sn_err *e); /* SN_ERR_OOM: point dropped */
void sn_series_free(sn_series *s);

/* Whether this build writes PNGs (libpng found at build time). */
bool sn_png_supported(void);
/* A PNG of the (h, w, 3) image (8-bit RGB), encoded by libpng, into *out, a malloc'd buffer of
 * *len bytes the caller frees. SN_ERR_UNSUPPORTED without libpng; SN_ERR_OOM. */
sn_status sn_png_encode(int w, int h, const uint8_t *rgb, uint8_t **out, size_t *len, sn_err *e);
/* Encodes and writes the image to path (temporary file, then rename). */
sn_status sn_png_write(const char *path, int w, int h, const uint8_t *rgb, sn_err *e);

/* Plots train (light, every step) and val (bold, with markers) loss against the step, with
 * axes, tick labels, a legend and a title, into a 720 x 420 PNG at path. Either series may be
 * empty; the axes span both. */
sn_status sn_plot_losses(const char *path, const char *title, const sn_series *train,
                         const sn_series *val, sn_err *e);

#endif

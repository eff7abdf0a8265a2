/* plot.c: the loss-curve PNG of plot.h: a canvas with lines and 5x7 text, nice tick steps
 * (1, 2, 5 x 10^k), encoded as PNG by libpng (optional: without it plots say so).
 * Convention: canvas coordinates are pixels from the top-left; drawing clips to the canvas. */
#include "plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef SN_HAVE_PNG
#include <png.h>
#endif

#include "savefile.h"

sn_status sn_series_push(sn_series *s, double x, double y, sn_err *e) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = sn_realloc(s->x, sizeof(double) * (size_t)cap, "a loss curve", e);
        if (nx) s->x = nx;
        double *ny = nx ? sn_realloc(s->y, sizeof(double) * (size_t)cap, "a loss curve", e) : NULL;
        if (!ny) return SN_ERR_OOM;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return SN_OK;
}

void sn_series_free(sn_series *s) {
    free(s->x);
    free(s->y);
    *s = (sn_series){0};
}

/* ---- PNG (libpng) ------------------------------------------------------------------------ */

bool sn_png_supported(void) {
#ifdef SN_HAVE_PNG
    return true;
#else
    return false;
#endif
}

sn_status sn_png_encode(int w, int h, const uint8_t *rgb, uint8_t **out, size_t *len, sn_err *e) {
    SN_ASSERT(w > 0 && h > 0);
    *out = NULL;
    *len = 0;
#ifdef SN_HAVE_PNG
    png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w, .height = (png_uint_32)h,
                    .format = PNG_FORMAT_RGB};
    png_alloc_size_t n = 0; /* the first call measures, the second writes */
    if (!png_image_write_to_memory(&im, NULL, &n, 0, rgb, 0, NULL))
        return sn_fail(e, SN_ERR_IO, "libpng cannot encode a %d x %d image: %s", w, h, im.message);
    uint8_t *png = sn_malloc(n, "a PNG image", e);
    if (!png) return SN_ERR_OOM;
    if (!png_image_write_to_memory(&im, png, &n, 0, rgb, 0, NULL)) {
        free(png);
        return sn_fail(e, SN_ERR_IO, "libpng cannot encode a %d x %d image: %s", w, h, im.message);
    }
    *out = png;
    *len = n;
    return SN_OK;
#else
    (void)rgb;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "this build of sinter has no libpng, so no plots: "
                   "install libpng-dev and rebuild (./setup), or leave out --plot");
#endif
}

sn_status sn_png_write(const char *path, int w, int h, const uint8_t *rgb, sn_err *e) {
    size_t len;
    uint8_t *png;
    sn_status s = sn_png_encode(w, h, rgb, &png, &len, e);
    if (s) return s;
    sn_savefile f;
    s = sn_savefile_open(&f, path, "plot", e);
    if (!s) {
        if (fwrite(png, 1, len, f.f) == len) s = sn_savefile_commit(&f, e);
        else {
            sn_savefile_abort(&f);
            s = sn_fail(e, SN_ERR_IO, "cannot write the plot %s: check free disk space", path);
        }
    }
    free(png);
    return s;
}

/* ---- canvas and font ---------------------------------------------------------------------- */

typedef struct {
    int w, h;
    uint8_t *px; /* (h, w, 3) */
} canvas;

typedef struct {
    uint8_t r, g, b;
} color;

static void put(canvas *c, int x, int y, color k) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    uint8_t *p = c->px + 3 * ((size_t)y * (size_t)c->w + (size_t)x);
    p[0] = k.r, p[1] = k.g, p[2] = k.b;
}

static void fill(canvas *c, int x0, int y0, int x1, int y1, color k) {
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) put(c, x, y, k);
}

/* Bresenham; thick lines also paint the pixel right of and below each point. */
static void line(canvas *c, int x0, int y0, int x1, int y1, color k, bool thick) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        put(c, x0, y0, k);
        if (thick) put(c, x0 + 1, y0, k), put(c, x0, y0 + 1, k);
        if (x0 == x1 && y0 == y1) return;
        int e2 = 2 * err;
        if (e2 >= dy) err += dy, x0 += sx;
        if (e2 <= dx) err += dx, y0 += sy;
    }
}

/* 5x7 glyphs, rows top to bottom; upper-case letters are drawn as lower-case. */
static const struct {
    char c;
    const char *rows[7];
} font[] = {
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {'-', {".....", ".....", ".....", ".###.", ".....", ".....", "....."}},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
    {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
    {'b', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."}},
    {'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}},
    {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
    {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
    {'f', {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}},
    {'g', {".....", ".####", "#...#", "#...#", ".####", "....#", ".###."}},
    {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
    {'j', {"...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.."}},
    {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
    {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}},
    {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
    {'p', {".....", ".....", "####.", "#...#", "#...#", "####.", "#...."}},
    {'q', {".....", ".....", ".####", "#...#", "#...#", ".####", "....#"}},
    {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
    {'s', {".....", ".....", ".###.", "#....", ".###.", "....#", "####."}},
    {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
    {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
    {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
    {'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}},
    {'y', {".....", ".....", "#...#", "#...#", ".####", "....#", ".###."}},
    {'z', {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}},
};

enum { GLYPH_W = 5, GLYPH_H = 7, ADVANCE = 6 };

static int text_width(const char *s) { return s[0] ? ADVANCE * (int)strlen(s) - 1 : 0; }

/* Draws s with its top-left corner at (x, y); characters the font lacks are left blank. */
static void text(canvas *c, int x, int y, const char *s, color k) {
    for (; *s; s++, x += ADVANCE) {
        char ch = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        for (size_t g = 0; g < sizeof font / sizeof font[0]; g++) {
            if (font[g].c != ch) continue;
            for (int r = 0; r < GLYPH_H; r++)
                for (int col = 0; col < GLYPH_W; col++)
                    if (font[g].rows[r][col] == '#') put(c, x + col, y + r, k);
            break;
        }
    }
}

/* ---- the loss plot ------------------------------------------------------------------------ */

enum { PLOT_W = 720, PLOT_H = 420, LEFT = 64, RIGHT = PLOT_W - 20, TOP = 30, BOTTOM = PLOT_H - 42 };

static const color WHITE = {255, 255, 255}, INK = {40, 40, 40}, GRID = {225, 225, 225},
                   TRAIN = {120, 170, 220}, VAL = {230, 110, 20};

/* A tick spacing of 1, 2 or 5 times a power of ten giving about n intervals over span. */
static double nice_step(double span, int n) {
    double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

typedef struct {
    double x0, x1, y0, y1;
} axes;

static int map_x(const axes *a, double x) {
    return LEFT + (int)lround((x - a->x0) / (a->x1 - a->x0) * (RIGHT - LEFT));
}
static int map_y(const axes *a, double y) {
    return BOTTOM - (int)lround((y - a->y0) / (a->y1 - a->y0) * (BOTTOM - TOP));
}

static void span(const sn_series *s, double *lo, double *hi, double *xmax) {
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i])) continue;
        if (s->y[i] < *lo) *lo = s->y[i];
        if (s->y[i] > *hi) *hi = s->y[i];
        if (s->x[i] > *xmax) *xmax = s->x[i];
    }
}

static void draw_ticks(canvas *c, const axes *a) {
    char buf[32];
    double st = nice_step(a->y1 - a->y0, 6);
    int dec = st >= 1 ? 0 : (int)ceil(-log10(st) - 1e-9);
    for (double t = ceil(a->y0 / st) * st; t <= a->y1 + 1e-9 * st; t += st) {
        int y = map_y(a, t);
        line(c, LEFT + 1, y, RIGHT - 1, y, GRID, false);
        line(c, LEFT - 4, y, LEFT, y, INK, false);
        snprintf(buf, sizeof buf, "%.*f", dec, fabs(t) < 1e-12 * st ? 0.0 : t);
        text(c, LEFT - 7 - text_width(buf), y - GLYPH_H / 2, buf, INK);
    }
    st = nice_step(a->x1 - a->x0, 8);
    if (st < 1) st = 1; /* steps are whole */
    for (double t = ceil(a->x0 / st) * st; t <= a->x1 + 1e-9 * st; t += st) {
        int x = map_x(a, t);
        line(c, x, TOP + 1, x, BOTTOM - 1, GRID, false);
        line(c, x, BOTTOM, x, BOTTOM + 4, INK, false);
        snprintf(buf, sizeof buf, "%.0f", t);
        text(c, x - text_width(buf) / 2, BOTTOM + 8, buf, INK);
    }
}

static void draw_series(canvas *c, const axes *a, const sn_series *s, color k, bool bold) {
    int px = 0, py = 0;
    bool have = false;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i])) {
            have = false;
            continue;
        }
        int x = map_x(a, s->x[i]), y = map_y(a, s->y[i]);
        if (have) line(c, px, py, x, y, k, bold);
        if (bold) fill(c, x - 2, y - 2, x + 2, y + 2, k);
        px = x, py = y, have = true;
    }
}

sn_status sn_plot_losses(const char *path, const char *title, const sn_series *train,
                         const sn_series *val, sn_err *e) {
    canvas c = {PLOT_W, PLOT_H, sn_malloc(3 * (size_t)PLOT_W * PLOT_H, "the loss plot's pixels", e)};
    if (!c.px) return SN_ERR_OOM;
    memset(c.px, 255, 3 * (size_t)PLOT_W * PLOT_H);
    double lo = INFINITY, hi = -INFINITY, xmax = 1;
    span(train, &lo, &hi, &xmax);
    span(val, &lo, &hi, &xmax);
    if (!(lo <= hi)) lo = 0, hi = 1; /* nothing to plot yet */
    double pad = hi > lo ? 0.05 * (hi - lo) : fmax(0.1 * fabs(hi), 0.1);
    axes a = {0, xmax, lo - pad, hi + pad};

    draw_ticks(&c, &a);
    draw_series(&c, &a, train, TRAIN, false);
    draw_series(&c, &a, val, VAL, true);
    line(&c, LEFT, TOP, LEFT, BOTTOM, INK, false); /* the frame */
    line(&c, LEFT, BOTTOM, RIGHT, BOTTOM, INK, false);
    line(&c, LEFT, TOP, RIGHT, TOP, INK, false);
    line(&c, RIGHT, TOP, RIGHT, BOTTOM, INK, false);
    if (title) text(&c, (LEFT + RIGHT - text_width(title)) / 2, 10, title, INK);
    text(&c, (LEFT + RIGHT - text_width("step")) / 2, BOTTOM + 24, "step", INK);
    text(&c, 8, 10, "loss", INK);

    int lx = RIGHT - 90, ly = TOP + 10; /* legend */
    fill(&c, lx - 8, ly - 6, RIGHT - 8, ly + 26, WHITE);
    line(&c, lx, ly, lx + 20, ly, TRAIN, true);
    text(&c, lx + 28, ly - 3, "train", INK);
    line(&c, lx, ly + 16, lx + 20, ly + 16, VAL, true);
    fill(&c, lx + 8, ly + 14, lx + 12, ly + 18, VAL);
    text(&c, lx + 28, ly + 13, "val", INK);

    sn_status s = sn_png_write(path, c.w, c.h, c.px, e);
    free(c.px);
    return s;
}

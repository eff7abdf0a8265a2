/* test_plot.c: the PNG encoder (libpng) and the loss plot: PNGs decoded back by libpng's
 * reading side, pixel for pixel; a build without libpng says so. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef SN_HAVE_PNG
#include <png.h>
#endif

#include "data/data.h"
#include "support/plot.h"
#include "harness.h"

#ifdef SN_HAVE_PNG
/* Decodes a PNG with libpng's reading side into *rgb (8-bit RGB); fails the test on a file it
 * refuses. */
static void decode(const uint8_t *png, size_t len, int *w, int *h, uint8_t **rgb) {
    ck_assert(len > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8));
    png_image im = {.version = PNG_IMAGE_VERSION};
    ck_assert_msg(png_image_begin_read_from_memory(&im, png, len), "%s", im.message);
    ck_assert_uint_eq(im.format, PNG_FORMAT_RGB); /* written as RGB, no alpha */
    *w = (int)im.width, *h = (int)im.height;
    *rgb = malloc(PNG_IMAGE_SIZE(im));
    ck_assert_msg(png_image_finish_read(&im, NULL, *rgb, 0, NULL), "%s", im.message);
}

START_TEST(png_round_trip) {
    int sizes[][2] = {{1, 1}, {3, 2}, {70, 1000}};
    for (int k = 0; k < 3; k++) {
        int w = sizes[k][0], h = sizes[k][1], w2, h2;
        uint8_t *img = malloc(3 * (size_t)w * h), *back;
        for (int i = 0; i < 3 * w * h; i++) img[i] = (uint8_t)(i * 31 + i / 7);
        size_t len;
        uint8_t *png;
        ck_assert(sn_png_encode(w, h, img, &png, &len, NULL) == SN_OK);
        decode(png, len, &w2, &h2, &back);
        ck_assert(w2 == w && h2 == h && !memcmp(img, back, 3 * (size_t)w * h));
        free(img);
        free(back);
        free(png);
    }
}
END_TEST

/* The plot decodes, has the promised size, and shows both curves' colours. */
START_TEST(loss_plot) {
    char path[] = "/tmp/sn_plot_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_series train = {0}, val = {0};
    for (int s = 1; s <= 300; s++) ck_assert(sn_series_push(&train, s, 5.5 * exp(-s / 80.0) + 1 + 0.1 * sin(s), NULL) == SN_OK);
    for (int s = 50; s <= 300; s += 50) ck_assert(sn_series_push(&val, s, 5.5 * exp(-s / 80.0) + 1.2, NULL) == SN_OK);
    sn_err e;
    ck_assert_msg(sn_plot_losses(path, "tiny: 1024 tokens per step", &train, &val, &e) == SN_OK, "%s", e.msg);
    char *png;
    size_t len;
    ck_assert(sn_file_read(path, "", &png, &len, &e) == SN_OK);
    int w, h;
    uint8_t *rgb;
    decode((const uint8_t *)png, len, &w, &h, &rgb);
    ck_assert(w == 720 && h == 420);
    int blue = 0, orange = 0;
    for (int i = 0; i < w * h; i++) {
        const uint8_t *p = rgb + 3 * i;
        blue += p[0] == 120 && p[1] == 170 && p[2] == 220;
        orange += p[0] == 230 && p[1] == 110 && p[2] == 20;
    }
    ck_assert_msg(blue > 500 && orange > 300, "train pixels %d, val pixels %d", blue, orange);
    /* empty series still make a valid (empty) plot */
    sn_series none = {0};
    ck_assert(sn_plot_losses(path, NULL, &none, &none, &e) == SN_OK);
    free(png);
    free(rgb);
    sn_series_free(&train);
    sn_series_free(&val);
    unlink(path);
}
END_TEST
#else
/* Without libpng a plot is a clear error, and nothing is written. */
START_TEST(no_libpng) {
    ck_assert(!sn_png_supported());
    uint8_t px[3] = {0}, *png = (uint8_t *)1;
    size_t len = 1;
    sn_err e;
    ck_assert_int_eq(sn_png_encode(1, 1, px, &png, &len, &e), SN_ERR_UNSUPPORTED);
    ck_assert(!png && !len);
    ck_assert_has(e.msg, "install libpng-dev");
    ck_assert_int_eq(sn_png_write("/tmp/sn_no_libpng.png", 1, 1, px, &e), SN_ERR_UNSUPPORTED);
    ck_assert_int_ne(access("/tmp/sn_no_libpng.png", F_OK), 0);
}
END_TEST
#endif

int main(void) {
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("png");
#ifdef SN_HAVE_PNG
    tcase_add_test(tc, png_round_trip);
    tcase_add_test(tc, loss_plot);
#else
    tcase_add_test(tc, no_libpng);
#endif
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}

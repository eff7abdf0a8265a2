/* test_plot.c: the PNG encoder and the loss plot: known CRC-32 and Adler-32 values, and PNGs
 * decoded back by an independent reader here (signature, chunk CRCs, IHDR, zlib header, stored
 * blocks with LEN/NLEN, Adler-32, filter bytes), pixel for pixel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/crc.h"
#include "data/data.h"
#include "support/plot.h"
#include "harness.h"

/* Bit-at-a-time CRC-32 and plain Adler-32, written apart from crc.h. */
static uint32_t crc_slow(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t adler_slow(const uint8_t *p, size_t n) {
    uint64_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) a = (a + p[i]) % 65521, b = (b + a) % 65521;
    return (uint32_t)(b << 16 | a);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

START_TEST(checksums) {
    sn_crc32 c;
    sn_crc32_init(&c);
    sn_crc32_update(&c, "123456789", 9);
    ck_assert_uint_eq(sn_crc32_value(&c), 0xcbf43926u);
    ck_assert_uint_eq(sn_adler32(1, "Wikipedia", 9), 0x11e60398u);
    uint8_t big[20000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(255 - i % 7);
    ck_assert_uint_eq(sn_adler32(1, big, sizeof big), adler_slow(big, sizeof big)); /* past 5552 */
    sn_crc32_reset(&c);
    sn_crc32_update(&c, big, 777);
    sn_crc32_update(&c, big + 777, sizeof big - 777);
    ck_assert_uint_eq(sn_crc32_value(&c), crc_slow(big, sizeof big));
}
END_TEST

/* Decodes a PNG this encoder writes (RGB8, stored deflate blocks) into *rgb; fails the test on
 * any malformed part. */
static void decode(const uint8_t *png, size_t len, int *w, int *h, uint8_t **rgb) {
    ck_assert(len > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8));
    size_t pos = 8, zlen = 0;
    uint8_t *z = NULL;
    bool ihdr = false, iend = false;
    while (pos < len) {
        ck_assert(!iend && pos + 12 <= len);
        uint32_t n = be32(png + pos);
        ck_assert(pos + 12 + n <= len);
        const uint8_t *type = png + pos + 4, *data = type + 4;
        ck_assert_msg(be32(data + n) == crc_slow(type, n + 4), "chunk %.4s: bad CRC", type);
        if (!memcmp(type, "IHDR", 4)) {
            ck_assert(n == 13 && pos == 8);
            *w = (int)be32(data), *h = (int)be32(data + 4);
            ck_assert(!memcmp(data + 8, "\x08\x02\x00\x00\x00", 5));
            ihdr = true;
        } else if (!memcmp(type, "IDAT", 4)) {
            z = realloc(z, zlen + n);
            memcpy(z + zlen, data, n);
            zlen += n;
        } else if (!memcmp(type, "IEND", 4)) {
            ck_assert(n == 0);
            iend = true;
        }
        pos += 12 + n;
    }
    ck_assert(ihdr && iend && zlen >= 6);
    ck_assert((z[0] * 256 + z[1]) % 31 == 0 && (z[0] & 15) == 8); /* zlib header: deflate */
    size_t row = 1 + 3 * (size_t)*w, raw_len = row * (size_t)*h, got = 0, zp = 2;
    uint8_t *raw = malloc(raw_len);
    bool final = false;
    while (!final) {
        ck_assert(zp + 5 <= zlen);
        final = z[zp] & 1;
        ck_assert_msg((z[zp] >> 1 & 3) == 0, "only stored blocks are expected");
        unsigned n = z[zp + 1] | z[zp + 2] << 8, nn = z[zp + 3] | z[zp + 4] << 8;
        ck_assert_uint_eq(n ^ 0xffffu, nn);
        ck_assert(zp + 5 + n <= zlen && got + n <= raw_len);
        memcpy(raw + got, z + zp + 5, n);
        got += n, zp += 5 + n;
    }
    ck_assert_uint_eq(got, raw_len);
    ck_assert_uint_eq(zp + 4, zlen);
    ck_assert_uint_eq(be32(z + zp), adler_slow(raw, raw_len));
    *rgb = malloc(raw_len);
    for (int y = 0; y < *h; y++) {
        ck_assert_uint_eq(raw[y * row], 0); /* filter: none */
        memcpy(*rgb + y * (row - 1), raw + y * row + 1, row - 1);
    }
    free(raw);
    free(z);
}

START_TEST(png_round_trip) {
    int sizes[][2] = {{1, 1}, {3, 2}, {70, 1000}}; /* the last needs 4 stored blocks */
    for (int k = 0; k < 3; k++) {
        int w = sizes[k][0], h = sizes[k][1], w2, h2;
        uint8_t *img = malloc(3 * (size_t)w * h), *back;
        for (int i = 0; i < 3 * w * h; i++) img[i] = (uint8_t)(i * 31 + i / 7);
        size_t len;
        uint8_t *png = sn_png_encode(w, h, img, &len, NULL);
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

int main(void) {
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("png");
    tcase_add_test(tc, checksums);
    tcase_add_test(tc, png_round_trip);
    tcase_add_test(tc, loss_plot);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}

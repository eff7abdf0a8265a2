/* crc.h: the checksums of PNG and zlib (CRC-32, Adler-32), also used by checkpoints.
 * Convention: header-only; the CRC table lives in the caller's sn_crc32, never in a global. */
#ifndef SN_CRC_H
#define SN_CRC_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 (ISO-HDLC, polynomial 0xedb88320 reflected), as PNG chunks and gzip use it. */
typedef struct {
    uint32_t table[256];
    uint32_t crc; /* running value, inverted */
} sn_crc32;

static inline void sn_crc32_init(sn_crc32 *c) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i;
        for (int k = 0; k < 8; k++) r = r & 1 ? 0xedb88320u ^ (r >> 1) : r >> 1;
        c->table[i] = r;
    }
    c->crc = 0xffffffffu;
}

static inline void sn_crc32_reset(sn_crc32 *c) { c->crc = 0xffffffffu; }

static inline void sn_crc32_update(sn_crc32 *c, const void *data, size_t n) {
    const uint8_t *p = data;
    uint32_t r = c->crc;
    for (size_t i = 0; i < n; i++) r = c->table[(r ^ p[i]) & 0xff] ^ (r >> 8);
    c->crc = r;
}

static inline uint32_t sn_crc32_value(const sn_crc32 *c) { return c->crc ^ 0xffffffffu; }

/* Adler-32 of zlib streams: start with a = 1 and update with each piece of data. */
static inline uint32_t sn_adler32(uint32_t adler, const void *data, size_t n) {
    const uint8_t *p = data;
    uint32_t a = adler & 0xffff, b = adler >> 16;
    while (n) {
        size_t k = n < 5552 ? n : 5552; /* the most bytes before b can overflow 32 bits */
        for (size_t i = 0; i < k; i++) {
            a += p[i];
            b += a;
        }
        a %= 65521;
        b %= 65521;
        p += k;
        n -= k;
    }
    return b << 16 | a;
}

#endif

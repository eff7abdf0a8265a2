/* checked.h: size arithmetic that refuses to overflow, for sizes read from files and text.
 * Convention: each helper returns false (and leaves *out unspecified) instead of wrapping. */
#ifndef SN_CHECKED_H
#define SN_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool sn_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool sn_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool sn_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool sn_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
/* a * b + c, all unsigned 64-bit. */
static inline bool sn_muladd_u64(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
    return sn_mul_u64(a, b, out) && sn_add_u64(*out, c, out);
}

#endif

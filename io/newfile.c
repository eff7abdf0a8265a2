/* newfile.c: new output files (io_int.h) over savefile.h, published by link(2) so that an
 * existing file is never replaced; and the 16-bit float conversions the readers share. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_int.h"

sn_status sn_newfile_open(sn_newfile *f, const char *path, const char *what, sn_err *e) {
    memset(f, 0, sizeof *f);
    struct stat st;
    if (lstat(path, &st) == 0)
        return sn_fail(e, SN_ERR_IO, "%s %s exists: it is not replaced: give another path or "
                       "remove it", what, path);
    sn_status s = sn_savefile_open(&f->s, path, what, e);
    f->ok = !s;
    return s;
}

void sn_newfile_put(sn_newfile *f, const void *p, size_t n) {
    if (!f->ok || !n) return;
    f->ok = fwrite(p, 1, n, f->s.f) == n;
    if (!f->ok) f->err = errno ? errno : EIO;
}

sn_status sn_newfile_commit(sn_newfile *f, sn_err *e) {
    if (f->ok && (fflush(f->s.f) != 0 || fsync(fileno(f->s.f)) != 0)) f->ok = false, f->err = errno;
    if (!f->ok) {
        int err = f->err;
        sn_newfile_abort(f);
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s: check free disk space and "
                       "permissions; nothing was written there", f->s.what, f->s.path, strerror(err));
    }
    int err = sn_savefile_keep_as(&f->s, f->s.path);
    sn_newfile_abort(f); /* closes (and removes the temporary file when the link failed) */
    if (err)
        return sn_fail(e, SN_ERR_IO, "cannot create the %s %s: %s%s", f->s.what, f->s.path,
                       strerror(err), err == EEXIST ? ": a file appeared there meanwhile and is "
                       "not replaced" : "");
    return SN_OK;
}

void sn_newfile_abort(sn_newfile *f) { sn_savefile_abort(&f->s); }

/* ---- 16-bit floats ---- */

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

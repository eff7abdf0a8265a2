/* newfile.c: new output files (io_int.h) over savefile.h, published by link(2) so that an
 * existing file is never replaced. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

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

sn_status sn_newfile_dir(const char *dir, const char *a, const char *b, sn_err *e) {
    struct stat st;
    if (mkdir(dir, 0777) != 0 && (errno != EEXIST || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        return sn_fail(e, SN_ERR_IO, "cannot make the directory %s: %s: give a directory whose "
                       "parent exists", dir, errno == EEXIST ? "a file of that name exists" : strerror(errno));
    if (lstat(a, &st) == 0 || lstat(b, &st) == 0)
        return sn_fail(e, SN_ERR_IO, "%s exists: it is not replaced: export to a new directory",
                       lstat(a, &st) == 0 ? a : b);
    return SN_OK;
}

sn_status sn_newfile_json(const char *path, const char *what, struct json_object *o, sn_err *e) {
#ifndef SN_HAVE_JSONC
    (void)o;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                   "%s: install libjson-c-dev and rebuild (./setup)", path, what);
#else
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    sn_newfile f;
    sn_status s = sn_newfile_open(&f, path, what, e);
    if (!s) {
        sn_newfile_put(&f, text, strlen(text));
        sn_newfile_put(&f, "\n", 1);
        s = sn_newfile_commit(&f, e);
    }
    return s;
#endif
}

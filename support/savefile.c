/* savefile.c: atomic replacement of a file (savefile.h): mkstemp next to the target, fsync,
 * rename, fsync of the directory. Convention: every failure path unlinks the temporary file, and
 * every temporary file is in the process-wide list `open_tmp` from creation to rename or unlink. */
#include "savefile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The temporary files open now, for sn_savefile_unlink_all: the one piece of process-wide state
 * here, because a signal handler has no other way to find them. A full list only means a file
 * the handler cannot remove.
 *
 * A signal handler may run on any thread (a process-directed signal goes to any thread that does
 * not block it: the CPU device's pool threads too), at any moment. So a file's creation and its
 * entry in the list, and its rename or unlink and the entry's removal, are each one critical
 * section: the calling thread blocks every signal (no handler can interrupt it halfway) and holds
 * `list_lock`, a spin lock the handler takes too (it waits for another thread's short section to
 * end, then keeps the lock until _exit, so no file is created after it looked). */
enum { MAX_OPEN_TMP = 16 };
static char *open_tmp[MAX_OPEN_TMP];
static int list_lock;

/* Spins until the lock is ours; nanosleep: async-signal-safe, for the handler. */
static void take_lock(void) {
    while (__atomic_exchange_n(&list_lock, 1, __ATOMIC_ACQUIRE))
        nanosleep(&(struct timespec){0, 100000}, NULL);
}

static void lock_list(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
    take_lock();
}

static void unlock_list(const sigset_t *old) {
    __atomic_store_n(&list_lock, 0, __ATOMIC_RELEASE);
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void list_add(char *tmp) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (!open_tmp[i]) {
            open_tmp[i] = tmp;
            return;
        }
}

static void list_remove(char *tmp) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp[i] == tmp) {
            open_tmp[i] = NULL;
            return;
        }
}

void sn_savefile_unlink_all(void) {
    take_lock();
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp[i]) unlink(open_tmp[i]);
    /* the lock stays taken: the caller exits now */
}

static void test_delay(const char *var) {
    const char *v = getenv(var);
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0) nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000}, NULL);
}

sn_status sn_savefile_open(sn_savefile *s, const char *path, const char *what, sn_err *e) {
    *s = (sn_savefile){.path = path, .what = what};
    size_t n = strlen(path) + 16;
    if (!(s->tmp = sn_malloc(n, "a file name", e))) return SN_ERR_OOM;
    snprintf(s->tmp, n, "%s.tmp.XXXXXX", path);
    sigset_t old;
    lock_list(&old);
    int fd = mkstemp(s->tmp);
    int err = errno;
    if (fd >= 0) {
        test_delay("SN_SAVEFILE_OPEN_DELAY_MS");
        list_add(s->tmp);
    }
    unlock_list(&old);
    if (fd < 0) {
        sn_status st = sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s: check that the "
                               "directory exists and is writable", what, path, strerror(err));
        free(s->tmp);
        s->tmp = NULL;
        return st;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a checkpoint or plot is an ordinary file */
    if (!(s->f = fdopen(fd, "w+b"))) {
        err = errno;
        close(fd);
        sn_savefile_abort(s);
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s", what, path, strerror(err));
    }
    return SN_OK;
}

void sn_savefile_abort(sn_savefile *s) {
    if (s->f) fclose(s->f);
    if (s->tmp) {
        sigset_t old;
        lock_list(&old);
        unlink(s->tmp);
        list_remove(s->tmp);
        unlock_list(&old);
    }
    free(s->tmp);
    s->f = NULL;
    s->tmp = NULL;
}

/* fsync of the directory holding path, so the rename itself survives a crash. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) + (slash == path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on a directory */
        close(fd);
    }
}

/* Flush and fsync; rename over path unless already done. 0, or errno with *step naming what failed. */
static int publish(sn_savefile *s, const char **step) {
    *step = "write";
    if (fflush(s->f) != 0 || ferror(s->f)) return errno ? errno : EIO;
    *step = "fsync";
    if (fsync(fileno(s->f)) != 0) return errno;
    if (!s->tmp) return 0;
    test_delay("SN_SAVEFILE_DELAY_MS");
    *step = "rename";
    sigset_t old;
    lock_list(&old);
    int rc = rename(s->tmp, s->path), err = errno;
    if (rc == 0) list_remove(s->tmp);
    unlock_list(&old);
    if (rc != 0) return err;
    free(s->tmp);
    s->tmp = NULL;
    sync_dir(s->path);
    return 0;
}

static sn_status failed(sn_savefile *s, const char *step, int err, sn_err *e) {
    bool published = !s->tmp;
    sn_savefile_abort(s);
    return sn_fail(e, SN_ERR_IO, "cannot %s the %s %s: %s: check free disk space and "
                   "permissions%s", step, s->what, s->path, strerror(err),
                   published ? "" : "; the previous file, if any, is unchanged");
}

sn_status sn_savefile_sync(sn_savefile *s, sn_err *e) {
    const char *step;
    int err = publish(s, &step);
    return err ? failed(s, step, err, e) : SN_OK;
}

sn_status sn_savefile_commit(sn_savefile *s, sn_err *e) {
    const char *step;
    int err = publish(s, &step);
    if (err) return failed(s, step, err, e);
    int rc = fclose(s->f);
    s->f = NULL;
    if (rc != 0) return failed(s, "close", errno, e);
    return SN_OK;
}

sn_status sn_savefile_check(const char *path, const char *what, sn_err *e) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: it is %s, not a regular file: "
                       "give a file name", what, path, S_ISDIR(st.st_mode) ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
    sn_savefile s;
    sn_status r = sn_savefile_open(&s, path, what, e);
    if (!r) sn_savefile_abort(&s);
    return r;
}

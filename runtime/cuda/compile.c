/* compile.c: CUDA C to a CUBIN with NVRTC (codegen/cuda/nvrtc.c, opened with dlopen), in a forked
 * child process. NVRTC's
 * embedded ptxas has segfaulted on valid kernels; in the child that is an error message naming
 * the signal, not a dead training run. Convention: the child writes one record to a pipe
 * (status, message, log, cubin) and _exits; the parent reads to the end of the pipe, reaps the
 * child (wait4: its CPU time is kept) and trusts nothing it did not read whole. Several children
 * may run at once (compile_parts.c polls their pipes). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/clock.h"
#include "cuda_rt.h"

typedef struct {
    int32_t status; /* sn_status */
    uint64_t msg_len, log_len, cubin_len;
} record_head;

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* In the child: compile (nvrtc.c: the message of a failure carries NVRTC's log), write the
 * record, never return. */
static _Noreturn void child(sn_cuda_api *a, int fd, const char *src, const char *name, int arch) {
    sn_err e = {0};
    sn_cuda_module m;
    sn_status st = sn_nvrtc_compile_with(&a->nvrtc, src, name, arch, &m, &e);
    size_t log_len = m.log ? strlen(m.log) : 0, cubin_len = st ? 0 : m.cubin_size;
    record_head h = {st, st ? strlen(e.msg) : 0, log_len, cubin_len};
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, e.msg, h.msg_len) &&
              write_all(fd, m.log ? m.log : "", h.log_len) &&
              write_all(fd, m.cubin ? m.cubin : "", h.cubin_len);
    _exit(ok ? 0 : 3);
}

/* ---- the parent's side: start, read, finish ---- */

sn_status sn_cuda_nvrtc_start(sn_cuda_api *a, const char *src, const char *name, int arch,
                              sn_nvrtc_child *c, sn_err *e) {
    *c = (sn_nvrtc_child){.pid = -1, .fd = -1, .arch = arch};
    snprintf(c->name, sizeof c->name, "%s", name);
    if (arch < 75)
        return sn_fail(e, SN_ERR_INVALID, "NVRTC: sm_%d is too old: sinter's CUDA kernels need "
                       "sm_75 (Turing) or newer", arch);
    sn_status st = sn_cuda_api_load(a, SN_LIB_NVRTC, e);
    if (st) return st;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) /* a process another thread execs must not hold the pipe open */
        return sn_fail(e, SN_ERR_IO, "compiling %s: pipe: %s", name, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return sn_fail(e, SN_ERR_IO, "compiling %s: fork: %s", name, strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        child(a, fds[1], src, name, arch);
    }
    close(fds[1]);
    c->pid = pid;
    c->fd = fds[0];
    c->t0 = sn_clock_s();
    return SN_OK;
}

sn_status sn_cuda_nvrtc_read(sn_nvrtc_child *c, bool *done, sn_err *e) {
    *done = false;
    if (c->len == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64 << 10;
        char *b = sn_realloc(c->buf, cap, "a compiled CUBIN", e);
        if (!b) return SN_ERR_OOM;
        c->buf = b;
        c->cap = cap;
    }
    ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return SN_OK;
    if (r > 0) {
        c->len += (size_t)r;
        return SN_OK;
    }
    close(c->fd); /* end of file (or a read error: the record is then short, said at finish) */
    c->fd = -1;
    *done = true;
    return SN_OK;
}

/* Waits for the child to end; its CPU time and wall time are kept. */
static int reap(sn_nvrtc_child *c) {
    int wst = 0;
    struct rusage ru = {0};
    while (wait4(c->pid, &wst, 0, &ru) < 0 && errno == EINTR) {
    }
    c->pid = -1;
    c->cpu_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
               (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    c->wall_s = sn_clock_s() - c->t0;
    return wst;
}

void sn_cuda_nvrtc_abandon(sn_nvrtc_child *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        reap(c);
    }
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

/* The record's next n bytes, or NULL when the record is shorter. */
static const char *take(const sn_nvrtc_child *c, size_t *at, uint64_t n) {
    if (n > c->len - *at) return NULL;
    const char *p = c->buf + *at;
    *at += n;
    return p;
}

sn_status sn_cuda_nvrtc_finish(sn_nvrtc_child *c, sn_cuda_module *out, sn_err *e) {
    *out = (sn_cuda_module){.arch = c->arch};
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    int wst = reap(c);
    const char *name = c->name;
    int arch = c->arch;
    record_head h;
    size_t at = 0;
    const char *head = take(c, &at, sizeof h), *msg = NULL, *log = NULL, *cubin = NULL;
    if (head) memcpy(&h, head, sizeof h);
    bool got = head && h.msg_len < sizeof e->msg && (msg = take(c, &at, h.msg_len)) &&
               (log = take(c, &at, h.log_len)) && (cubin = take(c, &at, h.cubin_len));
    sn_status st = SN_OK;
    if (WIFSIGNALED(wst)) {
        st = sn_fail(e, SN_ERR_DEVICE, "NVRTC crashed (signal %d, %s) compiling %s for sm_%d; "
                     "the training process is unharmed. This is a bug in NVRTC's embedded "
                     "ptxas or in the generated kernel: please report it with the kernel "
                     "(sinter train --dump-after fuse)", WTERMSIG(wst), strsignal(WTERMSIG(wst)),
                     name, arch);
    } else if (!got || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        st = sn_fail(e, SN_ERR_DEVICE, "compiling %s for sm_%d: the compiler process ended "
                     "without a result (exit status %d)", name, arch,
                     WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    } else {
        out->log = sn_malloc(h.log_len + 1, "the NVRTC log", e);
        out->cubin = sn_malloc(h.cubin_len + 1, "a compiled CUBIN", e);
        if (!out->log || !out->cubin) {
            st = SN_ERR_OOM;
        } else {
            memcpy(out->log, log, h.log_len);
            out->log[h.log_len] = '\0';
            memcpy(out->cubin, cubin, h.cubin_len);
            out->cubin_size = h.cubin_len;
        }
    }
    if (!st && h.status) st = sn_fail(e, (sn_status)h.status, "%.*s", (int)h.msg_len, msg);
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    if (st) return st;
    out->n_info = sn_ptxas_parse(out->log, NULL, 0);
    out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "the ptxas report", e);
    if (!out->info) return SN_ERR_OOM;
    sn_ptxas_parse(out->log, out->info, out->n_info);
    return SN_OK;
}

sn_status sn_cuda_nvrtc_compile(sn_cuda_api *a, const char *src, const char *name, int arch,
                                sn_cuda_module *out, sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    sn_nvrtc_child c;
    sn_status st = sn_cuda_nvrtc_start(a, src, name, arch, &c, e);
    if (st) return st;
    for (bool done = false; !done;) {
        if ((st = sn_cuda_nvrtc_read(&c, &done, e))) {
            sn_cuda_nvrtc_abandon(&c);
            return st;
        }
    }
    return sn_cuda_nvrtc_finish(&c, out, e);
}

/* compile.c: CUDA C to a CUBIN with the dlopen'd NVRTC, in a forked child process. NVRTC's
 * embedded ptxas has segfaulted on valid kernels; in the child that is an error message naming
 * the signal, not a dead training run. Convention: the child writes one record to a pipe
 * (status, message, log, cubin) and _exits; the parent trusts nothing it did not read whole. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_rt.h"

int sn_cuda_nvrtc_options(int arch, char gpu[48], const char **opts) {
    int n = 0;
    snprintf(gpu, 48, "--gpu-architecture=sm_%d", arch);
    opts[n++] = gpu;
#ifdef SN_CUDA_INCLUDE
    opts[n++] = "--include-path=" SN_CUDA_INCLUDE;
#endif
    opts[n++] = "--std=c++17";
    opts[n++] = "--ptxas-options=-v";
    return n;
}

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

/* In the child: compile, write the record, never return. */
static _Noreturn void child(sn_cuda_api *a, int fd, const char *src, const char *name, int arch) {
    sn_err e = {0};
    sn_status st = SN_OK;
    nvrtcProgram prog = NULL;
    char *log = NULL, *cubin = NULL;
    size_t log_len = 0, cubin_len = 0;
    const char *headers[] = {sn_cuda_prelude()}, *header_names[] = {SN_CUDA_PRELUDE_NAME};
    char gpu[48];
    const char *opts[8];
    int n_opts = sn_cuda_nvrtc_options(arch, gpu, opts);
    st = SN_CUDA_CHECK(a, &e, nvrtcCreateProgram, &prog, src, name, 1, headers, header_names);
    sn_status cst = st ? st : SN_CUDA_CHECK(a, &e, nvrtcCompileProgram, prog, n_opts, opts);
    if (!st && !SN_CUDA_CHECK(a, &e, nvrtcGetProgramLogSize, prog, &log_len) && log_len &&
        (log = malloc(log_len)) && SN_CUDA_CHECK(a, &e, nvrtcGetProgramLog, prog, log))
        log_len = 0;
    if (log_len && log[log_len - 1] == '\0') log_len--;
    st = cst;
    if (!st) st = SN_CUDA_CHECK(a, &e, nvrtcGetCUBINSize, prog, &cubin_len);
    if (!st && !(cubin = malloc(cubin_len ? cubin_len : 1))) st = sn_fail_oom(&e, cubin_len, "a CUBIN");
    if (!st) st = SN_CUDA_CHECK(a, &e, nvrtcGetCUBIN, prog, cubin);
    if (st) cubin_len = 0;
    if (cst)
        snprintf(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg), ", compiling %s for sm_%d "
                 "(generated CUDA C that does not compile is a bug in sinter's code generator; "
                 "please report it with the log)", name, arch);
    record_head h = {st, st ? strlen(e.msg) : 0, log ? log_len : 0, cubin_len};
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, e.msg, h.msg_len) &&
              write_all(fd, log ? log : "", h.log_len) && write_all(fd, cubin ? cubin : "", h.cubin_len);
    _exit(ok ? 0 : 3);
}

static bool read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

sn_status sn_cuda_nvrtc_compile(sn_cuda_api *a, const char *src, const char *name, int arch,
                                sn_cuda_module *out, sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    if (arch < 75)
        return sn_fail(e, SN_ERR_INVALID, "NVRTC: sm_%d is too old: sinter's CUDA kernels need "
                       "sm_75 (Turing) or newer", arch);
    sn_status st = sn_cuda_api_load(a, SN_LIB_NVRTC, e);
    if (st) return st;
    int fds[2];
    if (pipe(fds) != 0)
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
    record_head h;
    char *msg = NULL;
    bool got = read_all(fds[0], &h, sizeof h) && h.msg_len < sizeof e->msg &&
               h.log_len < ((uint64_t)1 << 32) && h.cubin_len < ((uint64_t)1 << 32);
    if (got) {
        msg = calloc(1, h.msg_len + 1);
        out->log = malloc(h.log_len + 1);
        out->cubin = malloc(h.cubin_len + 1);
        got = msg && out->log && out->cubin && read_all(fds[0], msg, h.msg_len) &&
              read_all(fds[0], out->log, h.log_len) && read_all(fds[0], out->cubin, h.cubin_len);
        if (out->log) out->log[got ? h.log_len : 0] = '\0';
        out->cubin_size = got ? h.cubin_len : 0;
    }
    close(fds[0]);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(wst)) {
        free(msg);
        return sn_fail(e, SN_ERR_DEVICE, "NVRTC crashed (signal %d, %s) compiling %s for sm_%d; "
                       "the training process is unharmed. This is a bug in NVRTC's embedded "
                       "ptxas or in the generated kernel: please report it with the kernel "
                       "(sinter train --dump-after fuse)", WTERMSIG(wst), strsignal(WTERMSIG(wst)),
                       name, arch);
    }
    if (!got || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        free(msg);
        return sn_fail(e, SN_ERR_DEVICE, "compiling %s for sm_%d: the compiler process ended "
                       "without a result (exit status %d)", name, arch,
                       WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    }
    if (h.status) {
        sn_fail(e, (sn_status)h.status, "%s\nNVRTC log:\n%s", msg,
                out->log[0] ? out->log : "(empty)\n");
        free(msg);
        return (sn_status)h.status;
    }
    free(msg);
    out->n_info = sn_ptxas_parse(out->log, NULL, 0);
    out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "the ptxas report", e);
    if (!out->info) return SN_ERR_OOM;
    sn_ptxas_parse(out->log, out->info, out->n_info);
    return SN_OK;
}

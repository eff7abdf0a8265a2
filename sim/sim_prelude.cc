// sim_prelude.cc: the text of "sinter_sim.h": what the prelude includes on the CPU, the CUDA
// names kernels use mapped onto the simulator (threadIdx, __syncthreads, shuffles, shared memory,
// mma.sync, ldmatrix, wgmma). Convention: the kernel's shared object calls back into the simulator
// through one table (sn_sim_api, mirrored in sim_internal.h; SN_SIM_ABI pins the two together).
#include "sim.h"

static const char header_text[] = R"SN_SIM(/* sinter_sim.h: the CPU side of the SIMT simulator,
 * included by sinter_prelude.h when the text is compiled by a host C++ compiler (sim/sim.h). */
#ifndef SINTER_SIM_H
#define SINTER_SIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>
#include <utility>

#define SN_SIM_ABI 8u

struct sn_dim3 {
    unsigned x, y, z;
};
/* The coordinates of the thread that runs, set by the scheduler on every switch. */
struct sn_sim_thread {
    sn_dim3 threadIdx, blockIdx, blockDim, gridDim;
};
/* The simulator's entry points (sim_internal.h has the same table). */
struct sn_sim_api {
    unsigned abi;
    void (*syncthreads)(int line);
    /* mode 0 idx, 1 up, 2 down, 3 xor */
    unsigned (*shfl)(int mode, unsigned mask, unsigned value, int arg, int width, int line);
    unsigned (*ballot)(unsigned mask, int pred, int line); /* also __syncwarp, any, all */
    void *(*shared_static)(const void *key, size_t bytes, const char *name, int line);
    void *(*shared_dynamic)(size_t *bytes, const char *name, int line);
    [[noreturn]] void (*out_of_bounds)(const char *name, long long index, long long count,
                                       int line);
    /* shape 0: m16n8k16 bf16, 1: m16n8k16 f16, 2: m16n8k8 f16 */
    void (*mma)(int shape, float *d, const unsigned *a, const unsigned *b, const float *c,
                int line);
    void (*ldmatrix)(int n, int trans, unsigned *r, const void *row, int line);
    unsigned (*activemask)(void);
    void (*cp_async)(void *dst, const void *src, unsigned src_bytes, int line);
    void (*cp_async_commit)(void);
    void (*cp_async_wait)(int newest_pending, int line); /* < 0: wait_all */
    void *(*map_pointer)(void *p); /* a pointer parameter's value as the kernel sees it */
    int (*syncthreads_count)(int pred, int line);
    unsigned (*smem_addr)(const void *p, int line); /* p's address in the shared window */
    void (*wgmma)(int form, float *d, const unsigned *a, unsigned long long desc_a,
                  unsigned long long desc_b, int scale_d, int line);
    void (*wgmma_fence)(int line);
    void (*wgmma_commit)(int line);
    void (*wgmma_wait)(int newest_pending, int line);
    void (*fence_proxy_async)(int line);
    void (*access)(const void *p, unsigned bytes, int write, const void *site);
};
static const sn_sim_api *sn_sim;
static thread_local const sn_sim_thread *sn_sim_self;
extern "C" unsigned sn_sim_bind(const sn_sim_api *api) {
    sn_sim = api;
    return SN_SIM_ABI;
}
extern "C" void sn_sim_enter(const sn_sim_thread *t) { sn_sim_self = t; }
/* Where the calling thread's sn_sim_self lives (a profile does not count reading it). */
extern "C" const void *sn_sim_tls(void) { return &sn_sim_self; }

#ifdef __SANITIZE_THREAD__
/* A profiled module (sn_sim_module_load_profiled): g++'s ThreadSanitizer instrumentation calls
 * these around every load and store; they report the access and its site (the code after the
 * call) to the simulator, and there is no ThreadSanitizer runtime. Before sn_sim_bind (the
 * module's static initialisers) they report nothing. */
#define SN_SIM_NOTSAN __attribute__((no_sanitize("thread"), noinline))
#define SN_SIM_ACCESS(name, bytes, write)                                                  \
    extern "C" SN_SIM_NOTSAN void name(void *p) {                                          \
        if (sn_sim) sn_sim->access(p, bytes, write, __builtin_return_address(0));          \
    }
SN_SIM_ACCESS(__tsan_read1, 1, 0)
SN_SIM_ACCESS(__tsan_read2, 2, 0)
SN_SIM_ACCESS(__tsan_read4, 4, 0)
SN_SIM_ACCESS(__tsan_read8, 8, 0)
SN_SIM_ACCESS(__tsan_read16, 16, 0)
SN_SIM_ACCESS(__tsan_write1, 1, 1)
SN_SIM_ACCESS(__tsan_write2, 2, 1)
SN_SIM_ACCESS(__tsan_write4, 4, 1)
SN_SIM_ACCESS(__tsan_write8, 8, 1)
SN_SIM_ACCESS(__tsan_write16, 16, 1)
SN_SIM_ACCESS(__tsan_unaligned_read2, 2, 0)
SN_SIM_ACCESS(__tsan_unaligned_read4, 4, 0)
SN_SIM_ACCESS(__tsan_unaligned_read8, 8, 0)
SN_SIM_ACCESS(__tsan_unaligned_read16, 16, 0)
SN_SIM_ACCESS(__tsan_unaligned_write2, 2, 1)
SN_SIM_ACCESS(__tsan_unaligned_write4, 4, 1)
SN_SIM_ACCESS(__tsan_unaligned_write8, 8, 1)
SN_SIM_ACCESS(__tsan_unaligned_write16, 16, 1)
extern "C" SN_SIM_NOTSAN void __tsan_read_range(void *p, long n) {
    if (sn_sim) sn_sim->access(p, (unsigned)n, 0, __builtin_return_address(0));
}
extern "C" SN_SIM_NOTSAN void __tsan_write_range(void *p, long n) {
    if (sn_sim) sn_sim->access(p, (unsigned)n, 1, __builtin_return_address(0));
}
extern "C" SN_SIM_NOTSAN void __tsan_init(void) {}
extern "C" SN_SIM_NOTSAN void __tsan_func_entry(void *) {}
extern "C" SN_SIM_NOTSAN void __tsan_func_exit(void *) {}
extern "C" SN_SIM_NOTSAN void __tsan_vptr_update(void *, void *) {}
#endif

#define threadIdx (sn_sim_self->threadIdx)
#define blockIdx (sn_sim_self->blockIdx)
#define blockDim (sn_sim_self->blockDim)
#define gridDim (sn_sim_self->gridDim)
#define warpSize 32

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
/* Shared memory is declared with SN_SHARED / SN_SHARED2 / SN_DYNAMIC_SHARED, never __shared__. */
#define __shared__ use_SN_SHARED_not___shared__

#define __syncthreads() sn_sim->syncthreads(__LINE__)
#define __syncthreads_count(pred) sn_sim->syncthreads_count((pred) != 0, __LINE__)
#define __syncthreads_or(pred) (sn_sim->syncthreads_count((pred) != 0, __LINE__) != 0)
#define __syncthreads_and(pred) \
    (sn_sim->syncthreads_count((pred) != 0, __LINE__) ==                      \
     (int)(blockDim.x * blockDim.y * blockDim.z))
#define __syncwarp(...) sn_syncwarp(__LINE__, ##__VA_ARGS__)
#define __shfl_sync(...) sn_shfl(__LINE__, 0, __VA_ARGS__)
#define __shfl_up_sync(...) sn_shfl(__LINE__, 1, __VA_ARGS__)
#define __shfl_down_sync(...) sn_shfl(__LINE__, 2, __VA_ARGS__)
#define __shfl_xor_sync(...) sn_shfl(__LINE__, 3, __VA_ARGS__)
#define __ballot_sync(mask, pred) sn_sim->ballot(mask, (pred) != 0, __LINE__)
#define __any_sync(mask, pred) (sn_sim->ballot(mask, (pred) != 0, __LINE__) != 0u)
#define __all_sync(mask, pred) sn_all(mask, (pred) != 0, __LINE__)
#define __activemask() sn_sim->activemask()

static inline void sn_syncwarp(int line, unsigned mask = 0xffffffffu) {
    sn_sim->ballot(mask, 1, line);
}
static inline int sn_all(unsigned mask, int pred, int line) {
    unsigned b = sn_sim->ballot(mask, pred, line);
    return (b & mask & sn_sim->activemask()) == (mask & sn_sim->activemask());
}
template <typename T>
static inline T sn_shfl(int line, int mode, unsigned mask, T v, int arg, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
    unsigned w[2] = {0, 0};
    memcpy(w, &v, sizeof v);
    for (unsigned i = 0; i < (sizeof(T) + 3) / 4; i++)
        w[i] = sn_sim->shfl(mode, mask, w[i], arg, width, line);
    T r;
    memcpy(&r, w, sizeof r);
    return r;
}

/* A bounds-checked view of shared memory: indexing checks, arithmetic narrows the view, and it
 * converts to a plain pointer (unchecked from then on) where one is needed. */
template <typename T>
struct sn_shared_ptr {
    T *p;
    long long n;
    const char *name;
    int line;
    template <typename I>
    T &operator[](I i) const {
        if ((long long)i < 0 || (long long)i >= n)
            sn_sim->out_of_bounds(name, (long long)i, n, line);
        return p[i];
    }
    T &operator*() const { return (*this)[0]; }
    template <typename I>
    sn_shared_ptr operator+(I k) const {
        if ((long long)k < 0 || (long long)k > n)
            sn_sim->out_of_bounds(name, (long long)k, n, line);
        return sn_shared_ptr{p + k, n - (long long)k, name, line};
    }
    operator T *() const { return p; }
};
template <typename T>
struct sn_shared_2d {
    T *p;
    long long rows, cols;
    const char *name;
    int line;
    template <typename I>
    sn_shared_ptr<T> operator[](I i) const {
        if ((long long)i < 0 || (long long)i >= rows)
            sn_sim->out_of_bounds(name, (long long)i, rows, line);
        return sn_shared_ptr<T>{p + (long long)i * cols, cols, name, line};
    }
    operator T *() const { return p; }
};
template <typename T>
static inline sn_shared_ptr<T> sn_shared_static(const void *key, long long n, const char *name,
                                                int line) {
    return sn_shared_ptr<T>{(T *)sn_sim->shared_static(key, sizeof(T) * (size_t)n, name, line), n,
                            name, line};
}
template <typename T>
static inline sn_shared_ptr<T> sn_shared_dynamic(const char *name, int line) {
    size_t bytes = 0;
    T *p = (T *)sn_sim->shared_dynamic(&bytes, name, line);
    return sn_shared_ptr<T>{p, (long long)(bytes / sizeof(T)), name, line};
}
#define SN_SHARED(T, name, count)                                                          \
    static const char sn_key_##name = 0;                                                   \
    const sn_shared_ptr<T> name = sn_shared_static<T>(&sn_key_##name, (count), #name, __LINE__)
#define SN_SHARED2(T, name, rows, cols)                                                    \
    static const char sn_key_##name = 0;                                                   \
    const sn_shared_2d<T> name = {                                                         \
        sn_shared_static<T>(&sn_key_##name, (long long)(rows) * (cols), #name, __LINE__).p, \
        (rows), (cols), #name, __LINE__}
#define SN_DYNAMIC_SHARED(T, name) \
    const sn_shared_ptr<T> name = sn_shared_dynamic<T>(#name, __LINE__)
/* An array carved from the dynamic shared memory at a byte offset (a multiple of 16), inside it. */
template <typename T>
static inline T *sn_shared_carve(const sn_shared_ptr<unsigned char> &base, long long offset,
                                 long long bytes, const char *name, int line) {
    if (offset < 0 || offset % 16 || offset + bytes > base.n)
        sn_sim->out_of_bounds(name, offset + bytes, base.n, line);
    return (T *)(base.p + offset);
}
#define SN_SHARED_AT(T, name, count, base, offset)                                         \
    const sn_shared_ptr<T> name = {                                                        \
        sn_shared_carve<T>((base), (offset), (long long)sizeof(T) * (count), #name, __LINE__), \
        (count), #name, __LINE__}
#define SN_SHARED2_AT(T, name, rows, cols, base, offset)                                   \
    const sn_shared_2d<T> name = {                                                         \
        sn_shared_carve<T>((base), (offset), (long long)sizeof(T) * (rows) * (cols), #name, \
                           __LINE__),                                                      \
        (rows), (cols), #name, __LINE__}

/* Tensor cores, emulated as warp collectives with the fragment layouts of the PTX ISA. */
/* (line: the caller's, for messages; the GPU forms take no such argument) */
static inline void sn_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2],
                                     const float c[4], int line = __builtin_LINE()) {
    sn_sim->mma(0, d, a, b, c, line);
}
static inline void sn_mma_f16_16816(float d[4], const unsigned a[4], const unsigned b[2],
                                    const float c[4], int line = __builtin_LINE()) {
    sn_sim->mma(1, d, a, b, c, line);
}
static inline void sn_mma_f16_1688(float d[4], const unsigned a[2], const unsigned b[1],
                                   const float c[4], int line = __builtin_LINE()) {
    sn_sim->mma(2, d, a, b, c, line);
}
#define SN_SIM_LDMATRIX(name, n, trans)                                                    \
    static inline void name(unsigned r[n], const void *row, int line = __builtin_LINE()) { \
        sn_sim->ldmatrix(n, trans, r, row, line);                                          \
    }
SN_SIM_LDMATRIX(sn_ldmatrix_x1, 1, 0)
SN_SIM_LDMATRIX(sn_ldmatrix_x2, 2, 0)
SN_SIM_LDMATRIX(sn_ldmatrix_x4, 4, 0)
SN_SIM_LDMATRIX(sn_ldmatrix_x1_trans, 1, 1)
SN_SIM_LDMATRIX(sn_ldmatrix_x2_trans, 2, 1)
SN_SIM_LDMATRIX(sn_ldmatrix_x4_trans, 4, 1)

/* Warpgroup MMA (sm_90): the 128 threads of a warpgroup meet at each wgmma; it is computed when
 * the thread waits for its group (sim_wgmma.cc). form: N | 512 f16 | 1024 A in registers |
 * 2048 B MN-major. */
static inline unsigned sn_smem_addr(const void *p, int line = __builtin_LINE()) {
    return sn_sim->smem_addr(p, line);
}
#define SN_SIM_WGMMA_SS(name, form)                                                        \
    static inline void name(float d[32], unsigned long long desc_a, unsigned long long desc_b, \
                            int scale_d, int line = __builtin_LINE()) {                    \
        sn_sim->wgmma(form, d, 0, desc_a, desc_b, scale_d, line);                          \
    }
#define SN_SIM_WGMMA_RS(name, form)                                                        \
    static inline void name(float d[32], const unsigned a[4], unsigned long long desc_b,   \
                            int scale_d, int line = __builtin_LINE()) {                    \
        sn_sim->wgmma(form | 1024, d, a, 0, desc_b, scale_d, line);                        \
    }
SN_SIM_WGMMA_SS(sn_wgmma_m64n64k16_bf16_ss, 64)
SN_SIM_WGMMA_SS(sn_wgmma_m64n64k16_bf16_ss_tb, 64 | 2048)
SN_SIM_WGMMA_SS(sn_wgmma_m64n64k16_f16_ss, 64 | 512)
SN_SIM_WGMMA_SS(sn_wgmma_m64n64k16_f16_ss_tb, 64 | 512 | 2048)
SN_SIM_WGMMA_RS(sn_wgmma_m64n64k16_bf16_rs, 64)
SN_SIM_WGMMA_RS(sn_wgmma_m64n64k16_bf16_rs_tb, 64 | 2048)
SN_SIM_WGMMA_RS(sn_wgmma_m64n64k16_f16_rs, 64 | 512)
SN_SIM_WGMMA_RS(sn_wgmma_m64n64k16_f16_rs_tb, 64 | 512 | 2048)
#define sn_wgmma_fence() sn_sim->wgmma_fence(__LINE__)
#define sn_wgmma_commit() sn_sim->wgmma_commit(__LINE__)
#define sn_wgmma_wait(n) sn_sim->wgmma_wait((n), __LINE__)
static inline void sn_wgmma_fence_operands(float *d, int n) {}
#define sn_fence_proxy_async() sn_sim->fence_proxy_async(__LINE__)

/* Asynchronous copies (sm_80): held back until the thread waits for them. */
#define sn_cp_async_16(dst, src) sn_sim->cp_async((dst), (src), 16, __LINE__)
#define sn_cp_async_16_zfill(dst, src, src_bytes) \
    sn_sim->cp_async((dst), (src), (src_bytes), __LINE__)
#define sn_cp_async_commit() sn_sim->cp_async_commit()
#define sn_cp_async_wait_group(n) sn_sim->cp_async_wait((n), __LINE__)
#define sn_cp_async_wait_all() sn_sim->cp_async_wait(-1, __LINE__)

/* Atomics: fibers are cooperative, so a read-modify-write is never interrupted. */
template <typename T>
static inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
/* sn_red_add_f32x2, _x4 (the GPU's vector reductions on sm_90): the adds never interrupted, as
 * one 8- or 16-byte read and write (p aligned so), so that a profile counts one access a lane as
 * the GPU's red.global.add.v2/v4 is (four atomicAdd before sm_90 are counted so too) */
typedef float sn_sim_f32x2 __attribute__((vector_size(8), aligned(8)));
typedef float sn_sim_f32x4 __attribute__((vector_size(16), aligned(16)));
static inline void sn_red_add_f32x2(float *p, float a, float b) {
    sn_sim_f32x2 *v = reinterpret_cast<sn_sim_f32x2 *>(p);
    *v = *v + sn_sim_f32x2{a, b};
}
static inline void sn_red_add_f32x4(float *p, float a, float b, float c, float d) {
    sn_sim_f32x4 *v = reinterpret_cast<sn_sim_f32x4 *>(p);
    *v = *v + sn_sim_f32x4{a, b, c, d};
}
template <typename T>
static inline T atomicSub(T *p, T v) { T old = *p; *p = old - v; return old; }
template <typename T>
static inline T atomicMax(T *p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T>
static inline T atomicMin(T *p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T>
static inline T atomicExch(T *p, T v) { T old = *p; *p = v; return old; }
template <typename T>
static inline T atomicCAS(T *p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

/* The intrinsics kernels use, in plain C++. */
template <typename T>
static inline T __ldg(const T *p) { return *p; }
#define __expf(x) expf(x) /* glibc declares its own __expf and __logf */
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

/* CUDA's vector types, aligned as on the GPU (16-byte loads and stores of float4). */
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}
/* Memory fences order nothing among cooperative fibers. */
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

/* Calls kernel f with the arguments the CUDA driver API would pass: params[i] points at the i-th
 * argument's value; pointer arguments go through the launch's map_pointer (sn_sim_opts). Its
 * reads are the launch's, not the kernel's: a profile does not count them. */
#ifdef __SANITIZE_THREAD__
#define SN_SIM_UNCOUNTED __attribute__((no_sanitize("thread")))
#else
#define SN_SIM_UNCOUNTED
#endif
template <typename A>
SN_SIM_UNCOUNTED static A sn_sim_arg(void *param) {
    A v;
    memcpy(&v, param, sizeof v);
    if constexpr (std::is_pointer<A>::value) v = (A)sn_sim->map_pointer((void *)v);
    return v;
}
template <typename... A, size_t... I>
SN_SIM_UNCOUNTED static void sn_sim_call(void (*f)(A...), void **params,
                                         std::index_sequence<I...>) {
    f(sn_sim_arg<typename std::remove_cv<A>::type>(params[I])...);
}
template <typename... A>
SN_SIM_UNCOUNTED static void sn_sim_call(void (*f)(A...), void **params) {
    sn_sim_call(f, params, std::index_sequence_for<A...>{});
}
#define SN_HOST_STUB(kernel)                                                               \
    extern "C" SN_SIM_UNCOUNTED void kernel##_host(void **params) { sn_sim_call(kernel, params); }

#endif /* SINTER_SIM_H */
)SN_SIM";

const char *sn_sim_header(void) { return header_text; }

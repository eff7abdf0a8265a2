/* test_sim_profile.c: the simulator's profile (sim/sim.h: sn_sim_profile), the instrument that
 * says without a GPU how a kernel uses memory: kernels whose counts are known by construction
 * (a coalesced copy, a strided one, shared reads with and without bank conflicts, a broadcast,
 * ldmatrix rows packed and 128 bytes apart, shuffles and barriers), and the embedding gradient
 * kernel the first GPU run found at 1.3% of DRAM bandwidth (ncu, ../shared/gpu/), as commit
 * 714476f generated it, flagged for reading the same ids again in every block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "harness.h"

static sn_sim_module *load(const char *src) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load_profiled(src, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_sim_profile: %s: skipping\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return m;
}

/* One launch of `kernel` profiled: its counts. */
static sn_sim_profile run(sn_sim_module *m, const char *kernel, unsigned blocks, unsigned threads,
                          void **params) {
    sn_sim_profile p = {0};
    sn_sim_opts o = sn_sim_defaults();
    o.profile = &p;
    sn_err e;
    unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
    ck_assert_msg(!sn_sim_launch(m, kernel, grid, block, 0, params, &o, &e), "%s", e.msg);
    ck_assert_int_eq(p.launches, 1);
    ck_assert_int_eq(p.blocks, blocks);
    return p;
}

static const char memory_src[] =
    "#include \"sinter_prelude.h\"\n"
    "extern \"C\" __global__ void copy(float *out, const float *in) {\n"
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    out[i] = in[i];\n"
    "}\n"
    "SN_HOST_STUB(copy)\n"
    "/* each lane its own 128-byte line */\n"
    "extern \"C\" __global__ void strided(float *out, const float *in) {\n"
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    out[i] = in[32 * i];\n"
    "}\n"
    "SN_HOST_STUB(strided)\n"
    "/* every block sums all of in (its thread 0 stores its first warp's part) */\n"
    "extern \"C\" __global__ void again(float *out, const float *in, int n) {\n"
    "    float s = 0.0f;\n"
    "    for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = s;\n"
    "}\n"
    "SN_HOST_STUB(again)\n"
    "/* one warp, 64 times: row reads of a 32 x 32 tile (lane l reads row l: every lane in one\n"
    " * bank), the same of a tile padded to 33 columns, and a broadcast */\n"
    "extern \"C\" __global__ void banks(float *out, int pad) {\n"
    "    SN_SHARED(float, tile, 32 * 33);\n"
    "    for (int i = threadIdx.x; i < 32 * 33; i += 32) tile[i] = (float)i;\n"
    "    __syncwarp();\n"
    "    float s = 0.0f;\n"
    "    for (int r = 0; r < 64; r++) {\n"
    "        const int c = 1 + r % 31;\n"
    "        if (pad == 0) s += tile[threadIdx.x * 32 + c];\n"
    "        else if (pad == 1) s += tile[threadIdx.x * 33 + c];\n"
    "        else s += tile[c];\n"
    "    }\n"
    "    out[threadIdx.x] = s;\n"
    "}\n"
    "SN_HOST_STUB(banks)\n"
    "/* ldmatrix.x4 of 32 rows 16 bytes apart, or 128 bytes apart (8 rows in the same banks) */\n"
    "extern \"C\" __global__ void rows(unsigned *out, int stride) {\n"
    "    SN_SHARED(sn_bf16, tile, 32 * 64);\n"
    "    for (int i = threadIdx.x; i < 32 * 64; i += 32) tile[i] = sn_f32_to_bf16(1.0f);\n"
    "    __syncwarp();\n"
    "    unsigned r[4];\n"
    "    sn_ldmatrix_x4(r, &tile[threadIdx.x * stride]);\n"
    "    out[threadIdx.x] = r[0] + r[1] + r[2] + r[3];\n"
    "}\n"
    "SN_HOST_STUB(rows)\n"
    "/* shuffles and barriers: 5 xor steps a warp, 2 barriers a block */\n"
    "extern \"C\" __global__ void sums(float *out) {\n"
    "    float v = (float)(threadIdx.x % 32);\n"
    "    __syncthreads();\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "    __syncthreads();\n"
    "    out[blockIdx.x * blockDim.x + threadIdx.x] = v;\n"
    "}\n"
    "SN_HOST_STUB(sums)\n";

static char *flags_of(const sn_sim_profile *p) {
    static char buf[512];
    sn_sim_profile_flags(p, buf, sizeof buf);
    return buf;
}

START_TEST(global_coalescing) {
    sn_sim_module *m = load(memory_src);
    if (!m) return;
    enum { N = 1024 };
    /* aligned as device memory is (cuMemAlloc: 256 bytes); calloc's 16 would make each
       128-byte request straddle 5 sectors */
    float *in = aligned_alloc(256, sizeof(float) * 32 * N);
    float *out = aligned_alloc(256, sizeof(float) * N);
    memset(in, 0, sizeof(float) * 32 * N);
    void *params[] = {&out, &in};
    sn_sim_profile p = run(m, "copy", N / 128, 128, params);
    /* 32 lanes x 4 bytes: a request is 4 whole sectors, each byte used once */
    ck_assert_int_eq(p.ld_requests, N / 32);
    ck_assert_int_eq(p.ld_sectors, N / 8);
    ck_assert_int_eq(p.ld_bytes, 4 * N);
    ck_assert_int_eq(p.st_requests, N / 32);
    ck_assert_int_eq(p.st_sectors, N / 8);
    ck_assert_int_eq(p.footprint_sectors, 2 * N / 8);
    ck_assert_msg(!*flags_of(&p), "a coalesced copy flagged: %s", flags_of(&p));

    p = run(m, "strided", N / 128, 128, params);
    ck_assert_int_eq(p.ld_requests, N / 32);
    ck_assert_int_eq(p.ld_sectors, N); /* a sector a lane, 4 of its 32 bytes used */
    ck_assert_int_eq(p.ld_bytes, 4 * N);
    ck_assert_msg(strstr(flags_of(&p), "uncoalesced loads: 12%"), "%s", flags_of(&p));
    ck_assert_msg(!strstr(flags_of(&p), "stores"), "%s", flags_of(&p));

    int n = N;
    void *again_params[] = {&out, &in, &n};
    p = run(m, "again", 4, 128, again_params);
    /* 4 blocks read the same N floats: 4 x N / 8 sectors of N / 8 distinct, and store 4 floats
       of one sector */
    ck_assert_int_eq(p.ld_sectors, 4 * N / 8);
    ck_assert_int_eq(p.st_requests, 4);
    ck_assert_int_eq(p.footprint_sectors, N / 8 + 1);
    ck_assert_msg(!*flags_of(&p), "4 blocks flagged (the threshold is 8 times): %s", flags_of(&p));
    p = run(m, "again", 32, 128, again_params);
    ck_assert_msg(strstr(flags_of(&p), "the same data again and again"), "%s", flags_of(&p));
    free(in);
    free(out);
    sn_sim_module_free(m);
}
END_TEST

START_TEST(shared_bank_conflicts) {
    sn_sim_module *m = load(memory_src);
    if (!m) return;
    float out[32];
    float *o = out;
    long long waves[3];
    for (int pad = 0; pad < 3; pad++) {
        void *params[] = {&o, &pad};
        sn_sim_profile p = run(m, "banks", 1, 32, params);
        /* the fill: 33 requests of 32 consecutive floats, one wavefront each; then the reads */
        ck_assert_int_eq(p.sh_requests, 33 + 64);
        ck_assert_int_eq(p.sh_ideal, 33 + 64);
        ck_assert_int_eq((p.sh_wavefronts - 33) % 64, 0);
        waves[pad] = (p.sh_wavefronts - 33) / 64;
        const char *f = flags_of(&p);
        if (pad == 0) ck_assert_msg(strstr(f, "shared bank conflicts"), "%s", f);
        else ck_assert_msg(!*f, "pad %d flagged: %s", pad, f);
    }
    ck_assert_int_eq(waves[0], 32); /* rows of 32 floats: every lane in one bank */
    ck_assert_int_eq(waves[1], 1);  /* 33: each lane its own bank */
    ck_assert_int_eq(waves[2], 1);  /* one word for all: a broadcast */

    unsigned u[32];
    unsigned *up = u;
    for (int stride = 8; stride <= 64; stride += 56) { /* bf16 elements: 16 or 128 bytes */
        void *params[] = {&up, &stride};
        sn_sim_profile p = run(m, "rows", 1, 32, params);
        ck_assert_int_eq(p.ldmatrix, 1);
        /* the fill (2048 bf16 as 64 requests of 64 bytes) and one ldmatrix.x4 of 512 bytes */
        long long fill = 64, x4 = p.sh_wavefronts - fill;
        ck_assert_int_eq(p.sh_requests, fill + 1);
        ck_assert_int_eq(x4, stride == 8 ? 4 : 32);
    }
    sn_sim_module_free(m);
}
END_TEST

START_TEST(instructions_by_class) {
    sn_sim_module *m = load(memory_src);
    if (!m) return;
    float *out = calloc(4 * 64, sizeof *out);
    void *params[] = {&out};
    sn_sim_profile p = run(m, "sums", 4, 64, params);
    ck_assert_int_eq(p.shfl, 4 * 2 * 5); /* 4 blocks of 2 warps, 5 steps */
    ck_assert_int_eq(p.barriers, 4 * 2);
    ck_assert_int_eq(p.mma + p.vote + p.ldmatrix + p.wgmma + p.cp_async, 0);
    for (int i = 0; i < 4 * 64; i++) ck_assert_float_eq(out[i], 496.0f); /* 0 + ... + 31 */
    free(out);

    /* a module not loaded for profiling is refused, not silently unprofiled */
    sn_sim_module *plain;
    sn_err e;
    ck_assert(!sn_sim_module_load(memory_src, &plain, &e));
    sn_sim_profile q = {0};
    sn_sim_opts o = sn_sim_defaults();
    o.profile = &q;
    unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    out = calloc(64, sizeof *out);
    void *pp[] = {&out};
    ck_assert_int_eq(sn_sim_launch(plain, "sums", grid, block, 0, pp, &o, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "sn_sim_module_load_profiled"), "%s", e.msg);
    free(out);
    sn_sim_module_free(plain);
    sn_sim_module_free(m);
}
END_TEST

/* The embedding gradient as commit 714476f generated it (codegen/cuda/cuda_gather.c's
 * embedding_bwd, N = 2048 ids, C = 32 columns, 256 threads; the text as emitted, constants
 * filled in): a block per table row scanning every id. On the H200 at gpt2's sizes it took
 * 2.83 ms at 1.3% of DRAM bandwidth; today's kernels bucket the ids first. */
static const char old_embedding_bwd_src[] =
    "#include \"sinter_prelude.h\"\n"
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "k9_embedding_bwd(float *__restrict__ out0, const int *__restrict__ in0,\n"
    "                 const float *__restrict__ in1) {\n"
    "const int v = blockIdx.x; /* the table row this block owns */\n"
    "float acc[1]; /* columns threadIdx.x + 256 q */\n"
    "#pragma unroll\n"
    "for (int q = 0; q < 1; q++) acc[q] = 0.0f;\n"
    "SN_SHARED(unsigned, hits, 8); /* a ballot of matches per warp */\n"
    "/* the ids in chunks, in order */\n"
    "for (int p0 = 0; p0 < 2048; p0 += 256) {\n"
    "const int p = p0 + threadIdx.x;\n"
    "const unsigned ballot = __ballot_sync(0xffffffffu, p < 2048 && in0[p] == v);\n"
    "if (threadIdx.x % 32 == 0) hits[threadIdx.x / 32] = ballot;\n"
    "__syncthreads();\n"
    "for (int w = 0; w < 8; w++) {\n"
    "for (unsigned m = hits[w]; m != 0; m &= m - 1) {\n"
    "const int src = (p0 + w * 32 + __ffs((int)m) - 1) * 32;\n"
    "#pragma unroll\n"
    "for (int q = 0; q < 1; q++) {\n"
    "const int j = threadIdx.x + 256 * q;\n"
    "if (j < 32) acc[q] += sn_load(in1[src + j]);\n"
    "}\n"
    "}\n"
    "}\n"
    "__syncthreads(); /* hits is rewritten by the next chunk */\n"
    "}\n"
    "#pragma unroll\n"
    "for (int q = 0; q < 1; q++) {\n"
    "const int j = threadIdx.x + 256 * q;\n"
    "if (j < 32) sn_store(&out0[(int)v * 32 + j], acc[q]);\n"
    "}\n"
    "}\n"
    "SN_HOST_STUB(k9_embedding_bwd)\n";

START_TEST(old_embedding_gradient_flagged) {
    sn_sim_module *m = load(old_embedding_bwd_src);
    if (!m) return;
    enum { V = 1024, N = 2048, C = 32 };
    int *ids = malloc(sizeof *ids * N);
    float *dy = malloc(sizeof *dy * N * C), *dw = malloc(sizeof *dw * V * C);
    for (int i = 0; i < N; i++) ids[i] = (i * 37) % V;
    for (int i = 0; i < N * C; i++) dy[i] = (float)(i % 7);
    void *params[] = {&dw, &ids, &dy};
    sn_sim_profile p = run(m, "k9_embedding_bwd", V, 256, params);
    for (int v = 0; v < V; v++) /* it is right, only slow: 2 ids a row */
        for (int j = 0; j < C; j++) {
            float s = 0;
            for (int i = 0; i < N; i++) s += ids[i] == v ? dy[i * C + j] : 0;
            ck_assert_float_eq(dw[v * C + j], s);
        }
    /* every block reads all 2048 ids: 256 sectors a block, V times over */
    ck_assert_int_ge(p.ld_sectors, (long long)V * N * 4 / 32);
    ck_assert_int_eq(p.barriers, (long long)V * 2 * (N / 256));
    ck_assert_int_eq(p.vote, (long long)V * 8 * (N / 256));
    ck_assert_msg(strstr(flags_of(&p), "the same data again and again"), "%s", flags_of(&p));
    printf("test_sim_profile: 714476f's embedding_bwd: %s (%lld sectors moved, %lld distinct, "
           "%lld ballots, %lld barriers)\n", flags_of(&p), p.ld_sectors + p.st_sectors,
           p.footprint_sectors, p.vote, p.barriers);
    free(ids);
    free(dy);
    free(dw);
    sn_sim_module_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim_profile");
    TCase *tc = tcase_create("profile");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, global_coalescing);
    tcase_add_test(tc, shared_bank_conflicts);
    tcase_add_test(tc, instructions_by_class);
    tcase_add_test(tc, old_embedding_gradient_flagged);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}

/* fuzz_compile.c: libFuzzer harness for the compiler's passes on graphs the IR parser accepts:
 * a small graph that parses and verifies is made into a program (sn_pipeline_kernels: the graph
 * passes, fuse, the kernel contract, memplan) for the host CPU and for a CUDA sm_90 target (the
 * passes only that target takes: siblings, dk and dv in parts, the decode split), and the CUDA
 * program's kernels rendered as CUDA C (text only: no NVRTC, no LLVM). A refusal must come with a
 * message; ASan sees any write past a pass's or an emitter's arrays (the fuse pass's values,
 * session 21). */
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "ir/ir.h"
#include "passes/pipeline.h"
#include "fuzz_util.h"

/* Graphs this small compile in milliseconds. */
enum { FUZZ_MAX_NODES = 256, FUZZ_MAX_NUMEL = 1 << 20 };

static bool small_enough(const sn_graph *g) {
    if (g->n_nodes > FUZZ_MAX_NODES) return false;
    for (int i = 0; i < g->n_nodes; i++)
        if (sn_numel(g->nodes[i]) > FUZZ_MAX_NUMEL) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    sn_graph *g = NULL;
    sn_err e = {0};
    sn_status s = sn_graph_parse(text, &g, &e);
    free(text);
    if (s) return 0;
    if (sn_verify(g, &e) != SN_OK || !small_enough(g)) {
        sn_graph_free(g);
        return 0;
    }
    sn_target targets[2] = {sn_target_cpu(), sn_target_cuda(90)};
    for (int t = 0; t < 2; t++) {
        sn_program *p = NULL;
        sn_pipeline_opts o = {.target = &targets[t]};
        e = (sn_err){0};
        s = sn_pipeline_kernels(g, &o, &p, NULL, &e);
        FUZZ_CHECK(!s || e.msg[0], "the pipeline failed (status %d) with no message", s);
        if (!s && targets[t].kind == SN_TARGET_CUDA) {
            sn_cuda_source cs;
            e = (sn_err){0};
            s = sn_cuda_render((const sn_kernel *const *)p->kernels, p->n_kernels, &targets[t], &cs, &e);
            FUZZ_CHECK(!s || e.msg[0], "the CUDA renderer failed (status %d) with no message", s);
            if (!s) sn_cuda_source_free(&cs);
        }
        sn_program_free(p);
    }
    sn_graph_free(g);
    return 0;
}

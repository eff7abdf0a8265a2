/* cuda_row_sums.c: the row ops that sum over every row (cross-entropy's mean loss, the norm
 * weight gradients with the column sums that joined them) as kernel.h's two kernels: PARTIAL, a
 * block per chunk of rows (a warp per row, the warps' sums added in warp order) or per chunk
 * and 32 columns, writes the chunk's partial sums; FINISH, a thread per column, adds the
 * chunks' partials in chunk order. Convention: every result is deterministic (fixed orders, no
 * atomics); the passes over a row are cuda_row.c's. */
#include <stdio.h>

#include "cuda_row.h"
#include "program/pointwise.h"

/* ---- one block over every row: a warp per row ---- */

/* for (r = first + warp; r < end; r += warps) { const ix row = r * C; (first and end: C) */
static void open_rows(row *w, const char *first, const char *end) {
    E("const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    E("for (%s r = %s + warp; r < %s; r += %u) {", w->ix, first, end, w->threads / 32);
    E("const %s row = r * %lld;", w->ix, (long long)w->C);
    sn_cu_row_coords(w);
}

/* The loop over this warp's rows of the chunk [r0, r1) in order, r = r0 + warp + warps q, two
 * braces to close: as many steps as a whole chunk gives a warp, unrolled by 4, each row tested
 * against r1 (the last chunk may be short), so that the compiler issues 4 rows' loads together
 * (a loop to r1 waited for each row's load before the next: the H200's ncu found the column
 * sums latency-bound). Unrolled whole (8 rows of 8 columns' loads at once), gpt2's fp16 norm
 * backward pair on sm_80 spilled under NVRTC (64 registers; 79 and none so). */
static void open_warp_rows(row *w) {
    unsigned warps = w->threads / 32;
    int64_t cr = sn_sum_chunk_rows(w->k), steps = (cr + warps - 1) / warps;
    E("#pragma unroll 4 /* 4 of the chunk's rows a warp takes: their loads issued together, added in order */");
    E("for (int q = 0; q < %lld; q++) {", (long long)steps);
    E("const %s r = r0 + warp + %u * q;", w->ix, warps);
    E("if (r < r1) {");
}

/* (logits, targets) -> over the chunk's rows [r0, r1) whose target is not ignore_index: the sum
 * of lse - logit[t] and their count, as two f64 in the chunk's partial sums (the mean is
 * FINISH's) */
void sn_cu_row_cross_entropy(row *w) {
    char x[64], t[64], e[160];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, t, sizeof t);
    int ign = w->n->a.ignore_index;
    E("double loss = 0.0; /* this warp's rows of the chunk, summed in order */");
    E("int count = 0;");
    open_rows(w, "r0", "r1");
    E("const int target = %s;", t);
    E("if (target == %d) continue; /* the same for the warp's lanes */", ign);
    E("count++;");
    E("float mx = -SN_INF;");
    sn_cu_row_open_pass(w, "lane", w->Vr, 32, STORES_NONE);
    E("mx = fmaxf(mx, %s);", x);
    sn_cu_row_close_pass(w);
    E("mx = sn_warp_max(mx);");
    sn_cu_row_exp_base(w, "mx");
    E("float se = 0.0f;");
    sn_cu_row_open_pass(w, "lane", w->Vr, 32, STORES_NONE);
    E("se += %s;", sn_cu_row_exp_sub(w, x, "mx", e, sizeof e));
    sn_cu_row_close_pass(w);
    E("const float lse = mx + logf(sn_warp_sum(se));");
    E("const bool ok = target >= 0 && target < %lld;", (long long)w->Vr);
    E("float logit_t;");
    E("{");
    E("const int j = ok ? target : 0;");
    sn_cu_row_element(w);
    E("logit_t = %s;", x);
    E("}");
    E("loss += (double)(ok ? lse - logit_t : (SN_INF - SN_INF));");
    E("}");
    E("SN_SHARED(double, warp_loss, 32);");
    E("SN_SHARED(int, warp_count, 32);");
    E("if (lane == 0) {");
    E("warp_loss[warp] = loss;");
    E("warp_count[warp] = count;");
    E("}");
    E("__syncthreads();");
    E("if (threadIdx.x == 0) {");
    E("double sum = 0.0;");
    E("long long rows = 0;");
    E("for (int v = 0; v < %u; v++) {", w->threads / 32);
    E("sum += warp_loss[v];");
    E("rows += warp_count[v];");
    E("}");
    E("double *chunk_sums = (double *)part; /* the chunk's loss sum and counted rows */");
    E("chunk_sums[0] = sum;");
    E("chunk_sums[1] = (double)rows;");
    E("}");
}

int64_t sn_cu_row_steps(const row *w) { return (w->C + 32 * w->lanes - 1) / (32 * w->lanes); }

/* (x, dy) -> the partial sum over this block's chunk of rows [r0, r1) of dy xhat, into the
 * chunk's row of the partial sums (C columns from `part`); each lane owns the columns
 * lanes * lane + 32 lanes q + l (l < lanes), the warps' sums added in warp order */
void sn_cu_row_norm_bwd_w(row *w, bool rms) {
    char x[64], dy[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, dy, sizeof dy);
    int V = w->lanes;
    int64_t nq = sn_cu_row_steps(w); /* steps of 32 lanes x V columns */
    E("float acc[%lld];", (long long)(nq * V));
    E("#pragma unroll");
    E("for (int q = 0; q < %lld; q++) acc[q] = 0.0f;", (long long)(nq * V));
    open_rows(w, "r0", "r1");
    const char *js = "lane";
    if (!rms) {
        E("float sx = 0.0f;");
        sn_cu_row_open_pass(w, js, w->C, 32, STORES_PROLOGUE);
        E("sx += %s;", x);
        sn_cu_row_store_prologue(w);
        sn_cu_row_close_pass(w);
        E("const float mean = sn_warp_sum(sx) / %lld.0f;", (long long)w->C);
    }
    E("float sq = 0.0f;");
    sn_cu_row_open_pass(w, js, w->C, 32, rms ? STORES_PROLOGUE : STORES_NONE);
    E(rms ? "sq += %s * %s;" : "sq += (%s - mean) * (%s - mean);", x, x);
    if (rms) sn_cu_row_store_prologue(w);
    sn_cu_row_close_pass(w);
    char eps[32];
    E("const float rstd = 1.0f / sqrtf(sn_warp_sum(sq) / %lld.0f + %s);", (long long)w->C,
      sn_cu_float_lit(w->n->a.f, eps, sizeof eps));
    E("#pragma unroll");
    E("for (int q = 0; q < %lld; q++) {", (long long)nq);
    if (V == 1) {
        E("const int j = lane + 32 * q;");
        E("if (j < %lld) {", (long long)w->C);
        sn_cu_row_element(w);
        E(rms ? "acc[q] += %s * (%s * rstd);" : "acc[q] += %s * ((%s - mean) * rstd);", dy, x);
        E("}");
    } else { /* C divides by V: a step's vector is inside the row or past its end */
        E("const int j0 = %d * lane + %d * q;", V, 32 * V);
        E("if (j0 < %lld) {", (long long)w->C);
        sn_cu_row_vector_loads(w);
        E("#pragma unroll");
        E("for (int l = 0; l < %d; l++) {", V);
        E("const int j = j0 + l;");
        w->vec = true;
        sn_cu_row_element(w);
        E(rms ? "acc[%d * q + l] += %s * (%s * rstd);" : "acc[%d * q + l] += %s * ((%s - mean) * rstd);",
          V, dy, x);
        w->vec = false;
        E("}");
        E("}");
    }
    E("}");
    E("}");
    E("SN_SHARED(float, column_sum, %lld);", (long long)w->C);
    E("/* the warps' sums added in warp order */");
    E("for (int v = 0; v < %u; v++) {", w->threads / 32);
    E("if (warp == v) {");
    E("#pragma unroll");
    E("for (int q = 0; q < %lld; q++) {", (long long)(nq * V));
    if (V == 1) E("const int j = lane + 32 * q;");
    else E("const int j = %d * lane + %d * (q / %d) + q %% %d; /* acc[q]'s column */", V, 32 * V, V, V);
    E("if (j < %lld) column_sum[j] = v == 0 ? acc[q] : column_sum[j] + acc[q];", (long long)w->C);
    E("}");
    E("}");
    E("__syncthreads();");
    E("}");
    E("for (int j = threadIdx.x; j < %lld; j += %u) part[j] = column_sum[j];", (long long)w->C,
      w->threads);
}

/* The norm backward pair's head: chunk blockIdx.x of sn_sum_chunk_rows rows, its partial sums
 * (`part`), the warps' dy xhat sums dw[warp][] zeroed, and the loop over this warp's rows opened
 * (the order of sn_cu_row_norm_bwd_w's: warp w takes rows r0 + w, r0 + w + warps ..). Lane i
 * adds column j (step q = j / 32 lanes of its pass, lane i of the step, l = j % lanes) in slot
 * (lanes q + l) P + i, P the pitch (sn_cu_row_pair_pitch): its own slots alone (no barrier),
 * a warp's 32 lanes on 32 banks. */
void sn_cu_row_pair_open(row *w) {
    const sn_kernel *k = w->k;
    int64_t slots = sn_cu_row_steps(w) * w->lanes * sn_cu_row_pair_pitch(w);
    int cr = (int)sn_sum_chunk_rows(k);
    E("/* partial sums: %lld chunks of %d rows, a block each */", (long long)sn_sum_chunks(k), cr);
    E("const %s chunk = blockIdx.x;", w->ix);
    E("const %s r0 = chunk * %d, r1 = r0 + %d < %lld ? r0 + %d : %lld;", w->ix, cr, cr,
      (long long)w->R, cr, (long long)w->R);
    E("float *part = scratch + chunk * %lld; /* this chunk's partial sums */", (long long)sn_sum_width(k));
    E("const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    E("SN_SHARED2(float, dw, %u, %lld); /* each warp's sums of dy xhat over its rows */",
      w->threads / 32, (long long)slots);
    E("for (int s = lane; s < %lld; s += 32) dw[warp][s] = 0.0f;", (long long)slots);
    E("for (%s r = r0 + warp; r < r1; r += %u) {", w->ix, w->threads / 32);
    E("const %s row = r * %lld;", w->ix, (long long)w->C);
    sn_cu_row_coords(w);
}

enum { PAIR_TILES = 8 }; /* column-sum tiles the pair's tail takes at a time */

/* A group of the warps' dy xhat sums (the columns a pass's step gives its lanes at one l) is
 * P floats apart: 32 + 32 / lanes where the shared memory allows (the tail's threads read 32
 * consecutive columns a warp: 32 / lanes groups, lanes of them each, on 32 banks with this
 * pitch; with 32 they took 4 banks at 8 lanes: the simulator's profile of gpt2's pairs, 1.5-1.9
 * wavefronts a request where 1 would do, 2026-11-29), else 32. The pitch is a constant in the
 * adds' addresses (an XOR of the lane there cost gpt2's f32-dy pair 16 bytes of spills). */
int sn_cu_row_pair_pitch(const row *w) {
    int V = w->lanes, P = V > 1 ? 32 + 32 / V : 32;
    int64_t warps = w->threads / 32, groups = sn_cu_row_steps(w) * V;
    int64_t bytes = 4 * warps * (groups * P + PAIR_TILES * SN_COLSUM_TILE);
    return bytes <= (48 << 10) - 1024 ? P : 32; /* within the static 48 KiB, some left over */
}

/* The pair's tail: the loop over the warp's rows closed; the warps' dw added in warp order into
 * the chunk's partial sums; then every column-sum tile over the chunk's rows, which the block's
 * warps stored (the barrier makes them visible), as colsums() adds them: a lane per column, the
 * warps down the rows, their sums added in warp order, PAIR_TILES tiles at a time. */
void sn_cu_row_pair_close(row *w) {
    const sn_kernel *k = w->k;
    unsigned warps = w->threads / 32;
    int V = w->lanes;
    E("}");
    E("__syncthreads(); /* the warps' sums and the chunk's rows stored */");
    E("/* column j's sums added in warp order */");
    E("for (int j = threadIdx.x; j < %lld; j += %u) {", (long long)w->C, w->threads);
    if (V == 1) E("const int s = j;");
    else E("const int s = (%d * (j / %d) + j %% %d) * %d + j %% %d / %d; /* its slot */", V, 32 * V, V,
           sn_cu_row_pair_pitch(w), 32 * V, V);
    E("float sum = dw[0][s];");
    E("for (int v = 1; v < %u; v++) sum += dw[v][s];", warps);
    E("part[j] = sum;");
    E("}");
    E("SN_SHARED2(float, colsum_part, %u, %d);", warps, PAIR_TILES * SN_COLSUM_TILE);
    int64_t at = w->C;
    char src[16];
    for (int o = 1; o <= k->row.n_colsum; o++) {
        int64_t C = sn_numel(k->args[o]), tiles = (C + SN_COLSUM_TILE - 1) / SN_COLSUM_TILE;
        sn_cu_arg_name(k, k->row.colsum_src[o], src, sizeof src);
        E("/* column sum %d: %lld columns of %s into the partial sums' [%lld, %lld) */", o,
          (long long)C, src, (long long)at, (long long)(at + C));
        E("for (int t0 = 0; t0 < %lld; t0 += %d) {", (long long)tiles, PAIR_TILES);
        E("float acc[%d];", PAIR_TILES);
        E("#pragma unroll");
        E("for (int u = 0; u < %d; u++) acc[u] = 0.0f;", PAIR_TILES);
        open_warp_rows(w);
        E("#pragma unroll");
        E("for (int u = 0; u < %d; u++) {", PAIR_TILES);
        E("const %s c = (%s)(t0 + u) * %d + lane;", w->ix, w->ix, SN_COLSUM_TILE);
        E("if (c < %lld) acc[u] += sn_load(%s[r * %lld + c]);", (long long)C, src, (long long)C);
        E("}");
        E("}");
        E("}");
        E("#pragma unroll");
        E("for (int u = 0; u < %d; u++) colsum_part[warp][u * %d + lane] = acc[u];", PAIR_TILES,
          SN_COLSUM_TILE);
        E("__syncthreads();");
        E("if (warp == 0) {");
        E("#pragma unroll");
        E("for (int u = 0; u < %d; u++) {", PAIR_TILES);
        E("const %s c = (%s)(t0 + u) * %d + lane;", w->ix, w->ix, SN_COLSUM_TILE);
        E("for (int v = 1; v < %u; v++) acc[u] += colsum_part[v][u * %d + lane];", warps, SN_COLSUM_TILE);
        E("if (c < %lld) part[%lld + c] = acc[u];", (long long)C, (long long)at);
        E("}");
        E("}");
        E("__syncthreads(); /* warp 0 read colsum_part before the next tiles' sums go there */");
        E("}");
        at += C;
    }
}

/* The column sums that joined a norm weight-gradient kernel (kernel.h: n_colsum): part 1 + t
 * of a chunk sums tile t over the chunk's rows [r0, r1) into the chunk's partial sums, a lane
 * per column and the warps down the rows, the warps' sums added in warp order through shared
 * memory; part 0 goes on to the row op. */
_Static_assert(SN_COLSUM_TILE == 32, "a column-sum tile is a warp's width");
static void colsums(row *w) {
    const sn_kernel *k = w->k;
    unsigned warps = w->threads / 32;
    char src[16];
    E("/* column sums: %d columns a part after the first */", SN_COLSUM_TILE);
    E("if (chunk_part > 0) {");
    E("const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32, t = chunk_part - 1;");
    E("%s C, c, at; /* columns, this lane's, where the output starts in `part` */", w->ix);
    E("float acc = 0.0f;");
    int64_t first = 0, at = w->C;
    for (int o = 1; o <= k->row.n_colsum; o++) { /* each source its own loop: its own element type */
        int64_t C = sn_numel(k->args[o]), tiles = (C + SN_COLSUM_TILE - 1) / SN_COLSUM_TILE;
        sn_cu_arg_name(w->k, k->row.colsum_src[o], src, sizeof src);
        const char *cond = o == k->row.n_colsum ? "" : "if (t < %lld) ";
        char c[48];
        snprintf(c, sizeof c, cond, (long long)(first + tiles));
        E("%s%s{", o > 1 ? "else " : "", c);
        E("C = %lld; c = (t - %lld) * %d + lane; at = %lld;", (long long)C, (long long)first,
          SN_COLSUM_TILE, (long long)at);
        E("if (c < C) {");
        open_warp_rows(w);
        E("acc += sn_load(%s[r * C + c]);", src);
        E("}");
        E("}");
        E("}");
        E("}");
        first += tiles;
        at += C;
    }
    E("SN_SHARED2(float, colsum_part, %u, %d);", warps, SN_COLSUM_TILE);
    E("colsum_part[warp][lane] = acc;");
    E("__syncthreads();");
    E("if (warp == 0 && c < C) {");
    E("for (int v = 1; v < %u; v++) acc += colsum_part[v][lane];", warps);
    E("part[at + c] = acc;");
    E("}");
    E("return;");
    E("}");
}

/* A PARTIAL kernel's head: its block's chunk of rows [r0, r1) and part (chunk_part), where the
 * chunk's partial sums go (`part`), and the column-sum parts (those return). */
void sn_cu_row_partial_open(row *w) {
    const sn_kernel *k = w->k;
    int64_t parts = 1 + sn_colsum_tiles(k);
    int cr = (int)sn_sum_chunk_rows(k);
    E("/* partial sums: %lld chunks of %d rows, %lld part%s each */", (long long)sn_sum_chunks(k),
      cr, (long long)parts, parts > 1 ? "s" : "");
    E("const %s chunk = blockIdx.x / %lld;", w->ix, (long long)parts);
    E("const int chunk_part = blockIdx.x %% %lld;", (long long)parts);
    E("const %s r0 = chunk * %d, r1 = r0 + %d < %lld ? r0 + %d : %lld;", w->ix, cr, cr,
      (long long)w->R, cr, (long long)w->R);
    E("float *part = scratch + chunk * %lld; /* this chunk's partial sums */", (long long)sn_sum_width(k));
    if (k->row.n_colsum) colsums(w);
}

/* kernel.h's FINISH: column c of the partial sums, added over the chunks in chunk order, into
 * the output that holds it. tail: a joined FINISH's device function (not the classifier's),
 * block `block` of d->block[0] threads. */
void sn_cu_row_finish(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname,
                      bool tail) {
    int64_t P = sn_sum_chunks(k), W = sn_sum_width(k);
    const char *ix = sn_cu_index_type(P * W + 1024 * 1024);
    char a[16];
    if (tail) sn_cu_tail_signature(t, k, fname); /* a device function of `block` (cuda_tail.c) */
    else sn_cu_emit_signature(t, k, fname, (int)d->block[0]);
    if (k->anchor2) { /* the classifier's: a row's loss and count a partial (kernel.h) */
        unsigned T = d->block[0];
        int64_t chunks = (P + SN_SUM_CHUNK - 1) / SN_SUM_CHUNK;
        sn_cu_emitf(t, "/* cross_entropy: the mean loss from %lld rows' losses and counts: each thread "
                    "adds a chunk of %d rows in order, thread 0 the chunks' sums in order */",
                    (long long)P, SN_SUM_CHUNK);
        sn_cu_emitf(t, "const double *row_sums = (const double *)scratch;");
        sn_cu_emitf(t, "SN_SHARED(double, chunk_loss, %u);", T);
        sn_cu_emitf(t, "SN_SHARED(double, chunk_rows, %u);", T);
        sn_cu_emitf(t, "double sum = 0.0, rows = 0.0; /* thread 0's */");
        sn_cu_emitf(t, "for (%s c0 = 0; c0 < %lld; c0 += %u) {", ix, (long long)chunks, T);
        sn_cu_emitf(t, "const %s c = c0 + threadIdx.x;", ix);
        sn_cu_emitf(t, "double cl = 0.0, cr = 0.0;");
        sn_cu_emitf(t, "#pragma unroll 16 /* the chunk's loads issued 16 at a time, added in order "
                       "(a loop to the chunk's end waited for each: 33 us on the H200) */");
        sn_cu_emitf(t, "for (int i = 0; i < %d; i++) {", SN_SUM_CHUNK);
        sn_cu_emitf(t, "const %s r = c * %d + i;", ix, SN_SUM_CHUNK);
        sn_cu_emitf(t, "if (c < %lld && r < %lld) {", (long long)chunks, (long long)P);
        sn_cu_emitf(t, "cl += row_sums[2 * r];");
        sn_cu_emitf(t, "cr += row_sums[2 * r + 1];");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "chunk_loss[threadIdx.x] = cl;");
        sn_cu_emitf(t, "chunk_rows[threadIdx.x] = cr;");
        sn_cu_emitf(t, "__syncthreads();");
        sn_cu_emitf(t, "if (threadIdx.x == 0)");
        sn_cu_emitf(t, "for (int v = 0; v < %u && c0 + v < %lld; v++) {", T, (long long)chunks);
        sn_cu_emitf(t, "sum += chunk_loss[v];");
        sn_cu_emitf(t, "rows += chunk_rows[v];");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "__syncthreads();");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "if (threadIdx.x == 0) sn_store(&%s[0], rows > 0.0 ? (float)(sum / rows) : 0.0f);",
                    sn_cu_arg_name(k, 0, a, sizeof a));
        sn_cu_emitf(t, "}");
        return;
    }
    if (k->anchor->op == SN_OP_CROSS_ENTROPY) { /* the mean loss from the chunks' sums, in order */
        sn_cu_emitf(t, "/* cross_entropy: the mean loss from %lld chunks' sums and counts */", (long long)P);
        sn_cu_emitf(t, "if (blockIdx.x > 0 || threadIdx.x > 0) return;");
        sn_cu_emitf(t, "const double *chunk_sums = (const double *)scratch;");
        sn_cu_emitf(t, "double sum = 0.0, rows = 0.0;");
        sn_cu_emitf(t, "for (int p = 0; p < %lld; p++) {", (long long)P);
        sn_cu_emitf(t, "sum += chunk_sums[2 * p];");
        sn_cu_emitf(t, "rows += chunk_sums[2 * p + 1];");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_store(&%s[0], rows > 0.0 ? (float)(sum / rows) : 0.0f);",
                    sn_cu_arg_name(k, 0, a, sizeof a));
        sn_cu_emitf(t, "}");
        return;
    }
    sn_cu_emitf(t, "/* %s: the sums of %lld chunks of partial sums, %lld columns */",
                sn_op_name(k->anchor->op), (long long)P, (long long)W);
    sn_cu_emitf(t, "const %s c = (%s)%s * %u + threadIdx.x;", ix, ix, tail ? "block" : "blockIdx.x",
                d->block[0]);
    sn_cu_emitf(t, "if (c >= %lld) return;", (long long)W);
    sn_cu_emitf(t, "float sum = 0.0f;");
    sn_cu_emitf(t, "for (%s p = 0; p < %lld; p++) sum += scratch[p * %lld + c];", ix, (long long)P,
                (long long)W);
    int64_t at = 0;
    for (int o = 0; o < k->n_out; o++) {
        int64_t C = sn_numel(k->args[o]);
        sn_cu_emitf(t, "%sif (c < %lld) sn_store(&%s[c - %lld], sum);", o ? "else " : "",
                    (long long)(at + C), sn_cu_arg_name(k, o, a, sizeof a), (long long)at);
        at += C;
    }
    sn_cu_emitf(t, "}");
}


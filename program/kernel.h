/* kernel.h: the device-neutral description of one kernel, made by the fuse pass and read by
 * every code generator (LLVM IR for CPUs, CUDA C for NVRTC) and by the executor.
 * Convention: a kernel reads and writes only materialised values ("args"), each a contiguous
 * row-major buffer, read through accesses where views fold; outputs come first in args, then
 * inputs. Everything else a kernel needs
 * (ops, attributes, shapes) is read from the graph nodes it points to. */
#ifndef SN_KERNEL_H
#define SN_KERNEL_H

#include "ir/ir.h"

typedef enum {
    SN_KER_POINTWISE, /* out[i] = expression over accesses, i over `shape` */
    SN_KER_ROW,       /* anchor is a row op (softmax, norms, causal mask, cross-entropy, bwds) */
    SN_KER_REDUCE,    /* anchor is sum/mean/max over one axis */
    SN_KER_GEMM,      /* anchor is a matmul: a GEMM library call, not generated; args: y
                         (and an aux), A, B and what its epilogue (below) reads */
    SN_KER_ATTENTION, /* anchor is an attention op (forward: lse + o; backward: dq, dk, dv) */
    SN_KER_GATHER,    /* anchor is embedding (gather) or embedding_bwd (scatter-add) */
    SN_KER_DEQUANT,   /* anchor is dequant_nf4: args y, packed (ir/nf4.h); an item per block of
                         64 weights */
    SN_KER_GEMV,      /* anchor is a matmul of few rows whose weight it reads from its
                         source, NF4 bytes or a 16-bit value (below): args y, x, source; an
                         item per 64 columns of y */
    SN_KER_THIN,      /* anchor is a matmul of many rows and few columns or a short
                         contraction (a LoRA adapter's x A, dy B^T, h B, dh A^T; below): args
                         y, x, W; an item per sn_thin rows */
    /* the optimizer step over the flat parameter range (made by the trainer, not fuse; below) */
    SN_KER_GRAD_ACC,  /* sum[i] += g[i] */
    SN_KER_SQNORM,    /* partial[b] = sum over block b of (g[i] * inv_micro)^2 */
    SN_KER_CLIP,      /* norm = sqrt(sum of partials); scale = clip / norm when norm > clip */
    SN_KER_ADAMW,     /* p, m, v updated from g (weight decay on [0, flat_decay)); with
                         flat_low, the weights' 16-bit copies written from the new p */
    SN_KER_KIND_COUNT
} sn_kernel_kind;

const char *sn_kernel_kind_name(sn_kernel_kind k);

/* What a GEMM kernel does with its f32 product v (M, N) = A @ B before storing it (cuBLASLt's
 * epilogues, evaluated in f32; rnd() rounds to y's dtype, exact when y is f32). Args: the
 * outputs (y; GELU_AUX_BIAS: y, aux), A, B, then what the epilogue reads (a bias; DGELU's
 * aux), then, with accum (below), c:
 *   NONE  args y, A, B:       y = v (y is the matmul), or y = rnd(v) where y is the matmul's
 *         one reader, its cast to A's and B's 16-bit dtype
 *   BIAS  args y, A, B, bias: y = rnd(v + bias), bias an (N) vector of y's dtype; y is the
 *         add node the matmul fed (f32), or the cast of that add to bias's dtype, whose f32
 *         operand is the cast of bias (autocast's linear layer)
 *   GELU_BIAS  args y, A, B, bias: y = rnd(gelu(v + bias)); the graph's BIAS result s, read by
 *         nothing but the GELU: y is gelu(s) (f32), or rnd(gelu(f32(s))) of a 16-bit s
 *   GELU_AUX_BIAS  args y, aux, A, B, bias: aux = rnd(v + bias) (BIAS's y, s), y as GELU_BIAS
 *         (cuBLASLt's GELU input matrix, stored for the backward; s's other readers all run
 *         after the GEMM)
 *   DGELU args y, A, B, aux:  y = rnd(v * gelu'(aux)), aux (M, N) of y's dtype: y is
 *         gelu_bwd(aux, v) (f32), or rnd(gelu_bwd(f32(aux), f32(rnd(v)))) cast to A's and B's
 *         16-bit dtype, the gradient of a GELU through the product before it
 * accum (cuBLASLt's C with beta = 1): the product's sum also adds c, a matrix of the product's
 * shape and of y's dtype (aux's for GELU_AUX_BIAS, which is y's), last in the args, after the
 * bias: v becomes v + c (NONE, DGELU) and v + bias becomes (v + bias) + c (the BIAS and GELU
 * ones), in that order, the graph's. The graph has it as one more add of c's f32 value (c
 * itself, or the f32 cast of a 16-bit c) to what the matmul, or its bias add, gave, read by
 * nothing else: a LoRA layer's base + adapter product (autocast: the adapter's product rounded
 * first, the base GEMM adds it and keeps its bias and GELU), a gradient's sum of two products
 * (dx = dy W^T + dh' A^T; LLaMA's q, k, v), the tied LM head's weight gradient added to the
 * embedding backward's part, chunk_logits' running dW sum. c is written before the GEMM, and
 * may share y's buffer (memplan: a sum into a gradient, in place; cuBLASLt's C == D).
 * In 16 bits the GELU epilogues skip one rounding of the graph they stand for: GELU's input is
 * the f32 sum v + bias, not rnd(v + bias) (which aux stores), and DGELU multiplies the f32
 * product v, not rnd(v); f32 programs are exact. gelu and gelu' are program/epilogue.h's f32
 * formulas (tanh form, as cuBLASLt documents its GELU; ir's gelu and gelu_bwd). The GELU
 * epilogues need A not transposed, B of rank 2 (one GEMM), and with aux N % 8 == 0 (cuBLASLt's
 * EPILOGUE_AUX_LD rule). The nodes an epilogue stands for have home at the matmul (fuse).
 * Operand views (sn_kernel_gemm_part.view): A or B may be a slice along its last axis (under
 * reshapes that keep the last dim, and of a value or of such a reshape of it) of a value with a
 * buffer, read in place: its arg is that value, the rows ld elements apart from element off
 * (sn_gemm_operand_view); no copy kernel. */
typedef enum {
    SN_EPI_NONE,
    SN_EPI_BIAS,
    SN_EPI_GELU_BIAS,
    SN_EPI_GELU_AUX_BIAS,
    SN_EPI_DGELU,
    SN_EPI_COUNT
} sn_epilogue;
const char *sn_epilogue_name(sn_epilogue e);

/* The few-row product (SN_KER_GEMV): y = x @ W or x @ W^T where x has few rows, as batch-1
 * decoding has (fuse makes it for M <= SN_GEMV_MAX_M: numel(x) / K rows, its batch dims folded),
 * W read from its source as the kernel goes, never stored. Otherwise W has a buffer: a kernel
 * unpacks or widens it and a GEMM reads it. The anchor is the matmul (no epilogue: a bias add
 * after it is a kernel of its own), ta = 0; its operand 1, the weight, is read by no other node
 * and has no buffer; it is one of (sn_gemv_of says which):
 *   NF4    a dequant_nf4 of the packed bytes (ir/nf4.h's layout): each weight is what the
 *          dequantize kernel writes, rnd_w(level[code] * scale), its scale fma(scale_code, step,
 *          mean), rnd_w the rounding to the weight's dtype (x's: f32, bf16 or f16)
 *   W16    an f32 cast of a bf16 or f16 value (a base16 LoRA base in an f32 program): each
 *          weight is the 16-bit value widened (exact); x is f32
 * and its layout tb = 0, W (K, N) (GPT-2's Conv1D), or tb = 1, W stored (N, K) (LLaMA's
 * (out, in): row n of W is the K weights of output n, its NF4 blocks of 64 inside the row
 * where 64 divides K, straddling rows elsewhere). Args: y (numel(x) / K, N) f32, x (.., K) of
 * the weight's dtype, contiguous, the source (u8 bytes, or the 16-bit value). Item i: the
 * columns [64 i, min(64 i + 64, N)) of every row of y (split: the decode split below). Then
 *     y[m][n] = sum over k of x[m][k] * w[k][n]   in f32   (w[k][n] = W[n][k] with tb)
 * The order of that sum is each backend's, fixed for every split of the items:
 *   CPU, tb = 0: k ascending, one fma a term (codegen/llvm/llvm_gemv.c);
 *   CPU, tb = 1: 16 partial sums, sum j over the k = j (mod 16) ascending, one fma a term, then
 *     added pairwise: p[j] + p[j + 8], then + 4, + 2, + 1 lanes away (llvm_gemv_t.c);
 *   CUDA, tb = 0: 32 partial sums over interleaved rows, a warp's 4 added pairwise, then the
 *     8 warps' in order (codegen/cuda/cuda_gemv.c);
 *   CUDA, tb = 1: a warp per 8 outputs, for each its lane l summing the k with (k - k_lo) mod
 *     256 in [8 l, 8 l + 8) ascending (k_lo = 0 in one kernel), one fmaf a term, then the 32
 *     lanes' sums added by a butterfly over 16, 8, 4, 2, 1 lanes (cuda_gemv_t.c);
 *   the CUDA split: each part's sum so (k_lo its first k), then the parts in order;
 * but not the GEMM library's, so y matches the unfused program within f32 rounding (|error|
 * <= about K 2^-24 sum_k |x[m][k] w[k][n]|), not bit for bit. */
typedef enum { SN_GEMV_NF4, SN_GEMV_W16 } sn_gemv_source;
typedef struct {
    int64_t M, K, N;       /* y (M, N) = x (M, K) @ W (K, N) */
    bool tb;               /* W stored (N, K) */
    sn_gemv_source source; /* where the weights come from */
    sn_dtype wt;           /* the weights' dtype: NF4's rnd_w, or the 16-bit value's */
} sn_gemv;
enum { SN_GEMV_MAX_M = 8, SN_GEMV_COLS = 64 };

/* The thin product (SN_KER_THIN; sn_target.thin_products: CUDA): y (M, N) = x (M, K) @ W (K, N),
 * or @ W^T with W stored (N, K) (tb), of many rows M and few columns N <= SN_THIN_MAX (LoRA's x A
 * and dy B^T: N the rank) or a short contraction K <= SN_THIN_MAX (the expansions h B and dh A^T:
 * K the rank), where a GEMM library's kernels move x or y at a fraction of the memory's
 * bandwidth (docs/finetune.md "The adapters' thin products on CUDA"). fuse makes it of a GEMM
 * kernel with no epilogue, no accum and no operand views (kernel.h above) whose matmul has ta =
 * 0 (or ta = 1, tb = 0 and y the f32 matmul: the sum form below), x and W of one dtype (f32,
 * bf16 or f16) and at least SN_THIN_MIN_M rows, and whose shape
 * the plan takes (sn_thin_shape_fits); its args stay the GEMM's: y (the matmul, f32, or its cast
 * to x's 16-bit dtype: rnd(v) once), x, W, each contiguous. Item i: rows [rows i, min(M, rows i
 * + rows)) of y (sn_thin_of). P is the least power of two >= the few (N, or K for the rank form).
 * Columns (N <= SN_THIN_MAX): kpl = min(8, 64 / P) k a lane (K % kpl == 0), a block of warps =
 *   ceil(K / (32 kpl)) <= SN_THIN_MAX_WARPS warps, lane l of warp w the kpl consecutive k from
 *   kb = kpl (32 w + l); each y[m][n] (f32) is s_0 + s_1 + ... in warp order w = 0, 1, ..,
 *   where warp w's s_w is the butterfly over lanes xor 16, 8, 4, 2, 1 (each step a + b) of the
 *   lanes' p_l, and p_l the fmaf chain over its k ascending from 0 (k >= K add nothing).
 * Rank (K <= SN_THIN_MAX < N): kpl = min(8, 64 / P) columns a lane (N % kpl == 0), warps =
 *   ceil(N / (32 kpl)) <= SN_THIN_MAX_WARPS, lane l of warp w columns nb = kpl (32 w + l) ..
 *   nb + kpl - 1; each y[m][n] is the fmaf chain over k ascending from 0.
 * Sum (ta = 1, tb = 0: LoRA's weight gradients h^T dy and x^T dh): y (K, N) f32 = x^T W, x
 *   stored (M, K), W (M, N), M the many rows summed, K or N few (`left`: K, y's rows, then W is
 *   the wide operand and y[c][col] its column col; else N, x the wide one, y[col][c]). kpl =
 *   min(8, 64 / P) columns of the wide operand a lane (wide % kpl == 0); the wide columns in
 *   C = ceil(ceil(wide / (32 kpl)) / SN_THIN_SUM_WARPS) column blocks of `warps` warps each
 *   (lane l of warp w of column block b: columns cb = b 32 kpl warps + kpl (32 w + l) .. + kpl - 1),
 *   a block `groups` G such warp groups (G = 12 / warps where warps <= 6, else 1), the rows in
 *   S = `parts` parts of `rows` L rows (part p: [p L, min(M, p L + L))); always split (S >= 2):
 *   SN_SUM_PARTIAL item i: part p = i / C, column block b = i % C; group g of it takes the part's
 *   rows p L + g + G j ascending, each y element's f32 fmaf chain over them from 0 (a term the
 *   wide operand's element times the few one's), the groups' chains added in group order
 *   ((s_0 + s_1) + s_2) .. into scratch (S, K, N) at [p] (y's layout);
 *   SN_SUM_FINISH: y = the S parts added in f32 in order p = 0, 1, .. (the decode split's FINISH
 *   above), item i the elements [SN_SPLIT_FINISH_ELEMS i, ..). Args y, x, W in the PARTIAL; the
 *   FINISH's y alone (n_in 0: its sums, as a norm's FINISH has them), which it writes from its
 *   scratch alone, so join_finish may run it in a later thin product's launch (`tail` below).
 * Fixed for every launch and thread order (the CUDA kernel's; no CPU backend generates it: the
 * CPU keeps the GEMM), but not the library's, so y matches a GEMM within f32 rounding. */
enum { SN_THIN_MAX = 32, SN_THIN_MAX_WARPS = 32, SN_THIN_MIN_M = 256 };
/* The sum form: at most 12 warps a column block; parts to make about this many blocks (an
 * H100's or H200's 132 SMs, one block each), each group at least 16 rows a part. Fixed by the
 * shapes, as the decode split is: on a GPU of fewer SMs (an RTX 4090's 128, an A100's 108) the
 * last few blocks run as a second wave, up to twice the PARTIAL's time; more, smaller parts
 * would cost scratch (S K N f32 against the wide operand's bytes). Not measured yet. */
enum { SN_THIN_SUM_WARPS = 12, SN_THIN_SUM_BLOCKS = 132, SN_THIN_SUM_MIN_ROWS = 16 };
typedef struct {
    int64_t M, K, N;
    bool tb;      /* W stored (N, K) */
    bool rank;    /* the rank form (K few), else the columns form (N few) */
    bool sum;     /* the sum form (x^T W; kernel.h above) */
    bool left;    /* the sum form's few is K (y's rows), the wide operand W */
    int P;        /* the least power of two >= the few */
    int kpl;      /* k a lane (columns), columns a lane (rank, sum) */
    int warps;    /* a block's (the sum form: a group's) */
    int groups;   /* the sum form's warp groups a block (else 1) */
    int64_t cblocks; /* the sum form's column blocks C (else 1) */
    int64_t parts;   /* the sum form's parts S (else 1) */
    int64_t rows; /* an item's (a block's); the sum form's: a part's */
} sn_thin;

/* The decode split (sn_target.split_decode: CUDA): at batch 1 the few-row product and
 * attention_cache (decoding over a KV cache) have too few items to fill a GPU (gpt2: 12 blocks
 * of 64 columns, 12 (row, head) slices), so where their items are fewer than SN_DECODE_BLOCKS (two waves of an
 * H100/H200's 132 SMs) each runs as two kernels around a scratch value (program.h: no node),
 * its buffer after the args (bufs[n_out + n_in]) in both; sn_split_parts says how many parts:
 *   GEMV  SN_SUM_PARTIAL: item i is columns c = i % C (C = ceil(N / 64) column items) over
 *     k in [s L, min(K, s L + L)), s = i / C, L = sn_split_len (tb = 0: a multiple of 4;
 *     tb = 1: of 32, of 256 where L >= 256); it writes the product over those k,
 *     x[:, ks] @ w[ks, cols], into scratch (S, M, N) at [s] (in the one-kernel order over its
 *     k) and not y;
 *     SN_SUM_FINISH: y[m][n] = the S parts added in f32 in order s = 0, 1, ..; item i: the
 *     elements [SN_SPLIT_FINISH_ELEMS i, ..) of y (M N).
 *   ATTENTION (attention_cache) SN_SUM_PARTIAL: item i is slice b = i / P (of the B H) over
 *     the key positions j in [p L, p L + L), p = i % P, L = sn_split_len: j counts the new
 *     keys u <= t first (j = u), then the cached ones (j = t + 1 + r); for each query t it
 *     writes the online softmax's state over its keys to scratch (B H, P, T, Dv + 2) at
 *     [b][p][t]: the max m, the sum l of exp(s - m) and the unnormalised output (Dv), or
 *     (-inf, 0, 0 ..) when it holds no key the mask keeps; it writes no y;
 *     SN_SUM_FINISH: item b: y[b][t] = sum_p o_p e^(m_p - M) / sum_p l_p e^(m_p - M), M the
 *     largest m_p, both sums in order p = 0, 1, ...
 * Both keep the inputs as args (the FINISH reads only its scratch). The split is fixed by the
 * shapes alone (no device query), so the same program is made for every CUDA device. */
enum { SN_DECODE_BLOCKS = 264, SN_SPLIT_FINISH_ELEMS = 256 };

#define SN_KER_MAX_ARGS 16
/* Buffers a launch passes at most (sn_kernel_n_bufs): the args, a scratch, a joined FINISH's. */
#define SN_KER_MAX_BUFS (SN_KER_MAX_ARGS + 8)

/* How a pointwise kernel reads an arg: at index-space coordinate (i_0 .. i_{r-1}) the element
 * is args[arg][offset + sum_d i_d * stride[d]] (stride 0 broadcasts). Views (broadcast,
 * permute, slice, reshape where strides allow) fold into offset and strides. With `masked`,
 * coordinates with i_{mask_axis} outside [mask_lo, mask_hi) read 0 instead (pad, concat). */
typedef struct {
    int arg;
    int64_t offset;
    int64_t stride[SN_MAX_RANK];
    bool masked;
    int mask_axis;
    int64_t mask_lo, mask_hi;
} sn_access;

/* One operand of a pointwise instruction: an earlier instruction's value, an access, or (for
 * a FULL node folded in) a constant. */
typedef enum { SN_REF_INSTR, SN_REF_ACCESS, SN_REF_CONST } sn_ref_kind;
typedef struct {
    sn_ref_kind kind;
    int index;   /* instruction or access index */
    float value; /* SN_REF_CONST */
} sn_ref;

/* y = node->op(in...) evaluated per element; node gives op, attributes (scale factor) and dtype. */
typedef struct {
    const sn_node *node;
    int n_in;
    sn_ref in[3];
} sn_pw_instr;

/* ---- the parts of one kind (sn_kernel's union) ---- */

/* ROW: the row op among its fused instructions, and the column sums that joined it.
 * instr: with n_instr > 0, the row op's instruction (below).
 * A ROW kernel whose anchor sums over every row (layernorm_bwd_w, rmsnorm_bwd_w), with column
 * sums (n_colsum > 0): outputs 1 .. n_colsum are `sum` nodes over the same R rows (bias
 * gradients, layernorm's dbeta) that joined the kernel: output o is the sum over r of
 * args[colsum_src[o]] read as a contiguous (R, C_o) matrix, C_o = numel(args[o]): the sum's
 * operand, or a bf16 / f16 value whose f32 cast that operand is (through reshapes), each
 * element widened to f32 as it is loaded (the same sums: the cast has no buffer). Such a
 * kernel stores nothing but its sums; its row op may read dy through a prologue that widens
 * a 16-bit value (n_instr 2: the cast, the row op). */
typedef struct {
    int instr;
    int n_colsum;
    int colsum_src[SN_KER_MAX_ARGS];
    bool pair; /* the norm backward pair (below: a PARTIAL kernel that computes dx too) */
} sn_kernel_row_part;

/* A GEMM operand read in place from a larger buffer (sn_epilogue's operand views): its rows
 * start ld elements apart, the first at element off of the arg; ld 0: the arg is the operand,
 * contiguous (off 0). */
typedef struct {
    int64_t off, ld;
} sn_gemm_view;

/* GEMM: what it does with its product before storing it (sn_epilogue above). */
typedef struct {
    sn_epilogue epilogue;
    bool accum; /* c added to the sum (above), the last arg */
    sn_gemm_view view[2]; /* how A and B are read (above) */
} sn_kernel_gemm_part;

/* Whether operand i (0: A, 1: B) of matmul mm can be read in place as a view (sn_epilogue's
 * operand views): x = mm->in[i] is a slice along the last axis of a value, under reshapes
 * keeping the last dim; the product reads it as one matrix of rows (A: of rank 2, or its batch
 * dims folded into rows: B of rank 2, A not transposed; B: of rank 2); the first element and
 * the rows' stride whole multiples of 16 bytes (cuBLASLt's vector loads). Then *base is the
 * sliced value and *v where the rows are in it; else false. */
bool sn_gemm_operand_view(const sn_node *mm, int i, const sn_node **base, sn_gemm_view *v);

/* The optimizer kinds: the flat range [0, flat_n) of f32 elements they cover, and (ADAMW) the
 * first flat_decay of them, which get weight decay. flat_low (ADAMW): SN_F32 (zero) for none,
 * else the dtype (bf16, f16) of the weights' 16-bit copies (program.h: the weight shadows) that
 * AdamW writes in the same pass, rounded from the updated f32 weights. */
typedef struct {
    int64_t flat_n, flat_decay;
    sn_dtype flat_low;
} sn_kernel_optim_part;

typedef struct sn_kernel sn_kernel;
struct sn_kernel {
    sn_kernel_kind kind;
    int id;
    char name[64]; /* C identifier, unique in a program: "k12_pointwise_gelu" */
    int n_out, n_in;
    const sn_node *args[SN_KER_MAX_ARGS]; /* n_out outputs then n_in inputs, all materialised */
    const sn_node *anchor;                /* every kind but POINTWISE: the node computed */
    const sn_node *anchor2;               /* ATTENTION: the second output: the forward's lse node,
                                             or attention_bwd_k's attention_bwd_v (same inputs) */
                                          /* ROW: the classifier (below): a cross_entropy_bwd's
                                             PARTIAL kernel's cross_entropy, and its FINISH
                                             kernel's cross_entropy_bwd */

    /* POINTWISE: index space, instructions, accesses, and which instruction each output stores
     * (contiguously over the index space; an output's numel equals the index space's).
     * ROW with fused neighbours (n_instr > 0; a ROW kernel without them has n_instr 0, reads
     * its row op's inputs as args and stores the row op into args[0]): the same over `shape`,
     * the shape of the row op's first input, whose last axis is the row. instr[row.instr] is
     * the row op itself (node == anchor); its in[] say how it reads each operand: an
     * instruction before it (the prologue, evaluated per element of the row as the op reads
     * it), or an access (an arg read as is; operands that are not per element of the row,
     * like layernorm's w and b, cross-entropy's targets, are always an access of their
     * materialised node). Instructions that read the row op's value form the epilogue,
     * evaluated on each element the row op produces. Output o stores instr[store[o]]: the
     * row op, an epilogue value, or a prologue value that later kernels read too.
     * ATTENTION: n_access = anchor->n_in, access[i] says where input i of the anchor is
     * (offset and strides over its dims, rank <= 4: (.., row, head) with unit stride along
     * the head): q, k, v, o and dout may be strided views of a larger buffer (the QKV GEMM's
     * output) that fuse did not copy; a forward's lse output is args[1], contiguous. The
     * backward's outputs (dq; dk, dv) are either args[o] themselves, contiguous, or, with
     * n_access = anchor->n_in + n_out, written through access[anchor->n_in + o] (arg o, unit
     * stride along the head) into args[o], a wider buffer they share: the (B, T, 3C)
     * concatenation of the QKV gradient, each kernel writing its slices of it (see
     * sn_kernel_out_part). The forward's o likewise, with n_access = anchor->n_in + 1: o
     * (B, H, T, D) written through access[anchor->n_in] into args[0], the (B, T, H, D) permute
     * of it (the (B, T, C) the projection reads), which the backward reads o through. */
    int rank;
    int64_t shape[SN_MAX_RANK];
    int n_instr;
    sn_pw_instr *instr;
    int n_access;
    sn_access *access;
    int store[SN_KER_MAX_ARGS];

    /* Work is split over threads (CPU) or blocks (GPU) as items [0, n_items): pointwise:
     * elements; ROW: rows; REDUCE: output elements; GATHER: ids (or column blocks of 64 for
     * the scatter, chunks for its BUCKET stage); ATTENTION (one kernel, stage WHOLE, not
     * attention_cache): (batch x head) pairs of q, of k and v for dk and dv (fewer under
     * grouped-query attention), times their chunks of SN_ATT_ROW_CHUNK rows (queries; dk and dv:
     * keys), item i the pair i / C's chunk sn_att_row_chunk(i % C, C) of C = ceil(rows /
     * SN_ATT_ROW_CHUNK): a row of o, lse, dq, dk or dv is its own, so the chunks split the work,
     * not a sum (LLaMA's 3 kv heads at batch 1 were 3 items for all the CPU's threads); the
     * stages' kernels: pairs (times the parts of a split attention_cache's PARTIAL: the decode
     * split above). `serial`: must run as one range. Fuse sets both from sn_kernel_work; the
     * contract checks them against it. */
    int64_t n_items;
    bool serial;

    /* A row op that sums over every row (row facts `serial`: a norm weight gradient with its
     * column sums, cross-entropy's mean loss) runs as two kernels, so that every SM takes a
     * share of the rows and no float is added in a varying order. Between them a scratch
     * value (program.h: no node) of P = ceil(R / sn_sum_chunk_rows) rows of W f32 partial sums, W
     * the anchor's C columns then each column sum's C_o (cross-entropy: W = 4, the chunk's
     * loss sum and its counted rows as two f64); its buffer follows the args
     * (bufs[n_out + n_in]).
     *   SN_SUM_PARTIAL: item i is chunk p = i / (1 + tiles) of sn_sum_chunk_rows (the last may
     *     be short), part i % (1 + tiles): part 0 sums the anchor over the chunk's rows into
     *     scratch[p][0, C); part 1 + t sums column-sum tile t (the tiles of column sum 1, then 2 ...,
     *     SN_COLSUM_TILE columns each) over them into its columns of scratch[p]. Args as a
     *     one-kernel version would have them: it stores the prologue's outputs, not the sums.
     *   SN_SUM_FINISH: the next kernel: args are the sums alone (the anchor's, then the column
     *     sums', n_in 0); item i: columns [i SN_SUM_FINISH_COLS, ..) of W, each the sum of the
     *     P partials in order p = 0, 1, ... (cross-entropy: one item, the loss sums and the
     *     counts added in that order in f64, their quotient the mean loss)
     * The classifier: a cross_entropy_bwd kernel (anchor) that also computes the loss of the
     * cross_entropy of the same logits, targets and attributes (anchor2) in its one pass over
     * each row. It is a PARTIAL kernel whose item i is row i, as a one-kernel version would
     * have it (it stores the gradient and its epilogue), and whose partial sums are a row
     * each (P = R, W = 4): the row's loss, lse - logit[t] rounded to f32, and 1 as two f64,
     * or 0 and 0 for an ignored row (NaN and 1 for a bad target). Its FINISH (anchor the
     * cross_entropy, anchor2 the cross_entropy_bwd) adds the rows in chunks of SN_SUM_CHUNK
     * in order from 0, then the chunks' sums in chunk order: the order of the unfused pair.
 * The norm backward pair (row.pair): a norm weight gradient's PARTIAL kernel (anchor
 * layernorm_bwd_w or rmsnorm_bwd_w, outputs 0 .. n_colsum its sums as above) that also computes
 * the norm's dx (layernorm_bwd, rmsnorm_bwd of the same eps) with its fused neighbours: n_instr >
 * 0, instr[row.instr] is the dx op, whose x and dy (operands 0 and 2) are the anchor's x and dy
 * (the same node, or f32 casts of one value), read once for both; the instructions are the dx
 * op's prologue and epilogue, and outputs n_colsum + 1 .. store them as a fused row kernel's do.
 * A column sum may read one of those outputs (colsum_src an output after the sums: the
 * residual gradient's bias gradient), after the chunk's rows are stored. Item i is chunk i of
 * sn_sum_chunk_rows rows: dx of each row, the chunk's dy xhat into scratch[p][0, C), then every
 * column-sum tile over the chunk's rows into its columns. The sums keep the orders of the
 * unfused kernels: each chunk's rows in row order per thread (CPU) or per warp (CUDA: a block
 * of 8 warps per chunk, warp w takes rows w, w + 8, ..; the warps' sums added in warp order),
 * dx's row statistics as the dx kernel's, so dx, the partial sums and FINISH's results are
 * bit-identical to the dx kernel's and the PARTIAL kernel's where both take the same columns a
 * step (sn_cu_row_lanes). On CUDA a chunk is a block: 256 blocks of 64 rows at B=16 T=1024
 * (16,384 rows), more than the 132 SMs of an H100/H200 (3 blocks fit an SM: one wave); 128 of 8
 * at B=4 T=256 (1,024 rows; sn_sum_chunk_rows), each block 8 warps,
 * one row a warp at a time, each warp's dy xhat sums in shared memory (a lane its own slots),
 * added in warp order after a barrier that also makes the block's stored rows visible to its
 * column sums (8 tiles of 32 columns at a time, a lane a column, the warps down the rows). The
 * fuse pass pairs a dx kernel right before the PARTIAL kernel or right after its FINISH (the
 * pair then runs in the PARTIAL kernel's place); the FINISH kernel stays (a target with
 * join_finish runs it in a later pair's launch: `tail` below). */
    /* embedding_bwd (GATHER) runs as two kernels too, so that no block scans every id (the
     * CUDA algorithm; codegen/cuda/cuda_gather.c), with a scratch value of
     * sn_kernel_scratch_bytes: the ids in G = ceil(N / S) chunks of S = sn_gather_chunk
     * positions, and for them
     *   table (G, V) u32: (first << 16) | count of id v's positions in chunk g (0: none);
     *   order (G, S) i32: chunk g's positions sorted by (id, position); id v's are
     *                     order[g][first .. first + count).
     *   SN_GATHER_BUCKET (stage PARTIAL): item g fills chunk g's table row and order row;
     *     args (y; ids): it writes no y (sn_kernel_writes).
     *   SN_GATHER_ROWS (stage FINISH): the next kernel: args (y; ids, dy); row v of y is the
     *     sum of dy's rows at id v's positions in increasing order (chunk by chunk), 0 for an
     *     id without positions. Items as a one-kernel embedding_bwd has them (CPU: column
     *     blocks; the LLVM backend keeps the one-kernel algorithm, its BUCKET does nothing;
     *     CUDA: a team of threads a row, several rows a block, cuda_gather.c). */
    /* The atomic dq of the attention backward (sn_target.att_dq_atomic: CUDA, a tuning knob;
     * off by default): an attention_bwd_q whose six inputs and scale are those of a dk/dv
     * kernel on tensor cores (sn_kernel_att_tensor_cores) is computed by that kernel, in three kernels around a scratch value (no node) of
     * f32 dq, contiguous (q's batch x head slices, T, D), then f32 dots (q's slices, T), in this
     * order:
     *   SN_ATT_DQ_ZERO (stage PARTIAL), anchor attention_bwd_q, args as the dq kernel has them:
     *     sets dq's part of the scratch to 0 and each dot to dout_i . o_i (FlashAttention-2's
     *     D, over Dv in order); writes no dq (sn_kernel_writes);
     *   the dk/dv kernel (stage PARTIAL): reads the dots (not o), and also adds each of its key
     *     blocks' share of dq, scale ds K, into the scratch with atomic adds: the order of the
     *     adds varies from run to run, so dq is not bit-deterministic (dk and dv are);
     *   SN_ATT_DQ_STORE (stage FINISH), anchor attention_bwd_q, args as the dq kernel has them:
     *     dq = the scratch, rounded to dq's dtype (through its access when it has one); reads
     *     no input but the scratch.
     * The scratch's buffer follows the args (bufs[n_out + n_in]) in all three. */
    /* Grouped-query dk and dv in parts (dkv_parts; sn_target.att_dkv_parts: CUDA): a dk/dv
     * kernel (anchor attention_bwd_k, or _v) on tensor cores with G > 1 query heads a k/v head,
     * where sn_att_dkv_parts (kernel_split.c) says G, runs as two kernels around a scratch value
     * (no node) of f32 parts: (q's slices, S, D) of dk, then (q's slices, S, Dv) of dv (those it
     * writes). In one kernel the block of the first keys walks every query tile of all G heads
     * in turn, and at few blocks that one block outlasts the rest (smollm2-135m on an H200,
     * 2026-11-28: 147 us a layer, 7.5x its model); in parts each block walks one head's.
     *   SN_SUM_PARTIAL: item i is q's slice i (batch x query head), reading k's and v's slice
     *     i / G: dk (times the scale, as the one kernel stores it) and dv of that head's queries
     *     alone into the scratch's [i], in f32; it writes no dk or dv (sn_kernel_writes);
     *   SN_SUM_FINISH, the next kernel: item i is k's slice i: dk = the parts [G i + g] added
     *     in f32 in order g = 0, 1, .., rounded to dk's dtype (through its access when it has
     *     one); dv alike. Args as the one kernel's; it reads only the scratch.
     * Not bit-identical to the one kernel (which adds the heads' products into one sum), the
     * same from run to run. */
    bool dkv_parts;
    int stage;
    int scratch; /* the scratch value (an index into the program's values) */
    /* A FINISH kernel run in this kernel's launch (horizontal fusion, passes/join_finish.c;
     * NULL: none): a norm weight gradient's FINISH (stage FINISH, no anchor2) in a norm
     * backward pair, or a thin sum's FINISH in a thin product (not a FINISH), that is no kernel
     * of the program's list any more. The launch's buffers are this kernel's
     * (sn_kernel_n_bufs of it alone), then the tail's (its sums, then its scratch). On CUDA
     * the grid is this kernel's blocks, then ceil(W / threads) blocks of the tail, each thread
     * one of the W columns FINISH sums in chunk order (the thin sum's: W y's elements, each
     * adding the parts in order), so the sums' bits are the separate FINISH kernel's: a
     * column's order does not depend on its block. The tail reads only
     * its scratch, written by an earlier kernel, and writes only its sums, which this kernel
     * neither reads nor writes; this kernel does not write the tail's scratch. */
    struct sn_kernel *tail;

    /* what one kind alone has (the kind says which part is meaningful) */
    union {
        sn_kernel_row_part row;     /* ROW */
        sn_kernel_gemm_part gemm;   /* GEMM */
        sn_kernel_optim_part opt;   /* GRAD_ACC, SQNORM, CLIP, ADAMW */
    };
};

/* ---- the optimizer step ----
 * The trainer keeps every trained parameter in one flat f32 range [0, N) (decayed ones first:
 * [0, flat_decay); the program's parameter layout, program.h, says which), their gradients,
 * gradient sums and AdamW moments m, v in flat ranges of the same layout, and the step's
 * scalars in a small f32 buffer `scal` (the indices below), so that one launch of each kernel
 * does the whole step and nothing but the loss and the norm need come back to the host.
 * Buffers, in order, and items:
 *   GRAD_ACC  sum (updated), g (read)                  items: elements; sum[i] += g[i]
 *   SQNORM    partial (written), g (read), scal (read) items: blocks of SN_SQNORM_BLOCK
 *             elements; partial[b] = f32 sum over i in block b of (g[i] * scal[INV_MICRO])^2
 *   CLIP      scal (updated), partial (read)           one serial item; sums the
 *             ceil(flat_n / SN_SQNORM_BLOCK) partials in f64: norm = sqrt(sum);
 *             scal[NORM] = norm; scal[SCALE] = clip / norm if clip > 0 and norm > clip, else 1
 *   ADAMW     p, m, v (updated), g (read), scal (read) items: elements;
 *             [, low (written) with flat_low]
 *             g' = (g * scal[INV_MICRO]) * scal[SCALE]; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 *             p -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * p), wd = scal[WD] for
 *             i < flat_decay and 0 after (bc1 = 1 - beta1^t, bc2 = 1 - beta2^t);
 *             low[i] = the new p[i] in flat_low, rounded to nearest even (what a cast kernel
 *             of p would write: the same bits, made without a second pass over p).
 * g is the gradient of the last micro-batch, or the sums of several (inv_micro = 1/count). */
enum {
    SN_OPT_LR, SN_OPT_BETA1, SN_OPT_BETA2, SN_OPT_EPS, SN_OPT_WD, SN_OPT_BC1, SN_OPT_BC2,
    SN_OPT_SCALE,     /* clip scale, written by CLIP */
    SN_OPT_INV_MICRO, /* 1 / micro-batches accumulated */
    SN_OPT_CLIP,      /* the largest global norm (0: no clipping) */
    SN_OPT_NORM,      /* the global norm of the mean gradient, written by CLIP */
    SN_OPT_SCALARS = 16
};
enum { SN_SQNORM_BLOCK = 4096 };

/* An optimizer kernel of `kind` (GRAD_ACC .. ADAMW) over the flat range [0, flat_n), its first
 * flat_decay decayed, AdamW writing 16-bit copies in `low` (SN_F32: none), its work split set:
 * how the trainer (and a test or bench that launches them as it does) makes them. */
sn_kernel sn_optim_kernel(sn_kernel_kind kind, int64_t flat_n, int64_t flat_decay, sn_dtype low,
                          const char *name);

/* How many buffers a launch of k passes (args for the kinds fuse makes; fixed for the
 * optimizer kinds); devices that translate buffers (a checked device) read it. */
int sn_kernel_n_bufs(const sn_kernel *k); /* with the scratch of a PARTIAL or FINISH kernel */

/* The CPU calling convention of a generated kernel: bufs[i] points at args[i]'s data; the
 * kernel does the items [begin, end). */
typedef void (*sn_cpu_kernel_fn)(void *const *bufs, int64_t begin, int64_t end);

/* What the compiler knows of a row op (a SN_K_ROW node), one table in program.c pinned to
 * SN_OP_COUNT: a new op cannot be a row op without a line there. */
typedef struct {
    unsigned per_element; /* bit i: operand i is read element by element over the first input's
                             shape (x, dy, logits): a ROW kernel's prologue may compute it;
                             the others are per-column weights, per-row targets or a scalar */
    unsigned per_row;     /* bit i: operand i has one element per row (cross-entropy's targets) */
    bool result_per_element; /* one result per element of the first input, so a ROW kernel's
                                epilogue may follow (not cross-entropy's mean, not the weight
                                gradients) */
    bool serial;          /* sums over every row into one output: the kernel is one range */
    bool whole_rows;      /* every pass over a row covers all of it unconditionally (not
                             cross-entropy, which skips ignored targets) */
} sn_row_facts;

/* The facts of row op op; NULL if op is not a row op. */
const sn_row_facts *sn_row_facts_of(sn_op op);
bool sn_row_operand_per_element(sn_op op, int i);
bool sn_row_result_per_element(sn_op op);

/* The work split k is generated for: *n_items items, *serial when they must run as one range.
 * Reads k->kind, k->anchor and (pointwise) k->rank and k->shape. An ADAMW kernel without an
 * anchor keeps its n_items. */
void sn_kernel_work(const sn_kernel *k, int64_t *n_items, bool *serial);

/* kernel_check.c: the contract above, checked once for every code generator and after every
 * kernel pass: the kind, the args, the anchor, the work split (sn_kernel_work) and what each
 * kind promises (an attention kernel's anchors, outputs and accesses; a pointwise kernel's
 * instructions; a row kernel's plan below; the optimizer's flat range). SN_ERR_INTERNAL naming
 * the kernel when broken (a bug in the pass that made it); SN_ERR_UNSUPPORTED for a
 * cross_entropy asked to store its prologue's values (it reads only the counted rows). */
sn_status sn_kernel_check(const sn_kernel *k, sn_err *e);
sn_status sn_kernel_check_attention(const sn_kernel *k, sn_err *e);
/* kernel_gemm.c: a GEMM kernel's epilogue (above): its args, dtypes and shapes, and the nodes it
 * stands for. */
sn_status sn_kernel_check_gemm(const sn_kernel *k, sn_err *e);
/* The message of a broken contract (printf-style): SN_ERR_INTERNAL. */
sn_status sn_kernel_bug(const sn_kernel *k, sn_err *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Instructions one kernel may have (the fuse pass's bound). */
enum { SN_KER_MAX_INSTR = 64 };

/* kernel_row.c: what both code generators render a ROW kernel from, computed from the kernel
 * and its contract checked (the kernel's row facts, the classifier's pair, the stages of a sum
 * over every row, the column sums; a fused kernel's instructions: references backwards and to
 * accesses of input args, the row op's per-row operands read from buffers, outputs storing
 * instructions of the index space, an epilogue only after a row op with a result per element,
 * whose result is stored when it is not). */
typedef struct {
    int64_t R, C;  /* rows and row length of the row op's first input */
    int64_t Vr;    /* the real classes of cross-entropy over padded logits (a.end), else C */
    const sn_node *op; /* the row op rendered a row at a time: the anchor, or the norm backward
                          pair's dx (instr[row.instr]) */
    bool sums;     /* a PARTIAL kernel: the op sums over every row, or the classifier's loss */
    bool fused;    /* instructions around the row op (n_instr > 0) */
    bool dep[SN_KER_MAX_INSTR]; /* [n_instr] instruction i reads the row op's value: the
                                   epilogue (else the prologue) */
    int y;         /* the output storing the row op's own result, or -1 */
    int buf[3];    /* the arg the row op reads operand i from as it is, or -1 (computed per
                      element by the prologue) */
} sn_row_plan;
sn_status sn_kernel_row_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e);
/* Whether a and b are one value: the same node, or casts to one dtype of one value (the norm
 * backward pair's x and dy). */
bool sn_same_value(const sn_node *a, const sn_node *b);

/* The column sums of a ROW kernel (row.n_colsum above) are split in tiles of this many columns. */
enum { SN_COLSUM_TILE = 32 };
/* The stages of a sum over every row (`stage` above), rows a chunk, columns a finishing item. */
enum { SN_SUM_WHOLE, SN_SUM_PARTIAL, SN_SUM_FINISH };
enum { SN_SUM_CHUNK = 64, SN_SUM_FINISH_COLS = 64 };
/* A norm weight gradient's chunks (its PARTIAL kernel, the pair, their FINISH) are SN_SUM_CHUNK
 * rows, halved down to SN_SUM_CHUNK_MIN while fewer than SN_SUM_MIN_CHUNKS chunks would share the
 * rows: a chunk is a CUDA block, and 16 blocks of 64 rows (gpt2 B=4 T=256) left most of an
 * H200's 132 SMs idle (the pairs 63 us a call against 21 modeled, 2026-11-28). The rule depends
 * on the rows alone, so every device adds in the same chunks; cross-entropy's chunks stay
 * SN_SUM_CHUNK rows (the classifier's FINISH and chunk_logits add the loss in those). */
enum { SN_SUM_CHUNK_MIN = 8, SN_SUM_MIN_CHUNKS = 128 };
int64_t sn_sum_chunk_rows(const sn_kernel *k);
/* The longest rows of a norm backward pair (its CUDA block keeps 8 warps' sums of a row's
 * columns in shared memory: 32 KiB); longer rows keep the dx and PARTIAL kernels apart. */
enum { SN_PAIR_MAX_C = 1024 };
/* Chunks P and partial-sum columns W of a PARTIAL or FINISH kernel. */
int64_t sn_sum_chunks(const sn_kernel *k);
int64_t sn_sum_width(const sn_kernel *k);
/* f (zeroed, its id set) as the FINISH kernel of PARTIAL kernel k. */
void sn_sum_finish_fill(const sn_kernel *k, sn_kernel *f);
/* the atomic dq's kernels around the dk/dv kernel (above) */
enum { SN_ATT_DQ_ZERO = SN_SUM_PARTIAL, SN_ATT_DQ_STORE = SN_SUM_FINISH };
/* embedding_bwd's two stages (above) */
enum { SN_GATHER_BUCKET = SN_SUM_PARTIAL, SN_GATHER_ROWS = SN_SUM_FINISH };
enum { SN_GATHER_CHUNK_MAX = 2048 };
/* Positions S a chunk of an embedding_bwd kernel: the power of two at least N (at least 64),
 * at most SN_GATHER_CHUNK_MAX; and its chunks G = ceil(N / S). */
int64_t sn_gather_chunk(const sn_kernel *k);
int64_t sn_gather_chunks(const sn_kernel *k);
/* Bytes of the scratch value of a two-stage kernel (0 for stage WHOLE). */
int64_t sn_kernel_scratch_bytes(const sn_kernel *k);
/* Whether k writes its output o: not a PARTIAL kernel's sums (its FINISH kernel does). */
bool sn_kernel_writes(const sn_kernel *k, int o);
/* Tiles of k's column sums (0 without). */
int64_t sn_colsum_tiles(const sn_kernel *k);

/* Whether output o of k writes only part of its buffer args[o] (attention outputs written
 * into a concatenation, above); then sets mask[i] (numel(args[o]) flags) for the elements it
 * writes and clears the others. */
bool sn_kernel_out_part(const sn_kernel *k, int o, bool *mask);

/* One line describing k: "k3 pointwise gelu,add f32[4,64,768] <- %12, %40 -> %41". */
void sn_kernel_describe(const sn_kernel *k, char *buf, size_t len);

/* The product a SN_KER_GEMV kernel computes, from its anchor (program.c). */
sn_gemv sn_gemv_of(const sn_kernel *k);
/* Its name in kernel names: nf4_gemv, nf4_gemv_t (tb), w16_gemv, w16_gemv_t. */
const char *sn_gemv_name(const sn_kernel *k);
/* The thin product's shape and its kernel's plan (kernel.h: SN_KER_THIN) for its matmul mm,
 * computed from the shapes alone (the same for a GEMM kernel fuse may turn into one). */
sn_thin sn_thin_plan(const sn_node *mm);
sn_thin sn_thin_of(const sn_kernel *k);
/* Whether matmul mm with operand dtypes and sizes as kernel.h asks could be a thin product
 * (the rest, the kernel's args and epilogue, is fuse's to check). */
bool sn_thin_shape_fits(const sn_node *mm);

/* kernel_split.c: the decode split's parts S (the few-row product's k ranges, attention_cache
 * key ranges; the thin product's sum form's row ranges) that k's shapes call for under the rule
 * there (1: one kernel), and the k, keys or rows L of a part. */
int64_t sn_split_parts(const sn_kernel *k);
int64_t sn_split_len(const sn_kernel *k);
/* The row chunks of an attention kernel's items (n_items above), and which chunk the c-th of a
 * pair's C items takes: 0, C - 1, 1, C - 2, .. (causal: the first keys have the most queries and
 * the last queries the most keys, so neighbouring items, which one thread takes together, pair a
 * long chunk with a short one). */
enum { SN_ATT_ROW_CHUNK = 64 };
int64_t sn_att_row_chunk(int64_t c, int64_t C);
/* The parts of a grouped-query dk/dv kernel (dkv_parts above): G where the one kernel's blocks,
 * k's slices x ceil(S / 64) keys, are fewer than SN_DKV_PARTS_BLOCKS, else 1 (one kernel; also
 * for any other kernel). Below that many blocks the first keys' block, G times every query tile,
 * is longer than an even share of the work over the blocks an H100/H200 keeps resident (132 SMs
 * x 3 of the tensor-core dk/dv kernels): the parts' shares are G times shorter, for a pass over
 * the scratch (f32, 4 G bytes an element of dk and dv, read once). Fixed by the shapes alone. */
enum { SN_DKV_PARTS_BLOCKS = 2 * SN_DECODE_BLOCKS };
int64_t sn_att_dkv_parts(const sn_kernel *k);

#endif

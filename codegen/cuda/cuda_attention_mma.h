/* cuda_attention_mma.h: what the tensor-core attention kernels share (cuda_attention_mma.c:
 * the operations, shared-memory tiles, copies and products; cuda_attention_mma_pass.c: the
 * forward, dq and dk/dv kernels written with them). Every function emits CUDA C text. */
#ifndef SN_CUDA_ATTENTION_MMA_H
#define SN_CUDA_ATTENTION_MMA_H

#include "cuda_attention.h"

/* The names this kernel's text multiplies and packs with. */
typedef struct {
    const char *mma, *pack;
} sn_attm_ops;

/* Shared-memory arrays: static (SN_SHARED, SN_SHARED2) when the plan fits 48 KiB, else carved
 * in order from the dynamic shared memory, `at` bytes in; sn_att_mma_shared counts the same. */
typedef struct {
    const sn_att_plan *p;
    int64_t at;
} sn_attm_carve;

sn_attm_carve sn_attm_carve_begin(sn_cu_text *t, const sn_att_plan *p);
/* A tile of rows x cols 16-bit values (rows_text, cols_text: the same in the kernel's names). */
void sn_attm_tile2(sn_cu_text *t, sn_attm_carve *c, const char *name, int64_t rows, int64_t cols,
                   const char *rows_text, const char *cols_text, const char *note);
/* An array of count floats. */
void sn_attm_floats(sn_cu_text *t, sn_attm_carve *c, const char *name, int64_t count,
                    const char *count_text, const char *note);
/* Rows [row0, row0 + count) of src (`cols` 16-bit values wide, rows src_row apart, `limit` rows
 * in all) into rows trow .. of tile as 16-byte chunks (rows past limit: zeros), by every thread
 * of the block: cp.async copies still to be waited for (async), or loads and stores;
 * swizzled: tile's rows are 128 bytes in the 128-byte swizzle (wgmma's operands); unrolled: a
 * tile of whole rows copied by an unrolled loop from one address a thread (more registers). */
void sn_attm_copy_rows(sn_cu_text *t, bool async, const char *tile, const char *trow,
                       const char *src, const char *src_row, const char *row0, const char *count,
                       const char *cols, const char *limit, bool swizzled, bool unrolled);
/* acc[n][0..4) = 0; sn_attm_zero_m: acc[MT][n][0..4) */
void sn_attm_zero(sn_cu_text *t, const char *acc, const char *n);
void sn_attm_zero_m(sn_cu_text *t, const char *acc, const char *n);
/* acc[nt] += A B^T over a k of `kdim`: A the 16 rows from `arow` of tile a, B the rows brow +
 * nt * 8 .. of tile b (row-major (n, k)), two n-tiles an ldmatrix x4; _m: MT m-tiles a warp,
 * acc[m][nt], each B fragment feeding MT mma pairs. */
void sn_attm_abt(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *a, const char *arow,
                 const char *b, const char *brow, const char *kdim, const char *ntiles);
void sn_attm_abt_m(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *a, const char *arow,
                   const char *b, const char *brow, const char *kdim, const char *ntiles);
/* acc[dt] += X B over k = 16 * ksteps: X the accumulator fragments x[2 kk], x[2 kk + 1] as the
 * A operand, B the rows brow + kk * 16 .. of tile b (row-major (k, n): ldmatrix .trans; pairs:
 * two n-tiles an ldmatrix x4); _m: MT m-tiles, acc[m][dt], x[m]. */
void sn_attm_xb(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *x, const char *b,
                const char *brow, const char *ksteps, const char *ntiles, bool pairs);
void sn_attm_xb_m(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *x, const char *b,
                  const char *brow, const char *ksteps, const char *ntiles);
/* Stores row `i` of accumulators acc[0 .. ntiles) (this thread's half `h`) times `mul` to dst
 * (rows `cols` apart) as packed pairs. */
void sn_attm_store_row(sn_cu_text *t, sn_attm_ops o, const char *dst, const char *acc,
                       const char *ntiles, const char *cols, const char *mul);
/* dst[r] = dout_i . o_i for the `rows` rows i = first + r (0 past SEQ_Q), THREADS / rows
 * threads a row: dout's row from `dout_at`, o's from `o_at` (addresses of 8 16-bit values at
 * column c); swizzled: the tiles' 128-byte swizzle (Dv = 64), each thread's chunks so taken
 * that a quarter warp's reads meet no bank conflict. */
void sn_attm_tile_dots(sn_cu_text *t, const sn_att_plan *p, const char *dst, const char *rows,
                       const char *first, const char *dout_at, const char *o_at, bool swizzled);
/* The fragment loop over s[nt][e] (ntiles n-tiles) with body[0 .. n_body); with coords first
 * the element's coordinates and `seen` (query_checked: i < SEQ_Q too). */
void sn_attm_elements(sn_cu_text *t, const char *ntiles, const char *coords, bool query_checked,
                      const char *const *body, int n_body);

/* cuda_attention_mma_pass.c: the kernels of each pass; DKV's copies of query tile (gn, qn)
 * into rows `trow` of the streamed tiles: q, dout and, with dk, o (for the dots), of head gn
 * when the group has several (swizzled where p->wgmma) */
void sn_attm_emit_fwd(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);
void sn_attm_emit_dq(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);
void sn_attm_emit_dkv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);
void sn_attm_copy_query_tile(sn_cu_text *t, const sn_att_plan *p, bool async, const char *trow);
/* Whether p's tile copies are unrolled (all but the mma.sync dk/dv kernel of the atomic dq). */
bool sn_attm_copies_unrolled(const sn_att_plan *p);
/* FWD and DQ: the block's rows, the causal key range, the first tile's copies (with the q-side
 * tiles of `qside`: tile, source, columns; V's with with_v) as one group, committed. */
void sn_attm_key_side_setup(sn_cu_text *t, const sn_att_plan *p, bool with_v,
                            const char *const qside[][3], int n_qside);
/* DKV's P of the query tile in s (with ds: and dS in dp), masked where a warp's keys cross the
 * diagonal or a tile the sequence's end. */
void sn_attm_dkv_p(sn_cu_text *t, bool ds);
/* The atomic dq (p->dq_atomic): the pointer dq_sums to query head g's f32 sums in the scratch;
 * dq_sums += scale acc, acc[dt][e] (ntiles m16n8 fragments of a warp) being query qs + row0 +
 * grp + 8 (e / 2), column col0 + dt * 8 + 2 tig + e % 2: 4 columns a thread, traded with its
 * neighbour, as one vector reduction. */
void sn_attm_dq_sums(sn_cu_text *t, const sn_att_plan *p);
void sn_attm_dq_adds(sn_cu_text *t, const char *acc, const char *row0, const char *col0,
                     const char *ntiles);

/* cuda_attention_wgmma.c: the wgmma forward's pieces: the aligned dynamic shared memory the
 * tiles are carved from (att_smem), S = Q K^T into s[1][BK / 8][4], O += P V into o_acc. */
void sn_attw_carve_begin(sn_cu_text *t, const sn_att_plan *p);
void sn_attw_scores(sn_cu_text *t, const sn_att_plan *p);
void sn_attw_pv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);
/* The pieces of those: S = Q K^T into s from the K tile's rows from k_row (a C expression),
 * issued and committed, not waited for; packed[kk][0..4) = x's n-tiles 2 kk and 2 kk + 1 as
 * K step kk's A fragment (kdim / 16 steps); O += P V from pa and the V tile's rows from v_row,
 * issued and committed. */
void sn_attw_issue_scores(sn_cu_text *t, const sn_att_plan *p, const char *k_row);
void sn_attw_pack(sn_cu_text *t, sn_attm_ops o, const char *packed, const char *x, const char *kdim);
void sn_attw_issue_pv(sn_cu_text *t, const sn_att_plan *p, const char *v_row);
/* The wgmma of p's type: A from shared memory (ss, B K-major) or from registers (B MN-major). */
const char *sn_attw_name(const sn_att_plan *p, bool regs);

/* cuda_attention_wgmma_fwd.c: the forward (o and lse) with each tile's softmax overlapped by the
 * last tile's P V (p->overlap; opt-in). */
void sn_attw_emit_fwd_overlap(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);

/* cuda_attention_wgmma_dkv.c: the dk/dv kernel's products of one query tile on wgmma (p->wgmma,
 * DKV), in sn_attm_emit_dkv's loop once the tile, its lse and its dots are in: acc_v += P dout,
 * acc_k += dS Q (with p->dq_atomic: dq_sums += scale dS^T K, dS through ds_tile), every wgmma
 * waited for at its end. */
void sn_attw_dkv_products(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);
/* x ([.. / 8][4] accumulator fragments, the warpgroup's 64 rows) = A B^T over `head` columns: A
 * the block's own tile a_tile (K-major), B the streamed tile b_tile's stage st (K-major); K
 * steps of 16 are 32 bytes along the swizzled rows. Issued, not committed. */
void sn_attw_product_ss(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *a_tile,
                        const char *b_tile, const char *head);
/* acc ([HEAD / 8][4]) += X Y over `kdim` (its text: "BQ", "BK") rows: X packed from the
 * fragments x as K steps of 16 (registers, into `packed`), Y the tile at shared address y_at
 * (kdim rows of 64 columns, MN-major: a K step is 16 rows, 2048 bytes). Committed. */
void sn_attw_product_rs(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o, const char *acc,
                        const char *x, const char *packed, const char *y_at, const char *kdim);

/* cuda_attention_wgmma_dq.c: the dq kernel's products of one key tile on wgmma (p->wgmma, DQ;
 * opt-in, SN_ATT_TILES "dq=wgmma"), in sn_attm_emit_dq's loop: s = Q K^T and dp = dout V^T
 * (waited for), then, once ds is in s, acc += ds K (waited for). */
void sn_attw_dq_scores(sn_cu_text *t, const sn_att_plan *p);
void sn_attw_dq_update(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);

#endif

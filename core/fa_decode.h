/*
 * fa_decode.h -- the C interface of stage 8's GPU kernels
 * (kernels/stage8_decode.cu): decoding against a paged KV cache with the
 * keys split across CTAs and the partials merged by merge.h's rule. The
 * problem and its layouts are decode_plan.h's (src/); the kernels live in
 * build/libfa_gpu.so beside the other stages' (python/flashattn_stages/decode_op.py calls
 * them through ctypes) and in the host program ./stage8_gpu. Plain C.
 *
 * What runs: sm_90 (and any GPU of compute capability 8.0 or later), fp16
 * and bf16, d = 64 and 128, page sizes 16 to 256 (powers of two), seqlen_q
 * 1 to 16, num_splits 1 to DECODE_MAX_SPLITS, any number of query heads per
 * key/value head. All pointers are device pointers, 16-byte aligned:
 *   q, o            (B, H, seqlen_q, d) in the dtype
 *   k_cache, v_cache (num_pages, page_size, H_kv, d) in the dtype
 *   block_table     (B, pages_per_seq) int32;  cache_seqlens (B,) int32,
 *                   each in [0, pages_per_seq page_size], every entry that
 *                   covers a key a page of the pool (the kernels trust them:
 *                   the caller checks, decode_tables_check on the host)
 *   softmax_lse     (B, H, seqlen_q) fp32, natural log, -inf for an empty row
 *   workspace       fa_decode_workspace_bytes() bytes: the partials, fp32
 *                   (NULL when num_splits = 1)
 * Every function returns FA_OK or an FA_ERR_* code (fa_gpu.h), the reason in
 * fa_error_string().
 */
#ifndef FA_DECODE_API_H
#define FA_DECODE_API_H

#include <stddef.h>

#include "decode_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void *q, *k_cache, *v_cache;
    const int *block_table, *cache_seqlens;
    void *o;
    float *softmax_lse;
    void *workspace;
    size_t workspace_bytes;
} fa_decode_ptrs;

/* FA_OK when the kernels run this dtype, problem and split count (no GPU
 * needed), else FA_ERR_UNSUPPORTED with the reason naming the flag. */
int fa_decode_check(int dtype, const decode_params *p, int num_splits);

/* Bytes of the partials (O_s, L_s), fp32: 0 when num_splits = 1. */
size_t fa_decode_workspace_bytes(const decode_params *p, int num_splits);

/* CTAs of the split kernel for (dtype, d) that one SM of the current GPU
 * runs at once (its occupancy: registers and shared memory); 1 without a GPU. */
int fa_decode_ctas_per_sm(int dtype, int d);

/* The split count of decode_num_splits (decode_plan.h) for this problem on
 * the current GPU: its sm_count SMs, fa_decode_ctas_per_sm CTAs each. */
int fa_decode_num_splits(int dtype, const decode_params *p, int max_seqlen_k, int sm_count);

/* One decoding step, asynchronous on stream (a cudaStream_t, NULL = the
 * default): the split kernel, then (num_splits > 1) the combine kernel. */
int fa_decode(int dtype, const decode_params *p, int num_splits, const fa_decode_ptrs *x, void *stream);

/* Rows of query heads one CTA holds (more rows of a group take more CTAs,
 * each reading the group's keys again). */
int fa_decode_rows_per_cta(void);

#ifdef __cplusplus
}
#endif
#endif /* FA_DECODE_API_H */

/*
 * stage4_v3_hopper.h -- the C interface of version 3 of the forward
 * (kernels/stage4_v3_hopper.cu): FlashAttention's forward on Hopper's own
 * hardware (sm_90a): the tensor copy engine (TMA) brings Q, K, V tiles into
 * shared memory and signals mbarriers, warpgroup matrix instructions (wgmma)
 * compute S = Q K^T and O += P V, a producer warpgroup and two consumer
 * warpgroups split the work, and the softmax of one tile overlaps the
 * matrix products of another.
 *
 * Version 3 was built in five steps, each kept and selectable (step 5 is the
 * version; the others are the record of how it was reached, timed side by
 * side by tests/gpu/v3_check and described in chapters/04c-hopper.md):
 *   1  TMA + wgmma, one warpgroup of 64 query rows that issues its own copies
 *   2  warp specialization: a producer warpgroup (copies only, 24 registers)
 *      and two consumer warpgroups (64 rows each, 240 registers, setmaxnreg)
 *   3  ping-pong: named barriers make the two consumers take turns on the
 *      tensor cores, so one's softmax runs under the other's products
 *   4  intra-warpgroup overlap: S of key block j is issued before P V of
 *      block j-1, and the softmax of S_j runs while P V is still in flight
 *   5  a persistent grid whose tiles go longest first (causal), so that the
 *      work is balanced across multiprocessors and the next tile's loads
 *      overlap this tile's epilogue
 *
 * Problem: attn_params (src/attn_params.h): Q, O (B, H, seqlen_q, d), K, V
 * (B, H_kv, seqlen_k, d) row-major in fp16 or bf16, L (B, H, seqlen_q) fp32
 * natural-log logsumexp of softmax_scale Q K^T; causal and sliding window
 * through src/mask.h (a row that sees no key: O = 0, L = -inf). d = 64 or
 * 128. Every pointer is a device pointer; Q, K, V 16-byte aligned, O 4-byte.
 * Needs a GPU of compute capability 9.0 (H100, H200).
 *
 * Errors: every function returns 0 or an FA_ERR_* code (stage4_forward.h);
 * fa_v3_error() is the one line saying why.
 */
#ifndef FA_STAGE4_V3_HOPPER_H
#define FA_STAGE4_V3_HOPPER_H

#include <stddef.h>
#include "attn_params.h"
#include "stage4_forward.h"   /* FA_FP16, FA_BF16, FA_OK, FA_ERR_* */

#ifdef __cplusplus
extern "C" {
#endif

#define FA_V3_STEPS 5        /* steps 1 .. FA_V3_STEPS; 0 means the last */
#define FA_V3_BC 128         /* key rows per K/V tile */

/* Query rows per thread block (64 in step 1, 128 after it). */
int fa_v3_block_rows(int step);
/* One line naming the step ("step 3: ... ping-pong"). */
const char *fa_v3_step_name(int step);

/* 0 when version 3 (at `step`) runs this problem in `dtype` on the current
 * GPU; FA_ERR_UNSUPPORTED with one line in fa_v3_error() otherwise (not a
 * Hopper GPU, d not 64 or 128, dtype not fp16/bf16, a malformed problem). */
int fa_v3_check(int step, int dtype, const attn_params *p);

/* The forward. Asynchronous on `stream` (a cudaStream_t, NULL: default). */
int fa_v3_forward(int step, int dtype, const attn_params *p, const void *q, const void *k,
                  const void *v, void *o, float *lse, void *stream);

/* Median time in milliseconds of `repeats` launches (one warm-up first),
 * each timed with CUDA events after `flush_bytes` of a scratch buffer were
 * written (0: no flush) so that no launch finds its inputs in L2. */
int fa_v3_time(int step, int dtype, const attn_params *p, const void *q, const void *k,
               const void *v, void *o, float *lse, int repeats, size_t flush_bytes,
               double *median_ms);

/* The pieces, tested alone on the GPU: the tensor copy engine's 128-byte
 * swizzle (where each element lands in shared memory), the wgmma S = Q K^T
 * accumulator layout and the P V product with P from registers and V
 * transposed, on small integer matrices whose products are exact. Prints one
 * PASS/FAIL line per piece (with the first wrong places) and returns the
 * number failed. */
int fa_v3_selftest(void);

const char *fa_v3_error(void);

#ifdef __cplusplus
}
#endif
#endif /* FA_STAGE4_V3_HOPPER_H */

/*
 * stage4_fwd_v3_hopper.h -- what version 3 of the forward (kernels/
 * stage4_fwd_v3_hopper.cu) offers beyond its row of the table of versions
 * (fa_gpu.h: fa_forward(3, ...), fa_time(FA_FORWARD, 3, ...)): the steps it
 * was built in. (Its pieces are tested alone by build/v3_check:
 * tests/gpu/v3_check_cuda.h.)
 *
 * Version 3 is FlashAttention's forward on Hopper's own hardware (sm_90a):
 * the tensor copy engine (TMA) brings Q, K, V tiles into shared memory and
 * signals mbarriers, warpgroup matrix instructions (wgmma) compute
 * S = Q K^T and O += P V, a producer warpgroup and two consumer warpgroups
 * split the work, and the softmax of one tile overlaps the matrix products
 * of another. It was built in eight steps, each kept and selectable with
 * FA_V3_STEP=k in the environment (default: FA_V3_DEFAULT_STEP below):
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
 *   6  the same grid, but each block takes its next tile from a counter in
 *      device memory when it frees (dynamic, longest first), and releases Q
 *      after the tile's last product that reads it
 *   7  fewer instructions per key block in the consumers: wgmma descriptors
 *      built once per tile, the exponent as one FFMA against the row maximum
 *      of the raw scores (step 4's two operations where |m| >= 2^16), the
 *      maximum moved, and O rescaled, only when a row's maximum grows by
 *      more than 8 (base 2)
 *   8  tile shapes per head dimension: three consumer warpgroups (192 query
 *      rows) at d = 64, key tiles of 176 rows at d = 128
 * Steps 1-4 run bf16 only; steps 5 and later run fp16 and bf16. The default
 * is FA_V3_DEFAULT_STEP. d = 64 or 128; masks,
 * seqlen_q != seqlen_k and grouped K/V heads as every version (mask.h).
 * Needs a GPU of compute capability 9.0 (H100, H200); refuses others with
 * FA_ERR_UNSUPPORTED and one line.
 */
#ifndef FA_STAGE4_V3_HOPPER_H
#define FA_STAGE4_V3_HOPPER_H

#include "fa_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FA_V3_STEPS 8        /* FA_V3_STEP = 1 .. FA_V3_STEPS */
/* The step that runs when FA_V3_STEP is not set: version 3 as the library
 * offers it. Changed only after a device run has measured and checked the
 * step that replaces it (data/gpu/studies/fwd_v3_steps/steps.md). */
#define FA_V3_DEFAULT_STEP 8
#define FA_V3_FP16_FIRST 5   /* steps before this one run bf16 only */
#define FA_V3_BC 128         /* key rows per K/V tile (176 at d = 128 from step 8) */

/* The step launches run now (FA_V3_STEP), 0 when the variable is not a step. */
int fa_v3_current_step(void);
/* One line naming step k ("step 3: + ping-pong ..."). */
const char *fa_v3_step_name(int step);

#ifdef __cplusplus
}
#endif
#endif /* FA_STAGE4_V3_HOPPER_H */

/*
 * stage7_ring.h -- the GPU side of stage 7's bookkeeping (kernels/
 * stage7_ring.cu): the merge rule of core/merge.h on fp32 accumulators, and
 * the sums and roundings around it. Not a version of the table: these run
 * between the forward and backward kernels of fa_gpu.h, on the partial
 * results they leave. Plain C, like fa_gpu.h.
 *
 * Every launcher is asynchronous on `stream` (a cudaStream_t of the current
 * device) and returns FA_OK or an FA_ERR_* code (fa_error_string()).
 * Layouts: O, O_part (rows, d); L, L_part (rows,); the others flat.
 */
#ifndef FA_STAGE7_RING_H
#define FA_STAGE7_RING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] = value for i < n (an accumulator's L starts at -inf: "no key yet"). */
int ring_fill_f32(float *x, size_t n, float value, void *stream);

/* (O, L) = merge((O, L), (O_part, L_part)) row by row (core/merge.h):
 * O, L fp32 accumulators, O_part in the dtype, L_part fp32. A row whose
 * L_part is -inf is left as it was; an accumulator row at -inf takes the
 * partial exactly (so one partial comes out bit for bit). */
int ring_merge(int dtype, float *O, float *L, const void *O_part, const float *L_part, size_t rows,
               int d, void *stream);

/* acc[i] = x[i] (first) or acc[i] + x[i], x in the dtype, acc fp32. dtype
 * FA_FP32 takes x as float (adding one fp32 accumulator to another). */
int ring_accumulate(int dtype, float *acc, const void *x, size_t n, int first, void *stream);

/* out[i] = acc[i] rounded to the dtype (nearest even). */
int ring_round(int dtype, void *out, const float *acc, size_t n, void *stream);

/* x[i] uniform in [-sqrt(3), sqrt(3)) (mean 0, variance 1), in the dtype,
 * from a counter-based hash of (seed, i): the measurement's large inputs,
 * made on the GPU so that the host never holds them. */
int ring_fill_random(int dtype, void *x, size_t n, uint64_t seed, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FA_STAGE7_RING_H */

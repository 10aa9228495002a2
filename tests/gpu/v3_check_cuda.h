/*
 * v3_check_cuda.h -- what the CUDA half of build/v3_check
 * (tests/gpu/v3_check_cuda.cu) offers its plain-C main (tests/gpu/v3_check.c).
 */
#ifndef FA_V3_CHECK_CUDA_H
#define FA_V3_CHECK_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Wait for the work queued on the default stream, at most `seconds`:
 * FA_OK; FA_ERR_CUDA with "still running" when it does not finish (a kernel
 * that deadlocked on a barrier; the process must then exit), or with the
 * kernel's error (fa_error_string() has the line). */
int v3_watchdog_wait(double seconds);

/* The pieces of version 3, tested alone on the GPU: the tensor copy
 * engine's 128-byte swizzle (where each element lands in shared memory),
 * the wgmma S = Q K^T accumulator layout and the P V product with P from
 * registers and V transposed, on small integer matrices whose products are
 * exact; also through step 7's precomputed descriptors and with step 8's
 * 176-key tiles (m64n176 at d = 128). Prints one PASS/FAIL line per piece
 * (with the first wrong places) and returns the number failed; SKIP and 0
 * on a GPU that is not compute capability 9.0. */
int v3_pieces_selftest(void);

#ifdef __cplusplus
}
#endif
#endif /* FA_V3_CHECK_CUDA_H */

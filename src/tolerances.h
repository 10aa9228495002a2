/*
 * tolerances.h -- every tolerance the CPU stages and their property tests
 * enforce, in one place. The programs print the bound beside each error they
 * check, build/test_cpu writes it into data/cpu/exactness.csv beside each
 * measured error, and the paper reads it from there: no other file states a
 * tolerance of its own.
 *
 * Why these sizes (fp64, eps = 2^-52): every output is a weighted average of
 * values of size max|V| built from a few dozen roundings, so errors of a few
 * eps max|V| are what correct rounding gives.
 */
#ifndef FA_TOLERANCES_H
#define FA_TOLERANCES_H

/* Stage 2, streamed against the two-pass softmax, in units of eps times the
 * values' scale: the output over eps max|V|, L over eps max(1, max|x|). */
#define TOL_ONLINE_EPS_UNITS 8.0

/* Stage 2 on the chapter's own case (N = 37, d = 8, logits ~ N(0, 5^2),
 * V ~ N(0, 1), blocks of 4): the largest absolute error over 1000 fresh
 * rows. max|V| of 37 x 8 normals is about 3 to 4, so 8 eps max|V| is about
 * 6e-15; 4e-15 leaves room for no more than a few roundings. */
#define TOL_ONLINE_CHAPTER_ABS 4e-15

/* Stage 3 against stage 1 on N(0, 1) inputs, max abs (build/test_cpu's
 * sweep over N, where every value is of order 1): O and L, and the
 * gradients dQ, dK, dV (sums over N terms, so a larger bound). */
#define TOL_TILED_FORWARD 1e-14
#define TOL_TILED_BACKWARD 1e-12

/* A tiled run (stages 3 and 6, build/test_masks) against the fp64
 * reference on any input, the errors relative to the magnitudes each output
 * rounds with (flash_errors_vs in src/stage3_tiled.c): O and L within
 * FLASH_FWD_TOL; dQ, dK, dV within FLASH_BWD_TOL + FLASH_BWD_L_FACTOR eps
 * max|L| (flash_backward_tol), since the backward rebuilds P = exp(S - L)
 * from a rounded L and so inherits a relative error of about eps |L| per
 * probability (measured against |L| by ./stage6 --sweep lse). */
#define FLASH_FWD_TOL 1e-13
#define FLASH_BWD_TOL 1e-12
#define FLASH_BWD_L_FACTOR 16.0

/* Stage 1's own checks. Rows of P sum to 1 to within a few roundings of N
 * terms in [0, 1] (absolute). The fp64 output against the model's own fp32
 * output, and --dtype fp32 against fp64, as relative norms: fp32 rounds to
 * 2^-24 = 6e-8, so 1e-5 is a hundred-odd roundings; dQ and dK go through
 * dS = P (dP - D), whose terms cancel, and get ten times that. */
#define TOL_ROWSUM 1e-14
#define TOL_MODEL_OUTPUT 1e-5
#define TOL_FP32_OUT 1e-5
#define TOL_FP32_GRAD 1e-4

/* Stage 2 --trace: the streamed L against the two-pass L, relative to
 * max(1, |L|) (a handful of logits: a few roundings at most). */
#define TOL_TRACE_L 1e-15

/* build/test_masks: a causal problem with empty rows against the same
 * problem without them, relative to the outputs' magnitudes (the same
 * arithmetic in another tile order: a few roundings). */
#define TOL_EMPTY_ROWS 1e-14

/* The tiled backward against central differences (step 1e-5), relative to
 * max|grad|: truncation (step^2) and rounding (eps/step) both near 1e-10. */
#define TOL_GRADCHECK 1e-6

#endif /* FA_TOLERANCES_H */

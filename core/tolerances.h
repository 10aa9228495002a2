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

#include <math.h>

/* Stage 2, streamed against the two-pass softmax, for one row of N logits,
 * in units of eps times the values' scale: the output over eps max|V|, L
 * over eps max(1, max|x|). Both algorithms round each of the N terms they
 * sum (the streamed one also rescales once per block), and such errors add
 * up like a random walk: they grow as sqrt(N) (as N only in a worst case
 * that independent roundings do not reach). The bound is
 * TOL_ONLINE_EPS_PER_ROOT sqrt(N) units, never less than
 * TOL_ONLINE_EPS_UNITS: 8 up to 16 logits, 12.2 at the chapter's 37, 28 at
 * 200. Over 2e6 random rows of 1 to 200 logits (spread 5 and 50, d up to
 * 16) the largest error was 1.3 sqrt(N) units; the fixed 8 units used
 * before failed about one run of build/test_cpu in 150 (12 units at
 * N = 200), and the chapter case's old absolute 4e-15 one in 300 (7.1e-15
 * on a row whose max|V| is large). */
#define TOL_ONLINE_EPS_UNITS 8.0
#define TOL_ONLINE_EPS_PER_ROOT 2.0
static inline double tol_online_eps_units(int N)
{
    double b = TOL_ONLINE_EPS_PER_ROOT * sqrt((double)N);
    return b > TOL_ONLINE_EPS_UNITS ? b : TOL_ONLINE_EPS_UNITS;
}

/* Stage 3 against stage 1 on N(0, 1) inputs, max abs (build/test_cpu's
 * sweep over N, where every value is of order 1): O and L, and the
 * gradients dQ, dK, dV (sums over N terms, so a larger bound). */
#define TOL_TILED_FORWARD 1e-14
#define TOL_TILED_BACKWARD 1e-12

/* A tiled run (stages 3 and 6, build/test_masks) against the fp64
 * reference on any input, the errors relative to the magnitudes each output
 * rounds with (flash_errors_vs in src/cpu/stage3_tiled.c): O and L within
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

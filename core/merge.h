/*
 * merge.h -- the rule that joins two partial attention results computed over
 * disjoint sets of keys: the online softmax's rescaling (stage 2), applied to
 * whole results instead of to one block of logits. Stage 7 (one sequence
 * across several GPUs) is built on it; the CPU tests (tests/cpu/test_ring.c)
 * check it first, in fp64, through stage 3's tiled forward.
 *
 * A partial result of one query row over a key set A is (O_A, L_A): the
 * softmax-weighted average of the value rows of A and the natural-log
 * logsumexp of the row's scores over A (-inf, with O_A = 0, when the row sees
 * no key of A: mask.h's convention for an empty row). For disjoint A and B
 *
 *     L = log(exp(L_A) + exp(L_B))                         (logaddexp)
 *     O = exp(L_A - L) O_A + exp(L_B - L) O_B
 *
 * because exp(L_A) is the softmax denominator over A, so each weight is the
 * share of the whole denominator that A holds. This is exercise 2's
 * correction factor alpha = exp(m_old - m_new) with the running maximum m
 * replaced by the logsumexp L, which carries the denominator with it.
 *
 * How it is evaluated: with hi the larger of L_A, L_B, lo the other and
 * e = exp(lo - hi) in (0, 1],
 *     L = hi + log1p(e),  weight of hi = 1 / (1 + e),  weight of lo = e / (1 + e)
 * -- the same two weights as exp(L_A - L), exp(L_B - L), but from one
 * exponential, so that they add up to 1 within one rounding, and no
 * exponential of a large number is ever taken.
 * The empty cases are exact, never NaN:
 *     L_B = -inf            (O_A, L_A) unchanged, bit for bit
 *     L_A = -inf            (O_B, L_B) unchanged, bit for bit
 *     both -inf             O = 0, L = -inf
 * A NaN in either L propagates to L (a bug upstream must stay visible).
 *
 * The rule is written once, here, for the CPU (fp64 arrays, src/cpu/merge.c) and
 * the GPU (kernels/stage7_ring.cu: fp32 accumulators, the partial in the
 * dtype; each value is widened to double and the same two functions below
 * run on it). Plain C and CUDA both compile this header (FA_HD, mask.h).
 */
#ifndef FA_MERGE_H
#define FA_MERGE_H

#include <math.h>
#include <stddef.h>

#include "mask.h"   /* FA_HD */

enum { MERGE_BOTH = 0, MERGE_KEEP_A = 1, MERGE_TAKE_B = 2, MERGE_EMPTY = 3 };

/* What to do with one row: the case, the two weights and the merged L. */
typedef struct {
    int how;          /* MERGE_* */
    double w_a, w_b;  /* weights of O_A and O_B (MERGE_BOTH only) */
    double L;         /* merged logsumexp */
} merge_plan;

//> merge-rule
/* The merge of one row's logsumexps L_a, L_b (natural log). */
FA_HD merge_plan merge_plan_of(double L_a, double L_b)
{
    merge_plan m = {MERGE_BOTH, 0.0, 0.0, 0.0};
    if (L_b == -INFINITY) {
        m.how = L_a == -INFINITY ? MERGE_EMPTY : MERGE_KEEP_A;
        m.L = L_a;
        return m;
    }
    if (L_a == -INFINITY) {
        m.how = MERGE_TAKE_B;
        m.L = L_b;
        return m;
    }
    //> merge-weights
    bool a_hi = L_a >= L_b;
    double hi = a_hi ? L_a : L_b, lo = a_hi ? L_b : L_a;   /* a NaN lands in lo */
    double e = exp(lo - hi);
    double w_hi = 1.0 / (1.0 + e), w_lo = e * w_hi;
    m.L = hi + log1p(e);
    m.w_a = a_hi ? w_hi : w_lo;
    m.w_b = a_hi ? w_lo : w_hi;
    //< merge-weights
    return m;
}

/* One output element of the merged row from the partials' elements. */
FA_HD double merge_elem(merge_plan m, double o_a, double o_b)
{
    switch (m.how) {
    case MERGE_KEEP_A: return o_a;
    case MERGE_TAKE_B: return o_b;
    case MERGE_EMPTY: return 0.0;
    default: return m.w_a * o_a + m.w_b * o_b;
    }
}
//< merge-rule

/* Merge rows partial results (O_b, L_b) into (O_a, L_a), fp64, in place:
 * O_a (rows, d) and L_a (rows,) become the merged result. O_b (rows, d) and
 * L_b (rows,) are only read. A row with L_b = -inf is left untouched. */
void merge_into(double *O_a, double *L_a, const double *O_b, const double *L_b, size_t rows, int d);

/* The same into separate outputs: (O, L) = merge((O_a, L_a), (O_b, L_b)).
 * O may be O_a or O_b (and L may be L_a or L_b): each row reads its inputs
 * before it writes. */
void merge_rows(const double *O_a, const double *L_a, const double *O_b, const double *L_b,
                size_t rows, int d, double *O, double *L);

#endif /* FA_MERGE_H */

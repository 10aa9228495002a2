/*
 * stage2_online_softmax.h -- the online softmax: a softmax-weighted sum of
 * value rows computed in one streaming pass over blocks of logits, with O(d)
 * state (running max m, running denominator l, unnormalized output o).
 *
 * Source: Milakov & Gimelshein, "Online normalizer calculation for softmax"
 * (2018); the chapter's recurrence, for a block of logits x_j with values v_j:
 *   m_new = max(m, max_j x_j)
 *   alpha = exp(m - m_new)                  (0 when nothing was seen yet)
 *   l     = alpha * l + sum_j exp(x_j - m_new)
 *   o     = alpha * o + sum_j exp(x_j - m_new) v_j
 * and at the end out = o / l, L = m + log l (the row's logsumexp).
 *
 * IO: each logit and each value row is read exactly once (N and N*d
 * elements); the state is d + 2 numbers whatever N is.
 */
#ifndef FA_STAGE2_ONLINE_SOFTMAX_H
#define FA_STAGE2_ONLINE_SOFTMAX_H

#include <stdio.h>
#include "common.h"

/* One step of the recurrence. x (nb,) logits, some possibly -inf (masked);
 * V (nb, d) with leading dimension ldv (may be NULL when d == 0);
 * state m, l, o (d,) updated in place; *alpha gets the correction applied to
 * the old state (may be NULL). A block whose logits are all -inf leaves the
 * state unchanged. */
void online_softmax_update(double *m, double *l, double *o, const double *x,
                           const double *V, int nb, int d, int ldv, double *alpha);

/* o /= l and *L = m + log l. A row that saw only -inf (l == 0) gets o = 0
 * and L = -inf: the math's answer for an empty softmax, never NaN. */
void online_softmax_finalize(double m, double l, double *o, int d, double *L);

/* The whole streaming pass: out (d,) = sum_i softmax(x)_i V_i, L = logsumexp(x),
 * for x (N,), V (N, d), in blocks of `block` logits. Counts reads of x (as S)
 * and V, writes of out (as O) and L. With trace != NULL, prints m, l, alpha
 * block by block. */
void online_softmax_weighted_sum(const double *x, const double *V, int N, int d, int block,
                                 double *out, double *L, io_counter *io, FILE *trace);

/* The reference: two passes over x (max, then sum), then the weighted sum. */
void two_pass_softmax_weighted_sum(const double *x, const double *V, int N, int d,
                                   double *out, double *L);

#endif /* FA_STAGE2_ONLINE_SOFTMAX_H */

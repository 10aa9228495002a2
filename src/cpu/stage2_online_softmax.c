/*
 * stage2_online_softmax.c -- Stage 2: the online softmax.
 *
 * What it adds over stage 1: a softmax-weighted sum that never needs the whole
 * row of logits at once. The running max m, the running denominator l and the
 * correction alpha = exp(m_old - m_new) let a single pass over blocks of
 * logits give the same answer as the two-pass softmax, with d + 2 numbers of
 * state. Stage 3 applies exactly this update to every row of a score tile.
 *
 * Build and run:   make stage2 && ./stage2
 *   ./stage2                           random rows (chapter-like: N = 37, d = 8,
 *                                      logits with spread 5), huge logits, and
 *                                      every query row of the real input
 *   ./stage2 --trace                   the logits [3, 1, 6, 2] in blocks of 2
 *   ./stage2 --trace --logits 0.5,2,-1,7,3 --block 3
 *
 * What it prints: max abs error of the streaming result against the two-pass
 * softmax for every block size tried; the counted reads (each logit once);
 * with --trace, m, l and alpha after each block, then L = m + log l.
 *
 * Cost: the same O(N d) arithmetic as the two-pass version, one pass over x.
 */
#include "stage2_online_softmax.h"
#include "tolerances.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

//> online-update
//> online-step
void online_softmax_update(double *m, double *l, double *o, const double *x,
                           const double *V, int nb, int d, int ldv, double *alpha)
{
    double m_block = -INFINITY;
    for (int j = 0; j < nb; j++) m_block = fmax(m_block, x[j]);
    double m_new = fmax(*m, m_block);
    if (m_new == -INFINITY) {          /* every logit so far is masked: */
        if (alpha) *alpha = 1.0;       /* nothing to add, and exp(-inf - -inf) */
        return;                        /* would be NaN */
    }
    /* Rescale what was accumulated against the old max onto the new one.
     * Before the first unmasked block m = -inf and l = o = 0: alpha = 0. */
    //> online-rescale
    double a = exp(*m - m_new);
    *l *= a;
    for (int c = 0; c < d; c++) o[c] *= a;
    for (int j = 0; j < nb; j++) {
        double p = exp(x[j] - m_new);  /* exponent <= 0: in [0, 1], no overflow */
        *l += p;
        for (int c = 0; c < d; c++) o[c] += p * V[(size_t)j * ldv + c];
    }
    *m = m_new;
    //< online-rescale
    if (alpha) *alpha = a;
}
//< online-step

void online_softmax_finalize(double m, double l, double *o, int d, double *L)
{
    if (l == 0.0) {                    /* the row saw only -inf */
        for (int c = 0; c < d; c++) o[c] = 0.0;
        *L = -INFINITY;
        return;
    }
    for (int c = 0; c < d; c++) o[c] /= l;   /* normalize once, at the end */
    *L = m + log(l);
}
//< online-update

/* One block of --trace: its logits, then m, the correction alpha and l after it. */
static void trace_block(FILE *trace, int b, const double *x, int nb, double m_old, double m, double alpha,
                        double l)
{
    fprintf(trace, "  block %d  x = [", b);
    for (int j = 0; j < nb; j++) fprintf(trace, "%s%g", j ? ", " : "", x[j]);
    if (isinf(m) && m < 0)   /* every logit so far -inf: exp(-inf - -inf) is undefined, nothing to rescale */
        fprintf(trace, "]\n    m: -inf -> -inf   alpha = 1 (no finite logit yet: nothing to rescale)   l = %.6f\n", l);
    else
        fprintf(trace, "]\n    m: %g -> %g   alpha = exp(%g - %g) = %.6f   l = %.6f\n", m_old, m, m_old, m, alpha, l);
}

//> online-row
void online_softmax_weighted_sum(const double *x, const double *V, int N, int d, int block,
                                 double *out, double *L, io_counter *io, FILE *trace)
{
    //> online-loop
    double m = -INFINITY, l = 0.0;     /* the whole state: m, l and out (d,) */
    for (int c = 0; c < d; c++) out[c] = 0.0;
    for (int j0 = 0, b = 1; j0 < N; j0 += block, b++) {
        int nb = N - j0 < block ? N - j0 : block;
        io_read(io, T_S, (uint64_t)nb);              /* this block's logits, once */
        io_read(io, T_V, (uint64_t)nb * d);          /* and its value rows, once */
        double m_old = m, alpha;
        online_softmax_update(&m, &l, out, x + j0, V ? V + (size_t)j0 * d : NULL, nb, d, d,
                              &alpha);
        if (trace) trace_block(trace, b, x + j0, nb, m_old, m, alpha, l);
    }
    online_softmax_finalize(m, l, out, d, L);
    io_write(io, T_O, (uint64_t)d);
    io_write(io, T_L, 1);
    //< online-loop
    /* alpha is in [0, 1] and l in [1, N]: fixed decimals suit them; m and L
     * may be any size, so %g beyond 1e6 */
    if (trace)
        fprintf(trace, fabs(*L) < 1e6 ? "  final: m = %g, l = %.6f, L = m + log l = %.7f\n"
                                      : "  final: m = %g, l = %.6f, L = m + log l = %.9g\n",
                m, l, *L);
}
//< online-row

void two_pass_softmax_weighted_sum(const double *x, const double *V, int N, int d,
                                   double *out, double *L)
{
    double m = -INFINITY, l = 0.0;
    for (int j = 0; j < N; j++) m = fmax(m, x[j]);
    for (int c = 0; c < d; c++) out[c] = 0.0;
    if (m == -INFINITY) {
        *L = -INFINITY;
        return;
    }
    for (int j = 0; j < N; j++) l += exp(x[j] - m);
    for (int j = 0; j < N; j++) {
        double p = exp(x[j] - m) / l;
        for (int c = 0; c < d; c++) out[c] += p * V[(size_t)j * d + c];
    }
    *L = m + log(l);
}

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */

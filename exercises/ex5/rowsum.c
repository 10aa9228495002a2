/*
 * ex5/rowsum.c -- YOUR code for exercise 5 (a): rebuild each row's
 * probabilities from the scores and the saved log-sum-exp, the way the
 * backward pass does, and add them up (see statement.md and rowsum.h).
 * Check it with  make exercise EX=5
 */
#include "rowsum.h"

#include <math.h>

void rebuilt_row_sums(const double *Q, const double *K, const double *L, int N, int d,
                      double softmax_scale, bool causal, double *rowsum)
{
    /* TODO: your code here. Until then this does nothing, and the checker
     * finds rowsum unwritten. */
    (void)Q, (void)K, (void)L, (void)N, (void)d, (void)softmax_scale, (void)causal;
    (void)rowsum;
}

/*
 * exercises/tests/ex5-rowsum-ones/rowsum.c -- test fixture for exercise 5,
 * wrong on purpose: writes 1 for every row without computing anything.
 * The checker must reject it (see expect).
 */
#include "rowsum.h"

void rebuilt_row_sums(const double *Q, const double *K, const double *L, int N, int d,
                      double softmax_scale, bool causal, double *rowsum)
{
    (void)Q, (void)K, (void)L, (void)d, (void)softmax_scale, (void)causal;
    for (int i = 0; i < N; i++) rowsum[i] = 1.0;
}

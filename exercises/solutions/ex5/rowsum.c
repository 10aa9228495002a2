/*
 * solutions/ex5/rowsum.c -- reference solution to exercise 5 (a): the row
 * sums of P_ij = exp(S_ij - L_i), rebuilt as the backward pass rebuilds them.
 */
#include "rowsum.h"

#include <math.h>

#include "mask.h"

void rebuilt_row_sums(const double *Q, const double *K, const double *L, int N, int d,
                      double softmax_scale, bool causal, double *rowsum)
{
    /* the keys row i sees, from the project's one mask definition */
    attn_mask mask = causal ? mask_causal(N, N) : mask_full(N, N);
    for (int i = 0; i < N; i++) {
        double sum = 0.0;
        int last = mask_key_last(mask, i);
        if (L[i] != -INFINITY)                    /* a row that sees nothing sums to 0 */
            for (int j = mask_key_first(mask, i); j <= last; j++) {
                double s = 0.0;
                for (int k = 0; k < d; k++) s += Q[(size_t)i * d + k] * K[(size_t)j * d + k];
                sum += exp(s * softmax_scale - L[i]);
            }
        rowsum[i] = sum;
    }
}

/*
 * merge.c -- the merge rule of merge.h over fp64 arrays (the CPU side; the
 * GPU side is kernels/stage7_ring.cu on the same two functions).
 */
#include "merge.h"

//> merge-rows
void merge_rows(const double *O_a, const double *L_a, const double *O_b, const double *L_b,
                size_t rows, int d, double *O, double *L)
{
    for (size_t r = 0; r < rows; r++) {
        merge_plan m = merge_plan_of(L_a[r], L_b[r]);
        const double *a = O_a + r * d, *b = O_b + r * d;
        double *o = O + r * d;
        for (int k = 0; k < d; k++) o[k] = merge_elem(m, a[k], b[k]);
        L[r] = m.L;
    }
}
//< merge-rows

void merge_into(double *O_a, double *L_a, const double *O_b, const double *L_b, size_t rows, int d)
{
    merge_rows(O_a, L_a, O_b, L_b, rows, d, O_a, L_a);
}

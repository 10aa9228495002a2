/*
 * mask_lib.c -- src/mask.h as a shared library (build/libfa_mask.so), so that
 * the NumPy reference (src/reference/attention_ref.py, through ctypes) asks
 * the same definition as the C stages and the kernels instead of writing its
 * own. Each function is a thin wrapper; the window convention is mask.h's.
 */
#include <stdint.h>

#include "mask.h"

/* out[i * seqlen_k + j] = 1 when key j is visible to query i, else 0. */
void fa_mask_fill(int seqlen_q, int seqlen_k, int left, int right, unsigned char *out)
{
    attn_mask m = mask_make(seqlen_q, seqlen_k, left, right);
    for (int i = 0; i < seqlen_q; i++)
        for (int j = 0; j < seqlen_k; j++)
            out[(int64_t)i * seqlen_k + j] = mask_visible(m, i, j);
}

/* Key blocks [*b, *e) of size Bc that query rows [i0, i1) visit; returns the count. */
int fa_mask_key_blocks(int seqlen_q, int seqlen_k, int left, int right, int i0, int i1, int Bc,
                       int *b, int *e)
{
    return mask_key_blocks(mask_make(seqlen_q, seqlen_k, left, right), i0, i1, Bc, b, e);
}

/* Query blocks [*b, *e) of size Br that see a key of [j0, j1); returns the count. */
int fa_mask_query_blocks(int seqlen_q, int seqlen_k, int left, int right, int j0, int j1, int Br,
                         int *b, int *e)
{
    return mask_query_blocks(mask_make(seqlen_q, seqlen_k, left, right), j0, j1, Br, b, e);
}

/* Tiles a Br x Bc forward visits. */
int64_t fa_mask_tiles_visited(int seqlen_q, int seqlen_k, int left, int right, int Br, int Bc)
{
    return mask_tiles_visited(mask_make(seqlen_q, seqlen_k, left, right), Br, Bc);
}

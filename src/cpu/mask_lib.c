/*
 * mask_lib.c -- core/mask.h as a shared library (build/libfa_mask.so), so that
 * the NumPy reference (src/cpu/reference/attention_ref.py, through ctypes) asks
 * the same definition as the C stages and the kernels instead of writing its
 * own. Each function is a thin wrapper; the window convention is mask.h's.
 */
#include <stdint.h>

#include "fa_gpu.h"
#include "mask.h"

/* fa_mask_fill of core/fa_gpu.h, the same signature as libfa_gpu.so's: one
 * mask ABI whichever library a tool loads. FA_OK, or FA_ERR_UNSUPPORTED for
 * a malformed problem (this library keeps no error string). */
int fa_mask_fill(const attn_params *p, unsigned char *visible)
{
    char why[256];
    return attn_mask_fill(p, visible, why, sizeof why) ? FA_ERR_UNSUPPORTED : FA_OK;
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

/*
 * attn_params.h -- one description of an attention problem, shared by every
 * stage (CPU and GPU), the exercise checkers and the Python tools (one ctypes
 * mirror in python/flashattn_stages/fa.py). Modelled on FlashAttention's Flash_fwd_params:
 * sizes and the mask travel together, so adding a mask or grouped heads does
 * not add positional arguments to every function.
 *
 * Layout of the tensors it describes (row-major, C order):
 *   Q, O, dO, dQ      (B, H,    seqlen_q, d)
 *   K, V, dK, dV      (B, H_kv, seqlen_k, d)
 *   L (logsumexp), D  (B, H,    seqlen_q)
 * Query head h reads key/value head h / (H / H_kv) (grouped-query attention;
 * H_kv = 1 is multi-query attention, H_kv = H the ordinary case). dK and dV
 * of a key/value head sum the contributions of its H / H_kv query heads.
 *
 * Plain C and CUDA both compile this header.
 */
#ifndef FA_ATTN_PARAMS_H
#define FA_ATTN_PARAMS_H

#include <stddef.h>
#include <stdio.h>
#include "mask.h"

typedef struct {
    int B;                    /* batch */
    int H;                    /* query heads */
    int H_kv;                 /* key/value heads; H is a multiple of H_kv */
    int seqlen_q;             /* query rows per head */
    int seqlen_k;             /* key/value rows per head */
    int d;                    /* head dimension */
    double softmax_scale;     /* multiplies Q K^T; 1/sqrt(d) unless given */
    int window_size_left;     /* -1: unbounded (see mask.h) */
    int window_size_right;    /* -1: unbounded; causal is (-1, 0) */
} attn_params;

/* The ordinary problem: H_kv = H, seqlen_q = seqlen_k = N, no mask,
 * softmax_scale = 1/sqrt(d) is left to the caller (0 here: set it). */
FA_HD attn_params attn_params_make(int B, int H, int N, int d, double softmax_scale)
{
    attn_params p = {B, H, H, N, N, d, softmax_scale, -1, -1};
    return p;
}

/* causal = true: the causal mask, the window (-1, 0) (FlashAttention's
 * causal=True, bottom-right aligned); false leaves the window as it is. The
 * one place a program turns the flag into a window. */
FA_HD void attn_params_causal(attn_params *p, bool causal)
{
    if (causal) {
        p->window_size_left = -1;
        p->window_size_right = 0;
    }
}

FA_HD attn_mask attn_mask_of(const attn_params *p)
{
    return mask_make(p->seqlen_q, p->seqlen_k, p->window_size_left, p->window_size_right);
}
FA_HD bool attn_is_causal(const attn_params *p) { return mask_is_causal(attn_mask_of(p)); }
FA_HD bool attn_is_masked(const attn_params *p)
{
    return p->window_size_left >= 0 || p->window_size_right >= 0;
}
/* The key/value head that query head h reads. */
FA_HD int attn_kv_head(const attn_params *p, int h) { return h / (p->H / p->H_kv); }

/* Element counts and offsets of one head's (rows, d) block. */
FA_HD size_t attn_q_numel(const attn_params *p) { return (size_t)p->B * p->H * p->seqlen_q * p->d; }
FA_HD size_t attn_kv_numel(const attn_params *p) { return (size_t)p->B * p->H_kv * p->seqlen_k * p->d; }
FA_HD size_t attn_rows(const attn_params *p) { return (size_t)p->B * p->H * p->seqlen_q; }
FA_HD size_t attn_q_offset(const attn_params *p, int b, int h)
{
    return ((size_t)b * p->H + h) * p->seqlen_q * p->d;
}
FA_HD size_t attn_kv_offset(const attn_params *p, int b, int h)
{
    return ((size_t)b * p->H_kv + attn_kv_head(p, h)) * p->seqlen_k * p->d;
}
FA_HD size_t attn_row_offset(const attn_params *p, int b, int h)
{
    return ((size_t)b * p->H + h) * p->seqlen_q;
}

/* 0 when the problem is well formed; otherwise -1 with one line in why
 * (naming the field of attn_params, as a Python caller knows it, not a
 * program's flag): sizes >= 1, H a multiple of
 * H_kv, window sizes -1 or >= 0, a finite positive softmax_scale. */
static inline int attn_params_check(const attn_params *p, char *why, size_t n)
{
    if (p->B < 1 || p->H < 1 || p->H_kv < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->d < 1) {
        snprintf(why, n, "B %d, H %d, H_kv %d, seqlen_q %d, seqlen_k %d, d %d: every size must be >= 1",
                 p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, p->d);
        return -1;
    }
    if (p->H % p->H_kv != 0) {
        snprintf(why, n, "H_kv %d: the %d query heads must be a multiple of the key/value heads",
                 p->H_kv, p->H);
        return -1;
    }
    if (p->window_size_left < -1 || p->window_size_right < -1) {
        snprintf(why, n, "window_size (%d, %d): each side is -1 (unbounded) or >= 0",
                 p->window_size_left, p->window_size_right);
        return -1;
    }
    if (!(p->softmax_scale > 0) || p->softmax_scale > 1e300) {
        snprintf(why, n, "softmax_scale %g: must be finite and > 0", p->softmax_scale);
        return -1;
    }
    return 0;
}

/* The mask of problem p as data: visible[i * seqlen_k + j] = 1 when query i
 * sees key j (mask_visible), else 0, a seqlen_q x seqlen_k row-major byte
 * matrix the caller owns. The one body behind fa_mask_fill (core/fa_gpu.h),
 * which both libraries export: libfa_gpu.so (kernels/fa_api.cu) and
 * libfa_mask.so (src/cpu/mask_lib.c). 0, or -1 with attn_params_check's line. */
static inline int attn_mask_fill(const attn_params *p, unsigned char *visible, char *why, size_t n)
{
    if (attn_params_check(p, why, n)) return -1;
    attn_mask m = attn_mask_of(p);
    for (int i = 0; i < p->seqlen_q; i++)
        for (int j = 0; j < p->seqlen_k; j++)
            visible[(size_t)i * p->seqlen_k + j] = mask_visible(m, i, j) ? 1 : 0;
    return 0;
}

#endif /* FA_ATTN_PARAMS_H */

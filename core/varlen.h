/*
 * varlen.h -- batches of sequences of different lengths, packed along the
 * rows (FlashAttention's flash_attn_varlen_func): B sequences, the query
 * rows of sequence b are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of
 * one (total_q, H, d) tensor, its key rows cu_seqlens_k[b] ..
 * cu_seqlens_k[b + 1] - 1 of one (total_k, H_kv, d) tensor; cu_seqlens_q and
 * cu_seqlens_k are int32 arrays of B + 1 entries, 0 first, total last,
 * non-decreasing (a sequence may be empty). Each sequence is its own
 * problem: its mask is mask.h's for (len_q, len_k) with the call's window,
 * so causal aligns each sequence's last query with its last key.
 *
 * What every varlen kernel shares, host and device (FA_HD):
 *   varlen_seq_of   the rows of sequence b in the packed tensors
 *   varlen_block    query block u of a grid that covers every sequence's
 *                   blocks without a scan over the lengths: which sequence,
 *                   which of its blocks (or an unused slot)
 *   varlen_check    the host's check of the two arrays (one line on error)
 * The device reads cu_seqlens from global memory through these functions;
 * nothing here allocates or needs CUDA.
 */
#ifndef FA_VARLEN_H
#define FA_VARLEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mask.h"

/* Sequence b's rows: queries [q0, q0 + len_q) of the packed Q (O, dO, dQ),
 * keys [k0, k0 + len_k) of the packed K (V, dK, dV). The entries are
 * clamped into [0, total] and the ends kept in order, so arrays that
 * varlen_check would refuse (a kernel launched without the check, inside a
 * captured graph say) still address only rows of the tensors. */
typedef struct {
    int q0, len_q, k0, len_k;
} varlen_seq;

FA_HD int varlen_clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Sequence b's first row alone (cu[b] clamped): what a kernel short of
 * registers reads again where it needs it. */
FA_HD int varlen_first(const int32_t *cu, int total, int b) { return varlen_clamp(cu[b], 0, total); }

FA_HD varlen_seq varlen_seq_of(const int32_t *cu_q, const int32_t *cu_k, int total_q, int total_k, int b)
{
    varlen_seq s;
    s.q0 = varlen_clamp(cu_q[b], 0, total_q);
    s.len_q = varlen_clamp(cu_q[b + 1], s.q0, total_q) - s.q0;
    s.k0 = varlen_clamp(cu_k[b], 0, total_k);
    s.len_k = varlen_clamp(cu_k[b + 1], s.k0, total_k) - s.k0;
    return s;
}

/* The sequence's mask: mask.h's for its own lengths and the call's window. */
FA_HD attn_mask varlen_mask(varlen_seq s, int window_size_left, int window_size_right)
{
    return mask_make(s.len_q, s.len_k, window_size_left, window_size_right);
}

//> varlen-blocks
/* Blocks of Br query rows over all sequences, numbered without knowing the
 * lengths in advance: sequence b's blocks take the slots from
 *     start(b) = floor(cu[b] / Br) + b
 * on. start(b + 1) - start(b) = floor(cu[b+1]/Br) - floor(cu[b]/Br) + 1 >=
 * floor(len/Br) + 1 >= ceil(len/Br), so a sequence's blocks never run into
 * the next one's slots, and
 *     slots = floor(total / Br) + B
 * cover them all (the last sequence's blocks end at most there). At most two
 * slots per sequence stay unused. A kernel whose grid (or tile counter)
 * runs over the slots finds its sequence by a binary search of B + 1
 * entries instead of a prefix sum of block counts computed first. */
FA_HD int varlen_slots(int total, int B, int Br) { return total / Br + B; }
FA_HD int varlen_start(const int32_t *cu, int total, int b, int Br)
{
    return varlen_clamp(cu[b], 0, total) / Br + b;
}
/* Slot u: its sequence *b (the last b with start(b) <= u) and block *qb of
 * it; returns 1 when that block holds rows of the sequence, 0 for an unused
 * slot (*qb is then past the sequence's blocks). u in [0, slots). */
FA_HD int varlen_block(const int32_t *cu, int B, int total, int Br, int u, int *b, int *qb)
{
    int lo = 0, hi = B - 1;   /* start(0) = 0 <= u: the answer is in [lo, hi] */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (varlen_start(cu, total, mid, Br) <= u) lo = mid;
        else hi = mid - 1;
    }
    *b = lo;
    *qb = u - varlen_start(cu, total, lo, Br);
    const int c0 = varlen_clamp(cu[lo], 0, total), c1 = varlen_clamp(cu[lo + 1], c0, total);
    return *qb * Br < c1 - c0;
}
//< varlen-blocks

/* 0 when cu_q, cu_k (host copies, B + 1 entries each) describe B >= 1
 * sequences of total_q query and total_k key rows, each no longer than
 * max_seqlen_q, max_seqlen_k: first entries 0, non-decreasing, last entries
 * the totals. Otherwise -1 with one line in why naming the array and entry. */
static inline int varlen_check(const int32_t *cu_q, const int32_t *cu_k, int B, int total_q, int total_k,
                               int max_seqlen_q, int max_seqlen_k, char *why, size_t n)
{
    if (B < 1) {
        snprintf(why, n, "cu_seqlens: %d sequences, need at least 1 (arrays of B + 1 >= 2 entries)", B);
        return -1;
    }
    const int32_t *cu[2] = {cu_q, cu_k};
    const int total[2] = {total_q, total_k}, maxlen[2] = {max_seqlen_q, max_seqlen_k};
    const char *name[2] = {"cu_seqlens_q", "cu_seqlens_k"}, *mname[2] = {"max_seqlen_q", "max_seqlen_k"};
    for (int t = 0; t < 2; t++) {
        if (cu[t][0] != 0) {
            snprintf(why, n, "%s[0] = %d: the first entry must be 0", name[t], (int)cu[t][0]);
            return -1;
        }
        for (int b = 0; b < B; b++) {
            const long long len = (long long)cu[t][b + 1] - cu[t][b];
            if (len < 0) {
                snprintf(why, n, "%s[%d] = %d < %s[%d] = %d: the entries must not decrease", name[t], b + 1,
                         (int)cu[t][b + 1], name[t], b, (int)cu[t][b]);
                return -1;
            }
            if (len > maxlen[t]) {
                snprintf(why, n, "%s: sequence %d has %lld rows, more than %s = %d", name[t], b, len,
                         mname[t], maxlen[t]);
                return -1;
            }
        }
        if (cu[t][B] != total[t]) {
            snprintf(why, n, "%s[%d] = %d: the last entry must be the %s rows' total, %d", name[t], B,
                     (int)cu[t][B], t ? "key" : "query", total[t]);
            return -1;
        }
    }
    return 0;
}

#endif /* FA_VARLEN_H */

/*
 * mask.h -- the one definition of which keys a query sees: causal, sliding
 * window, seqlen_q != seqlen_k. Every stage, the IO and tile-count formulas,
 * the kernels, the NumPy reference (through build/libfa_mask.so) and the
 * exercise checkers call these functions; no other file spells a mask.
 *
 * The convention is FlashAttention's (flash-attention, csrc/flash_attn/src/
 * mask.h, and the window_size argument of flash_attn_func): with
 * delta = seqlen_k - seqlen_q, so that the last query lines up with the last
 * key ("bottom-right" alignment),
 *
 *     key j is visible to query i  iff  i + delta - left <= j <= i + delta + right
 *
 * where left = window_size_left and right = window_size_right, and -1 means
 * "no bound on that side". So
 *     (-1, -1)  full attention            (-1, 0)  causal
 *     (W-1, 0)  causal sliding window of W keys, the query's own included
 * Window sizes are -1 or >= 0 (attn_params_check refuses anything else).
 *
 * Consequences used below (proved in chapters/14-masks.md):
 *   - a row's visible keys form one interval [key_first(i), key_last(i)],
 *     both ends non-decreasing in i; with left, right >= -1 a row is empty
 *     only when i + delta + right < 0 (a prefix of the rows: seqlen_q >
 *     seqlen_k under causal, say);
 *   - so a block of rows [i0, i1) sees exactly the keys
 *     [key_first(i0), key_last(i1 - 1)] (empty rows give key_first = 0 and
 *     add nothing beyond it), and a block of keys [j0, j1) is seen by exactly
 *     the rows [query_first(j0), query_last(j1 - 1)];
 *   - a (query block, key block) tile holds a visible pair iff the key block
 *     meets its row block's key range iff the row block meets its key block's
 *     query range: the forward (rows outer) and the backward (keys outer)
 *     visit the same tiles.
 *
 * Plain C and CUDA both compile this header (FA_HD adds __host__ __device__
 * under nvcc); it needs no CUDA header and no library.
 */
#ifndef FA_MASK_H
#define FA_MASK_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define FA_HD static inline __host__ __device__
#else
#define FA_HD static inline
#endif

/* The part of the problem that decides visibility. */
typedef struct {
    int seqlen_q;            /* query rows */
    int seqlen_k;            /* key rows */
    int window_size_left;    /* -1: unbounded */
    int window_size_right;   /* -1: unbounded; causal is (-1, 0) */
} attn_mask;

FA_HD attn_mask mask_make(int seqlen_q, int seqlen_k, int window_size_left, int window_size_right)
{
    attn_mask m = {seqlen_q, seqlen_k, window_size_left, window_size_right};
    return m;
}
FA_HD attn_mask mask_causal(int seqlen_q, int seqlen_k) { return mask_make(seqlen_q, seqlen_k, -1, 0); }
FA_HD attn_mask mask_full(int seqlen_q, int seqlen_k) { return mask_make(seqlen_q, seqlen_k, -1, -1); }
/* The mask classes a kernel branches on: no window at all (every key
 * visible to every query), and the causal window (-1, 0). */
FA_HD bool mask_is_full(attn_mask m) { return m.window_size_left < 0 && m.window_size_right < 0; }
FA_HD bool mask_is_causal(attn_mask m) { return m.window_size_left < 0 && m.window_size_right == 0; }

FA_HD int mask_delta(attn_mask m) { return m.seqlen_k - m.seqlen_q; }
FA_HD int mask_imin(int a, int b) { return a < b ? a : b; }
FA_HD int mask_imax(int a, int b) { return a > b ? a : b; }

//> mask-visible
/* The definition. i in [0, seqlen_q), j in [0, seqlen_k). */
FA_HD bool mask_visible(attn_mask m, int i, int j)
{
    int diag = i + mask_delta(m);   /* the key on query i's aligned diagonal */
    return (m.window_size_left < 0 || j >= diag - m.window_size_left) &&
           (m.window_size_right < 0 || j <= diag + m.window_size_right);
}
//< mask-visible

//> mask-ranges
//> mask-key-ends
/* First and last key query i sees, clipped to [0, seqlen_k - 1]; the row is
 * empty when key_first > key_last. Both ends are those of mask_visible. */
FA_HD int mask_key_first(attn_mask m, int i)
{
    return m.window_size_left < 0 ? 0 : mask_imax(0, i + mask_delta(m) - m.window_size_left);
}
FA_HD int mask_key_last(attn_mask m, int i)
{
    return m.window_size_right < 0 ? m.seqlen_k - 1
                                   : mask_imin(m.seqlen_k - 1, i + mask_delta(m) + m.window_size_right);
}
//< mask-key-ends
/* First and last query that sees key j, clipped to [0, seqlen_q - 1]; empty
 * when query_first > query_last (a key nobody sees: dK, dV rows of zero). */
FA_HD int mask_query_first(attn_mask m, int j)
{
    return m.window_size_right < 0 ? 0 : mask_imax(0, j - mask_delta(m) - m.window_size_right);
}
FA_HD int mask_query_last(attn_mask m, int j)
{
    return m.window_size_left < 0 ? m.seqlen_q - 1
                                  : mask_imin(m.seqlen_q - 1, j - mask_delta(m) + m.window_size_left);
}
FA_HD bool mask_row_empty(attn_mask m, int i) { return mask_key_first(m, i) > mask_key_last(m, i); }
/* True when a later row never sees fewer keys than an earlier one and the
 * last rows see the most: no left bound (every row's keys start at key 0)
 * and a right bound (the last key moves on with the row): causal and its
 * shifts. A query block's work then grows with its index, which a schedule
 * handing out the longest blocks first relies on. */
FA_HD bool mask_work_grows(attn_mask m) { return m.window_size_left < 0 && m.window_size_right >= 0; }

//> mask-key-blocks
/* Key blocks of size Bc that the query rows [i0, i1) visit: blocks
 * [*jb_begin, *jb_end); returns the count (0: every row of the block is
 * empty, the block writes O = 0 and L = -inf without reading K or V). */
FA_HD int mask_key_blocks(attn_mask m, int i0, int i1, int Bc, int *jb_begin, int *jb_end)
{
    int lo = mask_key_first(m, i0), hi = mask_key_last(m, i1 - 1);
    if (lo > hi) { *jb_begin = *jb_end = 0; return 0; }
    *jb_begin = lo / Bc;
    *jb_end = hi / Bc + 1;
    return *jb_end - *jb_begin;
}
//< mask-key-blocks
/* Query blocks of size Br that see any key of [j0, j1): blocks
 * [*ib_begin, *ib_end); returns the count. */
FA_HD int mask_query_blocks(attn_mask m, int j0, int j1, int Br, int *ib_begin, int *ib_end)
{
    int lo = mask_query_first(m, j0), hi = mask_query_last(m, j1 - 1);
    if (lo > hi) { *ib_begin = *ib_end = 0; return 0; }
    *ib_begin = lo / Br;
    *ib_end = hi / Br + 1;
    return *ib_end - *ib_begin;
}

/* True when every (query, key) pair of rows [i0, i1) x keys [j0, j1) is
 * visible, so a kernel may skip the per-element mask on this tile. Tiles
 * that run past seqlen_k still need the bound check the kernels do apart. */
FA_HD bool mask_tile_unmasked(attn_mask m, int i0, int i1, int j0, int j1)
{
    return mask_key_first(m, i1 - 1) <= j0 && mask_key_last(m, i0) >= j1 - 1 &&
           !mask_row_empty(m, i0);
}
//< mask-ranges

/* The key-side and query-side sums below mirror each other deliberately:
 * each reads as the formula of one pass (forward: key rows; backward: query
 * rows). */
/* Deliberate copies in this region: mask_key_rows_read and
 * mask_query_rows_read are one loop with the roles swapped, each written out
 * because chapters/14-masks.md's listing shows them side by side (the
 * forward's queries outside, the backward's keys outside). */
//> mask-tiles
/* Tiles (query block, key block) the forward with Br x Bc tiles visits:
 * sum over query blocks of mask_key_blocks. The backward, keys outer, visits
 * the same tiles (see the top of this file). The closed forms of stage 3's
 * header are this sum evaluated for the causal mask. */
FA_HD int64_t mask_tiles_visited(attn_mask m, int Br, int Bc)
{
    int64_t n = 0;
    for (int i0 = 0; i0 < m.seqlen_q; i0 += Br) {
        int b, e;
        n += mask_key_blocks(m, i0, mask_imin(i0 + Br, m.seqlen_q), Bc, &b, &e);
    }
    return n;
}
//> mask-rows-read
/* Key rows the forward reads, summed over query blocks (each visited key
 * block contributes its rows; the last block may be short). */
FA_HD int64_t mask_key_rows_read(attn_mask m, int Br, int Bc)
{
    int64_t n = 0;
    for (int i0 = 0; i0 < m.seqlen_q; i0 += Br) {
        int b, e;
        if (mask_key_blocks(m, i0, mask_imin(i0 + Br, m.seqlen_q), Bc, &b, &e))
            n += mask_imin(e * Bc, m.seqlen_k) - b * Bc;
    }
    return n;
}
/* Query rows the backward reads, summed over key blocks. */
FA_HD int64_t mask_query_rows_read(attn_mask m, int Br, int Bc)
{
    int64_t n = 0;
    for (int j0 = 0; j0 < m.seqlen_k; j0 += Bc) {
        int b, e;
        if (mask_query_blocks(m, j0, mask_imin(j0 + Bc, m.seqlen_k), Br, &b, &e))
            n += mask_imin(e * Br, m.seqlen_q) - b * Br;
    }
    return n;
}
//< mask-rows-read
/* Rows of the query blocks (size Br) that visit at least one key block: the
 * rows whose Q a forward reads. The others belong to blocks of empty rows. */
FA_HD int64_t mask_query_rows_active(attn_mask m, int Br)
{
    int64_t n = 0;
    for (int i0 = 0; i0 < m.seqlen_q; i0 += Br) {
        int i1 = mask_imin(i0 + Br, m.seqlen_q), b, e;
        if (mask_key_blocks(m, i0, i1, 1, &b, &e)) n += i1 - i0;
    }
    return n;
}
/* Rows of the key blocks (size Bc) that some query sees: the rows of K and V
 * a backward reads, once per key/value head. */
FA_HD int64_t mask_key_rows_active(attn_mask m, int Bc)
{
    int64_t n = 0;
    for (int j0 = 0; j0 < m.seqlen_k; j0 += Bc) {
        int j1 = mask_imin(j0 + Bc, m.seqlen_k), b, e;
        if (mask_query_blocks(m, j0, j1, 1, &b, &e)) n += j1 - j0;
    }
    return n;
}
//< mask-tiles

#endif /* FA_MASK_H */

/*
 * decode_plan.h -- what a decoding step is and how it is cut into pieces:
 * the one description of the problem, the split-count rule and the key
 * ranges of the splits, shared by the CPU stage 8 (src/cpu/stage8_decode.c), the
 * GPU kernels (kernels/stage8_decode.cu) and, through ctypes, the Python op
 * (python/flashattn_stages/decode_op.py). Plain C and CUDA both compile this header (FA_HD,
 * mask.h).
 *
 * Decoding: each of B sequences brings seqlen_q new query rows (1 to 16:
 * one token, or a few drafted ones) and attends to its own KV cache of
 * cache_seqlens[b] keys, the new rows' keys included. The mask is mask.h's,
 * per sequence, aligned bottom-right: query i of sequence b sits at key
 * position i + cache_seqlens[b] - seqlen_q, so causal means "everything up to
 * myself". The work is a few rows against many keys: bound by the bytes of
 * the cache, not by arithmetic.
 *
 * Layout (row-major, C order), FlashAttention's paged layout for the cache:
 *   Q, O            (B, H, seqlen_q, d)
 *   L               (B, H, seqlen_q)          natural-log logsumexp, -inf for
 *                                             a row that sees no key (O row 0)
 *   K_cache, V_cache (num_pages, page_size, H_kv, d)
 *   block_table     (B, pages_per_seq) int    page of key j of sequence b:
 *                                             block_table[b][j / page_size],
 *                                             row j % page_size of that page
 *   cache_seqlens   (B,) int                  keys of sequence b, at most
 *                                             pages_per_seq * page_size
 *   O_part, L_part  (num_splits, B, H, seqlen_q, d) and (num_splits, B, H,
 *                                             seqlen_q): the splits' partials
 * Only the block-table entries that cover a sequence's keys are read (the
 * others may hold anything, -1 say). Pages may come in any order and a page
 * may serve several sequences (a shared prefix): nothing is written to the
 * cache.
 *
 * Grouped heads: query head h reads key/value head h / (H / H_kv). A work
 * unit is (sequence b, key/value head g, split s): its rows are the
 * G = H / H_kv query heads of the group times the seqlen_q query rows, row
 * r = (h - g G) seqlen_q + i, so that each K/V row of the cache is read once
 * for the whole group.
 *
 * Splits (split-KV, FlashDecoding): the keys some row of sequence b sees,
 * [lo_b, hi_b) (decode_key_range), are cut into num_splits ranges of whole
 * DECODE_BLOCK_N-key blocks (decode_split_range); each range gives a partial
 * (O_s, L_s) and the merge rule of merge.h joins them, the same rule as stage
 * 2's online softmax and stage 7's ring. A short sequence leaves its last
 * ranges empty (O_s = 0, L_s = -inf), which the merge passes over exactly.
 */
#ifndef FA_DECODE_PLAN_H
#define FA_DECODE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mask.h"

/* Keys per block: the unit the splits are cut in (and the GPU kernel's tile). */
#define DECODE_BLOCK_N 64
/* Most splits of one sequence (the combine's loop and its workspace). */
#define DECODE_MAX_SPLITS 128
/* Page sizes: powers of two in [DECODE_PAGE_MIN, DECODE_PAGE_MAX]. */
#define DECODE_PAGE_MIN 1
#define DECODE_PAGE_MAX 4096
/* Query rows per sequence. */
#define DECODE_MAX_SEQLEN_Q 16

typedef struct {
    int B;                    /* sequences */
    int H;                    /* query heads */
    int H_kv;                 /* key/value heads; H is a multiple of H_kv */
    int d;                    /* head dimension */
    int seqlen_q;             /* new query rows per sequence */
    int page_size;            /* keys per page, a power of two */
    int pages_per_seq;        /* columns of block_table */
    int num_pages;            /* pages in the pool (first dimension of the caches) */
    double softmax_scale;     /* multiplies Q K^T */
    int window_size_left;     /* -1: unbounded (mask.h) */
    int window_size_right;    /* -1: unbounded; causal is (-1, 0) */
} decode_params;

/* Keys a sequence's block table can hold. */
FA_HD int64_t decode_capacity(const decode_params *p)
{
    return (int64_t)p->pages_per_seq * p->page_size;
}

/* The mask of sequence b: seqlen_q rows against its len keys. */
FA_HD attn_mask decode_mask(const decode_params *p, int len)
{
    return mask_make(p->seqlen_q, len, p->window_size_left, p->window_size_right);
}

//> decode-key-range
/* The keys [*lo, *hi) that some query row of a sequence with len keys sees
 * (mask.h: a block of rows sees one interval); *lo = *hi = 0 when none does.
 * Keys outside it are never read. */
FA_HD void decode_key_range(const decode_params *p, int len, int *lo, int *hi)
{
    int b, e;
    if (len <= 0 || !mask_key_blocks(decode_mask(p, len), 0, p->seqlen_q, 1, &b, &e)) b = e = 0;
    *lo = b;
    *hi = e;
}

/* Split s of num_splits over n keys: [*k0, *k1) relative to the range's
 * start. Every split but possibly the last non-empty one holds the same
 * whole number of DECODE_BLOCK_N-key blocks; splits past the end are empty
 * (*k0 = *k1). Returns *k1 - *k0. */
//> decode-split-blocks
FA_HD int decode_split_range(int n, int num_splits, int s, int *k0, int *k1)
{
    int blocks = (n + DECODE_BLOCK_N - 1) / DECODE_BLOCK_N;
    int per = (blocks + num_splits - 1) / num_splits * DECODE_BLOCK_N;   /* keys per split */
    int a = s * per, e = a + per;
    *k0 = mask_imin(a, n);
    *k1 = mask_imin(e, n);
    return *k1 - *k0;
}
//< decode-split-blocks
//< decode-key-range

//> split-rule
/* How many splits to cut each sequence's keys into, from the batch B, the
 * key/value heads H_kv, the longest sequence's keys seqlen_k, the number of
 * SMs of the GPU and how many CTAs of the kernel one SM runs at once
 * (FlashAttention's num_splits heuristic in spirit; its kernels fill an SM
 * with one CTA, ctas_per_sm = 1).
 *
 * The GPU runs sm_count ctas_per_sm CTAs at once: a wave. Without splits
 * there are B H_kv work units (one per sequence and key/value head, its
 * whole group of query heads inside). When they already fill four fifths of
 * a wave, splitting only adds the partials' traffic: 1. Otherwise s splits
 * give B H_kv s units, run in ceil(B H_kv s / wave) waves; the fraction of
 * the waves' slots that have work, B H_kv s / (waves wave), is what
 * splitting buys (a CTA of a memory-bound kernel that waits for its loads
 * is hidden only by the other CTAs on its SM, so every slot counts, not only
 * every SM). Only counts that decode_split_range cuts into s non-empty
 * ranges are candidates: with blocks of keys cut ceil(blocks / s) to a
 * split, some s leave their last splits empty (128 blocks in 42 splits of 4
 * blocks fill only 32), CTAs that load nothing and a fill that is not there.
 * Each split keeps at least two blocks of keys (so that its partial, d + 1
 * numbers per row, stays small beside the keys it reads, and its CTA has
 * loads to keep in flight) and there are at most DECODE_MAX_SPLITS. The
 * fullest waves win: the smallest candidate that fills 96% of its waves'
 * slots is taken (fewer partials to write and merge, no more waves than
 * needed), or, where none does, the smallest with the best fill. A looser
 * choice costs more than its empty slots: each CTA of the kernel is bound
 * by the bytes it keeps in flight, so a slot without work is bandwidth
 * lost (on the H200 with 2 CTAs per SM, B 4, H_kv 8, 32k keys: 7 splits,
 * 224 of 264 slots, ran at 0.74 of the copy; 8 splits, 256 slots, at 0.87;
 * data/gpu/studies/decode_steps/steps.md). Returns at least 1. */
FA_HD int decode_num_splits(int B, int H_kv, int seqlen_k, int sm_count, int ctas_per_sm)
{
    int64_t units = (int64_t)B * H_kv, wave = (int64_t)sm_count * (ctas_per_sm > 1 ? ctas_per_sm : 1);
    int blocks = (seqlen_k + DECODE_BLOCK_N - 1) / DECODE_BLOCK_N;
    if (sm_count < 1 || units < 1 || 5 * units >= 4 * wave) return 1;
    int max_s = mask_imin(DECODE_MAX_SPLITS, blocks / 2);
    if (max_s <= 1) return 1;
    double fill[DECODE_MAX_SPLITS + 1], best = 0;
    for (int s = 1; s <= max_s; s++) {
        int per = (blocks + s - 1) / s;   /* blocks per split, as decode_split_range cuts them */
        int64_t work = units * s, waves = (work + wave - 1) / wave;
        fill[s] = (blocks + per - 1) / per == s ? (double)work / (double)(waves * wave) : 0.0;
        if (fill[s] > best) best = fill[s];
    }
    double want = best < 0.96 ? best : 0.96;
    for (int s = 1; s <= max_s; s++)
        if (fill[s] > 0 && fill[s] >= want) return s;
    return 1;
}
//< split-rule

/* 0 when the sizes are well formed, else -1 with one line in why naming the
 * field of decode_params that is wrong (a program maps fields to its flags:
 * decode_fatal in src/cpu/stage8_cli.h). */
static inline int decode_params_check(const decode_params *p, char *why, size_t n)
{
    if (p->B < 1 || p->H < 1 || p->H_kv < 1 || p->d < 1) {
        snprintf(why, n, "batch %d, heads %d, kv heads %d, d %d: every size must be >= 1", p->B, p->H,
                 p->H_kv, p->d);
        return -1;
    }
    if (p->H % p->H_kv != 0) {
        snprintf(why, n, "H_kv %d: the %d query heads must be a multiple of the key/value heads",
                 p->H_kv, p->H);
        return -1;
    }
    if (p->seqlen_q < 1 || p->seqlen_q > DECODE_MAX_SEQLEN_Q) {
        snprintf(why, n, "seqlen_q %d: query rows per sequence must be in [1, %d]", p->seqlen_q,
                 DECODE_MAX_SEQLEN_Q);
        return -1;
    }
    if (p->page_size < DECODE_PAGE_MIN || p->page_size > DECODE_PAGE_MAX ||
        (p->page_size & (p->page_size - 1)) != 0) {
        snprintf(why, n, "page_size %d: must be a power of two in [%d, %d]", p->page_size,
                 DECODE_PAGE_MIN, DECODE_PAGE_MAX);
        return -1;
    }
    if (p->pages_per_seq < 1 || p->num_pages < 1) {
        snprintf(why, n, "pages per sequence %d, pages in the pool %d: both must be >= 1",
                 p->pages_per_seq, p->num_pages);
        return -1;
    }
    if (decode_capacity(p) > (1 << 30)) {
        snprintf(why, n, "a block table of %d pages of %d keys holds more than 2^30 keys",
                 p->pages_per_seq, p->page_size);
        return -1;
    }
    if (p->window_size_left < -1 || p->window_size_right < -1) {
        snprintf(why, n, "window_size %d,%d: each side is -1 (unbounded) or >= 0", p->window_size_left,
                 p->window_size_right);
        return -1;
    }
    if (!(p->softmax_scale > 0) || p->softmax_scale > 1e300) {
        snprintf(why, n, "softmax_scale %g: must be finite and > 0", p->softmax_scale);
        return -1;
    }
    return 0;
}

/* 0 when every sequence length fits its block table and every entry that
 * covers a key is a page of the pool; else -1 with one line in why. */
static inline int decode_tables_check(const decode_params *p, const int *block_table,
                                      const int *cache_seqlens, char *why, size_t n)
{
    for (int b = 0; b < p->B; b++) {
        int len = cache_seqlens[b];
        if (len < 0 || len > decode_capacity(p)) {
            snprintf(why, n, "cache_seqlens[%d] = %d: must be in [0, %lld] (%d pages of %d keys)", b,
                     len, (long long)decode_capacity(p), p->pages_per_seq, p->page_size);
            return -1;
        }
        for (int j = 0; j < (len + p->page_size - 1) / p->page_size; j++) {
            int pg = block_table[(size_t)b * p->pages_per_seq + j];
            if (pg < 0 || pg >= p->num_pages) {
                snprintf(why, n, "block_table[%d][%d] = %d: must be a page in [0, %d)", b, j, pg,
                         p->num_pages);
                return -1;
            }
        }
    }
    return 0;
}

/* 0 when num_splits is one the kernels run, else -1 with one line. */
static inline int decode_splits_check(int num_splits, char *why, size_t n)
{
    if (num_splits < 1 || num_splits > DECODE_MAX_SPLITS) {
        snprintf(why, n, "num_splits %d: must be in [1, %d]", num_splits, DECODE_MAX_SPLITS);
        return -1;
    }
    return 0;
}

#endif /* FA_DECODE_PLAN_H */

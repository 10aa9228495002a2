/*
 * ring.c -- the plan of ring.h: layout, schedule and sub-problems.
 */
#include "ring.h"

#include <stdio.h>
#include <string.h>

int ring_layout_make(const attn_params *p, int G, ring_layout *lay, char *why, size_t n)
{
    memset(lay, 0, sizeof *lay);
    if (G < 1) {
        snprintf(why, n, "--gpus %d: need at least 1", G);
        return -1;
    }
    if (p->seqlen_q != p->seqlen_k) {
        snprintf(why, n, "seqlen_q %d != seqlen_k %d: the ring cuts one sequence (self-attention)",
                 p->seqlen_q, p->seqlen_k);
        return -1;
    }
    int N = p->seqlen_q;
    lay->G = G;
    lay->N = N;
    lay->zigzag = G > 1 && attn_is_masked(p);
    lay->n_pieces = lay->zigzag ? 2 : 1;
    int cuts = G * lay->n_pieces;
    if (N % cuts != 0) {
        snprintf(why, n, "--n %d: must be a multiple of %d (%s, --gpus %d)", N, cuts,
                 lay->zigzag ? "2 G: two mirrored chunks per GPU under the mask" : "G: equal shards",
                 G);
        return -1;
    }
    lay->piece_rows = N / cuts;
    for (int r = 0; r < G; r++)
        for (int t = 0; t < G; t++) {
            ring_call c[RING_MAX_CALLS];
            if (ring_calls(lay, p, r, t, c) < 0) {
                snprintf(why, n, "window (%d, %d) with --gpus %d: a shard pair's mask is not a "
                         "window", p->window_size_left, p->window_size_right, G);
                return -1;
            }
        }
    return 0;
}

//> ring-layout
ring_piece ring_piece_of(const ring_layout *lay, int rank, int k)
{
    int c = lay->piece_rows;
    int chunk = k == 0 ? rank : 2 * lay->G - 1 - rank;   /* zigzag: r and its mirror */
    ring_piece pc = {chunk * c, c};
    return pc;
}

int ring_kv_rank(const ring_layout *lay, int rank, int step)
{
    return ((rank - step) % lay->G + lay->G) % lay->G;
}
//< ring-layout

//> ring-sub-problem
int ring_sub_problem(const attn_params *p, ring_piece q, ring_piece k, attn_params *sub)
{
    *sub = *p;
    sub->seqlen_q = q.len;
    sub->seqlen_k = k.len;
    attn_mask m = attn_mask_of(p);
    //> ring-pair-kind
    /* The key piece is block k.start / k.len of size k.len: mask.h says which
     * key blocks the query rows visit, and whether the pair is all visible. */
    int jb, je;
    int kb = k.start / k.len;
    if (!mask_key_blocks(m, q.start, q.start + q.len, k.len, &jb, &je) || kb < jb || kb >= je)
        return RING_SKIP;
    if (mask_tile_unmasked(m, q.start, q.start + q.len, k.start, k.start + k.len)) {
        sub->window_size_left = sub->window_size_right = -1;
        return RING_FULL;
    }
    //< ring-pair-kind
    /* Global query q.start + i sees key k.start + j when
     *   i + off - left <= j <= i + off + right,  off = q.start + delta - k.start;
     * the sub-problem's own mask is centred on i + (k.len - q.len) (mask.h's
     * bottom-right alignment), so the same sets need the window shifted by
     * the difference of the two diagonals. An unbounded side stays -1. */
    int off = q.start + mask_delta(m) - k.start, shift = off - (k.len - q.len);
    int left = p->window_size_left, right = p->window_size_right;
    if (left >= 0 && (left -= shift) < 0) return RING_UNREPRESENTABLE;
    if (right >= 0 && (right += shift) < 0) return RING_UNREPRESENTABLE;
    sub->window_size_left = left;
    sub->window_size_right = right;
    return RING_MASKED;
}
//< ring-sub-problem

//> ring-calls
int ring_calls(const ring_layout *lay, const attn_params *p, int rank, int step, ring_call *calls)
{
    int src = ring_kv_rank(lay, rank, step), n = 0;
    for (int a = 0; a < lay->n_pieces; a++)
        for (int b = 0; b < lay->n_pieces; b++) {
            ring_call c = {a, b, 0, *p};
            c.kind = ring_sub_problem(p, ring_piece_of(lay, rank, a), ring_piece_of(lay, src, b), &c.sub);
            if (c.kind == RING_UNREPRESENTABLE) return -1;
            if (c.kind != RING_SKIP) calls[n++] = c;
        }
    return n;
}
//< ring-calls

int64_t ring_visible_pairs(const attn_params *p)
{
    attn_mask m = attn_mask_of(p);
    int64_t n = 0;
    for (int i = 0; i < p->seqlen_q; i++)
        if (!mask_row_empty(m, i)) n += mask_key_last(m, i) - mask_key_first(m, i) + 1;
    return n;
}

size_t ring_q_piece_numel(const attn_params *p, const ring_layout *lay)
{
    return (size_t)p->B * p->H * lay->piece_rows * p->d;
}
size_t ring_kv_piece_numel(const attn_params *p, const ring_layout *lay)
{
    return (size_t)p->B * p->H_kv * lay->piece_rows * p->d;
}
size_t ring_rows_piece_numel(const attn_params *p, const ring_layout *lay)
{
    return (size_t)p->B * p->H * lay->piece_rows;
}
size_t ring_kv_shard_numel(const attn_params *p, const ring_layout *lay)
{
    return lay->n_pieces * ring_kv_piece_numel(p, lay);
}

/* One head's rows [pc.start, pc.start + pc.len) are contiguous in both. */
void ring_piece_get(void *piece, const void *whole, int B, int heads, int N, int width,
                    size_t elem_bytes, ring_piece pc)
{
    size_t row = (size_t)width * elem_bytes;
    for (size_t bh = 0; bh < (size_t)B * heads; bh++)
        memcpy((char *)piece + bh * pc.len * row, (const char *)whole + (bh * N + pc.start) * row,
               pc.len * row);
}
void ring_piece_put(void *whole, const void *piece, int B, int heads, int N, int width,
                    size_t elem_bytes, ring_piece pc)
{
    size_t row = (size_t)width * elem_bytes;
    for (size_t bh = 0; bh < (size_t)B * heads; bh++)
        memcpy((char *)whole + (bh * N + pc.start) * row, (const char *)piece + bh * pc.len * row,
               pc.len * row);
}

double ring_forward_bytes_formula(const attn_params *p, int G, size_t es)
{
    /* the product first: an integer below 2^53, divided exactly by G */
    return 2.0 * (G - 1) * p->seqlen_k * p->d * p->H_kv * p->B * (double)es / G;
}
double ring_backward_bytes_formula(const attn_params *p, int G, size_t es)
{
    return 2.0 * (G - 1) * p->seqlen_k * p->d * p->H_kv * p->B * (double)(es + 4) / G;
}

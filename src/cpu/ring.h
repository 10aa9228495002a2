/*
 * ring.h -- how stage 7 cuts one attention problem across G devices (ring
 * attention, also called context parallelism): which rows each device holds,
 * which key/value shard it holds at each step of the ring, and which
 * (query piece, key piece) pairs it computes, with what mask. Plain C, no
 * device code: the GPU program (src/programs/stage7_main.c) and the CPU tests
 * (tests/cpu/test_ring.c, which run the same plan through stage 3's tiled
 * forward and backward in fp64) share it.
 *
 * The problem is one attn_params with seqlen_q = seqlen_k = N (self-
 * attention over one sequence). Every rank r in [0, G) holds the same
 * number of rows N / G of Q, K, V (and of O, L, dO, dQ, dK, dV), as one or
 * two pieces:
 *   no mask      one piece, rows [r N/G, (r+1) N/G)            (N % G == 0)
 *   any window   two pieces of c = N / (2G) rows: chunks r and 2G-1-r of
 *   (causal)     the 2G chunks ("zigzag"), so that every rank holds one
 *                early and one late chunk and does the same work under a
 *                causal mask                                (N % (2G) == 0)
 *   G = 1        one piece, the whole sequence (nothing to balance): the
 *                single-device problem, call for call.
 * Every piece starts at a multiple of its length.
 *
 * The ring: at step t in [0, G), rank r holds the K/V shard of rank
 * (r - t) mod G (its own at step 0), computes its query pieces against that
 * shard's key pieces, and passes the shard on to rank r + 1. A (query piece,
 * key piece) pair is
 *   RING_SKIP     no query of the piece sees a key of the other: not computed
 *   RING_FULL     every pair visible: the sub-problem has no mask
 *   RING_MASKED   the global window seen from the pair's corner (mask.h's
 *                 bottom-right convention, translated in ring_sub_problem)
 * decided by mask.h's own range functions on global row numbers.
 *
 * Shapes (row-major): a query piece of len rows is a (B, H, len, d) tensor,
 * a key/value piece (B, H_kv, len, d), an L piece (B, H, len); a rank's K/V
 * shard is its pieces one after the other.
 */
#ifndef FA_RING_H
#define FA_RING_H

#include <stddef.h>
#include <stdint.h>

#include "attn_params.h"

#define RING_MAX_PIECES 2
#define RING_MAX_CALLS (RING_MAX_PIECES * RING_MAX_PIECES)

typedef struct {
    int G;            /* ranks (devices, or virtual devices on one GPU) */
    int N;            /* sequence length, seqlen_q = seqlen_k */
    int zigzag;       /* 1: two mirrored chunks per rank */
    int n_pieces;     /* pieces per rank: 1 or 2 */
    int piece_rows;   /* rows of each piece: N / G or N / (2G) */
} ring_layout;

typedef struct { int start, len; } ring_piece;   /* global rows [start, start + len) */

enum { RING_UNREPRESENTABLE = -1, RING_SKIP = 0, RING_FULL = 1, RING_MASKED = 2 };

/* One sub-problem a rank runs at a step. */
typedef struct {
    int q_piece;        /* index of the rank's query piece */
    int k_piece;        /* index of the key piece in the visiting shard */
    int kind;           /* RING_FULL or RING_MASKED */
    attn_params sub;    /* sizes q.len x k.len, the translated window */
} ring_call;

/* The layout of p over G ranks. 0, or -1 with one line in why (naming the
 * flag: --n, --gpus) when seqlen_q != seqlen_k, G < 1, N is not a multiple
 * of G (2G under a mask), or a pair's window cannot be written as a window. */
int ring_layout_make(const attn_params *p, int G, ring_layout *lay, char *why, size_t n);

/* Piece k (0 <= k < n_pieces) of rank r. */
ring_piece ring_piece_of(const ring_layout *lay, int rank, int k);

/* The rank whose K/V shard rank r holds at step t: (r - t) mod G. */
int ring_kv_rank(const ring_layout *lay, int rank, int step);

/* The sub-problem of p restricted to the query rows q and the key rows k
 * (k.start a multiple of k.len, as every piece of a layout is): returns
 * RING_SKIP, RING_FULL (sub has no window) or RING_MASKED (sub has the
 * window that hides exactly what p's mask hides there); RING_UNREPRESENTABLE
 * when that set is not a window of mask.h's form. sub gets p's sizes with
 * seqlen_q = q.len, seqlen_k = k.len. */
int ring_sub_problem(const attn_params *p, ring_piece q, ring_piece k, attn_params *sub);

/* The sub-problems rank r computes at step t (in query piece, then key
 * piece order; skipped pairs left out): their number, at most
 * RING_MAX_CALLS, or -1 when one is unrepresentable. */
int ring_calls(const ring_layout *lay, const attn_params *p, int rank, int step, ring_call *calls);

/* Visible (query, key) pairs of one head of a (sub-)problem: the work. */
int64_t ring_visible_pairs(const attn_params *p);

/* Elements of one query piece (B H len d), one key/value piece
 * (B H_kv len d), one L piece (B H len), one rank's K (or V) shard. */
size_t ring_q_piece_numel(const attn_params *p, const ring_layout *lay);
size_t ring_kv_piece_numel(const attn_params *p, const ring_layout *lay);
size_t ring_rows_piece_numel(const attn_params *p, const ring_layout *lay);
size_t ring_kv_shard_numel(const attn_params *p, const ring_layout *lay);

/* Copy the rows of piece pc out of a whole (B, heads, N, width) tensor into
 * a (B, heads, pc.len, width) piece, or back: elem_bytes per element, any
 * dtype (width = d for Q, K, V, O and the gradients, 1 for L). */
void ring_piece_get(void *piece, const void *whole, int B, int heads, int N, int width,
                    size_t elem_bytes, ring_piece pc);
void ring_piece_put(void *whole, const void *piece, int B, int heads, int N, int width,
                    size_t elem_bytes, ring_piece pc);

/* The bytes one rank sends in a pass, in closed form (the programs count
 * what they send and hold it against these):
 *   forward   K and V shards, G - 1 times:  2 (G-1)/G N d H_kv B es
 *   backward  the same, plus the dK, dV accumulators (fp32) that travel
 *             G - 1 hops home:               2 (G-1)/G N d H_kv B (es + 4)
 * es = bytes of one element of the dtype. */
double ring_forward_bytes_formula(const attn_params *p, int G, size_t es);
double ring_backward_bytes_formula(const attn_params *p, int G, size_t es);

#endif /* FA_RING_H */

/*
 * stage3_tiled.h -- tiled FlashAttention on the CPU, forward and backward.
 *
 * The problem is an attn_params (attn_params.h); written Sq = seqlen_q,
 * Sk = seqlen_k, G = H / H_kv. Tiles: Br query rows by Bc key rows;
 * Tr = ceil(Sq/Br) query blocks, Tc = ceil(Sk/Bc) key blocks; the last block
 * of each may be short. Every working tile lives in one sram_arena of M
 * elements. Which tiles are visited is mask.h's business: query block i
 * visits the key blocks mask_key_blocks gives, key block j the query blocks
 * mask_query_blocks gives, the same set of tiles (those holding a visible
 * (query, key) pair); without a mask, all of them.
 *
 * SRAM footprint (elements), for full tiles:
 *   forward   Q_i, O_i (Br d each), K_j, V_j (Bc d each), S_ij (Br Bc), m, l (Br each)
 *             = 2 Br d + 2 Bc d + Br Bc + 2 Br
 *   backward  K_j, V_j, dK_j, dV_j (Bc d each), Q_i, dO_i, dQ_i (Br d each),
 *             L_i, D_i (Br each), S_ij/P_ij and dP_ij/dS_ij (Br Bc each)
 *             = 4 Bc d + 3 Br d + 2 Br Bc + 2 Br
 *
 * IO (elements of slow memory), exact for any sizes and masks, tails included.
 * With R the rows of the query blocks that visit at least one key block
 * (mask_query_rows_active; Sq without a mask), KR the key rows the forward
 * reads summed over query blocks (mask_key_rows_read), QR the query rows the
 * backward reads summed over key blocks (mask_query_rows_read), and C the
 * rows of the key blocks some query block visits (mask_key_rows_active):
 *   forward, per query head   R d + 2 KR d + Sq d + Sq
 *       Q read once for each block that computes anything (R d); K, V read
 *       for every visited tile (2 KR d); O and L written once; a block that
 *       sees no key writes O = 0 and L = -inf without reading Q, K or V.
 *       Without a mask KR = Sk Tr: 2 N d (Tr + 1) + N when Sq = Sk = N.
 *   backward, per query head  2 Sq d + Sq + (Sq - R) d + QR (3 d + 2) + (QR - R) d
 *       D = rowsum(dO * O): read dO, O, write D; blocks that see no key
 *       write dQ = 0; each visited tile reads Q_i, dO_i, L_i, D_i and writes
 *       dQ_i, and reads dQ_i back except at the query block's first key
 *       block, which starts it;
 *     plus, per key/value head    2 C d + 2 Sk d
 *       K_j, V_j read once for each key block that is visited, whichever of
 *       the G query heads visit it (dK_j, dV_j add up over the group in
 *       SRAM); dK, dV written once (zero for key blocks nobody sees).
 *       Without a mask, Sq = Sk = N, G = 1: 5 N d + N + Tc (4 N d + 2 N).
 */
#ifndef FA_STAGE3_TILED_H
#define FA_STAGE3_TILED_H

#include <stdbool.h>
#include <stdint.h>
#include "common.h"
#include "tolerances.h"

size_t flash_forward_sram_elements(int Br, int Bc, int d);
size_t flash_backward_sram_elements(int Br, int Bc, int d);

/* The FlashAttention paper's blocks for SRAM size M as written (Algorithm 1,
 * with floor for ceil): Bc = floor(M / 4d) (at least 1), Br = min(Bc, d);
 * they may not fit in M (derive_blocks shrinks them until they do). */
void paper_blocks(long M, int d, int *Br, int *Bc);

/* Block sizes from the SRAM size M, following the FlashAttention paper
 * (Algorithm 1: Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d)) but with floor
 * instead of ceil, then shrinking the larger of Br and Bc until the footprint
 * above fits in M: the paper's choice can overrun M by a quarter or more,
 * because its footprint argument drops the score tile and the statistics.
 * Returns 0, or -1 when M cannot hold even Br = Bc = 1 at this d. */
int derive_blocks(long M, int d, bool backward, int *Br, int *Bc);

/* Block sizes that minimize the IO model's count instead: the forward's
 * traffic depends on Br alone (K and V are re-read once per query block) and
 * the backward's on Bc alone (Q, dO, dQ, L, D once per key block), so that
 * one block takes all the room and the other is 1. This keeps the traffic
 * Theta(N^2 d^2 / M) at every M, where the paper's rule, whose Br stops at d,
 * leaves the forward near 2 N^2 elements once M >= 4 d^2. (Tiles this thin
 * would starve a GPU's matrix units; the IO model does not see that.)
 * Returns 0, or -1 when M cannot hold Br = Bc = 1. */
int derive_blocks_io(long M, int d, bool backward, int *Br, int *Bc);

/* Counts that the tests and figures use beside the IO counter. */
typedef struct {
    uint64_t tiles_visited;   /* (query block, key block) pairs computed */
    uint64_t tiles_skipped;   /* pairs skipped because the mask hides them entirely */
} tile_stats;

/* Tiled forward, one query head (FlashAttention-1 Algorithm 1 / the
 * chapter's flash_attention_forward, with FlashAttention-2's loop order):
 * Q (Sq, d), K, V (Sk, d) of its key/value head; writes O (Sq, d) and
 * L (Sq,) = logsumexp of each row's visible scores (-inf and O = 0 for a row
 * that sees no key). Requires flash_forward_sram_elements(Br, Bc, d) <=
 * sram->M. io and stats may be NULL. */
void flash_forward(const attn_params *p, const double *Q, const double *K, const double *V,
                   int Br, int Bc, double *O, double *L, sram_arena *sram, io_counter *io,
                   tile_stats *stats);

/* Tiled backward, one key/value head and the G = H / H_kv query heads that
 * read it (FlashAttention-2's loop order: key blocks outer, so dK_j and dV_j
 * finish in SRAM, summed over the group; dQ accumulates in slow memory).
 * Q, O, dO, dQ are (G, Sq, d), L and the workspace D (G, Sq): the group's
 * heads, contiguous; K, V, dK, dV (Sk, d). Rebuilds each P tile as
 * exp(S - L). Requires flash_backward_sram_elements(Br, Bc, d) <= sram->M. */
void flash_backward(const attn_params *p, const double *Q, const double *K, const double *V,
                    const double *O, const double *L, const double *dO, int Br, int Bc,
                    double *dQ, double *dK, double *dV, double *D, sram_arena *sram,
                    io_counter *io, tile_stats *stats);

/* Where a GPU backward rounds to its 16-bit dtype and this one, fp64
 * throughout, does not: when set, P is rounded before dV = P^T dO (the GPU
 * keeps P in the dtype for that product) and dS before dK and dQ (the GPU
 * rounds dS for its tensor-core products). Both NULL (the default) in every
 * stage; set only by the accuracy model (src/cpu/stage3_accuracy.c), which runs
 * one thread. */
typedef struct { double (*P)(double); double (*dS)(double); } flash_rounding;
extern flash_rounding flash_backward_rounding;

/* Block sizes of one run: the forward's and the backward's. */
typedef struct { int fBr, fBc, bBr, bBc; } flash_blocks;

/* The tiled algorithm over every head of p (layouts as
 * naive_attention_all_heads): O, L, and dQ, dK, dV unless dQ is NULL. The
 * arena must hold both passes' footprints. io_f, io_b, st_f, st_b, t_f, t_b
 * (wall seconds) may be NULL. */
void flash_attention_all_heads(const attn_params *p, const double *Q, const double *K,
                               const double *V, const double *dO, flash_blocks b, double *O,
                               double *L, double *dQ, double *dK, double *dV, sram_arena *sram,
                               io_counter *io_f, io_counter *io_b, tile_stats *st_f,
                               tile_stats *st_b, double *t_f, double *t_b);

/* One run of flash_attention_all_heads on a fresh arena of M elements with
 * fresh counters (outputs as there, dQ NULL for the forward alone): what the
 * stages measure of it. */
typedef struct {
    io_counter io_f, io_b;   /* slow-memory elements moved, per pass */
    tile_stats st_f, st_b;   /* tiles visited and skipped, per pass */
    double t_f, t_b;         /* wall seconds, per pass */
    size_t high_water;       /* the arena's high-water mark, elements (<= M) */
} flash_run;
flash_run flash_run_counted(const attn_params *p, const double *Q, const double *K, const double *V,
                            const double *dO, flash_blocks b, long M, double *O, double *L, double *dQ,
                            double *dK, double *dV);

/* The tiled backward of problem g (in Br x Bc tiles, both passes) against
 * central differences of stage 1: gradcheck_central's largest relative
 * error. Small tiles cross many tile edges on a small problem. */
double flash_gradcheck(const attn_problem *g, int Br, int Bc);

/* The closed forms of the header comment over the whole problem, in
 * elements; and the tiles each pass visits (B H mask_tiles_visited). */
uint64_t flash_forward_io_formula(const attn_params *p, int Br, int Bc);
uint64_t flash_backward_io_formula(const attn_params *p, int Br, int Bc);
uint64_t flash_tiles_formula(const attn_params *p, int Br, int Bc);

/* Block sizes from the command line: --br/--bc (cut to seqlen_q and
 * seqlen_k) for both passes, else derived from --sram M (default
 * FLASH_DEFAULT_M) by --rule paper|io; *M gets the arena size that holds both
 * passes. Exits 2 on a bad combination. */
#define FLASH_DEFAULT_M 16384L   /* elements: 128 KiB of fp64, an SM's shared memory */
flash_blocks flash_blocks_from_options(const options *opt, const attn_params *p, long *M);

/* The errors of a tiled run on the problem `in` against the fp64 reference,
 * each max|got - ref| over the magnitude its rounding scales with: O over
 * max|V| (O is a convex combination of V's rows), L over max(1, max|L|),
 * dV over max(max|dV_ref|, max|dO|), dQ over max(max|dQ_ref|, scale max|dO|
 * max|V| max|K|), dK the same with max|Q|: the size of the terms each
 * gradient sums, when they cancel. The backward's are 0 when dQ is NULL. */
typedef struct { double O, L, dQ, dK, dV; } flash_errors;
flash_errors flash_errors_vs(const attn_problem *in, const double *O, const double *L,
                             const double *dQ, const double *dK, const double *dV,
                             const double *rO, const double *rL, const double *rdQ,
                             const double *rdK, const double *rdV);

/* The tolerance of the backward's errors above: FLASH_BWD_TOL plus
 * FLASH_BWD_L_FACTOR eps max|L| over L's rows (both in core/tolerances.h, with
 * FLASH_FWD_TOL for the forward's), the loss of rebuilding P from a rounded
 * L, measured by ./stage6 --sweep lse. */
double flash_backward_tol(const double *L, size_t rows);

#endif /* FA_STAGE3_TILED_H */

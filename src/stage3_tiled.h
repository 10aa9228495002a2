/*
 * stage3_tiled.h -- tiled FlashAttention on the CPU, forward and backward.
 *
 * Shapes (one head, row-major): Q, K, V, O, dO, dQ, dK, dV are (N, d); L and
 * D are (N,). Tiles: Br query rows by Bc key rows; Tr = ceil(N/Br) query
 * blocks, Tc = ceil(N/Bc) key blocks; the last block of each may be short.
 * Every working tile lives in one sram_arena of M elements.
 *
 * SRAM footprint (elements), for full tiles:
 *   forward   Q_i, O_i (Br d each), K_j, V_j (Bc d each), S_ij (Br Bc), m, l (Br each)
 *             = 2 Br d + 2 Bc d + Br Bc + 2 Br
 *   backward  K_j, V_j, dK_j, dV_j (Bc d each), Q_i, dO_i, dQ_i (Br d each),
 *             L_i, D_i (Br each), S_ij/P_ij and dP_ij/dS_ij (Br Bc each)
 *             = 4 Bc d + 3 Br d + 2 Br Bc + 2 Br
 *
 * IO (elements of slow memory), exact for any N, tails included:
 *   forward, not causal   2 N d (Tr + 1) + N
 *       Q read once (N d); all of K and V read once per query block
 *       (2 N d Tr); O written once (N d); L written once (N).
 *   forward, causal       2 N d + N + 2 d * sum_{i<Tr} min(N, Bc * (floor((e_i - 1)/Bc) + 1))
 *       where e_i = min(N, (i+1) Br) ends query block i: the block reads the
 *       key blocks up to the one holding key e_i - 1 and skips the rest.
 *       With Br = Bc = B and B | N: 2 N d + N + d B Tr (Tr + 1).
 *   backward, not causal  5 N d + N + Tc (4 N d + 2 N)
 *       D = rowsum(dO * O): read dO, O (2 N d), write D (N).
 *       Each key block: read K_j, V_j; write dK_j, dV_j once (4 N d in all).
 *       Each (key block, query block) visit: read Q_i, dO_i, L_i, D_i and
 *       write dQ_i (3 N d + 2 N per key block); read dQ_i back except on the
 *       first key block, which starts it (N d per key block but one).
 *   backward, causal      6 N d + N + sum_{j<Tc} R_j (3 d + 2) + sum_{1<=j<Tc} R_j d
 *       where R_j = N - Br floor(j Bc / Br) counts the query rows of the
 *       blocks that key block j can reach (query blocks entirely above it,
 *       i.e. ending before key j Bc, are skipped).
 */
#ifndef FA_STAGE3_TILED_H
#define FA_STAGE3_TILED_H

#include <stdbool.h>
#include <stdint.h>
#include "common.h"

size_t flash_forward_sram_elements(int Br, int Bc, int d);
size_t flash_backward_sram_elements(int Br, int Bc, int d);

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
    uint64_t tiles_skipped;   /* pairs skipped because causal masks them entirely */
} tile_stats;

/* Tiled forward (FlashAttention-1 Algorithm 1 / the chapter's
 * flash_attention_forward): writes O (N,d) and L (N,) = logsumexp of each
 * row of S. Requires flash_forward_sram_elements(Br, Bc, d) <= sram->M.
 * io and stats may be NULL. */
void flash_forward(const double *Q, const double *K, const double *V, int N, int d,
                   double softmax_scale, bool causal, int Br, int Bc,
                   double *O, double *L, sram_arena *sram, io_counter *io, tile_stats *stats);

/* Tiled backward (FlashAttention-2's loop order: key blocks outer, so dK_j
 * and dV_j finish in SRAM; dQ accumulates in slow memory). Rebuilds each
 * P tile as exp(S - L). D (N,) is slow-memory workspace for rowsum(dO * O).
 * Writes dQ, dK, dV (N,d). Requires flash_backward_sram_elements(Br, Bc, d)
 * <= sram->M. */
void flash_backward(const double *Q, const double *K, const double *V, const double *O,
                    const double *L, const double *dO, int N, int d, double softmax_scale,
                    bool causal, int Br, int Bc, double *dQ, double *dK, double *dV,
                    double *D, sram_arena *sram, io_counter *io, tile_stats *stats);

/* The closed forms of the header comment, in elements. */
uint64_t flash_forward_io_formula(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal);
uint64_t flash_backward_io_formula(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal);

#endif /* FA_STAGE3_TILED_H */

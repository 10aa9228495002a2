/*
 * solutions/ex4/swa_forward.c -- reference solution to exercise 4: the tiled
 * forward pass for sliding-window causal attention (i - W < j <= i).
 *
 * Same shape as flash_forward (src/cpu/stage3_tiled.c), deliberately: the
 * exercise is to write it again for the window, and a learner's file must
 * read whole, so it calls no helper of stage 3's (its SRAM arena is every
 * tiled forward's, stage 8's decode too). Query block [i0, i1)
 * can only see keys in [i0 - W + 1, i1 - 1]: the union of its rows'
 * windows, which is one interval because consecutive windows overlap. So
 * it visits exactly the key blocks that meet that interval and skips the
 * rest without loading them; inside a visited tile the mask is exact per
 * (row, key).
 *
 * The project writes a mask once, in core/mask.h: the window i - W < j <= i
 * is FlashAttention's window_size (W - 1, 0); mask_visible is the per-pair
 * test and mask_key_blocks the interval above, cut into key blocks. The loop
 * around them is the exercise: stage 3's flash_forward, which has one, is
 * not called (the checker fails a swa_forward that calls it).
 */
#include "swa_forward.h"

#include <math.h>

#include "mask.h"
#include "stage2_online_softmax.h"

void swa_forward(const double *Q, const double *K, const double *V, int N, int d,
                 double softmax_scale, int W, int Br, int Bc,
                 double *O, double *L, sram_arena *sram, io_counter *io, tile_stats *stats)
{
    sram_reset(sram);
    double *Qi = sram_alloc(sram, (size_t)Br * d, "Q_i");
    double *Oi = sram_alloc(sram, (size_t)Br * d, "O_i");
    double *m = sram_alloc(sram, (size_t)Br, "m");
    double *l = sram_alloc(sram, (size_t)Br, "l");
    double *Kj = sram_alloc(sram, (size_t)Bc * d, "K_j");
    double *Vj = sram_alloc(sram, (size_t)Bc * d, "V_j");
    double *Sij = sram_alloc(sram, (size_t)Br * Bc, "S_ij");
    int Tr = (N + Br - 1) / Br, Tc = (N + Bc - 1) / Bc;
    attn_mask mask = mask_make(N, N, W - 1, 0);   /* query i sees i - W < j <= i */

    for (int i = 0; i < Tr; i++) {
        int i0 = i * Br, br = imin(Br, N - i0);
        /* key blocks [j_lo, j_hi] hold keys [i0 - W + 1, i0 + br - 1], the
         * leftmost key any row sees to the last row itself */
        int j_lo, j_end;
        mask_key_blocks(mask, i0, i0 + br, Bc, &j_lo, &j_end);
        int j_hi = j_end - 1;
        if (stats) stats->tiles_skipped += (uint64_t)(Tc - (j_hi - j_lo + 1));

        hbm_load(Qi, Q + (size_t)i0 * d, br, d, d, io, T_Q);
        for (int r = 0; r < br; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0;
            for (int c = 0; c < d; c++) Oi[(size_t)r * d + c] = 0.0;
        }
        for (int j = j_lo; j <= j_hi; j++) {      /* only blocks inside the band */
            int j0 = j * Bc, bc = imin(Bc, N - j0);
            hbm_load(Kj, K + (size_t)j0 * d, bc, d, d, io, T_K);
            hbm_load(Vj, V + (size_t)j0 * d, bc, d, d, io, T_V);
            for (int r = 0; r < br; r++) {
                int row = i0 + r;
                for (int c = 0; c < bc; c++) {
                    int key = j0 + c;
                    double s = -INFINITY;
                    if (mask_visible(mask, row, key)) {
                        s = 0.0;
                        for (int k = 0; k < d; k++)
                            s += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                        s *= softmax_scale;
                    }
                    Sij[(size_t)r * bc + c] = s;
                }
            }
            /* Rows with nothing visible in this tile see only -inf: the
             * update leaves their state alone. */
            for (int r = 0; r < br; r++)
                online_softmax_update(&m[r], &l[r], Oi + (size_t)r * d, Sij + (size_t)r * bc,
                                      Vj, bc, d, d, NULL);
            if (stats) stats->tiles_visited++;
        }
        for (int r = 0; r < br; r++)
            online_softmax_finalize(m[r], l[r], Oi + (size_t)r * d, d, &m[r]);
        hbm_store(O + (size_t)i0 * d, Oi, br, d, d, io, T_O);
        hbm_store(L + i0, m, br, 1, 1, io, T_L);
    }
}

/*
 * exercises/tests/ex4-calls-flash-forward/swa_forward.c -- test fixture: the
 * three-line shortcut, which sets the window and hands the work to stage 3's
 * finished masked forward. Right O, L, tiles and traffic, no exercise done:
 * the checker must reject it (part own_loop).
 */
#include "swa_forward.h"

void swa_forward(const double *Q, const double *K, const double *V, int N, int d,
                 double softmax_scale, int W, int Br, int Bc,
                 double *O, double *L, sram_arena *sram, io_counter *io, tile_stats *stats)
{
    attn_params p = attn_params_make(1, 1, N, d, softmax_scale);
    p.window_size_left = W - 1, p.window_size_right = 0;
    flash_forward(&p, Q, K, V, Br, Bc, O, L, sram, io, stats);
}

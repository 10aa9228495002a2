/*
 * stage3_tiled.c -- Stage 3: tiled FlashAttention on the CPU.
 *
 * What it adds over stages 1 and 2: the N x N matrices are never built. Query
 * blocks of Br rows meet key/value blocks of Bc rows one tile at a time, in a
 * scratch arena of M elements that stands for on-chip SRAM; stage 2's online
 * softmax update runs on every row of every score tile; the forward saves
 * only O and the logsumexp L. The backward rebuilds each probability tile as
 * P = exp(S - L) instead of reading a stored P.
 *
 * Build and run:   make stage3 && ./stage3
 *   ./stage3                        real input (all-MiniLM-L6-v2, 12 heads),
 *                                   M = 16384 elements, Br and Bc derived from M
 *   ./stage3 --random --n 4096 --d 64 --sram 65536
 *   ./stage3 --random --n 300 --br 32 --bc 48 --causal
 *   ./stage3 --sweep io --csv data/cpu/io_sweep.csv        (make sweep)
 *   ./stage3 --sweep blocks --repeats 5 --csv data/cpu/block_sweep.csv
 *   ./stage3 --sweep formulas --csv data/cpu/formulas.csv
 *
 * What it prints: tiled against naive (stage 1) errors on O, L, dQ, dK, dV;
 * a gradient check of the tiled backward by central differences; the SRAM
 * high-water mark against M; slow-memory elements counted while running,
 * beside the closed forms of stage3_tiled.h and stage1_naive.h, their bytes,
 * the naive/tiled ratio and wall time. Exit 0 only when every check passes.
 *
 * Cost: the naive FLOPs (4 N^2 d forward) plus, in the backward, the
 * recomputation of S; extra memory O(N) (L and D) instead of Theta(N^2).
 */
#include "stage3_tiled.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage1_naive.h"
#include "stage2_online_softmax.h"
#include "tolerances.h"


size_t flash_forward_sram_elements(int Br, int Bc, int d)
{
    return 2 * (size_t)Br * d + 2 * (size_t)Bc * d + (size_t)Br * Bc + 2 * (size_t)Br;
}

size_t flash_backward_sram_elements(int Br, int Bc, int d)
{
    return 4 * (size_t)Bc * d + 3 * (size_t)Br * d + 2 * (size_t)Br * Bc + 2 * (size_t)Br;
}

//> derive-blocks
void paper_blocks(long M, int d, int *Br, int *Bc)
{
    long bc = M / (4L * d);
    *Bc = (int)(bc < 1 ? 1 : (bc > (1 << 20) ? (1 << 20) : bc));
    *Br = imin(*Bc, d);
}

int derive_blocks(long M, int d, bool backward, int *Br, int *Bc)
{
    size_t (*footprint)(int, int, int) =
        backward ? flash_backward_sram_elements : flash_forward_sram_elements;
    if (M < 1 || footprint(1, 1, d) > (size_t)M) return -1;
    paper_blocks(M, d, Br, Bc);
    while (footprint(*Br, *Bc, d) > (size_t)M) {
        if (*Bc >= *Br) (*Bc)--;
        else (*Br)--;
    }
    return 0;
}
//< derive-blocks

//> derive-blocks-io
int derive_blocks_io(long M, int d, bool backward, int *Br, int *Bc)
{
    size_t (*footprint)(int, int, int) =
        backward ? flash_backward_sram_elements : flash_forward_sram_elements;
    if (M < 1 || footprint(1, 1, d) > (size_t)M) return -1;
    int lo = 1, hi = 1 << 20;   /* largest B whose thin tile fits: bisection */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        size_t need = backward ? footprint(1, mid, d) : footprint(mid, 1, d);
        if (need <= (size_t)M) lo = mid;
        else hi = mid - 1;
    }
    *Br = backward ? 1 : lo;
    *Bc = backward ? lo : 1;
    return 0;
}
//< derive-blocks-io

//> tiled-forward
void flash_forward(const attn_params *p, const double *Q, const double *K, const double *V,
                   int Br, int Bc, double *O, double *L, sram_arena *sram, io_counter *io,
                   tile_stats *stats)
{
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    double softmax_scale = p->softmax_scale;
    attn_mask mask = attn_mask_of(p);
    /* Everything the loops touch, other than Q, K, V, O, L themselves, is
     * carved out of the arena: nothing here grows with N. */
    sram_reset(sram);
    double *Qi = sram_alloc(sram, (size_t)Br * d, "Q_i");
    double *Oi = sram_alloc(sram, (size_t)Br * d, "O_i");   /* unnormalized output */
    double *m = sram_alloc(sram, (size_t)Br, "m");           /* running max per row */
    double *l = sram_alloc(sram, (size_t)Br, "l");           /* running denominator */
    double *Kj = sram_alloc(sram, (size_t)Bc * d, "K_j");
    double *Vj = sram_alloc(sram, (size_t)Bc * d, "V_j");
    double *Sij = sram_alloc(sram, (size_t)Br * Bc, "S_ij");
    int Tr = ceil_div(Sq, Br), Tc = ceil_div(Sk, Bc);

    for (int i = 0; i < Tr; i++) {                 /* outer loop: query blocks */
        int i0 = i * Br, br = imin(Br, Sq - i0);
        //> forward-skip
        /* The key blocks [jb, je) that hold a key some row of this block
         * sees: all Tc without a mask; under causal, none wholly in the
         * future. The rest are never loaded. */
        int jb, je, visits = mask_key_blocks(mask, i0, i0 + br, Bc, &jb, &je);
        if (stats) stats->tiles_skipped += (uint64_t)(Tc - visits);
        if (visits) hbm_load(Qi, Q + (size_t)i0 * d, br, d, d, io, T_Q);
        //< forward-skip
        for (int r = 0; r < br; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0;
            for (int c = 0; c < d; c++) Oi[(size_t)r * d + c] = 0.0;
        }
        //> tiled-forward-blocks
        for (int j = jb; j < je; j++) {            /* inner loop: key/value blocks */
            int j0 = j * Bc, bc = imin(Bc, Sk - j0);
            hbm_load(Kj, K + (size_t)j0 * d, bc, d, d, io, T_K);
            hbm_load(Vj, V + (size_t)j0 * d, bc, d, d, io, T_V);

            /* The score tile, born and consumed in SRAM; a hidden key's
             * score is -inf. Only tiles the mask cuts need the test. */
            bool whole = mask_tile_unmasked(mask, i0, i0 + br, j0, j0 + bc);
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                    Sij[(size_t)r * bc + c] = whole || mask_visible(mask, i0 + r, j0 + c)
                                                  ? s * softmax_scale : -INFINITY;
                }
            /* Stage 2's update, row by row: rescale by alpha, add this tile.
             * A row that sees nothing in this tile keeps its state (the
             * update's guard against -inf - -inf). */
            for (int r = 0; r < br; r++)
                online_softmax_update(&m[r], &l[r], Oi + (size_t)r * d, Sij + (size_t)r * bc,
                                      Vj, bc, d, d, NULL);
            if (stats) stats->tiles_visited++;
        }
        //< tiled-forward-blocks
        /* Normalize once; L = m + log l replaces the row's N probabilities.
         * A row that saw no key gets O = 0 and L = -inf. */
        for (int r = 0; r < br; r++)
            online_softmax_finalize(m[r], l[r], Oi + (size_t)r * d, d, &m[r]);
        hbm_store(O + (size_t)i0 * d, Oi, br, d, d, io, T_O);
        hbm_store(L + i0, m, br, 1, 1, io, T_L);
    }
}
//< tiled-forward

flash_rounding flash_backward_rounding;   /* {NULL, NULL}: fp64 throughout */

//> tiled-backward
void flash_backward(const attn_params *p, const double *Q, const double *K, const double *V,
                    const double *O, const double *L, const double *dO, int Br, int Bc,
                    double *dQ, double *dK, double *dV, double *D, sram_arena *sram,
                    io_counter *io, tile_stats *stats)
{
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, G = p->H / p->H_kv;
    double softmax_scale = p->softmax_scale;
    attn_mask mask = attn_mask_of(p);
    size_t qd = (size_t)Sq * d;   /* one query head of Q, O, dO, dQ */
    sram_reset(sram);
    double *Kj = sram_alloc(sram, (size_t)Bc * d, "K_j");
    double *Vj = sram_alloc(sram, (size_t)Bc * d, "V_j");
    double *dKj = sram_alloc(sram, (size_t)Bc * d, "dK_j");
    double *dVj = sram_alloc(sram, (size_t)Bc * d, "dV_j");
    double *Qi = sram_alloc(sram, (size_t)Br * d, "Q_i");
    double *dOi = sram_alloc(sram, (size_t)Br * d, "dO_i");
    double *dQi = sram_alloc(sram, (size_t)Br * d, "dQ_i");
    double *Li = sram_alloc(sram, (size_t)Br, "L_i");
    double *Di = sram_alloc(sram, (size_t)Br, "D_i");
    double *Pij = sram_alloc(sram, (size_t)Br * Bc, "P_ij");
    double *dSij = sram_alloc(sram, (size_t)Br * Bc, "dP_ij, then dS_ij");
    int Tr = ceil_div(Sq, Br), Tc = ceil_div(Sk, Bc);
    //> tiled-backward-d
    /* D_i = dO_i . O_i, once per row (it equals sum_j P_ij dP_ij). The O
     * block passes through Q_i's tile, which is free until the main loop.
     * A query block that sees no key gets dQ = 0 here: no key block will
     * visit it. */
    for (int h = 0; h < G; h++)
        for (int i = 0; i < Tr; i++) {
            int i0 = i * Br, br = imin(Br, Sq - i0), kb, ke;
            hbm_load(dOi, dO + h * qd + (size_t)i0 * d, br, d, d, io, T_dO);
            hbm_load(Qi, O + h * qd + (size_t)i0 * d, br, d, d, io, T_O);
            for (int r = 0; r < br; r++) {
                double s = 0.0;
                for (int k = 0; k < d; k++) s += dOi[(size_t)r * d + k] * Qi[(size_t)r * d + k];
                Di[r] = s;
            }
            hbm_store(D + (size_t)h * Sq + i0, Di, br, 1, 1, io, T_D);
            if (!mask_key_blocks(mask, i0, i0 + br, Bc, &kb, &ke)) {
                for (size_t x = 0; x < (size_t)br * d; x++) dQi[x] = 0.0;
                hbm_store(dQ + h * qd + (size_t)i0 * d, dQi, br, d, d, io, T_dQ);
            }
        }
    //< tiled-backward-d

    for (int j = 0; j < Tc; j++) {                 /* outer loop: key/value blocks */
        int j0 = j * Bc, bc = imin(Bc, Sk - j0);
        //> backward-skip
        /* The query blocks [ib, ie) that see a key of this block; a key
         * block nobody sees gets dK_j = dV_j = 0 without reading K_j, V_j. */
        int ib, ie, visits = mask_query_blocks(mask, j0, j0 + bc, Br, &ib, &ie);
        if (stats) stats->tiles_skipped += (uint64_t)G * (uint64_t)(Tr - visits);
        if (visits) {
            hbm_load(Kj, K + (size_t)j0 * d, bc, d, d, io, T_K);
            hbm_load(Vj, V + (size_t)j0 * d, bc, d, d, io, T_V);
        }
        for (size_t x = 0; x < (size_t)bc * d; x++) dKj[x] = dVj[x] = 0.0;

        for (int h = 0; h < G; h++)                /* the query heads that share K_j, V_j */
        for (int i = ib; i < ie; i++) {            /* inner loop: query blocks */
        //< backward-skip
            int i0 = i * Br, br = imin(Br, Sq - i0);
            hbm_load(Qi, Q + h * qd + (size_t)i0 * d, br, d, d, io, T_Q);
            hbm_load(dOi, dO + h * qd + (size_t)i0 * d, br, d, d, io, T_dO);
            hbm_load(Li, L + (size_t)h * Sq + i0, br, 1, 1, io, T_L);
            hbm_load(Di, D + (size_t)h * Sq + i0, br, 1, 1, io, T_D);

            //> tiled-backward-p-ds
            /* Rebuild P from S and L: exp(S - L) is already normalized. A
             * hidden key, or a row that sees no key (L = -inf), gives 0. */
            bool whole = mask_tile_unmasked(mask, i0, i0 + br, j0, j0 + bc);
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                    bool hidden = !(whole || mask_visible(mask, i0 + r, j0 + c)) || Li[r] == -INFINITY;
                    Pij[(size_t)r * bc + c] = hidden ? 0.0 : exp(s * softmax_scale - Li[r]);
                }
            /* dV_j += P^T dO_i */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double p_rc = Pij[(size_t)r * bc + c];
                    if (flash_backward_rounding.P) p_rc = flash_backward_rounding.P(p_rc);
                    for (int k = 0; k < d; k++) dVj[(size_t)c * d + k] += p_rc * dOi[(size_t)r * d + k];
                }
            /* dP = dO_i V_j^T, then dS = P * (dP - D) in the same tile */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += dOi[(size_t)r * d + k] * Vj[(size_t)c * d + k];
                    dSij[(size_t)r * bc + c] = Pij[(size_t)r * bc + c] * (s - Di[r]);
                    if (flash_backward_rounding.dS)
                        dSij[(size_t)r * bc + c] = flash_backward_rounding.dS(dSij[(size_t)r * bc + c]);
                }
            //< tiled-backward-p-ds
            //> tiled-backward-dk-dq
            /* dK_j += scale * dS^T Q_i */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double g = dSij[(size_t)r * bc + c] * softmax_scale;
                    for (int k = 0; k < d; k++) dKj[(size_t)c * d + k] += g * Qi[(size_t)r * d + k];
                }
            /* dQ_i += scale * dS K_j, accumulated in slow memory across key
             * blocks; the query block's first key block starts it instead of
             * reading it. */
            int kb, ke;
            mask_key_blocks(mask, i0, i0 + br, Bc, &kb, &ke);
            if (j == kb)
                for (size_t x = 0; x < (size_t)br * d; x++) dQi[x] = 0.0;
            else
                hbm_load(dQi, dQ + h * qd + (size_t)i0 * d, br, d, d, io, T_dQ);
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double g = dSij[(size_t)r * bc + c] * softmax_scale;
                    for (int k = 0; k < d; k++) dQi[(size_t)r * d + k] += g * Kj[(size_t)c * d + k];
                }
            hbm_store(dQ + h * qd + (size_t)i0 * d, dQi, br, d, d, io, T_dQ);
            //< tiled-backward-dk-dq
            if (stats) stats->tiles_visited++;
        }
        /* dK_j and dV_j are complete: every query block of every head of the
         * group has been seen. */
        hbm_store(dK + (size_t)j0 * d, dKj, bc, d, d, io, T_dK);
        hbm_store(dV + (size_t)j0 * d, dVj, bc, d, d, io, T_dV);
    }
}
//< tiled-backward

void flash_attention_all_heads(const attn_params *p, const double *Q, const double *K,
                               const double *V, const double *dO, flash_blocks b, double *O,
                               double *L, double *dQ, double *dK, double *dV, sram_arena *sram,
                               io_counter *io_f, io_counter *io_b, tile_stats *st_f,
                               tile_stats *st_b, double *t_f, double *t_b)
{
    int G = p->H / p->H_kv;
    double tf = 0, tb = 0;
    double *D = dQ ? xmalloc((size_t)G * p->seqlen_q, sizeof(double), "D") : NULL;
    for (int bi = 0; bi < p->B; bi++)
        for (int g = 0; g < p->H_kv; g++) {
            int h0 = g * G;   /* the group's first query head */
            size_t ko = attn_kv_offset(p, bi, h0);
            double t0 = now_seconds();
            for (int h = h0; h < h0 + G; h++)
                flash_forward(p, Q + attn_q_offset(p, bi, h), K + ko, V + ko, b.fBr, b.fBc,
                              O + attn_q_offset(p, bi, h), L + attn_row_offset(p, bi, h), sram,
                              io_f, st_f);
            double t1 = now_seconds();
            if (dQ) {
                size_t qo = attn_q_offset(p, bi, h0), ro = attn_row_offset(p, bi, h0);
                poison(D, (size_t)G * p->seqlen_q);
                flash_backward(p, Q + qo, K + ko, V + ko, O + qo, L + ro, dO + qo, b.bBr, b.bBc,
                               dQ + qo, dK + ko, dV + ko, D, sram, io_b, st_b);
            }
            tf += t1 - t0;
            tb += now_seconds() - t1;
        }
    if (t_f) *t_f = tf;
    if (t_b) *t_b = tb;
    free(D);
}

//> tiled-io-formula
uint64_t flash_forward_io_formula(const attn_params *p, int Br, int Bc)
{
    attn_mask m = attn_mask_of(p);
    int64_t Sq = p->seqlen_q, d = p->d;
    int64_t R = mask_query_rows_active(m, Br);      /* rows whose Q is read */
    int64_t KR = mask_key_rows_read(m, Br, Bc);     /* K, V rows read, over query blocks */
    int64_t per_head = R * d + 2 * KR * d + Sq * d + Sq;
    return (uint64_t)((int64_t)p->B * p->H * per_head);
}

uint64_t flash_backward_io_formula(const attn_params *p, int Br, int Bc)
{
    attn_mask m = attn_mask_of(p);
    int64_t Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    int64_t R = mask_query_rows_active(m, Br);
    int64_t QR = mask_query_rows_read(m, Br, Bc);   /* Q, dO, L, D rows read, over key blocks */
    int64_t C = mask_key_rows_active(m, Bc);        /* K, V rows read, once per kv head */
    int64_t per_q_head = 2 * Sq * d + Sq + (Sq - R) * d + QR * (3 * d + 2) + (QR - R) * d;
    int64_t per_kv_head = 2 * C * d + 2 * Sk * d;
    return (uint64_t)((int64_t)p->B * (p->H * per_q_head + p->H_kv * per_kv_head));
}

uint64_t flash_tiles_formula(const attn_params *p, int Br, int Bc)
{
    return (uint64_t)((int64_t)p->B * p->H * mask_tiles_visited(attn_mask_of(p), Br, Bc));
}
//< tiled-io-formula

//> tolerances
flash_errors flash_errors_vs(const attn_problem *in, const double *O, const double *L,
                             const double *dQ, const double *dK, const double *dV,
                             const double *rO, const double *rL, const double *rdQ,
                             const double *rdK, const double *rdV)
{
    const attn_params *p = &in->params;
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
    flash_errors e = {0, 0, 0, 0, 0};
    //> tolerance-scales
    /* O is a convex combination of rows of V: its rounding scales with
     * max|V|, however small O itself comes out. L = m + log l rounds
     * relative to its own size, and log l is O(1). */
    double mV = max_abs_finite(in->V, nkv);
    e.O = rel_err(O, rO, nq, mV);
    e.L = rel_err(L, rL, rows, fmax(1.0, max_abs_finite(rL, rows)));
    if (dQ) {
        /* A gradient is a sum of terms whose size the inputs set: dV of
         * P dO (|dO|), dQ and dK of scale P (dP - D) K or Q, with
         * |dP - D| of order |dO| |V|. When the terms cancel (equal keys give
         * dQ = 0 exactly), max|ref| is rounding noise and no scale at all, so
         * the larger of the two is the scale. */
        double mdO = max_abs_finite(in->dO, nq), s = p->softmax_scale * mdO * mV;
        e.dQ = rel_err(dQ, rdQ, nq, fmax(max_abs_finite(rdQ, nq), s * max_abs_finite(in->K, nkv)));
        e.dK = rel_err(dK, rdK, nkv, fmax(max_abs_finite(rdK, nkv), s * max_abs_finite(in->Q, nq)));
        e.dV = rel_err(dV, rdV, nkv, fmax(max_abs_finite(rdV, nkv), mdO));
    }
    //< tolerance-scales
    return e;
}

double flash_backward_tol(const double *L, size_t rows)
{
    /* P = exp(S - L) with L rounded to within half an ulp of |L|: each P
     * carries a relative error of about eps |L|, which no care in the
     * backward can remove once only L is kept (see the chapter). */
    return FLASH_BWD_TOL + FLASH_BWD_L_FACTOR * DBL_EPSILON * max_abs_finite(L, rows);
}
//< tolerances

flash_blocks flash_blocks_from_options(const options *opt, const attn_params *p, long *M)
{
    flash_blocks b;
    int d = p->d;
    if (!!(opt->given & OPT_BR) != !!(opt->given & OPT_BC))
        fatal(EXIT_BAD_INPUT, "--br and --bc go together (or give neither and derive them from --sram)");
    if ((opt->given & OPT_BR) && (opt->given & OPT_RULE))
        fatal(EXIT_BAD_INPUT, "--rule derives Br and Bc from --sram; it does not go with --br/--bc");
    if (opt->given & OPT_BR) {
        /* A block longer than the sequence only wastes SRAM: cut it. */
        int Br = imin(opt->Br, p->seqlen_q), Bc = imin(opt->Bc, p->seqlen_k);
        if (Br != opt->Br || Bc != opt->Bc) {
            if (p->seqlen_q == p->seqlen_k)
                printf("  (--br %d --bc %d exceed N = %d: using Br = %d, Bc = %d)\n", opt->Br,
                       opt->Bc, p->seqlen_q, Br, Bc);
            else
                printf("  (--br %d --bc %d exceed seqlen_q = %d or seqlen_k = %d: using Br = %d, "
                       "Bc = %d)\n", opt->Br, opt->Bc, p->seqlen_q, p->seqlen_k, Br, Bc);
        }
        b.fBr = b.bBr = Br;
        b.fBc = b.bBc = Bc;
        size_t need = flash_backward_sram_elements(Br, Bc, d);
        size_t needf = flash_forward_sram_elements(Br, Bc, d);
        if (needf > need) need = needf;
        if ((opt->given & OPT_SRAM) && need > (size_t)opt->M)
            fatal(EXIT_BAD_INPUT, "--sram %ld: tiles Br = %d, Bc = %d at d = %d need %zu elements",
                  opt->M, Br, Bc, d, need);
        *M = (opt->given & OPT_SRAM) ? opt->M : (long)need;
        return b;
    }
    *M = (opt->given & OPT_SRAM) ? opt->M : FLASH_DEFAULT_M;
    int (*rule)(long, int, bool, int *, int *) =
        strcmp(opt->rule, "io") ? derive_blocks : derive_blocks_io;
    if (rule(*M, d, false, &b.fBr, &b.fBc) != 0 || rule(*M, d, true, &b.bBr, &b.bBc) != 0) {
        if (!(opt->given & OPT_SRAM))   /* name the default, not a flag the user never gave */
            fatal(EXIT_BAD_INPUT, "the default M = %ld elements is too small for one tile at "
                  "d = %d (the backward needs at least %zu); give --sram M", *M, d,
                  flash_backward_sram_elements(1, 1, d));
        fatal(EXIT_BAD_INPUT, "--sram %ld: M is too small for one tile at d = %d (the backward "
              "needs at least %zu elements)", *M, d, flash_backward_sram_elements(1, 1, d));
    }
    /* The rule sizes blocks from M alone; a block longer than the sequence
     * holds rows that do not exist, so it is cut to seqlen_q (Br) and
     * seqlen_k (Bc). The count of reads and writes is the same either way
     * (the one block covers every row); the SRAM used is not. */
    b.fBr = imin(b.fBr, p->seqlen_q);
    b.bBr = imin(b.bBr, p->seqlen_q);
    b.fBc = imin(b.fBc, p->seqlen_k);
    b.bBc = imin(b.bBc, p->seqlen_k);
    return b;
}

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */
double flash_gradcheck(const attn_problem *g, int Br, int Bc)
{
    const attn_params *gp = &g->params;
    size_t gq = attn_q_numel(gp), gk = attn_kv_numel(gp), gr = attn_rows(gp);
    double *buf = xmalloc(2 * gq + 2 * gk + gr, sizeof(double), "gradcheck buffers");
    double *o = buf, *gdq = o + gq, *gdk = gdq + gq, *gdv = gdk + gk, *l = gdv + gk;
    sram_arena small;
    sram_init(&small, flash_backward_sram_elements(Br, Bc, gp->d));
    flash_attention_all_heads(gp, g->Q, g->K, g->V, g->dO, (flash_blocks){Br, Bc, Br, Bc}, o, l, gdq, gdk, gdv,
                              &small, NULL, NULL, NULL, NULL, NULL, NULL);
    double e = gradcheck_central(gp, g->Q, g->K, g->V, g->dO, gdq, gdk, gdv, 1e-5);
    sram_free(&small);
    free(buf);
    return e;
}

flash_run flash_run_counted(const attn_params *p, const double *Q, const double *K, const double *V,
                            const double *dO, flash_blocks b, long M, double *O, double *L, double *dQ,
                            double *dK, double *dV)
{
    flash_run r;
    memset(&r, 0, sizeof r);
    io_reset(&r.io_f);
    io_reset(&r.io_b);
    sram_arena sram;
    sram_init(&sram, (size_t)M);
    flash_attention_all_heads(p, Q, K, V, dO, b, O, L, dQ, dK, dV, &sram, &r.io_f, &r.io_b, &r.st_f,
                              &r.st_b, &r.t_f, &r.t_b);
    r.high_water = sram.high_water;
    sram_free(&sram);
    return r;
}

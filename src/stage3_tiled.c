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
int derive_blocks(long M, int d, bool backward, int *Br, int *Bc)
{
    size_t (*footprint)(int, int, int) =
        backward ? flash_backward_sram_elements : flash_forward_sram_elements;
    if (M < 1 || footprint(1, 1, d) > (size_t)M) return -1;
    long bc = M / (4L * d);
    *Bc = (int)(bc < 1 ? 1 : (bc > (1 << 20) ? (1 << 20) : bc));
    *Br = imin(*Bc, d);
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

#ifndef STAGE_NO_MAIN

static const char USAGE[] =
    "stage3: tiled FlashAttention on the CPU, forward and backward, against naive attention\n"
    "usage: ./stage3 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2 Q, K, V, dO; every head), M = 16384\n"
    "elements of SRAM, Br and Bc derived from M. Exit 0 only if every check passes.\n"
    "--sweep io|blocks|formulas writes --csv (see make sweep); --repeats R times each point R\n"
    "times and writes the median.";

static int report(const char *what, double err, double tol) { return report_check(what, 48, err, tol); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One naive and one tiled run of a random (1, 1, N, d) problem, forward and
 * backward, written as CSV rows. Timed --repeats times (default 1): wall_s is
 * the median, since one timing on a shared machine can be off by a factor;
 * the counts must be the same every time. With `paired` (the causal block
 * sweep) the non-causal run of the same problem and tiles is timed too, the
 * two alternating, so that a causal/non-causal time ratio compares runs made
 * under the same load; both get rows. Returns the number of counted !=
 * formula (and high-water > M). */
static int sweep_point(FILE *csv, const options *opt, int N, int d, flash_blocks b, long M,
                       bool with_naive, const char *label, bool paired)
{
    options o = *opt;
    o.N = N;
    o.d = d;
    o.batch = o.heads = 1;
    o.given |= OPT_N | OPT_D;
    int R = opt->repeats > 0 ? opt->repeats : 1;
    attn_problem prob;
    load_problem(&o, &prob);
    /* The variants timed: the problem as given, or (paired) its non-causal
     * twin first and then the causal problem, on the same Q, K, V, dO. */
    attn_params var[2] = {prob.params, prob.params};
    int nv = paired ? 2 : 1;
    if (paired) {
        var[0].window_size_left = var[0].window_size_right = -1;
        var[1].window_size_left = -1;
        var[1].window_size_right = 0;
    }
    size_t n = attn_q_numel(&prob.params);
    double *buf = xmalloc(5 * n + (size_t)N, sizeof(double), "sweep buffers");
    double *O = buf, *dQ = buf + n, *dK = buf + 2 * n, *dV = buf + 3 * n, *L = buf + 4 * n;
    double *t = xmalloc(8 * (size_t)R, sizeof(double), "sweep times");  /* [variant][4][R] */
    int bad = 0;
    if (with_naive) {
        uint64_t fwd[2] = {0, 0}, bwd[2] = {0, 0};
        for (int r = 0; r < R; r++)
            for (int v = 0; v < nv; v++) {
                io_counter nf, nb;
                io_reset(&nf);
                io_reset(&nb);
                naive_attention_all_heads(&var[v], prob.Q, prob.K, prob.V, prob.dO, O, L, dQ, dK,
                                          dV, &nf, &nb, &t[(v * 4 + 0) * R + r],
                                          &t[(v * 4 + 1) * R + r]);
                fwd[v] = io_total(&nf);
                bwd[v] = io_total(&nb);
                bad += (fwd[v] != naive_forward_io_formula(&var[v])) +
                       (bwd[v] != naive_backward_io_formula(&var[v]));
            }
        for (int v = 0; v < nv; v++) {
            int causal = attn_is_causal(&var[v]);
            uint64_t ff = naive_forward_io_formula(&var[v]), bf = naive_backward_io_formula(&var[v]);
            fprintf(csv, "naive,forward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", causal, N, d,
                    (unsigned long long)fwd[v], (unsigned long long)ff, 8ull * fwd[v],
                    median(&t[(v * 4 + 0) * R], R), R);
            fprintf(csv, "naive,backward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", causal, N, d,
                    (unsigned long long)bwd[v], (unsigned long long)bf, 8ull * bwd[v],
                    median(&t[(v * 4 + 1) * R], R), R);
        }
    }
    sram_arena sram;
    sram_init(&sram, (size_t)M);
    io_counter tf[2], tb[2];
    tile_stats sf[2], sb[2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) {
            io_reset(&tf[v]);
            io_reset(&tb[v]);
            sf[v] = sb[v] = (tile_stats){0, 0};
            flash_attention_all_heads(&var[v], prob.Q, prob.K, prob.V, prob.dO, b, O, L, dQ, dK,
                                      dV, &sram, &tf[v], &tb[v], &sf[v], &sb[v],
                                      &t[(v * 4 + 2) * R + r], &t[(v * 4 + 3) * R + r]);
            bad += io_total(&tf[v]) != flash_forward_io_formula(&var[v], b.fBr, b.fBc);
            bad += io_total(&tb[v]) != flash_backward_io_formula(&var[v], b.bBr, b.bBc);
            bad += sf[v].tiles_visited != flash_tiles_formula(&var[v], b.fBr, b.fBc);
            bad += sb[v].tiles_visited != flash_tiles_formula(&var[v], b.bBr, b.bBc);
        }
    for (int v = 0; v < nv; v++) {
        int causal = attn_is_causal(&var[v]);
        uint64_t ff = flash_forward_io_formula(&var[v], b.fBr, b.fBc);
        uint64_t bf = flash_backward_io_formula(&var[v], b.bBr, b.bBc);
        fprintf(csv, "%s,forward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                causal, N, d, M, b.fBr, b.fBc, (unsigned long long)io_total(&tf[v]),
                (unsigned long long)ff, 8ull * io_total(&tf[v]), sram.high_water,
                median(&t[(v * 4 + 2) * R], R), R, (unsigned long long)sf[v].tiles_visited);
        fprintf(csv, "%s,backward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                causal, N, d, M, b.bBr, b.bBc, (unsigned long long)io_total(&tb[v]),
                (unsigned long long)bf, 8ull * io_total(&tb[v]), sram.high_water,
                median(&t[(v * 4 + 3) * R], R), R, (unsigned long long)sb[v].tiles_visited);
    }
    fflush(csv);
    bad += sram.high_water > (size_t)M;
    sram_free(&sram);
    free(t);
    free(buf);
    free_problem(&prob);
    return bad;
}

#define SWEEP_HEADER \
    "algorithm,pass,causal,N,d,M,Br,Bc,counted_elements,formula_elements,bytes_fp64," \
    "sram_high_water,wall_s,repeats,tiles_visited"

/* --sweep formulas: the closed forms the paper sets beside the measurements,
 * evaluated here by the same C functions the tests check, so that no script
 * re-derives them. Rows: quantity, rule, pass, N, d, M, Br, Bc, value.
 *   footprint    SRAM elements of one pass's tiles under a block rule:
 *                "paper" (FlashAttention Algorithm 1 as printed: Bc =
 *                ceil(M/4d), Br = min(ceil(M/4d), d)), "derive_blocks"
 *                (stage 3's fit of it), "derive_blocks_io" (--rule io)
 *   io_elements  the IO formula of that pass at those tiles (N as given)
 *   footprint_over_M_max  the paper's rule's largest forward footprint / M
 *                over every M from 4d to 2^18 (the M where it is reached)
 *   causal_tiles (query block, key block) tiles a causal forward with
 *                Br = Bc = B computes: "all" (no skipping), "code" (the
 *                tiles core/mask.h's causal mask visits: a key block is
 *                skipped when it starts at or past the query block's
 *                exclusive end i1), "chapter" (the textbook's test, skip only
 *                when the key block starts past i1, which also keeps the
 *                block starting at i1: the tiles of the window (-1, 1)),
 *                beside the code's count the sweeps measure in their
 *                tiles_visited column. */
static void formula_rows(FILE *csv, int N, int d)
{
    static const long Ms[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
    attn_params p = attn_params_make(1, 1, N, d, 1.0 / sqrt((double)d));
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
        long M = Ms[a];
        for (int pass = 0; pass < 2; pass++) {
            bool bwd = pass == 1;
            const char *pname = bwd ? "backward" : "forward";
            int br[3], bc[3];
            const char *rule[3] = {"paper", "derive_blocks", "derive_blocks_io"};
            int c = (int)((M + 4L * d - 1) / (4L * d));
            br[0] = imin(c, d);
            bc[0] = c;
            if (derive_blocks(M, d, bwd, &br[1], &bc[1]) != 0) br[1] = bc[1] = 0;
            if (derive_blocks_io(M, d, bwd, &br[2], &bc[2]) != 0) br[2] = bc[2] = 0;
            for (int r = 0; r < 3; r++) {
                if (br[r] == 0) continue;
                size_t fp = bwd ? flash_backward_sram_elements(br[r], bc[r], d)
                                : flash_forward_sram_elements(br[r], bc[r], d);
                uint64_t io = bwd ? flash_backward_io_formula(&p, br[r], bc[r])
                                  : flash_forward_io_formula(&p, br[r], bc[r]);
                fprintf(csv, "footprint,%s,%s,,%d,%ld,%d,%d,%zu\n", rule[r], pname, d, M, br[r],
                        bc[r], fp);
                fprintf(csv, "io_elements,%s,%s,%d,%d,%ld,%d,%d,%llu\n", rule[r], pname, N, d, M,
                        br[r], bc[r], (unsigned long long)io);
            }
        }
    }
    double worst = 0;
    long worst_M = 0;
    for (long M = 4L * d; M < (1L << 18); M++) {
        int c = (int)((M + 4L * d - 1) / (4L * d));
        double r = (double)flash_forward_sram_elements(imin(c, d), c, d) / (double)M;
        if (r > worst) { worst = r; worst_M = M; }
    }
    int wc = (int)((worst_M + 4L * d - 1) / (4L * d));
    fprintf(csv, "footprint_over_M_max,paper,forward,,%d,%ld,%d,%d,%.6f\n", d, worst_M,
            imin(wc, d), wc, worst);
    for (int B = 4; B <= 512 && B <= N; B *= 2) {
        int64_t T = ceil_div(N, B);
        int64_t code = mask_tiles_visited(mask_causal(N, N), B, B);
        int64_t chapter = mask_tiles_visited(mask_make(N, N, -1, 1), B, B);
        fprintf(csv, "causal_tiles,all,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B, (long long)(T * T));
        fprintf(csv, "causal_tiles,code,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B, (long long)code);
        fprintf(csv, "causal_tiles,chapter,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B,
                (long long)chapter);
    }
}

/* Blocks for a sweep point of length N: --br/--bc or --sram as options say. */
static flash_blocks sweep_blocks(const options *o, int d, int N, long *M)
{
    attn_params p = attn_params_make(1, 1, N, d, 1.0);
    return flash_blocks_from_options(o, &p, M);
}

/* --sweep io: traffic over N (M fixed) and over M (N fixed). --sweep blocks:
 * Br = Bc over powers of two at one N, with wall time (with --causal, each
 * point also non-causal, timed in alternation). --sweep formulas: the closed
 * forms above. d is --d or 64. */
static int run_sweep(const options *opt, int argc, char **argv)
{
    if (!opt->csv) fatal(EXIT_BAD_INPUT, "--sweep needs --csv FILE");
    if (strcmp(opt->sweep, "io") && strcmp(opt->sweep, "blocks") && strcmp(opt->sweep, "formulas"))
        fatal(EXIT_BAD_INPUT, "--sweep: expected 'io', 'blocks' or 'formulas', got '%s'", opt->sweep);
    int d = (opt->given & OPT_D) ? opt->d : 64, bad = 0;
    long M;
    if (!strcmp(opt->sweep, "formulas")) {
        FILE *f = csv_open(opt->csv, argc, argv, "quantity,rule,pass,N,d,M,Br,Bc,value");
        formula_rows(f, (opt->given & OPT_N) ? opt->N : 2048, d);
        csv_close(f);
        printf("stage3 --sweep formulas: wrote %s\n", opt->csv);
        return 0;
    }
    FILE *csv = csv_open(opt->csv, argc, argv, SWEEP_HEADER);
    if (!strcmp(opt->sweep, "io")) {
        static const int Ns[] = {128, 256, 512, 1024, 2048, 4096};
        static const long Ms[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
        int N_fixed = (opt->given & OPT_N) ? opt->N : 2048;
        for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = FLASH_DEFAULT_M;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", Ns[a], o.M);
            flash_blocks b = sweep_blocks(&o, d, Ns[a], &M);
            bad += sweep_point(csv, &o, Ns[a], d, b, M, true, "tiled", false);
        }
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = Ms[a];
            if (derive_blocks(o.M, d, true, &(int){0}, &(int){0}) != 0) continue;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", N_fixed, o.M);
            flash_blocks b = sweep_blocks(&o, d, N_fixed, &M);
            bad += sweep_point(csv, &o, N_fixed, d, b, M, a == 0, "tiled", false);
            /* the same M with the blocks that minimize the model's count */
            flash_blocks io = {0, 0, 0, 0};
            derive_blocks_io(o.M, d, false, &io.fBr, &io.fBc);
            derive_blocks_io(o.M, d, true, &io.bBr, &io.bBc);
            bad += sweep_point(csv, &o, N_fixed, d, io, o.M, false, "tiled-io", false);
        }
    } else if (!strcmp(opt->sweep, "blocks")) {
        int N = (opt->given & OPT_N) ? opt->N : 2048;
        for (int B = 4; B <= 512 && B <= N; B *= 2) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)OPT_SRAM) | OPT_BR | OPT_BC;
            o.Br = o.Bc = B;
            fprintf(stderr, "sweep blocks: N = %d, Br = Bc = %d\n", N, B);
            flash_blocks b = sweep_blocks(&o, d, N, &M);
            bad += sweep_point(csv, &o, N, d, b, M, B == 4, "tiled", o.causal);
        }
    }
    csv_close(csv);
    printf("stage3 --sweep %s: wrote %s; counted == formula and high-water <= M: %s\n",
           opt->sweep, opt->csv, bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv, OPT_TILED_CPU | OPT_SWEEP | OPT_CSV | OPT_REPEATS, USAGE, &opt);
    if (opt.sweep) {
        if (opt.given & (OPT_MASKS & ~(opt_set)OPT_CAUSAL))
            fatal(EXIT_BAD_INPUT, "--sweep io|blocks|formulas runs square problems (--causal or "
                  "none); masks and lengths are swept by ./stage6 --sweep window");
        return outputs_finish(run_sweep(&opt, argc, argv));
    }
    if (opt.given & OPT_REPEATS) fatal(EXIT_BAD_INPUT, "--repeats times the points of a --sweep");
    if (opt.csv) fatal(EXIT_BAD_INPUT, "--csv is written by --sweep");

    naive_require_size_flags(&opt);   /* the reference is naive */
    attn_problem prob;
    naive_load_problem(&opt, &prob);
    const attn_params *p = &prob.params;
    long M;
    flash_blocks b = flash_blocks_from_options(&opt, p, &M);
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
    int d = p->d;

    printf("stage3: tiled FlashAttention (CPU, fp64), %s\n", prob.source);
    if (p->seqlen_q == p->seqlen_k && p->H_kv == p->H)
        printf("  shape (B, H, N, d) = (%d, %d, %d, %d), softmax_scale = %.6g, causal = %s%s\n",
               p->B, p->H, p->seqlen_q, d, p->softmax_scale, attn_is_causal(p) ? "yes" : "no",
               attn_is_masked(p) && !attn_is_causal(p) ? ", window set (see stage6)" : "");
    else
        printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, seqlen_k = %d, d = %d, softmax_scale "
               "= %.6g, window = (%d, %d)\n", p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, d,
               p->softmax_scale, p->window_size_left, p->window_size_right);
    printf("  SRAM M = %ld elements, rule %s; forward Br = %d, Bc = %d (%zu elements); "
           "backward Br = %d, Bc = %d (%zu elements)\n", M,
           (opt.given & OPT_BR) ? "--br/--bc" : opt.rule, b.fBr, b.fBc,
           flash_forward_sram_elements(b.fBr, b.fBc, d), b.bBr, b.bBc,
           flash_backward_sram_elements(b.bBr, b.bBc, d));
    if (!(opt.given & OPT_BR)) {   /* the rule's blocks before the cut to the sequence */
        flash_blocks r;
        int (*rule)(long, int, bool, int *, int *) = strcmp(opt.rule, "io") ? derive_blocks : derive_blocks_io;
        rule(M, d, false, &r.fBr, &r.fBc);
        rule(M, d, true, &r.bBr, &r.bBc);
        if (r.fBr != b.fBr || r.fBc != b.fBc || r.bBr != b.bBr || r.bBc != b.bBc)
            printf("  (M alone gives forward Br = %d, Bc = %d, backward Br = %d, Bc = %d; a block is cut\n"
                   "  to the %d query rows and %d key rows there are: longer, it would hold rows that do not exist)\n",
                   r.fBr, r.fBc, r.bBr, r.bBc, p->seqlen_q, p->seqlen_k);
    }
    if (!(opt.given & OPT_BR) && !strcmp(opt.rule, "io"))
        printf("  why these tiles (--rule io): the forward reads all of K and V once per query block,\n"
               "  so the fewest bytes come from the tallest query block that fits (Br = %d%s)\n"
               "  with one key row at a time (Bc = 1); the backward reads Q, dO, dQ, L and D once per\n"
               "  key block, so there the key block takes the room (Bc = %d%s, Br = 1)\n",
               b.fBr, b.fBr == p->seqlen_q ? ", all the query rows" : "",
               b.bBc, b.bBc == p->seqlen_k ? ", all the key rows" : "");
    printf("\n");

    /* The reference: stage 1, every score matrix materialized. */
    double *ref = xmalloc(2 * nq + 2 * nkv + rows, sizeof(double), "naive outputs");
    double *rO = ref, *rdQ = rO + nq, *rdK = rdQ + nq, *rdV = rdK + nkv, *rL = rdV + nkv;
    io_counter nf, nb;
    io_reset(&nf);
    io_reset(&nb);
    double t_naive_f, t_naive_b;
    naive_attention_all_heads(p, prob.Q, prob.K, prob.V, prob.dO, rO, rL, rdQ, rdK, rdV, &nf, &nb,
                              &t_naive_f, &t_naive_b);
    uint64_t naive_f = io_total(&nf), naive_b = io_total(&nb);
    naive_require_finite_scores(rL, p);

    /* The tiled algorithm, outputs poisoned first. */
    size_t nout = 2 * nq + 2 * nkv + rows;
    double *out = xmalloc(nout, sizeof(double), "tiled outputs");
    double *O = out, *dQ = O + nq, *dK = dQ + nq, *dV = dK + nkv, *L = dV + nkv;
    poison(out, nout);
    flash_run run = flash_run_counted(p, prob.Q, prob.K, prob.V, prob.dO, b, M, O, L, dQ, dK, dV);
    io_counter tf = run.io_f, tb = run.io_b;
    tile_stats sf = run.st_f, sb = run.st_b;
    double t_f = run.t_f, t_b = run.t_b;

    int failed = 0;
    flash_errors e = flash_errors_vs(&prob, O, L, dQ, dK, dV, rO, rL, rdQ, rdK, rdV);
    double btol = flash_backward_tol(rL, rows);
    if (p->B * p->H == 1)
        printf("checks (tiled against naive, fp64, the one head; errors relative to the magnitudes)\n");
    else
        printf("checks (tiled against naive, fp64, all %d heads; errors relative to the magnitudes)\n",
               p->B * p->H);
    failed += report("O: max|O - O_ref| / max|V|", e.O, FLASH_FWD_TOL);
    failed += report("L: max|L - L_ref| / max(1, max|L_ref|)", e.L, FLASH_FWD_TOL);
    failed += report("dQ: max|dQ - dQ_ref| / its scale", e.dQ, btol);
    failed += report("dK: max|dK - dK_ref| / its scale", e.dK, btol);
    failed += report("dV: max|dV - dV_ref| / its scale", e.dV, btol);
    printf("    (a gradient's scale: the larger of max|ref| and the size of its terms, c max|K| for dQ,\n"
           "    c max|Q| for dK with c = softmax_scale max|dO| max|V|, and max|dO| for dV)\n");
    failed += report("non-finite outputs (poisoned before the run)",
                     (double)(count_nonfinite(out, nout, false) - count_nonfinite(L, rows, false) +
                              count_nonfinite(L, rows, true)), 0);

    /* Gradient check of the tiled backward on a slice of head 0, in small
     * tiles (Br = 4, Bc = 3) so that it crosses many tile edges. */
    {
        attn_problem g = problem_slice(&prob, 13, 8);
        char what[96];
        snprintf(what, sizeof what, "tiled backward vs central differences (head 0, %d queries, %d keys, d = %d)",
                 g.params.seqlen_q, g.params.seqlen_k, g.params.d);
        failed += report(what, flash_gradcheck(&g, 4, 3), TOL_GRADCHECK);
        free_problem(&g);
    }
    printf("  %-48s %10zu   <= %ld   %s\n", "SRAM high-water mark (elements)", run.high_water,
           M, run.high_water <= (size_t)M ? "ok" : "FAIL");
    failed += run.high_water > (size_t)M;

    uint64_t ff = flash_forward_io_formula(p, b.fBr, b.fBc);
    uint64_t bf = flash_backward_io_formula(p, b.bBr, b.bBc);
    uint64_t nff = naive_forward_io_formula(p), nbf = naive_backward_io_formula(p);
    printf("\nslow-memory traffic, counted while running (elements; bytes at 8 B each)\n");
    printf("  %-16s %15s %15s %6s %13s %10s\n", "", "counted", "formula", "equal", "bytes",
           "time [s]");
#define ROW(name, c, f, t)                                                                      \
    printf("  %-16s %15llu %15llu %6s %13.4g %10.4f\n", name, (unsigned long long)(c),          \
           (unsigned long long)(f), (c) == (f) ? "yes" : "NO", 8.0 * (double)(c), t)
    ROW("naive forward", naive_f, nff, t_naive_f);
    ROW("tiled forward", io_total(&tf), ff, t_f);
    ROW("naive backward", naive_b, nbf, t_naive_b);
    ROW("tiled backward", io_total(&tb), bf, t_b);
#undef ROW
    failed += (naive_f != nff) + (naive_b != nbf) + (io_total(&tf) != ff) + (io_total(&tb) != bf);
    printf("  naive / tiled bytes: forward %.2fx, backward %.2fx\n",
           (double)naive_f / (double)io_total(&tf), (double)naive_b / (double)io_total(&tb));
    if (!(opt.given & OPT_BR) && strcmp(opt.rule, "io") && b.fBr == d && p->seqlen_q > b.fBr)
        printf("  note: the paper's rule stops Br at d = %d, so the forward re-reads K and V "
               "N/Br = %d times whatever M is;\n        --rule io gives each pass the tiles "
               "that minimize its count (the paper's section on choosing the block sizes)\n",
               d, ceil_div(p->seqlen_q, b.fBr));
    uint64_t tiles_f = flash_tiles_formula(p, b.fBr, b.fBc), tiles_b = flash_tiles_formula(p, b.bBr, b.bBc);
    printf("  tiles computed / skipped by the mask: forward %llu / %llu, backward %llu / %llu "
           "(formula %llu, %llu: %s)\n",
           (unsigned long long)sf.tiles_visited, (unsigned long long)sf.tiles_skipped,
           (unsigned long long)sb.tiles_visited, (unsigned long long)sb.tiles_skipped,
           (unsigned long long)tiles_f, (unsigned long long)tiles_b,
           sf.tiles_visited == tiles_f && sb.tiles_visited == tiles_b ? "equal" : "NOT EQUAL");
    failed += (sf.tiles_visited != tiles_f) + (sb.tiles_visited != tiles_b);
    printf("  extra slow memory: naive S, P, dP, dS = %.4g bytes per head; tiled L, D = %.4g bytes "
           "per head\n", 4.0 * 8 * p->seqlen_q * p->seqlen_k, 2.0 * 8 * p->seqlen_q);

    if (opt.out) save_q_like(opt.out, O, p);
    if (opt.lse) save_rows(opt.lse, L, p);
    if (opt.dq) save_q_like(opt.dq, dQ, p);
    if (opt.dk) save_kv_like(opt.dk, dK, p);
    if (opt.dv) save_kv_like(opt.dv, dV, p);

    printf("\nstage3: %s\n", failed ? "FAILED" : "all checks passed");
    free(ref);
    free(out);
    free_problem(&prob);
    return outputs_finish(failed ? EXIT_CHECK_FAILED : 0);
}
#endif /* STAGE_NO_MAIN */

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
 *   ./stage3 --sweep blocks --csv data/cpu/block_sweep.csv
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
void flash_forward(const double *Q, const double *K, const double *V, int N, int d,
                   double softmax_scale, bool causal, int Br, int Bc,
                   double *O, double *L, sram_arena *sram, io_counter *io, tile_stats *stats)
{
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
    int Tr = ceil_div(N, Br), Tc = ceil_div(N, Bc);

    for (int i = 0; i < Tr; i++) {                 /* outer loop: query blocks */
        int i0 = i * Br, br = imin(Br, N - i0);
        hbm_load(Qi, Q + (size_t)i0 * d, br, d, d, io, T_Q);
        for (int r = 0; r < br; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0;
            for (int c = 0; c < d; c++) Oi[(size_t)r * d + c] = 0.0;
        }
        for (int j = 0; j < Tc; j++) {             /* inner loop: key/value blocks */
            int j0 = j * Bc, bc = imin(Bc, N - j0);
            /* Causal: a key block that starts after this query block's last
             * row is entirely in the future, and so is every later one. */
            if (causal && j0 > i0 + br - 1) {
                if (stats) stats->tiles_skipped += (uint64_t)(Tc - j);
                break;
            }
            hbm_load(Kj, K + (size_t)j0 * d, bc, d, d, io, T_K);
            hbm_load(Vj, V + (size_t)j0 * d, bc, d, d, io, T_V);

            /* The score tile, born and consumed in SRAM. */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                    Sij[(size_t)r * bc + c] =
                        (causal && j0 + c > i0 + r) ? -INFINITY : s * softmax_scale;
                }
            /* Stage 2's update, row by row: rescale by alpha, add this tile. */
            for (int r = 0; r < br; r++)
                online_softmax_update(&m[r], &l[r], Oi + (size_t)r * d, Sij + (size_t)r * bc,
                                      Vj, bc, d, d, NULL);
            if (stats) stats->tiles_visited++;
        }
        /* Normalize once; L = m + log l replaces the row's N probabilities. */
        for (int r = 0; r < br; r++)
            online_softmax_finalize(m[r], l[r], Oi + (size_t)r * d, d, &m[r]);
        hbm_store(O + (size_t)i0 * d, Oi, br, d, d, io, T_O);
        hbm_store(L + i0, m, br, 1, 1, io, T_L);
    }
}
//< tiled-forward

//> tiled-backward
void flash_backward(const double *Q, const double *K, const double *V, const double *O,
                    const double *L, const double *dO, int N, int d, double softmax_scale,
                    bool causal, int Br, int Bc, double *dQ, double *dK, double *dV,
                    double *D, sram_arena *sram, io_counter *io, tile_stats *stats)
{
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
    int Tr = ceil_div(N, Br), Tc = ceil_div(N, Bc);

    /* D_i = dO_i . O_i, once per row (it equals sum_j P_ij dP_ij). The O
     * block passes through Q_i's tile, which is free until the main loop. */
    for (int i = 0; i < Tr; i++) {
        int i0 = i * Br, br = imin(Br, N - i0);
        hbm_load(dOi, dO + (size_t)i0 * d, br, d, d, io, T_dO);
        hbm_load(Qi, O + (size_t)i0 * d, br, d, d, io, T_O);
        for (int r = 0; r < br; r++) {
            double s = 0.0;
            for (int k = 0; k < d; k++) s += dOi[(size_t)r * d + k] * Qi[(size_t)r * d + k];
            Di[r] = s;
        }
        hbm_store(D + i0, Di, br, 1, 1, io, T_D);
    }

    for (int j = 0; j < Tc; j++) {                 /* outer loop: key/value blocks */
        int j0 = j * Bc, bc = imin(Bc, N - j0);
        hbm_load(Kj, K + (size_t)j0 * d, bc, d, d, io, T_K);
        hbm_load(Vj, V + (size_t)j0 * d, bc, d, d, io, T_V);
        for (size_t x = 0; x < (size_t)bc * d; x++) dKj[x] = dVj[x] = 0.0;

        /* Causal: query blocks that end before key j0 cannot see this block. */
        int i_start = causal ? j0 / Br : 0;
        if (stats) stats->tiles_skipped += (uint64_t)i_start;
        for (int i = i_start; i < Tr; i++) {       /* inner loop: query blocks */
            int i0 = i * Br, br = imin(Br, N - i0);
            hbm_load(Qi, Q + (size_t)i0 * d, br, d, d, io, T_Q);
            hbm_load(dOi, dO + (size_t)i0 * d, br, d, d, io, T_dO);
            hbm_load(Li, L + i0, br, 1, 1, io, T_L);
            hbm_load(Di, D + i0, br, 1, 1, io, T_D);

            /* Rebuild P from S and L: exp(S - L) is already normalized. */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                    bool masked = (causal && j0 + c > i0 + r) || Li[r] == -INFINITY;
                    Pij[(size_t)r * bc + c] = masked ? 0.0 : exp(s * softmax_scale - Li[r]);
                }
            /* dV_j += P^T dO_i */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double p = Pij[(size_t)r * bc + c];
                    for (int k = 0; k < d; k++) dVj[(size_t)c * d + k] += p * dOi[(size_t)r * d + k];
                }
            /* dP = dO_i V_j^T, then dS = P * (dP - D) in the same tile */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double s = 0.0;
                    for (int k = 0; k < d; k++) s += dOi[(size_t)r * d + k] * Vj[(size_t)c * d + k];
                    dSij[(size_t)r * bc + c] = Pij[(size_t)r * bc + c] * (s - Di[r]);
                }
            /* dK_j += scale * dS^T Q_i */
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double g = dSij[(size_t)r * bc + c] * softmax_scale;
                    for (int k = 0; k < d; k++) dKj[(size_t)c * d + k] += g * Qi[(size_t)r * d + k];
                }
            /* dQ_i += scale * dS K_j, accumulated in slow memory across key
             * blocks; the first key block starts it instead of reading it. */
            if (j == 0)
                for (size_t x = 0; x < (size_t)br * d; x++) dQi[x] = 0.0;
            else
                hbm_load(dQi, dQ + (size_t)i0 * d, br, d, d, io, T_dQ);
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) {
                    double g = dSij[(size_t)r * bc + c] * softmax_scale;
                    for (int k = 0; k < d; k++) dQi[(size_t)r * d + k] += g * Kj[(size_t)c * d + k];
                }
            hbm_store(dQ + (size_t)i0 * d, dQi, br, d, d, io, T_dQ);
            if (stats) stats->tiles_visited++;
        }
        /* dK_j and dV_j are complete: every query block has been seen. */
        hbm_store(dK + (size_t)j0 * d, dKj, bc, d, d, io, T_dK);
        hbm_store(dV + (size_t)j0 * d, dVj, bc, d, d, io, T_dV);
    }
}
//< tiled-backward

//> tiled-io-formula
uint64_t flash_forward_io_formula(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal)
{
    int64_t Tr = (N + Br - 1) / Br;
    if (!causal) return (uint64_t)(2 * N * d * (Tr + 1) + N);
    int64_t kv_rows = 0;   /* keys read, summed over query blocks */
    for (int64_t i = 0; i < Tr; i++) {
        int64_t e = (i + 1) * Br < N ? (i + 1) * Br : N;   /* end of query block i */
        int64_t keys = Bc * ((e - 1) / Bc + 1);
        kv_rows += keys < N ? keys : N;
    }
    return (uint64_t)(2 * N * d + N + 2 * d * kv_rows);
}

uint64_t flash_backward_io_formula(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal)
{
    int64_t Tc = (N + Bc - 1) / Bc;
    if (!causal) return (uint64_t)(5 * N * d + N + Tc * (4 * N * d + 2 * N));
    int64_t total = 6 * N * d + N;
    for (int64_t j = 0; j < Tc; j++) {
        int64_t R = N - Br * ((j * Bc) / Br);   /* query rows key block j reaches */
        total += R * (3 * d + 2) + (j > 0 ? R * d : 0);
    }
    return (uint64_t)total;
}
//< tiled-io-formula

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */
#ifndef STAGE_NO_MAIN

#define DEFAULT_M 16384L   /* elements: 128 KiB of fp64, an SM's shared memory */

static const char USAGE[] =
    "stage3: tiled FlashAttention on the CPU, forward and backward, against naive attention\n"
    "usage: ./stage3 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2 Q, K, V, dO; every head), M = 16384\n"
    "elements of SRAM, Br and Bc derived from M. Exit 0 only if every check passes.\n"
    "--sweep io|blocks|formulas writes --csv (see make sweep); --repeats R times each point R\n"
    "times and writes the median.";

/* Block sizes for forward and backward from the options; exits 2 on a bad
 * combination. Explicit --br/--bc serve both passes. */
typedef struct { int fBr, fBc, bBr, bBc; long M; } blocks_t;

static blocks_t choose_blocks(const options *opt, int d, int N)
{
    blocks_t b;
    if (!!(opt->given & OPT_BR) != !!(opt->given & OPT_BC))
        fatal(EXIT_BAD_INPUT, "--br and --bc go together (or give neither and derive them from --sram)");
    if ((opt->given & OPT_BR) && (opt->given & OPT_RULE))
        fatal(EXIT_BAD_INPUT, "--rule derives Br and Bc from --sram; it does not go with --br/--bc");
    if (opt->given & OPT_BR) {
        /* A block longer than the sequence only wastes SRAM: cut it to N. */
        int Br = imin(opt->Br, N), Bc = imin(opt->Bc, N);
        if (Br != opt->Br || Bc != opt->Bc)
            printf("  (--br %d --bc %d exceed N = %d: using Br = %d, Bc = %d)\n", opt->Br,
                   opt->Bc, N, Br, Bc);
        b.fBr = b.bBr = Br;
        b.fBc = b.bBc = Bc;
        size_t need = flash_backward_sram_elements(Br, Bc, d);
        size_t needf = flash_forward_sram_elements(Br, Bc, d);
        if (needf > need) need = needf;
        if ((opt->given & OPT_SRAM) && need > (size_t)opt->M)
            fatal(EXIT_BAD_INPUT, "--sram %ld: tiles Br = %d, Bc = %d at d = %d need %zu elements",
                  opt->M, Br, Bc, d, need);
        b.M = (opt->given & OPT_SRAM) ? opt->M : (long)need;
        return b;
    }
    b.M = (opt->given & OPT_SRAM) ? opt->M : DEFAULT_M;
    int (*rule)(long, int, bool, int *, int *) =
        strcmp(opt->rule, "io") ? derive_blocks : derive_blocks_io;
    if (rule(b.M, d, false, &b.fBr, &b.fBc) != 0 || rule(b.M, d, true, &b.bBr, &b.bBc) != 0) {
        if (!(opt->given & OPT_SRAM))   /* name the default, not a flag the user never gave */
            fatal(EXIT_BAD_INPUT, "the default M = %ld elements is too small for one tile at "
                  "d = %d (the backward needs at least %zu); give --sram M", b.M, d,
                  flash_backward_sram_elements(1, 1, d));
        fatal(EXIT_BAD_INPUT, "--sram %ld: M is too small for one tile at d = %d (the backward "
              "needs at least %zu elements)", b.M, d, flash_backward_sram_elements(1, 1, d));
    }
    return b;
}

static int report(const char *what, double err, double tol)
{
    bool ok = err <= tol;
    printf("  %-48s %10.3e   <= %.0e   %s\n", what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

/* Tiled forward and backward over every head; returns wall times. */
static void tiled_all_heads(const attn_problem *p, double scale, bool causal, blocks_t b,
                            double *O, double *L, double *dQ, double *dK, double *dV,
                            sram_arena *sram, io_counter *io_f, io_counter *io_b,
                            tile_stats *st_f, tile_stats *st_b, double *t_f, double *t_b)
{
    attn_shape s = p->shape;
    size_t nd = (size_t)s.N * s.d;
    double *D = xmalloc((size_t)s.N, sizeof(double), "D");
    *t_f = *t_b = 0;
    for (int bh = 0; bh < s.B * s.H; bh++) {
        size_t off = (size_t)bh * nd, loff = (size_t)bh * s.N;
        double t0 = now_seconds();
        flash_forward(p->Q + off, p->K + off, p->V + off, s.N, s.d, scale, causal, b.fBr, b.fBc,
                      O + off, L + loff, sram, io_f, st_f);
        double t1 = now_seconds();
        if (dQ) {
            poison(D, (size_t)s.N);
            flash_backward(p->Q + off, p->K + off, p->V + off, O + off, L + loff, p->dO + off,
                           s.N, s.d, scale, causal, b.bBr, b.bBc, dQ + off, dK + off, dV + off,
                           D, sram, io_b, st_b);
        }
        *t_f += t1 - t0;
        *t_b += now_seconds() - t1;
    }
    free(D);
}

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
static int sweep_point(FILE *csv, const options *opt, int N, int d, blocks_t b, bool with_naive,
                       const char *label, bool paired)
{
    options o = *opt;
    o.N = N;
    o.d = d;
    o.batch = o.heads = 1;
    o.given |= OPT_N | OPT_D;
    int R = opt->repeats > 0 ? opt->repeats : 1;
    bool variants[2] = {false, true};     /* the causal flag of each variant */
    int nv = paired ? 2 : 1;
    if (!paired) variants[0] = o.causal;
    attn_problem p;
    load_problem(&o, &p);
    size_t n = shape_numel(p.shape);
    double *buf = xmalloc(5 * n + (size_t)N, sizeof(double), "sweep buffers");
    double *O = buf, *dQ = buf + n, *dK = buf + 2 * n, *dV = buf + 3 * n, *L = buf + 4 * n;
    double *t = xmalloc(8 * (size_t)R, sizeof(double), "sweep times");  /* [variant][4][R] */
    double scale = 1.0 / sqrt((double)d);
    int bad = 0;
    if (with_naive) {
        uint64_t ff = naive_forward_io_formula(N, d), bf = naive_backward_io_formula(N, d);
        uint64_t fwd = 0, bwd = 0;
        for (int r = 0; r < R; r++)
            for (int v = 0; v < nv; v++) {
                io_counter nf, nb;
                io_reset(&nf);
                io_reset(&nb);
                naive_attention_all_heads(p.Q, p.K, p.V, p.dO, p.shape, scale, variants[v], O, L,
                                          dQ, dK, dV, &nf, &nb, &t[(v * 4 + 0) * R + r],
                                          &t[(v * 4 + 1) * R + r]);
                fwd = io_total(&nf);
                bwd = io_total(&nb);
                bad += (fwd != ff) + (bwd != bf);
            }
        for (int v = 0; v < nv; v++) {
            fprintf(csv, "naive,forward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", variants[v], N, d,
                    (unsigned long long)fwd, (unsigned long long)ff, 8ull * fwd,
                    median(&t[(v * 4 + 0) * R], R), R);
            fprintf(csv, "naive,backward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", variants[v], N, d,
                    (unsigned long long)bwd, (unsigned long long)bf, 8ull * bwd,
                    median(&t[(v * 4 + 1) * R], R), R);
        }
    }
    sram_arena sram;
    sram_init(&sram, (size_t)b.M);
    io_counter tf[2], tb[2];
    tile_stats sf[2], sb[2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) {
            io_reset(&tf[v]);
            io_reset(&tb[v]);
            sf[v] = sb[v] = (tile_stats){0, 0};
            tiled_all_heads(&p, scale, variants[v], b, O, L, dQ, dK, dV, &sram, &tf[v], &tb[v],
                            &sf[v], &sb[v], &t[(v * 4 + 2) * R + r], &t[(v * 4 + 3) * R + r]);
            bad += io_total(&tf[v]) != flash_forward_io_formula(N, d, b.fBr, b.fBc, variants[v]);
            bad += io_total(&tb[v]) != flash_backward_io_formula(N, d, b.bBr, b.bBc, variants[v]);
        }
    for (int v = 0; v < nv; v++) {
        uint64_t ff = flash_forward_io_formula(N, d, b.fBr, b.fBc, variants[v]);
        uint64_t bf = flash_backward_io_formula(N, d, b.bBr, b.bBc, variants[v]);
        fprintf(csv, "%s,forward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                variants[v], N, d, b.M, b.fBr, b.fBc, (unsigned long long)io_total(&tf[v]),
                (unsigned long long)ff, 8ull * io_total(&tf[v]), sram.high_water,
                median(&t[(v * 4 + 2) * R], R), R, (unsigned long long)sf[v].tiles_visited);
        fprintf(csv, "%s,backward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                variants[v], N, d, b.M, b.bBr, b.bBc, (unsigned long long)io_total(&tb[v]),
                (unsigned long long)bf, 8ull * io_total(&tb[v]), sram.high_water,
                median(&t[(v * 4 + 3) * R], R), R, (unsigned long long)sb[v].tiles_visited);
    }
    fflush(csv);
    bad += sram.high_water > (size_t)b.M;
    sram_free(&sram);
    free(t);
    free(buf);
    free_problem(&p);
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
 *                Br = Bc = B computes: "all" (no skipping), "code" (skip a
 *                key block when j0 >= i1, i1 the exclusive end of the query
 *                block: stage 3's test), "chapter" (skip when j0 > i1, the
 *                textbook's test), beside the code's count the sweeps
 *                measure in their tiles_visited column. */
static void formula_rows(FILE *csv, int N, int d)
{
    static const long Ms[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
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
                uint64_t io = bwd ? flash_backward_io_formula(N, d, br[r], bc[r], false)
                                  : flash_forward_io_formula(N, d, br[r], bc[r], false);
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
        int T = ceil_div(N, B);
        uint64_t code = 0, chapter = 0;
        for (int i = 0; i < T; i++) {
            int i1 = imin((i + 1) * B, N);               /* exclusive end of query block i */
            for (int j = 0; j < T; j++) {
                code += !(j * B >= i1);
                chapter += !(j * B > i1);
            }
        }
        fprintf(csv, "causal_tiles,all,forward,%d,%d,,%d,%d,%llu\n", N, d, B, B,
                (unsigned long long)T * T);
        fprintf(csv, "causal_tiles,code,forward,%d,%d,,%d,%d,%llu\n", N, d, B, B,
                (unsigned long long)code);
        fprintf(csv, "causal_tiles,chapter,forward,%d,%d,,%d,%d,%llu\n", N, d, B, B,
                (unsigned long long)chapter);
    }
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
    if (!strcmp(opt->sweep, "formulas")) {
        FILE *f = csv_open(opt->csv, argc, argv, "quantity,rule,pass,N,d,M,Br,Bc,value");
        formula_rows(f, (opt->given & OPT_N) ? opt->N : 2048, d);
        fclose(f);
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
            o.given = (o.given & ~(unsigned)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = DEFAULT_M;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", Ns[a], o.M);
            bad += sweep_point(csv, &o, Ns[a], d, choose_blocks(&o, d, Ns[a]), true, "tiled", false);
        }
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
            options o = *opt;
            o.given = (o.given & ~(unsigned)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = Ms[a];
            if (derive_blocks(o.M, d, true, &(int){0}, &(int){0}) != 0) continue;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", N_fixed, o.M);
            bad += sweep_point(csv, &o, N_fixed, d, choose_blocks(&o, d, N_fixed), a == 0, "tiled", false);
            /* the same M with the blocks that minimize the model's count */
            blocks_t io = {0, 0, 0, 0, o.M};
            derive_blocks_io(o.M, d, false, &io.fBr, &io.fBc);
            derive_blocks_io(o.M, d, true, &io.bBr, &io.bBc);
            bad += sweep_point(csv, &o, N_fixed, d, io, false, "tiled-io", false);
        }
    } else if (!strcmp(opt->sweep, "blocks")) {
        int N = (opt->given & OPT_N) ? opt->N : 2048;
        for (int B = 4; B <= 512 && B <= N; B *= 2) {
            options o = *opt;
            o.given = (o.given & ~(unsigned)OPT_SRAM) | OPT_BR | OPT_BC;
            o.Br = o.Bc = B;
            fprintf(stderr, "sweep blocks: N = %d, Br = Bc = %d\n", N, B);
            bad += sweep_point(csv, &o, N, d, choose_blocks(&o, d, N), B == 4, "tiled", o.causal);
        }
    }
    fclose(csv);
    printf("stage3 --sweep %s: wrote %s; counted == formula and high-water <= M: %s\n",
           opt->sweep, opt->csv, bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_CAUSAL |
                      OPT_SCALE | OPT_INPUTS | OPT_OUTPUTS | OPT_BR | OPT_BC | OPT_SRAM |
                      OPT_SWEEP | OPT_CSV | OPT_RULE | OPT_REPEATS,
                  USAGE, &opt);
    if (opt.sweep) return run_sweep(&opt, argc, argv);
    if (opt.given & OPT_REPEATS) fatal(EXIT_BAD_INPUT, "--repeats times the points of a --sweep");
    if (opt.csv) fatal(EXIT_BAD_INPUT, "--csv is written by --sweep");

    char origin[64];
    snprintf(origin, sizeof origin, "--n %d", opt.N);
    if (opt.given & OPT_N) naive_require_size(opt.N, origin);   /* the reference is naive */
    attn_problem p;
    load_problem(&opt, &p);
    attn_shape s = p.shape;
    snprintf(origin, sizeof origin, "the input's N = %d", s.N);
    naive_require_size(s.N, origin);
    blocks_t b = choose_blocks(&opt, s.d, s.N);
    double scale = effective_scale(&opt, s.d);
    size_t n = shape_numel(s), rows = shape_rows(s);
    uint64_t BH = (uint64_t)s.B * s.H;

    printf("stage3: tiled FlashAttention (CPU, fp64), %s\n", p.source);
    printf("  shape (B, H, N, d) = (%d, %d, %d, %d), softmax_scale = %.6g, causal = %s\n", s.B,
           s.H, s.N, s.d, scale, opt.causal ? "yes" : "no");
    printf("  SRAM M = %ld elements, rule %s; forward Br = %d, Bc = %d (%zu elements); "
           "backward Br = %d, Bc = %d (%zu elements)\n", b.M,
           (opt.given & OPT_BR) ? "--br/--bc" : opt.rule, b.fBr, b.fBc,
           flash_forward_sram_elements(b.fBr, b.fBc, s.d), b.bBr, b.bBc,
           flash_backward_sram_elements(b.bBr, b.bBc, s.d));
    if (!(opt.given & OPT_BR) && !strcmp(opt.rule, "io"))
        printf("  why these tiles (--rule io): the forward reads all of K and V once per query block,\n"
               "  so the fewest bytes come from the tallest query block that fits (Br = %d) with one key\n"
               "  row at a time (Bc = 1); the backward reads Q, dO, dQ, L and D once per key block, so\n"
               "  there the key block takes the room (Bc = %d, Br = 1)\n", b.fBr, b.bBc);
    printf("\n");

    /* The reference: stage 1, every N x N matrix materialized. */
    double *ref = xmalloc(4 * n + rows, sizeof(double), "naive outputs");
    double *rO = ref, *rdQ = ref + n, *rdK = ref + 2 * n, *rdV = ref + 3 * n, *rL = ref + 4 * n;
    io_counter nf, nb;
    io_reset(&nf);
    io_reset(&nb);
    double t_naive_f, t_naive_b;
    naive_attention_all_heads(p.Q, p.K, p.V, p.dO, s, scale, opt.causal, rO, rL, rdQ, rdK, rdV,
                              &nf, &nb, &t_naive_f, &t_naive_b);
    uint64_t naive_f = io_total(&nf), naive_b = io_total(&nb);
    naive_require_finite_scores(rL, rows, s.N);

    /* The tiled algorithm, outputs poisoned first. */
    double *out = xmalloc(4 * n + rows, sizeof(double), "tiled outputs");
    double *O = out, *dQ = out + n, *dK = out + 2 * n, *dV = out + 3 * n, *L = out + 4 * n;
    poison(out, 4 * n + rows);
    sram_arena sram;
    sram_init(&sram, (size_t)b.M);
    io_counter tf, tb;
    io_reset(&tf);
    io_reset(&tb);
    tile_stats sf = {0}, sb = {0};
    double t_f, t_b;
    tiled_all_heads(&p, scale, opt.causal, b, O, L, dQ, dK, dV, &sram, &tf, &tb, &sf, &sb, &t_f,
                    &t_b);

    int failed = 0;
    printf("checks (tiled against naive, fp64, max abs error over all heads: %d)\n", s.B * s.H);
    failed += report("O", compare("O", O, rO, n, TOL_TILED_FORWARD, 0, 3).max_abs, TOL_TILED_FORWARD);
    failed += report("L", compare("L", L, rL, rows, TOL_TILED_FORWARD, 0, 3).max_abs, TOL_TILED_FORWARD);
    failed += report("dQ", compare("dQ", dQ, rdQ, n, TOL_TILED_BACKWARD, 0, 3).max_abs, TOL_TILED_BACKWARD);
    failed += report("dK", compare("dK", dK, rdK, n, TOL_TILED_BACKWARD, 0, 3).max_abs, TOL_TILED_BACKWARD);
    failed += report("dV", compare("dV", dV, rdV, n, TOL_TILED_BACKWARD, 0, 3).max_abs, TOL_TILED_BACKWARD);
    failed += report("non-finite outputs (poisoned before the run)",
                     (double)count_nonfinite(out, 4 * n + rows, false), 0);

    /* Gradient check of the tiled backward on a slice of head 0, in small
     * tiles (Br = 4, Bc = 3) so that it crosses many tile edges. */
    {
        attn_problem g = problem_slice(&p, 13, 8);
        int ng = g.shape.N, dg = g.shape.d;
        size_t m = (size_t)ng * dg;
        double *buf = xmalloc(4 * m + 2 * (size_t)ng, sizeof(double), "gradcheck buffers");
        double *o = buf, *gq = buf + m, *gk = buf + 2 * m, *gv = buf + 3 * m, *l = buf + 4 * m;
        sram_arena small;
        sram_init(&small, flash_backward_sram_elements(4, 3, dg));
        flash_forward(g.Q, g.K, g.V, ng, dg, scale, opt.causal, 4, 3, o, l, &small, NULL, NULL);
        flash_backward(g.Q, g.K, g.V, o, l, g.dO, ng, dg, scale, opt.causal, 4, 3, gq, gk, gv,
                       l + ng, &small, NULL, NULL);
        char what[96];
        snprintf(what, sizeof what, "tiled backward vs central differences (%d x %d, head 0)", ng, dg);
        failed += report(what, gradcheck_central(g.Q, g.K, g.V, g.dO, ng, dg, scale, opt.causal,
                                                 gq, gk, gv, 1e-5), TOL_GRADCHECK);
        sram_free(&small);
        free(buf);
        free_problem(&g);
    }
    printf("  %-48s %10zu   <= %ld   %s\n", "SRAM high-water mark (elements)", sram.high_water,
           b.M, sram.high_water <= (size_t)b.M ? "ok" : "FAIL");
    failed += sram.high_water > (size_t)b.M;

    uint64_t ff = BH * flash_forward_io_formula(s.N, s.d, b.fBr, b.fBc, opt.causal);
    uint64_t bf = BH * flash_backward_io_formula(s.N, s.d, b.bBr, b.bBc, opt.causal);
    uint64_t nff = BH * naive_forward_io_formula(s.N, s.d), nbf = BH * naive_backward_io_formula(s.N, s.d);
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
    if (!(opt.given & OPT_BR) && strcmp(opt.rule, "io") && b.fBr == s.d && s.N > b.fBr)
        printf("  note: the paper's rule stops Br at d = %d, so the forward re-reads K and V "
               "N/Br = %d times whatever M is;\n        --rule io gives each pass the tiles "
               "that minimize its count (see derive_blocks_io and the paper, section 4.2)\n",
               s.d, ceil_div(s.N, b.fBr));
    printf("  tiles computed / skipped by the causal mask: forward %llu / %llu, backward %llu / %llu\n",
           (unsigned long long)sf.tiles_visited, (unsigned long long)sf.tiles_skipped,
           (unsigned long long)sb.tiles_visited, (unsigned long long)sb.tiles_skipped);
    printf("  extra slow memory: naive S, P, dP, dS = %.4g bytes per head; tiled L, D = %.4g bytes "
           "per head\n", 4.0 * 8 * s.N * s.N, 2.0 * 8 * s.N);

    if (opt.out) save_tensor(opt.out, O, s, false);
    if (opt.lse) save_tensor(opt.lse, L, s, true);
    if (opt.dq) save_tensor(opt.dq, dQ, s, false);
    if (opt.dk) save_tensor(opt.dk, dK, s, false);
    if (opt.dv) save_tensor(opt.dv, dV, s, false);

    printf("\nstage3: %s\n", failed ? "FAILED" : "all checks passed");
    sram_free(&sram);
    free(ref);
    free(out);
    free_problem(&p);
    return failed ? EXIT_CHECK_FAILED : 0;
}
#endif /* STAGE_NO_MAIN */

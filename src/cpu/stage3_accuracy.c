/*
 * stage3_accuracy.c -- why a tiled backward loses dQ when every logit sits
 * far from zero, measured on the CPU: stage 3's fp64 backward with the
 * quantities a GPU kernel keeps in 16 bits rounded to bf16 or fp16 at the
 * places the kernel rounds them, against an error model, and the fix.
 *
 * Inputs (one head, Sq = Sk = N): q_i = (1, 0.1 z), k_j = (-a sqrt(d), 0.1 z),
 * V and dO ~ N(0, 1), every value rounded to the dtype first (so the fp64
 * reference on the rounded inputs is exact). The scaled logits are
 * -a + O(0.01): P is nearly uniform whatever a, dQ does not depend on a, but
 * max|K| = a sqrt(d) does.
 *
 * The tiled backward forms D_i = dO_i . O_i from O as stored (in the dtype)
 * and dS_ij = P_ij (dP_ij - D_i), rounds dS to the dtype for the products
 * dQ = softmax_scale dS K and dK = softmax_scale dS^T Q, and P for
 * dV = P^T dO. In exact arithmetic every row of dS sums to zero over the keys
 * the row sees (sum_j P_ij dP_ij = D_i, sum_j P_ij = 1), so
 * dQ_i = softmax_scale sum_j dS_ij (K_j - c) for any vector c: the common
 * part of K cancels. An error e_ij in dS does not cancel; it reaches dQ as
 * softmax_scale sum_j e_ij K_j, multiplied by |K| instead of by K's spread
 * over the keys. Two sources of e, both modelled per entry (u = 2^-p, the
 * unit roundoff of a p-bit significand: 2^-8 bf16, 2^-11 fp16):
 *   D's error   dD_i = dO_i . (fl(O_i) - O_i), |dD_i| <= u sum_k |dO_ik||O_ik|;
 *               dS changes by exactly -P_ij dD_i (dS is linear in D), so
 *               A_ik = -softmax_scale dD_i sum_j P_ij K_jk     (exact)
 *   dS rounding |e_ij| <= u |dS_ij|, so
 *               |B_ik| <= softmax_scale u sum_j |dS_ij| |K_jk|   (a bound)
 *   dQ's own rounding to the dtype, at most u |dQ_ik|.
 * Upper end of the model: max over entries of |A| + bound B + u |dQ|, over
 * max|dQ_ref| (a bound: the measured error cannot exceed it). Lower end: half
 * the largest per-column rms of sqrt(A^2 + sigma_B^2 + sigma_out^2), with
 * each rounding error uniform over its half-spacing (variance ulp^2 / 12):
 * the largest of N such errors is below half their rms with negligible
 * probability. Aggregate forms, for reading off by hand: D's term <=
 * softmax_scale u max|K| max_i sum_k |dO_ik||O_ik| and dS's term <=
 * softmax_scale u max|K| max_i sum_j |dS_ij|, each over max|dQ_ref|.
 *
 * The fix, centering: S = softmax_scale Q (K - 1 c^T)^T + softmax_scale Q c,
 * and the second term is a constant per row, so the backward runs unchanged
 * on K_c = K - 1 c^T and L'_i = L_i - softmax_scale Q_i . c; dK and dV are
 * unchanged, dQ's errors are now multiplied by |K_c|. c_k is the mean of
 * K's column k over the keys, rounded to the dtype and clamped into
 * [max_j |K_jk| / 2, 2 min_j |K_jk|] with the column's sign, 0 where that
 * range is empty (a column that changes sign, holds a zero or spreads over
 * more than a factor of 4): by Sterbenz's lemma (y/2 <= x <= 2 y makes
 * x - y exact) every K_jk - c_k is then exact in the dtype, so K_c in the
 * dtype is exactly K shifted. The GPU's pre-pass (kernels/stage5_bwd_center.cu,
 * bwd-center) applies the same rule from each column's sum, minimum and
 * maximum; the test checks the exactness entry by entry.
 *
 * Variants (column `variant`):
 *   math        nothing rounded but the dQ written (what a materialized
 *               backward in fp32, as PyTorch's math backend, is held to)
 *   flash       O before D, dS, P and dQ rounded: every tiled kernel
 *   D_only      O rounded, dS not: D's term alone
 *   exact_D     dS rounded, D from the unrounded O: the fix "form D from a
 *               less-rounded O", alone
 *   centered    as flash, on K_c and L': the fix
 *   centered_exact_dS  centered with dS unrounded: what splitting dS into
 *               two 16-bit parts (hi + lo) for the products would attain
 *   centered_exact_D   centered with D from the unrounded O (a forward that
 *               wrote O's rounding residual would not reach it: its fp32 O
 *               comes from P rounded to 16 bits)
 *   dq_pass     centered, D unrounded and dS as hi + lo (two numbers of the
 *               dtype, hi = dS rounded, lo = what is left, rounded): the
 *               dQ pass of kernels/stage5_bwd_dq.cu (FA_BWD_DQ_PASS), whose D
 *               = rowsum(P dP) from fp32 P and dP is exact to fp32
 *
 * Usage:
 *   build/stage3_accuracy --csv data/cpu/dq_accuracy.csv   the sweep (make sweep)
 *   build/stage3_accuracy --draws data/cpu/dq_draws.csv    many draws of one shape (make sweep)
 *   build/stage3_accuracy --test [--seed S]                PASS/FAIL lines (make test)
 * --draws: DRAWS draws each at N = 192, d = 64, bf16, a = 120, causal and
 * not (the one shape where the H200's centered backward misses twice
 * math's), every variant's error and the query row of its largest error.
 * Errors are max|dQ - dQ_ref| / max|dQ_ref| (the measure), dK and
 * dV the same. Cost: about 12 N^2 d fp64 FLOPs per variant.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage3_accuracy.h"
#include "stage3_tiled.h"
#include "test_report.h"

enum { DT_BF16, DT_FP16 };
static const char *const DT_NAME[2] = {"bf16", "fp16"};
static const int DT_BITS[2] = {8, 11};        /* significand bits p, the hidden one included */
static const int DT_EMIN[2] = {-126, -14};    /* exponent of the least normal number */

static double unit_roundoff(int dt) { return ldexp(1.0, -DT_BITS[dt]); }

/* The spacing of the dtype's numbers at x (subnormal spacing below the
 * least normal number). */
static double spacing(double x, int dt)
{
    int e;
    if (x == 0 || !isfinite(x)) return ldexp(1.0, DT_EMIN[dt] - DT_BITS[dt] + 1);
    frexp(x, &e);   /* |x| in [2^(e-1), 2^e) */
    if (e - 1 < DT_EMIN[dt]) e = DT_EMIN[dt] + 1;
    return ldexp(1.0, e - DT_BITS[dt]);
}

/* x rounded to the nearest value of the dtype, ties to even (nearbyint in
 * the default rounding mode); fp16 overflows to infinity beyond 65504. */
static double round_dt(double x, int dt)
{
    if (x == 0 || !isfinite(x)) return x;
    double h = spacing(x, dt), r = nearbyint(x / h) * h;
    if (dt == DT_FP16 && fabs(r) > 65504.0) r = copysign(INFINITY, r);
    return r;
}
static double round_bf16(double x) { return round_dt(x, DT_BF16); }
static double round_fp16(double x) { return round_dt(x, DT_FP16); }
static double (*const ROUND_FN[2])(double) = {round_bf16, round_fp16};
/* x as two numbers of the dtype, hi = x rounded and lo = (x - hi) rounded,
 * summed: what the dQ pass (kernels/stage5_bwd_dq.cu) multiplies K by. */
static double split_dt(double x, int dt)
{
    double hi = round_dt(x, dt);
    return hi + round_dt(x - hi, dt);
}
static double split_bf16(double x) { return split_dt(x, DT_BF16); }
static double split_fp16(double x) { return split_dt(x, DT_FP16); }
static double (*const SPLIT_FN[2])(double) = {split_bf16, split_fp16};

/* split_dS: dS as hi + lo (split_dt) instead of rounded once */
typedef struct { const char *name; bool round_O, round_dS, round_P, center, split_dS; } variant;
static const variant VARIANTS[] = {
    {"math", false, false, false, false, false},
    {"flash", true, true, true, false, false},
    {"D_only", true, false, false, false, false},
    {"exact_D", false, true, true, false, false},
    {"centered", true, true, true, true, false},
    {"centered_exact_dS", true, false, true, true, false},
    {"centered_exact_D", false, true, true, true, false},
    {"dq_pass", false, false, true, true, true},
};
enum { V_MATH, V_FLASH, V_D_ONLY, V_EXACT_D, V_CENTERED, V_CEN_EXACT_DS, V_CEN_EXACT_D, V_DQ_PASS, NVAR };

typedef struct {
    double err_dQ, err_dK, err_dV;   /* measured, over max|X_ref| */
    double lo, hi;                   /* the model's bracket of err_dQ */
    double term_D, term_dS;          /* max|A|, max bound B, over max|dQ_ref| */
    double agg_D, agg_dS;            /* the aggregate forms of the header */
    double max_K;                    /* max|K| of the K the backward ran on */
    int centered_cols;               /* columns with c_k != 0 */
    int inexact;                     /* entries whose K_jk - c_k is not in the dtype (must be 0) */
    int worst_row;                   /* the query row of dQ's largest error */
} outcome;

typedef struct {
    int N, d, dt;
    bool causal;
    double a;
} config;


/* The error model of variant w on one draw: D as the variant forms it and
 * dS before its rounding give the bracket [o->lo, o->hi] of err_dQ, its two
 * terms and their aggregate forms (the header's), over max|dQ_ref| = sQ.
 * O is the fp64 forward's output, Ou the O the variant used, Ku its K;
 * dD (N) and dSv (N x N) are scratch. */
static void model_bracket(const attn_params *p, int dt, const variant *w, const double *O, const double *Ou,
                          const double *dO, const double *P, const double *dP, const double *Ku,
                          const double *rdQ, double sQ, double *dD, double *dSv, outcome *o)
{
    const int N = p->seqlen_q, d = p->d;
    const double u = unit_roundoff(dt), scale = p->softmax_scale;
    const double tiny = ldexp(1.0, DT_EMIN[dt] - DT_BITS[dt]);   /* half the least spacing */
    double max_dOO = 0, max_rowdS = 0;
    for (int i = 0; i < N; i++) {
        double s = 0, t = 0, Dt = 0;
        for (int k = 0; k < d; k++) {
            size_t x = (size_t)i * d + k;
            s += dO[x] * (Ou[x] - O[x]);
            t += fabs(dO[x] * O[x]);
            Dt += dO[x] * O[x];
        }
        dD[i] = s;
        if (w->round_O) max_dOO = fmax(max_dOO, t);
        double r = 0;
        for (int j = 0; j < N; j++) {
            size_t x = (size_t)i * N + j;
            dSv[x] = P[x] * (dP[x] - (Dt + s));
            r += fabs(dSv[x]);
        }
        if (w->round_dS || w->split_dS) max_rowdS = fmax(max_rowdS, r);
    }
    double hi = 0, lo = 0, tA = 0, tB = 0;
    for (int k = 0; k < d; k++) {
        double col_var = 0;
        for (int i = 0; i < N; i++) {
            double pk = 0, bb = 0, bvar = 0;
            for (int j = 0; j < N; j++) {
                size_t x = (size_t)i * N + j;
                double kjk = Ku[(size_t)j * d + k];
                pk += P[x] * kjk;
                if ((w->round_dS || w->split_dS) && P[x] != 0) {
                    /* split: lo's rounding, u of what hi leaves (at most u |dS|) */
                    const double r = w->split_dS ? dSv[x] - round_dt(dSv[x], dt) : dSv[x];
                    double h = spacing(r, dt);
                    bb += fmax(u * fabs(r), tiny) * fabs(kjk);
                    bvar += h * h / 12 * kjk * kjk;
                }
            }
            double A = -scale * dD[i] * pk, ref = rdQ[(size_t)i * d + k];
            bb *= scale;
            bvar *= scale * scale;
            double ob = fmax(u * (fabs(ref) + fabs(A) + bb), tiny), oh = spacing(ref, dt);
            hi = fmax(hi, fabs(A) + bb + ob);
            tA = fmax(tA, fabs(A));
            tB = fmax(tB, bb);
            col_var += A * A + bvar + oh * oh / 12;
        }
        lo = fmax(lo, 0.5 * sqrt(col_var / N));
    }
    /* fp64's own rounding in the two runs' sums: far below these terms */
    o->hi = hi / sQ * (1 + 1e-9) + 1e-12;
    o->lo = lo / sQ;
    o->term_D = tA / sQ;
    o->term_dS = tB / sQ;
    o->agg_D = scale * u * o->max_K * max_dOO / sQ;
    o->agg_dS = scale * u * o->max_K * max_rowdS / sQ;
}

/* Every variant on one draw of the inputs of cfg. */
static void run_config(const config *cfg, uint64_t draw, outcome out[NVAR])
{
    const int N = cfg->N, d = cfg->d, dt = cfg->dt;
    const size_t nd = (size_t)N * d, nn = (size_t)N * N;
    attn_params p = attn_params_make(1, 1, N, d, 1.0 / sqrt((double)d));
    if (cfg->causal) p.window_size_right = 0;
    const double scale = p.softmax_scale;
    attn_mask mask = attn_mask_of(&p);
    rng_t rng;
    rng_seed(&rng, draw);
    double *Q = xmalloc(nd, sizeof(double), "Q"), *K = xmalloc(nd, sizeof(double), "K");
    double *V = xmalloc(nd, sizeof(double), "V"), *dO = xmalloc(nd, sizeof(double), "dO");
    for (int i = 0; i < N; i++)
        for (int k = 0; k < d; k++) {
            Q[(size_t)i * d + k] = round_dt(k == 0 ? 1.0 : 0.1 * rng_normal(&rng), dt);
            K[(size_t)i * d + k] = round_dt(k == 0 ? -cfg->a * sqrt((double)d) : 0.1 * rng_normal(&rng), dt);
        }
    for (size_t x = 0; x < nd; x++) V[x] = round_dt(rng_normal(&rng), dt);
    for (size_t x = 0; x < nd; x++) dO[x] = round_dt(rng_normal(&rng), dt);

    int B = imin(64, N);
    sram_arena sram;
    size_t need = flash_backward_sram_elements(B, B, d), nf = flash_forward_sram_elements(B, B, d);
    sram_init(&sram, need > nf ? need : nf);
    double *O = xmalloc(nd, sizeof(double), "O"), *L = xmalloc((size_t)N, sizeof(double), "L");
    double *rdQ = xmalloc(nd, sizeof(double), "dQ_ref"), *rdK = xmalloc(nd, sizeof(double), "dK_ref");
    double *rdV = xmalloc(nd, sizeof(double), "dV_ref"), *D = xmalloc((size_t)N, sizeof(double), "D");
    flash_forward(&p, Q, K, V, B, B, O, L, &sram, NULL, NULL);
    flash_backward_rounding = (flash_rounding){NULL, NULL};
    flash_backward(&p, Q, K, V, O, L, dO, B, B, rdQ, rdK, rdV, D, &sram, NULL, NULL);
    const double sQ = max_abs_finite(rdQ, nd), sK = max_abs_finite(rdK, nd), sV = max_abs_finite(rdV, nd);

    /* The exact P and dP, for the model. */
    double *P = xmalloc(nn, sizeof(double), "P"), *dP = xmalloc(nn, sizeof(double), "dP");
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, t = 0;
            for (int k = 0; k < d; k++) {
                s += Q[(size_t)i * d + k] * K[(size_t)j * d + k];
                t += dO[(size_t)i * d + k] * V[(size_t)j * d + k];
            }
            P[(size_t)i * N + j] = mask_visible(mask, i, j) ? exp(s * scale - L[i]) : 0.0;
            dP[(size_t)i * N + j] = t;
        }

    double *Or = xmalloc(nd, sizeof(double), "O rounded"), *Kc = xmalloc(nd, sizeof(double), "K_c");
    double *Lc = xmalloc((size_t)N, sizeof(double), "L'"), *c = xmalloc((size_t)d, sizeof(double), "c");
    double *dQ = xmalloc(nd, sizeof(double), "dQ"), *dK = xmalloc(nd, sizeof(double), "dK");
    double *dV = xmalloc(nd, sizeof(double), "dV"), *dD = xmalloc((size_t)N, sizeof(double), "dD");
    double *dSv = xmalloc(nn, sizeof(double), "dS");
    for (size_t x = 0; x < nd; x++) Or[x] = round_dt(O[x], dt);

    /* c: column means rounded to the dtype, clamped into Sterbenz's range */
    int kept = 0, inexact = 0;
    for (int k = 0; k < d; k++) {
        double s = 0, lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < N; j++) {
            double x = K[(size_t)j * d + k];
            s += x;
            lo = fmin(lo, x);
            hi = fmax(hi, x);
        }
        c[k] = 0;
        if (lo > 0 || hi < 0) {
            double amin = hi < 0 ? -hi : lo, amax = hi < 0 ? -lo : hi;
            double m = fmin(fmax(round_dt(fabs(s / N), dt), amax / 2), 2 * amin);
            if (m >= amax / 2 && round_dt(m, dt) == m) c[k] = hi < 0 ? -m : m;
        }
        kept += c[k] != 0;
    }
    for (int j = 0; j < N; j++)
        for (int k = 0; k < d; k++) {
            double x = K[(size_t)j * d + k] - c[k];
            Kc[(size_t)j * d + k] = x;
            inexact += round_dt(x, dt) != x;
        }
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < d; k++) s += Q[(size_t)i * d + k] * c[k];
        Lc[i] = L[i] - scale * s;
    }

    for (int v = 0; v < NVAR; v++) {
        const variant *w = &VARIANTS[v];
        const double *Ou = w->round_O ? Or : O, *Ku = w->center ? Kc : K, *Lu = w->center ? Lc : L;
        flash_backward_rounding = (flash_rounding){w->round_P ? ROUND_FN[dt] : NULL,
                                                    w->split_dS ? SPLIT_FN[dt]
                                                    : w->round_dS ? ROUND_FN[dt] : NULL};
        flash_backward(&p, Q, Ku, V, Ou, Lu, dO, B, B, dQ, dK, dV, D, &sram, NULL, NULL);
        flash_backward_rounding = (flash_rounding){NULL, NULL};
        for (size_t x = 0; x < nd; x++) {   /* every variant writes dQ, dK, dV in the dtype */
            dQ[x] = round_dt(dQ[x], dt);
            dK[x] = round_dt(dK[x], dt);
            dV[x] = round_dt(dV[x], dt);
        }
        outcome *o = &out[v];
        o->err_dQ = rel_err(dQ, rdQ, nd, sQ);
        o->worst_row = 0;
        for (size_t x = 0, at = 0; x < nd; x++)
            if (fabs(dQ[x] - rdQ[x]) > fabs(dQ[at] - rdQ[at])) at = x, o->worst_row = (int)(x / (size_t)d);
        o->err_dK = rel_err(dK, rdK, nd, sK);
        o->err_dV = rel_err(dV, rdV, nd, sV);
        o->max_K = max_abs_finite(Ku, nd);
        o->centered_cols = w->center ? kept : 0;
        o->inexact = w->center ? inexact : 0;

        model_bracket(&p, dt, w, O, Ou, dO, P, dP, Ku, rdQ, sQ, dD, dSv, o);
    }
    free(Q); free(K); free(V); free(dO); free(O); free(L); free(rdQ); free(rdK); free(rdV); free(D);
    free(P); free(dP); free(Or); free(Kc); free(Lc); free(c); free(dQ); free(dK); free(dV); free(dD); free(dSv);
    sram_free(&sram);
}

#define CSV_HEADER "dtype,causal,N,d,a,max_K,variant,err_dQ,model_lo,model_hi,term_D,term_dS,agg_D,agg_dS," \
                   "err_dK,err_dV,centered_cols,seed"

#define DRAWS 200
#define DRAWS_HEADER "dtype,causal,N,d,a,variant,err_dQ,worst_row,seed"

/* --draws: DRAWS draws of N = 192, d = 64, bf16, a = 120 per mask. */
void dq_accuracy_draws(const char *path, int argc, char **argv, uint64_t seed0)
{
    FILE *f = csv_open(path, argc, argv, DRAWS_HEADER);
    uint64_t s = seed0;
    for (int causal = 1; causal >= 0; causal--)
        for (int n = 0; n < DRAWS; n++) {
            config cfg = {192, 64, DT_BF16, causal, 120};
            outcome out[NVAR];
            run_config(&cfg, ++s, out);
            for (int v = 0; v < NVAR; v++)
                fprintf(f, "%s,%d,%d,%d,%g,%s,%.4e,%d,%llu\n", DT_NAME[cfg.dt], causal, cfg.N, cfg.d, cfg.a,
                        VARIANTS[v].name, out[v].err_dQ, out[v].worst_row, (unsigned long long)s);
        }
    csv_close(f);
    printf("wrote %s\n", path);
}

static void csv_rows(FILE *f, const config *cfg, const outcome out[NVAR], uint64_t draw)
{
    for (int v = 0; v < NVAR; v++)
        fprintf(f, "%s,%d,%d,%d,%g,%g,%s,%.4e,%.4e,%.4e,%.4e,%.4e,%.4e,%.4e,%.4e,%.4e,%d,%llu\n",
                DT_NAME[cfg->dt], cfg->causal, cfg->N, cfg->d, cfg->a, out[v].max_K, VARIANTS[v].name,
                out[v].err_dQ, out[v].lo, out[v].hi, out[v].term_D, out[v].term_dS, out[v].agg_D,
                out[v].agg_dS, out[v].err_dK, out[v].err_dV, out[v].centered_cols,
                (unsigned long long)draw);
}

/* The sweep: the k-coordinate's size a over three decades at N = 192, both
 * dtypes and both masks; then the shapes at a = 120, bf16. */
void dq_accuracy_sweep(const char *path, int argc, char **argv, uint64_t seed0)
{
    FILE *f = csv_open(path, argc, argv, CSV_HEADER);
    static const double A[] = {0, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 240};
    static const int NS[] = {64, 192, 704, 1024};
    uint64_t s = seed0;
    for (int dt = 0; dt < 2; dt++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t a = 0; a < sizeof A / sizeof A[0]; a++) {
                config cfg = {192, 64, dt, causal, A[a]};
                outcome out[NVAR];
                run_config(&cfg, ++s, out);
                csv_rows(f, &cfg, out, s);
            }
    for (size_t n = 0; n < sizeof NS / sizeof NS[0]; n++)
        for (int causal = 0; causal < 2; causal++) {
            if (NS[n] == 192) continue;   /* in the sweep above */
            config cfg = {NS[n], 64, DT_BF16, causal, 120};
            outcome out[NVAR];
            run_config(&cfg, ++s, out);
            csv_rows(f, &cfg, out, s);
        }
    csv_close(f);
    printf("wrote %s\n", path);
}

/* The checks of make test, on fresh inputs:
 *   bracket   for every variant, model_lo <= err_dQ <= model_hi
 *   fix       centered's err_dQ <= 2 x math's + u (the twice-math rule with
 *             the stages' floor, the dtype's unit roundoff: at a = 0, with
 *             nothing to amplify, rounding dS alone already puts every
 *             tiled kernel near 1.5 x math)
 *   second    at a >= 30, exact_D's err_dQ > 4 x math's: forming D from an
 *             unrounded O leaves dS's rounding, amplified the same way
 *   pass      dq_pass's err_dQ <= 2 x math's (the twice-math rule without
 *             the + u)
 *   growth    flash's err_dQ at a = 120 is above 10 x its err at a = 0
 *   dK, dV    centered's within 2 x flash's + u (the shift changes neither)
 *   exact     every K_jk - c_k of the centering is a number of the dtype,
 *             and at a > 0 the far column (k = 0) is centered */
int dq_accuracy_tests(uint64_t seed0)
{
    seed = seed0;   /* test_report.h's, printed with every failure */
    static const double A[] = {0, 30, 120};
    static const int NS[] = {64, 192};
    uint64_t s = seed0;
    for (int dt = 0; dt < 2; dt++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t n = 0; n < 2; n++) {
                double flash0 = 0;
                for (size_t a = 0; a < sizeof A / sizeof A[0]; a++) {
                    config cfg = {NS[n], 64, dt, causal, A[a]};
                    outcome o[NVAR];
                    run_config(&cfg, ++s, o);
                    char name[160];
                    snprintf(name, sizeof name, "stage3 dQ accuracy %s %s N=%d d=64 a=%g (seed %llu)",
                             DT_NAME[dt], causal ? "causal" : "full", NS[n], A[a], (unsigned long long)s);
                    char why[400] = "";
                    bool ok = true;
                    size_t at = 0;
                    for (int v = 0; v < NVAR; v++) {
                        bool in = o[v].lo <= o[v].err_dQ && o[v].err_dQ <= o[v].hi;
                        ok &= in;
                        at += (size_t)snprintf(why + at, sizeof why - at, "%s%s %.2e in [%.2e, %.2e]%s",
                                               v ? "; " : "", VARIANTS[v].name, o[v].err_dQ, o[v].lo,
                                               o[v].hi, in ? "" : " NO");
                    }
                    result(ok, name, "model brackets err dQ: %s", why);
                    double u = unit_roundoff(dt);
                    result(o[V_CENTERED].err_dQ <= 2 * o[V_MATH].err_dQ + u, name,
                           "centered err dQ %.3e <= 2 x math's %.3e + u", o[V_CENTERED].err_dQ,
                           o[V_MATH].err_dQ);
                    result(o[V_DQ_PASS].err_dQ <= 2 * o[V_MATH].err_dQ, name,
                           "dQ pass err dQ %.3e <= 2 x math's %.3e", o[V_DQ_PASS].err_dQ, o[V_MATH].err_dQ);
                    result(o[V_CENTERED].err_dK <= 2 * o[V_FLASH].err_dK + u &&
                               o[V_CENTERED].err_dV <= 2 * o[V_FLASH].err_dV + u,
                           name, "centered err dK %.2e, dV %.2e; flash's %.2e, %.2e", o[V_CENTERED].err_dK,
                           o[V_CENTERED].err_dV, o[V_FLASH].err_dK, o[V_FLASH].err_dV);
                    result(o[V_CENTERED].inexact == 0 && (A[a] == 0 || o[V_CENTERED].centered_cols >= 1), name,
                           "centering: %d of N d entries K - c not exact in %s; %d columns centered",
                           o[V_CENTERED].inexact, DT_NAME[dt], o[V_CENTERED].centered_cols);
                    if (A[a] >= 30)
                        result(o[V_EXACT_D].err_dQ > 4 * o[V_MATH].err_dQ, name,
                               "D from the unrounded O alone: err dQ %.3e > 4 x math's %.3e (dS's rounding "
                               "is amplified too)", o[V_EXACT_D].err_dQ, o[V_MATH].err_dQ);
                    if (A[a] == 0) flash0 = o[V_FLASH].err_dQ;
                    if (A[a] == 120)
                        result(o[V_FLASH].err_dQ > 10 * flash0, name,
                               "flash err dQ grows with |K|: %.3e at a = 120, %.3e at a = 0",
                               o[V_FLASH].err_dQ, flash0);
                }
            }
    printf("stage3 accuracy: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? EXIT_CHECK_FAILED : 0;
}

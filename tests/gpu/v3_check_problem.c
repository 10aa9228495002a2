/*
 * v3_check_problem.c -- the problems of build/v3_check (v3_check.h): a
 * test case's inputs, rounded to the dtype, and its fp64 reference beside
 * the attention materialized in the dtype; one launch of version 3 checked
 * against them, and where it is wrong when it is; the launch helpers that
 * the runs of tests/gpu/v3_check.c share (the step to run, the watchdog).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fa_gpu.h"
#include "v3_check.h"
#include "v3_check_cuda.h"

/* Launches wait at most this long: a deadlocked kernel ends the program
 * with a FAIL line naming the step (exit 3) instead of hanging it. */
#define V3_WATCHDOG_S 20.0
void v3_wait_or_die(const char *what)
{
    if (v3_watchdog_wait(V3_WATCHDOG_S)) {
        printf("FAIL %s: %s\n", what, fa_error_string());
        fflush(stdout);
        exit(3);
    }
}

/* Launches of version 3 from here on run step k (read at each launch). */
void v3_use_step(int k)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", k);
    setenv("FA_V3_STEP", buf, 1);
}

fa_ptrs v3_ptrs(const void *q, const void *k, const void *v, void *o, float *L)
{
    fa_ptrs x;
    memset(&x, 0, sizeof x);
    x.q = q;
    x.k = k;
    x.v = v;
    x.o = o;
    x.softmax_lse = L;
    return x;
}

/* ---- inputs and the fp64 reference ------------------------------------- */

static double round_dt(double x, int dtype)
{
    unsigned short h;
    double y;
    fa_host_from_double(&h, &x, 1, dtype);
    fa_host_to_double(&y, &h, 1, dtype);
    return y;
}

static void fill(double *x, size_t n, rng_t *r, int kind, int which, int dtype)
{
    for (size_t i = 0; i < n; i++) {
        double u = rng_uniform(r), v;
        switch (kind) {
        case 1: v = which == 2 ? rng_normal(r) : 4e4 + 2.5e4 * u; break;
        case 2: v = which == 0 ? -(34.0 + 0.5 * u) : which == 1 ? 34.0 + 0.5 * u : rng_normal(r); break;
        case 3: v = which == 0 ? -900.0 * u : which == 1 ? u : rng_normal(r); break;
        default: v = rng_normal(r);
        }
        x[i] = round_dt(v, dtype);
    }
}

/* O, L of one query row i of head (b, h) in fp64, and the same materialized
 * in the dtype: S_dt = round(scale q.k), P = round(softmax(S_dt)), O =
 * round(P V). s, pe: scratch of seqlen_k doubles. */
static void reference_row(const problem *g, int b, int h, int i, double *s, double *pe)
{
    const attn_params *p = &g->p;
    attn_mask m = attn_mask_of(p);
    const int d = p->d, Sk = p->seqlen_k, dt = g->dtype;
    const double *q = g->Q + attn_q_offset(p, b, h) + (size_t)i * d;
    const double *K = g->K + attn_kv_offset(p, b, h), *V = g->V + attn_kv_offset(p, b, h);
    double *o = g->O_ref + attn_q_offset(p, b, h) + (size_t)i * d;
    double *oe = g->O_emu + attn_q_offset(p, b, h) + (size_t)i * d;
    double *L = g->L_ref + attn_row_offset(p, b, h) + i;
    double mx = -INFINITY, mxe = -INFINITY;
    for (int j = 0; j < Sk; j++) {
        if (!mask_visible(m, i, j)) { s[j] = pe[j] = -INFINITY; continue; }
        double acc = 0;
        for (int c = 0; c < d; c++) acc += q[c] * K[(size_t)j * d + c];
        s[j] = acc * p->softmax_scale;
        pe[j] = round_dt(s[j], dt);
        if (s[j] > mx) mx = s[j];
        if (pe[j] > mxe) mxe = pe[j];
    }
    for (int c = 0; c < d; c++) o[c] = oe[c] = 0;
    if (mx == -INFINITY) { *L = -INFINITY; return; }
    double l = 0, le = 0;
    for (int j = 0; j < Sk; j++) {
        if (s[j] == -INFINITY) continue;
        s[j] = exp(s[j] - mx);
        l += s[j];
        pe[j] = exp(pe[j] - mxe);   /* NaN when S_dt overflowed to inf: as in the dtype */
        le += pe[j];
    }
    *L = mx + log(l);
    for (int j = 0; j < Sk; j++) {
        if (s[j] == -INFINITY) continue;
        double pj = s[j] / l, pej = round_dt(pe[j] / le, dt);
        for (int c = 0; c < d; c++) {
            o[c] += pj * V[(size_t)j * d + c];
            oe[c] += pej * V[(size_t)j * d + c];
        }
    }
    for (int c = 0; c < d; c++) oe[c] = round_dt(oe[c], dt);
}

void v3_problem_init(problem *g, const tcase *tc, int dtype, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    attn_params p = {tc->B, tc->H, tc->H_kv, tc->Sq, tc->Sk, tc->d, 1.0 / sqrt((double)tc->d), tc->wl, tc->wr};
    g->p = p;
    g->dtype = dtype;
    g->nq = attn_q_numel(&p);
    g->nk = attn_kv_numel(&p);
    g->rows = attn_rows(&p);
    g->Q = xmalloc(g->nq, sizeof(double), "Q");
    g->K = xmalloc(g->nk, sizeof(double), "K");
    g->V = xmalloc(g->nk, sizeof(double), "V");
    rng_t r;
    rng_seed(&r, seed);
    fill(g->Q, g->nq, &r, tc->kind, 0, dtype);
    fill(g->K, g->nk, &r, tc->kind, 1, dtype);
    fill(g->V, g->nk, &r, tc->kind, 2, dtype);
    g->O_ref = xmalloc(g->nq, sizeof(double), "O_ref");
    g->O_emu = xmalloc(g->nq, sizeof(double), "O_emu");
    g->L_ref = xmalloc(g->rows, sizeof(double), "L_ref");
    long long nrows = (long long)g->rows;
#pragma omp parallel
    {
        double *s = xmalloc((size_t)p.seqlen_k, sizeof(double), "scores");
        double *pe = xmalloc((size_t)p.seqlen_k, sizeof(double), "scores");
#pragma omp for schedule(dynamic, 16)
        for (long long rr = 0; rr < nrows; rr++) {
            int i = (int)(rr % p.seqlen_q), bh = (int)(rr / p.seqlen_q);
            reference_row(g, bh / p.H, bh % p.H, i, s, pe);
        }
        free(s);
        free(pe);
    }
    size_t es = fa_dtype_bytes(dtype);
    void *h = xmalloc(g->nq > g->nk ? g->nq : g->nk, es, "staging");
    g->dq = fa_malloc(g->nq * es);
    g->dk = fa_malloc(g->nk * es);
    g->dv = fa_malloc(g->nk * es);
    g->dO = fa_malloc(g->nq * es);
    g->dL = fa_malloc(g->rows * sizeof(float));
    if (!g->dq || !g->dk || !g->dv || !g->dO || !g->dL) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    fa_host_from_double(h, g->Q, g->nq, dtype);
    if (fa_copy_to_device(g->dq, h, g->nq * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    fa_host_from_double(h, g->K, g->nk, dtype);
    if (fa_copy_to_device(g->dk, h, g->nk * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    fa_host_from_double(h, g->V, g->nk, dtype);
    if (fa_copy_to_device(g->dv, h, g->nk * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    free(h);
}

void v3_problem_free(problem *g)
{
    free(g->Q); free(g->K); free(g->V); free(g->O_ref); free(g->O_emu); free(g->L_ref);
    fa_free(g->dq); fa_free(g->dk); fa_free(g->dv); fa_free(g->dO); fa_free(g->dL);
}

/* ---- one run and its diagnosis ------------------------------------------ */

static double maxabs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* Where O is wrong: rows (as ranges, per head), the pattern of the row in
 * its 128-row block and of the column, and a 4 x 8 patch beside the
 * reference. */
static void diagnose(const problem *g, const double *O, const double *L, double tol_abs)
{
    const attn_params *p = &g->p;
    const int d = p->d, Sq = p->seqlen_q;
    int rowhist[8] = {0}, colhist[128] = {0}, ranges = 0;
    size_t first = (size_t)-1;
    char line[1024] = "";
    size_t at = 0;
    long long run_start = -1, prev = -2;
    for (size_t r = 0; r < g->rows; r++) {
        int bad = 0;
        for (int c = 0; c < d; c++) {
            double e = fabs(O[r * d + c] - g->O_ref[r * d + c]);
            if (!(e <= tol_abs)) {
                bad = 1;
                colhist[c]++;
                if (first == (size_t)-1) first = r * d + c;
            }
        }
        double lr = g->L_ref[r], lg = L[r];
        if (!(lr == lg || fabs(lg - lr) <= 1e-4 * fmax(1, fabs(lr)))) bad = 1;
        if (!bad) continue;
        rowhist[(r % Sq) % 128 / 16]++;
        if ((long long)r != prev + 1) {
            if (run_start >= 0 && ranges < 8 && at < sizeof line - 64)
                at += (size_t)snprintf(line + at, sizeof line - at, " bh%lld:%lld-%lld", run_start / Sq,
                                       run_start % Sq, prev % Sq);
            if (run_start >= 0) ranges++;
            run_start = (long long)r;
        }
        prev = (long long)r;
    }
    if (run_start >= 0 && ranges < 8 && at < sizeof line - 64)
        snprintf(line + at, sizeof line - at, " bh%lld:%lld-%lld", run_start / Sq, run_start % Sq, prev % Sq);
    printf("  wrong rows (head:first-last):%s%s\n", line, ranges >= 8 ? " ..." : "");
    printf("  wrong rows by 16-row group of the 128-row block (warp of the consumer):");
    for (int w = 0; w < 8; w++) printf(" %d", rowhist[w]);
    printf("\n  wrong columns:");
    int ncols = 0;
    for (int c = 0; c < d; c++) ncols += colhist[c] > 0;
    if (ncols == d) printf(" all %d", d);
    else
        for (int c = 0; c < d; c++)
            if (colhist[c]) printf(" %d", c);
    printf("\n");
    if (first == (size_t)-1) {
        size_t r = 0;
        for (; r < g->rows; r++)
            if (!(g->L_ref[r] == L[r] || fabs(L[r] - g->L_ref[r]) <= 1e-4 * fmax(1, fabs(g->L_ref[r])))) break;
        if (r < g->rows)
            printf("  O within bounds; first wrong L: row %zu of head %zu: %.9g, want %.9g\n", r % Sq, r / Sq,
                   L[r], g->L_ref[r]);
        return;
    }
    size_t r0 = first / d, c0 = first % d;
    printf("  first wrong O: head %zu row %zu col %zu: %.6g, want %.6g; L %.9g, want %.9g\n", r0 / Sq,
           r0 % Sq, c0, O[first], g->O_ref[first], L[r0], g->L_ref[r0]);
    size_t cs = c0 >= 4 ? c0 - 4 : 0;
    if (cs + 8 > (size_t)d) cs = (size_t)d - 8;
    printf("  O[rows %zu.., cols %zu..%zu] got | want:\n", r0 % Sq, cs, cs + 7);
    for (size_t r = r0; r < r0 + 4 && r < g->rows; r++) {
        printf("   ");
        for (size_t c = cs; c < cs + 8; c++) printf(" %9.4g", O[r * d + c]);
        printf("  |");
        for (size_t c = cs; c < cs + 8; c++) printf(" %9.4g", g->O_ref[r * d + c]);
        printf("\n");
    }
}

int v3_run_case(const problem *g, int step, verdict *v, int verbose_fail, const char *name)
{
    const attn_params *p = &g->p;
    size_t es = fa_dtype_bytes(g->dtype);
    memset(v, 0, sizeof *v);
    if (fa_poison(g->dO, g->nq * es) || fa_poison(g->dL, g->rows * sizeof(float)))
        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    v3_use_step(step);
    fa_ptrs x = v3_ptrs(g->dq, g->dk, g->dv, g->dO, g->dL);
    if (fa_forward(3, g->dtype, p, &x, NULL)) {
        printf("FAIL %s: %s\n", name, fa_error_string());
        return 1;
    }
    v3_wait_or_die(name);
    void *h = xmalloc(g->nq, es, "O");
    float *hl = xmalloc(g->rows, sizeof(float), "L");
    double *O = xmalloc(g->nq, sizeof(double), "O"), *L = xmalloc(g->rows, sizeof(double), "L");
    if (fa_copy_to_host(h, g->dO, g->nq * es) || fa_copy_to_host(hl, g->dL, g->rows * sizeof(float)))
        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    fa_host_to_double(O, h, g->nq, g->dtype);
    for (size_t i = 0; i < g->rows; i++) L[i] = hl[i];
    double mo = maxabs(g->O_ref, g->nq), ml = fmax(1, maxabs(g->L_ref, g->rows));
    if (mo == 0) mo = 1;
    for (size_t i = 0; i < g->nq; i++) {
        if (isnan(O[i]) || isinf(O[i])) v->nan++;
        double e = fabs(O[i] - g->O_ref[i]), ee = fabs(g->O_emu[i] - g->O_ref[i]);
        if (!(e <= v->errO)) v->errO = isnan(e) ? INFINITY : e;
        if (!(ee <= v->errE)) v->errE = isnan(ee) ? INFINITY : ee;
    }
    for (size_t i = 0; i < g->rows; i++) {
        if (isnan(L[i]) || L[i] == INFINITY) v->nan++;
        double e = L[i] == g->L_ref[i] ? 0 : fabs(L[i] - g->L_ref[i]);
        if (!(e <= v->errL)) v->errL = isnan(e) ? INFINITY : e;
    }
    v->errO /= mo;
    v->errE /= mo;
    v->errL /= ml;
    double sanity = g->dtype == FA_FP16 ? 1e-2 : 5e-2;
    double bound = isfinite(v->errE) ? fmin(2 * v->errE + 1e-6, sanity) : sanity;
    int fail = v->nan || !(v->errO <= bound) || !(v->errL <= 1e-4);
    if (fail) {
        for (size_t i = 0; i < g->nq; i++)
            if (!(fabs(O[i] - g->O_ref[i]) <= bound * mo)) v->bad++;
        printf("FAIL %s: err O %.3g (bound %.3g: 2 x emulated %.3g), err L %.3g, %zu NaN/inf, %zu O entries "
               "over the bound\n", name, v->errO, bound, v->errE, v->errL, v->nan, v->bad);
        if (verbose_fail) diagnose(g, O, L, bound * mo);
    }
    free(h); free(hl); free(O); free(L);
    return fail;
}

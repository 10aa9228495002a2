/*
 * v3_check.c -- checks and times version 3 of the forward (Hopper: TMA,
 * wgmma, warp specialization; kernels/stage4_fwd_v3_hopper.cu), every step of
 * its construction, against a CPU fp64 reference. Plain C: it runs version
 * 3 through the library's table (fa_gpu.h: fa_forward, fa_time), choosing
 * the step with FA_V3_STEP as any program can, plus the piece tests and
 * the launch watchdog of its CUDA half (v3_check_cuda.h).
 *
 * Usage (on a Hopper GPU; elsewhere it says so and exits 0):
 *   build/v3_check                       pieces, tests, timings (all below)
 *   build/v3_check --pieces              the piece self-tests (TMA swizzle, wgmma layouts)
 *   build/v3_check --tests [--seed S]    every step, fp16 and bf16, d 64 and 128, the
 *                                        stage-4 shapes, GQA, seqlen_q != seqlen_k, causal,
 *                                        windows, huge and very negative logits
 *   build/v3_check --time [--csv F]      TFLOP/s of every step, bf16, B N = 16384 tokens,
 *                                        H = 2048 / d, d 64 and 128, causal and not
 *   build/v3_check --small [--seed S]    every step once on two small masked GQA problems,
 *                                        one with more tiles than SMs, so that step 6's
 *                                        blocks reuse their tile slots (for compute-sanitizer)
 *   build/v3_check --one N,d,causal      every step launched once at the timing shape (ncu)
 *   --steps LIST  only these steps (a list of A or A-B, 1 to FA_V3_STEPS: 2-4,6); fp16 runs in steps FA_V3_FP16_FIRST (5) and later
 *   --ns N1,N2,..  sequence lengths of --time
 * A launch that has not finished after 20 s (a deadlock) ends the program
 * with a FAIL line naming it and exit status 3.
 *
 * Checks per (case, dtype, step): outputs poisoned (NaN) before the launch;
 * no NaN or +inf left in O or L; err O = max|O - O_ref| / max|O_ref| at most
 * twice the error of the materialized attention computed in the dtype the
 * way PyTorch's math path does (S and P rounded to the dtype) plus 1e-6,
 * and within a sanity bound (fp16 1e-2, bf16 5e-2); err L = max|L - L_ref| /
 * max(1, max|L_ref|) <= 1e-4 (L comes from fp32 S: no dtype rounding), a
 * row that sees no key must give L = -inf and O = 0. Where the emulated
 * attention is not finite (fp16 S overflows on the huge-logit inputs) only
 * the sanity bound applies. On a failure it prints which rows and columns
 * are wrong and a patch of O beside the reference.
 *
 * Exit status: 0 when every check passes, 1 when one fails, 2 on bad flags.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fa_gpu.h"
#include "stage4_fwd_v3_hopper.h"
#include "v3_check_cuda.h"

static int g_step_on[FA_V3_STEPS + 1];   /* --steps; all when not given (main) */
static int g_first_step = 1;

/* Launches wait at most this long: a deadlocked kernel ends the program
 * with a FAIL line naming the step (exit 3) instead of hanging it. */
#define V3_WATCHDOG_S 20.0
static void wait_or_die(const char *what)
{
    if (v3_watchdog_wait(V3_WATCHDOG_S)) {
        printf("FAIL %s: %s\n", what, fa_error_string());
        fflush(stdout);
        exit(3);
    }
}

/* Launches of version 3 from here on run step k (read at each launch). */
static void use_step(int k)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", k);
    setenv("FA_V3_STEP", buf, 1);
}

static fa_ptrs ptrs(const void *q, const void *k, const void *v, void *o, float *L)
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

typedef struct {
    const char *name;
    int B, H, H_kv, Sq, Sk, d;
    int wl, wr;        /* window_size_left, right (-1 unbounded) */
    int kind;          /* 0: N(0,1); 1: Q, K in U[4e4, 6.5e4]; 2: S near -7.5e4; 3: Q = -900 U, K = U */
} tcase;

typedef struct {
    attn_params p;
    int dtype;
    size_t nq, nk, rows;
    double *Q, *K, *V;        /* inputs rounded to the dtype, as doubles */
    double *O_ref, *L_ref;    /* fp64 attention */
    double *O_emu;            /* materialized in the dtype (PyTorch's math path) */
    void *dq, *dk, *dv, *dO;
    float *dL;
} problem;

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

static void problem_init(problem *g, const tcase *tc, int dtype, uint64_t seed)
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

static void problem_free(problem *g)
{
    free(g->Q); free(g->K); free(g->V); free(g->O_ref); free(g->O_emu); free(g->L_ref);
    fa_free(g->dq); fa_free(g->dk); fa_free(g->dv); fa_free(g->dO); fa_free(g->dL);
}

/* ---- one run and its diagnosis ------------------------------------------ */

typedef struct {
    double errO, errL, errE;   /* v3 O, v3 L, emulated O (inf when not finite) */
    size_t nan, bad;           /* NaN/+inf entries; O entries over the bound */
} verdict;

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

static int run_case(const problem *g, int step, verdict *v, int verbose_fail, const char *name)
{
    const attn_params *p = &g->p;
    size_t es = fa_dtype_bytes(g->dtype);
    memset(v, 0, sizeof *v);
    if (fa_poison(g->dO, g->nq * es) || fa_poison(g->dL, g->rows * sizeof(float)))
        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    use_step(step);
    fa_ptrs x = ptrs(g->dq, g->dk, g->dv, g->dO, g->dL);
    if (fa_forward(3, g->dtype, p, &x, NULL)) {
        printf("FAIL %s: %s\n", name, fa_error_string());
        return 1;
    }
    wait_or_die(name);
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

/* ---- the test suite ------------------------------------------------------ */

static int run_tests(uint64_t seed, int sms)
{
    const int bh_big = sms + 19;   /* more heads than multiprocessors, odd */
    const tcase cases[] = {
        /* name                 B  H  Hkv Sq    Sk    d    wl   wr  kind */
        {"N=1",                 1, 1, 1,  1,    1,    64, -1, -1, 0},
        {"N=17",                1, 3, 3,  17,   17,   64, -1, -1, 0},
        {"N=113",               1, 1, 1,  113,  113,  64, -1, -1, 0},
        {"N=1023",              1, 1, 1,  1023, 1023, 64, -1, -1, 0},
        {"N=4097",              1, 1, 1,  4097, 4097, 64, -1, -1, 0},
        {"N=1",                 1, 1, 1,  1,    1,    128, -1, -1, 0},
        {"N=17",                1, 3, 3,  17,   17,   128, -1, -1, 0},
        {"N=113",               1, 1, 1,  113,  113,  128, -1, -1, 0},
        {"N=1023",              1, 1, 1,  1023, 1023, 128, -1, -1, 0},
        {"N=4097",              1, 1, 1,  4097, 4097, 128, -1, -1, 0},
        {"odd B*H > SMs",       1, bh_big, bh_big, 70, 70, 64, -1, -1, 0},
        {"odd B*H",             3, 5, 5,  300,  300,  128, -1, -1, 0},
        {"GQA Sq<Sk",           2, 6, 2,  200,  333,  64, -1, -1, 0},
        {"MQA Sq>Sk",           1, 4, 1,  333,  200,  128, -1, -1, 0},
        {"causal",              2, 3, 3,  777,  777,  64, -1, 0, 0},
        {"causal",              1, 2, 2,  1000, 1000, 128, -1, 0, 0},
        {"causal Sq>Sk (empty rows)", 1, 4, 2, 300, 130, 64, -1, 0, 0},
        {"causal Sq<Sk",        1, 2, 1,  130,  700,  128, -1, 0, 0},
        {"window 64,0",         1, 2, 2,  600,  600,  64, 64, 0, 0},
        {"window 100,50",       1, 2, 1,  500,  640,  128, 100, 50, 0},
        {"window 0,0",          1, 1, 1,  300,  300,  64, 0, 0, 0},
        {"window 300,-1",       1, 2, 2,  520,  520,  128, 300, -1, 0},
        {"huge logits",         1, 2, 2,  128,  128,  64, -1, -1, 1},
        {"huge logits causal",  1, 2, 2,  300,  300,  128, -1, 0, 1},
        {"logits near -7.5e4",  1, 2, 2,  128,  128,  64, -1, -1, 2},
        {"Q=-900U, K=U",        1, 2, 2,  128,  128,  64, -1, -1, 3},
    };
    const int dtypes[2] = {FA_BF16, FA_FP16};
    int fails = 0, runs = 0;
    printf("v3 tests: seed %llu (replay: build/v3_check --tests --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int t = 0; t < 2; t++) {
            problem g;
            problem_init(&g, &cases[c], dtypes[t], seed + 101 * c + t);
            for (int step = 1; step <= FA_V3_STEPS; step++) {
                if (!g_step_on[step] || (dtypes[t] == FA_FP16 && step < FA_V3_FP16_FIRST)) continue;
                char name[200];
                const tcase *k = &cases[c];
                snprintf(name, sizeof name, "v3-step%d %s %s (B %d, H %d, H_kv %d, Sq %d, Sk %d, d %d, window %d,%d)",
                         step, fa_dtype_name(dtypes[t]), k->name, k->B, k->H, k->H_kv, k->Sq, k->Sk, k->d,
                         k->wl, k->wr);
                verdict v;
                int f = run_case(&g, step, &v, 1, name);
                fails += f;
                runs++;
                if (!f)
                    printf("PASS %s: err O %.2e (emulated %.2e), err L %.1e\n", name, v.errO, v.errE, v.errL);
                fflush(stdout);
            }
            problem_free(&g);
        }
    /* refusals: one line, FA_ERR_UNSUPPORTED, nothing launched */
    struct { const char *name; int dtype, d, step; } ref[4] = {
        {"v3-refuses-d96", FA_BF16, 96, 5}, {"v3-refuses-fp32", FA_FP32, 64, 5},
        {"v3-refuses-fp16-step2", FA_FP16, 64, 2}, {"v3-refuses-step9", FA_BF16, 64, 9}};
    for (int i = 0; i < 4; i++) {
        attn_params bad = attn_params_make(1, 1, 64, ref[i].d, 0.1);
        use_step(ref[i].step);
        int rc = fa_check_supported(FA_FORWARD, 3, ref[i].dtype, &bad);
        printf("%s %s (%s)\n", rc == FA_ERR_UNSUPPORTED ? "PASS" : "FAIL", ref[i].name, fa_error_string());
        fails += rc != FA_ERR_UNSUPPORTED;
    }
    printf("v3 tests: %d of %d runs failed\n", fails, runs + 4);
    return fails;
}

/* ---- timing -------------------------------------------------------------- */

/* n N(0,1) values in bf16 bits, drawn in chunks of 2^20 whose generators are
 * seeded from (seed, chunk), so the result does not depend on the number of
 * threads; parallel because the timing shapes have 33.5 M elements per
 * tensor and the device call's time is short. */
static void fill_normal_bf16(unsigned short *h, size_t n, uint64_t seed)
{
    const size_t chunk = (size_t)1 << 20;
    const long long nchunks = (long long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long long c = 0; c < nchunks; c++) {
        rng_t r;
        rng_seed(&r, seed * 1000003ull + (uint64_t)c);
        double x[256];
        const size_t i0 = (size_t)c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        for (size_t i = i0; i < i1; i += 256) {
            const size_t m = i1 - i < 256 ? i1 - i : 256;
            for (size_t j = 0; j < m; j++) x[j] = rng_normal(&r);
            fa_host_from_double(h + i, x, m, FA_BF16);
        }
    }
}

/* max |a - b| over n bf16 values (bits); inf when either is NaN */
static double maxdiff_bf16(const unsigned short *a, const unsigned short *b, size_t n)
{
    double m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (long long i = 0; i < (long long)n; i++) {
        union { uint32_t u; float f; } x = {(uint32_t)a[i] << 16}, y = {(uint32_t)b[i] << 16};
        const double e = fabs((double)x.f - (double)y.f);
        const double ee = e == e ? e : INFINITY;
        if (ee > m) m = ee;
    }
    return m;
}

static int run_timing(const char *csv_path, int argc, char **argv, const char *device, const int *ns, int nn)
{
    FILE *csv = csv_path ? csv_open(csv_path, argc, argv,
                                    "device,impl,step,dtype,causal,B,H,N,d,median_ms,tflops,repeats,"
                                    "maxdiff_vs_step1,bitwise_repeatable")
                         : NULL;
    printf("\nv3 timing: bf16, B N = 16384 tokens, H = 2048 / d; median of 15 launches, L2 flushed "
           "before each; TFLOP/s = 4 d (visible pairs) B H / time\n");
    printf("%5s %4s %6s %6s %10s %9s %12s %s\n", "step", "d", "N", "causal", "ms", "TFLOP/s", "diff step1",
           "repeatable");
    int fails = 0;
    const int dts[2] = {64, 128};
    for (int di = 0; di < 2; di++)
        for (int causal = 0; causal < 2; causal++)
            for (int k = 0; k < nn; k++) {
                const int N = ns[k], d = dts[di], B = 16384 / N > 0 ? 16384 / N : 1, H = 2048 / d;
                attn_params p = attn_params_make(B, H, N, d, 1.0 / sqrt((double)d));
                if (causal) p.window_size_right = 0;
                size_t nq = attn_q_numel(&p), rows = attn_rows(&p), es = 2;
                void *q = fa_malloc(nq * es), *kk = fa_malloc(nq * es), *v = fa_malloc(nq * es);
                void *o = fa_malloc(nq * es), *o1 = fa_malloc(nq * es);
                float *L = fa_malloc(rows * 4);
                if (!q || !kk || !v || !o || !o1 || !L) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                /* random N(0,1) inputs (never zeros: they time differently) */
                {
                    unsigned short *h = xmalloc(nq, es, "h");
                    void *dst[3] = {q, kk, v};
                    for (int t = 0; t < 3; t++) {
                        fill_normal_bf16(h, nq, (uint64_t)(77 + N + d) * 3 + (uint64_t)t);
                        if (fa_copy_to_device(dst[t], h, nq * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    }
                    free(h);
                }
                double flops = fa_flops(FA_FORWARD, &p);   /* the papers' count: causal = half */
                unsigned short *h1 = xmalloc(nq, es, "O step 1"), *h2 = xmalloc(nq, es, "O");
                for (int step = 1; step <= FA_V3_STEPS; step++) {
                    if (!g_step_on[step]) continue;
                    double ms = 0;
                    use_step(step);
                    fa_ptrs x = ptrs(q, kk, v, o, L);
                    int rc = fa_time(FA_FORWARD, 3, FA_BF16, &p, &x, 1, 0, 15, 1, &ms);
                    if (rc) {
                        printf("FAIL v3-time step %d d %d N %d causal %d: %s\n", step, d, N, causal, fa_error_string());
                        fails++;
                        continue;
                    }
                    /* the same inputs through this step twice: identical bits, and
                     * the difference to step 1 (same arithmetic in the same order:
                     * expected 0) */
                    double diff = 0;
                    int same = 1;
                    if (fa_poison(o, nq * es) || fa_forward(3, FA_BF16, &p, &x, NULL))
                        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    wait_or_die("v3-time");
                    if (fa_copy_to_host(h2, o, nq * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    if (step == g_first_step) memcpy(h1, h2, nq * es);
                    diff = maxdiff_bf16(h1, h2, nq);
                    /* repeat: bitwise identical to the run just checked */
                    fa_ptrs x1 = ptrs(q, kk, v, o1, L);
                    if (fa_forward(3, FA_BF16, &p, &x1, NULL))
                        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    wait_or_die("v3-time (repeat)");
                    unsigned short *h3 = xmalloc(nq, es, "O again");
                    if (fa_copy_to_host(h3, o1, nq * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    same = memcmp(h2, h3, nq * es) == 0;
                    free(h3);
                    double tf = flops / (ms * 1e-3) / 1e12;
                    printf("%5d %4d %6d %6d %10.4f %9.1f %12.3g %s\n", step, d, N, causal, ms, tf, diff,
                           same ? "yes" : "NO");
                    if (!same || !(diff < 1e-2)) {
                        printf("FAIL v3-consistency step %d d %d N %d causal %d: diff to step %d %.3g, "
                               "repeatable %s\n", step, d, N, causal, g_first_step, diff, same ? "yes" : "no");
                        fails++;
                    }
                    if (csv)
                        fprintf(csv, "\"%s\",ours_v3,%d,bf16,%d,%d,%d,%d,%d,%.5f,%.2f,15,%.3g,%d\n", device, step,
                                causal, B, H, N, d, ms, tf, diff, same);
                    fflush(stdout);
                }
                free(h1); free(h2);
                fa_free(q); fa_free(kk); fa_free(v); fa_free(o); fa_free(o1); fa_free(L);
            }
    if (csv) csv_close(csv);
    return fails;
}

/* every step once on two small masked GQA problems (compute-sanitizer, ncu).
 * The second has more tiles (query blocks x heads) than a GPU has SMs, so
 * that blocks of the persistent steps take second tiles and the producers
 * of step 6 on write their tile slots again: the reuse of a slot, which the
 * sanitizer must see ordered, then happens on every launch, not only when
 * some block happens to start early. */
static int run_small(uint64_t seed)
{
    const tcase cases[] = {
        {"small", 1, 4, 2, 300, 260, 64, -1, 0, 0},
        {"small-many", 4, 72, 8, 150, 90, 64, -1, 0, 0},
    };
    printf("v3 small: seed %llu (replay: build/v3_check --small --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    int fails = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 64; d <= 128; d += 64) {
            tcase t = cases[c];
            t.d = d;
            problem g;
            problem_init(&g, &t, FA_BF16, seed + 2 * c + (uint64_t)(d / 128));
            for (int step = 1; step <= FA_V3_STEPS; step++) {
                if (!g_step_on[step]) continue;
                char name[64];
                snprintf(name, sizeof name, "v3-%s step %d d %d", t.name, step, d);
                verdict v;
                int f = run_case(&g, step, &v, 1, name);
                if (!f) printf("PASS %s: err O %.2e\n", name, v.errO);
                fails += f;
            }
            problem_free(&g);
        }
    return fails;
}

/* --one N,d,causal: each selected step launched once at the timing shape,
 * bf16, no checks (for ncu: one launch per kernel) */
static int run_one(const char *spec)
{
    int N, d, causal;
    if (sscanf(spec, "%d,%d,%d", &N, &d, &causal) != 3 || N < 1 || N > 16384 || (d != 64 && d != 128))
        fatal(EXIT_BAD_INPUT, "--one %s: give N,d,causal with 1 <= N <= 16384, d 64 or 128", spec);
    attn_params p = attn_params_make(16384 / N > 0 ? 16384 / N : 1, 2048 / d, N, d, 1.0 / sqrt((double)d));
    if (causal) p.window_size_right = 0;
    size_t nq = attn_q_numel(&p);
    void *q = fa_malloc(nq * 2), *k = fa_malloc(nq * 2), *v = fa_malloc(nq * 2), *o = fa_malloc(nq * 2);
    float *L = fa_malloc(attn_rows(&p) * 4);
    if (!q || !k || !v || !o || !L) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    double *x = xmalloc(nq, sizeof(double), "x");
    void *h = xmalloc(nq, 2, "h");
    rng_t r;
    rng_seed(&r, 9);
    void *dst[3] = {q, k, v};
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < nq; i++) x[i] = rng_normal(&r);
        fa_host_from_double(h, x, nq, FA_BF16);
        if (fa_copy_to_device(dst[t], h, nq * 2)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    }
    free(x);
    free(h);
    for (int step = 1; step <= FA_V3_STEPS; step++) {
        if (!g_step_on[step]) continue;
        use_step(step);
        fa_ptrs xp = ptrs(q, k, v, o, L);
        if (fa_forward(3, FA_BF16, &p, &xp, NULL)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
        wait_or_die("v3-one");
        printf("ran step %d at B %d H %d N %d d %d causal %d\n", step, p.B, p.H, N, d, causal);
    }
    fa_free(q); fa_free(k); fa_free(v); fa_free(o); fa_free(L);
    return 0;
}

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    int pieces = 0, tests = 0, timing = 0, small = 0;
    const char *csv = NULL, *one = NULL;
    uint64_t seed = 0;
    int have_seed = 0, ns[8] = {2048, 8192, 16384}, nn = 3;
    for (int k = 1; k <= FA_V3_STEPS; k++) g_step_on[k] = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pieces")) pieces = 1;
        else if (!strcmp(argv[i], "--tests")) tests = 1;
        else if (!strcmp(argv[i], "--time")) timing = 1;
        else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--one") && i + 1 < argc) one = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) { seed = strtoull(argv[++i], NULL, 10); have_seed = 1; }
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            /* a list of steps and ranges: 1-5, 1,5, 2-4,5; parsed in a copy, so
             * that the command line the CSV records keeps the whole list */
            static char spec[256];
            snprintf(spec, sizeof spec, "%s", argv[++i]);
            memset(g_step_on, 0, sizeof g_step_on);
            for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
                int a, b, n = sscanf(tok, "%d-%d", &a, &b);
                if (n == 1) b = a;
                if (n < 1 || a < 1 || b > FA_V3_STEPS || a > b)
                    fatal(EXIT_BAD_INPUT, "--steps %s: give steps 1 to %d as a list of A or A-B", tok, FA_V3_STEPS);
                for (int k = a; k <= b; k++) g_step_on[k] = 1;
            }
            for (g_first_step = 1; !g_step_on[g_first_step]; g_first_step++) {}
        } else if (!strcmp(argv[i], "--ns") && i + 1 < argc) {
            static char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            nn = 0;
            for (char *s = strtok(list, ","); s && nn < 8; s = strtok(NULL, ",")) {
                ns[nn] = atoi(s);
                if (ns[nn] < 1 || ns[nn] > 16384) fatal(EXIT_BAD_INPUT, "--ns %s: lengths 1 to 16384", s);
                nn++;
            }
        } else if (!strcmp(argv[i], "--help")) {
            printf("usage: build/v3_check [--pieces] [--tests [--seed S]] [--time [--csv F] [--ns N,..]] "
                   "[--small [--seed S]] [--one N,d,causal] [--steps LIST]\n");
            return 0;
        } else {
            fatal(EXIT_BAD_INPUT, "%s: unknown flag (see --help)", argv[i]);
        }
    }
    if (!pieces && !tests && !timing && !small && !one) pieces = tests = timing = 1;
    if (fa_device_count() == 0) {
        printf("v3_check: no CUDA GPU here; nothing to run\n");
        return 0;
    }
    char device[256];
    int sms = 0;
    if (fa_device_info(device, sizeof device, &sms)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    attn_params probe = attn_params_make(1, 1, 64, 64, 0.125);
    use_step(FA_V3_STEPS);
    if (fa_check_supported(FA_FORWARD, 3, FA_BF16, &probe) != FA_OK) {
        printf("SKIP v3: %s\n", fa_error_string());
        return 0;
    }
    printf("v3_check on %s\n", device);
    int fails = 0;
    if (pieces) fails += v3_pieces_selftest();
    if (small) fails += run_small(have_seed ? seed : fresh_seed());
    if (one) fails += run_one(one);
    if (tests) fails += run_tests(have_seed ? seed : fresh_seed(), sms);
    if (timing) fails += run_timing(csv, argc, argv, device, ns, nn);
    printf("v3_check: %s\n", fails ? "FAILED" : "all checks passed");
    return outputs_finish(fails ? EXIT_CHECK_FAILED : 0);
}

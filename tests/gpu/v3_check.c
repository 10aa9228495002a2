/*
 * v3_check.c -- checks and times version 3 of the forward (Hopper: TMA,
 * wgmma, warp specialization; kernels/stage4_fwd_v3_hopper.cu), every step of
 * its construction, against a CPU fp64 reference. Plain C: it runs version
 * 3 through the library's table (fa_gpu.h: fa_forward, fa_time), choosing
 * the step with FA_V3_STEP as any program can, plus the piece tests and
 * the launch watchdog of its CUDA half (v3_check_cuda.h). This file holds
 * the command line and the runs; the problems, their fp64 references and
 * the check of one launch are in v3_check_problem.c (v3_check.h).
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
#include "v3_check.h"
#include "v3_check_cuda.h"

static int g_step_on[FA_V3_STEPS + 1];   /* --steps; all when not given (main) */
static int g_first_step = 1;

/* ---- the test suite ------------------------------------------------------ */

static int run_tests(uint64_t seed, int sms)
{
    const int bh_big = sms + 19;   /* more heads than multiprocessors, odd */
    const tcase cases[] = {
        /* name                 B  H  H_kv Sq    Sk    d    wl   wr  kind */
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
            v3_problem_init(&g, &cases[c], dtypes[t], seed + 101 * c + t);
            for (int step = 1; step <= FA_V3_STEPS; step++) {
                if (!g_step_on[step] || (dtypes[t] == FA_FP16 && step < FA_V3_FP16_FIRST)) continue;
                char name[200];
                const tcase *k = &cases[c];
                snprintf(name, sizeof name, "v3-step%d %s %s (B %d, H %d, H_kv %d, Sq %d, Sk %d, d %d, window %d,%d)",
                         step, fa_dtype_name(dtypes[t]), k->name, k->B, k->H, k->H_kv, k->Sq, k->Sk, k->d,
                         k->wl, k->wr);
                verdict v;
                int f = v3_run_case(&g, step, &v, 1, name);
                fails += f;
                runs++;
                if (!f)
                    printf("PASS %s: err O %.2e (emulated %.2e), err L %.1e\n", name, v.errO, v.errE, v.errL);
                fflush(stdout);
            }
            v3_problem_free(&g);
        }
    /* refusals: one line, FA_ERR_UNSUPPORTED, nothing launched */
    struct { const char *name; int dtype, d, step; } ref[4] = {
        {"v3-refuses-d96", FA_BF16, 96, 5}, {"v3-refuses-fp32", FA_FP32, 64, 5},
        {"v3-refuses-fp16-step2", FA_FP16, 64, 2}, {"v3-refuses-step9", FA_BF16, 64, 9}};
    for (int i = 0; i < 4; i++) {
        attn_params bad = attn_params_make(1, 1, 64, ref[i].d, 0.1);
        v3_use_step(ref[i].step);
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
                    v3_use_step(step);
                    fa_ptrs x = v3_ptrs(q, kk, v, o, L);
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
                    v3_wait_or_die("v3-time");
                    if (fa_copy_to_host(h2, o, nq * es)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    if (step == g_first_step) memcpy(h1, h2, nq * es);
                    diff = maxdiff_bf16(h1, h2, nq);
                    /* repeat: bitwise identical to the run just checked */
                    fa_ptrs x1 = v3_ptrs(q, kk, v, o1, L);
                    if (fa_forward(3, FA_BF16, &p, &x1, NULL))
                        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
                    v3_wait_or_die("v3-time (repeat)");
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
            v3_problem_init(&g, &t, FA_BF16, seed + 2 * c + (uint64_t)(d / 128));
            for (int step = 1; step <= FA_V3_STEPS; step++) {
                if (!g_step_on[step]) continue;
                char name[64];
                snprintf(name, sizeof name, "v3-%s step %d d %d", t.name, step, d);
                verdict v;
                int f = v3_run_case(&g, step, &v, 1, name);
                if (!f) printf("PASS %s: err O %.2e\n", name, v.errO);
                fails += f;
            }
            v3_problem_free(&g);
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
        v3_use_step(step);
        fa_ptrs xp = v3_ptrs(q, k, v, o, L);
        if (fa_forward(3, FA_BF16, &p, &xp, NULL)) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
        v3_wait_or_die("v3-one");
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
    v3_use_step(FA_V3_STEPS);
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

/*
 * stage4_main.c -- Stage 4's host program: the CUDA forward kernels of
 * kernels/stage4_forward.cu, checked against the CPU fp64 reference of
 * stage 1 and timed.
 *
 * What it adds over stage 3: nothing new in the algorithm; the tiled forward
 * now runs on a GPU, on the CUDA cores in fp32 arithmetic (version 1) and on
 * the tensor cores (version 2, fp16/bf16), beside a materialized GPU
 * baseline (version 0). This file is plain C: it calls the extern "C" launchers and
 * runtime helpers of kernels/fa_gpu.h and never includes a CUDA header.
 *
 * Build and run:   make stage4 && ./stage4
 *   ./stage4                          real input (all-MiniLM-L6-v2, (1,12,148,32)) and two
 *                                     random shapes; every version, fp32, fp16 and bf16
 *   ./stage4 --kernel 1 --dtype bf16 --random --n 4096 --d 128 --heads 4 --repeats 20
 *   ./stage4 --sweep tests            the GPU test suite: PASS/FAIL lines (make gpu-test)
 *   ./stage4 --csv FILE               also write every row as CSV (with provenance)
 * Without a GPU it prints one line saying so and exits 0.
 *
 * What it prints, per (shape, dtype, version): the error of O and L against
 * the fp64 reference computed on the same inputs rounded to the dtype,
 * unwritten outputs (outputs are poisoned with NaN before every launch),
 * the median time over --repeats launches (CUDA events), TFLOP/s with
 * FLOPs = 4 B H N^2 d, and the modeled slow-memory bytes. Then the checks:
 *   fp32        max |O - O_ref| / max |O_ref| <= 1e-5, and the same for L
 *               (max |L - L_ref| / max(1, max |L_ref|))
 *   fp16, bf16  versions 1 and 2: O error <= 2 x version 0's O error on the
 *               same inputs (plus 1e-6: when both are exact, e.g. N = 1),
 *               and every version within a sanity bound (fp16 1e-2, bf16 5e-2)
 *   every dtype no unwritten (NaN) output; the bytes model equals stage 1's
 *               and stage 3's element counts.
 * Exit 0 only when every check passes; 2 on a bad flag or an unsupported
 * shape (one line).
 *
 * Cost: the CPU reference is 4 B H N^2 d fp64 FLOPs per dtype (seconds for
 * N = 4096 on one head); version 0 needs 2 B H N^2 elements of GPU memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"
#include "fa_gpu.h"

static const char USAGE[] =
    "stage4: the attention forward on a CUDA GPU (version 0 materialized, 1 tiled on the CUDA\n"
    "cores, 2 tiled on the tensor cores), "
    "checked against the CPU fp64 reference (stage 1)\n"
    "usage: ./stage4 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2, every head) and two random shapes,\n"
    "every version, fp32, fp16 and bf16. --sweep tests runs the GPU test suite.\n"
    "Without a GPU: one line saying so, exit 0.";

typedef struct {
    double errO, errL;      /* max abs error / max |ref| (L: / max(1, max |ref|)) */
    double normO;           /* ||O - ref||_2 / ||ref||_2 */
    size_t unwritten;       /* non-finite entries of O and L after the launch */
    double ms;              /* median time, 0 when not timed */
    int ran;                /* 0 when the version does not support the shape */
} result;

static double max_abs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* max |got - ref| / denom, with NaN counted as infinite error */
static double scaled_err(const double *got, const double *ref, size_t n, double denom)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (isnan(e)) return INFINITY;
        m = fmax(m, e);
    }
    return m / denom;
}

static int parse_dtype(const char *s)
{
    if (!strcmp(s, "fp32")) return FA_FP32;
    if (!strcmp(s, "fp16")) return FA_FP16;
    if (!strcmp(s, "bf16")) return FA_BF16;
    fatal(EXIT_BAD_INPUT, "--dtype %s: stage 4 runs fp32, fp16 or bf16", s);
}

/* Stage 4 runs the unmasked problem with seqlen_q = seqlen_k = N and
 * H_kv = H; its (B, H, N, d) view of an attn_problem. */
typedef struct { int B, H, N, d; } attn_shape;
static attn_shape shape_of(const attn_problem *p)
{
    attn_shape s = {p->params.B, p->params.H, p->params.seqlen_q, p->params.d};
    return s;
}
static size_t shape_rows(attn_shape s) { return (size_t)s.B * s.H * s.N; }
static size_t shape_numel(attn_shape s) { return shape_rows(s) * (size_t)s.d; }
static attn_params params_of(attn_shape s, double scale)
{
    return attn_params_make(s.B, s.H, s.N, s.d, scale);
}

#define GPU_TRY(call)                                                            \
    do {                                                                         \
        if ((call) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());      \
    } while (0)

/* The problem in one dtype: inputs rounded to it (host, fp64 copies for the
 * reference) and uploaded; the fp64 reference on the rounded inputs. */
typedef struct {
    attn_shape s;
    int dtype;
    double *O_ref, *L_ref;
    void *dQ, *dK, *dV, *dO;
    float *dL;
    double maxO, maxL;
} gpu_problem;

static void gpu_problem_init(gpu_problem *g, const attn_problem *p, int dtype, double scale)
{
    attn_shape s = shape_of(p);
    size_t n = shape_numel(s), rows = shape_rows(s), es = fa_dtype_bytes(dtype);
    g->s = s;
    g->dtype = dtype;
    void *h = xmalloc(n, es, "dtype staging buffer");
    double *r[3];
    const double *src[3] = {p->Q, p->K, p->V};
    void **dst[3] = {&g->dQ, &g->dK, &g->dV};
    for (int t = 0; t < 3; t++) {
        r[t] = xmalloc(n, sizeof(double), "rounded input");
        fa_host_from_double(h, src[t], n, dtype);
        fa_host_to_double(r[t], h, n, dtype);   /* what the GPU sees, exactly */
        *dst[t] = fa_malloc(n * es);
        if (!*dst[t]) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
        GPU_TRY(fa_copy_to_device(*dst[t], h, n * es));
    }
    g->dO = fa_malloc(n * es);
    g->dL = fa_malloc(rows * sizeof(float));
    if (!g->dO || !g->dL) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    g->O_ref = xmalloc(n, sizeof(double), "O_ref");
    g->L_ref = xmalloc(rows, sizeof(double), "L_ref");
    attn_params ap = params_of(s, scale);
    naive_attention_all_heads(&ap, r[0], r[1], r[2], NULL, g->O_ref, g->L_ref, NULL, NULL, NULL,
                              NULL, NULL, NULL, NULL);
    g->maxO = max_abs(g->O_ref, n);
    g->maxL = fmax(1.0, max_abs(g->L_ref, rows));
    for (int t = 0; t < 3; t++) free(r[t]);
    free(h);
}

static void gpu_problem_free(gpu_problem *g)
{
    fa_free(g->dQ); fa_free(g->dK); fa_free(g->dV); fa_free(g->dO); fa_free(g->dL);
    free(g->O_ref);
    free(g->L_ref);
}

/* One version on one problem: poison, launch, check every output written,
 * compare; then time `repeats` launches (0: no timing). */
static result run_version(const gpu_problem *g, int kernel, double scale, int repeats)
{
    result res = {0};
    attn_shape s = g->s;
    attn_params ap = params_of(s, scale);
    if (fa_check_supported(FA_FORWARD, kernel, g->dtype, &ap) != 0) return res;
    size_t n = shape_numel(s), rows = shape_rows(s), es = fa_dtype_bytes(g->dtype);
    size_t wsb = fa_workspace_bytes(FA_FORWARD, kernel, g->dtype, &ap);
    void *ws = NULL;
    if (wsb && !(ws = fa_malloc(wsb))) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    GPU_TRY(fa_poison(g->dO, n * es));
    GPU_TRY(fa_poison(g->dL, rows * sizeof(float)));
    fa_ptrs x = {0};
    x.q = g->dQ; x.k = g->dK; x.v = g->dV; x.o = g->dO; x.softmax_lse = g->dL;
    x.workspace = ws; x.workspace_bytes = wsb;
    GPU_TRY(fa_forward(kernel, g->dtype, &ap, &x, NULL));
    GPU_TRY(fa_synchronize());
    void *h = xmalloc(n, es, "O from the GPU");
    float *hl = xmalloc(rows, sizeof(float), "L from the GPU");
    double *O = xmalloc(n, sizeof(double), "O"), *L = xmalloc(rows, sizeof(double), "L");
    GPU_TRY(fa_copy_to_host(h, g->dO, n * es));
    GPU_TRY(fa_copy_to_host(hl, g->dL, rows * sizeof(float)));
    fa_host_to_double(O, h, n, g->dtype);
    for (size_t i = 0; i < rows; i++) L[i] = hl[i];
    res.ran = 1;
    res.unwritten = count_nonfinite(O, n, false) + count_nonfinite(L, rows, false);
    res.errO = scaled_err(O, g->O_ref, n, g->maxO == 0 ? 1 : g->maxO);
    res.errL = scaled_err(L, g->L_ref, rows, g->maxL);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        d2 += (O[i] - g->O_ref[i]) * (O[i] - g->O_ref[i]);
        r2 += g->O_ref[i] * g->O_ref[i];
    }
    res.normO = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (repeats > 0)
        GPU_TRY(fa_time(FA_FORWARD, kernel, g->dtype, &ap, &x, 1, 0, repeats, 1, &res.ms));
    fa_free(ws);
    free(h); free(hl); free(O); free(L);
    return res;
}

/* The bytes model of the versions (fa_model_bytes) against stage 1's and stage 3's
 * element counts (same tensors; L counted in fp32 bytes, the rest in the
 * dtype): 1 when they agree. */
static int model_matches_counts(int dtype, attn_shape s)
{
    double es = (double)fa_dtype_bytes(dtype), bh = (double)s.B * s.H;
    attn_params ap = params_of(s, 1.0);
    attn_params one = params_of((attn_shape){1, 1, s.N, s.d}, 1.0);   /* one head */
    /* stage 1 counts 4 N^2 + 4 N d + N elements: S and P written and read
     * (N^2 each way), Q, K, V read and O written (4 N d), L written (N).
     * Version 0 keeps S in fp32 (4 bytes), P in the dtype, L in fp32. */
    double nn = (double)s.N * s.N;
    double qkvo = (double)naive_forward_io_formula(&one) - 4 * nn - s.N;
    double v0 = bh * (es * qkvo + 4.0 * 2 * nn + es * 2 * nn + 4.0 * s.N);
    if (fa_model_bytes(FA_FORWARD, 0, dtype, &ap) != v0) return 0;
    for (int k = 1; k < fa_num_versions(FA_FORWARD); k++) {
        uint64_t el = flash_forward_io_formula(&one, fa_block_rows(FA_FORWARD, k, s.d),
                                               fa_block_cols(FA_FORWARD, k, s.d));
        if (fa_model_bytes(FA_FORWARD, k, dtype, &ap) !=
            bh * (es * (double)(el - (uint64_t)s.N) + 4.0 * s.N))
            return 0;
    }
    return 1;
}

/* The checks of one (problem, dtype): returns the number failed and prints
 * either the table lines (verbose) or PASS/FAIL lines (tests). */
static int check_dtype(const result *r, int nk, const int *kernels, int dtype, const char *name,
                       bool tests, bool model_ok)
{
    int bad = 0;
    char why[256] = "";
    const result *v0 = NULL;
    for (int i = 0; i < nk; i++)
        if (kernels[i] == 0 && r[i].ran) v0 = &r[i];
    for (int i = 0; i < nk; i++) {
        if (!r[i].ran) continue;
        if (r[i].unwritten) {
            bad++;
            snprintf(why, sizeof why, "v%d left %zu outputs unwritten", kernels[i], r[i].unwritten);
        }
        if (dtype == FA_FP32 && (r[i].errO > 1e-5 || r[i].errL > 1e-5)) {
            bad++;
            snprintf(why, sizeof why, "v%d fp32 error O %.3g, L %.3g > 1e-5", kernels[i],
                     r[i].errO, r[i].errL);
        }
        double sanity = dtype == FA_FP16 ? 1e-2 : 5e-2;
        if (dtype != FA_FP32 && (r[i].errO > sanity || r[i].errL > sanity)) {
            bad++;
            snprintf(why, sizeof why, "v%d %s error O %.3g, L %.3g > %.0e", kernels[i],
                     fa_dtype_name(dtype), r[i].errO, r[i].errL, sanity);
        }
        if (dtype != FA_FP32 && v0 && kernels[i] != 0 && r[i].errO > 2 * v0->errO + 1e-6) {
            bad++;
            snprintf(why, sizeof why, "v%d error %.3g > 2 x v0 error %.3g", kernels[i], r[i].errO,
                     v0->errO);
        }
    }
    if (!model_ok) {
        bad++;
        snprintf(why, sizeof why, "bytes model differs from the stage 1/3 element counts");
    }
    if (tests) {
        if (bad) {
            printf("FAIL %s: %s\n", name, why);
        } else {
            char errs[160] = "";
            size_t at = 0;
            for (int i = 0; i < nk && at < sizeof errs - 32; i++)
                if (r[i].ran)
                    at += (size_t)snprintf(errs + at, sizeof errs - at, "%sv%d err %.2e",
                                           at ? ", " : "", kernels[i], r[i].errO);
            printf("PASS %s (%s)\n", name, errs);
        }
    } else if (bad) {
        printf("  check failed: %s\n", why);
    }
    return bad;
}

static void print_row(FILE *csv, const char *device, const attn_problem *p, int dtype,
                      int kernel, const result *r, bool quiet)
{
    attn_shape s = shape_of(p);
    double flops = 4.0 * s.B * s.H * (double)s.N * s.N * s.d;
    attn_params ap = params_of(s, 1.0);
    double mb = fa_model_bytes(FA_FORWARD, kernel, dtype, &ap);
    if (!r->ran) {
        if (!quiet) printf("  v%d  %-5s  (not run: %s)\n", kernel, fa_dtype_name(dtype), fa_error_string());
        return;
    }
    if (!quiet)
        printf("  v%d  %-5s  %11.3e  %11.3e  %11.3e  %9zu  %10.4f  %8.3f  %11.4g\n", kernel,
               fa_dtype_name(dtype), r->errO, r->normO, r->errL, r->unwritten, r->ms,
               r->ms > 0 ? flops / (r->ms * 1e-3) / 1e12 : 0.0, mb);
    if (csv)
        fprintf(csv, "\"%s\",%s,%d,%d,%d,%d,%d,%s,%.6e,%.6e,%.6e,%zu,%.6f,%.4f,%.0f\n", device,
                p->source[0] == 'r' ? "random" : "real", s.B, s.H, s.N, s.d, kernel,
                fa_dtype_name(dtype), r->errO, r->normO, r->errL, r->unwritten, r->ms,
                r->ms > 0 ? flops / (r->ms * 1e-3) / 1e12 : 0.0, mb);
}

/* Every requested dtype and version on one problem. Returns checks failed. */
static int run_problem(const attn_problem *p, const options *opt, const int *dtypes, int nd,
                       const int *kernels, int nk, FILE *csv, const char *device, bool tests,
                       int repeats)
{
    attn_shape s = shape_of(p);
    double scale = effective_scale(opt, s.d);
    int bad = 0;
    if (!tests)
        printf("\n%s: shape (B, H, N, d) = (%d, %d, %d, %d), softmax_scale = %.6g\n"
               "  ver dtype   err O (max)  err O (norm)       err L  unwritten  time [ms]"
               "  TFLOP/s  model bytes\n",
               p->source, s.B, s.H, s.N, s.d, scale);
    for (int t = 0; t < nd; t++) {
        gpu_problem g;
        gpu_problem_init(&g, p, dtypes[t], scale);
        result r[16];
        for (int i = 0; i < nk; i++) {
            r[i] = run_version(&g, kernels[i], scale, repeats);
            print_row(csv, device, p, dtypes[t], kernels[i], &r[i], tests);
        }
        char name[128];
        snprintf(name, sizeof name, "stage4 %s (%d,%d,%d,%d)", fa_dtype_name(dtypes[t]), s.B, s.H,
                 s.N, s.d);
        bad += check_dtype(r, nk, kernels, dtypes[t], name, tests, model_matches_counts(dtypes[t], s));
        gpu_problem_free(&g);
    }
    return bad;
}

static void random_problem(const options *opt, attn_problem *p, int B, int H, int N, int d,
                           uint64_t seed)
{
    options o = *opt;
    o.batch = B; o.heads = H; o.N = N; o.d = d; o.seed = seed;
    o.random = true;
    load_problem(&o, p);
}

/* --sweep tests: the GPU test suite (make gpu-test). Fresh random inputs
 * every run unless --seed is given; the seed is printed to replay. */
static int run_tests(const options *opt, int sm_count, const char *device)
{
    uint64_t seed = (opt->given & OPT_SEED) ? opt->seed : fresh_seed();
    printf("stage4 GPU tests on %s; seed %llu (replay: ./stage4 --sweep tests --seed %llu)\n",
           device, (unsigned long long)seed, (unsigned long long)seed);
    /* B H > SM count with small N (cheap reference): */
    int bh_big = sm_count + 18;
    const int shapes[][4] = {
        {1, 1, 1, 64},    {1, 2, 17, 64},   {1, 1, 113, 64},  {1, 1, 1023, 64}, {1, 1, 4097, 64},
        {1, 2, 300, 16},  {1, 2, 300, 32},  {1, 2, 300, 80},  {1, 2, 300, 96},  {1, 2, 300, 128},
        {1, 1, 1023, 128}, {2, 3, 129, 20}, {1, 1, 65, 24},   {1, 2, 200, 48},  {1, 1, 200, 112},
        {2, bh_big / 2, 40, 32}, {1, bh_big, 70, 128},
    };
    const int dtypes[] = {FA_FP32, FA_FP16, FA_BF16};
    const int kernels[] = {0, 1, 2};
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        attn_problem p;
        random_problem(opt, &p, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], seed + i);
        bad += run_problem(&p, opt, dtypes, 3, kernels, 3, NULL, device, true, 0);
        free_problem(&p);
        fflush(stdout);
    }
    return bad;
}

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_SCALE |
                      OPT_INPUTS | OPT_CSV | OPT_DTYPE | OPT_FP32 | OPT_FP16 | OPT_BF16 |
                      OPT_KERNEL | OPT_REPEATS | OPT_SWEEP,
                  USAGE, &opt);
    if (opt.sweep && strcmp(opt.sweep, "tests"))
        fatal(EXIT_BAD_INPUT, "--sweep %s: stage 4 knows only --sweep tests", opt.sweep);
    int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16}, nd = 3;
    if (opt.given & OPT_DTYPE) {
        dtypes[0] = parse_dtype(opt.dtype);
        nd = 1;
    }
    int kernels[16], nk = 0;
    if (opt.kernel >= 0) {
        if (!fa_version(FA_FORWARD, opt.kernel))
            fatal(EXIT_BAD_INPUT, "--kernel %d: versions 0 to %d exist", opt.kernel,
                  fa_num_versions(FA_FORWARD) - 1);
        kernels[nk++] = opt.kernel;
    } else {
        for (int k = 0; k < fa_num_versions(FA_FORWARD) && nk < 16; k++) kernels[nk++] = k;
    }
    /* --kernel K without --dtype: the dtypes K takes. */
    if (opt.kernel >= 0 && !(opt.given & OPT_DTYPE)) {
        int n2 = 0;
        for (int t = 0; t < nd; t++)
            if (fa_version(FA_FORWARD, opt.kernel)->dtypes & FA_DT(dtypes[t])) dtypes[n2++] = dtypes[t];
        nd = n2;
    }
    /* A shape or dtype the chosen version cannot run is a bad input (exit
     * 2), with or without a GPU. */
    attn_params probe = attn_params_make(1, 1, 64, 64, 0.125);
    for (int t = 0; t < nd && opt.kernel >= 0; t++)
        if (fa_check_problem(FA_FORWARD, opt.kernel, dtypes[t], &probe) != 0)
            fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    bool shape_given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM);
    if (shape_given && opt.kernel >= 0)
        for (int t = 0; t < nd; t++) {
            attn_params ap = attn_params_make(opt.batch, opt.heads, opt.N, opt.d, 1.0);
            if (fa_check_problem(FA_FORWARD, opt.kernel, dtypes[t], &ap) != 0)
                fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
        }

    if (fa_device_count() == 0) {
        printf("stage4: no CUDA GPU here; nothing to run (the GPU stages need one)\n");
        return 0;
    }
    char device[256];
    int sm_count = 0;
    GPU_TRY(fa_device_info(device, sizeof device, &sm_count));
    if (opt.sweep) {
        int bad = run_tests(&opt, sm_count, device);
        return bad ? EXIT_CHECK_FAILED : 0;
    }
    int repeats = (opt.given & OPT_REPEATS) ? opt.repeats : 10;
    FILE *csv = opt.csv ? csv_open(opt.csv, argc, argv,
                                   "device,input,B,H,N,d,kernel,dtype,err_O_maxabs_over_maxref,"
                                   "err_O_norm,err_L,unwritten,median_ms,tflops,model_bytes")
                        : NULL;
    /* A copy of the tree without .git (the GPU machine) names its commit here. */
    if (csv && getenv("FA_COMMIT")) fprintf(csv, "# source commit (FA_COMMIT): %s\n", getenv("FA_COMMIT"));
    printf("stage4: CUDA forward on %s\n", device);
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype:\n"
           "    err O (max) = max|O - O_ref| / max|O_ref|, err O (norm) = ||O - O_ref|| / ||O_ref||,\n"
           "    err L = max|L - L_ref| / max(1, max|L_ref|); unwritten = NaN left of the poison\n"
           "  time: median of %d launches (CUDA events); FLOPs = 4 B H N^2 d; model bytes: "
           "kernels/fa_gpu.h\n", repeats);
    int bad = 0;
    if (opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS)) {
        attn_problem p;
        load_problem(&opt, &p);
        if (p.params.seqlen_k != p.params.seqlen_q || p.params.H_kv != p.params.H)
            fatal(EXIT_BAD_INPUT, "K, V of %d heads and %d keys against Q of %d heads and %d rows: "
                  "stage 4 runs seqlen_k = seqlen_q and H_kv = H", p.params.H_kv,
                  p.params.seqlen_k, p.params.H, p.params.seqlen_q);
        for (int t = 0; t < nd && opt.kernel >= 0; t++) {   /* e.g. --q files with d = 256 */
            attn_params ap = params_of(shape_of(&p), 1.0);
            if (fa_check_problem(FA_FORWARD, opt.kernel, dtypes[t], &ap) != 0)
                fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
        }
        if ((double)p.params.seqlen_q * p.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--n %d: the CPU reference builds N x N matrices; use N <= 8000",
                  p.params.seqlen_q);
        bad += run_problem(&p, &opt, dtypes, nd, kernels, nk, csv, device, false, repeats);
        free_problem(&p);
    } else {
        attn_problem p;
        load_problem(&opt, &p);   /* the real input */
        bad += run_problem(&p, &opt, dtypes, nd, kernels, nk, csv, device, false, repeats);
        free_problem(&p);
        const int extra[2][4] = {{2, 4, 1000, 64}, {1, 2, 1500, 128}};
        for (int i = 0; i < 2; i++) {
            random_problem(&opt, &p, extra[i][0], extra[i][1], extra[i][2], extra[i][3], opt.seed + i);
            bad += run_problem(&p, &opt, dtypes, nd, kernels, nk, csv, device, false, repeats);
            free_problem(&p);
        }
    }
    if (csv) fclose(csv);
    printf("\nchecks: fp32 err O (max) and err L <= 1e-5; fp16/bf16 err O (max) of v1, v2 <= 2 x v0's; "
           "every output written; bytes model == stage 1/3 counts\n");
    printf("stage4: %s\n", bad ? "FAILED" : "all checks passed");
    return bad ? EXIT_CHECK_FAILED : 0;
}

/*
 * stage7_ring.c -- Stage 7: one sequence across several GPUs (ring
 * attention, also called context parallelism), on NCCL.
 *
 * What it adds over stages 4-6: nothing inside a kernel. Each GPU keeps its
 * own rows of Q (and of O, L, dO, dQ) and the K/V shards travel around a
 * ring of GPUs; at every step a GPU runs the project's own forward kernel
 * (fa_forward) on its query rows against the shard it holds, while it passes
 * that shard on; the partial results (O_i, L_i) are joined by the merge rule
 * of core/merge.h, the online softmax's rescaling applied to whole results.
 * The backward runs the same ring with the merged O and L: dQ sums where it
 * is, the dK, dV sums travel with their shard and come home after the last
 * step. Under the causal mask each GPU holds two mirrored chunks (src/cpu/ring.h,
 * "zigzag") so that all do the same work, and shard pairs the mask hides
 * entirely are never launched. The plan (which rows, which shard, which
 * window) is src/cpu/ring.c, tested on the CPU in fp64 first (tests/cpu/test_ring.c).
 *
 * One process drives G GPUs: one NCCL communicator (ncclCommInitAll), one
 * compute stream and one communication stream per GPU. --virtual runs G
 * shards on one GPU instead (streams and device-to-device copies in place of
 * NCCL: the same schedule and events), so that the logic runs on one GPU, and
 * with G > 2 (the travelling accumulators' middle hops) on a two-GPU machine.
 *
 * Build and run:   make stage7 && ./stage7 --gpus 2
 *   ./stage7 --gpus 2                 real input and two random problems, causal and
 *                                     not: ring against the single-GPU kernels
 *   ./stage7 --gpus 2 --random --n 4096 --heads 8 --d 128 --causal --dtype bf16
 *   ./stage7 --gpus 4 --virtual       four shards on one GPU
 *   ./stage7 --sweep tests            the GPU test suite (PASS/FAIL/SKIP lines)
 *   ./stage7 --sweep scale --csv data/gpu/ring.csv [--budget 120]
 *                                     throughput of G GPUs against one, N doubling
 *                                     until the time or memory budget ends
 * Without a GPU: one line saying so, exit 0. Fewer GPUs than --gpus: one
 * line, exit 2. Bad flags: one line, exit 2, before any work.
 *
 * The checks, per problem (inputs rounded to the dtype; fp64 reference of
 * stage 1 on the rounded inputs; u = unit roundoff: 2^-8 bf16, 2^-11 fp16,
 * 2^-24 fp32):
 *   forward   err O (max|O - O_ref| / max|V|) of the ring <= 2 x the single-GPU
 *             kernel's + u: the ring rounds each partial O to the dtype once
 *             more, and a partial is a convex combination of V's rows, so that
 *             rounding moves the merged row by at most u max|V|;
 *             err L (/ max(1, max|L_ref|)) <= 2 x single's + 4 x 2^-24 (L is
 *             fp32 on both paths; the merge adds a few roundings);
 *   backward  err dQ, dK, dV (/ max|ref|) <= 2 x single's + G u (each of the
 *             G partials of a sum is rounded to the dtype once);
 *   G = 1     O, L (and dQ, dK, dV where the backward is deterministic) equal
 *             to the single-GPU kernels' bit for bit;
 *   always    no output left unwritten (all are poisoned with NaN first); the
 *             bytes each GPU sent equal the closed forms of src/cpu/ring.h.
 * The factor 2 is stage 4's rule for a kernel against the reference kernel.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common.h"
#include "fa_gpu.h"
#include "gpu_host.h"
#include "ring.h"
#include "stage7_ring.h"
#include "stage7_schedule.h"
#include "stage7_checks.h"
#include "stage7_timing.h"

static const char USAGE[] =
    "stage7: one sequence across G GPUs (ring attention on NCCL): each GPU keeps its query\n"
    "rows, the K/V shards travel around the ring, partial results are merged with the online\n"
    "softmax's rule; forward and backward, checked against the single-GPU kernels.\n"
    "usage: ./stage7 [--gpus G] [--virtual] [options]\n"
    "  --sweep tests   the GPU test suite;  --sweep scale  the measurement (--csv FILE)\n"
    "  --kernel K      forward version (default 2; 1 for fp32), backward the same number\n"
    "With no problem flags: the real input and two random problems, causal and not.\n"
    "Without a GPU: one line saying so, exit 0.";

static int parse_dtype(const char *s)
{
    if (!strcmp(s, "fp32")) return FA_FP32;
    if (!strcmp(s, "fp16")) return FA_FP16;
    if (!strcmp(s, "bf16")) return FA_BF16;
    fatal(EXIT_BAD_INPUT, "--dtype %s: stage 7 runs fp32, fp16 or bf16", s);
}

static void random_problem(const options *opt, attn_problem *p, int B, int H, int N, int d, uint64_t seed_of_case)
{
    options o = *opt;
    o.batch = B; o.heads = H; o.N = N; o.d = d; o.seed = seed_of_case;
    o.random = true;
    o.given |= OPT_RANDOM;
    load_problem(&o, p);
}

/* Exit 2 with one line when the ring of G ranks cannot run problem p's
 * forward in dtype with version kernel (before any GPU is looked for). */
static void require_job(const attn_params *p, int G, int dtype, int kernel)
{
    ring_job j;
    char why[256], bwhy[256];
    if (job_make(&j, p, G, dtype, kernel, false, why, bwhy, sizeof why)) fatal(EXIT_BAD_INPUT, "%s", why);
}

/* --sweep scale on G ranks: the measurement, rows to --csv. */
static int run_scale(const options *opt, int G, int dtype, int kernel, int argc, char **argv)
{
    ring_ctx *x = xmalloc(1, sizeof(ring_ctx), "ring context");
    ctx_init(x, G, opt->virt);
    provenance pv;
    provenance_of(&pv, argc, argv, 0);
    FILE *csv = csv_open(opt->csv, argc, argv,
                         "gpu,driver,cuda,nccl,commit,date,command,transport,gpus,causal,dtype,kernel,"
                         "pass,B,H,N,d,repeats,single_ms,ring_ms,compute_only_ms,comm_only_ms,"
                         "hidden_share,single_tflops,ring_tflops,efficiency,bytes_sent_per_gpu,bytes_formula");
    scale_sweep(x, opt, dtype, kernel, opt->budget, &pv, csv);
    csv_close(csv);
    ctx_free(x);
    free(x);
    return 0;
}

/* Random problems, causal and not, at every G of gs: the first two of the
 * table, or all of them for --sweep tests (seed + i draws problem i). Under
 * the mask N must split into 2G chunks. */
static void check_random_problems(ring_ctx **ctx, const options *opt, const int *gs, int ng, int G, int dtype,
                                  int kernel, bool tests, uint64_t seed)
{
    attn_problem p;
    struct { int B, H, N, d, dtype, kernel, causal; } cases[] = {
        {2, 4, 1024, 64, dtype, kernel, 1},
        {1, 2, 768, 128, dtype, kernel, 0},
        {1, 3, 8 * MAX_G * 3, 64, FA_FP16, 2, 1},
        {1, 2, 384, 64, FA_FP32, 1, 1},
        {1, 2, 2 * MAX_G * 105, 32, FA_FP32, 1, 0},
        {1, 1, 2 * MAX_G, 16, FA_BF16, 2, 1},   /* one row per chunk at G = 8 */
    };
    int nc = tests ? (int)(sizeof cases / sizeof cases[0]) : 2;
    for (int i = 0; i < nc; i++) {
        if (cases[i].kernel == 0 && G > 1 && !opt->virt) continue;
        random_problem(opt, &p, cases[i].B, cases[i].H, cases[i].N, cases[i].d, seed + i);
        check_all(ctx, opt->virt, gs, ng, &p, "random", cases[i].dtype, cases[i].kernel, cases[i].causal);
        free_problem(&p);
    }
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_CAUSAL |
                      OPT_INPUTS | OPT_DO | OPT_CSV | OPT_DTYPE | OPT_FP32 | OPT_FP16 | OPT_BF16 | OPT_KERNEL |
                      OPT_REPEATS | OPT_SWEEP | OPT_GPUS | OPT_VIRTUAL | OPT_BUDGET,
                  USAGE, &opt);
    bool tests = opt.sweep && !strcmp(opt.sweep, "tests"), scale = opt.sweep && !strcmp(opt.sweep, "scale");
    if (opt.sweep && !tests && !scale)
        fatal(EXIT_BAD_INPUT, "--sweep %s: stage 7 knows --sweep tests and --sweep scale", opt.sweep);
    if (scale && !opt.csv) fatal(EXIT_BAD_INPUT, "--sweep scale: give --csv FILE for the measurements");
    if (opt.csv && !scale) fatal(EXIT_BAD_INPUT, "--csv: only --sweep scale writes one");
    if ((opt.given & OPT_REPEATS) && (opt.repeats < 1 || opt.repeats > MAX_REPEATS))
        fatal(EXIT_BAD_INPUT, "--repeats %d: out of range [1, %d]", opt.repeats, MAX_REPEATS);
    int dtype = opt.given & OPT_DTYPE ? parse_dtype(opt.dtype) : FA_BF16;
    int kernel = opt.kernel >= 0 ? opt.kernel : dtype == FA_FP32 ? 1 : 2;
    if (!fa_version(FA_FORWARD, kernel))
        fatal(EXIT_BAD_INPUT, "--kernel %d: forward versions 0 to %d exist", kernel,
              fa_version_limit(FA_FORWARD) - 1);
    attn_params probe = attn_params_make(1, 1, 64, 64, 0.125);
    if (fa_check_problem(FA_FORWARD, kernel, dtype, &probe)) fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    const bool files = opt.given & (OPT_INPUTS | OPT_DO);   /* --q --k --v --do: the problem read from files */
    bool problem_given = files || (opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM));
    if (scale && files)
        fatal(EXIT_BAD_INPUT, "--sweep scale makes its own inputs on the GPUs; --q --k --v --do are for the checks");
    if (opt.gpus > 1 && kernel == 0 && !opt.virt)
        fatal(EXIT_BAD_INPUT, "--kernel 0: version 0 keeps one cuBLAS handle for one GPU; use --kernel 1 "
              "or 2, or --virtual");
    /* A problem that the flags or files describe is read and checked before
     * any GPU is looked for: a bad file is a bad input whether or not there
     * is a GPU to run it on. */
    attn_problem given = {0};
    if (files) {
        load_problem(&opt, &given);
        ring_shape_check(&given.params);
        if ((double)given.params.seqlen_q * given.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--q %s: the CPU reference builds N x N matrices; use N <= 8000",
                  opt.q);
        attn_params p = given.params;
        p.window_size_left = -1;
        p.window_size_right = opt.causal ? 0 : -1;
        require_job(&p, opt.gpus ? opt.gpus : 1, dtype, kernel);
    } else if (problem_given && !scale) {
        attn_params p = attn_params_make(opt.batch, opt.heads, opt.N, opt.d, 1.0);
        attn_params_causal(&p, opt.causal);
        require_job(&p, opt.gpus ? opt.gpus : 1, dtype, kernel);
    }
    if (scale && opt.gpus == 1) fatal(EXIT_BAD_INPUT, "--sweep scale: needs --gpus 2 or more (it sets G GPUs against one)");
    if (scale) {   /* the first N of the sweep; the others are its doublings */
        int d = opt.given & OPT_D ? opt.d : 128, N = opt.given & OPT_N ? opt.N : 4096;
        attn_params p = attn_params_make(opt.given & OPT_BATCH ? opt.batch : 1, opt.given & OPT_HEADS ? opt.heads : 16,
                                         N, d, 1.0);
        attn_params_causal(&p, true);   /* the stricter layout: 2G chunks */
        require_job(&p, opt.gpus ? opt.gpus : 2, dtype, kernel);
    }

    int have = fa_device_count();
    if (have == 0) {
        if (tests) printf("SKIP stage7 GPU tests: no CUDA GPU here\n");
        else printf("stage7: no CUDA GPU here; nothing to run (SKIP: stage 7 needs one GPU, or two for NCCL)\n");
        return 0;
    }
    int G = opt.gpus ? opt.gpus : (have < MAX_G ? have : MAX_G);
    if (!opt.virt && G > have)
        fatal(EXIT_BAD_INPUT, "--gpus %d: only %d GPU%s here (--virtual runs %d shards on one GPU)", G, have,
              have == 1 ? "" : "s", G);
    if (scale && G < 2) fatal(EXIT_BAD_INPUT, "--sweep scale: one GPU here; give --gpus 2 --virtual to run the ring on it");

    char info[256];
    int nv = 0;
    FA(fa_set_device(0));
    FA(fa_device_info(info, sizeof info, NULL));
    ncclGetVersion(&nv);
    printf("stage7: ring attention, G = %d %s; GPU 0: %s; NCCL version code %d\n", G,
           opt.virt ? "virtual ranks on GPU 0 (copies, no NCCL)" : "GPUs (NCCL)", info, nv);
    ring_ctx *ctx[MAX_G + 1] = {0};

    if (scale) return outputs_finish(run_scale(&opt, G, dtype, kernel, argc, argv));

    uint64_t seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    stage7_checks_seed(seed);
    printf("stage7: seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype: O / max|V|,\n"
           "  L / max(1, max|L|), dQ dK dV / max|ref|; bounds: 2 x the single-GPU kernel's error + u (O),\n"
           "  + 4 x 2^-24 (L), + G u (gradients), u = the dtype's unit roundoff; G = 1 bitwise\n");
    int gs[2] = {1, G}, ng = G > 1 ? 2 : 1;
    if (files) {
        check_all(ctx, opt.virt, gs, ng, &given, "input", dtype, kernel, opt.causal);
        free_problem(&given);
    } else if (problem_given) {
        attn_problem p;
        load_problem(&opt, &p);
        if ((double)p.params.seqlen_q * p.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--n %d: the CPU reference builds N x N matrices; use N <= 8000",
                  p.params.seqlen_q);
        check_all(ctx, opt.virt, gs, ng, &p, "random", dtype, kernel, opt.causal);
        free_problem(&p);
    } else {
        attn_problem p;
        options o = opt;
        o.given &= ~OPT_RANDOM;
        load_problem(&o, &p);   /* the real input */
        for (int causal = 0; causal <= 1; causal++)
            check_all(ctx, opt.virt, gs, ng, &p, "real input", dtype, kernel, causal);
        free_problem(&p);
        check_random_problems(ctx, &opt, gs, ng, G, dtype, kernel, tests, seed);
    }
    for (int g = 0; g <= MAX_G; g++)
        if (ctx[g]) {
            ctx_free(ctx[g]);
            free(ctx[g]);
        }
    return stage7_checks_summary();
}

/*
 * tests/gpu/stage4_tests.c -- the GPU test suite of stage 4's forward (make
 * gpu-test, through tests/gpu/run_gpu_tests.sh): PASS/FAIL lines in
 * tests/run.sh's protocol, each version run and judged by
 * src/gpu/stage4_runs.c against the CPU fp64 reference.
 *
 *   build/tests/gpu/stage4_tests --sweep tests   forward versions 0 to 3 (3 on Hopper
 *                                                only) in fp32, fp16 and bf16 on fresh
 *                                                random inputs (seed printed): the shared
 *                                                sizes and masks of gpu_host.c, the fault
 *                                                inputs, the real input, a covering window
 *                                                bitwise equal to no mask
 *   build/tests/gpu/stage4_tests --sweep model   the IO models against stage 1's and
 *                                                stage 3's counts (no GPU needed)
 * --seed S replays. Without a GPU the GPU sweep prints one line and exits 0;
 * bad input is one line and exit 2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"
#include "stage4_runs.h"

static const char USAGE[] =
    "stage4_tests: the GPU test suite of stage 4's forward, PASS/FAIL lines\n"
    "usage: build/tests/gpu/stage4_tests --sweep tests|model [--seed S]\n"
    "--sweep tests: every version and dtype on the suite's problems; model: the IO models\n"
    "(no GPU needed).";

/* ------------------------------------------------------------------------- */
/* The test suite (--sweep tests)                                             */
/* ------------------------------------------------------------------------- */

/* One test: every version and dtype (gh_run_cases; ctx: the run_mode). */
static int run_case(void *ctx, const gh_inputs *in, const char *name)
{
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    run_mode m = *(const run_mode *)ctx;
    m.name = name;
    return run_problem(&m, in, dtypes, 3);
}

static int run_tests(const options *opt, int sm_count, const char *device)
{
    uint64_t seed = gh_tests_seed("stage4", "build/tests/gpu/stage4_tests", opt, device);
    const int big = sm_count + 18 + (sm_count % 2);   /* B H above the SM count, even */
    /* Besides gh_size_cases and gh_shared_cases: d = 24 and 72 (v1's tiles
     * of 32 and 80 columns part empty; v2 and v3 refuse them), masks and
     * grouped heads at d = 128 and where a whole query block sees no key. */
    const gh_tcase own[] = {
        {"d=24", 1, 1, 1, 65, 65, 24, -1, -1, GH_IN_NORMAL},
        {"d=72", 1, 2, 2, 150, 150, 72, -1, -1, GH_IN_NORMAL},
        {"B H > SMs d=128", 1, big, big, 70, 70, 128, -1, -1, GH_IN_NORMAL},
        {"B H > SMs, GQA, causal", 1, big, big / 2, 70, 70, 64, -1, 0, GH_IN_NORMAL},
        {"causal d=128 N=1023", 1, 1, 1, 1023, 1023, 128, -1, 0, GH_IN_NORMAL},
        {"causal Sq>Sk (a 128-row block that sees no key)", 1, 2, 2, 400, 200, 128, -1, 0, GH_IN_NORMAL},
        {"window (64,0) Sq>Sk", 2, 2, 2, 500, 450, 64, 64, 0, GH_IN_NORMAL},
        {"window (10,5) Sq<Sk d=128", 1, 2, 2, 200, 333, 128, 10, 5, GH_IN_NORMAL},
        {"GQA causal Sq>Sk", 2, 8, 2, 190, 150, 128, -1, 0, GH_IN_NORMAL},
        {"MQA Sq<Sk", 2, 4, 1, 150, 230, 128, -1, -1, GH_IN_NORMAL},
        {"MQA window (31,0)", 1, 8, 1, 260, 260, 64, 31, 0, GH_IN_NORMAL},
    };
    gh_tcase cases[GH_SHARED_CASES + sizeof own / sizeof own[0]];
    size_t nc = gh_shared_cases(sm_count, cases);
    memcpy(cases + nc, own, sizeof own);
    nc += sizeof own / sizeof own[0];
    /* A window that just covers every key (left = Sq - 1 + delta, right =
     * Sk - 1 - delta): the unmasked problem, bit for bit. seqlen_k a
     * multiple of 8 takes version 0's vector path. */
    const gh_tcase covering[] = {
        {"window covering everything", 1, 4, 2, 160, 256, 64, 255, 159, GH_IN_NORMAL},
        {"window covering everything", 1, 2, 2, 200, 200, 128, 1000, 1000, GH_IN_NORMAL},
    };
    int versions[NV_MAX], nv = 0, bad = 0;
    nv = gh_versions(FA_FORWARD, versions, NV_MAX);
    run_mode m = {true, false, 0, NULL, device, NULL, versions, nv, NULL};

    /* the real input, every head: unmasked, with a window, keys cut (Sq != Sk) */
    const int real[3][3] = {{-1, -1, 0}, {24, 8, 0}, {-1, -1, 100}};
    const char *real_what[3] = {"real input", "real input, window", "real input, keys cut"};
    for (int i = 0; i < 3; i++) {
        gh_inputs in;
        gh_inputs_real(&in, opt, real[i][0], real[i][1], real[i][2]);
        char name[256];
        gh_test_name("stage4", real_what[i], &in.params, name, sizeof name);
        bad += run_case(&m, &in, name);
        gh_inputs_free(&in);
    }
    /* case i draws from seed + i */
    bad += gh_run_cases("stage4", gh_size_cases, GH_SIZE_CASES, seed, run_case, &m);
    bad += gh_run_cases("stage4", cases, nc, seed + GH_SIZE_CASES, run_case, &m);
    m.cover = true;
    bad += gh_run_cases("stage4", covering, sizeof covering / sizeof covering[0], seed + GH_SIZE_CASES + nc,
                        run_case, &m);
    return bad;
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */
int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    options opt;
    parse_options(argc, argv, OPT_SEED | OPT_SWEEP, USAGE, &opt);
    if (!opt.sweep || (strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "model")))
        fatal(EXIT_BAD_INPUT, "--sweep %s: expected --sweep tests or model", opt.sweep ? opt.sweep : "missing");
    if (!strcmp(opt.sweep, "model")) return stage4_model_checks() ? EXIT_CHECK_FAILED : 0;
    char device[256];
    int sm_count = 0;
    if (!gh_device("stage4", device, sizeof device, &sm_count)) return 0;
    return run_tests(&opt, sm_count, device) ? EXIT_CHECK_FAILED : 0;
}

/*
 * tests/gpu/stage8_gpu_tests.c -- the GPU test suite of stage 8's decode
 * kernels (tests/gpu/stage8.sh): every case below in bf16 and fp16, d = 64
 * and 128, on fresh random inputs (seed printed), each run and judged by
 * src/gpu/stage8_gpu_runs.c against the CPU stage 8 in fp64.
 *
 *   build/tests/gpu/stage8_gpu_tests --sweep tests   every case
 *   build/tests/gpu/stage8_gpu_tests --sweep small   two small cases (for compute-sanitizer)
 * --seed S replays. One PASS/FAIL line per case and dtype; without a GPU,
 * SKIP. Bad input is one line and exit 2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fa_gpu.h"
#include "stage8_cli.h"
#include "stage8_decode.h"   /* the CPU reference */
#include "fa_decode.h"
#include "stage8_gpu_runs.h"

static const char USAGE[] =
    "stage8_gpu_tests: stage 8's GPU decode kernels against the CPU stage 8 (fp64), PASS/FAIL lines\n"
    "usage: build/tests/gpu/stage8_gpu_tests --sweep tests|small [--seed S]";

static const gcase CASES[] = {
    {"gqa-4:1-pages16-rule", 4, 32, 8, 1, 0, 16, 4096, -1, -1, 0, false},
    {"mha-1:1-pages64-7splits", 3, 32, 32, 1, 0, 64, 3000, -1, -1, 7, false},
    {"gqa-8:1-causal-4rows-pages32-3splits", 2, 16, 2, 4, 0, 32, 2000, -1, 0, 3, false},
    {"window-across-pages-16rows-pages64", 4, 8, 2, 16, 0, 64, 1500, 100, 0, 5, false},
    {"mqa-8:1-16rows-two-chunks-pages16", 2, 8, 1, 16, 0, 16, 700, -1, 0, 4, false},
    {"one-sequence-20000-keys-pages256-rule", 1, 32, 8, 1, 0, 256, 20000, -1, -1, 0, false},
    {"batch-70-short-keys-rule", 70, 4, 1, 2, 0, 16, 100, -1, 0, 0, false},
    {"short-sequences-6splits-bitwise", 3, 8, 2, 3, 0, 16, 60, -1, -1, 6, true},
};
static const gcase SMALL[] = {
    {"small-gqa-causal", 3, 4, 2, 2, 0, 16, 150, -1, 0, 3, false},
    {"small-window", 2, 4, 1, 4, 0, 32, 90, 20, 0, 2, false},
};
int main(int argc, char **argv)
{
    stage8_flags f;
    options opt;
    stage8_command_line(&argc, argv, OPT_SEED | OPT_SWEEP, USAGE, &f, &opt);
    uint64_t seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    rng_t rng;
    rng_seed(&rng, seed);
    if (!opt.sweep) fatal(EXIT_BAD_INPUT, "--sweep: expected 'tests' or 'small'");
    if (strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "small"))
        fatal(EXIT_BAD_INPUT, "--sweep: expected 'tests' or 'small', got '%s'", opt.sweep);
    if (opt.given & ~(opt_set)(OPT_SWEEP | OPT_SEED) || f.page_size || f.splits || f.lens || f.sms ||
        f.num_pages || f.block_table)
        fatal(EXIT_BAD_INPUT, "--sweep %s runs its own cases; it takes only --seed", opt.sweep);
    bool small = !strcmp(opt.sweep, "small");
    const gcase *cs = small ? SMALL : CASES;
    int nc = small ? (int)(sizeof SMALL / sizeof SMALL[0]) : (int)(sizeof CASES / sizeof CASES[0]);
    static const int dtypes[] = {FA_BF16, FA_FP16}, ds[] = {64, 128};
    if (fa_device_count() < 1) {
        for (int i = 0; i < nc; i++) printf("SKIP stage8-gpu %s: no GPU here\n", cs[i].name);
        return 0;
    }
    char info[256];
    int sms = 0;
    fa_device_info(info, sizeof info, &sms);
    printf("stage8_gpu_tests --sweep %s: %s; seed %llu\n", opt.sweep, info, (unsigned long long)seed);
    int failed = 0;
    for (int i = 0; i < nc; i++)
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) {
                decode_params p = params_of(&cs[i], ds[k], 0);
                if (fa_decode_check(dtypes[a], &p, cs[i].splits ? cs[i].splits : 1) != FA_OK) {
                    printf("FAIL stage8-gpu %s: %s\n", cs[i].name, fa_error_string());
                    failed++;
                    continue;
                }
                host_case c;
                int lens_short[3] = {0, 1, 0};
                if (cs[i].short_seqs) lens_short[2] = rng_int(&rng, 2, DECODE_BLOCK_N);
                build(&c, &p, cs[i].short_seqs ? lens_short : NULL, cs[i].splits, sms, dtypes[a], &rng);
                failed += run_case(cs[i].name, &c, dtypes[a], seed);
                release(&c);
            }
    printf("stage8_gpu_tests: %s\n", failed ? "FAILED" : "all cases passed");
    return failed ? EXIT_CHECK_FAILED : 0;
}

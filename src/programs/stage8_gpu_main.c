/*
 * stage8_gpu_main.c -- the program of stage 8's GPU kernels
 * (kernels/stage8_decode.cu): decoding against a paged KV cache, checked
 * against the CPU stage 8 in fp64 (src/cpu/stage8_decode.c, itself checked
 * against stage 1).
 *
 *   make stage8_gpu
 *   ./stage8_gpu [flags]           one case from stage 8's flags (--batch,
 *                                  --heads, --kv-heads, --n, --seqlen-k, --d,
 *                                  --page-size, --splits, --lens, --causal,
 *                                  --window, --dtype bf16|fp16, --seed)
 *
 * Each case: Q, K, V drawn N(0, 1) and rounded to the dtype; the CPU stage 8
 * runs in fp64 on the rounded values (so the reference sees what the GPU
 * sees); the cache's rows that no query may read (past a sequence's length,
 * outside its window, spare pages of the pool) are NaN on the device, and
 * the outputs and the workspace are poisoned (all bytes 0xFF, NaN) before the
 * kernels run, so a row read that should not be or an element left unwritten
 * shows. Held:
 *   - O within 2 unit roundoffs of the dtype of max|V| (the fp32 arithmetic
 *     adds far less than the one rounding of the output), L within 1e-5 of
 *     max(1, max|L|) (fp32); O = 0 and L = -inf exactly on rows that see no
 *     key (sequences of length 0, rows before the first key under causal);
 *   - the rule's split count and others against one split: within the same
 *     bound, and bit for bit on every sequence whose keys all fall in split 0;
 *   - no non-finite output other than L = -inf.
 * One PASS/FAIL line per case and dtype (tests/run.sh); without a GPU, SKIP.
 * The test suite is its own program, tests/gpu/stage8_gpu_tests.c; running
 * and judging a case is src/gpu/stage8_gpu_runs.c.
 * Bad input (the kernels' limits, fa_decode_check) is one line and exit 2,
 * with or without a GPU.
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
    "stage8_gpu: stage 8's GPU decode kernels against the CPU stage 8 (fp64)\n"
    "usage: ./stage8_gpu [one case's flags]   (the test suite: build/tests/gpu/stage8_gpu_tests)\n"
    "One case takes stage 8's flags (see ./stage8 --help): --page-size P (16 to 256), --splits S|auto,\n"
    "--lens a,b,..., --sms N (default: this GPU's), and --dtype bf16|fp16 (default bf16), --d 64|128.";

/* the shared flags as this program reads them (--help) */
static const flag_help HELP[] = {
    {OPT_N, "query rows per sequence, seqlen_q, 1 to 16 (default 1)"},
    {OPT_D, "head dimension, 64 or 128 (default 128)"},
    {OPT_BATCH, "sequences B (default 4)"},
    {OPT_HEADS, "query heads H (default 32)"},
    {OPT_KV_HEADS, "key/value heads H_kv, H a multiple of it (default 8)"},
    {OPT_SEQLEN_K, "keys each block table holds, the cache's capacity (default 4096)"},
    {OPT_SEED, "seed of the random inputs (default: a fresh one, printed)"},
};

int main(int argc, char **argv)
{
    stage8_flags f;
    options opt;
    options_help(HELP, sizeof HELP / sizeof HELP[0]);
    stage8_command_line(&argc, argv,
                        OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_SEED | OPT_MASKS |
                            OPT_SCALE | OPT_DTYPE | OPT_FP16 | OPT_BF16,
                        USAGE, &f, &opt);
    uint64_t seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    rng_t rng;
    rng_seed(&rng, seed);
    char why[256];

    /* one case from the flags */
    const char *dt = (opt.given & OPT_DTYPE) ? opt.dtype : "bf16";
    int dtype = !strcmp(dt, "fp16") ? FA_FP16 : FA_BF16;
    if ((opt.given & OPT_CAUSAL) && (opt.given & OPT_WINDOW))
        fatal(EXIT_BAD_INPUT, "--causal and --window %d,%d: causal is --window -1,0; give one of them",
              opt.window_left, opt.window_right);
    gcase g = {"flags", (opt.given & OPT_BATCH) ? opt.batch : 4, (opt.given & OPT_HEADS) ? opt.heads : 32,
               (opt.given & OPT_KV_HEADS) ? opt.kv_heads : 8, (opt.given & OPT_N) ? opt.N : 1, 0,
               f.page_size ? (int)parse_long("--page-size", f.page_size, -1000000, 1000000) : 16,
               (opt.given & OPT_SEQLEN_K) ? opt.seqlen_k : 4096,
               (opt.given & OPT_WINDOW) ? opt.window_left : -1,
               (opt.given & OPT_WINDOW) ? opt.window_right : opt.causal ? 0 : -1, 0, false};
    if (g.page < 1) g.page = 1;   /* the check below names the flag */
    decode_params p = params_of(&g, (opt.given & OPT_D) ? opt.d : 128, opt.softmax_scale);
    if (f.page_size) p.page_size = (int)parse_long("--page-size", f.page_size, -1000000, 1000000);
    if (f.num_pages) fatal(EXIT_BAD_INPUT, "--num-pages: ./stage8_gpu sizes its pool itself (see ./stage8)");
    if (f.block_table) fatal(EXIT_BAD_INPUT, "--block-table: ./stage8_gpu draws its own (see ./stage8)");
    if (decode_params_check(&p, why, sizeof why)) decode_fatal(why);
    int splits = 0;
    if (f.splits && strcmp(f.splits, "auto")) {
        splits = (int)parse_long("--splits", f.splits, -1000000, 1000000);
        if (decode_splits_check(splits, why, sizeof why)) decode_fatal(why);
    }
    if (fa_decode_check(dtype, &p, splits ? splits : 1) != FA_OK) fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    int *lens = NULL;
    if (f.lens) {
        lens = xmalloc((size_t)p.B, sizeof(int), "--lens");
        parse_list("--lens", f.lens, lens, (size_t)p.B, -(1L << 31) + 1, (1L << 31) - 1);
        int *probe = xcalloc((size_t)p.B * p.pages_per_seq, sizeof(int), "probe");
        int bad = decode_tables_check(&p, probe, lens, why, sizeof why);
        free(probe);
        if (bad) fatal(EXIT_BAD_INPUT, "%s", why);
    }
    if ((size_t)p.num_pages * p.page_size * p.H_kv * p.d > (1u << 28))
        fatal(EXIT_BAD_INPUT, "the cache pool would hold more than 2^28 elements (the fp64 reference holds it)");
    if (fa_device_count() < 1) {
        printf("SKIP stage8_gpu: no CUDA GPU here; the flags were checked, nothing to run\n");
        free(lens);
        return 0;
    }
    char info[256];
    int sms = 0;
    fa_device_info(info, sizeof info, &sms);
    if (f.sms) sms = (int)parse_long("--sms", f.sms, 1, 100000);
    printf("stage8_gpu: %s; seed %llu\n", info, (unsigned long long)seed);
    host_case c;
    build(&c, &p, lens, splits, sms, dtype, &rng);
    printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, d = %d, pages of %d, %d splits (%s), window (%d, %d)\n",
           p.B, p.H, p.H_kv, p.seqlen_q, p.d, p.page_size, c.splits, splits ? "--splits" : "the rule's",
           p.window_size_left, p.window_size_right);
    int failed = run_case("flags", &c, dtype, seed);
    release(&c);
    free(lens);
    return failed ? EXIT_CHECK_FAILED : 0;
}

/*
 * stage4_main.c -- Stage 4's program: the CUDA forward kernels of
 * kernels/stage4_fwd_v0.cu .. v2.cu and stage4_fwd_v3_hopper.cu, checked against
 * the CPU fp64 reference of stage 1 and timed.
 *
 * What it adds over stage 3: nothing new in the algorithm; the tiled forward
 * now runs on a GPU, on the CUDA cores in fp32 arithmetic (version 1), on the
 * tensor cores (version 2, fp16/bf16) and with Hopper's copy engine and
 * wgmma (version 3, H100/H200), beside a materialized GPU baseline
 * (version 0). Every version takes the problems of stage 6: causal and
 * sliding-window masks, seqlen_q != seqlen_k and grouped key/value heads
 * (core/mask.h, attn_params). Plain C over core/fa_gpu.h and the GPU host
 * code the GPU stages share (src/gpu_host.[ch]).
 *
 * Build and run:   make stage4 && ./stage4
 *   ./stage4                          real input (all-MiniLM-L6-v2, (1,12,148,32)) and two
 *                                     random problems (one causal with grouped heads);
 *                                     every version, fp32, fp16 and bf16
 *   ./stage4 --kernel 2 --dtype bf16 --random --n 4096 --d 128 --heads 4 --causal --repeats 20
 *   ./stage4 --random --n 1000 --seqlen-k 700 --heads 8 --kv-heads 2 --window 64,0
 *   ./stage4 --kernel 1 --dtype fp32 --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy
 *                                     (K, V may have fewer heads or another length than Q)
 *   ./stage4 --csv FILE               also write every row as CSV (with provenance)
 * Without a GPU it prints one line saying so and exits 0 (bad input is still
 * refused first, with exit 2). --out and --lse write the O and L the GPU
 * computed (.npy, float64) for one --kernel and --dtype. The test suite is
 * its own program, tests/gpu/stage4_tests.c (build/tests/gpu/stage4_tests);
 * running and judging a version is src/gpu/stage4_runs.c.
 *
 * What it prints, per (problem, dtype, version): the error of O and L
 * against the fp64 reference computed on the same inputs rounded to the
 * dtype, err O = max |O - O_ref| / max |O_ref| (max |V| where O_ref is all
 * zero), err L = max |L - L_ref| / max(1, max |L_ref|) over rows that see a
 * key; unwritten = NaN or infinity left where the reference is finite
 * (outputs are poisoned with NaN before every launch); the median time over
 * --repeats launches; TFLOP/s (fa_flops); modeled bytes (fa_model_bytes);
 * the tiles the version visits and those the mask lets it skip (fa_tiles).
 * Then the checks:
 *   fp32        err O and err L <= 1e-5
 *   fp16, bf16  versions 1, 2, 3: err O <= 2 x version 0's err O on the same
 *               inputs + u (the dtype's unit roundoff, so that two correctly
 *               rounded results never fail), and every version's err O and
 *               err L within a sanity bound (fp16 1e-2, bf16 5e-2), so that a
 *               broken version 0 cannot loosen the rule
 *   every dtype no unwritten output; rows that see no key have O = 0 exactly
 *               and L = -inf; the bytes model equals stage 1's and stage 3's
 *               counts and the tile counts stage 3's (model_matches)
 *   fault inputs (huge or very negative logits): every output
 *               finite, and each O row within the value rows of the keys
 *               whose logits are the row's best up to fp32 rounding
 *               (best_key_check)
 * A failed check prints '#' lines (gh_diagnose): the entries off, the worst,
 * and the ranges of heads, rows and columns they fall in. Exit 0 only when
 * every check passes; 2 on bad input (one line).
 *
 * Cost: the CPU reference is 4 B H Sq Sk d fp64 FLOPs per problem (seconds
 * for 4096 keys on one head); version 0 needs (4 + es) B H Sq Sk bytes of
 * GPU memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "stage4_runs.h"

static const char USAGE[] =
    "stage4: the attention forward on a CUDA GPU (version 0 materialized, 1 tiled on the CUDA\n"
    "cores, 2 tiled on the tensor cores, 3 Hopper's wgmma and copy engine), checked against the\n"
    "CPU fp64 reference (stage 1); causal and window masks, seqlen_q != seqlen_k, grouped heads\n"
    "usage: ./stage4 [options]     --dtype: fp32, fp16 or bf16 (default: each a version takes)\n"
    "With no options: the real input (all-MiniLM-L6-v2, every head) and two random problems,\n"
    "every version, fp32, fp16 and bf16 (the test suite: build/tests/gpu/stage4_tests).\n"
    "--out and --lse (with one --kernel and --dtype) write the O and L the GPU computed.\n"
    "Without a GPU: one line saying so, exit 0.";

/* What the columns of the table run_problem prints mean, above it. */
static void print_legend(int repeats)
{
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype:\n"
           "    err O (max) = max|O - O_ref| / max|O_ref|, err O (norm) = ||O - O_ref|| / ||O_ref||,\n"
           "    err L = max|L - L_ref| / max(1, max|L_ref|); unwritten = NaN/inf left in an output\n"
           "  time: median of %d launches (CUDA events, L2 flushed); TFLOP/s counts 4 B H Sq Sk d times the\n"
           "  visible share of the scores (the papers' convention); model bytes: the version's IO model;\n"
           "  tiles: visited/skipped per head\n", repeats);
}

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS | OPT_SCALE |
                      OPT_INPUTS | OPT_FWD_OUTPUTS | OPT_CSV | OPT_DTYPE | OPT_FP32 | OPT_FP16 | OPT_BF16 | OPT_KERNEL | OPT_REPEATS,
                  USAGE, &opt);
    int dtypes[3], nd, versions[NV_MAX], nv;
    gh_inputs in;
    gh_run_of_options(FA_FORWARD, &opt, opt.out || opt.lse, "--out/--lse", &in, dtypes, &nd, versions, &nv);

    char device[256];
    int sm_count = 0;
    if (!gh_device("stage4", device, sizeof device, &sm_count)) {
        gh_inputs_free(&in);
        return 0;
    }

    run_mode m = {false, false, (opt.given & OPT_REPEATS) ? opt.repeats : 10, NULL, device, &opt,
                  versions, nv, NULL};
    if (opt.csv)
        m.csv = gh_csv_open(opt.csv, argc, argv,
                            "device,input,B,H,H_kv,seqlen_q,seqlen_k,d,window_left,window_right,kernel,dtype,"
                            "err_O_maxabs_over_maxref,err_O_norm,err_L,unwritten,median_ms,tflops,model_bytes");
    printf("stage4: CUDA forward on %s\n", device);
    print_legend(m.repeats);
    int bad = run_problem(&m, &in, dtypes, nd);
    gh_inputs_free(&in);
    bool given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS | OPT_MASKS);
    for (int i = 0; i < 2 && !given; i++) {
        attn_params p = gh_tcase_params(&gh_default_cases[i]);
        gh_inputs_random(&in, &p, GH_IN_NORMAL, opt.seed + (uint64_t)i);
        bad += run_problem(&m, &in, dtypes, nd);
        gh_inputs_free(&in);
    }
    if (m.csv) csv_close(m.csv);
    printf("\nchecks: fp32 err O, err L <= 1e-5; fp16/bf16 err O of v1, v2, v3 <= 2 x v0's + u and every "
           "version's err O, err L <= 1e-2 (fp16), 5e-2 (bf16); every output written; O = 0, L = -inf where "
           "the mask leaves nothing; bytes model == stage 1/3 counts\n");
    printf("stage4: %s\n", bad ? "FAILED" : "all checks passed");
    return outputs_finish(bad ? EXIT_CHECK_FAILED : 0);
}

/*
 * stage5_main.c -- Stage 5's program: the CUDA backward kernels of
 * kernels/stage5_bwd_*.cu, checked against the CPU fp64 backward and
 * timed.
 *
 * What it adds over stage 4: the backward pass on the GPU (version 0
 * materialized with cuBLAS, 1 tiled on the CUDA cores, 2 and 4 tiled on the
 * tensor cores: 4 on blocks of twice the keys; 3 on Hopper's own hardware,
 * TMA and wgmma), masks, seqlen_q != seqlen_k and grouped heads, and a deterministic
 * mode. Plain C over core/fa_gpu.h and the shared GPU host code
 * src/gpu_host.[ch].
 *
 * Build and run:   make stage5 && ./stage5
 *   ./stage5                      real input (all-MiniLM-L6-v2 Q, K, V and its dO,
 *                                 (1,12,148,32)) and two random problems (one
 *                                 causal with grouped heads); every version, fp32,
 *                                 fp16 and bf16
 *   ./stage5 --kernel 2 --dtype bf16 --random --n 4096 --d 128 --heads 4 --causal --repeats 20
 *   ./stage5 --deterministic      also run each version 30 times in its deterministic
 *                                 mode and check dQ, dK, dV bitwise equal
 *   ./stage5 --kernel 1 --dtype fp32 --q q.npy --k k.npy --v v.npy --do do.npy \
 *            --dq dq.npy --dk dk.npy --dv dv.npy --out o.npy --lse l.npy
 * Without a GPU it prints one line saying so and exits 0 (bad input is still
 * refused first, with exit 2). The test suite is its own program,
 * tests/gpu/stage5_tests.c (build/tests/gpu/stage5_tests); running and
 * judging a version is src/gpu/stage5_runs.c.
 *
 * What the backward is given: Q, K, V, dO rounded to the dtype, and O, L of
 * the fp64 reference on those inputs (O rounded to the dtype, L to fp32), so
 * the errors are the backward's own. --out and --lse write that O and L.
 *
 * What it prints, per (problem, dtype, version): err = max |X - X_ref| /
 * max |X_ref| for X = dQ, dK, dV (when X_ref is all zero, e.g. N = 1 where
 * dQ = dK = 0 exactly, the denominator is the size of the terms that cancel:
 * softmax_scale max|dO| max|V| max|K| for dQ, the same with Q for dK, max|dO|
 * for dV); unwritten = NaN or infinity left in an output (outputs are
 * poisoned with NaN before every launch); time, TFLOP/s (fa_flops), model
 * bytes (fa_model_bytes). Then the checks:
 *   fp32        err <= 1e-5 for dQ, dK and dV
 *   fp16, bf16  versions 1 to 4: err <= 2 x version 0's err on the same
 *               inputs + u, the dtype's unit roundoff, so that two correctly
 *               rounded results never fail (version 0 is the materialized computation in
 *               the dtype: P rounded to it, as PyTorch's materialized
 *               attention keeps it), and every version within a sanity bound
 *               (fp16 1e-2, bf16 5e-2) so that a broken version 0 cannot
 *               loosen the rule
 *   every dtype no unwritten output; rows that see no key have dQ rows of
 *               exactly 0 and keys nobody sees dK, dV rows of exactly 0
 *   far logits  q = (1, 0.1 z), k = (-120 sqrt(d), 0.1 z) (every logit near
 *               -120, a common part of K of size 960): for fp16, bf16 also
 *               err dQ <= 2 e_round + u, e_round the error of the fp64 dQ
 *               rounded to the dtype (what PyTorch's math backend attains),
 *               which the backward meets with K centered over the keys
 *               (FA_BWD_CENTER_K, --accurate-dq; kernels/stage5_bwd_center.cu,
 *               bwd-center); without it each version must fail that rule,
 *               so that the inputs test it (src/cpu/stage3_accuracy.c models why);
 *               with FA_BWD_DQ_PASS (--accurate-dq=full) err dQ <= 2 e_round,
 *               the rule without the + u (kernels/stage5_bwd_dq.cu)
 *   fault inputs (huge or very negative logits): every output finite
 *               (the errors are printed; P = exp(S - L) cannot be accurate
 *               when the rounding of S and L in fp32, |L| 2^-24, is not small)
 * A failed check prints, on lines starting with '#', which tensor, the
 * entries off by more than the allowed error (count, the worst, the first
 * few with (b, h, row, col), got and reference), and the ranges of heads and
 * rows, and of columns, they fall in, so a wrong tile, row or fragment shows
 * as a pattern (rows repeating every 64: a tile edge; columns in groups of 8
 * or 16: an mma fragment). Exit 0 only when every check passes; 2 on bad
 * input (one line).
 *
 * Cost: the CPU reference is about 12 B H Sq Sk d fp64 FLOPs per problem
 * (seconds for 4096 keys on one head); version 0 needs (4 + es) B H Sq Sk
 * bytes of GPU memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "stage5_runs.h"

static const char USAGE[] =
    "stage5: the attention backward on a CUDA GPU (version 0 materialized, 1 tiled on the CUDA\n"
    "cores, 2 and 4 tiled on the tensor cores, 3 Hopper's wgmma and copy engine), checked\n"
    "against the CPU fp64 backward\n"
    "usage: ./stage5 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2, every head, its dO) and two random\n"
    "problems, every version, fp32, fp16 and bf16. The test suite is a program of its own:\n"
    "build/tests/gpu/stage5_tests --sweep tests|small|accuracy|model (make gpu-test).\n"
    "--accurate-dq runs the backward on K centered over the keys (fa_gpu.h, FA_BWD_CENTER_K),\n"
    "which keeps dQ accurate when every logit is far from zero, at the cost of a pre-pass.\n"
    "--accurate-dq=full adds a pass that forms D and dQ without 16-bit roundings\n"
    "(FA_BWD_DQ_PASS): dQ as an fp32 backward's, at up to six more N^2 d products.\n"
    "Without a GPU: one line saying so, exit 0.";

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    bwd_take_accurate_dq(&argc, argv);
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS |
                      OPT_SCALE | OPT_INPUTS | OPT_DO | OPT_OUTPUTS | OPT_CSV | OPT_DTYPE | OPT_KERNEL |
                      OPT_REPEATS | OPT_DETERMINISTIC,
                  USAGE, &opt);
    int dtypes[3], nd, versions[16], nv;
    gh_inputs pr;
    gh_run_of_options(FA_BACKWARD, &opt, opt.out || opt.lse || opt.dq || opt.dk || opt.dv, "--out/--lse/--dq/--dk/--dv",
                      &pr, dtypes, &nd, versions, &nv);
    if ((bwd_run_flags & FA_BWD_DQ_PASS) && dq_pass_refused(dtypes, nd, &pr.params))
        fatal(EXIT_BAD_INPUT, "--accurate-dq=full: %s", fa_error_string());
    if (opt.deterministic && opt.kernel >= 0 && !fa_version(FA_BACKWARD, opt.kernel)->deterministic)
        fatal(EXIT_BAD_INPUT, "--deterministic: backward v%d has no deterministic mode", opt.kernel);

    char device[256];
    int sm_count = 0;
    if (!gh_device("stage5", device, sizeof device, &sm_count)) {
        gh_inputs_free(&pr);
        return 0;
    }
    printf("stage5: CUDA backward on %s\n", device);
    run_mode m = {false, opt.deterministic, (opt.given & OPT_REPEATS) ? opt.repeats : 10, NULL, device, &opt};
    if (opt.csv)
        m.csv = gh_csv_open(opt.csv, argc, argv,
                            "device,input,B,H,H_kv,seqlen_q,seqlen_k,d,window_left,window_right,kernel,dtype,"
                            "deterministic,err_dQ,err_dK,err_dV,unwritten,median_ms,tflops,model_bytes");
    printf("  errors against the CPU fp64 backward on the inputs rounded to the dtype (O, L given from it):\n"
           "    err X = max|X - X_ref| / max|X_ref| for X = dQ, dK, dV; unwritten = NaN/inf left in an output\n"
           "  time: median of %d launches (CUDA events, L2 flushed); TFLOP/s counts 2.5 x the forward's\n"
           "  4 B H Sq Sk d times the visible share of the scores (the papers' convention); model bytes: the\n"
           "  version's IO model (kernels/stage5_backward.cuh)%s\n", m.repeats,
           m.deterministic ? "; deterministic mode, 30 runs compared bitwise" : "");
    int bad = 0;
    bool given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS | OPT_DO | OPT_MASKS);
    bad += run_problem(&m, &pr, dtypes, nd, versions, nv, pr.source);
    gh_inputs_free(&pr);
    if (!given) {
        for (int i = 0; i < 2; i++) {
            attn_params p = gh_tcase_params(&gh_default_cases[i]);
            gh_inputs_random(&pr, &p, GH_IN_NORMAL, opt.seed + (uint64_t)i);
            bad += run_problem(&m, &pr, dtypes, nd, versions, nv, pr.source);
            gh_inputs_free(&pr);
        }
    }
    if (m.csv) csv_close(m.csv);
    printf("\nchecks: fp32 err <= 1e-5; fp16/bf16 err of the tiled versions <= 2 x v0's + u and every version <= "
           "1e-2 (fp16), 5e-2 (bf16); every output written; zero rows where the mask leaves nothing\n");
    printf("stage5: %s\n", bad ? "FAILED" : "all checks passed");
    return outputs_finish(bad ? EXIT_CHECK_FAILED : 0);
}


/*
 * src/programs/stage6_main.c -- ./stage6's command line: masks as one
 * definition, the tour, one problem (src/cpu/stage6_masks.c), the sweeps
 * (src/cpu/stage6_sweeps.c).
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage6_masks.h"

static const char USAGE[] =
    "stage6: masks as one definition (causal, sliding window, seqlen_q != seqlen_k, grouped\n"
    "heads): tiled forward and backward against stage 1 masked, fp64\n"
    "usage: ./stage6 [options]\n"
    "With no options: the real input under a tour of masks, then random shapes.\n"
    "With input or mask flags: that one problem, in detail. --check rows checks sampled\n"
    "rows against a row-by-row reference instead of stage 1 (O(N) memory, any N).\n"
    "--sweep window|memory|lse writes --csv (see make sweep-masks).";

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv, OPT_TILED_CPU | OPT_CHECK | OPT_SWEEP | OPT_CSV, USAGE, &opt);
    if (opt.sweep) {
        if (!opt.csv) fatal(EXIT_BAD_INPUT, "--sweep needs --csv FILE");
        if (!strcmp(opt.sweep, "window")) return outputs_finish(masks_sweep_window(&opt, argc, argv));
        if (!strcmp(opt.sweep, "memory")) return outputs_finish(masks_sweep_memory(&opt, argv[0], argc, argv));
        if (!strcmp(opt.sweep, "lse")) return outputs_finish(masks_sweep_lse(&opt, argc, argv));
        fatal(EXIT_BAD_INPUT, "--sweep: expected 'window', 'memory' or 'lse', got '%s'", opt.sweep);
    }
    if (opt.csv) fatal(EXIT_BAD_INPUT, "--csv is written by --sweep");
    opt_set problem_flags = OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_MASKS |
                            OPT_SCALE | OPT_INPUTS | OPT_DO | OPT_OUTPUTS | OPT_BR | OPT_BC | OPT_SRAM |
                            OPT_RULE | OPT_CHECK;
    if (opt.given & problem_flags) return outputs_finish(masks_run_one(&opt));
    return outputs_finish(masks_run_tour(&opt));
}

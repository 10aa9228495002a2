/*
 * src/programs/stage3_accuracy_main.c -- build/stage3_accuracy's command
 * line: the dQ accuracy model's sweep, draws and checks
 * (src/cpu/stage3_accuracy.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage3_tiled.h"
#include "stage3_accuracy.h"

static const char USAGE[] =
    "stage3_accuracy: dQ's error on logits near -a when O and dS are rounded to bf16/fp16, against\n"
    "an error model, and the centering fix (stage 3's backward in fp64 with chosen roundings)\n"
    "usage: stage3_accuracy --csv FILE [--seed S]    the sweep over a, N, masks, dtypes\n"
    "       stage3_accuracy --draws FILE [--seed S]  many draws at N = 192 bf16 a = 120, both masks\n"
    "       stage3_accuracy --test [--seed S]        PASS/FAIL checks on fresh inputs\n";

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    const char *csv = NULL, *many = NULL;
    bool test = false, seeded = false;
    uint64_t s = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--test") && !test) {
            test = true;
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc && !csv) {
            csv = argv[++i];
        } else if (!strcmp(argv[i], "--draws") && i + 1 < argc && !many) {
            many = argv[++i];
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc && !seeded) {
            char *end;
            s = strtoull(argv[++i], &end, 10);
            if (*end || !*argv[i]) fatal(EXIT_BAD_INPUT, "--seed %s: not a whole number", argv[i]);
            seeded = true;
        } else {
            fatal(EXIT_BAD_INPUT, "%s: unknown, repeated or missing its value (see --help)", argv[i]);
        }
    }
    if (test + (csv != NULL) + (many != NULL) != 1)
        fatal(EXIT_BAD_INPUT, "give exactly one of --test, --csv FILE and --draws FILE");
    if (csv) stage_output("--csv", csv);   /* checked before the sweep's minutes of work */
    if (many) stage_output("--draws", many);
    if (test) {
        uint64_t seed = seeded ? s : fresh_seed();
        printf("stage3 accuracy checks, seed %llu (--seed replays)\n", (unsigned long long)seed);
        return dq_accuracy_tests(seed);
    }
    if (many) dq_accuracy_draws(many, argc, argv, seeded ? s : 20261202);
    else dq_accuracy_sweep(csv, argc, argv, seeded ? s : 20261201);
    return outputs_finish(0);
}

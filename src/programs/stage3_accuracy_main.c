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

/* What the command line asks for: exactly one of --test, --csv FILE and
 * --draws FILE, and --seed S when given. */
typedef struct {
    const char *csv, *many;
    bool test, seeded;
    uint64_t seed;
} accuracy_run;

/* The flags, each at most once; a bad one is one line and exit 2. */
static accuracy_run parse_flags(int argc, char **argv)
{
    accuracy_run r = {NULL, NULL, false, false, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(USAGE, stdout);
            exit(0);
        } else if (!strcmp(argv[i], "--test") && !r.test) {
            r.test = true;
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc && !r.csv) {
            r.csv = argv[++i];
        } else if (!strcmp(argv[i], "--draws") && i + 1 < argc && !r.many) {
            r.many = argv[++i];
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc && !r.seeded) {
            char *end;
            r.seed = strtoull(argv[++i], &end, 10);
            if (*end || !*argv[i]) fatal(EXIT_BAD_INPUT, "--seed %s: not a whole number", argv[i]);
            r.seeded = true;
        } else {
            fatal(EXIT_BAD_INPUT, "%s: unknown, repeated or missing its value (see --help)", argv[i]);
        }
    }
    if (r.test + (r.csv != NULL) + (r.many != NULL) != 1)
        fatal(EXIT_BAD_INPUT, "give exactly one of --test, --csv FILE and --draws FILE");
    return r;
}

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    accuracy_run r = parse_flags(argc, argv);
    if (r.csv) stage_output("--csv", r.csv);   /* checked before the sweep's minutes of work */
    if (r.many) stage_output("--draws", r.many);
    if (r.test) {
        uint64_t seed = r.seeded ? r.seed : fresh_seed();
        printf("stage3 accuracy checks, seed %llu (--seed replays)\n", (unsigned long long)seed);
        return dq_accuracy_tests(seed);
    }
    if (r.many) dq_accuracy_draws(r.many, argc, argv, r.seeded ? r.seed : 20261202);
    else dq_accuracy_sweep(r.csv, argc, argv, r.seeded ? r.seed : 20261201);
    return outputs_finish(0);
}

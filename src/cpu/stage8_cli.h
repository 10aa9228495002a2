/*
 * stage8_cli.h -- the command-line flags of stage 8 that the shared parser
 * (common.h) does not know, for ./stage8 and ./stage8_gpu: taken out of argv
 * before parse_options sees the rest, with its conventions (--flag value or
 * --flag=value, at most once; a bad value is one line and exit 2). Not a
 * library header: static functions, included by each program once.
 */
#ifndef FA_STAGE8_CLI_H
#define FA_STAGE8_CLI_H

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Stage 8's own flags, taken out of argv before the shared parser sees the
 * rest (same conventions: --flag value or --flag=value, at most once). */
typedef struct {
    const char *page_size, *splits, *sms, *lens, *num_pages, *block_table, *ctas;
} stage8_flags;

static inline void take_flags(int *argc, char **argv, stage8_flags *f)
{
    static const char *const names[] = {"--page-size", "--splits", "--sms", "--lens", "--num-pages",
                                        "--block-table", "--ctas-per-sm"};
    const char **slot[] = {&f->page_size, &f->splits, &f->sms, &f->lens, &f->num_pages, &f->block_table, &f->ctas};
    memset(f, 0, sizeof *f);
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int hit = -1;
        size_t nl = 0;
        for (int k = 0; k < 7; k++) {
            nl = strlen(names[k]);
            if (!strncmp(argv[i], names[k], nl) && (argv[i][nl] == '\0' || argv[i][nl] == '=')) {
                hit = k;
                break;
            }
        }
        if (hit < 0) {
            argv[out++] = argv[i];
            continue;
        }
        if (*slot[hit]) fatal(EXIT_BAD_INPUT, "%s is given twice", names[hit]);
        if (argv[i][nl] == '=') *slot[hit] = argv[i] + nl + 1;
        else if (i + 1 < *argc && strncmp(argv[i + 1], "--", 2)) *slot[hit] = argv[++i];
        else fatal(EXIT_BAD_INPUT, "%s: missing value", names[hit]);
    }
    *argc = out;
    argv[out] = NULL;
}

/* A stage-8 program's command line: its name for messages, stage 8's own
 * flags into f (taken out of argv, *argc updated), the rest through the
 * shared parser (accepted: the common flags the program takes). */
static inline void stage8_command_line(int *argc, char **argv, opt_set accepted, const char *usage,
                                       stage8_flags *f, options *opt)
{
    set_prog_name(argv[0]);
    take_flags(argc, argv, f);
    parse_options(*argc, argv, accepted, usage, opt);
}

static inline long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        fatal(EXIT_BAD_INPUT, "%s '%s': expected an integer in [%ld, %ld]", flag, s, lo, hi);
    return v;
}

/* A comma-separated list of exactly n integers in [lo, hi]. */
static inline void parse_list(const char *flag, const char *s, int *out, size_t n, long lo, long hi)
{
    size_t k = 0;
    const char *at = s;
    while (*at) {
        char *end;
        long v = strtol(at, &end, 10);
        if (end == at || (*end && *end != ','))
            fatal(EXIT_BAD_INPUT, "%s: '%s' is not a comma-separated list of integers", flag, s);
        if (v < lo || v > hi) fatal(EXIT_BAD_INPUT, "%s: entry %zu is %ld, outside [%ld, %ld]", flag, k, v, lo, hi);
        if (k == n) fatal(EXIT_BAD_INPUT, "%s: more than the %zu entries expected", flag, n);
        out[k++] = (int)v;
        at = *end ? end + 1 : end;
    }
    if (k != n) fatal(EXIT_BAD_INPUT, "%s: %zu entries, expected %zu", flag, k, n);
}

/* Exit 2 with the decode plan's one line (decode_params_check,
 * decode_splits_check), its leading field named by the flag that sets it:
 * the library speaks to every caller in decode_params' fields. */
static inline void decode_fatal(const char *why)
{
    static const char *const map[][3] = {{"H_kv ", "--kv-heads ", ""},     {"seqlen_q ", "--n ", ""},
                                         {"page_size ", "--page-size ", ""},   {"window_size ", "--window ", ""},
                                         {"softmax_scale ", "--scale ", ""},   {"num_splits ", "--splits ", " (or 'auto')"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i][0]);
        if (strncmp(why, map[i][0], n) == 0) fatal(EXIT_BAD_INPUT, "%s%s%s", map[i][1], why + n, map[i][2]);
    }
    fatal(EXIT_BAD_INPUT, "%s", why);
}

#endif /* FA_STAGE8_CLI_H */

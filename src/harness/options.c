/* options.c -- the command-line options' table and parser (options.h). */
#define _POSIX_C_SOURCE 200809L
#include "options.h"
#include "outputs.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Command-line options                                                       */
/* ------------------------------------------------------------------------- */

typedef enum { ARG_NONE, ARG_INT, ARG_LONG, ARG_U64, ARG_DOUBLE, ARG_STR, ARG_LIST } arg_kind;

typedef struct {
    const char *name;
    opt_set flag;
    arg_kind kind;
    const char *meta;
    const char *help;
} opt_spec;

/* The table of flags: one row each, one shape by design. */
static const opt_spec SPECS[] = {
    {"--n", OPT_N, ARG_INT, "N", "sequence length of random input"},
    {"--d", OPT_D, ARG_INT, "D", "head dimension of random input"},
    {"--batch", OPT_BATCH, ARG_INT, "B", "batch size of random input"},
    {"--heads", OPT_HEADS, ARG_INT, "H", "number of heads of random input"},
    {"--random", OPT_RANDOM, ARG_NONE, NULL, "random N(0,1) input instead of the real model input (implied by --n, --d, --batch, --heads)"},
    {"--seed", OPT_SEED, ARG_U64, "S", "seed of the random generator (default 1234)"},
    {"--causal", OPT_CAUSAL, ARG_NONE, NULL, "causal mask, the window (-1, 0): query i sees keys j <= i + seqlen_k - seqlen_q"},
    {"--window", OPT_WINDOW, ARG_STR, "L,R", "sliding window: query i sees keys i + seqlen_k - seqlen_q - L .. + R (-1: unbounded)"},
    {"--kv-heads", OPT_KV_HEADS, ARG_INT, "G", "key/value heads H_kv (H a multiple of it; default H)"},
    {"--seqlen-k", OPT_SEQLEN_K, ARG_INT, "NK", "key/value rows seqlen_k (random input: default --n; real input: its first NK keys)"},
    {"--scale", OPT_SCALE, ARG_DOUBLE, "X", "softmax_scale (default 1/sqrt(d))"},
    {"--q", OPT_INPUTS, ARG_STR, "FILE", "Q from a .npy file, (N,d), (H,N,d) or (B,H,N,d)"},
    {"--k", OPT_INPUTS, ARG_STR, "FILE", "K from a .npy file, (B,H_kv,seqlen_k,d): fewer heads or other length than Q allowed"},
    {"--v", OPT_INPUTS, ARG_STR, "FILE", "V from a .npy file, same shape as K"},
    {"--do", OPT_DO, ARG_STR, "FILE", "dO (upstream gradient), same shape as Q (default: random, --seed)"},
    {"--out", OPT_FWD_OUTPUTS, ARG_STR, "FILE", "write O as .npy, float64, always (B,H,N,d): an (N,d) input gives (1,1,N,d)"},
    {"--lse", OPT_FWD_OUTPUTS, ARG_STR, "FILE", "write L = logsumexp per row as .npy (B,H,N)"},
    {"--dq", OPT_GRAD_OUTPUTS, ARG_STR, "FILE", "write dQ as .npy"},
    {"--dk", OPT_GRAD_OUTPUTS, ARG_STR, "FILE", "write dK as .npy"},
    {"--dv", OPT_GRAD_OUTPUTS, ARG_STR, "FILE", "write dV as .npy"},
    {"--dtype", OPT_DTYPE, ARG_STR, "T", NULL},   /* help: dtype_list() */
    {"--br", OPT_BR, ARG_INT, "BR", "query block rows Br"},
    {"--bc", OPT_BC, ARG_INT, "BC", "key/value block rows Bc"},
    {"--sram", OPT_SRAM, ARG_LONG, "M", "SRAM size M in elements; Br, Bc derived from it"},
    {"--rule", OPT_RULE, ARG_STR, "R", "Br, Bc from M: paper (default) or io (each pass's IO-optimal tiles)"},
    {"--block", OPT_BLOCK, ARG_INT, "B", "block size of the streaming softmax"},
    {"--trace", OPT_TRACE, ARG_NONE, NULL, "print m, l, alpha block by block"},
    {"--logits", OPT_LOGITS, ARG_LIST, "X,Y,...", "the logits to stream (with --trace)"},
    {"--sweep", OPT_SWEEP, ARG_STR, "NAME", "run a sweep and write --csv"},
    {"--check", OPT_CHECK, ARG_STR, "C", "naive (default: every output against stage 1) or rows (sampled rows, O(N) memory)"},
    {"--csv", OPT_CSV, ARG_STR, "FILE", "write measured rows as CSV"},
    {"--kernel", OPT_KERNEL, ARG_INT, "K", "kernel version"},
    {"--repeats", OPT_REPEATS, ARG_INT, "R", "timed repetitions"},
    {"--deterministic", OPT_DETERMINISTIC, ARG_NONE, NULL,
     "backward: dQ, dK, dV bitwise the same on every run (ordered dQ additions)"},
    {"--gpus", OPT_GPUS, ARG_INT, "G", "GPUs in the ring (default: every GPU here, at most 8)"},
    {"--virtual", OPT_VIRTUAL, ARG_NONE, NULL, "G shards on GPU 0 (streams and copies instead of NCCL)"},
    {"--budget", OPT_BUDGET, ARG_INT, "S", "--sweep scale: stop before the sweep would pass S seconds (default 120)"},
};
#define N_SPECS (sizeof SPECS / sizeof SPECS[0])

/* The --dtype values a program runs: "fp64 or fp32", from its accepted bits
 * (OPT_DTYPE without any OPT_FP* bit: all four). Returns how many. */
static const struct { opt_set flag; const char *name; } DTYPES[] = {
    {OPT_FP64, "fp64"}, {OPT_FP32, "fp32"}, {OPT_FP16, "fp16"}, {OPT_BF16, "bf16"},
};
static opt_set dtype_bits(opt_set accepted)
{
    opt_set all = OPT_FP64 | OPT_FP32 | OPT_FP16 | OPT_BF16;
    return (accepted & all) ? (accepted & all) : all;
}
static void dtype_list(opt_set accepted, char *buf, size_t n)
{
    opt_set bits = dtype_bits(accepted);
    int total = 0, k = 0;
    for (size_t i = 0; i < 4; i++) total += !!(bits & DTYPES[i].flag);
    buf[0] = '\0';
    for (size_t i = 0; i < 4; i++) {
        if (!(bits & DTYPES[i].flag)) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", k == 0 ? "" : (k == total - 1 ? " or " : ", "),
                 DTYPES[i].name);
        k++;
    }
}

static const flag_help *own_help;
static size_t own_help_n;

void options_help(const flag_help *table, size_t n)
{
    own_help = table;
    own_help_n = n;
}

/* The program's own text for flag, or NULL. */
static const char *own_text(opt_set flag)
{
    for (size_t i = 0; i < own_help_n; i++)
        if (own_help[i].flag == flag) return own_help[i].text;
    return NULL;
}

static void print_usage(const char *usage, opt_set accepted)
{
    printf("%s\n\nOptions:\n", usage);
    for (size_t i = 0; i < N_SPECS; i++) {
        if (!(SPECS[i].flag & accepted)) continue;
        char left[64], help[160];
        snprintf(left, sizeof left, "%s%s%s", SPECS[i].name, SPECS[i].meta ? " " : "",
                 SPECS[i].meta ? SPECS[i].meta : "");
        if (own_text(SPECS[i].flag)) {
            snprintf(help, sizeof help, "%s", own_text(SPECS[i].flag));
        } else if (SPECS[i].flag == OPT_DTYPE) {
            char list[64];
            dtype_list(accepted, list, sizeof list);
            /* fp64 is the parser's default; say so only to a program that
             * names the dtypes it runs and fp64 among them */
            snprintf(help, sizeof help, "number type of the arithmetic: %s%s", list,
                     (accepted & OPT_FP64) ? " (default fp64)" : "");
        } else if ((SPECS[i].flag & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS)) && (accepted & OPT_RANDOM)) {
            /* the real input's shape is its own: a shape flag means random input */
            snprintf(help, sizeof help, "%s (implies --random)", SPECS[i].help);
        } else {
            snprintf(help, sizeof help, "%s", SPECS[i].help);
        }
        printf("  %-20s %s\n", left, help);
    }
    printf("  %-20s %s\n", "--help", "this text");
}

static long long parse_integer(const char *flag, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno)
        fatal(EXIT_BAD_INPUT, "%s: expected an integer, got '%s'", flag, s);
    if (v < lo || v > hi)
        fatal(EXIT_BAD_INPUT, "%s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    return v;
}

/* s as a finite double; else one line naming flag and what was expected. */
static double parse_real(const char *flag, const char *s, const char *expected)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !isfinite(v))
        fatal(EXIT_BAD_INPUT, "%s: expected %s, got '%s'", flag, expected, s);
    return v;
}

static void parse_value(const opt_spec *sp, const char *val, opt_set accepted, options *o)
{
    const char *f = sp->name;
    switch (sp->flag) {
    case OPT_N: o->N = (int)parse_integer(f, val, 1, 1 << 20); break;
    case OPT_D: o->d = (int)parse_integer(f, val, 1, 4096); break;
    case OPT_BATCH: o->batch = (int)parse_integer(f, val, 1, 1 << 16); break;
    case OPT_HEADS: o->heads = (int)parse_integer(f, val, 1, 1 << 16); break;
    case OPT_SEED: o->seed = (uint64_t)parse_integer(f, val, 0, LLONG_MAX); break;
    case OPT_BR: o->Br = (int)parse_integer(f, val, 1, 1 << 20); break;
    case OPT_BC: o->Bc = (int)parse_integer(f, val, 1, 1 << 20); break;
    case OPT_SRAM: o->M = (long)parse_integer(f, val, 1, 1L << 30); break;
    case OPT_BLOCK: o->block = (int)parse_integer(f, val, 1, 1 << 20); break;
    case OPT_KERNEL: o->kernel = (int)parse_integer(f, val, 0, 99); break;
    case OPT_REPEATS: o->repeats = (int)parse_integer(f, val, 1, 100000); break;
    case OPT_GPUS: o->gpus = (int)parse_integer(f, val, 1, 8); break;
    case OPT_BUDGET: o->budget = (double)parse_integer(f, val, 1, 86400); break;
    case OPT_SCALE:
        o->softmax_scale = parse_real(f, val, "a finite number");
        if (o->softmax_scale <= 0) fatal(EXIT_BAD_INPUT, "%s: must be positive, got '%s'", f, val);
        break;
    case OPT_KV_HEADS: o->kv_heads = (int)parse_integer(f, val, 1, 1 << 16); break;
    case OPT_SEQLEN_K: o->seqlen_k = (int)parse_integer(f, val, 1, 1 << 20); break;
    case OPT_WINDOW: {
        /* "L,R", each an integer >= -1; anything else is refused here,
         * before any input is read. */
        char *end;
        errno = 0;
        long l = strtol(val, &end, 10), r = 0;
        bool ok = end != val && *end == ',' && !errno;
        if (ok) {
            const char *rs = end + 1;
            r = strtol(rs, &end, 10);
            ok = end != rs && *end == '\0' && !errno;
        }
        if (!ok)
            fatal(EXIT_BAD_INPUT, "--window: expected two integers L,R (e.g. 255,0), got '%s'", val);
        if (l < -1 || r < -1 || l > (1L << 30) || r > (1L << 30))
            fatal(EXIT_BAD_INPUT, "--window %s: each side is -1 (unbounded) or between 0 and 2^30", val);
        o->window_left = (int)l;
        o->window_right = (int)r;
        break;
    }
    case OPT_CHECK:
        if (strcmp(val, "naive") && strcmp(val, "rows"))
            fatal(EXIT_BAD_INPUT, "--check: expected 'naive' or 'rows', got '%s'", val);
        o->check = val;
        break;
    case OPT_CSV: o->csv = val; break;
    case OPT_SWEEP: o->sweep = val; break;
    case OPT_RULE:
        if (strcmp(val, "paper") && strcmp(val, "io"))
            fatal(EXIT_BAD_INPUT, "--rule: expected 'paper' or 'io', got '%s'", val);
        o->rule = val;
        break;
    case OPT_DTYPE: {
        opt_set bits = dtype_bits(accepted);
        bool ok = false;
        for (size_t i = 0; i < 4; i++) ok |= (bits & DTYPES[i].flag) && !strcmp(val, DTYPES[i].name);
        if (!ok) {
            char list[64];
            dtype_list(accepted, list, sizeof list);
            fatal(EXIT_BAD_INPUT, "--dtype: %s runs %s, not '%s'", g_prog, list, val);
        }
        o->dtype = val;
        break;
    }
    case OPT_LOGITS: {
        char buf[65536];
        if (strlen(val) >= sizeof buf) fatal(EXIT_BAD_INPUT, "--logits: list too long");
        strcpy(buf, val);
        o->n_logits = 0;
        /* Items split at every comma, so "1,,2" has an empty item: refused.
         * -inf is a masked logit, which the online softmax must handle. */
        for (char *item = buf, *next; item; item = next) {
            next = strchr(item, ',');
            if (next) *next++ = '\0';
            if (o->n_logits == MAX_LOGITS) fatal(EXIT_BAD_INPUT, "--logits: more than %d values", MAX_LOGITS);
            if (*item == '\0') fatal(EXIT_BAD_INPUT, "--logits: empty item in '%s'", val);
            o->logits[o->n_logits++] = !strcmp(item, "-inf") ? -INFINITY
                : parse_real("--logits", item, "a finite number or -inf (a masked logit)");
        }
        if (o->n_logits == 0) fatal(EXIT_BAD_INPUT, "--logits: expected a comma-separated list of numbers");
        break;
    }
    case OPT_INPUTS:
        if (!strcmp(f, "--q")) o->q = val;
        else if (!strcmp(f, "--k")) o->k = val;
        else o->v = val;
        break;
    case OPT_DO:
        o->dO = val;
        break;
    case OPT_FWD_OUTPUTS:
    case OPT_GRAD_OUTPUTS:
        if (!strcmp(f, "--out")) o->out = val;
        else if (!strcmp(f, "--lse")) o->lse = val;
        else if (!strcmp(f, "--dq")) o->dq = val;
        else if (!strcmp(f, "--dk")) o->dk = val;
        else o->dv = val;
        break;
    default: break;
    }
}

void parse_options(int argc, char **argv, opt_set accepted, const char *usage, options *o)
{
    memset(o, 0, sizeof *o);
    set_prog_name(argv[0]);
    o->N = 256;
    o->d = 64;
    o->batch = 1;
    o->heads = 1;
    o->seed = 1234;
    o->kernel = -1;
    o->repeats = 0;
    o->dtype = "fp64";
    o->rule = "paper";
    o->window_left = o->window_right = -1;
    o->check = "naive";
    o->budget = 120;
    bool seen[N_SPECS] = {false};

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_usage(usage, accepted);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0)
            fatal(EXIT_BAD_INPUT, "unexpected argument '%s' (flags start with --; see --help)", arg);
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof name)
            fatal(EXIT_BAD_INPUT, "unknown flag '%.40s...' (see --help)", arg);
        memcpy(name, arg, nlen);
        name[nlen] = '\0';

        const opt_spec *sp = NULL;
        for (size_t s = 0; s < N_SPECS; s++)
            if (!strcmp(SPECS[s].name, name) && (SPECS[s].flag & accepted)) sp = &SPECS[s];
        if (!sp) fatal(EXIT_BAD_INPUT, "unknown flag '%s' (see --help)", name);
        /* The second of two values would silently win: refused instead. */
        if (seen[sp - SPECS]) fatal(EXIT_BAD_INPUT, "%s is given twice", name);
        seen[sp - SPECS] = true;

        o->given |= sp->flag;
        if (sp->kind == ARG_NONE) {
            if (eq) fatal(EXIT_BAD_INPUT, "%s takes no value", name);
            if (sp->flag == OPT_CAUSAL) o->causal = true;
            else if (sp->flag == OPT_TRACE) o->trace = true;
            else if (sp->flag == OPT_RANDOM) o->random = true;
            else if (sp->flag == OPT_DETERMINISTIC) o->deterministic = true;
            else if (sp->flag == OPT_VIRTUAL) o->virt = true;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) fatal(EXIT_BAD_INPUT, "%s: missing value (%s %s)", name, name, sp->meta);
        if (!eq && strncmp(val, "--", 2) == 0)
            fatal(EXIT_BAD_INPUT, "%s: missing value before '%s'", name, val);
        parse_value(sp, val, accepted, o);
    }
    stage_option_outputs(o);
}

double effective_scale(const options *opt, int d)
{
    return opt->softmax_scale > 0 ? opt->softmax_scale : 1.0 / sqrt((double)d);
}

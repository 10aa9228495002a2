/* common.c -- the shared harness; see common.h for what each piece is for. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include "npy.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef DATA_DIR
#define DATA_DIR "data"
#endif

/* ------------------------------------------------------------------------- */
/* Errors and allocation                                                      */
/* ------------------------------------------------------------------------- */

const char *g_prog = "fa";

void set_prog_name(const char *argv0)
{
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    g_prog = slash ? slash + 1 : (argv0 ? argv0 : "fa");
}

void fatal(int status, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: error: ", g_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}

void *xmalloc(size_t count, size_t size, const char *what)
{
    if (size && count > SIZE_MAX / size)
        fatal(EXIT_BAD_INPUT, "%s: %zu x %zu bytes overflows", what, count, size);
    size_t bytes = count * size;
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        fatal(EXIT_BAD_INPUT, "%s: cannot allocate %zu bytes", what, count * size);
    return p;
}

void *xcalloc(size_t count, size_t size, const char *what)
{
    if (size && count > SIZE_MAX / size)
        fatal(EXIT_BAD_INPUT, "%s: %zu x %zu bytes overflows", what, count, size);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        fatal(EXIT_BAD_INPUT, "%s: cannot allocate %zu bytes", what, count * size);
    return p;
}

void poison(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

size_t count_nonfinite(const double *x, size_t n, bool allow_neg_inf)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && !(allow_neg_inf && x[i] == -INFINITY)) bad++;
    return bad;
}

/* ------------------------------------------------------------------------- */
/* Random numbers                                                             */
/* ------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(rng_t *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }

double rng_normal(rng_t *rng)
{
    /* Box-Muller; 1 - u keeps the logarithm's argument in (0, 1]. */
    double u1 = 1.0 - rng_uniform(rng), u2 = rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int rng_int(rng_t *rng, int lo, int hi)
{
    return lo + (int)(rng_uniform(rng) * (double)(hi - lo + 1));
}

void fill_normal(double *x, size_t n, double mean, double std, rng_t *rng)
{
    for (size_t i = 0; i < n; i++) x[i] = mean + std * rng_normal(rng);
}

uint64_t fresh_seed(void)
{
    uint64_t seed = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&seed, sizeof seed, 1, f) != 1) seed = 0;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    return seed % 1000000007ull;  /* short enough to retype after --seed */
}

/* ------------------------------------------------------------------------- */
/* Shapes, validation, timing                                                 */
/* ------------------------------------------------------------------------- */

err_stats compare(const char *name, const double *got, const double *ref, size_t n,
                  double atol, double rtol, int max_print)
{
    err_stats e = {0};
    e.n = n;
    double diff2 = 0, ref2 = 0;
    int printed = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        bool ok;
        double ad = 0;
        if (isnan(g) || isnan(r)) {
            ok = false;
            ad = INFINITY;
        } else if (isinf(r) || isinf(g)) {
            ok = g == r;  /* a masked row's L = -inf must come out as -inf */
            ad = ok ? 0 : INFINITY;
        } else {
            ad = fabs(g - r);
            ok = ad <= atol + rtol * fabs(r);
            diff2 += ad * ad;
            ref2 += r * r;
            double rel = ad / fmax(fabs(r), DBL_MIN);
            if (rel > e.max_rel) e.max_rel = rel;
        }
        if (ad > e.max_abs) e.max_abs = ad;
        if (!ok) {
            e.mismatches++;
            if (printed < max_print) {
                fprintf(stderr, "  mismatch %s[%zu]: got %.17g, ref %.17g\n", name, i, g, r);
                printed++;
            }
        }
    }
    e.rel_norm = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
    return e;
}

void err_merge(err_stats *a, err_stats b)
{
    a->max_abs = fmax(a->max_abs, b.max_abs);
    a->max_rel = fmax(a->max_rel, b.max_rel);
    a->rel_norm = fmax(a->rel_norm, b.rel_norm);
    a->mismatches += b.mismatches;
    a->n += b.n;
}

double rel_err(const double *got, const double *ref, size_t n, double scale)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isinf(g) || isinf(r)) {
            if (g != r) return INFINITY;   /* also catches NaN against inf */
            continue;
        }
        double e = fabs(g - r);
        if (isnan(e)) return INFINITY;
        if (e > worst) worst = e;
    }
    return worst / (scale > 0 ? scale : 1.0);
}

double max_abs_finite(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------- */
/* IO counters and the SRAM arena                                             */
/* ------------------------------------------------------------------------- */

const char *const tensor_name[T_COUNT] = {
    "Q", "K", "V", "O", "L", "S", "P", "dO", "dQ", "dK", "dV", "dP", "dS", "D",
};

int report_check(const char *what, int width, double err, double tol)
{
    bool ok = err <= tol;
    printf("  %-*s %10.3e   <= %.3g   %s\n", width, what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

void io_reset(io_counter *io) { memset(io, 0, sizeof *io); }

uint64_t io_total(const io_counter *io)
{
    uint64_t t = 0;
    for (int i = 0; i < T_COUNT; i++) t += io->reads[i] + io->writes[i];
    return t;
}

void io_print(const io_counter *io, const char *indent)
{
    printf("%s", indent);
    for (int i = 0; i < T_COUNT; i++) {
        if (io->reads[i]) printf("%s r %llu  ", tensor_name[i], (unsigned long long)io->reads[i]);
        if (io->writes[i]) printf("%s w %llu  ", tensor_name[i], (unsigned long long)io->writes[i]);
    }
    printf("\n");
}

void sram_init(sram_arena *s, size_t M)
{
    s->base = xmalloc(M, sizeof(double), "SRAM scratch");
    s->M = M;
    s->used = 0;
    s->high_water = 0;
}

void sram_free(sram_arena *s)
{
    free(s->base);
    s->base = NULL;
}

double *sram_alloc(sram_arena *s, size_t n, const char *what)
{
    if (n > s->M - s->used)
        fatal(EXIT_CHECK_FAILED, "SRAM overflow: %s needs %zu elements, %zu of %zu in use",
              what, n, s->used, s->M);
    double *p = s->base + s->used;
    s->used += n;
    if (s->used > s->high_water) s->high_water = s->used;
    poison(p, n);  /* a tile read before it is written shows up as NaN */
    return p;
}

void sram_reset(sram_arena *s) { s->used = 0; }

/* rows x cols elements of es bytes from src (leading dimension sld) to dst
 * (dld), counted as read (load) or written (store) elements of tensor t. */
static void hbm_move(void *dst, int dld, const void *src, int sld, int rows, int cols, size_t es,
                     io_counter *io, tensor_id t, bool load)
{
    for (int r = 0; r < rows; r++)
        memcpy((char *)dst + (size_t)r * dld * es, (const char *)src + (size_t)r * sld * es, (size_t)cols * es);
    (load ? io_read : io_write)(io, t, (uint64_t)rows * (uint64_t)cols);
}

void hbm_load(double *tile, const double *src, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(tile, cols, src, ld, rows, cols, sizeof *tile, io, t, true); }
void hbm_store(double *dst, const double *tile, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(dst, ld, tile, cols, rows, cols, sizeof *tile, io, t, false); }
void hbm_load_f32(float *tile, const float *src, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(tile, cols, src, ld, rows, cols, sizeof *tile, io, t, true); }
void hbm_store_f32(float *dst, const float *tile, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(dst, ld, tile, cols, rows, cols, sizeof *tile, io, t, false); }

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
    {"--random", OPT_RANDOM, ARG_NONE, NULL, "random N(0,1) input instead of the real model input"},
    {"--seed", OPT_SEED, ARG_U64, "S", "seed of the random generator (default 1234)"},
    {"--causal", OPT_CAUSAL, ARG_NONE, NULL, "causal mask, the window (-1, 0): query i sees keys j <= i + seqlen_k - seqlen_q"},
    {"--window", OPT_WINDOW, ARG_STR, "L,R", "sliding window: query i sees keys i + seqlen_k - seqlen_q - L .. + R (-1: unbounded)"},
    {"--kv-heads", OPT_KV_HEADS, ARG_INT, "G", "key/value heads H_kv (H a multiple of it; default H)"},
    {"--seqlen-k", OPT_SEQLEN_K, ARG_INT, "NK", "key/value rows seqlen_k (random input: default --n; real input: its first NK keys)"},
    {"--scale", OPT_SCALE, ARG_DOUBLE, "X", "softmax_scale (default 1/sqrt(d))"},
    {"--q", OPT_INPUTS, ARG_STR, "FILE", "Q from a .npy file, (N,d), (H,N,d) or (B,H,N,d)"},
    {"--k", OPT_INPUTS, ARG_STR, "FILE", "K from a .npy file, (B,H_kv,seqlen_k,d): fewer heads or other length than Q allowed"},
    {"--v", OPT_INPUTS, ARG_STR, "FILE", "V from a .npy file, same shape as K"},
    {"--do", OPT_INPUTS, ARG_STR, "FILE", "dO (upstream gradient), same shape as Q (default: random, --seed)"},
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

static void print_usage(const char *usage, opt_set accepted)
{
    printf("%s\n\nOptions:\n", usage);
    for (size_t i = 0; i < N_SPECS; i++) {
        if (!(SPECS[i].flag & accepted)) continue;
        char left[64], help[160];
        snprintf(left, sizeof left, "%s%s%s", SPECS[i].name, SPECS[i].meta ? " " : "",
                 SPECS[i].meta ? SPECS[i].meta : "");
        if (SPECS[i].flag == OPT_DTYPE) {
            char list[64];
            dtype_list(accepted, list, sizeof list);
            /* fp64 is the parser's default; say so only to a program that
             * names the dtypes it runs and fp64 among them */
            snprintf(help, sizeof help, "number type of the arithmetic: %s%s", list,
                     (accepted & OPT_FP64) ? " (default fp64)" : "");
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

static double parse_real(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !isfinite(v))
        fatal(EXIT_BAD_INPUT, "%s: expected a finite number, got '%s'", flag, s);
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
        o->softmax_scale = parse_real(f, val);
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
            o->logits[o->n_logits++] = !strcmp(item, "-inf") ? -INFINITY : parse_real("--logits", item);
        }
        if (o->n_logits == 0) fatal(EXIT_BAD_INPUT, "--logits: expected a comma-separated list of numbers");
        break;
    }
    case OPT_INPUTS:
        if (!strcmp(f, "--q")) o->q = val;
        else if (!strcmp(f, "--k")) o->k = val;
        else if (!strcmp(f, "--v")) o->v = val;
        else o->dO = val;
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

/* ------------------------------------------------------------------------- */
/* Problems: real input, files, or random                                     */
/* ------------------------------------------------------------------------- */

/* The CPU stages hold four (B,H,N,d) tensors in fp64; past this many
 * elements per tensor (1 GiB each) a run is refused rather than swapped. */
#define MAX_TENSOR_ELEMENTS (1ull << 27)

/* The four dimensions of a tensor file, brought to (B, H, rows, d). */
typedef struct { int B, H, N, d; } dims4;

static void dims_str(dims4 s, char *buf, size_t n)
{
    snprintf(buf, n, "(%d, %d, %d, %d)", s.B, s.H, s.N, s.d);
}

static bool same_dims(dims4 a, dims4 b)
{
    return a.B == b.B && a.H == b.H && a.N == b.N && a.d == b.d;
}

/* Read one tensor file and bring it to (B, H, N, d). */
static double *load_tensor(const char *flag, const char *path, dims4 *s)
{
    npy_array a;
    char err[256];
    if (npy_read(path, &a, err, sizeof err) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: %s", flag, path, err);
    int64_t B = 1, H = 1, N, d;
    switch (a.ndim) {
    case 2: N = a.shape[0]; d = a.shape[1]; break;
    case 3: H = a.shape[0]; N = a.shape[1]; d = a.shape[2]; break;
    case 4: B = a.shape[0]; H = a.shape[1]; N = a.shape[2]; d = a.shape[3]; break;
    default:
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: rank %d array; expected (N,d), (H,N,d) or (B,H,N,d)",
              flag, path, a.ndim);
    }
    if (B < 1 || H < 1 || N < 1 || d < 1 || B > INT_MAX || H > INT_MAX || N > (1 << 20) ||
        d > 4096 || a.numel > MAX_TENSOR_ELEMENTS) {
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: shape has an empty or too large dimension", flag, path);
    }
    if (count_nonfinite(a.data, a.numel, false)) {
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: contains NaN or infinity", flag, path);
    }
    *s = (dims4){(int)B, (int)H, (int)N, (int)d};
    return a.data;
}

/* The mask the options give: --causal is the window (-1, 0). */
static void mask_of_options(const options *opt, int *left, int *right)
{
    if ((opt->given & OPT_CAUSAL) && (opt->given & OPT_WINDOW))
        fatal(EXIT_BAD_INPUT, "--causal and --window %d,%d: causal is --window -1,0; give one of them",
              opt->window_left, opt->window_right);
    *left = -1;
    *right = opt->causal ? 0 : -1;
    if (opt->given & OPT_WINDOW) {
        *left = opt->window_left;
        *right = opt->window_right;
    }
}

static void require_valid(const attn_params *ap)
{
    char why[256];
    if (attn_params_check(ap, why, sizeof why) != 0) fatal(EXIT_BAD_INPUT, "%s", why);
}

/* The real input's K or V thinned to H_kv heads (every (H/H_kv)-th) and cut
 * to its first seqlen_k rows; frees x. */
static double *cut_kv(double *x, dims4 s, int H_kv, int seqlen_k)
{
    if (H_kv == s.H && seqlen_k == s.N) return x;
    double *y = xmalloc((size_t)s.B * H_kv * seqlen_k * s.d, sizeof(double), "K or V, cut");
    for (int b = 0; b < s.B; b++)
        for (int g = 0; g < H_kv; g++)
            memcpy(y + ((size_t)b * H_kv + g) * seqlen_k * s.d,
                   x + ((size_t)b * s.H + (size_t)g * (s.H / H_kv)) * s.N * s.d,
                   (size_t)seqlen_k * s.d * sizeof(double));
    free(x);
    return y;
}

void problem_fill_normal(attn_problem *p, rng_t *rng)
{
    size_t nq = attn_q_numel(&p->params), nkv = attn_kv_numel(&p->params);
    p->Q = xmalloc(nq, sizeof(double), "Q");
    p->K = xmalloc(nkv, sizeof(double), "K");
    p->V = xmalloc(nkv, sizeof(double), "V");
    p->dO = xmalloc(nq, sizeof(double), "dO");
    fill_normal(p->Q, nq, 0, 1, rng);
    fill_normal(p->K, nkv, 0, 1, rng);
    fill_normal(p->V, nkv, 0, 1, rng);
    fill_normal(p->dO, nq, 0, 1, rng);
}

void load_problem(const options *opt, attn_problem *p)
{
    memset(p, 0, sizeof *p);
    rng_t rng;
    rng_seed(&rng, opt->seed);
    bool files = opt->q || opt->k || opt->v;
    bool random = opt->random || (opt->given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS));
    if (files && random)
        fatal(EXIT_BAD_INPUT, "--q/--k/--v cannot be combined with --random, --n, --d, --batch or --heads");
    if (files && (opt->given & OPT_SEQLEN_K))
        fatal(EXIT_BAD_INPUT, "--seqlen-k %d: the --k file gives seqlen_k; drop the flag", opt->seqlen_k);
    int left, right;
    mask_of_options(opt, &left, &right);
    attn_params *ap = &p->params;

    if (!files && random) {
        int H_kv = (opt->given & OPT_KV_HEADS) ? opt->kv_heads : opt->heads;
        int Sk = (opt->given & OPT_SEQLEN_K) ? opt->seqlen_k : opt->N;
        *ap = (attn_params){opt->batch, opt->heads, H_kv, opt->N, Sk, opt->d,
                            effective_scale(opt, opt->d), left, right};
        require_valid(ap);
        double big = (double)opt->batch * opt->heads * fmax(opt->N, (double)Sk) * opt->d;
        if (big > (double)MAX_TENSOR_ELEMENTS)
            fatal(EXIT_BAD_INPUT, "--batch %d --heads %d --n %d --seqlen-k %d --d %d: %.3g elements "
                  "per tensor; the CPU stages take at most %llu", opt->batch, opt->heads, opt->N,
                  Sk, opt->d, big, MAX_TENSOR_ELEMENTS);
        problem_fill_normal(p, &rng);
        snprintf(p->source, sizeof p->source, "random N(0,1), seed %llu", (unsigned long long)opt->seed);
        return;
    }

    const char *qp, *kp, *vp, *dp;
    char qb[512], kb[512], vb[512], db[512];
    if (files) {
        if (!opt->q || !opt->k || !opt->v)
            fatal(EXIT_BAD_INPUT, "--q, --k and --v must be given together (missing %s)",
                  !opt->q ? "--q" : !opt->k ? "--k" : "--v");
        qp = opt->q; kp = opt->k; vp = opt->v; dp = opt->dO;
        snprintf(p->source, sizeof p->source, "files %s, %s, %s", qp, kp, vp);
    } else {
        snprintf(qb, sizeof qb, "%s/q.npy", DEFAULT_INPUT_DIR);
        snprintf(kb, sizeof kb, "%s/k.npy", DEFAULT_INPUT_DIR);
        snprintf(vb, sizeof vb, "%s/v.npy", DEFAULT_INPUT_DIR);
        snprintf(db, sizeof db, "%s/do.npy", DEFAULT_INPUT_DIR);
        qp = qb; kp = kb; vp = vb; dp = opt->dO ? opt->dO : db;
        snprintf(p->source, sizeof p->source, "all-MiniLM-L6-v2 on a real passage (%s)",
                 DEFAULT_INPUT_DIR);
    }
    dims4 sq, sk, sv, sd;
    p->Q = load_tensor("--q", qp, &sq);
    p->K = load_tensor("--k", kp, &sk);
    p->V = load_tensor("--v", vp, &sv);
    char a[80], b[80];
    if (!same_dims(sk, sv)) {
        dims_str(sk, a, sizeof a);
        dims_str(sv, b, sizeof b);
        fatal(EXIT_BAD_INPUT, "shape mismatch: K is %s but V is %s (K and V share one shape "
              "(B, H_kv, seqlen_k, d))", a, b);
    }
    if (sq.B != sk.B || sq.d != sk.d || sq.H % sk.H != 0) {
        dims_str(sq, a, sizeof a);
        dims_str(sk, b, sizeof b);
        fatal(EXIT_BAD_INPUT, "shape mismatch: Q is %s but K is %s (same B and d; Q's heads a "
              "multiple of K's)", a, b);
    }
    int H_kv = sk.H, Sk = sk.N;
    if (files && (opt->given & OPT_KV_HEADS) && opt->kv_heads != sk.H)
        fatal(EXIT_BAD_INPUT, "--kv-heads %d: the --k file has %d heads", opt->kv_heads, sk.H);
    if (!files) {   /* the real input: fewer key/value heads, fewer keys */
        if (opt->given & OPT_SEQLEN_K) {
            if (opt->seqlen_k > sk.N)
                fatal(EXIT_BAD_INPUT, "--seqlen-k %d: the real input has %d keys", opt->seqlen_k, sk.N);
            Sk = opt->seqlen_k;
        }
        if (opt->given & OPT_KV_HEADS) {
            if (sk.H % opt->kv_heads != 0)
                fatal(EXIT_BAD_INPUT, "--kv-heads %d: the %d query heads must be a multiple of the "
                      "key/value heads", opt->kv_heads, sq.H);
            H_kv = opt->kv_heads;
        }
        p->K = cut_kv(p->K, sk, H_kv, Sk);
        p->V = cut_kv(p->V, sv, H_kv, Sk);
        if (H_kv != sk.H || Sk != sk.N) {
            size_t len = strlen(p->source);
            snprintf(p->source + len, sizeof p->source - len, "; keys cut to %d of %d, %d of %d "
                     "key/value heads", Sk, sk.N, H_kv, sk.H);
        }
    }
    *ap = (attn_params){sq.B, sq.H, H_kv, sq.N, Sk, sq.d, effective_scale(opt, sq.d), left, right};
    require_valid(ap);
    if (dp) {
        p->dO = load_tensor("--do", dp, &sd);
        if (!same_dims(sq, sd)) {
            dims_str(sq, a, sizeof a);
            dims_str(sd, b, sizeof b);
            fatal(EXIT_BAD_INPUT, "shape mismatch: Q is %s but dO is %s", a, b);
        }
    } else {
        /* Gradients need a dO; without --do it is drawn at random, and the
         * source line says so, since dQ, dK, dV then depend on --seed. */
        size_t n = attn_q_numel(ap);
        p->dO = xmalloc(n, sizeof(double), "dO");
        fill_normal(p->dO, n, 0, 1, &rng);
        size_t len = strlen(p->source);
        snprintf(p->source + len, sizeof p->source - len, "; no --do: dO random N(0,1), seed %llu",
                 (unsigned long long)opt->seed);
    }
}

void free_problem(attn_problem *p)
{
    free(p->Q);
    free(p->K);
    free(p->V);
    free(p->dO);
    memset(p, 0, sizeof *p);
}

attn_problem problem_slice(const attn_problem *p, int n, int dn)
{
    const attn_params *ap = &p->params;
    attn_problem sl;
    memset(&sl, 0, sizeof sl);
    int nq = n < ap->seqlen_q ? n : ap->seqlen_q;
    int nk = nq + (ap->seqlen_k - ap->seqlen_q);
    nk = nk < 1 ? 1 : (nk > ap->seqlen_k ? ap->seqlen_k : nk);
    dn = dn < ap->d ? dn : ap->d;
    sl.params = (attn_params){1, 1, 1, nq, nk, dn, ap->softmax_scale, ap->window_size_left,
                              ap->window_size_right};
    const double *src[4] = {p->Q, p->K, p->V, p->dO};
    double **dst[4] = {&sl.Q, &sl.K, &sl.V, &sl.dO};
    for (int t = 0; t < 4; t++) {
        int rows = (t == 1 || t == 2) ? nk : nq;
        *dst[t] = xmalloc((size_t)rows * dn, sizeof(double), "problem slice");
        for (int i = 0; i < rows; i++)
            memcpy(*dst[t] + (size_t)i * dn, src[t] + (size_t)i * ap->d, (size_t)dn * sizeof(double));
    }
    snprintf(sl.source, sizeof sl.source, "slice of head 0: %d queries, %d keys, d = %d", nq, nk, dn);
    return sl;
}

/* ------------------------------------------------------------------------- */
/* CSV with provenance                                                        */
/* ------------------------------------------------------------------------- */

void command_line_of(const char *cmd, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(buf, (int)n, p)) buf[strcspn(buf, "\r\n")] = '\0';
    pclose(p);
}

void source_commit(char *buf, size_t n)
{
    const char *env_commit = getenv("FA_COMMIT");
    if (env_commit && *env_commit) snprintf(buf, n, "%s", env_commit);
    else command_line_of("git rev-parse --short HEAD 2>/dev/null", buf, n);
    if (!buf[0]) snprintf(buf, n, "unknown");
}

void utc_date(char *buf, size_t n)
{
    time_t t = time(NULL);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
}

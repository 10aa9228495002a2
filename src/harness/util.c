/* util.c -- errors, allocation, random numbers, validation, timing (util.h). */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

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

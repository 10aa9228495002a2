/*
 * util.h -- what every program of the harness needs first: fatal errors and
 * checked allocation (one-line message, exit status), a fixed-seed random
 * number generator (xoshiro256**, Box-Muller normals), the problem's shape
 * helpers (attn_params.h), validation (max abs / max rel error, mismatches)
 * and wall-clock timing.
 *
 * Units: sizes are in elements unless a name says bytes; times in seconds.
 */
#ifndef FA_UTIL_H
#define FA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------
 * Errors and allocation
 * ------------------------------------------------------------------------- */

/* Exit statuses used by every program. */
enum { EXIT_CHECK_FAILED = 1, EXIT_BAD_INPUT = 2 };

/* Set once by main (argv[0] without its directory); prefixes every message. */
extern const char *g_prog;
void set_prog_name(const char *argv0);

/* Print "prog: error: <message>" on one line to stderr and exit(status). */
_Noreturn void fatal(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* malloc/calloc of count*size bytes, with overflow and failure checked; `what`
 * names the buffer in the error message. Never returns NULL. */
void *xmalloc(size_t count, size_t size, const char *what);
void *xcalloc(size_t count, size_t size, const char *what);

/* Fill n doubles with NaN: outputs are poisoned before an algorithm writes
 * them, so an element it forgot to write cannot pass a check by accident. */
void poison(double *x, size_t n);
/* Number of non-finite entries, ignoring entries equal to -inf when
 * allow_neg_inf is set (a logsumexp of a fully masked row is -inf). */
size_t count_nonfinite(const double *x, size_t n, bool allow_neg_inf);

/* ---------------------------------------------------------------------------
 * Random numbers: xoshiro256** seeded through splitmix64. A fixed seed gives
 * the same stream on every machine; property tests draw a fresh seed and
 * print it so that any failure can be replayed with --seed.
 * ------------------------------------------------------------------------- */
typedef struct { uint64_t s[4]; } rng_t;

void rng_seed(rng_t *rng, uint64_t seed);
uint64_t rng_next(rng_t *rng);
double rng_uniform(rng_t *rng);               /* in [0, 1) */
double rng_normal(rng_t *rng);                /* N(0, 1) */
int rng_int(rng_t *rng, int lo, int hi);      /* uniform in [lo, hi] */
/* x[i] ~ N(mean, std^2), i < n */
void fill_normal(double *x, size_t n, double mean, double std, rng_t *rng);
/* A seed that differs from run to run (time and /dev/urandom). */
uint64_t fresh_seed(void);

/* ---------------------------------------------------------------------------
 * Shapes. The problem itself (sizes, heads, mask, softmax_scale) is an
 * attn_params (attn_params.h); every tensor is row-major, one head a
 * contiguous (rows, d) block.
 * ------------------------------------------------------------------------- */
#include "attn_params.h"

/* Number of blocks of size b that cover a (the last may be short), and min. */
static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
static inline int imin(int a, int b) { return a < b ? a : b; }
/* max that keeps a NaN (fmax drops it): an error that is NaN must not pass. */
static inline double nanmax(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }

/* ---------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------- */
typedef struct {
    double max_abs;      /* max |got - ref| */
    double max_rel;      /* max |got - ref| / max(|ref|, tiny) over entries */
    double rel_norm;     /* ||got - ref||_2 / ||ref||_2 */
    size_t mismatches;   /* entries with |got-ref| > atol + rtol*|ref|, or non-finite */
    size_t n;
} err_stats;

/* Compare got against ref (n entries). An entry passes when
 * |got - ref| <= atol + rtol * |ref|; a NaN anywhere fails; an infinite ref
 * passes only when got is the same infinity (masked rows have L = -inf).
 * Prints the first `max_print` failing entries as "name[i]: got x, ref y". */
err_stats compare(const char *name, const double *got, const double *ref, size_t n,
                  double atol, double rtol, int max_print);
/* Fold b into a (maxima, sums of counts). */
void err_merge(err_stats *a, err_stats b);

/* max |got - ref| / scale over n entries: the error relative to a magnitude
 * the caller chooses (max|V| for O, max(1, max|L|) for L, max|ref| for a
 * gradient), so that a correctly rounded result passes whatever its size.
 * Entries where both are the same infinity (L = -inf of an empty row) count
 * 0; a NaN, or an infinity on one side only, makes the result +inf. */
double rel_err(const double *got, const double *ref, size_t n, double scale);
/* max |x_i| over the finite entries (0 when there are none). */
double max_abs_finite(const double *x, size_t n);

/* ---------------------------------------------------------------------------
 * Timing
 * ------------------------------------------------------------------------- */
double now_seconds(void);   /* monotonic clock */

#endif /* FA_UTIL_H */

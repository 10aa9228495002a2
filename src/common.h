/*
 * common.h -- the shared harness of every stage.
 *
 * A stage file should hold only what is new in it; everything else lives here:
 *   - fatal errors and checked allocation          (one-line message, exit status)
 *   - a fixed-seed random number generator         (xoshiro256**, Box-Muller normals)
 *   - the problem: attn_params (attn_params.h)     (row-major, C order)
 *   - validation                                   (max abs / max rel error, mismatches)
 *   - wall-clock timing
 *   - IO counters and the bounded "SRAM" scratch  (what the IO accounting counts)
 *   - command-line options shared by the stages    (one convention for every program)
 *   - input loading (real model input or random) and writing results as .npy
 *   - output files checked before any work and renamed into place only when
 *     the run succeeded (outputs_finish)
 *
 * Units: sizes are in elements unless a name says bytes; times in seconds.
 */
#ifndef FA_COMMON_H
#define FA_COMMON_H

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

/* ---------------------------------------------------------------------------
 * IO counters. The IO model counts element reads and writes of the tensors
 * that live in slow memory (HBM on a GPU) and nothing else. Algorithms call
 * io_read/io_write where they move data between slow memory and the
 * registers/SRAM; hbm_load/hbm_store below do the copy and the count at once.
 * ------------------------------------------------------------------------- */
typedef enum {
    T_Q, T_K, T_V, T_O, T_L, T_S, T_P,
    T_dO, T_dQ, T_dK, T_dV, T_dP, T_dS, T_D,
    T_COUNT
} tensor_id;

extern const char *const tensor_name[T_COUNT];

typedef struct {
    uint64_t reads[T_COUNT];   /* elements read from slow memory */
    uint64_t writes[T_COUNT];  /* elements written to slow memory */
} io_counter;

void io_reset(io_counter *io);
static inline void io_read(io_counter *io, tensor_id t, uint64_t n)  { if (io) io->reads[t] += n; }
static inline void io_write(io_counter *io, tensor_id t, uint64_t n) { if (io) io->writes[t] += n; }
uint64_t io_total(const io_counter *io);            /* reads + writes, elements */
/* One check of a stage's demonstration: "  what  err  <= tol  ok|FAIL",
 * what padded to width; 0 when err <= tol (a NaN err fails), else 1, so
 * that a program sums the failures. */
int report_check(const char *what, int width, double err, double tol);
/* "Q r 4096  K r 8192 ..." on one line, for learners and test failures. */
void io_print(const io_counter *io, const char *indent);

/* ---------------------------------------------------------------------------
 * The bounded scratch buffer that stands for on-chip SRAM. A tiled algorithm
 * takes all its working tiles from one arena of M elements; the high-water
 * mark is what the tests hold against M.
 * ------------------------------------------------------------------------- */
typedef struct {
    double *base;
    size_t M;           /* capacity, elements */
    size_t used;        /* elements handed out since the last sram_reset */
    size_t high_water;  /* max of used over the arena's life */
} sram_arena;

void sram_init(sram_arena *s, size_t M);
void sram_free(sram_arena *s);
/* n elements from the arena; exceeding M is a bug in the caller's block-size
 * arithmetic, so it is fatal (status 1) rather than silently growing. */
double *sram_alloc(sram_arena *s, size_t n, const char *what);
void sram_reset(sram_arena *s);

/* Copy a rows x cols tile between slow memory (leading dimension ld) and a
 * dense SRAM tile (leading dimension cols), counting rows*cols elements of
 * tensor t as read (load) or written (store). */
void hbm_load(double *tile, const double *src, int rows, int cols, int ld,
              io_counter *io, tensor_id t);
void hbm_store(double *dst, const double *tile, int rows, int cols, int ld,
               io_counter *io, tensor_id t);
/* The same for float tensors (stage 1's fp32 arithmetic). */
void hbm_load_f32(float *tile, const float *src, int rows, int cols, int ld,
                  io_counter *io, tensor_id t);
void hbm_store_f32(float *dst, const float *tile, int rows, int cols, int ld,
                   io_counter *io, tensor_id t);

/* ---------------------------------------------------------------------------
 * Command-line options. One convention for every stage: `--flag value` or
 * `--flag=value`; a stage lists the flags it accepts, and any other flag, a
 * missing value or a bad value is a one-line error with exit status 2.
 * ------------------------------------------------------------------------- */
enum opt_flag {
    OPT_N = 1u << 0, OPT_D = 1u << 1, OPT_BATCH = 1u << 2, OPT_HEADS = 1u << 3,
    OPT_SEED = 1u << 4, OPT_CAUSAL = 1u << 5, OPT_SCALE = 1u << 6,
    OPT_INPUTS = 1u << 7,   /* --q --k --v --do */
    OPT_FWD_OUTPUTS = 1u << 8,  /* --out --lse (OPT_OUTPUTS: all five output files) */
    OPT_CSV = 1u << 9, OPT_DTYPE = 1u << 10,
    OPT_BR = 1u << 11, OPT_BC = 1u << 12, OPT_SRAM = 1u << 13,
    OPT_BLOCK = 1u << 14, OPT_TRACE = 1u << 15, OPT_LOGITS = 1u << 16,
    OPT_SWEEP = 1u << 17, OPT_RANDOM = 1u << 19,
    OPT_KERNEL = 1u << 21, OPT_REPEATS = 1u << 22,
    OPT_RULE = 1u << 23,
    OPT_WINDOW = 1u << 18,   /* --window L,R */
    OPT_KV_HEADS = 1u << 20, /* --kv-heads */
    OPT_SEQLEN_K = 1u << 24, /* --seqlen-k */
    OPT_CHECK = 1u << 25,    /* --check naive|rows */
    /* The flags that describe the problem's mask and shape beyond (B, H, N, d). */
    OPT_MASKS = OPT_CAUSAL | OPT_WINDOW | OPT_KV_HEADS | OPT_SEQLEN_K,
    OPT_DETERMINISTIC = 1u << 26,   /* --deterministic (GPU backward) */
    /* The values of --dtype a program runs, OR-ed into `accepted` beside
     * OPT_DTYPE: --help lists just these and the parser refuses the others.
     * OPT_DTYPE alone means all four. */
    OPT_FP64 = 1u << 27, OPT_FP32 = 1u << 28, OPT_FP16 = 1u << 29, OPT_BF16 = 1u << 30,
};
/* --dq --dk --dv, apart from --out --lse so that a forward-only program
 * (stage 4) does not list them; a macro, since an enum constant must fit an
 * int. */
#define OPT_GRAD_OUTPUTS (1u << 31)
#define OPT_OUTPUTS (OPT_FWD_OUTPUTS | OPT_GRAD_OUTPUTS)   /* --out --lse --dq --dk --dv */
/* The ring of stage 7: --gpus G, --virtual (G shards on one GPU), --budget S
 * (seconds of --sweep scale). Past bit 31, so the sets are 64 bits wide. */
#define OPT_GPUS    (1ull << 32)
#define OPT_VIRTUAL (1ull << 33)
#define OPT_BUDGET  (1ull << 34)
/* The problem and tile flags of a tiled CPU stage (stage 3, stage 6). */
#define OPT_TILED_CPU (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS | OPT_SCALE | \
                       OPT_INPUTS | OPT_OUTPUTS | OPT_BR | OPT_BC | OPT_SRAM | OPT_RULE)
/* A set of OPT_* bits. */
typedef uint64_t opt_set;

#define MAX_LOGITS 4096

typedef struct {
    opt_set given;           /* OPT_* bits of the flags present on the command line */
    int N, d, batch, heads;  /* --n --d --batch --heads (random input) */
    uint64_t seed;           /* --seed */
    bool causal;             /* --causal: window (-1, 0) */
    int window_left, window_right;  /* --window L,R (each -1 or >= 0) */
    int kv_heads;            /* --kv-heads: key/value heads H_kv */
    int seqlen_k;            /* --seqlen-k: key rows (random or the real input) */
    const char *check;       /* --check naive|rows: the reference a tiled run is held to */
    double softmax_scale;    /* --scale; 0 means 1/sqrt(d) */
    const char *q, *k, *v, *dO;                 /* --q --k --v --do input files */
    const char *out, *lse, *dq, *dk, *dv;       /* output files */
    const char *csv;                            /* --csv */
    const char *dtype;                          /* --dtype fp64|fp32|fp16|bf16 */
    int Br, Bc;              /* --br --bc */
    long M;                  /* --sram: scratch size in elements */
    const char *rule;        /* --rule paper|io: how Br, Bc follow from M */
    int block;               /* --block (stage2) */
    bool trace;              /* --trace (stage2) */
    double logits[MAX_LOGITS];  /* --logits a,b,c (stage2) */
    int n_logits;
    const char *sweep;       /* --sweep NAME */
    bool random;             /* --random: random input instead of the real one */
    int kernel;              /* --kernel K (GPU stages) */
    int repeats;             /* --repeats R */
    bool deterministic;      /* --deterministic: bitwise reproducible dQ, dK, dV */
    int gpus;                /* --gpus G (stage 7; 0: every GPU here) */
    bool virt;               /* --virtual: G shards on one GPU (stage 7) */
    double budget;           /* --budget S: seconds of stage 7's --sweep scale (default 120) */
} options;

/* One line per accepted flag, printed by --help. */
typedef struct { opt_set flag; const char *text; } flag_help;

/* Parse argv into opt (defaults: N=256, d=64, batch=1, heads=1, seed=1234,
 * no mask).
 * `accepted` is the OR of OPT_* flags this stage takes (and, with OPT_DTYPE,
 * the OPT_FP* values it runs); `usage` is the stage's own summary printed
 * above the flag list by --help (exit 0), which lists only accepted flags.
 * A flag this stage does not take, a flag given twice, a missing or bad
 * value: one line on stderr and exit 2. */
void parse_options(int argc, char **argv, opt_set accepted, const char *usage,
                   options *opt);

/* ---------------------------------------------------------------------------
 * Inputs and outputs of an attention problem, all fp64 in memory.
 * ------------------------------------------------------------------------- */
/* The one problem type of host code: the CPU stages, the GPU host programs
 * (gpu_host.h's gh_inputs is this type) and stage 7. */
typedef struct {
    attn_params params;  /* sizes, heads, mask, softmax_scale: complete */
    double *Q, *dO;      /* (B, H, seqlen_q, d); dO is the upstream gradient */
    double *K, *V;       /* (B, H_kv, seqlen_k, d) */
    int kind;            /* how random inputs were drawn: 0 N(0,1), files or the real
                          * input; the GPU stages' fault inputs (gpu_host.h) otherwise */
    char source[512];    /* where it came from, for the printed table */
} attn_problem;

/* Q, K, V, dO of problem p allocated and drawn N(0, 1) from rng, in that
 * order (a caller may go on drawing from rng); p->params, kind and source
 * are the caller's. */
void problem_fill_normal(attn_problem *p, rng_t *rng);

/* The default input: Q, K, V, dO of a pretrained transformer on a real
 * sentence (data/input/, see its README.md). */
#define DEFAULT_INPUT_DIR DATA_DIR "/input"

/* Load the problem the options describe and fill p->params completely:
 *   tensors  the files --q --k --v [--do] if given (all three of q, k, v or
 *            none; K and V of one shape (B, H_kv, seqlen_k, d), Q and dO of
 *            (B, H, seqlen_q, d), H a multiple of H_kv); else random N(0,1)
 *            input of (--batch, --heads, --n, --d) with --kv-heads key/value
 *            heads (default --heads) and --seqlen-k keys (default --n) if
 *            --random or any of those flags is given; else the real default
 *            input, whose keys --seqlen-k truncates to the first seqlen_k and
 *            whose key/value heads --kv-heads thins to every (H/H_kv)-th one.
 *   mask     --causal (window (-1, 0)) or --window L,R; none: (-1, -1).
 *   scale    --scale, else 1/sqrt(d).
 * A missing dO is drawn at random (seeded). Every error (missing file, bad
 * .npy, shapes that do not fit together, a flag the input already decides,
 * attn_params_check) exits with status 2 and one line, before any work. */
void load_problem(const options *opt, attn_problem *p);
void free_problem(attn_problem *p);

/* A small problem of its own, B = H = H_kv = 1, cut from query head 0 and
 * its key/value head: the first n query rows, the first n + (seqlen_k -
 * seqlen_q) key rows (clamped to [1, seqlen_k]; keeping the difference keeps
 * every row's visible keys, since the mask depends on j - i - (seqlen_k -
 * seqlen_q) only) and the first dn columns; same mask and softmax_scale.
 * Used for gradient checks, whose cost grows as (n dn)^2. Free with
 * free_problem. */
attn_problem problem_slice(const attn_problem *p, int n, int dn);

/* softmax_scale in effect: --scale if given, else 1/sqrt(d). */
double effective_scale(const options *opt, int d);

/* ---------------------------------------------------------------------------
 * Output files. A failed run leaves every output file as it was:
 *   - parse_options checks each of --out --lse --dq --dk --dv --csv before any
 *     work (the folder exists and a file can be created in it, the path is not
 *     a directory, not another output, not an input; one line naming the flag
 *     and exit 2) and creates a temporary file beside it (".NAME.XXXXXX");
 *   - save_tensor and csv_open write to that temporary file;
 *   - outputs_finish(status), the last thing main does, renames every written
 *     temporary file onto its path when status is 0 and removes them all
 *     otherwise; exit without it (fatal, --help, a signal) removes them too.
 * An existing output that is not a regular file (/dev/stdout, a pipe) is
 * written in place: it has no content to keep.
 * ------------------------------------------------------------------------- */
/* Check path (named by flag in messages) and create its temporary file, as
 * parse_options does for the output flags; a write to a path never staged
 * stages it first. Exits with status 2 if the path cannot be written. */
void stage_output(const char *flag, const char *path);
/* Stage every output the options name (--out --lse --dq --dk --dv --csv),
 * refusing one that is another output or an input; parse_options calls it
 * last. Exits with status 2 on the first path that cannot be written. */
void stage_option_outputs(const options *opt);
/* Rename the outputs written by this run onto their paths when status is 0
 * (returns 0, or 2 if a rename fails), else remove them (returns status).
 * Use as `return outputs_finish(status);` at the end of main. */
int outputs_finish(int status);

/* Write x to path as .npy <f8 of shape (B, H, rows, d), or (B, H, rows)
 * when d == 0 (staged: see outputs_finish). Exits with status 2 if it cannot. */
void save_tensor(const char *path, const double *x, int B, int H, int rows, int d);
/* The four shapes of an attention problem's tensors. */
void save_q_like(const char *path, const double *x, const attn_params *p);    /* Q, O, dQ */
void save_kv_like(const char *path, const double *x, const attn_params *p);   /* dK, dV */
void save_rows(const char *path, const double *x, const attn_params *p);      /* L */

/* ---------------------------------------------------------------------------
 * CSV with provenance: opens path for writing (its temporary file: see
 * outputs_finish), writes '# key: value' lines (commit, date, host, command)
 * and the header line. gnuplot and the scripts skip '#' lines. csv_close
 * closes it and exits with status 2 if any write failed (a full disk).
 * ------------------------------------------------------------------------- */
#include <stdio.h>
FILE *csv_open(const char *path, int argc, char **argv, const char *header);
/* The pieces of that provenance, for programs that write them per row
 * (stage 7): the first line a shell command prints ("" when none); the
 * commit of the code (FA_COMMIT when set: a copy of the tree without .git,
 * as on the GPU machine; else git's short hash; "unknown"); the UTC time
 * now as 2026-12-01T21:00:00Z. */
void command_line_of(const char *cmd, char *buf, size_t n);
void source_commit(char *buf, size_t n);
void utc_date(char *buf, size_t n);
void csv_close(FILE *f);

#endif /* FA_COMMON_H */

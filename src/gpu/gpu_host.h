/*
 * gpu_host.h -- what the GPU stages' host programs (stage4, stage5) share:
 * the inputs of a problem on the host (the options' problem, random ones and
 * the fault inputs), the problem uploaded to the GPU in one dtype, a
 * version run on it with its outputs poisoned first, results fetched back as
 * fp64, the fp64 reference, the error measures and the error rule, the
 * diagnostic lines of a failed check, and .npy output. Plain C over
 * core/fa_gpu.h (no CUDA header); every failure of the GPU library is
 * fatal (exit 1, one line).
 *
 * Tensors follow attn_params.h: Q, O, dO, dQ (B, H, seqlen_q, d); K, V, dK,
 * dV (B, H_kv, seqlen_k, d); L (B, H, seqlen_q), natural-log logsumexp, -inf
 * for a row that sees no key.
 */
#ifndef FA_GPU_HOST_H
#define FA_GPU_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "attn_params.h"
#include "common.h"
#include "fa_gpu.h"

/* The tensors of one problem, by name. */
typedef enum { GH_Q, GH_K, GH_V, GH_O, GH_L, GH_DO, GH_DQ, GH_DK, GH_DV, GH_COUNT } gh_tensor;

extern const char *const gh_tensor_name[GH_COUNT];   /* "Q", "K", ..., "dV" */

/* Elements of tensor t in problem p. */
size_t gh_numel(const attn_params *p, gh_tensor t);

/* A problem on the GPU in one dtype (fa_gpu.h's FA_FP32, FA_FP16, FA_BF16).
 * host[t] holds, in fp64, exactly what the GPU holds for each input (the
 * inputs rounded to the dtype, L to fp32): the reference is computed from
 * these, so rounding the inputs is not counted as the kernels' error. */
typedef struct {
    attn_params p;
    int dtype;
    void *dev[GH_COUNT];        /* device buffers (L fp32, the rest in the dtype) */
    double *host[GH_COUNT];     /* fp64 copies of the inputs given (NULL for the others) */
    void *workspace;            /* grown on demand by gh_run */
    size_t workspace_bytes;
} gh_problem;

/* Allocate every tensor of p on the GPU in dtype and upload Q, K, V and,
 * when not NULL, dO (rounded to the dtype; the rounded values are kept in
 * g->host). */
void gh_upload(gh_problem *g, const attn_params *p, int dtype, const double *Q, const double *K,
               const double *V, const double *dO);
/* Upload the forward's results that the backward reads: O rounded to the
 * dtype and L to fp32 (kept in g->host[GH_O], g->host[GH_L]). */
void gh_set_forward(gh_problem *g, const double *O, const double *L);
void gh_free(gh_problem *g);

/* What a run covers, from --dtype and --kernel: the dtypes (the one given,
 * else fp32, fp16, bf16) and the versions of the pass (the one given, else
 * all); with a version and no dtype, only the dtypes that version takes.
 * dtype_flag NULL and kernel < 0 mean "not given". An unknown dtype or
 * version is a bad input: one line, exit 2. dtypes holds 3, versions 16. */
void gh_select(int pass, const char *dtype_flag, int kernel, int *dtypes, int *nd, int *versions,
               int *nv);

/* The versions of a pass in the table, in order (at most max); their numbers
 * as a list ("0, 1, 2 and 4") for a message. */
int gh_versions(int pass, int *versions, int max);
void gh_version_list(int pass, char *buf, size_t n);

/* Round x (n entries) in place to the nearest value of the dtype. */
void gh_round(double *x, size_t n, int dtype);

/* The device pointers of g as the library takes them. */
fa_ptrs gh_ptrs(gh_problem *g);

/* Run (pass, version) once: the pass's outputs are poisoned (NaN) first, so
 * an element the kernels leave unwritten is caught. Returns FA_OK, or the
 * library's code when the version does not take this problem (the reason
 * in fa_error_string()); any CUDA failure is fatal. Synchronizes. */
int gh_run(gh_problem *g, int pass, int version, int deterministic);
/* Median time in ms of `repeats` runs (fa_time: L2 flushed, outputs
 * poisoned before each, outside the timed region). */
double gh_time(gh_problem *g, int pass, int version, int deterministic, int repeats);

/* Copy tensor t back, converted to fp64 (dst: gh_numel entries). */
void gh_fetch(const gh_problem *g, gh_tensor t, double *dst);
/* Copy tensor t back as raw bytes (dst: gh_bytes bytes), for bitwise
 * comparisons between runs. */
size_t gh_bytes(const gh_problem *g, gh_tensor t);
void gh_fetch_raw(const gh_problem *g, gh_tensor t, void *dst);

/* The fp64 reference over every head of p: O, L and, when dQ is not NULL,
 * dQ, dK, dV (gradients of sum(dO * O)); stage 1, masked, grouped heads
 * summed. Tensors as in the header above. */
void gh_reference(const attn_params *p, const double *Q, const double *K, const double *V,
                  const double *dO, double *O, double *L, double *dQ, double *dK, double *dV);

/* An error measure of got against ref (n entries):
 *   err      max |got - ref| / scale, where scale = max |ref| (0 only when
 *            ref is all zero: then the `fallback` magnitude the caller gives,
 *            the size of the terms whose sum is zero);
 *   norm     ||got - ref||_2 / ||ref||_2 (absolute when ref is all zero);
 *   nonfinite  entries of got that are NaN or infinite where ref is finite
 *            (an -inf of L matching an -inf of ref is right, not counted);
 * a non-finite entry makes err infinite. */
typedef struct {
    double err, norm, scale;
    size_t nonfinite;
} gh_err;
gh_err gh_compare(const double *got, const double *ref, size_t n, double fallback);

/* Write x (tensor t of p) to path as .npy, float64, with t's shape. Exit 2
 * with one line if it cannot. */
void gh_save(const char *path, const double *x, const attn_params *p, gh_tensor t);

/* ------------------------------------------------------------------------- */
/* Inputs on the host                                                         */
/* ------------------------------------------------------------------------- */

/* Normal: N(0, 1). The others are fault inputs, the kind public bug reports
 * of attention kernels describe: scaled logits that overflow fp16 or make
 * exp(S - m) ill-conditioned in fp32. */
typedef enum { GH_IN_NORMAL, GH_IN_HUGE, GH_IN_NEG900, GH_IN_NEAR_NEG } gh_input_kind;
extern const char *const gh_input_name[4];   /* "N(0,1)", "Q, K ~ U[4e4, 6.5e4] ...", ... */

/* A problem's inputs in fp64: the harness's one problem type (common.h),
 * its kind a gh_input_kind. */
typedef attn_problem gh_inputs;

/* Random inputs of p from seed, of the given kind:
 *   GH_IN_NORMAL    Q, K, V, dO ~ N(0, 1)
 *   GH_IN_HUGE      Q, K ~ U[4e4, 6.5e4]: scaled logits ~2e10 (d = 64)
 *   GH_IN_NEG900    Q, K ~ -900 U[0, 1): scaled logits ~1e6, beyond fp16
 *   GH_IN_NEAR_NEG  q = (a, x), k = (-a, y): scaled logits -7.5e4 + a few
 * Every value is then rounded to bf16 and what fp16 would make subnormal is
 * flushed to 0, so the inputs are exact in fp32, fp16 and bf16 and one fp64
 * reference serves every dtype. */
void gh_inputs_random(gh_inputs *in, const attn_params *p, gh_input_kind kind, uint64_t seed);
/* The problem of the options (real input, files or random, with the mask,
 * key length and key/value heads they give), from load_problem: every bad
 * input exits 2 with one line, before any GPU work. */
void gh_inputs_of_options(gh_inputs *in, const options *opt);
/* The real input (all-MiniLM-L6-v2, every head) with window (left, right)
 * and its first seqlen_k keys (0: all of them); --seed and --scale of opt
 * kept, its shape and mask flags dropped. */
void gh_inputs_real(gh_inputs *in, const options *opt, int left, int right, int seqlen_k);
void gh_inputs_free(gh_inputs *in);
/* True when Q, K, V (and dO, with grads) are exact in every dtype of the
 * list, so that one reference serves them all. */
bool gh_inputs_exact(const gh_inputs *in, const int *dtypes, int nd, bool grads);

/* "(B,H/H_kv,Sq,Sk,d) = (1,8/2,200,130,64), causal" */
void gh_describe(const attn_params *p, char *buf, size_t n);

/* A row of a test table: a name, the sizes, the window (-1: unbounded) and
 * the input kind; softmax_scale 1/sqrt(d). */
typedef struct {
    const char *what;
    int B, H, H_kv, Sq, Sk, d, left, right;
    gh_input_kind kind;
} gh_tcase;
attn_params gh_tcase_params(const gh_tcase *c);
/* The two random problems of a run without shape flags (after the real
 * input): (2,4/4,1000,1000,64) and (1,4/2,1500,1500,128) causal. */
extern const gh_tcase gh_default_cases[2];
/* The sizes both GPU test suites cover: N = 1, 17, 113,
 * 1023, 4097 at d = 64, and d = 16 to 128 (20: not a multiple of 8; 48, 80,
 * 96, 112: between the powers of two), unmasked. */
#define GH_SIZE_CASES 14
extern const gh_tcase gh_size_cases[GH_SIZE_CASES];
/* The masks, grouped heads, a grid of more blocks than SMs and the fault
 * inputs, which both suites cover: GH_SHARED_CASES rows into out; each
 * suite appends its own. */
#define GH_SHARED_CASES 10
size_t gh_shared_cases(int sm_count, gh_tcase *out);

/* The first line of a test suite, "<stage> GPU tests on <device>; seed S
 * (replay: <program> --sweep tests --seed S)"; returns S: --seed if given,
 * else a fresh one. */
uint64_t gh_tests_seed(const char *stage, const char *program, const options *opt, const char *device);
/* "<stage> <what> <shape>" (gh_describe), the name of a test. */
void gh_test_name(const char *stage, const char *what, const attn_params *p, char *buf, size_t n);
/* For each case i: random inputs from seed0 + i, passed to fn with the
 * test's name. Returns the sum of fn's results (checks failed). */
typedef int (*gh_case_fn)(void *ctx, const gh_inputs *in, const char *name);
int gh_run_cases(const char *stage, const gh_tcase *cases, size_t n, uint64_t seed0, gh_case_fn fn, void *ctx);

/* ------------------------------------------------------------------------- */
/* The reference and the rule                                                 */
/* ------------------------------------------------------------------------- */

/* The fp64 reference of one problem (gh_reference) and, per tensor, the
 * magnitude an error is measured against when the reference is all zero
 * (N = 1 gives dQ = dK = 0 exactly): the size of the terms that cancel,
 * max|V| for O, softmax_scale max|dO| max|V| max|K| for dQ, the same with Q
 * for dK, max|dO| for dV. Without dO, the gradients are NULL. */
typedef struct {
    double *O, *L, *dQ, *dK, *dV;
    double fallback[GH_COUNT];
} gh_ref;
void gh_ref_compute(gh_ref *r, const attn_params *p, const double *Q, const double *K, const double *V,
                    const double *dO);
void gh_ref_free(gh_ref *r);

/* Call fn once per dtype of the list with the inputs uploaded in that dtype
 * (dO too when grads) and their reference: computed once when the inputs are
 * exact in every dtype, else per dtype from the rounded values the GPU
 * holds. Returns the sum of fn's results (checks failed). */
typedef int (*gh_dtype_fn)(void *ctx, const gh_inputs *in, gh_problem *g, const gh_ref *ref);
int gh_each_dtype(const gh_inputs *in, const int *dtypes, int nd, bool grads, gh_dtype_fn fn, void *ctx);

/* The error rule of the GPU stages for one output of one version: the error
 * allowed, as a fraction of the output's scale.
 *   fp32        1e-5
 *   fp16, bf16  the sanity bound (fp16 1e-2, bf16 5e-2); for a version other
 *               than 0, also at most 2 v0_err + floor, where v0_err is version
 *               0's error on the same inputs (negative: version 0 did not run)
 *               and floor, which stages 4 and 5 pass as fa_unit_roundoff(dtype),
 *               keeps two correctly rounded results from failing
 *   fault       infinity (fault inputs: only finiteness is checked here)
 * *twice_v0 says whether the 2 x v0 bound is the one in force. */
double gh_allowed(int dtype, int version, double v0_err, double floor, bool fault, bool *twice_v0);

/* Tensor t of a version (its errors e, entries got) against the rule's
 * bound `allowed`: 0 when no entry is non-finite and e->err <= allowed;
 * else 1, with the failure as one line in why (who, the tensor, the bound;
 * twice_v0 says the 2 x v0 rule set it) and gh_diagnose's lines printed. */
int gh_judge(const char *who, const attn_params *p, gh_tensor t, const gh_err *e, double allowed, bool twice_v0,
             const double *got, const double *ref, char *why, size_t n);

/* What a failed comparison looks like, on lines starting with '#': entries
 * of tensor t off by more than tol (absolute; NaN and infinities count), the
 * worst and the first three with (b, h, row, col), and the ranges of heads,
 * rows and columns they fall in, so that a wrong tile edge (rows repeating
 * every 64) or mma fragment (columns in groups of 8 or 16) shows as a
 * pattern. `who` starts the first line ("v2 bf16"). */
void gh_diagnose(const char *who, const attn_params *p, gh_tensor t, const double *got, const double *ref,
                 double tol);

/* ------------------------------------------------------------------------- */
/* The program's frame                                                        */
/* ------------------------------------------------------------------------- */

/* Refuse, with one line and exit 2 (no GPU needed): a problem one of the
 * chosen versions cannot run in one of the chosen dtypes (only when check,
 * i.e. --kernel was given; otherwise such a version is listed as not run),
 * and a problem whose CPU reference would build seqlen_q x seqlen_k matrices
 * beyond 64e6 entries. */
void gh_check_problem(int pass, const attn_params *p, const int *dtypes, int nd, const int *versions,
                      int nv, bool check);
/* The run a GPU program's options ask for, every bad input refused with
 * one line and exit 2 before any GPU work: the dtypes and versions of
 * --dtype and --kernel (gh_select; versions holds 16), one of each when
 * `outputs` (the flags output_flags names, e.g. "--out/--lse", were given),
 * and the problem of the options (gh_inputs_of_options, into in, which is
 * zeroed first; free with gh_inputs_free) checked against them
 * (gh_check_problem, strictly when --kernel was given). */
void gh_run_of_options(int pass, const options *opt, bool outputs, const char *output_flags, gh_inputs *in,
                       int *dtypes, int *nd, int *versions, int *nv);
/* The GPU: false (after printing "<stage>: no CUDA GPU here; ...") when there
 * is none; else its description in device and its SM count. */
bool gh_device(const char *stage, char *device, size_t n, int *sm_count);
/* csv_open, plus the '# source commit (FA_COMMIT)' line a copy of the tree
 * without .git (the GPU machine) is given through the environment. */
FILE *gh_csv_open(const char *path, int argc, char **argv, const char *header);

#endif /* FA_GPU_HOST_H */

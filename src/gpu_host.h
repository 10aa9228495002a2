/*
 * gpu_host.h -- what the GPU stages' host programs (stage4, stage5) share:
 * a problem uploaded to the GPU in one dtype, a version run on it with its
 * outputs poisoned first, results fetched back as fp64, the fp64 reference,
 * the error measures, and .npy output. Plain C over kernels/fa_gpu.h (no
 * CUDA header); every failure of the GPU library is fatal (exit 1, one line).
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

#endif /* FA_GPU_HOST_H */

/*
 * fa_gpu.h -- the C interface of the project's CUDA kernels (libfa_gpu.so and
 * the host programs stage4, stage5, stage7). Plain C: the host programs and
 * the Python tools (python/flashattn_stages/fa.py mirrors this file through ctypes) never
 * include a CUDA header.
 *
 * A call names a pass (forward or backward), a version and a dtype, and
 * takes the problem (attn_params, core/attn_params.h: sizes, grouped heads,
 * softmax_scale, window) and the device pointers (fa_ptrs). Versions are
 * rows of one table (kernels/fa_api.cu); fa_version() describes each, so the
 * programs, tests and tools loop over the table instead of knowing versions.
 *
 * Layout: Q, O, dO, dQ (B, H, seqlen_q, d); K, V, dK, dV (B, H_kv, seqlen_k,
 * d), row-major in the dtype unless fa_ptrs gives strides (versions whose
 * row says `strided` read them; the others take the contiguous layout
 * only); L = softmax_lse (B, H, seqlen_q) fp32, contiguous always, the
 * natural-log logsumexp of each row of softmax_scale Q K^T over the keys the
 * row sees, -inf for a row that sees none (its O row is 0). All pointers are
 * device pointers. Every function returns FA_OK or an FA_ERR_* code;
 * fa_error_string() gives the last error as one line.
 */
#ifndef FA_GPU_H
#define FA_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "attn_params.h"
#include "varlen.h"

#ifdef __cplusplus
extern "C" {
#endif

enum fa_dtype { FA_FP32 = 0, FA_FP16 = 1, FA_BF16 = 2 };
#define FA_DT(t) (1u << (t))   /* a dtype's bit in fa_version.dtypes */
enum {
    FA_OK = 0,
    FA_ERR_UNSUPPORTED = 2,   /* a shape/dtype/version/GPU this version does not run (exit 2) */
    FA_ERR_CUDA = 3,          /* a CUDA or cuBLAS call failed */
};
enum fa_pass { FA_FORWARD = 0, FA_BACKWARD = 1 };

/* Element strides of one tensor seen as (B, heads, seqlen, d), the last
 * dimension contiguous: as FlashAttention's parameters carry them, so that a
 * (B, seqlen, heads, d) view or a slice of one packed QKV projection needs
 * no copy. All three 0 means the contiguous layout (batch = heads seqlen d,
 * head = seqlen d, row = d), which is what a zeroed fa_ptrs gives. */
typedef struct {
    int64_t batch, head, row;
} fa_stride;

/* Device pointers of one call. The forward reads q, k, v and writes o and
 * softmax_lse; the backward reads q, k, v, o, softmax_lse, do_ and writes dq,
 * dk, dv. workspace: fa_workspace_bytes() bytes (NULL when that is 0).
 * The strides (zero: contiguous) are read by versions whose row says
 * `strided`; fa_forward/fa_backward refuse others any non-contiguous one. */
typedef struct {
    const void *q, *k, *v;   /* (B,H,Sq,d), (B,H_kv,Sk,d), (B,H_kv,Sk,d) */
    void *o;                 /* (B,H,Sq,d) */
    float *softmax_lse;      /* (B,H,Sq) fp32 */
    const void *do_;         /* (B,H,Sq,d), the upstream gradient dO ("do" is a C keyword) */
    void *dq, *dk, *dv;      /* shapes of q, k, v */
    void *workspace;
    size_t workspace_bytes;
    fa_stride sq, sk, sv, so, sdo, sdq, sdk, sdv;   /* strides of q, k, v, o, do_, dq, dk, dv */
} fa_ptrs;

/* A field that rows written before it existed leave out: 0 (C++ designated
 * initializers warn about an omitted field unless it has a default). */
#ifdef __cplusplus
#define FA_DEFAULT_0 = 0
#else
#define FA_DEFAULT_0
#endif

/* One row of the table of versions. */
typedef struct {
    int pass;                /* FA_FORWARD or FA_BACKWARD */
    int version;             /* the number given to --kernel */
    const char *name;        /* "v2" */
    const char *what;        /* one line: what the version is */
    unsigned dtypes;         /* FA_DT bits of the dtypes it takes */
    int d_min, d_max;        /* head dimensions it takes ... */
    int d_multiple;          /* ... that are multiples of this */
    int masks;               /* 1: takes windows, seqlen_q != seqlen_k and H_kv < H */
    int deterministic;       /* 1: has a deterministic mode (backward) */
    int min_cc;              /* least compute capability (major*10+minor), e.g. 90 */
    const char *slug;        /* "mma": with the name, the benchmarks' label (ours_v2_mma) */
    int strided;             /* 1: reads fa_ptrs' strides (rows 16-byte aligned); 0: contiguous only */
    int varlen FA_DEFAULT_0; /* 1: runs packed sequences of different lengths (fa_forward_varlen) */
    int prefer FA_DEFAULT_0; /* 1: the op takes it before higher-numbered versions of its pass (a
                                number names a technique, not a rank: backward 3, Hopper's, runs
                                faster than backward 4 where it runs) */
    double center_rate FA_DEFAULT_0; /* backward: FLOP/s (fa_flops) it attains at best on the H200 at the
                                centering rule's measured shapes (data/gpu/dq_accuracy.csv, kind=time,
                                ms_keep_k), rounded up: fa_bwd_center_cost's denominator; 0: not
                                measured, FA_BWD_CENTER_RATE */
} fa_version_info;

int fa_num_versions(int pass);
/* One more than the highest version number of the pass. A number names one
 * technique in both passes (core/versions.def), so a pass may lack some
 * numbers below it: loop to this and skip those fa_version() does not know. */
int fa_version_limit(int pass);
/* The row of (pass, version), NULL when there is none. */
const fa_version_info *fa_version(int pass, int version);

/* FA_OK when (pass, version) runs this dtype and problem on this GPU (the
 * GPU part is skipped when there is none), else FA_ERR_UNSUPPORTED with the
 * reason, naming the flag, in fa_error_string(). Needs no GPU for the shape
 * part: the host programs call it before looking for one. */
int fa_check_supported(int pass, int version, int dtype, const attn_params *p);
/* The same without the GPU check (what a machine without a GPU can say). */
int fa_check_problem(int pass, int version, int dtype, const attn_params *p);

/* The strides a call uses: fa_ptrs' own, with an all-zero one replaced by
 * the contiguous layout's (q, o, do_, dq of (B, H, seqlen_q, d); k, v, dk,
 * dv of (B, H_kv, seqlen_k, d)), in the order sq, sk, sv, so, sdo, sdq, sdk,
 * sdv. Host only. */
void fa_strides_of(const attn_params *p, const fa_ptrs *x, fa_stride out[8]);
/* 1 when every stride fa_strides_of gives is the contiguous layout's. */
int fa_strides_contiguous(const attn_params *p, const fa_ptrs *x);

/* Device workspace in bytes (0 for most versions). */
size_t fa_workspace_bytes(int pass, int version, int dtype, const attn_params *p);

/* Query rows (Br) and key rows (Bc) per tile of a tiled version at head
 * dimension d; 0 for a materialized one. */
int fa_block_rows(int pass, int version, int d);
int fa_block_cols(int pass, int version, int d);

/* Tiles (query block, key block) the version computes, and those the mask
 * lets it skip, from core/mask.h and the version's Br, Bc (0, 0 for a
 * materialized version, which computes everything). Per head. */
void fa_tiles(int pass, int version, const attn_params *p, int64_t *visited, int64_t *skipped);

/* The mask of core/mask.h as data: visible[i * seqlen_k + j] = 1 when query i
 * sees key j (mask_visible), else 0; a seqlen_q x seqlen_k row-major byte
 * matrix in host memory that the caller owns. For tools that must hand the
 * mask to another library (the PyTorch op's tests give it to SDPA as its
 * boolean attn_mask), so that no other language spells the rule. Host only,
 * needs no GPU; FA_ERR_UNSUPPORTED for a malformed problem. The same symbol,
 * signature and body (attn_mask_fill) in libfa_mask.so, which needs no CUDA. */
int fa_mask_fill(const attn_params *p, unsigned char *visible);

/* The IO model of the version: bytes of slow memory (HBM) it reads and
 * writes, L and D in fp32, the rest in the dtype (see each version's file). */
double fa_model_bytes(int pass, int version, int dtype, const attn_params *p);
/* The floor of any algorithm: each input read once, each output written once. */
double fa_compulsory_bytes(int pass, int dtype, const attn_params *p);
/* FLOPs as the FlashAttention papers count them: forward 4 B H Sq Sk d
 * scaled by the visible fraction of the score matrix (1/2 for causal with
 * Sq = Sk, as the papers halve it), backward 2.5 times the forward. */
double fa_flops(int pass, const attn_params *p);

/* Run one pass. Asynchronous on `stream` (a cudaStream_t, NULL = default):
 * returns after the launches. flags (backward only) is a set of
 * FA_BWD_* bits; 1 is FA_BWD_DETERMINISTIC, so 0 and 1 keep their meaning. */
#define FA_BWD_DETERMINISTIC 1   /* dQ, dK, dV bitwise the same on every call with the same inputs */
/* FA_BWD_CENTER_K: run on K centered over the keys (K - c, c near the mean
 * of K's rows per batch and key/value head, every K - c exact in the dtype,
 * with L shifted to match; stage5_bwd_center.cu, bwd-center), which keeps dQ
 * accurate when K has a large part common to all keys (every logit far from
 * zero). FA_BWD_CENTER_AUTO: center where fa_bwd_center_cost(version, ..)
 * < FA_BWD_CENTER_MAX_COST, keep K as given elsewhere; fa_backward decides
 * per call from the version's measured rate, and keeps K as given for packed
 * sequences (fa_backward_varlen refuses FA_BWD_CENTER_K: c would be per
 * sequence). Neither bit: K as given. Never either
 * with K, V a block of a longer row's keys (stage 7's shards): a row's share
 * of dS over a block need not sum to zero. */
#define FA_BWD_CENTER_K 2
#define FA_BWD_CENTER_AUTO 4
/* FA_BWD_DQ_PASS: K centered as FA_BWD_CENTER_K, and besides a pass of its
 * own (kernels/stage5_bwd_dq.cu) that forms D = rowsum(P * dP) from fp32 P
 * and dP instead of from the 16-bit O, and, for a version that rounds dS
 * or P to 16 bits (0, 2, 3, 4), dQ from fp32 dS split in two 16-bit
 * parts: dQ as an fp32 backward's, at the cost of up to six more N^2 d
 * products (chapters/21-gpu-backward.md measures it). fp16/bf16, d a
 * multiple of 16 up to 128, no variable lengths. Never the default: the op's
 * accurate_dq="full". */
#define FA_BWD_DQ_PASS 8
/* FA_OK when the dQ pass takes dtype and p's head dimension (fp16/bf16, d
 * a multiple of 16 up to 128), else FA_ERR_UNSUPPORTED with one line saying
 * which; host code, no GPU needed (the pass also needs rows that start on
 * 16 bytes, which fa_backward checks on the pointers). */
int fa_bwd_dq_pass_supported(int dtype, const attn_params *p);
/* Bytes of slow memory the dQ pass moves, both phases (the version's
 * kernel not included; version 1 runs phase 0 alone, about half of it):
 * the closed form of kernels/stage5_bwd_dq.cu, which Nsight Compute's
 * count of the pass's kernels is set against
 * (chapters/21-gpu-backward.md). */
double fa_bwd_dq_pass_bytes(int dtype, const attn_params *p);

/* The centering's predicted cost as a fraction of backward `version`'s time
 * (dtype, p as fa_backward's): the one rule FA_BWD_CENTER_AUTO, the PyTorch
 * op's accurate_dq=None and the measurement (scripts/gpu/dq_accuracy.py, its
 * predicted_ratio column) read. INFINITY for a pass without keys or FLOPs or
 * a version the table lacks.
 *   pre-pass bytes  es (2 B H_kv Sk d + B H_kv Sk d + B H Sq d) + 8 B H Sq
 *                   (K read twice and K_c written; Q read and L' written in
 *                   D's pass, which runs anyway) + the partials (24 bytes a
 *                   column per block of 256 keys)
 *   pre-pass time   bytes / FA_BWD_CENTER_BW + FA_BWD_CENTER_LAUNCH_S (its
 *                   three kernel launches)
 *   backward time   fa_flops(FA_BACKWARD, p) / the version's center_rate
 *                   (FA_BWD_CENTER_RATE where its row has none)
 * Both rates are measured (data/gpu/dq_accuracy.csv, kind=time: bf16, B N =
 * 16384, H d = 2048, N = 512 to 16384, causal and not, each backward with
 * and without the pre-pass). A version's center_rate is the highest FLOP/s
 * its backward reached there, so its predicted backward time is never
 * longer than a measured one at those shapes. FA_BWD_CENTER_BW is a
 * cautious bandwidth for the pre-pass, not the 4 TB/s of a copy: over
 * those rows the measured difference (ms_centered - ms_keep_k less the
 * launches) has a median of 0.58 of this rule's prediction (about 2.6
 * TB/s) but spreads 0.09 to 2.42 times it, and a rule at 2.5 TB/s centers
 * version 3 where the centered backward measured 4.6-8.2% slower
 * (tests/center_rule.py holds the rule to never undercounting the
 * median and to the measured costs). The
 * cost then falls as 1 / N at a rate per version: with Sq = Sk = N and
 * H = H_kv about 0.8 center_rate / (FA_BWD_CENTER_BW N) without a mask
 * and twice that causal, at the bench shapes 90 / N (v2), 130 / N (v4) and
 * 280 / N (v3), so under 3% from N = 3100, 4300 and 9300 without a mask and
 * from twice those causal.
 * tests/center_rule.py holds the rule to the csv: the auto mode centers at
 * no measured shape whose measured cost is 3% or more. Grouped heads read a
 * smaller K and pass sooner. Host only, needs no GPU. Source: the byte
 * count of the kernels in stage5_bwd_center.cu and stage5_bwd_prepass.cu
 * (bwd-center, bwd-dot). */
#define FA_BWD_CENTER_BW 1.5e12          /* bytes/s: the pre-pass, cautiously (under its measured median) */
#define FA_BWD_CENTER_LAUNCH_S 6.0e-6    /* three launches in one stream */
#define FA_BWD_CENTER_RATE 500.0e12      /* FLOP/s: a row without center_rate; above every measured one */
#define FA_BWD_CENTER_MAX_COST 0.03
double fa_bwd_center_cost(int version, int dtype, const attn_params *p);
/* 1 when FA_BWD_CENTER_AUTO centers backward `version` on this problem (cost < FA_BWD_CENTER_MAX_COST), else 0. */
int fa_bwd_center_auto(int version, int dtype, const attn_params *p);
int fa_forward(int version, int dtype, const attn_params *p, const fa_ptrs *x, void *stream);
int fa_backward(int version, int dtype, const attn_params *p, const fa_ptrs *x, int flags,
                void *stream);

/* Median time in milliseconds of `repeats` runs (after one warm-up), with
 * CUDA events around each run; the outputs are poisoned and, when flush_l2
 * is set, the L2 cache overwritten before each, outside the timed region;
 * runs rotate over n_sets pointer sets (so that inputs smaller than the L2
 * are not served from it when flush_l2 is 0). */
int fa_time(int pass, int version, int dtype, const attn_params *p, const fa_ptrs *sets,
            int n_sets, int flags, int repeats, int flush_l2, double *median_ms);

/* Variable lengths (FlashAttention's flash_attn_varlen_func; core/varlen.h):
 * B sequences packed along the rows. Q, O, dO, dQ are (total_q, H, d), K, V,
 * dK, dV (total_k, H_kv, d); sequence b's rows are cu_seqlens_q[b] ..
 * cu_seqlens_q[b+1] - 1 and cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1 (int32
 * device arrays of B + 1 entries, 0 first, non-decreasing, the totals last:
 * varlen_check says so on the host; a kernel given other arrays stays inside
 * the tensors but computes nothing meaningful). L = softmax_lse is (H,
 * total_q) fp32, FlashAttention's varlen layout. The attn_params p gives B
 * (the sequences), H, H_kv, d, softmax_scale, the window, and as seqlen_q,
 * seqlen_k the longest sequence (max_seqlen_q, max_seqlen_k; each >= 1):
 * every sequence is masked as its own problem of (len_q, len_k) rows, so
 * causal is aligned to each sequence's last query and key (mask.h). Strides:
 * fa_ptrs' `head` and `row` (batch must be 0); all zero is the packed layout
 * (row = heads d, head = d). Versions whose row says `varlen` run it. */
typedef struct {
    const int32_t *cu_seqlens_q, *cu_seqlens_k;   /* device, B + 1 entries each */
    int total_q, total_k;                         /* rows of the packed Q and K: the last entries */
} fa_varlen;

/* fa_check_supported for a varlen call: the version's row must say
 * `varlen`; the sizes above (the arrays' contents are not read). Needs no
 * GPU for the shape part. FA_OK or FA_ERR_UNSUPPORTED with one line. */
int fa_check_varlen(int pass, int version, int dtype, const attn_params *p, const fa_varlen *vl);
size_t fa_workspace_bytes_varlen(int pass, int version, int dtype, const attn_params *p, const fa_varlen *vl);
/* The strides of a varlen call, as fa_strides_of (batch 0). Host only. */
void fa_varlen_strides_of(const attn_params *p, const fa_ptrs *x, fa_stride out[8]);
/* Host check of the two arrays (host copies): core/varlen.h's varlen_check. */
int fa_varlen_check(const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k, int B, int total_q, int total_k,
                    int max_seqlen_q, int max_seqlen_k);
int fa_forward_varlen(int version, int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x,
                      void *stream);
/* flags as fa_backward's; FA_BWD_CENTER_K is refused (K's mean would be per sequence). */
int fa_backward_varlen(int version, int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x,
                       int flags, void *stream);

/* Bytes of one element of the dtype (4, 2, 2), and its name. */
size_t fa_dtype_bytes(int dtype);
const char *fa_dtype_name(int dtype);

/* Unit roundoff of a dtype (FA_FP32, FA_FP16, FA_BF16): half the spacing of
 * its numbers at 1, 2^-24, 2^-11, 2^-8. Relative to an output's scale it is
 * the most that rounding the largest entry alone moves it; the host
 * programs' error rules take it as their floor, so that two correctly
 * rounded results never fail a check. */
static inline double fa_unit_roundoff(int dtype)
{
    return dtype == FA_BF16 ? 0x1p-8 : dtype == FA_FP16 ? 0x1p-11 : 0x1p-24;
}

/* Runtime helpers for the C host programs (thin wrappers over the CUDA runtime). */
int fa_device_count(void);                       /* 0 when no GPU (or no driver) */
/* "NVIDIA H200, cc 9.0, 132 SMs, 60 MiB L2, CUDA driver 13.0, runtime 13.0" */
int fa_device_info(char *buf, size_t n, int *sm_count);
int fa_device_cc(void);                          /* major*10+minor of the current GPU, 0 if none */
int fa_set_device(int device);
void *fa_malloc(size_t bytes);                   /* NULL on failure */
void fa_free(void *p);
int fa_copy_to_device(void *dst, const void *src, size_t bytes);
int fa_copy_to_host(void *dst, const void *src, size_t bytes);
int fa_poison(void *p, size_t bytes);            /* all bytes 0xFF: NaN in every dtype */
int fa_synchronize(void);

/* Launch an empty kernel with `tag` blocks: the Nsight Compute script
 * (scripts/gpu/ncu_io.py) splits its kernel list at these markers. */
int fa_marker(int tag);

/* Host conversions between fp64 and the dtype (round to nearest even). */
void fa_host_from_double(void *dst, const double *src, size_t n, int dtype);
void fa_host_to_double(double *dst, const void *src, size_t n, int dtype);

/* One line describing the last error of this library. */
const char *fa_error_string(void);

#ifdef __cplusplus
}
#endif
#endif /* FA_GPU_H */

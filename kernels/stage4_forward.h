/*
 * stage4_forward.h -- the C interface of the CUDA forward kernels of stage 4
 * (kernels/stage4_forward.cu). Plain C: the host program (src/stage4_main.c)
 * and the Python benchmark (scripts/bench_gpu.py, through ctypes and
 * build/libfa_gpu.so) call only these functions and never include a CUDA
 * header, so the host code stays C11 and builds with the project's cc.
 *
 * Versions (--kernel K):
 *   0  materialized baseline: S = softmax_scale Q K^T (cuBLAS) written to
 *      global memory, a row-softmax kernel reads S and writes P and L, then
 *      O = P V (cuBLAS). S and P are (B, H, N, N) in the input dtype.
 *   1  tiled FlashAttention forward (FlashAttention paper, Algorithm 1, with
 *      the loop order of FlashAttention-2): one thread block per Br = 64
 *      query rows, K and V tiles of Bc rows staged through shared memory,
 *      online softmax in registers, fp32 arithmetic on the CUDA cores.
 *   2  the same tiled algorithm on the tensor cores (FlashAttention-2 style):
 *      mma.sync m16n8k16 for S = Q K^T and O += P V, P kept in registers,
 *      K/V tiles copied with cp.async two stages deep; fp16/bf16 only,
 *      d a multiple of 16 up to 128. Br = 128 (32 rows per warp), Bc = 64,
 *      4 warps per block.
 *   3+ reserved: Hopper's wgmma and the tensor copy engine (a later issue).
 *
 * Layout: Q, K, V, O are (B, H, N, d) row-major in the dtype; L is (B, H, N)
 * fp32, the natural-log logsumexp of each row of softmax_scale * Q K^T.
 * All pointers are device pointers. Every function returns 0 or an FA_ERR_*
 * code; fa_error_string() turns the last error into one line of text.
 */
#ifndef FA_STAGE4_FORWARD_H
#define FA_STAGE4_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fa_dtype { FA_FP32 = 0, FA_FP16 = 1, FA_BF16 = 2 };
enum {
    FA_OK = 0,
    FA_ERR_UNSUPPORTED = 2,   /* shape/dtype/version this version does not run (exit 2) */
    FA_ERR_CUDA = 3,          /* a CUDA or cuBLAS call failed */
};

#define FA_NUM_KERNELS 3      /* versions 0 .. FA_NUM_KERNELS-1 exist */
#define FA_V1_BR 64           /* query rows per thread block in version 1 */

/* Bytes of one element of the dtype (4, 2, 2). */
size_t fa_dtype_bytes(int dtype);
const char *fa_dtype_name(int dtype);
const char *fa_kernel_name(int kernel);

/* 0 when `kernel` supports (dtype, N, d), else FA_ERR_UNSUPPORTED with the
 * reason in fa_error_string(). Version 0: any N >= 1, d >= 1; version 1:
 * N >= 1, 16 <= d <= 128; version 2: fp16/bf16, d in {16, 32, ..., 128}. */
int fa_check_supported(int kernel, int dtype, int N, int d);

/* Device workspace the version needs, in bytes: 2 B H N^2 elements (S and
 * P) for version 0, 0 for version 1. */
size_t fa_workspace_bytes(int kernel, int dtype, int B, int H, int N, int d);

/* Query rows per thread block (Br): 64 for version 1, 128 for version 2. */
int fa_block_rows(int kernel, int d);

/* Key rows per K/V tile (Bc) that version 1 uses at head dimension d. */
int fa_v1_block_cols(int d);

/* The IO model of a version in bytes of slow memory (HBM), L in fp32:
 *   v0: es (4 N^2 + 4 N d) + 4 N per head   (stage1_naive.h's count)
 *   v1, v2: es (2 N d + 2 N d Tr) + 4 N per head, Tr = ceil(N / Br),
 *       Br = fa_block_rows(kernel, d)
 *       (stage3_tiled.h's count: Q once, K and V once per query block, O once)
 * times B H, es = fa_dtype_bytes(dtype). compulsory: es 4 N d + 4 N per head
 * (Q, K, V read once, O and L written once), the floor of any algorithm. */
double fa_model_bytes(int kernel, int dtype, int B, int H, int N, int d);
double fa_compulsory_bytes(int dtype, int B, int H, int N, int d);

/* The forward pass. Q, K, V: (B,H,N,d) dtype; O: (B,H,N,d) dtype; L:
 * (B,H,N) fp32; workspace: fa_workspace_bytes() bytes (may be NULL when 0).
 * softmax_scale usually 1/sqrt(d). stream: a cudaStream_t, or NULL for the
 * default stream. Asynchronous: returns after the launches. */
int fa_forward(int kernel, int dtype, const void *Q, const void *K, const void *V, void *O,
               float *L, int B, int H, int N, int d, float softmax_scale, void *workspace,
               size_t workspace_bytes, void *stream);

/* Helpers for the C host program (thin wrappers over the CUDA runtime). */
int fa_device_count(void);                       /* 0 when no GPU (or no driver) */
/* "NVIDIA H200, cc 9.0, 132 SMs, 60 MB L2, driver 13.0, runtime 13.0" */
int fa_device_info(char *buf, size_t n, int *sm_count);
void *fa_malloc(size_t bytes);                   /* NULL on failure */
void fa_free(void *p);
int fa_copy_to_device(void *dst, const void *src, size_t bytes);
int fa_copy_to_host(void *dst, const void *src, size_t bytes);
int fa_poison(void *p, size_t bytes);            /* all bytes 0xFF: NaN in every dtype */
int fa_synchronize(void);
/* Median over `repeats` timed launches (after one warm-up) of fa_forward, in
 * milliseconds, timed with CUDA events. The output is poisoned before each. */
int fa_time_forward(int kernel, int dtype, const void *Q, const void *K, const void *V,
                    void *O, float *L, int B, int H, int N, int d, float softmax_scale,
                    void *workspace, size_t workspace_bytes, int repeats, double *median_ms);

/* Launch an empty kernel with `tag` blocks: the Nsight Compute script
 * (scripts/ncu_io.py) splits its kernel list at these markers. */
int fa_marker(int tag);

/* Host conversions between fp64 and the dtype (round to nearest even). */
void fa_host_from_double(void *dst, const double *src, size_t n, int dtype);
void fa_host_to_double(double *dst, const void *src, size_t n, int dtype);

/* One line describing the last error of this library. */
const char *fa_error_string(void);

#ifdef __cplusplus
}
#endif
#endif /* FA_STAGE4_FORWARD_H */

"""fa.py -- the one Python binding of the library's C interface
(core/fa_gpu.h), through ctypes, for every Python tool (scripts/bench_gpu.py,
scripts/train_compare.py, the tests) and the PyTorch op (flash_op.py beside
it). Installed as flashattn_stages.fa (pyproject.toml); from the repository,
with python/ on sys.path, as plain `fa`.

It mirrors attn_params (core/attn_params.h), fa_stride, fa_ptrs and
fa_version_info field by field, loads libfa_gpu.so, and reads the table of
versions from the library, so a new kernel version needs no change here.

    lib = fa.load()                       # library_path(): see there
    for v in fa.versions(lib, fa.FORWARD): print(v.version, v.name, v.what)
    p = fa.params(B, H, N, d, H_kv=H, seqlen_k=N, window=(-1, 0))   # causal
    fa.check(lib.fa_forward(2, fa.BF16, ctypes.byref(p), ctypes.byref(ptrs), stream))

Tensors are handed over as device pointers (torch's data_ptr()); nothing
here needs torch.
"""
import ctypes
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)   # the repository, when this file is its python/fa.py
FORWARD, BACKWARD = 0, 1
FP32, FP16, BF16 = 0, 1, 2
DTYPE_NAMES = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
OK, ERR_UNSUPPORTED, ERR_CUDA = 0, 2, 3
# fa_backward's flags (core/fa_gpu.h FA_BWD_*)
BWD_DETERMINISTIC, BWD_CENTER_K, BWD_CENTER_AUTO, BWD_DQ_PASS = 1, 2, 4, 8


class Params(ctypes.Structure):
    """attn_params: sizes, grouped heads, softmax_scale, window (-1: unbounded)."""
    _fields_ = [("B", ctypes.c_int), ("H", ctypes.c_int), ("H_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("d", ctypes.c_int),
                ("softmax_scale", ctypes.c_double),
                ("window_size_left", ctypes.c_int), ("window_size_right", ctypes.c_int)]


class Stride(ctypes.Structure):
    """fa_stride: element strides of a (B, heads, seqlen, d) tensor; all 0: contiguous."""
    _fields_ = [("batch", ctypes.c_int64), ("head", ctypes.c_int64), ("row", ctypes.c_int64)]


STRIDE_FIELDS = ("sq", "sk", "sv", "so", "sdo", "sdq", "sdk", "sdv")


class Ptrs(ctypes.Structure):
    """fa_ptrs: device pointers of one call (None where a pass does not use one)
    and the tensors' strides (zero: contiguous; read by `strided` versions)."""
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("softmax_lse", ctypes.c_void_p),
                ("do_", ctypes.c_void_p), ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p),
                ("dv", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t)] + [(n, Stride) for n in STRIDE_FIELDS]


class Varlen(ctypes.Structure):
    """fa_varlen: packed sequences (device int32 arrays of B + 1 entries, the row totals)."""
    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("total_q", ctypes.c_int), ("total_k", ctypes.c_int)]


class VersionInfo(ctypes.Structure):
    """fa_version_info: one row of the table of versions."""
    _fields_ = [("pass_", ctypes.c_int), ("version", ctypes.c_int), ("name", ctypes.c_char_p),
                ("what", ctypes.c_char_p), ("dtypes", ctypes.c_uint), ("d_min", ctypes.c_int),
                ("d_max", ctypes.c_int), ("d_multiple", ctypes.c_int), ("masks", ctypes.c_int),
                ("deterministic", ctypes.c_int), ("min_cc", ctypes.c_int), ("slug", ctypes.c_char_p),
                ("strided", ctypes.c_int), ("varlen", ctypes.c_int), ("prefer", ctypes.c_int),
                ("center_rate", ctypes.c_double)]

    def label(self):
        """ours_v2_mma: how the benchmarks' CSVs name the version."""
        return f"ours_{self.name.decode()}_{self.slug.decode()}"


def params(B, H, N, d, H_kv=None, seqlen_k=None, window=(-1, -1), softmax_scale=None):
    """An attn_params; causal is window (-1, 0)."""
    return Params(B, H, H if H_kv is None else H_kv, N, N if seqlen_k is None else seqlen_k, d,
                  1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale,
                  window[0], window[1])


def library_path():
    """Where the library is: $FA_LIBRARY when set; else libfa_gpu.so beside
    this file (the installed package carries it); else the repository's
    build/libfa_gpu.so (make build/libfa_gpu.so)."""
    if os.environ.get("FA_LIBRARY"):
        return os.environ["FA_LIBRARY"]
    here = os.path.join(HERE, "libfa_gpu.so")
    return here if os.path.exists(here) else os.path.join(ROOT, "build", "libfa_gpu.so")


def load(path=None):
    """The library (library_path() unless given) with every entry point's argument types set."""
    lib = ctypes.CDLL(path or library_path())
    i, vp, d, sz = ctypes.c_int, ctypes.c_void_p, ctypes.c_double, ctypes.c_size_t
    P, X, VL = ctypes.POINTER(Params), ctypes.POINTER(Ptrs), ctypes.POINTER(Varlen)
    sig = {
        "fa_num_versions": ([i], i),
        "fa_version": ([i, i], ctypes.POINTER(VersionInfo)),
        "fa_check_supported": ([i, i, i, P], i),
        "fa_check_problem": ([i, i, i, P], i),
        "fa_workspace_bytes": ([i, i, i, P], sz),
        "fa_strides_contiguous": ([P, X], i),
        "fa_block_rows": ([i, i, i], i),
        "fa_block_cols": ([i, i, i], i),
        "fa_tiles": ([i, i, P, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)], None),
        "fa_mask_fill": ([P, vp], i),
        "fa_model_bytes": ([i, i, i, P], d),
        "fa_compulsory_bytes": ([i, i, P], d),
        "fa_flops": ([i, P], d),
        "fa_bwd_center_cost": ([i, i, P], d),
        "fa_bwd_dq_pass_bytes": ([i, P], d),
        "fa_bwd_center_auto": ([i, i, P], i),
        "fa_forward": ([i, i, P, X, vp], i),
        "fa_backward": ([i, i, P, X, i, vp], i),
        "fa_time": ([i, i, i, P, X, i, i, i, i, ctypes.POINTER(d)], i),
        "fa_dtype_bytes": ([i], sz),
        "fa_check_varlen": ([i, i, i, P, VL], i),
        "fa_workspace_bytes_varlen": ([i, i, i, P, VL], sz),
        "fa_varlen_check": ([vp, vp, i, i, i, i, i], i),
        "fa_forward_varlen": ([i, i, P, VL, X, vp], i),
        "fa_backward_varlen": ([i, i, P, VL, X, i, vp], i),
        "fa_device_cc": ([], i),
        "fa_marker": ([i], i),
        "fa_error_string": ([], ctypes.c_char_p),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


class FaError(RuntimeError):
    pass


def check(lib, rc):
    """Raise FaError with the library's one-line message unless rc is FA_OK."""
    if rc != OK:
        raise FaError(lib.fa_error_string().decode())


def versions(lib, pass_):
    """The rows of the table for one pass, in order."""
    out = []
    for v in range(64):
        r = lib.fa_version(pass_, v)
        if r:
            out.append(r.contents)
        if len(out) == lib.fa_num_versions(pass_):
            break
    return out


def mask(lib, p):
    """The mask of core/mask.h for problem p as bytes: row i, column j is 1
    when query i sees key j (fa_mask_fill; nothing here spells the rule)."""
    buf = (ctypes.c_ubyte * (p.seqlen_q * p.seqlen_k))()
    check(lib, lib.fa_mask_fill(ctypes.byref(p), buf))
    return bytes(buf)


def tiles(lib, pass_, version, p):
    vis, skip = ctypes.c_int64(), ctypes.c_int64()
    lib.fa_tiles(pass_, version, ctypes.byref(p), ctypes.byref(vis), ctypes.byref(skip))
    return vis.value, skip.value


def mask_matrix(lib, p):
    """numpy bool (seqlen_q, seqlen_k): True where query i sees key j (core/mask.h)."""
    import numpy as np
    return np.frombuffer(mask(lib, p), dtype=np.uint8).reshape(p.seqlen_q, p.seqlen_k).astype(bool)

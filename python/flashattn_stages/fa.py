"""flashattn_stages.fa -- the one Python binding of the library's C interface
(core/fa_gpu.h, core/fa_decode.h), through ctypes, for every Python tool
(scripts/gpu/bench_gpu.py, scripts/gpu/train_compare.py, the tests) and the PyTorch
entries beside it (flash_op, varlen_op, decode_op). Needs no torch.

It mirrors attn_params (core/attn_params.h), fa_stride, fa_ptrs,
fa_version_info and decode_params field by field, loads libfa_gpu.so once
(library(): every entry shares that handle; library_path() says where it is
looked for), and reads the table of versions from the library, so a new
kernel version needs no change here. Errors: FaError, the one exception
class for what the library reports (a failed CUDA call, a library that
cannot be loaded); the library's one-line message is its text, with any
command-line flag it names given as the argument's name (error_text).

    lib = fa.library()                    # loaded once; fa.load(path) for another copy
    for v in fa.versions(lib, fa.FORWARD): print(v.version, v.name, v.what)
    p = fa.params(B, H, N, d, H_kv=H, seqlen_k=N, window=(-1, 0))   # causal
    fa.check(lib.fa_forward(2, fa.BF16, ctypes.byref(p), ctypes.byref(ptrs), stream))

Tensors are handed over as device pointers (torch's data_ptr()); nothing
here needs torch.
"""
import ctypes
import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
# the repository, when this file is its python/flashattn_stages/fa.py
ROOT = os.path.dirname(os.path.dirname(HERE))
# The interface version this binding mirrors; checked against the library's
# fa_abi_version() where the library has that entry.
ABI_VERSION = 1
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


class DecodeParams(ctypes.Structure):
    """decode_params (core/decode_plan.h), field by field."""
    _fields_ = [("B", ctypes.c_int), ("H", ctypes.c_int), ("H_kv", ctypes.c_int), ("d", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("page_size", ctypes.c_int), ("pages_per_seq", ctypes.c_int),
                ("num_pages", ctypes.c_int), ("softmax_scale", ctypes.c_double),
                ("window_size_left", ctypes.c_int), ("window_size_right", ctypes.c_int)]


class DecodePtrs(ctypes.Structure):
    """fa_decode_ptrs (core/fa_decode.h)."""
    _fields_ = [("q", ctypes.c_void_p), ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p),
                ("block_table", ctypes.c_void_p), ("cache_seqlens", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("softmax_lse", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t)]


class FaError(RuntimeError):
    """What the library reports: a failed CUDA call, or a library that cannot be loaded."""


class LibraryNotLoaded(FaError, OSError):
    """The library cannot be loaded: an FaError, and the OSError ctypes raises."""


def library_path():
    """Where the library is: $FA_GPU_LIB when set; else libfa_gpu.so inside
    the package (`pip install .` puts it there); else the repository's
    build/libfa_gpu.so (make build/libfa_gpu.so)."""
    if os.environ.get("FA_GPU_LIB"):
        return os.environ["FA_GPU_LIB"]
    here = os.path.join(HERE, "libfa_gpu.so")
    return here if os.path.exists(here) else os.path.join(ROOT, "build", "libfa_gpu.so")


def load(path=None):
    """The library at `path` (library_path() unless given), every entry
    point's argument types set, its interface version checked where it has
    fa_abi_version. FaError of one line when it cannot be loaded."""
    path = path or library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryNotLoaded(f"flashattn_stages: cannot load {path} (make build/libfa_gpu.so, pip install ., "
                      f"or set FA_GPU_LIB): {str(e).splitlines()[0]}") from None
    if hasattr(lib, "fa_abi_version"):
        lib.fa_abi_version.argtypes, lib.fa_abi_version.restype = [], ctypes.c_int
        got = lib.fa_abi_version()
        if got != ABI_VERSION:
            raise LibraryNotLoaded(f"flashattn_stages: {path} has interface version {got}, this package "
                          f"mirrors version {ABI_VERSION}: rebuild one to match the other")
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
    DP = ctypes.POINTER(DecodeParams)
    decode = {   # present when the library carries the decode kernels (kernels/stage8_decode.cu)
        "fa_decode_check": ([i, DP, i], i),
        "fa_decode_workspace_bytes": ([DP, i], sz),
        "fa_decode_num_splits": ([i, DP, i, i], i),
        "fa_decode_ctas_per_sm": ([i, i], i),
        "fa_decode": ([i, DP, i, ctypes.POINTER(DecodePtrs), vp], i),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    lib.has_decode = all(hasattr(lib, n) for n in decode)
    if lib.has_decode:
        for name, (args, res) in decode.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, res
    return lib


_LIB = None


def library():
    """The library, loaded once per process (load(library_path())): the one
    handle the dense, varlen and decode entries share."""
    global _LIB
    if _LIB is None:
        _LIB = load()
    return _LIB


# command-line flags a library message may name -> the argument's name
_FLAG_NAMES = {"kernel": "version", "kv-heads": "H_kv", "batch": "B", "seqlen-k": "seqlen_k",
               "page-size": "page_size", "splits": "num_splits"}
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?:[ =]([^\s:,]+))?")


def error_text(lib):
    """The library's last one-line message, with a command-line flag it
    names (--kernel 2, --dtype fp32, --deterministic) written as the
    argument (version=2, dtype=fp32, deterministic=True)."""
    msg = lib.fa_error_string().decode()

    def arg(m):
        name = _FLAG_NAMES.get(m.group(1), m.group(1).replace("-", "_"))
        return f"{name}={m.group(2) if m.group(2) is not None else 'True'}"
    return _FLAG.sub(arg, msg)


def check(lib, rc):
    """Raise FaError with the library's one-line message unless rc is FA_OK."""
    if rc != OK:
        raise FaError(error_text(lib))


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

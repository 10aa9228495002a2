"""flashattn_stages.dispatch -- what the dense, varlen and decode entries share on the way to a launch.

Before a launch an entry asks the library which kernel version runs its
problem, fills the ctypes structures of the call and finds device memory
for it; none of that is done twice for one problem signature:

  choose_version   the version that runs a problem: the one rule of every
                   entry, from the table of core/versions.def in the library
  cached_version   choose_version once per signature (its refusal too)
  row              a version's row of the table
  plan_cache       this thread's plans: per signature the version and the
                   filled structures, so a call writes only its pointers
  workspace        device memory for one call, kept per stream
  raw_stream       torch's current CUDA stream as a cudaStream_t
  on_device        a launch with the tensors' GPU current

Errors: ValueError of one line through each entry's `fail` (which names the
entry); fa.FaError from the library. Needs torch; not a GPU to import.
"""
import ctypes
import threading

try:
    import torch
except ImportError:
    raise ImportError("flashattn_stages: the PyTorch entries need torch (pip install torch); "
                      "flashattn_stages.fa works without it") from None

from . import fa

PASS_NAMES = {fa.FORWARD: "forward", fa.BACKWARD: "backward"}
CACHE_LIMIT = 4096   # signatures kept per cache (shapes may vary without end)


def _plain(msg):
    raise ValueError(msg)


_ROWS = {}   # (pass, version) -> the table's row (fa.VersionInfo)


def row(pass_, version):
    """The table's row (fa.VersionInfo) of a version, read from the library once."""
    r = _ROWS.get((pass_, version))
    if r is None:
        ptr = fa.library().fa_version(pass_, version)
        r = _ROWS[(pass_, version)] = ptr.contents if ptr else None
    return r


def choose_version(pass_, dtype_code, p, deterministic=False, requested=-1, vl=None, fail=_plain):
    """The version that runs problem p (an fa.Params; with vl, an fa.Varlen,
    packed sequences, checked by fa_check_varlen): `requested` (>= 0)
    checked, or the highest-numbered version of core/versions.def that runs
    the problem and dtype on this GPU, rows that say `prefer` first (the
    table numbers versions from the materialized baseline up through faster
    kernels; `prefer` marks one faster than those above it, backward 3 on
    Hopper). Else one line (fail, ValueError) with each version's reason.
    The one chooser of the dense, varlen and decode entries; not cached."""
    lib = fa.library()
    kind = "varlen problem" if vl is not None else "problem"

    def runs(version):
        if vl is not None:
            return lib.fa_check_varlen(pass_, version, dtype_code, ctypes.byref(p), ctypes.byref(vl)) == fa.OK
        return lib.fa_check_supported(pass_, version, dtype_code, ctypes.byref(p)) == fa.OK
    rows = sorted(fa.versions(lib, pass_), key=lambda r: (-r.prefer, -r.version))
    if requested >= 0:
        row = next((r for r in rows if r.version == requested), None)
        if row is None:
            fail(f"version={requested}: the {PASS_NAMES[pass_]} has no such version")
        if not runs(requested):
            fail(f"version={requested}: {fa.error_text(lib)}")
        if deterministic and not row.deterministic:
            fail(f"deterministic=True: {PASS_NAMES[pass_]} version {requested} has no deterministic mode")
        return requested
    why = {}   # version name -> the library's reason
    for row in rows:
        name = row.name.decode()
        if deterministic and not row.deterministic:
            why[name] = "no deterministic mode"
        elif runs(row.version):
            return row.version
        else:
            why[name] = fa.error_text(lib)
    if not why:
        fail(f"the library has no {PASS_NAMES[pass_]} version")
    if len(set(why.values())) == 1:   # one reason for all: say it once
        fail(f"no {PASS_NAMES[pass_]} version runs this {kind}: {next(iter(why.values()))}")
    fail(f"no {PASS_NAMES[pass_]} version runs this {kind} ("
         + "; ".join(f"{n}: {w}" for n, w in why.items()) + ")")


# (pass, dtype, sizes, mask, scale, deterministic, requested version, device)
# -> the version, or the ValueError's message for a problem no version runs.
# The choice depends on the GPU (the device index is in the key) and on
# FA_V3_STEP, read once per signature here. Shared by the dense and varlen
# entries (their keys differ in their first field's tag); a lock keeps the
# size check and the insertion together across threads.
_VERSIONS = {}
_VERSIONS_LOCK = threading.Lock()


def cached_version(pass_, dt, p, key, requested, deterministic, vl=None, fail=_plain):
    """choose_version once per signature `key` (ValueError again from the cache)."""
    got = _VERSIONS.get(key)
    if got is None:
        try:
            got = choose_version(pass_, dt, p, deterministic, requested, vl, fail)
        except ValueError as e:
            got = str(e)
        with _VERSIONS_LOCK:
            if len(_VERSIONS) >= CACHE_LIMIT:
                _VERSIONS.clear()
            _VERSIONS[key] = got
    if isinstance(got, str):
        raise ValueError(got)
    return got


_tls = threading.local()   # per thread: signature -> plan (the structures are written per call)


def plan_cache(name):
    """This thread's plan cache `name` ("dense", "varlen", "decode"): a dict from a
    problem's signature to its plan, whose ctypes structures each call
    writes its pointers into, hence one per thread; cleared when it holds
    CACHE_LIMIT signatures (shapes that vary without end)."""
    caches = getattr(_tls, "caches", None)
    if caches is None:
        caches = _tls.caches = {}
    c = caches.get(name)
    if c is None:
        c = caches[name] = {}
    elif len(c) >= CACHE_LIMIT:
        c.clear()
    return c


# raw_stream(index): torch's current CUDA stream of GPU `index` as the raw
# cudaStream_t, the value torch.cuda.current_stream(index).cuda_stream gives,
# without building a torch.Stream object per call
if hasattr(torch._C, "_cuda_getCurrentRawStream"):
    raw_stream = torch._C._cuda_getCurrentRawStream
else:   # pragma: no cover
    def raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


_WORKSPACE = {}   # (device index, stream) -> uint8 tensor, grown on demand
_WORKSPACE_KEEP = 256 << 20   # bytes: larger workspaces are not kept between calls


def workspace(nbytes, index, stream):
    """nbytes of device memory on GPU `index` for one call on `stream`, from
    torch's caching allocator: kept per stream (work on one stream is
    ordered, so the next call may reuse it), a fresh one while a CUDA graph
    is being captured (the graph's pool keeps it for its replays)."""
    if torch.cuda.is_current_stream_capturing() or nbytes > _WORKSPACE_KEEP:
        # (a large one, version 0's materialized S and P, goes back to the allocator)
        return torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))
    key = (index, stream)
    ws = _WORKSPACE.get(key)
    if ws is None or ws.numel() < nbytes:
        ws = _WORKSPACE[key] = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))
    return ws


def on_device(index, fn, *args):
    """fn(*args) with GPU `index` current, as the library's launches need (the
    context only when another device is: it costs more than a small launch)."""
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            return fn(*args)
    return fn(*args)

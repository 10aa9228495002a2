#!/bin/sh
# scripts/find_nccl.sh [NVCC] -- where NCCL's header and library are, for
# kernels/gpu.mk. Prints one line "INCLUDE_DIR LIB_DIR LIB_FILE" (LIB_FILE
# libnccl.so or libnccl.so.2) or nothing when there is no NCCL. The header
# and the library are taken from the same root, so that they match.
#
# Looked for in this order:
#   $NCCL_HOME                          (include/, lib/ or lib64/)
#   the CUDA toolkit of NVCC            (the build machine: /usr/local/cuda/{include,lib})
#   /usr/local, /usr                    (Debian's libnccl-dev: /usr/include, /usr/lib/x86_64-linux-gnu)
#   Python's nvidia-nccl wheel          (the GPU machine, with PyTorch:
#                                        site-packages/nvidia/nccl/{include,lib},
#                                        or nvidia/cu13/... in newer wheels)
nvcc=${1:-$(command -v nvcc 2>/dev/null)}

try_root() {   # try_root ROOT: print and exit when ROOT has both
    root=$1
    [ -n "$root" ] && [ -f "$root/include/nccl.h" ] || return 1
    for lib in "$root/lib" "$root/lib64" "$root/lib/x86_64-linux-gnu" "$root/lib64/x86_64-linux-gnu"; do
        for f in libnccl.so libnccl.so.2; do
            if [ -e "$lib/$f" ]; then
                echo "$root/include $lib $f"
                exit 0
            fi
        done
    done
    return 1
}

try_root "${NCCL_HOME:-}"
if [ -n "$nvcc" ]; then
    cuda=$(cd "$(dirname "$nvcc")/.." 2>/dev/null && pwd -P)
    try_root "$cuda"
    try_root "$cuda/targets/x86_64-linux"
fi
try_root /usr/local
# Debian/Ubuntu's libnccl-dev: header in /usr/include, library in the multiarch dir
if [ -f /usr/include/nccl.h ]; then
    for lib in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
        for f in libnccl.so libnccl.so.2; do
            [ -e "$lib/$f" ] && { echo "/usr/include $lib $f"; exit 0; }
        done
    done
fi
# The wheel that PyTorch installs (nvidia-nccl-cu12 / -cu13): a namespace
# package, so look in every directory of nvidia.__path__.
for py in python3 python; do
    command -v $py >/dev/null 2>&1 || continue
    roots=$($py - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    paths = list(nvidia.__path__)
except Exception:
    paths = []
for base in paths:
    for h in sorted(glob.glob(os.path.join(base, "*", "include", "nccl.h")) +
                    glob.glob(os.path.join(base, "*", "*", "include", "nccl.h"))):
        print(os.path.dirname(os.path.dirname(h)))
PY
)
    for root in $roots; do try_root "$root"; done
    break
done
exit 0

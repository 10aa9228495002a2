#!/bin/sh
# scripts/device/accuracy.sh -- the backward's dQ accuracy on logits near -120,
# on one GPU, in one device call (about two minutes with the GPU targets built,
# add the build's time otherwise). Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/accuracy.sh
#
#   1. build   build/libfa_gpu.so and stage5, unless both are there and load
#   2. table   scripts/dq_accuracy.py: every backward version (with K
#              centered, FA_BWD_CENTER_K, and as given) beside SDPA flash, cuDNN,
#              efficient and math; bf16 and fp16, seqlen 64, 192, 704, 1024,
#              causal and not; the centering's cost at N = 4096, d = 128
#              -> $OUT/dq_accuracy.csv (copy to data/gpu/dq_accuracy.csv)
#   3. tests   ./stage5 --sweep accuracy (the far-logit tests of make gpu-test)
#              -> $OUT/stage5_accuracy.log
# $OUT/env.txt holds nvidia-smi, nvcc and torch's versions.
set -u
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version;
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } \
    > "$OUT/env.txt" 2>&1
# carried builds are used when they load here (same CUDA major version)
if ! ./stage5 --help > /dev/null 2>&1 ||
   ! python3 -c "import ctypes; ctypes.CDLL('build/libfa_gpu.so')" > /dev/null 2>&1; then
    timeout 200 make -j"$(nproc)" stage5 build/libfa_gpu.so > "$OUT/build.log" 2>&1
    echo "build exit $?"
fi
timeout 150 python3 scripts/dq_accuracy.py --csv "$OUT/dq_accuracy.csv" > "$OUT/dq_accuracy.log" 2>&1
echo "dq_accuracy exit $?"
timeout 60 ./stage5 --sweep accuracy > "$OUT/stage5_accuracy.log" 2>&1
echo "stage5 --sweep accuracy exit $?: $(grep -c '^PASS' "$OUT/stage5_accuracy.log") passed, $(grep -c '^FAIL' "$OUT/stage5_accuracy.log") failed"
cat "$OUT/dq_accuracy.log"
grep '^FAIL' "$OUT/stage5_accuracy.log" | cut -c1-600

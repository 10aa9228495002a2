#!/bin/sh
# scripts/device/stage5.sh -- stage 5 on a GPU machine in one device call:
# make stage5-gpu (kernels/gpu_data.mk: ./stage5 timed with a CSV, ./stage5
# --sweep tests, compute-sanitizer on build/tests/gpu/stage5_tests --sweep small), logs under
# $OUT/stage5, then a summary short enough to read whole. Run from the
# repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/stage5.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-/tmp}/stage5
mkdir -p "$out"
{ nvidia-smi; nvcc --version; } > "$out/env.txt" 2>&1
timeout 540 make -j"$(nproc)" GPU_LOGS="$out" stage5-gpu > "$out/make.log" 2>&1
echo "make stage5-gpu: exit $?"
grep -i 'warning\|error' "$out/make.log" | head -n 10
for f in "$out"/stage5_tests.log "$out"/stage5_default.log; do
    echo "== $f: $(grep -c '^PASS' "$f" 2>/dev/null) PASS, $(grep -c '^FAIL' "$f" 2>/dev/null) FAIL"
    grep -A12 '^FAIL' "$f" 2>/dev/null | grep '^#\|^FAIL' | head -n 40
done
grep '^# default mode' "$out/stage5_default.log" 2>/dev/null
for f in "$out"/san_*.log; do
    [ -f "$f" ] || continue
    echo "$(basename "$f" .log): $(tail -n 1 "$f") ($(grep -m1 'SUMMARY' "$f"))"
done

#!/bin/sh
# data/gpu/studies/op_library/op.sh -- the PyTorch op as a library, on the GPU machine, in one call.
#
#   FA_COMMIT=<commit> sh data/gpu/studies/op_library/op.sh [tests|train|all]     (logs and CSVs under $OUT)
#
# tests (the default): builds build/libfa_gpu.so, stage4 and stage5 (make
#   -j16); runs the stage 4 and stage 5 test sweeps (build/tests/gpu/stage4_tests --sweep tests,
#   build/tests/gpu/stage5_tests --sweep tests: the host programs, contiguous strides) and
#   build/v3_check (version 3's pieces, the tensor maps among them) beside
#   the op's checks (tests/gpu/test_flash_op.py: SDPA comparison, compile
#   fullgraph, CUDA graphs, strided and packed inputs, empty sequences,
#   flash_attn_func, the installed package); then, alone on the GPU, the
#   call-overhead table (scripts/gpu/bench_op_overhead.py -> $OUT/op_overhead.csv).
# train: the training comparison, eager and compiled, ours and SDPA flash,
#   3 seeds (scripts/gpu/train_compare.py --compare -> $OUT/train_compare.csv),
#   bounded to about 4 minutes on an H200.
# all: both.
# Every log starts with the GPU, driver, CUDA, torch, commit and date; the
# CSVs carry them per row. FA_COMMIT names the commit (the copy has no .git).
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/op_out}
mkdir -p "$OUT"
mode=${1:-tests}
log="$OUT/op.log"
say() { echo "$*" | tee -a "$log"; }
: > "$log"
say "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n1)"
say "# $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n1)"
say "# $(nvcc --version 2>&1 | tail -n1)"
say "# commit ${FA_COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%M:%SZ), mode $mode"
export FA_COMMIT
rc=0
t0=$(date +%s)
if ! make -j16 build/libfa_gpu.so stage4 stage5 build/v3_check > "$OUT/build.log" 2>&1; then
    say "build: FAILED; last lines:"
    tail -n 25 "$OUT/build.log" | tee -a "$log"
    exit 1
fi
say "build: $(( $(date +%s) - t0 )) s"
rm -f "$OUT/build.log"   # kept only when the build fails (files back from the machine are few)

if [ "$mode" = tests ] || [ "$mode" = all ]; then
    t0=$(date +%s)
    (timeout 130 build/tests/gpu/stage4_tests --sweep tests > "$OUT/stage4_tests.log" 2>&1; echo "exit $?" >> "$OUT/stage4_tests.log") &
    p4=$!
    (timeout 130 build/tests/gpu/stage5_tests --sweep tests > "$OUT/stage5_tests.log" 2>&1; echo "exit $?" >> "$OUT/stage5_tests.log") &
    p5=$!
    (timeout 130 build/v3_check > "$OUT/v3_check_tests.log" 2>&1; echo "exit $?" >> "$OUT/v3_check_tests.log") &
    pv=$!
    timeout 150 sh tests/run.sh "python3 tests/gpu/test_flash_op.py" > "$OUT/flash_op_tests.log" 2>&1
    trc=$?
    wait $p4 $p5 $pv
    say "flash_op tests: $(tail -n 1 "$OUT/flash_op_tests.log") (exit $trc) in $(( $(date +%s) - t0 )) s"
    grep -E '^(FAIL|SKIP) ' "$OUT/flash_op_tests.log" | head -n 40 | tee -a "$log"
    grep -E '^PASS flash_op-(op-path|compile|graph|strided|packed|empty|stream-value|flash-attn|installed)' \
        "$OUT/flash_op_tests.log" | tee -a "$log"
    for s in stage4 stage5 v3_check; do
        f="$OUT/${s}_tests.log"
        say "$s --sweep tests: $(grep -c '^PASS' "$f") PASS, $(grep -c '^FAIL' "$f") FAIL, $(grep -c '^SKIP' "$f") SKIP, $(tail -n 1 "$f")"
        grep -E '^FAIL' "$f" | head -n 10 | tee -a "$log"
    done
    [ "$trc" -eq 0 ] || rc=1
    grep -q '^FAIL' "$OUT/stage4_tests.log" "$OUT/stage5_tests.log" "$OUT/v3_check_tests.log" && rc=1
    t0=$(date +%s)
    timeout 90 python3 scripts/gpu/bench_op_overhead.py --csv "$OUT/op_overhead.csv" > "$OUT/bench.tmp" 2>&1 || rc=1
    say "overhead table ($(( $(date +%s) - t0 )) s):"
    cat "$OUT/bench.tmp" >> "$log"
    tail -n 45 "$OUT/bench.tmp"
    rm -f "$OUT/bench.tmp"
fi
if [ "$mode" = train ] || [ "$mode" = all ]; then
    t0=$(date +%s)
    timeout 290 python3 scripts/gpu/train_compare.py --compare --steps 200 --seeds 3 --budget 150 \
        --csv "$OUT/train_compare.csv" > "$OUT/train_compare.log" 2>&1 || rc=1
    say "training comparison: $(( $(date +%s) - t0 )) s"
    tail -n 14 "$OUT/train_compare.log" | tee -a "$log"
fi
exit $rc

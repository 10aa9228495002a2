#!/bin/sh
# tests/gpu/run_gpu_tests.sh -- the GPU test suite of stage 4 (make gpu-test;
# also one of make test's suites). Prints one line per test in the protocol
# of tests/run.sh: PASS name / FAIL name: why / SKIP name: why.
#
# What it runs:
#   - command-line checks that need no GPU (one-line error, exit 2): an
#     unsupported head dimension for versions 1 and 2, fp32 for version 2,
#     a bad flag, --dtype fp64,
#     --causal (not in stage 4);
#   - ./stage4 --sweep tests: versions 0, 1, 2 in fp32, fp16 and bf16 against
#     the CPU fp64 reference on fresh random inputs (the seed is printed):
#     N = 1, 17 (below one tile), 113, 1023, 4097; d = 16, 20, 24, 32, 48,
#     64, 80, 96, 112, 128; B H above the number of SMs (version 2 runs
#     where it applies: fp16/bf16, d a multiple of 16);
#   - compute-sanitizer memcheck and racecheck on a small shape, both
#     versions, every dtype;
#   - version 3 (Hopper, build/v3_check): the piece self-tests and every
#     step against the fp64 reference (it prints SKIP on a GPU that is not
#     compute capability 9.0), then memcheck, racecheck and synccheck on a
#     small masked GQA problem, every step.
# Without a GPU (or without stage4, where nvcc is missing) the GPU tests
# print SKIP, never PASS. Cost on an H200: about a minute, most of it the
# CPU reference and the sanitizers.
cd "$(dirname "$0")/../.." || exit 2

GPU_TESTS="stage4-gpu-correctness stage4-memcheck stage4-racecheck v3-tests v3-sanitizers"
skip_gpu() {
    for t in $GPU_TESTS; do echo "SKIP $t: $1"; done
}

if [ ! -x ./stage4 ]; then
    echo "SKIP stage4-cli: ./stage4 not built (nvcc not found)"
    skip_gpu "./stage4 not built (nvcc not found)"
    exit 0
fi

# expect_exit2 NAME ARGS...: one line on stderr, nothing on stdout, status 2
expect_exit2() {
    name=$1; shift
    out=$(./stage4 "$@" 2>/tmp/stage4_err.$$); rc=$?
    lines=$(wc -l </tmp/stage4_err.$$)
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$out" ]; then
        echo "PASS $name ($(cat /tmp/stage4_err.$$))"
    else
        echo "FAIL $name: ./stage4 $* gave status $rc with $lines stderr lines"
    fi
    rm -f /tmp/stage4_err.$$
}
expect_exit2 stage4-cli-unsupported-d --kernel 1 --random --n 10 --d 130
expect_exit2 stage4-cli-bad-flag --bogus
expect_exit2 stage4-cli-bad-dtype --dtype fp64
expect_exit2 stage4-cli-causal --causal
expect_exit2 stage4-cli-bad-kernel --kernel 7
expect_exit2 stage4-cli-v2-fp32 --kernel 2 --dtype fp32
expect_exit2 stage4-cli-v2-d72 --kernel 2 --random --n 10 --d 72
expect_exit2 stage4-cli-v3-fp32 --kernel 3 --dtype fp32
expect_exit2 stage4-cli-v3-d96 --kernel 3 --dtype bf16 --random --n 10 --d 96

probe=$(./stage4 --kernel 1 --dtype fp32 --random --n 1 --d 16 --repeats 1 2>&1)
case "$probe" in
*"no CUDA GPU"*) skip_gpu "no CUDA GPU here"; exit 0 ;;
esac

./stage4 --sweep tests || true   # prints its own PASS/FAIL lines

if [ -x build/v3_check ]; then
    build/v3_check --pieces --tests | grep -E '^(PASS|FAIL|SKIP) ' || true
else
    echo "SKIP v3-tests: build/v3_check not built"
fi

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x build/v3_check ] && [ -x "$SAN" ]; then
    for tool in memcheck racecheck synccheck; do
        log=/tmp/v3_san.$$
        if "$SAN" --tool $tool --error-exitcode 9 build/v3_check --small >$log 2>&1; then
            echo "PASS v3-$tool ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY\|SKIP' $log))"
        else
            echo "FAIL v3-$tool: $(grep -m1 -i 'error\|hazard\|FAIL' $log)"
            tail -40 $log
        fi
        rm -f $log
    done
fi
if [ ! -x "$SAN" ]; then
    echo "SKIP stage4-memcheck: compute-sanitizer not found"
    echo "SKIP stage4-racecheck: compute-sanitizer not found"
    exit 0
fi
for tool in memcheck racecheck; do
    log=/tmp/stage4_san.$$
    if "$SAN" --tool $tool --error-exitcode 9 ./stage4 --random --batch 2 --heads 2 --n 70 \
            --d 64 --repeats 1 >$log 2>&1; then
        echo "PASS stage4-$tool ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $log))"
    else
        echo "FAIL stage4-$tool: $(grep -m1 -i 'error\|hazard' $log)"
        cat $log
    fi
    rm -f $log
done
exit 0

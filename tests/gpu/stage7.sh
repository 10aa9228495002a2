#!/bin/sh
# tests/gpu/stage7.sh -- the test suite of stage 7 (one of make test's suites;
# the protocol of tests/run.sh: PASS name / FAIL name: why / SKIP name: why).
#
#   - command-line checks that need no GPU: a bad flag, --gpus out of range,
#     a sequence that does not split into G shards (2G chunks under --causal),
#     fp64, an unknown kernel, version 2 in fp32, --sweep scale without --csv:
#     each one line on stderr, nothing on stdout, status 2;
#   - with a GPU: asking for one GPU more than there are is one line and
#     status 2; ./stage7 --sweep tests on every GPU (NCCL) and, on the first
#     GPU alone, four virtual shards (the accumulators' middle hops, which
#     two GPUs never take): the ring against the single-GPU kernels and the
#     fp64 reference, forward and backward, fresh random inputs (seed printed).
# Without a GPU (or without ./stage7, where nvcc or NCCL is missing) the GPU
# parts print SKIP, never PASS. The merge rule and the plan are tested on
# the CPU by build/test_ring, a suite of its own.
cd "$(dirname "$0")/../.." || exit 2

if [ ! -x ./stage7 ]; then
    why=$(make -s stage7 2>&1 | tail -n 1)
    echo "SKIP stage7-cli: ./stage7 not built (${why:-nvcc or NCCL missing})"
    echo "SKIP stage7-gpu: ./stage7 not built"
    exit 0
fi

err=$(mktemp) || exit 2
trap 'rm -f "$err"' EXIT
# expect_exit2 NAME ARGS...: one line on stderr, nothing on stdout, status 2
expect_exit2() {
    name=$1; shift
    out=$(./stage7 "$@" 2>"$err"); rc=$?
    lines=$(wc -l <"$err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$out" ]; then
        echo "PASS $name ($(cat "$err"))"
    else
        echo "FAIL $name: ./stage7 $* gave status $rc with $lines stderr lines: $(head -c 300 "$err") $out"
    fi
}
expect_exit2 stage7-cli-bad-flag --bogus
expect_exit2 stage7-cli-gpus-0 --gpus 0
expect_exit2 stage7-cli-gpus-9 --gpus 9
expect_exit2 stage7-cli-gpus-missing --gpus
expect_exit2 stage7-cli-n-not-multiple-of-G --gpus 2 --random --n 7
expect_exit2 stage7-cli-causal-n-not-multiple-of-2G --gpus 2 --causal --random --n 10
expect_exit2 stage7-cli-fp64 --dtype fp64
expect_exit2 stage7-cli-bad-kernel --kernel 9
expect_exit2 stage7-cli-v2-fp32 --kernel 2 --dtype fp32
expect_exit2 stage7-cli-v2-d72 --gpus 2 --random --n 64 --d 72
expect_exit2 stage7-cli-scale-without-csv --sweep scale
expect_exit2 stage7-cli-unknown-sweep --sweep nothing

probe=$(./stage7 --gpus 1 --random --n 16 --d 16 2>&1)   # cheap: one tiny problem
case "$probe" in
*"no CUDA GPU"*) echo "SKIP stage7-gpu: no CUDA GPU here"; exit 0 ;;
esac

n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${n:-0}" -ge 1 ] && [ "$n" -lt 8 ]; then
    expect_exit2 stage7-fewer-gpus-than-asked --gpus $((n + 1))
fi
# NCCL's NVLink multicast stays off on the shared machines (see the device notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
./stage7 --sweep tests || true            # prints its own PASS/FAIL/SKIP lines
./stage7 --sweep tests --gpus 4 --virtual || true
exit 0

#!/bin/sh
# tests/gpu/stage8.sh -- the test suite of stage 8's GPU kernels (one of make
# test's suites, and of make gpu-test; the protocol of tests/run.sh).
#
#   - command-line checks that need no GPU: the kernels' limits (d other than
#     64 and 128, pages outside 16..256 or not a power of two, fp32, more
#     than 16 query rows, a split count out of range, a length past the
#     capacity, a flag ./stage8_gpu does not take): each one line on stderr,
#     nothing on stdout, status 2;
#   - with a GPU: build/tests/gpu/stage8_gpu_tests --sweep tests (the suite's
#     own program, tests/gpu/stage8_gpu_tests.c), every case in bf16 and fp16,
#     d = 64 and 128, against the CPU stage 8 in fp64 on fresh random inputs
#     (seed printed): grouped heads 4:1, 8:1 and 1:1, pages of 16 to 256 keys
#     in shuffled order, sequences of length 0 and 1 beside long ones, causal
#     and a window across page borders, 16 query rows (two CTAs per group),
#     the rule's split count and others, bitwise against one split where the
#     keys fit split 0; outputs poisoned and unread cache rows NaN;
#   - compute-sanitizer memcheck, racecheck, synccheck and initcheck on
#     build/tests/gpu/stage8_gpu_tests --sweep small.
# Without a GPU (or without the programs, where nvcc is missing) the GPU
# parts print SKIP, never PASS. The CPU stage 8 has its own suites
# (build/test_decode, tests/stages.sh, tests/cli.sh).
cd "$(dirname "$0")/../.." || exit 2

S8T=build/tests/gpu/stage8_gpu_tests
if [ ! -x ./stage8_gpu ] || [ ! -x $S8T ]; then
    echo "SKIP stage8-gpu-cli: ./stage8_gpu or $S8T not built (nvcc not found)"
    echo "SKIP stage8-gpu: ./stage8_gpu or $S8T not built"
    exit 0
fi

err=$(mktemp) || exit 2
log=$(mktemp) || exit 2
trap 'rm -f "$err" "$log"' EXIT
# expect_exit2 NAME KEYWORD ARGS...: $prog (./stage8_gpu unless set) prints one
# line naming KEYWORD on stderr, nothing on stdout, and exits with status 2
prog=./stage8_gpu
expect_exit2() {
    name=$1 keyword=$2; shift 2
    out=$($prog "$@" 2>"$err"); rc=$?
    lines=$(wc -l <"$err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$out" ] && grep -q -- "$keyword" "$err"; then
        echo "PASS $name ($(cat "$err"))"
    else
        echo "FAIL $name: $prog $* gave status $rc with $lines stderr lines: $(head -c 300 "$err") $out"
    fi
}
expect_exit2 stage8-gpu-cli-bad-flag "unknown flag" --bogus
expect_exit2 stage8-gpu-cli-d96 "d = 64 or 128" --d 96
expect_exit2 stage8-gpu-cli-page8 "pages of 16 to 256" --page-size 8
expect_exit2 stage8-gpu-cli-page512 "pages of 16 to 256" --page-size 512
expect_exit2 stage8-gpu-cli-page48 "power of two" --page-size 48
expect_exit2 stage8-gpu-cli-fp32 "fp32" --dtype fp32
expect_exit2 stage8-gpu-cli-rows17 "query rows" --n 17
expect_exit2 stage8-gpu-cli-splits0 "--splits 0" --splits 0
expect_exit2 stage8-gpu-cli-splits200 "--splits 200" --splits 200
expect_exit2 stage8-gpu-cli-len "cache_seqlens\[1\]" --batch 2 --seqlen-k 100 --lens 3,113
expect_exit2 stage8-gpu-cli-sweep "--sweep" --sweep tests
prog=$S8T
expect_exit2 stage8-gpu-tests-cli-sweep "--sweep" --sweep bogus
expect_exit2 stage8-gpu-tests-cli-sweep-flags "takes only --seed" --sweep tests --page-size 32
expect_exit2 stage8-gpu-tests-cli-shape "unknown flag" --sweep tests --d 64

# One GPU case through the flags: SKIP without a GPU, PASS/FAIL with one.
./stage8_gpu --batch 3 --heads 8 --kv-heads 2 --n 2 --seqlen-k 300 --d 64 --causal --splits 3 --page-size 32 \
    | grep -E '^(PASS|FAIL|SKIP) ' || echo "FAIL stage8-gpu flags: printed no result"
out=$($S8T --sweep tests 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|SKIP) '
echo "$out" | grep -q '^SKIP' && exit 0
[ "$rc" -eq 0 ] || { echo "FAIL stage8-gpu --sweep tests: exit $rc"; echo "$out" | grep -v -E '^(PASS|SKIP) ' | tail -20; }

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$SAN" ]; then
    for t in memcheck racecheck synccheck initcheck; do echo "SKIP stage8-gpu-$t: compute-sanitizer not found"; done
    exit 0
fi
for tool in memcheck racecheck synccheck initcheck; do
    if timeout 600 "$SAN" --tool $tool --error-exitcode 9 $S8T --sweep small >"$log" 2>&1; then
        echo "PASS stage8-gpu-$tool ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY\|SYNCCHECK SUMMARY\|INITCHECK SUMMARY' "$log"))"
    else
        echo "FAIL stage8-gpu-$tool: $(grep -m1 -i 'error\|hazard\|uninitialized\|barrier\|FAIL' "$log")"
        tail -n 40 "$log"
    fi
done
exit 0

#!/bin/sh
# tests/gpu/run_gpu_tests.sh -- the GPU test suite of stages 4 and 5 (make
# gpu-test; also one of make test's suites). Prints one line per test in the
# protocol of tests/run.sh: PASS name / FAIL name: why / SKIP name: why.
#
# What it runs:
#   - command-line checks that need no GPU (one-line error, exit 2): for
#     stage 4 an unsupported head dimension for versions 1 and 2, fp32 for
#     versions 2 and 3, d = 96 for version 3, a bad flag, --dtype fp64, a
#     missing input file, a malformed window, --kv-heads that do not divide
#     --heads, --out without one --kernel and --dtype, the backward's --dq;
#     for stage 5 the same kinds and --deterministic where a version has none,
#     and --accurate-dq with a bad value or where the dQ pass cannot run;
#   - build/tests/gpu/stage4_tests --sweep model and build/tests/gpu/stage5_tests --sweep model: the IO models
#     against stage 1's and stage 3's counts, with masks and grouped heads (no
#     GPU needed);
#   - build/tests/gpu/stage4_tests --sweep tests: forward versions 0 to 3 (3 on Hopper only) in
#     fp32, fp16 and bf16 against the CPU fp64 reference on fresh random
#     inputs (the seed is printed): N = 1, 17, 113, 1023, 4097; d = 16 to
#     128; B H above the number of SMs; causal, windows, seqlen_q != seqlen_k
#     (rows that see no key: O = 0, L = -inf), grouped heads; a window that
#     covers every key bitwise equal to no mask; the fault inputs; the
#     real input unmasked, with a window and with its keys cut;
#   - build/tests/gpu/stage5_tests --sweep tests: every backward version (0 to 3) the same way, plus
#     masks (causal, windows, seqlen_q != seqlen_k, rows that see no key, keys
#     nobody sees), grouped heads, the fault inputs, the deterministic
#     mode (30 runs bitwise equal) and the key-block split of stage 7;
#   - gpu-outputs: a good run of each writes its --out ... --dv files (renamed
#     into place, no temporary file left);
#   - version 3 (Hopper, build/v3_check): the piece tests and every step
#     against the fp64 reference (it prints SKIP on a GPU that is not
#     compute capability 9.0);
#   - compute-sanitizer: stage 4 memcheck and racecheck on a small shape and
#     a small causal GQA problem with seqlen_q > seqlen_k;
#     stage 5 memcheck, racecheck, synccheck and initcheck on --sweep small
#     (every backward version and dtype; racecheck and synccheck, which look
#     at shared memory and barriers, on the tiled versions only);
#   - compute-sanitizer again and again on version 3 of the forward and on
#     the backward's version 4 (kernels/stage5_bwd_v4.cu): memcheck,
#     racecheck, synccheck and initcheck, each FA_SAN_RUNS times (default 5),
#     every run on a fresh seed printed in its PASS or FAIL line
#     (FA_SAN_SEED=S replays from seed S), every run under a limit of
#     FA_SAN_TIMEOUT seconds (default 300), FA_SAN_JOBS of them at once
#     (default 4), so the whole is bounded by 8 x runs x limit / jobs. Forward: build/v3_check --small (every step on two small
#     masked GQA problems, one with more tiles than SMs) and ./stage4
#     --kernel 3 on a causal GQA problem with seqlen_q > seqlen_k; backward:
#     build/tests/gpu/stage5_tests --sweep small --kernel 4 (fp16 and bf16: causal GQA with
#     seqlen_q > seqlen_k, windows with keys nobody sees, d = 128, the
#     deterministic mode); the backward's version 3 (Hopper,
#     kernels/stage5_bwd_v3_hopper.cu) the same way, with a window whose keys
#     nobody sees at d = 64; and the dQ pass (--accurate-dq=full,
#     kernels/stage5_bwd_dq.cu) beside versions 2, 4 and 0 on the small
#     sweep (its cases with d a multiple of 16), bf16, fp16 and bf16.
# Without a GPU (or without the programs, where nvcc is missing) the GPU
# tests print SKIP, never PASS. Cost on an H200: a few minutes, most of it
# the CPU reference and the sanitizers.
cd "$(dirname "$0")/../.." || exit 2

GPU_TESTS="stage4-gpu-correctness stage4-memcheck stage4-racecheck v3-tests v3-sanitizers
stage5-gpu-correctness stage5-memcheck stage5-racecheck stage5-synccheck stage5-initcheck gpu-outputs
stage5-v4-sanitizers stage5-v3-sanitizers stage5-dq-pass-sanitizers"
skip_gpu() {
    for t in $GPU_TESTS; do echo "SKIP $t: $1"; done
}

# the test suites of stages 4 and 5 are programs of their own (tests/gpu/)
S4T=build/tests/gpu/stage4_tests
S5T=build/tests/gpu/stage5_tests
export S4T S5T   # the sanitizer lines below run them through sh -c
if [ ! -x ./stage4 ] || [ ! -x ./stage5 ] || [ ! -x $S4T ] || [ ! -x $S5T ]; then
    echo "SKIP stage4-cli: ./stage4, ./stage5 or their test programs not built (nvcc not found)"
    echo "SKIP stage5-cli: ./stage4, ./stage5 or their test programs not built (nvcc not found)"
    echo "SKIP stage4-model: ./stage4 not built (nvcc not found)"
    echo "SKIP stage5-model: ./stage5 not built (nvcc not found)"
    skip_gpu "./stage4 or ./stage5 not built (nvcc not found)"
    exit 0
fi

err=$(mktemp) || exit 2
trap 'rm -f "$err"' EXIT
# expect_exit2 PROGRAM NAME ARGS...: one line on stderr, nothing on stdout, status 2
expect_exit2() {
    prog=$1 name=$2; shift 2
    out=$("$prog" "$@" 2>"$err"); rc=$?
    lines=$(wc -l <"$err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$out" ]; then
        echo "PASS $name ($(cat "$err"))"
    else
        echo "FAIL $name: $prog $* gave status $rc with $lines stderr lines"
    fi
}
# the checks both passes share, then each one's own
for s in stage4 stage5; do
    expect_exit2 ./$s $s-cli-unsupported-d --kernel 1 --random --n 10 --d 130
    expect_exit2 ./$s $s-cli-bad-flag --bogus
    expect_exit2 ./$s $s-cli-bad-dtype --dtype fp64
    expect_exit2 ./$s $s-cli-bad-kernel --kernel 7
    expect_exit2 ./$s $s-cli-v2-fp32 --kernel 2 --dtype fp32
    expect_exit2 ./$s $s-cli-v2-d72 --kernel 2 --random --n 10 --d 72
    expect_exit2 ./$s $s-cli-missing-file --q /nonexistent/q.npy --k /nonexistent/k.npy --v /nonexistent/v.npy
done
expect_exit2 ./stage4 stage4-cli-v3-fp32 --kernel 3 --dtype fp32
expect_exit2 ./stage4 stage4-cli-v3-d96 --kernel 3 --dtype bf16 --random --n 10 --d 96
expect_exit2 ./stage4 stage4-cli-window-negative --random --n 64 --window -3,0
expect_exit2 ./stage4 stage4-cli-kv-heads --random --n 64 --heads 8 --kv-heads 5
expect_exit2 ./stage4 stage4-cli-outputs-need-one-run --out /tmp/stage4_o_never_written.npy
expect_exit2 ./stage4 stage4-cli-outputs-need-dtype --kernel 1 --lse /tmp/stage4_l_never_written.npy
expect_exit2 ./stage4 stage4-cli-no-gradients --dq /tmp/stage4_dq_never_written.npy
expect_exit2 $S4T stage4-cli-sweep-with-shape --sweep tests --causal
expect_exit2 ./stage4 stage4-cli-large-n --kernel 1 --random --n 9000 --d 64

expect_exit2 ./stage5 stage5-cli-v3-fp32 --kernel 3 --dtype fp32
expect_exit2 ./stage5 stage5-cli-v3-d96 --kernel 3 --dtype bf16 --random --n 10 --d 96
expect_exit2 ./stage5 stage5-cli-outputs-need-one-run --dq /tmp/stage5_dq_never_written.npy
expect_exit2 $S5T stage5-cli-bad-sweep --sweep bogus
expect_exit2 $S5T stage5-cli-sweep-with-shape --sweep tests --n 100
expect_exit2 ./stage5 stage5-cli-large-n --kernel 1 --random --n 9000 --d 64
expect_exit2 ./stage5 stage5-cli-kv-heads --random --n 64 --heads 4 --kv-heads 3
expect_exit2 ./stage5 stage5-cli-window --random --n 64 --window 3
expect_exit2 ./stage5 stage5-cli-accurate-dq-value --accurate-dq=fast
expect_exit2 ./stage5 stage5-cli-dq-pass-fp32 --accurate-dq=full --dtype fp32
expect_exit2 ./stage5 stage5-cli-dq-pass-d40 --accurate-dq=full --dtype bf16 --random --n 10 --d 40
expect_exit2 $S5T stage5-cli-dq-pass-sweep --accurate-dq=full --sweep tests

$S4T --sweep model || true   # prints its own PASS/FAIL lines
$S5T --sweep model || true

probe=$(./stage5 --kernel 1 --dtype fp32 --random --n 1 --d 16 --repeats 1 2>&1)
case "$probe" in
*"no CUDA GPU"*) skip_gpu "no CUDA GPU here"; exit 0 ;;
esac

$S4T --sweep tests || true   # prints its own PASS/FAIL lines
$S5T --sweep tests || true

# A good run's outputs are renamed into place (each a .npy) and leave no
# temporary file; that a failed run leaves them as they were is tests/cli.sh's.
od=$(mktemp -d) || exit 2
if ./stage4 --kernel 1 --dtype fp32 --random --n 100 --d 64 --out "$od/o.npy" --lse "$od/l.npy" >/dev/null 2>&1 &&
    ./stage5 --kernel 1 --dtype fp32 --random --n 100 --d 64 --dq "$od/dq.npy" --dk "$od/dk.npy" \
        --dv "$od/dv.npy" >/dev/null 2>&1 &&
    (for f in o l dq dk dv; do head -c 6 "$od/$f.npy" | grep -q NUMPY || exit 1; done) &&
    [ "$(ls -A "$od" | wc -l)" -eq 5 ]; then
    echo "PASS gpu-outputs: stage4 --out --lse, stage5 --dq --dk --dv written, no temporary file left"
else
    echo "FAIL gpu-outputs: the folder holds $(ls -A "$od" | tr '\n' ' ')"
fi
rm -rf "$od"

if [ -x build/v3_check ]; then
    build/v3_check --pieces --tests | grep -E '^(PASS|FAIL|SKIP) ' || true
else
    echo "SKIP v3-tests: build/v3_check not built"
fi

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$SAN" ]; then
    for t in stage4-memcheck stage4-racecheck stage5-memcheck stage5-racecheck stage5-synccheck \
             stage5-initcheck v3-sanitizers stage5-v4-sanitizers stage5-v3-sanitizers stage5-dq-pass-sanitizers; do
        echo "SKIP $t: compute-sanitizer not found"
    done
    exit 0
fi
log=$(mktemp) || exit 2
trap 'rm -f "$err" "$log"' EXIT
# sanitize NAME TOOL PROGRAM ARGS...: clean (exit 0, no error) or FAIL with the first finding
sanitize() {
    name=$1 tool=$2; shift 2
    if timeout 600 "$SAN" --tool "$tool" --error-exitcode 9 "$@" >"$log" 2>&1; then
        echo "PASS $name ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY\|SYNCCHECK SUMMARY\|INITCHECK SUMMARY' "$log"))"
    else
        echo "FAIL $name: $(grep -m1 -i 'error\|hazard\|uninitialized\|barrier\|FAIL' "$log")"
        tail -n 40 "$log" | sed 's/^/    /'   # indented: its PASS lines are not this suite's
    fi
}
for tool in memcheck racecheck; do
    sanitize stage4-$tool $tool sh -c './stage4 --random --batch 2 --heads 2 --n 70 --d 64 --repeats 1 &&
        ./stage4 --random --batch 2 --heads 4 --kv-heads 2 --n 150 --seqlen-k 90 --d 64 --causal --repeats 1'
done
sanitize stage5-memcheck memcheck $S5T --sweep small
sanitize stage5-initcheck initcheck $S5T --sweep small
sanitize stage5-racecheck racecheck sh -c '$S5T --sweep small --kernel 1 --dtype fp32 &&
    $S5T --sweep small --kernel 2 --dtype bf16 && $S5T --sweep small --kernel 4 --dtype fp16'
sanitize stage5-synccheck synccheck sh -c '$S5T --sweep small --kernel 1 --dtype fp16 &&
    $S5T --sweep small --kernel 2 --dtype fp16 && $S5T --sweep small --kernel 4 --dtype bf16'

# The repeated runs (see the top of this file). A run passes when the
# sanitizer exits 0 with its summary, and the programs under it printed PASS
# lines and no FAIL line.
RUNS=${FA_SAN_RUNS:-5}
LIMIT=${FA_SAN_TIMEOUT:-300}
SEED0=${FA_SAN_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
# repeat NAME TOOL SEED COMMAND LOG: one run of COMMAND (a shell command line
# in which $S is the seed) under the tool, its output in LOG; one PASS or
# FAIL line naming the seed
repeat() {
    name=$1 tool=$2 S=$3 cmd=$4 rlog=$5
    t1=$(date +%s)
    S=$S timeout "$LIMIT" "$SAN" --tool "$tool" --error-exitcode 9 sh -c "$cmd" >"$rlog" 2>&1
    rc=$? secs=$(( $(date +%s) - t1 ))
    summary=$(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY\|SYNCCHECK SUMMARY\|INITCHECK SUMMARY' "$rlog" | sed 's/^=* *//')
    npass=$(grep -c '^PASS ' "$rlog") nfail=$(grep -c '^FAIL ' "$rlog")
    if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$npass" -gt 0 ]; then
        echo "PASS $name (seed $S: $summary; $npass checks passed under it; $secs s)"
        return
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="did not finish in $LIMIT s"
    else why=$(grep -m1 -i 'error\|hazard\|race\|uninitialized\|barrier\|^FAIL' "$rlog"); fi
    echo "FAIL $name seed $S: ${why:-exit status $rc, no finding printed} (replay: S=$S compute-sanitizer --tool $tool --error-exitcode 9 sh -c '$cmd')"
    tail -n 40 "$rlog" | sed 's/^/    /'   # indented: its PASS lines are not this suite's
}
# The runs are independent programs on one GPU, each far from filling it, so
# FA_SAN_JOBS of them (default 4) run at once; their lines are printed in
# the order of the loop below whatever order they finish in.
JOBS=${FA_SAN_JOBS:-4}
rdir=$(mktemp -d) || exit 2
trap 'rm -f "$err" "$log"; rm -rf "$rdir"' EXIT
njob=0
# queue NAME TOOL SEED COMMAND: start one repeated run, at most JOBS at a time
queue() {
    njob=$((njob + 1))
    f=$(printf '%s/%04d' "$rdir" "$njob")
    repeat "$1" "$2" "$3" "$4" "$f.log" >"$f.out" &
    if [ $((njob % JOBS)) -eq 0 ]; then wait; fi
}
FWD='build/v3_check --small --seed $S && ./stage4 --kernel 3 --random --seed $S --batch 2 --heads 4 --kv-heads 2 --n 150 --seqlen-k 90 --d 64 --causal --repeats 1'
BWD='$S5T --sweep small --kernel 4 --seed $S'
if [ ! -x build/v3_check ]; then
    echo "SKIP v3-sanitizers: build/v3_check not built"
    FWD=
elif ! why=$(./stage4 --kernel 3 --dtype bf16 --random --n 1 --d 64 --repeats 1 2>&1 >/dev/null); then
    echo "SKIP v3-sanitizers: $(echo "$why" | head -n1)"
    FWD=
fi
# backward version 3 (Hopper): the small sweep (its d = 64 and d = 128
# cases: causal GQA with seqlen_q > seqlen_k in the deterministic mode, a
# window) and a window with keys nobody sees at d = 64, Br = 128 query rows
BWD3='$S5T --sweep small --kernel 3 --seed $S && ./stage5 --kernel 3 --random --seed $S --heads 2 --kv-heads 1 --n 200 --seqlen-k 330 --d 64 --window 10,0 --repeats 1'
if ! why=$(./stage5 --kernel 3 --dtype bf16 --random --n 1 --d 64 --repeats 1 2>&1 >/dev/null); then
    echo "SKIP stage5-v3-sanitizers: $(echo "$why" | head -n1)"
    BWD3=
fi
# the dQ pass (FA_BWD_DQ_PASS) beside two versions: its phase 0 before the
# version's kernel, phase 1 after it
BWDQ='$S5T --sweep small --kernel 2 --dtype bf16 --accurate-dq=full --seed $S && $S5T --sweep small --kernel 4 --dtype fp16 --accurate-dq=full --seed $S && $S5T --sweep small --kernel 0 --dtype bf16 --accurate-dq=full --seed $S'
for tool in memcheck racecheck synccheck initcheck; do
    r=1
    while [ "$r" -le "$RUNS" ]; do
        seed=$((SEED0 + r - 1))
        [ -n "$FWD" ] && queue "v3-$tool run $r/$RUNS" "$tool" "$seed" "$FWD"
        queue "stage5-v4-$tool run $r/$RUNS" "$tool" "$seed" "$BWD"
        [ -n "$BWD3" ] && queue "stage5-v3-$tool run $r/$RUNS" "$tool" "$seed" "$BWD3"
        queue "stage5-dq-pass-$tool run $r/$RUNS" "$tool" "$seed" "$BWDQ"
        r=$((r + 1))
    done
done
wait
cat "$rdir"/*.out 2>/dev/null
exit 0

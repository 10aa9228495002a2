#!/bin/sh
# data/gpu/studies/dq_pass/suites.sh -- the suites of make gpu-test on one GPU, in four
# lanes at once (they time nothing), within LEFT seconds: the GPU test suite
# (tests/gpu/run_gpu_tests.sh, its compute-sanitizer runs 8 at a time); the
# op's suites; varlen's, stage 8's and build/tests/gpu/stage5_tests --sweep accuracy; varlen
# again with backward 3's step 1, and its poison test under memcheck,
# racecheck and synccheck. Each lane ends with tests/run.sh's counts line;
# the lines go to $D/summary.txt. Called by final1.sh and dq_pass2.sh, from
# the repository root, with the binaries built:
#
#     D=<dir> LEFT=<seconds> sh data/gpu/studies/dq_pass/suites.sh
set -u
D=${D:-/tmp/suites}
left=${LEFT:-500}
mkdir -p "$D"
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ "$left" -lt 60 ] && left=60
say "suites: $left s"
export FA_SAN_JOBS=8
lane() { tag=$1; lim=$2; shift 2; ( timeout "$lim" sh tests/run.sh "$@" > "$D/$tag.log" 2>&1; echo "exit $?" >> "$D/$tag.log" ) & }
lane gpu_tests "$left" "sh tests/gpu/run_gpu_tests.sh"
lane op_tests "$left" "python3 tests/gpu/test_flash_op.py" "python3 tests/gpu/test_decode_op.py"
lane more_tests "$left" "python3 tests/gpu/test_varlen_op.py" "sh tests/gpu/stage8.sh" "build/tests/gpu/stage5_tests --sweep accuracy"
( V="python3 tests/gpu/test_varlen_op.py"
  FA_BWD3_STEP=1 timeout "$left" sh tests/run.sh "$V" > "$D/varlen_step1.log" 2>&1
  for tool in memcheck racecheck synccheck; do
      FA_VARLEN_PARTS=poison_tests timeout 120 "$SAN" --tool $tool --error-exitcode 3 $V > "$D/.v.log" 2>&1
      echo "varlen poison under $tool: exit $? $(grep -m1 SUMMARY "$D/.v.log" | sed 's/^=* *//'); $(grep -c '^PASS' "$D/.v.log") PASS $(grep -c '^FAIL' "$D/.v.log") FAIL" >> "$D/varlen_san.log"
      grep -m3 -i 'hazard\|race\|invalid\|^FAIL' "$D/.v.log" >> "$D/varlen_san.log"
  done; rm -f "$D/.v.log" ) &
wait
say "varlen with FA_BWD3_STEP=1: $(grep -E 'passed, .* failed' "$D/varlen_step1.log" | tail -n 1)"
grep '^FAIL' "$D/varlen_step1.log" | cut -c1-300 | head -n 4 | tee -a "$D/summary.txt"
tee -a "$D/summary.txt" < "$D/varlen_san.log"
for f in gpu_tests op_tests more_tests; do
    say "$f: $(grep -E 'passed, .* failed' "$D/$f.log" | tail -n 1) ($(tail -n 1 "$D/$f.log"))"
    grep '^FAIL' "$D/$f.log" | cut -c1-300 | head -n 8 | tee -a "$D/summary.txt"
done

#!/bin/sh
# scripts/device/stage5.sh -- stage 5 on a GPU machine in one go: build,
# ./stage5 (the default table, with a CSV), ./stage5 --sweep tests, and
# compute-sanitizer (memcheck, initcheck, racecheck, synccheck) on
# ./stage5 --sweep small. Full logs go to ${OUT:-/tmp}/stage5/; stdout gets a
# summary short enough to read whole: each step's status, every FAIL line
# with its '#' diagnostic lines, the default mode's run-to-run spread, the
# kernels' registers and spills. Every step has a time limit; the whole
# script is meant to take about 4 to 6 minutes on an H200 machine (most of it
# the build); the limits add up to under 10 minutes, one device command.
#
#   OUT=/some/dir sh scripts/device/stage5.sh
#   FA_COMMIT=<sha> names the commit in the CSV where the copy has no .git.
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-/tmp}/stage5
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
# show LOG: the result lines worth reading from a stage5 log
show() {
    grep -c '^PASS' "$1" | sed 's/^/  PASS lines: /'
    grep -c '^FAIL' "$1" | sed 's/^/  FAIL lines: /'
    grep -A12 '^# v\|^FAIL' "$1" | grep '^#\|^FAIL' | head -n 60
    grep '^# default mode' "$1"
}

{ nvidia-smi; nvcc --version; command -v compute-sanitizer && compute-sanitizer --version; } \
    > "$out/env.txt" 2>&1
stamp "build: make stage5"
if ! timeout 330 make -j"$(nproc)" stage5 > "$out/build.log" 2>&1; then
    echo "build failed:"; tail -n 40 "$out/build.log"; exit 1
fi
grep -i 'warning' "$out/build.log" | head -n 10
for o in build/stage5_backward.o build/stage5_bwd_v3.o; do cuobjdump --dump-resource-usage "$o" 2>/dev/null; done |
    grep -E 'Function|REG' | paste - - |
    sed -E 's/.*Function ([^:]*):.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 REG=\2 STACK=\3 LOCAL=\5/' |
    while read -r f rest; do echo "$(echo "$f" | c++filt) $rest"; done > "$out/registers.txt"
echo "backward kernels, registers per head dimension (local memory bytes = spills, all listed in registers.txt):"
grep 'backward_kernel' "$out/registers.txt" |
    sed -E 's/^void (v[123])_backward_kernel<([^,]*), ([0-9]+)[^>]*>.* REG=([0-9]+) STACK=[0-9]+ LOCAL=([0-9]+)/\1 \2 \3 \4 \5/' |
    awk '{k = $1 " " $2; line[k] = line[k] " d" $3 ":" $4 ($5 > 0 ? "(LOCAL " $5 ")" : "")}
         END {for (k in line) print "  " k ":" line[k]}' | sort

stamp "./stage5 (real input and two random problems, timed)"
timeout 120 ./stage5 --csv "$out/stage5_default.csv" > "$out/stage5_default.log" 2>&1
echo "  exit status $?"
grep -A12 '^real\|^random\|^all-MiniLM\|check failed\|^stage5:' "$out/stage5_default.log" | grep -v '^--' | head -n 50

# The test sweep and the sanitizers do not time anything: run them side by
# side (the GPU and 16 cores have room), then read their logs in order.
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
stamp "in parallel: ./stage5 --sweep tests and compute-sanitizer on ./stage5 --sweep small"
timeout 200 ./stage5 --sweep tests > "$out/stage5_tests.log" 2>&1 &
tests_pid=$!
# sanitize TOOL LOGNAME ARGS...: one run in the background, its exit status in LOGNAME.rc
sanitize() {
    tool=$1 name=$2; shift 2
    ( timeout 200 "$SAN" --tool "$tool" --error-exitcode 9 ./stage5 "$@" > "$out/$name.log" 2>&1
      echo $? > "$out/$name.rc" ) &
}
if [ -x "$SAN" ]; then
    sanitize memcheck san_memcheck --sweep small
    sanitize initcheck san_initcheck --sweep small
    sanitize racecheck san_racecheck_v1 --sweep small --kernel 1 --dtype fp32
    sanitize racecheck san_racecheck_v2 --sweep small --kernel 2 --dtype bf16
    sanitize synccheck san_synccheck_v1 --sweep small --kernel 1 --dtype fp16
    sanitize synccheck san_synccheck_v2 --sweep small --kernel 2 --dtype fp16
    sanitize racecheck san_racecheck_v3 --sweep small --kernel 3 --dtype fp16
    sanitize synccheck san_synccheck_v3 --sweep small --kernel 3 --dtype bf16
fi
wait "$tests_pid"
echo "./stage5 --sweep tests: exit status $?"
head -n 1 "$out/stage5_tests.log"
show "$out/stage5_tests.log"
wait
if [ -x "$SAN" ]; then
    for name in san_memcheck san_initcheck san_racecheck_v1 san_racecheck_v2 san_synccheck_v1 san_synccheck_v2 \
                san_racecheck_v3 san_synccheck_v3; do
        echo "$name: exit status $(cat "$out/$name.rc") ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY\|SYNCCHECK SUMMARY\|INITCHECK SUMMARY' "$out/$name.log"))"
        grep -m5 -i 'hazard\|uninitialized\|invalid\|barrier error\|^FAIL' "$out/$name.log"
    done
else
    echo "compute-sanitizer not found: sanitizers skipped"
fi
stamp "done; logs in $out"

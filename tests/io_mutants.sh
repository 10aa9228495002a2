#!/bin/sh
# tests/io_mutants.sh -- stage 1's counted traffic can fail its test.
# build/test_io must pass on stage 1 as it is, and fail on every mutant of
# stage 1 in tests/mutants/ (each a sed script that breaks the schedule or the
# counting: see its comment), built by the Makefile as
# build/mutants/NAME/test_io. One PASS/FAIL line each (tests/run.sh protocol).
cd "$(dirname "$0")/.." || exit 2
if out=$(build/test_io 2>&1); then
    echo "PASS test_io on stage 1 ($(echo "$out" | grep -c '^PASS') shapes)"
else
    echo "FAIL test_io on stage 1:"
    echo "$out" | grep '^FAIL' | sed 's/^/    /'
fi
for sed in tests/mutants/*.sed; do
    name=$(basename "$sed" .sed)
    bin=build/mutants/$name/test_io
    if [ ! -x "$bin" ]; then
        echo "FAIL io mutant $name: $bin is not built (make $bin)"
    elif out=$("$bin" 2>&1); then
        echo "FAIL io mutant $name: test_io passed on a stage 1 that $(sed -n '2,3p' "$sed" | tr -d '#' | tr '\n' ' ')"
    else
        echo "PASS io mutant $name caught: $(echo "$out" | grep -m1 '^FAIL' | sed 's/^FAIL [^:]*: //')"
    fi
done

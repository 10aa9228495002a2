#!/bin/sh
# data/gpu/studies/dq_pass/dq_pass_suites.sh -- one H200 call after the dQ pass was mended:
# data/gpu/studies/dq_pass/dq_pass.sh (its accuracy, the GPU accuracy table and its
# cost, RUNS sanitizer runs per tool), then the suites of make gpu-test
# (data/gpu/studies/dq_pass/suites.sh) in what is left of 560 s. Run from the
# repository root with the binaries of final1.sh's recipe built from the
# commit named (unpacked beside a link /tmp/devbuild -> the carried tree):
#
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/dq_pass/dq_pass_suites.sh
#
# Files land under $OUT/dqp/ and $OUT/suites/, packed as $OUT/dqp2.tgz (the
# device tool returns a few files a call).
set -u
OUT=${OUT:-/tmp}
t0=$(date +%s)
OUT=$OUT RUNS=${RUNS:-3} sh data/gpu/studies/dq_pass/dq_pass.sh > /dev/null 2>&1
sh scripts/device/env.sh "sh data/gpu/studies/dq_pass/dq_pass_suites.sh" > "$OUT/env.txt" 2>&1
D=$OUT/suites LEFT=$(( 560 - ($(date +%s) - t0) )) sh data/gpu/studies/dq_pass/suites.sh > /dev/null 2>&1
cat "$OUT/dqp/summary.txt" "$OUT/suites/summary.txt"
cd "$OUT" && tar czf dqp2.tgz env.txt dqp suites && rm -rf dqp suites

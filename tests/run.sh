#!/bin/sh
# tests/run.sh SUITE... -- run each suite command, count its result lines and
# print one closing line "N passed, N failed, N skipped".
#
# The protocol every suite follows: one line per test on stdout,
#   PASS <name>
#   FAIL <name>: <why>
#   SKIP <name>: <why>        (e.g. no GPU here: skipped, never passed)
# anything else is commentary. A suite that exits non-zero, or prints no
# result line at all, adds one FAIL of its own.
#
# The suites run one after another whatever -jN make was given, and any make
# they call runs serially: the jobserver of `make -jN test` is not passed on
# (its flags are taken out of MAKEFLAGS), so a sub-make neither warns that the
# jobserver is unavailable nor races the suites it is part of. `make -jN test`
# therefore prints the same results as `make test`.
MAKEFLAGS=$(printf '%s\n' "${MAKEFLAGS-}" |
    sed -e 's/--jobserver-[a-z]*=[^ ]*//g' -e 's/\(^\| \)-j[0-9]*/ /g' -e 's/^\([a-zA-Z]*\)j\([a-zA-Z]*\)\( \|$\)/\1\2\3/')
unset MFLAGS
export MAKEFLAGS
passed=0 failed=0 skipped=0
log=$(mktemp) || exit 2
trap 'rm -f "$log"' EXIT
for suite in "$@"; do
    echo "== $suite"
    sh -c "$suite" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $suite: exited with status $rc"
        f=$((f + 1))
    elif [ $((p + f + s)) -eq 0 ]; then
        echo "FAIL $suite: printed no result line"
        f=1
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

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
# FA_TEST_JOBS=N (default 1) runs up to N suites at once, each into a log of
# its own; the logs are printed in the order the suites were given, so the
# output is the same as one at a time (make gpu-test uses 4: its suites time
# nothing and the GPU machine has cores to spare). Any make a suite calls runs
# serially: the jobserver of `make -jN test` is not passed on (its flags are
# taken out of MAKEFLAGS), so a sub-make neither warns that the jobserver is
# unavailable nor races the suites it is part of. `make -jN test` therefore
# prints the same results as `make test`.
MAKEFLAGS=$(printf '%s\n' "${MAKEFLAGS-}" |
    sed -e 's/--jobserver-[a-z]*=[^ ]*//g' -e 's/\(^\| \)-j[0-9]*/ /g' -e 's/^\([a-zA-Z]*\)j\([a-zA-Z]*\)\( \|$\)/\1\2\3/')
unset MFLAGS
export MAKEFLAGS
jobs=${FA_TEST_JOBS:-1}
case $jobs in ''|*[!0-9]*|0) echo "tests/run.sh: FA_TEST_JOBS must be a positive integer, not '$jobs'" >&2; exit 2;; esac
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT

# report N: print suite N's name and log, add its counts to the totals
passed=0 failed=0 skipped=0
report() {
    echo "== $(cat "$dir/$1.cmd")"
    cat "$dir/$1.log"
    rc=$(cat "$dir/$1.rc")
    p=$(grep -c '^PASS ' "$dir/$1.log"); f=$(grep -c '^FAIL ' "$dir/$1.log"); s=$(grep -c '^SKIP ' "$dir/$1.log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $(cat "$dir/$1.cmd"): exited with status $rc"
        f=$((f + 1))
    elif [ $((p + f + s)) -eq 0 ]; then
        echo "FAIL $(cat "$dir/$1.cmd"): printed no result line"
        f=1
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}
# run N CMD: suite N's output and exit status into $dir/N.log and $dir/N.rc
run() { sh -c "$2" >"$dir/$1.log" 2>&1; echo $? >"$dir/$1.rc"; }
n=0 running=""
for suite in "$@"; do
    n=$((n + 1))
    printf '%s\n' "$suite" >"$dir/$n.cmd"
    if [ "$jobs" -eq 1 ]; then
        run "$n" "$suite"; report "$n"
        continue
    fi
    # at most $jobs at once: wait for the oldest before starting another
    # shellcheck disable=SC2086
    set -- $running
    if [ $# -ge "$jobs" ]; then wait "$1"; shift; fi
    run "$n" "$suite" &
    running="$* $!"
done
if [ "$jobs" -gt 1 ]; then
    wait
    i=0
    while [ "$i" -lt "$n" ]; do i=$((i + 1)); report "$i"; done
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

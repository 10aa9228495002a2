#!/bin/sh
# exercises/test_exercises.sh -- the exercises' test suite (run by `make test`,
# see tests/run.sh for the PASS/FAIL/SKIP protocol). For each exercise N:
#   exN-solution      the checker accepts exercises/solutions/exN/ (exit 0)
#   exN-stub          the checker rejects the stubs as shipped (exit 1): the
#                     files of exercises/exN/ at git's HEAD, extracted into
#                     build/exercises/shipped/exN/ by exercises/shipped.sh,
#                     so that a learner's work in exercises/exN/ (solved or
#                     half done) changes nothing here
#   exN-<fixture>     the checker's verdict on exercises/tests/exN-<fixture>/:
#                     its `expect` file says "accept" (exit 0: e.g. hand
#                     arithmetic that must be accepted) or gives a fragment
#                     that the report of a rejection must contain (exit 1)
# plus tests that a checker refuses a seed that is not a number (exercises
# 1-3, which draw nothing at random, any --seed) and a folder that does not
# exist (one line, exit 2), that `make exercise` with a bad
# EX is a one-line error, that building a learner's checker echoes no
# command before the marks (only a compiler's error, when the C is broken),
# that a written part's model answer waits until every marked part is right,
# and that check --help prints the usage.
# Run from the repository root; builds the checkers first if they are missing.
cd "$(dirname "$0")/.." || exit 2
out=$(mktemp) || exit 2
trap 'rm -f "$out" "$out.stdout"' EXIT

# The checkers (make test builds them as TEST_DEPS; standalone, build here).
if ! make -s --no-print-directory ex-checkers >"$out" 2>&1; then
    echo "FAIL exercises-build: make ex-checkers failed:"
    sed 's/^/    /' "$out" | tail -20
    exit 1
fi

bin_of() {   # the checker of a folder, as exercises.mk names it
    case $1 in
        build/exercises/*) echo "$1/check" ;;
        *) echo "build/exercises/${1#exercises/}/check" ;;
    esac
}

# expect_status NAME DIR STATUS [FRAGMENT]
expect_status() {
    name=$1 dir=$2 want=$3 fragment=$4
    bin=$(bin_of "$dir")
    "$bin" "$dir" >"$out" 2>&1
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL $name: checker exited $got on $dir, expected $want; its report:"
        sed 's/^/    /' "$out" | grep -v '^    *|' | tail -25
    elif [ -n "$fragment" ] && ! grep -qF -- "$fragment" "$out"; then
        echo "FAIL $name: checker rejected $dir but its report lacks '$fragment':"
        sed 's/^/    /' "$out" | grep -v '^    *|' | tail -25
    else
        echo "PASS $name"
    fi
}

for n in 1 2 3 4 5; do
    [ -f "exercises/ex$n/check.c" ] || { echo "SKIP ex$n: not written yet"; continue; }
    expect_status "ex$n-solution" "exercises/solutions/ex$n" 0
    shipped=build/exercises/shipped/ex$n
    if ! sh exercises/shipped.sh "$n" "$shipped" 2>"$out"; then
        echo "FAIL ex$n-stub: could not extract the shipped stubs: $(head -c 300 "$out")"
    else
        expect_status "ex$n-stub" "$shipped" 1
    fi
    for dir in exercises/tests/ex$n-*/; do
        [ -d "$dir" ] || continue
        dir=${dir%/}
        fragment=
        [ -f "$dir/expect" ] && fragment=$(grep -v '^#' "$dir/expect" | head -n 1)
        if [ "$fragment" = accept ]; then
            expect_status "${dir#exercises/tests/}" "$dir" 0
        else
            expect_status "${dir#exercises/tests/}" "$dir" 1 "$fragment"
        fi
    done
done

# Bad arguments to a checker: a seed that is not a number and a folder that
# does not exist are one line on stderr and exit 2, before any case runs (never seed 0, never the
# compiled-in C marked "right" for a folder that is not there).
# refused NAME WHAT WORD CMD...: CMD exits 2 with one line on stderr containing WORD
refused() {   # one line on stderr naming `word`, exit 2, and nothing on stdout before it
    name=$1 what=$2 word=$3; shift 3
    "$@" 2>"$out" >"$out.stdout"
    rc=$?
    if [ "$rc" -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q -- "$word" "$out" && [ ! -s "$out.stdout" ]; then
        echo "PASS $name ($what: one line naming $word, exit 2, nothing else printed)"
    else
        echo "FAIL $name: $what gave status $rc: $(head -c 200 "$out"); stdout: $(head -c 120 "$out.stdout")"
    fi
}
for n in 4 5; do
    refused "ex$n-seed-not-a-number" "--seed abc" seed \
        build/exercises/solutions/ex$n/check exercises/solutions/ex$n --seed abc
done
# Exercises 1-3 draw no random cases: any flag, --seed included, is refused.
for n in 1 2 3; do
    refused "ex$n-no-seed" "--seed 5" "unexpected argument '--seed'" \
        build/exercises/solutions/ex$n/check exercises/solutions/ex$n --seed 5
done
for n in 1 2 3 4 5; do
    refused "ex$n-no-such-folder" "check /nonexistent" /nonexistent \
        build/exercises/solutions/ex$n/check /nonexistent
done

# check --help: the usage on stdout, exit 0, nothing marked.
for n in 1 2 3 4 5; do
    build/exercises/solutions/ex$n/check --help >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && head -n 1 "$out" | grep -q '^usage: .*check \[DIR\]' && ! grep -q "parts right" "$out"; then
        echo "PASS ex$n-help (usage, exit 0, nothing marked)"
    else
        echo "FAIL ex$n-help: status $rc: $(head -c 200 "$out")"
    fi
done

# A written part's model answer works the numbers out: the checker shows it
# only once the learner has written an answer and every marked part is right
# (the shipped stubs' numbers with an answer written: not shown; the
# solution: shown).
for n in 1 5; do
    model=exercises/solutions/ex$n/written.md
    line=$(grep -v '^<!--\|^ *$\|-->$' "$model" | head -n 1)
    tmpd=$(mktemp -d) || exit 2
    cp build/exercises/shipped/ex$n/* "$tmpd/"
    echo "my own answer" >"$tmpd/written.md"
    build/exercises/shipped/ex$n/check "$tmpd" >"$out" 2>&1
    hidden=$(grep -cF -- "$line" "$out")
    build/exercises/solutions/ex$n/check exercises/solutions/ex$n >"$out.stdout" 2>&1
    if [ "$hidden" -eq 0 ] && grep -q "once every marked part above is right" "$out" \
            && grep -q "model answer, .*solutions/ex$n/written.md" "$out.stdout"; then
        echo "PASS ex$n-model-answer-after-numbers (hidden while parts are not right, shown when all are)"
    else
        echo "FAIL ex$n-model-answer-after-numbers: model answer lines shown with parts not right: $hidden; or not shown for the solution"
    fi
    rm -rf "$tmpd"
done

# `make exercise` on a folder whose checker is not built yet (a copy of
# exercise 5's solution: a C file to compile): the first line printed is the
# checker's heading, no command echoed; with a C file that does not compile,
# the compiler's error and a non-zero status, still no command echoed.
# (V=0: a `make V=1 test` would otherwise pass V=1 down.)
mine=$(mktemp -d build/exercises/quiet.XXXXXX) || exit 2
mine_tag=build/exercises/custom/$(printf '%s' "$mine" | tr './' '__')
cp exercises/solutions/ex5/* "$mine/"
make --no-print-directory V=0 exercise EX=5 DIR="$mine" >"$out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && head -n 1 "$out" | grep -q '^exercise 5: ' && [ -x "$mine_tag/check" ]; then
    echo "PASS exercise-quiet-build (a fresh checker's build echoes nothing before the marks)"
else
    echo "FAIL exercise-quiet-build: status $rc, first line '$(head -n 1 "$out" | cut -c1-120)' (want the checker's heading)"
fi
echo 'int broken(void) { return }' >>"$mine/rowsum.c"
make --no-print-directory V=0 exercise EX=5 DIR="$mine" >"$out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "rowsum.c:[0-9]*:[0-9]*: error" "$out" && ! grep -q -- '-c .*rowsum.c' "$out"; then
    echo "PASS exercise-quiet-compile-error (the compiler's error shown, no command echoed)"
else
    echo "FAIL exercise-quiet-compile-error: status $rc; output: $(head -c 300 "$out")"
fi
rm -rf "$mine" "$mine_tag"; rmdir build/exercises/custom 2>/dev/null

# A bad EX: one line on stderr, non-zero status, nothing built.
make -s --no-print-directory exercise EX=9 >"$out" 2>&1
rc=$?
lines=$(wc -l <"$out")
if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ]; then
    echo "PASS exercise-bad-EX"
else
    echo "FAIL exercise-bad-EX: status $rc, $lines lines of output (want non-zero, 1 line)"
fi
exit 0

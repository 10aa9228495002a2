#!/bin/sh
# tests/paper.sh -- the paper's test suite (run by `make test` through
# tests/run.sh; one PASS/FAIL/SKIP line per test).
#
#   1. the include filter: a good region is cut without its markers, each
#      line numbered as in its file (past a nested region's markers too), a
#      missing region and a region marked twice fail and name the file and region;
#   2. `make paper` builds the PDF and the HTML (nothing, when no file they
#      are made from changed since the last build: paper/paper.mk);
#   3. every region the chapters name was resolved (one listing per reference,
#      no reference left in the output), and no TeX left unparsed ('$' in the
#      text outside code);
#   4. every figure is newer than its data file and its gnuplot script
#      (redrawn whenever either changed), and every figure with data is in
#      the PDF; build/figures/SKIPPED is there only when a figure was
#      skipped, one line each naming it and its absent data file;
#      every point a figure plots is one row of its data, none averaged, and
#      the forward-speed figure is bench_fwd.csv's rows its caption names;
#      every legend outside the data, no figure text under 7 pt in print and
#      no two series of a panel told apart by colour alone
#      (tests/paper_figures.py); no number in the PDF cut by a line break,
#      as a too-narrow table column cuts 4.1e-04 (tests/paper_tables.py);
#   5. the claims table is in the PDF text with the measured values;
#   6. every region marked in the sources is a listing of some chapter;
#   7. the exercises are woven in, in the order of their numbers, each with
#      how to check it, and `make paper-solutions` builds the instructor's
#      edition with the solutions; the learner's edition holds none of the
#      exercises' answers (tests/paper_answers.py), the instructor's every
#      one, and no repository path such as ../../ex4/statement.md;
#   8. no number in chapters/ that is neither generated from data/ nor quoted
#      with its source (tests/paper_numbers.py), and nothing cited from
#      outside the repository; a name the text places in a file stands in
#      that file (tests/paper_names.py);
#   9. every cross-reference is generated from a heading's id, none typed,
#      no figure or table named by its place ("the second figure"),
#      none unresolved in the PDF (tests/paper_refs.py), and the main text
#      names no commit and tells no run history (tests/paper_history.py);
#  10. every quotation of the textbook is in it word for word
#      (tests/paper_quotes.py; SKIP where the textbook is not on the machine).
# Without pandoc or pdflatex it prints SKIP lines (`make setup` installs them).
set -u
cd "$(dirname "$0")/.." || exit 2
MAKE=${MAKE:-make}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }

missing=""
for tool in pandoc pdflatex gnuplot pdftotext python3; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    for t in "paper: include filter" "paper: build" "paper: regions resolved" \
             "paper: math parsed" "paper: figures from data" "paper: figures plot their rows" \
             "paper: figure legends outside the data" "paper: figure text at least 7 pt in print" \
             "paper: no number cut by a line break" "paper: claims table in PDF" "paper: every marked region included" \
             "paper: exercises woven in" "paper: instructor's edition" "paper: no exercise answers in the learner's edition" \
             "paper: exercises in order" "paper: numbers generated or cited" \
             "paper: no typed cross-reference" "paper: no figure or table named by its place" \
             "paper: cross-references resolve" \
             "paper: no run history in the main text" "paper: names stand in the files the text gives" \
             "paper: textbook quotations"; do
        skip "$t" "not installed:$missing (make setup)"
    done
    exit 0
fi

# ---- 1. the filter on its own --------------------------------------------
cat > "$tmp/demo.c" <<'EOF'
int before;
//> demo
int f(int x)
{
    //> inner
    return x + 1;
    //< inner
}
//< demo
//> twice
int a;
//< twice
//> twice
int b;
//< twice
EOF
run_filter() {   # run_filter REF -> output in $tmp/out.md, stderr in $tmp/err
    printf '```include\n%s\n```\n' "$1" > "$tmp/in.md"
    pandoc --lua-filter=paper/include-code.lua -t markdown "$tmp/in.md" -o "$tmp/out.md" 2> "$tmp/err"
}
# good_region REF CODE MARKERS FN WHAT: the filter cuts region REF, CODE is in
# what it gives, no line matches MARKERS and the caption names function FN();
# else ok=0 and why names WHAT and the first check that failed.
good_region() {
    if ! run_filter "$1"; then
        why="$5 failed: $(head -c 300 "$tmp/err")"
    elif ! grep -q "$2" "$tmp/out.md" || grep -q "$3" "$tmp/out.md"; then
        why="$5: its code is missing or its markers were kept"
    elif ! grep -q "function $4()" "$tmp/out.md"; then
        why="$5: the caption does not name the function $4()"
    else
        return 0
    fi
    ok=0
    return 1
}
ok=1 why=""
good_region "$tmp/demo.c#demo" 'return x + 1;' '//[<>]' f "a good C region (//> name)"
# Each line of a listing keeps its number in the file, past a nested region's
# markers too: in demo.c 'return x + 1;' is line 6 and '}' line 8.
if [ "$ok" = 1 ]; then
    numbered=$(awk '/startFrom="/ { n = $0; sub(/.*startFrom="/, "", n); sub(/".*/, "", n); n += 0; next }
                    n && /^```/ { n = 0 }
                    n { printf "%d:%s\n", n++, $0 }' "$tmp/out.md")
    printf '%s\n' "$numbered" | grep -qx '6:    return x + 1;' && printf '%s\n' "$numbered" | grep -qx '8:}' ||
        { ok=0 why="a listing's lines are numbered apart from the file's past a nested region: $(printf '%s' "$numbered" | tr '\n' '|')"; }
fi
if [ "$ok" = 1 ]; then
    if run_filter "$tmp/demo.c#no-such-region"; then
        ok=0 why="a missing region did not fail the build"
    elif ! grep -q "demo.c" "$tmp/err" || ! grep -q "no-such-region" "$tmp/err"; then
        ok=0 why="the error for a missing region names neither file nor region: $(head -c 200 "$tmp/err")"
    elif run_filter "$tmp/demo.c#twice"; then
        ok=0 why="a region marked twice did not fail the build"
    elif ! grep -q "twice" "$tmp/err" || ! grep -q "demo.c" "$tmp/err"; then
        ok=0 why="the error for a doubled region names neither file nor region"
    elif run_filter "$tmp/absent.c#demo"; then
        ok=0 why="a missing file did not fail the build"
    fi
fi
cat > "$tmp/demo.py" <<'PYDEMO'
x = 1
#> pyregion
def g(y):
    # a comment, not a marker
    return y + 1
#< pyregion
PYDEMO
[ "$ok" = 1 ] && good_region "$tmp/demo.py#pyregion" 'return y + 1' '#[<>] pyregion' g "a Python region (#> name)"
[ "$ok" = 1 ] && pass "paper: include filter (cuts regions, numbered as in the file, //> in C, #> in Python; missing or doubled regions fail, naming file and region)" \
              || fail "paper: include filter" "$why"

# ---- 2. the build -----------------------------------------------------------
if $MAKE -s paper > "$tmp/build.log" 2>&1; then
    pass "paper: build (build/paper/flashattention.pdf and .html)"
else
    fail "paper: build" "make paper failed: $(grep -i 'error' "$tmp/build.log" | head -n 3 | tr '\n' ' ')"
    for t in "paper: regions resolved" "paper: figures from data" "paper: claims table in PDF" \
             "paper: exercises woven in" "paper: instructor's edition"; do
        fail "$t" "no paper was built"
    done
    exit 0
fi
pdf=build/paper/flashattention.pdf html=build/paper/flashattention.html

# ---- 3. regions -------------------------------------------------------------
refs=$(awk '/^```include/ {getline; print}' chapters/*.md)
nrefs=$(printf '%s\n' "$refs" | grep -c '#')
nlist=$(grep -c 'class="listing"' "$html")
if [ "$nrefs" -eq 0 ]; then
    fail "paper: regions resolved" "the chapters name no region at all"
elif [ "$nlist" -ne "$nrefs" ]; then
    fail "paper: regions resolved" "$nrefs region references in chapters/, $nlist listings in $html"
elif grep -q '```include' "$html" || grep -q '//[<>] ' "$html"; then
    fail "paper: regions resolved" "an include block or a region marker reached the HTML"
else
    pass "paper: regions resolved ($nrefs listings, all cut from the sources)"
fi
# A '$' in the prose (code left out) is TeX that Pandoc did not read as math:
# "$j + $" closes on a space and stands in the PDF as typed.
left=$(python3 - "$html" <<'PYMATH'
import re, sys
sys.path.insert(0, "tests")
import paper_answers
text = paper_answers.prose(sys.argv[1])
print("; ".join(repr(" ".join(text[max(0, m.start() - 40):m.end() + 20].split()))
                for m in re.finditer(r"\$", text))[:600])
PYMATH
)
if [ -n "$left" ]; then
    fail "paper: math parsed" "a '\$' stands in the text, TeX left unparsed: $left"
else
    pass "paper: math parsed (no '\$' left in the text outside code)"
fi

# ---- 4. figures -------------------------------------------------------------
manifest=build/figures/MANIFEST
ok=1 why="" n=0
if [ ! -s "$manifest" ]; then
    ok=0 why="no $manifest"
else
    tab=$(printf '\t')
    while IFS="$tab" read -r name script data; do
        n=$((n + 1))
        for ext in pdf svg; do
            f=build/figures/$name.$ext
            if [ ! -s "$f" ]; then ok=0 why="$f missing"
            elif [ ! "$f" -nt "$data" ] || [ ! "$f" -nt "$script" ]; then ok=0 why="$f is older than $data or $script"
            fi
        done
        grep -q "build/figures/$name" chapters/*.md || { ok=0; why="figure $name is drawn but no chapter shows it"; }
    done < "$manifest"
    # every figure a chapter shows is drawn, unless its data is absent (then skipped by design)
    for name in $(grep -o 'build/figures/[a-z0-9_]*' chapters/*.md | sed 's|.*/||' | sort -u); do
        if ! grep -q "^$name$tab" "$manifest"; then
            grep -q "^$name: not drawn, its data .* is absent" build/figures/SKIPPED 2>/dev/null ||
                { ok=0; why="figure $name is neither drawn nor skipped for lack of data"; }
        fi
    done
    # build/figures/SKIPPED: only when a figure was skipped, one line each,
    # naming a figure that was not drawn and why
    if [ -e build/figures/SKIPPED ]; then
        if [ ! -s build/figures/SKIPPED ]; then ok=0; why="build/figures/SKIPPED is empty (it should be absent when nothing was skipped)"; fi
        while IFS= read -r line; do
            name=${line%%:*}
            case $line in
                *": not drawn, its data "*" is absent"*) ;;
                *) ok=0; why="build/figures/SKIPPED line '$line' does not say which figure and why"; continue ;;
            esac
            if grep -q "^$name$tab" "$manifest"; then ok=0; why="build/figures/SKIPPED names $name, which was drawn"; fi
        done < build/figures/SKIPPED
    fi
fi
[ "$ok" = 1 ] && pass "paper: figures from data ($n figures, each newer than its data and script)" \
              || fail "paper: figures from data" "$why"

# every plotted point is one row of its data (none averaged), and the forward
# speed figure is its caption's rows of data/gpu/bench_fwd.csv
python3 tests/paper_figures.py

# ---- 5. claims table in the PDF -----------------------------------------------
pdftotext -layout "$pdf" "$tmp/paper.txt"
# no table cell wraps a number (a mantissa left without its exponent)
python3 tests/paper_tables.py "$tmp/paper.txt"
v() { awk -F'\t' -v k="$1" '$1 == k {print $2}' build/paper/values.tsv; }
ok=1 why=""
grep -q "measured here" "$tmp/paper.txt" || { ok=0; why="no claims table header in the PDF text"; }
for key in causal_kv_frac slope_bwd_M paper_blocks_need fig2_fwd_gflop; do
    val=$(v "$key")
    if [ -z "$val" ]; then ok=0 why="claims.py wrote no value '$key'"; continue; fi
    grep -qF -- "$val" "$tmp/paper.txt" || { ok=0; why="measured value $key = $val is not in the PDF text"; }
done
for key in online_err tiled_err gradcheck; do   # measured when the exactness data exists
    val=$(v "$key")
    [ "$val" = "not measured" ] && continue
    grep -qF -- "$val" "$tmp/paper.txt" || { ok=0; why="measured value $key = $val is not in the PDF text"; }
done
nrows=$(grep -c '^| ' build/paper/claims.md)
[ "$ok" = 1 ] && pass "paper: claims table in PDF ($((nrows - 1)) claims, measured values present)" \
              || fail "paper: claims table in PDF" "$why"

# ---- 6. every marked region is included ---------------------------------------
# A region marked in a source but shown nowhere is either a listing the text
# forgot or a marker to remove. PENDING names regions whose chapter is being
# written elsewhere; a pending region that a chapter already includes fails
# too, so that the list cannot go stale.
PENDING=""
marked=$(grep -rHo --include='*.c' --include='*.h' --include='*.cu' '^[[:space:]]*//> [A-Za-z0-9_.-]*' src kernels 2>/dev/null |
         sed 's|:[[:space:]]*//> |#|' | sort -u)
unused="" stale=""
for r in $marked; do
    pending=0
    for p in $PENDING; do [ "$p" = "$r" ] && pending=1; done
    if printf '%s\n' "$refs" | grep -qxF "$r"; then
        [ "$pending" = 1 ] && stale="$stale $r"
    elif [ "$pending" = 0 ]; then
        unused="$unused $r"
    fi
done
if [ -z "$marked" ]; then
    fail "paper: every marked region included" "found no //> regions under src/ and kernels/"
elif [ -n "$unused" ]; then
    fail "paper: every marked region included" "marked but in no chapter (include them, or remove the markers):$unused"
elif [ -n "$stale" ]; then
    fail "paper: every marked region included" "listed as pending in tests/paper.sh but included already:$stale"
else
    pass "paper: every marked region included ($(printf '%s\n' $marked | wc -l) regions; pending a chapter: $(printf '%s\n' $PENDING | grep -c .))"
fi

# ---- 7. the exercises, and the instructor's edition ---------------------------------
ok=1 why=""
for n in 1 2 3 4 5; do
    st=exercises/ex$n/statement.md
    [ -f "$st" ] || continue
    title=$(grep -m1 '^# ' "$st" | sed 's/^# //')
    grep -qF -- "$title" "$tmp/paper.txt" || { ok=0; why="'$title' ($st) is not in the PDF"; }
    grep -qF -- "make exercise EX=$n" "$tmp/paper.txt" || { ok=0; why="the PDF does not say how to check exercise $n"; }
done
grep -q "For the instructor" "$tmp/paper.txt" && { ok=0; why="the student's edition shows the solutions"; }
[ "$ok" = 1 ] && pass "paper: exercises woven in (each statement from exercises/exN/statement.md, with make exercise EX=n)" \
              || fail "paper: exercises woven in" "$why"
if $MAKE -s paper-solutions > "$tmp/sol.log" 2>&1 && [ -s build/paper/flashattention-solutions.pdf ]; then
    pdftotext -layout build/paper/flashattention-solutions.pdf "$tmp/sol.txt"
    ok=1 why=""
    for n in 1 2 3 4 5; do
        [ -d exercises/solutions/ex$n ] || continue
        grep -q "For the instructor: exercise $n solved" "$tmp/sol.txt" || { ok=0; why="no solution section for exercise $n"; }
        # the first answer line, "key = value", as the reference solution has it
        line=$(grep -v '^#' exercises/solutions/ex$n/answers.txt | grep -m1 '=' | sed 's/#.*//')
        key=$(printf '%s' "$line" | sed 's/[[:space:]]*=.*//') val=$(printf '%s' "$line" | sed 's/^[^=]*=[[:space:]]*//; s/[[:space:]]*$//')
        if [ -n "$key" ] && ! grep -qE -- "^ *$key *= *$val" "$tmp/sol.txt"; then
            ok=0 why="exercise $n's reference answer '$key = $val' is not in the instructor's edition"
        fi
    done
    grep -q "Marked parts, each over every case" "$tmp/sol.txt" || { ok=0; why="exercise 4's checker rules (check.c's opening comment) are missing"; }
    for key in ex2_L ex3_S ex3_ratio; do   # exercises' answers: the instructor's edition only
        val=$(v "$key")
        grep -qF -- "$val" "$tmp/sol.txt" || { ok=0; why="exercise answer $key = $val is not in the instructor's edition"; }
    done
    if grep -nE '\.\./\.\./|\.\./ex[0-9]' "$tmp/sol.txt" > "$tmp/paths"; then
        ok=0 why="the instructor's edition prints a repository path: $(head -n 1 "$tmp/paths" | tr -s ' ')"
    fi
    [ "$ok" = 1 ] && pass "paper: instructor's edition (build/paper/flashattention-solutions.pdf: solutions, model answers, checkers' rules)" \
                  || fail "paper: instructor's edition" "$why"
    # no exercise's answer in the learner's edition (and all in the instructor's)
    python3 tests/paper_answers.py "$html" build/paper/flashattention-solutions.html
else
    fail "paper: instructor's edition" "make paper-solutions failed: $(grep -i error "$tmp/sol.log" | head -n 3 | tr '\n' ' ')"
    fail "paper: no exercise answers in the learner's edition" "no instructor's edition to compare with"
fi
# the exercises where their material ends, all in Part I (the course), before
# the first heading of Part II: exercise 2 after the online softmax, 1, 3 and
# 5 after the tiled backward and its traffic, 4 after the masks
order=$(sed -n '1,/<h1[^>]*id="part:gpu"/p' "$html" |
        grep -oE '<h[1-6][^>]*>(<span[^>]*>[^<]*</span>)? *Exercise [1-9]:' | grep -oE 'Exercise [1-9]' | grep -oE '[1-9]' | tr -d '\n')
if ! grep -q '<h1[^>]*id="part:gpu"' "$html"; then
    fail "paper: exercises in order" "no Part II heading (id part:gpu) in $html"
elif [ "$order" = "21354" ]; then
    pass "paper: exercises in order (${order}, each after its chapter, all in Part I)"
else
    fail "paper: exercises in order" "Part I shows the exercises in the order '$order', not 21354"
fi
# cross-references generated, none typed, none left unresolved in the PDF
python3 tests/paper_refs.py "$tmp/paper.txt"
# the main text states facts about the code and data, not the runs' history
python3 tests/paper_history.py

# ---- 8. numbers generated or cited; nothing cited from outside --------------------
out=$(python3 tests/paper_numbers.py 2>&1)
if printf '%s\n' "$out" | grep -q '^FAIL'; then
    echo "$out"
elif grep -nE 'ANCHORS|DESIGN\.md|\.\./shared|shared/seed' build/paper/claims.md chapters/*.md >"$tmp/ext" 2>/dev/null; then
    fail "paper: numbers generated or cited" "cites a file outside the repository: $(head -n 2 "$tmp/ext" | tr '\n' ' ')"
else
    echo "$out" | sed 's/^PASS paper: every number/PASS paper: numbers generated or cited: every number/'
fi

python3 tests/paper_names.py

# ---- 8b. the generators stay readable; the opening lists every stage ----------
long=$(wc -l paper/gen/*.py paper/gen/*.sh | awk '$2 != "total" && $1 > 1000 {print $2 " (" $1 " lines)"}')
if [ -n "$long" ]; then
    fail "paper: generators under 1000 lines" "$long"
else
    pass "paper: generators under 1000 lines ($(ls paper/gen/*.py paper/gen/*.sh | wc -l) files in paper/gen/)"
fi
missing_stages=""
for src in src/programs/stage[0-9]*_main.c; do
    n=$(basename "$src" | sed 's/^stage\([0-9]\).*/\1/')
    grep -q "^| $n | \`./stage$n\` |" chapters/00-opening.md || missing_stages="$missing_stages $n"
done
if [ -n "$missing_stages" ]; then
    fail "paper: stage table complete" "the opening's table of stages lacks stage(s)$missing_stages"
else
    pass "paper: stage table complete (every src/programs/stageN_*_main.c has its row in chapters/00-opening.md)"
fi

# ---- 9. the textbook's quotations ------------------------------------------------------
python3 tests/paper_quotes.py | sed 's/^\(PASS\|FAIL\|SKIP\) paper: textbook quotations are/\1 paper: textbook quotations: all/'
exit 0

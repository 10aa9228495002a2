#!/bin/sh
# tests/setup.sh -- `make setup` (scripts/setup.sh) ends with a short summary:
# what is here now and what this run installed, whether nvcc was found, and
# the command to run next; `make test`'s --if-missing says nothing when
# nothing is missing. apt-get and sudo are stand-ins that install nothing and
# need no network: the test runs anywhere the tools are (make test installs
# them first), and prints SKIP where they are not.
# Run from the repository root; PASS/FAIL/SKIP lines (tests/run.sh).
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# stand_ins DIR [TOOL]: apt-get and sudo in DIR; apt-get logs its arguments
# and, given TOOL, "installs" it: a link to the real one, into DIR.
stand_ins() {
    mkdir -p "$1"
    real=""
    [ -n "${2-}" ] && real=$(command -v "$2")
    printf '#!/bin/sh\necho "apt-get $*" >> "%s/apt.log"\n%s\n' "$tmp" \
        "${2:+case \"\$*\" in *install*) /bin/ln -sf \"$real\" \"$1/$2\";; esac}" > "$1/apt-get"
    printf '#!/bin/sh\nexec "$@"\n' > "$1/sudo"
    chmod +x "$1/apt-get" "$1/sudo"
}

# 1. Everything here already: the summary says that nothing was added.
stand_ins "$tmp/bin"
PATH="$tmp/bin:$PATH" sh scripts/setup.sh >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "still missing" "$tmp/err"; then
    echo "SKIP setup-summary: tools missing here ($(cat "$tmp/err")); make test installs them first"
    exit 0
fi
lines=$(wc -l <"$tmp/out")
if [ "$rc" -ne 0 ]; then
    echo "FAIL setup-summary: exit status $rc: $(head -c 300 "$tmp/err")"
elif ! grep -q "install" "$tmp/apt.log" 2>/dev/null; then
    echo "FAIL setup-summary: apt-get install was not run"
elif ! grep -q "^setup: done\. Checked: pandoc, gnuplot, .*numpy [0-9]" "$tmp/out" ||
     ! grep -q "^setup: installed by this run: nothing" "$tmp/out"; then
    echo "FAIL setup-summary: no line saying what is here and that nothing was added: $(tr '\n' '|' <"$tmp/out" | head -c 300)"
elif ! tail -n 1 "$tmp/out" | grep -q "^setup: next: make stage3 && ./stage3"; then
    echo "FAIL setup-summary: the last line does not name the next command: $(tail -n 1 "$tmp/out")"
elif [ "$lines" -gt 5 ] || [ -s "$tmp/err" ]; then
    echo "FAIL setup-summary: $lines lines on stdout (at most 5) and $(wc -l <"$tmp/err") on stderr (none)"
else
    echo "PASS setup-summary (what is here, nothing added, the next command; $lines lines)"
fi

# 2. gnuplot missing, which apt-get installs: the summary names it. The PATH
# holds only what the script runs (and every checked tool but gnuplot).
only=$tmp/only
stand_ins "$only" gnuplot
py=$(python3 -c 'import sys; print(sys.executable)')
ln -s "$py" "$only/python3"
for t in id pandoc pdflatex pdftotext pdftoppm kpsewhich; do
    p=$(command -v "$t") && ln -s "$p" "$only/$t"
done
PATH="$only" /bin/sh scripts/setup.sh >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "FAIL setup-summary-installed: exit status $rc: $(head -c 300 "$tmp/err")"
elif ! grep -q "^setup: installed by this run: gnuplot$" "$tmp/out"; then
    echo "FAIL setup-summary-installed: the summary does not say gnuplot was installed: $(tr '\n' '|' <"$tmp/out" | head -c 300)"
elif ! grep -q "^setup: no nvcc" "$tmp/out"; then
    echo "FAIL setup-summary-installed: no line saying that nvcc is absent: $(tr '\n' '|' <"$tmp/out" | head -c 300)"
else
    echo "PASS setup-summary-installed (gnuplot named as installed by this run; no nvcc said)"
fi

# 3. make test's own call: nothing missing, nothing said.
: >"$tmp/apt.log"
PATH="$tmp/bin:$PATH" sh scripts/setup.sh --if-missing >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ ! -s "$tmp/out" ] && [ ! -s "$tmp/apt.log" ]; then
    echo "PASS setup-if-missing-quiet (nothing missing: no output, no apt-get)"
else
    echo "FAIL setup-if-missing-quiet: exit $rc, output: $(head -c 200 "$tmp/out")"
fi
exit 0

#!/bin/sh
# paper/gen/paper_figures.sh OUTDIR -- draw every figure of the paper from data/.
#
# Each figure is a gnuplot script in figures/ drawn twice: OUTDIR/NAME.pdf
# (for pdflatex) and OUTDIR/NAME.svg (for the HTML page). A figure whose data
# file is absent (exactness data not yet written, no GPU data on a machine
# without a GPU) is skipped with a line saying so, never failed.
# OUTDIR/MANIFEST lists what was drawn, one line per figure:
#     NAME <TAB> script <TAB> data file
# which the paper's test suite uses to check that every figure is newer than
# the data it was drawn from, and, only when some figure was skipped,
# OUTDIR/SKIPPED, one line per figure skipped for lack of data:
#     NAME: not drawn, its data FILE is absent; ...
# (the suite accepts those as not drawn, also when the paper was up to date
# and nothing ran). When every figure is drawn there is no OUTDIR/SKIPPED.
set -eu
out=${1:-build/figures}
mkdir -p "$out"
manifest="$out/MANIFEST.tmp"
skipped="$out/SKIPPED.tmp"
: > "$manifest"
: > "$skipped"

# Every figures/NAME.gp but the shared style is a figure, and names its own
# data in its first default, `if (!exists("VAR")) VAR = "FILE"`; it is drawn
# with VAR=FILE, so the file is named in one place. A file of data/ that
# this checkout lacks is taken from this build's own run where there is one
# (build/paper/exactness.csv: make paper-data writes it when data/cpu/ has none).
for gp in figures/*.gp; do
    name=$(basename "$gp" .gp)
    [ "$name" = style ] && continue
    set -- $(sed -n 's/^if (!exists("\([A-Za-z_]*\)")) \1 = "\([^"]*\)".*/\1 \2/p' "$gp" | head -n 1)
    [ $# = 2 ] || { echo "figures: $gp names no data file (if (!exists(\"VAR\")) VAR = \"FILE\")" >&2; exit 1; }
    var=$1 data=$2
    own=build/paper/$(basename "$data")
    case $data in data/*) [ -s "$data" ] || [ ! -s "$own" ] || data=$own ;; esac
    if [ ! -s "$data" ]; then
        echo "figures: $name skipped: $data is absent"
        echo "$name: not drawn, its data $data is absent; the paper says so where the figure would stand" >> "$skipped"
        rm -f "$out/$name.pdf" "$out/$name.svg"
        continue
    fi
    for term in pdf svg; do
        gnuplot -e "term='$term'; out='$out/$name.$term'; $var='$data'" "$gp"
    done
    printf '%s\t%s\t%s\n' "$name" "$gp" "$data" >> "$manifest"
    echo "figures: $name <- $data"
done
if [ -s "$skipped" ]; then
    mv "$skipped" "$out/SKIPPED"
    echo "figures: $(wc -l < "$out/SKIPPED") not drawn for lack of data, each with why in $out/SKIPPED"
else
    rm -f "$skipped" "$out/SKIPPED"
fi
mv "$manifest" "$out/MANIFEST"

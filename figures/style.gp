# figures/style.gp -- loaded by every figure script. The caller sets
#   term = "pdf" | "svg"   and   out = "build/figures/NAME.pdf|svg"
# (paper/gen/paper_figures.sh does), or term = "table": every plotted point
# written to out as text (tests/paper_figures.py compares them with the data). Data files are CSV with '#' provenance
# lines on top and one header line, which the 'using' filters skip.
if (!exists("term")) term = "pdf"
if (!exists("W")) W = 5.0
if (!exists("Hgt")) Hgt = 3.2
# pdfcairo lays text out at 96 dpi: a font of nominal size N prints at
# N * 96/72 * fontscale points (measured: ",10" gives a 13.33 pt text
# matrix at fontscale 1, 6.67 at gnuplot's default 0.5). fontscale 0.75
# makes the nominal size the printed size, before LaTeX scales the figure.
if (term eq "pdf") {
    set terminal pdfcairo enhanced color font "Helvetica,9" fontscale 0.75 linewidth 1.5 size W, Hgt
} else {
    if (term eq "table") {
        set terminal unknown
    } else {
        set terminal svg enhanced font "Helvetica,12" linewidth 1.5 size int(W * 110), int(Hgt * 110) background rgb "white"
    }
}
if (term eq "table") { set table out } else { set output out }
set datafile separator ","
set datafile commentschars "#"
set datafile missing NaN   # so that rows filtered out by a ternary do not break lines
set grid xtics ytics mxtics mytics lc rgb "#dddddd" lw 0.5
# the legend outside the data, at the text's size: every figure places its
# own (at screen, below the panels with a bottom margin to hold it, or in a
# side margin), or none; tests/paper_figures.py fails on a legend inside a
# plot. (Plain "below" overlapped the x axis label in gnuplot 5.4.)
set key at screen 0.5, screen 0.01 center bottom vertical box opaque samplen 2 spacing 1.1 font ",9"
set border lw 0.8
# one colour per algorithm/pass, the same in every figure
c_naive_f = "#b2182b"; c_naive_b = "#e66101"
c_tiled_f = "#2166ac"; c_tiled_b = "#1a9850"
c_other = "#4d4d4d"
# line types 1-8 for figures that draw one line per implementation: hues
# apart from one another (a colour-blind-safe set), none yellow on white
set linetype 1 lc rgb "#0072b2"
set linetype 2 lc rgb "#d55e00"
set linetype 3 lc rgb "#009e73"
set linetype 4 lc rgb "#cc79a7"
set linetype 5 lc rgb "#8c6d00"
set linetype 6 lc rgb "#000000"
set linetype 7 lc rgb "#56b4e9"
set linetype 8 lc rgb "#7f7f7f"
# 9-16 for figures with more lines than eight: hues unlike 1-8 (in print
# each line also has a point shape of its own, pt k, k = 1..15)
set linetype 9 lc rgb "#882255"
set linetype 10 lc rgb "#332288"
set linetype 11 lc rgb "#e69f00"
set linetype 12 lc rgb "#117733"
set linetype 13 lc rgb "#aa4499"
set linetype 14 lc rgb "#661100"
set linetype 15 lc rgb "#44aa99"
set linetype 16 lc rgb "#999933"
# one point shape and colour per GPU path, the same in every figure that
# draws paths (forward and backward speed, the IO sweep): its place in this
# list gives the shape (pt impl_lt(name); a path not in it takes 15,
# pentagon) and the colour (impl_lc below)
impl_names = "ours_op ours_v0_materialized ours_v1_tiled ours_v1_tiled_det ours_v2_mma ours_v2_mma_det " . \
             "ours_v3_hopper ours_v3_hopper_det ours_v4_mma8 ours_v4_mma8_det " . \
             "sdpa_cudnn sdpa_efficient sdpa_flash torch_materialized"
impl_ix(s) = (sum [i = 1:words(impl_names)] (word(impl_names, i) eq s ? i : 0)) + 0
impl_lt(s) = impl_ix(s) > 0 ? impl_ix(s) : 15
# a path's colour (lc rgb impl_lc(name)), by the same place: the pairs a
# reader sets side by side far apart in hue -- ours_op (black) against the
# kernel it runs, ours_v3_hopper (sky blue); version 0 (dark brown) against
# cuDNN (orange); each version against its deterministic mode; a path not
# in the list olive
impl_colors = "#000000 #661100 #009e73 #cc79a7 #8c6d00 #7f7f7f #56b4e9 #332288 " . \
              "#882255 #44aa99 #e69f00 #117733 #aa4499 #d55e00"
impl_lc(s) = impl_ix(s) > 0 ? word(impl_colors, impl_ix(s)) : "#999933"

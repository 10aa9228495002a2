# figures/io_vs_m.gp -- tiled traffic against the SRAM size M (N = 2048,
# d = 64), beside naive attention's (which does not depend on M). Points:
# counted with the blocks derive_blocks picks; dashed: closed form; dotted: a
# line of slope -1 through the backward's first point, what Theta(N^2 d^2/M)
# predicts; dash-dot (if the sweep has "tiled-io" rows): the IO-optimal
# tiles of derive_blocks_io. The legend names each curve as the caption does.
# Naive forward and backward are told apart in grey by their points (filled
# circles and squares on the lines every 20 samples, as in io_vs_n).
# Input: data/cpu/io_sweep.csv (or csv=...).
if (!exists("csv")) csv = "data/cpu/io_sweep.csv"
Hgt = 4.8
load "figures/style.gp"
set logscale xy 2
set logscale y 10
set format y "10^{%T}"
set xlabel "SRAM size M (elements of 8 bytes)"
set ylabel "slow-memory traffic (bytes, fp64)"
set xrange [700:190000]
set yrange [4e6:1e10]
set xtics ("1K" 1024, "2K" 2048, "4K" 4096, "8K" 8192, "16K" 16384, "32K" 32768, "64K" 65536, "128K" 131072)
# the legend below the plot, off the curves
set bmargin 11
set key at screen 0.5, screen 0.01 center bottom vertical font ",8" box opaque
tiled(p) = (strcol(1) eq "tiled" && strcol(2) eq p && strcol(4) eq "2048")
# rows "tiled-io" (when the sweep has them): the blocks that minimize the count
thin(p) = (strcol(1) eq "tiled-io" && strcol(2) eq p && strcol(4) eq "2048")
# the IO-optimal curves in colours of their own: beside the paper's rule's
# in the same colour, hollow against filled points did not tell them apart
# at print size
c_io_f = "#762a83"; c_io_b = "#8c510a"
# the two thin-tile curves, only when the sweep has such rows (an empty
# series would make gnuplot warn); expanded as a macro at the end of the plot
n_thin = int(system("grep -c '^tiled-io,' " . csv . " || true"))
thin_curves = (n_thin == 0) ? "" : \
  ", csv using (thin('forward') ? $6 : NaN):($9*8) smooth unique with linespoints pt 8 ps 0.6 dt 4 lc rgb c_io_f title 'tiled fwd, IO-optimal (derive\\_blocks\\_io)'" . \
  ", csv using (thin('backward') ? $6 : NaN):($9*8) smooth unique with linespoints pt 10 ps 0.6 dt 4 lc rgb c_io_b title 'tiled bwd, IO-optimal (derive\\_blocks\\_io)'"
# the naive traffic at N = 2048 and the backward's first point
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "forward" && strcol(4) eq "2048") ? $9*8 : NaN) name "NF" nooutput
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "backward" && strcol(4) eq "2048") ? $9*8 : NaN) name "NB" nooutput
stats csv using (tiled("backward") ? $6 : NaN):(tiled("backward") ? $9*8 : NaN) name "TB" nooutput
d = 64
set arrow from 4*d*d, graph 0 to 4*d*d, graph 1 nohead lc rgb "#999999" dt 3
set label "M = 4d^2 (d = 64)" at 4*d*d*1.1, graph 0.06 left font ",9" tc rgb "#555555"
plot \
  NF_max with linespoints pi 20 pt 7 ps 0.6 lc rgb c_naive_f lw 1 title "naive forward", \
  NB_max with linespoints pi 20 pt 5 ps 0.6 lc rgb c_naive_b lw 1 title "naive backward", \
  csv using (tiled("forward") ? $6 : NaN):($10*8) smooth unique with lines lc rgb c_tiled_f dt 2 notitle, \
  csv using (tiled("forward") ? $6 : NaN):($9*8) with points pt 9 ps 0.8 lc rgb c_tiled_f title "tiled fwd, paper's rule (derive\\_blocks)", \
  csv using (tiled("backward") ? $6 : NaN):($10*8) smooth unique with lines lc rgb c_tiled_b dt 2 notitle, \
  csv using (tiled("backward") ? $6 : NaN):($9*8) with points pt 11 ps 0.8 lc rgb c_tiled_b title "tiled bwd, paper's rule (derive\\_blocks)", \
  TB_max_y * TB_min_x / x with lines lc rgb c_other dt 3 title "slope -1 (∝ 1/M)" @thin_curves

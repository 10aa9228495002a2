# figures/window_sweep.gp -- the causal sliding window of W keys (window
# (W - 1, 0)) at N = 4096, d = 64, Br = Bc = 64, against W. Left: tiles the
# forward visits and the slow-memory bytes of both passes, counted (points)
# and by the mask.h formulas (lines); right: wall time on this CPU.
# Horizontal lines: causal (solid) and no mask (dotted), each in its
# pass's colour. Input: data/cpu/window_sweep.csv.
if (!exists("csv")) csv = "data/cpu/window_sweep.csv"
W = 6.5
Hgt = 3.3
load "figures/style.gp"
win(r) = (strcol(1) eq "window")
stats csv using ((strcol(1) eq "causal") ? $17*8 : NaN) name "CF" nooutput
stats csv using ((strcol(1) eq "causal") ? $19*8 : NaN) name "CB" nooutput
stats csv using ((strcol(1) eq "full") ? $17*8 : NaN) name "FF" nooutput
stats csv using ((strcol(1) eq "full") ? $19*8 : NaN) name "FB" nooutput
stats csv using ((strcol(1) eq "causal") ? $21 : NaN) name "CTF" nooutput
stats csv using ((strcol(1) eq "causal") ? $22 : NaN) name "CTB" nooutput
stats csv using ((strcol(1) eq "full") ? $21 : NaN) name "FTF" nooutput
stats csv using ((strcol(1) eq "full") ? $22 : NaN) name "FTB" nooutput
# one legend for both panels, below them, off the lines and points
set bmargin 6
set key at screen 0.5, screen 0.01 center bottom maxrows 2 maxcols 3 font ",9" box opaque
set multiplot layout 1, 2
set logscale x 2
set xrange [12:3000]
set xtics (16, 64, 256, 1024)
set xlabel "window W (keys, the query's own included)"
set logscale y 10
set format y "10^{%T}"
set ylabel "slow-memory traffic (bytes, fp64)"
plot \
  FF_max with lines lc rgb c_tiled_f dt 3 title "no mask (dotted)", \
  FB_max with lines lc rgb c_tiled_b dt 3 notitle, \
  CF_max with lines lc rgb c_tiled_f dt 1 lw 0.8 title "causal (solid)", \
  CB_max with lines lc rgb c_tiled_b dt 1 lw 0.8 notitle, \
  csv using (win(0) ? $2 : NaN):($18*8) smooth unique with lines lc rgb c_tiled_f dt 2 notitle, \
  csv using (win(0) ? $2 : NaN):($17*8) with points pt 9 ps 0.7 lc rgb c_tiled_f title "window, forward", \
  csv using (win(0) ? $2 : NaN):($20*8) smooth unique with lines lc rgb c_tiled_b dt 2 notitle, \
  csv using (win(0) ? $2 : NaN):($19*8) with points pt 11 ps 0.7 lc rgb c_tiled_b title "window, backward", \
  NaN with lines lc rgb c_tiled_f dt 2 title "formula (mask.h)"
set ylabel "wall time on this CPU (s)"
unset key
plot \
  FTF_max with lines lc rgb c_tiled_f dt 3 notitle, \
  FTB_max with lines lc rgb c_tiled_b dt 3 notitle, \
  CTF_max with lines lc rgb c_tiled_f dt 1 lw 0.8 notitle, \
  CTB_max with lines lc rgb c_tiled_b dt 1 lw 0.8 notitle, \
  csv using (win(0) ? $2 : NaN):21 with linespoints pt 9 ps 0.7 lc rgb c_tiled_f notitle, \
  csv using (win(0) ? $2 : NaN):22 with linespoints pt 11 ps 0.7 lc rgb c_tiled_b notitle
unset multiplot

# figures/io_vs_n.gp -- slow-memory bytes counted by stages 1 and 3 against N
# (M = 16384 elements, d = 64), log-log. Points: counted while running;
# lines: the closed forms of src/cpu/stage1_naive.h and src/cpu/stage3_tiled.h,
# evaluated by the programs for the same N (column formula_elements).
# Input: data/cpu/io_sweep.csv (or csv=...).
if (!exists("csv")) csv = "data/cpu/io_sweep.csv"
Hgt = 3.6
load "figures/style.gp"
set logscale xy 2
set format y "10^{%T}"
set logscale y 10
set xlabel "sequence length N (tokens)"
set ylabel "slow-memory traffic (bytes, fp64)"
set xrange [100:5000]
set xtics (128, 256, 512, 1024, 2048, 4096)
# the legend below the plot, under the axis label, off the points and the lines
set bmargin 6.5
set key at screen 0.5, screen 0.01 center bottom vertical maxrows 2 font ",9" box opaque
sel(a, p) = (strcol(1) eq a && strcol(2) eq p && (a eq "naive" || strcol(6) eq "16384"))
plot \
  csv using (sel("naive","forward") ? $4 : NaN):($10*8) smooth unique with lines lc rgb c_naive_f dt 2 notitle, \
  csv using (sel("naive","forward") ? $4 : NaN):($9*8) with points pt 7 ps 0.7 lc rgb c_naive_f title "naive forward", \
  csv using (sel("naive","backward") ? $4 : NaN):($10*8) smooth unique with lines lc rgb c_naive_b dt 2 notitle, \
  csv using (sel("naive","backward") ? $4 : NaN):($9*8) with points pt 5 ps 0.7 lc rgb c_naive_b title "naive backward", \
  csv using (sel("tiled","forward") ? $4 : NaN):($10*8) smooth unique with lines lc rgb c_tiled_f dt 2 notitle, \
  csv using (sel("tiled","forward") ? $4 : NaN):($9*8) with points pt 9 ps 0.8 lc rgb c_tiled_f title "tiled forward", \
  csv using (sel("tiled","backward") ? $4 : NaN):($10*8) smooth unique with lines lc rgb c_tiled_b dt 2 notitle, \
  csv using (sel("tiled","backward") ? $4 : NaN):($9*8) with points pt 11 ps 0.8 lc rgb c_tiled_b title "tiled backward", \
  NaN with lines lc rgb c_other dt 2 title "closed form (same N)"

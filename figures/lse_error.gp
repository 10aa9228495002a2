# figures/lse_error.gp -- the backward's error against |L|: one random head
# (N = 256, d = 32) whose scores all carry a common offset, so that only L
# grows; errors of dQ, dK, dV (the worst, relative to their magnitudes)
# against a long-double reference on the same scores. The tiled stage
# rebuilds P = exp(S - L) from a rounded L and loses about eps |L|; the naive
# stage divides exp(S - m) by l and does not. Lines: eps max|L| and the
# tolerance the checks use. Input: data/cpu/lse_error.csv.
if (!exists("csv")) csv = "data/cpu/lse_error.csv"
Hgt = 3.9
load "figures/style.gp"
set logscale xy 10
set format x "10^{%T}"
set format y "10^{%T}"
set xlabel "max |L| (logsumexp of a row)"
set ylabel "backward error (relative)"
set xrange [1:1e6]
set yrange [1e-17:1e-8]
# the legend below the plot, under the axis label, off the points and the lines
set bmargin 7.5
set key at screen 0.5, screen 0.01 center bottom vertical maxrows 3 font ",9" box opaque
sel(a, peaked) = (strcol(4) eq a && (peaked ? $1 == 1 : $1 != 1))
epsd = 2.220446049250313e-16
plot \
  epsd * x with lines lc rgb c_other dt 1 lw 0.8 title "eps |L|", \
  1e-12 + 16 * epsd * x with lines lc rgb c_other dt 2 title "tolerance 1e-12 + 16 eps |L|", \
  csv using (sel("tiled", 0) ? $3 : NaN):10 with points pt 9 ps 0.8 lc rgb c_tiled_f title "tiled, scale 1/sqrt(d)", \
  csv using (sel("tiled", 1) ? $3 : NaN):10 with points pt 8 ps 0.8 lc rgb c_tiled_b title "tiled, scale 1 (peaked)", \
  csv using (sel("naive", 0) ? $3 : NaN):10 with points pt 7 ps 0.6 lc rgb c_naive_f title "naive, scale 1/sqrt(d)", \
  csv using (sel("naive", 1) ? $3 : NaN):10 with points pt 6 ps 0.6 lc rgb c_naive_b title "naive, scale 1 (peaked)"

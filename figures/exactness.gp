# figures/exactness.gp -- errors of the tiled algorithm against the fp64
# naive reference, by sequence length, from the property tests (one point per
# random shape: d, causal and the tiles vary), and the online softmax's
# largest error over the chapter's case. Dashed: the bounds the tests enforce,
# read from the file's tolerance column (core/tolerances.h wrote them). An
# error of exactly 0 has no place on a log axis: it is drawn on the bottom
# line, which is labelled "0 (exact)". The legend sits below the plot, off
# the bound lines, which have a dash pattern each (dashes, dash-dot,
# dash-dot-dot) so that they part in grey too.
# Input: data/cpu/exactness.csv (or csv=...), written by build/test_cpu --csv.
if (!exists("csv")) csv = "data/cpu/exactness.csv"
Hgt = 4.4
load "figures/style.gp"
chk(c) = (strcol(2) eq c)
# the bounds, from the file (each check's rows carry the same one)
stats csv using (chk("forward_O_max_abs") ? $9 : NaN) name "TF" nooutput
stats csv using (chk("backward_max_abs") ? $9 : NaN) name "TB" nooutput
stats csv using (chk("gradcheck_rel") ? $9 : NaN) name "TG" nooutput
ZERO = 1e-19
pos(v) = (v > 0 ? v : ZERO)
set logscale y 10
set format y "10^{%T}"
set ytics add ("0 (exact)" ZERO)
set xlabel "sequence length N (tokens)"
set ylabel "max |error| (fp64)"
set yrange [3e-20:1e-4]
set xrange [0:*]
# a little room at both ends, so that no point sits on the frame
set offsets graph 0.03, graph 0.03, 0, 0
set bmargin 9
set key at screen 0.5, screen 0.01 center bottom vertical maxrows 4 width -7 font ",8" box opaque
plot \
  csv using (chk("forward_O_max_abs") ? $3 : NaN):(pos($8)) with points pt 7 ps 0.5 lc rgb c_tiled_f title "forward O (abs)", \
  csv using (chk("forward_L_max_abs") ? $3 : NaN):(pos($8)) with points pt 6 ps 0.5 lc rgb "#762a83" title "forward L (abs)", \
  csv using (chk("backward_max_abs") ? $3 : NaN):(pos($8)) with points pt 5 ps 0.5 lc rgb c_tiled_b title "backward dQ, dK, dV (abs)", \
  csv using (chk("gradcheck_rel") ? $3 : NaN):(pos($8)) with points pt 9 ps 0.6 lc rgb c_naive_f title "gradient check (rel.)", \
  csv using (chk("online_vs_two_pass_max_abs") ? $3 : NaN):(pos($8)) with points pt 13 ps 0.8 lc rgb c_other title "online softmax, largest of 1000 rows (abs)", \
  TF_max with lines lc rgb c_tiled_f dt 2 title sprintf("bound O, L: %.0e", TF_max), \
  TB_max with lines lc rgb c_tiled_b dt 4 title sprintf("bound dQ, dK, dV: %.0e", TB_max), \
  TG_max with lines lc rgb c_naive_f dt 5 title sprintf("bound gradient check: %.0e", TG_max)

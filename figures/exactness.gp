# figures/exactness.gp -- errors of the tiled algorithm against the fp64
# naive reference, by sequence length, from the property tests (one point per
# random shape: d, causal and the tiles vary). Dashed: the tolerances.
# Input: data/cpu/exactness.csv (or csv=...), written by build/test_cpu --csv.
if (!exists("csv")) csv = "data/cpu/exactness.csv"
load "figures/style.gp"
set logscale y 10
set format y "10^{%T}"
set xlabel "sequence length N (tokens)"
set ylabel "max |error| (fp64)"
set yrange [1e-19:1e-5]
set xrange [0:*]
set key top right font ",8" box opaque
chk(c) = (strcol(2) eq c)
pos(v) = (v > 0 ? v : 1e-19)
plot \
  csv using (chk("forward_O_max_abs") ? $3 : NaN):(pos($8)) with points pt 7 ps 0.5 lc rgb c_tiled_f title "forward O (abs)", \
  csv using (chk("forward_L_max_abs") ? $3 : NaN):(pos($8)) with points pt 6 ps 0.5 lc rgb "#1b7837" title "forward L (abs)", \
  csv using (chk("backward_max_abs") ? $3 : NaN):(pos($8)) with points pt 5 ps 0.5 lc rgb c_tiled_b title "backward dQ, dK, dV (abs)", \
  csv using (chk("gradcheck_rel") ? $3 : NaN):(pos($8)) with points pt 9 ps 0.6 lc rgb c_naive_f title "gradient check (rel.)", \
  csv using (chk("online_vs_two_pass_max_abs") ? $3 : NaN):(pos($8)) with points pt 13 ps 0.8 lc rgb c_other title "online softmax (abs)", \
  1e-14 with lines lc rgb c_tiled_f dt 2 title "tolerance 1e-14", \
  1e-12 with lines lc rgb c_tiled_b dt 2 title "tolerance 1e-12", \
  1e-6 with lines lc rgb c_naive_f dt 2 title "tolerance 1e-6"

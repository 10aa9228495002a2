# figures/v3_steps.gp -- how version 3 was built: forward TFLOP/s of each
# step (kernels/stage4_fwd_v3_hopper.cu) at one sequence length, bf16, one panel
# per head dimension, non-causal and causal bars where the step was measured,
# open markers for the prediction written before the step (also where it has
# not been measured yet), with PyTorch SDPA's cuDNN and flash backends from
# the same run as horizontal lines (solid: cuDNN, dashed: flash; non-causal
# darker, causal lighter).
# Input: data/gpu/studies/fwd_v3_steps/v3_steps.csv (scripts/gpu/v3_steps.sh: tests/gpu/v3_check
# --time and scripts/gpu/v3_peers.py; columns device, impl, step, dtype, causal,
# B, H, N, d, median_ms, tflops, ...) and data/gpu/studies/fwd_v3_steps/v3_predictions.csv (step,
# d, causal, N, tflops_predicted: the prediction column of
# data/gpu/studies/fwd_v3_steps/steps.md).
if (!exists("csv")) csv = "data/gpu/studies/fwd_v3_steps/v3_steps.csv"
if (!exists("pred")) pred = "data/gpu/studies/fwd_v3_steps/v3_predictions.csv"
if (!exists("NN")) NN = 8192
W = 6.5
Hgt = 4.0
load "figures/style.gp"
set termoption noenhanced
set style fill solid 0.85 border rgb "#333333"
set boxwidth 0.36
set xrange [0.4:8.6]
set xtics 1 nomirror
set xlabel "step (the caption names them)"
set ylabel "forward throughput (TFLOP/s)"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
# one legend for both panels, below them at the text's size (drawn by the
# first panel, which has every entry); inside, it covered the bars
set key at screen 0.5, screen 0.01 center bottom maxrows 3 width 1 font ",8" spacing 1.1 box opaque
set bmargin 8.5

set multiplot layout 1, 2
first = 1
do for [dd in "64 128"] {
    if (!first) { unset key }
    first = 0
    d0 = dd + 0
    cudnn0 = real(system(sprintf("awk -F, '!/^#/ && $2 == \"sdpa_cudnn\" && $9 == %d && $8 == %d && $5 == 0 {v = $11} END {print v + 0}' %s", d0, NN, csv)))
    cudnn1 = real(system(sprintf("awk -F, '!/^#/ && $2 == \"sdpa_cudnn\" && $9 == %d && $8 == %d && $5 == 1 {v = $11} END {print v + 0}' %s", d0, NN, csv)))
    flash0 = real(system(sprintf("awk -F, '!/^#/ && $2 == \"sdpa_flash\" && $9 == %d && $8 == %d && $5 == 0 {v = $11} END {print v + 0}' %s", d0, NN, csv)))
    flash1 = real(system(sprintf("awk -F, '!/^#/ && $2 == \"sdpa_flash\" && $9 == %d && $8 == %d && $5 == 1 {v = $11} END {print v + 0}' %s", d0, NN, csv)))
    set title sprintf("d = %d, N = %d, bf16", d0, NN)
    plot csv using ((strcol(2) eq "ours_v3" && $9 == d0 && $8 == NN && $5 == 0) ? $3 - 0.19 : NaN):11 \
             with boxes lc rgb "#2166ac" title "v3, non-causal", \
         csv using ((strcol(2) eq "ours_v3" && $9 == d0 && $8 == NN && $5 == 1) ? $3 + 0.19 : NaN):11 \
             with boxes lc rgb "#92c5de" title "v3, causal", \
         pred using (($2 == d0 && $4 == NN && $3 == 0) ? $1 - 0.19 : NaN):5 \
             with points pt 6 ps 0.6 lc rgb "#000000" title "prediction, non-causal", \
         pred using (($2 == d0 && $4 == NN && $3 == 1) ? $1 + 0.19 : NaN):5 \
             with points pt 8 ps 0.6 lc rgb "#000000" title "prediction, causal", \
         (cudnn0 > 0 ? cudnn0 : NaN) with lines lw 1.2 lc rgb "#b2182b" title "cuDNN", \
         (cudnn1 > 0 ? cudnn1 : NaN) with lines lw 1.2 lc rgb "#ef8a62" notitle, \
         (flash0 > 0 ? flash0 : NaN) with lines lw 1.2 dt 2 lc rgb "#1b7837" title "flash (FA2)", \
         (flash1 > 0 ? flash1 : NaN) with lines lw 1.2 dt 2 lc rgb "#7fbf7b" notitle
}
unset multiplot

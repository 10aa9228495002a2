# figures/train_loss.gp -- the small causal transformer of scripts/gpu/train_compare.py
# trained from one initialization on one sequence of batches, once per
# attention path. Top: the training loss per step with our op and with
# PyTorch's SDPA flash backend. Bottom: each run's loss minus sdpa_flash's at
# the same step: our op beside PyTorch's other runs (flash again, cuDNN,
# memory-efficient), whose spread is the bf16 noise. Input: csv =
# data/gpu/train_loss.csv (columns run, step, loss, loss_minus_sdpa_flash, lr,
# then provenance); paper/gen/paper_figures.sh skips the figure when it is absent.
if (!exists("csv")) csv = "data/gpu/train_loss.csv"
W = 6.5
Hgt = 4.6
load "figures/style.gp"
set termoption noenhanced
others = system("awk -F, 'NR > 1 && !/^#/ && $1 != \"ours\" && $1 != \"sdpa_flash\" {print $1}' " . csv . " | sort -u | tr '\\n' ' '")
set multiplot layout 2, 1
# the same margins in both panels (the legends stand in the right one),
# so that their step axes line up
set rmargin at screen 0.77
set lmargin at screen 0.10
set xlabel "training step"
set ylabel "training loss (nats per byte)"
# both legends outside the plots, in the right margin the two panels share
set key at screen 0.995, graph 1.0 right top vertical Left reverse font ",9" spacing 1.1 box opaque
plot csv using (strcol(1) eq "sdpa_flash" ? $2 : NaN):3 with lines lt 3 lw 1.2 title "SDPA flash (PyTorch)", \
     csv using (strcol(1) eq "ours" ? $2 : NaN):3 with lines lt 4 lw 1.0 dt 2 title "our op (flash_op.py)"
set ylabel "loss minus SDPA flash's (nats per byte)"
# PyTorch's runs in the distinct colours of figures/style.gp (line types 1,
# 2, 3, 5, 7, 8: 4 is ours, 6 is black), the legend outside the plot
others_lt = "1 2 3 5 7 8"
plot for [k=1:words(others)] csv using (strcol(1) eq word(others, k) ? $2 : NaN):4 \
         with lines lt word(others_lt, (k - 1) % 6 + 1) + 0 lw 0.8 title word(others, k), \
     csv using (strcol(1) eq "ours" ? $2 : NaN):4 with lines lt 4 lw 1.2 title "ours", \
     0 with lines lc rgb "#999999" lw 0.5 notitle
unset multiplot

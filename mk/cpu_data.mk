# mk/cpu_data.mk -- measured data of the CPU stages (read by the figures and
# the claims; included by the Makefile). Wall times are medians of 5 runs
# (one timing on a shared machine can be off by a factor); counts are the
# same on every run.
.PHONY: bench sweep sweep-masks

sweep: stage2 stage3 stage8 $(BUILD)/test_cpu $(BUILD)/libfa_mask.so $(BUILD)/stage3_accuracy sweep-masks  ## regenerate data/cpu/*.csv: IO sweeps over N and M, block sweeps, closed forms, trace, errors, masks, dQ accuracy, decoding
	./stage3 --sweep io --csv data/cpu/io_sweep.csv
	./stage3 --sweep blocks --repeats 5 --csv data/cpu/block_sweep.csv
	./stage3 --sweep blocks --causal --repeats 5 --csv data/cpu/causal_sweep.csv
	./stage3 --sweep formulas --csv data/cpu/formulas.csv
	./stage2 --trace --csv data/cpu/online_trace.csv
	$(BUILD)/test_cpu --csv data/cpu/exactness.csv
	python3 scripts/cpu/chapter_example.py --csv data/cpu/chapter_example.csv \
	    --gradcheck-csv data/cpu/chapter_gradcheck.csv
	$(BUILD)/stage3_accuracy --csv data/cpu/dq_accuracy.csv
	$(BUILD)/stage3_accuracy --draws data/cpu/dq_draws.csv
	./stage8 --sweep io --csv data/cpu/decode_io.csv
sweep-masks: stage1 stage6 $(BUILD)/test_masks  ## data/cpu/window_sweep.csv, lse_error.csv, memory_vs_n.csv, masks_property.csv (minutes)
	$(BUILD)/test_masks --csv data/cpu/masks_property.csv
	./stage6 --sweep window --br 64 --bc 64 --csv data/cpu/window_sweep.csv
	./stage6 --sweep lse --csv data/cpu/lse_error.csv
	./stage6 --sweep memory --csv data/cpu/memory_vs_n.csv
bench: sweep                              ## the CPU benchmark: same as sweep

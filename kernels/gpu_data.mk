# kernels/gpu_data.mk -- every measured file of data/gpu/ has its target here
# (included by the top-level Makefile after gpu.mk and stage7.mk). Run on the
# GPU machine from the repository root; GPU_DATA=DIR writes into DIR instead
# of data/gpu (scripts/device/*.sh give their $OUT), FA_COMMIT=<commit> names
# the commit where the copy of the tree has no .git. Each target keeps the
# command that produced the file as it stands in data/gpu/README.md.
#
#   make gpu-data          all of them (about 20 minutes on one H200)
#   make bench-gpu io-gpu opcodes-gpu ring-gpu train-gpu v3-steps-gpu decode-gpu ...
# Without nvcc or a GPU each prints one line saying what is missing and
# exits 0, building nothing (kernels/gpu.mk's GPU_MISSING).

GPU_DATA ?= data/gpu
GPU_LOGS ?= $(BUILD)/gpu_logs
# NCU (kernels/gpu.mk): Nsight Compute's ncu, empty where there is none.
NCU1 = $(firstword $(NCU))
SANITIZER ?= $(shell command -v compute-sanitizer 2>/dev/null || echo /usr/local/cuda/bin/compute-sanitizer)
GPU_DATA_TARGETS := gpu-env stage4-default-gpu gpu-test-log bench-gpu io-gpu opcodes-gpu ncu-bwd-gpu \
                    final-tests-gpu v3-steps-gpu ring-gpu train-gpu decode-gpu overhead-gpu train-compare-gpu \
                    varlen-gpu accuracy-gpu hopper-ncu-gpu
.PHONY: gpu-data $(GPU_DATA_TARGETS) bitwise-gpu stage5-gpu torchop-gpu

ifeq ($(GPU_MISSING),)
gpu-data: $(GPU_DATA_TARGETS)            ## every measured file of data/gpu/ (on the GPU machine)

gpu-env:                                 ## data/gpu/env.txt: the GPU, driver, clocks and nvcc of the run
	@mkdir -p $(GPU_DATA)
	{ nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.mem --format=csv; nvcc --version; } \
	    > $(GPU_DATA)/env.txt 2>&1

stage4-default-gpu: stage4               ## data/gpu/stage4_default.csv, .log: ./stage4 with no shape flags
	./stage4 --csv $(GPU_DATA)/stage4_default.csv > $(GPU_DATA)/stage4_default.log

gpu-test-log: stage4 stage5 $(BUILD)/v3_check $(BUILD)/libfa_gpu.so  ## data/gpu/gpu_test.log: make gpu-test, logged
	{ echo "# make gpu-test at $${FA_COMMIT:-$$(git rev-parse --short HEAD)}, $$(date -u +%Y-%m-%dT%H:%M:%SZ), $$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"; \
	  $(MAKE) -s gpu-test; echo "exit $$?"; } > $(GPU_DATA)/gpu_test.log 2>&1

# The benchmark: bf16 over the papers' grid, then fp16 at two lengths,
# appended to the same files without their header line.
bench-gpu: $(BUILD)/libfa_gpu.so         ## speed vs PyTorch SDPA: data/gpu/bench_fwd.csv, bench_bwd.csv
	python3 scripts/bench_gpu.py --csv $(GPU_DATA)/bench_fwd.csv --bwd-csv $(GPU_DATA)/bench_bwd.csv \
	    --dtypes bf16 --slow-max-n 4096 --repeats 8
	python3 scripts/bench_gpu.py --csv $(BUILD)/bench_fwd_fp16.csv --bwd-csv $(BUILD)/bench_bwd_fp16.csv \
	    --dtypes fp16 --ns 2048,8192 --slow-max-n 2048 --repeats 8
	tail -n +2 $(BUILD)/bench_fwd_fp16.csv | grep -v '^#' >> $(GPU_DATA)/bench_fwd.csv
	tail -n +2 $(BUILD)/bench_bwd_fp16.csv | grep -v '^#' >> $(GPU_DATA)/bench_bwd.csv

io-gpu: $(BUILD)/libfa_gpu.so            ## DRAM/L2 bytes with Nsight Compute: data/gpu/io_fwd.csv, io_bwd.csv, v2_layout_ab.csv
	@[ -n "$(NCU1)" ] || { echo "$@: skipped: ncu (Nsight Compute) not found on PATH, beside nvcc or in /usr/local/cuda/bin"; exit 0; }; \
	set -e; NCU=$(NCU1) sh scripts/ncu_io.sh $(GPU_DATA)/io_fwd.csv; \
	NCU=$(NCU1) sh scripts/ncu_io.sh $(GPU_DATA)/io_bwd.csv bwd; \
	NCU=$(NCU1) NVCC=$(NVCC) sh scripts/ncu_layout.sh $(GPU_DATA)/v2_layout_ab.csv

# Executed instructions by opcode of our fastest backward and of
# FlashAttention-2's, one launch each (chapter 4b's instruction count).
OPCODE_METRICS := sass__inst_executed_per_opcode,gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size
OPCODE_RUN := python3 scripts/bench_gpu.py --passes bwd --dtypes bf16 --ns 8192 --dims 128 --causal 0 --repeats 2
opcodes-gpu: $(BUILD)/libfa_gpu.so       ## data/gpu/bwd_opcodes_v3.txt, bwd_opcodes_flash.txt (Nsight Compute)
	$(NCU1) --clock-control none --metrics $(OPCODE_METRICS) --print-metric-instances details -k regex:bwd_v4_kernel -c 1 \
	    $(OPCODE_RUN) --impls ours_v3_hopper,sdpa_flash > $(GPU_DATA)/bwd_opcodes_v3.txt 2>&1
	$(NCU1) --clock-control none --metrics $(OPCODE_METRICS) --print-metric-instances details -k regex:flash_bwd_dq_dk_dv -c 1 \
	    $(OPCODE_RUN) --impls ours_v3_hopper,sdpa_flash > $(GPU_DATA)/bwd_opcodes_flash.txt 2>&1

ncu-bwd-gpu: $(BUILD)/libfa_gpu.so       ## data/gpu/bwd_v3_ncu_details.txt, bwd_v3_ncu_source.csv (ncu --set full)
	$(NCU1) --set full --import-source yes -k regex:bwd_v4_kernel -c 1 -f -o $(BUILD)/v3rep $(OPCODE_RUN) --impls ours_v3_hopper
	$(NCU1) -i $(BUILD)/v3rep.ncu-rep --page details > $(GPU_DATA)/bwd_v3_ncu_details.txt
	$(NCU1) -i $(BUILD)/v3rep.ncu-rep --page source --csv --print-source sass > $(GPU_DATA)/bwd_v3_ncu_source.csv

hopper-ncu-gpu: $(BUILD)/libfa_gpu.so    ## data/gpu/hopper_ncu/*.csv: Nsight Compute on the Hopper passes beside cuDNN's
	NCU=$(NCU1) sh scripts/ncu_hopper.sh $(GPU_DATA)/hopper_ncu

# The final run's test logs: both GPU suites, compute-sanitizer on the
# backward, the PyTorch op's checks.
final-tests-gpu: stage4 stage5 $(BUILD)/libfa_gpu.so  ## data/gpu/final_stage4_tests.log, final_stage5_tests.log, final_sanitize.log, final_flash_op.log
	-./stage4 --sweep tests > $(GPU_DATA)/final_stage4_tests.log 2>&1
	-./stage5 --sweep tests > $(GPU_DATA)/final_stage5_tests.log 2>&1
	: > $(GPU_DATA)/final_sanitize.log
	-for tool in memcheck racecheck synccheck initcheck; do echo "== $$tool" >> $(GPU_DATA)/final_sanitize.log; \
	    $(SANITIZER) --tool $$tool --error-exitcode 9 ./stage5 --sweep small >> $(GPU_DATA)/final_sanitize.log 2>&1; done
	-python3 tests/gpu/test_flash_op.py > $(GPU_DATA)/final_flash_op.log 2>&1

bitwise-gpu: stage5                      ## data/gpu/final_bitwise.log: this stage5 against OLD_STAGE5=<binary>, byte for byte
	sh scripts/stage5_bitwise.sh "$(OLD_STAGE5)" $(BUILD)/bitwise && cp $(BUILD)/bitwise/bitwise.log $(GPU_DATA)/final_bitwise.log

# Version 3's steps: tests, timings beside SDPA, sanitizers and Nsight
# Compute, in one staged script (scripts/v3_steps.sh).
V3_OUT := $(BUILD)/v3_out
v3-steps-gpu:                            ## data/gpu/v3_steps.csv, v3_tests.log, v3_sanitize.log, v3_ncu.txt
	OUT=$(V3_OUT) bash scripts/v3_steps.sh
	cp $(V3_OUT)/v3_steps.csv $(V3_OUT)/v3_tests.log $(V3_OUT)/v3_sanitize.log $(V3_OUT)/v3_ncu.txt $(GPU_DATA)/
train-compare-gpu: $(BUILD)/libfa_gpu.so ## eager and compiled, ours and SDPA, 3 seeds: data/gpu/train_compare.csv
	python3 scripts/train_compare.py --compare --steps 200 --seeds 3 --csv $(GPU_DATA)/train_compare.csv

overhead-gpu: $(BUILD)/libfa_gpu.so      ## the op's cost per call at small shapes beside SDPA's: data/gpu/op_overhead.csv
	python3 scripts/bench_op_overhead.py --csv $(GPU_DATA)/op_overhead.csv

train-gpu: $(BUILD)/libfa_gpu.so        ## a small transformer trained with our op and with SDPA: data/gpu/train_loss.csv, final_train.log
	python3 scripts/train_compare.py --csv $(GPU_DATA)/train_loss.csv > $(GPU_DATA)/final_train.log 2>&1
decode-gpu: $(BUILD)/libfa_gpu.so        ## decode bandwidth vs a device copy and SDPA (stage 8): data/gpu/decode.csv
	python3 scripts/bench_decode.py --csv $(GPU_DATA)/decode.csv
varlen-gpu: $(BUILD)/libfa_gpu.so        ## packed sequences vs the dense kernels at the same tokens, SDPA padded: data/gpu/varlen.csv
	python3 scripts/bench_varlen.py --csv $(GPU_DATA)/varlen.csv

# dQ on logits near -120 for every backward version (K centered and as
# given) beside SDPA's backends, and the centering's cost at the bench
# shapes beside its prediction; then stage 5's far-logit tests (their log
# keeps its exit status: a failed test must not lose the table).
accuracy-gpu: stage5 $(BUILD)/libfa_gpu.so  ## dQ accuracy and the centering's cost: data/gpu/dq_accuracy.csv, dq_accuracy_stage5.log
	python3 scripts/dq_accuracy.py --csv $(GPU_DATA)/dq_accuracy.csv
	{ ./stage5 --sweep accuracy; echo "exit $$?"; } > $(GPU_DATA)/dq_accuracy_stage5.log 2>&1

# Checks of one stage on the GPU machine (scripts/device/stage5.sh, torchop.sh):
# logs under GPU_LOGS, not data/gpu, since no chapter cites them.
# Stage 5: the default table timed, the test sweep, and compute-sanitizer on
# the small sweep, one (tool, version, dtype) per run, all at once (they time
# nothing); a run's exit status is the last line of its log.
STAGE5_SAN_RUNS := memcheck:: initcheck:: racecheck:1:fp32 racecheck:2:bf16 synccheck:1:fp16 synccheck:2:fp16 \
                   racecheck:3:fp16 synccheck:3:bf16
stage5-gpu: stage5                       ## stage 5 on the GPU: ./stage5 timed, --sweep tests, compute-sanitizer (logs in GPU_LOGS)
	@mkdir -p $(GPU_LOGS)
	-./stage5 --csv $(GPU_LOGS)/stage5_default.csv > $(GPU_LOGS)/stage5_default.log 2>&1
	-./stage5 --sweep tests > $(GPU_LOGS)/stage5_tests.log 2>&1
	for run in $(STAGE5_SAN_RUNS); do \
	    tool=$${run%%:*}; rest=$${run#*:}; k=$${rest%%:*}; dt=$${rest#*:}; \
	    ( $(SANITIZER) --tool $$tool --error-exitcode 9 ./stage5 --sweep small $${k:+--kernel $$k} $${dt:+--dtype $$dt} \
	        > $(GPU_LOGS)/san_$$tool$${k:+_v$$k}.log 2>&1; echo "exit $$?" >> $(GPU_LOGS)/san_$$tool$${k:+_v$$k}.log ) & \
	done; wait
# The PyTorch op's checks against SDPA (the training run is train-gpu).
torchop-gpu: $(BUILD)/libfa_gpu.so       ## the op's checks against SDPA: GPU_LOGS/torchop_tests.log
	@mkdir -p $(GPU_LOGS)
	sh tests/run.sh "$(TORCHOP_TESTS)" > $(GPU_LOGS)/torchop_tests.log 2>&1
else
gpu-data $(filter-out ring-gpu,$(GPU_DATA_TARGETS)) bitwise-gpu stage5-gpu torchop-gpu:
	@echo "$@: skipped: $(GPU_MISSING)"
endif

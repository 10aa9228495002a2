# kernels/gpu_data.mk -- the canonical files of data/gpu/ and the targets that
# write them (included by the top-level Makefile after gpu.mk and stage7.mk).
# Run on one H200 from the repository root, at one commit:
#
#   make gpu-data            every part below, one after another (under 25 minutes)
#   make gpu-data-PART       one part (each under 10 minutes on an H200)
#   make gpu-data-readme     data/gpu/README.md from the files (no GPU)
#
# GPU_DATA=DIR writes into DIR instead of data/gpu; FA_COMMIT=<commit> names
# the commit where the copy of the tree has no .git (the lent GPU machine).
# Every CSV carries the provenance columns of scripts/gpu/provenance.py (GPU,
# driver, CUDA, torch, cuDNN, commit, date, command) on every row; every log
# and text file opens with its `# provenance:` line; tests/gpu_data.py checks
# that the files the paper reads share one commit. The ring (ring.csv,
# ring_scale.log) needs two GPUs: `make ring-gpu` (mk/stage7.mk) on the
# two-GPU machine, outside gpu-data, and keeps its own commit.
# One-off investigations live in data/gpu/studies/NAME/ with their scripts.
# Without nvcc or a GPU each target prints one line saying what is missing
# and exits 0, building nothing (kernels/gpu.mk's GPU_MISSING).

GPU_DATA ?= data/gpu
GPU_LOGS ?= $(BUILD)/gpu_logs
FA_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
export FA_COMMIT
# NCU (kernels/gpu.mk): Nsight Compute's ncu, empty where there is none.
NCU1 = $(firstword $(NCU))
SANITIZER ?= $(shell command -v compute-sanitizer 2>/dev/null || echo /usr/local/cuda/bin/compute-sanitizer)
# PROV_LINE CMD: the `# provenance:` line naming CMD (the first line of a log)
PROV_LINE = python3 scripts/gpu/provenance.py --line
# NEED_NCU: opens a recipe line that needs ncu: without it, one line saying
# so and exit 0 (a machine without Nsight Compute has nothing to profile)
NEED_NCU = @[ -n "$(NCU1)" ] || { echo "$@: skipped: ncu (Nsight Compute) not found on PATH, beside nvcc or in /usr/local/cuda/bin"; exit 0; };

# The parts and the canonical files each writes (relative to GPU_DATA), read
# by scripts/gpu/data_readme.py and tests/gpu_data.py: one list, here.
GPU_DATA_PARTS := env tests bench-fwd bench-bwd ncu op apps
GPU_DATA_FILES_env       := env.txt
GPU_DATA_FILES_tests     := gpu_test.log fa_suite_sample.log stage4_default.csv stage4_default.log
GPU_DATA_FILES_bench-fwd := bench_fwd.csv
GPU_DATA_FILES_bench-bwd := bench_bwd.csv
GPU_DATA_FILES_ncu       := io_fwd.csv io_fwd_ncu_raw.csv io_fwd_map.json io_bwd.csv io_bwd_ncu_raw.csv io_bwd_map.json
GPU_DATA_FILES_op        := op_overhead.csv train_loss.csv train_loss.log train_compare.csv
GPU_DATA_FILES_apps      := decode.csv varlen.csv dq_accuracy.csv dq_accuracy_stage5.log
# written elsewhere: the ring on two GPUs (mk/stage7.mk), and the typed
# files (methods.md)
GPU_DATA_FILES_ring      := ring.csv ring_scale.log
GPU_DATA_TYPED           := README.md methods.md
# tools' raw output that cannot carry a provenance line; each sits beside the
# file that names its commit (io_*.csv, bwd_v4_ncu_details.txt)
GPU_DATA_RAW             := io_fwd_ncu_raw.csv io_fwd_map.json io_bwd_ncu_raw.csv io_bwd_map.json bwd_v4_ncu_source.csv

# Every file of scripts/ is used by a make target, a test, the README or docs
# (runs anywhere); the canonical files of data/gpu/ name one commit
# (tests/gpu_data.py: a new measurement replaces them all with one gpu-data run).
TEST_SUITES += "python3 tests/scripts_referenced.py" "python3 tests/gpu_data.py"

GPU_DATA_TARGETS := $(addprefix gpu-data-,$(GPU_DATA_PARTS))
.PHONY: gpu-data gpu-data-readme gpu-data-commit $(GPU_DATA_TARGETS) bitwise-gpu stage5-gpu torchop-gpu \
        study-bwd-v4-ncu study-hopper-ncu study-fwd-v3-steps study-host-path study-host-fresh study-graph-capture study-decode-fixed-cost

gpu-data-readme:                         ## data/gpu/README.md: the table of files, targets and columns, from the files (no GPU)
	python3 scripts/gpu/data_readme.py --out $(GPU_DATA)/README.md

ifeq ($(GPU_MISSING),)
# The parts one after another whatever -jN says (they time the one GPU), each
# part's wall time printed; a part that fails does not stop the others, and
# gpu-data fails after the README is written.
gpu-data:                                ## every canonical file of data/gpu/ at one commit (one H200, under 25 minutes)
	@rc=0; for p in $(GPU_DATA_PARTS); do t0=$$(date +%s); \
	    $(MAKE) --no-print-directory gpu-data-$$p || { rc=1; echo "gpu-data-$$p: FAILED"; }; \
	    echo "gpu-data-$$p: $$(( $$(date +%s) - t0 )) s"; done; \
	$(MAKE) -s --no-print-directory gpu-data-readme; exit $$rc

# Every file names the commit it was measured at: without .git (the lent GPU
# machine's copy of the tree) FA_COMMIT must say it, before any work.
gpu-data-commit:
	@[ -n "$(FA_COMMIT)" ] || { echo "gpu-data: no commit to name: run in a git checkout or give FA_COMMIT=<commit>" >&2; exit 2; }

gpu-data-env: gpu-data-commit  ## data/gpu/env.txt: the GPU, driver, clocks, nvcc, torch of the run
	@mkdir -p $(GPU_DATA)
	{ $(PROV_LINE) "make gpu-data-env"; \
	  nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.mem --format=csv; nvcc --version; } \
	    > $(GPU_DATA)/env.txt 2>&1

# The GPU tests, logged (the paper quotes their counts), and ./stage4 with
# no shape flags (the real input and two random shapes, every version).
gpu-data-tests: gpu-data-commit stage4 stage5 $(BUILD)/v3_check $(BUILD)/libfa_gpu.so  ## data/gpu/gpu_test.log (make gpu-test), fa_suite_sample.log, stage4_default.csv, .log
	@mkdir -p $(GPU_DATA)
	{ $(PROV_LINE) "make gpu-test"; FA_SUITE_LOG=$(abspath $(GPU_DATA))/fa_suite_sample.log $(MAKE) -s gpu-test; echo "exit $$?"; } \
	    > $(GPU_DATA)/gpu_test.log 2>&1
	./stage4 --csv $(BUILD)/stage4_default.csv > $(BUILD)/stage4_default.log
	{ $(PROV_LINE) "./stage4 --csv stage4_default.csv"; cat $(BUILD)/stage4_default.csv; } > $(GPU_DATA)/stage4_default.csv
	{ $(PROV_LINE) "./stage4 --csv stage4_default.csv"; cat $(BUILD)/stage4_default.log; } > $(GPU_DATA)/stage4_default.log

# The benchmarks: bf16 over the papers' grid, then fp16 at two lengths,
# appended to the same file without its header line.
BENCH := python3 scripts/gpu/bench_gpu.py --repeats 8
gpu-data-bench-fwd: gpu-data-commit $(BUILD)/libfa_gpu.so  ## data/gpu/bench_fwd.csv: every forward version beside SDPA's backends, bf16 and fp16
	@mkdir -p $(GPU_DATA)
	$(BENCH) --passes fwd --csv $(GPU_DATA)/bench_fwd.csv --dtypes bf16 --slow-max-n 4096
	$(BENCH) --passes fwd --csv $(BUILD)/bench_fwd_fp16.csv --dtypes fp16 --ns 2048,8192 --slow-max-n 2048
	tail -n +2 $(BUILD)/bench_fwd_fp16.csv | grep -v '^#' >> $(GPU_DATA)/bench_fwd.csv
gpu-data-bench-bwd: gpu-data-commit $(BUILD)/libfa_gpu.so  ## data/gpu/bench_bwd.csv: every backward version (and forward + backward) beside SDPA's backends
	@mkdir -p $(GPU_DATA)
	$(BENCH) --passes bwd,fwdbwd --bwd-csv $(GPU_DATA)/bench_bwd.csv --dtypes bf16 --slow-max-n 4096
	$(BENCH) --passes bwd,fwdbwd --bwd-csv $(BUILD)/bench_bwd_fp16.csv --dtypes fp16 --ns 2048,8192 --slow-max-n 2048
	tail -n +2 $(BUILD)/bench_bwd_fp16.csv | grep -v '^#' >> $(GPU_DATA)/bench_bwd.csv

# Nsight Compute: the DRAM and L2 bytes of every version, forward and
# backward, beside the IO model's count.
gpu-data-ncu: gpu-data-commit $(BUILD)/libfa_gpu.so  ## Nsight Compute: data/gpu/io_fwd.csv, io_bwd.csv (every version's bytes beside the IO model)
	$(NEED_NCU) \
	set -e; mkdir -p $(GPU_DATA); \
	NCU=$(NCU1) sh scripts/gpu/ncu_io.sh $(GPU_DATA)/io_fwd.csv fwd; \
	NCU=$(NCU1) sh scripts/gpu/ncu_io.sh $(GPU_DATA)/io_bwd.csv bwd

# Studies: one question each, outside gpu-data; each writes into its folder
# of data/gpu/studies/ (its README says the question, the answer and the
# commit) and keeps the commit it ran at.
STUDIES := $(GPU_DATA)/studies

# The executed instructions by opcode of backward version 4 and of
# FlashAttention-2's backward, one launch each (the backward chapter's
# count), and Nsight Compute's full set on backward version 4.
OPCODE_METRICS := sass__inst_executed_per_opcode,gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size
OPCODE_RUN := python3 scripts/gpu/bench_gpu.py --passes bwd --dtypes bf16 --ns 8192 --dims 128 --causal 0 --repeats 2
OPCODE_NCU := --clock-control none --metrics $(OPCODE_METRICS) --print-metric-instances details -c 1
study-bwd-v4-ncu: gpu-data-commit $(BUILD)/libfa_gpu.so  ## study: backward version 4's opcodes beside FlashAttention-2's, its full ncu set (data/gpu/studies/bwd_v4_ncu/)
	$(NEED_NCU) \
	set -e; d=$(STUDIES)/bwd_v4_ncu; mkdir -p $$d; \
	{ $(PROV_LINE) "ncu $(OPCODE_NCU) -k regex:bwd_v4_kernel $(OPCODE_RUN) --impls ours_v4_mma8"; \
	  $(NCU1) $(OPCODE_NCU) -k regex:bwd_v4_kernel $(OPCODE_RUN) --impls ours_v4_mma8; } > $$d/bwd_opcodes_v4.txt 2>&1; \
	{ $(PROV_LINE) "ncu $(OPCODE_NCU) -k regex:flash_bwd_dq_dk_dv $(OPCODE_RUN) --impls sdpa_flash"; \
	  $(NCU1) $(OPCODE_NCU) -k regex:flash_bwd_dq_dk_dv $(OPCODE_RUN) --impls sdpa_flash; } > $$d/bwd_opcodes_flash.txt 2>&1; \
	$(NCU1) --set full --import-source yes -k regex:bwd_v4_kernel -c 1 -f -o $(BUILD)/bwd_v4_rep $(OPCODE_RUN) --impls ours_v4_mma8; \
	{ $(PROV_LINE) "ncu --set full --import-source yes -k regex:bwd_v4_kernel -c 1 $(OPCODE_RUN) --impls ours_v4_mma8"; \
	  $(NCU1) -i $(BUILD)/bwd_v4_rep.ncu-rep --page details; } > $$d/bwd_v4_ncu_details.txt; \
	$(NCU1) -i $(BUILD)/bwd_v4_rep.ncu-rep --page source --csv --print-source sass > $$d/bwd_v4_ncu_source.csv
# The Hopper passes beside cuDNN's under Nsight Compute.
study-hopper-ncu: gpu-data-commit $(BUILD)/libfa_gpu.so  ## study: the Hopper passes beside cuDNN's under Nsight Compute (data/gpu/studies/hopper_ncu/)
	$(NEED_NCU) \
	set -e; mkdir -p $(STUDIES)/hopper_ncu; \
	NCU=$(NCU1) sh scripts/gpu/ncu_hopper.sh $(STUDIES)/hopper_ncu; \
	$(PROV_LINE) "sh scripts/gpu/ncu_hopper.sh hopper_ncu" > $(STUDIES)/hopper_ncu/env.txt
# Forward version 3's steps: tests, timings beside SDPA, sanitizers and
# Nsight Compute, in one staged script (scripts/gpu/v3_steps.sh).
V3_OUT := $(BUILD)/v3_out
study-fwd-v3-steps: gpu-data-commit  ## study: forward version 3's steps (data/gpu/studies/fwd_v3_steps/: v3_steps.csv, v3_tests.log, v3_sanitize.log, v3_ncu.txt)
	@mkdir -p $(STUDIES)/fwd_v3_steps
	OUT=$(V3_OUT) bash scripts/gpu/v3_steps.sh
	for f in v3_steps.csv v3_tests.log v3_sanitize.log v3_ncu.txt; do \
	    { $(PROV_LINE) "OUT=DIR bash scripts/gpu/v3_steps.sh"; cat $(V3_OUT)/$$f; } > $(STUDIES)/fwd_v3_steps/$$f; done

# The op's host time per call by entry and stage beside SDPA's, and every
# version's time at small shapes (scripts/gpu/host_profile.py says how);
# HOST_PATH_AS names the folder: before or after a change of the host path.
HOST_PATH_AS ?= after
study-host-path: gpu-data-commit $(BUILD)/libfa_gpu.so study-host-fresh  ## study: where the op's host time goes, and the versions at small shapes (data/gpu/studies/host_path/HOST_PATH_AS/, default after)
	python3 scripts/gpu/host_profile.py --out $(STUDIES)/host_path/$(HOST_PATH_AS)

study-host-fresh: gpu-data-commit $(BUILD)/libfa_gpu.so  ## study: why a forward + backward built fresh each call costs more than its parts (data/gpu/studies/host_path/HOST_PATH_AS/host_fresh_graph.csv)
	python3 scripts/gpu/host_fresh_graph.py --out $(STUDIES)/host_path/$(HOST_PATH_AS)

# What a decoding step costs beyond streaming its cache: ours and cuDNN's
# graph-replayed times over seqlen_k with a line through them, and Nsight
# Compute on one step of each (scripts/gpu/decode_fixed_cost.py says how).
study-decode-fixed-cost: gpu-data-commit $(BUILD)/libfa_gpu.so  ## study: a decode step's cost beyond its cache's bytes, ours beside cuDNN's (data/gpu/studies/decode_fixed_cost/)
	@mkdir -p $(STUDIES)/decode_fixed_cost
	python3 scripts/gpu/decode_fixed_cost.py --csv $(STUDIES)/decode_fixed_cost/sweep.csv
	sh scripts/gpu/ncu_decode.sh $(STUDIES)/decode_fixed_cost

# bench_bwd.csv's bf16 half again with graph_ms's shared capture pool and
# stream, into a study: whether every peer's backward is now captured (the
# canonical file's run lost cuDNN's graph at d 128 causal to the leak).
study-graph-capture: gpu-data-commit $(BUILD)/libfa_gpu.so  ## study: the bf16 backward benchmark with every capture kept (data/gpu/studies/graph_capture/)
	@mkdir -p $(STUDIES)/graph_capture
	$(BENCH) --passes bwd,fwdbwd --bwd-csv $(STUDIES)/graph_capture/bench_bwd.csv --dtypes bf16 --slow-max-n 4096 \
	    > $(STUDIES)/graph_capture/bench_bwd.log 2>&1

# The PyTorch op: its cost per call at small shapes beside SDPA's; a small
# transformer, and two with a Llama model's attention shapes (d 64 and 128,
# grouped heads), trained with it and with SDPA flash and cuDNN, eager and
# compiled, several seeds.
gpu-data-op: gpu-data-commit $(BUILD)/libfa_gpu.so  ## the op: data/gpu/op_overhead.csv, train_loss.csv, train_loss.log, train_compare.csv
	@mkdir -p $(GPU_DATA)
	python3 scripts/gpu/bench_op_overhead.py --csv $(GPU_DATA)/op_overhead.csv
	{ $(PROV_LINE) "python3 scripts/gpu/train_compare.py --csv train_loss.csv"; \
	  python3 scripts/gpu/train_compare.py --csv $(GPU_DATA)/train_loss.csv; } > $(GPU_DATA)/train_loss.log 2>&1
	python3 scripts/gpu/train_compare.py --compare --models small,llama-d64,llama-d128 --steps 200 --seeds 3 --budget 90 \
	    --csv $(GPU_DATA)/train_compare.csv

# Decoding, packed sequences, and dQ on logits near -120 for every backward
# version (K centered, as given, with the dQ pass) beside SDPA's backends,
# then stage 5's far-logit tests (their log keeps its exit status: a failed
# test must not lose the table).
gpu-data-apps: gpu-data-commit $(STAGE5_TESTS) $(BUILD)/libfa_gpu.so  ## decode, varlen, dQ accuracy: data/gpu/decode.csv, varlen.csv, dq_accuracy.csv, dq_accuracy_stage5.log
	@mkdir -p $(GPU_DATA)
	python3 scripts/gpu/bench_decode.py --budget-s 120 --csv $(GPU_DATA)/decode.csv
	python3 scripts/gpu/bench_varlen.py --csv $(GPU_DATA)/varlen.csv
	python3 scripts/gpu/dq_accuracy.py --csv $(GPU_DATA)/dq_accuracy.csv
	{ $(PROV_LINE) "$(STAGE5_TESTS) --sweep accuracy"; $(STAGE5_TESTS) --sweep accuracy; echo "exit $$?"; } > $(GPU_DATA)/dq_accuracy_stage5.log 2>&1

# A check, not data: this stage5's deterministic outputs against those of
# another build (OLD_STAGE5=<binary>), byte for byte, for a change that
# should leave the arithmetic alone.
bitwise-gpu: stage5                      ## this stage5 against OLD_STAGE5=<binary>, byte for byte: GPU_LOGS/bitwise.log
	@mkdir -p $(GPU_LOGS)
	sh scripts/gpu/stage5_bitwise.sh "$(OLD_STAGE5)" $(BUILD)/bitwise && cp $(BUILD)/bitwise/bitwise.log $(GPU_LOGS)/bitwise.log

# Checks of one stage on the GPU machine (scripts/device/stage5.sh, torchop.sh):
# logs under GPU_LOGS, not data/gpu, since no chapter cites them.
# Stage 5: the default table timed, the test sweep, and compute-sanitizer on
# the small sweep, one (tool, version, dtype) per run, all at once (they time
# nothing); a run's exit status is the last line of its log.
STAGE5_SAN_RUNS := memcheck:: initcheck:: racecheck:1:fp32 racecheck:2:bf16 synccheck:1:fp16 synccheck:2:fp16 \
                   racecheck:3:fp16 synccheck:3:bf16
stage5-gpu: stage5 $(STAGE5_TESTS)       ## stage 5 on the GPU: ./stage5 timed, --sweep tests, compute-sanitizer (logs in GPU_LOGS)
	@mkdir -p $(GPU_LOGS)
	-./stage5 --csv $(GPU_LOGS)/stage5_default.csv > $(GPU_LOGS)/stage5_default.log 2>&1
	-$(STAGE5_TESTS) --sweep tests > $(GPU_LOGS)/stage5_tests.log 2>&1
	for run in $(STAGE5_SAN_RUNS); do \
	    tool=$${run%%:*}; rest=$${run#*:}; k=$${rest%%:*}; dt=$${rest#*:}; \
	    ( $(SANITIZER) --tool $$tool --error-exitcode 9 $(STAGE5_TESTS) --sweep small $${k:+--kernel $$k} $${dt:+--dtype $$dt} \
	        > $(GPU_LOGS)/san_$$tool$${k:+_v$$k}.log 2>&1; echo "exit $$?" >> $(GPU_LOGS)/san_$$tool$${k:+_v$$k}.log ) & \
	done; wait
# The PyTorch op's checks against SDPA (the training run is gpu-data-op).
torchop-gpu: $(BUILD)/libfa_gpu.so       ## the op's checks against SDPA: GPU_LOGS/torchop_tests.log
	@mkdir -p $(GPU_LOGS)
	sh tests/run.sh "$(TORCHOP_TESTS)" > $(GPU_LOGS)/torchop_tests.log 2>&1
else
gpu-data $(GPU_DATA_TARGETS) bitwise-gpu stage5-gpu torchop-gpu study-bwd-v4-ncu study-hopper-ncu study-fwd-v3-steps study-host-path study-host-fresh study-graph-capture study-decode-fixed-cost:
	@echo "$@: skipped: $(GPU_MISSING)"
endif

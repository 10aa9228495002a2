# kernels/gpu.mk -- the CUDA stages (included by the top-level Makefile).
#
# Where nvcc is found: builds stage4 (host program src/stage4_main.c, plain C,
# linked with the kernels of kernels/*.cu and cuBLAS) and build/libfa_gpu.so
# (the same entry points, kernels/fa_gpu.h, for the Python tools through
# ctypes: scripts/fa.py). Code is
# emitted for sm_90 always (the H200/H100 the project targets) and for the
# compute capability nvidia-smi reports, when there is a GPU here.
# Where nvcc is missing, nothing CUDA is built and the GPU test suite prints
# SKIP lines.
#
#   make stage4 && ./stage4     make gpu-test     make bench-gpu     make io-gpu
#   make train-gpu              (the PyTorch op, python/flash_op.py, training a small model)

NVCC ?= $(shell command -v nvcc 2>/dev/null)
GPU_TESTS := sh tests/gpu/run_gpu_tests.sh
# the PyTorch op against SDPA (SKIP lines without torch, a GPU or the library)
TORCHOP_TESTS := python3 tests/gpu/test_flash_op.py
TEST_SUITES += "$(GPU_TESTS)" "$(TORCHOP_TESTS)"

.PHONY: gpu-test bench-gpu io-gpu train-gpu

ifneq ($(strip $(NVCC)),)
# compute capability of GPU 0 as "90", empty without a GPU
GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
GENCODE := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifneq ($(filter-out 90,$(GPU_CC)),)
GENCODE += -gencode arch=compute_$(GPU_CC),code=sm_$(GPU_CC)
endif
NVCCFLAGS ?= -O3 -lineinfo
NVCCFLAGS += -std=c++17 $(GENCODE) -Xcompiler -Wall,-Wextra -Isrc -Ikernels
GPU_LIBS := -lcublas

GPU_TARGETS += stage4 $(BUILD)/libfa_gpu.so
TEST_DEPS += stage4 $(BUILD)/libfa_gpu.so

# The kernels and the library's entry points: every .cu of kernels/, one
# object each; the version table (kernels/versions.def) ties them together.
GPU_HDRS := kernels/fa_gpu.h kernels/gpu_common.cuh kernels/versions.def src/attn_params.h src/mask.h
GPU_OBJS := $(BUILD)/fa_api.o $(BUILD)/stage4_forward.o
$(BUILD)/%.o: kernels/%.cu $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/%.pic.o: kernels/%.cu $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

$(BUILD)/stage4_main.o: CPPFLAGS += -Ikernels
$(BUILD)/stage4_main.o: kernels/fa_gpu.h

STAGE4_OBJS := $(BUILD)/stage4_main.o $(GPU_OBJS) $(BUILD)/stage3_tiled.lib.o \
               $(BUILD)/stage2_online_softmax.lib.o $(BUILD)/stage1_naive.lib.o $(HARNESS)
stage4: $(STAGE4_OBJS)                    ## CUDA forward: v0 materialized, v1 tiled, v2 tensor cores
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -lm

$(BUILD)/libfa_gpu.so: $(GPU_OBJS:.o=.pic.o)
	$(NVCC) $(GENCODE) -shared $^ -o $@ $(GPU_LIBS)

gpu-test: stage4 $(BUILD)/libfa_gpu.so    ## GPU tests (on a GPU machine; SKIP lines elsewhere)
	@sh tests/run.sh "$(GPU_TESTS)" "$(TORCHOP_TESTS)"

bench-gpu: $(BUILD)/libfa_gpu.so          ## benchmark vs PyTorch SDPA: data/gpu/bench_fwd.csv
	python3 scripts/bench_gpu.py --csv data/gpu/bench_fwd.csv

train-gpu: $(BUILD)/libfa_gpu.so         ## a small transformer trained with our op and with SDPA: data/gpu/train_loss.csv
	python3 scripts/train_compare.py --csv data/gpu/train_loss.csv

io-gpu: $(BUILD)/libfa_gpu.so             ## DRAM/L2 bytes with Nsight Compute: data/gpu/io_fwd.csv, v2_layout_ab.csv
	sh scripts/ncu_io.sh data/gpu/io_fwd.csv
	NVCC=$(NVCC) sh scripts/ncu_layout.sh data/gpu/v2_layout_ab.csv
else
gpu-test:
	@sh tests/run.sh "$(GPU_TESTS)" "$(TORCHOP_TESTS)"
bench-gpu io-gpu train-gpu:
	@echo "$@: nvcc not found; the GPU targets need the CUDA toolkit and a GPU"
endif

# kernels/gpu.mk -- the CUDA stages (included by the top-level Makefile).
#
# Where nvcc is found: builds stage4 and stage5 (host programs
# src/programs/stage4_main.c, src/programs/stage5_main.c, plain C, linked with the kernels of
# kernels/*.cu and cuBLAS) and build/libfa_gpu.so
# (the same entry points, core/fa_gpu.h, for the Python tools through
# ctypes: python/flashattn_stages/fa.py). Code is
# emitted for sm_90 always (the H200/H100 the project targets) and for the
# compute capability nvidia-smi reports, when there is a GPU here.
# Where nvcc is missing, nothing CUDA is built and the GPU test suite prints
# SKIP lines.
#
#   make stage4 && ./stage4     make stage5 && ./stage5
#   make gpu-test     make v3-check
#   (the measurements of data/gpu/: kernels/gpu_data.mk)

NVCC ?= $(shell command -v nvcc 2>/dev/null)
GPU_TESTS := sh tests/gpu/run_gpu_tests.sh
# make gpu-test runs its suites GPU_TEST_JOBS at a time (tests/run.sh's
# FA_TEST_JOBS): they check results and time nothing, and the sanitizer runs
# and CPU references leave the GPU idle most of the time.
GPU_TEST_JOBS ?= 4
# the PyTorch op against SDPA (SKIP lines without torch, a GPU or the library)
TORCHOP_TESTS := python3 tests/gpu/test_flash_op.py
# packed sequences (flash_attn_varlen_func) against the dense op and fp64
VARLEN_TESTS := python3 tests/gpu/test_varlen_op.py
# the auto centering rule of the backward (host code of the library, no GPU)
TEST_SUITES += "$(GPU_TESTS)" "$(TORCHOP_TESTS)" "$(VARLEN_TESTS)" "python3 tests/center_rule.py"

.PHONY: gpu-test v3-check

ifneq ($(strip $(NVCC)),)
# compute capability of GPU 0 as "90", empty without a GPU
GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
GENCODE := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifneq ($(filter-out 90,$(GPU_CC)),)
GENCODE += -gencode arch=compute_$(GPU_CC),code=sm_$(GPU_CC)
endif
NVCCFLAGS ?= -O3 -lineinfo
NVCCFLAGS += -std=c++17 $(GENCODE) -Xcompiler -Wall,-Wextra -Icore -Ikernels
GPU_LIBS := -lcublas

GPU_TARGETS += stage4 $(BUILD)/libfa_gpu.so
TEST_DEPS += stage4 $(BUILD)/libfa_gpu.so

# The kernels and the library's entry points: every .cu of kernels/ but
# stage 7's helper (mk/stage7.mk links that one), one object each; a
# version is its file plus its row of core/versions.def, nothing here.
# Each is compiled once, position-independent, for the programs and for
# build/libfa_gpu.so alike (nvcc's time is most of the build).
GPU_HDRS := $(wildcard core/*.h core/*.def kernels/*.cuh kernels/*.h)
GPU_OBJS := $(patsubst kernels/%.cu,$(BUILD)/%.o,$(filter-out kernels/stage7_ring.cu kernels/stage8_decode.cu,$(wildcard kernels/*.cu)))
$(BUILD)/%.o: kernels/%.cu $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

# The GPU host programs: one link list each (mk/programs.mk's link lists:
# the main, then the library sources), the kernels and cuBLAS.
# src/gpu/gpu_host.c is the host code the GPU stages share.
LINK_stage4 := src/programs/stage4_main src/gpu/stage4_runs src/gpu/gpu_host $(LIB_stage3)
LINK_stage5 := src/programs/stage5_main src/gpu/stage5_runs src/gpu/gpu_host $(LIB_stage3)
define link_gpu_program
$(1): $(call objs,$(BUILD),$(LINK_$(1))) $$(GPU_OBJS)
	$$(NVCC) $$(GENCODE) $$^ -o $$@ $$(GPU_LIBS) -lm
endef
$(foreach p,stage4 stage5,$(eval $(call link_gpu_program,$(p))))
stage4:                                   ## CUDA forward: v0 materialized, v1 tiled, v2 tensor cores, v3 Hopper
stage5:                                   ## CUDA backward: v0 materialized, v1 tiled, v2 tensor cores, v3 Hopper, v4 mma.sync on 8 warps
GPU_TARGETS += stage5
TEST_DEPS += stage5

# The kernels whose ptxas report is kept and checked: the object of
# kernels/$(1).cu, built with flags $(2), the report in build/$(3).txt,
# checked by the macro named $(4) (called with the report's suffix),
# prerequisites $(5).
define ptxas_objects
$(BUILD)/$(1).o: $(5) | $(BUILD)
	$$(NVCC) $(2) -Xcompiler -fPIC -Xptxas -v -c $$< -o $$@ 2> $(BUILD)/$(3).txt || { cat $(BUILD)/$(3).txt; exit 1; }
	$$(call $(4),)
endef

# Backward version 4 (kernels/stage5_bwd_v4.cu) keeps dK_j, dV_j in
# registers, 255 of them at d = 128: its ptxas report (registers, spills per
# kernel) is kept in build/bwd_v4_ptxas.txt, anything else nvcc says is
# shown, and a spill fails the build (local memory would leave it correct
# and slow, which no test catches).
define BWD_V4_PTXAS_CHECK
	@grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $(BUILD)/bwd_v4_ptxas$(1).txt >&2 || true
	@! grep -E '[1-9][0-9]* bytes spill' $(BUILD)/bwd_v4_ptxas$(1).txt || { echo "bwd v4: ptxas spilled registers (see above)"; exit 1; }
endef
$(eval $(call ptxas_objects,stage5_bwd_v4,$(NVCCFLAGS),bwd_v4_ptxas,BWD_V4_PTXAS_CHECK,kernels/stage5_bwd_v4.cu $(GPU_HDRS)))

$(BUILD)/libfa_gpu.so: $(GPU_OBJS)
	$(NVCC) $(GENCODE) -shared $^ -o $@ $(GPU_LIBS)

# Version 3 (Hopper): wgmma and setmaxnreg exist only in the sm_90a target,
# so this file alone is built for it (and only for it; its launcher refuses
# other GPUs). ptxas's resource report (registers, spills, wgmma
# serialization notes) is kept in build/v3_ptxas.txt, and a report that the
# compiler serialized the wgmma fails the build (correct and slow is a bug
# no test catches); scripts/gpu/v3_sass.sh counts the Hopper instructions.
V3_GENCODE := -gencode=arch=compute_90a,code=sm_90a
V3_NVCCFLAGS := -O3 -lineinfo -std=c++17 $(V3_GENCODE) -Xcompiler -Wall,-Wextra -Icore -Ikernels
V3_DEPS := kernels/stage4_fwd_v3_hopper.cu kernels/stage4_fwd_v3_hopper.cuh kernels/stage4_fwd_v3_hopper.h kernels/hopper.cuh $(GPU_HDRS)
define V3_PTXAS_CHECK
	@! grep -i "serialized\|error" $(BUILD)/v3_ptxas$(1).txt || { echo "v3: ptxas serialized wgmma (see above)"; exit 1; }
endef
$(eval $(call ptxas_objects,stage4_fwd_v3_hopper,$(V3_NVCCFLAGS),v3_ptxas,V3_PTXAS_CHECK,$(V3_DEPS)))
# Backward version 3 (kernels/stage5_bwd_v3_hopper.cu) is Hopper's too: the
# same sm_90a flags and serialization check, and, as backward version 4, a
# spill fails the build (its dK, dV accumulators take 128 registers at
# d = 128). Reports in build/bwd_v3_ptxas*.txt.
BWD_V3_DEPS := kernels/stage5_bwd_v3_hopper.cu kernels/hopper.cuh $(GPU_HDRS)
define BWD_V3_PTXAS_CHECK
	@! grep -i "serialized\|error" $(BUILD)/bwd_v3_ptxas$(1).txt || { echo "bwd v3: ptxas serialized wgmma (see above)"; exit 1; }
	@! grep -E '[1-9][0-9]* bytes (spill|stack)' $(BUILD)/bwd_v3_ptxas$(1).txt || { echo "bwd v3: ptxas spilled registers (see above)"; exit 1; }
endef
$(eval $(call ptxas_objects,stage5_bwd_v3_hopper,$(V3_NVCCFLAGS),bwd_v3_ptxas,BWD_V3_PTXAS_CHECK,$(BWD_V3_DEPS)))
# build/v3_check: the piece tests, every step against fp64, step timings. Its
# C half: the command line and the runs (tests/gpu/v3_check.c) and the
# problems with their fp64 references (tests/gpu/v3_check_problem.c). Its
# CUDA half (tests/gpu/v3_check_cuda.cu: the piece test kernels, the launch
# watchdog) is built as the kernel is, for sm_90a, with the same ptxas check.
V3_CHECK_C_OBJS := $(BUILD)/v3_check.o $(BUILD)/v3_check_problem.o
$(V3_CHECK_C_OBJS): $(BUILD)/%.o: tests/gpu/%.c tests/gpu/v3_check.h tests/gpu/v3_check_cuda.h \
                    kernels/stage4_fwd_v3_hopper.h core/fa_gpu.h | $(BUILD)
	$(CC) $(CPPFLAGS) -Ikernels $(CFLAGS) -fopenmp -c $< -o $@
$(BUILD)/v3_check_cuda.o: tests/gpu/v3_check_cuda.cu tests/gpu/v3_check_cuda.h kernels/stage4_fwd_v3_hopper.cuh kernels/hopper.cuh \
                          kernels/stage4_fwd_v3_hopper.h $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(V3_NVCCFLAGS) -Xptxas -v -c $< -o $@ 2> $(BUILD)/v3_ptxas_check.txt || { cat $(BUILD)/v3_ptxas_check.txt; exit 1; }
	$(call V3_PTXAS_CHECK,_check)
$(BUILD)/v3_check: $(V3_CHECK_C_OBJS) $(BUILD)/v3_check_cuda.o $(GPU_OBJS) $(HARNESS)
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -lm -Xcompiler -fopenmp
GPU_TARGETS += $(BUILD)/v3_check
TEST_DEPS += $(BUILD)/v3_check

gpu-test: stage4 stage5 $(BUILD)/v3_check $(BUILD)/libfa_gpu.so ## GPU tests (on a GPU machine; SKIP lines elsewhere), GPU_TEST_JOBS suites at once
	@FA_TEST_JOBS=$(GPU_TEST_JOBS) sh tests/run.sh "$(GPU_TESTS)" "$(TORCHOP_TESTS)" "$(VARLEN_TESTS)" $(GPU_TEST_EXTRA)
else
gpu-test:
	@sh tests/run.sh "$(GPU_TESTS)" "$(TORCHOP_TESTS)" "$(VARLEN_TESTS)" $(GPU_TEST_EXTRA)
endif

# The measurement targets need nvcc, a GPU (one that nvidia-smi lists) and,
# for io-gpu, Nsight Compute's ncu. Without one of them each says on one line
# what is missing and exits 0, building nothing: a machine without a GPU has
# nothing to measure, and that is not a failure of the build.
GPU_MISSING := $(if $(strip $(NVCC)),$(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU '),,no GPU here (nvidia-smi lists none); run it on a GPU machine),nvcc not found; it needs the CUDA toolkit and a GPU)
NCU ?= $(or $(shell command -v ncu 2>/dev/null),$(wildcard $(dir $(NVCC))ncu /usr/local/cuda/bin/ncu))
ifeq ($(GPU_MISSING),)
v3-check: $(BUILD)/v3_check               ## version 3 (Hopper): pieces, tests and step timings
	$(BUILD)/v3_check

else
v3-check:
	@echo "$@: skipped: $(GPU_MISSING)"
endif

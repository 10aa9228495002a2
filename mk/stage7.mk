# mk/stage7.mk -- stage 7, one sequence across several GPUs on NCCL
# (included by the top-level Makefile after kernels/gpu.mk, whose NVCC,
# GENCODE, NVCCFLAGS, GPU_OBJS and GPU_LIBS it uses).
#
#   make stage7 && ./stage7 --gpus 2        ./stage7 --sweep tests
#   make ring-gpu                           the measurement: data/gpu/ring.csv
#
# The host program src/programs/stage7_main.c (the checks and the
# measurement) and src/gpu/stage7_schedule.c (the ring) are C on the CUDA runtime and NCCL; their
# kernels (the merge rule and the sums around it) are kernels/stage7_ring.cu,
# a helper of the ring, not a version of the table. NCCL is found by
# scripts/find_nccl.sh: the CUDA toolkit's (the build machine), /usr or
# /usr/local (Debian's libnccl-dev), or the nvidia-nccl wheel that PyTorch
# installs (the GPU machine); linked with its directory as the run path.
# Without nvcc or NCCL nothing is built and `make stage7` says why in one
# line; the test suite then prints SKIP lines.

STAGE7_TESTS := sh tests/gpu/stage7.sh
TEST_SUITES += "$(STAGE7_TESTS)"
.PHONY: ring-gpu stage7-gpu

ifneq ($(strip $(NVCC)),)
NCCL_FOUND := $(shell sh scripts/find_nccl.sh $(NVCC))
endif

ifneq ($(strip $(NCCL_FOUND)),)
NCCL_INC     := $(word 1,$(NCCL_FOUND))
NCCL_LIBDIR  := $(word 2,$(NCCL_FOUND))
NCCL_LIBFILE := $(word 3,$(NCCL_FOUND))
CUDA_INC     := $(abspath $(dir $(NVCC))/../include)

GPU_TARGETS += stage7
TEST_DEPS   += stage7

# The C host program (src/programs/stage7_main.c, its schedule
# src/gpu/stage7_schedule.c) sees the CUDA runtime's and NCCL's headers as
# system headers (their own warnings are not ours).
STAGE7_CPPFLAGS := -isystem $(CUDA_INC) -isystem $(NCCL_INC)
STAGE7_HOST := src/programs/stage7_main src/gpu/stage7_schedule src/gpu/stage7_checks src/gpu/stage7_timing
$(patsubst %,$(BUILD)/%.o,$(STAGE7_HOST)): CPPFLAGS += $(STAGE7_CPPFLAGS)
$(BUILD)/stage7_ring_kernels.o: kernels/stage7_ring.cu core/stage7_ring.h core/merge.h $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

LINK_stage7 := $(STAGE7_HOST) src/gpu/gpu_host src/cpu/ring $(LIB_stage1)
stage7: $(call objs,$(BUILD),$(LINK_stage7)) $(BUILD)/stage7_ring_kernels.o $(GPU_OBJS)                  ## one sequence across GPUs: ring attention on NCCL
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -L$(NCCL_LIBDIR) -l:$(NCCL_LIBFILE) \
	    -Xlinker -rpath,$(NCCL_LIBDIR) -lm

# The ring's measurement runs the kernels a user of the op gets on the
# H200: version 3 for both passes (the op's choice on Hopper), not
# stage 7's own default (version 2, which runs on any GPU).
RING_KERNEL ?= 3

ifeq ($(GPU_MISSING),)
ring-gpu: stage7                          ## two GPUs against one: data/gpu/ring.csv, ring_scale.log
	./stage7 --sweep scale --gpus 2 --kernel $(RING_KERNEL) --csv $(GPU_DATA)/ring.csv --budget 70 \
	    > $(GPU_DATA)/ring_scale.log 2>&1
stage7-gpu: stage7 $(BUILD)/test_ring     ## stage 7's tests: build/test_ring and tests/gpu/stage7.sh (NCCL, virtual shards)
	@mkdir -p $(GPU_LOGS)
	sh tests/run.sh "$(BUILD)/test_ring --quick" "$(STAGE7_TESTS)" > $(GPU_LOGS)/stage7_tests.log 2>&1
else
ring-gpu stage7-gpu:                                 # without a GPU: one line, exit 0 (kernels/gpu.mk)
	@echo "$@: skipped: $(GPU_MISSING)"
endif
else
ifneq ($(strip $(NVCC)),)
STAGE7_MISSING := NCCL not found (no nccl.h beside libnccl.so in the CUDA toolkit, /usr, /usr/local or Python's nvidia-nccl wheel; NCCL_HOME=DIR names one)
else
STAGE7_MISSING := nvcc not found; stage 7 needs the CUDA toolkit and NCCL
endif
stage7 ring-gpu stage7-gpu:
	@echo "$@: not built: $(STAGE7_MISSING)"
endif

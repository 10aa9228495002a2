# kernels/stage7.mk -- stage 7, one sequence across several GPUs on NCCL
# (included by the top-level Makefile after kernels/gpu.mk, whose NVCC,
# GENCODE, NVCCFLAGS, GPU_OBJS and GPU_LIBS it uses).
#
#   make stage7 && ./stage7 --gpus 2        ./stage7 --sweep tests
#   make ring-gpu                           the measurement: data/gpu/ring.csv
#
# The host program src/stage7_ring.c is C on the CUDA runtime and NCCL; its
# kernels (the merge rule and the sums around it) are kernels/stage7_ring.cu,
# a helper of the ring, not a version of the table. NCCL is found by
# scripts/find_nccl.sh: the CUDA toolkit's (the build machine), /usr or
# /usr/local (Debian's libnccl-dev), or the nvidia-nccl wheel that PyTorch
# installs (the GPU machine); linked with its directory as the run path.
# Without nvcc or NCCL nothing is built and `make stage7` says why in one
# line; the test suite then prints SKIP lines.

STAGE7_TESTS := sh tests/gpu/stage7.sh
TEST_SUITES += "$(STAGE7_TESTS)"
.PHONY: ring-gpu

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

# The C host program sees the CUDA runtime's and NCCL's headers as system
# headers (their own warnings are not ours).
$(BUILD)/stage7_ring.o: src/stage7_ring.c src/ring.h src/mask.h src/attn_params.h kernels/fa_gpu.h \
                        kernels/stage7_ring.h | $(BUILD)
	$(CC) $(CPPFLAGS) -Ikernels -isystem $(CUDA_INC) -isystem $(NCCL_INC) $(CFLAGS) -MMD -c $< -o $@
$(BUILD)/stage7_ring_kernels.o: kernels/stage7_ring.cu kernels/stage7_ring.h src/merge.h $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

STAGE7_OBJS := $(BUILD)/stage7_ring.o $(BUILD)/stage7_ring_kernels.o $(GPU_OBJS) $(BUILD)/ring.lib.o \
               $(BUILD)/stage1_naive.lib.o $(HARNESS)
stage7: $(STAGE7_OBJS)                    ## one sequence across GPUs: ring attention on NCCL
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -L$(NCCL_LIBDIR) -l:$(NCCL_LIBFILE) \
	    -Xlinker -rpath,$(NCCL_LIBDIR) -lm

ifeq ($(GPU_MISSING),)
ring-gpu: stage7                          ## measure G GPUs against one: data/gpu/ring.csv
	./stage7 --sweep scale --csv data/gpu/ring.csv
else
ring-gpu:                                 # without a GPU: one line, exit 0 (kernels/gpu.mk)
	@echo "$@: skipped: $(GPU_MISSING)"
endif
else
ifneq ($(strip $(NVCC)),)
STAGE7_MISSING := NCCL not found (no nccl.h beside libnccl.so in the CUDA toolkit, /usr, /usr/local or Python's nvidia-nccl wheel; NCCL_HOME=DIR names one)
else
STAGE7_MISSING := nvcc not found; stage 7 needs the CUDA toolkit and NCCL
endif
stage7 ring-gpu:
	@echo "$@: not built: $(STAGE7_MISSING)"
endif

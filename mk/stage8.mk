# mk/stage8.mk -- stage 8's GPU side: the decode kernels
# (kernels/stage8_decode.cu, C ABI core/fa_decode.h), their program
# src/programs/stage8_gpu_main.c and its test suite tests/gpu/stage8_gpu_tests.c
# (included by the Makefile after kernels/gpu.mk, whose NVCC, GENCODE,
# NVCCFLAGS, GPU_OBJS and GPU_LIBS it uses).
#
#   make stage8_gpu && ./stage8_gpu                   one case from stage 8's flags
#   build/tests/gpu/stage8_gpu_tests --sweep tests     the kernels against the CPU stage 8
#   make gpu-data-apps                                 the bandwidth measurement (kernels/gpu_data.mk)
#   make decode-example                                examples/decode_loop.py, the package's decode loop
#
# The kernels' object is build/stage8_decode_gpu.o, built here with its
# ptxas check (gpu.mk's GPU_OBJS leaves the file out), and also goes into
# build/libfa_gpu.so (one more prerequisite of gpu.mk's rule, whose recipe
# links all of them), where python/flashattn_stages/decode_op.py finds it. ptxas's report is
# kept in build/decode_ptxas.txt and a spill fails the build. Without nvcc
# nothing is built and the suites print SKIP.

STAGE8_TESTS := sh tests/gpu/stage8.sh
STAGE8_GPU_TESTS := $(BUILD)/tests/gpu/stage8_gpu_tests
DECODE_OP_TESTS := python3 tests/gpu/test_decode_op.py
TEST_SUITES += "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
# make gpu-test (kernels/gpu.mk) runs these suites after its own
GPU_TEST_EXTRA += "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
.PHONY: gpu-test-decode decode-example

ifneq ($(strip $(NVCC)),)
define DECODE_PTXAS_CHECK
	@grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $(1) >&2 || true
	@! grep -E '[1-9][0-9]* bytes spill' $(1) || { echo "decode kernels: ptxas spilled registers (see above)"; exit 1; }
endef
$(BUILD)/stage8_decode_gpu.o: kernels/stage8_decode.cu $(GPU_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -Xptxas -v -c $< -o $@ 2> $(BUILD)/decode_ptxas.txt || { cat $(BUILD)/decode_ptxas.txt; exit 1; }
	$(call DECODE_PTXAS_CHECK,$(BUILD)/decode_ptxas.txt)
$(BUILD)/libfa_gpu.so: $(BUILD)/stage8_decode_gpu.o

# The host program: one link list (Makefile's link_program lists), the
# decode kernels, the library's other kernels (fa_gpu.h's helpers) and cuBLAS.
LINK_stage8_gpu := src/programs/stage8_gpu_main src/gpu/stage8_gpu_runs $(LIB_stage8)
stage8_gpu: $(call objs,$(BUILD),$(LINK_stage8_gpu)) $(BUILD)/stage8_decode_gpu.o $(GPU_OBJS)  ## stage 8 on the GPU: paged split-KV decode kernels vs the CPU stage 8
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -lm
GPU_TARGETS += stage8_gpu
TEST_DEPS += stage8_gpu
# Its test suite, a program of its own (tests/gpu/stage8_gpu_tests.c).
LINK_stage8_gpu_tests := tests/gpu/stage8_gpu_tests $(filter-out src/programs/%,$(LINK_stage8_gpu))
$(BUILD)/tests/gpu/stage8_gpu_tests: $(call objs,$(BUILD),$(LINK_stage8_gpu_tests)) $(BUILD)/stage8_decode_gpu.o $(GPU_OBJS)  ## stage 8's GPU test suite (--sweep tests|small)
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -lm
GPU_TARGETS += $(STAGE8_GPU_TESTS)
TEST_DEPS += $(STAGE8_GPU_TESTS)

gpu-test-decode: stage8_gpu $(STAGE8_GPU_TESTS) $(BUILD)/libfa_gpu.so  ## stage 8's GPU suites alone (make gpu-test runs them too)
	@sh tests/run.sh "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
gpu-test: stage8_gpu $(STAGE8_GPU_TESTS) $(BUILD)/libfa_gpu.so
decode-example: $(BUILD)/libfa_gpu.so  ## examples/decode_loop.py: prefill, then a decode loop replayed from a CUDA graph (ARGS=flags)
	python3 examples/decode_loop.py $(ARGS)
else
gpu-test-decode stage8_gpu decode-example:
	@echo "$@: not built: nvcc not found; stage 8's GPU side needs the CUDA toolkit"
endif

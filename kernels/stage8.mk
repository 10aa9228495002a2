# kernels/stage8.mk -- stage 8's GPU side: the decode kernels
# (kernels/stage8_decode.cu, interface kernels/fa_decode.h) and their host
# program src/stage8_gpu.c (included by the top-level Makefile after
# kernels/gpu.mk, whose NVCC, GENCODE, NVCCFLAGS, GPU_OBJS and GPU_LIBS it
# uses).
#
#   make stage8_gpu && ./stage8_gpu --sweep tests     the kernels against the CPU stage 8
#   make decode-gpu                                    the bandwidth benchmark: data/gpu/decode.csv
#
# The kernels also go into build/libfa_gpu.so (one more prerequisite of
# gpu.mk's rule, whose recipe links all of them), where python/decode_op.py
# finds them. ptxas's report is kept in build/decode_ptxas.txt and a spill
# fails the build. Without nvcc nothing is built and the suite prints SKIP.

STAGE8_TESTS := sh tests/gpu/stage8.sh
DECODE_OP_TESTS := python3 tests/gpu/test_decode_op.py
TEST_SUITES += "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
# make gpu-test (kernels/gpu.mk) runs these suites after its own
GPU_TEST_EXTRA += "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
.PHONY: decode-gpu gpu-test-decode

ifneq ($(strip $(NVCC)),)
DECODE_HDRS := kernels/fa_decode.h src/decode_plan.h src/merge.h $(GPU_HDRS)
define DECODE_PTXAS_CHECK
	@grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $(1) >&2 || true
	@! grep -E '[1-9][0-9]* bytes spill' $(1) || { echo "decode kernels: ptxas spilled registers (see above)"; exit 1; }
endef
$(BUILD)/stage8_decode_gpu.o: kernels/stage8_decode.cu $(DECODE_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2> $(BUILD)/decode_ptxas.txt || { cat $(BUILD)/decode_ptxas.txt; exit 1; }
	$(call DECODE_PTXAS_CHECK,$(BUILD)/decode_ptxas.txt)
$(BUILD)/stage8_decode_gpu.pic.o: kernels/stage8_decode.cu $(DECODE_HDRS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -Xptxas -v -c $< -o $@ 2> $(BUILD)/decode_ptxas_pic.txt || { cat $(BUILD)/decode_ptxas_pic.txt; exit 1; }
	$(call DECODE_PTXAS_CHECK,$(BUILD)/decode_ptxas_pic.txt)
$(BUILD)/libfa_gpu.so: $(BUILD)/stage8_decode_gpu.pic.o

$(BUILD)/stage8_gpu.o: src/stage8_gpu.c src/stage8_cli.h src/stage8_decode.h src/decode_plan.h kernels/fa_decode.h \
                       kernels/fa_gpu.h | $(BUILD)
	$(CC) $(CPPFLAGS) -Ikernels $(CFLAGS) -MMD -c $< -o $@
STAGE8_GPU_OBJS := $(BUILD)/stage8_gpu.o $(BUILD)/stage8_decode_gpu.o $(GPU_OBJS) $(BUILD)/stage8_decode.lib.o \
                   $(BUILD)/merge.lib.o $(BUILD)/stage2_online_softmax.lib.o $(HARNESS)
stage8_gpu: $(STAGE8_GPU_OBJS)            ## stage 8 on the GPU: paged split-KV decode kernels vs the CPU stage 8
	$(NVCC) $(GENCODE) $^ -o $@ $(GPU_LIBS) -lm
GPU_TARGETS += stage8_gpu
TEST_DEPS += stage8_gpu

decode-gpu: $(BUILD)/libfa_gpu.so         ## decode bandwidth vs a device copy and SDPA: data/gpu/decode.csv
	python3 scripts/bench_decode.py --csv data/gpu/decode.csv

gpu-test-decode: stage8_gpu $(BUILD)/libfa_gpu.so  ## stage 8's GPU suites alone (make gpu-test runs them too)
	@sh tests/run.sh "$(STAGE8_TESTS)" "$(DECODE_OP_TESTS)"
gpu-test: stage8_gpu $(BUILD)/libfa_gpu.so
else
decode-gpu gpu-test-decode stage8_gpu:
	@echo "$@: not built: nvcc not found; stage 8's GPU side needs the CUDA toolkit"
endif

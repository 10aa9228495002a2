# mk/gpu_tests.mk -- the GPU test programs (included by the Makefile after
# kernels/gpu.mk, whose NVCC, GENCODE, GPU_OBJS and GPU_LIBS it uses): the
# test suites of the GPU stages, out of their programs. Each links like its
# program, its main in tests/gpu/ in place of the program's. They print
# SKIP (through tests/gpu/run_gpu_tests.sh) where nvcc or a GPU is missing.

STAGE4_TESTS := $(BUILD)/tests/gpu/stage4_tests
STAGE5_TESTS := $(BUILD)/tests/gpu/stage5_tests

ifneq ($(strip $(NVCC)),)
GPU_TEST_PROGRAMS := stage4_tests stage5_tests
LINK_stage4_tests := tests/gpu/stage4_tests $(filter-out src/programs/%,$(LINK_stage4))
LINK_stage5_tests := tests/gpu/stage5_tests $(filter-out src/programs/%,$(LINK_stage5))
$(foreach t,$(GPU_TEST_PROGRAMS),$(eval $(BUILD)/tests/gpu/$(t): $(call objs,$(BUILD),$(LINK_$(t))) $$(GPU_OBJS) ; \
    $$(NVCC) $$(GENCODE) $$^ -o $$@ $$(GPU_LIBS) -lm))
$(BUILD)/tests/gpu/stage4_tests:          ## stage 4's GPU test suite (--sweep tests|model)
$(BUILD)/tests/gpu/stage5_tests:          ## stage 5's GPU test suite (--sweep tests|small|accuracy|model)
GPU_TARGETS += $(addprefix $(BUILD)/tests/gpu/,$(GPU_TEST_PROGRAMS))
TEST_DEPS   += $(addprefix $(BUILD)/tests/gpu/,$(GPU_TEST_PROGRAMS))
gpu-test: $(addprefix $(BUILD)/tests/gpu/,$(GPU_TEST_PROGRAMS))
endif

# FlashAttention, built up in stages. `make help` lists the targets.
#
# Host code is plain C11, warnings on and clean. Each stage is its own program;
# stage N links the earlier stages it checks against (their objects are built
# once more with -DSTAGE_NO_MAIN, so only the newest stage has a main).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-function
CPPFLAGS += -Isrc -DDATA_DIR='"$(CURDIR)/data"' -D_POSIX_C_SOURCE=200809L
LDLIBS  += -lm
BUILD   := build

HARNESS := $(BUILD)/common.o $(BUILD)/npy.o

# Test suites: commands that print PASS/FAIL/SKIP lines (see tests/run.sh).
# The GPU, paper and exercise makefiles below add theirs.
TEST_SUITES :=
TEST_DEPS   :=
GPU_TARGETS :=

.PHONY: all cpu gpu help clean test bench sweep setup
all: cpu gpu                              ## build every stage (CUDA ones too where nvcc is)
cpu: stage1 stage2 stage3                 ## build the CPU stages

help:                                     ## list the targets
	@grep -hE '^[a-z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

$(BUILD):
	@mkdir -p $(BUILD)

# Objects with a main, and the same sources as library objects without it.
$(BUILD)/%.o: src/%.c | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -c $< -o $@
$(BUILD)/%.lib.o: src/%.c | $(BUILD)
	$(CC) $(CPPFLAGS) -DSTAGE_NO_MAIN $(CFLAGS) -MMD -c $< -o $@

stage1: $(BUILD)/stage1_naive.o $(HARNESS)                    ## naive attention (fp64 reference)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
stage2: $(BUILD)/stage2_online_softmax.o $(BUILD)/stage1_naive.lib.o $(HARNESS)   ## online softmax
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
stage3: $(BUILD)/stage3_tiled.o $(BUILD)/stage2_online_softmax.lib.o $(BUILD)/stage1_naive.lib.o $(HARNESS)  ## tiled FlashAttention, CPU
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

setup:                                    ## the one set-up command: NumPy, Pandoc, LaTeX, gnuplot
	sh scripts/setup.sh

-include kernels/gpu.mk
-include paper/paper.mk
-include exercises/exercises.mk

gpu: $(GPU_TARGETS)

test: cpu $(TEST_DEPS)                    ## every test suite; ends with "N passed, N failed, N skipped"
	@sh tests/run.sh $(TEST_SUITES)

clean:                                    ## remove build outputs
	rm -rf $(BUILD) stage1 stage2 stage3 stage4 stage5 stage6

-include $(wildcard $(BUILD)/*.d)

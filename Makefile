# FlashAttention, built up in stages. `make help` lists the targets.
#
# Host code is plain C11, warnings on and clean. Sources live by concern
# (docs/ARCHITECTURE.md): src/harness (flags, inputs, .npy files, counters),
# src/cpu (the CPU stages' algorithms), src/gpu (the GPU hosts' shared code),
# src/programs (one main per program), tests/cpu (the CPU test programs),
# kernels/ (CUDA). Each source is compiled once, to build/<its path>.o; the
# programs stay at the repository root (./stage1 ... ./stage8).
#
# Adding a stage: its algorithm src/cpu/stageN_x.c and its main
# src/programs/stageN_main.c, then two edits in mk/programs.mk: its name in
# CPU_PROGRAMS and its link list LINK_stageN (with a `## ` line for help).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-function
SRC_DIRS := src/harness src/cpu src/gpu
CPPFLAGS += -Icore $(addprefix -I,$(SRC_DIRS)) -DDATA_DIR='"$(CURDIR)/data"' -D_POSIX_C_SOURCE=200809L
LDLIBS  += -lm
BUILD   := build
# The Python package flashattn_stages (python/flashattn_stages/) for every
# test and script make runs, ahead of any installed copy.
export PYTHONPATH := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH))

# Test suites: commands that print PASS/FAIL/SKIP lines (see tests/run.sh).
# Each mk/ fragment and kernels/*.mk adds its own.
TEST_SUITES :=
TEST_DEPS   :=
GPU_TARGETS :=

.PHONY: all cpu gpu help clean test test-tools setup
all: cpu gpu                              ## build every stage (CUDA ones too where nvcc is)

help:                                     ## list the targets
	@echo "To learn (no GPU): make stage1 stage2 stage3 stage6 stage8, then run each; make paper (Part I is"
	@echo "the course); make exercise EX=1 ... EX=5. Every target:"
	@sed -nE 's/^LINK_([a-z0-9_]+) *:=.*## (.*)/\1:## \2/p; t; s/^([^ :#=]+):.*## (.*)/\1:## \2/p' $(MAKEFILE_LIST) | \
	    sed 's/[$$](BUILD)/$(BUILD)/; s/[$$](ASAN)/$(BUILD)\/asan/' | awk -F':## ' '{ printf "%-33s %s\n", $$1, $$2 }'

$(BUILD):
	@mkdir -p $(BUILD)

include mk/programs.mk
include mk/cpu_tests.mk
include mk/cpu_data.mk
-include kernels/gpu.mk
-include mk/gpu_tests.mk
-include mk/stage7.mk
-include mk/stage8.mk
-include kernels/gpu_data.mk
-include paper/paper.mk
-include exercises/exercises.mk
-include tests/fa_suite/fa_suite.mk

# make setup's closing summary (apt-get and sudo stood in for: no network, nothing installed)
TEST_SUITES += "sh tests/setup.sh"

# Help lines of the GPU files that kernels/gpu.mk builds.
ifneq ($(strip $(NVCC)),)
$(BUILD)/libfa_gpu.so:                    ## the kernels as one shared library (python/, through ctypes)
$(BUILD)/v3_check:                        ## version 3 (Hopper): its piece tests and every step against fp64
endif

gpu: $(GPU_TARGETS)                       ## build the CUDA programs: stage4, stage5, stage8_gpu, stage7 (with NCCL), build/libfa_gpu.so, build/v3_check, build/tests/gpu/*; nothing without nvcc

setup:                                    ## the one set-up command: NumPy, Pandoc, LaTeX, gnuplot, poppler
	sh scripts/setup.sh

# On a fresh machine `make test` alone is enough: test-tools installs what
# the suites need (NumPy, Pandoc, LaTeX, gnuplot, poppler) when any of it is
# missing, saying so first, or stops with one line saying why it cannot.
# '+': suites run make themselves (the paper, the exercises), so the recipe is
# marked recursive and make -jN never warns that the jobserver is closed;
# tests/run.sh then takes the jobserver out of MAKEFLAGS, so those sub-makes
# run serially and make -jN test prints what make test prints.
test: test-tools cpu $(TEST_DEPS)         ## every test suite (builds the PDF and the exercise checkers too); ends with "N passed, N failed, N skipped"
	+@sh tests/run.sh $(TEST_SUITES)

test-tools:                               ## install what the suites need, when something is missing
	@sh scripts/setup.sh --if-missing

clean:                                    ## remove build outputs
	rm -rf $(BUILD) $(PROGRAMS)

# -MP gives every header its own empty rule, so that a header which moves or
# goes away makes its dependants rebuild instead of stopping make.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

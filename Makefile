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

.PHONY: all cpu gpu help clean test test-tools bench sweep sweep-masks setup sanitize
all: cpu gpu                              ## build every stage (CUDA ones too where nvcc is)
cpu: stage1 stage2 stage3 stage6 stage8   ## build the CPU stages

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

stage6: $(BUILD)/stage6_masks.o $(BUILD)/stage3_tiled.lib.o $(BUILD)/stage2_online_softmax.lib.o $(BUILD)/stage1_naive.lib.o $(HARNESS)  ## masks: causal, window, Sq != Sk, grouped heads; long sequences
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

stage8: $(BUILD)/stage8_decode.o $(BUILD)/merge.lib.o $(BUILD)/stage2_online_softmax.lib.o $(BUILD)/stage1_naive.lib.o $(HARNESS)  ## decoding: split-KV merged by the online softmax's rule, a paged cache, per-sequence lengths
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The one mask definition as a shared library, for the NumPy reference (ctypes).
$(BUILD)/libfa_mask.so: src/mask_lib.c src/mask.h | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -fPIC $< -o $@

# ---- tests of the CPU stages -------------------------------------------------
CPU_LIBS := $(BUILD)/stage3_tiled.lib.o $(BUILD)/stage2_online_softmax.lib.o \
            $(BUILD)/stage1_naive.lib.o $(HARNESS)

$(BUILD)/test_cpu: tests/test_cpu.c $(CPU_LIBS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/test_masks: tests/test_masks.c $(CPU_LIBS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)

# Stage 8's property tests (decoding: paged cache, splits, the merge).
DECODE_LIBS := $(BUILD)/stage8_decode.lib.o $(BUILD)/merge.lib.o $(BUILD)/stage2_online_softmax.lib.o \
               $(BUILD)/stage1_naive.lib.o $(HARNESS)
$(BUILD)/test_decode: tests/test_decode.c $(DECODE_LIBS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)
# The dQ accuracy model: stage 3's backward with O, dS, P rounded to 16 bits.
$(BUILD)/stage3_accuracy: src/stage3_accuracy.c $(CPU_LIBS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)

# IO mutants: stage 1 with a pass that moves more or less than the model
# says (tests/mutants/*.sed applied to its body); test_io must catch each.
MUTANTS := $(basename $(notdir $(wildcard tests/mutants/*.sed)))
$(BUILD)/test_io: tests/test_io.c $(BUILD)/stage1_naive.lib.o $(HARNESS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/mutants/%/stage1_naive_body.h: src/stage1_naive_body.h tests/mutants/%.sed
	@mkdir -p $(@D)
	@sed -f tests/mutants/$*.sed $< > $@ && ! cmp -s $< $@ || { echo "tests/mutants/$*.sed changes nothing" >&2; rm -f $@; exit 1; }
$(BUILD)/mutants/%/test_io: tests/test_io.c src/stage1_naive.c $(BUILD)/mutants/%/stage1_naive_body.h $(HARNESS)
	@cp src/stage1_naive.c $(@D)/stage1_naive.c
	$(CC) $(CPPFLAGS) -DSTAGE_NO_MAIN $(CFLAGS) tests/test_io.c $(@D)/stage1_naive.c $(HARNESS) -o $@ $(LDLIBS)
MUTANT_BINS := $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/test_io)
# Kept: make would otherwise delete the generated headers after the test count.
.SECONDARY: $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/stage1_naive_body.h)

# The merge rule and the ring plan of stage 7, tested on the CPU first
# (tests/test_ring.c runs the plan through stage 3 in fp64).
RING_LIBS := $(BUILD)/merge.lib.o $(BUILD)/ring.lib.o
$(BUILD)/test_ring: tests/test_ring.c $(RING_LIBS) $(CPU_LIBS) | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The same programs under AddressSanitizer and UndefinedBehaviorSanitizer,
# built apart in build/asan so that the normal build stays optimized.
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
ASAN      := $(BUILD)/asan
SAN_SRCS  := src/common.c src/npy.c
$(ASAN):
	@mkdir -p $(ASAN)
$(ASAN)/%.lib.o: src/%.c | $(ASAN)
	$(CC) $(CPPFLAGS) -DSTAGE_NO_MAIN -std=c11 -Wall -Wextra $(SAN_FLAGS) -c $< -o $@
$(ASAN)/stage1: src/stage1_naive.c $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/stage2: src/stage2_online_softmax.c $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/stage3: src/stage3_tiled.c $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/stage6: src/stage6_masks.c $(ASAN)/stage3_tiled.lib.o $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/test_cpu: tests/test_cpu.c $(ASAN)/stage3_tiled.lib.o $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/test_masks: tests/test_masks.c $(ASAN)/stage3_tiled.lib.o $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/test_ring: tests/test_ring.c src/merge.c src/ring.c $(ASAN)/stage3_tiled.lib.o $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/stage8: src/stage8_decode.c src/merge.c $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
$(ASAN)/test_decode: tests/test_decode.c $(ASAN)/stage8_decode.lib.o $(ASAN)/merge.lib.o $(ASAN)/stage2_online_softmax.lib.o $(ASAN)/stage1_naive.lib.o $(SAN_SRCS) | $(ASAN)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) $^ -o $@ $(LDLIBS)
SANITIZED := $(ASAN)/stage1 $(ASAN)/stage2 $(ASAN)/stage3 $(ASAN)/stage6 $(ASAN)/stage8 $(ASAN)/test_cpu $(ASAN)/test_masks \
             $(ASAN)/test_ring $(ASAN)/test_decode

sanitize: $(SANITIZED)                    ## the stages and tests under ASan + UBSan
	@sh tests/run.sh "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" "$(ASAN)/test_ring --quick" \
	    "$(ASAN)/test_decode --quick" "sh tests/stages.sh $(ASAN)"

TEST_DEPS   += $(BUILD)/stage3_accuracy $(BUILD)/test_cpu $(BUILD)/test_masks $(BUILD)/test_ring $(BUILD)/test_decode \
               $(BUILD)/test_io $(MUTANT_BINS) $(BUILD)/libfa_mask.so $(SANITIZED)
TEST_SUITES += $(BUILD)/test_cpu "$(BUILD)/stage3_accuracy --test" $(BUILD)/test_masks $(BUILD)/test_ring \
               $(BUILD)/test_decode "sh tests/emulate_decode.sh" "sh tests/io_mutants.sh" \
               "sh tests/stages.sh" "sh tests/cli.sh" "python3 tests/one_mask.py" \
               "python3 tests/test_reference.py" "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" \
               "$(ASAN)/test_ring --quick" "$(ASAN)/test_decode --quick" "sh tests/stages.sh $(ASAN)"

# ---- measured data of the CPU stages (read by the figures and the claims) ----
# Wall times are medians of 5 runs (one timing on a shared machine can be off
# by a factor); counts are the same on every run.
sweep: stage2 stage3 stage8 $(BUILD)/test_cpu $(BUILD)/libfa_mask.so $(BUILD)/stage3_accuracy sweep-masks  ## regenerate data/cpu/*.csv: IO sweeps over N and M, block sweeps, closed forms, trace, errors, masks, dQ accuracy, decoding
	./stage3 --sweep io --csv data/cpu/io_sweep.csv
	./stage3 --sweep blocks --repeats 5 --csv data/cpu/block_sweep.csv
	./stage3 --sweep blocks --causal --repeats 5 --csv data/cpu/causal_sweep.csv
	./stage3 --sweep formulas --csv data/cpu/formulas.csv
	./stage2 --trace --csv data/cpu/online_trace.csv
	$(BUILD)/test_cpu --csv data/cpu/exactness.csv
	python3 scripts/chapter_example.py --csv data/cpu/chapter_example.csv \
	    --gradcheck-csv data/cpu/chapter_gradcheck.csv
	$(BUILD)/stage3_accuracy --csv data/cpu/dq_accuracy.csv
	./stage8 --sweep io --csv data/cpu/decode_io.csv
sweep-masks: stage1 stage6 $(BUILD)/test_masks  ## data/cpu/window_sweep.csv, lse_error.csv, memory_vs_n.csv, masks_property.csv (minutes)
	$(BUILD)/test_masks --csv data/cpu/masks_property.csv
	./stage6 --sweep window --br 64 --bc 64 --csv data/cpu/window_sweep.csv
	./stage6 --sweep lse --csv data/cpu/lse_error.csv
	./stage6 --sweep memory --csv data/cpu/memory_vs_n.csv
bench: sweep                              ## the CPU benchmark: same as sweep

setup:                                    ## the one set-up command: NumPy, Pandoc, LaTeX, gnuplot
	sh scripts/setup.sh

-include kernels/gpu.mk
-include kernels/stage7.mk
-include kernels/stage8.mk
-include paper/paper.mk
-include exercises/exercises.mk

gpu: $(GPU_TARGETS)

# On a fresh machine `make test` alone is enough: test-tools installs what
# the suites need (NumPy, Pandoc, LaTeX, gnuplot, poppler) when any of it is
# missing, saying so first, or stops with one line saying why it cannot.
# '+': suites run make themselves (the paper, the exercises), so the recipe is
# marked recursive and make -jN never warns that the jobserver is closed;
# tests/run.sh then takes the jobserver out of MAKEFLAGS, so those sub-makes
# run serially and make -jN test prints what make test prints.
test: test-tools cpu $(TEST_DEPS)         ## every test suite (builds the PDF and the exercise checkers too); ends with "N passed, N failed, N skipped"
	+@sh tests/run.sh $(TEST_SUITES)

test-tools:
	@sh scripts/setup.sh --if-missing

clean:                                    ## remove build outputs
	rm -rf $(BUILD) stage1 stage2 stage3 stage4 stage5 stage6 stage7 stage8 stage8_gpu

-include $(wildcard $(BUILD)/*.d)

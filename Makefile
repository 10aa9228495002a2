# FlashAttention, built up in stages. `make help` lists the targets.
#
# Host code is plain C11, warnings on and clean. Each stage is its own program;
# stage N links the earlier stages it checks against (their objects are built
# once more with -DSTAGE_NO_MAIN, so only the newest stage has a main).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-function
CPPFLAGS += -Icore -Isrc -DDATA_DIR='"$(CURDIR)/data"' -D_POSIX_C_SOURCE=200809L
LDLIBS  += -lm
BUILD   := build
# The Python package flashattn_stages (python/flashattn_stages/) for every
# test and script make runs, ahead of any installed copy.
export PYTHONPATH := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH))

# The harness every program links: flags, inputs, provenance, .npy files.
HARNESS_SRCS := common outputs npy
HARNESS := $(patsubst %,$(BUILD)/%.o,$(HARNESS_SRCS))

# One link list per program: its source with the main, then the sources of
# src/ it links without their main (each CPU stage links the earlier stages
# it checks against). `objs` turns a list into objects in a build folder:
# $(call objs,FOLDER,LIST) is FOLDER/first.o, FOLDER/rest.lib.o ..., the harness.
LINK_stage1     := stage1_naive
LINK_stage2     := stage2_online_softmax $(LINK_stage1)
LINK_stage3     := stage3_tiled $(LINK_stage2)
LINK_stage6     := stage6_masks $(LINK_stage3)
LINK_test_cpu   := test_cpu $(LINK_stage3)
LINK_test_masks := test_masks $(LINK_stage3)
LINK_test_ring  := test_ring merge ring $(LINK_stage3)
LINK_test_io    := test_io $(LINK_stage1)
LINK_stage8     := stage8_decode merge $(LINK_stage2)
LINK_test_decode := test_decode stage8_decode merge $(LINK_stage2)
LINK_test_varlen := test_varlen
LINK_stage3_accuracy := stage3_accuracy $(LINK_stage3)
objs = $(1)/$(firstword $(2)).o $(patsubst %,$(1)/%.lib.o,$(wordlist 2,99,$(2))) \
       $(patsubst %,$(1)/%.o,$(HARNESS_SRCS))
# The library objects a program of another folder links (exercises, GPU hosts).
lib_objs = $(patsubst %,$(1)/%.lib.o,$(2)) $(patsubst %,$(1)/%.o,$(HARNESS_SRCS))

CPU_STAGES := stage1 stage2 stage3 stage6 stage8
CPU_TESTS  := test_cpu test_masks test_ring test_io stage3_accuracy test_decode test_varlen

# link_program OUTPUT, OBJECT-FOLDER, LIST, CFLAGS: the one link rule of C programs.
define link_program
$(1): $(call objs,$(2),$(3))
	$$(CC) $(4) $$^ -o $$@ $$(LDLIBS)
endef

# Test suites: commands that print PASS/FAIL/SKIP lines (see tests/run.sh).
# The GPU, paper and exercise makefiles below add theirs.
TEST_SUITES :=
TEST_DEPS   :=
GPU_TARGETS :=

.PHONY: all cpu gpu help clean test test-tools bench sweep sweep-masks setup sanitize
all: cpu gpu                              ## build every stage (CUDA ones too where nvcc is)
cpu: stage1 stage2 stage3 stage6 stage8   ## build the CPU stages

help:                                     ## list the targets
	@grep -hE '^[a-z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ printf "%-19s %s\n", $$1, $$2 }'

$(BUILD):
	@mkdir -p $(BUILD)

# Objects with a main (src/, tests/), and the sources of src/ as library
# objects without it.
$(BUILD)/%.o: src/%.c | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.o: tests/%.c | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.lib.o: src/%.c | $(BUILD)
	$(CC) $(CPPFLAGS) -DSTAGE_NO_MAIN $(CFLAGS) -MMD -MP -c $< -o $@

$(foreach p,$(CPU_STAGES),$(eval $(call link_program,$(p),$(BUILD),$(LINK_$(p)),$$(CFLAGS))))
$(foreach p,$(CPU_TESTS),$(eval $(call link_program,$(BUILD)/$(p),$(BUILD),$(LINK_$(p)),$$(CFLAGS))))
stage1:                                   ## naive attention (fp64 reference)
stage2:                                   ## online softmax
stage3:                                   ## tiled FlashAttention, CPU
stage6:                                   ## masks: causal, window, Sq != Sk, grouped heads; long sequences
stage8:                                   ## decoding: split-KV merged by the online softmax's rule, a paged cache, per-sequence lengths

# The one mask definition as a shared library, for the NumPy reference (ctypes).
$(BUILD)/libfa_mask.so: src/mask_lib.c core/mask.h core/attn_params.h core/fa_gpu.h | $(BUILD)
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -fPIC $< -o $@

# ---- tests of the CPU stages -------------------------------------------------
# build/test_cpu, test_masks, test_ring (the merge rule and the ring plan of
# stage 7, run through stage 3 in fp64), test_io and test_decode (stage 8's
# property tests: paged cache, splits, the merge): link lists above.

# The dQ accuracy model (build/stage3_accuracy): stage 3's backward with O,
# dS, P rounded to 16 bits; its link list is above.

# IO mutants: stage 1 with a pass that moves more or less than the model
# says (tests/mutants/*.sed applied to its body); test_io must catch each.
MUTANTS := $(basename $(notdir $(wildcard tests/mutants/*.sed)))
$(BUILD)/mutants/%/stage1_naive_body.h: src/stage1_naive_body.h tests/mutants/%.sed
	@mkdir -p $(@D)
	@sed -f tests/mutants/$*.sed $< > $@ && ! cmp -s $< $@ || { echo "tests/mutants/$*.sed changes nothing" >&2; rm -f $@; exit 1; }
$(BUILD)/mutants/%/test_io: tests/test_io.c src/stage1_naive.c $(BUILD)/mutants/%/stage1_naive_body.h $(HARNESS)
	@cp src/stage1_naive.c $(@D)/stage1_naive.c
	$(CC) $(CPPFLAGS) -DSTAGE_NO_MAIN $(CFLAGS) tests/test_io.c $(@D)/stage1_naive.c $(HARNESS) -o $@ $(LDLIBS)
MUTANT_BINS := $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/test_io)
# Kept: make would otherwise delete the generated headers after the test count.
.SECONDARY: $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/stage1_naive_body.h)

# The same programs under AddressSanitizer and UndefinedBehaviorSanitizer,
# built apart in build/asan from the same link lists, so that the normal
# build stays optimized: one compile pattern per source folder, one link rule.
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_CC    = $(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) -MMD -MP
ASAN      := $(BUILD)/asan
$(ASAN):
	@mkdir -p $(ASAN)
$(ASAN)/%.o: src/%.c | $(ASAN)
	$(SAN_CC) -c $< -o $@
$(ASAN)/%.o: tests/%.c | $(ASAN)
	$(SAN_CC) -c $< -o $@
$(ASAN)/%.lib.o: src/%.c | $(ASAN)
	$(SAN_CC) -DSTAGE_NO_MAIN -c $< -o $@
SAN_PROGRAMS := $(CPU_STAGES) test_cpu test_masks test_ring test_decode test_varlen
$(foreach p,$(SAN_PROGRAMS),$(eval $(call link_program,$(ASAN)/$(p),$(ASAN),$(LINK_$(p)),$$(SAN_FLAGS))))
SANITIZED := $(addprefix $(ASAN)/,$(SAN_PROGRAMS))

sanitize: $(SANITIZED)                    ## the stages and tests under ASan + UBSan
	@sh tests/run.sh "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" "$(ASAN)/test_ring --quick" \
	    "$(ASAN)/test_decode --quick" "sh tests/stages.sh $(ASAN)"

TEST_DEPS   += $(BUILD)/stage3_accuracy $(BUILD)/test_cpu $(BUILD)/test_masks $(BUILD)/test_ring $(BUILD)/test_decode $(BUILD)/test_io $(MUTANT_BINS) \
               $(BUILD)/test_varlen $(ASAN)/test_varlen \
               $(BUILD)/libfa_mask.so $(SANITIZED)
TEST_SUITES += $(BUILD)/test_cpu "$(BUILD)/stage3_accuracy --test" $(BUILD)/test_masks $(BUILD)/test_ring \
               $(BUILD)/test_decode $(BUILD)/test_varlen "$(ASAN)/test_varlen --quick" "sh tests/emulate_decode.sh" \
               "sh tests/emulate_center.sh" "sh tests/io_mutants.sh" \
               "sh tests/stages.sh" "sh tests/cli.sh" "python3 tests/one_mask.py" "python3 tests/layers.py" \
               "python3 tests/test_reference.py" "python3 tests/python/test_package.py" "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" \
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
	python3 scripts/cpu/chapter_example.py --csv data/cpu/chapter_example.csv \
	    --gradcheck-csv data/cpu/chapter_gradcheck.csv
	$(BUILD)/stage3_accuracy --csv data/cpu/dq_accuracy.csv
	$(BUILD)/stage3_accuracy --draws data/cpu/dq_draws.csv
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
-include kernels/gpu_data.mk
-include paper/paper.mk
-include exercises/exercises.mk
-include tests/fa_suite/fa_suite.mk

gpu: $(GPU_TARGETS)                      ## build the CUDA programs: stage4, stage5, build/v3_check, build/libfa_gpu.so, stage8_gpu, stage7 (with NCCL); nothing without nvcc

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

# -MP gives every header its own empty rule, so that a header which moves or
# goes away makes its dependants rebuild instead of stopping make. The
# headers that moved to core/ are named once more for dependency files
# written before -MP was given.
src/attn_params.h src/mask.h src/merge.h src/tolerances.h kernels/fa_gpu.h kernels/versions.def \
kernels/stage7_ring.h tests/test_report.h:
-include $(wildcard $(BUILD)/*.d $(ASAN)/*.d)

# mk/programs.mk -- the C programs: one list, one link list each, one
# compile rule per source folder (included by the Makefile).
#
# A link list names sources by path without .c: the program's main
# (src/programs/ or tests/cpu/) first, then the library sources it links;
# every program also links the harness. `objs` turns a list into objects
# under a build folder: $(call objs,FOLDER,LIST) is FOLDER/<path>.o for each
# source and the harness. `lib_objs` is the same without the mains, for the
# programs of another folder (exercises, GPU hosts).

HARNESS_SRCS := $(addprefix src/harness/,util io_model options problem outputs npy)
HARNESS := $(patsubst %,$(BUILD)/%.o,$(HARNESS_SRCS))
objs = $(patsubst %,$(1)/%.o,$(2) $(HARNESS_SRCS))
lib_objs = $(patsubst %,$(1)/%.o,$(filter-out src/programs/% tests/%,$(2)) $(HARNESS_SRCS))

# The CPU stages' libraries: each stage links the earlier stages it checks against.
LIB_stage1 := src/cpu/stage1_naive
LIB_stage2 := src/cpu/stage2_online_softmax $(LIB_stage1)
LIB_stage3 := src/cpu/stage3_tiled $(LIB_stage2)
LIB_stage8 := src/cpu/stage8_decode src/cpu/merge $(LIB_stage2)

# The programs at the repository root (the CPU ones; kernels/gpu.mk and
# mk/stage7.mk, mk/stage8.mk add the GPU ones to PROGRAMS).
CPU_PROGRAMS := stage1 stage2 stage3 stage6 stage8
LINK_stage1 := src/programs/stage1_main $(LIB_stage1)             ## naive attention (fp64 reference)
LINK_stage2 := src/programs/stage2_main $(LIB_stage2)             ## online softmax
LINK_stage3 := src/programs/stage3_main src/cpu/stage3_sweeps $(LIB_stage3)             ## tiled FlashAttention, CPU
LINK_stage6 := src/programs/stage6_main src/cpu/stage6_masks src/cpu/stage6_sweeps $(LIB_stage3)  ## masks: causal, window, Sq != Sk, grouped heads; long sequences
LINK_stage8 := src/programs/stage8_main $(LIB_stage8)             ## decoding: split-KV merged by the online softmax's rule, a paged cache, per-sequence lengths
PROGRAMS := $(CPU_PROGRAMS) stage4 stage5 stage7 stage8_gpu

# The programs under build/: the CPU test programs (tests/cpu/) and the dQ
# accuracy model (make sweep, make test).
CPU_TESTS := test_cpu test_masks test_ring test_io test_decode test_varlen stage3_accuracy
LINK_test_cpu    := tests/cpu/test_cpu $(LIB_stage3)
LINK_test_masks  := tests/cpu/test_masks $(LIB_stage3)
LINK_test_ring   := tests/cpu/test_ring src/cpu/merge src/cpu/ring $(LIB_stage3)
LINK_test_io     := tests/cpu/test_io $(LIB_stage1)
LINK_test_decode := tests/cpu/test_decode $(LIB_stage8)
LINK_test_varlen := tests/cpu/test_varlen
LINK_stage3_accuracy := src/programs/stage3_accuracy_main src/cpu/stage3_accuracy $(LIB_stage3)

.PHONY: cpu
cpu: $(CPU_PROGRAMS)                      ## build the CPU stages

# One compile rule per source folder, one link rule for every C program.
$(BUILD)/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# link_program OUTPUT, OBJECT-FOLDER, LIST, CFLAGS
define link_program
$(1): $(call objs,$(2),$(3))
	$$(CC) $(4) $$^ -o $$@ $$(LDLIBS)
endef
$(foreach p,$(CPU_PROGRAMS),$(eval $(call link_program,$(p),$(BUILD),$(LINK_$(p)),$$(CFLAGS))))
$(foreach p,$(CPU_TESTS),$(eval $(call link_program,$(BUILD)/$(p),$(BUILD),$(LINK_$(p)),$$(CFLAGS))))

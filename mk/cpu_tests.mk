# mk/cpu_tests.mk -- the CPU test suites (included by the Makefile): the
# test programs of tests/cpu/ (link lists in mk/programs.mk), the IO
# mutants, the same programs under the sanitizers, the NumPy reference's
# mask library.
.PHONY: sanitize

# The one mask definition as a shared library, for the NumPy reference (ctypes).
$(BUILD)/libfa_mask.so: src/cpu/mask_lib.c core/mask.h core/attn_params.h core/fa_gpu.h  ## the mask as a shared library (NumPy reference)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -fPIC $< -o $@

# IO mutants: stage 1 with a pass that moves more or less than the model
# says (tests/mutants/*.sed applied to its body); test_io must catch each.
# The copy of stage1_naive.c beside the mutated body includes that body.
MUTANTS := $(basename $(notdir $(wildcard tests/mutants/*.sed)))
$(BUILD)/mutants/%/stage1_naive_body.h: src/cpu/stage1_naive_body.h tests/mutants/%.sed
	@mkdir -p $(@D)
	@sed -f tests/mutants/$*.sed $< > $@ && ! cmp -s $< $@ || { echo "tests/mutants/$*.sed changes nothing" >&2; rm -f $@; exit 1; }
$(BUILD)/mutants/%/test_io: tests/cpu/test_io.c src/cpu/stage1_naive.c $(BUILD)/mutants/%/stage1_naive_body.h $(HARNESS)
	@cp src/cpu/stage1_naive.c $(@D)/stage1_naive.c
	$(CC) $(CPPFLAGS) $(CFLAGS) tests/cpu/test_io.c $(@D)/stage1_naive.c $(HARNESS) -o $@ $(LDLIBS)
MUTANT_BINS := $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/test_io)
# Kept: make would otherwise delete the generated headers after the test count.
.SECONDARY: $(foreach m,$(MUTANTS),$(BUILD)/mutants/$(m)/stage1_naive_body.h)

# The same programs under AddressSanitizer and UndefinedBehaviorSanitizer,
# built apart in build/asan from the same link lists, so that the normal
# build stays optimized.
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_CC    = $(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra $(SAN_FLAGS) -MMD -MP
ASAN      := $(BUILD)/asan
$(ASAN)/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(SAN_CC) -c $< -o $@
$(ASAN)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(SAN_CC) -c $< -o $@
SAN_PROGRAMS := $(CPU_PROGRAMS) test_cpu test_masks test_ring test_decode test_varlen
$(foreach p,$(SAN_PROGRAMS),$(eval $(call link_program,$(ASAN)/$(p),$(ASAN),$(LINK_$(p)),$$(SAN_FLAGS))))
SANITIZED := $(addprefix $(ASAN)/,$(SAN_PROGRAMS))

sanitize: $(SANITIZED)                    ## the stages and tests under ASan + UBSan
	@sh tests/run.sh "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" "$(ASAN)/test_ring --quick" \
	    "$(ASAN)/test_decode --quick" "sh tests/stages.sh $(ASAN)"

$(BUILD)/test_cpu:                        ## the CPU stages against each other and the closed forms
$(BUILD)/test_masks:                      ## the masks: every convention against stage 1
$(BUILD)/test_ring:                       ## the merge rule and stage 7's ring plan, through stage 3 in fp64
$(BUILD)/test_io:                         ## stage 1's counted IO against its model (and the mutants)
$(BUILD)/test_decode:                     ## stage 8's property tests: paged cache, splits, the merge
$(BUILD)/test_varlen:                     ## packed sequences (cu_seqlens) against the dense layout
$(BUILD)/stage3_accuracy:                 ## the dQ accuracy model: stage 3's backward with 16-bit roundings

TEST_DEPS   += $(BUILD)/stage3_accuracy $(BUILD)/test_cpu $(BUILD)/test_masks $(BUILD)/test_ring $(BUILD)/test_decode $(BUILD)/test_io $(MUTANT_BINS) \
               $(BUILD)/test_varlen $(ASAN)/test_varlen \
               $(BUILD)/libfa_mask.so $(SANITIZED)
TEST_SUITES += $(BUILD)/test_cpu "$(BUILD)/stage3_accuracy --test" $(BUILD)/test_masks $(BUILD)/test_ring \
               $(BUILD)/test_decode $(BUILD)/test_varlen "$(ASAN)/test_varlen --quick" "sh tests/emulate_decode.sh" \
               "sh tests/emulate_center.sh" "sh tests/io_mutants.sh" \
               "sh tests/stages.sh" "sh tests/cli.sh" "python3 tests/one_mask.py" "python3 tests/layers.py" "python3 tests/rooms.py" "python3 tests/make_targets.py" \
               "python3 tests/test_reference.py" "python3 tests/python/test_package.py" "python3 tests/python/test_decode_host.py" "python3 tests/python/test_dense_host.py" "$(ASAN)/test_cpu --quick" "$(ASAN)/test_masks --quick" \
               "$(ASAN)/test_ring --quick" "$(ASAN)/test_decode --quick" "sh tests/stages.sh $(ASAN)"

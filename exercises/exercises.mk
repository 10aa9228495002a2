# exercises/exercises.mk -- the exercises' part of the build, included by the
# top-level Makefile. It builds one checker per (exercise, folder) under
# build/exercises/ and marks one exercise:
#
#   make exercise EX=2                      mark your files in exercises/ex2/
#   make exercise EX=4 DIR=some/folder      mark the files of another folder
#
# A checker is exercises/exN/check.c linked with exercises/lib/checklib.c,
# the project's stages (as library objects) and the C files of the folder it
# marks (exercises 4 and 5 have C to write); it reads the folder's
# answers.txt / written.md. It lives at build/exercises/<folder>/check, with
# <folder> the marked folder less its leading "exercises/".
#
# `make test` runs exercises/test_exercises.sh: every checker must accept the
# reference solutions (exercises/solutions/exN/), reject the untouched stubs
# and reject each deliberately wrong answer in exercises/tests/exN-*/. The
# stubs it tests are the ones shipped, as git's HEAD has them, extracted into
# build/exercises/shipped/exN/ (exercises/shipped.sh): a learner's work in
# exercises/exN/, finished or not, compiling or not, never changes what
# `make test` builds or reports. The learner's own checker is built only by
# `make exercise`.

# Exercise n is the folder exercises/exn/ with a checker exercises/exn/check.c.
EX_NUMBERS  := $(sort $(patsubst exercises/ex%/check.c,%,$(wildcard exercises/ex*/check.c)))
EX_BUILD    := $(BUILD)/exercises
EX_CPPFLAGS  = $(CPPFLAGS) -Iexercises/lib -DEX_ROOT='"$(CURDIR)/exercises"'
EX_LIBS     := $(call lib_objs,$(BUILD),$(LINK_stage3))

# The folders each checker is built for by `make test`: the stubs as shipped,
# the solution, the test fixtures. (Yours, exercises/exN, by `make exercise`.)
EX_SHIPPED := $(EX_BUILD)/shipped
ex_dirs = $(EX_SHIPPED)/ex$(1) exercises/solutions/ex$(1) \
          $(patsubst %/,%,$(wildcard exercises/tests/ex$(1)-*/))
ex_tag  = $(if $(filter $(EX_SHIPPED)/%,$(1)),shipped/$(notdir $(1)),$(if $(filter exercises/%,$(1)),$(patsubst exercises/%,%,$(1)),custom/$(subst /,_,$(subst .,_,$(1)))))
ex_bin  = $(EX_BUILD)/$(call ex_tag,$(1))/check
# The C files of a folder; for the shipped stubs, those git's HEAD has (the
# folder itself is written at build time).
ex_git_csrc = $(filter %.c,$(notdir $(shell git ls-tree --name-only HEAD $(1)/ 2>/dev/null)))
ex_csrc = $(filter-out check.c,$(if $(filter $(EX_SHIPPED)/%,$(1)),\
            $(or $(call ex_git_csrc,exercises/$(notdir $(1))),$(notdir $(wildcard exercises/$(notdir $(1))/*.c))),\
            $(notdir $(wildcard $(1)/*.c))))
# A test fixture states only its deliberate bug: for each C file of the
# solution that the fixture does not hold itself, its code is the solution's,
# passed through the fixture's FILE.sed when there is one (ex_gen lists these).
ex_gen  = $(if $(filter exercises/tests/%,$(2)),$(filter-out $(call ex_csrc,$(2)),$(call ex_csrc,exercises/solutions/ex$(1))))

$(EX_BUILD)/lib/checklib.o: exercises/lib/checklib.c | $(BUILD)
	@mkdir -p $(@D)
	$(CC) $(EX_CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
$(EX_BUILD)/obj/ex%/check.o: exercises/ex%/check.c | $(BUILD)
	@mkdir -p $(@D)
	$(CC) $(EX_CPPFLAGS) -Iexercises/ex$* $(CFLAGS) -MMD -MP -c $< -o $@

# Link flags of one exercise's checker. Exercise 4's sees every call of the
# project's finished forwards that take a window (check.c counts them: a
# swa_forward that calls one has not done the exercise).
EX_LDFLAGS_4 := $(foreach f,flash_forward flash_attention_all_heads naive_forward naive_attention_all_heads,-Wl,--wrap=$(f))

# ex_objs(n, folder): what the checker of exercise n for folder is linked from.
ex_objs = $(EX_BUILD)/obj/ex$(1)/check.o $(EX_BUILD)/lib/checklib.o \
        $(patsubst %.c,$(EX_BUILD)/$(call ex_tag,$(2))/%.o,$(call ex_csrc,$(2))) \
        $(patsubst %.c,$(EX_BUILD)/$(call ex_tag,$(2))/gen/%.o,$(call ex_gen,$(1),$(2))) $(EX_LIBS)

# ex_checker(n, folder): the checker of exercise n, linked with folder's C files.
define ex_checker
$(call ex_bin,$(2)): $(call ex_objs,$(1),$(2))
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS) $$^ -o $$@ $$(EX_LDFLAGS_$(1)) $$(LDLIBS)
$(EX_BUILD)/$(call ex_tag,$(2))/%.o: $(2)/%.c | $(BUILD)
	@mkdir -p $$(@D)
	$$(CC) $$(EX_CPPFLAGS) -Iexercises/ex$(1) $$(CFLAGS) -MMD -MP -c $$< -o $$@
$(EX_BUILD)/$(call ex_tag,$(2))/gen/%.o: $(EX_BUILD)/$(call ex_tag,$(2))/gen/%.c
	$$(CC) $$(EX_CPPFLAGS) -Iexercises/ex$(1) $$(CFLAGS) -MMD -MP -c $$< -o $$@
# An edit that matches nothing would leave the solution as it is: refused.
$(EX_BUILD)/$(call ex_tag,$(2))/gen/%.c: exercises/solutions/ex$(1)/%.c $(wildcard $(2)/*.sed) | $(BUILD)
	@mkdir -p $$(@D)
	@if [ -f $(2)/$$*.sed ]; then \
	    sed -f $(2)/$$*.sed $$< >$$@ && ! cmp -s $$< $$@ || \
	    { echo "$(2)/$$*.sed changes nothing in $$<" >&2; rm -f $$@; exit 1; }; \
	else cp $$< $$@; fi
endef
$(foreach n,$(EX_NUMBERS),$(foreach d,$(call ex_dirs,$(n)),$(eval $(call ex_checker,$(n),$(d)))))
# The shipped stubs' C files, rewritten (only when they differ) on every
# build; listed one by one, so that no other file looks makeable from them.
EX_SHIPPED_C := $(foreach n,$(EX_NUMBERS),$(addprefix $(EX_SHIPPED)/ex$(n)/,$(call ex_csrc,$(EX_SHIPPED)/ex$(n))))
.PHONY: ex-force
$(EX_SHIPPED_C): ex-force
	@sh exercises/shipped.sh $(patsubst ex%,%,$(notdir $(@D))) $(@D)
# Kept, not deleted as intermediates: make's "rm" would otherwise print after
# the test count, and the fixtures' code is worth reading when one fails.
.SECONDARY: $(foreach n,$(EX_NUMBERS),$(foreach d,$(call ex_dirs,$(n)),\
    $(patsubst %.c,$(EX_BUILD)/$(call ex_tag,$(d))/gen/%.c,$(call ex_gen,$(n),$(d))))) $(EX_SHIPPED_C)

EX_CHECKERS := $(foreach n,$(EX_NUMBERS),$(foreach d,$(call ex_dirs,$(n)),$(call ex_bin,$(d))))

# `make exercise`: check EX (and DIR) before anything is built.
EX_DIR = $(if $(DIR),$(patsubst %/,%,$(DIR)),exercises/ex$(EX))
ifneq ($(filter exercise,$(MAKECMDGOALS)),)
  ifneq ($(words $(EX)) $(filter $(EX),$(EX_NUMBERS)),1 $(strip $(EX)))
    $(error make exercise: EX must be one of $(EX_NUMBERS) (got '$(EX)'); e.g. make exercise EX=2)
  endif
  ifeq ($(wildcard $(EX_DIR)/.),)
    $(error make exercise: no folder '$(EX_DIR)' to mark)
  endif
  ifeq ($(filter $(EX_DIR),$(call ex_dirs,$(EX))),)
    $(eval $(call ex_checker,$(EX),$(EX_DIR)))
  endif
  # What a learner reads is the checker's marks: building the checker echoes
  # no command (a compiler's error still shows, and make stops after it).
  # make V=1 exercise EX=n shows the commands; make -n lists them either way.
  ifneq ($(V),1)
    .SILENT: $(call ex_bin,$(EX_DIR)) $(call ex_objs,$(EX),$(EX_DIR))
  endif
endif

.PHONY: exercise ex-checkers
# An exercise that is not finished yet is not a build failure: the checker's
# status 1 ("some part is not right yet") ends with a line saying so and make
# exits 0, where make would otherwise close with "*** ... Error 1". Any other
# status (a crash in your C, say) is passed on. The checker itself,
# build/exercises/exN/check FOLDER, exits 0 only when every part is right.
exercise: $(call ex_bin,$(EX_DIR))        ## mark an exercise: make exercise EX=n [DIR=folder]
	@$< $(EX_DIR); rc=$$?; \
	if [ $$rc -eq 1 ]; then echo "not finished yet: edit the parts above that are not right, then make exercise EX=$(EX)$(if $(DIR), DIR=$(DIR)) again"; \
	elif [ $$rc -ne 0 ]; then echo "make exercise: the checker $< stopped with status $$rc" >&2; exit $$rc; fi

ex-checkers: $(EX_CHECKERS)         ## build every exercise checker

TEST_SUITES += "sh exercises/test_exercises.sh"
TEST_DEPS   += $(EX_CHECKERS)

-include $(wildcard $(EX_BUILD)/*/*.d $(EX_BUILD)/*/*/*.d $(EX_BUILD)/*/*/*/*.d)

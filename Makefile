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

.PHONY: all cpu help clean test bench sweep
all: cpu                                  ## build every stage
cpu: stage1 stage2 stage3                 ## build the CPU stages

help:                                     ## list the targets
	@grep -E '^[a-z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 24

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

clean:                                    ## remove build outputs
	rm -rf $(BUILD) stage1 stage2 stage3 stage4 stage5 stage6

-include $(wildcard $(BUILD)/*.d)

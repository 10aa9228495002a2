# tests/fa_suite/fa_suite.mk -- FlashAttention's own test suite as an
# acceptance test of flashattn_stages (included by the top-level Makefile).
#
#   make fa-suite-fetch        FlashAttention's tests/test_flash_attn.py at
#                              v2.8.3 into third_party/ (ignored; FA_MIRROR=PATH
#                              takes a local mirror, else git over the network)
#   make fa-suite-gpu          a fixed sample (FA_SUITE_SAMPLE cases, seed
#                              FA_SUITE_SEED), under 10 minutes on an H200
#   make fa-suite-full-gpu     every case but those needing dropout, ALiBi or
#                              softcap
# Both log provenance and per-function counts to $(GPU_DATA)/ and say in one
# line why they skip where there is no GPU, torch or suite file
# (tests/fa_suite/run.sh). make gpu-test runs the sample as one suite line.
FA_SUITE_SAMPLE ?= 832
FA_SUITE_SEED ?= 0
FA_SUITE_ARGS = --fa-sample $(FA_SUITE_SAMPLE) --fa-seed $(FA_SUITE_SEED)
FA_SUITE_LIB := $(if $(GPU_MISSING),,$(BUILD)/libfa_gpu.so)
FA_INTERFACE_TESTS := python3 tests/gpu/test_fa_interface_op.py
TEST_SUITES += "$(FA_INTERFACE_TESTS)" "sh tests/fa_suite/run.sh --protocol $(FA_SUITE_ARGS)"
GPU_TEST_EXTRA += "$(FA_INTERFACE_TESTS)" "sh tests/fa_suite/run.sh --protocol $(FA_SUITE_ARGS)"

.PHONY: fa-suite-fetch fa-suite-gpu fa-suite-full-gpu
fa-suite-fetch:                           ## FlashAttention's own tests (v2.8.3) into third_party/ (FA_MIRROR=PATH: from a local mirror)
	sh tests/fa_suite/fetch.sh

fa-suite-gpu: $(FA_SUITE_LIB)             ## FlashAttention's own test suite through flashattn_stages, a fixed sample (< 10 min); log in data/gpu/fa_suite_sample.log (GPU_DATA)
	@sh tests/fa_suite/run.sh $(FA_SUITE_ARGS) --fa-log $(GPU_DATA)/fa_suite_sample.log

fa-suite-full-gpu: $(FA_SUITE_LIB)        ## FlashAttention's whole test suite through flashattn_stages (slow); log in data/gpu/fa_suite_full.log (GPU_DATA)
	@sh tests/fa_suite/run.sh --fa-log $(GPU_DATA)/fa_suite_full.log

# paper/paper.mk -- the woven paper (included by the top-level Makefile).
#
#   make figures   every figure, redrawn from data/ into build/figures/
#                  (NAME.pdf for LaTeX, NAME.svg for HTML); figures whose data
#                  is absent (GPU data on a machine without a GPU) are skipped,
#                  each named with its absent file in build/figures/SKIPPED
#                  (no such file when every figure was drawn)
#   make paper     figures, then the claims table, then
#                  build/paper/flashattention.pdf (pdflatex) and
#                  build/paper/flashattention.html (standalone, one file);
#                  only when a file it is made from (PAPER_INPUTS) is newer
#                  than the last build: a second `make paper` (or `make
#                  test`) with nothing changed does nothing
#   make paper-solutions   the same, with the exercises solved (the
#                  instructor's edition): flashattention-solutions.pdf/.html
#
# Needs pandoc, pdflatex (texlive), gnuplot and python3: `make setup`.
# Listings come from the sources through paper/include-code.lua; measured
# numbers in the text come from build/paper/values.tsv (paper/gen/claims.py);
# the appendix's provenance table from data/ itself (paper/gen/data_sources.py).

PAPER_DIR  := $(BUILD)/paper
FIG_DIR    := $(BUILD)/figures
CHAPTERS   := $(sort $(wildcard chapters/*.md))
PANDOC_COMMON := --metadata-file=paper/metadata.yaml --lua-filter=paper/include-code.lua \
                 --metadata=values:$(PAPER_DIR)/values.tsv --number-sections --toc-depth=2 --resource-path=.

.PHONY: figures paper paper-data paper-solutions

# Every file the book is made from: the chapters, the generators, the
# figures' scripts, data/, the exercises, and the sources its listings are
# cut from (and the stages paper-data runs). A build whose stamp is newer
# than all of them is up to date. Coarse on purpose: any change rebuilds
# the whole book (a minute), none rebuilds nothing. A file deleted is not
# seen as a change: rm build/figures/MANIFEST (or make clean) then.
# (Not what the tests write there each run: Python's caches, the package's
# egg-info; nor a learner's work in exercises/exN/ -- answers, written
# answers, the functions to complete: the book weaves in only each
# exercise's statement, its checker and the reference solutions.)
PAPER_INPUTS := $(shell find chapters paper figures data src kernels core python scripts tests \
                  -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' 2>/dev/null) \
                $(shell find exercises -type f \( -path 'exercises/solutions/*' -o -name statement.md \
                  -o -name check.c -o -name README.md \) 2>/dev/null) \
                stage2 stage3 stage6
PAPER_STAMP := $(PAPER_DIR)/.built
SOLUTIONS_STAMP := $(PAPER_DIR)/.built-solutions

# Inputs the figures and the claims need beyond data/: the GPU tables (only
# when data/gpu/ has them; the training comparison's table from
# data/gpu/train_loss.csv likewise), the exactness errors when data/cpu/ has none yet
# (the property tests write them), and a causal sweep to set beside
# data/cpu/block_sweep.csv when data/cpu/ has none.
paper-data: stage2 stage3 stage6         ## what the figures and claims read beyond data/: build/paper/ (the GPU tables, exactness and causal sweep where data/ has none)
	$(PAPER_DATA_RECIPE)

define PAPER_DATA_RECIPE
	@mkdir -p $(PAPER_DIR)
	@python3 paper/gen/paper_gpu.py --out $(PAPER_DIR)
	@python3 scripts/gpu/train_compare.py --summary $(PAPER_DIR)/train_loss.md
	@python3 scripts/gpu/train_compare.py --compare-summary $(PAPER_DIR)/train_compare.md
	@python3 scripts/gpu/bench_op_overhead.py --summary $(PAPER_DIR)/op_overhead.md
	@python3 paper/gen/paper_decode.py --out $(PAPER_DIR)
	@python3 paper/gen/paper_bwd3.py --out $(PAPER_DIR)
	@if [ ! -s data/cpu/exactness.csv ]; then \
	    if [ -x $(BUILD)/test_cpu ]; then \
	        echo "paper: no data/cpu/exactness.csv; running $(BUILD)/test_cpu --csv $(PAPER_DIR)/exactness.csv"; \
	        $(BUILD)/test_cpu --csv $(PAPER_DIR)/exactness.csv > $(PAPER_DIR)/test_cpu.log 2>&1 || true; \
	    else rm -f $(PAPER_DIR)/exactness.csv; echo "paper: no exactness data (no $(BUILD)/test_cpu)"; fi; \
	fi
	@if [ ! -s data/cpu/causal_sweep.csv ] && [ ! -s $(PAPER_DIR)/causal_sweep.csv -o stage3 -nt $(PAPER_DIR)/causal_sweep.csv ]; then \
	    echo "paper: no data/cpu/causal_sweep.csv; ./stage3 --sweep blocks --causal --csv $(PAPER_DIR)/causal_sweep.csv"; \
	    ./stage3 --sweep blocks --causal --csv $(PAPER_DIR)/causal_sweep.csv > /dev/null 2>&1; \
	fi
endef

# The figures, redrawn (after paper-data) when an input changed; the
# MANIFEST paper/gen/paper_figures.sh writes last is their stamp.
figures: $(FIG_DIR)/MANIFEST             ## every figure of the paper, from data/ (build/figures)
$(FIG_DIR)/MANIFEST: $(PAPER_INPUTS)
	$(PAPER_DATA_RECIPE)
	@sh paper/gen/paper_figures.sh $(FIG_DIR)

paper: $(PAPER_STAMP)                    ## the woven paper: build/paper/flashattention.pdf and .html (rebuilt when an input changed)
$(PAPER_STAMP): $(FIG_DIR)/MANIFEST
	@rm -f $@
	@python3 paper/gen/claims.py --out $(PAPER_DIR)
	@python3 paper/gen/data_sources.py --out $(PAPER_DIR)
	pandoc $(PANDOC_COMMON) --toc --pdf-engine=pdflatex --default-image-extension=pdf \
	    $(CHAPTERS) -o $(PAPER_DIR)/flashattention.pdf
	pandoc $(PANDOC_COMMON) --toc --standalone --self-contained --mathml --css=paper/paper.css \
	    --default-image-extension=svg $(CHAPTERS) -o $(PAPER_DIR)/flashattention.html
	@echo "paper: wrote $(PAPER_DIR)/flashattention.pdf and $(PAPER_DIR)/flashattention.html"
	@touch $@

# The instructor's edition: the same document, with each exercise's reference
# solution, model answers and checker's rules (paper/include-code.lua reads
# them from exercises/solutions/ and exercises/exN/check.c).
SOLUTIONS_META := --metadata=solutions:true --metadata=subtitle:"Instructor's edition, with the exercises solved"
paper-solutions: $(SOLUTIONS_STAMP)     ## the instructor's edition: build/paper/flashattention-solutions.pdf (and .html)
$(SOLUTIONS_STAMP): $(FIG_DIR)/MANIFEST
	@rm -f $@
	@python3 paper/gen/claims.py --out $(PAPER_DIR)
	@python3 paper/gen/data_sources.py --out $(PAPER_DIR)
	pandoc $(PANDOC_COMMON) $(SOLUTIONS_META) --toc --pdf-engine=pdflatex --default-image-extension=pdf \
	    $(CHAPTERS) -o $(PAPER_DIR)/flashattention-solutions.pdf
	pandoc $(PANDOC_COMMON) $(SOLUTIONS_META) --toc --standalone --self-contained --mathml --css=paper/paper.css \
	    --default-image-extension=svg $(CHAPTERS) -o $(PAPER_DIR)/flashattention-solutions.html
	@echo "paper: wrote $(PAPER_DIR)/flashattention-solutions.pdf and $(PAPER_DIR)/flashattention-solutions.html"
	@touch $@

# The paper's own test suite: builds the paper and checks it (SKIP lines
# when pandoc or pdflatex is missing).
TEST_SUITES += "sh tests/paper.sh"

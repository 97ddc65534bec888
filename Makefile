# rag-experiments — set-up and everyday commands. `make run` and `make test` are all a new
# machine needs: each creates .venv and installs on first use (`make run` only what the main
# job needs, `make test` the test tools and extras too). `make test` is the fast loop
# (tests marked slow left out); `make test-all` runs everything and is what .ci/run calls.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
STAMP_RUN := $(VENV)/.installed-run
EXTRAS ?= dev,docs,ray,slurm,server
ARGS ?=
# The main job evaluates a stratified subset of the bundled sample so it finishes in minutes on
# 2 CPU cores with the embedded 135M model as generator and judge; MAX_SAMPLES=null = all 69.
MAX_SAMPLES ?= 8
PYTEST_ARGS ?=

.PHONY: install install-run run test test-all lint docs sweep mlflow-ui clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# Two stamps: `make run` installs only what the main job needs (the package and its
# dependencies, no extras); `make install`, `make test` and the other developer targets add the
# test, docs, ray, slurm and server extras. One extra by name: .venv/bin/pip install -c
# constraints.txt -e ".[ray]".
$(STAMP_RUN): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make: installing into $(VENV): pip, then torch (CPU build, from the local disk)"
	$(PIP) install --quiet --upgrade pip
	@# The CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	$(PIP) install --quiet torch==2.13.0
	@# llama-cpp-python has no wheel on the registry: pip compiles llama.cpp (C++) the first
	@# time; pip's cache keeps the wheel for later venvs. Not quiet, so its progress shows.
	@echo "make: building llama-cpp-python (the embedded model's runtime) from source: C++, about 6 minutes on 2 idle cores (far longer on a busy machine), once; pip prints a line while it runs"
	$(PIP) install --progress-bar off -c constraints.txt llama-cpp-python
	@echo "make: installing rag-experiments and the main job's other dependencies"
	$(PIP) install --quiet -c constraints.txt -e .
	touch $(STAMP_RUN)

$(STAMP): $(STAMP_RUN)
	@echo "make: adding the extras $(EXTRAS) (test tools, docs, launchers, server driver)"
	$(PIP) install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

install-run: $(STAMP_RUN)  ## create .venv with only what `make run` needs (no test tools)

install: $(STAMP)  ## create .venv and install the package with its test tools and all extras

run: install-run  ## run the main job on the bundled sample with the embedded defaults (ARGS=overrides)
	$(VENV)/bin/rag-exp run max_samples=$(MAX_SAMPLES) $(ARGS)

test: install  ## the fast loop: every test not marked slow, a few minutes (PYTEST_ARGS=…)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: install  ## the whole suite, slow tests included; what CI runs (PYTEST_ARGS=…)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install  ## ruff check + ruff format --check over the tree (config in pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The docs site (mkdocs.yml: docs/ -> site/). --strict: a broken link or anchor fails the build;
# the hook docs/gen_ref.py generates the config and CLI references from the code at every build.
docs: install  ## build the docs site into site/ (mkdocs build --strict; open site/index.html)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# `make sweep` scores retrieval only by default (SWEEP_ARGS: doc- and chunk-level ranking metrics
# and the keyword coverage of the top-k contexts; no model but the embedder) on all 69 questions:
# about 2 minutes on 2 idle cores (102 s of CPU measured). Judged answers take far longer with the
# embedded 135M model as generator and judge: SWEEP_ARGS="metrics=custom max_samples=8" is four
# times `make run` (tens of minutes), all 69 questions judged over 2 hours.
SWEEP_ARGS ?= metrics=retrieval

sweep: install-run  ## 2x2 chunker x chunk-size sweep, retrieval metrics, about 2 min (SWEEP_ARGS=…)
	@echo "make sweep: 4 jobs, $(SWEEP_ARGS), about 2 min on 2 cores by default; Ctrl-C ends the runs KILLED"
	$(VENV)/bin/rag-exp run -m chunker=semantic,fixed chunker.size=256,512 $(SWEEP_ARGS) $(ARGS)

mlflow-ui: install-run  ## browse results: MLflow UI on http://127.0.0.1:5000 over ./mlruns.db
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///mlruns.db --host 127.0.0.1 --port 5000

clean:  ## remove caches and outputs (keeps .venv and mlruns.db)
	rm -rf .cache outputs multirun .pytest_cache site

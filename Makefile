# rag-experiments — set-up and everyday commands. `make run` and `make test` are all a new
# machine needs: each creates .venv and installs on first use. `make test` is the fast loop
# (tests marked slow left out); `make test-all` runs everything and is what .ci/run calls.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
ARGS ?=
# The main job evaluates a stratified subset of the bundled sample so it finishes in minutes on
# 2 CPU cores with the embedded 135M model as generator and judge; MAX_SAMPLES=null = all 69.
MAX_SAMPLES ?= 8
PYTEST_ARGS ?=

.PHONY: install run test test-all lint docs sweep mlflow-ui clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	@# The CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	$(PIP) install --quiet torch==2.13.0
	@# llama-cpp-python builds from source the first time (about 6 minutes).
	$(PIP) install --quiet -c constraints.txt -e ".[dev,docs,ray,slurm,server]"
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install the package with its test tools

run: install  ## run the main job on the bundled sample with the embedded defaults (ARGS=overrides)
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

sweep: install  ## 2x2 chunker x chunk-size sweep, retrieval metrics, about 2 min (SWEEP_ARGS=…)
	@echo "make sweep: 4 jobs, $(SWEEP_ARGS), about 2 min on 2 cores by default; Ctrl-C ends the runs KILLED"
	$(VENV)/bin/rag-exp run -m chunker=semantic,fixed chunker.size=256,512 $(SWEEP_ARGS) $(ARGS)

mlflow-ui: install  ## browse results: MLflow UI on http://127.0.0.1:5000 over ./mlruns.db
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///mlruns.db --host 127.0.0.1 --port 5000

clean:  ## remove caches and outputs (keeps .venv and mlruns.db)
	rm -rf .cache outputs multirun .pytest_cache site

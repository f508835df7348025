# The two commands a newcomer runs (see README):
#   make demo   install mnemex in .venv and run it on a bundled sample of agent memories
#   make test   install everything the tests need and run lint, types and the test suite
# and, for CI (.ci/run) and releases:
#   make test-torch   the tests that need PyTorch (the reference model), in .venv-torch
#   make test-ui      the browser tests of mnemex ui (Playwright, the system's Chromium), in .venv-ui
#   make docs         build the documentation site (docs/ -> site/) in strict mode
#   make dist-check   build the sdist and wheel, check them, install them as the README says
#   make .venv-peers  the peers benchmarks/bench_peers.py compares against, a venv each
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
VENV_TORCH ?= .venv-torch
VENV_UI ?= .venv-ui
VENV_DOCS ?= .venv-docs
# basic-memory needs Python >= 3.12.
PYTHON312 ?= python3.12
MNEMEX := $(BIN)/mnemex --db .demo/memories.db
SAMPLE := src/mnemex/data/sample_memories.jsonl
# The evaluation data (see README, "Evaluation"): beir/scifact/ and locomo/locomo10-dev.json.
DATA ?= ../shared/data

.PHONY: .venv-peers demo test lint typecheck pytest test-torch test-ui docs docs-reference dist-check bench eval clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embed,mcp]"
	touch $@

# Every extra the tests need: not PyTorch (tests/pytorch: make test-torch), not the plots of
# the benchmarks (.bench), not the documentation site's (.venv-docs).
$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embed,ann,eval,mcp,watch,postgres,ui,dev]"
	touch $@ $(VENV)/.core

$(VENV)/.bench: pyproject.toml $(VENV)/.dev
	$(BIN)/pip install --quiet -e ".[bench]"
	touch $@

# MkDocs and its theme, apart: the tests do not need them.
$(VENV_DOCS)/.docs: pyproject.toml
	$(PYTHON) -m venv $(VENV_DOCS)
	$(VENV_DOCS)/bin/pip install --quiet -e ".[docs]"
	touch $@

# torch first, pinned (pyproject.toml's pin; unpinned, it resolves to a multi-GB CUDA build).
$(VENV_TORCH)/.torch: pyproject.toml
	$(PYTHON) -m venv $(VENV_TORCH)
	$(VENV_TORCH)/bin/pip install --quiet torch==2.13.0
	$(VENV_TORCH)/bin/pip install --quiet -e ".[embed,dev,reference]"
	touch $@

# The peers of benchmarks/bench_peers.py, pinned to the versions measured, a venv each (their
# dependencies clash: basic-memory pins fastapi and litellm, txtai needs PyTorch). numpy for
# the runner; torch first, pinned (unpinned, it resolves to a multi-GB CUDA build).
.venv-peers: .venv-peers-memsearch/.peer .venv-peers-basic/.peer .venv-peers-txtai/.peer

.venv-peers-memsearch/.peer:
	$(PYTHON) -m venv .venv-peers-memsearch
	.venv-peers-memsearch/bin/pip install --quiet memsearch==0.4.23 milvus-lite==3.2.2 numpy
	touch $@

# basic-memory's sqlite-vec needs an sqlite3 that loads extensions: pysqlite3-binary.
.venv-peers-basic/.peer:
	$(PYTHON312) -m venv .venv-peers-basic
	.venv-peers-basic/bin/pip install --quiet basic-memory==0.24.1 pysqlite3-binary numpy
	touch $@

.venv-peers-txtai/.peer:
	$(PYTHON) -m venv .venv-peers-txtai
	.venv-peers-txtai/bin/pip install --quiet torch==2.13.0
	.venv-peers-txtai/bin/pip install --quiet txtai==9.14.0 faiss-cpu numpy
	touch $@

demo: $(VENV)/.core
	rm -rf .demo
	$(MNEMEX) import $(SAMPLE)
	$(MNEMEX) stats
	@echo; echo '$$ mnemex search "why were invoice PDFs slow?"'
	@$(MNEMEX) search "why were invoice PDFs slow?"
	@echo; echo '$$ mnemex search "how do users sign in now?" --limit 3   # no shared words: the vector arm finds it'
	@$(MNEMEX) search "how do users sign in now?" --limit 3
	@echo; echo '$$ mnemex search "reconciliation bug with refunds" --limit 3 --explain'
	@$(MNEMEX) search "reconciliation bug with refunds" --limit 3 --explain
	@echo; echo '$$ mnemex search "发票" --limit 2'
	@$(MNEMEX) search "发票" --limit 2
	@echo; echo '$$ mnemex search "OIDC cutover" --kind decision --json'
	@$(MNEMEX) search "OIDC cutover" --kind decision --limit 2 --json
	@echo; echo '$$ mnemex search "who owns billing?" --limit 2   # matching relations come after the memories'
	@$(MNEMEX) search "who owns billing?" --limit 2
	@echo; echo '$$ mnemex recall "fix the nightly reconciliation job" --budget 300'
	@$(MNEMEX) recall "fix the nightly reconciliation job" --budget 300
	@echo; echo '$$ mnemex timeline --limit 8'
	@$(MNEMEX) timeline --limit 8

test: lint typecheck pytest

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_function_length.py

typecheck: $(VENV)/.dev
	$(BIN)/mypy

pytest: $(VENV)/.dev
	$(BIN)/pytest

# Playwright apart too (165 MB): the tests marked browser drive the system's Chromium.
$(VENV_UI)/.ui: pyproject.toml
	$(PYTHON) -m venv $(VENV_UI)
	$(VENV_UI)/bin/pip install --quiet -e ".[embed,ui,postgres,eval,dev,browser]"
	touch $@

test-ui: $(VENV_UI)/.ui
	$(VENV_UI)/bin/pytest --browser -m browser tests/ui

# The reference model and the sentence-transformers provider (tests marked torch).
test-torch: $(VENV_TORCH)/.torch
	$(VENV_TORCH)/bin/pytest --torch -m torch tests/pytorch

# The documentation site from docs/ into site/; a broken link or reference fails.
docs: $(VENV_DOCS)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV_DOCS)/bin/mkdocs build --strict

# The command and configuration references, from the click commands and the settings.
docs-reference: $(VENV)/.core
	$(BIN)/python scripts/docs_reference.py

dist-check:
	PYTHON=$(PYTHON) scripts/check_dist.sh

bench: $(VENV)/.bench
	$(BIN)/python benchmarks/bench_hybrid.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_workspace.py --model-files 200
	$(BIN)/python benchmarks/eval_quality.py

eval: $(VENV)/.dev
	$(BIN)/mnemex eval beir $(DATA)/beir/scifact
	$(BIN)/mnemex eval locomo $(DATA)/locomo/locomo10-dev.json

clean:
	rm -rf $(VENV) $(VENV_TORCH) $(VENV_UI) $(VENV_DOCS) .venv-peers-* .demo .pytest_cache .mypy_cache .ruff_cache build dist site

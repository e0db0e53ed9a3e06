# Each target creates the environment it needs: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BANK   ?= ../shared/banks/last_letters_gpt35.jsonl

.PHONY: demo test lint bench clean system

# Debian packages the tests use: bubblewrap is the sandbox's first tier. Installed when missing and we are
# root (CI, containers); otherwise say what is missing: the sandbox then falls back to Landlock.
SYSTEM_PACKAGES := bubblewrap
system:
	@missing=""; \
	for pkg in $(SYSTEM_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "note: missing Debian packages:$$missing (apt-get install$$missing); their tests skip"; fi; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# llama.cpp is built from source for the embedded model; skip the parts the Python bindings never load.
export CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(BIN)/retryctl bench $(BANK) --policy default --policy ac-beta --policy esc --policy sc-40

lint: $(VENV)/.installed
	$(BIN)/ruff check retryctl tests bench
	$(BIN)/ruff format --check retryctl tests bench
	$(BIN)/mypy

# pytest exits 5 when it collected no test: that is a failure here, as is any other non-zero code.
test: system lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Every benchmark figure the README quotes, printed in one run.
bench: $(VENV)/.installed
	$(BIN)/python bench/stopping_policies.py --bank $(BANK) --strata
	$(BIN)/python bench/decide_overhead.py
	$(BIN)/python bench/audit_verify.py
	$(BIN)/python bench/sandbox_latency.py
	$(BIN)/python bench/embedded_tokens.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

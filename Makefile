# Each target creates the environment it needs: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BANK   ?= ../shared/banks/last_letters_gpt35.jsonl

.PHONY: demo test lint bench screenshots clean system services services-stop

# Debian packages: bubblewrap is the sandbox's first tier (without it the sandbox falls back to Landlock);
# chromium renders the audit report in its test; redis-server and postgresql serve the many-workers tests
# (`make services` starts them). Installed when missing and we are root (CI, containers); otherwise we
# say what is missing and the tests that need it skip (under CI=true they fail instead).
SYSTEM_PACKAGES := bubblewrap chromium redis-server postgresql
system:
	@missing=""; \
	for pkg in $(SYSTEM_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "note: missing Debian packages:$$missing (apt-get install$$missing); their tests skip"; fi; \
	fi

# Redis and PostgreSQL for the many-workers tests (docs/workers.md), on 127.0.0.1 and on ports of their
# own, so an instance the Debian packages may have started on the default ports is left alone. Idempotent:
# a server that answers is kept; when none does, PostgreSQL starts on a fresh cluster (test data only, and
# no stale lock file of a killed server). PostgreSQL refuses to run as root: root runs it as postgres.
# Trust authentication is safe only because it listens on 127.0.0.1 alone. The tests read the two URLs.
REDIS_PORT    ?= 6390
POSTGRES_PORT ?= 5490
SERVICES_DIR  ?= /tmp/retryctl-services
export RETRYCTL_REDIS_URL    ?= redis://127.0.0.1:$(REDIS_PORT)/0
export RETRYCTL_POSTGRES_URL ?= postgresql://postgres@127.0.0.1:$(POSTGRES_PORT)/postgres
PG_BIN = $$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
PG_AS  = $$([ "$$(id -u)" = 0 ] && echo runuser -u postgres --)

services: system
	@mkdir -p $(SERVICES_DIR)
	@if ! command -v redis-server >/dev/null; then echo "note: redis-server missing; the Redis tests skip"; \
	elif redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1; then :; \
	else \
	  redis-server --bind 127.0.0.1 --port $(REDIS_PORT) --daemonize yes --save '' --appendonly no \
	    --dir $(SERVICES_DIR) --pidfile $(SERVICES_DIR)/redis.pid --logfile $(SERVICES_DIR)/redis.log; \
	  for i in $$(seq 50); do redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	  redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null || { cat $(SERVICES_DIR)/redis.log; exit 1; }; \
	  echo "redis on 127.0.0.1:$(REDIS_PORT)"; \
	fi
	@pg=$(PG_BIN); as="$(PG_AS)"; data=$(SERVICES_DIR)/postgres; \
	if [ -z "$$pg" ]; then echo "note: PostgreSQL missing; the Postgres tests skip"; \
	elif $$pg/pg_isready -q -h 127.0.0.1 -p $(POSTGRES_PORT); then :; \
	else \
	  rm -rf $$data; \
	  if [ -n "$$as" ]; then install -d -m 700 -o postgres -g postgres $$data; else install -d -m 700 $$data; fi; \
	  $$as $$pg/initdb -D $$data -U postgres --auth=trust -E UTF8 \
	    >$(SERVICES_DIR)/initdb.log || { cat $(SERVICES_DIR)/initdb.log; exit 1; }; \
	  $$as $$pg/pg_ctl -D $$data -l $$data/server.log -w -t 60 \
	    -o "-c listen_addresses=127.0.0.1 -p $(POSTGRES_PORT) -k $$data" start >/dev/null \
	    || { cat $$data/server.log; exit 1; }; \
	  echo "postgres on 127.0.0.1:$(POSTGRES_PORT)"; \
	fi

services-stop:
	-@redis-cli -h 127.0.0.1 -p $(REDIS_PORT) shutdown nosave 2>/dev/null
	-@pg=$(PG_BIN); [ -z "$$pg" ] || $(PG_AS) $$pg/pg_ctl -D $(SERVICES_DIR)/postgres -m fast stop

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# llama.cpp is built from source for the embedded model, for a fixed instruction set (x86-64-v3: AVX2, FMA,
# F16C, BMI2) rather than the build host's CPUID: a CPU may report what its VM cannot run (AMX here, where
# a native build dies with SIGILL), and a venv may be copied to another host. Parts the Python bindings
# never load are skipped. Override LLAMA_CMAKE_ARGS for an older CPU (docs/models.md).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
export CMAKE_ARGS := $(LLAMA_CMAKE_ARGS) -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF
# The range of pyproject.toml's `local` extra (and of REBUILD_HINT in retryctl/models/_build_check.py).
LLAMA_SPEC := llama-cpp-python>=0.3.7,<0.4
# pip's wheel cache would reuse a wheel built earlier with other flags; ours is keyed by the flags and
# the range instead.
LLAMA_WHEELS := $(HOME)/.cache/retryctl/llama-wheels/$(shell printf '%s' '$(CMAKE_ARGS) $(LLAMA_SPEC)' | sha256sum | cut -c1-16)
LLAMA_PIN = llama-cpp-python==$$(ls $(LLAMA_WHEELS) | sed -n 's/^llama_cpp_python-\([^-]*\)-.*/\1/p' | sort -V | tail -n 1)
INSTALL_LOCAL = $(BIN)/python -m pip install --quiet --find-links $(LLAMA_WHEELS) --only-binary llama-cpp-python

$(LLAMA_WHEELS)/.built:
	@echo "building llama-cpp-python with CMAKE_ARGS=$(CMAKE_ARGS) (about 5 minutes, once)"
	$(PYTHON) -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python -w $(LLAMA_WHEELS) '$(LLAMA_SPEC)'
	touch $@

$(VENV)/.installed-demo: pyproject.toml $(LLAMA_WHEELS)/.built | $(BIN)/python
	$(INSTALL_LOCAL) -e '.[local]' "$(LLAMA_PIN)"
	touch $@

$(VENV)/.installed: pyproject.toml $(LLAMA_WHEELS)/.built | $(BIN)/python
	$(INSTALL_LOCAL) -e '.[dev]' "$(LLAMA_PIN)"
	touch $@ $(VENV)/.installed-demo

# The demo agent, offline on the embedded model; make demo Q="What is 17 * 23?" asks your own question.
# The demo needs only the sandbox's package (a target-specific value reaches the `system` prerequisite).
demo: SYSTEM_PACKAGES := bubblewrap
# An honest abstention (3: stopped, 4: needs a person) is a demo that ran: only other codes fail make.
demo: system $(VENV)/.installed-demo
	@$(BIN)/retryctl demo $(if $(Q),"$(Q)",); rc=$$?; \
	if [ $$rc -eq 3 ] || [ $$rc -eq 4 ]; then echo "(the controller abstained: exit $$rc, docs/demo.md)"; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi

lint: $(VENV)/.installed
	$(BIN)/ruff check retryctl tests bench
	$(BIN)/ruff format --check retryctl tests bench
	$(BIN)/mypy

# pytest exits 5 when it collected no test: that is a failure here, as is any other non-zero code.
test: system services lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Every benchmark figure the README quotes, printed in one run.
bench: $(VENV)/.installed
	$(BIN)/python bench/harness.py --bank $(BANK)

# The pictures in docs/img/: every chart panel of the audit, eval and sweep reports as headless Chromium
# draws it, from a small real batch and sweep of the embedded model and a kept eval run (about 7 minutes).
screenshots: SYSTEM_PACKAGES := chromium
screenshots: system $(VENV)/.installed
	$(BIN)/python bench/screenshots.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

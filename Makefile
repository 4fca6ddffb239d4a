# payorch: `make run` serves on an embedded PostgreSQL for local development (webhooks to this
# machine allowed: webhooks.allow_loopback), `make dev-receiver` starts a webhook receiver beside it
# (PAYORCH_DEV_RECEIVER_SECRET=whsec_... to verify signatures), `make test` runs lint, types and the tests,
# `make bench` prints payorch's speed scenarios, each figure next to its goal (PASS or MISS): session
# creates/s and reads/s with latency against a bare Quart-Trio endpoint, the same with `payorch serve
# --workers` 1 and 2 against the bare endpoint on as many workers, creates due at a steady 50,
# 100 and 200/s (open loop), creates beside a slow provider,
# 10,000 applications touched once then idle, webhook latency, a list's pages at a million sessions,
# other merchants' creates beside floods of deep pages and forged provider events, other merchants'
# creates and webhooks beside a login flood from 40 addresses, a webhook backlog, backtest loops and
# a routing flood (neighbours), routing quality in a simulation and the cost of a routing decision,
# a reconciliation of 100,000 payments beside others' creates, and payments search, deep pages and
# CSV export over 100,000 sessions; `make soak` loads payorch for 10 minutes.
# Each creates .venv and installs what it needs on a machine that has only Python 3.11: `make run` and
# `make migrate` payorch and its runtime dependencies only, the others the test and lint tools too.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
RUNTIME := $(VENV)/.runtime-stamp
STAMP   := $(VENV)/.installed-stamp

.PHONY: run dev-receiver test lint typecheck unit migrate bench soak clean

# .venv is made without pip (ensurepip alone takes about 6 s): the Python that runs make installs uv
# into it (pip's --python), and uv installs the rest, compiling its bytecode as pip does (else every
# test worker compiles the same modules at once as it starts). `make test` installs payorch and the
# test and lint tools in one step, so the bytecode is compiled once: about 22 s on a fresh clone,
# where pip alone takes about a minute. Should that pip be too old for --python, .venv gets its own
# pip; should uv not install or not succeed, pip installs the same.
define install
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	{ test -x $(BIN)/uv || $(PYTHON) -m pip --python $(BIN)/python install --quiet uv \
		|| { $(BIN)/python -m ensurepip --default-pip > /dev/null && $(BIN)/python -m pip install --quiet uv; }; } \
		&& $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $(1) \
		|| { { $(BIN)/python -m pip --version > /dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip > /dev/null; } \
			&& $(BIN)/python -m pip install --quiet $(1); }
endef

$(RUNTIME): pyproject.toml
	$(call install,-e .)
	touch $(RUNTIME)

# payorch and its runtime dependencies come with the test and lint tools: the runtime is installed too.
$(STAMP): pyproject.toml
	$(call install,-e '.[dev]')
	touch $(RUNTIME) $(STAMP)

# Development on one machine: webhook URLs on loopback allowed, the development CA trusted, unless
# the environment says otherwise (payorch refuses it unless it is reached from this machine only).
run: $(RUNTIME)
	PAYORCH_WEBHOOKS__ALLOW_LOOPBACK="$${PAYORCH_WEBHOOKS__ALLOW_LOOPBACK:-true}" $(BIN)/payorch serve

# `make dev-receiver PORT=9000` for another port than 8787.
dev-receiver: $(RUNTIME)
	$(BIN)/payorch dev-receiver $(if $(PORT),--port $(PORT))

migrate: $(RUNTIME)
	$(BIN)/payorch migrate

lint: $(STAMP)
	$(BIN)/ruff check payorch tests $(wildcard bench)
	$(BIN)/ruff format --check payorch tests $(wildcard bench)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Bytecode written and kept (PYTHONDONTWRITEBYTECODE emptied, should the environment set it): each
# test worker and each process a test starts would otherwise compile payorch and the tests again.
unit: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

# Lint and the type check run beside the tests, their reports printed after the tests' summary: each
# keeps one core busy for seconds in which the tests leave some idle.
test: $(STAMP)
	@$(MAKE) --no-print-directory lint typecheck > $(VENV)/checks.log 2>&1 & checks=$$!; \
	$(MAKE) --no-print-directory unit; tests=$$?; \
	wait $$checks; checked=$$?; cat $(VENV)/checks.log; \
	if [ $$checked != 0 ]; then echo "make test: lint or the type check failed (above)" >&2; fi; \
	[ $$tests = 0 ] && [ $$checked = 0 ]

bench: $(STAMP)
	$(BIN)/python -m bench

soak: $(STAMP)
	$(BIN)/python -m bench.soak

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache *.egg-info

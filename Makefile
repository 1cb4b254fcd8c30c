# kbqe_dagster — the two Quick start commands are `make demo` and `make test`.
# Everything they need is installed here: the Python environment (.venv), and on first use
# the local stack's downloads (Kafka and Apicurio from Maven Central, into .kbqe-local/).

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install kernel kernel-check demo lint test test-unit stack-up stack-down stack-status dev validate bench bench-latency faults soak clean-local

install: $(STAMP)

$(STAMP): pyproject.toml kernel/Cargo.toml kernel/pyproject.toml $(wildcard kernel/src/*.rs)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11 (or run make PYTHON=/path/to/python3.11)"; exit 1; }
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17 JDK (Debian: apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found: install Maven (Debian: apt-get install maven)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@$(MAKE) --no-print-directory kernel
	touch $(STAMP)

# The optional native stage kernel (kernel/, Rust + PyO3): built with the machine's cargo,
# never a downloaded toolchain (MATURIN_NO_INSTALL_RUST). Without cargo, or with KERNEL=off,
# staging uses the Python path and everything works.
KERNEL ?= on
kernel:
	@if [ "$(KERNEL)" = off ]; then \
	  echo "native stage kernel not built: KERNEL=off; staging uses the Python path"; \
	  $(BIN)/pip uninstall --quiet --yes kbqe-dagster-kernel 2>/dev/null || true; \
	elif ! command -v cargo >/dev/null; then \
	  echo "native stage kernel not built: cargo not found; staging uses the Python path"; \
	else \
	  echo "building the native stage kernel (kernel/, cargo $$(cargo --version | cut -d' ' -f2))"; \
	  MATURIN_NO_INSTALL_RUST=1 $(BIN)/pip install --quiet ./kernel || { \
	    echo "error: building the native stage kernel failed (above); make install KERNEL=off installs without it"; exit 1; }; \
	fi

# Quick start 1: the main job end to end on the local stack, then the Dagster UI.
demo: install
	$(BIN)/kbqe demo --then-dagster-dev

# ruff (lint and format) and mypy, configured in pyproject.toml, before the tests: about 20 s
# on a fresh clone, under a second with mypy's cache (.mypy_cache/); and the kernel's layout
# (cargo fmt --check, instant; kernel/rustfmt.toml). The kernel's clippy and unit tests compile
# it, minutes on two cores: they are `make kernel-check`; its unit tests are also a unit of
# `make test`'s lanes (clippy is not: CI's 90 minutes hold one of the two compiles).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@if command -v cargo >/dev/null; then \
	  echo "cargo fmt --check (kernel/)"; cargo fmt --manifest-path kernel/Cargo.toml --check; \
	elif [ "$$KBQE_REQUIRE_KERNEL" = 1 ]; then \
	  echo "error: cargo not found and KBQE_REQUIRE_KERNEL=1"; exit 1; \
	else \
	  echo "kernel: cargo fmt --check skipped: cargo not found"; \
	fi

# The kernel's cargo clippy -D warnings and Rust unit tests (scripts/kernel_rust.py): skipped
# without cargo, unless KBQE_REQUIRE_KERNEL=1.
kernel-check:
	$(BIN)/python scripts/kernel_rust.py

# Quick start 2: the whole test suite, in two lanes side by side on the machine's two cores
# (scripts/test_lanes.py): units of the suite (one per test directory, the tests that need no
# service, the soak) are taken from one queue by two lanes, each lane with a local stack of
# its own (home and ports), so the stack tests of both lanes never meet. Each unit's output
# is printed when it ends, then a table of the units' times. Fails when any unit fails.
# `make test UNITS="keyed cli"` runs only those units.
test: install lint
	$(BIN)/python scripts/test_lanes.py $(UNITS)

test-unit: install lint
	$(BIN)/python -m pytest -m "not integration"

stack-up: install
	$(BIN)/kbqe stack up

stack-down:
	$(BIN)/kbqe stack down

stack-status:
	$(BIN)/kbqe stack status

dev: install
	$(BIN)/kbqe dev

bench: install
	$(BIN)/python bench/bench_stage.py

# Produce -> visible-in-BigQuery latency of both delivery paths on the running local stack
# (docs/operations.md); e.g. ARGS="--rates 1000:1 --seconds 20" for a short run.
bench-latency: install
	$(BIN)/python bench/bench_latency.py $(ARGS)

# The fault-injection suite on the local stack (docs/operations.md); ARGS="--long" for the long run.
faults: install
	$(BIN)/python reliability/fault_suite.py --seed 7 --json reliability/results/faults.json $(ARGS)

# The soak (docs/operations.md, "The soak"): dagster-daemon, the code server and the webserver
# under a producing fleet and seeded faults for MINUTES minutes, on a private stack of its own
# (.soak-local/, ports 22092...); writes bench/results/soak.json. E.g. make soak MINUTES=10;
# ARGS="--storage postgres" runs its Dagster instance on the private stack's PostgreSQL.
MINUTES ?= 60
SEED ?= 7
soak: install
	$(BIN)/python reliability/soak.py --minutes $(MINUTES) --seed $(SEED) --cache-from .kbqe-local/cache $(ARGS)

clean-local: stack-down
	rm -rf .kbqe-local/run
